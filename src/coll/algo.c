/*
 * algo.c - the algorithms of the collectives, run by the executor of
 * comm.c on one posted operation at a time.
 *
 * Recursive doubling (latency-optimal, for messages up to
 * DT_COLL_RING_THRESHOLD bytes): ranks beyond the largest power of two
 * fold into a partner first; then log2(p) rounds exchange the whole buffer
 * with rank ^ 2^k and reduce. Partners reduce lower rank first, so every
 * rank computes the same bits. Small broadcasts and barriers use the same
 * exchange (a broadcast sends the data once it holds it, an empty message
 * before), so their completion, like an allreduce's, depends on every rank.
 * Its data is sent eagerly: a message that arrives before its operation is
 * posted is buffered by comm.c.
 *
 * Streams (bandwidth-optimal, above the threshold): the ring allreduce is a
 * reduce-scatter then an allgather over N blocks, each cut into chunks of
 * DT_COLL_CHUNK_BYTES. The executor sends chunk k of step s+1 as soon as
 * the I/O thread has reduced chunk k of step s, which it does straight from
 * the socket buffer into the result (dt__coll_algo_deliver), so sending,
 * receiving and reducing overlap. Allgather chunks are received straight
 * into the output. Large streams start with a READY handshake: no data is
 * sent to a rank before it has posted the operation, so big messages are
 * never buffered. A large broadcast is a pipelined chain whose READYs run
 * from the last rank back to the root, so the root starts only once every
 * rank has agreed on the signature.
 *
 * Cross-memory attach (CMA): when every rank runs on one host and may
 * read the others' memory (probed at start-up, DT_COLL_CMA=0 turns it
 * off), large operations move no data through sockets. Every rank sends
 * each peer a notice with the address of its buffer, and reads what it
 * needs with process_vm_readv - one copy instead of a socket's two:
 *   - allreduce of 2 ranks (out of place): each reads the other's whole
 *     input and reduces, lower rank first (2 message hops);
 *   - allreduce otherwise, and reduce-scatter: rank r reads block r of
 *     every peer's input, in rank order, and reduces it; then (allreduce)
 *     announces the finished block, and everyone reads every block from
 *     its owner (3 hops, whatever the number of ranks);
 *   - allgather: everyone reads every block from its owner;
 *   - broadcast: everyone waits for every rank's notice (so all agree),
 *     then reads the root's buffer.
 * Reads that reduce go through a small bounce buffer that stays in cache.
 * Notices carry the signature like data messages do, so mismatches are
 * caught the same way. A rank's memory is read after it has sent the
 * notice, so every operation ends with FIN from every rank to every rank:
 * nobody returns (and lets the caller reuse its buffers) before everyone
 * has finished reading them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "coll/comm.h"

/* Recursive-doubling message keys: 0 = fold from the extra rank, 1..R =
 * rounds, R+1 = result back to the extra rank. */
#define RD_KEY_RESULT(op) ((op)->rd.rounds + 1)

static size_t
bytes_of(const coll_op *op, size_t n)
{
	return n * op->esz;
}

/* ---- preparation ---- */

static dt_err
prepare_local(dt_coll *c, coll_op *op)
{
	(void)c;
	op->algo = DT__ALG_LOCAL;
	return DT_OK;
}

static dt_err
prepare_rd(dt_coll *c, coll_op *op, size_t nelem)
{
	size_t bytes = bytes_of(op, nelem);
	size_t nslots;

	op->algo = DT__ALG_RD;
	op->nelem = nelem;
	dt__coll_rd_plan(c->rank, c->size, &op->rd);
	nslots = (size_t)op->rd.rounds + 2;
	op->slot_bytes = (bytes + 63) & ~(size_t)63;
	if (op->slot_bytes) {
		op->slots = dt__coll_buf(&c->slotbuf, &c->slotbuf_cap,
		                         nslots * op->slot_bytes);
		if (op->slots == NULL)
			return DT_ENOMEM;
	}
	return DT_OK;
}

