/*
 * p2p.h - point-to-point messages (p2p.c): what the router (comm.c), the
 * public calls (api.c) and the executor's waits (exec.c) need of them.
 */
#ifndef DT_COLL_P2P_H
#define DT_COLL_P2P_H

#include "coll/exec.h"

/* Where a COLL_P2P frame's payload goes (I/O thread, mu held): NULL for
 * the connection's buffer, DT_VAN_DISCARD when over the cap. */
void *dt__coll_p2p_dest(dt_coll *c, int peer, const dt_msg_hdr *h);
/* A COLL_P2P or COLL_P2P_ACK frame from rank peer (I/O thread, mu held). */
void dt__coll_p2p_on_msg(dt_coll *c, int peer, const dt_msg *m);
/* Rank peer (every rank when peer < 0) is lost: fail the requests that
 * involve it with err and why (mu held). */
void dt__coll_p2p_lost(dt_coll *c, int peer, dt_err err, const char *why);
/* Send the acknowledgements the I/O thread queued (mu held, dropped while
 * sending); whether any are queued. */
void dt__coll_p2p_flush(dt_coll *c);
int dt__coll_p2p_pending_acks(const dt_coll *c);
/* Wait for r with the DT_COLL_TIMEOUT deadline, free it and return its
 * result (mu not held). */
dt_err dt__coll_p2p_wait(dt_coll *c, dt__p2p_req *r);
/* Whether r has completed (mu not held). */
int dt__coll_p2p_done(dt_coll *c, const dt__p2p_req *r);
/* Free the queues at the communicator's end (no other thread left). */
void dt__coll_p2p_free(dt_coll *c);

#endif
