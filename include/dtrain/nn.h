/*
 * dtrain/nn.h - the trainer: models, losses, optimizers, data, metrics.
 *
 * A model is a sequence of layers (dense, conv2d, max-pool, ReLU, tanh,
 * flatten, dropout) ending in a loss (softmax cross-entropy, L2 or L1), in
 * the style of llm.c: every layer is a forward/backward pair, all parameters
 * live in ONE contiguous float buffer and all gradients in a second buffer of
 * the same layout. A table of tensors (name, offset, size, shape) says where
 * each weight and bias sits, so a trainer can push each tensor as a KVStore
 * key, or the whole buffer as one array.
 *
 * A typical data-parallel step (docs/training.md has the whole loop):
 *
 *   dt_nn_model_zero_grad(m);
 *   dt_nn_forward_backward(m, x, y, batch, &loss, &correct);
 *   ... push dt_nn_model_grads(m), pull back the summed gradients ...
 *   dt_nn_optim_step(opt, m);        // with rescale_grad = 1/global_batch
 *
 * Losses are SUMS over the batch and gradients are gradients of the sum, as
 * MXNet's Module computes them; the optimizer's rescale_grad turns the sum
 * into a mean. So two workers at batch 32 whose gradients are summed give
 * the same update as one process at batch 64, up to float rounding.
 *
 * Determinism: the same spec and seed give bit-identical initial parameters
 * on any run and machine; forward and backward have no thread-count
 * dependent reductions. dt_nn_model_create() sets OpenBLAS to one thread
 * (openblas_set_num_threads(1), process-wide), which both makes sgemm
 * results independent of the thread count and lets several replicas run
 * side by side in their own threads.
 *
 * Thread-safety: there is no global mutable state. A model, optimizer,
 * sampler or metric is used by one thread at a time; distinct objects may be
 * used concurrently (one replica per device thread). Every function that can
 * fail returns a dt_err; dt_errmsg() then names the file, tensor or layer
 * and the sizes involved, and the object is unchanged unless said otherwise.
 */
#ifndef DTRAIN_NN_H
#define DTRAIN_NN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Models
 */

typedef struct dt_nn_model dt_nn_model;

#define DT_NN_MAX_DIMS 4

/* One parameter tensor of a model. Owned by the model; valid until it is
 * destroyed. */
typedef struct dt_nn_tensor {
	const char *name; /* "conv0_weight", "dense1_bias" (Gluon style) */
	size_t offset;    /* index of its first float in params and grads */
	size_t size;      /* number of floats */
	int ndim;
	int shape[DT_NN_MAX_DIMS]; /* conv (out, in, k, k); dense (out, in) */
	float wd_mult; /* 1 for weights, 0 for biases (MXNet's default) */
} dt_nn_tensor;

/*
 * Create a model from a built-in name or a layer spec, with parameters
 * initialised from seed (Xavier uniform, magnitude 3, for weights; zero
 * biases). Built-in models:
 *   "lenet"       input 1x28x28, conv 20@5x5, maxpool 2/2, relu, conv 50@5x5,
 *                 maxpool 2/2, relu, flatten, dense 500, relu, dense 10,
 *                 softmax cross-entropy (431,080 parameters)
 *   "lenet-tanh"  the same with tanh instead of relu (LeCun's original)
 *   "mlp"         784-128-64-10 with relu, softmax cross-entropy
 *   "linreg"      dense 1->1 with L2 loss (seed 000's linear regression)
 * A spec is a comma-separated list: "input:C[xHxW]" first, then layers
 *   conv:OUT:K[:STRIDE[:PAD]]  maxpool:K[:STRIDE]  relu  tanh  flatten
 *   dense:N  dropout:P
 * and last the loss: "softmax_ce", "l2" or "l1". Example:
 *   "input:784,dense:128,relu,dropout:0.5,dense:10,softmax_ce"
 * A dense layer after a spatial one flattens its input first (as Gluon's).
 * Dropout masks come from another stream of the same seed, so replicas
 * created with one seed draw the same masks; give them different seeds and
 * dt_nn_model_copy_params() if that matters.
 * On DT_OK *out owns all buffers; free it with dt_nn_model_destroy().
 */
dt_err dt_nn_model_create(const char *spec, uint64_t seed, dt_nn_model **out);

/* Free a model and everything it owns. NULL is a no-op. */
void dt_nn_model_destroy(dt_nn_model *m);

