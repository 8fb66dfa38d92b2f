/*
 * model.c - sequential models: spec parsing, the parameter and gradient
 * buffers, initialisation, and the forward/backward passes.
 *
 * A model is built from a spec string ("input:1x28x28,conv:20:5,...",
 * dtrain/nn.h) into an array of layers. Parameters of all layers are laid
 * out one tensor after another in one float buffer, and gradients in a
 * second buffer with the same offsets, so the whole model is one array to
 * push, pull or allreduce, and each tensor is a slice a KVStore key can name.
 *
 * Activations live in per-layer buffers sized for the largest batch seen
 * (they grow on demand, all or nothing). Elementwise layers run in place
 * when no backward pass still needs the values they overwrite, and the
 * backward pass ping-pongs between two gradient buffers. Layer kernels are
 * in layers.c and losses in loss.c; this file only plans and dispatches.
 * Pipeline stages (a model cut to a range of its layers, the cut rule and
 * the activation slots a stage keeps micro-batches in) are in stage.c; the
 * structures both files use are in model_impl.h.
 *
 * Size: its ideas are building the model and running forward/backward
 * over one parameter buffer; parsing a model description is spec.c's,
 * pipeline stages stage.c's.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "common/util.h"
#include "dtrain/nn.h"
#include "dtrain/obs.h"
#include "nn/blas.h"
#include "nn/layers.h"
#include "nn/model_impl.h"
#include "obs/obs.h"

/* ---- initialisation ---- */

/*
 * MXNet's Xavier initializer with its defaults (rnd_type "uniform",
 * factor_type "avg", magnitude 3): for a weight of shape (out, in, ...),
 * fan_in = in * receptive field, fan_out = out * receptive field and the
 * values are uniform in [-s, s] with s = sqrt(3 / ((fan_in + fan_out) / 2)).
 * Each tensor draws from its own stream nn_mix(seed, index), so the values
 * depend only on the seed and the layout, never on anything else.
 */
static void
init_params(dt_nn_model *m, uint64_t seed, int first_tensor)
{
	for (int i = 0; i < m->ntensors; i++) {
		const dt_nn_tensor *t = &m->tensors[i];
		float *p = m->params + t->offset;
		/* A stage's tensors draw the streams of their index in the
		 * whole model, so its values equal the whole model's. */
		uint64_t rng = nn_mix(seed, (uint64_t)(i + first_tensor));
		double hw = 1.0, fan_in, fan_out;
		float scale;

		if (t->ndim == 1) {
			memset(p, 0, sizeof(float) * t->size);
			continue;
		}
		for (int d = 2; d < t->ndim; d++)
			hw *= t->shape[d];
		fan_in = t->shape[1] * hw;
		fan_out = t->shape[0] * hw;
		scale = (float)sqrt(3.0 / ((fan_in + fan_out) / 2.0));
		for (size_t j = 0; j < t->size; j++)
			p[j] = (2.0f * nn_rng_uniform(&rng) - 1.0f) * scale;
	}
}

/* ---- buffers ---- */

void
dt__nn_free_bufs(bufs *b, int n)
{
	for (int i = 0; i < n; i++) {
		free(b[i].out);
		free(b[i].col);
		free(b[i].mask);
		free(b[i].arg);
	}
}

static float *
alloc_floats(size_t n)
{
	return dt__aligned_alloc(sizeof(float) * n);
}

int
dt__nn_alloc_layer_bufs(const dt_nn_model *m, size_t B, bufs *nb)
{
	for (int i = 0; i < m->nlayers; i++) {
		const layer *L = &m->layers[i];
		size_t n = B * L->out_size;

		if (!L->inplace && !L->alias &&
		    (nb[i].out = alloc_floats(n)) == NULL)
			return -1;
		if (L->kind == L_CONV &&
		    (nb[i].col = alloc_floats(B * L->c * L->k * L->k * L->oh *
		                              L->ow)) == NULL)
			return -1;
		if (L->kind == L_MAXPOOL && (nb[i].arg = dt__aligned_alloc(
		                                 sizeof(int32_t) * n)) == NULL)
			return -1;
		if (L->kind == L_DROPOUT &&
		    (nb[i].mask = alloc_floats(n)) == NULL)
			return -1;
	}
	return 0;
}

/* Grow every activation buffer to batch samples, all or nothing. Extra
 * slots are dropped first: they all have the capacity of the first. */
