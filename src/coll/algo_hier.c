/*
 * algo_hier.c - the hierarchical allreduce, for ranks on several hosts
 * with several ranks on each: a flat ring would cross between hosts once
 * per rank, each crossing carrying 2(n-1)/n of the data. Here the data
 * crosses between hosts only in phase 2, and on disjoint slices: every
 * rank of a host carries its own slice to the same-placed ranks of the
 * other hosts, so all of a host's ranks use its link at once.
 *   1. a ring reduce-scatter among the host's L ranks (over shared memory
 *      when the transport has it) sums local block j over the host at the
 *      rank at local position j;
 *   2. a ring reduce-scatter and allgather among the H ranks at position
 *      j, one per host, sums block j over the hosts;
 *   3. a ring allgather among the host's ranks hands every block to every
 *      rank of the host.
 * plan.c computes the schedule (dt__coll_hier_sched); this file runs it as
 * algo_stream.c runs a ring, with two neighbours upstream and two
 * downstream instead of one of each. Messages of phases 1 and 3 come from
 * the host's upstream rank (sc.from), those of phase 2 from the other
 * host's (hier.from2); a message's key counts the messages from its
 * sender, so each sender's messages are checked in order on their own.
 *
 * The other host's partial sums (phase 2's reduce-scatter) may arrive
 * before phase 1 has finished the range they add to: they land in a
 * scratch copy of my block, and the executor adds them in just before it
 * forwards that range (it waits for phase 1's messages of the range
 * first). So the three phases overlap: each message goes as soon as the
 * range it carries is ready, and the link between hosts is busy while the
 * host's own ranks still sum. Every rank first tells both its upstream
 * ranks it has posted the operation (READY), so no large message is ever
 * buffered, as with the ring.
 *
 * The hierarchy itself (which rank is where) is made once, at attach
 * (dt__coll_hier_map), from the ranks' hosts (the scheduler's numbers of
 * them: a LOOKUP of hosts, comm.c).
 */
#include <stdlib.h>
#include <string.h>

#include "coll/algo.h"

/*
 * The hierarchy of hosts (algo_hier.c): hosts numbered by their lowest
 * rank, ranks within a host by rank. It exists only when there are 2 or
 * more hosts with the same number of ranks, 2 or more, on each: otherwise
 * c->hier_map stays NULL and every operation runs flat. Every rank gets
 * the same host numbers from the scheduler, so every rank makes the same
 * map. O(n) with the hosts' numbers (below n + the job's servers and
 * scheduler) as indices.
 */
dt_err
dt__coll_hier_map(dt_coll *c, const uint32_t *hostno)
{
	int n = c->size, H = 0, L;
	int *host = malloc((size_t)n * sizeof(int));
	int *map = malloc(2 * (size_t)n * sizeof(int));
	size_t span = 0;
	int *seen = NULL; /* by host number: its index + 1 */

	for (int r = 0; r < n; r++)
		if (hostno[r] != DT_HOST_UNKNOWN && hostno[r] + 1 > span)
			span = (size_t)hostno[r] + 1;
	if (!host || !map || !(seen = calloc(span ? span : 1, sizeof(int)))) {
		free(host);
		free(map);
		free(seen);
		return dt__fail(DT_ENOMEM, "host map of %d ranks", n);
	}
	for (int r = 0; r < n; r++) {
		if (hostno[r] == DT_HOST_UNKNOWN)
			goto flat;
		if (seen[hostno[r]] == 0)
			seen[hostno[r]] = ++H;
		host[r] = seen[hostno[r]] - 1;
	}
	L = n / H;
	if (H < 2 || L < 2 || L * H != n)
		goto flat;
	for (int h = 0, k; h < H; h++) {
		k = 0;
		for (int r = 0; r < n; r++) {
			if (host[r] != h)
				continue;
			if (k == L)
				goto flat;
			map[r] = h * L + k;
			map[n + h * L + k] = r;
			k++;
		}
		if (k != L)
			goto flat;
	}
	free(host);
	free(seen);
	c->hier_map = map;
	c->hier_hosts = H;
	c->hier_local = L;
	return DT_OK;
flat:
	free(host);
	free(map);
	free(seen);
	return DT_OK;
}

