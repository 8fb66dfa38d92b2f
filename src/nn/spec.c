/*
 * spec.c - a model description ("input:1x28x28,conv:20:5,...", or a
 * built-in name) parsed into the model's layers and tensors, with every
 * field checked against its bounds (docs/training.md, "Models").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dtrain/nn.h"
#include "nn/layers.h"
#include "nn/model_impl.h"

static const struct {
	const char *name, *spec;
} builtins[] = {
    {"lenet", "input:1x28x28,conv:20:5,maxpool:2:2,relu,conv:50:5,"
              "maxpool:2:2,relu,flatten,dense:500,relu,dense:10,softmax_ce"},
    {"lenet-tanh", "input:1x28x28,conv:20:5,maxpool:2:2,tanh,conv:50:5,"
                   "maxpool:2:2,tanh,flatten,dense:500,tanh,dense:10,"
                   "softmax_ce"},
    {"mlp", "input:784,dense:128,relu,dense:64,relu,dense:10,softmax_ce"},
    {"linreg", "input:1,dense:1,l2"},
};

/* ---- spec parsing ---- */

/*
 * Parse an integer in [lo, hi] at the start of field. With end NULL the
 * whole field must be the number; otherwise *end gets what follows it.
 */
static dt_err
parse_int(const char *tok, const char *field, long lo, long hi, int *out,
          const char **end)
{
	char *e;
	long v;

	errno = 0;
	v = strtol(field, &e, 10);
	if (errno != 0 || e == field || (end == NULL && *e != '\0'))
		return dt__fail(DT_EINVAL,
		                "model spec '%s': '%s' is not an integer", tok,
		                field);
	if (v < lo || v > hi)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': %ld is out of range "
		                "[%ld, %ld]",
		                tok, v, lo, hi);
	*out = (int)v;
	if (end)
		*end = e;
	return DT_OK;
}

/* Split tok at ':' into fields; returns their number (f gets at most max).
 */
static int
split_fields(char *tok, char **f, int max)
{
	int n = 1;

	f[0] = tok;
	for (char *p = tok; *p; p++) {
		if (*p == ':') {
			*p = '\0';
			if (n < max)
				f[n] = p + 1;
			n++;
		}
	}
	return n;
}

typedef struct plan {
	int c, h, w; /* current shape per sample */
	int spatial; /* current activation is (C, H, W), not flat */
	int cm;      /* current activation is channel-major */
	int owned;   /* current buffer belongs to the model (not caller x) */
	int fragile; /* its producer needs it for backward (relu, tanh) */
	int conv_n, dense_n;
} plan;

static dt_err
add_tensor(dt_nn_model *m, const char *kind, int idx, const char *what,
           int ndim, const int *shape, float wd_mult)
{
	dt_nn_tensor *t;
	size_t size = 1;

	if (m->ntensors >= 2 * MAX_LAYERS)
		return dt__fail(DT_EINVAL, "model spec: too many tensors");
	t = &m->tensors[m->ntensors];
	snprintf(m->names[m->ntensors], NAME_LEN, "%s%d_%s", kind, idx, what);
	t->name = m->names[m->ntensors];
	t->ndim = ndim;
	for (int i = 0; i < DT_NN_MAX_DIMS; i++)
		t->shape[i] = i < ndim ? shape[i] : 0;
	for (int i = 0; i < ndim; i++)
		size *= (size_t)shape[i];
	if (size > MAX_PARAMS || m->nparams + size > MAX_PARAMS)
		return dt__fail(DT_EINVAL,
		                "model spec: tensor %s has %zu "
		                "floats, over the limit of %llu in all",
		                t->name, size, (unsigned long long)MAX_PARAMS);
	t->offset = m->nparams;
	t->size = size;
	t->wd_mult = wd_mult;
	m->nparams += size;
	m->ntensors++;
	return DT_OK;
}

static dt_err
new_layer(dt_nn_model *m, plan *pl, enum layer_kind kind, layer **out)
{
	layer *L;

	if (m->nlayers >= MAX_LAYERS)
		return dt__fail(DT_EINVAL, "model spec: more than %d layers",
		                MAX_LAYERS);
	L = &m->layers[m->nlayers++];
	memset(L, 0, sizeof(*L));
	L->kind = kind;
	L->c = pl->c;
	L->h = pl->h;
	L->w = pl->w;
	L->cm_in = pl->cm;
	L->wt = -1;
	L->in_size = (size_t)pl->c * pl->h * pl->w;
	*out = L;
	return DT_OK;
}

