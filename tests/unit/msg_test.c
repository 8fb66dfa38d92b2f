/*
 * msg_test.c - the scheduler's directory messages (core/msg.c): ASSIGN,
 * a node's reply when it joins, and LOOKUP, a member's request for a
 * range of entries and the scheduler's answer. Each round-trips with
 * every field, places each entry by its id, sizes what it carries (a
 * worker's ASSIGN of a 10,000-node job stays under 1 KB but for its
 * servers' entries), and refuses what a hostile peer could send: a range
 * outside the job or over DT_DIR_MAX, a count the block cannot hold, a
 * known entry without an address, trailing bytes after a request. And
 * REPORT's merged counters block (a tree child's, obs/merge.c) as the
 * fuzz target's seeds (fuzz/make_seeds.py) write it: the valid ones
 * decode and encode back to their bytes, each malformed one is refused
 * with a message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/msg.h"
#include "obs/merge.h"

static void
assert_msg_has(const char *word)
{
	if (strstr(dt_errmsg(), word) == NULL)
		fail_msg("error message '%s' does not mention '%s'",
		         dt_errmsg(), word);
}

/* Entry k of a made-up job: known, its address from k. */
static void
fill(dt_node_entry *e, int id)
{
	memset(e, 0, sizeof(*e));
	e->id = id;
	snprintf(e->host, sizeof(e->host), "10.0.%d.%d", id / 250, id % 250);
	e->port = 20000 + id;
	e->pid = 4000 + id;
	snprintf(e->hostid, sizeof(e->hostid), "boot-%d/4026531840", id % 3);
	snprintf(e->local, sizeof(e->local), "dtrain.%d.0f0f", 4000 + id);
	e->known = 1;
}

static void
test_place(void **state)
{
	dt_role role;
	int rank;

	(void)state;
	dt__msg_place(0, 4, &role, &rank);
	assert_int_equal(role, DT_ROLE_SCHEDULER);
	assert_int_equal(rank, 0);
	dt__msg_place(1, 4, &role, &rank);
	assert_int_equal(role, DT_ROLE_SERVER);
	assert_int_equal(rank, 0);
	dt__msg_place(4, 4, &role, &rank);
	assert_int_equal(role, DT_ROLE_SERVER);
	assert_int_equal(rank, 3);
	dt__msg_place(5, 4, &role, &rank);
	assert_int_equal(role, DT_ROLE_WORKER);
	assert_int_equal(rank, 0);
	dt__msg_place(1, 0, &role, &rank);
	assert_int_equal(role, DT_ROLE_WORKER);
	assert_int_equal(rank, 0);
}

static void
test_assign_round_trip(void **state)
{
	dt_node_entry srv[3], *got;
	dt__msg_assign a = {.id = 7,
	                    .num_servers = 3,
	                    .slots = 9,
	                    .epoch = 0x0102030405060708ull,
	                    .here = 5,
	                    .sched_pid = 4242},
	               b;
	int first, count;
	dt_wbuf w;

	(void)state;
	for (int k = 0; k < 3; k++)
		fill(&srv[k], 1 + k);
	srv[2].hostid[0] = srv[2].local[0] = '\0'; /* (no shared memory) */
	dt__wbuf_init(&w);
	assert_int_equal(dt__msg_assign_encode(&a, 1, 3, srv, &w), DT_OK);
	assert_int_equal(
	    dt__msg_assign_decode(w.data, w.len, &b, &first, &count, &got),
	    DT_OK);
	assert_int_equal(b.id, 7);
	assert_int_equal(b.num_servers, 3);
	assert_int_equal(b.slots, 9);
	assert_true(b.epoch == a.epoch);
	assert_int_equal(b.here, 5);
	assert_int_equal(b.sched_pid, 4242);
	assert_int_equal(first, 1);
	assert_int_equal(count, 3);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(got[k].id, 1 + k);
		assert_int_equal(got[k].role, DT_ROLE_SERVER);
		assert_int_equal(got[k].rank, k);
		assert_int_equal(got[k].known, 1);
		assert_string_equal(got[k].host, srv[k].host);
		assert_int_equal(got[k].port, srv[k].port);
		assert_int_equal(got[k].pid, srv[k].pid);
		assert_string_equal(got[k].hostid, srv[k].hostid);
		assert_string_equal(got[k].local, srv[k].local);
	}
	free(got);
	dt__wbuf_fini(&w);

	/* A server's: no entries at all. */
	a.id = 2;
	dt__wbuf_init(&w);
	assert_int_equal(dt__msg_assign_encode(&a, 1, 0, srv, &w), DT_OK);
	assert_int_equal(w.len, 36u);
	assert_int_equal(
	    dt__msg_assign_decode(w.data, w.len, &b, &first, &count, &got),
	    DT_OK);
	assert_int_equal(count, 0);
	assert_null(got);
	dt__wbuf_fini(&w);
}

