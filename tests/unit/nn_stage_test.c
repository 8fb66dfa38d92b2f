/*
 * nn_stage_test.c - a model cut into pipeline stages (dtrain/nn.h).
 *
 * The stages of lenet and of an MLP, chained in one process, must give bit
 * for bit the parameters and the accumulated gradients of the whole model
 * over the same 4 micro-batches: once running each micro-batch forward and
 * backward through the stages (1F1B's order of work on one micro-batch),
 * once running every forward first and, before each backward, the forward
 * again from the stashed stage input (GPipe with recomputation), and once
 * running every forward first into an activation slot of its own and each
 * backward from its slot (GPipe as dt_nn_pipe_step runs it). Also: the
 * cut rule's stages, the cut by measured time (given costs, and each
 * layer's measured time), the errors of bad cuts, dropout, a loss asked of a
 * stage that has none, and of slots misused. And the replicas' sum of a
 * stage's gradients (dt_nn_pipe_sum_replicas), R threads passing messages
 * through an in-process mailbox: every replica must end with the sum in
 * replica order, bit for bit, for 2 to 5 replicas and for fewer
 * gradients than replicas. And dt_nn_pipe_step's ready-first order, three
 * stages as threads over the mailbox with one forward input held back:
 * the backward pass whose gradient is there runs first, and the gradients
 * are the whole model's bit for bit, as in the fixed order. And the
 * activation slots a step allocates: as many as its schedule keeps
 * micro-batches in flight (2 at stage 0 of 2 under 1F1B, 16 under GPipe
 * with 16 micro-batches), fewer again when the schedule changes back.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "dtrain/nn.h"

#define M    4 /* micro-batches */
#define B    3 /* samples per micro-batch */
#define SEED 11

/* How check_pipeline orders the passes. */
enum { ONE_BY_ONE, RECOMPUTE, SLOTS };

static float
frand(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((*s >> 40) & 0xffff) / 65536.0f;
}

/* The whole model's gradients over M micro-batches (zeroed first). */
static dt_nn_model *
reference(const char *spec, float *const *x, float *const *y)
{
	dt_nn_model *m;

	assert_int_equal(dt_nn_model_create(spec, SEED, &m), DT_OK);
	dt_nn_model_zero_grad(m);
	for (int k = 0; k < M; k++)
		assert_int_equal(
		    dt_nn_forward_backward(m, x[k], y[k], B, NULL, NULL),
		    DT_OK);
	return m;
}

/* Each stage's tensors must equal the whole model's of the same name, in
 * parameters and gradients, bit for bit. */
static void
compare(dt_nn_model *whole, dt_nn_model **st, int S)
{
	int n = 0;

	for (int s = 0; s < S; s++) {
		for (int i = 0; i < dt_nn_model_num_tensors(st[s]); i++, n++) {
			const dt_nn_tensor *a = dt_nn_model_tensor(st[s], i);
			const dt_nn_tensor *b = dt_nn_model_tensor(whole, n);

			assert_string_equal(a->name, b->name);
			assert_int_equal(a->size, b->size);
			assert_memory_equal(
			    dt_nn_model_params(st[s]) + a->offset,
			    dt_nn_model_params(whole) + b->offset,
			    sizeof(float) * a->size);
			assert_memory_equal(
			    dt_nn_model_grads(st[s]) + a->offset,
			    dt_nn_model_grads(whole) + b->offset,
			    sizeof(float) * a->size);
		}
	}
	assert_int_equal(n, dt_nn_model_num_tensors(whole));
}

/* Forward micro-batch k from stage s on (stashing each stage's input),
 * then (with back) the backward pass of stage S-1 down to stage 0. */
static void
run_forward(dt_nn_model **st, int S, int slot, const float *x, float **stash,
            size_t *in_size)
{
	const float *cur = x;

	for (int s = 0; s < S - 1; s++) {
		/* The backward pass from a slot reads the input again: it
		 * must be the stash, not the stage before's output buffer. */
		memcpy(stash[s], cur, sizeof(float) * B * in_size[s]);
		assert_int_equal(
		    dt_nn_stage_forward_slot(st[s], slot, stash[s], B, &cur),
		    DT_OK);
	}
	memcpy(stash[S - 1], cur, sizeof(float) * B * in_size[S - 1]);
}

