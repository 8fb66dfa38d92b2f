/*
 * nn_layers_test.c - the layer kernels and the model built from them.
 *
 * Every layer's backward pass is checked against central finite
 * differences of its forward pass (ggml's test-backend-ops idea): with a
 * fixed random upstream gradient r, the objective L = sum(r * y) is
 * evaluated in double over the float outputs, and dL/dz from the backward
 * pass must match (L(z+e) - L(z-e)) / 2e for every input and parameter.
 * Convolution and dense forwards are compared with naive loops in double.
 * At model level: finite differences through a whole network, gradients
 * that add up over batch halves (the data-parallel contract), bit-identical
 * initialisation from a seed, and replicas in threads.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "dtrain/nn.h"
#include "nn/layers.h"

/* CRC-32 of the initial lenet parameters for seed 42 (portability). */
#define LENET42_CRC 0xe153e332u

static uint64_t rng = 12345;

static float
urand(float lo, float hi)
{
	return lo + (hi - lo) * nn_rng_uniform(&rng);
}

static float *
rand_array(size_t n, float lo, float hi)
{
	float *a = malloc(sizeof(float) * (n ? n : 1));

	assert_non_null(a);
	for (size_t i = 0; i < n; i++)
		a[i] = urand(lo, hi);
	return a;
}

static float *
zeros(size_t n)
{
	float *a = calloc(n ? n : 1, sizeof(float));

	assert_non_null(a);
	return a;
}

static double
dot(const float *r, const float *y, size_t n)
{
	double s = 0.0;

	for (size_t i = 0; i < n; i++)
		s += (double)r[i] * y[i];
	return s;
}

/*
 * Check analytic gradient g of objective f with respect to the n floats at
 * z, by central differences with step eps. Up to max_checks elements are
 * checked (spread over the array).
 */
typedef double (*objective)(void *ctx);

static void
check_grad(const char *what, objective f, void *ctx, float *z, const float *g,
           size_t n, float eps, double atol, double rtol)
{
	size_t step = n > 300 ? n / 300 : 1;
	int bad = 0;

	for (size_t i = 0; i < n; i += step) {
		float keep = z[i];
		double lp, lm, num;

		z[i] = keep + eps;
		lp = f(ctx);
		z[i] = keep - eps;
		lm = f(ctx);
		z[i] = keep;
		num = (lp - lm) / (2.0 * ((double)(keep + eps) - keep));
		if (fabs(num - g[i]) > atol + rtol * fabs(num)) {
			if (bad++ < 5)
				print_error("%s[%zu]: analytic %.7g numeric "
				            "%.7g\n",
				            what, i, (double)g[i], num);
		}
	}
	assert_int_equal(bad, 0);
}

/* ---- conv2d ---- */

typedef struct conv_ctx {
	nn_conv_shape sh;
	float *x, *w, *b, *col, *out, *r;
	size_t nout;
} conv_ctx;

static double
conv_obj(void *p)
{
	conv_ctx *c = p;

	nn_conv2d_forward(c->x, c->w, c->b, &c->sh, c->col, c->out);
	return dot(c->r, c->out, c->nout);
}

static nn_conv_shape
make_shape(int B, int C, int H, int W, int M, int k, int s, int p, int cm)
{
	nn_conv_shape sh;

	sh.c = C;
	sh.h = H;
	sh.w = W;
	sh.m = M;
	sh.k = k;
	sh.s = s;
	sh.p = p;
	sh.oh = nn_out_dim(H, k, s, p);
	sh.ow = nn_out_dim(W, k, s, p);
	sh.batch = B;
	sh.cs = cm ? (size_t)B * H * W : (size_t)H * W;
	sh.bs = cm ? (size_t)H * W : (size_t)C * H * W;
	return sh;
}

/* One output of a naive direct convolution, in double (x sample-major). */
static double
conv_naive_at(const float *x, const float *w, const float *b,
              const nn_conv_shape *sh, int m, int n, int oy, int ox)
{
	double acc = b[m];

	for (int c = 0; c < sh->c; c++) {
		const float *xp = x + ((size_t)n * sh->c + c) * sh->h * sh->w;
		const float *wp = w + ((size_t)m * sh->c + c) * sh->k * sh->k;

		for (int i = 0; i < sh->k; i++) {
			for (int j = 0; j < sh->k; j++) {
				int iy = oy * sh->s + i - sh->p;
				int ix = ox * sh->s + j - sh->p;

				if (iy >= 0 && ix >= 0 && iy < sh->h &&
				    ix < sh->w)
					acc += (double)wp[i * sh->k + j] *
					       xp[iy * sh->w + ix];
			}
		}
	}
	return acc;
}

/* The whole output (M, B, OH, OW) of the naive convolution. */
static void
conv_naive(const float *x, const float *w, const float *b,
           const nn_conv_shape *sh, double *out)
{
	size_t i = 0;

	for (int m = 0; m < sh->m; m++)
		for (int n = 0; n < sh->batch; n++)
			for (int oy = 0; oy < sh->oh; oy++)
				for (int ox = 0; ox < sh->ow; ox++)
					out[i++] = conv_naive_at(x, w, b, sh, m,
					                         n, oy, ox);
}

