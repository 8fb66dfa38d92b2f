/*
 * stage.c - pipeline stages of a model (model parallelism): cutting a
 * parsed model down to a range of its layers, the cut rule that chooses
 * the ranges, the passes of a stage before the last (forward without a
 * loss, backward from the gradient of its output), and the activation
 * slots that let a stage keep several micro-batches' activations at once.
 *
 * A slot is a full set of the layers' activation buffers with the
 * pointers a forward pass leaves for its backward pass. The active slot
 * lives in the layers themselves, which is what the passes in model.c
 * read, so those passes know nothing of slots; dt__nn_select_slot swaps
 * the active one out into its record and another in. Slot 0 is the
 * layers' own buffers, which every call but the _slot ones uses.
 * pipeline.c drives all this for a training step.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dtrain/nn.h"
#include "dtrain/obs.h"
#include "nn/model_impl.h"
#include "obs/obs.h"

/* ---- cutting ---- */

/*
 * Keep layers [first, last) of the parsed whole model m and their tensors
 * (before any buffer exists); *first_tensor is the index in the whole
 * model of the first tensor kept. Activations cross a cut as they are
 * (the layout one layer writes is the one the next reads).
 */
dt_err
dt__nn_cut_layers(dt_nn_model *m, int first, int last, int *first_tensor)
{
	int t0 = -1, t1 = 0;
	size_t base = 0;

	if (first < 0 || last > m->nlayers || first >= last)
		return dt__fail(
		    DT_EINVAL,
		    "model stage [%d, %d): not a non-empty range of "
		    "the model's %d layers",
		    first, last, m->nlayers);
	for (int i = 0; i < m->nlayers; i++) {
		const layer *L = &m->layers[i];

		/* One process draws every dropout mask from one stream in
		 * layer order; a stage could not follow it. */
		if (L->kind == L_DROPOUT && (first > 0 || last < m->nlayers))
			return dt__fail(
			    DT_ENOTSUP,
			    "model stage: layer %d is dropout, which "
			    "a model cut into stages does not support",
			    i);
		if (i >= first && i < last && L->wt >= 0) {
			if (t0 < 0)
				t0 = L->wt;
			t1 = L->wt + 2;
		}
	}
	if (t0 < 0)
		t0 = t1 = 0;
	base = t0 < t1 ? m->tensors[t0].offset : 0;
	for (int i = t0; i < t1; i++) {
		dt_nn_tensor *t = &m->tensors[i - t0];

		*t = m->tensors[i];
		memmove(m->names[i - t0], m->names[i], NAME_LEN);
		t->name = m->names[i - t0];
		t->offset -= base;
	}
	m->ntensors = t1 - t0;
	m->nparams = t1 > t0 ? m->tensors[t1 - t0 - 1].offset +
	                           m->tensors[t1 - t0 - 1].size
	                     : 0;
	m->has_loss = last == m->nlayers;
	memmove(m->layers, m->layers + first,
	        sizeof(layer) * (size_t)(last - first));
	m->nlayers = last - first;
	for (int i = 0; i < m->nlayers; i++)
		if (m->layers[i].wt >= 0)
			m->layers[i].wt -= t0;
	/* The stage's input is the caller's buffer: never write over it. */
	m->layers[0].inplace = 0;
	m->in_c = m->layers[0].c;
	m->in_h = m->layers[0].h;
	m->in_w = m->layers[0].w;
	m->in_size = m->layers[0].in_size;
	m->out_size = m->layers[m->nlayers - 1].out_size;
	if (!m->has_loss)
		m->label_size = 0;
	*first_tensor = t0;
	return DT_OK;
}

int
dt_nn_model_num_layers(const dt_nn_model *m)
{
	return m ? m->nlayers : 0;
}

/*
 * A layer's work per sample, forward and backward, in operations: a conv
 * or dense layer's product once forward and once for its weight gradient,
 * once more for its input gradient when a layer before it needs one (the
 * first layer with parameters computes none, which is what makes a stage
 * holding it cheaper than its forward work says); the other layers one
 * operation per output element forward and one more backward when a
 * gradient goes through them. Only the ratios matter.
 */
