/*
 * obs.h - observability, the layer every other one may record into: the
 * timeline's event buffer (DTRAIN_TIMELINE), the process's counters and
 * histograms (always on: a few relaxed atomics or one uncontended lock per
 * operation), their wire form for the end-of-job report, the straggler
 * report's arithmetic and the writer of the merged Chrome trace.
 *
 * It sits just above common/ and names nothing above it: net/ counts
 * frames, core/ records barriers and ships the report to the scheduler,
 * kv/, coll/ and nn/ record their operations. Each process has one event
 * buffer and one set of counters (a process runs one member node: a server
 * or a worker; horovod's rank 0 adds the scheduler, which records into the
 * trace file it writes, never into the buffer).
 *
 * Threads: every dt__obs_* and dt__trace_* call is thread-safe.
 */
#ifndef DT_OBS_OBS_H
#define DT_OBS_OBS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/limits.h"
#include "dtrain/err.h"
#include "dtrain/obs.h"

/* ---- the timeline ---- */

/* X(NAME, "event name", "category"): DT_EV_<NAME>. The numbers are the
 * wire's (REPORT records): append only. */
#define DT_TRACE_KINDS(X)                                                      \
	X(BOOTSTRAP, "bootstrap", "cluster")                                   \
	X(BARRIER, "barrier", "cluster")                                       \
	X(CLOCK_SYNC, "clock sync", "cluster")                                 \
	X(KV_INIT, "init", "kv")                                               \
	X(KV_PUSH, "push", "kv")                                               \
	X(KV_PULL, "pull", "kv")                                               \
	X(KV_PUSHPULL, "pushpull", "kv")                                       \
	X(KV_QUEUED, "queued", "kv")                                           \
	X(KV_INFLIGHT, "on the wire + server", "kv")                           \
	X(KV_WAIT, "wait", "kv")                                               \
	X(KV_MERGE, "merge", "kv")                                             \
	X(KV_UPDATE, "optimizer update", "kv")                                 \
	X(KV_REPLY, "reply", "kv")                                             \
	X(COLL_ALLREDUCE, "allreduce", "coll")                                 \
	X(COLL_BROADCAST, "broadcast", "coll")                                 \
	X(COLL_ALLGATHER, "allgather", "coll")                                 \
	X(COLL_NEGOTIATE, "negotiate", "coll")                                 \
	X(COLL_FUSION, "fusion copy", "coll")                                  \
	X(COLL_STEP, "ring step", "coll")                                      \
	X(COLL_REDUCE, "reduce", "coll")                                       \
	X(COLL_OTHER, "collective", "coll")                                    \
	X(TRAIN_STEP, "step", "train")                                         \
	X(TRAIN_FORWARD, "forward", "train")                                   \
	X(TRAIN_BACKWARD, "backward", "train")                                 \
	X(TRAIN_COMM, "communication wait", "train")                           \
	X(TRAIN_UPDATE, "update", "train")                                     \
	X(TRAIN_DATA, "data", "train")                                         \
	X(KV_PUSH_MANY, "push (batched)", "kv")                                \
	X(KV_PULL_MANY, "pull (batched)", "kv")                                \
	X(KV_PUSHPULL_MANY, "pushpull (batched)", "kv")                        \
	X(KV_ROWS, "row-sparse", "kv")

#define DT__EV_ENUM(name, str, cat) DT_EV_##name,
enum { DT_TRACE_KINDS(DT__EV_ENUM) DT_EV_COUNT };
#undef DT__EV_ENUM

/* The tracks of one node (Chrome's threads): the training thread (the
 * first to mark a phase, and the caller of KV waits), the I/O thread, the
 * collectives' executor, then other threads that mark phases (a trainer's
 * device threads), one track each. */
enum {
	DT_TID_MAIN = 0,
	DT_TID_IO = 1,
	DT_TID_COLL = 2,
	DT_TID_OTHER = 3,
	DT_TID_COUNT = 16
};

/* Flags of an event: which of its fields mean something. */
enum {
	DT_EVF_KEY = 1,   /* key */
	DT_EVF_BYTES = 2, /* bytes */
	DT_EVF_PEER = 4,  /* peer */
	DT_EVF_ASYNC =
	    8, /* an async span (id), not one of tid's nested spans */
};

/* One event: a span [ts, ts + dur) on one of the node's tracks, or an
 * async one (DT_EVF_ASYNC) grouped by id. 48 bytes, as on the wire. */
