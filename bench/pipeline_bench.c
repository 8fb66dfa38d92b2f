/*
 * pipeline_bench.c - pipeline parallelism's throughput, bubble and
 * activation memory, run under `dtrain launch -n S -s 0` (rank s is stage
 * s): an MLP of dense layers cut into stages of equal work (make_spec,
 * cut by dt_nn_model_cut) trained for a few steps under GPipe and 1F1B
 * with M = 1, 2, 4, 8, 16 micro-batches, each stage running whichever pass
 * has its input first (ready-first, the default) or the schedule's fixed
 * order (--order strict; both: one after the other).
 *
 * The bubble is the share of the stages' time spent idle:
 * 1 - (time the stages spend in their layers) / (S x the step's time).
 * It is measured two ways, and the bench prints both beside the
 * theoretical (S-1)/(M+S-1) of equal stages:
 *
 * - "wall": each stage's wall time in its layers against the step's wall
 *   time, averaged over the stages. It is the real figure when every
 *   stage has a core of its own; with more stages than free cores (4
 *   stages on 2 shared cores) a stage waits for a core as well as for its
 *   neighbours and this figure says little.
 * - "replay": every stage records the CPU time of each forward and
 *   backward pass (dt_nn_pipe_stats.op_cpu_ns, not counting time other
 *   processes hold the core), and the last rank replays the schedule with
 *   those durations: a pass starts when its stage finished the pass before
 *   it in the schedule's order and its input arrived (the forward of the
 *   stage before, the backward of the stage after), messages taking no
 *   time. It is the bubble of the schedule with the real cost of each
 *   pass, as if each stage had its own core and the links were free: what
 *   the implementation makes of the schedule, independent of the machine's
 *   load. It is replayed again with every pass of a stage taking that
 *   stage's mean forward or backward time: what is left then comes from
 *   the stages' unequal work, the rest from the passes' spread. The
 *   replay follows the order the run used: the strict schedule, or
 *   ready-first decided pass by pass on the replayed arrivals.
 *
 * Memory: each stage's most micro-batches in flight, with the bytes of
 * their inputs and of the activations kept for their backward passes.
 *
 *   pipeline_bench [--schedule gpipe|1f1b|both]
 *                  [--order ready|strict|both] [--width W]
 *                  [--micro-batch B] [--steps N] [--max-micro M]
 *                  [--input-pct P]
 *                  [--timeline M]
 *
 * --input-pct P makes the first layer's input P% of the width (150), to
 * move work into or out of stage 0.
 *
 * --timeline M prints, for M micro-batches, the replayed timeline of a
 * step (each pass's start and end on each stage) with the measured times,
 * with each stage's mean times, and with equal stages under strict 1F1B
 * (the ideal), to show where a stage waits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"
#include "dtrain/nn.h"
#include "dtrain/obs.h"

#define MAX_STAGES 32
#define MAX_MICRO  64

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

static dt_err
b_recv_async(void *arg, float *buf, size_t n, int stage, int tag, void **h)
{
	return dt_coll_recv_async(arg, buf, n, DT_FLOAT32, stage, tag,
	                          (dt_coll_handle **)h);
}

static dt_err
b_wait_any(void *arg, void **h, int n, int *index)
{
	(void)arg;
	return dt_coll_wait_any((dt_coll_handle *const *)h, n, index);
}

/*
 * S stages of two dense layers of width W each (layers 4s to 4s + 3:
 * dense, relu, dense, relu), the last with the output layer and the loss
 * besides. The first layer computes no input gradient (nothing before it
 * needs one), so its input is 1.5 W wide (in, set by --input-pct): its
 * forward (1.5 units of W x W work) and weight gradient (1.5) then cost
 * what another layer's forward (1), weight and input gradients (2) cost,
 * and the stages are equal but for the last stage's output layer.
 */
static void
make_spec(char *out, size_t cap, int S, int width, int in)
{
	size_t n = (size_t)snprintf(out, cap, "input:%d", in);

	for (int i = 0; i < 2 * S && n < cap; i++)
		n +=
		    (size_t)snprintf(out + n, cap - n, ",dense:%d,relu", width);
	if (n < cap)
		snprintf(out + n, cap - n, ",dense:10,softmax_ce");
}

