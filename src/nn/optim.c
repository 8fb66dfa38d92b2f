/*
 * optim.c - the trainer's optimizer object: one SGD or Adam state over a
 * model's parameter buffer, stepping every tensor with the kernels of
 * optim/kernels.c (which has the update rules).
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

struct dt_nn_optim {
	int adam;
	dt_nn_optim_param p;
	uint64_t t;
	size_t n;
	int ntensors;
	size_t *off, *len;
	float *wd_mult;
	float *s1, *s2; /* momentum, or adam's mean and var */
};

dt_err
dt_nn_optim_create(const char *name, const char *params, const dt_nn_model *m,
                   dt_nn_optim **out)
{
	dt_nn_optim *o;
	dt_err err;
	int nt;

	if (m == NULL || out == NULL)
		return dt__fail(DT_EINVAL, "optimizer: NULL argument");
	*out = NULL;
	if ((o = dt__calloc(1, sizeof(*o))) == NULL)
		return DT_ENOMEM;
	if ((err = dt_nn_optim_parse(name, params, &o->p)))
		goto fail;
	o->adam = strcmp(name, "adam") == 0;
	o->n = dt_nn_model_num_params(m);
	nt = o->ntensors = dt_nn_model_num_tensors(m);
	err = DT_ENOMEM;
	if ((o->off = dt__calloc((size_t)nt, sizeof(size_t))) == NULL ||
	    (o->len = dt__calloc((size_t)nt, sizeof(size_t))) == NULL ||
	    (o->wd_mult = dt__calloc((size_t)nt, sizeof(float))) == NULL)
		goto fail;
	for (int i = 0; i < nt; i++) {
		const dt_nn_tensor *t = dt_nn_model_tensor(m, i);

		o->off[i] = t->offset;
		o->len[i] = t->size;
		o->wd_mult[i] = t->wd_mult;
	}
	if ((o->adam || o->p.momentum != 0.0) &&
	    (o->s1 = dt__calloc(o->n, sizeof(float))) == NULL)
		goto fail;
	if (o->adam && (o->s2 = dt__calloc(o->n, sizeof(float))) == NULL)
		goto fail;
	*out = o;
	return DT_OK;
fail:
	dt_nn_optim_destroy(o);
	return err;
}

void
dt_nn_optim_destroy(dt_nn_optim *o)
{
	if (o == NULL)
		return;
	free(o->off);
	free(o->len);
	free(o->wd_mult);
	free(o->s1);
	free(o->s2);
	free(o);
}

dt_err
dt_nn_optim_step(dt_nn_optim *o, dt_nn_model *m)
{
	float *w = dt_nn_model_params(m);
	const float *g = dt_nn_model_grads(m);

	if (dt_nn_model_num_params(m) != o->n ||
	    dt_nn_model_num_tensors(m) != o->ntensors)
		return dt__fail(DT_ESIZE,
		                "optimizer step: model has %zu "
		                "parameters in %d tensors, the optimizer was "
		                "made for %zu in %d",
		                dt_nn_model_num_params(m),
		                dt_nn_model_num_tensors(m), o->n, o->ntensors);
	o->t++;
	for (int i = 0; i < o->ntensors; i++) {
		size_t off = o->off[i];
		double wd = o->p.wd * o->wd_mult[i];

		if (o->adam)
			dt_nn_adam_update(&o->p, wd, o->t, w + off, g + off,
			                  o->s1 + off, o->s2 + off, o->len[i]);
		else
			dt_nn_sgd_update(&o->p, wd, w + off, g + off,
			                 o->s1 ? o->s1 + off : NULL, o->len[i]);
	}
	return DT_OK;
}

void
dt_nn_optim_set_lr(dt_nn_optim *o, double lr)
{
	o->p.lr = lr;
}

const dt_nn_optim_param *
dt_nn_optim_get_param(const dt_nn_optim *o)
{
	return &o->p;
}

uint64_t
dt_nn_optim_num_update(const dt_nn_optim *o)
{
	return o->t;
}