/* What the scheduler sends a node of a 10,000-node job does not grow with
 * the job: 36 bytes, and an entry per server for a worker. */
static void
test_assign_size(void **state)
{
	dt_node_entry srv[16];
	dt__msg_assign a = {
	    .id = 9000, .num_servers = 16, .slots = 9983, .here = 64};
	dt_wbuf w;
	size_t per;

	(void)state;
	for (int k = 0; k < 16; k++)
		fill(&srv[k], 1 + k);
	dt__wbuf_init(&w);
	assert_int_equal(dt__msg_assign_encode(&a, 1, 1, srv, &w), DT_OK);
	per = w.len - 36;
	dt__wbuf_fini(&w);
	dt__wbuf_init(&w);
	assert_int_equal(dt__msg_assign_encode(&a, 1, 16, srv, &w), DT_OK);
	/* (the hosts of servers 10..16 are a character longer) */
	assert_int_equal(w.len, 36 + 16 * per + 7);
	assert_true(per < 110);
	dt__wbuf_fini(&w);
}

static void
test_assign_refused(void **state)
{
	dt_node_entry srv[2], *got;
	dt__msg_assign a = {.id = 3, .num_servers = 2, .slots = 2, .here = 1},
	               b;
	int first, count;
	dt_wbuf w;

	(void)state;
	fill(&srv[0], 1);
	fill(&srv[1], 2);
	/* An id outside the job. */
	a.id = 5;
	dt__wbuf_init(&w);
	dt__msg_assign_encode(&a, 1, 2, srv, &w);
	assert_int_equal(
	    dt__msg_assign_decode(w.data, w.len, &b, &first, &count, &got),
	    DT_EPROTO);
	assert_msg_has("node id 5");
	dt__wbuf_fini(&w);
	a.id = 3;
	/* A range past the job's ids. */
	dt__wbuf_init(&w);
	dt__msg_assign_encode(&a, 4, 2, srv, &w);
	assert_int_equal(
	    dt__msg_assign_decode(w.data, w.len, &b, &first, &count, &got),
	    DT_EPROTO);
	assert_msg_has("ids 4..+2");
	dt__wbuf_fini(&w);
	/* A count the block cannot hold, refused before allocating. */
	dt__wbuf_init(&w);
	dt__msg_assign_encode(&a, 1, 2, srv, &w);
	dt__put_u32(w.data + 32, 1000);
	dt__put_u32(w.data + 8, 100000);
	assert_int_equal(
	    dt__msg_assign_decode(w.data, 44, &b, &first, &count, &got),
	    DT_EPROTO);
	assert_msg_has("do not fit");
	dt__wbuf_fini(&w);
	/* A known entry with port 0. */
	srv[1].port = 0;
	dt__wbuf_init(&w);
	dt__msg_assign_encode(&a, 1, 2, srv, &w);
	assert_int_equal(
	    dt__msg_assign_decode(w.data, w.len, &b, &first, &count, &got),
	    DT_EPROTO);
	assert_msg_has("node 2");
	dt__wbuf_fini(&w);
	/* No node on this node's host, not even itself: "here" is 0. */
	srv[1].port = 1;
	a.here = 0;
	dt__wbuf_init(&w);
	dt__msg_assign_encode(&a, 1, 2, srv, &w);
	assert_int_equal(
	    dt__msg_assign_decode(w.data, w.len, &b, &first, &count, &got),
	    DT_EPROTO);
	assert_msg_has("on this host");
	dt__wbuf_fini(&w);
}

/* LOOKUP of hosts: runs of equal numbers, one a host for ranks placed
 * host by host; every bound of the answer checked. */