static dt_err
set_out(const dt_nn_model *m, layer *L, plan *pl, size_t c, int h, int w)
{
	size_t n = c * (size_t)h * (size_t)w;

	if (n > MAX_ACT)
		return dt__fail(DT_EINVAL,
		                "model spec: layer %d has %zu outputs per "
		                "sample, over the limit of %d",
		                (int)(L - m->layers), n, MAX_ACT);
	L->oc = (int)c;
	L->oh = h;
	L->ow = w;
	L->out_size = n;
	pl->c = (int)c;
	pl->h = h;
	pl->w = w;
	return DT_OK;
}

static dt_err
add_flatten(dt_nn_model *m, plan *pl)
{
	layer *L = NULL;
	dt_err err = new_layer(m, pl, L_FLATTEN, &L);

	if (err)
		return err;
	/* Sample-major data is already in flat order: nothing to do. */
	L->alias = !pl->cm;
	if ((err = set_out(m, L, pl, (size_t)pl->c * pl->h * pl->w, 1, 1)))
		return err;
	if (!L->alias) {
		pl->owned = 1;
		pl->fragile = 0;
	}
	pl->spatial = 0;
	pl->cm = 0;
	return DT_OK;
}

/* An elementwise layer (relu, tanh, dropout). */
static dt_err
add_elementwise(dt_nn_model *m, plan *pl, enum layer_kind kind, float rate)
{
	layer *L = NULL;
	dt_err err = new_layer(m, pl, kind, &L);

	if (err)
		return err;
	L->rate = rate;
	/* Overwrite the input only if it is ours and no backward pass still
	 * needs it (relu and tanh read their own outputs). */
	L->inplace = pl->owned && !pl->fragile;
	if ((err = set_out(m, L, pl, pl->c, pl->h, pl->w)))
		return err;
	pl->owned = 1;
	pl->fragile = kind == L_RELU || kind == L_TANH;
	return DT_OK;
}

/* One parser per layer kind: f[0] is the kind's name, f[1..nf-1] its
 * arguments; orig is the whole token, for messages. */
typedef dt_err (*layer_parser)(dt_nn_model *m, plan *pl, char **f, int nf,
                               const char *orig);

static dt_err
parse_conv(dt_nn_model *m, plan *pl, char **f, int nf, const char *orig)
{
	layer *L = NULL;
	dt_err err;
	int a = 0, b = 0, s = 1, p = 0;

	if (nf < 3 || nf > 5)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': expected "
		                "conv:OUT:K[:STRIDE[:PAD]]",
		                orig);
	if (!pl->spatial)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': conv needs a CxHxW input",
		                orig);
	if ((err = parse_int(orig, f[1], 1, MAX_DIM, &a, NULL)) ||
	    (err = parse_int(orig, f[2], 1, 64, &b, NULL)) ||
	    (nf > 3 && (err = parse_int(orig, f[3], 1, 64, &s, NULL))) ||
	    (nf > 4 && (err = parse_int(orig, f[4], 0, b - 1, &p, NULL))))
		return err;
	if (pl->h + 2 * p < b || pl->w + 2 * p < b)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': kernel %d larger than the "
		                "%dx%d input",
		                orig, b, pl->h, pl->w);
	if ((err = new_layer(m, pl, L_CONV, &L)))
		return err;
	L->k = b;
	L->s = s;
	L->p = p;
	L->wt = m->ntensors;

	int ws[4] = {a, pl->c, b, b};

	if ((err = add_tensor(m, "conv", pl->conv_n, "weight", 4, ws, 1.0f)) ||
	    (err = add_tensor(m, "conv", pl->conv_n, "bias", 1, ws, 0.0f)))
		return err;
	pl->conv_n++;
	if ((err = set_out(m, L, pl, a, nn_out_dim(pl->h, b, s, p),
	                   nn_out_dim(pl->w, b, s, p))))
		return err;
	pl->cm = 1;
	pl->owned = 1;
	pl->fragile = 0;
	return DT_OK;
}

