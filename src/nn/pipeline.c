/*
 * pipeline.c - one training step of a pipeline stage (model parallelism):
 * M micro-batches go forward through the stages and their gradients come
 * back, in the order of a schedule (GPipe or 1F1B), and the stage's
 * gradients accumulate over the micro-batches in micro-batch order.
 *
 * The trainer knows nothing of the network: the caller passes the sends
 * and receives between stages as an ops table (dt_nn_pipe_ops), which a
 * program fills with the collectives' point-to-point calls. Sends are
 * asynchronous: a stage never waits for its neighbour to take what it
 * sent, so stages that send to each other at the same time (the last
 * stage's first gradient while the one before still sends activations)
 * cannot block each other; each step waits for all its sends at its end.
 *
 * Exactness: a stage keeps the input and the activations of each
 * micro-batch in flight (the stash: the input here, the activations in
 * one of the model's activation slots, micro-batch k in slot k mod the
 * slots) and runs that micro-batch's backward pass from them. The slots
 * are as many as the schedule keeps micro-batches in flight, M under
 * GPipe and S - s under 1F1B; in flight at once are consecutive
 * micro-batches, so k mod the slots never names a slot still in use.
 * With backward passes in micro-batch order under both schedules the
 * gradients add up in the order one process running the micro-batches
 * one after another adds them.
 *
 * Ready-first (the default when the ops can receive asynchronously): a
 * stage whose schedule allows both its next forward pass (a slot is free)
 * and its next backward pass (that micro-batch went forward) posts both
 * receives and runs the one whose message arrives first, the forward when
 * both have; the strict order waits for the schedule's next pass even
 * when the other's input is already there. Forwards stay in micro-batch
 * order and so do backwards, so the slots, the gradients' order and the
 * bits are the strict order's; only when a stage idles changes. When both
 * inputs are there, the forward is also the strict order's next pass
 * (1F1B allows a forward only while fewer than S - s micro-batches are in
 * flight, which after its warm-up is right after a backward), so with
 * messages on time the two orders are the same.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "dtrain/nn.h"
#include "dtrain/obs.h"
#include "nn/pipe.h"

typedef struct pipe_run {
	dt_nn_model *m;
	const dt_nn_pipe_cfg *cfg;
	const dt_nn_pipe_ops *ops;
	size_t in_n, out_n; /* floats per micro-batch in and out */
	float **stash;      /* [M] this stage's input of each micro-batch */
	float **fwd_out;    /* [M] activations sent on (kept until sent) */
	float **bwd_out;    /* [M] input gradients sent back */
	float *dy;          /* the gradient of one micro-batch's output */
	void **handles;     /* [2 M] sends: forward k at k, backward at M + k */
	void *fh, *bh;      /* ready-first: the posted receives, or NULL */
	int slots;          /* activation slots of the model (stages < S-1) */
	int reordered;      /* backward passes run before a permitted forward */
	int live, peak;     /* stashed micro-batches now and at most */
	double loss;
	uint64_t busy_ns; /* in the layers */
	uint64_t *op_cpu; /* the caller's [2 M] (dt_nn_pipe_stats), or NULL */
} pipe_run;

/* The calling thread's CPU time: what the layers cost whatever else runs
 * on the same cores (the wall time of a layer grows when it is preempted,
 * this does not). */
static uint64_t
cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Layers timed: wall time into busy_ns and, when traced, CPU time into
 * op_cpu[i]. */
typedef struct op_clock {
	uint64_t wall, cpu;
} op_clock;

static op_clock
op_start(const pipe_run *p)
{
	return (op_clock){dt_obs_now(), p->op_cpu ? cpu_now() : 0};
}

static void
op_end(pipe_run *p, op_clock c, int i)
{
	p->busy_ns += dt_obs_now() - c.wall;
	if (p->op_cpu)
		p->op_cpu[i] += cpu_now() - c.cpu;
}

static int
is_first(const pipe_run *p)
{
	return p->cfg->stage == 0;
}

static int
is_last(const pipe_run *p)
{
	return p->cfg->stage == p->cfg->stages - 1;
}

/* The ops' name of stage s of this replica's pipeline: replica *
 * stages + s (with one replica, the stage itself). */
static int
peer(const dt_nn_pipe_cfg *c, int s)
{
	return (c->replicas > 1 ? c->replica * c->stages : 0) + s;
}

