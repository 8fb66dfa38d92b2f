/*
 * coll_hier_test.c - the hierarchical allreduce's schedule (plan.c,
 * dt__coll_hier_sched), checked by running it: a simulator of H hosts x L
 * in-memory ranks exchanges the scheduled messages as algo_hier.c does -
 * phases 1 and 3 with the host's neighbours, phase 2 with the other
 * hosts', each message sent once its dependencies are processed, the
 * other hosts' partial sums kept aside and added just before their range
 * is forwarded - and every rank must end with the sum of every input.
 * Every message must match what its receiver expects, in order, for many
 * layouts, counts and chunk sizes (empty blocks and chunks of one element
 * included).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coll/coll_impl.h"

typedef struct sim_msg {
	uint64_t off, n;
	int64_t *data;
} sim_msg;

typedef struct sim_rank {
	dt__coll_sched s;
	size_t n[6];
	int to, from, to2, from2;
	int64_t *src, *work, *scratch;
	size_t boff, sent, rx[2], applied;
	sim_msg *q[2]; /* by slot: 0 this host's upstream, 1 the other's */
	size_t qlen[2], qhead[2];
} sim_rank;

/* The rx index of the k-th message of slot (algo_hier.c's rx_index). */
static size_t
rx_index(const sim_rank *r, int slot, size_t k)
{
	if (slot)
		return r->n[3] + k;
	return k < r->n[3] ? k : r->n[3] + r->n[4] + (k - r->n[3]);
}

static int
rx_done(const sim_rank *r, size_t i)
{
	if (i < r->n[3])
		return r->rx[0] > i;
	if (i < r->n[3] + r->n[4])
		return r->rx[1] > i - r->n[3];
	return r->rx[0] > i - r->n[4];
}

static void
apply_upto(sim_rank *r, size_t d)
{
	size_t end = r->n[3] + r->n[4];

	if (r->applied < r->n[3])
		r->applied = r->n[3];
	for (; r->applied <= d && r->applied < end; r->applied++) {
		const dt__coll_msg *m = &r->s.rx[r->applied];
		for (uint64_t i = 0; m->acc_work && i < m->n; i++)
			r->work[m->off + i] += r->scratch[m->off - r->boff + i];
	}
}

/* Send what rank p may send now; 1 if it sent anything. */
static int
sim_send(sim_rank *rk, int p)
{
	sim_rank *r = &rk[p];
	int moved = 0;

	while (r->sent < r->s.ntx) {
		size_t i = r->sent;
		const dt__coll_msg *m = &r->s.tx[i];
		int cross = i >= r->n[0] && i < r->n[0] + r->n[1];
		sim_rank *to = &rk[cross ? r->to2 : r->to];

		if (i >= r->n[0] && m->step > 0 && r->rx[0] < r->n[3])
			break;
		if (m->dep >= 0 && !rx_done(r, (size_t)m->dep))
			break;
		if (m->dep >= 0)
			apply_upto(r, (size_t)m->dep);
		sim_msg *sm = &to->q[cross][to->qlen[cross]++];
		sm->off = m->off;
		sm->n = m->n;
		sm->data = malloc((m->n + 1) * sizeof(int64_t));
		memcpy(sm->data, (m->from_src ? r->src : r->work) + m->off,
		       m->n * sizeof(int64_t));
		r->sent++;
		moved = 1;
	}
	return moved;
}

/* Receive up to max messages of slot that reached rank r; how many did. */
static int
sim_recv(sim_rank *r, int slot, int max)
{
	int moved = 0;

	while (moved < max && r->qhead[slot] < r->qlen[slot]) {
		sim_msg *sm = &r->q[slot][r->qhead[slot]++];
		size_t k = rx_index(r, slot, r->rx[slot]);
		const dt__coll_msg *m = &r->s.rx[k];

		assert_true(k < r->s.nrx);
		assert_int_equal(sm->off, m->off);
		assert_int_equal(sm->n, m->n);
		for (uint64_t i = 0; i < m->n; i++) {
			uint64_t e = m->off + i;
			if (m->acc_work)
				r->scratch[e - r->boff] = sm->data[i];
			else if (m->phase == DT__PH_RS)
				r->work[e] = r->src[e] + sm->data[i];
			else
				r->work[e] = sm->data[i];
		}
		free(sm->data);
		r->rx[slot]++;
		moved++;
	}
	return moved;
}