static void
run_backward(dt_nn_model **st, int S, const float *last_in, const float *y,
             float **stash, int mode, int slot)
{
	const float *dx;

	assert_int_equal(
	    dt_nn_forward_backward(st[S - 1], last_in, y, B, NULL, NULL),
	    DT_OK);
	dx = dt_nn_model_input_grad(st[S - 1]);
	for (int s = S - 2; s >= 0; s--) {
		float *dy;
		size_t n = sizeof(float) * B * dt_nn_model_output_size(st[s]);

		assert_non_null(dx);
		dy = malloc(n);
		memcpy(dy, dx, n);
		if (mode == RECOMPUTE)
			assert_int_equal(
			    dt_nn_stage_forward(st[s], stash[s], B, NULL),
			    DT_OK);
		assert_int_equal(
		    dt_nn_stage_backward_slot(st[s], slot, dy, B, &dx), DT_OK);
		free(dy);
	}
	assert_null(dx); /* nothing before stage 0 */
}

static void
check_pipeline(const char *spec, int S, int mode)
{
	dt_nn_model *whole, *st[4];
	int first[5];
	float *x[M], *y[M], *stash[M][4];
	size_t in_size[4];
	uint64_t rng = 99;

	assert_int_equal(dt_nn_model_create(spec, SEED, &whole), DT_OK);
	for (int k = 0; k < M; k++) {
		size_t n = B * dt_nn_model_input_size(whole);

		x[k] = malloc(sizeof(float) * n);
		y[k] = malloc(sizeof(float) * B);
		for (size_t i = 0; i < n; i++)
			x[k][i] = frand(&rng) - 0.5f;
		for (int b = 0; b < B; b++)
			y[k][b] = (float)((k * B + b) % 10);
	}
	assert_int_equal(dt_nn_model_cut(whole, S, first), DT_OK);
	assert_int_equal(first[0], 0);
	assert_int_equal(first[S], dt_nn_model_num_layers(whole));
	for (int s = 0; s < S; s++) {
		assert_true(first[s] < first[s + 1]);
		assert_int_equal(dt_nn_model_create_stage(spec, SEED, first[s],
		                                          first[s + 1], &st[s]),
		                 DT_OK);
		dt_nn_model_zero_grad(st[s]);
		if (mode == SLOTS && s < S - 1)
			assert_int_equal(dt_nn_stage_slots(st[s], M, B), DT_OK);
		in_size[s] = dt_nn_model_input_size(st[s]);
		for (int k = 0; k < M; k++)
			stash[k][s] = malloc(sizeof(float) * B * in_size[s]);
	}
	dt_nn_model_destroy(whole);
	for (int k = 0; k < M && mode != ONE_BY_ONE; k++)
		run_forward(st, S, mode == SLOTS ? k : 0, x[k], stash[k],
		            in_size);
	for (int k = 0; k < M; k++) {
		if (mode == ONE_BY_ONE)
			run_forward(st, S, 0, x[k], stash[k], in_size);
		run_backward(st, S, stash[k][S - 1], y[k], stash[k], mode,
		             mode == SLOTS ? k : 0);
	}
	whole = reference(spec, x, y);
	compare(whole, st, S);
	dt_nn_model_destroy(whole);
	for (int s = 0; s < S; s++) {
		dt_nn_model_destroy(st[s]);
		for (int k = 0; k < M; k++)
			free(stash[k][s]);
	}
	for (int k = 0; k < M; k++) {
		free(x[k]);
		free(y[k]);
	}
}

static const char *mlp = "input:20,dense:16,tanh,dense:12,relu,dense:8,"
                         "tanh,dense:10,softmax_ce";

static void
test_lenet_stages(void **state)
{
	(void)state;
	for (int mode = ONE_BY_ONE; mode <= SLOTS; mode++) {
		check_pipeline("lenet", 2, mode);
		check_pipeline("lenet", 3, mode);
	}
}

static void
test_mlp_stages(void **state)
{
	(void)state;
	for (int S = 1; S <= 4; S++)
		for (int mode = ONE_BY_ONE; mode <= SLOTS; mode++)
			check_pipeline(mlp, S, mode);
}

