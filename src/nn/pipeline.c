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
 * GPipe and S - s under 1F1B (1 at the last stage), and no more are
 * allocated: the inputs' stash has as many entries, and dt_nn_stage_slots
 * frees any slots a step under another schedule made. In flight at once
 * are consecutive micro-batches (forwards and backwards each run in
 * micro-batch order, and a forward runs only while fewer than the slots
 * are in flight), so k mod the slots never names a slot still in use.
 * What a stage sends goes out of a small ring of buffers of its own (one
 * more than the slots), each reused once the send before it from that
 * buffer has been acknowledged. The stash, the rings and the gradient
 * buffer stay with the model from one step to the next while their
 * shape does (pipe_bufs): a step then allocates nothing and writes only
 * into memory the steps before it have touched (no allocator work and no
 * page faults between a step's passes).
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

#include "common/util.h"
#include "dtrain/nn.h"
#include "dtrain/obs.h"
#include "nn/model_impl.h"
#include "nn/pipe.h"

/* A stage's buffers outside the layers, owned by the model (m->pipe)
 * and kept from step to step while slots, nsend, in_n, out_n and the
 * handles' count stay; pipe_bufs_get() makes them anew otherwise. */
typedef struct pipe_bufs {
	int slots, nsend, nhandles;
	size_t in_n, out_n;
	float **stash, **fwd_out, **bwd_out, *dy;
	void **handles;
} pipe_bufs;

typedef struct pipe_run {
	dt_nn_model *m;
	const dt_nn_pipe_cfg *cfg;
	const dt_nn_pipe_ops *ops;
	size_t in_n, out_n; /* floats per micro-batch in and out */
	float **stash;   /* [slots] the input of micro-batch k at k % slots */
	float **fwd_out; /* [nsend] activations sent on (kept until sent) */
	float **bwd_out; /* [nsend] input gradients sent back */
	float *dy;       /* the gradient of one micro-batch's output */
	void **handles;  /* [2 M] sends: forward k at k, backward at M + k */
	void *fh, *bh;   /* ready-first: the posted receives, or NULL */
	int slots;       /* activation slots: micro-batches in flight */
	int nsend;       /* send buffers of each direction */
	int reordered;   /* backward passes run before a permitted forward */
	int live, peak;  /* stashed micro-batches now and at most */
	double loss;
	uint64_t busy_ns; /* in the layers */
	uint64_t *op_cpu; /* the caller's [2 M] (dt_nn_pipe_stats), or NULL */
} pipe_run;

/* Layers timed: wall time into busy_ns and, when traced, CPU time into
 * op_cpu[i]. */
typedef struct op_clock {
	uint64_t wall, cpu;
} op_clock;

static op_clock
op_start(const pipe_run *p)
{
	return (op_clock){dt_obs_now(), p->op_cpu ? dt__nn_cpu_now() : 0};
}

static void
op_end(pipe_run *p, op_clock c, int i)
{
	p->busy_ns += dt_obs_now() - c.wall;
	if (p->op_cpu)
		p->op_cpu[i] += dt__nn_cpu_now() - c.cpu;
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

/* Micro-batch k's entry in the stash (its input). */
static float *
stash_of(const pipe_run *p, int k)
{
	return p->stash[k % p->slots];
}

/* The send buffer for handle i (forward k at k, backward k at M + k),
 * free again: the send that used it last, handle i - nsend of the same
 * direction, has completed. */
static dt_err
send_buffer(pipe_run *p, float **set, int i, int base, float **buf)
{
	void *h = i - base >= p->nsend ? p->handles[i - p->nsend] : NULL;

	*buf = set[(i - base) % p->nsend];
	if (h == NULL)
		return DT_OK;
	p->handles[i - p->nsend] = NULL;
	return p->ops->wait(p->ops->arg, h);
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
	float *buf;
	dt_err err;

	if (is_first(p))
		memcpy(stash_of(p, k), c->x + (size_t)k * p->in_n,
		       sizeof(float) * p->in_n);
	p->live++;
	p->peak = DT_MAX(p->peak, p->live);
	if (is_last(p))
		return DT_OK;
	op_clock t0 = op_start(p);
	err = dt_nn_stage_forward_slot(p->m, k % p->slots, stash_of(p, k),
	                               c->micro_batch, &out);
	op_end(p, t0, k);
	if (err || (err = send_buffer(p, p->fwd_out, k, 0, &buf)))
		return err;
	memcpy(buf, out, sizeof(float) * p->out_n);
	return p->ops->send(p->ops->arg, buf, p->out_n, peer(c, c->stage + 1),
	                    2 * k, &p->handles[k]);
}

/* Forward micro-batch k after receiving its input (stages after the
 * first) in the strict order. */
static dt_err
forward(pipe_run *p, int k)
{
	const dt_nn_pipe_cfg *c = p->cfg;
	dt_err err;

	if (!is_first(p) &&
	    (err = p->ops->recv(p->ops->arg, stash_of(p, k), p->in_n,
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
	float *buf;
	double loss;
	dt_err err;

	op_clock t0;

	if (is_last(p)) {
		t0 = op_start(p);
		err = dt_nn_forward_backward(
		    p->m, stash_of(p, k),
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
	if ((err = send_buffer(p, p->bwd_out, c->micro_batches + k,
	                       c->micro_batches, &buf)))
		return err;
	memcpy(buf, dx, sizeof(float) * p->in_n);
	return p->ops->send(p->ops->arg, buf, p->in_n, peer(c, c->stage - 1),
	                    2 * k + 1, &p->handles[c->micro_batches + k]);
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
	    (err = p->ops->recv_async(p->ops->arg, stash_of(p, f), p->in_n,
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

/* n buffers of len floats; NULL unless all were allocated. */
static float **
alloc_set(int n, size_t len)
{
	float **s = calloc((size_t)n, sizeof(*s));

	for (int k = 0; s && k < n; k++)
		if ((s[k] = malloc(sizeof(float) * (len ? len : 1))) == NULL) {
			while (k-- > 0)
				free(s[k]);
			free(s);
			return NULL;
		}
	return s;
}

static void
free_set(float **s, int M)
{
	for (int k = 0; s && k < M; k++)
		free(s[k]);
	free(s);
}

static void
pipe_bufs_free(pipe_bufs *b)
{
	if (b == NULL)
		return;
	free(b->handles);
	free(b->dy);
	free_set(b->stash, b->slots);
	free_set(b->fwd_out, b->nsend);
	free_set(b->bwd_out, b->nsend);
	free(b);
}

void
dt__nn_pipe_free(dt_nn_model *m)
{
	pipe_bufs_free(m->pipe);
	m->pipe = NULL;
}

/*
 * The step's buffers: the model's from the step before when they have
 * this shape, else new ones (the old freed first, so that a stage whose
 * schedule keeps fewer micro-batches gives the memory back). NULL when
 * memory runs out, the model then holding none.
 */
static pipe_bufs *
pipe_bufs_get(dt_nn_model *m, int slots, int nsend, int nhandles, size_t in_n,
              size_t out_n)
{
	pipe_bufs *b = m->pipe;

	if (b && b->slots == slots && b->nsend == nsend &&
	    b->nhandles == nhandles && b->in_n == in_n && b->out_n == out_n)
		return b;
	dt__nn_pipe_free(m);
	if ((b = calloc(1, sizeof(*b))) == NULL)
		return NULL;
	*b = (pipe_bufs){.slots = slots,
	                 .nsend = nsend,
	                 .nhandles = nhandles,
	                 .in_n = in_n,
	                 .out_n = out_n};
	b->stash = alloc_set(slots, in_n);
	b->fwd_out = alloc_set(nsend, out_n);
	b->bwd_out = alloc_set(nsend, in_n);
	b->handles = calloc((size_t)nhandles, sizeof(void *));
	b->dy = malloc(sizeof(float) * (out_n ? out_n : 1));
	if (!b->dy || !b->stash || !b->fwd_out || !b->bwd_out || !b->handles) {
		pipe_bufs_free(b);
		return NULL;
	}
	m->pipe = b;
	return b;
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
	pipe_bufs *pb;
	dt_err err;
	int M;

	if ((err = check_cfg(m, c, ops)))
		return err;
	M = c->micro_batches;
	/* As many slots as micro-batches the schedule keeps in flight: M
	 * under GPipe, S - s under 1F1B, 1 at the last stage (its forward
	 * and backward run at once, backward_run()). One send buffer more
	 * than that in each direction, so that a stage rarely waits for the
	 * acknowledgement of a send before it can send again. */
	p.slots = is_last(&p) ? 1
	          : c->schedule == DT_NN_PIPE_GPIPE
	              ? M
	              : DT_MIN(c->stages - c->stage, M);
	p.nsend = DT_MIN(p.slots + 1, M);
	p.in_n = (size_t)c->micro_batch * dt_nn_model_input_size(m);
	p.out_n = (size_t)c->micro_batch * dt_nn_model_output_size(m);
	pb = pipe_bufs_get(m, p.slots, p.nsend, 2 * M, p.in_n, p.out_n);
	if (pb == NULL) {
		err = dt__fail(DT_ENOMEM,
		               "pipeline step: buffers for %d "
		               "micro-batches in flight",
		               p.slots);
		goto fail;
	}
	p.stash = pb->stash;
	p.fwd_out = pb->fwd_out;
	p.bwd_out = pb->bwd_out;
	p.dy = pb->dy;
	p.handles = pb->handles;
	memset(p.handles, 0, sizeof(void *) * 2 * (size_t)M);
	if ((err = dt_nn_stage_slots(m, p.slots, c->micro_batch)))
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
		size_t act = dt_nn_stage_slot_bytes(m, c->micro_batch);

		st->loss = p.loss;
		st->peak_stashed = p.peak;
		st->stash_bytes = (size_t)p.peak * p.in_n * sizeof(float);
		st->act_bytes = is_last(&p) ? 0 : (size_t)p.peak * act;
		st->slots = dt_nn_stage_num_slots(m);
		st->alloc_bytes =
		    (size_t)st->slots * (p.in_n * sizeof(float) + act);
		st->busy_ns = p.busy_ns;
		st->reordered = p.reordered;
	}
	return err;
}