dt_err
dt__nn_reserve(dt_nn_model *m, int batch)
{
	bufs nb[MAX_LAYERS];
	float *ng[2] = {NULL, NULL};
	size_t B = (size_t)batch;

	if (batch <= m->cap)
		return DT_OK;
	dt__nn_drop_slots(m);
	memset(nb, 0, sizeof(nb));
	if (dt__nn_alloc_layer_bufs(m, B, nb) ||
	    (ng[0] = alloc_floats(B * m->gsize)) == NULL ||
	    (ng[1] = alloc_floats(B * m->gsize)) == NULL)
		goto fail;
	for (int i = 0; i < m->nlayers; i++) {
		layer *L = &m->layers[i];

		free(L->out);
		free(L->col);
		free(L->mask);
		free(L->arg);
		L->out = nb[i].out;
		L->col = nb[i].col;
		L->mask = nb[i].mask;
		L->arg = nb[i].arg;
	}
	free(m->gbuf[0]);
	free(m->gbuf[1]);
	m->gbuf[0] = ng[0];
	m->gbuf[1] = ng[1];
	m->cap = batch;
	m->last_out = NULL;
	return DT_OK;
fail:
	dt__nn_free_bufs(nb, m->nlayers);
	free(ng[0]);
	free(ng[1]);
	return dt__fail(DT_ENOMEM,
	                "model: no memory for activations of a "
	                "batch of %d",
	                batch);
}

/* ---- public: life cycle and accessors ---- */

static dt_err
model_build(const char *spec, uint64_t seed, int first, int last,
            dt_nn_model **out)
{
	dt_nn_model *m;
	const char *full = spec;
	size_t biggest;
	int t0 = 0;
	dt_err err;

	if (spec == NULL || out == NULL)
		return dt__fail(DT_EINVAL, "dt_nn_model_create: NULL argument");
	*out = NULL;
	full = dt__nn_builtin_spec(spec);
	dt__nn_blas_setup();
	if ((m = dt__calloc(1, sizeof(*m))) == NULL)
		return DT_ENOMEM;
	m->has_loss = 1;
	m->nslots = 1;
	if ((err = dt__nn_parse_spec(m, full)))
		goto fail;
	if (first >= 0 && (err = dt__nn_cut_layers(m, first, last, &t0)))
		goto fail;
	err = DT_ENOMEM;
	if ((m->spec = strdup(full)) == NULL) {
		dt__fail(DT_ENOMEM, "model: out of memory");
		goto fail;
	}
	if ((m->params = alloc_floats(m->nparams)) == NULL ||
	    (m->grads = alloc_floats(m->nparams)) == NULL)
		goto fail;
	memset(m->grads, 0, sizeof(float) * m->nparams);
	init_params(m, seed, t0);
	m->rng = nn_mix(seed, 0x64726f706f7574ull); /* "dropout" */
	m->gsize = m->out_size;
	biggest = m->out_size;
	for (int i = 0; i < m->nlayers; i++) {
		const layer *L = &m->layers[i];

		m->gsize = DT_MAX(m->gsize, L->in_size);
		m->gsize = DT_MAX(m->gsize, L->out_size);
		biggest = DT_MAX(biggest, m->gsize);
		if (L->kind == L_CONV)
			biggest = DT_MAX(biggest, (size_t)L->c * L->k * L->k *
			                              L->oh * L->ow);
	}
	m->max_batch = (int)DT_MIN((size_t)INT32_MAX / biggest, 1u << 20);
	*out = m;
	return DT_OK;
fail:
	dt_nn_model_destroy(m);
	return err;
}

dt_err
dt_nn_model_create(const char *spec, uint64_t seed, dt_nn_model **out)
{
	return model_build(spec, seed, -1, -1, out);
}

dt_err
dt_nn_model_create_stage(const char *spec, uint64_t seed, int first, int last,
                         dt_nn_model **out)
{
	if (first < 0)
		return dt__fail(DT_EINVAL, "model stage: first layer %d < 0",
		                first);
	return model_build(spec, seed, first, last, out);
}

