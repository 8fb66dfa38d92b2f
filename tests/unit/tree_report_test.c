/*
 * tree_report_test.c - the end-of-job counters merged up the control tree
 * (obs/merge.c): merging is associative and commutative (any shape of
 * tree gives the same block, byte for byte on the wire), the merged
 * histograms' quantiles stay within a bucket (12.5%) of the exact ones
 * over every node's samples, the straggler rows keep the k largest, the
 * key table and the block's wire size stay bounded whatever the number
 * of nodes, and the decoder refuses every malformed block.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/bytes.h"
#include "obs/merge.h"

#define NSERVERS 2

/* Node ids as a job of NSERVERS servers numbers them. */
static int
role_of(void *arg, int id)
{
	(void)arg;
	return id == 0 ? 0 : id <= NSERVERS ? 1 : 2;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t
next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* A node's counters: traffic with every peer of a 12-node job, and for a
 * worker keys (some shared, some its own), latencies and steps; for a
 * server merges and updates. Its latency samples go to lat (and all, if
 * not NULL: every sample of the job, for the exact quantiles). */
static void
node_block(dt__merged *m, int id, uint64_t *all, size_t *nall)
{
	dt_stats s = {.id = id, .role = role_of(NULL, id), .rank = 0};
	dt__hist lat[DT_LAT_COUNT] = {0}, step = {0};
	dt_peer_stats peers[12];
	dt_key_stats keys[6];

	s.wall_ns = 1000000 + next() % 1000000;
	for (int i = 0; i < 12; i++)
		peers[i] = (dt_peer_stats){i, next() % 100, next() % 10000,
		                           next() % 100, next() % 10000};
	s.peers = peers;
	s.npeers = 12;
	if (s.role == 1) {
		s.merges = 10 + (uint64_t)id;
		s.merge_ns = 1000 * (uint64_t)id;
		s.updates = 5;
		s.update_ns = 777;
	} else {
		for (int k = 0; k < 5; k++)
			keys[k] =
			    (dt_key_stats){(uint64_t)(k < 3 ? k : id * 100 + k),
			                   3, 2, 300, 200};
		keys[5] = (dt_key_stats){DT_STATS_KEY_BATCHED, 1, 1, 10, 10};
		s.keys = keys;
		s.nkeys = 6;
		s.keys_omitted = 1;
		for (int i = 0; i < 200; i++) {
			uint64_t v = 1000 + next() % 1000000;

			dt__hist_add(&lat[i % DT_LAT_COUNT], v);
			if (all)
				all[(*nall)++] = v;
			dt__hist_add(&step, 5000000 + next() % 1000000);
		}
		s.steps = step.n;
		s.step_ns = step.sum;
		s.comm_ns = step.sum / 3;
		s.step_p50_ns = 1000000 * (uint64_t)id; /* the straggler rank */
		s.step_p99_ns = dt__hist_quantile(&step, 0.99);
		s.coll_ops = 2;
		s.coll_bytes = 4096;
		s.coll_ns = 1000;
		s.coll_busbw = 1e9;
	}
	dt__merged_init(m);
	dt__merged_add_node(m, &s, lat, &step, role_of, NULL);
}

static void
assert_same(const dt__merged *a, const dt__merged *b)
{
	uint8_t *pa, *pb;
	size_t la, lb;

	assert_int_equal(dt__merged_encode(a, &pa, &la), DT_OK);
	assert_int_equal(dt__merged_encode(b, &pb, &lb), DT_OK);
	assert_int_equal(la, lb);
	assert_memory_equal(pa, pb, la);
	free(pa);
	free(pb);
}

static void
test_associative(void **state)
{
	(void)state;
	dt__merged *n[4], *x = malloc(sizeof(*x)), *y = malloc(sizeof(*y)),
	                  *t = malloc(sizeof(*t));

	for (int i = 0; i < 4; i++) {
		n[i] = malloc(sizeof(*n[i]));
		node_block(n[i], i == 0 ? 1 : 2 + i, NULL, NULL);
	}
	/* ((A + B) + C) + D */
	*x = *n[0];
	dt__merged_merge(x, n[1]);
	dt__merged_merge(x, n[2]);
	dt__merged_merge(x, n[3]);
	/* A + (B + (C + D)) */
	*t = *n[2];
	dt__merged_merge(t, n[3]);
	*y = *n[1];
	dt__merged_merge(y, t);
	*t = *n[0];
	dt__merged_merge(t, y);
	assert_same(x, t);
	/* D + C + B + A */
	*y = *n[3];
	dt__merged_merge(y, n[2]);
	dt__merged_merge(y, n[1]);
	dt__merged_merge(y, n[0]);
	assert_same(x, y);
	/* What the totals are. */
	assert_int_equal(x->nodes[1], 1);
	assert_int_equal(x->nodes[2], 3);
	assert_int_equal(x->merges, 11);
	assert_int_equal(x->updates, 5);
	assert_int_equal(x->nkeys, 3 + 3 * 2);
	assert_int_equal(x->keys[0].key, 0);
	assert_int_equal(x->keys[0].pushes, 9);
	assert_int_equal(x->keys[0].bytes_pulled, 600);
	assert_int_equal(x->batched.pushes, 3);
	assert_int_equal(x->keys_omitted, 3);
	assert_int_equal(x->lat[0].n + x->lat[1].n + x->lat[2].n, 600);
	assert_int_equal(x->coll_ops, 6);
	for (int i = 0; i < 4; i++)
		free(n[i]);
	free(x);
	free(y);
	free(t);
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* 40 workers merged in a binary tree's order: the merged latency's p50
 * and p99 are within 12.5% of the exact quantiles of all samples. */
static void
test_quantiles(void **state)
{
	(void)state;
	uint64_t *all = malloc(40 * 200 * sizeof(*all));
	size_t nall = 0;
	dt__merged *v[40], *m = malloc(sizeof(*m));

	for (int i = 0; i < 40; i++) {
		v[i] = malloc(sizeof(*v[i]));
		node_block(v[i], 3 + i, all, &nall);
	}
	for (int w = 1; w < 40; w *= 2)
		for (int i = 0; i + w < 40; i += 2 * w)
			dt__merged_merge(v[i], v[i + w]);
	*m = *v[0];
	/* every kind's samples in one histogram */
	dt__mhist sum = {0};
	for (int k = 0; k < DT_LAT_COUNT; k++) {
		sum.n += m->lat[k].n;
		sum.sum += m->lat[k].sum;
		if (m->lat[k].max > sum.max)
			sum.max = m->lat[k].max;
		for (int i = 0; i < DT_HIST_BUCKETS; i++)
			sum.b[i] += m->lat[k].b[i];
	}
	assert_int_equal(sum.n, nall);
	qsort(all, nall, sizeof(*all), cmp_u64);
	const double qs[] = {0.5, 0.99};
	for (int i = 0; i < 2; i++) {
		uint64_t exact = all[(size_t)ceil(qs[i] * (double)nall) - 1];
		uint64_t got = dt__mhist_quantile(&sum, qs[i]);

		assert_true(fabs((double)got - (double)exact) <=
		            0.125 * (double)exact);
	}
	assert_int_equal(sum.max, all[nall - 1]);
	/* The workers' step p50 median: 40 values 3..42 ms. */
	uint64_t med = dt__mhist_quantile(&m->worker_p50, 0.5);
	assert_true(fabs((double)med - 22e6) <= 0.125 * 22e6);
	for (int i = 0; i < 40; i++)
		free(v[i]);
	free(all);
	free(m);
}

/* The straggler rows: the 8 workers of the largest step p50 of 40, in
 * order, whatever the merge order; the servers by bytes received. */
static void
test_top_k(void **state)
{
	(void)state;
	dt__merged *acc = calloc(1, sizeof(*acc)), *one = malloc(sizeof(*one));

	for (int i = 0; i < 40; i++) {
		int id = 3 + (i * 17) % 40; /* a shuffled order */

		node_block(one, id, NULL, NULL);
		dt__merged_merge(acc, one);
	}
	node_block(one, 1, NULL, NULL);
	dt__merged_merge(acc, one);
	node_block(one, 2, NULL, NULL);
	dt__merged_merge(acc, one);
	assert_int_equal(acc->nslow, DT_MERGE_TOP);
	for (int i = 0; i < DT_MERGE_TOP; i++) {
		assert_int_equal(acc->slow[i].id, 42 - i);
		assert_int_equal(acc->slow[i].rank, 1000000ull * (42 - i));
	}
	assert_int_equal(acc->nbusy, 2);
	assert_true(acc->busy[0].rank >= acc->busy[1].rank);
	assert_int_equal(acc->nodes[2], 40);
	free(acc);
	free(one);
}

/* However many nodes are merged, the key table stops at its cap (the
 * calls on the others counted) and the wire block at its bound. */
static void
test_size_bound(void **state)
{
	(void)state;
	dt__merged *acc = calloc(1, sizeof(*acc)), *one = malloc(sizeof(*one));
	dt_key_stats *keys = malloc(3000 * sizeof(*keys));
	uint8_t *p;
	size_t len;

	for (int node = 0; node < 5; node++) {
		dt_stats s = {.id = 3 + node, .role = 2};

		for (int k = 0; k < 3000; k++)
			keys[k] = (dt_key_stats){(uint64_t)(node * 1000 + k), 1,
			                         1, 8, 8};
		s.keys = keys;
		s.nkeys = 3000;
		dt__merged_init(one);
		dt__merged_add_node(one, &s, NULL, NULL, role_of, NULL);
		dt__merged_merge(acc, one);
		assert_int_equal(dt__merged_encode(acc, &p, &len), DT_OK);
		assert_true(len <= dt__merged_max_bytes());
		free(p);
	}
	/* keys 0..6999, each 1 to 3 nodes: 4096 kept, smallest first */
	assert_int_equal(acc->nkeys, DT_STATS_MAX_KEYS);
	assert_int_equal(acc->keys[DT_STATS_MAX_KEYS - 1].key,
	                 DT_STATS_MAX_KEYS - 1);
	uint64_t kept = 0;
	for (uint32_t i = 0; i < acc->nkeys; i++)
		kept += acc->keys[i].pushes + acc->keys[i].pulls;
	assert_int_equal(kept + acc->keys_omitted, 5 * 3000 * 2);
	assert_int_equal(dt__merged_encode(acc, &p, &len), DT_OK);
	assert_int_equal(len, dt__merged_max_bytes());
	assert_true(len < 256 * 1024);
	free(p);
	/* missing subtrees: the count, and the smallest ids named */
	for (int i = 40; i > 0; i--)
		dt__merged_missing(acc, 100 + i, 3);
	assert_int_equal(acc->missing_nodes, 120);
	assert_int_equal(acc->nmissing, DT_MERGE_MISSING);
	assert_int_equal(acc->missing[0], 101);
	assert_int_equal(acc->missing[DT_MERGE_MISSING - 1],
	                 100 + DT_MERGE_MISSING);
	/* an id named twice is kept once (the decoder wants them
	 * ascending) */
	dt__merged_missing(acc, 103, 1);
	assert_int_equal(acc->nmissing, DT_MERGE_MISSING);
	assert_int_equal(acc->missing[2], 103);
	assert_int_equal(acc->missing[3], 104);
	free(acc);
	free(one);
	free(keys);
}

/* Round trip, then every cut and every bad count refused. */
static void
test_wire(void **state)
{
	(void)state;
	dt__merged *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b)),
	           *d = malloc(sizeof(*d));
	uint8_t *p, *q;
	size_t len;

	node_block(a, 5, NULL, NULL);
	node_block(b, 1, NULL, NULL);
	dt__merged_merge(a, b);
	dt__merged_missing(a, 9, 2);
	assert_int_equal(dt__merged_encode(a, &p, &len), DT_OK);
	assert_int_equal(dt__merged_decode(p, len, d), DT_OK);
	assert_same(a, d);
	for (size_t cut = 0; cut < len; cut += 997)
		assert_int_equal(dt__merged_decode(p, cut, d), DT_EPROTO);
	assert_int_equal(dt__merged_decode(p, len - 1, d), DT_EPROTO);
	q = malloc(len + 40);
	/* too many keys (the length then disagrees too) */
	memcpy(q, p, len);
	dt__put_u32(q + 20, DT_STATS_MAX_KEYS + 1);
	assert_int_equal(dt__merged_decode(q, len, d), DT_EPROTO);
	/* a key count that disagrees with the length */
	memcpy(q, p, len);
	dt__put_u32(q + 20, a->nkeys + 1);
	assert_int_equal(dt__merged_decode(q, len, d), DT_EPROTO);
	/* top rows over k */
	memcpy(q, p, len);
	dt__put_u32(q + 24, DT_MERGE_TOP + 1);
	assert_int_equal(dt__merged_decode(q, len, d), DT_EPROTO);
	/* missing ids over the bound */
	memcpy(q, p, len);
	dt__put_u32(q + 16, DT_MERGE_MISSING + 1);
	assert_int_equal(dt__merged_decode(q, len, d), DT_EPROTO);
	/* a missing id out of range */
	memcpy(q, p, len);
	dt__put_u32(q + 32, 0xffffffffu);
	assert_int_equal(dt__merged_decode(q, len, d), DT_EPROTO);
	/* node counts over the job's bound */
	memcpy(q, p, len);
	dt__put_u32(q + 0, 0xffffffffu);
	assert_int_equal(dt__merged_decode(q, len, d), DT_EPROTO);
	/* a histogram whose buckets disagree with its count: the first
	 * latency's count, after the wall, traffic, batched row and
	 * omitted count */
	size_t hist = 32 + DT_MERGE_MISSING * 4 + 8 * (1 + 36 + 6);
	memcpy(q, p, len);
	dt__put_u64(q + hist, dt__get_u64(p + hist) + 1);
	assert_int_equal(dt__merged_decode(q, len, d), DT_EPROTO);
	/* keys out of order */
	memcpy(q, p, len);
	memcpy(q + len - 40, p + len - 80, 8);
	assert_int_equal(dt__merged_decode(q, len, d), DT_EPROTO);
	/* over the largest block */
	assert_int_equal(dt__merged_decode(q, dt__merged_max_bytes() + 1, d),
	                 DT_EPROTO);
	free(p);
	free(q);
	free(a);
	free(b);
	free(d);
}