static void
conv_case(int B, int C, int H, int W, int M, int k, int s, int p)
{
	conv_ctx c;
	size_t nx = (size_t)B * C * H * W, nw = (size_t)M * C * k * k;
	float *dx, *dw, *db, *xcm, *outcm;
	double *ref;

	c.sh = make_shape(B, C, H, W, M, k, s, p, 0);
	c.nout = (size_t)M * B * c.sh.oh * c.sh.ow;
	c.x = rand_array(nx, -1, 1);
	c.w = rand_array(nw, -1, 1);
	c.b = rand_array((size_t)M, -1, 1);
	c.col = zeros((size_t)C * k * k * B * c.sh.oh * c.sh.ow);
	c.out = zeros(c.nout);
	c.r = rand_array(c.nout, -1, 1);
	dx = zeros(nx);
	dw = zeros(nw);
	db = zeros((size_t)M);
	ref = calloc(c.nout, sizeof(double));

	/* Forward against the naive loops. */
	conv_obj(&c);
	conv_naive(c.x, c.w, c.b, &c.sh, ref);
	for (size_t i = 0; i < c.nout; i++)
		assert_true(fabs(c.out[i] - ref[i]) <=
		            1e-5 * (1 + fabs(ref[i])));

	/* The same input in channel-major layout gives the same output. */
	xcm = zeros(nx);
	outcm = zeros(c.nout);
	for (int n = 0; n < B; n++)
		for (int ch = 0; ch < C; ch++)
			memcpy(xcm + ((size_t)ch * B + n) * H * W,
			       c.x + ((size_t)n * C + ch) * H * W,
			       sizeof(float) * H * W);
	{
		nn_conv_shape cm = make_shape(B, C, H, W, M, k, s, p, 1);

		nn_conv2d_forward(xcm, c.w, c.b, &cm, c.col, outcm);
		assert_memory_equal(outcm, c.out, sizeof(float) * c.nout);
	}

	/* Backward: parameter gradients accumulate onto what is there. */
	for (size_t i = 0; i < nw; i++)
		dw[i] = 0.5f;
	for (int i = 0; i < M; i++)
		db[i] = -0.25f;
	conv_obj(&c);
	nn_conv2d_backward(c.r, c.w, &c.sh, c.col, dw, db, dx);
	for (size_t i = 0; i < nw; i++)
		dw[i] -= 0.5f;
	for (int i = 0; i < M; i++)
		db[i] += 0.25f;
	check_grad("conv dx", conv_obj, &c, c.x, dx, nx, 1e-2f, 2e-3, 2e-3);
	check_grad("conv dw", conv_obj, &c, c.w, dw, nw, 1e-2f, 2e-3, 2e-3);
	check_grad("conv db", conv_obj, &c, c.b, db, (size_t)M, 1e-2f, 2e-3,
	           2e-3);

	free(c.x);
	free(c.w);
	free(c.b);
	free(c.col);
	free(c.out);
	free(c.r);
	free(dx);
	free(dw);
	free(db);
	free(ref);
	free(xcm);
	free(outcm);
}

static void
test_conv2d(void **state)
{
	(void)state;
	conv_case(2, 1, 8, 8, 3, 5, 1, 0); /* lenet's first layer, small */
	conv_case(3, 4, 7, 6, 5, 3, 1, 1); /* padding, non-square */
	conv_case(2, 3, 9, 9, 4, 3, 2, 1); /* stride 2 */
	conv_case(1, 2, 5, 5, 2, 5, 1, 2); /* kernel as large as input */
	conv_case(2, 2, 6, 7, 3, 2, 3, 0); /* stride over kernel */
}

/* ---- dense ---- */

typedef struct dense_ctx {
	int B, K, N;
	float *x, *w, *b, *out, *r;
} dense_ctx;

static double
dense_obj(void *p)
{
	dense_ctx *d = p;

	nn_dense_forward(d->x, d->w, d->b, d->B, d->K, d->N, d->out);
	return dot(d->r, d->out, (size_t)d->B * d->N);
}