/* Forward micro-batch k once its input is in the stash (stage 0 copies
 * it there from x): before the last stage, run the layers in the
 * micro-batch's slot and send the output on. The last stage runs its
 * layers with the loss in backward_run(), which both orders call right
 * after. */
static dt_err
forward_run(pipe_run *p, int k)
{
	const dt_nn_pipe_cfg *c = p->cfg;
	const float *out;
	dt_err err;

	if (is_first(p))
		memcpy(p->stash[k], c->x + (size_t)k * p->in_n,
		       sizeof(float) * p->in_n);
	p->live++;
	p->peak = DT_MAX(p->peak, p->live);
	if (is_last(p))
		return DT_OK;
	op_clock t0 = op_start(p);
	err = dt_nn_stage_forward_slot(p->m, k % p->slots, p->stash[k],
	                               c->micro_batch, &out);
	op_end(p, t0, k);
	if (err)
		return err;
	memcpy(p->fwd_out[k], out, sizeof(float) * p->out_n);
	return p->ops->send(p->ops->arg, p->fwd_out[k], p->out_n,
	                    peer(c, c->stage + 1), 2 * k, &p->handles[k]);
}

/* Forward micro-batch k after receiving its input (stages after the
 * first) in the strict order. */
static dt_err
forward(pipe_run *p, int k)
{
	const dt_nn_pipe_cfg *c = p->cfg;
	dt_err err;

	if (!is_first(p) &&
	    (err = p->ops->recv(p->ops->arg, p->stash[k], p->in_n,
	                        peer(c, c->stage - 1), 2 * k)))
		return err;
	return forward_run(p, k);
}

/* Backward micro-batch k: the last stage runs forward with the loss and
 * backward; the others, with the gradient of their output in dy, run
 * backward from the activations the micro-batch's slot kept. The input
 * gradient goes back to the stage before. */
static dt_err
backward_run(pipe_run *p, int k)
{
	const dt_nn_pipe_cfg *c = p->cfg;
	const float *dx;
	double loss;
	dt_err err;

	op_clock t0;

	if (is_last(p)) {
		t0 = op_start(p);
		err = dt_nn_forward_backward(
		    p->m, p->stash[k],
		    c->y + (size_t)k * c->micro_batch *
		               dt_nn_model_label_size(p->m),
		    c->micro_batch, &loss, NULL);
		op_end(p, t0, c->micro_batches + k);
		if (err)
			return err;
		p->loss += loss;
		dx = dt_nn_model_input_grad(p->m);
	} else {
		t0 = op_start(p);
		err = dt_nn_stage_backward_slot(p->m, k % p->slots, p->dy,
		                                c->micro_batch, &dx);
		op_end(p, t0, c->micro_batches + k);
		if (err)
			return err;
	}
	p->live--;
	if (is_first(p))
		return DT_OK;
	if (dx == NULL)
		return dt__fail(DT_ESTATE,
		                "pipeline stage %d: no input gradient to send "
		                "back (no earlier stage has parameters)",
		                c->stage);
	memcpy(p->bwd_out[k], dx, sizeof(float) * p->in_n);
	return p->ops->send(p->ops->arg, p->bwd_out[k], p->in_n,
	                    peer(c, c->stage - 1), 2 * k + 1,
	                    &p->handles[c->micro_batches + k]);
}

/* Backward micro-batch k after receiving its output's gradient (stages
 * before the last) in the strict order. */
static dt_err
backward(pipe_run *p, int k)
{
	const dt_nn_pipe_cfg *c = p->cfg;
	dt_err err;

	if (!is_last(p) &&
	    (err = p->ops->recv(p->ops->arg, p->dy, p->out_n,
	                        peer(c, c->stage + 1), 2 * k + 1)))
		return err;
	return backward_run(p, k);
}

/* The order of work: GPipe runs every forward, then every backward; 1F1B
 * (PipeDream-flush) runs S - s - 1 forwards to fill the pipe, then one
 * forward and one backward by turns, then the remaining backwards. The
 * last stage runs each backward right after its forward under both: its
 * backward needs nothing but its own forward and the loss, and waiting
 * would only hold back the stages before, which under GPipe then idle
 * through the forward phase and the last stage through theirs. */
