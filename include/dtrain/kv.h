/*
 * dtrain/kv.h - the key-value store of MXNet: push gradients, pull weights.
 *
 * A store is created from a type string as MXNet's kvstore.create():
 *   "local", "device"            one process; devices are summed locally
 *   "dist_sync", "dist"          servers sum one push per worker per round,
 *                                update once, then answer
 *   "dist_async"                 servers apply each push on arrival
 *   "dist_sync_device", "dist_async_device"   the same with local
 *                                multi-device aggregation
 * Values are float32 arrays identified by an integer key. A small array
 * lives on one server (key mod the servers); bigger ones are cut over the
 * servers so that each holds about as many bytes (DTRAIN_KV_PLACEMENT,
 * DTRAIN_KV_SPLIT_BYTES; MXNet's rule as an option: docs/kvstore.md,
 * "Placement").
 *
 * Thread-safety: one thread at a time per store, except that asynchronous
 * requests complete in the background and may be waited on from the thread
 * that made them. Every call returns a dt_err; dt_errmsg() names the key and
 * sizes on failure, and the store remains usable.
 */
#ifndef DTRAIN_KV_H
#define DTRAIN_KV_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"
#include "dtrain/obs.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_kv dt_kv;
typedef uint64_t dt_key;
/* An asynchronous request; finished with dt_kv_wait(). */
typedef uint64_t dt_kv_req;

/*
 * Create a store. For dist types, joins the cluster from the DMLC_*
 * environment; a process whose DMLC_ROLE is server or scheduler serves that
 * role and exits with status 0 at the end of the job (MXNet semantics), so
 * the same program can be started for every role.
 */
dt_err dt_kv_create(const char *type, dt_kv **out);

/*
 * Leave the cluster (for dist types) and free the store. With
 * DTRAIN_RECOVER=1 a worker first waits for every worker to call it (a
 * barrier): a server restarted meanwhile may still need its pushes.
 */
dt_err dt_kv_destroy(dt_kv *kv);

const char *dt_kv_type(const dt_kv *kv);
int dt_kv_rank(const dt_kv *kv);        /* 0 for local stores */
int dt_kv_num_workers(const dt_kv *kv); /* 1 for local stores */
/* This process's counters (dtrain/obs.h: dt_node_stats of the store's
 * node; a local store has no peers and counts no KV calls). Free the
 * arrays with dt_stats_fini. */
dt_err dt_kv_stats(dt_kv *kv, dt_stats *out);
int dt_kv_is_dist(const dt_kv *kv);
/* The node a dist store joined the job through (NULL for a local store),
 * still the store's: e.g. for dt_coll_init_node, so that an elastic job
 * with servers has its communicator (dtrain/elastic.h) on the same node. */
dt_node *dt_kv_node(const dt_kv *kv);

/*
 * Run updates in the store (update_on_kvstore): name is "sgd" or "adam";
 * params is "key=value,..." with lr, momentum, wd, rescale_grad,
 * clip_gradient (sgd) or lr, beta1, beta2, epsilon, wd, rescale_grad (adam).
 * Sent to the servers as data. Call before init; later calls may change
 * the parameters (a learning-rate schedule) but not the optimizer, and keep
 * its state. Every worker calls it (rank 0's settings are sent, then all
 * pass a barrier). Without an optimizer a pull returns the sum of the last
 * round's pushes.
 */
dt_err dt_kv_set_optimizer(dt_kv *kv, const char *name, const char *params);

/*
 * Gradient compression (MXNet's set_gradient_compression; the rules and
 * their costs in docs/compression.md). spec is one of
 *   "none"
 *   "fp16"            values rounded to IEEE half on the wire
 *   "2bit[:T]"        +T, -T or 0 per value (T = 0.5 by default), 16 a word
 *   "1bit[:T]"        one bit per value (split at T, 0 by default), each
 *                     side sent as its mean
 * or MXNet's dictionary as "type=2bit,threshold=0.5". What 2bit and 1bit
 * do not send stays in a residual per key on this worker and is added to
 * the next push (error feedback): delayed, not lost. The servers decode
 * into their fp32 sums. Call on every worker before the first init; a
 * local store applies the same rule to its pushes.
 */
dt_err dt_kv_set_gradient_compression(dt_kv *kv, const char *spec);

/*
 * The precision of the values pulls return: "fp32" (the default) or
 * "fp16" - the servers keep fp32 and send halves, half the bytes; the
 * caller's buffer still receives floats (each exactly a half's value).
 * Per worker, any time; it applies to requests started after it.
 */
dt_err dt_kv_set_pull_precision(dt_kv *kv, const char *precision);

/*
 * Multi-precision (MXNet's multi_precision): the same calls on arrays of
 * IEEE halves (each a uint16_t holding the half's bits). The store keeps
 * an fp32 master copy and fp32 optimizer state; gradients go to it as
 * halves, and values come back rounded to halves (nearest even). init
 * widens the halves to the fp32 master. Gradient compression and the pull
 * precision apply to fp32 arrays only. The buffers of the asynchronous
 * forms stay untouched until dt_kv_wait().
 */
