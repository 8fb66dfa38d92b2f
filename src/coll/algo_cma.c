/*
 * algo_cma.c - the same-host algorithms.
 *
 * Cross-memory attach (CMA): when every rank runs on one host and may
 * read the others' memory (probed at start-up, DT_COLL_CMA=0 turns it
 * off), large operations move no data through sockets. Every rank sends
 * each peer a notice with the address of its buffer, and reads what it
 * needs (net/cma.c) - one copy instead of a socket's two:
 *   - allreduce of 2 ranks, without the shared areas or above them: push
 *     (write my input into the peer's slot and
 *     reduce its input from mine: 1 hop), by halves (write the peer's
 *     half, reduce mine, write the result into its output: 2 hops), or
 *     out of place read the other's whole input and reduce (2 hops);
 *   - allreduce of more ranks up to DT_COLL_CMA_PUSH_MANY_MAX: push to
 *     every peer (write my input into my slot at each, one notice each,
 *     and add everyone's inputs in rank order: 1 hop);
 *   - allreduce up to DT_COLL_CMA_SHARED_MAX (2 ranks: twice it): through
 *     the shared areas (each rank copies the blocks of its input the others
 *     reduce into its own area, which they map; rank r adds block r of
 *     everyone's in rank order and leaves it in the area's other half,
 *     from which the others copy it: 2 hops, no FIN, no page pinned: see
 *     run_cma_shared);
 *   - allreduce otherwise: rank r reads block r of every peer's input, in
 *     rank order, and reduces it, then writes the finished block into
 *     every peer's output (2 hops, no FIN: see cma_write_blocks);
 *   - reduce-scatter: the same reads, without the writes;
 *   - allgather: everyone reads every block from its owner;
 *   - broadcast: everyone waits for every rank's notice (so all agree),
 *     then reads the root's buffer.
 * Reads that reduce go through a small bounce buffer that stays in cache.
 * Notices carry the signature like data messages do, so mismatches are
 * caught the same way. A rank's memory is read after it has sent the
 * notice, so every operation that reads ends with FIN from every rank to
 * every rank (but the allreduces that end by writing, whose last notice
 * says as much):
 * nobody returns (and lets the caller reuse its buffers) before everyone
 * has finished with them.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/algo.h"

dt_err
dt__coll_cma_prepare(dt_coll *c, coll_op *op, int rs, int ag, int whole,
                     int push)
{
	size_t n = (size_t)c->size;

	op->algo = DT__ALG_CMA;
	op->cma_rs = rs;
	op->cma_ag = ag;
	op->cma_whole = whole;
	op->cma_push = push;
	op->cma_got = calloc(3 * n, 1);
	/* by key (source, block), and the peers' outputs (allreduce) */
	op->cma_addr = calloc(3 * n, sizeof(uint64_t));
	if (!op->cma_got || !op->cma_addr)
		return dt__fail(DT_ENOMEM, "CMA state of %zu ranks", n);
	return DT_OK;
}

/* Block b of op's buffer in the direct (CMA) algorithm. */
static void
cma_block(dt_coll *c, const coll_op *op, int b, size_t *off, size_t *len)
{
	switch (op->kind) {
	case DT__COLL_REDUCE_SCATTER:
		*off = (size_t)b * op->count;
		*len = op->count;
		return;
	case DT__COLL_ALLGATHERV:
		*off = 0;
		for (int r = 0; r < b; r++)
			*off += op->counts[r];
		*len = op->counts[b];
		return;
	default:
		dt__coll_block(op->nelem, c->size, b, off, len);
	}
}

static dt_err
cma_dest(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h, void **dest,
         int *reduce)
{
	*dest = NULL;
	*reduce = 0;
	int want = op->kind == DT__COLL_BROADCAST || op->cma_rs || op->cma_push
	               ? DT__CMA_KEY_SRC
	               : DT__CMA_KEY_BLK;
	int ok = (h->arg2 & DT__CF_CMA) && h->payload_len == 0 &&
	         (h->key == (uint64_t)want ||
	          (h->key == DT__CMA_KEY_BLK &&
	           ((op->cma_rs && op->cma_ag) || op->cma_push == 2))) &&
	         !op->cma_got[h->key * (size_t)c->size + (size_t)peer];
	if (ok)
		return DT_OK;
	dt__coll_op_fail(
	    op, DT_EPROTO, 1, "%s #%llu: unexpected notice %llu from rank %d",
	    dt__coll_kind_name(op->kind), (unsigned long long)op->num,
	    (unsigned long long)h->key, peer);
	return DT_EPROTO;
}

