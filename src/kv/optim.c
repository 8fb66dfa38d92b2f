/*
 * optim.c - the optimizers a store runs when updates happen in the store
 * (MXNet's update_on_kvstore): chosen by name, parameters sent as numbers.
 * MXNet ships a pickled Python object to its servers; here only a kind and
 * eight doubles cross the wire, so a peer can never make a server run code.
 *
 * Formulas (MXNet's):
 *   sgd:  g = clip(rescale_grad * g, clip_gradient) + wd * w
 *         momentum == 0:  w -= lr * g
 *         otherwise:      mom = momentum * mom - lr * g;  w += mom
 *   adam: g = clip(rescale_grad * g, clip_gradient) + wd * w
 *         m = beta1 * m + (1 - beta1) * g
 *         v = beta2 * v + (1 - beta2) * g^2
 *         w -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon)
 * clip_gradient <= 0 means no clipping.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_impl.h"

static dt_err
set_param(dt_opt *o, const char *k, double v)
{
	struct {
		const char *name;
		double *field;
		int sgd, adam;
	} table[] = {
		{"lr", &o->lr, 1, 1},
		{"learning_rate", &o->lr, 1, 1},
		{"momentum", &o->momentum, 1, 0},
		{"wd", &o->wd, 1, 1},
		{"rescale_grad", &o->rescale_grad, 1, 1},
		{"clip_gradient", &o->clip_gradient, 1, 1},
		{"beta1", &o->beta1, 0, 1},
		{"beta2", &o->beta2, 0, 1},
		{"epsilon", &o->epsilon, 0, 1},
	};

	for (size_t i = 0; i < DT_ARRAY_LEN(table); i++) {
		if (strcmp(table[i].name, k) != 0)
			continue;
		if ((o->kind == DT_OPT_SGD && !table[i].sgd) ||
		    (o->kind == DT_OPT_ADAM && !table[i].adam))
			break;
		*table[i].field = v;
		return DT_OK;
	}
	return dt__fail(DT_EINVAL, "optimizer %s has no parameter '%s'",
			o->kind == DT_OPT_SGD ? "sgd" : "adam", k);
}

static void
defaults(dt_opt *o, dt_opt_kind kind)
{
	memset(o, 0, sizeof(*o));
	o->kind = kind;
	o->lr = 0.01;
	o->rescale_grad = 1.0;
	o->clip_gradient = -1.0;
	if (kind == DT_OPT_ADAM) {
		o->lr = 0.001;
		o->beta1 = 0.9;
		o->beta2 = 0.999;
		o->epsilon = 1e-8;
	}
}

static dt_err
check(const dt_opt *o)
{
	if (!isfinite(o->lr) || !isfinite(o->wd) || !isfinite(o->momentum) ||
	    !isfinite(o->rescale_grad) || !isfinite(o->clip_gradient))
		return dt__fail(DT_EINVAL, "optimizer parameters must be "
					   "finite");
	if (o->momentum < 0 || o->momentum >= 1)
		return dt__fail(DT_EINVAL, "sgd momentum %g is not in [0, 1)",
				o->momentum);
	if (o->kind == DT_OPT_ADAM &&
	    (!(o->beta1 >= 0 && o->beta1 < 1) ||
	     !(o->beta2 >= 0 && o->beta2 < 1) || !(o->epsilon > 0)))
		return dt__fail(DT_EINVAL,
				"adam needs beta1, beta2 in [0, 1) and "
				"epsilon > 0 (got %g, %g, %g)",
				o->beta1, o->beta2, o->epsilon);
	return DT_OK;
}

dt_err
dt__opt_parse(const char *name, const char *params, dt_opt *opt)
{
	char buf[1024], *save = NULL, *tok;
	dt_err err;

	if (name == NULL || strcmp(name, "sgd") == 0)
		defaults(opt, DT_OPT_SGD);
	else if (strcmp(name, "adam") == 0)
		defaults(opt, DT_OPT_ADAM);
	else
		return dt__fail(DT_EINVAL,
				"unknown optimizer '%s' (sgd or adam)", name);
	if (params == NULL)
		return check(opt);
	if (strlen(params) >= sizeof(buf))
		return dt__fail(DT_EINVAL, "optimizer parameters too long");
	strcpy(buf, params);
	for (tok = strtok_r(buf, ", ", &save); tok;
	     tok = strtok_r(NULL, ", ", &save)) {
		char *eq = strchr(tok, '='), *end;
		double v;

		if (eq == NULL)
			return dt__fail(DT_EINVAL,
					"optimizer parameter '%s' is not "
					"key=value",
					tok);
		*eq = '\0';
		v = strtod(eq + 1, &end);
		if (end == eq + 1 || *end != '\0')
			return dt__fail(DT_EINVAL,
					"optimizer parameter %s: '%s' is not "
					"a number",
					tok, eq + 1);
		if ((err = set_param(opt, tok, v)))
			return err;
	}
	return check(opt);
}

void
dt__opt_encode(const dt_opt *o, dt_wbuf *w)
{
	dt__wbuf_u8(w, (uint8_t)o->kind);
	dt__wbuf_f64(w, o->lr);
	dt__wbuf_f64(w, o->momentum);
	dt__wbuf_f64(w, o->wd);
	dt__wbuf_f64(w, o->rescale_grad);
	dt__wbuf_f64(w, o->clip_gradient);
	dt__wbuf_f64(w, o->beta1);
	dt__wbuf_f64(w, o->beta2);
	dt__wbuf_f64(w, o->epsilon);
}

dt_err
dt__opt_decode(dt_rbuf *r, dt_opt *o)
{
	dt_err err;

	memset(o, 0, sizeof(*o));
	o->kind = (dt_opt_kind)dt__rbuf_u8(r);
	o->lr = dt__rbuf_f64(r);
	o->momentum = dt__rbuf_f64(r);
	o->wd = dt__rbuf_f64(r);
	o->rescale_grad = dt__rbuf_f64(r);
	o->clip_gradient = dt__rbuf_f64(r);
	o->beta1 = dt__rbuf_f64(r);
	o->beta2 = dt__rbuf_f64(r);
	o->epsilon = dt__rbuf_f64(r);
	if ((err = dt__rbuf_err(r, "KV_SET_OPT")))
		return err;
	if (o->kind != DT_OPT_SGD && o->kind != DT_OPT_ADAM)
		return dt__fail(DT_EPROTO, "KV_SET_OPT: unknown optimizer %d",
				(int)o->kind);
	return check(o);
}

size_t
dt__opt_state_len(const dt_opt *o, size_t n)
{
	if (o->kind == DT_OPT_SGD)
		return o->momentum != 0 ? n : 0;
	if (o->kind == DT_OPT_ADAM)
		return 2 * n;
	return 0;
}

static inline float
prep_grad(const dt_opt *o, float g, float w, float rescale, float clip,
	  float wd)
{
	g *= rescale;
	if (clip > 0)
		g = g > clip ? clip : (g < -clip ? -clip : g);
	(void)o;
	return g + wd * w;
}

void
dt__opt_apply(const dt_opt *o, float *w, const float *g, float *state,
	      size_t n, uint64_t t)
{
	dt__opt_apply_range(o, w, g, state, n, 0, n, t);
}

void
dt__opt_apply_range(const dt_opt *o, float *w_all, const float *g,
		    float *state, size_t total, size_t off, size_t n,
		    uint64_t t)
{
	float *w = w_all + off;
	const float lr = (float)o->lr, wd = (float)o->wd;
	const float rescale = (float)o->rescale_grad;
	const float clip = (float)o->clip_gradient;

	if (o->kind == DT_OPT_SGD && o->momentum == 0) {
		if (clip <= 0 && wd == 0) {
			const float a = lr * rescale;
			for (size_t i = 0; i < n; i++)
				w[i] -= a * g[i];
			return;
		}
		for (size_t i = 0; i < n; i++)
			w[i] -= lr * prep_grad(o, g[i], w[i], rescale, clip, wd);
	} else if (o->kind == DT_OPT_SGD) {
		const float mu = (float)o->momentum;
		float *mom = state + off;
		for (size_t i = 0; i < n; i++) {
			float gi = prep_grad(o, g[i], w[i], rescale, clip, wd);
			mom[i] = mu * mom[i] - lr * gi;
			w[i] += mom[i];
		}
	} else if (o->kind == DT_OPT_ADAM) {
		const float b1 = (float)o->beta1, b2 = (float)o->beta2;
		const float eps = (float)o->epsilon;
		double c1 = 1.0 - pow(o->beta1, (double)t);
		double c2 = 1.0 - pow(o->beta2, (double)t);
		const float lr_t = (float)(o->lr * sqrt(c2) / c1);
		float *m = state + off, *v = state + total + off;

		for (size_t i = 0; i < n; i++) {
			float gi = prep_grad(o, g[i], w[i], rescale, clip, wd);
			m[i] = b1 * m[i] + (1 - b1) * gi;
			v[i] = b2 * v[i] + (1 - b2) * gi * gi;
			w[i] -= lr_t * m[i] / (sqrtf(v[i]) + eps);
		}
	}
}

void
dt__kv_add(float *restrict dst, const float *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] += src[i];
}
