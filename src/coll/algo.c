/*
 * algo.c - choosing the algorithm of an operation, and what every
 * algorithm's result needs afterwards. The algorithms are one file each
 * behind one ops table (algo.h): algo_local.c (one rank), algo_rd.c
 * (recursive doubling, small messages), algo_stream.c (ring and chain,
 * large messages), algo_cma.c (ranks of one host reading each other's
 * memory), algo_fbox.c (2 ranks of one host, small allreduces),
 * algo_hier.c (ranks on several hosts). The choice, by size and DT_COLL_*
 * thresholds:
 *   - one rank: local;
 *   - an allreduce of 2 ranks of one host up to DT_COLL_CMA_FBOX_MAX:
 *     the fast boxes in the shared areas;
 *   - an allreduce, ranks on 2 or more hosts with the same number (2 or
 *     more) on each, above DT_COLL_RING_THRESHOLD (any size with
 *     DTRAIN_COLL_HIER=on; never with off): hierarchical;
 *   - every rank on one host with memory reads allowed (probed at
 *     start-up), above DT_COLL_CMA_THRESHOLD: same-host memory (an
 *     allreduce up to DT_COLL_CMA_SHARED_MAX, of 2 ranks up to twice it,
 *     through the shared areas; of more than 2 ranks, first the push up
 *     to DT_COLL_CMA_PUSH_MANY_MAX);
 *   - above DT_COLL_RING_THRESHOLD: ring (allreduce, allgather,
 *     reduce-scatter) or chain (broadcast);
 *   - otherwise recursive doubling, barriers too.
 * A fused group is packed into one buffer first and unpacked after.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/algo.h"

const dt__coll_algo *
dt__coll_algo_of(const coll_op *op)
{
	static const dt__coll_algo *const table[] = {
	    [DT__ALG_LOCAL] = &dt__coll_algo_local,
	    [DT__ALG_RD] = &dt__coll_algo_rd,
	    [DT__ALG_STREAM] = &dt__coll_algo_stream,
	    [DT__ALG_CMA] = &dt__coll_algo_cma,
	    [DT__ALG_HIER] = &dt__coll_algo_hier,
	    [DT__ALG_FBOX] = &dt__coll_algo_fbox,
	};

	return table[op->algo];
}

int
dt__coll_hier_wanted(const dt_coll *c, const coll_op *op)
{
	if (c->hier_map == NULL || c->cfg.hier == DT__HIER_OFF)
		return 0;
	if (c->cfg.hier == DT__HIER_ON)
		return 1;
	return dt__coll_bytes(op, op->count) > c->cfg.ring_threshold &&
	       op->count >= (size_t)c->size;
}

/* An algorithm's release when all it holds is its schedule (the ring and
 * chain, the hierarchy). */
void
dt__coll_release_sched(dt_coll *c, coll_op *op)
{
	(void)c;
	dt__coll_sched_free(&op->sc);
}

/* A fused group: pack the tensors into the fusion buffer, which becomes
 * the operation's buffer (unpacked after). */
static dt_err
pack_fused(dt_coll *c, coll_op *op)
{
	uint8_t *f = dt__buf_reserve(&c->fusion, &c->fusion_cap,
	                             dt__coll_bytes(op, op->count));
	size_t off = 0;

	if (f == NULL && op->count)
		return DT_ENOMEM;
	for (int i = 0; i < op->ntensors; i++) {
		const dt_coll_tensor *t = &op->tensors[i];
		const void *s = t->send ? t->send : t->recv;
		if (t->count)
			memcpy(f + off, s, t->count * op->esz);
		off += t->count * op->esz;
	}
	op->work = f;
	op->src = f;
	return DT_OK;
}

/* A ring over c->size blocks of `each` elements (each = 0: the count
 * split as evenly as dt__coll_block splits it). */
static dt_err
ring_blocks(dt_coll *c, coll_op *op, size_t count, size_t each, int rs, int ag)
{
	size_t n = (size_t)c->size;
	size_t *offs = malloc(n * sizeof(size_t));
	size_t *lens = malloc(n * sizeof(size_t));
	dt_err err;

	if (!offs || !lens) {
		free(offs);
		free(lens);
		return dt__fail(DT_ENOMEM, "ring blocks");
	}
	for (int b = 0; b < c->size; b++) {
		if (each) {
			offs[b] = (size_t)b * each;
			lens[b] = each;
		} else {
			dt__coll_block(count, c->size, b, &offs[b], &lens[b]);
		}
	}
	err = dt__coll_ring_prepare(c, op, offs, lens, rs, ag, 1);
	free(offs);
	free(lens);
	return err;
}