static void
test_dense(void **state)
{
	dense_ctx d = {5, 13, 7, NULL, NULL, NULL, NULL, NULL};
	float *dx, *dw, *db;

	(void)state;
	d.x = rand_array((size_t)d.B * d.K, -1, 1);
	d.w = rand_array((size_t)d.N * d.K, -1, 1);
	d.b = rand_array((size_t)d.N, -1, 1);
	d.out = zeros((size_t)d.B * d.N);
	d.r = rand_array((size_t)d.B * d.N, -1, 1);
	dx = zeros((size_t)d.B * d.K);
	dw = zeros((size_t)d.N * d.K);
	db = zeros((size_t)d.N);
	dense_obj(&d);
	for (int i = 0; i < d.B; i++)
		for (int n = 0; n < d.N; n++) {
			double acc = d.b[n];

			for (int k = 0; k < d.K; k++)
				acc +=
				    (double)d.x[i * d.K + k] * d.w[n * d.K + k];
			assert_true(fabs(d.out[i * d.N + n] - acc) < 1e-5);
		}
	nn_dense_backward(d.r, d.x, d.w, d.B, d.K, d.N, dw, db, dx);
	check_grad("dense dx", dense_obj, &d, d.x, dx, (size_t)d.B * d.K, 1e-2f,
	           1e-3, 1e-3);
	check_grad("dense dw", dense_obj, &d, d.w, dw, (size_t)d.N * d.K, 1e-2f,
	           1e-3, 1e-3);
	check_grad("dense db", dense_obj, &d, d.b, db, (size_t)d.N, 1e-2f, 1e-3,
	           1e-3);
	/* A second backward adds the same again (+=), dx is overwritten. */
	{
		float *dw2 = zeros((size_t)d.N * d.K), *db2 = zeros(d.N);

		memcpy(dw2, dw, sizeof(float) * d.N * d.K);
		memcpy(db2, db, sizeof(float) * d.N);
		nn_dense_backward(d.r, d.x, d.w, d.B, d.K, d.N, dw2, db2, dx);
		for (int i = 0; i < d.N * d.K; i++)
			assert_float_equal(dw2[i], 2 * dw[i], 1e-5);
		for (int i = 0; i < d.N; i++)
			assert_float_equal(db2[i], 2 * db[i], 1e-5);
		check_grad("dense dx again", dense_obj, &d, d.x, dx,
		           (size_t)d.B * d.K, 1e-2f, 1e-3, 1e-3);
		free(dw2);
		free(db2);
	}
	free(d.x);
	free(d.w);
	free(d.b);
	free(d.out);
	free(d.r);
	free(dx);
	free(dw);
	free(db);
}

/* ---- max-pool ---- */

typedef struct pool_ctx {
	size_t planes;
	int h, w, k, s;
	float *x, *out, *r;
	int32_t *arg;
	size_t nout;
} pool_ctx;

static double
pool_obj(void *p)
{
	pool_ctx *c = p;

	nn_maxpool_forward(c->x, c->planes, c->h, c->w, c->k, c->s, c->out,
	                   c->arg);
	return dot(c->r, c->out, c->nout);
}

static float
window_max(const float *plane, int w, int y0, int x0, int k)
{
	float mx = plane[y0 * w + x0];

	for (int i = 0; i < k; i++)
		for (int j = 0; j < k; j++)
			mx = fmaxf(mx, plane[(y0 + i) * w + x0 + j]);
	return mx;
}

static void
pool_case(size_t planes, int h, int w, int k, int s)
{
	pool_ctx c = {planes, h, w, k, s, NULL, NULL, NULL, NULL, 0};
	size_t nx = planes * h * w;
	float *dx = zeros(nx);

	c.nout = planes * nn_out_dim(h, k, s, 0) * nn_out_dim(w, k, s, 0);
	/* Distinct values 0.1 apart, so a step of 1e-3 never changes which
	 * element is the maximum (max-pool is not differentiable at ties). */
	c.x = zeros(nx);
	for (size_t i = 0; i < nx; i++)
		c.x[i] = 0.1f * (float)i;
	for (size_t i = nx - 1; i > 0; i--) {
		size_t j = (size_t)nn_rng_below(&rng, i + 1);
		float t = c.x[i];

		c.x[i] = c.x[j];
		c.x[j] = t;
	}
	c.out = zeros(c.nout);
	c.arg = calloc(c.nout, sizeof(int32_t));
	c.r = rand_array(c.nout, -1, 1);
	pool_obj(&c);
	/* Every output is the max of its window. */
	for (size_t pl = 0, o = 0; pl < planes; pl++)
		for (int oy = 0; oy < nn_out_dim(h, k, s, 0); oy++)
			for (int ox = 0; ox < nn_out_dim(w, k, s, 0); ox++)
				assert_true(c.out[o++] ==
				            window_max(c.x + pl * h * w, w,
				                       oy * s, ox * s, k));
	for (size_t i = 0; i < nx; i++)
		dx[i] = 99.0f; /* must be overwritten */
	nn_maxpool_backward(c.r, c.arg, planes, h, w, k, s, dx);
	check_grad("maxpool dx", pool_obj, &c, c.x, dx, nx, 1e-3f, 1e-3, 1e-3);
	free(c.x);
	free(c.out);
	free(c.arg);
	free(c.r);
	free(dx);
}

static void
test_maxpool(void **state)
{
	(void)state;
	pool_case(6, 8, 8, 2, 2);
	pool_case(3, 7, 5, 3, 2); /* overlapping windows, odd sizes */
	pool_case(2, 6, 6, 3, 3);
}

/* ---- elementwise ---- */

typedef struct ew_ctx {
	int kind; /* 0 relu, 1 tanh, 2 dropout */
	size_t n;
	float rate;
	uint64_t seed;
	float *x, *out, *mask, *r;
} ew_ctx;

static double
ew_obj(void *p)
{
	ew_ctx *c = p;
	uint64_t s = c->seed; /* the same mask every evaluation */

	if (c->kind == 0)
		nn_relu_forward(c->x, c->n, c->out);
	else if (c->kind == 1)
		nn_tanh_forward(c->x, c->n, c->out);
	else
		nn_dropout_forward(c->x, c->n, c->rate, &s, c->mask, c->out);
	return dot(c->r, c->out, c->n);
}