static double
layer_work(const layer *L)
{
	double g = dt__nn_layer_flops(L);

	if (g > 0.0)
		return g * (L->need_dx ? 3.0 : 2.0);
	return (double)L->out_size * (L->need_dx ? 2.0 : 1.0);
}

/* How many stages of at most cap work each the units need, cut greedily
 * (a unit over cap on its own still makes one stage). */
static int
stages_within(const double *work, int n, double cap)
{
	double cur = 0.0;
	int parts = 1;

	for (int i = 0; i < n; i++) {
		if (i > 0 && cur + work[i] > cap) {
			parts++;
			cur = 0.0;
		}
		cur += work[i];
	}
	return parts;
}

/*
 * The least bound on a stage's work that `stages` stages can keep, by
 * bisection on the greedy cut (which needs more stages the lower the
 * bound): between the largest unit and the whole, to a relative 1e-9.
 * The same arithmetic on every rank gives the same bound.
 */
static double
least_bound(const double *work, int n, int stages)
{
	double lo = 0.0, hi = 0.0;

	for (int i = 0; i < n; i++) {
		lo = DT_MAX(lo, work[i]);
		hi += work[i];
	}
	if (stages_within(work, n, lo) <= stages)
		return lo;
	for (int it = 0; it < 200 && hi - lo > hi * 1e-9; it++) {
		double mid = lo + (hi - lo) / 2;

		if (stages_within(work, n, mid) <= stages)
			hi = mid;
		else
			lo = mid;
	}
	return hi;
}

/*
 * The cut rule: stages start only at a conv or dense layer (the layers
 * between them, activations, pooling and flattening, stay with the layer
 * that feeds them), and the cut is the one whose most loaded stage has
 * the least cost (forward and backward): a pipeline goes at the pace of
 * its slowest stage. The units are a conv or dense layer with the layers
 * after it up to the next one; with the least bound on a stage's cost
 * known, stages are cut greedily under it, and earlier when only as many
 * units remain as stages still to start. cost[i] is layer i's cost, or
 * NULL for the counted operations of layer_work().
 */
static dt_err
cut_rule(const dt_nn_model *m, int stages, const double *cost, int *first)
{
	double *work = NULL, bound, cur;
	int *start = NULL, n = 0, s = 1, compute = 0;
	dt_err err = DT_OK;

	work = calloc((size_t)m->nlayers + 1, sizeof(*work));
	start = calloc((size_t)m->nlayers + 1, sizeof(*start));
	if (work == NULL || start == NULL) {
		err = dt__fail(DT_ENOMEM, "model cut: %d layers", m->nlayers);
		goto fail;
	}
	/* Units: each conv or dense layer but the first starts one; the
	 * layers before the first go with it. */
	for (int i = 0; i < m->nlayers; i++) {
		if (dt__nn_layer_flops(&m->layers[i]) > 0.0 && compute++ > 0)
			start[n++] = i;
		else if (n == 0)
			start[n++] = 0;
		work[n - 1] += cost ? cost[i] : layer_work(&m->layers[i]);
	}
	if (compute < stages) {
		err = dt__fail(DT_EINVAL,
		               "model cut: %d conv and dense layers cannot "
		               "make %d stages",
		               compute, stages);
		goto fail;
	}
	bound = least_bound(work, n, stages);
	first[0] = 0;
	cur = work[0];
	for (int u = 1; u < n; u++) {
		if (s < stages &&
		    (cur + work[u] > bound || n - u == stages - s)) {
			first[s++] = start[u];
			cur = 0.0;
		}
		cur += work[u];
	}
	first[stages] = m->nlayers;
fail:
	free(work);
	free(start);
	return err;
}

dt_err
dt_nn_model_cut(const dt_nn_model *m, int stages, int *first)
{
	if (m == NULL || first == NULL || stages < 1)
		return dt__fail(DT_EINVAL, "model cut: bad arguments");
	return cut_rule(m, stages, NULL, first);
}