void
dt_nn_model_destroy(dt_nn_model *m)
{
	if (m == NULL)
		return;
	dt__nn_pipe_free(m);
	dt__nn_drop_slots(m);
	for (int i = 0; i < m->nlayers; i++) {
		free(m->layers[i].out);
		free(m->layers[i].col);
		free(m->layers[i].mask);
		free(m->layers[i].arg);
	}
	free(m->gbuf[0]);
	free(m->gbuf[1]);
	free(m->params);
	free(m->grads);
	free(m->spec);
	free(m);
}

const char *
dt_nn_model_spec(const dt_nn_model *m)
{
	return m->spec;
}

size_t
dt_nn_model_input_size(const dt_nn_model *m)
{
	return m->in_size;
}

size_t
dt_nn_model_output_size(const dt_nn_model *m)
{
	return m->out_size;
}

size_t
dt_nn_model_label_size(const dt_nn_model *m)
{
	return m->label_size;
}

int
dt_nn_model_num_tensors(const dt_nn_model *m)
{
	return m->ntensors;
}

const dt_nn_tensor *
dt_nn_model_tensor(const dt_nn_model *m, int i)
{
	if (i < 0 || i >= m->ntensors)
		return NULL;
	return &m->tensors[i];
}

size_t
dt_nn_model_num_params(const dt_nn_model *m)
{
	return m->nparams;
}

float *
dt_nn_model_params(dt_nn_model *m)
{
	return m->params;
}

float *
dt_nn_model_grads(dt_nn_model *m)
{
	return m->grads;
}

void
dt_nn_model_zero_grad(dt_nn_model *m)
{
	memset(m->grads, 0, sizeof(float) * m->nparams);
}

dt_err
dt_nn_model_copy_params(dt_nn_model *dst, const dt_nn_model *src)
{
	if (dst->nparams != src->nparams || strcmp(dst->spec, src->spec) != 0)
		return dt__fail(DT_ESIZE,
		                "copy of parameters between models "
		                "'%s' (%zu floats) and '%s' (%zu floats)",
		                src->spec, src->nparams, dst->spec,
		                dst->nparams);
	memcpy(dst->params, src->params, sizeof(float) * dst->nparams);
	return DT_OK;
}

const float *
dt_nn_model_output(const dt_nn_model *m)
{
	return m->last_out;
}

/* Forward floating-point operations per sample of a conv or dense layer
 * (0 for the others, whose cost is small beside them). */
double
dt__nn_layer_flops(const layer *L)
{
	if (L->kind == L_CONV)
		return 2.0 * L->oc * ((double)L->c * L->k * L->k) *
		       ((double)L->oh * L->ow);
	if (L->kind == L_DENSE)
		return 2.0 * L->oc * (double)L->c;
	return 0.0;
}

void
dt_nn_model_flops(const dt_nn_model *m, double *fwd, double *bwd)
{
	double f = 0.0, b = 0.0;

	for (int i = 0; i < m->nlayers; i++) {
		const layer *L = &m->layers[i];
		double g = dt__nn_layer_flops(L);

		if (g == 0.0)
			continue;
		f += g;
		b += L->need_dx ? 2.0 * g : g;
	}
	if (fwd)
		*fwd = f;
	if (bwd)
		*bwd = b;
}

/* ---- forward and backward ---- */

static nn_conv_shape
conv_shape(const layer *L, int B)
{
	nn_conv_shape sh;
	size_t hw = (size_t)L->h * L->w;

	sh.c = L->c;
	sh.h = L->h;
	sh.w = L->w;
	sh.m = L->oc;
	sh.k = L->k;
	sh.s = L->s;
	sh.p = L->p;
	sh.oh = L->oh;
	sh.ow = L->ow;
	sh.batch = B;
	sh.cs = L->cm_in ? (size_t)B * hw : hw;
	sh.bs = L->cm_in ? hw : (size_t)L->c * hw;
	return sh;
}

/* Layer i forward from cur (the layer before's output, or the input):
 * returns its output. */
