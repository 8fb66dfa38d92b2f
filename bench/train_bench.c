/*
 * train_bench.c - training throughput of one thread against OpenBLAS sgemm.
 *
 * For each model and batch size it times zero_grad + forward + loss +
 * backward on random data (one thread: openblas_set_num_threads(1)) and
 * reports samples/s and the GFLOP/s achieved, counting the FLOPs of the
 * model's matrix products (2*M*N*K per gemm, forward and backward, as
 * dt_nn_model_flops() counts them). Beside it, measured in the same run:
 *   sgemm_shapes  cblas_sgemm alone over exactly the gemm shapes one
 *                 training step of LeNet issues at that batch size (what a
 *                 perfect im2col implementation would reach)
 *   sgemm_peak    cblas_sgemm on 1024 x 1024 x 1024
 * The SPEC target is model GFLOP/s >= 0.5 x sgemm_peak.
 *
 * The machine may be shared (CI, parallel builds), so each figure is the
 * best of several short rounds, and the rounds of the model and of the two
 * sgemm references are interleaved so that all three see the same load.
 *
 * usage: train_bench [--json] [--model NAME] [--batch N] [--rounds R]
 *                    [--seconds S]   (S: length of one round, default 0.2)
 * Default: lenet and mlp at batch 32, 64 and 128, table output. --json
 * prints one object per line with model, batch, samples_per_s, gflops,
 * sgemm_shapes_gflops, sgemm_peak_gflops, ratio_peak.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "dtrain/nn.h"

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *
rand_floats(size_t n, unsigned *seed)
{
	float *a = malloc(sizeof(float) * n);

	if (a == NULL) {
		fprintf(stderr, "train_bench: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++) {
		*seed = *seed * 1103515245u + 12345u;
		a[i] = (float)((*seed >> 8) & 0xffff) / 65536.0f;
	}
	return a;
}

/* One gemm of a training step: C (M, N) = op(A) op(B), K inner. */
typedef struct gemm {
	int ta, tb, m, n, k;
} gemm;

/* The gemms of one LeNet training step at batch B (see layers.c). */
static int
lenet_gemms(int B, gemm *g)
{
	int n = 0;

	g[n++] = (gemm){0, 0, 20, B * 576, 25}; /* conv0 forward */
	g[n++] = (gemm){0, 0, 50, B * 64, 500}; /* conv1 forward */
	g[n++] = (gemm){0, 1, B, 500, 800};     /* dense0 forward */
	g[n++] = (gemm){0, 1, B, 10, 500};      /* dense1 forward */
	g[n++] = (gemm){1, 0, 10, 500, B};      /* dense1 dW */
	g[n++] = (gemm){0, 0, B, 500, 10};      /* dense1 dx */
	g[n++] = (gemm){1, 0, 500, 800, B};     /* dense0 dW */
	g[n++] = (gemm){0, 0, B, 800, 500};     /* dense0 dx */
	g[n++] = (gemm){0, 1, 50, 500, B * 64}; /* conv1 dW */
	g[n++] = (gemm){1, 0, 500, B * 64, 50}; /* conv1 dcol */
	g[n++] = (gemm){0, 1, 20, 25, B * 576}; /* conv0 dW */
	return n;
}

static void
run_gemm(const gemm *g, const float *a, const float *b, float *c)
{
	cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
	            g->tb ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, 1.0f,
	            a, g->ta ? g->m : g->k, b, g->tb ? g->k : g->n, 0.0f, c,
	            g->n);
}

/* GFLOP/s of running the gemms back to back for about `seconds`. */
static double
time_gemms(const gemm *g, int ng, double seconds)
{
	size_t big = 0;
	unsigned seed = 1;
	float *a, *b, *c;
	double flops = 0, t0, t;
	long iters = 0;

	for (int i = 0; i < ng; i++) {
		size_t sa = (size_t)g[i].m * g[i].k,
		       sb = (size_t)g[i].k * g[i].n;
		size_t sc = (size_t)g[i].m * g[i].n;

		big = sa > big ? sa : big;
		big = sb > big ? sb : big;
		big = sc > big ? sc : big;
		flops += 2.0 * g[i].m * g[i].n * (double)g[i].k;
	}
	a = rand_floats(big, &seed);
	b = rand_floats(big, &seed);
	c = rand_floats(big, &seed);
	for (int i = 0; i < ng; i++) /* warm up */
		run_gemm(&g[i], a, b, c);
	t0 = now();
	do {
		for (int i = 0; i < ng; i++)
			run_gemm(&g[i], a, b, c);
		iters++;
		t = now() - t0;
	} while (t < seconds);
	free(a);
	free(b);
	free(c);
	return flops * (double)iters / t * 1e-9;
}

/* A model with its data, ready to time. */
typedef struct bench {
	dt_nn_model *m;
	float *x, *y;
	int B;
	double flops; /* per sample, forward + backward */
} bench;