static void
cma_done(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
         uint64_t remote)
{
	size_t i = h->key * (size_t)c->size + (size_t)peer;

	op->cma_got[i] = 1;
	op->cma_addr[i] = remote;
	/* An allreduce's source notice also gives the sender's output. */
	if (h->key == DT__CMA_KEY_SRC)
		op->cma_addr[2 * (size_t)c->size + (size_t)peer] = h->arg0;
}

static int
cma_needs(dt_coll *c, const coll_op *op, int peer)
{
	size_t n = (size_t)c->size, p = (size_t)peer;
	int src = op->kind == DT__COLL_BROADCAST || op->cma_rs;

	if (op->cma_push)
		return !op->cma_got[p] ||
		       (op->cma_push == 2 && !op->cma_got[n + p]);
	/* An allreduce by writes (run_cma) has no FIN. */
	return (src && !op->cma_got[p]) ||
	       (op->cma_ag && !op->cma_got[n + p]) ||
	       (!(op->cma_rs && op->cma_ag) && !op->cma_got[2 * n + p]);
}

static void
cma_fin(dt_coll *c, coll_op *op, int peer)
{
	if (!op->cma_got[2 * (size_t)c->size + (size_t)peer]) {
		op->cma_got[2 * (size_t)c->size + (size_t)peer] = 1;
		op->cma_fins++;
	}
}

static int
pred_cma_got(coll_op *op, void *arg)
{
	return op->cma_got[(uintptr_t)arg];
}

static int
pred_cma_fins(coll_op *op, void *arg)
{
	return op->cma_fins >= (int)(uintptr_t)arg;
}

/* Send a notice (key, address; out: a second address, in the offset's
 * place) to every other rank. */
static dt_err
cma_notify(dt_coll *c, coll_op *op, uint64_t key, const void *addr,
           const void *out)
{
	dt_err err;

	for (int p = 0; p < c->size; p++)
		if (p != c->rank &&
		    (err = dt__coll_send_data(c, op, p, key,
		                              (uint64_t)(uintptr_t)out,
		                              op->nelem, DT__CF_CMA, addr, 0)))
			return err;
	return DT_OK;
}

/* Wait (mu not held) for peer's notice of key; its address in *addr. */
static dt_err
cma_wait(dt_coll *c, coll_op *op, uint64_t key, int peer, uint64_t *addr)
{
	size_t i = key * (size_t)c->size + (size_t)peer;
	dt_err err;

	pthread_mutex_lock(&c->mu);
	err = dt__coll_wait(c, op, pred_cma_got, (void *)(uintptr_t)i, peer);
	*addr = op->cma_addr[i];
	pthread_mutex_unlock(&c->mu);
	return err;
}

static dt_err
cma_fail(coll_op *op, int peer, int write)
{
	return dt__fail(
	    DT_EIO, "%s #%llu: %s rank %d: %s", dt__coll_kind_name(op->kind),
	    (unsigned long long)op->num, write ? "writing to" : "reading from",
	    peer, dt_errmsg());
}

/* Two ranks: elements [lo, lo + n) of the output from my input and the
 * peer's copy of its own in theirs, rank 0's data first as everywhere. */
static void
cma_reduce2(dt_coll *c, coll_op *op, int peer, const uint8_t *theirs, size_t lo,
            size_t n)
{
	uint8_t *out = op->work + lo * op->esz;
	const uint8_t *mine = op->src + lo * op->esz;

	if (peer < c->rank)
		dt__coll_reduce(op->dtype, op->redop, out, theirs, mine, n);
	else
		dt__coll_reduce(op->dtype, op->redop, out, mine, theirs, n);
	if (op->redop == DT_COLL_AVG)
		dt__coll_scale(op->dtype, out, n, c->size);
}

/* The most memory the push slots of one parity may take (more ranks
 * get smaller slots, so fewer sizes go by push). */
#define PUSH_AREA_MAX (16u << 20)
/* The piece of the sum push_reduce_many keeps in cache: the bounce
 * buffer and the inputs' pieces fit in a core's L2. */
#define PUSH_PIECE (32u << 10)