typedef struct dt__tev {
	uint64_t ts;    /* start: ns, this process's dt__now_ns() clock */
	uint64_t dur;   /* ns */
	uint64_t key;   /* a KV key, a step, a ring step, a barrier's mask */
	uint64_t bytes; /* what it moved */
	uint64_t id;    /* async spans: the operation */
	uint16_t kind;  /* DT_EV_* */
	uint8_t tid;    /* DT_TID_* */
	uint8_t flags;  /* DT_EVF_* */
	int32_t peer;   /* the other node's id */
} dt__tev;

#define DT_TEV_WIRE 48

extern const char *const dt__ev_name[DT_EV_COUNT];
extern const char *const dt__ev_cat[DT_EV_COUNT];

/* Nonzero while this process records a timeline (one load: the branch
 * that keeps tracing free when off). */
extern int dt__trace_flag;
static inline int
dt__tracing(void)
{
	return __atomic_load_n(&dt__trace_flag, __ATOMIC_RELAXED);
}

/* Start recording if DTRAIN_TIMELINE is set (a member node's start):
 * *owned = 1 if owner now owns the buffer (it drains and ends it), 0 if
 * not set or owned already; an error on a bad setting.
 * DTRAIN_TIMELINE_MAX_EVENTS caps the buffer (default 2^21); later events
 * are counted, not kept. */
dt_err dt__trace_begin(const void *owner, int *owned);
/* Record e (a no-op when off). */
void dt__trace_add(const dt__tev *e);
/* A span on track tid from t0 to now. */
void dt__trace_span(int kind, int tid, uint64_t t0, uint64_t key,
                    unsigned flags, uint64_t bytes, int peer);
/* A span on track tid over [t0, t1). */
void dt__trace_range(int kind, int tid, uint64_t t0, uint64_t t1, uint64_t key,
                     unsigned flags, uint64_t bytes, int peer);
/* An async span [t0, t1) of operation id. */
void dt__trace_async(int kind, uint64_t id, uint64_t t0, uint64_t t1,
                     uint64_t key, unsigned flags, uint64_t bytes, int peer);
/* Hand the recorded events to fn in order, chunk by chunk (the owner, at
 * its stop), then stop recording and free them. Returns events dropped
 * over the cap. */
uint64_t dt__trace_end(const void *owner,
                       void (*fn)(void *arg, const dt__tev *ev, size_t n),
                       void *arg);

/* Wire form of a record (REPORT kind 1), offset (ns) added to ts. */
void dt__tev_encode(const dt__tev *e, int64_t offset_ns, uint8_t *out);
/* Decode and check one record: kind, tid and flags in range. */
dt_err dt__tev_decode(const uint8_t *in, dt__tev *e);

/* ---- the merged trace file (the scheduler) ---- */

typedef struct dt__timeline dt__timeline;
/* Open path's temporary (path.part) and write the header; t0_ns is the
 * scheduler's clock at which the trace starts. */
dt_err dt__timeline_open(const char *path, uint64_t t0_ns, dt__timeline **out);
/* Name a node's track (Chrome's process) and its threads. */
void dt__timeline_node(dt__timeline *t, int node, const char *name, int sort);
/* Write an event of node (ts on the scheduler's clock). */
void dt__timeline_event(dt__timeline *t, int node, const dt__tev *e);
/* Finish and rename into place; note names what the job's events lost
 * (NULL: nothing). Frees t. */
dt_err dt__timeline_close(dt__timeline *t, const char *note);

/* ---- counters and histograms ---- */

/* Log-linear histogram of nanoseconds: 8 buckets per power of two
 * (within 12.5%). */
#define DT_HIST_BUCKETS 496
typedef struct dt__hist {
	uint64_t n, sum, max;
	uint32_t b[DT_HIST_BUCKETS];
} dt__hist;

void dt__hist_add(dt__hist *h, uint64_t v);
/* The q-quantile (0 <= q <= 1), a bucket's middle; 0 if empty. */
uint64_t dt__hist_quantile(const dt__hist *h, double q);
/* The same of any histogram of n values, at most max, whose bucket i
 * holds count(h, i) of them (dt__hist's buckets or wider ones). */
uint64_t dt__hist_quantile_by(uint64_t n, uint64_t max, double q,
                              uint64_t (*count)(const void *, int),
                              const void *h);
void dt__hist_merge(dt__hist *into, const dt__hist *h);
/* The smallest value bucket i (0 <= i < DT_HIST_BUCKETS) holds. */
uint64_t dt__hist_bucket_lo(int i);