/*
 * Stage s's passes in the order dt_nn_pipe_step runs them (its schedule()):
 * op[i] is k for the forward pass of micro-batch k, M + k for its
 * backward pass. Returns the count, 2 M.
 */
static int
stage_order(int S, int s, int M, int gpipe, int *op)
{
	int n = 0, f = 0, b = 0;
	int warm = gpipe && s < S - 1 ? M : (S - s - 1 < M ? S - s - 1 : M);

	for (; f < warm; f++)
		op[n++] = f;
	while (b < M) {
		if (f < M)
			op[n++] = f++;
		op[n++] = M + b++;
	}
	return n;
}

/* The last replay's start and end of each pass, and each stage's order
 * of passes, for print_timeline(). */
static double start_at[MAX_STAGES][2 * MAX_MICRO];
static double done[MAX_STAGES][2 * MAX_MICRO];
static int ran[MAX_STAGES][2 * MAX_MICRO];

/*
 * The replay: cpu[s * 2M + i] is stage s's CPU time of pass i (as
 * op_cpu_ns); returns the step's time with those durations, free links
 * and a core per stage, and sets *busy to the sum of the durations.
 */
static double
replay(int S, int M, int gpipe, const double *cpu, double *busy)
{
	int op[MAX_STAGES][2 * MAX_MICRO], pos[MAX_STAGES] = {0};
	double clock[MAX_STAGES] = {0}, end = 0.0;
	int left = 2 * M * S;

	*busy = 0.0;
	for (int s = 0; s < S; s++) {
		stage_order(S, s, M, gpipe, op[s]);
		for (int i = 0; i < 2 * M; i++) {
			done[s][i] = -1.0;
			*busy += cpu[s * 2 * M + i];
		}
	}
	while (left > 0) {
		int moved = 0;

		for (int s = 0; s < S; s++) {
			int i, k;
			double dep = 0.0;

			if (pos[s] == 2 * M)
				continue;
			i = op[s][pos[s]];
			k = i % M;
			if (i < M && s > 0)
				dep = done[s - 1][k]; /* its input */
			else if (i >= M && s < S - 1)
				dep = done[s + 1][M + k]; /* its gradient */
			else if (i >= M)
				dep = done[s][k]; /* the last stage's input */
			if (dep < 0.0)
				continue;
			if (dep > clock[s])
				clock[s] = dep;
			start_at[s][i] = clock[s];
			ran[s][pos[s]] = i;
			clock[s] += cpu[s * 2 * M + i];
			done[s][i] = clock[s];
			if (clock[s] > end)
				end = clock[s];
			pos[s]++;
			left--;
			moved = 1;
		}
		if (!moved)
			return -1.0; /* the schedule deadlocks: a bench bug */
	}
	return end;
}

/* Micro-batches stage s of S may keep in flight (dt_nn_pipe_step's
 * slots; the last stage runs each backward right after its forward). */
static int
slots_of(int S, int s, int M, int gpipe)
{
	if (s == S - 1)
		return 1;
	return gpipe ? M : (S - s < M ? S - s : M);
}

/* When the input of stage s's next forward (f) or backward (b) arrives
 * in the replay so far: 0 when it needs none, -1 while not yet known. */
static double
arrival(int S, int s, int M, int is_f, int k)
{
	if (is_f)
		return s == 0 ? 0.0 : done[s - 1][k];
	return s == S - 1 ? 0.0 : done[s + 1][M + k];
}

/*
 * The ready-first replay, as dt_nn_pipe_step runs it: a stage runs its
 * next forward when it may (a slot is free) and its input is there, else
 * whichever of the next forward and the next backward it may run has its
 * input first (the forward on a tie). Passes are committed in time order
 * (the stage that can start soonest first), so every input that is not
 * known yet comes later than the pass being decided, and the decision is
 * the one the stage would make. Same arguments and result as replay().
 */