static void
ew_case(int kind, const char *name)
{
	ew_ctx c = {kind, 1000, 0.3f, 777, NULL, NULL, NULL, NULL};
	float *dx = zeros(c.n);

	c.x = rand_array(c.n, -2, 2);
	/* Keep away from relu's kink at 0. */
	for (size_t i = 0; i < c.n; i++)
		if (fabsf(c.x[i]) < 0.05f)
			c.x[i] = 0.5f;
	c.out = zeros(c.n);
	c.mask = zeros(c.n);
	c.r = rand_array(c.n, -1, 1);
	ew_obj(&c);
	if (kind == 0)
		nn_relu_backward(c.r, c.out, c.n, dx);
	else if (kind == 1)
		nn_tanh_backward(c.r, c.out, c.n, dx);
	else
		nn_dropout_backward(c.r, c.mask, c.n, dx);
	check_grad(name, ew_obj, &c, c.x, dx, c.n, 1e-3f, 1e-3, 1e-3);
	/* In place (dx == dy) gives the same. */
	{
		float *g = malloc(sizeof(float) * c.n);

		ew_obj(&c); /* check_grad left the outputs of a perturbed x */
		memcpy(g, c.r, sizeof(float) * c.n);
		if (kind == 0)
			nn_relu_backward(g, c.out, c.n, g);
		else if (kind == 1)
			nn_tanh_backward(g, c.out, c.n, g);
		else
			nn_dropout_backward(g, c.mask, c.n, g);
		assert_memory_equal(g, dx, sizeof(float) * c.n);
		free(g);
	}
	if (kind == 2) {
		/* About rate of the units dropped, the rest scaled by
		 * 1/(1-rate). */
		size_t dropped = 0;

		for (size_t i = 0; i < c.n; i++) {
			if (c.mask[i] == 0.0f)
				dropped++;
			else
				assert_float_equal(c.mask[i], 1.0 / 0.7, 1e-6);
		}
		assert_in_range(dropped, 230, 370);
	}
	free(c.x);
	free(c.out);
	free(c.mask);
	free(c.r);
	free(dx);
}

static void
test_elementwise(void **state)
{
	(void)state;
	ew_case(0, "relu dx");
	ew_case(1, "tanh dx");
	ew_case(2, "dropout dx");
}

static void
test_flatten(void **state)
{
	const int C = 3, B = 4;
	const size_t hw = 5, n = (size_t)C * B * hw;
	float *x = rand_array(n, -1, 1), *y = zeros(n), *back = zeros(n);

	(void)state;
	nn_flatten_forward(x, C, B, hw, y);
	for (int c = 0; c < C; c++)
		for (int b = 0; b < B; b++)
			for (size_t p = 0; p < hw; p++)
				assert_true(y[((size_t)b * C + c) * hw + p] ==
				            x[((size_t)c * B + b) * hw + p]);
	nn_flatten_backward(y, C, B, hw, back);
	assert_memory_equal(back, x, sizeof(float) * n);
	free(x);
	free(y);
	free(back);
}

/* ---- losses ---- */

typedef struct loss_ctx {
	int kind, B, N;
	float *z, *y;
} loss_ctx;

static double
loss_obj(void *p)
{
	loss_ctx *c = p;

	if (c->kind == 0)
		return nn_softmax_ce(c->z, c->y, c->B, c->N, NULL, NULL);
	if (c->kind == 1)
		return nn_l2_loss(c->z, c->y, c->B, c->N, NULL);
	return nn_l1_loss(c->z, c->y, c->B, c->N, NULL);
}

static void
test_losses(void **state)
{
	const int B = 6, N = 10;
	float z[60], y[60], g[60];
	loss_ctx c = {0, B, N, z, y};
	int correct = -1;
	double l;

	(void)state;
	for (int i = 0; i < B * N; i++)
		z[i] = urand(-3, 3);
	for (int b = 0; b < B; b++)
		y[b] = (float)(b * 3 % N);
	/* Hand-computed: uniform logits give log(N) per sample. */
	{
		float zu[20] = {0}, yu[2] = {3, 7};

		l = nn_softmax_ce(zu, yu, 2, 10, g, NULL);
		assert_float_equal(l, 2 * log(10.0), 1e-9);
		assert_float_equal(g[3], 0.1 - 1.0, 1e-7);
		assert_float_equal(g[4], 0.1, 1e-7);
	}
	l = nn_softmax_ce(z, y, B, N, g, &correct);
	assert_true(l > 0);
	assert_in_range(correct, 0, B);
	/* Gradient rows of softmax - onehot sum to zero. */
	for (int b = 0; b < B; b++) {
		double s = 0;

		for (int j = 0; j < N; j++)
			s += g[b * N + j];
		assert_true(fabs(s) < 1e-6);
	}
	check_grad("softmax_ce dz", loss_obj, &c, z, g, (size_t)B * N, 1e-3f,
	           1e-4, 1e-3);
	/* Large logits stay finite. */
	{
		float zb[3] = {1000.0f, -1000.0f, 0.0f}, yb[1] = {1};

		l = nn_softmax_ce(zb, yb, 1, 3, g, &correct);
		assert_float_equal(l, 2000.0, 1e-3);
		assert_int_equal(correct, 0);
	}

	c.kind = 1;
	for (int i = 0; i < B * N; i++)
		y[i] = urand(-3, 3);
	l = nn_l2_loss(z, y, B, N, g);
	{
		double ref = 0;

		for (int i = 0; i < B * N; i++)
			ref += 0.5 * ((double)z[i] - y[i]) * (z[i] - y[i]);
		assert_float_equal(l, ref, 1e-9 * ref);
	}
	check_grad("l2 dp", loss_obj, &c, z, g, (size_t)B * N, 1e-3f, 1e-3,
	           1e-3);
	c.kind = 2;
	for (int i = 0; i < B * N; i++)
		if (fabsf(z[i] - y[i]) < 0.01f)
			z[i] += 0.1f;
	l = nn_l1_loss(z, y, B, N, g);
	assert_true(l > 0);
	check_grad("l1 dp", loss_obj, &c, z, g, (size_t)B * N, 1e-3f, 1e-3,
	           1e-3);
}

