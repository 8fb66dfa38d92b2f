/*
 * exec.h - the services an algorithm uses to run an operation (exec.c):
 * send, wait with a deadline, fail with a reason, buffers. The router
 * (comm.c) uses them too; they call nothing above them.
 */
#ifndef DT_COLL_EXEC_H
#define DT_COLL_EXEC_H

#include "coll/state.h"

/* exec.c: what the algorithms and the router share. */
/* Send a collective message to worker rank; h's cmd etc. set by caller. */
dt_err dt__coll_send(dt_coll *c, int rank, dt_msg_hdr *h, const void *meta,
                     uint32_t meta_len, const void *payload, size_t bytes);
/*
 * Wait (c->mu held) until pred(op, arg) or a failure, answering stall
 * queries meanwhile. waiting_on names the rank whose message is awaited,
 * for stall reports (-1 unknown). DT_ETIMEDOUT once op has made no
 * progress for DT_COLL_TIMEOUT (the executor then reports the stall).
 */
dt_err dt__coll_wait(dt_coll *c, coll_op *op, int (*pred)(coll_op *, void *),
                     void *arg, int waiting_on);
/* Answer queued stall queries (mu held, dropped while sending). */
void dt__coll_answer_queries(dt_coll *c);
/* Fail op with a reason found here (I/O thread or executor, mu held). */
void dt__coll_op_fail(coll_op *op, dt_err err, int need_abort, const char *fmt,
                      ...) DT_PRINTF(4, 5);
/* DT_COLL_TIMEOUT in nanoseconds. */
uint64_t dt__coll_timeout_ns(const dt_coll *c);
/* Signal progress to the executor (mu held). */
void dt__coll_wake(dt_coll *c);
/* Wait (mu held) for progress or until until_ns, reading the network in
 * this thread for a short while first (dt__node_wait_gen). */
void dt__coll_cv_wait_until(dt_coll *c, uint64_t until_ns);
/* A DATA message of op (flags DT__CF_*; with DT__CF_CMA, payload is the
 * address the receiver reads from and nothing is sent), a FIN, a READY. */
dt_err dt__coll_send_data(dt_coll *c, coll_op *op, int to, uint64_t key,
                          uint64_t off, uint64_t n, uint32_t flags,
                          const void *payload, size_t bytes);
dt_err dt__coll_send_fin(dt_coll *c, coll_op *op, int to);
dt_err dt__coll_send_ready(dt_coll *c, coll_op *op, int to);
/* Fail op (mu held): peer called another operation (its signature
 * theirs), both named, the lower rank's first, so every rank says the
 * same. */
void dt__coll_mismatch(dt_coll *c, coll_op *op, int peer,
                       const dt__coll_sig *theirs);
/* Fail op: a data message from peer that its algorithm does not expect. */
dt_err dt__coll_unexpected(coll_op *op, int peer);

#endif