size_t
dt__coll_push_bytes(const dt_coll *c)
{
	size_t others = (size_t)c->size - 1, b;

	if (c->size < 2)
		return 0;
	if (c->size == 2)
		return c->cfg.cma_push_max;
	b = DT_MIN(c->cfg.cma_push_many, PUSH_AREA_MAX / others);
	return b & ~(size_t)63; /* every slot cache-line aligned */
}

/* Where rank from's input goes in rank to's slot area (both ranks'
 * index: the others in rank order, to itself left out). */
static size_t
push_offset(const dt_coll *c, int from, int to)
{
	return (size_t)(from < to ? from : from - 1) * c->push_max;
}

/*
 * More than two ranks: the whole sum, in rank order - ((x0 + x1) + x2) +
 * ... - from my input and the others' in my slots, a cache-sized piece at
 * a time through the bounce buffer, so that my input is read before the
 * output (the same buffer in place) is written. Every rank computes every
 * element the same way, so all get the same bits.
 */
static const uint8_t *
push_input(const dt_coll *c, const coll_op *op, int slot, int p)
{
	return p == c->rank ? op->src
	                    : c->push_slot[slot] + push_offset(c, p, c->rank);
}

static void
push_reduce_many(dt_coll *c, coll_op *op, int slot)
{
	size_t esz = op->esz, n = op->nelem;
	size_t piece = DT_MIN(c->bounce_cap, PUSH_PIECE) / esz;

	for (size_t o = 0; o < n; o += piece) {
		size_t k = DT_MIN(piece, n - o), at = o * esz;

		dt__coll_reduce(op->dtype, op->redop, c->bounce,
		                push_input(c, op, slot, 0) + at,
		                push_input(c, op, slot, 1) + at, k);
		for (int p = 2; p < c->size; p++)
			dt__coll_reduce(
			    op->dtype, op->redop,
			    p == c->size - 1 ? op->work + at : c->bounce,
			    c->bounce, push_input(c, op, slot, p) + at, k);
	}
	if (op->redop == DT_COLL_AVG)
		dt__coll_scale(op->dtype, op->work, n, c->size);
}

/*
 * Push: write my input into every peer's slot for this operation's
 * parity, tell it, and reduce the others' inputs from my slots once each
 * has said it wrote. One message hop, and nobody reads my buffers, so no
 * FIN. A slot is written again two operations later, which its writer
 * can only reach after finishing the operation in between, which needs
 * (through the others, if not directly) the slot owner to have started
 * it, so to have finished this one.
 */
static dt_err
run_cma_push(dt_coll *c, coll_op *op)
{
	int slot = (int)(op->seq & 1);
	size_t bytes = dt__coll_bytes(op, op->nelem);
	uint64_t addr;
	dt_err err;

	for (int k = 1; k < c->size; k++) {
		int p = (c->rank + k) % c->size; /* spread the writes */
		uint64_t at =
		    c->push_remote[2 * p + slot] + push_offset(c, c->rank, p);

		if (dt__cma_write(c->pids[p], at, op->src, bytes))
			return cma_fail(op, p, 1);
		if ((err = dt__coll_send_data(c, op, p, DT__CMA_KEY_SRC, 0,
		                              op->nelem, DT__CF_CMA, NULL, 0)))
			return err;
	}
	for (int p = 0; p < c->size; p++)
		if (p != c->rank &&
		    (err = cma_wait(c, op, DT__CMA_KEY_SRC, p, &addr)))
			return err;
	if (c->size == 2)
		cma_reduce2(c, op, 1 - c->rank, c->push_slot[slot], 0,
		            op->nelem);
	else
		push_reduce_many(c, op, slot);
	return DT_OK;
}

/*
 * An allreduce's second half, by writes: my finished block (lo, len) into
 * every peer's output (the address its source notice gave), each followed
 * by a BLK notice; then wait for everyone's. A peer sends its BLK only
 * after it has read all it reads of my input (its block, for its
 * reduction) and written its block into my output, so nobody touches my
 * buffers afterwards: no FIN round. In place is safe: my output's block p
 * is my input's block p, which only p reads, before it writes it.
 */