/*
 * Pipeline stages (model parallelism). A model's layer list (the spec's
 * layers, with the flatten layers the model adds before a dense layer or
 * the loss) is cut into consecutive stages; a stage is built alone with
 * dt_nn_model_create_stage(spec, seed, first, last): layers [first, last)
 * and only their parameters, with the values the whole model built from
 * the same seed has (tensor names too). Its input is the activation the
 * layer before it writes, its output the one its last layer writes, in the
 * layout those layers use, which the stages pass on as they are. Only the
 * last stage has the loss (dt_nn_forward_backward, dt_nn_evaluate); the
 * others run dt_nn_stage_forward and dt_nn_stage_backward, and
 * dt_nn_model_input_grad gives each stage the gradient to send back
 * (NULL when no earlier stage has parameters). Dropout layers are refused
 * (DT_ENOTSUP) in a cut model: one process draws all their masks from one
 * stream.
 *
 * dt_nn_model_cut gives the rule's stages for a whole model: first[s] is
 * the first layer of stage s and first[stages] the number of layers
 * (first has stages + 1 entries). Stages start only at a conv or dense
 * layer (activations, pooling and flattening stay with the layer that
 * feeds them), and the rule takes the cut whose busiest stage has the
 * least work, forward and backward: each conv or dense layer's product
 * forward, for its weight gradient and, when a layer before it has
 * parameters, for its input gradient; the other layers' elements. The
 * stages are cut greedily under that bound, each as long as it stays
 * within it, so the same model gives the same cut on every rank.
 * DT_EINVAL with fewer conv and dense layers than stages.
 */
dt_err dt_nn_model_create_stage(const char *spec, uint64_t seed, int first,
                                int last, dt_nn_model **out);
int dt_nn_model_num_layers(const dt_nn_model *m);
dt_err dt_nn_model_cut(const dt_nn_model *m, int stages, int *first);
/*
 * The cut by measured time: the same rule with cost[i] (a finite number
 * >= 0, any unit) as layer i's forward and backward cost instead of the
 * counted operations, as dt_nn_model_profile measures it. Deterministic
 * given the costs: ranks that must agree on a cut should compute it from
 * the same figures, or take one rank's cut (DT_EINVAL for a cost that is
 * negative, infinite or NaN).
 */
dt_err dt_nn_model_cut_by(const dt_nn_model *m, int stages, const double *cost,
                          int *first);
/*
 * Each layer's measured time on a batch of `batch` samples: one forward
 * and backward pass to warm up, then `reps` (1 to 100) more on made-up
 * inputs, each layer timed in the calling thread's CPU time (the time
 * other processes hold the core is not counted); fwd_ns[i] and bwd_ns[i]
 * (dt_nn_model_num_layers entries each) receive the median over the
 * repetitions of layer i's forward and backward time in ns (0 for the
 * layers the backward pass does not reach: those before the first with
 * parameters). The backward pass starts from a made-up gradient of the
 * output, so it works on a stage as on a whole model, without the loss.
 * Overwrites the model's activations and leaves its gradients zeroed;
 * the parameters are unchanged. DT_ESTATE on a model with more than one
 * activation slot (dt_nn_stage_slots), whose activations it would lose.
 */
dt_err dt_nn_model_profile(dt_nn_model *m, int batch, int reps, double *fwd_ns,
                           double *bwd_ns);
/* Forward in training mode without a loss: on DT_OK *out holds batch x
 * output_size floats owned by the model, valid until its next call. */
dt_err dt_nn_stage_forward(dt_nn_model *m, const float *x, int batch,
                           const float **out);
/* Backward from dy (batch x output_size floats, the gradient of this
 * stage's output) after a dt_nn_stage_forward of the same batch:
 * accumulates into the gradient buffer (+=) and sets *dx to the input
 * gradient (batch x input_size floats owned by the model, valid until its
 * next call; NULL when no earlier layer has parameters). */
dt_err dt_nn_stage_backward(dt_nn_model *m, const float *dy, int batch,
                            const float **dx);