/* ---- model level ---- */

#define SMALL_SPEC                                                             \
	"input:2x9x9,conv:4:3:1:1,maxpool:2:2,relu,conv:6:3,tanh,flatten,"     \
	"dense:7,relu,dense:5,softmax_ce"

typedef struct model_ctx {
	dt_nn_model *m;
	const float *x, *y;
	int B;
} model_ctx;

static double
model_obj(void *p)
{
	model_ctx *c = p;
	double loss = 0;

	assert_int_equal(dt_nn_evaluate(c->m, c->x, c->y, c->B, &loss, NULL),
	                 DT_OK);
	return loss;
}

static void
test_model_gradcheck(void **state)
{
	const char *specs[] = {
	    SMALL_SPEC,
	    "input:12,dense:9,tanh,dense:4,l2",
	    "input:12,dense:9,relu,dense:4,l1",
	    "input:1x6x6,relu,conv:3:3,flatten,dense:3,softmax_ce",
	};

	(void)state;
	for (size_t si = 0; si < sizeof(specs) / sizeof(specs[0]); si++) {
		dt_nn_model *m;
		model_ctx c;
		float *x, *y, *g;
		size_t in, ly, np;
		int B = 3;

		assert_int_equal(dt_nn_model_create(specs[si], 5, &m), DT_OK);
		in = dt_nn_model_input_size(m);
		ly = dt_nn_model_label_size(m);
		np = dt_nn_model_num_params(m);
		x = rand_array(in * B, -1, 1);
		y = rand_array(ly * B, -1, 1);
		if (ly == 1 && dt_nn_model_output_size(m) > 1)
			for (int b = 0; b < B; b++)
				y[b] = (float)(b % dt_nn_model_output_size(m));
		/* Make biases non-zero so that relu kinks are not hit. */
		for (size_t i = 0; i < np; i++)
			dt_nn_model_params(m)[i] += urand(-0.1f, 0.1f);
		dt_nn_model_zero_grad(m);
		assert_int_equal(dt_nn_forward_backward(m, x, y, B, NULL, NULL),
		                 DT_OK);
		g = malloc(sizeof(float) * np);
		memcpy(g, dt_nn_model_grads(m), sizeof(float) * np);
		c.m = m;
		c.x = x;
		c.y = y;
		c.B = B;
		check_grad(specs[si], model_obj, &c, dt_nn_model_params(m), g,
		           np, 1e-3f, 2e-3, 5e-3);
		free(x);
		free(y);
		free(g);
		dt_nn_model_destroy(m);
	}
}

/* B random 28x28 images with labels 0, 1, ..., 9, 0, ... */
static void
mnist_batch(int B, float **x, float **y)
{
	*x = rand_array((size_t)B * 784, 0, 1);
	*y = zeros((size_t)B);
	for (int i = 0; i < B; i++)
		(*y)[i] = (float)(i % 10);
}

/* The gradient of a batch is the sum of the gradients of its halves: what
 * two workers push at batch 32 equals what one process computes at 64. */
static void
test_model_sum_over_batch(void **state)
{
	dt_nn_model *a, *b;
	const int B = 16;
	float *x, *y;
	double la, lb1, lb2, maxd = 0;
	int ca, cb1, cb2;

	(void)state;
	assert_int_equal(dt_nn_model_create("lenet", 1, &a), DT_OK);
	assert_int_equal(dt_nn_model_create("lenet", 1, &b), DT_OK);
	mnist_batch(B, &x, &y);
	dt_nn_model_zero_grad(a);
	dt_nn_model_zero_grad(b);
	assert_int_equal(dt_nn_forward_backward(a, x, y, B, &la, &ca), DT_OK);
	assert_int_equal(dt_nn_forward_backward(b, x, y, B / 2, &lb1, &cb1),
	                 DT_OK);
	assert_int_equal(dt_nn_forward_backward(b, x + (B / 2) * 784, y + B / 2,
	                                        B / 2, &lb2, &cb2),
	                 DT_OK);
	assert_float_equal(la, lb1 + lb2, 1e-4 * la);
	assert_int_equal(ca, cb1 + cb2);
	for (size_t i = 0; i < dt_nn_model_num_params(a); i++) {
		double d =
		    fabs(dt_nn_model_grads(a)[i] - dt_nn_model_grads(b)[i]);

		maxd = d > maxd ? d : maxd;
	}
	assert_true(maxd < 1e-4);
	free(x);
	free(y);
	dt_nn_model_destroy(a);
	dt_nn_model_destroy(b);
}

