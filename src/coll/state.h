/*
 * state.h - the communicator and operation objects shared by comm.c (the
 * router: set-up, message routing, execution, safety), exec.c (the
 * services an algorithm uses), algo.c and algo_*.c (the algorithms, behind
 * the ops of algo.h) and api.c (the public calls).
 *
 * Threads and ownership:
 *   - The node's I/O thread delivers every collective message (on_msg,
 *     payload_dest, on_fail in comm.c). It never blocks and never sends:
 *     it reduces or stores data for the operation being executed, queues
 *     messages of operations not yet started (with a memory cap), records
 *     failures, and signals c->cv.
 *   - The executor runs one operation at a time, in sequence order: the
 *     calling thread for a synchronous call when nothing is queued, else
 *     the background thread (one per communicator, started by init) that
 *     also answers stall queries while the program is busy elsewhere.
 *     The executor does every send.
 *   - c->mu guards every field marked (mu), here and in coll_op. The bulk
 *     data work of the I/O thread (copying a payload into place, reducing)
 *     runs outside the lock while op->io_refs counts it; an operation is
 *     finished only when io_refs is back to zero, so no byte lands in a
 *     user buffer after the call returns.
 */
#ifndef DT_COLL_STATE_H
#define DT_COLL_STATE_H

#include "coll/coll_impl.h"
#include "common/quant.h"
#include "common/spin.h"
#include "common/table.h"
#include "net/cma.h"
#include "obs/obs.h"

/* DATA flags (arg2). */
#define DT__CF_HAS_DATA 1u /* recursive-doubling broadcast: payload valid */
#define DT__CF_CMA                                                             \
	2u /* no payload: read it from the sender's memory                     \
	      at the address after the signature (meta) */
#define DT__COLL_META_CMA (DT__COLL_SIG_LEN + 8)

enum {
	DT__ALG_LOCAL = 0,  /* one rank */
	DT__ALG_RD = 1,     /* recursive doubling over TCP */
	DT__ALG_STREAM = 2, /* ring or chain, pipelined chunks */
	DT__ALG_CMA = 3,    /* same host: direct reads of peers' memory */
	DT__ALG_HIER = 4,   /* hosts: inside each, then across, then inside */
	DT__ALG_FBOX = 5,   /* 2 ranks of one host: fast boxes, no message */
};
/* The control page before a shared area's fast boxes (algo_fbox.c). */
#define DT__FBOX_CTL 4096

/* Keys of DT__ALG_CMA notices. */
#define DT__CMA_KEY_SRC 0 /* my input (or broadcast buffer) is at addr */
#define DT__CMA_KEY_BLK 1 /* my finished block is in my output at addr */

typedef struct dt__p2p_req dt__p2p_req; /* p2p.c */

struct dt_coll_handle {
	dt_coll *c;
	dt__p2p_req *p2p; /* a point-to-point request, else NULL */
	int done;         /* (mu) */
	dt_err err;       /* (mu) */
	char msg[1024];
};

typedef struct coll_op coll_op;
struct coll_op {
	uint64_t seq;
	uint64_t num; /* the number users see: seq less the set-up's ops */
	dt__coll_sig sig;
	int kind;
	dt_dtype dtype;
	dt_coll_op redop;
	int root;
	size_t esz;
	const void *send; /* user input (NULL: in place) */
	void *recv;       /* user output */
	size_t count;     /* elements: allreduce/bcast count, allgatherv total,
	                     reduce_scatter per-rank count */
	size_t *counts;   /* allgatherv per-rank counts (owned) */
	dt_coll_tensor *tensors; /* fused group (owned), ntensors > 1 */
	int ntensors;
	dt_coll_handle **handles; /* completed with the result (owned array) */
	int nhandles;
	dt_lnode qlink; /* in c->queue (mu) */