dt_err dt_kv_init_fp16(dt_kv *kv, dt_key key, const uint16_t *val, size_t n);
dt_err dt_kv_push_fp16(dt_kv *kv, dt_key key, const uint16_t *grad, size_t n);
dt_err dt_kv_pull_fp16(dt_kv *kv, dt_key key, uint16_t *out, size_t n);
dt_err dt_kv_pushpull_fp16(dt_kv *kv, dt_key key, const uint16_t *grad,
                           uint16_t *out, size_t n);
dt_err dt_kv_push_fp16_async(dt_kv *kv, dt_key key, const uint16_t *grad,
                             size_t n, dt_kv_req *req);
dt_err dt_kv_pull_fp16_async(dt_kv *kv, dt_key key, uint16_t *out, size_t n,
                             dt_kv_req *req);
dt_err dt_kv_pushpull_fp16_async(dt_kv *kv, dt_key key, const uint16_t *grad,
                                 uint16_t *out, size_t n, dt_kv_req *req);

/* Initialise key with n floats; rank 0's value wins, every worker waits. */
dt_err dt_kv_init(dt_kv *kv, dt_key key, const float *val, size_t n);

dt_err dt_kv_push(dt_kv *kv, dt_key key, const float *val, size_t n);
dt_err dt_kv_pull(dt_kv *kv, dt_key key, float *out, size_t n);
/* Push val then pull the updated value into out (which may equal val). */
dt_err dt_kv_pushpull(dt_kv *kv, dt_key key, const float *val, float *out,
                      size_t n);

/*
 * Local aggregation: ndev arrays of n floats (one per device) are summed
 * (with MXNET_KVSTORE_REDUCTION_NTHREADS threads for big arrays) and pushed
 * as one.
 */
dt_err dt_kv_push_devices(dt_kv *kv, dt_key key, const float *const *vals,
                          int ndev, size_t n);

/*
 * Asynchronous forms: start the request and return at once. The buffers
 * must stay valid and untouched until dt_kv_wait() on the request returns.
 */
dt_err dt_kv_push_async(dt_kv *kv, dt_key key, const float *val, size_t n,
                        dt_kv_req *req);
dt_err dt_kv_pull_async(dt_kv *kv, dt_key key, float *out, size_t n,
                        dt_kv_req *req);
dt_err dt_kv_pushpull_async(dt_kv *kv, dt_key key, const float *val, float *out,
                            size_t n, dt_kv_req *req);
dt_err dt_kv_wait(dt_kv *kv, dt_kv_req req);
dt_err dt_kv_wait_all(dt_kv *kv);

/*
 * Batched calls over nkeys keys (docs/kvstore.md, "Many keys"): the keys
 * too short to be cut over the servers (docs/kvstore.md, "Placement") go
 * as one request per server, answered by one reply, so a call costs
 * O(keys + bytes) at any key count; longer arrays go key by key as the
 * single-key calls do. Keys are
 * any 64-bit values in any order; a key listed twice in one call is an
 * error (EINVAL). Each server checks its part of a call whole before it
 * changes anything: a part with a key that is unknown, of another length
 * or listed twice is refused and changes nothing on that server (the
 * other servers' parts are theirs: a push may have been applied there).
 * A key initialised by a
 * batched call is used by batched calls (and a single-key one by
 * single-key calls); mixing them is an error that says so. In dist_sync
 * a key's round is one push of it per worker, as for single keys.
 *
 * The _many forms take one pointer per key: vals[i] has lens[i] floats.
 */
dt_err dt_kv_init_many(dt_kv *kv, size_t nkeys, const dt_key *keys,
                       const float *const *vals, const size_t *lens);
dt_err dt_kv_push_many(dt_kv *kv, size_t nkeys, const dt_key *keys,
                       const float *const *vals, const size_t *lens);
dt_err dt_kv_pull_many(dt_kv *kv, size_t nkeys, const dt_key *keys,
                       float *const *outs, const size_t *lens);
dt_err dt_kv_pushpull_many(dt_kv *kv, size_t nkeys, const dt_key *keys,
                           const float *const *vals, float *const *outs,
                           const size_t *lens);

/*
 * ps-lite's form: the values back to back in one array - key i's lens[i]
 * floats follow key i-1's; lens NULL: one float per key. With one server
 * and every key batched, the arrays are sent and the answer received as
 * they are, without a copy.
 */
dt_err dt_kv_init_keys(dt_kv *kv, size_t nkeys, const dt_key *keys,
                       const float *vals, const size_t *lens);
dt_err dt_kv_push_keys(dt_kv *kv, size_t nkeys, const dt_key *keys,
                       const float *vals, const size_t *lens);
dt_err dt_kv_pull_keys(dt_kv *kv, size_t nkeys, const dt_key *keys, float *outs,
                       const size_t *lens);
dt_err dt_kv_pushpull_keys(dt_kv *kv, size_t nkeys, const dt_key *keys,
                           const float *vals, float *outs, const size_t *lens);