static dt_err
cma_write_blocks(dt_coll *c, coll_op *op, size_t lo, size_t len)
{
	size_t n = (size_t)c->size, esz = op->esz;
	uint64_t addr;
	dt_err err;

	for (int k = 1; k < c->size; k++) {
		int p = (c->rank + k) % c->size; /* spread the writes */

		if (len &&
		    dt__cma_write(c->pids[p],
		                  op->cma_addr[2 * n + (size_t)p] + lo * esz,
		                  op->work + lo * esz, len * esz))
			return cma_fail(op, p, 1);
		if ((err = dt__coll_send_data(c, op, p, DT__CMA_KEY_BLK, 0,
		                              op->nelem, DT__CF_CMA, NULL, 0)))
			return err;
	}
	for (int p = 0; p < c->size; p++)
		if (p != c->rank &&
		    (err = cma_wait(c, op, DT__CMA_KEY_BLK, p, &addr)))
			return err;
	return DT_OK;
}

/*
 * Two ranks, push by halves: write the peer's half of my input into its
 * slot, with my output's address in the notice (in the offset's place, as
 * cma_write_blocks expects); reduce my half (rank 0's data first) into my
 * output and write it into the peer's output; tell it (BLK), and return
 * once it has told me. Each rank copies the whole size
 * once and reduces half of it, instead of reducing all of it. My output
 * is written by the peer only after my notice, when I have read all of my
 * input that is its half (so in place is safe), and I return only after
 * its BLK notice, so the buffer is still mine while it writes.
 */
static dt_err cma_write_blocks(dt_coll *c, coll_op *op, size_t lo, size_t len);

static dt_err
run_cma_halves(dt_coll *c, coll_op *op)
{
	int peer = 1 - c->rank, slot = (int)(op->seq & 1);
	size_t esz = op->esz, lo, len, plo, plen;
	uint64_t addr;
	dt_err err;

	dt__coll_block(op->nelem, 2, c->rank, &lo, &len);
	dt__coll_block(op->nelem, 2, peer, &plo, &plen);
	if (dt__cma_write(c->pids[peer],
	                  c->push_remote[2 * peer + slot] + plo * esz,
	                  op->src + plo * esz, plen * esz))
		return cma_fail(op, peer, 1);
	if ((err = dt__coll_send_data(c, op, peer, DT__CMA_KEY_SRC,
	                              (uint64_t)(uintptr_t)op->work, op->nelem,
	                              DT__CF_CMA, NULL, 0)) ||
	    (err = cma_wait(c, op, DT__CMA_KEY_SRC, peer, &addr)))
		return err;
	cma_reduce2(c, op, peer, c->push_slot[slot] + lo * esz, lo, len);
	return cma_write_blocks(c, op, lo, len);
}

/*
 * Elements [lo, lo + len) of everyone's input, added in rank order -
 * ((x0 + x1) + x2) + ... - into my output: rank 0's read straight into
 * place, each other's through the bounce buffer as its notice comes. In
 * place, my output is my input, so my part of it is kept aside first
 * (but by rank 0, whose input is the sum's start anyway).
 */
static dt_err
cma_reduce_range(dt_coll *c, coll_op *op, size_t lo, size_t len)
{
	size_t esz = op->esz, piece = c->bounce_cap / esz;
	uint8_t *out = op->work + lo * esz;
	const uint8_t *mine = op->src + lo * esz, *acc = NULL;
	uint64_t addr;
	dt_err err;

	if (c->rank != 0 && op->work == op->src && len) {
		uint8_t *keep =
		    dt__buf_reserve(&c->scratch, &c->scratch_cap, len * esz);
		if (keep == NULL)
			return dt__fail(DT_ENOMEM, "%s #%llu: %zu bytes",
			                dt__coll_kind_name(op->kind),
			                (unsigned long long)op->num, len * esz);
		memcpy(keep, mine, len * esz);
		mine = keep;
	}
	for (int p = 0; p < c->size; p++) {
		if (p == c->rank) {
			if (acc)
				dt__coll_reduce(op->dtype, op->redop, out, acc,
				                mine, len);
			acc = acc ? out : mine;
			continue;
		}
		if ((err = cma_wait(c, op, DT__CMA_KEY_SRC, p, &addr)))
			return err;
		addr += lo * esz;
		if (acc == NULL) { /* rank 0's: the sum's start */
			if (len &&
			    dt__cma_read(c->pids[p], out, addr, len * esz))
				return cma_fail(op, p, 0);
			acc = out;
			continue;
		}
		for (size_t o = 0; o < len; o += piece) {
			size_t k = DT_MIN(piece, len - o);
			if (dt__cma_read(c->pids[p], c->bounce, addr + o * esz,
			                 k * esz))
				return cma_fail(op, p, 0);
			dt__coll_reduce(op->dtype, op->redop, out + o * esz,
			                acc + o * esz, c->bounce, k);
		}
		acc = out;
	}
	return DT_OK;
}