/* Per peer frame counters of a node, by node id (net/ and core/ count;
 * allocated with the node's table). */
typedef struct dt__peer_ctr {
	uint64_t msgs_sent, bytes_sent, msgs_recv, bytes_recv;
} dt__peer_ctr;
static inline void
dt__ctr_sent(dt__peer_ctr *c, uint64_t bytes)
{
	__atomic_fetch_add(&c->msgs_sent, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&c->bytes_sent, bytes, __ATOMIC_RELAXED);
}
static inline void
dt__ctr_recv(dt__peer_ctr *c, uint64_t bytes)
{
	__atomic_fetch_add(&c->msgs_recv, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&c->bytes_recv, bytes, __ATOMIC_RELAXED);
}

/* What the process's layers record (all thread-safe). */
enum { DT_LAT_PUSH, DT_LAT_PULL, DT_LAT_PUSHPULL, DT_LAT_COUNT };
/* A KV call of key completed: kind DT_LAT_*, bytes out and in, its time
 * from the call to the last answer. */
void dt__obs_kv(int kind, uint64_t key, uint64_t out_bytes, uint64_t in_bytes,
                uint64_t ns);
/* A batched call (keys not counted one by one). */
void dt__obs_kv_batch(int kind, uint64_t out_bytes, uint64_t in_bytes,
                      uint64_t ns);
/* A server spent ns merging or updating (optimizer) a key; count: whether
 * this is a new merge or update (a streamed push merges chunk by chunk). */
void dt__obs_server(int update, int count, uint64_t ns);
/* A collective of kind (DT_EV_COLL_*) on bytes among ranks took ns. */
void dt__obs_coll(int kind, uint64_t bytes, int ranks, uint64_t ns);

/* dt_obs_phase over [t0, t1) (adjacent phases share their boundary). */
void dt__obs_phase_span(dt_phase ph, uint64_t t0, uint64_t t1);

/* Copy the process's counters into s (the caller's; per peer counters
 * are the node's: dt_node_stats adds them). */
void dt__obs_snapshot(dt_stats *s);
/* The process's counters alone (a store or communicator without a node:
 * no peers). */
void dt__obs_stats_local(dt_stats *s);
/* Copies of the process's KV latency histograms (DT_LAT_*) and of its
 * training steps' (the end-of-job report merged over the control tree,
 * obs/merge.h). */
void dt__obs_hists(dt__hist lat[DT_LAT_COUNT], dt__hist *step);
/* Clear everything (a new job in the same process). */
void dt__obs_reset(void);

/* The end-of-job report (REPORT kind 2): a stats block on the wire, and
 * back. The decoder checks every count against its limit. */
#define DT_STATS_MAX_KEYS  4096         /* per-key rows a report carries */
#define DT_STATS_MAX_PEERS DT_MAX_NODES /* (common/limits.h) */
dt_err dt__stats_encode(const dt_stats *s, uint8_t **out, size_t *len);
dt_err dt__stats_decode(const void *p, size_t len, dt_stats *s);

/* qsort order of dt_key_stats by key. */
int dt__key_stats_cmp(const void *a, const void *b);

/* Print the job's table and straggler report: all[i] is node id i's
 * stats (all[0] the scheduler's), names[i] its name. */
void dt__stats_report(FILE *f, dt_stats *const *all, const char *const *names,
                      int count);
/* The same as JSON lines, one object per node (DTRAIN_STATS_JSON). */
void dt__stats_json(FILE *f, dt_stats *const *all, const char *const *names,
                    int count);

/* Where the last periodic line left off (PS_VERBOSE=1 with
 * DTRAIN_STATS_INTERVAL): its time and the node's byte totals. */
typedef struct dt__stats_mark {
	uint64_t wall_ns, bytes_sent, bytes_recv;
} dt__stats_mark;

/* One line of s's counters for the log: totals, the traffic's rate since
 * *mark (then moved to now), and only the parts the node has (KV calls,
 * steps, server work, collectives). */
void dt__stats_line(char *buf, size_t cap, const dt_stats *s,
                    dt__stats_mark *mark);

/* Bytes in MB and nanoseconds in ms, as the end-of-job reports print
 * them (report.c, merge_report.c). */
static inline double
dt__mb(uint64_t b)
{
	return (double)b / 1e6;
}

static inline double
dt__ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

#endif