static dt_err
prepare_allreduce(dt_coll *c, coll_op *op)
{
	size_t bytes = dt__coll_bytes(op, op->count);
	dt_err err;

	if (op->ntensors <= 1) {
		op->work = op->recv;
		op->src = op->send ? op->send : op->recv;
	}
	op->nelem = op->count;
	if (dt__coll_hier_wanted(c, op))
		return dt__coll_hier_prepare(c, op);
	if (c->fbox_max && bytes <= c->fbox_max)
		return dt__coll_fbox_prepare(c, op);
	if (bytes > c->cfg.cma_threshold && c->cma) {
		/* More than 2 ranks push up to their (small) slots; 2 ranks
		 * go through the shared areas first, whose copies pin no
		 * page. */
		int push = bytes <= c->push_max;
		if (push && c->size > 2)
			return dt__coll_cma_prepare(c, op, 0, 0, 0, 1);
		if (dt__coll_share_fits(c, op)) {
			if ((err = dt__coll_cma_prepare(c, op, 1, 1, 0, 0)))
				return err;
			op->cma_shared = 1;
			return DT_OK;
		}
		if (push)
			return dt__coll_cma_prepare(
			    c, op, 0, 0, 0,
			    bytes >= c->cfg.cma_half_min && op->count >= 2 ? 2
			                                                   : 1);
		/* Reading the other's whole input is safe only when it is not
		 * also the output being written. */
		int whole = c->size == 2 && op->src != op->work &&
		            bytes <= c->cfg.cma_whole_max;
		return dt__coll_cma_prepare(c, op, 1, !whole, whole, 0);
	}
	if (bytes > c->cfg.ring_threshold && op->count >= (size_t)c->size)
		return ring_blocks(c, op, op->count, 0, 1, 1);
	if ((err = dt__coll_rd_prepare(c, op, op->count)))
		return err;
	if (op->src != op->work && op->count)
		memcpy(op->work, op->src, bytes);
	op->src = op->work;
	return DT_OK;
}

static dt_err
prepare_broadcast(dt_coll *c, coll_op *op)
{
	dt_err err;

	op->work = op->recv;
	op->src = op->recv;
	op->nelem = op->count;
	if (dt__coll_bytes(op, op->count) > c->cfg.cma_threshold && c->cma)
		return dt__coll_cma_prepare(c, op, 0, 0, 0, 0);
	if (dt__coll_bytes(op, op->count) > c->cfg.ring_threshold)
		return dt__coll_chain_prepare(c, op);
	if ((err = dt__coll_rd_prepare(c, op, op->count)))
		return err;
	op->bc_valid = c->rank == op->root;
	return DT_OK;
}

static dt_err
prepare_allgatherv(dt_coll *c, coll_op *op)
{
	size_t *offs = malloc((size_t)c->size * sizeof(size_t));
	size_t off = 0, esz = op->esz;
	dt_err err;

	if (offs == NULL)
		return dt__fail(DT_ENOMEM, "allgather offsets");
	for (int b = 0; b < c->size; b++) {
		offs[b] = off;
		off += op->counts[b];
	}
	op->work = op->recv;
	op->nelem = off;
	if (op->send && op->counts[c->rank] &&
	    (const uint8_t *)op->send != op->work + offs[c->rank] * esz)
		memcpy(op->work + offs[c->rank] * esz, op->send,
		       op->counts[c->rank] * esz);
	op->src = op->work;
	if (dt__coll_bytes(op, off) > c->cfg.cma_threshold && c->cma) {
		free(offs);
		return dt__coll_cma_prepare(c, op, 0, 1, 0, 0);
	}
	err = dt__coll_ring_prepare(c, op, offs, op->counts, 0, 1,
	                            dt__coll_bytes(op, off) >
	                                c->cfg.ring_threshold);
	free(offs);
	return err;
}