static void
test_cut_rule(void **state)
{
	dt_nn_model *m, *st;
	int first[10];

	(void)state;
	assert_int_equal(dt_nn_model_create("lenet", SEED, &m), DT_OK);
	/* conv, pool, relu, conv, pool, relu, flatten, dense, relu, dense:
	 * the convolutions hold most of the work (0.58 and 3.2 of 4.59
	 * Mflop per sample forward), so two stages split before the first
	 * dense layer: the cut whose larger stage has the least work. */
	assert_int_equal(dt_nn_model_num_layers(m), 10);
	assert_int_equal(dt_nn_model_cut(m, 2, first), DT_OK);
	assert_int_equal(first[1], 7);
	/* Three: the second convolution (3.2 Mflop forward, three times
	 * that with both gradients) alone, the most a stage can be spared;
	 * starting the stages where the forward work crosses 1/3 and 2/3
	 * (layers 7 and 9) would leave 10.8 of 13.2 Mflop to stage 0. */
	assert_int_equal(dt_nn_model_cut(m, 3, first), DT_OK);
	assert_int_equal(first[0], 0);
	assert_int_equal(first[1], 3);
	assert_int_equal(first[2], 7);
	assert_int_equal(first[3], 10);
	/* Four stages: one per conv and dense layer. */
	assert_int_equal(dt_nn_model_cut(m, 4, first), DT_OK);
	assert_int_equal(first[1], 3);
	assert_int_equal(first[2], 7);
	assert_int_equal(first[3], 9);
	assert_int_equal(dt_nn_model_cut(m, 5, first), DT_EINVAL);
	assert_non_null(strstr(dt_errmsg(), "4 conv and dense layers"));
	dt_nn_model_destroy(m);

	/* The bench's MLP: a first layer 1.5 times as wide computes no
	 * input gradient, so it weighs what the others do and every stage
	 * gets two dense layers, the last the output layer besides. */
	{
		char spec[512];
		size_t n = (size_t)snprintf(spec, sizeof(spec), "input:384");

		for (int i = 0; i < 8; i++)
			n += (size_t)snprintf(spec + n, sizeof(spec) - n,
			                      ",dense:256,relu");
		snprintf(spec + n, sizeof(spec) - n, ",dense:10,softmax_ce");
		assert_int_equal(dt_nn_model_create(spec, SEED, &m), DT_OK);
		assert_int_equal(dt_nn_model_cut(m, 4, first), DT_OK);
		for (int s = 0; s < 4; s++)
			assert_int_equal(first[s], 4 * s);
		assert_int_equal(dt_nn_model_cut(m, 2, first), DT_OK);
		assert_int_equal(first[1], 8);
		/* As many stages as dense layers: one each. */
		assert_int_equal(dt_nn_model_cut(m, 9, first), DT_OK);
		for (int s = 0; s < 9; s++)
			assert_int_equal(first[s], 2 * s);
		dt_nn_model_destroy(m);
	}

	assert_int_equal(dt_nn_model_create_stage("lenet", SEED, 3, 3, &st),
	                 DT_EINVAL);
	assert_int_equal(dt_nn_model_create_stage("lenet", SEED, 0, 11, &st),
	                 DT_EINVAL);
	assert_int_equal(
	    dt_nn_model_create_stage("input:4,dense:4,dropout:0.5,dense:2,"
	                             "softmax_ce",
	                             SEED, 0, 1, &st),
	    DT_ENOTSUP);
	assert_non_null(strstr(dt_errmsg(), "dropout"));
	/* A stage before the last has no loss. */
	assert_int_equal(dt_nn_model_create_stage("lenet", SEED, 0, 3, &st),
	                 DT_OK);
	{
		float x[784] = {0}, y = 1;

		assert_int_equal(
		    dt_nn_forward_backward(st, x, &y, 1, NULL, NULL),
		    DT_ESTATE);
		assert_int_equal(dt_nn_stage_backward(st, x, 1, NULL),
		                 DT_ESTATE);
	}
	dt_nn_model_destroy(st);
}

/*
 * The cut by measured time: dt_nn_model_cut_by follows the costs it is
 * given by the same rule (lenet's units are layers 0-2, 3-6, 7-8 and 9),
 * refuses costs that are no finite number >= 0, and dt_nn_model_profile
 * measures every conv and dense layer, leaves the gradients zeroed and
 * the parameters as they were, and refuses a model holding slots.
 */