/* The input gradient of the last backward pass (NULL as above). */
const float *dt_nn_model_input_grad(const dt_nn_model *m);
/*
 * Activation slots: a pipeline stage keeps the activations of each
 * micro-batch in flight, from its forward pass to its backward pass,
 * rather than running the forward pass again. dt_nn_stage_slots makes
 * exactly `slots` sets of activation buffers for batches of up to `batch`
 * samples, freeing any beyond them and what they held (slot 0, the one
 * dt_nn_stage_forward and every other call use, always stays);
 * dt_nn_stage_num_slots says how many there are. dt_nn_stage_forward_slot and
 * dt_nn_stage_backward_slot are the calls above on one slot: a backward pass in
 * slot k follows the forward pass last run in slot k, whatever ran in other
 * slots between. A batch larger than the slots' is refused (DT_EINVAL). The
 * input x of a forward pass is read again by its backward pass and must stay as
 * it is until then. dt_nn_stage_slot_bytes is one slot's bytes for a batch.
 */
dt_err dt_nn_stage_slots(dt_nn_model *m, int slots, int batch);
int dt_nn_stage_num_slots(const dt_nn_model *m);
dt_err dt_nn_stage_forward_slot(dt_nn_model *m, int slot, const float *x,
                                int batch, const float **out);
dt_err dt_nn_stage_backward_slot(dt_nn_model *m, int slot, const float *dy,
                                 int batch, const float **dx);
size_t dt_nn_stage_slot_bytes(const dt_nn_model *m, int batch);

/*
 * One training step of pipeline stage cfg->stage of cfg->stages (the
 * stage model m from dt_nn_model_create_stage): cfg->micro_batches
 * micro-batches of cfg->micro_batch samples go forward and their
 * gradients back through the stages, in the order of cfg->schedule, and
 * m's gradients accumulate (+=, the caller zeroes them and steps the
 * optimizer) with the backward passes in micro-batch order under both
 * schedules: bit for bit the gradients of one process running
 * dt_nn_forward_backward on the micro-batches in turn. Stage 0 reads the
 * inputs from cfg->x (micro_batches x micro_batch samples), the last stage
 * the labels from cfg->y. ops carries the activations and gradients
 * between stages: send (asynchronous; *h for wait) and recv of n floats
 * to or from a stage, with a tag; the step waits for all its sends before
 * it returns. Every stage of the pipeline must call it with the same
 * schedule, micro_batches and micro_batch. A stage keeps the input and
 * the activations of each micro-batch in flight (activation slots, above)
 * and runs its backward pass from them. It allocates as many slots and
 * stashed inputs as its schedule keeps micro-batches in flight, and no
 * more (dt_nn_stage_slots, freeing the slots of an earlier step that
 * needed more): M under GPipe, stages - stage under 1F1B (never more than
 * M), 1 at the last stage. st (may be NULL) reports what it allocated
 * and the most it kept.
 *
 * Ready-first: when ops also has recv_async (a receive that returns at
 * once with *h for wait) and wait_any (wait until the first of n handles,
 * NULL ones skipped, has completed and set *index to it, the lowest when
 * several have; free none), and cfg->strict is 0, a stage whose schedule
 * allows both its next forward pass and its next backward pass runs the
 * one whose input arrives first (the forward when both have), within the
 * same bound of micro-batches in flight. Forwards and backwards each stay
 * in micro-batch order, so the result is the strict order's, bit for bit;
 * peak_stashed may be lower under GPipe. cfg->strict = 1, or ops without
 * them, runs the schedule's fixed order.
 */
enum { DT_NN_PIPE_GPIPE = 0, DT_NN_PIPE_1F1B = 1 };
#define DT_NN_PIPE_MAX_MICRO    4096
#define DT_NN_PIPE_MAX_REPLICAS 4096 /* and stages */

typedef struct dt_nn_pipe_cfg {
	int stage, stages;
	int schedule; /* DT_NN_PIPE_GPIPE or DT_NN_PIPE_1F1B */
	int micro_batches, micro_batch;
	const float *x; /* stage 0 */
	const float *y; /* last stage */
	/* Data parallelism over pipelines: this pipeline is replica
	 * `replica` of `replicas` (0 or 1: a single pipeline). The ops name
	 * stage s of replica r as peer r * stages + s. */
	int replica, replicas;
	/* 1: the schedule's fixed order even when ready-first is possible
	 * (above). */
	int strict;
} dt_nn_pipe_cfg;

typedef struct dt_nn_pipe_ops {
	void *arg;
	dt_err (*send)(void *arg, const float *buf, size_t n, int stage,
	               int tag, void **h);
	dt_err (*recv)(void *arg, float *buf, size_t n, int stage, int tag);
	dt_err (*wait)(void *arg, void *h);
	/* Optional, for ready-first (above): both or neither. */
	dt_err (*recv_async)(void *arg, float *buf, size_t n, int stage,
	                     int tag, void **h);
	dt_err (*wait_any)(void *arg, void **h, int n, int *index);
} dt_nn_pipe_ops;