static dt_err
prepare_ring(dt_coll *c, coll_op *op, const size_t *offs, const size_t *lens,
             int rs, int ag, int ready)
{
	size_t ce = dt__coll_chunk_elems(c->cfg.chunk_bytes, op->esz);

	op->algo = DT__ALG_STREAM;
	op->ready_mode = ready;
	return dt__coll_ring_sched(c->rank, c->size, offs, lens, ce, rs, ag,
	                           &op->sc);
}

static dt_err
prepare_cma(dt_coll *c, coll_op *op, int rs, int ag, int whole)
{
	size_t n = (size_t)c->size;

	op->algo = DT__ALG_CMA;
	op->cma_rs = rs;
	op->cma_ag = ag;
	op->cma_whole = whole;
	op->cma_got = calloc(3 * n, 1);
	op->cma_addr = calloc(2 * n, sizeof(uint64_t));
	if (!op->cma_got || !op->cma_addr)
		return dt__fail(DT_ENOMEM, "CMA state of %zu ranks", n);
	return DT_OK;
}

dt_err
dt__coll_algo_prepare(dt_coll *c, coll_op *op)
{
	size_t n = (size_t)c->size, esz = op->esz;
	dt_err err = DT_OK;

	/* Fused group: pack the tensors into the fusion buffer. */
	if (op->ntensors > 1) {
		uint8_t *f = dt__coll_buf(&c->fusion, &c->fusion_cap,
		                          bytes_of(op, op->count));
		size_t off = 0;

		if (f == NULL && op->count)
			return DT_ENOMEM;
		for (int i = 0; i < op->ntensors; i++) {
			const dt_coll_tensor *t = &op->tensors[i];
			const void *s = t->send ? t->send : t->recv;
			if (t->count)
				memcpy(f + off, s, t->count * esz);
			off += t->count * esz;
		}
		op->work = f;
		op->src = f;
	}
	if (c->size == 1)
		return prepare_local(c, op);

	switch (op->kind) {
	case DT__COLL_ALLREDUCE: {
		size_t bytes = bytes_of(op, op->count);

		if (op->ntensors <= 1) {
			op->work = op->recv;
			op->src = op->send ? op->send : op->recv;
		}
		op->nelem = op->count;
		if (bytes > c->cfg.cma_threshold && c->cma &&
		    bytes <= c->push_max) {
			dt_err e = prepare_cma(c, op, 0, 0, 0);
			op->cma_push = 1;
			return e;
		}
		if (bytes > c->cfg.cma_threshold && c->cma) {
			/* Reading the other's whole input is safe only when it
			 * is not also the output being written. */
			int whole = c->size == 2 && op->src != op->work &&
			            bytes <= c->cfg.cma_whole_max;
			return prepare_cma(c, op, 1, !whole, whole);
		}
		if (bytes > c->cfg.ring_threshold && op->count >= n) {
			size_t *offs = malloc(n * sizeof(size_t));
			size_t *lens = malloc(n * sizeof(size_t));
			if (!offs || !lens) {
				free(offs);
				free(lens);
				return dt__fail(DT_ENOMEM, "ring blocks");
			}
			for (int b = 0; b < c->size; b++)
				dt__coll_block(op->count, c->size, b, &offs[b],
				               &lens[b]);
			err = prepare_ring(c, op, offs, lens, 1, 1, 1);
			free(offs);
			free(lens);
			return err;
		}
		if ((err = prepare_rd(c, op, op->count)))
			return err;
		if (op->src != op->work && op->count)
			memcpy(op->work, op->src, bytes);
		op->src = op->work;
		return DT_OK;
	}
	case DT__COLL_BROADCAST:
		op->work = op->recv;
		op->src = op->recv;
		op->nelem = op->count;
		if (bytes_of(op, op->count) > c->cfg.cma_threshold && c->cma)
			return prepare_cma(c, op, 0, 0, 0);
		if (bytes_of(op, op->count) > c->cfg.ring_threshold) {
			size_t ce =
			    dt__coll_chunk_elems(c->cfg.chunk_bytes, esz);
			op->algo = DT__ALG_STREAM;
			op->ready_mode = 1;
			op->chain = 1;
			return dt__coll_chain_sched(c->rank, c->size, op->root,
			                            op->count, ce, &op->sc);
		}
		if ((err = prepare_rd(c, op, op->count)))
			return err;
		op->bc_valid = c->rank == op->root;
		return DT_OK;
	case DT__COLL_ALLGATHERV: {
		size_t *offs = malloc(n * sizeof(size_t));
		size_t off = 0;

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
		if (bytes_of(op, off) > c->cfg.cma_threshold && c->cma) {
			free(offs);
			return prepare_cma(c, op, 0, 1, 0);
		}
		err = prepare_ring(c, op, offs, op->counts, 0, 1,
		                   bytes_of(op, off) > c->cfg.ring_threshold);
		free(offs);
		return err;
	}
	case DT__COLL_REDUCE_SCATTER: {
		size_t total = op->count * n, bytes = bytes_of(op, total);
		const uint8_t *in = op->send ? op->send : op->recv;

		if (op->send == NULL) {
			op->work =
			    op->recv; /* in place: recv holds the input */
		} else {
			op->work =
			    dt__coll_buf(&c->scratch, &c->scratch_cap, bytes);
			if (op->work == NULL && bytes)
				return DT_ENOMEM;
		}
		op->src = in;
		op->nelem = total;
		if (bytes > c->cfg.cma_threshold && c->cma)
			return prepare_cma(c, op, 1, 0, 0);
		if (bytes > c->cfg.ring_threshold && op->count > 0) {
			size_t *offs = malloc(n * sizeof(size_t));
			size_t *lens = malloc(n * sizeof(size_t));
			if (!offs || !lens) {
				free(offs);
				free(lens);
				return dt__fail(DT_ENOMEM, "ring blocks");
			}
			for (int b = 0; b < c->size; b++) {
				offs[b] = (size_t)b * op->count;
				lens[b] = op->count;
			}
			err = prepare_ring(c, op, offs, lens, 1, 0, 1);
			free(offs);
			free(lens);
			return err;
		}
		if ((err = prepare_rd(c, op, total)))
			return err;
		if (op->work != in && bytes)
			memcpy(op->work, in, bytes);
		op->src = op->work;
		return DT_OK;
	}
	case DT__COLL_BARRIER:
		op->work = NULL;
		op->src = NULL;
		return prepare_rd(c, op, 0);
	}
	return dt__fail(DT_EINVAL, "unknown collective kind %d", op->kind);
}