/* The rank at host h, local position j (both taken modulo their counts). */
static int
rank_at(const dt_coll *c, int h, int j)
{
	int H = c->hier_hosts, L = c->hier_local;

	h = ((h % H) + H) % H;
	j = ((j % L) + L) % L;
	return c->hier_map[c->size + h * L + j];
}

dt_err
dt__coll_hier_prepare(dt_coll *c, coll_op *op)
{
	size_t ce = dt__coll_chunk_elems(c->cfg.chunk_bytes, op->esz);
	int pos = c->hier_map[c->rank], L = c->hier_local;
	int h = pos / L, j = pos % L;
	dt_err err;

	op->algo = DT__ALG_HIER;
	op->ready_mode = 1;
	memset(&op->hier, 0, sizeof(op->hier));
	op->hier.to2 = op->hier.from2 = -1;
	size_t blen;

	dt__coll_block(op->count, L, j, &op->hier.boff, &blen);
	op->hier.scratch = dt__buf_reserve(&c->scratch, &c->scratch_cap,
	                                   dt__coll_bytes(op, blen));
	if (op->hier.scratch == NULL && blen)
		return dt__fail(DT_ENOMEM, "hierarchical allreduce: %zu bytes",
		                dt__coll_bytes(op, blen));
	err = dt__coll_hier_sched(h, c->hier_hosts, j, L, op->count, ce,
	                          &op->sc, op->hier.n);
	if (err)
		return err;
	op->sc.to = rank_at(c, h, j + 1);
	op->sc.from = rank_at(c, h, j - 1);
	op->hier.to2 = rank_at(c, h + 1, j);
	op->hier.from2 = rank_at(c, h - 1, j);
	return DT_OK;
}

/* Messages from the host upstream are phases 1 and 3, from the other host
 * phase 2: the rx index of the k-th message of a sender. */
static size_t
rx_index(const coll_op *op, int cross, size_t k)
{
	const size_t *n = op->hier.n;

	if (cross)
		return n[3] + k;
	return k < n[3] ? k : n[3] + n[4] + (k - n[3]);
}

/* Has rx entry i been processed? (mu held) */
static int
rx_is_done(const coll_op *op, size_t i)
{
	const size_t *n = op->hier.n;

	if (i < n[3])
		return op->rx_done > i;
	if (i < n[3] + n[4])
		return op->hier.rx_done2 > i - n[3];
	return op->rx_done > i - n[4];
}

static dt_err
hier_dest(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h, void **dest,
          int *reduce)
{
	const size_t *n = op->hier.n;
	int cross = peer == op->hier.from2;
	size_t got = cross ? op->hier.rx_done2 : op->rx_done;
	size_t want = cross ? n[4] : n[3] + n[5];
	const dt__coll_msg *m;

	(void)c;
	*dest = NULL;
	*reduce = 0;
	if ((!cross && peer != op->sc.from) || h->key != got || got >= want) {
		dt__coll_op_fail(
		    op, DT_EPROTO, 1,
		    "%s #%llu: hierarchical message %llu from rank "
		    "%d out of order (expected message %zu of %zu "
		    "from it; it is %s)",
		    dt__coll_kind_name(op->kind), (unsigned long long)op->num,
		    (unsigned long long)h->key, peer, got, want,
		    cross                 ? "the other host's upstream rank"
		    : peer == op->sc.from ? "this host's upstream rank"
		                          : "no upstream rank of mine");
		return DT_EPROTO;
	}
	m = &op->sc.rx[rx_index(op, cross, got)];
	if (h->arg0 != m->off || h->arg1 != m->n ||
	    h->payload_len != dt__coll_bytes(op, m->n) ||
	    (h->arg2 & DT__CF_CMA)) {
		dt__coll_op_fail(
		    op, DT_EPROTO, 1,
		    "%s #%llu: hierarchical message %llu from rank "
		    "%d covers [%llu, +%llu), expected [%llu, +%llu)",
		    dt__coll_kind_name(op->kind), (unsigned long long)op->num,
		    (unsigned long long)h->key, peer,
		    (unsigned long long)h->arg0, (unsigned long long)h->arg1,
		    (unsigned long long)m->off, (unsigned long long)m->n);
		return DT_EPROTO;
	}
	if (m->n == 0)
		return DT_OK;
	if (m->acc_work)
		*dest = op->hier.scratch +
		        dt__coll_bytes(op, m->off - op->hier.boff);
	else if (m->phase == DT__PH_RS)
		*reduce = 1;
	else
		*dest = op->work + dt__coll_bytes(op, m->off);
	return DT_OK;
}