typedef struct dt_nn_pipe_stats {
	double loss;        /* last stage: summed over the micro-batches */
	int peak_stashed;   /* micro-batch inputs kept at once, at most */
	size_t stash_bytes; /* their bytes */
	size_t act_bytes;   /* and the bytes of their activations (0 at the
	                       last stage: it keeps none between passes) */
	int slots;          /* activation slots allocated (the schedule's
	                       micro-batches in flight) */
	size_t alloc_bytes; /* their bytes with the stashed inputs': slots x
	                       (a micro-batch's input + activations) */
	uint64_t busy_ns;   /* time in the layers (the rest is waiting) */
	int reordered;      /* ready-first: backward passes run ahead of a
	                       forward the strict order would have run */
	/* Set by the caller (NULL: not wanted): an array of 2 x
	 * micro_batches that receives the CPU time of this thread in the
	 * layers, in ns, of forward pass k at [k] and backward pass k at
	 * [micro_batches + k] (the last stage runs both at once: all of it
	 * at [micro_batches + k]). A stage's time without the waiting and
	 * without other processes' time on the same cores. */
	uint64_t *op_cpu_ns;
} dt_nn_pipe_stats;

dt_err dt_nn_pipe_step(dt_nn_model *m, const dt_nn_pipe_cfg *cfg,
                       const dt_nn_pipe_ops *ops, dt_nn_pipe_stats *st);

/* Hybrid parallelism: after dt_nn_pipe_step, the replicas of a stage
 * (cfg->replicas pipelines, same stage) sum their gradients, an allreduce
 * among them (a reduce-scatter, each replica adding one chunk's parts in
 * replica order, then an allgather), so that every replica holds ((g0 +
 * g1) + g2) + ... bit for bit (the caller scales and steps the
 * optimizer). Every replica of the stage must call it; nothing to do with
 * one replica. The ops' peers are as in dt_nn_pipe_step. */
dt_err dt_nn_pipe_sum_replicas(dt_nn_model *m, const dt_nn_pipe_cfg *cfg,
                               const dt_nn_pipe_ops *ops);

/* The full layer spec the model was built from (built-ins expanded). */
const char *dt_nn_model_spec(const dt_nn_model *m);

/* Floats per input sample (784 for lenet), per output row (10) and per
 * label (1 for softmax_ce, the output size for l2/l1). */
size_t dt_nn_model_input_size(const dt_nn_model *m);
size_t dt_nn_model_output_size(const dt_nn_model *m);
size_t dt_nn_model_label_size(const dt_nn_model *m);

/* The tensor table: i in [0, dt_nn_model_num_tensors); NULL outside.
 * Tensors are laid out in order, without gaps, in both buffers, and the
 * entries are consecutive in memory (dt_nn_model_tensor(m, 0) is an array
 * that dt_nn_params_write() accepts). */
int dt_nn_model_num_tensors(const dt_nn_model *m);
const dt_nn_tensor *dt_nn_model_tensor(const dt_nn_model *m, int i);

/* The parameter and gradient buffers, dt_nn_model_num_params() floats each,
 * owned by the model. The caller may read and write them freely (pull new
 * weights into params, allreduce grads in place) between calls. */
size_t dt_nn_model_num_params(const dt_nn_model *m);
float *dt_nn_model_params(dt_nn_model *m);
float *dt_nn_model_grads(dt_nn_model *m);

/* Set every gradient to zero. Backward passes accumulate with +=. */
void dt_nn_model_zero_grad(dt_nn_model *m);

/*
 * Copy the parameters of src into dst, which must come from the same spec
 * (DT_ESIZE otherwise). For replicas that must start equal.
 */
dt_err dt_nn_model_copy_params(dt_nn_model *dst, const dt_nn_model *src);

/*
 * Inference: run the layers on x (batch x input_size floats, each sample in
 * C,H,W order) with dropout off. On DT_OK *out points at batch x
 * output_size floats owned by the model, valid until its next call.
 * Buffers grow on demand with batch; DT_ENOMEM leaves the model usable.
 */
dt_err dt_nn_forward(dt_nn_model *m, const float *x, int batch,
                     const float **out);