void
dt__coll_algo_release(dt_coll *c, coll_op *op)
{
	(void)c;
	dt__coll_sched_free(&op->sc);
	free(op->cma_got);
	free(op->cma_addr);
	op->cma_got = NULL;
	op->cma_addr = NULL;
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

/* ---- receive side (I/O thread, or the executor draining early ones) ---- */

static int
rd_expected_peer(dt_coll *c, const coll_op *op, uint64_t key)
{
	const dt__coll_rd *rd = &op->rd;

	if (key == 0)
		return rd->extra_of < 0 ? rd->extra : -1;
	if (key <= (uint64_t)rd->rounds)
		return rd->extra_of < 0 ? c->rank ^ (1 << (key - 1)) : -1;
	if (key == (uint64_t)RD_KEY_RESULT(op))
		return rd->extra_of;
	return -1;
}

dt_err
dt__coll_algo_dest(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
                   void **dest, int *reduce)
{
	*dest = NULL;
	*reduce = 0;
	if (op->algo == DT__ALG_RD) {
		uint64_t key = h->key;
		uint64_t full = bytes_of(op, op->nelem);
		int want = key < 70 ? rd_expected_peer(c, op, key) : -1;

		if (want < 0 || want != peer || op->got[key]) {
			dt__coll_op_fail(op, DT_EPROTO, 1,
			                 "%s #%llu: unexpected message %llu "
			                 "from rank %d",
			                 dt__coll_kind_name(op->kind),
			                 (unsigned long long)op->num,
			                 (unsigned long long)key, peer);
			return DT_EPROTO;
		}
		if (op->kind == DT__COLL_BROADCAST) {
			int has = (h->arg2 & DT__CF_HAS_DATA) != 0;
			if ((has && h->payload_len != full) ||
			    (!has && h->payload_len != 0))
				goto bad_len;
			if (!has || full == 0)
				return DT_OK;
			if (op->bc_valid) {
				*dest = DT_VAN_DISCARD;
				return DT_OK;
			}
			op->bc_valid = 2; /* claimed: arriving now */
			*dest = op->work;
			return DT_OK;
		}
		if (h->payload_len != full)
			goto bad_len;
		if (full == 0)
			return DT_OK;
		/* The result too goes to a slot, not to the buffer this rank
		 * may still be sending from. */
		*dest = op->slots + key * op->slot_bytes;
		return DT_OK;
	bad_len:
		dt__coll_op_fail(op, DT_EPROTO, 1,
		                 "%s #%llu: message of %llu bytes from rank %d "
		                 "(expected %llu)",
		                 dt__coll_kind_name(op->kind),
		                 (unsigned long long)op->num,
		                 (unsigned long long)h->payload_len, peer,
		                 (unsigned long long)full);
		return DT_EPROTO;
	}
	if (op->algo == DT__ALG_STREAM) {
		const dt__coll_msg *m;

		if (peer != op->sc.from || h->key != op->rx_done ||
		    h->key >= op->sc.nrx) {
			dt__coll_op_fail(op, DT_EPROTO, 1,
			                 "%s #%llu: message %llu from rank %d "
			                 "out of order (expected message %zu "
			                 "from rank %d)",
			                 dt__coll_kind_name(op->kind),
			                 (unsigned long long)op->num,
			                 (unsigned long long)h->key, peer,
			                 op->rx_done, op->sc.from);
			return DT_EPROTO;
		}
		m = &op->sc.rx[h->key];
		if (h->arg0 != m->off || h->arg1 != m->n ||
		    h->payload_len != bytes_of(op, m->n) ||
		    (h->arg2 & DT__CF_CMA)) {
			dt__coll_op_fail(op, DT_EPROTO, 1,
			                 "%s #%llu: message %llu from rank %d "
			                 "covers [%llu, +%llu), expected "
			                 "[%llu, +%llu)",
			                 dt__coll_kind_name(op->kind),
			                 (unsigned long long)op->num,
			                 (unsigned long long)h->key, peer,
			                 (unsigned long long)h->arg0,
			                 (unsigned long long)h->arg1,
			                 (unsigned long long)m->off,
			                 (unsigned long long)m->n);
			return DT_EPROTO;
		}
		if (m->n == 0)
			return DT_OK;
		if (m->phase == DT__PH_RS) {
			*reduce = 1; /* from the socket buffer, in deliver */
			return DT_OK;
		}
		*dest = op->work + bytes_of(op, m->off);
		return DT_OK;
	}
	if (op->algo == DT__ALG_CMA) {
		int want =
		    op->kind == DT__COLL_BROADCAST || op->cma_rs || op->cma_push
		        ? DT__CMA_KEY_SRC
		        : DT__CMA_KEY_BLK;
		int ok =
		    (h->arg2 & DT__CF_CMA) && h->payload_len == 0 &&
		    (h->key == (uint64_t)want ||
		     (h->key == DT__CMA_KEY_BLK && op->cma_rs && op->cma_ag)) &&
		    !op->cma_got[h->key * (size_t)c->size + (size_t)peer];
		if (ok)
			return DT_OK;
		dt__coll_op_fail(
		    op, DT_EPROTO, 1,
		    "%s #%llu: unexpected notice %llu from rank %d",
		    dt__coll_kind_name(op->kind), (unsigned long long)op->num,
		    (unsigned long long)h->key, peer);
		return DT_EPROTO;
	}
	dt__coll_op_fail(
	    op, DT_EPROTO, 1, "%s #%llu: unexpected data from rank %d",
	    dt__coll_kind_name(op->kind), (unsigned long long)op->num, peer);
	return DT_EPROTO;
}

dt_err
dt__coll_algo_deliver(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
                      const void *payload)
{
	const dt__coll_msg *m = &op->sc.rx[h->key];
	uint8_t *dst = op->work + bytes_of(op, m->off);
	const uint8_t *a = op->src + bytes_of(op, m->off);

	(void)peer;
	/* Reduce-scatter: the partial sum from upstream joins our input. */
	dt__coll_reduce(op->dtype, op->redop, dst, a, payload, m->n);
	if (m->final && op->redop == DT_COLL_AVG)
		dt__coll_scale(op->dtype, dst, m->n, c->size);
	return DT_OK;
}

void
dt__coll_algo_fin(dt_coll *c, coll_op *op, int peer)
{
	if (op->algo == DT__ALG_CMA) {
		if (!op->cma_got[2 * (size_t)c->size + (size_t)peer]) {
			op->cma_got[2 * (size_t)c->size + (size_t)peer] = 1;
			op->cma_fins++;
		}
	}
}

void
dt__coll_algo_done(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
                   uint64_t remote)
{
	if (op->algo == DT__ALG_CMA) {
		size_t i = h->key * (size_t)c->size + (size_t)peer;
		op->cma_got[i] = 1;
		op->cma_addr[i] = remote;
		return;
	}
	if (op->algo == DT__ALG_RD) {
		op->got[h->key] = 1;
		if (op->kind == DT__COLL_BROADCAST && op->bc_valid == 2 &&
		    (h->arg2 & DT__CF_HAS_DATA))
			op->bc_valid = 1;
	} else if (op->algo == DT__ALG_STREAM) {
		op->rx_done++;
	}
}

int
dt__coll_algo_needs(dt_coll *c, const coll_op *op, int peer)
{
	if (op->algo == DT__ALG_CMA) {
		size_t n = (size_t)c->size, p = (size_t)peer;
		int src = op->kind == DT__COLL_BROADCAST || op->cma_rs;
		if (op->cma_push)
			return !op->cma_got[p];
		return (src && !op->cma_got[p]) ||
		       (op->cma_ag && !op->cma_got[n + p]) ||
		       !op->cma_got[2 * n + p];
	}
	if (op->algo == DT__ALG_RD) {
		for (uint64_t k = 0; k <= (uint64_t)RD_KEY_RESULT(op); k++)
			if (!op->got[k] && rd_expected_peer(c, op, k) == peer)
				return 1;
		return 0;
	}
	if (op->algo == DT__ALG_STREAM) {
		if (peer == op->sc.from && op->rx_done < op->sc.nrx)
			return 1;
		/* The next rank may finish (and leave) before we do. */
		if (peer == op->sc.to && (op->tx_sent < op->sc.ntx ||
		                          (op->ready_mode && !op->ready_to)))
			return 1;
		return 0;
	}
	return 0;
}

/* ---- executor side ---- */

static dt_err
send_data(dt_coll *c, coll_op *op, int to, uint64_t key, uint64_t off,
          uint64_t n, uint32_t flags, const void *payload, size_t bytes)
{
	uint8_t meta[DT__COLL_META_CMA];
	uint32_t meta_len;
	dt_msg_hdr h = {.cmd = DT_CMD_COLL_DATA,
	                .seq = op->seq,
	                .key = key,
	                .arg0 = off,
	                .arg1 = n,
	                .arg2 = flags};

	/* With DT__CF_CMA the receiver reads the bytes where they are. */
	meta_len = dt__coll_meta_encode(&op->sig, (flags & DT__CF_CMA) != 0,
	                                (uint64_t)(uintptr_t)payload, meta);
	if (flags & DT__CF_CMA) {
		payload = NULL;
		bytes = 0;
	}
	return dt__coll_send(c, to, &h, meta, meta_len, payload, bytes);
}

static dt_err
send_fin(dt_coll *c, coll_op *op, int to)
{
	dt_msg_hdr h = {.cmd = DT_CMD_COLL_FIN, .seq = op->seq};

	return dt__coll_send(c, to, &h, NULL, 0, NULL, 0);
}

static dt_err
send_ready(dt_coll *c, coll_op *op, int to)
{
	uint8_t meta[DT__COLL_META_CMA];
	dt_msg_hdr h = {.cmd = DT_CMD_COLL_READY, .seq = op->seq};
	uint32_t len = dt__coll_meta_encode(&op->sig, 0, 0, meta);

	return dt__coll_send(c, to, &h, meta, len, NULL, 0);
}

static int
pred_got(coll_op *op, void *arg)
{
	return op->got[(uintptr_t)arg];
}

static int
pred_rx(coll_op *op, void *arg)
{
	return op->rx_done >= (size_t)(uintptr_t)arg;
}

static int
pred_ready(coll_op *op, void *arg)
{
	(void)arg;
	return op->ready_to;
}

/* What this rank sends in a recursive-doubling message (mu held). */
static void
rd_payload(coll_op *op, const void **p, size_t *bytes, uint32_t *flags)
{
	*flags = 0;
	*p = op->work;
	*bytes = bytes_of(op, op->nelem);
	if (op->kind == DT__COLL_BROADCAST) {
		if (op->bc_valid == 1) {
			*flags = DT__CF_HAS_DATA;
		} else {
			*p = NULL;
			*bytes = 0;
		}
	}
}

static void
rd_combine(dt_coll *c, coll_op *op, uint64_t key, int partner)
{
	const uint8_t *slot = op->slots + key * op->slot_bytes;

	if (op->kind == DT__COLL_BROADCAST || op->kind == DT__COLL_BARRIER ||
	    op->nelem == 0)
		return;
	/* Lower rank's data first: both partners compute the same bits. */
	if (partner < c->rank)
		dt__coll_reduce(op->dtype, op->redop, op->work, slot, op->work,
		                op->nelem);
	else
		dt__coll_reduce(op->dtype, op->redop, op->work, op->work, slot,
		                op->nelem);
}

static dt_err
run_rd(dt_coll *c, coll_op *op)
{
	const dt__coll_rd *rd = &op->rd;
	const void *p;
	size_t bytes;
	uint32_t flags;
	dt_err err;

	pthread_mutex_lock(&c->mu);
	if (rd->extra_of >= 0) {
		/* Fold into the core partner, then wait for the result. */
		rd_payload(op, &p, &bytes, &flags);
		pthread_mutex_unlock(&c->mu);
		if ((err = send_data(c, op, rd->extra_of, 0, 0, op->nelem,
		                     flags, p, bytes)))
			return err;
		pthread_mutex_lock(&c->mu);
		err = dt__coll_wait(c, op, pred_got,
		                    (void *)(uintptr_t)RD_KEY_RESULT(op),
		                    rd->extra_of);
		pthread_mutex_unlock(&c->mu);
		if (err == DT_OK && op->kind != DT__COLL_BROADCAST && op->nelem)
			memcpy(op->work,
			       op->slots +
			           (size_t)RD_KEY_RESULT(op) * op->slot_bytes,
			       bytes_of(op, op->nelem));
		return err;
	}
	if (rd->extra >= 0) {
		err = dt__coll_wait(c, op, pred_got, (void *)(uintptr_t)0,
		                    rd->extra);
		if (err) {
			pthread_mutex_unlock(&c->mu);
			return err;
		}
		pthread_mutex_unlock(&c->mu);
		rd_combine(c, op, 0, rd->extra);
		pthread_mutex_lock(&c->mu);
	}
	for (int k = 1; k <= rd->rounds; k++) {
		int partner = c->rank ^ (1 << (k - 1));

		rd_payload(op, &p, &bytes, &flags);
		pthread_mutex_unlock(&c->mu);
		if ((err = send_data(c, op, partner, (uint64_t)k, 0, op->nelem,
		                     flags, p, bytes)))
			return err;
		pthread_mutex_lock(&c->mu);
		err = dt__coll_wait(c, op, pred_got, (void *)(uintptr_t)k,
		                    partner);
		if (err) {
			pthread_mutex_unlock(&c->mu);
			return err;
		}
		pthread_mutex_unlock(&c->mu);
		rd_combine(c, op, (uint64_t)k, partner);
		pthread_mutex_lock(&c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	if (op->redop == DT_COLL_AVG && op->kind != DT__COLL_BROADCAST)
		dt__coll_scale(op->dtype, op->work, op->nelem, c->size);
	if (rd->extra >= 0) {
		pthread_mutex_lock(&c->mu);
		rd_payload(op, &p, &bytes, &flags);
		pthread_mutex_unlock(&c->mu);
		if ((err = send_data(c, op, rd->extra,
		                     (uint64_t)RD_KEY_RESULT(op), 0, op->nelem,
		                     flags, p, bytes)))
			return err;
	}
	return DT_OK;
}

static dt_err
run_stream(dt_coll *c, coll_op *op)
{
	const dt__coll_sched *s = &op->sc;
	dt_err err = DT_OK;

	pthread_mutex_lock(&c->mu);
	if (op->ready_mode) {
		if (op->chain && s->to >= 0 &&
		    (err = dt__coll_wait(c, op, pred_ready, NULL, s->to)))
			goto out;
		if (s->from >= 0) {
			pthread_mutex_unlock(&c->mu);
			err = send_ready(c, op, s->from);
			pthread_mutex_lock(&c->mu);
			if (err)
				goto out;
		}
		if (!op->chain && s->to >= 0 &&
		    (err = dt__coll_wait(c, op, pred_ready, NULL, s->to)))
			goto out;
	}
	for (size_t i = 0; i < s->ntx; i++) {
		const dt__coll_msg *m = &s->tx[i];
		const uint8_t *base = m->from_src ? op->src : op->work;

		if (m->dep >= 0 &&
		    (err = dt__coll_wait(c, op, pred_rx,
		                         (void *)(uintptr_t)(m->dep + 1),
		                         s->from)))
			goto out;
		pthread_mutex_unlock(&c->mu);
		err =
		    send_data(c, op, s->to, i, m->off, m->n, 0,
		              base + bytes_of(op, m->off), bytes_of(op, m->n));
		pthread_mutex_lock(&c->mu);
		if (err)
			goto out;
		op->tx_sent = i + 1;
	}
	err = dt__coll_wait(c, op, pred_rx, (void *)(uintptr_t)s->nrx, s->from);
out:
	pthread_mutex_unlock(&c->mu);
	return err;
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

/* Send a notice (key, address) to every other rank. */
static dt_err
cma_notify(dt_coll *c, coll_op *op, uint64_t key, const void *addr)
{
	dt_err err;

	for (int p = 0; p < c->size; p++)
		if (p != c->rank &&
		    (err = send_data(c, op, p, key, 0, op->nelem, DT__CF_CMA,
		                     addr, 0)))
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
cma_fail_read(coll_op *op, int peer)
{
	return dt__fail(DT_EIO, "%s #%llu: reading from rank %d: %s",
	                dt__coll_kind_name(op->kind),
	                (unsigned long long)op->num, peer, dt_errmsg());
}

/*
 * Two ranks, push: write my input into the peer's slot for this
 * operation's parity, tell it, and reduce its input from my slot once it
 * says it wrote it. Nobody reads my buffers, so no FIN. A slot is written
 * again two operations later, which the peer can only reach after I have
 * finished this one (it needs my notice of the next).
 */
static dt_err
run_cma_push(dt_coll *c, coll_op *op)
{
	int peer = 1 - c->rank, slot = (int)(op->seq & 1);
	size_t bytes = bytes_of(op, op->nelem);
	uint64_t addr;
	dt_err err;

	if (dt__cma_write(c->pids[peer], c->push_remote[slot], op->src,
	                       bytes))
		return dt__fail(DT_EIO, "%s #%llu: writing to rank %d: %s",
		                dt__coll_kind_name(op->kind),
		                (unsigned long long)op->num, peer, dt_errmsg());
	if ((err = send_data(c, op, peer, DT__CMA_KEY_SRC, 0, op->nelem,
	                     DT__CF_CMA, NULL, 0)) ||
	    (err = cma_wait(c, op, DT__CMA_KEY_SRC, peer, &addr)))
		return err;
	/* Rank 0's data first, as everywhere. */
	if (peer < c->rank)
		dt__coll_reduce(op->dtype, op->redop, op->work,
		                c->push_slot[slot], op->src, op->nelem);
	else
		dt__coll_reduce(op->dtype, op->redop, op->work, op->src,
		                c->push_slot[slot], op->nelem);
	if (op->redop == DT_COLL_AVG)
		dt__coll_scale(op->dtype, op->work, op->nelem, c->size);
	return DT_OK;
}

static dt_err
run_cma(dt_coll *c, coll_op *op)
{
	size_t esz = op->esz, lo, len;
	uint64_t addr;
	dt_err err;

	if (op->cma_push)
		return run_cma_push(c, op);

	if (op->kind == DT__COLL_BROADCAST)
		err = cma_notify(c, op, DT__CMA_KEY_SRC,
		                 c->rank == op->root ? op->work : NULL);
	else if (op->cma_rs)
		err = cma_notify(c, op, DT__CMA_KEY_SRC, op->src);
	else
		err = cma_notify(c, op, DT__CMA_KEY_BLK, op->work);
	if (err)
		return err;

	if (op->cma_rs) {
		/* Reduce my range of everyone's input, in rank order. */
		const uint8_t *acc = op->src;
		size_t piece = c->bounce_cap / esz;

		if (op->cma_whole) {
			lo = 0;
			len = op->nelem;
		} else {
			cma_block(c, op, c->rank, &lo, &len);
		}
		for (int p = 0; p < c->size; p++) {
			if (p == c->rank)
				continue;
			if ((err = cma_wait(c, op, DT__CMA_KEY_SRC, p, &addr)))
				return err;
			for (size_t o = lo; o < lo + len; o += piece) {
				size_t k = DT_MIN(piece, lo + len - o);
				if (dt__cma_read(c->pids[p], c->bounce,
				                      addr + o * esz, k * esz))
					return cma_fail_read(op, p);
				/* Lower rank first, as recursive doubling. */
				if (p < c->rank && acc == op->src)
					dt__coll_reduce(op->dtype, op->redop,
					                op->work + o * esz,
					                c->bounce,
					                acc + o * esz, k);
				else
					dt__coll_reduce(op->dtype, op->redop,
					                op->work + o * esz,
					                acc + o * esz,
					                c->bounce, k);
			}
			acc = op->work;
		}
		if (op->redop == DT_COLL_AVG)
			dt__coll_scale(op->dtype, op->work + lo * esz, len,
			               c->size);
		if (op->cma_ag &&
		    (err = cma_notify(c, op, DT__CMA_KEY_BLK, op->work)))
			return err;
	}
	if (op->cma_ag) {
		/* Every other block from its owner, straight into place. */
		for (int p = 0; p < c->size; p++) {
			if (p == c->rank)
				continue;
			if ((err = cma_wait(c, op, DT__CMA_KEY_BLK, p, &addr)))
				return err;
			cma_block(c, op, p, &lo, &len);
			if (len &&
			    dt__cma_read(c->pids[p], op->work + lo * esz,
			                      addr + lo * esz, len * esz))
				return cma_fail_read(op, p);
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
				return cma_fail_read(op, op->root);
		}
	}
	/* Done reading everyone; wait until everyone is done with us. */
	for (int p = 0; p < c->size; p++)
		if (p != c->rank && (err = send_fin(c, op, p)))
			return err;
	pthread_mutex_lock(&c->mu);
	err = dt__coll_wait(c, op, pred_cma_fins,
	                    (void *)(uintptr_t)(c->size - 1), -1);
	pthread_mutex_unlock(&c->mu);
	return err;
}

static void
run_local(dt_coll *c, coll_op *op)
{
	size_t esz = op->esz;

	(void)c;
	switch (op->kind) {
	case DT__COLL_ALLREDUCE:
		if (op->ntensors <= 1 && op->send && op->send != op->recv &&
		    op->count)
			memcpy(op->recv, op->send, op->count * esz);
		break;
	case DT__COLL_ALLGATHERV:
		if (op->send && op->send != op->recv && op->counts[0])
			memcpy(op->recv, op->send, op->counts[0] * esz);
		break;
	case DT__COLL_REDUCE_SCATTER:
		if (op->send && op->send != op->recv && op->count)
			memcpy(op->recv, op->send, op->count * esz);
		break;
	default:
		break;
	}
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
	dt_err err = DT_OK;

	switch (op->algo) {
	case DT__ALG_LOCAL:
		run_local(c, op);
		break;
	case DT__ALG_RD:
		err = run_rd(c, op);
		break;
	case DT__ALG_STREAM:
		err = run_stream(c, op);
		break;
	case DT__ALG_CMA:
		err = run_cma(c, op);
		break;
	}
	if (err == DT_OK)
		finish_ok(c, op);
	return err;
}