/*
 * Where element lo of the buffer lies in either half of a shared area:
 * at the same place with more than 2 ranks (every block laid out as in
 * the buffer), at the start with 2, whose halves each hold one block (the
 * peer's half of my input, my finished half), so that 2 ranks go through
 * areas of half the size of the buffer.
 */
static size_t
share_at(const dt_coll *c, const coll_op *op, size_t lo)
{
	return c->size == 2 ? 0 : lo * op->esz;
}

int
dt__coll_share_fits(const dt_coll *c, const coll_op *op)
{
	size_t lo, len, end = 0;

	if (c->share_max == 0)
		return 0;
	for (int b = 0; b < c->size; b++) {
		dt__coll_block(op->nelem, c->size, b, &lo, &len);
		if (share_at(c, op, lo) + len * op->esz > end)
			end = share_at(c, op, lo) + len * op->esz;
	}
	return end <= c->share_max;
}

/* Rank p's block starting at element lo, from its input (p, me) or
 * its area's input half. */
static const uint8_t *
share_input(const dt_coll *c, const coll_op *op, int p, size_t lo)
{
	return p == c->rank ? op->src + lo * op->esz
	                    : c->share_peer[p] + share_at(c, op, lo);
}

/*
 * Block lo, len of the sum, in rank order - ((x0 + x1) + x2) + ... - into
 * out, a cache-sized piece at a time: rank p's block from its shared area
 * (mine from my input), once every source notice is in.
 */
static dt_err
shared_reduce(dt_coll *c, coll_op *op, uint8_t *out, size_t lo, size_t len)
{
	size_t esz = op->esz, piece = PUSH_PIECE / esz;
	uint64_t addr;
	dt_err err;

	for (int p = 0; p < c->size; p++)
		if (p != c->rank &&
		    (err = cma_wait(c, op, DT__CMA_KEY_SRC, p, &addr)))
			return err;
	for (size_t o = 0; o < len; o += piece) {
		size_t k = DT_MIN(piece, len - o), at = o * esz;

		dt__coll_reduce(op->dtype, op->redop, out + at,
		                share_input(c, op, 0, lo) + at,
		                share_input(c, op, 1, lo) + at, k);
		for (int p = 2; p < c->size; p++)
			dt__coll_reduce(op->dtype, op->redop, out + at,
			                out + at,
			                share_input(c, op, p, lo) + at, k);
	}
	if (op->redop == DT_COLL_AVG)
		dt__coll_scale(op->dtype, out, len, c->size);
	return DT_OK;
}

/*
 * An allreduce of more than 2 ranks through the shared areas. Each
 * rank's area has two halves of c->share_max, both laid out as the
 * buffer: the input half and the finished half. I copy block p of my
 * input into my input half for every peer p, and tell p (SRC); I add
 * block r (mine) of everyone's in rank order, from their input halves,
 * into block r of my finished half, tell everyone (BLK), copy it into my
 * output, and copy each peer's finished block out of its area once it has
 * told me. Plain copies: no page of another process is pinned, as a
 * cross-memory read or write would, which costs more than the copy.
 *
 * No FIN round, and no slots by parity, whatever the sizes of successive
 * operations (which move the blocks' bounds): a peer's BLK comes after it
 * has read its block of my input half, so when I return nobody reads that
 * half any more, and nobody ever touches my buffers. My finished half is
 * written again only after every peer's SRC of a later operation through
 * the areas, which each sends once it has finished this one (copied my
 * block out); the input half of the next operation may be written while
 * peers still copy from the finished half, hence the two halves. In
 * place is safe: my input's blocks are copied into my area (or, block r,
 * added) before the output's are written.
 */