static dt_err
hier_deliver(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
             const void *payload)
{
	int cross = peer == op->hier.from2;
	const dt__coll_msg *m = &op->sc.rx[rx_index(op, cross, h->key)];
	uint8_t *dst = op->work + dt__coll_bytes(op, m->off);
	const uint8_t *a = op->src + dt__coll_bytes(op, m->off);

	/* Phase 1: the upstream's partial sum joins my input (phase 2's
	 * partial sums go to scratch, apply_upto adds them). */
	(void)c;
	dt__coll_reduce(op->dtype, op->redop, dst, a, payload, m->n);
	return DT_OK;
}

static void
hier_done(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
          uint64_t remote)
{
	(void)c;
	(void)h;
	(void)remote;
	if (peer == op->hier.from2)
		op->hier.rx_done2++;
	else
		op->rx_done++;
}

static int
hier_ready(dt_coll *c, coll_op *op, int peer)
{
	(void)c;
	if (peer == op->sc.to)
		op->ready_to |= 1;
	else if (peer == op->hier.to2)
		op->ready_to |= 2;
	else
		return 0;
	return 1;
}

static int
hier_needs(dt_coll *c, const coll_op *op, int peer)
{
	const size_t *n = op->hier.n;

	(void)c;
	if (peer == op->sc.from && op->rx_done < n[3] + n[5])
		return 1;
	if (peer == op->hier.from2 && op->hier.rx_done2 < n[4])
		return 1;
	/* A downstream rank may finish (and leave) before we do. */
	if ((peer == op->sc.to || peer == op->hier.to2) &&
	    op->tx_sent < op->sc.ntx)
		return 1;
	return 0;
}

static int
pred_rx(coll_op *op, void *arg)
{
	return rx_is_done(op, (size_t)(uintptr_t)arg);
}

static int
pred_ready(coll_op *op, void *arg)
{
	return (op->ready_to & (int)(uintptr_t)arg) != 0;
}

static int
pred_all(coll_op *op, void *arg)
{
	const size_t *n = op->hier.n;

	(void)arg;
	return op->rx_done >= n[3] + n[5] && op->hier.rx_done2 >= n[4];
}

/* The rank tx entry i goes to, and its key: the messages to that rank
 * before it. */
static int
tx_peer(const coll_op *op, size_t i, uint64_t *key)
{
	const size_t *n = op->hier.n;

	if (i < n[0]) {
		*key = i;
		return op->sc.to;
	}
	if (i < n[0] + n[1]) {
		*key = i - n[0];
		return op->hier.to2;
	}
	*key = i - n[1];
	return op->sc.to;
}

/* The rank rx entry i comes from. */
static int
rx_peer(const coll_op *op, size_t i)
{
	const size_t *n = op->hier.n;

	return i >= n[3] && i < n[3] + n[4] ? op->hier.from2 : op->sc.from;
}

