/*
 * pipe_check.c - the exactness check of pipeline parallelism, run under
 * `dtrain launch -n S -s 0` by tests/integration/pipeline.sh: rank s is
 * stage s of S (the cut rule's stages), the stages pass activations and
 * gradients with the collectives' point-to-point calls, and after a few
 * steps (zero the gradients, dt_nn_pipe_step over M micro-batches, an
 * optimizer step) each rank compares its stage's parameters, tensor by
 * tensor and bit for bit, with those of one process running the same
 * micro-batches in turn (dt_nn_forward_backward) on the whole model with
 * the same steps. It also checks the stash: M micro-batches at most under
 * GPipe (1 at the last stage, which runs each backward right after its
 * forward), S - s under 1F1B, each with one slot of activations: exactly
 * that many in the strict order (--schedule gpipe-strict, 1f1b-strict),
 * at most that many ready-first (the default).
 *
 * With --replicas R (under -n S*R): R pipelines of S stages, rank r*S + s
 * being stage s of replica r, each replica on its own micro-batches; after
 * each step the replicas of a stage sum their gradients
 * (dt_nn_pipe_sum_replicas). The one process then runs each replica's
 * micro-batches in turn from zeroed gradients and adds the replicas'
 * gradients in replica order before its step.
 *
 *   pipe_check [--model SPEC] [--schedule gpipe|1f1b[-strict]]
 *              [--micro-batches M]
 *              [--micro-batch B] [--steps N] [--optimizer sgd|adam]
 *              [--replicas R]
 * Prints "stage s of S: parameters identical" per rank; exit status 0 when
 * every check passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"
#include "dtrain/nn.h"

#define SEED 5

static int failures;

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "pipe_check: FAIL: ");                         \
		fprintf(stderr, __VA_ARGS__);                                  \
		fputc('\n', stderr);                                           \
		failures++;                                                    \
	} while (0)

static dt_err
p_send(void *arg, const float *buf, size_t n, int stage, int tag, void **h)
{
	return dt_coll_send_async(arg, buf, n, DT_FLOAT32, stage, tag,
	                          (dt_coll_handle **)h);
}

static dt_err
p_recv(void *arg, float *buf, size_t n, int stage, int tag)
{
	return dt_coll_recv(arg, buf, n, DT_FLOAT32, stage, tag);
}

static dt_err
p_wait(void *arg, void *h)
{
	(void)arg;
	return dt_coll_wait(h);
}

static dt_err
p_recv_async(void *arg, float *buf, size_t n, int stage, int tag, void **h)
{
	return dt_coll_recv_async(arg, buf, n, DT_FLOAT32, stage, tag,
	                          (dt_coll_handle **)h);
}

static dt_err
p_wait_any(void *arg, void **h, int n, int *index)
{
	(void)arg;
	return dt_coll_wait_any((dt_coll_handle *const *)h, n, index);
}

/* Step t's data: inputs in [-0.5, 0.5), labels 0..9. */
static void
make_data(int t, size_t n, int samples, float *x, float *y)
{
	uint64_t s = 0x1234567ull + (uint64_t)t * 7919;

	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
	}
	for (int b = 0; b < samples; b++)
		y[b] = (float)((t * 3 + b * 7) % 10);
}

static int
check_stage(dt_nn_model *st, dt_nn_model *whole, int stage, int S)
{
	int n = dt_nn_model_num_tensors(st), bad = 0;

	for (int i = 0; i < n; i++) {
		const dt_nn_tensor *a = dt_nn_model_tensor(st, i);
		const dt_nn_tensor *b = NULL;

		for (int j = 0; j < dt_nn_model_num_tensors(whole); j++)
			if (strcmp(dt_nn_model_tensor(whole, j)->name,
			           a->name) == 0)
				b = dt_nn_model_tensor(whole, j);
		if (b == NULL || b->size != a->size ||
		    memcmp(dt_nn_model_params(st) + a->offset,
		           dt_nn_model_params(whole) + b->offset,
		           sizeof(float) * a->size) != 0) {
			FAIL("stage %d: tensor %s differs from one process",
			     stage, a->name);
			bad++;
		}
	}
	if (!bad)
		printf("pipe_check: stage %d of %d: parameters identical to "
		       "one process (%d tensors)\n",
		       stage, S, n);
	return bad;
}