static double
replay_ready(int S, int M, int gpipe, const double *cpu, double *busy)
{
	int f[MAX_STAGES] = {0}, b[MAX_STAGES] = {0};
	double clock[MAX_STAGES] = {0}, end = 0.0;

	*busy = 0.0;
	for (int s = 0; s < S; s++)
		for (int i = 0; i < 2 * M; i++) {
			done[s][i] = -1.0;
			*busy += cpu[s * 2 * M + i];
		}
	for (int left = 2 * M * S; left > 0; left--) {
		int best = -1, best_i = 0;
		double best_t = 0.0;

		for (int s = 0; s < S; s++) {
			int can_f =
			    f[s] < M && f[s] - b[s] < slots_of(S, s, M, gpipe);
			int can_b = b[s] < f[s];
			double af = can_f ? arrival(S, s, M, 1, f[s]) : -1.0;
			double ab = can_b ? arrival(S, s, M, 0, b[s]) : -1.0;
			double t;
			int i;

			if (af < 0.0 && ab < 0.0)
				continue;
			/* Start at the first input there, not before the
			 * stage is free; the forward if its input is there
			 * by then. */
			t = af < 0.0 ? ab : ab < 0.0 ? af : (af < ab ? af : ab);
			if (t < clock[s])
				t = clock[s];
			i = af >= 0.0 && af <= t ? f[s] : M + b[s];
			if (best < 0 || t < best_t) {
				best = s;
				best_t = t;
				best_i = i;
			}
		}
		if (best < 0)
			return -1.0; /* deadlock: a bench bug */
		start_at[best][best_i] = best_t;
		ran[best][f[best] + b[best]] = best_i;
		clock[best] = best_t + cpu[best * 2 * M + best_i];
		done[best][best_i] = clock[best];
		if (clock[best] > end)
			end = clock[best];
		if (best_i < M)
			f[best]++;
		else
			b[best]++;
	}
	return end;
}

/* The replay of one order: ready-first or the strict schedule. */
static double
replay_as(int ready, int S, int M, int gpipe, const double *cpu, double *busy)
{
	return ready ? replay_ready(S, M, gpipe, cpu, busy)
	             : replay(S, M, gpipe, cpu, busy);
}

/*
 * The last replay's timeline, one line per stage: each pass in the
 * stage's order as F<k> or B<k> (the last stage's B<k> holds its forward
 * pass too) with its start and end in ms, and "idle" where the stage
 * waited for a neighbour. Stage 0 is printed first.
 */
static void
print_timeline(const char *what, int S, int M)
{
	printf("pipeline_bench: timeline (%s), ms:\n", what);
	for (int s = 0; s < S; s++) {
		double at = 0.0;

		printf("pipeline_bench:   stage %d:", s);
		for (int j = 0; j < 2 * M; j++) {
			int i = ran[s][j];

			if (s == S - 1 && i < M)
				continue; /* the last stage's forward is in B */
			if (start_at[s][i] > at + 1e3) /* ns */
				printf(" idle %.2f-%.2f", at / 1e6,
				       start_at[s][i] / 1e6);
			printf(" %c%d %.2f-%.2f", i < M ? 'F' : 'B', i % M,
			       start_at[s][i] / 1e6, done[s][i] / 1e6);
			at = done[s][i];
		}
		printf("\n");
	}
}

typedef struct bench {
	dt_coll *c;
	const char *spec;
	int S, s, mb, steps, width, in, timeline;
	int first[MAX_STAGES + 1]; /* the cut rule's stages */
} bench;

/*
 * Equal stages for the ideal timeline: every stage before the last takes
 * the mean over those stages of the forward and of the backward time
 * (cpu, as replay() reads it), the last stage their sum in its fused
 * pass. Written into out; returns -1 with a single stage.
 */
static int
ideal_times(int S, int M, const double *cpu, double *out)
{
	double f = 0.0, bw = 0.0;

	if (S < 2)
		return -1;
	for (int s = 0; s < S - 1; s++)
		for (int k = 0; k < M; k++) {
			f += cpu[s * 2 * M + k] / ((S - 1) * M);
			bw += cpu[s * 2 * M + M + k] / ((S - 1) * M);
		}
	for (int s = 0; s < S; s++)
		for (int k = 0; k < M; k++) {
			out[s * 2 * M + k] = s < S - 1 ? f : 0.0;
			out[s * 2 * M + M + k] = s < S - 1 ? bw : f + bw;
		}
	return 0;
}

