/*
 * nn_optim_test.c - SGD and Adam against values worked out by hand.
 *
 * Each case spells out MXNet's formula with the numbers plugged in, so a
 * reader can check the expected value on paper. Then the optimizer object
 * over a model (weight decay on weights only), parameter parsing, the
 * data-parallel contract (summed gradients of two half batches give the
 * same training as one full batch) and linear regression (seed 000,
 * f(x) = 5x + 2) converging end to end.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtrain/nn.h"

static dt_nn_optim_param
sgd(const char *s)
{
	dt_nn_optim_param p;

	assert_int_equal(dt_nn_optim_parse("sgd", s, &p), DT_OK);
	return p;
}

static void
test_sgd_plain(void **state)
{
	dt_nn_optim_param p = sgd("lr=0.1,rescale_grad=0.5");
	float w[2] = {1.0f, -2.0f};
	const float g[2] = {0.5f, 4.0f};

	(void)state;
	/* w = (1 - lr*wd) w - lr * rescale * g, wd = 0.01:
	 *   (1 - 0.001) * 1    - 0.1 * 0.5 * 0.5 =  0.974
	 *   (1 - 0.001) * (-2) - 0.1 * 0.5 * 4   = -2.198 */
	assert_int_equal(dt_nn_sgd_update(&p, 0.01, w, g, NULL, 2), DT_OK);
	assert_float_equal(w[0], 0.974, 1e-6);
	assert_float_equal(w[1], -2.198, 1e-6);

	/* clip_gradient 0.3 clips the rescaled gradient [0.25, 2.0] to
	 * [0.25, 0.3]: 0.999 - 0.025 = 0.974, -1.998 - 0.03 = -2.028. */
	p = sgd("lr=0.1,rescale_grad=0.5,clip_gradient=0.3");
	w[0] = 1.0f;
	w[1] = -2.0f;
	assert_int_equal(dt_nn_sgd_update(&p, 0.01, w, g, NULL, 2), DT_OK);
	assert_float_equal(w[0], 0.974, 1e-6);
	assert_float_equal(w[1], -2.028, 1e-6);

	/* clip_gradient 0 is "off" as in MXNet's Python optimizers. */
	p = sgd("lr=0.1,clip_gradient=0");
	w[0] = 1.0f;
	assert_int_equal(dt_nn_sgd_update(&p, 0.0, w, g, NULL, 1), DT_OK);
	assert_float_equal(w[0], 0.95, 1e-7);
}

static void
test_sgd_momentum(void **state)
{
	dt_nn_optim_param p = sgd("lr=0.1,momentum=0.9");
	float w = 1.0f, g = 0.5f, mom = 0.0f;

	(void)state;
	/* mom = 0.9 mom - lr*wd w - lr g,  w += mom, wd = 0.01:
	 * step 1: mom = 0 - 0.001 - 0.05 = -0.051,   w = 0.949
	 * step 2: mom = -0.0459 - 0.000949 - 0.05 = -0.096849,
	 *         w = 0.852151 */
	assert_int_equal(dt_nn_sgd_update(&p, 0.01, &w, &g, &mom, 1), DT_OK);
	assert_float_equal(mom, -0.051, 1e-7);
	assert_float_equal(w, 0.949, 1e-7);
	assert_int_equal(dt_nn_sgd_update(&p, 0.01, &w, &g, &mom, 1), DT_OK);
	assert_float_equal(mom, -0.096849, 1e-7);
	assert_float_equal(w, 0.852151, 1e-7);

	/* With clip 1 a gradient of 10 counts as 1:
	 * mom = 0 - 0.001 * 1 - 0.1 * 1 = -0.101, w = 0.899. */
	p = sgd("lr=0.1,momentum=0.9,clip_gradient=1");
	w = 1.0f;
	g = 10.0f;
	mom = 0.0f;
	assert_int_equal(dt_nn_sgd_update(&p, 0.01, &w, &g, &mom, 1), DT_OK);
	assert_float_equal(w, 0.899, 1e-7);
	/* Momentum needs its state. */
	assert_int_equal(dt_nn_sgd_update(&p, 0.0, &w, &g, NULL, 1), DT_EINVAL);
}