static void
test_cut_measured(void **state)
{
	dt_nn_model *m, *fresh, *st;
	int first[5], again[5];
	double cost[10], fwd[10], bwd[10];
	float dy[2 * 12] = {0}; /* the output gradient of 2 samples */

	(void)state;
	assert_int_equal(dt_nn_model_create("lenet", SEED, &m), DT_OK);
	for (int i = 0; i < 10; i++)
		cost[i] = 1.0;
	/* Units of 3, 4, 2 and 1: three stages at 0, 3 and 7 (the largest
	 * unit alone is the least a stage can be spared). */
	assert_int_equal(dt_nn_model_cut_by(m, 3, cost, first), DT_OK);
	assert_int_equal(first[1], 3);
	assert_int_equal(first[2], 7);
	assert_int_equal(first[3], 10);
	/* A last layer that costs more than all the others: two stages cut
	 * before it, where the counted rule cuts at 7. */
	cost[9] = 100.0;
	assert_int_equal(dt_nn_model_cut_by(m, 2, cost, first), DT_OK);
	assert_int_equal(first[1], 9);
	assert_int_equal(dt_nn_model_cut(m, 2, first), DT_OK);
	assert_int_equal(first[1], 7);
	cost[4] = -1.0;
	assert_int_equal(dt_nn_model_cut_by(m, 2, cost, first), DT_EINVAL);
	assert_non_null(strstr(dt_errmsg(), "layer 4's cost"));
	cost[4] = NAN;
	assert_int_equal(dt_nn_model_cut_by(m, 2, cost, first), DT_EINVAL);
	assert_int_equal(dt_nn_model_cut_by(m, 2, NULL, first), DT_EINVAL);

	/* Measured: every conv and dense layer takes time both ways (the
	 * first computes its weight gradient), and the same figures give
	 * the same cut. */
	assert_int_equal(dt_nn_model_profile(m, 0, 3, fwd, bwd), DT_EINVAL);
	assert_int_equal(dt_nn_model_profile(m, 4, 0, fwd, bwd), DT_EINVAL);
	assert_int_equal(dt_nn_model_profile(m, 4, 3, fwd, bwd), DT_OK);
	for (int i = 0; i < 10; i++) {
		assert_true(fwd[i] >= 0.0 && bwd[i] >= 0.0);
		if (i == 0 || i == 3 || i == 7 || i == 9)
			assert_true(fwd[i] > 0.0 && bwd[i] > 0.0);
		cost[i] = fwd[i] + bwd[i];
	}
	assert_int_equal(dt_nn_model_cut_by(m, 4, cost, first), DT_OK);
	assert_int_equal(dt_nn_model_cut_by(m, 4, cost, again), DT_OK);
	assert_memory_equal(first, again, sizeof(first));
	assert_int_equal(dt_nn_model_create("lenet", SEED, &fresh), DT_OK);
	assert_memory_equal(dt_nn_model_params(m), dt_nn_model_params(fresh),
	                    sizeof(float) * dt_nn_model_num_params(m));
	for (size_t i = 0; i < dt_nn_model_num_params(m); i++)
		assert_true(dt_nn_model_grads(m)[i] == 0.0f);
	dt_nn_model_destroy(fresh);
	dt_nn_model_destroy(m);
	/* A stage holding two slots of activations is not profiled. */
	assert_int_equal(dt_nn_model_create_stage(mlp, SEED, 0, 3, &st), DT_OK);
	assert_int_equal(dt_nn_stage_slots(st, 2, 2), DT_OK);
	assert_int_equal(dt_nn_model_profile(st, 2, 1, fwd, bwd), DT_ESTATE);
	assert_int_equal(dt_nn_stage_slots(st, 1, 2), DT_OK);
	assert_int_equal(dt_nn_stage_num_slots(st), 1);
	assert_int_equal(dt_nn_model_profile(st, 2, 1, fwd, bwd), DT_OK);
	/* What the profile left is no forward pass of the caller's. */
	assert_int_equal(dt_nn_stage_backward(st, dy, 2, NULL), DT_ESTATE);
	dt_nn_model_destroy(st);
}

/* Slots: each keeps its own forward pass for its backward pass, and
 * misuse is refused with a message. */