	/* Execution. */
	int algo;
	uint8_t *work;      /* result buffer the algorithm builds */
	const uint8_t *src; /* this rank's input (== work when in place) */
	size_t nelem;       /* elements in work */
	dt__coll_rd rd;
	uint8_t *slots; /* recursive doubling: one slot per key */
	size_t slot_bytes;
	dt__coll_sched sc;
	int ready_mode; /* stream: data only after the receiver's READY */
	int chain;      /* stream: READY goes upstream once downstream's came */

	/* (mu) */
	uint8_t got[72]; /* recursive doubling: keys received */
	int bc_valid;    /* recursive-doubling broadcast holds the data */
	size_t rx_done;  /* stream: rx entries processed */
	size_t tx_sent;  /* stream: tx entries sent */
	int ready_to;    /* stream: READY from sc.to arrived (hier: bit 1,
	                    READY from hier.to2: bit 2) */
	/* DT__ALG_CMA, by rank: notices seen and their addresses, FINs. */
	uint8_t *cma_got;   /* [3 * size]: key * size + rank; row 2: FIN */
	uint64_t *cma_addr; /* [2 * size] */
	int cma_fins;
	int cma_rs, cma_ag; /* phases: reduce-scatter, allgather */
	int cma_whole;      /* reduce-scatter over the whole buffer */
	int cma_push;       /* 2 ranks: write into the peer's slot; 2: only
	                       the peer's half, and each reduces its own half
	                       and writes it into the peer's output */
	int cma_shared;     /* an allreduce through the shared areas */
	/* DT__ALG_HIER (algo_hier.c): the other hosts' ring neighbours, the
	 * phases' message counts (dt__coll_hier_sched) and, (mu), the
	 * messages processed from from2. */
	struct {
		int to2, from2;
		size_t n[6];
		size_t rx_done2;
		/* Phase 2's partial sums land in scratch (my local block,
		 * which starts at element boff); the executor adds them in,
		 * rx entries before applied done. */
		uint8_t *scratch;
		size_t boff, applied;
	} hier;
	int io_refs;    /* I/O-thread data work in progress */
	dt_err err;     /* first failure, DT_OK if none */
	int need_abort; /* failure found here: tell the other ranks */
	uint64_t progress_ns;
	int waiting_on; /* rank whose message the executor waits for */
	char msg[1024]; /* (last: an op used again clears what is before it,
	                   api.c) */
};

/* A DATA or READY message's metadata (coll_msg.c, docs/protocol.md). */
typedef struct dt__coll_meta {
	dt__coll_sig sig;
	int has_sig;
	int has_remote;  /* DATA read from the sender's memory */
	uint64_t remote; /* its address there */
} dt__coll_meta;

/* Decode the metadata of a message of command cmd (nothing to decode for
 * FIN, ABORT's text, STALL_*); DT_EPROTO if a DATA or READY message has no
 * whole signature. */
dt_err dt__coll_meta_decode(const uint8_t *meta, size_t len, unsigned cmd,
                            dt__coll_meta *out);
/* Encode a DATA / READY metadata block into out; returns its length. */
uint32_t dt__coll_meta_encode(const dt__coll_sig *sig, int with_remote,
                              uint64_t remote, uint8_t out[DT__COLL_META_CMA]);

/* A message of an operation not yet started (or a control message). */
typedef struct coll_early {
	dt_lnode link; /* in c->early */
	dt_msg_hdr h;
	int peer; /* its sender's rank (-1: not a member yet) */
	int id;   /* its sender's node id */
	dt__coll_sig sig;
	int has_sig;
	char *text;      /* ABORT reason */
	uint64_t remote; /* CMA address of the data */
	void *payload;   /* copy, h.payload_len bytes */
	int dropped;     /* the payload was dropped (over the cap) */
} coll_early;

typedef struct coll_query {
	int peer;
	uint64_t seq;
} coll_query;

#define DT__COLL_MAX_QUERIES 256