static void
run_layout(int H, int L, size_t count, size_t ce)
{
	int n = H * L;
	sim_rank *rk = calloc((size_t)n, sizeof(*rk));
	int progress = 1;

	assert_non_null(rk);
	for (int p = 0; p < n; p++) {
		sim_rank *r = &rk[p];
		int h = p / L, j = p % L;
		size_t blen;

		assert_int_equal(
		    dt__coll_hier_sched(h, H, j, L, count, ce, &r->s, r->n),
		    DT_OK);
		assert_int_equal(r->s.ntx, r->n[0] + r->n[1] + r->n[2]);
		assert_int_equal(r->s.nrx, r->n[3] + r->n[4] + r->n[5]);
		r->to = h * L + (j + 1) % L;
		r->from = h * L + (j + L - 1) % L;
		r->to2 = ((h + 1) % H) * L + j;
		r->from2 = ((h + H - 1) % H) * L + j;
		dt__coll_block(count, L, j, &r->boff, &blen);
		r->src = calloc(count + 1, sizeof(int64_t));
		r->work = calloc(count + 1, sizeof(int64_t));
		r->scratch = calloc(blen + 1, sizeof(int64_t));
		for (size_t i = 0; i < count; i++)
			r->src[i] = (int64_t)(p + 1) * 1000003 + (int64_t)i;
	}
	for (int p = 0; p < n; p++)
		for (int slot = 0; slot < 2; slot++)
			rk[p].q[slot] =
			    calloc(rk[p].s.nrx + 1, sizeof(sim_msg));
	/* Adversarial timing: messages between hosts are taken as soon as
	 * they arrive, those inside a host one at a time and only when
	 * nothing else can move, so phase 2 runs as far ahead of phase 1 as
	 * the schedule lets it. */
	while (progress) {
		progress = 0;
		for (int p = 0; p < n; p++)
			progress |= sim_send(rk, p);
		for (int p = 0; p < n; p++)
			progress |= sim_recv(&rk[p], 1, 1 << 30) > 0;
		for (int p = 0; p < n && !progress; p++)
			progress |= sim_recv(&rk[p], 0, 1) > 0;
	}
	for (int p = 0; p < n; p++) {
		sim_rank *r = &rk[p];

		apply_upto(r, r->n[3] + r->n[4]);
		assert_int_equal(r->sent, r->s.ntx);
		assert_int_equal(r->rx[0], r->n[3] + r->n[5]);
		assert_int_equal(r->rx[1], r->n[4]);
		for (size_t i = 0; i < count; i++) {
			int64_t want = 0;
			for (int q = 0; q < n; q++)
				want += (int64_t)(q + 1) * 1000003 + (int64_t)i;
			if (r->work[i] != want)
				fail_msg("%d x %d, count %zu, chunk %zu: rank "
				         "%d element %zu = %lld, want %lld",
				         H, L, count, ce, p, i,
				         (long long)r->work[i],
				         (long long)want);
		}
	}
	for (int p = 0; p < n; p++) {
		dt__coll_sched_free(&rk[p].s);
		free(rk[p].src);
		free(rk[p].work);
		free(rk[p].scratch);
		free(rk[p].q[0]);
		free(rk[p].q[1]);
	}
	free(rk);
}

static void
test_hier_sim(void **state)
{
	static const int layouts[][2] = {{2, 2}, {2, 3}, {3, 2},
	                                 {3, 3}, {2, 4}, {4, 2}};
	static const size_t counts[] = {0, 1, 3, 7, 16, 101, 1000};
	static const size_t chunks[] = {1, 2, 5, 64};

	(void)state;
	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++)
		for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
			for (size_t k = 0;
			     k < sizeof(chunks) / sizeof(chunks[0]); k++)
				run_layout(layouts[l][0], layouts[l][1],
				           counts[c], chunks[k]);
}

/* Phase 2's partial sums are the only ones kept aside, and only phase
 * 2's last reduction divides an average. */
static void
test_hier_flags(void **state)
{
	dt__coll_sched s;
	size_t n[6];

	(void)state;
	assert_int_equal(dt__coll_hier_sched(1, 3, 0, 2, 600, 16, &s, n),
	                 DT_OK);
	for (size_t i = 0; i < s.nrx; i++) {
		int phase2 = i >= n[3] && i < n[3] + n[4];
		const dt__coll_msg *m = &s.rx[i];

		assert_int_equal(m->acc_work, phase2 && m->phase == DT__PH_RS);
		if (m->final)
			assert_true(phase2 && m->phase == DT__PH_RS);
	}
	dt__coll_sched_free(&s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hier_sim),
	    cmocka_unit_test(test_hier_flags),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
