/*
 * algo_local.c - a communicator of one rank: the result is the input,
 * copied where the caller wants it. No messages.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/algo.h"

dt_err
dt__coll_local_prepare(dt_coll *c, coll_op *op)
{
	(void)c;
	op->algo = DT__ALG_LOCAL;
	return DT_OK;
}

static dt_err
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
	return DT_OK;
}

static void
local_release(dt_coll *c, coll_op *op)
{
	(void)c;
	(void)op;
}

static int
local_needs(dt_coll *c, const coll_op *op, int peer)
{
	(void)c;
	(void)op;
	(void)peer;
	return 0;
}

static dt_err
local_dest(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h, void **dest,
           int *reduce)
{
	(void)c;
	(void)h;
	*dest = NULL;
	*reduce = 0;
	return dt__coll_unexpected(op, peer);
}

static dt_err
local_deliver(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
              const void *payload)
{
	(void)c;
	(void)h;
	(void)payload;
	return dt__coll_unexpected(op, peer);
}

static void
local_done(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
           uint64_t remote)
{
	(void)c;
	(void)op;
	(void)peer;
	(void)h;
	(void)remote;
}

static void
local_fin(dt_coll *c, coll_op *op, int peer)
{
	(void)c;
	(void)op;
	(void)peer;
}

const dt__coll_algo dt__coll_algo_local = {
    .name = "local",
    .run = run_local,
    .release = local_release,
    .needs = local_needs,
    .dest = local_dest,
    .deliver = local_deliver,
    .done = local_done,
    .fin = local_fin,
};