/*
 * The three timelines of --timeline: the schedule replayed with each
 * pass's time, with each stage's mean times, and the ideal (1F1B with
 * equal stages). Overwrites mean with the ideal's times.
 */
static void
timelines(int ready, int S, int M, int gpipe, const double *cpu, double *mean)
{
	double busy, span;

	replay_as(ready, S, M, gpipe, cpu, &busy);
	print_timeline("each pass's mean CPU time over the steps", S, M);
	replay_as(ready, S, M, gpipe, mean, &busy);
	print_timeline("each stage's mean times", S, M);
	if (ideal_times(S, M, cpu, mean) != 0)
		return;
	span = replay(S, M, 0, mean, &busy);
	print_timeline("ideal 1F1B, equal stages", S, M);
	printf("pipeline_bench: ideal 1F1B bubble %.3f\n",
	       span > 0 ? 1.0 - busy / (S * span) : -1.0);
}

/* Per stage, gathered: wall bubble, peak stashed, stash and activation
 * bytes, passes reordered per step, then the mean CPU time of each of the
 * 2 M passes, then each step's 2 M times. */
#define HEAD 5

/*
 * Each step replayed with its own passes' times, under either order, the
 * bubbles averaged over the steps into by[0] (strict) and by[1]
 * (ready-first). Averaging the passes' times over the steps first (the
 * main replay) smooths away the step-to-step jitter a stage meets, which
 * is what ready-first is there to absorb; this keeps it.
 */
static void
step_bubbles(const bench *b, int M, int gpipe, const double *all, size_t row,
             double *by)
{
	size_t n = (size_t)b->S * 2 * M;
	double *cpu = malloc(sizeof(double) * n), busy, span;

	by[0] = by[1] = -1.0;
	if (cpu == NULL)
		return;
	by[0] = by[1] = 0.0;
	for (int t = 0; t < b->steps; t++) {
		for (int s = 0; s < b->S; s++)
			memcpy(cpu + (size_t)s * 2 * M,
			       all + s * row + HEAD + (size_t)(t + 1) * 2 * M,
			       sizeof(double) * 2 * M);
		for (int ready = 0; ready <= 1; ready++) {
			span = replay_as(ready, b->S, M, gpipe, cpu, &busy);
			by[ready] +=
			    (span > 0 ? 1.0 - busy / (b->S * span) : -1.0) /
			    b->steps;
		}
	}
	free(cpu);
}

