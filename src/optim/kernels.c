/*
 * kernels.c - the optimizer kernels: SGD (with momentum) and Adam, with
 * MXNet's update rules. A leaf module: the trainer's optimizer object
 * (nn/optim.c) and the KVStore's server-side updates (kv/optim.c) both run
 * these, so a model trained through the servers and one trained in one
 * process take the very same steps.
 *
 * The kernels repeat MXNet's operators element for element, in float and in
 * the same order of operations, so a run here and a run of MXNet on the
 * same gradients agree to the last bit where the compilers do. With
 * rescaled gradient  g' = rescale_grad * g, clip(x) = min(max(x, -c), c):
 *
 *   sgd, momentum == 0 (MXNet's sgd_update, no state):
 *     w = (1 - lr*wd) * w - lr * clip(g')
 *   sgd, momentum != 0 (sgd_mom_update):
 *     mom = momentum * mom - lr*wd * w - lr * clip(g')
 *     w   = w + mom
 *   adam (adam_update, with the Python optimizer's bias correction):
 *     lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)        (double)
 *     g'   = clip(rescale_grad * g + wd * w)
 *     mean = beta1 * mean + (1 - beta1) * g'
 *     var  = beta2 * var + (1 - beta2) * g'^2
 *     w    = w - lr_t * mean / (sqrt(var) + epsilon)
 *
 * Clipping is on when clip_gradient > 0: MXNet's kernels clip whenever the
 * value is >= 0, but its Python optimizers pass clip_gradient only when it
 * is truthy, so 0 and the default -1 both mean "off" in practice.
 * Hyperparameters are kept in double (Python floats) and cast to float for
 * the kernels as MXNet's parameter parsing does; the bias correction is
 * computed in double as Python computes it.
 *
 * wd is scaled per tensor by wd_mult, which is 0 for biases: MXNet's
 * Optimizer sets wd_mult 0 for every parameter whose name does not end in
 * _weight or _gamma.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dtrain/nn.h"

static inline float
clip(float x, float c)
{
	/* mshadow_op::clip: NaN passes through. */
	if (x > c)
		return c;
	if (x < -c)
		return -c;
	return x;
}

dt_err
dt_nn_optim_parse(const char *name, const char *s, dt_nn_optim_param *p)
{
	char buf[512], *save = NULL, *tok;
	int adam;

	if (name == NULL || p == NULL)
		return dt__fail(DT_EINVAL, "optimizer: NULL argument");
	if (strcmp(name, "sgd") == 0)
		adam = 0;
	else if (strcmp(name, "adam") == 0)
		adam = 1;
	else
		return dt__fail(DT_EINVAL, "optimizer '%s' unknown (sgd, adam)",
		                name);
	memset(p, 0, sizeof(*p));
	p->lr = adam ? 0.001 : 0.01;
	p->rescale_grad = 1.0;
	p->clip_gradient = -1.0;
	p->beta1 = 0.9;
	p->beta2 = 0.999;
	p->epsilon = 1e-8;
	if (s == NULL)
		return DT_OK;
	if (strlen(s) >= sizeof(buf))
		return dt__fail(DT_EINVAL,
		                "optimizer %s: parameters longer "
		                "than %zu bytes",
		                name, sizeof(buf) - 1);
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '='), *end;
		double v, *dst = NULL;

		while (*tok == ' ')
			tok++;
		if (eq == NULL)
			return dt__fail(DT_EINVAL,
			                "optimizer %s: '%s' is not "
			                "key=value",
			                name, tok);
		*eq = '\0';
		errno = 0;
		v = strtod(eq + 1, &end);
		if (errno || end == eq + 1 || *end != '\0' || !isfinite(v))
			return dt__fail(DT_EINVAL,
			                "optimizer %s: %s='%s' is "
			                "not a number",
			                name, tok, eq + 1);
		if (!strcmp(tok, "lr") || !strcmp(tok, "learning_rate"))
			dst = &p->lr;
		else if (!strcmp(tok, "wd"))
			dst = &p->wd;
		else if (!strcmp(tok, "rescale_grad"))
			dst = &p->rescale_grad;
		else if (!strcmp(tok, "clip_gradient"))
			dst = &p->clip_gradient;
		else if (!adam && !strcmp(tok, "momentum"))
			dst = &p->momentum;
		else if (adam && !strcmp(tok, "beta1"))
			dst = &p->beta1;
		else if (adam && !strcmp(tok, "beta2"))
			dst = &p->beta2;
		else if (adam && !strcmp(tok, "epsilon"))
			dst = &p->epsilon;
		if (dst == NULL)
			return dt__fail(DT_EINVAL,
			                "optimizer %s: unknown "
			                "parameter '%s' (known: lr, wd, "
			                "rescale_grad, clip_gradient, %s)",
			                name, tok,
			                adam ? "beta1, beta2, epsilon"
			                     : "momentum");
		*dst = v;
	}
	if (p->lr < 0 || p->momentum < 0 || p->momentum >= 1 || p->beta1 < 0 ||
	    p->beta1 >= 1 || p->beta2 < 0 || p->beta2 >= 1 || p->epsilon <= 0)
		return dt__fail(DT_EINVAL,
		                "optimizer %s: need lr >= 0, "
		                "momentum, beta1, beta2 in [0, 1) and "
		                "epsilon > 0 ('%s')",
		                name, s);
	return DT_OK;
}