/* What the scheduler prints: the merged line, totals, the straggler. */
static void
test_print(void **state)
{
	(void)state;
	dt__merged *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
	char *text = NULL;
	size_t tlen = 0;
	FILE *f = open_memstream(&text, &tlen);

	node_block(a, 5, NULL, NULL);
	node_block(b, 1, NULL, NULL);
	dt__merged_merge(a, b);
	dt__merged_missing(a, 7, 3);
	dt__merged_report(f, a, NULL, NULL);
	dt__merged_json(f, a, NULL, NULL);
	fclose(f);
	assert_non_null(strstr(text, "dtrain stats: 1 server(s), 1 "
	                             "worker(s), merged over the control "
	                             "tree\n"));
	assert_non_null(strstr(text, "merged: the reports of 2 nodes and "
	                             "the scheduler's; missing: 3 nodes, in "
	                             "the subtrees of node 7\n"));
	assert_non_null(strstr(text, "slowest worker: node 5, step p50 "
	                             "5.000 ms"));
	assert_non_null(strstr(text, "busiest server: node 1"));
	assert_non_null(strstr(text,
	                       "{\"merged\":true,\"nodes\":{"
	                       "\"scheduler\":0,\"server\":1,\"worker\""
	                       ":1},\"missing_nodes\":3,\"missing\":[7]"));
	free(text);
	free(a);
	free(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_associative),
	    cmocka_unit_test(test_quantiles),
	    cmocka_unit_test(test_top_k),
	    cmocka_unit_test(test_size_bound),
	    cmocka_unit_test(test_wire),
	    cmocka_unit_test(test_print),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