static void
test_slots(void **state)
{
	dt_nn_model *st;
	float x[2][2 * 20], dy[2 * 12];
	const float *dx;
	uint64_t rng = 5;

	(void)state;
	for (int i = 0; i < 2 * 20; i++) {
		x[0][i] = frand(&rng) - 0.5f;
		x[1][i] = frand(&rng) - 0.5f;
	}
	for (int i = 0; i < 2 * 12; i++)
		dy[i] = frand(&rng) - 0.5f;
	/* dense:16,tanh,dense:12 of the MLP. */
	assert_int_equal(dt_nn_model_create_stage(mlp, SEED, 0, 3, &st), DT_OK);
	assert_int_equal(dt_nn_stage_slots(st, 0, 2), DT_EINVAL);
	assert_int_equal(dt_nn_stage_slots(st, 2, 0), DT_EINVAL);
	assert_int_equal(dt_nn_stage_forward_slot(st, 2, x[0], 2, NULL),
	                 DT_EINVAL);
	assert_non_null(strstr(dt_errmsg(), "slot 2 of 1"));
	assert_int_equal(dt_nn_stage_slots(st, 2, 2), DT_OK);
	assert_true(dt_nn_stage_slot_bytes(st, 2) >= 2 * (16 + 12) * 4);
	/* A batch larger than the slots' would drop what they hold. */
	assert_int_equal(dt_nn_stage_forward_slot(st, 1, x[0], 3, NULL),
	                 DT_EINVAL);
	assert_non_null(strstr(dt_errmsg(), "larger than the slots' 2"));
	/* Slot 1 has run no forward pass yet. */
	assert_int_equal(dt_nn_stage_backward_slot(st, 1, dy, 2, &dx),
	                 DT_ESTATE);
	assert_non_null(strstr(dt_errmsg(), "slot 1"));
	/* Forward x0 in slot 0 and x1 in slot 1, backward slot 0: the
	 * gradients of x0's pass, as with x0 alone. */
	assert_int_equal(dt_nn_stage_forward_slot(st, 0, x[0], 2, NULL), DT_OK);
	assert_int_equal(dt_nn_stage_forward_slot(st, 1, x[1], 2, NULL), DT_OK);
	dt_nn_model_zero_grad(st);
	assert_int_equal(dt_nn_stage_backward_slot(st, 0, dy, 2, &dx), DT_OK);
	{
		size_t n = dt_nn_model_num_params(st);
		float *g = malloc(sizeof(float) * n);

		memcpy(g, dt_nn_model_grads(st), sizeof(float) * n);
		dt_nn_model_zero_grad(st);
		assert_int_equal(dt_nn_stage_forward(st, x[0], 2, NULL), DT_OK);
		assert_int_equal(dt_nn_stage_backward(st, dy, 2, &dx), DT_OK);
		assert_memory_equal(g, dt_nn_model_grads(st),
		                    sizeof(float) * n);
		free(g);
	}
	/* Slot 1 still holds x1's pass after slot 0 ran twice. */
	assert_int_equal(dt_nn_stage_backward_slot(st, 1, dy, 2, &dx), DT_OK);
	dt_nn_model_destroy(st);
}

/* ---- the replicas' sum over an in-process mailbox ---- */

typedef struct msg {
	struct msg *next;
	int from, to, tag;
	size_t n;
	float data[];
} msg;

typedef struct mailbox {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	msg *head;
	/* hold: stage 1 sees stage 0's activations of micro-batch 1 (tag 2)
	 * only once it has taken the gradient of micro-batch 0 (tag 1): the
	 * late forward input that ready-first works around. */
	int hold, released;
} mailbox;

typedef struct replica {
	mailbox *mb;
	int self; /* r * stages + stage, as the ops name it */
	dt_nn_model *m;
	dt_nn_pipe_cfg cfg;
	dt_nn_pipe_stats stats;
	dt_err err;
} replica;

/* A posted receive (mb_recv_async): taken by mb_wait. */
typedef struct posted {
	float *buf;
	size_t n;
	int from, tag;
} posted;

/* The first message for r from `from` with `tag` it may see (mu held). */
static msg **
mb_find(replica *r, int from, int tag)
{
	msg **p = &r->mb->head;

	while (*p &&
	       ((*p)->to != r->self || (*p)->from != from || (*p)->tag != tag ||
	        (r->mb->hold && !r->mb->released && (*p)->to == 1 &&
	         (*p)->from == 0 && (*p)->tag == 2)))
		p = &(*p)->next;
	return p;
}

static int sent_handle; /* every send is done when it returns */

static dt_err
mb_send(void *arg, const float *buf, size_t n, int to, int tag, void **h)
{
	replica *r = arg;
	msg *m = malloc(sizeof(*m) + sizeof(float) * n);

	if (m == NULL)
		return DT_ENOMEM;
	*m = (msg){.from = r->self, .to = to, .tag = tag, .n = n};
	memcpy(m->data, buf, sizeof(float) * n);
	pthread_mutex_lock(&r->mb->mu);
	msg **tail = &r->mb->head;
	while (*tail)
		tail = &(*tail)->next;
	*tail = m;
	pthread_cond_broadcast(&r->mb->cv);
	pthread_mutex_unlock(&r->mb->mu);
	*h = &sent_handle;
	return DT_OK;
}