static dt_err
parse_maxpool(dt_nn_model *m, plan *pl, char **f, int nf, const char *orig)
{
	layer *L = NULL;
	dt_err err;
	int b = 0, s;

	if (nf < 2 || nf > 3)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': expected maxpool:K[:STRIDE]",
		                orig);
	if (!pl->spatial)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': maxpool needs a CxHxW input",
		                orig);
	if ((err = parse_int(orig, f[1], 1, 64, &b, NULL)))
		return err;
	s = b;
	if (nf > 2 && (err = parse_int(orig, f[2], 1, 64, &s, NULL)))
		return err;
	if (pl->h < b || pl->w < b)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': window %d larger than the "
		                "%dx%d input",
		                orig, b, pl->h, pl->w);
	if ((err = new_layer(m, pl, L_MAXPOOL, &L)))
		return err;
	L->k = b;
	L->s = s;
	if ((err = set_out(m, L, pl, pl->c, nn_out_dim(pl->h, b, s, 0),
	                   nn_out_dim(pl->w, b, s, 0))))
		return err;
	pl->owned = 1;
	pl->fragile = 0;
	return DT_OK;
}

static dt_err
parse_activation(dt_nn_model *m, plan *pl, char **f, int nf, const char *orig)
{
	if (nf != 1)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': %s takes no arguments", orig,
		                f[0]);
	return add_elementwise(m, pl, f[0][0] == 'r' ? L_RELU : L_TANH, 0.0f);
}

static dt_err
parse_dropout(dt_nn_model *m, plan *pl, char **f, int nf, const char *orig)
{
	char *end;
	double r;

	if (nf != 2)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': expected dropout:RATE", orig);
	errno = 0;
	r = strtod(f[1], &end);
	if (errno || end == f[1] || *end || !(r >= 0.0 && r < 1.0))
		return dt__fail(DT_EINVAL,
		                "model spec '%s': dropout rate must be in "
		                "[0, 1)",
		                orig);
	return add_elementwise(m, pl, L_DROPOUT, (float)r);
}

static dt_err
parse_flatten(dt_nn_model *m, plan *pl, char **f, int nf, const char *orig)
{
	(void)f;
	if (nf != 1)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': flatten takes no arguments",
		                orig);
	return add_flatten(m, pl);
}

static dt_err
parse_dense(dt_nn_model *m, plan *pl, char **f, int nf, const char *orig)
{
	layer *L = NULL;
	dt_err err;
	size_t in;
	int a = 0;

	if (nf != 2)
		return dt__fail(DT_EINVAL, "model spec '%s': expected dense:N",
		                orig);
	if ((err = parse_int(orig, f[1], 1, MAX_DIM, &a, NULL)))
		return err;
	if (pl->spatial && (err = add_flatten(m, pl)))
		return err;
	in = (size_t)pl->c;
	if (in > MAX_PARAMS / (size_t)a)
		return dt__fail(
		    DT_EINVAL, "model spec '%s': %zu x %d weights are too many",
		    orig, in, a);
	if ((err = new_layer(m, pl, L_DENSE, &L)))
		return err;
	L->wt = m->ntensors;

	int ws[2] = {a, (int)in};

	if ((err =
	         add_tensor(m, "dense", pl->dense_n, "weight", 2, ws, 1.0f)) ||
	    (err = add_tensor(m, "dense", pl->dense_n, "bias", 1, ws, 0.0f)))
		return err;
	pl->dense_n++;
	if ((err = set_out(m, L, pl, a, 1, 1)))
		return err;
	pl->owned = 1;
	pl->fragile = 0;
	return DT_OK;
}

static const struct {
	const char *name;
	layer_parser parse;
} layer_kinds[] = {
    {"conv", parse_conv},       {"maxpool", parse_maxpool},
    {"relu", parse_activation}, {"tanh", parse_activation},
    {"dropout", parse_dropout}, {"flatten", parse_flatten},
    {"dense", parse_dense},
};

static dt_err
parse_layer(dt_nn_model *m, plan *pl, char *tok, const char *orig)
{
	char *f[5];
	int nf = split_fields(tok, f, 5);

	for (size_t i = 0; i < sizeof(layer_kinds) / sizeof(layer_kinds[0]);
	     i++)
		if (strcmp(f[0], layer_kinds[i].name) == 0)
			return layer_kinds[i].parse(m, pl, f, nf, orig);
	return dt__fail(DT_EINVAL,
	                "model spec: unknown layer '%s' "
	                "(known: conv, maxpool, relu, tanh, flatten, "
	                "dense, dropout; losses softmax_ce, l2, l1)",
	                orig);
}