/* The rule on costs the caller measured (dt_nn_model_profile): any cost
 * that is not a finite number >= 0 is refused, as it would make the
 * bisection meaningless. */
dt_err
dt_nn_model_cut_by(const dt_nn_model *m, int stages, const double *cost,
                   int *first)
{
	if (m == NULL || cost == NULL || first == NULL || stages < 1)
		return dt__fail(DT_EINVAL, "model cut: bad arguments");
	for (int i = 0; i < m->nlayers; i++)
		if (!(cost[i] >= 0.0 && cost[i] <= DBL_MAX))
			return dt__fail(DT_EINVAL,
			                "model cut: layer %d's cost %g is not "
			                "a finite number >= 0",
			                i, cost[i]);
	return cut_rule(m, stages, cost, first);
}

/* ---- activation slots ---- */

/* Make slot k the one the layers use, keeping the active one's buffers
 * and pointers in its record. */
void
dt__nn_select_slot(dt_nn_model *m, int k)
{
	act_slot *a, *b;

	if (k == m->active || m->slots == NULL)
		return;
	a = &m->slots[m->active];
	b = &m->slots[k];
	for (int i = 0; i < m->nlayers; i++) {
		layer *L = &m->layers[i];

		a->b[i] = (bufs){L->out, L->col, L->mask, L->arg};
		a->x[i] = L->x;
		a->y[i] = L->y;
		L->out = b->b[i].out;
		L->col = b->b[i].col;
		L->mask = b->b[i].mask;
		L->arg = b->b[i].arg;
		L->x = b->x[i];
		L->y = b->y[i];
	}
	a->last_out = m->last_out;
	a->batch = m->last_batch;
	m->last_out = b->last_out;
	m->last_batch = b->batch;
	m->active = k;
}

/* Back to the layers' own buffers only (slot 0), freeing the others. */
void
dt__nn_drop_slots(dt_nn_model *m)
{
	dt__nn_select_slot(m, 0);
	for (int k = 1; k < m->nslots; k++)
		dt__nn_free_bufs(m->slots[k].b, m->nlayers);
	free(m->slots);
	m->slots = NULL;
	m->nslots = 1;
	m->active = 0;
}

/* Keep slots [0, keep) only, freeing the others' buffers: a stage whose
 * schedule now keeps fewer micro-batches in flight gives the memory
 * back. The active slot becomes slot 0 if it is among those freed. */
static void
drop_slots_from(dt_nn_model *m, int keep)
{
	if (keep <= 1) {
		dt__nn_drop_slots(m);
		return;
	}
	if (m->active >= keep)
		dt__nn_select_slot(m, 0);
	for (int k = keep; k < m->nslots; k++)
		dt__nn_free_bufs(m->slots[k].b, m->nlayers);
	m->nslots = keep;
}

dt_err
dt_nn_stage_slots(dt_nn_model *m, int slots, int batch)
{
	act_slot *ns;
	dt_err err;

	if (m == NULL || slots < 1 || slots > DT_NN_PIPE_MAX_MICRO)
		return dt__fail(DT_EINVAL,
		                "stage_slots: %d slots: not in [1, %d]", slots,
		                DT_NN_PIPE_MAX_MICRO);
	if (batch <= 0 || batch > m->max_batch)
		return dt__fail(DT_EINVAL,
		                "stage_slots: batch %d out of range [1, %d]",
		                batch, m->max_batch);
	if ((err = dt__nn_reserve(m, batch)))
		return err;
	if (slots < m->nslots) {
		drop_slots_from(m, slots);
		return DT_OK;
	}
	if (slots == m->nslots)
		return DT_OK;
	ns = realloc(m->slots, sizeof(*ns) * (size_t)slots);
	if (ns == NULL)
		goto nomem;
	if (m->slots == NULL)
		memset(ns, 0, sizeof(*ns)); /* slot 0's record, now active */
	m->slots = ns;
	for (; m->nslots < slots; m->nslots++) {
		act_slot *a = &m->slots[m->nslots];

		memset(a, 0, sizeof(*a));
		if (dt__nn_alloc_layer_bufs(m, (size_t)m->cap, a->b)) {
			dt__nn_free_bufs(a->b, m->nlayers);
			goto nomem;
		}
	}
	return DT_OK;
nomem:
	return dt__fail(DT_ENOMEM,
	                "stage_slots: no memory for the activations of %d "
	                "micro-batches of %d",
	                slots, batch);
}

