/*
 * dtrain/coll.h - Horovod-style collectives among the workers of a job.
 *
 * A communicator (dt_coll) spans the W workers of a dtrain job; the workers
 * reduce data among themselves, with no parameter servers. Rank r of the
 * communicator is worker rank r. A program starts one with dt_coll_init(),
 * which reads the environment:
 *   - under `dtrain launch -s 0` (DMLC_PS_ROOT_URI set): join the job's
 *     scheduler as a worker (a process started as scheduler or server
 *     serves that role and exits, as with MXNet);
 *   - under OpenMPI's mpirun (OMPI_COMM_WORLD_RANK/SIZE) or Slurm's srun
 *     (SLURM_PROCID/SLURM_NTASKS) with no DMLC_PS_ROOT_URI: rendezvous at
 *     DTRAIN_COLL_ROOT=host:port, where rank 0 runs the scheduler in a
 *     thread of its own process;
 *   - otherwise: a communicator of one process.
 * dt_coll_init_node() attaches to a node that is already a worker of a job
 * (the KVStore's "horovod" type does that).
 *
 * Every rank must call the collectives in the same order with matching
 * arguments (same operation, data type, count, root and reduction). A rank
 * that does not gets DT_EMISMATCH, and so does every other rank, with a
 * message naming both signatures. An operation that makes no progress for
 * DT_COLL_TIMEOUT seconds (default 60) fails with DT_ETIMEDOUT and a stall
 * report naming the ranks that have not called it ("allreduce #12
 * stalled: ranks 2, 3 have not called it"); a lost peer fails every pending
 * and later call with DT_EPEER. After a mismatch or a stall the
 * communicator stays usable; after a lost peer it is broken - except in
 * an elastic job (DTRAIN_ELASTIC=1, dtrain/elastic.h), where the calls
 * fail with DT_EMEMBERSHIP until the program takes the new membership,
 * and the communicator then works over it.
 *
 * Buffers: send == recv (or send == DT_COLL_IN_PLACE) means in place. The
 * caller keeps buffers valid and untouched until the call returns, or for
 * the asynchronous forms until dt_coll_wait() on the handle returns.
 *
 * Thread-safety: calls on one communicator must come from one thread at a
 * time (as with MPI_THREAD_SERIALIZED); the operations run in the order
 * they are called, those started asynchronously in a background thread.
 * Errors come back as dt_err with details in dt_errmsg(). See
 * docs/collectives.md for algorithms, thresholds and the environment.
 */
#ifndef DTRAIN_COLL_H
#define DTRAIN_COLL_H

#include <stddef.h>

#include "dtrain/err.h"
#include "dtrain/obs.h"
#include "dtrain/node.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_coll dt_coll;
typedef struct dt_coll_handle dt_coll_handle;

/* Element types. DT_FLOAT16 is IEEE half (uint16_t bits): reductions
 * widen both operands to float32, combine them there and round the result
 * to half (nearest even) at each step - fp16 on the wire, fp32 arithmetic
 * (Horovod's Compression.fp16). */
typedef enum dt_dtype {
	DT_FLOAT32 = 0,
	DT_FLOAT64 = 1,
	DT_INT32 = 2,
	DT_FLOAT16 = 3,
} dt_dtype;

/* Reductions. DT_COLL_AVG divides the sum by the number of ranks (integer
 * division, truncating toward zero, for DT_INT32). */
typedef enum dt_coll_op {
	DT_COLL_SUM = 0,
	DT_COLL_AVG = 1,
	DT_COLL_MIN = 2,
	DT_COLL_MAX = 3,
} dt_coll_op;

#define DT_COLL_IN_PLACE ((const void *)0)

/* Bytes of one element of dtype (0 for an unknown type). */
size_t dt_dtype_size(dt_dtype dtype);
const char *dt_dtype_name(dt_dtype dtype);  /* "float32" */
const char *dt_coll_op_name(dt_coll_op op); /* "sum" */

/*
 * Create a communicator from the environment (see above). Blocks until
 * every rank has joined or DT_CONNECT_TIMEOUT passes. On DT_OK *out is the
 * caller's and is released with dt_coll_finalize().
 */
dt_err dt_coll_init(dt_coll **out);

/*
 * Create a communicator over the workers of node, which must be a started
 * worker; every worker of the job must do the same. The node stays the
 * caller's: dt_coll_finalize() detaches from it without stopping it. At
 * most one communicator per node.
 */
dt_err dt_coll_init_node(dt_node *node, dt_coll **out);