static dt_err
schedule_strict(pipe_run *p)
{
	const dt_nn_pipe_cfg *c = p->cfg;
	int M = c->micro_batches, f = 0, b = 0, warm;
	dt_err err;

	warm = c->schedule == DT_NN_PIPE_GPIPE && !is_last(p)
	           ? M
	           : DT_MIN(c->stages - c->stage - 1, M);
	for (; f < warm; f++)
		if ((err = forward(p, f)))
			return err;
	while (b < M) {
		if (f < M && (err = forward(p, f++)))
			return err;
		if ((err = backward(p, b++)))
			return err;
	}
	return DT_OK;
}

/* The ops can post a receive and wait for the first of two. */
static int
can_ready_first(const dt_nn_pipe_ops *ops)
{
	return ops->recv_async != NULL && ops->wait_any != NULL;
}

/* Post the receives the next passes need that are not posted yet: the
 * input of forward f when it may run, the gradient of backward b when it
 * may run. */
static dt_err
post_inputs(pipe_run *p, int f, int b, int can_f, int can_b)
{
	const dt_nn_pipe_cfg *c = p->cfg;
	dt_err err;

	if (can_f && !is_first(p) && p->fh == NULL &&
	    (err = p->ops->recv_async(p->ops->arg, p->stash[f], p->in_n,
	                              peer(c, c->stage - 1), 2 * f, &p->fh)))
		return err;
	if (can_b && !is_last(p) && p->bh == NULL &&
	    (err =
	         p->ops->recv_async(p->ops->arg, p->dy, p->out_n,
	                            peer(c, c->stage + 1), 2 * b + 1, &p->bh)))
		return err;
	return DT_OK;
}

/* Complete the receive *h (its result; *h is then NULL). */
static dt_err
take(pipe_run *p, void **h)
{
	void *t = *h;

	*h = NULL;
	return t ? p->ops->wait(p->ops->arg, t) : DT_OK;
}

/*
 * Ready-first (see the top of the file): the same passes as
 * schedule_strict's, forwards in order and backwards in order, within
 * the same bound of micro-batches in flight (the slots), each run as soon
 * as its input is there. A forward is preferred whenever it may run and
 * its input is there (the first stage's always is, so stage 0 runs the
 * strict order); a backward runs first only when its gradient has come
 * and the forward's input has not.
 */
static dt_err
schedule_ready(pipe_run *p)
{
	int M = p->cfg->micro_batches, f = 0, b = 0;
	dt_err err;

	while (b < M) {
		int can_f = f < M && f - b < p->slots, can_b = b < f;
		int run_f = can_f;

		if ((err = post_inputs(p, f, b, can_f, can_b)))
			return err;
		/* Both posted: neither the first stage (whose forward
		 * needs no message) nor the last (one slot: never both). */
		if (can_f && can_b && p->fh && p->bh) {
			void *h[2] = {p->fh, p->bh};
			int i = 0;

			if ((err = p->ops->wait_any(p->ops->arg, h, 2, &i)))
				return err;
			run_f = i == 0;
			p->reordered += !run_f;
		}
		if ((err = take(p, run_f ? &p->fh : &p->bh)))
			return err;
		if ((err = run_f ? forward_run(p, f++) : backward_run(p, b++)))
			return err;
	}
	return DT_OK;
}

static dt_err
schedule(pipe_run *p)
{
	if (p->cfg->strict || !can_ready_first(p->ops))
		return schedule_strict(p);
	return schedule_ready(p);
}

static float **
alloc_set(int M, size_t n)
{
	float **s = calloc((size_t)M, sizeof(*s));

	for (int k = 0; s && k < M; k++)
		if ((s[k] = malloc(sizeof(float) * (n ? n : 1))) == NULL)
			return s; /* caller checks the last */
	return s;
}

static void
free_set(float **s, int M)
{
	for (int k = 0; s && k < M; k++)
		free(s[k]);
	free(s);
}

/* This rank's place in the grid of replicas x stages is in range. */
int
dt__nn_pipe_grid_ok(const dt_nn_pipe_cfg *c)
{
	return c->replicas >= 0 && c->replicas <= DT_NN_PIPE_MAX_REPLICAS &&
	       c->replica >= 0 && c->replica < DT_MAX(c->replicas, 1) &&
	       c->stages >= 1 && c->stages <= DT_NN_PIPE_MAX_REPLICAS &&
	       c->stage >= 0 && c->stage < c->stages;
}