/*
 * Training step on one batch: forward (dropout on), loss and backward,
 * ADDING the gradients of the summed loss into the gradient buffer.
 * y holds batch x label_size floats: class indices for softmax_ce (0..9 as
 * floats, as MXNet labels are), targets for l2/l1. On DT_OK *loss is the
 * loss summed over the batch and *correct the number of samples whose
 * arg-max output equals the label (0 for regression); either may be NULL.
 * A label out of range fails with DT_EINVAL before any gradient changes.
 */
dt_err dt_nn_forward_backward(dt_nn_model *m, const float *x, const float *y,
                              int batch, double *loss, int *correct);

/*
 * Called during dt_nn_forward_backward's backward pass as soon as the
 * gradients of tensors [first, first + count) are final (a layer's weight
 * and bias), last layer first. A data-parallel trainer starts sending them
 * here, so communication overlaps the rest of the backward pass; the
 * parameters of those tensors are not read again in this step, so new
 * values may be received into them meanwhile. NULL removes the hook.
 */
typedef void (*dt_nn_grad_hook)(void *arg, int first, int count);
void dt_nn_model_set_grad_hook(dt_nn_model *m, dt_nn_grad_hook fn, void *arg);

/*
 * Called during every forward pass (training, dt_nn_forward and
 * evaluation) just before a layer first reads the parameters of tensors
 * [first, first + count) (its weight and bias), first layer first. A
 * trainer whose new parameters are still arriving waits here for that
 * layer's only, so the layers before it compute meanwhile. The hook
 * cannot fail the pass: a trainer keeps its own error and reports it
 * after the call. NULL removes the hook.
 */
typedef void (*dt_nn_param_hook)(void *arg, int first, int count);
void dt_nn_model_set_param_hook(dt_nn_model *m, dt_nn_param_hook fn, void *arg);

/* Forward and loss without backward, dropout off (evaluation). */
dt_err dt_nn_evaluate(dt_nn_model *m, const float *x, const float *y, int batch,
                      double *loss, int *correct);

/* Outputs (logits) of the last forward pass, batch x output_size floats. */
const float *dt_nn_model_output(const dt_nn_model *m);

/*
 * FLOPs of the model's matrix products (conv and dense, 2*M*N*K per gemm)
 * per sample: forward, and backward (weight and input gradients; the first
 * layer computes no input gradient).
 */
void dt_nn_model_flops(const dt_nn_model *m, double *fwd, double *bwd);

/* ------------------------------------------------------------------------
 * Optimizers (MXNet's update rules, element for element; see optim.c)
 */

typedef struct dt_nn_optim_param {
	double lr;            /* learning_rate: sgd 0.01, adam 0.001 */
	double momentum;      /* sgd: 0 = plain sgd, no state */
	double wd;            /* weight decay, scaled by a tensor's wd_mult */
	double rescale_grad;  /* grad *= rescale_grad first; 1 */
	double clip_gradient; /* clip to [-c, c] if c > 0; <= 0 = off (-1) */
	double beta1;         /* adam 0.9 */
	double beta2;         /* adam 0.999 */
	double epsilon;       /* adam 1e-8 */
} dt_nn_optim_param;

/*
 * Fill p with the defaults of optimizer name ("sgd" or "adam") and then
 * the "key=value,..." pairs of s (may be NULL or ""): lr (or
 * learning_rate), momentum, wd, rescale_grad, clip_gradient, beta1, beta2,
 * epsilon — the same string dt_kv_set_optimizer() takes.
 */
dt_err dt_nn_optim_parse(const char *name, const char *s, dt_nn_optim_param *p);

/*
 * The update kernels over n floats, for callers that keep their own state
 * (a server applying updates per key). wd is the effective weight decay
 * (p->wd times the tensor's wd_mult). sgd: mom (n floats, start at zero) is
 * required when p->momentum != 0 and ignored otherwise. adam: mean and var
 * (n floats each, start at zero); t is the 1-based update count of this
 * tensor, used for the bias correction lr * sqrt(1-beta2^t) / (1-beta1^t).
 */
dt_err dt_nn_sgd_update(const dt_nn_optim_param *p, double wd, float *w,
                        const float *g, float *mom, size_t n);
dt_err dt_nn_adam_update(const dt_nn_optim_param *p, double wd, uint64_t t,
                         float *w, const float *g, float *mean, float *var,
                         size_t n);

