/*
 * profile.c - what each layer of a model costs, measured: its forward and
 * backward passes timed one layer at a time on a batch of the real shape
 * (dt_nn_model_profile), for the cut by measured time (stage.c's
 * dt_nn_model_cut_by) and for the pipeline's per-pass times
 * (pipeline.c).
 *
 * The clock is the calling thread's CPU time, not the wall clock: on a
 * machine shared with other work a layer's wall time grows whenever the
 * thread is preempted, its CPU time does not, so the figures say what the
 * layer costs rather than how busy the machine was. (The trainer's BLAS
 * runs on the calling thread only: blas.c sets one thread.) Each layer's
 * figure is the median over the repetitions, so a repetition slowed by a
 * cache another process emptied does not move it.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "dtrain/nn.h"
#include "nn/model_impl.h"

#define MAX_REPS 100

uint64_t
dt__nn_cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One forward and one backward pass, layer by layer, each layer's CPU
 * time into fwd[i * stride] and bwd[i * stride] (0 where the backward
 * pass stops early). dy is the gradient of the output. */
static void
timed_pass(dt_nn_model *m, const float *x, const float *dy, int B, double *fwd,
           double *bwd, int stride)
{
	const float *cur = x;
	int gi = 0;

	for (int i = 0; i < m->nlayers; i++) {
		uint64_t t0 = dt__nn_cpu_now();

		cur = dt__nn_forward_layer(m, i, cur, B, 1);
		fwd[i * stride] = (double)(dt__nn_cpu_now() - t0);
	}
	m->last_out = cur;
	memcpy(m->gbuf[0], dy, sizeof(float) * (size_t)B * m->out_size);
	for (int i = m->nlayers - 1; i >= 0; i--) {
		uint64_t t0 = dt__nn_cpu_now();
		int next = gi < 0 ? -1 : dt__nn_backward_layer(m, i, gi, B, 1);

		bwd[i * stride] =
		    next < 0 ? 0.0 : (double)(dt__nn_cpu_now() - t0);
		gi = next;
	}
}

/* Made-up values in [-0.5, 0.5): the time of these layers does not
 * depend on the values, as long as they are ordinary numbers. */
static void
fill(float *v, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		v[i] = (float)((seed >> 40) & 0xffff) / 65536.0f - 0.5f;
	}
}

dt_err
dt_nn_model_profile(dt_nn_model *m, int batch, int reps, double *fwd_ns,
                    double *bwd_ns)
{
	float *x = NULL, *dy = NULL;
	double *t = NULL;
	size_t L;
	dt_err err;

	if (m == NULL || fwd_ns == NULL || bwd_ns == NULL)
		return dt__fail(DT_EINVAL, "model profile: NULL argument");
	if (reps < 1 || reps > MAX_REPS)
		return dt__fail(DT_EINVAL,
		                "model profile: %d repetitions: not in [1, %d]",
		                reps, MAX_REPS);
	if (batch < 1 || batch > m->max_batch)
		return dt__fail(DT_EINVAL,
		                "model profile: batch %d out of range [1, %d]",
		                batch, m->max_batch);
	if (m->nslots > 1)
		return dt__fail(DT_ESTATE,
		                "model profile: the model keeps %d activation "
		                "slots, which the passes would overwrite",
		                m->nslots);
	if ((err = dt__nn_reserve(m, batch)))
		return err;
	L = (size_t)m->nlayers;
	x = malloc(sizeof(float) * (size_t)batch * m->in_size);
	dy = malloc(sizeof(float) * (size_t)batch * m->out_size);
	t = malloc(sizeof(double) * 2 * L * (size_t)reps);
	if (x == NULL || dy == NULL || t == NULL) {
		err = dt__fail(DT_ENOMEM,
		               "model profile: inputs of a batch of %d", batch);
		goto fail;
	}
	fill(x, (size_t)batch * m->in_size, 1);
	fill(dy, (size_t)batch * m->out_size, 2);
	/* One pass to warm up (caches, pages), then the timed ones: layer
	 * i's forward times at t[i * reps + r], backward at
	 * t[(L + i) * reps + r]. */
	timed_pass(m, x, dy, batch, t, t + L * (size_t)reps, reps);
	for (int r = 0; r < reps; r++)
		timed_pass(m, x, dy, batch, t + r, t + L * (size_t)reps + r,
		           reps);
	for (size_t i = 0; i < L; i++) {
		fwd_ns[i] = dt__median(t + i * (size_t)reps, reps);
		bwd_ns[i] = dt__median(t + (L + i) * (size_t)reps, reps);
	}
	dt_nn_model_zero_grad(m);
	/* The activations left are made-up ones: a stage's backward pass
	 * must not take them for a forward pass of its caller's. */
	m->last_out = NULL;
	err = DT_OK;
fail:
	free(x);
	free(dy);
	free(t);
	return err;
}