static void
test_model_layout_and_init(void **state)
{
	dt_nn_model *a, *b, *c;
	const char *names[] = {"conv0_weight",  "conv0_bias",    "conv1_weight",
	                       "conv1_bias",    "dense0_weight", "dense0_bias",
	                       "dense1_weight", "dense1_bias"};
	const size_t sizes[] = {500, 20, 25000, 50, 400000, 500, 5000, 10};
	size_t off = 0;
	uLong crc;

	(void)state;
	assert_int_equal(dt_nn_model_create("lenet", 42, &a), DT_OK);
	assert_int_equal(dt_nn_model_create("lenet", 42, &b), DT_OK);
	assert_int_equal(dt_nn_model_create("lenet", 43, &c), DT_OK);
	assert_int_equal(dt_nn_model_num_params(a), 431080);
	assert_int_equal(dt_nn_model_num_tensors(a), 8);
	assert_int_equal(dt_nn_model_input_size(a), 784);
	assert_int_equal(dt_nn_model_output_size(a), 10);
	for (int i = 0; i < 8; i++) {
		const dt_nn_tensor *t = dt_nn_model_tensor(a, i);

		assert_string_equal(t->name, names[i]);
		assert_int_equal(t->size, sizes[i]);
		assert_int_equal(t->offset, off);
		assert_float_equal(t->wd_mult, (i % 2 ? 0.0 : 1.0), 0);
		off += t->size;
	}
	assert_int_equal(dt_nn_model_tensor(a, 0)->shape[0], 20);
	assert_int_equal(dt_nn_model_tensor(a, 0)->shape[1], 1);
	assert_int_equal(dt_nn_model_tensor(a, 4)->shape[1], 800);
	assert_null(dt_nn_model_tensor(a, 8));
	/* Same seed, same bits; another seed, other values. */
	assert_memory_equal(dt_nn_model_params(a), dt_nn_model_params(b),
	                    sizeof(float) * 431080);
	assert_memory_not_equal(dt_nn_model_params(a), dt_nn_model_params(c),
	                        sizeof(float) * 500);
	/* Xavier bounds: conv0 fan_in 25, fan_out 500 -> sqrt(3/262.5). */
	for (int i = 0; i < 500; i++)
		assert_true(fabsf(dt_nn_model_params(a)[i]) <=
		            sqrtf(3.0f / 262.5f));
	for (int i = 500; i < 520; i++)
		assert_true(dt_nn_model_params(a)[i] == 0.0f);
	/* The initial parameters of seed 42 are the same on every machine:
	 * the PRNG and the arithmetic are portable. */
	crc = crc32(0L, (const Bytef *)dt_nn_model_params(a),
	            sizeof(float) * 431080);
	assert_int_equal((uint32_t)crc, LENET42_CRC);
	/* copy_params between replicas; refused across models. */
	assert_int_equal(dt_nn_model_copy_params(c, a), DT_OK);
	assert_memory_equal(dt_nn_model_params(a), dt_nn_model_params(c),
	                    sizeof(float) * 431080);
	{
		dt_nn_model *mlp;

		assert_int_equal(dt_nn_model_create("mlp", 1, &mlp), DT_OK);
		assert_int_equal(dt_nn_model_num_params(mlp),
		                 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 +
		                     10);
		assert_int_equal(dt_nn_model_copy_params(mlp, a), DT_ESIZE);
		dt_nn_model_destroy(mlp);
	}
	dt_nn_model_destroy(a);
	dt_nn_model_destroy(b);
	dt_nn_model_destroy(c);
}

static void
test_model_errors(void **state)
{
	const char *bad[] = {
	    "",
	    "nosuchmodel",
	    "input:784,dense:10",                 /* no loss */
	    "input:784,dense:10,softmax_ce,relu", /* after the loss */
	    "input:784,conv:3:3,softmax_ce",      /* conv on flat input */
	    "input:1x4x4,conv:3:5,softmax_ce",    /* kernel too large */
	    "input:1x28x28,conv:0:5,softmax_ce",  /* zero channels */
	    "input:1x28x28,conv:2:3:1:3,l2",      /* pad >= kernel */
	    "input:784,dense:x,softmax_ce",
	    "input:784,dense:10:3,softmax_ce",
	    "input:784,dropout:1.5,dense:10,softmax_ce",
	    "input:784,dense:1,softmax_ce", /* 1 class */
	    "input:1x28,dense:10,softmax_ce",
	    "input:784,frobnicate,softmax_ce",
	    "input:65536x65536x65536,dense:2,l2",
	};
	dt_nn_model *m = (dt_nn_model *)1;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(dt_nn_model_create(bad[i], 1, &m), DT_EINVAL);
		assert_null(m);
		assert_true(strlen(dt_errmsg()) > 0);
	}
	assert_int_equal(dt_nn_model_create("input:784,frobnicate,l2", 1, &m),
	                 DT_EINVAL);
	assert_non_null(strstr(dt_errmsg(), "frobnicate"));

	/* A label out of range is refused before any gradient changes. */
	assert_int_equal(dt_nn_model_create("mlp", 1, &m), DT_OK);
	{
		float x[2 * 784] = {0}, y[2] = {3, 10};

		dt_nn_model_zero_grad(m);
		assert_int_equal(dt_nn_forward_backward(m, x, y, 2, NULL, NULL),
		                 DT_EINVAL);
		assert_non_null(strstr(dt_errmsg(), "label 10"));
		for (size_t i = 0; i < dt_nn_model_num_params(m); i++)
			assert_true(dt_nn_model_grads(m)[i] == 0.0f);
		y[1] = 2.5f;
		assert_int_equal(dt_nn_forward_backward(m, x, y, 2, NULL, NULL),
		                 DT_EINVAL);
		assert_int_equal(dt_nn_forward_backward(m, x, y, 0, NULL, NULL),
		                 DT_EINVAL);
		assert_int_equal(dt_nn_forward(m, NULL, 2, NULL), DT_EINVAL);
	}
	dt_nn_model_destroy(m);
}