static void
test_adam(void **state)
{
	dt_nn_optim_param p;
	float w = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;

	(void)state;
	assert_int_equal(dt_nn_optim_parse("adam", "lr=0.01", &p), DT_OK);
	/* t = 1: mean = 0.1 * 0.5 = 0.05, var = 0.001 * 0.25 = 0.00025,
	 * lr_t = 0.01 * sqrt(1 - 0.999) / (1 - 0.9) = 0.0031622777,
	 * w = 1 - lr_t * 0.05 / (sqrt(0.00025) + 1e-8) = 0.99000000632 */
	assert_int_equal(dt_nn_adam_update(&p, 0.0, 1, &w, &g, &m, &v, 1),
	                 DT_OK);
	/* (float tolerances: the kernel computes 1 - beta in float, as
	 * MXNet's does, and 1.f - 0.999f is 0.00099998713) */
	assert_float_equal(m, 0.05, 1e-7);
	assert_float_equal(v, 0.00025, 1e-8);
	assert_float_equal(w, 0.99000000632, 1e-7);
	/* t = 2, g = -1: mean = 0.045 - 0.1 = -0.055,
	 * var = 0.999 * 0.00025 + 0.001 = 0.00124975,
	 * lr_t = 0.01 * sqrt(1 - 0.999^2) / (1 - 0.9^2) = 0.0023531673,
	 * w = 0.99 + lr_t * 0.055 / sqrt(0.00124975) = 0.99366104 */
	g = -1.0f;
	assert_int_equal(dt_nn_adam_update(&p, 0.0, 2, &w, &g, &m, &v, 1),
	                 DT_OK);
	assert_float_equal(m, -0.055, 1e-7);
	assert_float_equal(v, 0.00124975, 5e-8);
	assert_float_equal(w, 0.99366104, 1e-7);

	/* Weight decay joins the gradient before clipping:
	 * g' = clip(3 * 0.5 + 2 * 0.1, 1.2) = 1.2; a first Adam step moves
	 * by lr whatever the gradient: w = 2 - 0.01 = 1.99. */
	assert_int_equal(dt_nn_optim_parse("adam",
	                                   "lr=0.01,rescale_grad=0.5,"
	                                   "clip_gradient=1.2",
	                                   &p),
	                 DT_OK);
	w = 2.0f;
	g = 3.0f;
	m = v = 0.0f;
	assert_int_equal(dt_nn_adam_update(&p, 0.1, 1, &w, &g, &m, &v, 1),
	                 DT_OK);
	assert_float_equal(m, 0.12, 1e-7);
	assert_float_equal(w, 1.99, 1e-6);
	assert_int_equal(dt_nn_adam_update(&p, 0.0, 0, &w, &g, &m, &v, 1),
	                 DT_EINVAL);
}

static void
test_parse(void **state)
{
	dt_nn_optim_param p;

	(void)state;
	assert_int_equal(dt_nn_optim_parse("sgd", NULL, &p), DT_OK);
	assert_float_equal(p.lr, 0.01, 0);
	assert_float_equal(p.momentum, 0, 0);
	assert_float_equal(p.rescale_grad, 1, 0);
	assert_float_equal(p.clip_gradient, -1, 0);
	assert_int_equal(dt_nn_optim_parse("adam", "", &p), DT_OK);
	assert_float_equal(p.lr, 0.001, 0);
	assert_float_equal(p.beta1, 0.9, 0);
	assert_float_equal(p.beta2, 0.999, 0);
	assert_float_equal(p.epsilon, 1e-8, 0);
	assert_int_equal(dt_nn_optim_parse("sgd",
	                                   "learning_rate=0.2,momentum=0.9,"
	                                   "wd=1e-4,rescale_grad=0.015625",
	                                   &p),
	                 DT_OK);
	assert_float_equal(p.lr, 0.2, 0);
	assert_float_equal(p.momentum, 0.9, 0);
	assert_float_equal(p.wd, 1e-4, 0);
	assert_float_equal(p.rescale_grad, 1.0 / 64, 0);

	assert_int_equal(dt_nn_optim_parse("sgd", "beta1=0.5", &p), DT_EINVAL);
	assert_non_null(strstr(dt_errmsg(), "unknown parameter 'beta1'"));
	assert_int_equal(dt_nn_optim_parse("adam", "momentum=0.5", &p),
	                 DT_EINVAL);
	assert_int_equal(dt_nn_optim_parse("sgd", "lr=fast", &p), DT_EINVAL);
	assert_non_null(strstr(dt_errmsg(), "lr='fast'"));
	assert_int_equal(dt_nn_optim_parse("sgd", "lr", &p), DT_EINVAL);
	assert_int_equal(dt_nn_optim_parse("sgd", "momentum=1.5", &p),
	                 DT_EINVAL);
	assert_int_equal(dt_nn_optim_parse("adam", "epsilon=0", &p), DT_EINVAL);
	assert_int_equal(dt_nn_optim_parse("rmsprop", NULL, &p), DT_EINVAL);
}