static dt_err
parse_input(dt_nn_model *m, plan *pl, const char *tok)
{
	const char *p = tok + strlen("input:");
	int d[3] = {1, 1, 1}, n = 0;
	dt_err err;

	for (;;) {
		if (n == 3)
			return dt__fail(DT_EINVAL,
			                "model spec '%s': at most "
			                "3 dimensions",
			                tok);
		if ((err = parse_int(tok, p, 1, MAX_DIM, &d[n++], &p)))
			return err;
		if (*p == '\0')
			break;
		if (*p != 'x')
			return dt__fail(DT_EINVAL,
			                "model spec '%s': expected "
			                "input:C[xHxW]",
			                tok);
		p++;
	}
	if (n == 2)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': give input:N or "
		                "input:CxHxW",
		                tok);
	if ((size_t)d[0] * d[1] * d[2] > MAX_ACT)
		return dt__fail(DT_EINVAL, "model spec '%s': input too large",
		                tok);
	pl->c = d[0];
	pl->h = d[1];
	pl->w = d[2];
	pl->spatial = n == 3;
	m->in_c = d[0];
	m->in_h = d[1];
	m->in_w = d[2];
	m->in_size = (size_t)d[0] * d[1] * d[2];
	return DT_OK;
}

dt_err
dt__nn_parse_spec(dt_nn_model *m, const char *spec)
{
	char buf[MAX_SPEC], orig[MAX_SPEC];
	char *save = NULL, *tok;
	plan pl;
	int ntok = 0, have_loss = 0;
	dt_err err;

	memset(&pl, 0, sizeof(pl));
	if (strlen(spec) >= sizeof(buf))
		return dt__fail(DT_EINVAL, "model spec longer than %d bytes",
		                MAX_SPEC - 1);
	strcpy(buf, spec);
	for (tok = strtok_r(buf, ",", &save); tok != NULL;
	     tok = strtok_r(NULL, ",", &save), ntok++) {
		snprintf(orig, sizeof(orig), "%s", tok);
		if (have_loss)
			return dt__fail(DT_EINVAL,
			                "model spec '%s': nothing "
			                "may follow the loss",
			                orig);
		if (ntok == 0) {
			if (strncmp(tok, "input:", 6) != 0)
				return dt__fail(DT_EINVAL,
				                "model spec '%s': "
				                "must start with input:C[xHxW] "
				                "or be one of lenet, "
				                "lenet-tanh, mlp, linreg",
				                spec);
			if ((err = parse_input(m, &pl, tok)))
				return err;
			continue;
		}
		if (strcmp(tok, "softmax_ce") == 0 || strcmp(tok, "l2") == 0 ||
		    strcmp(tok, "l1") == 0) {
			m->loss = tok[0] == 's'   ? LOSS_CE
			          : tok[1] == '2' ? LOSS_L2
			                          : LOSS_L1;
			have_loss = 1;
			continue;
		}
		if ((err = parse_layer(m, &pl, tok, orig)))
			return err;
	}
	if (ntok == 0)
		return dt__fail(DT_EINVAL, "model spec is empty");
	if (!have_loss)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': must end with a "
		                "loss (softmax_ce, l2 or l1)",
		                spec);
	if (m->nlayers == 0)
		return dt__fail(DT_EINVAL, "model spec '%s': no layers", spec);
	/* Losses read sample-major rows. */
	if (pl.spatial && (err = add_flatten(m, &pl)))
		return err;
	m->out_size = (size_t)pl.c * pl.h * pl.w;
	m->label_size = m->loss == LOSS_CE ? 1 : m->out_size;
	if (m->loss == LOSS_CE && m->out_size < 2)
		return dt__fail(DT_EINVAL,
		                "model spec '%s': softmax_ce needs "
		                "at least 2 outputs, not %zu",
		                spec, m->out_size);
	/* Input gradients are only needed when an earlier layer has
	 * parameters (the first conv of lenet computes none). */
	for (int i = 0, seen = 0; i < m->nlayers; i++) {
		m->layers[i].need_dx = seen;
		if (m->layers[i].wt >= 0)
			seen = 1;
	}
	return DT_OK;
}

const char *
dt__nn_builtin_spec(const char *name)
{
	for (size_t i = 0; i < DT_ARRAY_LEN(builtins); i++)
		if (strcmp(name, builtins[i].name) == 0)
			return builtins[i].spec;
	return name;
}