static dt_err
prepare_reduce_scatter(dt_coll *c, coll_op *op)
{
	size_t total = op->count * (size_t)c->size;
	size_t bytes = dt__coll_bytes(op, total);
	const uint8_t *in = op->send ? op->send : op->recv;
	dt_err err;

	if (op->send == NULL) {
		op->work = op->recv; /* in place: recv holds the input */
	} else {
		op->work = dt__buf_reserve(&c->scratch, &c->scratch_cap, bytes);
		if (op->work == NULL && bytes)
			return DT_ENOMEM;
	}
	op->src = in;
	op->nelem = total;
	if (bytes > c->cfg.cma_threshold && c->cma)
		return dt__coll_cma_prepare(c, op, 1, 0, 0, 0);
	if (bytes > c->cfg.ring_threshold && op->count > 0)
		return ring_blocks(c, op, total, op->count, 1, 0);
	if ((err = dt__coll_rd_prepare(c, op, total)))
		return err;
	if (op->work != in && bytes)
		memcpy(op->work, in, bytes);
	op->src = op->work;
	return DT_OK;
}

dt_err
dt__coll_algo_prepare(dt_coll *c, coll_op *op)
{
	dt_err err;

	if (op->ntensors > 1 && (err = pack_fused(c, op)))
		return err;
	if (c->size == 1)
		return dt__coll_local_prepare(c, op);

	switch (op->kind) {
	case DT__COLL_ALLREDUCE:
		return prepare_allreduce(c, op);
	case DT__COLL_BROADCAST:
		return prepare_broadcast(c, op);
	case DT__COLL_ALLGATHERV:
		return prepare_allgatherv(c, op);
	case DT__COLL_REDUCE_SCATTER:
		return prepare_reduce_scatter(c, op);
	case DT__COLL_BARRIER:
		op->work = NULL;
		op->src = NULL;
		return dt__coll_rd_prepare(c, op, 0);
	}
	return dt__fail(DT_EINVAL, "unknown collective kind %d", op->kind);
}

void
dt__coll_algo_release(dt_coll *c, coll_op *op)
{
	const dt__coll_algo *a = dt__coll_algo_of(op);

	if (a->release)
		a->release(c, op);
}

/* The router's way to an algorithm's ops; an op an algorithm leaves NULL
 * means it sends no such message (data: a protocol error) or has nothing
 * to do. */

dt_err
dt__coll_algo_dest(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
                   void **dest, int *reduce)
{
	const dt__coll_algo *a = dt__coll_algo_of(op);

	*dest = NULL;
	*reduce = 0;
	return a->dest ? a->dest(c, op, peer, h, dest, reduce)
	               : dt__coll_unexpected(op, peer);
}

dt_err
dt__coll_algo_deliver(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
                      const void *payload)
{
	const dt__coll_algo *a = dt__coll_algo_of(op);

	return a->deliver ? a->deliver(c, op, peer, h, payload)
	                  : dt__coll_unexpected(op, peer);
}

void
dt__coll_algo_done(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
                   uint64_t remote)
{
	const dt__coll_algo *a = dt__coll_algo_of(op);

	if (a->done)
		a->done(c, op, peer, h, remote);
}

void
dt__coll_algo_fin(dt_coll *c, coll_op *op, int peer)
{
	const dt__coll_algo *a = dt__coll_algo_of(op);

	if (a->fin)
		a->fin(c, op, peer);
}

int
dt__coll_algo_needs(dt_coll *c, const coll_op *op, int peer)
{
	const dt__coll_algo *a = dt__coll_algo_of(op);

	return a->needs ? a->needs(c, op, peer) : 0;
}

/* After a successful run: results to where the caller wants them. */
static void
finish_ok(dt_coll *c, coll_op *op)
{
	size_t esz = op->esz;

	if (op->kind == DT__COLL_REDUCE_SCATTER && c->size > 1) {
		const uint8_t *mine =
		    op->work + (size_t)c->rank * op->count * esz;
		if (op->count && (uint8_t *)op->recv != mine)
			memmove(op->recv, mine, op->count * esz);
	}
	if (op->ntensors > 1) {
		size_t off = 0;
		for (int i = 0; i < op->ntensors; i++) {
			const dt_coll_tensor *t = &op->tensors[i];
			if (t->count)
				memcpy(t->recv, op->work + off, t->count * esz);
			off += t->count * esz;
		}
	}
}

dt_err
dt__coll_algo_run(dt_coll *c, coll_op *op)
{
	dt_err err = dt__coll_algo_of(op)->run(c, op);

	if (err == DT_OK)
		finish_ok(c, op);
	return err;
}