/*
 * Finish the pending operations, pass a last barrier with the other ranks
 * (skipped once the communicator is broken), leave the job if
 * dt_coll_init() joined it (or, after dt_coll_init_node(), detach from the
 * node, which every worker must do too), and free c. Collective: every
 * rank calls it. Returns the first error of these.
 */
dt_err dt_coll_finalize(dt_coll *c);

int dt_coll_rank(const dt_coll *c);
/* This process's counters (dtrain/obs.h), its node's peers included. */
dt_err dt_coll_stats(dt_coll *c, dt_stats *out);
int dt_coll_size(const dt_coll *c);
int dt_coll_local_rank(const dt_coll *c); /* rank among those on this host */
int dt_coll_local_size(const dt_coll *c);

/*
 * recv[i] = op over ranks of send[i], for count elements. Ranks get
 * bitwise-identical results.
 */
dt_err dt_coll_allreduce(dt_coll *c, const void *send, void *recv, size_t count,
                         dt_dtype dtype, dt_coll_op op);

/* buf (count elements) of rank root is copied to every rank's buf. */
dt_err dt_coll_broadcast(dt_coll *c, void *buf, size_t count, dt_dtype dtype,
                         int root);

/*
 * Allgather with per-rank counts (MPI_Allgatherv): rank r contributes
 * counts[r] elements from send; recv receives all of them in rank order
 * (rank r's at offset counts[0] + ... + counts[r-1]). counts must be the
 * same on every rank. send == DT_COLL_IN_PLACE: rank r's part already
 * sits at its place in recv.
 */
dt_err dt_coll_allgatherv(dt_coll *c, const void *send, void *recv,
                          const size_t *counts, dt_dtype dtype);

/* Allgather of count elements per rank: recv holds size * count. */
dt_err dt_coll_allgather(dt_coll *c, const void *send, void *recv, size_t count,
                         dt_dtype dtype);

/*
 * Reduce-scatter (MPI_Reduce_scatter_block): send holds size * count
 * elements; rank r receives in recv the reduction of block r (elements
 * r*count .. r*count+count-1). send == DT_COLL_IN_PLACE: the input is
 * taken from recv (size * count elements) and the result is left at its
 * beginning.
 */
dt_err dt_coll_reduce_scatter(dt_coll *c, const void *send, void *recv,
                              size_t count, dt_dtype dtype, dt_coll_op op);

/* Wait until every rank has called it. */
dt_err dt_coll_barrier(dt_coll *c);

/*
 * Asynchronous forms: queue the operation and return at once with *h;
 * the background thread runs it. dt_coll_wait() returns its result and
 * frees h; dt_coll_test() sets *done without blocking. Every handle must
 * be waited on.
 */
dt_err dt_coll_allreduce_async(dt_coll *c, const void *send, void *recv,
                               size_t count, dt_dtype dtype, dt_coll_op op,
                               dt_coll_handle **h);
dt_err dt_coll_broadcast_async(dt_coll *c, void *buf, size_t count,
                               dt_dtype dtype, int root, dt_coll_handle **h);
dt_err dt_coll_allgatherv_async(dt_coll *c, const void *send, void *recv,
                                const size_t *counts, dt_dtype dtype,
                                dt_coll_handle **h);
dt_err dt_coll_reduce_scatter_async(dt_coll *c, const void *send, void *recv,
                                    size_t count, dt_dtype dtype, dt_coll_op op,
                                    dt_coll_handle **h);
dt_err dt_coll_wait(dt_coll_handle *h);
dt_err dt_coll_test(dt_coll_handle *h, int *done);

/*
 * Point-to-point messages between two ranks (the sends of model
 * parallelism). dt_coll_send sends count elements of buf to rank peer
 * under tag (>= 0); dt_coll_recv receives them into buf, which must have
 * room for count elements. Only the two ranks take part, and they need
 * not call the collectives' sequence: a send and a receive match by
 * (rank, tag), and messages of one tag arrive in the order they were
 * sent, whatever the order of other tags' messages. A count or dtype that
 * differs between the send and its receive is DT_EMISMATCH on both ranks,
 * with a message giving both. A send returns once the receiver has
 * received the message (its buffer is then free again); a message that
 * arrives before its receive is posted waits in a queue capped by
 * DT_COLL_UNEXPECTED_MAX. A lost peer fails its pending sends and receives
 * with DT_EPEER; one that makes no progress for DT_COLL_TIMEOUT fails with
 * DT_ETIMEDOUT and a message naming the pair. Sending to oneself is
 * DT_EINVAL. The asynchronous forms return at once with a handle for
 * dt_coll_wait() / dt_coll_test(); buf stays the caller's and untouched
 * until the wait. Point-to-point calls are not recorded by groups.
 */
