/*
 * pipe_replicas.c - data parallelism over pipelines: after a step, the R
 * replicas of a pipeline stage sum that stage's gradients
 * (dt_nn_pipe_sum_replicas), through the same point-to-point ops as the
 * step (pipeline.c), peers r * S + s.
 *
 * The sum is an allreduce among the stage's replicas, cut as the
 * collectives cut theirs into a reduce-scatter and an allgather: the
 * gradients are cut into R chunks, replica j owns chunk j, every replica
 * sends chunk j of its gradients to replica j, which adds the R of them,
 * then every owner sends its summed chunk to the others. Each replica
 * sends and receives 2 (R - 1) / R of the gradients, whatever R, instead
 * of one rank receiving and sending R - 1 whole copies. It runs over the
 * ops rather than the collectives' allreduce because the collectives
 * reduce over all ranks only (no sub-communicator of a stage's ranks),
 * and the trainer never names the network anyway.
 *
 * Exactness: an owner adds its chunk's R parts in replica order, ((g0 +
 * g1) + g2) + ..., whichever replica it is, so every element is the sum
 * one process gets adding the replicas' gradients in that order, bit for
 * bit, and every replica ends with the same bits.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dtrain/nn.h"
#include "nn/pipe.h"

#define REPLICA_TAG (1 << 20) /* above every micro-batch's (2 * 4096) */

typedef struct sum_run {
	const dt_nn_pipe_cfg *c;
	const dt_nn_pipe_ops *ops;
	int R;
	size_t n;
	float *g;
	void **h; /* [R] this replica's sends in flight */
} sum_run;

/* Chunk j of the n gradients is [lo(j), lo(j + 1)). */
static size_t
lo(const sum_run *s, int j)
{
	return s->n * (size_t)j / (size_t)s->R;
}

static size_t
len(const sum_run *s, int j)
{
	return lo(s, j + 1) - lo(s, j);
}

static int
peer(const sum_run *s, int r)
{
	return r * s->c->stages + s->c->stage;
}

/* Wait for every send in flight; the first error wins. */
static dt_err
wait_sends(sum_run *s, dt_err err)
{
	for (int r = 0; r < s->R; r++) {
		dt_err e;

		if (s->h[r] == NULL)
			continue;
		e = s->ops->wait(s->ops->arg, s->h[r]);
		s->h[r] = NULL;
		if (e && !err)
			err = e;
	}
	return err;
}

/* Reduce-scatter: send chunk j to replica j, take the others' parts of
 * this replica's chunk into parts[q] and add them in replica order. */
static dt_err
reduce_own(sum_run *s, float *parts)
{
	int me = s->c->replica;
	size_t n = len(s, me);
	float *own = s->g + lo(s, me);
	dt_err err = DT_OK;

	for (int j = 0; j < s->R && !err; j++)
		if (j != me && len(s, j) > 0)
			err = s->ops->send(s->ops->arg, s->g + lo(s, j),
			                   len(s, j), peer(s, j), REPLICA_TAG,
			                   &s->h[j]);
	for (int q = 0; q < s->R && !err && n > 0; q++)
		if (q != me)
			err = s->ops->recv(s->ops->arg, parts + (size_t)q * n,
			                   n, peer(s, q), REPLICA_TAG);
	if (err)
		return err;
	memcpy(parts + (size_t)me * n, own, sizeof(float) * n);
	memcpy(own, parts, sizeof(float) * n);
	for (int q = 1; q < s->R; q++) {
		const float *p = parts + (size_t)q * n;

		for (size_t i = 0; i < n; i++)
			own[i] += p[i];
	}
	return DT_OK;
}

/* Allgather: every owner's summed chunk to the others. The chunks sent in
 * reduce_own() are received over here, so those sends end first. */
static dt_err
gather_sums(sum_run *s)
{
	int me = s->c->replica;
	dt_err err = DT_OK;

	for (int j = 0; j < s->R && !err && len(s, me) > 0; j++)
		if (j != me)
			err = s->ops->send(s->ops->arg, s->g + lo(s, me),
			                   len(s, me), peer(s, j),
			                   REPLICA_TAG + 1, &s->h[j]);
	for (int q = 0; q < s->R && !err; q++)
		if (q != me && len(s, q) > 0)
			err = s->ops->recv(s->ops->arg, s->g + lo(s, q),
			                   len(s, q), peer(s, q),
			                   REPLICA_TAG + 1);
	return err;
}

dt_err
dt_nn_pipe_sum_replicas(dt_nn_model *m, const dt_nn_pipe_cfg *c,
                        const dt_nn_pipe_ops *ops)
{
	sum_run s = {.c = c, .ops = ops};
	float *parts = NULL;
	dt_err err;

	if (m == NULL || c == NULL || ops == NULL || !ops->send || !ops->recv ||
	    !ops->wait)
		return dt__fail(DT_EINVAL, "pipeline replicas: NULL argument");
	if (!dt__nn_pipe_grid_ok(c))
		return dt__fail(DT_EINVAL,
		                "pipeline replicas: replica %d of %d, stage %d "
		                "of %d: out of range",
		                c->replica, c->replicas, c->stage, c->stages);
	s.R = c->replicas;
	s.n = dt_nn_model_num_params(m);
	s.g = dt_nn_model_grads(m);
	if (s.R <= 1 || s.n == 0)
		return DT_OK;
	s.h = calloc((size_t)s.R, sizeof(*s.h));
	parts = malloc(sizeof(float) * ((size_t)s.R * len(&s, c->replica) + 1));
	if (s.h == NULL || parts == NULL) {
		err = dt__fail(DT_ENOMEM,
		               "pipeline replicas: %zu gradients to add", s.n);
		goto fail;
	}
	err = wait_sends(&s, reduce_own(&s, parts));
	if (!err)
		err = gather_sums(&s);
	err = wait_sends(&s, err);
fail:
	free(s.h);
	free(parts);
	return err;
}