static dt_err
run_cma_shared(dt_coll *c, coll_op *op)
{
	size_t esz = op->esz, lo, len;
	uint8_t *area = c->share_mine, *done = area + c->share_max;
	uint64_t addr;
	dt_err err;

	for (int k = 1; k < c->size; k++) {
		int p = (c->rank + k) % c->size;

		dt__coll_block(op->nelem, c->size, p, &lo, &len);
		if (len)
			memcpy(area + share_at(c, op, lo), op->src + lo * esz,
			       len * esz);
		if ((err = dt__coll_send_data(c, op, p, DT__CMA_KEY_SRC, 0,
		                              op->nelem, DT__CF_CMA, NULL, 0)))
			return err;
	}
	dt__coll_block(op->nelem, c->size, c->rank, &lo, &len);
	if ((err = shared_reduce(c, op, done + share_at(c, op, lo), lo, len)))
		return err;
	for (int k = 1; k < c->size; k++)
		if ((err = dt__coll_send_data(c, op, (c->rank + k) % c->size,
		                              DT__CMA_KEY_BLK, 0, op->nelem,
		                              DT__CF_CMA, NULL, 0)))
			return err;
	if (len)
		memcpy(op->work + lo * esz, done + share_at(c, op, lo),
		       len * esz);
	for (int k = 1; k < c->size; k++) {
		int p = (c->rank + k) % c->size;

		if ((err = cma_wait(c, op, DT__CMA_KEY_BLK, p, &addr)))
			return err;
		dt__coll_block(op->nelem, c->size, p, &lo, &len);
		if (len)
			memcpy(op->work + lo * esz,
			       c->share_peer[p] + c->share_max +
			           share_at(c, op, lo),
			       len * esz);
	}
	return DT_OK;
}

static dt_err
run_cma(dt_coll *c, coll_op *op)
{
	size_t esz = op->esz, lo, len;
	uint64_t addr;
	dt_err err;

	if (op->cma_push == 2)
		return run_cma_halves(c, op);
	if (op->cma_push)
		return run_cma_push(c, op);
	if (op->cma_shared)
		return run_cma_shared(c, op);

	if (op->kind == DT__COLL_BROADCAST)
		err = cma_notify(c, op, DT__CMA_KEY_SRC,
		                 c->rank == op->root ? op->work : NULL, NULL);
	else if (op->cma_rs)
		err = cma_notify(c, op, DT__CMA_KEY_SRC, op->src,
		                 op->cma_ag ? op->work : NULL);
	else
		err = cma_notify(c, op, DT__CMA_KEY_BLK, op->work, NULL);
	if (err)
		return err;

	if (op->cma_rs) {
		if (op->cma_whole) {
			lo = 0;
			len = op->nelem;
		} else {
			cma_block(c, op, c->rank, &lo, &len);
		}
		if ((err = cma_reduce_range(c, op, lo, len)))
			return err;
		if (op->redop == DT_COLL_AVG)
			dt__coll_scale(op->dtype, op->work + lo * esz, len,
			               c->size);
		if (op->cma_ag)
			return cma_write_blocks(c, op, lo, len);
	}
	if (op->cma_ag) {
		/* Every other block from its owner, straight into place. */
		for (int p = 0; p < c->size; p++) {
			if (p == c->rank)
				continue;
			if ((err = cma_wait(c, op, DT__CMA_KEY_BLK, p, &addr)))
				return err;
			cma_block(c, op, p, &lo, &len);
			if (len && dt__cma_read(c->pids[p], op->work + lo * esz,
			                        addr + lo * esz, len * esz))
				return cma_fail(op, p, 0);
		}
	}
	if (op->kind == DT__COLL_BROADCAST) {
		/* Everyone's notice first: all ranks agree before any use. */
		for (int p = 0; p < c->size; p++)
			if (p != c->rank &&
			    (err = cma_wait(c, op, DT__CMA_KEY_SRC, p, &addr)))
				return err;
		if (c->rank != op->root) {
			addr = op->cma_addr[op->root];
			if (dt__cma_read(c->pids[op->root], op->work, addr,
			                 op->nelem * esz))
				return cma_fail(op, op->root, 0);
		}
	}
	/* Done reading everyone; wait until everyone is done with us. */
	for (int p = 0; p < c->size; p++)
		if (p != c->rank && (err = dt__coll_send_fin(c, op, p)))
			return err;
	pthread_mutex_lock(&c->mu);
	err = dt__coll_wait(c, op, pred_cma_fins,
	                    (void *)(uintptr_t)(c->size - 1), -1);
	pthread_mutex_unlock(&c->mu);
	return err;
}

static void
cma_release(dt_coll *c, coll_op *op)
{
	(void)c;
	free(op->cma_got);
	free(op->cma_addr);
	op->cma_got = NULL;
	op->cma_addr = NULL;
}

const dt__coll_algo dt__coll_algo_cma = {
    .name = "same-host memory",
    .run = run_cma,
    .release = cma_release,
    .needs = cma_needs,
    .dest = cma_dest,
    .done = cma_done,
    .fin = cma_fin,
};