static void
report(const bench *b, int M, int gpipe, int ready, const double *all,
       double wall)
{
	size_t row = HEAD + 2 * (size_t)M * (1 + (size_t)b->steps);
	size_t n = (size_t)b->S * 2 * M;
	double *cpu = malloc(sizeof(double) * n);
	double *mean = calloc(n, sizeof(double));
	double wall_bubble = 0.0, busy, span, mbusy, mspan, obusy, ospan;
	double by[2];

	if (cpu == NULL || mean == NULL) {
		free(cpu);
		free(mean);
		return;
	}
	for (int s = 0; s < b->S; s++) {
		double *c = cpu + (size_t)s * 2 * M, f = 0.0, bw = 0.0;

		wall_bubble += all[s * row] / b->S;
		memcpy(c, all + s * row + HEAD, sizeof(double) * 2 * M);
		for (int k = 0; k < M; k++) {
			f += c[k] / M;
			bw += c[M + k] / M;
		}
		for (int k = 0; k < M; k++) {
			mean[(size_t)s * 2 * M + k] = f;
			mean[(size_t)s * 2 * M + M + k] = bw;
		}
	}
	/* Replayed with each pass's own time, and with each stage's mean
	 * forward and backward times: the second leaves out the passes'
	 * spread and keeps only the stages' difference in work. */
	span = replay_as(ready, b->S, M, gpipe, cpu, &busy);
	mspan = replay_as(ready, b->S, M, gpipe, mean, &mbusy);
	/* The other order replayed on the same passes: the difference is
	 * the order's alone, whatever the machine did during the run. */
	ospan = replay_as(!ready, b->S, M, gpipe, cpu, &obusy);
	printf("pipeline_bench: S %d %s %s M %2d: %8.0f samples/s, bubble "
	       "%.3f wall, %.3f replay (%.3f at mean times, %.3f %s), "
	       "%.3f theoretical\n",
	       b->S, gpipe ? "gpipe" : "1f1b ", ready ? "ready " : "strict", M,
	       (double)b->steps * M * b->mb / (wall / 1e9), wall_bubble,
	       span > 0 ? 1.0 - busy / (b->S * span) : -1.0,
	       mspan > 0 ? 1.0 - mbusy / (b->S * mspan) : -1.0,
	       ospan > 0 ? 1.0 - obusy / (b->S * ospan) : -1.0,
	       ready ? "strict" : "ready-first",
	       (double)(b->S - 1) / (M + b->S - 1));
	for (int s = 0; s < b->S; s++) {
		const double *r = all + s * row;
		double f = 0.0, bw = 0.0;

		for (int k = 0; k < M; k++) {
			f += r[HEAD + k] / M / 1e6;
			bw += r[HEAD + M + k] / M / 1e6;
		}
		printf("pipeline_bench:   stage %d: forward %.2f ms, backward "
		       "%.2f ms CPU per micro-batch; %d in flight at most: "
		       "inputs %.0f KiB, activations %.0f KiB; %.1f passes "
		       "reordered per step\n",
		       s, f, bw, (int)r[1], r[2] / 1024, r[3] / 1024, r[4]);
	}
	step_bubbles(b, M, gpipe, all, row, by);
	printf("pipeline_bench:   each step replayed with its own times: "
	       "bubble %.3f ready-first, %.3f strict\n",
	       by[1], by[0]);
	if (M == b->timeline)
		timelines(ready, b->S, M, gpipe, cpu, mean);
	free(mean);
	free(cpu);
}

static int
run(const bench *b, dt_nn_model *st, int M, int gpipe, int ready)
{
	dt_nn_pipe_cfg cfg = {
	    .stage = b->s,
	    .stages = b->S,
	    .schedule = gpipe ? DT_NN_PIPE_GPIPE : DT_NN_PIPE_1F1B,
	    .micro_batches = M,
	    .micro_batch = b->mb,
	    .strict = !ready,
	};
	dt_nn_pipe_ops ops = {.arg = b->c,
	                      .send = b_send,
	                      .recv = b_recv,
	                      .wait = b_wait,
	                      .recv_async = b_recv_async,
	                      .wait_any = b_wait_any};
	double reordered = 0.0;
	dt_nn_pipe_stats stats = {0};
	size_t row = HEAD + 2 * (size_t)M * (1 + (size_t)b->steps);
	uint64_t op[2 * MAX_MICRO], busy = 0, t0, wall;
	double *mine = calloc(row, sizeof(double));
	double *all = calloc(row * (size_t)b->S, sizeof(double));
	float *x = calloc((size_t)M * b->mb * b->in, sizeof(float));
	float *y = calloc((size_t)M * b->mb, sizeof(float));
	int rc = 1;

	if (!mine || !all || !x || !y)
		goto out;
	cfg.x = x;
	cfg.y = y;
	stats.op_cpu_ns = op;
	/* One step to warm up (buffers, connections), then the timed ones. */
	if (dt_nn_pipe_step(st, &cfg, &ops, &stats) || dt_coll_barrier(b->c))
		goto out;
	t0 = dt_obs_now();
	for (int i = 0; i < b->steps; i++) {
		dt_nn_model_zero_grad(st);
		if (dt_nn_pipe_step(st, &cfg, &ops, &stats))
			goto out;
		busy += stats.busy_ns;
		reordered += (double)stats.reordered / b->steps;
		for (int j = 0; j < 2 * M; j++) {
			mine[HEAD + j] += (double)op[j] / b->steps;
			mine[HEAD + (size_t)(i + 1) * 2 * M + j] =
			    (double)op[j];
		}
	}
	wall = dt_obs_now() - t0;
	mine[0] = 1.0 - (double)busy / (double)wall;
	mine[1] = stats.peak_stashed;
	mine[2] = (double)stats.stash_bytes;
	mine[3] = (double)stats.act_bytes;
	mine[4] = reordered;
	if (dt_coll_allgather(b->c, mine, all, row, DT_FLOAT64))
		goto out;
	if (b->s == b->S - 1)
		report(b, M, gpipe, ready, all, (double)wall);
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "pipeline_bench: stage %d, M %d: %s\n", b->s, M,
		        dt_errmsg());
	free(mine);
	free(all);
	free(x);
	free(y);
	return rc;
}

