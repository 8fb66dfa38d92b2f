/*
 * coll_impl.h - internals of the collectives shared by the files of
 * src/coll/ and the unit tests: the reduction kernels (reduce.c), the pure
 * arithmetic of blocks, chunks, ring schedules and tensor fusion (plan.c),
 * operation signatures (plan.c), and the communicator object (comm.c)
 * with the algorithms that run on it (algo.c).
 *
 * Nothing here touches the network except comm.c and algo.c; everything
 * in the first half is a pure function the unit tests call directly.
 */
#ifndef DT_COLL_IMPL_H
#define DT_COLL_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/coll.h"
#include "core/core.h"

/* ---- reduction kernels (reduce.c) ---- */

/* dst[i] = a[i] op b[i] for n elements; dst may alias a or b. AVG reduces
 * as SUM (the division is dt__coll_scale's). */
void dt__coll_reduce(dt_dtype dtype, dt_coll_op op, void *dst, const void *a,
                     const void *b, size_t n);
/* buf[i] /= divisor (integer division truncating toward zero for int32). */
void dt__coll_scale(dt_dtype dtype, void *buf, size_t n, int divisor);
int dt__coll_dtype_valid(int dtype);
int dt__coll_op_valid(int op);

/* ---- operation kinds and signatures (plan.c) ---- */

enum dt__coll_kind {
	DT__COLL_ALLREDUCE = 1,
	DT__COLL_BROADCAST = 2,
	DT__COLL_ALLGATHERV = 3,
	DT__COLL_REDUCE_SCATTER = 4,
	DT__COLL_BARRIER = 5,
};
const char *dt__coll_kind_name(int kind); /* "allreduce" */

/*
 * What every rank must agree on for one operation. Sent in the metadata of
 * every data and ready message and compared by the receiver; hash covers
 * what a count cannot (per-rank allgather counts, a fused group's tensor
 * sizes) and is 0 otherwise.
 */
typedef struct dt__coll_sig {
	uint8_t kind;
	uint8_t dtype;
	uint8_t op;
	uint8_t ntensors; /* tensors fused into this operation (0 or 1: one) */
	uint32_t root;
	uint64_t count; /* elements (allgatherv: the total) */
	uint64_t hash;
} dt__coll_sig;

#define DT__COLL_SIG_LEN 24
void dt__coll_sig_encode(const dt__coll_sig *s, uint8_t out[DT__COLL_SIG_LEN]);
/* DT_EPROTO if len is under DT__COLL_SIG_LEN (more bytes may follow). */
dt_err dt__coll_sig_decode(const uint8_t *in, size_t len, dt__coll_sig *s);
int dt__coll_sig_equal(const dt__coll_sig *a, const dt__coll_sig *b);
/* "allreduce(count=1024, float32, sum)" */
void dt__coll_sig_describe(const dt__coll_sig *s, char *out, size_t cap);
/* 64-bit FNV-1a over n counts (the allgatherv / group hash). */
uint64_t dt__coll_hash_counts(const size_t *counts, size_t n);

/* ---- blocks and chunks (plan.c) ---- */

/* Block i of count elements cut into n near-equal blocks (the first
 * count % n blocks have one more). */
void dt__coll_block(size_t count, int n, int i, size_t *off, size_t *len);
/* Chunks of len elements at most chunk_elems each (0 for an empty block). */
size_t dt__coll_nchunks(size_t len, size_t chunk_elems);
/* Elements per chunk for a chunk size in bytes (at least 1). */
size_t dt__coll_chunk_elems(size_t chunk_bytes, size_t elem_size);

/*
 * A stream schedule: the messages a rank sends to one peer (tx) and
 * receives from another (rx), in order. Both ends of a link compute the
 * same list, so the receiver checks each message's offset and length
 * against rx[i]. A tx entry may depend on an rx entry having been
 * processed first (the chunk it forwards); pipelining falls out of that:
 * chunk k+1 goes out while chunk k is still being reduced downstream.
 */
enum {
	DT__PH_RS = 0, /* reduce-scatter: receiver reduces into its buffer */
	DT__PH_AG = 1, /* allgather: receiver stores at the offset */
	DT__PH_BC = 2, /* broadcast chain: receiver stores at the offset */
};

typedef struct dt__coll_msg {
	uint64_t off; /* elements from the start of the buffer */
	uint64_t n;   /* elements */
	int64_t dep;  /* tx: rx index processed before sending, -1 none */
	uint8_t phase;
	uint8_t from_src; /* tx: read from the send buffer, not the work one */
	uint8_t final;    /* rx: last reduction of its block (scale for avg) */
	uint16_t step;    /* tx: the ring step it belongs to (the timeline) */
	uint8_t acc_work; /* rx: reduce into the partial sum already in the
	                     work buffer, not into this rank's input */
} dt__coll_msg;

typedef struct dt__coll_sched {
	dt__coll_msg *tx;
	size_t ntx;
	dt__coll_msg *rx;
	size_t nrx;
	int to;   /* rank sent to, -1 none */
	int from; /* rank received from, -1 none */
} dt__coll_sched;

/*
 * Ring schedule of rank r of n over blocks (block b at offs[b], lens[b]
 * elements), chunk_elems per message. With rs, a reduce-scatter phase
 * leaves the reduction of block b at rank b; with ag, an allgather phase
 * then sends each rank's block around the ring. from_src_first: the first
 * reduce-scatter step reads the send buffer (out-of-place).
 */
