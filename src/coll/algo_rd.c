/*
 * algo_rd.c - recursive doubling (latency-optimal, for messages up to
 * DT_COLL_RING_THRESHOLD bytes): ranks beyond the largest power of two
 * fold into a partner first; then log2(p) rounds exchange the whole buffer
 * with rank ^ 2^k and reduce. Partners reduce lower rank first, so every
 * rank computes the same bits. Small broadcasts and barriers use the same
 * exchange (a broadcast sends the data once it holds it, an empty message
 * before), so their completion, like an allreduce's, depends on every rank.
 * Its data is sent eagerly: a message that arrives before its operation is
 * posted is buffered by the router (comm.c).
 */
#include <stdlib.h>
#include <string.h>

#include "coll/algo.h"

/* Message keys: 0 = fold from the extra rank, 1..R = rounds, R+1 =
 * result back to the extra rank. */
#define RD_KEY_RESULT(op) ((op)->rd.rounds + 1)

dt_err
dt__coll_rd_prepare(dt_coll *c, coll_op *op, size_t nelem)
{
	size_t bytes = dt__coll_bytes(op, nelem);
	size_t nslots;

	op->algo = DT__ALG_RD;
	op->nelem = nelem;
	dt__coll_rd_plan(c->rank, c->size, &op->rd);
	nslots = (size_t)op->rd.rounds + 2;
	op->slot_bytes = (bytes + 63) & ~(size_t)63;
	if (op->slot_bytes) {
		op->slots = dt__buf_reserve(&c->slotbuf, &c->slotbuf_cap,
		                            nslots * op->slot_bytes);
		if (op->slots == NULL)
			return DT_ENOMEM;
	}
	return DT_OK;
}

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

static dt_err
rd_dest(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h, void **dest,
        int *reduce)
{
	*dest = NULL;
	*reduce = 0;
	uint64_t key = h->key;
	uint64_t full = dt__coll_bytes(op, op->nelem);
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
	dt__coll_op_fail(
	    op, DT_EPROTO, 1,
	    "%s #%llu: message of %llu bytes from rank %d "
	    "(expected %llu)",
	    dt__coll_kind_name(op->kind), (unsigned long long)op->num,
	    (unsigned long long)h->payload_len, peer, (unsigned long long)full);
	return DT_EPROTO;
}

static void
rd_done(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h, uint64_t remote)
{
	(void)c;
	(void)peer;
	(void)remote;
	op->got[h->key] = 1;
	if (op->kind == DT__COLL_BROADCAST && op->bc_valid == 2 &&
	    (h->arg2 & DT__CF_HAS_DATA))
		op->bc_valid = 1;
}

static int
rd_needs(dt_coll *c, const coll_op *op, int peer)
{
	for (uint64_t k = 0; k <= (uint64_t)RD_KEY_RESULT(op); k++)
		if (!op->got[k] && rd_expected_peer(c, op, k) == peer)
			return 1;
	return 0;
}

static int
pred_got(coll_op *op, void *arg)
{
	return op->got[(uintptr_t)arg];
}

/* What this rank sends in a recursive-doubling message (mu held). */
static void
rd_payload(coll_op *op, const void **p, size_t *bytes, uint32_t *flags)
{
	*flags = 0;
	*p = op->work;
	*bytes = dt__coll_bytes(op, op->nelem);
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
		if ((err = dt__coll_send_data(c, op, rd->extra_of, 0, 0,
		                              op->nelem, flags, p, bytes)))
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
			       dt__coll_bytes(op, op->nelem));
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
		if ((err = dt__coll_send_data(c, op, partner, (uint64_t)k, 0,
		                              op->nelem, flags, p, bytes)))
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
		if ((err = dt__coll_send_data(c, op, rd->extra,
		                              (uint64_t)RD_KEY_RESULT(op), 0,
		                              op->nelem, flags, p, bytes)))
			return err;
	}
	return DT_OK;
}

const dt__coll_algo dt__coll_algo_rd = {
    .name = "recursive doubling",
    .run = run_rd,
    .needs = rd_needs,
    .dest = rd_dest,
    .done = rd_done,
};