typedef struct dt_nn_optim dt_nn_optim;

/*
 * An optimizer with state for every parameter of m (momentum, or Adam's
 * mean and variance), zero at start. params as dt_nn_optim_parse(). On DT_OK
 * the caller frees *out with dt_nn_optim_destroy(). It may be used with any
 * model of the same spec (replicas).
 */
dt_err dt_nn_optim_create(const char *name, const char *params,
                          const dt_nn_model *m, dt_nn_optim **out);
void dt_nn_optim_destroy(dt_nn_optim *o);

/* One update of every tensor of m from m's gradient buffer, with weight
 * decay wd * wd_mult. Gradients are left as they are. */
dt_err dt_nn_optim_step(dt_nn_optim *o, dt_nn_model *m);

/* Change the learning rate (schedules) / read the parameters in use. */
void dt_nn_optim_set_lr(dt_nn_optim *o, double lr);
const dt_nn_optim_param *dt_nn_optim_get_param(const dt_nn_optim *o);
/* Number of dt_nn_optim_step() calls so far. */
uint64_t dt_nn_optim_num_update(const dt_nn_optim *o);

/* ------------------------------------------------------------------------
 * Data sets
 */

/* A data set in memory. The caller owns the struct; the arrays belong to it
 * after a load and are freed by dt_data_fini(). A caller may lower n to use
 * a prefix of the data. The arrays of a load from the data cache lie in a
 * private mapping of the cache file (mapped; NULL otherwise): writable
 * like malloc'd arrays, the writes staying the process's own. */
typedef struct dt_dataset {
	size_t n;         /* samples */
	size_t dim;       /* floats per sample */
	size_t label_dim; /* floats per label (1) */
	int shape[3];     /* C, H, W of a sample (1, 28, 28; or 1, 1, dim) */
	float *x;         /* n x dim */
	float *y;         /* n x label_dim */
	void *mapped;     /* the data cache's mapping x and y lie in, or NULL */
	size_t mapped_len; /* its length in bytes */
} dt_dataset;

/*
 * Read MNIST idx files (images 0x00000803, labels 0x00000801), gzipped or
 * plain. Pixels are scaled to [0, 1], labels stored as floats. A data set
 * of 4 MiB of arrays or more goes through the host's data cache
 * (DTRAIN_DATA_CACHE, docs/training.md): the first load writes the arrays
 * it decoded there, and a later load of the same, unchanged files maps
 * them instead of decoding (the same bytes). Errors name
 * the file: missing (DT_EIO), wrong magic or implausible dimensions
 * (DT_EFORMAT), truncated (DT_EFORMAT), image and label counts that differ
 * (DT_ESIZE). On error *out is left empty.
 */
dt_err dt_data_load_mnist(const char *images, const char *labels,
                          dt_dataset *out);

/* Load "train" or "t10k" from a directory holding the four standard files
 * (train-images-idx3-ubyte[.gz] ...), e.g. /usr/share/datasets/fashion-mnist.
 */
dt_err dt_data_load_mnist_dir(const char *dir, int train, dt_dataset *out);

/*
 * Write d as MNIST idx files, gzipped when a path ends in ".gz". Pixels are
 * stored as round(255 * x) clamped to [0, 255]; labels must be integers in
 * [0, 255]. For tests and for cutting small data sets.
 */
dt_err dt_data_save_mnist(const dt_dataset *d, const char *images,
                          const char *labels);

/*
 * Read a CSV file of numbers, one sample per line; column label_col is the
 * label (-1: the last column) and the others the features. A first line
 * that is not numeric is taken as a header and skipped; blank lines are
 * skipped. Rows with a different number of columns or a field that is not a
 * number fail with DT_EFORMAT naming the line and column.
 */
dt_err dt_data_load_csv(const char *path, int label_col, dt_dataset *out);

/* Free the arrays of d and zero it. Safe on a zeroed or freed struct. */
void dt_data_fini(dt_dataset *d);

/* Copy samples idx[0..count) into x (count x dim) and y (count x
 * label_dim); y may be NULL. Indices >= n fail with DT_EINVAL. */
dt_err dt_data_gather(const dt_dataset *d, const size_t *idx, size_t count,
                      float *x, float *y);

/* ------------------------------------------------------------------------
 * Split sampler
 */

typedef struct dt_sampler dt_sampler;

