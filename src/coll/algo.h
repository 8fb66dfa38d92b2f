/*
 * algo.h - the collective algorithms behind one ops table. Each algorithm
 * is a file (algo_local.c, algo_rd.c, algo_stream.c, algo_cma.c,
 * algo_hier.c) that
 * fills a dt__coll_algo; algo.c chooses one per operation (its prepare
 * function sets op->algo) and the router (comm.c) reaches it only through
 * the dt__coll_algo_* calls, which go through the ops. Algorithms call down
 * into exec.c (send, wait, fail) and the pure planning of plan.c, never up into
 * the router.
 *
 * Adding an algorithm: a file with its prepare function and its ops, an
 * entry in enum DT__ALG_* (comm.h) and in dt__coll_algo_of's table, and a
 * rule in dt__coll_algo_prepare.
 */
#ifndef DT_COLL_ALGO_H
#define DT_COLL_ALGO_H

#include "coll/exec.h"
#include "coll/state.h"

/* Every op but run may be NULL: no such message (dest, deliver: a
 * protocol error), nothing to do (release, done, fin), nobody needed
 * (needs). */
typedef struct dt__coll_algo {
	const char *name;
	/* Run op to completion (executor, mu not held). */
	dt_err (*run)(dt_coll *c, coll_op *op);
	/* Free what prepare allocated (after the I/O thread is done). */
	void (*release)(dt_coll *c, coll_op *op);
	/* Does op still need a message from (or a send to) rank peer? (mu
	 * held; a lost peer that is still needed fails the operation) */
	int (*needs)(dt_coll *c, const coll_op *op, int peer);
	/*
	 * A DATA message for the posted op (mu held): check it against the
	 * schedule and decide where its payload goes: *dest (DT_VAN_DISCARD
	 * to drop it, NULL when there is nothing to place), or *reduce = 1
	 * when the bytes go to deliver. An error fails op.
	 */
	dt_err (*dest)(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
	               void **dest, int *reduce);
	/* Process a payload not yet in its final place (mu NOT held; the
	 * caller holds io_refs): reduce it. */
	dt_err (*deliver)(dt_coll *c, coll_op *op, int peer,
	                  const dt_msg_hdr *h, const void *payload);
	/* A message was fully processed (mu held); remote is the address a
	 * same-host notice carried. */
	void (*done)(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
	             uint64_t remote);
	/* A FIN from peer (mu held). */
	void (*fin)(dt_coll *c, coll_op *op, int peer);
	/* A READY from peer (mu held): 1 if the algorithm expected it, 0 is
	 * a protocol error. NULL: the ring's rule (stream, from sc.to). */
	int (*ready)(dt_coll *c, coll_op *op, int peer);
} dt__coll_algo;

extern const dt__coll_algo dt__coll_algo_local;
extern const dt__coll_algo dt__coll_algo_rd;
extern const dt__coll_algo dt__coll_algo_stream;
extern const dt__coll_algo dt__coll_algo_cma;
extern const dt__coll_algo dt__coll_algo_hier;
extern const dt__coll_algo dt__coll_algo_fbox;

/* algo.c: choose and prepare op's algorithm (executor, before posting),
 * run it (mu not held) and release it. */
dt_err dt__coll_algo_prepare(dt_coll *c, coll_op *op);
dt_err dt__coll_algo_run(dt_coll *c, coll_op *op);
void dt__coll_algo_release(dt_coll *c, coll_op *op);
/* A release for algorithms that hold only their schedule (op->sc). */
void dt__coll_release_sched(dt_coll *c, coll_op *op);

/* The router's calls: through op's algorithm's ops, with the defaults
 * above. */
dt_err dt__coll_algo_dest(dt_coll *c, coll_op *op, int peer,
                          const dt_msg_hdr *h, void **dest, int *reduce);
dt_err dt__coll_algo_deliver(dt_coll *c, coll_op *op, int peer,
                             const dt_msg_hdr *h, const void *payload);
void dt__coll_algo_done(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
                        uint64_t remote);
void dt__coll_algo_fin(dt_coll *c, coll_op *op, int peer);
int dt__coll_algo_needs(dt_coll *c, const coll_op *op, int peer);

/* The algorithm op was prepared for. */
const dt__coll_algo *dt__coll_algo_of(const coll_op *op);

/* The algorithms' prepare functions (algo.c calls them; executor). */
dt_err dt__coll_local_prepare(dt_coll *c, coll_op *op);
/* Recursive doubling over nelem elements of op->work. */
dt_err dt__coll_rd_prepare(dt_coll *c, coll_op *op, size_t nelem);
/* A ring over blocks [offs[b], +lens[b]): rs reduce-scatter, ag allgather,
 * ready a READY handshake first. */
dt_err dt__coll_ring_prepare(dt_coll *c, coll_op *op, const size_t *offs,
                             const size_t *lens, int rs, int ag, int ready);
/* A pipelined chain from the root (broadcast). */
dt_err dt__coll_chain_prepare(dt_coll *c, coll_op *op);
/* Same-host memory: rs reduce my block of everyone's input, ag gather
 * every block, whole (2 ranks) reduce the other's whole input, push write
 * my input into every peer's slot (2: by halves, 2 ranks only). */
dt_err dt__coll_cma_prepare(dt_coll *c, coll_op *op, int rs, int ag, int whole,
                            int push);
/* Ranks on several hosts (c->hier_map): inside each host, across the
 * hosts, inside each host again (allreduce). */
dt_err dt__coll_hier_prepare(dt_coll *c, coll_op *op);
/* At attach: c->hier_map from the ranks' hosts (host[r]: rank r's host
 * number, equal for one host, DT_HOST_UNKNOWN for one not known; stays
 * NULL when the ranks do not make a hierarchy); DT_ENOMEM only. */
dt_err dt__coll_hier_map(dt_coll *c, const uint32_t *host);
/* Is the hierarchical allreduce op's algorithm? (DTRAIN_COLL_HIER) */
int dt__coll_hier_wanted(const dt_coll *c, const coll_op *op);
/* 2 ranks of one host, up to c->fbox_max: the fast boxes. */
dt_err dt__coll_fbox_prepare(dt_coll *c, coll_op *op);
/* Does op's allreduce fit the shared areas (c->share_max; 0 when there
 * are none)? Each block, where the areas' layout puts it, ends within a
 * half: with 2 ranks each half holds one block, so twice the size fits. */
int dt__coll_share_fits(const dt_coll *c, const coll_op *op);
/* The bytes of each other rank's push slot this rank offers (api.c's
 * start-up probe allocates two areas of size - 1 of them). */
size_t dt__coll_push_bytes(const dt_coll *c);

#endif