static void
test_hosts_round_trip(void **state)
{
	const uint32_t v[6] = {0, 0, 1, 1, DT_HOST_UNKNOWN, 0};
	uint32_t *got;
	int first, count;
	dt_wbuf w;

	(void)state;
	dt__wbuf_init(&w);
	assert_int_equal(dt__msg_hosts_encode(2, 6, v, &w), DT_OK);
	/* range, 4 runs of 8 bytes */
	assert_int_equal(w.len, 12u + 4 * 8);
	assert_int_equal(
	    dt__msg_hosts_decode(w.data, w.len, 8, &first, &count, &got),
	    DT_OK);
	assert_int_equal(first, 2);
	assert_int_equal(count, 6);
	assert_memory_equal(got, v, sizeof(v));
	free(got);
	/* past the job's ids */
	assert_int_equal(
	    dt__msg_hosts_decode(w.data, w.len, 7, &first, &count, &got),
	    DT_EPROTO);
	assert_null(got);
	/* a host number past the job's ids */
	dt__put_u32(w.data + 12 + 4, 9);
	assert_int_equal(
	    dt__msg_hosts_decode(w.data, w.len, 8, &first, &count, &got),
	    DT_EPROTO);
	assert_msg_has("host 9");
	dt__put_u32(w.data + 12 + 4, 0);
	/* runs that do not cover the range, an empty run, a run past it */
	dt__put_u32(w.data + 12, 1);
	assert_int_equal(
	    dt__msg_hosts_decode(w.data, w.len, 8, &first, &count, &got),
	    DT_EPROTO);
	assert_msg_has("cover");
	dt__put_u32(w.data + 12, 0);
	assert_int_equal(
	    dt__msg_hosts_decode(w.data, w.len, 8, &first, &count, &got),
	    DT_EPROTO);
	dt__put_u32(w.data + 12, 7);
	assert_int_equal(
	    dt__msg_hosts_decode(w.data, w.len, 8, &first, &count, &got),
	    DT_EPROTO);
	dt__put_u32(w.data + 12, 2);
	/* a count of runs the block does not hold */
	dt__put_u32(w.data + 8, 5);
	assert_int_equal(
	    dt__msg_hosts_decode(w.data, w.len, 8, &first, &count, &got),
	    DT_EPROTO);
	assert_msg_has("runs");
	dt__wbuf_fini(&w);

	/* the request: a range of up to DT_HOSTS_MAX ids */
	dt__wbuf_init(&w);
	assert_int_equal(dt__msg_lookup_encode(1, DT_HOSTS_MAX, &w), DT_OK);
	assert_int_equal(dt__msg_hosts_lookup_decode(
	                     w.data, w.len, DT_HOSTS_MAX + 1, &first, &count),
	                 DT_OK);
	assert_int_equal(count, DT_HOSTS_MAX);
	dt__put_u32(w.data + 4, DT_HOSTS_MAX + 1);
	assert_int_equal(
	    dt__msg_hosts_lookup_decode(w.data, w.len, 1 << 20, &first, &count),
	    DT_EPROTO);
	dt__wbuf_fini(&w);
}

static void
test_lookup_round_trip(void **state)
{
	dt_node_entry e[3], *got;
	int first, count;
	dt_wbuf w;

	(void)state;
	dt__wbuf_init(&w);
	assert_int_equal(dt__msg_lookup_encode(5, 3, &w), DT_OK);
	assert_int_equal(w.len, 8u);
	assert_int_equal(
	    dt__msg_lookup_decode(w.data, w.len, 8, &first, &count), DT_OK);
	assert_int_equal(first, 5);
	assert_int_equal(count, 3);
	/* One id past the job, none at all, the scheduler's own, trailing
	 * bytes: refused. */
	assert_int_equal(
	    dt__msg_lookup_decode(w.data, w.len, 7, &first, &count), DT_EPROTO);
	assert_msg_has("LOOKUP");
	dt__put_u32(w.data + 4, 0);
	assert_int_equal(
	    dt__msg_lookup_decode(w.data, w.len, 8, &first, &count), DT_EPROTO);
	dt__put_u32(w.data, 0);
	dt__put_u32(w.data + 4, 1);
	assert_int_equal(
	    dt__msg_lookup_decode(w.data, w.len, 8, &first, &count), DT_EPROTO);
	dt__put_u32(w.data, 1);
	dt__put_u32(w.data + 4, DT_DIR_MAX + 1);
	assert_int_equal(
	    dt__msg_lookup_decode(w.data, w.len, 1 << 20, &first, &count),
	    DT_EPROTO);
	dt__put_u32(w.data + 4, 1);
	dt__wbuf_u8(&w, 0);
	assert_int_equal(
	    dt__msg_lookup_decode(w.data, w.len, 8, &first, &count), DT_EPROTO);
	assert_msg_has("after the range");
	dt__wbuf_fini(&w);

	/* The answer: two known, one the scheduler has no address for (an
	 * elastic job's empty row). */
	fill(&e[0], 5);
	fill(&e[1], 6);
	memset(&e[2], 0, sizeof(e[2]));
	dt__wbuf_init(&w);
	assert_int_equal(dt__msg_dir_encode(5, 3, e, &w), DT_OK);
	assert_int_equal(
	    dt__msg_dir_decode(w.data, w.len, 2, 8, &first, &count, &got),
	    DT_OK);
	assert_int_equal(first, 5);
	assert_int_equal(count, 3);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(got[k].known, 1);
		assert_int_equal(got[k].role, DT_ROLE_WORKER);
		assert_int_equal(got[k].rank, 2 + k);
		assert_string_equal(got[k].host, e[k].host);
		assert_int_equal(got[k].port, e[k].port);
	}
	assert_int_equal(got[2].known, 0);
	assert_int_equal(got[2].id, 7);
	assert_string_equal(got[2].host, "");
	free(got);
	/* Cut anywhere, it is refused, naming what it is. */
	for (size_t cut = 0; cut < w.len; cut++) {
		got = NULL;
		assert_int_equal(
		    dt__msg_dir_decode(w.data, cut, 2, 8, &first, &count, &got),
		    DT_EPROTO);
		assert_null(got);
		assert_msg_has("LOOKUP answer");
	}
	dt__wbuf_fini(&w);
	/* A known entry without a host. */
	e[0].host[0] = '\0';
	dt__wbuf_init(&w);
	dt__msg_dir_encode(5, 1, e, &w);
	assert_int_equal(
	    dt__msg_dir_decode(w.data, w.len, 2, 8, &first, &count, &got),
	    DT_EPROTO);
	assert_msg_has("node 5");
	dt__wbuf_fini(&w);
}

