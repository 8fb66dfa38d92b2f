/*
 * model_impl.h - the model's private structures, shared by model.c (the
 * spec parser, the buffers and the passes), stage.c (pipeline stages:
 * cutting a model and the activation slots) and profile.c (each layer's
 * measured time). Nothing outside src/nn/
 * includes it; the public API is dtrain/nn.h.
 */
#ifndef DT_NN_MODEL_IMPL_H
#define DT_NN_MODEL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/nn.h"

#define MAX_LAYERS 64
#define MAX_DIM    (1 << 16) /* any one channel count, height, width */
#define MAX_PARAMS (1ull << 30)
#define MAX_ACT    (1 << 24) /* floats per sample of any activation */
#define MAX_SPEC   1024
#define NAME_LEN   32

enum layer_kind {
	L_CONV,
	L_MAXPOOL,
	L_RELU,
	L_TANH,
	L_FLATTEN,
	L_DENSE,
	L_DROPOUT,
};

enum loss_kind { LOSS_CE, LOSS_L2, LOSS_L1 };

typedef struct layer {
	enum layer_kind kind;
	int c, h, w;    /* input shape per sample (flat: c = size, h = w = 1) */
	int oc, oh, ow; /* output shape per sample */
	int cm_in;      /* input is channel-major (C, B, H, W) */
	int k, s, p;    /* conv / pool geometry */
	float rate;     /* dropout */
	int wt;         /* weight tensor index (bias is wt + 1), or -1 */
	int inplace;    /* output is written over the input buffer */
	int alias;      /* output IS the input (flatten of a flat input) */
	int need_dx;    /* some earlier layer has parameters */
	size_t in_size, out_size;
	/* Buffers for the current capacity (model-owned). */
	float *out, *col, *mask;
	int32_t *arg;
	/* Set by each forward pass for the backward pass. */
	const float *x, *y;
} layer;

struct dt_nn_model {
	char *spec;
	int nlayers;
	layer layers[MAX_LAYERS];
	enum loss_kind loss;
	int in_c, in_h, in_w;
	size_t in_size, out_size, label_size;
	int ntensors;
	dt_nn_tensor tensors[2 * MAX_LAYERS];
	char names[2 * MAX_LAYERS][NAME_LEN];
	size_t nparams;
	float *params, *grads;
	uint64_t rng;  /* dropout masks */
	int cap;       /* batch capacity of the activation buffers */
	size_t gsize;  /* floats per sample of each gradient buffer */
	int max_batch; /* keeps every buffer under 2^31 floats (sgemm ints) */
	float *gbuf[2];
	const float *last_out;
	dt_nn_grad_hook grad_hook; /* see dt_nn_model_set_grad_hook */
	void *grad_hook_arg;
	dt_nn_param_hook param_hook; /* see dt_nn_model_set_param_hook */
	void *param_hook_arg;
	int has_loss;         /* 0: a pipeline stage before the last */
	const float *in_grad; /* input gradient of the last backward, or NULL */
	int last_batch;       /* batch of the last dt_nn_stage_forward */
	/* Activation slots (dt_nn_stage_slots): slot `active` lives in the
	 * layers' buffer pointers, the others in slots[]; nslots is 1 (no
	 * array) until a pipeline stage asks for more. */
	struct act_slot *slots;
	int nslots, active;
	/* A pipeline stage's buffers outside the layers (its inputs'
	 * stash, its send rings), kept from one step to the next while
	 * their shape stays (pipeline.c); NULL until a step makes them. */
	struct pipe_bufs *pipe;
};

/* One set of a model's activation buffers (dt__nn_alloc_layer_bufs). */
typedef struct bufs {
	float *out, *col, *mask;
	int32_t *arg;
} bufs;

/*
 * One micro-batch's activations, kept from its forward pass to its
 * backward pass in a pipeline stage: the buffers every layer writes and
 * the pointers the forward pass leaves for the backward pass. While a
 * slot is active these live in the layers themselves (which the passes
 * read), and dt__nn_select_slot() moves them in and out.
 */
typedef struct act_slot {
	bufs b[MAX_LAYERS];
	const float *x[MAX_LAYERS], *y[MAX_LAYERS];
	const float *last_out;
	int batch;
} act_slot;

/* pipeline.c: free a stage's pipeline buffers (m->pipe), if any. */
void dt__nn_pipe_free(dt_nn_model *m);

/* model.c */
/* One set of activation buffers for B samples into nb (zeroed by the
 * caller); -1 when memory runs out (nb then holds what was allocated). */
int dt__nn_alloc_layer_bufs(const dt_nn_model *m, size_t B, bufs *nb);
void dt__nn_free_bufs(bufs *b, int n);
/* Grow the active activation buffers to batch samples (dropping the
 * extra slots first); DT_ENOMEM leaves the model as it was but for them. */
dt_err dt__nn_reserve(dt_nn_model *m, int batch);
/* x, y and batch fit the model; what names the call in the message. */
dt_err dt__nn_check_call(const dt_nn_model *m, const float *x, const float *y,
                         int need_y, int batch, const char *what);
void dt__nn_forward(dt_nn_model *m, const float *x, int B, int train);
/* From the loss gradient in gbuf[0]; accumulates into the gradients. */
void dt__nn_backward(dt_nn_model *m, int B, int train);
/* One layer of those passes (profile.c times them one by one): layer i
 * forward from cur, returning its output; layer i backward from the
 * gradient in gbuf[gi], returning the gbuf index of its input's gradient
 * or -1 when the pass ends there. */
const float *dt__nn_forward_layer(dt_nn_model *m, int i, const float *cur,
                                  int B, int train);
int dt__nn_backward_layer(dt_nn_model *m, int i, int gi, int B, int train);

/* profile.c: the calling thread's CPU time, in ns (what a layer costs
 * whatever else runs on the same cores). */
uint64_t dt__nn_cpu_now(void);
/* Forward operations per sample of a conv or dense layer, else 0. */
double dt__nn_layer_flops(const layer *L);

/* stage.c */
/* Keep layers [first, last) of the parsed whole model (see stage.c). */
dt_err dt__nn_cut_layers(dt_nn_model *m, int first, int last,
                         int *first_tensor);
/* Make slot k the one the layers use (a no-op without slots). */
void dt__nn_select_slot(dt_nn_model *m, int k);
/* Back to the layers' own buffers only (slot 0), freeing the others. */
void dt__nn_drop_slots(dt_nn_model *m);

/* spec.c: the description a built-in model name stands for (the name
 * itself when it is none), and a description parsed into m's layers and
 * tensors. */
const char *dt__nn_builtin_spec(const char *name);
dt_err dt__nn_parse_spec(dt_nn_model *m, const char *spec);

#endif