dt_err dt__coll_ring_sched(int r, int n, const size_t *offs, const size_t *lens,
                           size_t chunk_elems, int rs, int ag,
                           dt__coll_sched *s);
/* Pipelined chain broadcast from root through root+1, ..., root-1. */
dt_err dt__coll_chain_sched(int r, int n, int root, size_t count,
                            size_t chunk_elems, dt__coll_sched *s);
void dt__coll_sched_free(dt__coll_sched *s);

/*
 * The hierarchical allreduce of the rank at local position j of L on host
 * h of H (every host runs L ranks): the buffer of count elements is cut
 * into L local blocks and each of those into H sub-blocks. Phase 1, a ring
 * reduce-scatter among the host's ranks, leaves local block j summed over
 * the host at position j; phase 2, a ring reduce-scatter then allgather
 * among the H ranks at position j (one per host), sums it over the hosts;
 * phase 3, a ring allgather among the host's ranks, hands every local
 * block to every rank of the host. s gets the three phases' messages one
 * after the other (phase 2's to and from the other hosts, the others' to
 * and from this host); n[0..2] the tx counts of each phase, n[3..5] the
 * rx counts. s->to and s->from are left -1 for the caller to name.
 */
dt_err dt__coll_hier_sched(int h, int H, int j, int L, size_t count,
                           size_t chunk_elems, dt__coll_sched *s, size_t n[6]);

/*
 * Recursive doubling over n ranks: p2 is the largest power of two <= n,
 * rounds = log2(p2). Ranks >= p2 ("extra") first fold into rank r - p2 and
 * get the result back. The partner of rank r in round k (1-based) is
 * r ^ (1 << (k-1)).
 */
typedef struct dt__coll_rd {
	int p2;
	int rounds;
	int extra_of; /* for a rank >= p2: its core partner; else -1 */
	int extra;    /* for a core rank: its extra rank, or -1 */
} dt__coll_rd;
void dt__coll_rd_plan(int r, int n, dt__coll_rd *rd);

/*
 * Tensor fusion: cut n tensors (counts[i] elements of elem_size bytes)
 * into consecutive batches of at most threshold bytes each; a tensor
 * larger than the threshold is a batch of its own. first[b] is the first
 * tensor of batch b; returns the number of batches (first must hold n).
 */
size_t dt__coll_fusion_plan(const size_t *counts, size_t n, size_t elem_size,
                            size_t threshold, size_t *first);

/* ---- tunables (comm.c, from the environment) ---- */

typedef struct dt__coll_cfg {
	size_t ring_threshold; /* DT_COLL_RING_THRESHOLD: bytes; above: ring */
	size_t chunk_bytes;    /* DT_COLL_CHUNK_BYTES: pipeline segment */
	size_t fusion_bytes;   /* HOROVOD_FUSION_THRESHOLD */
	size_t unexpected_max; /* DT_COLL_UNEXPECTED_MAX: buffered early data */
	double timeout_s;      /* DT_COLL_TIMEOUT */
	int cma;               /* DT_COLL_CMA: same-host ranks read directly */
	size_t cma_whole_max;  /* DT_COLL_CMA_WHOLE_MAX: 2 ranks read each
	                          other's whole input up to this many bytes */
	size_t cma_threshold;  /* DT_COLL_CMA_THRESHOLD: bytes above which
	                          same-host CMA replaces recursive doubling */
	size_t cma_push_max;   /* DT_COLL_CMA_PUSH_MAX: 2 ranks write their
	                          input into the other's slot up to this */
	size_t cma_push_many;  /* DT_COLL_CMA_PUSH_MANY_MAX: more than 2 ranks
	                          write their input into every peer's slot up
	                          to this */
	size_t cma_half_min;   /* DT_COLL_CMA_HALF_MIN: from this size on, a
	                          pushing rank reduces only its half and
	                          writes it into the other's output */
	size_t cma_shared_max; /* DT_COLL_CMA_SHARED_MAX: allreduce through
	                          shared areas up to this (2 ranks: twice) */
	size_t cma_fbox_max;   /* DT_COLL_CMA_FBOX_MAX: 2 ranks allreduce
	                          through fast boxes up to this */
	int hier; /* DTRAIN_COLL_HIER: DT__HIER_OFF, _AUTO or _ON */
} dt__coll_cfg;
dt_err dt__coll_cfg_from_env(dt__coll_cfg *cfg);

enum { DT__HIER_OFF = 0, DT__HIER_AUTO = 1, DT__HIER_ON = 2 };

/*
 * The pid a rank's cross-memory copies (CMA) may aim at: the kernel's
 * word for the process at the other end of our connection to it
 * (kernel_pid, from SO_PEERCRED; 0 when the transport cannot tell, as
 * with TCP), and only when it is the pid the rank declared in the node
 * table (declared_pid): 0 otherwise, and the collectives then use no
 * CMA. A declared pid alone proves nothing: any member writes its own
 * row, and could name another process of the same user.
 */
int dt__coll_cma_pid(int declared_pid, int kernel_pid);

/* same_host.c: when every rank of c runs on this host (not elastic), at
 * start: the ranks' pids, the CMA probe, the push slots and the shared
 * areas, agreed by all (two small collectives); and their release, with
 * the communicator. */
dt_err dt__coll_same_host_start(dt_coll *c);
void dt__coll_same_host_free(dt_coll *c);

#endif