const float *
dt__nn_forward_layer(dt_nn_model *m, int i, const float *cur, int B, int train)
{
	layer *L = &m->layers[i];
	const float *wt =
	    L->wt >= 0 ? m->params + m->tensors[L->wt].offset : NULL;
	const float *bs =
	    L->wt >= 0 ? m->params + m->tensors[L->wt + 1].offset : NULL;
	float *dst = L->inplace ? (float *)cur : L->out;
	size_t n = (size_t)B * L->out_size;

	/* (The trainer may still be receiving these parameters.) */
	if (L->wt >= 0 && m->param_hook)
		m->param_hook(m->param_hook_arg, L->wt, 2);
	L->x = cur;
	switch (L->kind) {
	case L_CONV: {
		nn_conv_shape sh = conv_shape(L, B);

		nn_conv2d_forward(cur, wt, bs, &sh, L->col, dst);
		break;
	}
	case L_MAXPOOL:
		nn_maxpool_forward(cur, (size_t)B * L->c, L->h, L->w, L->k,
		                   L->s, dst, L->arg);
		break;
	case L_RELU:
		nn_relu_forward(cur, n, dst);
		break;
	case L_TANH:
		nn_tanh_forward(cur, n, dst);
		break;
	case L_DROPOUT:
		if (train && L->rate > 0.0f)
			nn_dropout_forward(cur, n, L->rate, &m->rng, L->mask,
			                   dst);
		else if (dst != cur)
			memcpy(dst, cur, sizeof(float) * n);
		break;
	case L_FLATTEN:
		if (L->alias)
			dst = (float *)cur;
		else
			nn_flatten_forward(cur, L->c, B, (size_t)L->h * L->w,
			                   dst);
		break;
	case L_DENSE:
		nn_dense_forward(cur, wt, bs, B, L->c, L->oc, dst);
		break;
	}
	L->y = dst;
	return dst;
}

void
dt__nn_forward(dt_nn_model *m, const float *x, int B, int train)
{
	const float *cur = x;

	for (int i = 0; i < m->nlayers; i++)
		cur = dt__nn_forward_layer(m, i, cur, B, train);
	m->last_out = cur;
}

/* Layer i backward from the gradient of its output in gbuf[gi]: returns
 * the gbuf index holding the gradient of its input, or -1 when no layer
 * from here down needs one (the pass ends). */
int
dt__nn_backward_layer(dt_nn_model *m, int i, int gi, int B, int train)
{
	layer *L = &m->layers[i];
	float *dy = m->gbuf[gi];
	float *dx = L->need_dx ? m->gbuf[gi ^ 1] : NULL;
	size_t n = (size_t)B * L->out_size;
	const float *wt = NULL;
	float *dw = NULL, *db = NULL;

	if (L->wt < 0 && !L->need_dx)
		return -1; /* nothing below needs a gradient */
	if (L->wt >= 0) {
		wt = m->params + m->tensors[L->wt].offset;
		dw = m->grads + m->tensors[L->wt].offset;
		db = m->grads + m->tensors[L->wt + 1].offset;
	}
	switch (L->kind) {
	case L_CONV: {
		nn_conv_shape sh = conv_shape(L, B);

		nn_conv2d_backward(dy, wt, &sh, L->col, dw, db, dx);
		gi ^= 1;
		break;
	}
	case L_MAXPOOL:
		nn_maxpool_backward(dy, L->arg, (size_t)B * L->c, L->h, L->w,
		                    L->k, L->s, dx);
		gi ^= 1;
		break;
	case L_RELU:
		nn_relu_backward(dy, L->y, n, dy);
		break;
	case L_TANH:
		nn_tanh_backward(dy, L->y, n, dy);
		break;
	case L_DROPOUT:
		if (train && L->rate > 0.0f)
			nn_dropout_backward(dy, L->mask, n, dy);
		break;
	case L_FLATTEN:
		if (!L->alias) {
			nn_flatten_backward(dy, L->c, B, (size_t)L->h * L->w,
			                    dx);
			gi ^= 1;
		}
		break;
	case L_DENSE:
		nn_dense_backward(dy, L->x, wt, B, L->c, L->oc, dw, db, dx);
		gi ^= 1;
		break;
	}
	/* This layer's weight and bias gradients are final now. */
	if (L->wt >= 0 && m->grad_hook)
		m->grad_hook(m->grad_hook_arg, L->wt, 2);
	return gi;
}

/* Backward from the loss gradient in gbuf[0]; accumulates into grads. */
void
dt__nn_backward(dt_nn_model *m, int B, int train)
{
	int gi = 0;

	for (int i = m->nlayers - 1; i >= 0; i--) {
		int next = dt__nn_backward_layer(m, i, gi, B, train);

		if (next < 0)
			break;
		gi = next;
	}
	/* The gradient of the input, when an earlier layer (or stage)
	 * needs one: elementwise layers leave theirs in place. */
	m->in_grad = m->layers[0].need_dx ? m->gbuf[gi] : NULL;
}

