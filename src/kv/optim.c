/*
 * optim.c - the optimizers a store runs when updates happen in the store
 * (MXNet's update_on_kvstore). MXNet ships a pickled Python object to its
 * servers; here only a kind and eight numbers cross the wire, so a peer can
 * never make a server run code.
 *
 * The parameter string and the update kernels are the trainer's
 * (dt_nn_optim_parse, dt_nn_sgd_update, dt_nn_adam_update in
 * src/optim/kernels.c, where the formulas are written out), so a server, a
 * local store and a worker updating locally all apply the same rule, element
 * for element.
 */
#include <math.h>
#include <string.h>

#include "dtrain/nn.h"
#include "kv/kv_impl.h"

dt_err
dt__opt_parse(const char *name, const char *params, dt_opt *opt)
{
	dt_err err;

	memset(opt, 0, sizeof(*opt));
	if (name == NULL)
		name = "sgd";
	if (strcmp(name, "sgd") == 0)
		opt->kind = DT_OPT_SGD;
	else if (strcmp(name, "adam") == 0)
		opt->kind = DT_OPT_ADAM;
	else
		return dt__fail(DT_EINVAL,
		                "unknown optimizer '%s' (sgd or adam)", name);
	if ((err = dt_nn_optim_parse(name, params, &opt->p)))
		return err;
	if (!isfinite(opt->p.lr) || !isfinite(opt->p.wd) ||
	    !isfinite(opt->p.rescale_grad))
		return dt__fail(DT_EINVAL, "optimizer parameters must be "
		                           "finite");
	return DT_OK;
}

size_t
dt__opt_state_len(const dt_opt *o, size_t n)
{
	if (o->kind == DT_OPT_SGD)
		return o->p.momentum != 0 ? n : 0;
	if (o->kind == DT_OPT_ADAM)
		return 2 * n;
	return 0;
}

void
dt__opt_apply(const dt_opt *o, float *w, const float *g, float *state, size_t n,
              uint64_t t)
{
	dt__opt_apply_range(o, w, g, state, n, 0, n, t);
}

void
dt__opt_apply_range(const dt_opt *o, float *w, const float *g, float *state,
                    size_t total, size_t off, size_t n, uint64_t t)
{
	/* Arguments were validated when the optimizer was set. */
	if (o->kind == DT_OPT_SGD)
		dt_nn_sgd_update(&o->p, o->p.wd, w + off, g,
		                 state ? state + off : NULL, n);
	else if (o->kind == DT_OPT_ADAM)
		dt_nn_adam_update(&o->p, o->p.wd, t, w + off, g, state + off,
		                  state + total + off, n);
}

void
dt__kv_add(float *restrict dst, const float *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] += src[i];
}
