/*
 * merge.h - the end-of-job counters of a whole subtree of the control
 * tree in one block of bounded size (merge.c): what a node sends its tree
 * parent instead of a counters block per node, so that the scheduler of a
 * large job reads one report per child of its own, not one per node with
 * a row per node in each.
 *
 * A merged report holds totals, never a row per node: frames and bytes by
 * the sender's role and the peer's role, the per-key table summed key by
 * key (the DT_STATS_MAX_KEYS smallest keys; the calls on the others are
 * counted as omitted), the KV latency and step time histograms summed
 * bucket by bucket, the servers' merges and updates, the collectives, the
 * training phases, and for the straggler report the DT_MERGE_TOP workers
 * with the slowest step p50 and the DT_MERGE_TOP servers that received
 * most bytes, with their ids. Merging is associative and commutative:
 * any shape of tree gives the same block.
 *
 * Threads: none of its own; a dt__merged belongs to its caller.
 */
#ifndef DT_OBS_MERGE_H
#define DT_OBS_MERGE_H

#include "obs/obs.h"

#define DT_MERGE_TOP     8  /* straggler rows kept: workers, servers */
#define DT_MERGE_MISSING 16 /* ids of missing reports named */
#define DT_MERGE_ROLES   3  /* scheduler, server, worker (dt_role) */

/* A histogram with 64-bit buckets (a sum of many nodes' dt__hist). */
typedef struct dt__mhist {
	uint64_t n, sum, max;
	uint64_t b[DT_HIST_BUCKETS];
} dt__mhist;

/* A straggler row: node id, the figure it is ranked by and three more
 * (workers: steps, step p99, communication ns of step ns in f[2]/f[3];
 * servers: merges, updates, busy ns). */
typedef struct dt__mtop {
	int32_t id;
	uint64_t rank;
	uint64_t f[4];
} dt__mtop;

/* Frames and bytes, by the node's role and the peer's. */
enum { DT_MT_MSGS_SENT, DT_MT_BYTES_SENT, DT_MT_MSGS_RECV, DT_MT_BYTES_RECV };

typedef struct dt__merged {
	uint32_t nodes[DT_MERGE_ROLES];    /* reports merged, by role */
	uint32_t missing_nodes;            /* nodes whose report never came */
	uint32_t nmissing;                 /* ids in missing[], ascending */
	int32_t missing[DT_MERGE_MISSING]; /* the subtrees' roots that did
	                                      not report (smallest ids) */
	uint64_t wall_max_ns;
	uint64_t traffic[DT_MERGE_ROLES][DT_MERGE_ROLES][4];
	uint32_t nkeys;                       /* keys[], ascending */
	dt_key_stats keys[DT_STATS_MAX_KEYS]; /* the workers' */
	dt_key_stats batched;  /* batched calls (key 0 if none) */
	uint64_t keys_omitted; /* calls on keys beyond the table */
	dt__mhist lat[DT_LAT_COUNT];
	uint64_t merges, merge_ns, updates, update_ns;
	uint64_t coll_ops, coll_bytes, coll_ns, coll_nodes;
	double coll_busbw_sum; /* the nodes' busbw, summed */
	uint64_t steps, step_ns, comm_ns, forward_ns, backward_ns;
	dt__mhist step;       /* every step of every worker */
	dt__mhist worker_p50; /* one value per worker: its step p50 */
	uint32_t nslow, nbusy;
	dt__mtop slow[DT_MERGE_TOP]; /* workers, slowest step p50 first */
	dt__mtop busy[DT_MERGE_TOP]; /* servers, most bytes received first */
} dt__merged;

/* The most bytes a merged report takes on the wire, whatever the size of
 * the subtree it stands for (dt__merged_encode's size with a full key
 * table). */
size_t dt__merged_max_bytes(void);

/* An empty block (zeroes, no nodes). */
void dt__merged_init(dt__merged *m);

/* Add one node's counters: s (its dt_node_stats), its process's KV
 * latency and step histograms (NULL: none, as for the scheduler, whose
 * traffic only is counted), and role_of(arg, id), a peer id's role. */
void dt__merged_add_node(dt__merged *m, const dt_stats *s,
                         const dt__hist lat[DT_LAT_COUNT], const dt__hist *step,
                         int (*role_of)(void *arg, int id), void *arg);

/* Note a subtree of `nodes` nodes rooted at id whose report never came. */
void dt__merged_missing(dt__merged *m, int id, int nodes);

/* into += m. */
void dt__merged_merge(dt__merged *into, const dt__merged *m);

/* The q-quantile of h, as dt__hist_quantile. */
uint64_t dt__mhist_quantile(const dt__mhist *h, double q);

/* The wire form (REPORT kind 4): encode into a buffer *out of *len bytes
 * (the caller frees it); decode checks every count and length first (on
 * error *m holds nothing to use). */
dt_err dt__merged_encode(const dt__merged *m, uint8_t **out, size_t *len);
dt_err dt__merged_decode(const void *p, size_t len, dt__merged *m);

/* What the scheduler prints for a tree job (merge_report.c): names[id]
 * for a node id in a straggler row or a missing one (NULL: "node <id>"). */
void dt__merged_report(FILE *f, const dt__merged *m,
                       const char *(*name_of)(void *arg, int id), void *arg);
/* The same as one JSON object on a line (DTRAIN_STATS_JSON). */
void dt__merged_json(FILE *f, const dt__merged *m,
                     const char *(*name_of)(void *arg, int id), void *arg);

#endif