/* Buffers grow with the batch and results do not depend on the capacity. */
static void
test_model_batch_growth(void **state)
{
	dt_nn_model *m;
	float *x = rand_array(64 * 784, 0, 1), out4[40];
	const float *o;

	(void)state;
	assert_int_equal(dt_nn_model_create("lenet", 3, &m), DT_OK);
	assert_int_equal(dt_nn_forward(m, x, 4, &o), DT_OK);
	memcpy(out4, o, sizeof(out4));
	assert_int_equal(dt_nn_forward(m, x, 64, &o), DT_OK);
	assert_int_equal(dt_nn_forward(m, x, 4, &o), DT_OK);
	assert_ptr_equal(o, dt_nn_model_output(m));
	for (int i = 0; i < 40; i++)
		assert_float_equal(o[i], out4[i], 1e-5);
	free(x);
	dt_nn_model_destroy(m);
}

/* Replicas in threads: no shared mutable state, identical results. */
typedef struct replica {
	const float *x, *y;
	dt_nn_model *m;
	dt_err err;
} replica;

static void *
replica_main(void *p)
{
	replica *r = p;

	r->err = dt_nn_model_create("lenet", 9, &r->m);
	for (int i = 0; i < 3 && r->err == DT_OK; i++)
		r->err =
		    dt_nn_forward_backward(r->m, r->x, r->y, 8, NULL, NULL);
	return NULL;
}

