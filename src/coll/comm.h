/*
 * comm.h - the router (comm.c): attaching a communicator to its node,
 * routing every collective message to the operation it belongs to, and
 * the executor that runs one operation at a time through its algorithm.
 */
#ifndef DT_COLL_COMM_H
#define DT_COLL_COMM_H

#include "coll/state.h"

/* comm.c: the router and the executor. */
/* The collectives' app class (the COLL command range). */
extern const dt__app_class dt__coll_app;
dt_err dt__coll_attach(dt_coll *c);
/* Run op to completion in the calling thread (the executor). free_exec:
 * with op's end, under the same lock, clear exec_busy and hand what was
 * queued meanwhile to the background thread (a call run inline). */
void dt__coll_execute(dt_coll *c, coll_op *op, int free_exec);
/* (mu held) The rank of node id in the membership now, or -1. */
int dt__coll_rank_of_id(const dt_coll *c, int id);
/* The early queue: free one message; drop those of finished operations
 * (mu held). */
void dt__coll_early_free(coll_early *e);
void dt__coll_early_purge(dt_coll *c);

/* reform.c: an elastic communicator's membership changes. */
/* (mu held) Note a change not yet taken (the first reason stays) and fail
 * the running operation with DT_EMEMBERSHIP and it. */
void dt__coll_elastic_change(dt_coll *c, const char *fmt, ...) DT_PRINTF(2, 3);
/* The node lost peer_id (on_fail of an elastic communicator). */
void dt__coll_elastic_lost(dt_coll *c, int peer_id, dt_err err);
/* The node's on_membership hook. */
void dt__coll_on_membership(void *arg, dt_node *n, uint64_t epoch, int gone,
                            int lost);

#endif