/* The first message from `from` with `tag`, waiting 10 s at most. */
static dt_err
mb_recv(void *arg, float *buf, size_t n, int from, int tag)
{
	replica *r = arg;
	struct timespec until;
	dt_err err = DT_ETIMEDOUT;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	pthread_mutex_lock(&r->mb->mu);
	while (rc != ETIMEDOUT) {
		msg **p = mb_find(r, from, tag);

		if (*p) {
			msg *m = *p;

			*p = m->next;
			if (m->to == 1 && m->tag == 1) {
				r->mb->released = 1;
				pthread_cond_broadcast(&r->mb->cv);
			}
			err = m->n == n ? DT_OK : DT_ESIZE;
			if (!err)
				memcpy(buf, m->data, sizeof(float) * n);
			free(m);
			break;
		}
		rc = pthread_cond_timedwait(&r->mb->cv, &r->mb->mu, &until);
	}
	pthread_mutex_unlock(&r->mb->mu);
	return err;
}

static dt_err
mb_recv_async(void *arg, float *buf, size_t n, int from, int tag, void **h)
{
	posted *q = malloc(sizeof(*q));

	(void)arg;
	if (q == NULL)
		return DT_ENOMEM;
	*q = (posted){.buf = buf, .n = n, .from = from, .tag = tag};
	*h = q;
	return DT_OK;
}

/* A send is done when it returns; a posted receive takes its message. */
static dt_err
mb_wait(void *arg, void *h)
{
	posted *q = h;
	dt_err err;

	if (h == &sent_handle)
		return DT_OK;
	err = mb_recv(arg, q->buf, q->n, q->from, q->tag);
	free(q);
	return err;
}

/* The first of n posted receives whose message r may see, 10 s at most. */
static dt_err
mb_wait_any(void *arg, void **h, int n, int *index)
{
	replica *r = arg;
	struct timespec until;
	dt_err err = DT_ETIMEDOUT;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	pthread_mutex_lock(&r->mb->mu);
	while (rc != ETIMEDOUT && err != DT_OK) {
		for (int i = 0; i < n && err != DT_OK; i++) {
			posted *q = h[i];

			if (q && h[i] != &sent_handle &&
			    *mb_find(r, q->from, q->tag)) {
				*index = i;
				err = DT_OK;
			}
		}
		if (err != DT_OK)
			rc = pthread_cond_timedwait(&r->mb->cv, &r->mb->mu,
			                            &until);
	}
	pthread_mutex_unlock(&r->mb->mu);
	return err;
}

static void *
replica_main(void *arg)
{
	replica *r = arg;
	dt_nn_pipe_ops ops = {
	    .arg = r, .send = mb_send, .recv = mb_recv, .wait = mb_wait};

	r->err = dt_nn_pipe_sum_replicas(r->m, &r->cfg, &ops);
	return NULL;
}

/* R replicas of stage 1 of 2 of spec's model (the stage being its whole
 * layer list here: only the gradient buffer matters), gradients of mixed
 * magnitudes so that the order of the additions shows in the bits. */
static void
check_replica_sum(const char *spec, int R)
{
	mailbox mb = {.head = NULL};
	replica rep[5];
	pthread_t th[5];
	size_t n = 0;
	float *want = NULL;
	uint64_t rng = 7 + (uint64_t)R;

	pthread_mutex_init(&mb.mu, NULL);
	pthread_cond_init(&mb.cv, NULL);
	for (int r = 0; r < R; r++) {
		float *g;

		rep[r] = (replica){.mb = &mb, .self = r * 2 + 1};
		rep[r].cfg = (dt_nn_pipe_cfg){
		    .stage = 1, .stages = 2, .replica = r, .replicas = R};
		assert_int_equal(dt_nn_model_create(spec, SEED, &rep[r].m),
		                 DT_OK);
		n = dt_nn_model_num_params(rep[r].m);
		g = dt_nn_model_grads(rep[r].m);
		if (want == NULL)
			want = calloc(n, sizeof(float));
		for (size_t i = 0; i < n; i++) {
			g[i] = (frand(&rng) - 0.5f) *
			       ((i + (size_t)r) % 3 == 0 ? 1e8f : 1.0f);
			want[i] = r == 0 ? g[i] : want[i] + g[i];
		}
	}
	for (int r = 0; r < R; r++)
		assert_int_equal(
		    pthread_create(&th[r], NULL, replica_main, &rep[r]), 0);
	for (int r = 0; r < R; r++)
		pthread_join(th[r], NULL);
	for (int r = 0; r < R; r++) {
		assert_int_equal(rep[r].err, DT_OK);
		assert_memory_equal(dt_nn_model_grads(rep[r].m), want,
		                    sizeof(float) * n);
		dt_nn_model_destroy(rep[r].m);
	}
	assert_null(mb.head); /* every message was taken */
	free(want);
	pthread_cond_destroy(&mb.cv);
	pthread_mutex_destroy(&mb.mu);
}