/* The cut rule's stages of the bench's model, the same on every rank. */
static int
cut(bench *b)
{
	dt_nn_model *whole = NULL;
	dt_err err;

	if ((err = dt_nn_model_create(b->spec, 1, &whole)) == DT_OK)
		err = dt_nn_model_cut(whole, b->S, b->first);
	dt_nn_model_destroy(whole);
	if (err) {
		fprintf(stderr, "pipeline_bench: %s\n", dt_errmsg());
		return 1;
	}
	return 0;
}

static int
run_all(bench *b, const char *sched, const char *order, int max_m)
{
	int rc = 0;
	dt_nn_model *st = NULL;

	if (cut(b) || dt_nn_model_create_stage(b->spec, 1, b->first[b->s],
	                                       b->first[b->s + 1], &st)) {
		fprintf(stderr, "pipeline_bench: %s\n", dt_errmsg());
		return 1;
	}
	if (b->s == b->S - 1) {
		printf("pipeline_bench: stages start at layers");
		for (int s = 0; s < b->S; s++)
			printf(" %d", b->first[s]);
		printf(" (of %d)\n", b->first[b->S]);
	}
	for (int g = 1; g >= 0 && rc == 0; g--) {
		if (strcmp(sched, "both") != 0 &&
		    (strcmp(sched, "gpipe") == 0) != g)
			continue;
		for (int ready = 0; ready <= 1 && rc == 0; ready++) {
			if (strcmp(order, "both") != 0 &&
			    (strcmp(order, "ready") == 0) != ready)
				continue;
			for (int M = 1; M <= max_m && rc == 0; M *= 2)
				rc = run(b, st, M, g, ready);
		}
	}
	dt_nn_model_destroy(st);
	return rc;
}

int
main(int argc, char **argv)
{
	int max_m = 16, in_pct = 150, rc;
	const char *sched = "both", *order = "ready";
	char spec[2048];
	bench b = {.width = 256, .mb = 16, .steps = 5};

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--schedule") == 0)
			sched = argv[i + 1];
		else if (strcmp(argv[i], "--width") == 0)
			b.width = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--micro-batch") == 0)
			b.mb = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--steps") == 0)
			b.steps = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--max-micro") == 0)
			max_m = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--input-pct") == 0)
			in_pct = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--timeline") == 0)
			b.timeline = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--order") == 0)
			order = argv[i + 1];
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (dt_coll_init(&b.c)) {
		fprintf(stderr, "pipeline_bench: %s\n", dt_errmsg());
		return 1;
	}
	b.s = dt_coll_rank(b.c);
	b.S = dt_coll_size(b.c);
	if (b.S > MAX_STAGES || b.width < 16 || b.width > 8192 || b.mb < 1 ||
	    b.steps < 1 || b.steps > 1000 || max_m < 1 || max_m > MAX_MICRO ||
	    in_pct < 10 || in_pct > 400) {
		fprintf(stderr,
		        "pipeline_bench: at most %d stages, --width in [16, "
		        "8192], --micro-batch >= 1, --steps in [1, 1000], "
		        "--max-micro "
		        "in [1, %d], --input-pct in [10, 400]\n",
		        MAX_STAGES, MAX_MICRO);
		dt_coll_finalize(b.c);
		return 2;
	}
	b.in = b.width * in_pct / 100;
	make_spec(spec, sizeof(spec), b.S, b.width, b.in);
	b.spec = spec;
	if (b.s == b.S - 1)
		printf("pipeline_bench: %d stages of 2 dense layers of %d, "
		       "micro-batches of %d, %d steps per M\n",
		       b.S, b.width, b.mb, b.steps);
	rc = run_all(&b, sched, order, max_m);
	if (dt_coll_finalize(b.c) && rc == 0)
		rc = 1;
	return rc;
}