typedef struct coll_pending {
	int kind; /* DT__COLL_ALLREDUCE (fusable), or 0: prepared below */
	struct coll_op *prepared; /* a non-allreduce operation, queued as is */
	const void *send;
	void *recv;
	size_t count;
	const size_t *counts;
	dt_dtype dtype;
	dt_coll_op op;
	int root;
	dt_coll_handle *h;
} coll_pending;

struct dt_coll {
	dt_node *node;  /* NULL for a one-process communicator */
	int own_node;   /* dt_coll_init joined: finalize stops the node */
	dt_node *sched; /* in-process scheduler (mpirun/srun rank 0) */
	pthread_t sched_thread;
	int sched_started;
	dt_err sched_err;
	char sched_msg[512];
	struct dt__rdv *rdv; /* the mpirun/srun rendezvous (rendezvous.c) */
	int rank, size, local_rank, local_size;
	int base_id; /* node id of worker rank 0 */
	/* By rank, the node id (c->size of them); by node id less base_id
	 * (nworkers of them), the rank or -1. Without elasticity rank r is
	 * node base_id + r for good; an elastic communicator re-forms them
	 * (mu) when the program takes a membership change (comm.c,
	 * dt__coll_reform), between operations only. */
	int *ids;
	int *rank_of;
	int nworkers; /* the job's workers at the start */
	/* Elastic jobs (DTRAIN_ELASTIC=1): the membership epoch this
	 * communicator runs in (mu; the high bits of every sequence number,
	 * DT__COLL_EPOCH_SHIFT), and a change announced but not yet taken -
	 * a lost rank or a newer membership - which fails every operation
	 * with DT_EMEMBERSHIP and change_msg until it is. left: this rank
	 * left the job (its schedule), finalize meets nobody. change_epoch:
	 * the newest membership announced as a change, which a re-form over
	 * an older one leaves pending (reform.c). syncing: the program is
	 * taking a change (coll/elastic.c), when a newer membership without
	 * one of the ranks is a change whatever its kind. */
	int elastic;
	uint64_t epoch;
	int changing;
	char change_msg[256];
	int left;
	uint64_t change_epoch;
	int syncing;
	uint64_t seq_base; /* operations run by the set-up itself */
	int cma;         /* ranks read each other's memory (process_vm_readv) */
	int *pids;       /* by rank */
	uint8_t *bounce; /* the executor's buffer for reducing CMA reads */
	size_t bounce_cap;
	/* Ranks on one host: each has two slot areas (by operation parity)
	 * the others write their inputs into, push_max bytes per other rank
	 * (algo_cma.c, push); push_max 0 when not in use. */
	uint8_t *push_slot[2];
	uint64_t *push_remote; /* [2 * size]: rank r's areas at 2r, 2r + 1 */
	size_t push_max;
	/* More than 2 ranks on one host: each offers a shared area of
	 * share_bytes (net/cma.c), share_mine here, which the others map
	 * read-only (share_peer[r]: rank r's; NULL for me): two halves of
	 * share_max, for allreduces up to that size (algo_cma.c, shared);
	 * share_max 0 when not in use. */
	uint8_t *share_mine;
	const uint8_t **share_peer;
	size_t share_max, share_bytes;
	/* 2 ranks on one host: after the two halves, each area holds a
	 * control page and two fast boxes of fbox_max bytes (algo_fbox.c),
	 * mine at fbox_mine, the peer's at fbox_peer; fbox_max 0 when not in
	 * use. */
	uint8_t *fbox_mine;
	const uint8_t *fbox_peer;
	size_t fbox_max;
	/* The hierarchy of hosts (comm.c, at attach): hier_map[r] is rank r's
	 * position host * hier_local + local index, hier_map[size + p] the
	 * rank at position p; NULL when the ranks are not on 2 or more hosts
	 * with the same number (2 or more) on each, or the job is elastic. */
	int *hier_map;
	int hier_hosts, hier_local;
	dt__coll_cfg cfg;