static void *
stage_main(void *arg)
{
	replica *r = arg;
	dt_nn_pipe_ops ops = {.arg = r,
	                      .send = mb_send,
	                      .recv = mb_recv,
	                      .wait = mb_wait,
	                      .recv_async = mb_recv_async,
	                      .wait_any = mb_wait_any};

	r->err = dt_nn_pipe_step(r->m, &r->cfg, &ops, &r->stats);
	return NULL;
}

/*
 * Three stages of the MLP as threads, one step of M micro-batches, the
 * activations of micro-batch 1 held back from stage 1 until it has the
 * gradient of micro-batch 0 (ready-first only: the fixed order would wait
 * for them forever). Ready-first must run that backward pass first and
 * end, like the fixed order, with the whole model's gradients bit for bit.
 */
static void
check_ready_first(int schedule, int strict)
{
	enum { S = 3 };
	mailbox mb = {.head = NULL, .hold = !strict};
	dt_nn_model *whole;
	replica st[S];
	pthread_t th[S];
	dt_nn_model *models[S];
	int first[S + 1];
	size_t in = 0;
	float *xs, *ys, *x[M], *y[M];
	uint64_t rng = 5;

	pthread_mutex_init(&mb.mu, NULL);
	pthread_cond_init(&mb.cv, NULL);
	assert_int_equal(dt_nn_model_create(mlp, SEED, &whole), DT_OK);
	in = dt_nn_model_input_size(whole);
	xs = malloc(sizeof(float) * M * B * in);
	ys = malloc(sizeof(float) * M * B);
	for (size_t i = 0; i < (size_t)M * B * in; i++)
		xs[i] = frand(&rng) - 0.5f;
	for (int i = 0; i < M * B; i++)
		ys[i] = (float)(i % 10);
	for (int k = 0; k < M; k++) {
		x[k] = xs + (size_t)k * B * in;
		y[k] = ys + (size_t)k * B;
	}
	assert_int_equal(dt_nn_model_cut(whole, S, first), DT_OK);
	dt_nn_model_destroy(whole);
	for (int s = 0; s < S; s++) {
		st[s] = (replica){.mb = &mb, .self = s};
		assert_int_equal(dt_nn_model_create_stage(mlp, SEED, first[s],
		                                          first[s + 1],
		                                          &models[s]),
		                 DT_OK);
		st[s].m = models[s];
		dt_nn_model_zero_grad(st[s].m);
		st[s].cfg = (dt_nn_pipe_cfg){.stage = s,
		                             .stages = S,
		                             .schedule = schedule,
		                             .micro_batches = M,
		                             .micro_batch = B,
		                             .x = xs,
		                             .y = ys,
		                             .strict = strict};
	}
	for (int s = 0; s < S; s++)
		assert_int_equal(
		    pthread_create(&th[s], NULL, stage_main, &st[s]), 0);
	for (int s = 0; s < S; s++)
		pthread_join(th[s], NULL);
	for (int s = 0; s < S; s++)
		assert_int_equal(st[s].err, DT_OK);
	/* Stage 1 ran backward 0 before forward 1; nothing else could. */
	assert_int_equal(st[0].stats.reordered, 0);
	assert_int_equal(st[2].stats.reordered, 0);
	if (strict)
		assert_int_equal(st[1].stats.reordered, 0);
	else
		assert_true(st[1].stats.reordered >= 1);
	whole = reference(mlp, x, y);
	compare(whole, models, S);
	dt_nn_model_destroy(whole);
	for (int s = 0; s < S; s++)
		dt_nn_model_destroy(models[s]);
	assert_null(mb.head); /* every message was taken */
	free(xs);
	free(ys);
	pthread_cond_destroy(&mb.cv);
	pthread_mutex_destroy(&mb.mu);
}

/*
 * The slots a step allocates follow its schedule, not M: two stages of
 * the MLP as threads, 16 micro-batches, one ready-first step under 1F1B
 * (stage 0 allocates 2 slots of inputs and activations, the last stage
 * 1), then GPipe on the same models (16 at stage 0), then 1F1B again
 * (back to 2: the extra slots are freed). Each step's gradients are the
 * whole model's over the 16 micro-batches, bit for bit.
 */