int
dt_nn_stage_num_slots(const dt_nn_model *m)
{
	return m ? m->nslots : 0;
}

size_t
dt_nn_stage_slot_bytes(const dt_nn_model *m, int batch)
{
	size_t n = 0, B = (size_t)(batch > 0 ? batch : 0);

	for (int i = 0; m && i < m->nlayers; i++) {
		const layer *L = &m->layers[i];

		if (!L->inplace && !L->alias)
			n += B * L->out_size * sizeof(float);
		if (L->kind == L_CONV)
			n += B * L->c * L->k * L->k * L->oh * L->ow *
			     sizeof(float);
		if (L->kind == L_MAXPOOL)
			n += B * L->out_size * sizeof(int32_t);
		if (L->kind == L_DROPOUT)
			n += B * L->out_size * sizeof(float);
	}
	return n;
}

/* ---- the passes of a stage ---- */

/* A slot's call: the slot exists and the batch fits the slots (growing
 * the buffers would drop the slots and the activations they hold). */
static dt_err
check_slot(const dt_nn_model *m, int slot, int batch, const char *what)
{
	if (slot < 0 || slot >= m->nslots)
		return dt__fail(DT_EINVAL,
		                "%s: slot %d of %d (dt_nn_stage_slots makes "
		                "more)",
		                what, slot, m->nslots);
	if (m->nslots > 1 && batch > m->cap)
		return dt__fail(DT_EINVAL,
		                "%s: batch %d larger than the slots' %d", what,
		                batch, m->cap);
	return DT_OK;
}

dt_err
dt_nn_stage_forward_slot(dt_nn_model *m, int slot, const float *x, int batch,
                         const float **out)
{
	dt_err err;

	if ((err = dt__nn_check_call(m, x, NULL, 0, batch, "stage_forward")) ||
	    (err = check_slot(m, slot, batch, "stage_forward")) ||
	    (err = dt__nn_reserve(m, batch)))
		return err;
	dt__nn_select_slot(m, slot);
	uint64_t t0 = dt_obs_now();
	dt__nn_forward(m, x, batch, 1);
	dt__obs_phase_span(DT_PHASE_FORWARD, t0, dt_obs_now());
	m->last_batch = batch;
	if (out)
		*out = m->last_out;
	return DT_OK;
}

dt_err
dt_nn_stage_forward(dt_nn_model *m, const float *x, int batch,
                    const float **out)
{
	return dt_nn_stage_forward_slot(m, 0, x, batch, out);
}

dt_err
dt_nn_stage_backward_slot(dt_nn_model *m, int slot, const float *dy, int batch,
                          const float **dx)
{
	dt_err err;

	if (dy == NULL)
		return dt__fail(DT_EINVAL, "stage_backward: NULL gradient");
	if ((err = check_slot(m, slot, batch, "stage_backward")))
		return err;
	dt__nn_select_slot(m, slot);
	if (m->last_out == NULL || batch != m->last_batch)
		return dt__fail(DT_ESTATE,
		                "stage_backward: batch %d does not follow a "
		                "stage_forward of that batch in slot %d",
		                batch, slot);
	memcpy(m->gbuf[0], dy, sizeof(float) * (size_t)batch * m->out_size);
	uint64_t t0 = dt_obs_now();
	dt__nn_backward(m, batch, 1);
	dt__obs_phase_span(DT_PHASE_BACKWARD, t0, dt_obs_now());
	if (dx)
		*dx = m->in_grad;
	return DT_OK;
}

dt_err
dt_nn_stage_backward(dt_nn_model *m, const float *dy, int batch,
                     const float **dx)
{
	return dt_nn_stage_backward_slot(m, 0, dy, batch, dx);
}

const float *
dt_nn_model_input_grad(const dt_nn_model *m)
{
	return m->in_grad;
}
