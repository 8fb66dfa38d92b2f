/*
 * pipeline_bench.c - pipeline parallelism's throughput, bubble and
 * activation memory, run under `dtrain launch -n S -s 0` (rank s is stage
 * s): a model of dense layers cut into stages by the cut rule (make_spec:
 * by default stages that run exactly the same products, --model equal)
 * trained for a few steps under GPipe and 1F1B with M = 1, 2, 4, 8, 16
 * micro-batches, each stage running whichever pass has its input first
 * (ready-first, the default) or the schedule's fixed order (--order
 * strict; both: the two orders of each M back to back).
 *
 * The bubble is the share of the stages' time spent idle:
 * 1 - (time the stages spend in their layers) / (S x the step's time).
 * The bench prints it several ways beside the theoretical (S-1)/(M+S-1)
 * of equal stages:
 *
 * - "replay", the figure the bench is judged by: every stage records the
 *   CPU time of each forward and backward pass (dt_nn_pipe_stats.op_cpu_ns,
 *   not counting time other processes hold the core), each pass's median
 *   over the steps is taken, and the last rank replays the step with
 *   those durations: a pass starts when its stage finished the pass
 *   before it and its input arrived (the forward of the stage before,
 *   the backward of the stage after), messages taking no time, in the
 *   order the run used (the strict schedule, or ready-first decided pass
 *   by pass on the replayed arrivals). It is the schedule's bubble with
 *   the real cost of every pass, as if each stage had a core of its own:
 *   what the pipeline makes of its schedule whatever else the machine
 *   runs. The median leaves out the steps the machine disturbed most (a
 *   cache another process emptied, a slower core). It is replayed again
 *   with every pass of a stage at that stage's mean ("at mean times"),
 *   which leaves only the stages' unequal time, and in the other order on
 *   the same passes, which leaves only the order's difference.
 * - "steps": each step replayed with its own passes' times, the median
 *   over the steps, both orders: this keeps the jitter of the passes
 *   within a step, which on a shared machine is mostly the machine's.
 * - "wall": each stage's wall time in its layers against the step's wall
 *   time, averaged over the stages. It is the real figure when every
 *   stage has a core of its own; with more stages than free cores (4
 *   stages on 2 shared cores) a stage waits for a core as well as for its
 *   neighbours and this figure says little.
 *
 * Memory: each stage's activation slots allocated and their bytes with
 * the inputs' (what the schedule may keep in flight), and the most
 * micro-batches it kept, with the bytes of their inputs and activations.
 * Each row also goes out as one JSON line.
 *
 *   pipeline_bench [--schedule gpipe|1f1b|both]
 *                  [--order ready|strict|both] [--width W]
 *                  [--micro-batch B] [--steps N] [--warmup N]
 *                  [--max-micro M] [--model equal|mlp] [--input-pct P]
 *                  [--timeline M]
 *
 * --warmup N (3) steps run before the timed ones at each M and order.
 * --model mlp is the earlier model, whose stages are equal by the count
 * of operations only; --input-pct P makes its first layer's input P% of
 * the width (150), to move work into or out of stage 0.
 *
 * --timeline M prints, for M micro-batches, the replayed timeline of a
 * step (each pass's start and end on each stage) with the passes' median
 * times, with each stage's mean times, and with equal stages under
 * strict 1F1B (the ideal), to show where a stage waits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"
#include "common/util.h"
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
 * The bench's models, S stages of two dense layers of width W each.
 *
 * "equal" (the default): stages that run the same computation. A
 * one-wide input feeds a dense layer of width W, which is the only layer
 * that computes no input gradient (nothing before it needs one); then
 * come 2 S dense layers of W x W with a relu after each, a dense layer of
 * width 1 and an l2 loss on it. The cut rule gives stage 0 the small
 * first layer and two W x W layers, the last stage two W x W layers and
 * the small last one, and every other stage two W x W layers, so every
 * stage runs the same four matrix products forward and backward on the
 * same shapes. The two small layers, about 1% of a stage's time each
 * (measured: the call overheads more than their work), sit one at each
 * end so that the first and last stages weigh the same; the stages
 * between are lighter by about that much. With stages this equal, what
 * is left of the gap to the theoretical bubble comes from the machine,
 * not the model.
 *
 * "mlp": the earlier model, S stages of two dense layers of width W
 * (layers 4s to 4s + 3), the last with a 10-wide output layer and
 * softmax_ce besides. Its first layer computes no input gradient, so its
 * input is made 1.5 W wide (in, set by --input-pct): its forward and
 * weight gradient then count as many operations as another layer's
 * forward, weight and input gradients. The stages are equal by that count
 * but not in time (other shapes of product, the output layer).
 */
