/*
 * pipeline_bench.c - pipeline parallelism's throughput and bubble, run
 * under `dtrain launch -n S -s 0` (rank s is stage s): an MLP of equal
 * dense layers (so the cut rule gives stages of equal work) trained for a
 * few steps with M = 1, 2, 4, 8, 16 micro-batches under a schedule. For
 * each M the last rank prints samples/s, the measured bubble (the share of
 * a step a stage spends waiting rather than in its layers, averaged over
 * the stages) beside the theoretical (S-1)/(M+S-1), and every stage's
 * most stashed micro-batch inputs. Under load (other processes on the
 * same cores) waiting grows and the measured bubble with it.
 *
 *   pipeline_bench [--schedule gpipe|1f1b] [--width W] [--micro-batch B]
 *                  [--steps N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"
#include "dtrain/nn.h"
#include "dtrain/obs.h"

static dt_err
b_send(void *arg, const float *buf, size_t n, int stage, int tag, void **h)
{
	return dt_coll_send_async(arg, buf, n, DT_FLOAT32, stage, tag,
	                          (dt_coll_handle **)h);
}

static dt_err
b_recv(void *arg, float *buf, size_t n, int stage, int tag)
{
	return dt_coll_recv(arg, buf, n, DT_FLOAT32, stage, tag);
}

static dt_err
b_wait(void *arg, void *h)
{
	(void)arg;
	return dt_coll_wait(h);
}

/* One stage per dense layer pair: S stages of two dense layers each. */
static void
make_spec(char *out, size_t cap, int S, int width)
{
	size_t n = (size_t)snprintf(out, cap, "input:%d", width);

	for (int i = 0; i < 2 * S - 1 && n < cap; i++)
		n +=
		    (size_t)snprintf(out + n, cap - n, ",dense:%d,relu", width);
	if (n < cap)
		snprintf(out + n, cap - n, ",dense:10,softmax_ce");
}

static int
run(dt_coll *c, const char *spec, const dt_nn_pipe_cfg *base, int M, int steps)
{
	int S = base->stages, s = base->stage, first[65];
	dt_nn_model *whole = NULL, *st = NULL;
	dt_nn_pipe_cfg cfg = *base;
	dt_nn_pipe_ops ops = {
	    .arg = c, .send = b_send, .recv = b_recv, .wait = b_wait};
	dt_nn_pipe_stats stats;
	size_t nin;
	float *x, *y;
	uint64_t busy = 0, t0, wall;
	double r[2], sum[2];

	if (dt_nn_model_create(spec, 1, &whole) ||
	    dt_nn_model_cut(whole, S, first) ||
	    dt_nn_model_create_stage(spec, 1, first[s], first[s + 1], &st)) {
		fprintf(stderr, "pipeline_bench: %s\n", dt_errmsg());
		return 1;
	}
	cfg.micro_batches = M;
	nin = (size_t)M * cfg.micro_batch * dt_nn_model_input_size(whole);
	x = calloc(nin, sizeof(float));
	y = calloc((size_t)M * cfg.micro_batch, sizeof(float));
	cfg.x = x;
	cfg.y = y;
	dt_nn_model_destroy(whole);
	/* One step to warm up (buffers, connections), then the timed ones. */
	if (dt_nn_pipe_step(st, &cfg, &ops, &stats) || dt_coll_barrier(c))
		goto fail;
	t0 = dt_obs_now();
	for (int i = 0; i < steps; i++) {
		dt_nn_model_zero_grad(st);
		if (dt_nn_pipe_step(st, &cfg, &ops, &stats))
			goto fail;
		busy += stats.busy_ns;
	}
	wall = dt_obs_now() - t0;
	r[0] = 1.0 - (double)busy / (double)wall;
	r[1] = (double)stats.peak_stashed;
	if (dt_coll_allreduce(c, r, sum, 2, DT_FLOAT64, DT_COLL_SUM))
		goto fail;
	printf("pipeline_bench: stage %d: M %2d: bubble %.3f, %d micro-batch "
	       "inputs stashed (%zu bytes)\n",
	       s, M, r[0], stats.peak_stashed, stats.stash_bytes);
	if (s == S - 1)
		printf("pipeline_bench: S %d %s M %2d: %8.0f samples/s, bubble "
		       "%.3f measured, %.3f theoretical\n",
		       S, base->schedule ? "1f1b " : "gpipe", M,
		       (double)steps * M * cfg.micro_batch / (wall / 1e9),
		       sum[0] / S, (double)(S - 1) / (M + S - 1));
	free(x);
	free(y);
	dt_nn_model_destroy(st);
	return 0;
fail:
	fprintf(stderr, "pipeline_bench: %s\n", dt_errmsg());
	free(x);
	free(y);
	dt_nn_model_destroy(st);
	return 1;
}

int
main(int argc, char **argv)
{
	int width = 256, mb = 16, steps = 5, rc = 0;
	const char *sched = "1f1b";
	char spec[1024];
	dt_coll *c;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--schedule") == 0)
			sched = argv[i + 1];
		else if (strcmp(argv[i], "--width") == 0)
			width = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--micro-batch") == 0)
			mb = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--steps") == 0)
			steps = atoi(argv[i + 1]);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (dt_coll_init(&c)) {
		fprintf(stderr, "pipeline_bench: %s\n", dt_errmsg());
		return 1;
	}
	dt_nn_pipe_cfg base = {
	    .stage = dt_coll_rank(c),
	    .stages = dt_coll_size(c),
	    .schedule = strcmp(sched, "gpipe") == 0 ? DT_NN_PIPE_GPIPE
	                                            : DT_NN_PIPE_1F1B,
	    .micro_batch = mb,
	};
	if (base.stages > 32 || width < 16 || mb < 1 || steps < 1) {
		fprintf(stderr, "pipeline_bench: at most 32 stages, --width "
		                ">= 16, --micro-batch and --steps >= 1\n");
		dt_coll_finalize(c);
		return 2;
	}
	make_spec(spec, sizeof(spec), base.stages, width);
	for (int M = 1; M <= 16 && rc == 0; M *= 2)
		rc = run(c, spec, &base, M, steps);
	if (dt_coll_finalize(c) && rc == 0)
		rc = 1;
	return rc;
}
