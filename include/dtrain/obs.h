/*
 * dtrain/obs.h - observability: what a node counted, and the marks a
 * training loop puts on the timeline.
 *
 * Counters are always on. dt_node_stats() (or dt_kv_stats() /
 * dt_coll_stats() for the node under a store or a communicator) copies
 * them: frames and bytes per peer, bytes and calls per key, KV latency,
 * server merge and update time, collective bus bandwidth and the training
 * steps marked with dt_obs_phase(). `dtrain launch --stats` prints the
 * whole job's at its end, with the straggler report (docs/observability.md).
 *
 * The timeline (DTRAIN_TIMELINE=path, or `dtrain launch --timeline path`)
 * is a Chrome trace of every process, written by the scheduler at the end.
 * A training loop marks its phases so that they appear there and in the
 * step statistics:
 *
 *     uint64_t t0 = dt_obs_now();
 *     ... forward and backward ...
 *     uint64_t tc = dt_obs_now();
 *     dt_kv_pushpull(...);
 *     dt_obs_phase(DT_PHASE_COMM, tc);
 *     dt_obs_phase(DT_PHASE_STEP, t0);
 *
 * dt_nn_forward_backward() marks its forward and backward passes itself.
 * The calls are thread-safe and cost a clock read (and one event when the
 * timeline is on).
 */
#ifndef DTRAIN_OBS_H
#define DTRAIN_OBS_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_phase {
	DT_PHASE_STEP = 0, /* one whole training step */
	DT_PHASE_FORWARD,
	DT_PHASE_BACKWARD,
	DT_PHASE_COMM, /* waiting for communication */
	DT_PHASE_UPDATE,
	DT_PHASE_DATA,
} dt_phase;

/* A timestamp (ns, monotonic) for dt_obs_phase. */
uint64_t dt_obs_now(void);
/* The phase ph began at t0 (dt_obs_now()) and ends now. */
void dt_obs_phase(dt_phase ph, uint64_t t0);

typedef struct dt_peer_stats {
	int id; /* node id: 0 scheduler, 1 + r server r, 1 + S + r worker r */
	uint64_t msgs_sent,
	    bytes_sent; /* whole frames: header, meta, payload */
	uint64_t msgs_recv, bytes_recv;
} dt_peer_stats;

#define DT_STATS_KEY_BATCHED UINT64_MAX /* the row of batched calls */

typedef struct dt_key_stats {
	uint64_t key;                        /* or DT_STATS_KEY_BATCHED */
	uint64_t pushes, pulls;              /* a pushpull counts as both */
	uint64_t bytes_pushed, bytes_pulled; /* payload, as sent (encoded) */
} dt_key_stats;

typedef struct dt_latency {
	uint64_t count, mean_ns, p50_ns, p99_ns, max_ns; /* call to answer */
} dt_latency;

typedef struct dt_stats {
	int id, role, rank; /* the node (role: dt_role) */
	uint64_t wall_ns;   /* since the node started */
	int npeers;
	dt_peer_stats *peers; /* by node id; the node itself included (zero) */
	int nkeys;
	dt_key_stats *keys;          /* by key, ascending; batched calls last */
	uint64_t keys_omitted;       /* keys beyond the 4096 kept */
	dt_latency latency[3];       /* push, pull, pushpull (workers) */
	uint64_t merges, merge_ns;   /* servers: pushes summed */
	uint64_t updates, update_ns; /* servers: optimizer / assign steps */
	uint64_t coll_ops, coll_bytes, coll_ns;
	double coll_busbw; /* bytes/s over the collectives (NCCL's busbw) */
	uint64_t steps, step_ns, comm_ns, forward_ns, backward_ns;
	uint64_t step_p50_ns, step_p99_ns;
} dt_stats;

typedef struct dt_node dt_node;
/* Fill *out (the caller's; free its arrays with dt_stats_fini) with the
 * node's per peer counters and the process's other counters. */
dt_err dt_node_stats(dt_node *node, dt_stats *out);
void dt_stats_fini(dt_stats *s);

#ifdef __cplusplus
}
#endif
#endif