/*
 * Row-sparse arrays (MXNet's row_sparse; docs/kvstore.md, "Row-sparse
 * arrays"): key holds a table of rows x width floats - an embedding, the
 * weights of a sparse linear model - of which each call names a few rows
 * by id (0 to rows - 1). A table of at least MXNET_KVSTORE_BIGARRAY_BOUND
 * floats is split over the servers by row range.
 *
 * init is collective (every worker, the same shape; rank 0's val - rows x
 * width floats - wins, NULL: zeros, which cost no memory until a row is
 * written). A push sends nrows rows (row_ids[i]'s width floats at
 * vals + i * width), each id listed at most once; only those rows are
 * updated (MXNet's lazy_update: sgd and adam update a row only when it is
 * pushed, with the key's step count), and without an optimizer a pushed
 * row takes the pushed value. dist_sync sums each row over the workers'
 * pushes of a round (the union of their rows; an empty push counts);
 * dist_async applies each push on arrival. row_sparse_pull returns the
 * rows asked (in any order, repeats allowed) back to back in out. width is
 * the table's, for a check. Gradient compression applies to the pushed
 * values (with a residual per row) and the pull precision to the answers
 * of dist stores. Calls are synchronous; rows are not kept in server
 * checkpoints (a store with DTRAIN_RECOVER or DTRAIN_CHECKPOINT_DIR
 * refuses tables).
 */
dt_err dt_kv_init_row_sparse(dt_kv *kv, dt_key key, uint64_t rows, size_t width,
                             const float *val);
dt_err dt_kv_push_row_sparse(dt_kv *kv, dt_key key, size_t nrows,
                             const uint64_t *row_ids, const float *vals,
                             size_t width);
dt_err dt_kv_row_sparse_pull(dt_kv *kv, dt_key key, size_t nrows,
                             const uint64_t *row_ids, float *out, size_t width);
/* Push rows, then pull the same rows updated (out may equal vals). */
dt_err dt_kv_pushpull_row_sparse(dt_kv *kv, dt_key key, size_t nrows,
                                 const uint64_t *row_ids, const float *vals,
                                 float *out, size_t width);

/* Barrier among all workers of the store (a no-op for local stores). */
dt_err dt_kv_barrier(dt_kv *kv);

/*
 * Checkpoint the servers now (DTRAIN_CHECKPOINT_DIR on the servers; see
 * docs/fault-tolerance.md): every worker calls it at the same point, like a
 * barrier; it returns once every server's file is on disk. A store without
 * servers has nothing to checkpoint (DT_ESTATE).
 */
dt_err dt_kv_checkpoint(dt_kv *kv);

/*
 * The optimizer state of a local store ("local", "device"), MXNet's
 * save_optimizer_states / load_optimizer_states: each key's optimizer
 * state (momentum, Adam's moments) and step count, into a file written
 * whole or not at all. Not saved: the values (pull them), the optimizer's
 * settings (set the same optimizer again before a load), gradient
 * compression's residuals. Load takes a file of the same optimizer kind
 * whose keys are initialised in the store with the same lengths; keys the
 * file does not name start from no state. The file is checked whole
 * before the store changes; a bad one (another format, damaged,
 * truncated, too long for this store, a key unknown or of another length)
 * is an error naming it and leaves the store as it was. A dist store's
 * optimizer state is on its servers: these calls refuse it (DT_ENOTSUP;
 * dt_kv_checkpoint saves the servers' state), and a store without an
 * optimizer (DT_ESTATE) or with row_sparse tables (DT_ENOTSUP).
 */
dt_err dt_kv_save_optimizer_states(dt_kv *kv, const char *path);
dt_err dt_kv_load_optimizer_states(dt_kv *kv, const char *path);

/*
 * Recovery (DTRAIN_RECOVER=1, `dtrain launch --restart N`; see
 * docs/fault-tolerance.md). A worker process started in a lost worker's
 * place rejoins under its rank; its set-up calls (configure, set the
 * optimizer, init) do not set anything again. dt_kv_resume asks the
 * servers how far its predecessor got: *step is the number of pushes of
 * every one of keys (lens: their lengths; a row_sparse table's is rows x
 * width, and its pushes and pulls are resumed the same way) that the
 * store holds from it,
 * the step the worker continues from (its data position follows from
 * it). From then on, a push the store holds already is not sent again,
 * and in dist_sync the first pull of each key returns the value after
 * round *step - so the step is computed again from the same values, and
 * the job ends with the same parameters as without the fault. A worker
 * that is not a restarted one gets *step = 0 and nothing changes: call
 * it after init, always. dt_kv_rejoined says which one this is.
 */
dt_err dt_kv_resume(dt_kv *kv, size_t nkeys, const dt_key *keys,
                    const size_t *lens, uint64_t *step);
int dt_kv_rejoined(const dt_kv *kv);

/* Read and check a server's checkpoint file; a one-line summary of what it
 * holds into summary. Every fault (damaged, truncated, another version) is
 * an error naming it. */
dt_err dt_kv_checkpoint_inspect(const char *path, char *summary, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