static dt_err
check_cfg(const dt_nn_model *m, const dt_nn_pipe_cfg *c,
          const dt_nn_pipe_ops *ops)
{
	if (m == NULL || c == NULL || ops == NULL || !ops->send || !ops->recv ||
	    !ops->wait)
		return dt__fail(DT_EINVAL, "pipeline step: NULL argument");
	if (!dt__nn_pipe_grid_ok(c))
		return dt__fail(DT_EINVAL,
		                "pipeline step: replica %d of %d, stage %d of "
		                "%d: out of range (at most %d of each)",
		                c->replica, c->replicas, c->stage, c->stages,
		                DT_NN_PIPE_MAX_REPLICAS);
	if (c->micro_batches < 1 || c->micro_batch < 1 ||
	    c->micro_batches > DT_NN_PIPE_MAX_MICRO)
		return dt__fail(DT_EINVAL,
		                "pipeline step: stage %d of %d, %d "
		                "micro-batches of %d: out of range (at most %d "
		                "micro-batches)",
		                c->stage, c->stages, c->micro_batches,
		                c->micro_batch, DT_NN_PIPE_MAX_MICRO);
	if (c->stage == 0 && c->x == NULL)
		return dt__fail(DT_EINVAL, "pipeline step: stage 0 needs x");
	if (c->stage == c->stages - 1 && c->y == NULL)
		return dt__fail(DT_EINVAL,
		                "pipeline step: the last stage needs y");
	return DT_OK;
}

dt_err
dt_nn_pipe_step(dt_nn_model *m, const dt_nn_pipe_cfg *c,
                const dt_nn_pipe_ops *ops, dt_nn_pipe_stats *st)
{
	pipe_run p = {
	    .m = m, .cfg = c, .ops = ops, .op_cpu = st ? st->op_cpu_ns : NULL};
	dt_err err;
	int M;

	if ((err = check_cfg(m, c, ops)))
		return err;
	M = c->micro_batches;
	p.in_n = (size_t)c->micro_batch * dt_nn_model_input_size(m);
	p.out_n = (size_t)c->micro_batch * dt_nn_model_output_size(m);
	p.stash = alloc_set(M, p.in_n);
	p.fwd_out = alloc_set(M, p.out_n);
	p.bwd_out = alloc_set(M, p.in_n);
	p.handles = calloc(2 * (size_t)M, sizeof(void *));
	p.dy = malloc(sizeof(float) * (p.out_n ? p.out_n : 1));
	if (!p.dy || !p.stash || !p.stash[M - 1] || !p.fwd_out ||
	    !p.fwd_out[M - 1] || !p.bwd_out || !p.bwd_out[M - 1] ||
	    !p.handles) {
		err = dt__fail(DT_ENOMEM,
		               "pipeline step: buffers for %d "
		               "micro-batches",
		               M);
		goto fail;
	}
	/* As many slots as micro-batches the schedule keeps in flight. */
	p.slots = c->schedule == DT_NN_PIPE_GPIPE
	              ? M
	              : DT_MIN(c->stages - c->stage, M);
	if (is_last(&p))
		p.slots = 1; /* forward and backward at once (backward()) */
	else if ((err = dt_nn_stage_slots(m, p.slots, c->micro_batch)))
		goto fail;
	if (p.op_cpu)
		memset(p.op_cpu, 0, sizeof(*p.op_cpu) * 2 * (size_t)M);
	err = schedule(&p);
fail:
	/* Every receive and send is waited for, even after an error: the
	 * buffers go. A receive left posted by an error ends with its
	 * message or the ops' deadline. */
	{
		dt_err ef = take(&p, &p.fh), eb = take(&p, &p.bh);

		if (!err)
			err = ef ? ef : eb;
	}
	for (int i = 0; p.handles && i < 2 * M; i++) {
		dt_err e;

		if (p.handles[i] == NULL)
			continue;
		e = ops->wait(ops->arg, p.handles[i]);
		if (e && !err)
			err = e;
	}
	if (st && err == DT_OK) {
		st->loss = p.loss;
		st->peak_stashed = p.peak;
		st->stash_bytes = (size_t)p.peak * p.in_n * sizeof(float);
		st->act_bytes =
		    is_last(&p) ? 0
		                : (size_t)p.peak *
		                      dt_nn_stage_slot_bytes(m, c->micro_batch);
		st->busy_ns = p.busy_ns;
		st->reordered = p.reordered;
	}
	free(p.handles);
	free(p.dy);
	free_set(p.stash, M);
	free_set(p.fwd_out, M);
	free_set(p.bwd_out, M);
	return err;
}