/*
 * A sampler over n samples for part part_index of num_parts (a worker's
 * rank and the number of workers). Each epoch draws one permutation of
 * [0, n) from (seed, epoch) — identical on every part — and cuts it into
 * global batches of batch * num_parts indices; part r takes the slice
 * [r*batch, (r+1)*batch) of every global batch. Every part therefore has
 * floor(n / (batch * num_parts)) batches of exactly batch indices, and the
 * parts of one global batch together equal the batch a single process
 * sampling batch * num_parts would see. With shuffle 0 the permutation is
 * the identity. On DT_OK the caller frees *out with dt_sampler_destroy().
 */
dt_err dt_sampler_create(size_t n, size_t batch, int num_parts, int part_index,
                         uint64_t seed, int shuffle, dt_sampler **out);
void dt_sampler_destroy(dt_sampler *s);

/* Batches per epoch, the same on every part (0 if n < batch * num_parts).
 */
size_t dt_sampler_num_batches(const dt_sampler *s);

/* Draw the permutation of an epoch. Epoch 0 is drawn by create. */
dt_err dt_sampler_set_epoch(dt_sampler *s, uint64_t epoch);

/* The batch indices of batch b of the current epoch for this part: *idx
 * points at `batch` indices owned by the sampler, valid until the next
 * dt_sampler_set_epoch() or destroy. b >= num_batches fails. */
dt_err dt_sampler_batch(const dt_sampler *s, size_t b, const size_t **idx);

/*
 * Elastic training: deal the rest of the current epoch again, from
 * position start of its permutation (the samples the job has consumed in
 * this epoch so far), to num_parts parts, this one part_index. Batch b is
 * then the slice start + (b * num_parts + part_index) * batch of the
 * permutation, and dt_sampler_num_batches() counts the full global batches
 * left, floor((n - start) / (batch * num_parts)). So each sample of an
 * epoch is trained on once whatever the number of workers at each step,
 * except the tail under one global batch, left out as without a change.
 * dt_sampler_set_epoch() starts the next epoch at position 0 with the
 * parts given here. start past n: DT_EINVAL.
 */
dt_err dt_sampler_reshard(dt_sampler *s, int num_parts, int part_index,
                          size_t start);
/* Position in the epoch's permutation after global batch b (the samples
 * consumed once it is done): start + (b + 1) * batch * num_parts. */
size_t dt_sampler_position(const dt_sampler *s, size_t b);

/* ------------------------------------------------------------------------
 * Metrics and progress
 */

typedef enum dt_metric_kind {
	DT_METRIC_ACCURACY, /* fraction of arg-max outputs equal to the label */
	DT_METRIC_MAE,      /* mean absolute error over all label elements */
} dt_metric_kind;

/* A running metric; caller-owned storage, no fini needed. */
typedef struct dt_metric {
	dt_metric_kind kind;
	double sum;   /* correct samples, or summed absolute error */
	double count; /* samples, or label elements */
} dt_metric;

/* name: "accuracy" (or "acc") or "mae". */
dt_err dt_metric_init(dt_metric *mt, const char *name);
const char *dt_metric_name(const dt_metric *mt);
void dt_metric_reset(dt_metric *mt);
/* Add a batch of outputs (batch x out_dim) against labels (batch x 1 class
 * indices for accuracy, batch x out_dim targets for mae). */
dt_err dt_metric_update(dt_metric *mt, const float *out, const float *y,
                        size_t batch, size_t out_dim);
/* Add precomputed counts (e.g. `correct` of dt_nn_forward_backward). */
void dt_metric_add(dt_metric *mt, double sum, double count);
/* The value (0 when nothing was added). */
double dt_metric_get(const dt_metric *mt);

/*
 * MXNet's Speedometer callback: every `frequent` batches it prints
 *   Epoch[0] Batch [0-50] Speed: 2248.71 samples/sec accuracy=0.583640
 * (speed of this process over the last `frequent` batches, the metric as
 * MXNet's "%s=%f") and resets the metric. Caller-owned storage.
 */
typedef struct dt_speedometer {
	size_t batch_size;
	long frequent;
	FILE *out;       /* where lines go; NULL: only kept in line[] */
	int started;     /* private: timing state */
	long last_count; /* private */
	uint64_t tic_ns; /* private */
	char line[256];  /* the last line printed, without newline */
	double speed;    /* samples/sec of the last line printed */
} dt_speedometer;

dt_err dt_speedometer_init(dt_speedometer *sp, size_t batch_size, long frequent,
                           FILE *out);