static void
test_model_replicas_in_threads(void **state)
{
	float *x = rand_array(8 * 784, 0, 1), y[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	replica r[2] = {{x, y, NULL, DT_OK}, {x, y, NULL, DT_OK}};
	pthread_t t[2];

	(void)state;
	for (int i = 0; i < 2; i++)
		assert_int_equal(
		    pthread_create(&t[i], NULL, replica_main, &r[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(r[0].err, DT_OK);
	assert_int_equal(r[1].err, DT_OK);
	assert_memory_equal(dt_nn_model_grads(r[0].m),
	                    dt_nn_model_grads(r[1].m),
	                    sizeof(float) * dt_nn_model_num_params(r[0].m));
	dt_nn_model_destroy(r[0].m);
	dt_nn_model_destroy(r[1].m);
	free(x);
}

/* The gradient hook: once per layer with parameters, last layer first,
 * when that layer's gradients are final (they equal what the step ends
 * with), and the parameters written in the hook (a pull arriving during
 * backward) do not change the step's gradients. */
typedef struct hook_log {
	dt_nn_model *m;
	int calls, first[8], count[8];
	float *snap; /* the gradients as the hook saw them */
} hook_log;

/* A hook's call: the first 8 kept. */
static void
note_call(int *calls, int *firsts, int *counts, int first, int count)
{
	if (*calls < 8) {
		firsts[*calls] = first;
		counts[*calls] = count;
	}
	(*calls)++;
}

static void
hook_record(void *arg, int first, int count)
{
	hook_log *h = arg;

	note_call(&h->calls, h->first, h->count, first, count);
	for (int t = first; t < first + count; t++) {
		const dt_nn_tensor *tt = dt_nn_model_tensor(h->m, t);

		memcpy(h->snap + tt->offset,
		       dt_nn_model_grads(h->m) + tt->offset,
		       tt->size * sizeof(float));
		/* overwrite the weights now: nothing below may read them */
		for (size_t i = 0; i < tt->size; i++)
			dt_nn_model_params(h->m)[tt->offset + i] = 1e3f;
	}
}

static void
test_model_grad_hook(void **state)
{
	dt_nn_model *a, *b;
	const int B = 8;
	float *x, *y;
	hook_log h = {0};

	(void)state;
	assert_int_equal(dt_nn_model_create("lenet", 1, &a), DT_OK);
	assert_int_equal(dt_nn_model_create("lenet", 1, &b), DT_OK);
	mnist_batch(B, &x, &y);
	h.m = b;
	h.snap = zeros(dt_nn_model_num_params(b));
	dt_nn_model_set_grad_hook(b, hook_record, &h);
	dt_nn_model_zero_grad(a);
	dt_nn_model_zero_grad(b);
	assert_int_equal(dt_nn_forward_backward(a, x, y, B, NULL, NULL), DT_OK);
	assert_int_equal(dt_nn_forward_backward(b, x, y, B, NULL, NULL), DT_OK);
	/* lenet: conv, conv, dense, dense -> 4 calls, last layer first */
	assert_int_equal(h.calls, 4);
	for (int c = 0; c < 4; c++) {
		assert_int_equal(h.first[c], 6 - 2 * c);
		assert_int_equal(h.count[c], 2);
	}
	for (size_t i = 0; i < dt_nn_model_num_params(a); i++) {
		assert_true(h.snap[i] == dt_nn_model_grads(b)[i]);
		assert_true(dt_nn_model_grads(a)[i] == dt_nn_model_grads(b)[i]);
	}
	dt_nn_model_set_grad_hook(b, NULL, NULL);
	h.calls = 0;
	assert_int_equal(dt_nn_forward_backward(b, x, y, B, NULL, NULL), DT_OK);
	assert_int_equal(h.calls, 0);
	free(h.snap);
	free(x);
	free(y);
	dt_nn_model_destroy(a);
	dt_nn_model_destroy(b);
}

/* The parameter hook: once per layer with parameters, first layer first,
 * before that layer reads them: parameters that arrive in the hook (a
 * pull waited for there) are the ones the pass uses, so a model whose
 * parameters are all wrong until then computes what the right ones do. */
typedef struct param_log {
	dt_nn_model *m;
	const dt_nn_model *from; /* the right parameters */
	int calls, first[8], count[8];
} param_log;

static void
param_record(void *arg, int first, int count)
{
	param_log *h = arg;

	note_call(&h->calls, h->first, h->count, first, count);
	for (int t = first; t < first + count; t++) {
		const dt_nn_tensor *tt = dt_nn_model_tensor(h->m, t);

		memcpy(dt_nn_model_params(h->m) + tt->offset,
		       dt_nn_model_params((dt_nn_model *)h->from) + tt->offset,
		       tt->size * sizeof(float));
	}
}

static void
test_model_param_hook(void **state)
{
	dt_nn_model *a, *b;
	const int B = 8;
	float *x, *y;
	double la, lb;
	int ca, cb;
	param_log h = {0};

	(void)state;
	assert_int_equal(dt_nn_model_create("lenet", 1, &a), DT_OK);
	assert_int_equal(dt_nn_model_create("lenet", 1, &b), DT_OK);
	mnist_batch(B, &x, &y);
	for (size_t i = 0; i < dt_nn_model_num_params(b); i++)
		dt_nn_model_params(b)[i] = 1e3f;
	h.m = b;
	h.from = a;
	dt_nn_model_set_param_hook(b, param_record, &h);
	dt_nn_model_zero_grad(a);
	dt_nn_model_zero_grad(b);
	assert_int_equal(dt_nn_forward_backward(a, x, y, B, &la, &ca), DT_OK);
	assert_int_equal(dt_nn_forward_backward(b, x, y, B, &lb, &cb), DT_OK);
	/* lenet: conv, conv, dense, dense -> 4 calls, first layer first */
	assert_int_equal(h.calls, 4);
	for (int c = 0; c < 4; c++) {
		assert_int_equal(h.first[c], 2 * c);
		assert_int_equal(h.count[c], 2);
	}
	assert_true(la == lb);
	assert_int_equal(ca, cb);
	assert_memory_equal(dt_nn_model_grads(a), dt_nn_model_grads(b),
	                    sizeof(float) * dt_nn_model_num_params(a));
	/* evaluation calls it too; NULL removes it */
	h.calls = 0;
	assert_int_equal(dt_nn_evaluate(b, x, y, B, &lb, &cb), DT_OK);
	assert_int_equal(h.calls, 4);
	dt_nn_model_set_param_hook(b, NULL, NULL);
	h.calls = 0;
	assert_int_equal(dt_nn_forward_backward(b, x, y, B, NULL, NULL), DT_OK);
	assert_int_equal(h.calls, 0);
	free(x);
	free(y);
	dt_nn_model_destroy(a);
	dt_nn_model_destroy(b);
}

static void
test_model_flops(void **state)
{
	dt_nn_model *m;
	double f, b;

	(void)state;
	assert_int_equal(dt_nn_model_create("lenet", 1, &m), DT_OK);
	dt_nn_model_flops(m, &f, &b);
	/* conv0 2*20*25*576, conv1 2*50*500*64, dense 2*500*800, 2*10*500;
	 * backward: all twice except conv0 (no input gradient). */
	assert_float_equal(f, 576000.0 + 3200000.0 + 800000.0 + 10000.0, 0);
	assert_float_equal(b, 576000.0 + 2 * (3200000.0 + 800000.0 + 10000.0),
	                   0);
	dt_nn_model_destroy(m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_conv2d),
	    cmocka_unit_test(test_dense),
	    cmocka_unit_test(test_maxpool),
	    cmocka_unit_test(test_elementwise),
	    cmocka_unit_test(test_flatten),
	    cmocka_unit_test(test_losses),
	    cmocka_unit_test(test_model_gradcheck),
	    cmocka_unit_test(test_model_sum_over_batch),
	    cmocka_unit_test(test_model_layout_and_init),
	    cmocka_unit_test(test_model_errors),
	    cmocka_unit_test(test_model_batch_growth),
	    cmocka_unit_test(test_model_replicas_in_threads),
	    cmocka_unit_test(test_model_grad_hook),
	    cmocka_unit_test(test_model_param_hook),
	    cmocka_unit_test(test_model_flops),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