static int
bench_init(bench *b, const char *name, int B)
{
	unsigned seed = 7;
	double fwd, bwd;
	size_t out;

	memset(b, 0, sizeof(*b));
	if (dt_nn_model_create(name, 1, &b->m)) {
		fprintf(stderr, "train_bench: %s\n", dt_errmsg());
		return -1;
	}
	b->B = B;
	b->x = rand_floats((size_t)B * dt_nn_model_input_size(b->m), &seed);
	b->y = rand_floats((size_t)B * dt_nn_model_label_size(b->m), &seed);
	out = dt_nn_model_output_size(b->m);
	if (dt_nn_model_label_size(b->m) == 1 && out > 1)
		for (int i = 0; i < B; i++)
			b->y[i] = (float)(i % (int)out);
	dt_nn_model_flops(b->m, &fwd, &bwd);
	b->flops = fwd + bwd;
	return 0;
}

static void
bench_fini(bench *b)
{
	dt_nn_model_destroy(b->m);
	free(b->x);
	free(b->y);
}

/* Samples/s of zero_grad + forward_backward over about `seconds`. */
static double
bench_round(bench *b, double seconds)
{
	double t0, t;
	long iters = 0;

	dt_nn_model_zero_grad(b->m); /* warm up, size the buffers */
	if (dt_nn_forward_backward(b->m, b->x, b->y, b->B, NULL, NULL)) {
		fprintf(stderr, "train_bench: %s\n", dt_errmsg());
		return -1;
	}
	t0 = now();
	do {
		dt_nn_model_zero_grad(b->m);
		dt_nn_forward_backward(b->m, b->x, b->y, b->B, NULL, NULL);
		iters++;
		t = now() - t0;
	} while (t < seconds);
	return (double)b->B * (double)iters / t;
}

int
main(int argc, char **argv)
{
	const char *models[4] = {"lenet", "mlp"};
	int nmodels = 2, batches[4] = {32, 64, 128}, nbatches = 3, json = 0;
	int rounds = 8;
	double seconds = 0.2;
	gemm sq = {0, 0, 1024, 1024, 1024};

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = 1;
		} else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
			models[0] = argv[++i];
			nmodels = 1;
		} else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
			batches[0] = atoi(argv[++i]);
			nbatches = 1;
		} else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
			rounds = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
			seconds = atof(argv[++i]);
		} else {
			fprintf(stderr,
			        "usage: train_bench [--json] [--model NAME] "
			        "[--batch N] [--rounds R] [--seconds S]\n");
			return 2;
		}
	}
	if (batches[0] <= 0 || rounds <= 0 || !(seconds > 0)) {
		fprintf(stderr, "train_bench: batch, rounds and seconds must "
		                "be positive\n");
		return 2;
	}
	openblas_set_num_threads(1);
	if (!json)
		printf("%-8s %6s %12s %9s %14s %12s %10s %10s\n", "model",
		       "batch", "samples/s", "GFLOP/s", "sgemm_shapes",
		       "sgemm_peak", "vs_shapes", "vs_peak");
	for (int mi = 0; mi < nmodels; mi++) {
		for (int bi = 0; bi < nbatches; bi++) {
			int B = batches[bi], ng = 0;
			double best = 0, shapes = 0, peak = 0, gf;
			gemm g[16];
			bench b;

			if (bench_init(&b, models[mi], B))
				return 1;
			if (strcmp(models[mi], "lenet") == 0)
				ng = lenet_gemms(B, g);
			for (int r = 0; r < rounds; r++) {
				double v = bench_round(&b, seconds);

				if (v < 0)
					return 1;
				best = v > best ? v : best;
				if (ng) {
					v = time_gemms(g, ng, seconds);
					shapes = v > shapes ? v : shapes;
				}
				v = time_gemms(&sq, 1, seconds);
				peak = v > peak ? v : peak;
			}
			gf = b.flops * best * 1e-9;
			if (json) {
				printf("{\"model\":\"%s\",\"batch\":%d,"
				       "\"threads\":1,\"samples_per_s\":%.1f,"
				       "\"gflops\":%.2f,"
				       "\"sgemm_shapes_gflops\":%.2f,"
				       "\"sgemm_peak_gflops\":%.2f,"
				       "\"ratio_peak\":%.3f}\n",
				       models[mi], B, best, gf, shapes, peak,
				       gf / peak);
			} else {
				char sh[32] = "-", vs[32] = "-";

				if (shapes > 0) {
					snprintf(sh, sizeof(sh), "%.1f",
					         shapes);
					snprintf(vs, sizeof(vs), "%.2f",
					         gf / shapes);
				}
				printf("%-8s %6d %12.1f %9.1f %14s %12.1f %10s "
				       "%10.2f\n",
				       models[mi], B, best, gf, sh, peak, vs,
				       gf / peak);
			}
			fflush(stdout);
			bench_fini(&b);
		}
	}
	return 0;
}