void
dt_nn_model_set_grad_hook(dt_nn_model *m, dt_nn_grad_hook fn, void *arg)
{
	m->grad_hook = fn;
	m->grad_hook_arg = arg;
}

void
dt_nn_model_set_param_hook(dt_nn_model *m, dt_nn_param_hook fn, void *arg)
{
	m->param_hook = fn;
	m->param_hook_arg = arg;
}

dt_err
dt__nn_check_call(const dt_nn_model *m, const float *x, const float *y,
                  int need_y, int batch, const char *what)
{
	if (x == NULL || (y == NULL && need_y))
		return dt__fail(DT_EINVAL, "%s: NULL data", what);
	if (batch <= 0 || batch > m->max_batch)
		return dt__fail(DT_EINVAL, "%s: batch %d out of range [1, %d]",
		                what, batch, m->max_batch);
	if (y == NULL || m->loss != LOSS_CE)
		return DT_OK;
	for (int b = 0; b < batch; b++) {
		float v = y[b];

		if (!(v >= 0.0f && v < (float)m->out_size) || v != (int)v)
			return dt__fail(DT_EINVAL,
			                "%s: label %g of sample %d "
			                "is not a class in [0, %zu)",
			                what, (double)v, b, m->out_size);
	}
	return DT_OK;
}

static dt_err
check_loss(const dt_nn_model *m, const char *what)
{
	if (!m->has_loss)
		return dt__fail(DT_ESTATE,
		                "%s: this pipeline stage ends before the loss "
		                "(dt_nn_stage_forward and _backward run it)",
		                what);
	return DT_OK;
}

static double
loss_of(dt_nn_model *m, const float *y, int B, float *grad, int *correct)
{
	int n = (int)m->out_size, hits = 0;
	double l;

	switch (m->loss) {
	case LOSS_CE:
		l = nn_softmax_ce(m->last_out, y, B, n, grad, &hits);
		break;
	case LOSS_L2:
		l = nn_l2_loss(m->last_out, y, B, n, grad);
		break;
	default:
		l = nn_l1_loss(m->last_out, y, B, n, grad);
		break;
	}
	if (correct)
		*correct = hits;
	return l;
}

dt_err
dt_nn_forward(dt_nn_model *m, const float *x, int batch, const float **out)
{
	dt_err err;

	if ((err = dt__nn_check_call(m, x, NULL, 0, batch, "forward")) ||
	    (err = dt__nn_reserve(m, batch)))
		return err;
	dt__nn_select_slot(m, 0);
	dt__nn_forward(m, x, batch, 0);
	if (out)
		*out = m->last_out;
	return DT_OK;
}

dt_err
dt_nn_forward_backward(dt_nn_model *m, const float *x, const float *y,
                       int batch, double *loss, int *correct)
{
	dt_err err;
	double l;

	if ((err = dt__nn_check_call(m, x, y, 1, batch, "forward_backward")) ||
	    (err = check_loss(m, "forward_backward")) ||
	    (err = dt__nn_reserve(m, batch)))
		return err;
	dt__nn_select_slot(m, 0);
	uint64_t t0 = dt_obs_now();
	dt__nn_forward(m, x, batch, 1);
	l = loss_of(m, y, batch, m->gbuf[0], correct);
	uint64_t t1 = dt_obs_now();
	dt__nn_backward(m, batch, 1);
	uint64_t t2 = dt_obs_now();
	dt__obs_phase_span(DT_PHASE_FORWARD, t0, t1);
	dt__obs_phase_span(DT_PHASE_BACKWARD, t1, t2);
	if (loss)
		*loss = l;
	return DT_OK;
}

dt_err
dt_nn_evaluate(dt_nn_model *m, const float *x, const float *y, int batch,
               double *loss, int *correct)
{
	dt_err err;
	double l;

	if ((err = dt__nn_check_call(m, x, y, 1, batch, "evaluate")) ||
	    (err = check_loss(m, "evaluate")) ||
	    (err = dt__nn_reserve(m, batch)))
		return err;
	dt__nn_select_slot(m, 0);
	dt__nn_forward(m, x, batch, 0);
	l = loss_of(m, y, batch, NULL, correct);
	if (loss)
		*loss = l;
	return DT_OK;
}