/*
 * Call after every batch with its 0-based index within the epoch (MXNet's
 * nbatch). Prints at nbatch = frequent, 2*frequent, ... and then resets
 * metric (which may be NULL). *printed (may be NULL) says whether it did.
 */
dt_err dt_speedometer_update(dt_speedometer *sp, int epoch, long nbatch,
                             dt_metric *metric, int *printed);

/*
 * The metrics log (`--metrics FILE` of the examples; `dtrain plot` draws
 * it): one JSON object per line,
 *   {"run":"dist_sync 2w","epoch":0,"batch":50,"samples_per_sec":2248.7,
 *    "metric":"accuracy","train":0.5836,"val":null,"loss":null,
 *    "val_loss":null,"comm_s":0.41,"wall_s":3.2}
 * batch is -1 on the line that ends an epoch (which carries "val");
 * null marks what a line does not have. docs/observability.md.
 */
typedef struct dt_metrics_log dt_metrics_log;

typedef struct dt_metrics_rec {
	int epoch;
	long batch;             /* batches done in the epoch; -1: its end */
	double samples_per_sec; /* < 0: none */
	const char *metric;     /* the training metric's name ("accuracy") */
	double train, val;     /* the metric, on training and validation data */
	double loss, val_loss; /* NaN: none (as every double here) */
	double comm_s;         /* communication seconds in the epoch so far */
	double wall_s;         /* < 0: seconds since dt_metrics_open */
} dt_metrics_rec;

/* Create (truncate) path. label names the run in the plot's legend
 * (printable ASCII, at most 64 bytes; NULL: the file's name). */
dt_err dt_metrics_open(const char *path, const char *label,
                       dt_metrics_log **out);
/* Append r as one line, flushed (a crash loses no finished line). */
dt_err dt_metrics_write(dt_metrics_log *l, const dt_metrics_rec *r);
/* Close; DT_EIO if a write failed. NULL is a no-op. */
dt_err dt_metrics_close(dt_metrics_log *l);

/* ------------------------------------------------------------------------
 * Parameter files
 *
 * Format (docs/training.md), all integers little-endian:
 *   "DTPARAMS" magic (8 bytes), u32 version (1), u32 tensor count,
 *   per tensor: u16 name length, name bytes, u32 ndim, ndim x u32 dims,
 *               u64 float count, count x float32;
 *   u32 CRC-32 (zlib) of every byte before it.
 */

/* Write tensors t[0..nt) of buf (offsets into buf) to path, atomically
 * (a temporary file renamed into place). */
dt_err dt_nn_params_write(const char *path, const dt_nn_tensor *t, int nt,
                          const float *buf);

/* Save / load the parameters of a model. Load checks that the file holds
 * the same tensors (names and shapes) in the same order (DT_ESIZE naming
 * the first difference) and changes nothing on error. */
dt_err dt_nn_params_save(const dt_nn_model *m, const char *path);
dt_err dt_nn_params_load(dt_nn_model *m, const char *path);

/* A parameter file read into memory, independent of any model. */
typedef struct dt_nn_params dt_nn_params;

/* Read and verify a file (magic, version, limits, sizes, CRC). On DT_OK the
 * caller frees *out with dt_nn_params_free(). */
dt_err dt_nn_params_read(const char *path, dt_nn_params **out);
void dt_nn_params_free(dt_nn_params *p);
int dt_nn_params_num_tensors(const dt_nn_params *p);
const dt_nn_tensor *dt_nn_params_tensor(const dt_nn_params *p, int i);
const float *dt_nn_params_data(const dt_nn_params *p);

/* How two parameter files differ. */
typedef struct dt_nn_params_diff {
	double max_abs;   /* max |a - b| over all elements */
	double max_rel;   /* max |a - b| / max(|a|, |b|); 0 where both are 0 */
	int worst_tensor; /* index of the tensor with the largest |a - b| */
	size_t worst_index; /* element within that tensor */
	float worst_a, worst_b;
} dt_nn_params_diff;

/* Compare two files of the same model: DT_ESIZE (naming the first tensor
 * whose name or shape differs) when they are not comparable. NaN elements
 * count as an infinite difference unless both are NaN. */
dt_err dt_nn_params_compare(const dt_nn_params *a, const dt_nn_params *b,
                            dt_nn_params_diff *out);

#ifdef __cplusplus
}
#endif
#endif