int
main(int argc, char **argv)
{
	const char *spec = "lenet", *sched = "1f1b", *opt = "adam";
	int M = 4, mb = 4, steps = 2, R = 1, first[65];
	float *acc = NULL;
	dt_nn_model *whole = NULL, *st = NULL;
	dt_nn_optim *o_whole = NULL, *o_st = NULL;
	float *x = NULL, *y = NULL;
	dt_coll *c;
	dt_err err;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--model") == 0)
			spec = argv[i + 1];
		else if (strcmp(argv[i], "--schedule") == 0)
			sched = argv[i + 1];
		else if (strcmp(argv[i], "--micro-batches") == 0)
			M = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--micro-batch") == 0)
			mb = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--steps") == 0)
			steps = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--optimizer") == 0)
			opt = argv[i + 1];
		else if (strcmp(argv[i], "--replicas") == 0)
			R = atoi(argv[i + 1]);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((err = dt_coll_init(&c))) {
		fprintf(stderr, "pipe_check: init: %s\n", dt_errmsg());
		return 1;
	}
	if (R < 1 || dt_coll_size(c) % R != 0) {
		FAIL("--replicas %d does not divide %d ranks", R,
		     dt_coll_size(c));
		dt_coll_finalize(c);
		return 1;
	}
	int S = dt_coll_size(c) / R, s = dt_coll_rank(c) % S;
	int rep = dt_coll_rank(c) / S;
	dt_nn_pipe_cfg cfg = {
	    .stage = s,
	    .stages = S,
	    .replica = rep,
	    .replicas = R,
	    .schedule = strncmp(sched, "gpipe", 5) == 0 ? DT_NN_PIPE_GPIPE
	                                                : DT_NN_PIPE_1F1B,
	    .strict = strstr(sched, "-strict") != NULL,
	    .micro_batches = M,
	    .micro_batch = mb,
	};
	dt_nn_pipe_ops ops = {.arg = c,
	                      .send = p_send,
	                      .recv = p_recv,
	                      .wait = p_wait,
	                      .recv_async = p_recv_async,
	                      .wait_any = p_wait_any};
	dt_nn_pipe_stats stats = {0};

	if (S > 64 || (err = dt_nn_model_create(spec, SEED, &whole)) ||
	    (err = dt_nn_model_cut(whole, S, first)) ||
	    (err = dt_nn_model_create_stage(spec, SEED, first[s], first[s + 1],
	                                    &st)) ||
	    (err = dt_nn_optim_create(opt, "", whole, &o_whole)) ||
	    (err = dt_nn_optim_create(opt, "", st, &o_st))) {
		FAIL("set-up: %s", dt_errmsg());
		goto out;
	}
	size_t in_n = (size_t)M * mb * dt_nn_model_input_size(whole);
	x = malloc(sizeof(float) * in_n);
	y = malloc(sizeof(float) * (size_t)M * mb);
	cfg.x = x;
	cfg.y = y;
	acc = malloc(sizeof(float) * dt_nn_model_num_params(whole));
	if (x == NULL || y == NULL || acc == NULL) {
		FAIL("out of memory");
		goto out;
	}
	for (int t = 0; t < steps && !failures; t++) {
		make_data(t * R + rep, in_n, M * mb, x, y);
		dt_nn_model_zero_grad(st);
		if ((err = dt_nn_pipe_step(st, &cfg, &ops, &stats)) ||
		    (err = dt_nn_pipe_sum_replicas(st, &cfg, &ops)) ||
		    (err = dt_nn_optim_step(o_st, st))) {
			FAIL("stage %d, step %d: %s", s, t, dt_errmsg());
			break;
		}
		/* GPipe keeps every micro-batch but at the last stage,
		 * which runs each backward right after its forward. */
		int want = s == S - 1                         ? 1
		           : cfg.schedule == DT_NN_PIPE_GPIPE ? M
		           : S - s < M                        ? S - s
		                                              : M;
		/* Ready-first may run a backward pass before the forwards
		 * GPipe would have run first, and so keep fewer. */
		if (stats.peak_stashed > want ||
		    (cfg.strict && stats.peak_stashed != want) ||
		    stats.peak_stashed < 1)
			FAIL("stage %d: %d micro-batches stashed at most, "
			     "expected %s%d",
			     s, stats.peak_stashed,
			     cfg.strict ? "" : "<= ", want);
		if (cfg.strict && stats.reordered != 0)
			FAIL("stage %d: strict order, yet %d passes reordered",
			     s, stats.reordered);
		/* Each micro-batch in flight keeps one slot of activations,
		 * the last stage none between its passes. */
		size_t act = s == S - 1 ? 0
		                        : (size_t)stats.peak_stashed *
		                              dt_nn_stage_slot_bytes(st, mb);
		if (stats.act_bytes != act || (s < S - 1 && act == 0))
			FAIL("stage %d: %zu bytes of activations kept, "
			     "expected %zu",
			     s, stats.act_bytes, act);
		printf("pipe_check: stage %d step %d: %s stashed %d "
		       "micro-batch inputs (%zu bytes), %d passes reordered\n",
		       s, t, sched, stats.peak_stashed, stats.stash_bytes,
		       stats.reordered);
		/* One process, the same micro-batches in turn, replica by
		 * replica, the replicas' gradients added in order. */
		size_t np = dt_nn_model_num_params(whole);
		float *g = dt_nn_model_grads(whole);

		for (int r = 0; r < R; r++) {
			make_data(t * R + r, in_n, M * mb, x, y);
			dt_nn_model_zero_grad(whole);
			for (int k = 0; k < M; k++)
				if ((err = dt_nn_forward_backward(
				         whole,
				         x + (size_t)k * mb *
				                 dt_nn_model_input_size(whole),
				         y + (size_t)k * mb, mb, NULL, NULL)))
					FAIL("reference: %s", dt_errmsg());
			for (size_t i = 0; i < np; i++)
				acc[i] = r == 0 ? g[i] : acc[i] + g[i];
		}
		memcpy(g, acc, sizeof(float) * np);
		if ((err = dt_nn_optim_step(o_whole, whole)))
			FAIL("reference step: %s", dt_errmsg());
	}
	if (!failures)
		check_stage(st, whole, s, S);
out:
	free(acc);
	free(x);
	free(y);
	dt_nn_optim_destroy(o_whole);
	dt_nn_optim_destroy(o_st);
	dt_nn_model_destroy(st);
	dt_nn_model_destroy(whole);
	if ((err = dt_coll_finalize(c)))
		FAIL("finalize: %s", dt_errmsg());
	printf("pipe_check: stage %d: %d failed\n", s, failures);
	return failures ? 1 : 0;
}