	pthread_mutex_t mu;
	pthread_cond_t cv;      /* executor: progress of the op (MONOTONIC) */
	dt_gen cv_gen;          /* bumped with every cv broadcast */
	pthread_cond_t bg_cv;   /* background thread: work, queries, stop */
	pthread_cond_t done_cv; /* callers: a handle completed */
	uint64_t next_seq;      /* (mu) operations called so far */
	uint64_t done_seq;      /* (mu) last operation finished */
	coll_op *cur;           /* (mu) operation being executed */
	dt_list queue;          /* (mu) queued operations */
	int exec_busy;          /* (mu) an executor is running an operation */
	/* The operation of a synchronous call run in the calling thread,
	 * used again from call to call (api.c, run_inline): only the thread
	 * that set exec_busy for it touches it. */
	coll_op *inline_op;
	int stop;        /* (mu) background thread: leave */
	dt_list early;   /* (mu) early messages */
	size_t eq_bytes; /* (mu) */
	dt_err broken;   /* (mu) sticky failure (lost peer, job abort) */
	char broken_msg[1024];
	uint8_t *dead;        /* (mu) by rank */
	uint8_t *ext;         /* (mu) by rank: the van writes into op memory */
	uint64_t stall_seq;   /* (mu) stall query in progress */
	int64_t *stall_reply; /* (mu) by rank: ops called, -1 no answer */
	coll_query queries[DT__COLL_MAX_QUERIES]; /* (mu) to answer */
	int nqueries;                             /* (mu) */
	pthread_t bg;
	int bg_started;

	/* Point-to-point messages (p2p.c). */
	dt_list p2p_sends; /* (mu) sends awaiting their acknowledgement */
	dt_list p2p_recvs; /* (mu) posted receives, oldest first */
	dt_list p2p_unexp; /* (mu) frames not yet received, oldest first */
	dt_list p2p_acks;  /* (mu) acknowledgements owed to senders */
	size_t p2p_bytes;  /* (mu) payload bytes in p2p_unexp */
	uint64_t p2p_next; /* (mu) id of the last frame sent */

	/* Group recording (the calling thread only). */
	int in_group;
	coll_pending *pend;
	size_t npend, pend_cap;

	/* Buffers of the executor (only the executing thread resizes them,
	 * between operations). */
	uint8_t *fusion;
	size_t fusion_cap;
	uint8_t *scratch;
	size_t scratch_cap;
	uint8_t *slotbuf;
	size_t slotbuf_cap;

	/* The distributed optimizer's compression (the calling thread). */
	dt_quant_spec dopt;
	float *dopt_res; /* 2bit/1bit: the gradient buffer's residual */
	size_t dopt_res_n;
	uint8_t *dopt_buf; /* this rank's body, then every rank's */
	size_t dopt_buf_cap;
	size_t *dopt_layout; /* the gradient buffer's tensors (NULL: one) */
	int dopt_ntensors;
};

/* Sequence numbers of membership epoch e start at e << this: a message
 * of an older epoch is then below done_seq (dropped by name), one of a
 * newer epoch waits in the early queue until this rank takes it. */
#define DT__COLL_EPOCH_SHIFT 40

/* The node id of rank r of c's membership now. */
static inline int
dt__coll_peer_id(const dt_coll *c, int r)
{
	return c->ids ? c->ids[r] : c->base_id + r;
}

/* Take the node's newest membership (elastic jobs): ranks become
 * positions in its sorted list, sequence numbers start at its epoch.
 * Between operations only (the caller's thread, nothing queued). *changed
 * 1 if it was newer. DT_EMEMBERSHIP if this rank is not in it. */
dt_err dt__coll_reform(dt_coll *c, int *changed);

static inline size_t
dt__coll_bytes(const coll_op *op, size_t n)
{
	return n * op->esz;
}

#endif