dt_err
dt_nn_sgd_update(const dt_nn_optim_param *p, double wd, float *w,
                 const float *g, float *mom, size_t n)
{
	const float lr = (float)p->lr, wdf = (float)wd;
	const float rg = (float)p->rescale_grad, c = (float)p->clip_gradient;
	const float momentum = (float)p->momentum;

	if (p->momentum == 0.0) {
		const float decay = 1.f - lr * wdf;

		if (c > 0.0f)
			for (size_t i = 0; i < n; i++)
				w[i] = decay * w[i] - lr * clip(rg * g[i], c);
		else
			for (size_t i = 0; i < n; i++)
				w[i] = decay * w[i] - (lr * rg) * g[i];
		return DT_OK;
	}
	if (mom == NULL)
		return dt__fail(DT_EINVAL,
		                "sgd update: momentum %g needs a "
		                "state array",
		                p->momentum);
	if (c > 0.0f) {
		for (size_t i = 0; i < n; i++) {
			mom[i] = momentum * mom[i] - lr * wdf * w[i] -
			         lr * clip(rg * g[i], c);
			w[i] = w[i] + mom[i];
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			mom[i] = momentum * mom[i] - lr * wdf * w[i] -
			         lr * rg * g[i];
			w[i] = w[i] + mom[i];
		}
	}
	return DT_OK;
}

dt_err
dt_nn_adam_update(const dt_nn_optim_param *p, double wd, uint64_t t, float *w,
                  const float *g, float *mean, float *var, size_t n)
{
	double coef1, coef2;
	float lr, wdf, rg, c, b1, b2, eps;

	if (t == 0)
		return dt__fail(DT_EINVAL, "adam update: the update count t "
		                           "starts at 1");
	if (mean == NULL || var == NULL)
		return dt__fail(DT_EINVAL, "adam update: NULL state");
	coef1 = 1.0 - pow(p->beta1, (double)t);
	coef2 = 1.0 - pow(p->beta2, (double)t);
	lr = (float)(p->lr * sqrt(coef2) / coef1);
	wdf = (float)wd;
	rg = (float)p->rescale_grad;
	c = (float)p->clip_gradient;
	b1 = (float)p->beta1;
	b2 = (float)p->beta2;
	eps = (float)p->epsilon;
	for (size_t i = 0; i < n; i++) {
		float gr = g[i] * rg + w[i] * wdf;

		if (c > 0.0f)
			gr = clip(gr, c);
		mean[i] = b1 * mean[i] + (1.f - b1) * gr;
		var[i] = b2 * var[i] + (1.f - b2) * gr * gr;
		w[i] = w[i] - lr * mean[i] / (sqrtf(var[i]) + eps);
	}
	return DT_OK;
}