/* The optimizer object decays weights but not biases (wd_mult 0). */
static void
test_optim_object(void **state)
{
	dt_nn_model *m;
	dt_nn_optim *o;
	float *w;

	(void)state;
	assert_int_equal(dt_nn_model_create("linreg", 1, &m), DT_OK);
	assert_int_equal(dt_nn_model_num_params(m), 2);
	w = dt_nn_model_params(m);
	w[0] = 2.0f;
	w[1] = 3.0f;
	dt_nn_model_zero_grad(m);
	assert_int_equal(dt_nn_optim_create("sgd", "lr=0.1,wd=0.5", m, &o),
	                 DT_OK);
	assert_int_equal(dt_nn_optim_step(o, m), DT_OK);
	/* weight: (1 - 0.1 * 0.5) * 2 = 1.9; bias untouched. */
	assert_float_equal(w[0], 1.9, 1e-7);
	assert_float_equal(w[1], 3.0, 0);
	assert_int_equal(dt_nn_optim_num_update(o), 1);
	dt_nn_optim_set_lr(o, 1.0);
	assert_float_equal(dt_nn_optim_get_param(o)->lr, 1.0, 0);
	dt_nn_model_grads(m)[1] = 0.25f;
	assert_int_equal(dt_nn_optim_step(o, m), DT_OK);
	assert_float_equal(w[0], 0.95, 1e-7); /* (1 - 0.5) * 1.9 */
	assert_float_equal(w[1], 2.75, 1e-7); /* 3 - 1 * 0.25 */
	{
		dt_nn_model *other;

		assert_int_equal(dt_nn_model_create("mlp", 1, &other), DT_OK);
		assert_int_equal(dt_nn_optim_step(o, other), DT_ESIZE);
		dt_nn_model_destroy(other);
	}
	dt_nn_optim_destroy(o);
	assert_int_equal(dt_nn_optim_create("nadam", NULL, m, &o), DT_EINVAL);
	assert_null(o);
	dt_nn_model_destroy(m);
}

/*
 * The data-parallel contract: two workers at batch 32 whose summed
 * gradients update with rescale_grad = 1/64 train the same model as one
 * process at batch 64, up to float rounding.
 */
