/*
 * train_dist_bench.c - the step time of data-parallel LeNet training split
 * into compute and communication, under dtrain launch:
 *
 *   dtrain launch -n 2 -s 1 -- build/bench/train_dist_bench [--json]
 *        [--kvstore dist_sync] [--batch N] [--steps N] [--model NAME]
 *
 * Each worker runs forward+backward on its batch of synthetic images and
 * pushes one key per parameter tensor, pulling the new weights back, with
 * Adam on the servers. By default each layer's push-pull starts as soon as
 * backward has finished that layer (dt_nn_model_set_grad_hook), so it
 * overlaps the rest of the backward pass; --no-overlap pushes everything
 * after backward. compute is forward+backward (including starting the
 * sends); communication is the time the worker then waits for the last
 * pulled byte, including waiting for the other workers of the round.
 * Rank 0 prints the per-step means; --json prints one object with model,
 * overlap, samples_per_s, gflops, compute_ms, comm_ms, comm_frac.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/kv.h"
#include "dtrain/nn.h"

typedef struct overlap {
	dt_kv *kv;
	dt_key *keys;
	float **gv, **pv;
	size_t *lens;
	dt_kv_req *reqs;
	int nreqs;
	dt_err err;
} overlap;

/* A layer's gradients are final: start its push-pull now. */
static void
on_grads(void *arg, int first, int count)
{
	overlap *o = arg;

	for (int i = first; i < first + count && o->err == DT_OK; i++)
		o->err =
		    dt_kv_pushpull_async(o->kv, o->keys[i], o->gv[i], o->pv[i],
		                         o->lens[i], &o->reqs[o->nreqs++]);
}

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int
main(int argc, char **argv)
{
	const char *type = "dist_sync", *model = "lenet";
	int batch = 64, steps = 150, warmup = 10, json = 0, overlapped = 1;
	dt_kv *kv;
	dt_nn_model *m;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--kvstore") == 0 && i + 1 < argc)
			type = argv[++i];
		else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
			model = argv[++i];
		else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
			batch = atoi(argv[++i]);
		else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
			steps = atoi(argv[++i]);
		else if (strcmp(argv[i], "--no-overlap") == 0)
			overlapped = 0;
		else {
			fprintf(stderr, "usage: train_dist_bench [--json] "
			                "[--kvstore TYPE] [--model NAME] "
			                "[--batch N] [--steps N] "
			                "[--no-overlap]\n");
			return 2;
		}
	}
	if (batch < 1 || steps < 1) {
		fprintf(stderr, "train_dist_bench: --batch and --steps must be "
		                ">= 1\n");
		return 2;
	}
	if (dt_kv_create(type, &kv) != DT_OK ||
	    dt_nn_model_create(model, 1, &m) != DT_OK)
		goto fail;
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	int nt = dt_nn_model_num_tensors(m);
	size_t in = dt_nn_model_input_size(m), np = dt_nn_model_num_params(m);
	float *x = malloc(sizeof(float) * in * (size_t)batch);
	float *y = malloc(sizeof(float) * (size_t)batch);
	dt_key *keys = calloc((size_t)nt, sizeof(*keys));
	float **pv = calloc((size_t)nt, sizeof(*pv)),
	      **gv = calloc((size_t)nt, sizeof(*gv));
	size_t *lens = calloc((size_t)nt, sizeof(*lens));
	char params[128];

	if (!x || !y || !keys || !pv || !gv || !lens) {
		fprintf(stderr, "train_dist_bench: out of memory\n");
		return 1;
	}
	srand(7 + (unsigned)rank);
	for (size_t i = 0; i < in * (size_t)batch; i++)
		x[i] = (float)rand() / (float)RAND_MAX;
	for (int i = 0; i < batch; i++)
		y[i] = (float)(rand() % 10);
	for (int i = 0; i < nt; i++) {
		const dt_nn_tensor *t = dt_nn_model_tensor(m, i);
		keys[i] = (dt_key)i;
		pv[i] = dt_nn_model_params(m) + t->offset;
		gv[i] = dt_nn_model_grads(m) + t->offset;
		lens[i] = t->size;
	}
	snprintf(params, sizeof(params), "lr=0.001,rescale_grad=%.17g",
	         1.0 / (double)(batch * nw));
	if (dt_kv_set_optimizer(kv, "adam", params) != DT_OK ||
	    dt_kv_init_many(kv, (size_t)nt, keys, (const float *const *)pv,
	                    lens) != DT_OK)
		goto fail;

	overlap ov = {kv, keys, gv,
	              pv, lens, calloc((size_t)nt, sizeof(dt_kv_req)),
	              0,  DT_OK};
	if (ov.reqs == NULL) {
		fprintf(stderr, "train_dist_bench: out of memory\n");
		return 1;
	}
	if (overlapped)
		dt_nn_model_set_grad_hook(m, on_grads, &ov);

	double tcomp = 0, tcomm = 0, t0 = 0;
	for (int s = -warmup; s < steps; s++) {
		if (s == 0) {
			dt_kv_barrier(kv);
			tcomp = tcomm = 0;
			t0 = now();
		}
		double a = now();
		dt_nn_model_zero_grad(m);
		ov.nreqs = 0;
		if (dt_nn_forward_backward(m, x, y, batch, NULL, NULL) != DT_OK)
			goto fail;
		double b = now();
		if (overlapped) {
			dt_err err = ov.err;

			for (int i = 0; i < ov.nreqs; i++) {
				dt_err e = dt_kv_wait(kv, ov.reqs[i]);
				if (err == DT_OK)
					err = e;
			}
			if (err != DT_OK)
				goto fail;
		} else if (dt_kv_pushpull_many(kv, (size_t)nt, keys,
		                               (const float *const *)gv, pv,
		                               lens) != DT_OK) {
			goto fail;
		}
		double c = now();
		tcomp += b - a;
		tcomm += c - b;
	}
	double total = now() - t0, fwd, bwd;
	dt_nn_model_flops(m, &fwd, &bwd);
	double sps = (double)batch * steps / total;
	double gflops = sps * (fwd + bwd) * 1e-9;
	if (rank == 0) {
		if (json)
			printf("{\"model\":\"%s\",\"kvstore\":\"%s\","
			       "\"overlap\":%s,\"workers\":%d,"
			       "\"batch\":%d,\"params\":%zu,\"samples_per_s\":%"
			       ".1f,"
			       "\"gflops\":%.2f,\"compute_ms\":%.3f,"
			       "\"comm_ms\":%.3f,\"comm_frac\":%.3f}\n",
			       model, type, overlapped ? "true" : "false", nw,
			       batch, np, sps, gflops, tcomp / steps * 1e3,
			       tcomm / steps * 1e3, tcomm / (tcomp + tcomm));
		else
			printf("%s %s, %d workers x batch %d, %zu params, %s: "
			       "%.1f samples/s per worker, %.2f GFLOP/s\n"
			       "step %.3f ms = compute %.3f ms + communication "
			       "%.3f ms (%.1f%%)\n",
			       model, type, nw, batch, np,
			       overlapped ? "push per layer during backward"
			                  : "push after backward",
			       sps, gflops, (tcomp + tcomm) / steps * 1e3,
			       tcomp / steps * 1e3, tcomm / steps * 1e3,
			       100 * tcomm / (tcomp + tcomm));
	}
	dt_nn_model_destroy(m);
	free(x);
	free(y);
	free(keys);
	free(pv);
	free(gv);
	free(lens);
	free(ov.reqs);
	if (dt_kv_destroy(kv) != DT_OK)
		goto fail_nokv;
	return 0;
fail:
	fprintf(stderr, "train_dist_bench: %s\n", dt_errmsg());
	return 1;
fail_nokv:
	fprintf(stderr, "train_dist_bench: %s\n", dt_errmsg());
	return 1;
}