/* A seed of fuzz/corpus/control, whole, in *len bytes (the caller frees
 * it). */
static uint8_t *
seed(const char *name, size_t *len)
{
	const char *src = getenv("DTRAIN_SOURCE");
	char path[4096];
	FILE *f;
	uint8_t *p = malloc(1 << 20);

	assert_non_null(src);
	assert_non_null(p);
	snprintf(path, sizeof(path), "%s/fuzz/corpus/control/%s", src, name);
	f = fopen(path, "rb");
	if (f == NULL)
		fail_msg("no seed %s", path);
	*len = fread(p, 1, 1 << 20, f);
	fclose(f);
	return p;
}

static void
test_merged_report(void **state)
{
	(void)state;
	static const struct {
		const char *name, *says;
	} bad[] = {
	    {"report_merged_keys_unsorted", "out of order"},
	    {"report_merged_key_batched", "out of order"},
	    {"report_merged_keys_huge", "over the bounds"},
	    {"report_merged_hist_count", "histogram"},
	    {"report_merged_missing_unsorted", "missing id"},
	    {"report_merged_nodes_huge", "over the bounds"},
	    {"report_merged_top_node_huge", "row naming node"},
	    {"report_merged_short", "bytes"},
	};
	dt__merged *m = malloc(sizeof(*m));
	size_t len, len2;
	uint8_t *p, *q;

	p = seed("report_merged", &len);
	assert_int_equal(dt__merged_decode(p, len, m), DT_OK);
	assert_int_equal(m->nodes[2], 2);
	assert_int_equal(m->nkeys, 2);
	assert_int_equal(m->missing[0], 9);
	assert_int_equal(m->slow[0].id, 5);
	assert_int_equal(m->lat[0].n, 3);
	assert_int_equal(dt__merged_encode(m, &q, &len2), DT_OK);
	assert_int_equal(len2, len);
	assert_memory_equal(p, q, len);
	free(q);
	free(p);
	p = seed("report_merged_nan_busbw", &len);
	assert_int_equal(dt__merged_decode(p, len, m), DT_OK);
	assert_true(m->coll_busbw_sum == 0);
	free(p);
	p = seed("report_merged_empty", &len);
	assert_int_equal(dt__merged_decode(p, len, m), DT_OK);
	free(p);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p = seed(bad[i].name, &len);
		dt__clear_error();
		assert_int_equal(dt__merged_decode(p, len, m), DT_EPROTO);
		assert_msg_has(bad[i].says);
		free(p);
	}
	free(m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_place),
	    cmocka_unit_test(test_merged_report),
	    cmocka_unit_test(test_assign_round_trip),
	    cmocka_unit_test(test_assign_size),
	    cmocka_unit_test(test_assign_refused),
	    cmocka_unit_test(test_lookup_round_trip),
	    cmocka_unit_test(test_hosts_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