static void
test_data_parallel_equivalence(void **state)
{
	const int B = 64, steps = 5;
	dt_nn_model *one, *w0, *w1;
	dt_nn_optim *o1, *o2;
	float *x = malloc(sizeof(float) * B * 784), y[64];
	uint32_t s = 1;
	double maxd = 0;

	(void)state;
	for (int i = 0; i < B * 784; i++) {
		s = s * 1664525u + 1013904223u;
		x[i] = (float)(s >> 8) / 16777216.0f;
	}
	for (int i = 0; i < B; i++)
		y[i] = (float)(i * 7 % 10);
	assert_int_equal(dt_nn_model_create("mlp", 3, &one), DT_OK);
	assert_int_equal(dt_nn_model_create("mlp", 3, &w0), DT_OK);
	assert_int_equal(dt_nn_model_create("mlp", 3, &w1), DT_OK);
	assert_int_equal(dt_nn_optim_create("sgd",
	                                    "lr=0.1,momentum=0.9,wd=1e-4,"
	                                    "rescale_grad=0.015625",
	                                    one, &o1),
	                 DT_OK);
	assert_int_equal(dt_nn_optim_create("sgd",
	                                    "lr=0.1,momentum=0.9,wd=1e-4,"
	                                    "rescale_grad=0.015625",
	                                    w0, &o2),
	                 DT_OK);
	for (int t = 0; t < steps; t++) {
		size_t n = dt_nn_model_num_params(w0);

		dt_nn_model_zero_grad(one);
		assert_int_equal(
		    dt_nn_forward_backward(one, x, y, B, NULL, NULL), DT_OK);
		assert_int_equal(dt_nn_optim_step(o1, one), DT_OK);
		/* Two "workers" on the halves, summed as a server would. */
		dt_nn_model_zero_grad(w0);
		dt_nn_model_zero_grad(w1);
		assert_int_equal(
		    dt_nn_forward_backward(w0, x, y, B / 2, NULL, NULL), DT_OK);
		assert_int_equal(dt_nn_forward_backward(w1, x + (B / 2) * 784,
		                                        y + B / 2, B / 2, NULL,
		                                        NULL),
		                 DT_OK);
		for (size_t i = 0; i < n; i++)
			dt_nn_model_grads(w0)[i] += dt_nn_model_grads(w1)[i];
		assert_int_equal(dt_nn_optim_step(o2, w0), DT_OK);
		assert_int_equal(dt_nn_model_copy_params(w1, w0), DT_OK);
	}
	for (size_t i = 0; i < dt_nn_model_num_params(one); i++) {
		double d = fabs(dt_nn_model_params(one)[i] -
		                dt_nn_model_params(w0)[i]);

		maxd = d > maxd ? d : maxd;
	}
	print_message("max |one - two workers| after %d steps: %g\n", steps,
	              maxd);
	assert_true(maxd < 1e-5);
	dt_nn_optim_destroy(o1);
	dt_nn_optim_destroy(o2);
	dt_nn_model_destroy(one);
	dt_nn_model_destroy(w0);
	dt_nn_model_destroy(w1);
	free(x);
}

/* Seed 000's linear regression: f(x) = 5x + 2 is recovered. */
static void
test_linear_regression_converges(void **state)
{
	const size_t n = 1000, B = 20;
	float x[1000], y[1000], bx[20], by[20];
	dt_nn_model *m;
	dt_nn_optim *o;
	dt_sampler *s;
	dt_dataset d;
	double loss = 0;

	(void)state;
	for (size_t i = 0; i < n; i++) {
		x[i] = (float)i / (float)n;
		y[i] = 5.0f * x[i] + 2.0f;
	}
	memset(&d, 0, sizeof(d));
	d.n = n;
	d.dim = 1;
	d.label_dim = 1;
	d.x = x;
	d.y = y;
	assert_int_equal(dt_nn_model_create("linreg", 0, &m), DT_OK);
	assert_int_equal(dt_nn_optim_create("sgd",
	                                    "lr=0.5,momentum=0.9,"
	                                    "rescale_grad=0.05",
	                                    m, &o),
	                 DT_OK);
	assert_int_equal(dt_sampler_create(n, B, 1, 0, 1, 1, &s), DT_OK);
	for (uint64_t ep = 0; ep < 20; ep++) {
		assert_int_equal(dt_sampler_set_epoch(s, ep), DT_OK);
		loss = 0;
		for (size_t b = 0; b < dt_sampler_num_batches(s); b++) {
			const size_t *idx;
			double l;

			assert_int_equal(dt_sampler_batch(s, b, &idx), DT_OK);
			assert_int_equal(dt_data_gather(&d, idx, B, bx, by),
			                 DT_OK);
			dt_nn_model_zero_grad(m);
			assert_int_equal(
			    dt_nn_forward_backward(m, bx, by, (int)B, &l, NULL),
			    DT_OK);
			assert_int_equal(dt_nn_optim_step(o, m), DT_OK);
			loss += l;
		}
	}
	print_message("linreg: w %.5f b %.5f last epoch loss %g\n",
	              (double)dt_nn_model_params(m)[0],
	              (double)dt_nn_model_params(m)[1], loss);
	assert_float_equal(dt_nn_model_params(m)[0], 5.0, 1e-3);
	assert_float_equal(dt_nn_model_params(m)[1], 2.0, 1e-3);
	dt_sampler_destroy(s);
	dt_nn_optim_destroy(o);
	dt_nn_model_destroy(m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sgd_plain),
	    cmocka_unit_test(test_sgd_momentum),
	    cmocka_unit_test(test_adam),
	    cmocka_unit_test(test_parse),
	    cmocka_unit_test(test_optim_object),
	    cmocka_unit_test(test_data_parallel_equivalence),
	    cmocka_unit_test(test_linear_regression_converges),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