static void
make_spec(char *out, size_t cap, int S, int width, int in, int equal)
{
	size_t n;

	if (equal)
		n = (size_t)snprintf(out, cap, "input:1,dense:%d", width);
	else
		n = (size_t)snprintf(out, cap, "input:%d", in);
	for (int i = 0; i < 2 * S && n < cap; i++)
		n +=
		    (size_t)snprintf(out + n, cap - n, ",dense:%d,relu", width);
	if (n < cap)
		snprintf(out + n, cap - n, "%s",
		         equal ? ",dense:1,l2" : ",dense:10,softmax_ce");
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
	int S, s, mb, steps, warmup, width, in, label, timeline;
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
	print_timeline("each pass's median CPU time over the steps", S, M);
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
 * bytes, passes reordered per step, slots allocated and their bytes,
 * then each step's CPU times of the 2 M passes. */
#define HEAD 7

/* Stage s's CPU time of pass i in step t, as gathered. */
static double
pass_at(const double *all, size_t row, int M, int s, int t, int i)
{
	return all[(size_t)s * row + HEAD + (size_t)t * 2 * M + (size_t)i];
}

static double
bubble_of(int S, double span, double busy)
{
	return span > 0 ? 1.0 - busy / (S * span) : -1.0;
}

/*
 * Each step replayed with its own passes' times, under either order; the
 * median over the steps into by[0] (strict) and by[1] (ready-first). The
 * median leaves out the steps the machine disturbed most (a cache emptied
 * by another process, a slower core), which the mean would carry.
 */
static void
step_bubbles(const bench *b, int M, int gpipe, const double *all, size_t row,
             double *by)
{
	size_t n = (size_t)b->S * 2 * M;
	double *cpu = malloc(sizeof(double) * n);
	double *v = malloc(sizeof(double) * (size_t)b->steps * 2), busy;

	by[0] = by[1] = -1.0;
	if (cpu == NULL || v == NULL)
		goto out;
	for (int t = 0; t < b->steps; t++) {
		for (int s = 0; s < b->S; s++)
			for (int i = 0; i < 2 * M; i++)
				cpu[(size_t)s * 2 * M + i] =
				    pass_at(all, row, M, s, t, i);
		for (int ready = 0; ready <= 1; ready++) {
			double span =
			    replay_as(ready, b->S, M, gpipe, cpu, &busy);

			v[ready * b->steps + t] = bubble_of(b->S, span, busy);
		}
	}
	by[0] = dt__median(v, b->steps);
	by[1] = dt__median(v + b->steps, b->steps);
out:
	free(cpu);
	free(v);
}

/* Each pass's median CPU time over the steps into cpu, its least into
 * least, each stage's mean of the medians (forward, backward) into mean,
 * and each stage's spread: the mean over its passes of the absolute
 * deviation of a step's time from the pass's median, relative to the
 * median, into spread[s]. */
static void
pass_medians(const bench *b, int M, const double *all, size_t row, double *cpu,
             double *least, double *mean, double *spread)
{
	double v[1000];

	for (int s = 0; s < b->S; s++) {
		double f = 0.0, bw = 0.0, dev = 0.0;

		for (int i = 0; i < 2 * M; i++) {
			double med;

			for (int t = 0; t < b->steps; t++)
				v[t] = pass_at(all, row, M, s, t, i);
			med = dt__median(v, b->steps);
			cpu[(size_t)s * 2 * M + i] = med;
			least[(size_t)s * 2 * M + i] = v[0]; /* sorted */
			for (int t = 0; t < b->steps; t++)
				dev += med > 0 ? (v[t] > med ? v[t] - med
				                             : med - v[t]) /
				                     med / b->steps / (2 * M)
				               : 0.0;
			if (i < M)
				f += med / M;
			else
				bw += med / M;
		}
		for (int k = 0; k < M; k++) {
			mean[(size_t)s * 2 * M + k] = f;
			mean[(size_t)s * 2 * M + M + k] = bw;
		}
		spread[s] = dev;
	}
}

/*
 * The replay with each stage's first forward and first backward pass of
 * the step at the stage's mean times, the others at their medians: what
 * the first passes, which follow a stage's longest waits, cost the
 * bubble (the replay minus this).
 */
static double
replay_first_at_mean(const bench *b, int M, int gpipe, int ready,
                     const double *cpu, const double *mean)
{
	size_t n = (size_t)b->S * 2 * M;
	double *t = malloc(sizeof(double) * n), busy, span;

	if (t == NULL)
		return -1.0;
	memcpy(t, cpu, sizeof(double) * n);
	for (int s = 0; s < b->S; s++) {
		t[(size_t)s * 2 * M] = mean[(size_t)s * 2 * M];
		t[(size_t)s * 2 * M + M] = mean[(size_t)s * 2 * M + M];
	}
	span = replay_as(ready, b->S, M, gpipe, t, &busy);
	free(t);
	return bubble_of(b->S, span, busy);
}

/* One JSON line with the row's figures, for scripts. */
static void
print_json(const bench *b, int M, int gpipe, int ready, const double *fig,
           const double *all, size_t row, const double *cpu)
{
	const char *keys[] = {"slots", "alloc_bytes", "peak", "stash_bytes",
	                      "act_bytes"};
	const int col[] = {5, 6, 1, 2, 3};

	printf("{\"bench\":\"pipeline\",\"S\":%d,\"schedule\":\"%s\","
	       "\"order\":\"%s\",\"M\":%d,\"theoretical\":%.4f,"
	       "\"steps_median\":%.4f,\"replay\":%.4f,\"replay_mean\":%.4f,"
	       "\"wall\":%.4f,\"replay_least\":%.4f,"
	       "\"replay_first_mean\":%.4f",
	       b->S, gpipe ? "gpipe" : "1f1b", ready ? "ready" : "strict", M,
	       (double)(b->S - 1) / (M + b->S - 1), fig[0], fig[1], fig[2],
	       fig[3], fig[4], fig[5]);
	for (int j = 0; j < 5; j++) {
		printf(",\"%s\":[", keys[j]);
		for (int s = 0; s < b->S; s++)
			printf("%s%.0f", s ? "," : "",
			       all[(size_t)s * row + col[j]]);
		printf("]");
	}
	printf(",\"pass_ms\":[");
	for (int s = 0; s < b->S; s++) {
		double t = 0.0;

		for (int i = 0; i < 2 * M; i++)
			t += cpu[(size_t)s * 2 * M + i] / M / 1e6;
		printf("%s%.4f", s ? "," : "", t);
	}
	/* Each pass's median CPU time by micro-batch, forward then
	 * backward, per stage: where within a step a stage is slow. */
	for (int dir = 0; dir < 2; dir++) {
		printf("],\"%s\":[", dir ? "bwd_ms" : "fwd_ms");
		for (int s = 0; s < b->S; s++) {
			printf("%s[", s ? "," : "");
			for (int k = 0; k < M; k++)
				printf("%s%.4f", k ? "," : "",
				       cpu[(size_t)s * 2 * M + dir * M + k] /
				           1e6);
			printf("]");
		}
	}
	printf("]}\n");
}

static void
report(const bench *b, int M, int gpipe, int ready, const double *all,
       double wall)
{
	size_t row = HEAD + 2 * (size_t)M * (size_t)b->steps;
	size_t n = (size_t)b->S * 2 * M;
	double *cpu = malloc(sizeof(double) * n);
	double *mean = calloc(n, sizeof(double));
	double *least = calloc(n, sizeof(double));
	double spread[MAX_STAGES], wall_bubble = 0.0, busy, span, mbusy, mspan,
	                           obusy, ospan, lbusy, lspan, by[2], fig[6];

	if (cpu == NULL || mean == NULL || least == NULL)
		goto out;
	for (int s = 0; s < b->S; s++)
		wall_bubble += all[s * row] / b->S;
	pass_medians(b, M, all, row, cpu, least, mean, spread);
	/* Replayed with each pass's median time, and with each stage's mean
	 * forward and backward times: the second leaves out the passes'
	 * spread and keeps only the stages' difference in work. */
	span = replay_as(ready, b->S, M, gpipe, cpu, &busy);
	mspan = replay_as(ready, b->S, M, gpipe, mean, &mbusy);
	/* The other order replayed on the same passes: the difference is
	 * the order's alone, whatever the machine did during the run. */
	ospan = replay_as(!ready, b->S, M, gpipe, cpu, &obusy);
	/* With each pass's least time over the steps: the pass as little
	 * disturbed by the machine as it was seen to run. */
	lspan = replay_as(ready, b->S, M, gpipe, least, &lbusy);
	step_bubbles(b, M, gpipe, all, row, by);
	fig[0] = by[ready];
	fig[1] = bubble_of(b->S, span, busy);
	fig[2] = bubble_of(b->S, mspan, mbusy);
	fig[3] = wall_bubble;
	fig[4] = bubble_of(b->S, lspan, lbusy);
	fig[5] = replay_first_at_mean(b, M, gpipe, ready, cpu, mean);
	printf("pipeline_bench: S %d %s %s M %2d: %8.0f samples/s, bubble "
	       "%.3f replay (%.3f at mean times, %.3f %s, %.3f at least "
	       "times, %.3f with the first passes at mean times), %.3f "
	       "steps (median; %.3f %s), %.3f wall, %.3f theoretical\n",
	       b->S, gpipe ? "gpipe" : "1f1b ", ready ? "ready " : "strict", M,
	       (double)b->steps * M * b->mb / (wall / 1e9), fig[1], fig[2],
	       bubble_of(b->S, ospan, obusy), ready ? "strict" : "ready-first",
	       fig[4], fig[5], fig[0], by[!ready],
	       ready ? "strict" : "ready-first", fig[3],
	       (double)(b->S - 1) / (M + b->S - 1));
	for (int s = 0; s < b->S; s++) {
		const double *r = all + s * row;

		printf("pipeline_bench:   stage %d: forward %.3f ms, backward "
		       "%.3f ms CPU per micro-batch (steps %.1f%% off the "
		       "median); allocated %d slots, %.0f KiB; peak %d in "
		       "flight: inputs %.0f KiB, activations %.0f KiB; %.1f "
		       "passes reordered per step\n",
		       s, mean[(size_t)s * 2 * M] / 1e6,
		       mean[(size_t)s * 2 * M + M] / 1e6, 100 * spread[s],
		       (int)r[5], r[6] / 1024, (int)r[1], r[2] / 1024,
		       r[3] / 1024, r[4]);
	}
	print_json(b, M, gpipe, ready, fig, all, row, cpu);
	if (M == b->timeline)
		timelines(ready, b->S, M, gpipe, cpu, mean);
out:
	free(least);
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
	size_t row = HEAD + 2 * (size_t)M * (size_t)b->steps;
	uint64_t op[2 * MAX_MICRO], busy = 0, t0, wall;
	double *mine = calloc(row, sizeof(double));
	double *all = calloc(row * (size_t)b->S, sizeof(double));
	float *x = calloc((size_t)M * b->mb * b->in, sizeof(float));
	float *y = calloc((size_t)M * b->mb * b->label, sizeof(float));
	int rc = 1;

	if (!mine || !all || !x || !y)
		goto out;
	cfg.x = x;
	cfg.y = y;
	stats.op_cpu_ns = op;
	/* Steps to warm up (buffers, connections, caches, the slots of a
	 * new schedule), then the timed ones. */
	for (int i = 0; i < b->warmup; i++)
		if (dt_nn_pipe_step(st, &cfg, &ops, &stats))
			goto out;
	if (dt_coll_barrier(b->c))
		goto out;
	t0 = dt_obs_now();
	for (int i = 0; i < b->steps; i++) {
		dt_nn_model_zero_grad(st);
		if (dt_nn_pipe_step(st, &cfg, &ops, &stats))
			goto out;
		busy += stats.busy_ns;
		reordered += (double)stats.reordered / b->steps;
		for (int j = 0; j < 2 * M; j++)
			mine[HEAD + (size_t)i * 2 * M + j] = (double)op[j];
	}
	wall = dt_obs_now() - t0;
	mine[0] = 1.0 - (double)busy / (double)wall;
	mine[1] = stats.peak_stashed;
	mine[2] = (double)stats.stash_bytes;
	mine[3] = (double)stats.act_bytes;
	mine[4] = reordered;
	mine[5] = stats.slots;
	mine[6] = (double)stats.alloc_bytes;
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

/* Both orders of one schedule and M run back to back, so that they meet
 * the same machine: run one after the other at the end of the run, a
 * minute apart, their figures differed by the machine's drift alone. */
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
		for (int M = 1; M <= max_m && rc == 0; M *= 2)
			for (int ready = 0; ready <= 1 && rc == 0; ready++) {
				if (strcmp(order, "both") != 0 &&
				    (strcmp(order, "ready") == 0) != ready)
					continue;
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
	const char *sched = "both", *order = "ready", *model = "equal";
	char spec[4096];
	bench b = {.width = 256, .mb = 16, .steps = 5, .warmup = 3};

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--schedule") == 0)
			sched = argv[i + 1];
		else if (strcmp(argv[i], "--width") == 0)
			b.width = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--micro-batch") == 0)
			b.mb = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--steps") == 0)
			b.steps = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--warmup") == 0)
			b.warmup = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--max-micro") == 0)
			max_m = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--input-pct") == 0)
			in_pct = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--timeline") == 0)
			b.timeline = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--order") == 0)
			order = argv[i + 1];
		else if (strcmp(argv[i], "--model") == 0)
			model = argv[i + 1];
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (dt_coll_init(&b.c)) {
		fprintf(stderr, "pipeline_bench: %s\n", dt_errmsg());
		return 1;
	}
	b.s = dt_coll_rank(b.c);
	b.S = dt_coll_size(b.c);
	if (b.S > MAX_STAGES || b.width < 16 || b.width > 8192 || b.mb < 1 ||
	    b.steps < 1 || b.steps > 1000 || b.warmup < 0 || b.warmup > 1000 ||
	    max_m < 1 || max_m > MAX_MICRO || in_pct < 10 || in_pct > 400 ||
	    (strcmp(model, "equal") != 0 && strcmp(model, "mlp") != 0)) {
		fprintf(stderr,
		        "pipeline_bench: at most %d stages, --width in [16, "
		        "8192], --micro-batch >= 1, --steps in [1, 1000], "
		        "--warmup in [0, 1000], --max-micro in [1, %d], "
		        "--input-pct in [10, 400], --model equal or mlp\n",
		        MAX_STAGES, MAX_MICRO);
		dt_coll_finalize(b.c);
		return 2;
	}
	if (strcmp(model, "equal") == 0) {
		b.in = 1;
		b.label = 1; /* l2 on the one output */
	} else {
		b.in = b.width * in_pct / 100;
		b.label = 1;
	}
	make_spec(spec, sizeof(spec), b.S, b.width, b.in,
	          strcmp(model, "equal") == 0);
	b.spec = spec;
	if (b.s == b.S - 1)
		printf("pipeline_bench: %s model, %d stages of 2 dense layers "
		       "of %d, micro-batches of %d, %d steps per M after %d "
		       "to warm up\n",
		       model, b.S, b.width, b.mb, b.steps, b.warmup);
	rc = run_all(&b, sched, order, max_m);
	if (dt_coll_finalize(b.c) && rc == 0)
		rc = 1;
	return rc;
}