/* Add phase 2's partial sums up to rx entry d into my block (executor,
 * mu not held): every rx entry up to d has been processed, and nobody
 * else touches these ranges until I forward them. */
static void
apply_upto(dt_coll *c, coll_op *op, size_t d)
{
	size_t end = op->hier.n[3] + op->hier.n[4];

	if (op->hier.applied < op->hier.n[3])
		op->hier.applied = op->hier.n[3];
	for (; op->hier.applied <= d && op->hier.applied < end;
	     op->hier.applied++) {
		const dt__coll_msg *m = &op->sc.rx[op->hier.applied];
		uint8_t *dst = op->work + dt__coll_bytes(op, m->off);

		if (!m->acc_work || m->n == 0)
			continue;
		dt__coll_reduce(op->dtype, op->redop, dst, dst,
		                op->hier.scratch +
		                    dt__coll_bytes(op, m->off - op->hier.boff),
		                m->n);
		if (m->final && op->redop == DT_COLL_AVG)
			dt__coll_scale(op->dtype, dst, m->n, c->size);
	}
}

static dt_err
run_hier(dt_coll *c, coll_op *op)
{
	const dt__coll_sched *s = &op->sc;
	dt_err err;

	if ((err = dt__coll_send_ready(c, op, s->from)) ||
	    (err = dt__coll_send_ready(c, op, op->hier.from2)))
		return err;
	pthread_mutex_lock(&c->mu);
	if ((err = dt__coll_wait(c, op, pred_ready, (void *)(uintptr_t)1,
	                         s->to)) ||
	    (err = dt__coll_wait(c, op, pred_ready, (void *)(uintptr_t)2,
	                         op->hier.to2)))
		goto out;
	for (size_t i = 0; i < s->ntx; i++) {
		const dt__coll_msg *m = &s->tx[i];
		const uint8_t *base = m->from_src ? op->src : op->work;
		uint64_t key;
		int to = tx_peer(op, i, &key);

		/* Phase 2's later steps forward sums that include my host's
		 * whole sum of their range: phase 1 must be over (its first
		 * step waits for just its range, in its dep). */
		if (i >= op->hier.n[0] && m->step > 0 &&
		    (err = dt__coll_wait(c, op, pred_rx,
		                         (void *)(uintptr_t)(op->hier.n[3] - 1),
		                         s->from)))
			goto out;
		if (m->dep >= 0 &&
		    (err = dt__coll_wait(c, op, pred_rx,
		                         (void *)(uintptr_t)m->dep,
		                         rx_peer(op, (size_t)m->dep))))
			goto out;
		/* Counted as sent before it is written: the peer may
		 * take it, finish and leave before this thread holds mu
		 * again, and its leaving must not find it still needed
		 * (needs). A failed send fails the operation anyway. */
		op->tx_sent = i + 1;
		pthread_mutex_unlock(&c->mu);
		if (m->dep >= 0)
			apply_upto(c, op, (size_t)m->dep);
		err = dt__coll_send_data(c, op, to, key, m->off, m->n, 0,
		                         base + dt__coll_bytes(op, m->off),
		                         dt__coll_bytes(op, m->n));
		pthread_mutex_lock(&c->mu);
		if (err)
			goto out;
	}
	err = dt__coll_wait(c, op, pred_all, NULL, s->from);
out:
	pthread_mutex_unlock(&c->mu);
	/* (every partial sum was added before its range was forwarded) */
	if (err == DT_OK)
		apply_upto(c, op, op->hier.n[3] + op->hier.n[4]);
	return err;
}

const dt__coll_algo dt__coll_algo_hier = {
    .name = "hierarchical",
    .run = run_hier,
    .release = dt__coll_release_sched,
    .needs = hier_needs,
    .dest = hier_dest,
    .deliver = hier_deliver,
    .done = hier_done,
    .ready = hier_ready,
};