static void
test_slots_by_schedule(void **state)
{
	enum { S = 2, MB = 16 };
	static const int sched[] = {DT_NN_PIPE_1F1B, DT_NN_PIPE_GPIPE,
	                            DT_NN_PIPE_1F1B};
	mailbox mb = {.head = NULL};
	dt_nn_model *whole, *models[S];
	replica st[S];
	pthread_t th[S];
	int first[S + 1];
	size_t in;
	float *xs, *ys;
	uint64_t rng = 17;

	(void)state;
	pthread_mutex_init(&mb.mu, NULL);
	pthread_cond_init(&mb.cv, NULL);
	assert_int_equal(dt_nn_model_create(mlp, SEED, &whole), DT_OK);
	in = dt_nn_model_input_size(whole);
	xs = malloc(sizeof(float) * MB * B * in);
	ys = malloc(sizeof(float) * MB * B);
	for (size_t i = 0; i < (size_t)MB * B * in; i++)
		xs[i] = frand(&rng) - 0.5f;
	for (int i = 0; i < MB * B; i++)
		ys[i] = (float)(i % 10);
	assert_int_equal(dt_nn_model_cut(whole, S, first), DT_OK);
	dt_nn_model_zero_grad(whole);
	for (int k = 0; k < MB; k++)
		assert_int_equal(
		    dt_nn_forward_backward(whole, xs + (size_t)k * B * in,
		                           ys + (size_t)k * B, B, NULL, NULL),
		    DT_OK);
	for (int s = 0; s < S; s++)
		assert_int_equal(dt_nn_model_create_stage(mlp, SEED, first[s],
		                                          first[s + 1],
		                                          &models[s]),
		                 DT_OK);
	for (int i = 0; i < 3; i++) {
		for (int s = 0; s < S; s++) {
			st[s] = (replica){.mb = &mb, .self = s, .m = models[s]};
			dt_nn_model_zero_grad(models[s]);
			st[s].cfg = (dt_nn_pipe_cfg){.stage = s,
			                             .stages = S,
			                             .schedule = sched[i],
			                             .micro_batches = MB,
			                             .micro_batch = B,
			                             .x = xs,
			                             .y = ys};
			assert_int_equal(
			    pthread_create(&th[s], NULL, stage_main, &st[s]),
			    0);
		}
		for (int s = 0; s < S; s++)
			pthread_join(th[s], NULL);
		for (int s = 0; s < S; s++) {
			int want = s == S - 1                     ? 1
			           : sched[i] == DT_NN_PIPE_GPIPE ? MB
			                                          : S - s;
			size_t one = sizeof(float) * B *
			                 dt_nn_model_input_size(models[s]) +
			             dt_nn_stage_slot_bytes(models[s], B);

			assert_int_equal(st[s].err, DT_OK);
			assert_int_equal(st[s].stats.slots, want);
			assert_int_equal(dt_nn_stage_num_slots(models[s]),
			                 want);
			assert_int_equal(st[s].stats.alloc_bytes, want * one);
			assert_true(st[s].stats.peak_stashed <= want);
		}
		compare(whole, models, S);
		assert_null(mb.head); /* every message was taken */
	}
	dt_nn_model_destroy(whole);
	for (int s = 0; s < S; s++)
		dt_nn_model_destroy(models[s]);
	free(xs);
	free(ys);
	pthread_cond_destroy(&mb.cv);
	pthread_mutex_destroy(&mb.mu);
}

static void
test_ready_first(void **state)
{
	(void)state;
	for (int sched = DT_NN_PIPE_GPIPE; sched <= DT_NN_PIPE_1F1B; sched++)
		for (int strict = 0; strict <= 1; strict++)
			check_ready_first(sched, strict);
}

static void
test_replica_sum(void **state)
{
	(void)state;
	for (int R = 2; R <= 5; R++)
		check_replica_sum(mlp, R);
	/* 2 gradients, 3 replicas: replica 0's chunk is empty. */
	check_replica_sum("input:1,dense:1,l2", 3);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cut_rule),
	    cmocka_unit_test(test_cut_measured),
	    cmocka_unit_test(test_slots),
	    cmocka_unit_test(test_replica_sum),
	    cmocka_unit_test(test_ready_first),
	    cmocka_unit_test(test_slots_by_schedule),
	    cmocka_unit_test(test_mlp_stages),
	    cmocka_unit_test(test_lenet_stages),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
