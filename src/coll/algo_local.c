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

const dt__coll_algo dt__coll_algo_local = {
    .name = "local",
    .run = run_local,
};