dt_err dt_coll_send(dt_coll *c, const void *buf, size_t count, dt_dtype dtype,
                    int peer, int tag);
dt_err dt_coll_recv(dt_coll *c, void *buf, size_t count, dt_dtype dtype,
                    int peer, int tag);
dt_err dt_coll_send_async(dt_coll *c, const void *buf, size_t count,
                          dt_dtype dtype, int peer, int tag,
                          dt_coll_handle **h);
dt_err dt_coll_recv_async(dt_coll *c, void *buf, size_t count, dt_dtype dtype,
                          int peer, int tag, dt_coll_handle **h);
/*
 * Without waiting: dt_coll_probe sets *ready to 1 when a message from rank
 * peer under tag has arrived and waits for its receive (one not posted
 * yet: a posted receive completes by itself, and dt_coll_test on its
 * handle says so), else to 0. After a peer's loss it returns DT_EPEER (or
 * the communicator's failure) rather than 0 for a message still to come.
 * dt_coll_wait_any waits until at least one of n point-to-point handles
 * (NULL entries are skipped) has completed, successfully or not, and sets
 * *index to the first completed one; no handle is freed, dt_coll_wait on
 * each gives its result (at once for a completed one). Like every wait it
 * ends: after DT_COLL_TIMEOUT without a completion every handle given
 * fails with DT_ETIMEDOUT, and a lost peer fails its handles at once.
 */
dt_err dt_coll_probe(dt_coll *c, int peer, int tag, int *ready);
dt_err dt_coll_wait_any(dt_coll_handle *const *h, int n, int *index);

/*
 * Grouped calls. Between dt_coll_group_start() and dt_coll_group_end()
 * asynchronous calls are only recorded; group_end queues them, fusing
 * consecutive allreduces of the same type and reduction into buffers of
 * at most HOROVOD_FUSION_THRESHOLD bytes (default 64 MiB) - one operation
 * for many small tensors. Handles work as usual. Groups do not nest.
 */
dt_err dt_coll_group_start(dt_coll *c);
dt_err dt_coll_group_end(dt_coll *c);

/* One tensor of a grouped allreduce. */
typedef struct dt_coll_tensor {
	const void *send; /* DT_COLL_IN_PLACE or == recv for in place */
	void *recv;
	size_t count;
} dt_coll_tensor;

/* Allreduce n tensors as a group (fused as above) and wait for all. */
dt_err dt_coll_allreduce_group(dt_coll *c, const dt_coll_tensor *t, int n,
                               dt_dtype dtype, dt_coll_op op);

/*
 * The distributed optimizer's two steps (Horovod's broadcast_parameters
 * and DistributedOptimizer) on flat float32 buffers, as llm.c lays out
 * parameters and gradients: copy rank 0's parameters to every rank before
 * training, and average the gradient buffer over the ranks (in place)
 * every step before the local update.
 */
dt_err dt_coll_dist_opt_broadcast(dt_coll *c, float *params, size_t n);
dt_err dt_coll_dist_opt_average(dt_coll *c, float *grads, size_t n);
/* The same, summed instead of averaged (MXNet's rescale_grad divides). */
dt_err dt_coll_dist_opt_sum(dt_coll *c, float *grads, size_t n);

/*
 * Compression of the distributed optimizer's reductions (Horovod's
 * Compression; docs/compression.md): spec "none" (the default), "fp16"
 * (an allreduce of halves: fp16 on the wire, float32 sums at every step),
 * "2bit[:T]" or "1bit[:T]" (each rank's gradients encoded with error
 * feedback - a residual per communicator for the gradient buffer -
 * gathered by every rank and summed in rank order). Every rank gets the
 * same bits. Every rank must set the same; a rank that differs is
 * DT_EMISMATCH. Applies to dt_coll_dist_opt_sum and _average only.
 */
dt_err dt_coll_set_compression(dt_coll *c, const char *spec);
/*
 * The gradient buffer's tensors, in order (their sizes sum to the n of the
 * calls). With a layout, 2bit and 1bit encode each tensor on its own, and
 * tensors under the setting's min_size (65536 values by default) go as
 * float32, as in the KVStore; without one the buffer is one tensor. fp16
 * always covers the whole buffer.
 */
dt_err dt_coll_dist_opt_layout(dt_coll *c, const size_t *sizes, int ntensors);

#ifdef __cplusplus
}
#endif
#endif
