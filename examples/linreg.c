/*
 * linreg.c - seed 000's example: learn f(x) = 5x + 2 from
 * X = 0, 0.001, ..., 99.999 through a KVStore.
 *
 *   build/examples/linreg --kvstore local --batch-size 100
 *   dtrain launch -n 2 -s 2 -- build/examples/linreg --kvstore dist_sync \
 *       --metrics linreg.jsonl
 *
 * w and b are two keys (so with two servers each lives on its own server);
 * the optimizer runs in the store (update_on_kvstore): every step each
 * worker pushes the summed gradient of its slice of the global batch and
 * pulls the new weights. The data order is the same seeded permutation on
 * every worker and worker r takes slice r of each global batch of
 * batch-size x num_workers samples, so 2 workers at batch 50 compute what
 * 1 process at batch 100 computes, and every worker runs the same number
 * of batches. With --metrics FILE, rank 0 also writes each progress line
 * and each epoch's end as a JSON line (metric "mae"; docs/observability.md).
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/kv.h"
#include "dtrain/nn.h"
#include "dtrain/obs.h"

#define N 100000

static uint64_t
splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
usage(FILE *f)
{
	fputs("usage: linreg [--kvstore local|dist_sync|dist_async] "
	      "[--batch-size N] [--epochs N]\n"
	      "              [--lr X] [--momentum X] [--seed N] "
	      "[--disp-batches N]\n"
	      "              [--metrics FILE] [--run-label L] "
	      "[--push-then-pull]\n",
	      f);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"kvstore", required_argument, 0, 'k'},
	    {"batch-size", required_argument, 0, 'b'},
	    {"epochs", required_argument, 0, 'e'},
	    {"lr", required_argument, 0, 'l'},
	    {"momentum", required_argument, 0, 'm'},
	    {"seed", required_argument, 0, 's'},
	    {"disp-batches", required_argument, 0, 'd'},
	    {"metrics", required_argument, 0, 'T'},
	    {"run-label", required_argument, 0, 'N'},
	    {"push-then-pull", no_argument, 0, 'P'},
	    {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	const char *type = "local", *metrics = NULL, *label = NULL;
	long batch = 100, epochs = 5, seed = 42, disp = 250;
	double lr = 2e-4, momentum = 0.98;
	char *end;
	int c, two_calls = 0;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'k':
			type = optarg;
			break;
		case 'b':
			batch = strtol(optarg, &end, 10);
			break;
		case 'e':
			epochs = strtol(optarg, &end, 10);
			break;
		case 'l':
			lr = strtod(optarg, &end);
			break;
		case 'm':
			momentum = strtod(optarg, &end);
			break;
		case 's':
			seed = strtol(optarg, &end, 10);
			break;
		case 'd':
			disp = strtol(optarg, &end, 10);
			break;
		case 'T':
			metrics = optarg;
			break;
		case 'N':
			label = optarg;
			break;
		case 'P':
			two_calls = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		if (c != 'k' && c != 'T' && c != 'N' && c != 'P' &&
		    (*end != '\0' || end == optarg)) {
			fprintf(stderr, "linreg: bad value '%s' for --%s\n",
			        optarg,
			        opts[c == 'b'   ? 1
			             : c == 'e' ? 2
			             : c == 'l' ? 3
			             : c == 'm' ? 4
			             : c == 's' ? 5
			                        : 6]
			            .name);
			return 2;
		}
	}
	if (batch < 1 || epochs < 1 || disp < 1 || !(lr > 0)) {
		fprintf(stderr, "linreg: --batch-size, --epochs and "
		                "--disp-batches must be >= 1 and --lr > 0\n");
		return 2;
	}

	dt_kv *kv;
	if (dt_kv_create(type, &kv) != DT_OK) {
		fprintf(stderr, "linreg: %s\n", dt_errmsg());
		return 1;
	}
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	long global = batch * nw, nbatches = N / global;
	float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
	uint32_t *perm = malloc(N * sizeof(uint32_t));
	if (!x || !y || !perm) {
		fprintf(stderr, "linreg: out of memory\n");
		free(x);
		free(y);
		free(perm);
		dt_kv_destroy(kv);
		return 1;
	}
	if (nbatches < 1) {
		fprintf(stderr, "linreg: global batch %ld exceeds %d samples\n",
		        global, N);
		free(x);
		free(y);
		free(perm);
		dt_kv_destroy(kv);
		return 2;
	}

	for (int i = 0; i < N; i++) {
		x[i] = (float)(i * 0.001);
		y[i] = 5.0f * x[i] + 2.0f;
	}

	/* MXNet's rescale_grad = 1 / global batch, optimizer in the store. */
	char params[128];
	snprintf(params, sizeof(params), "lr=%g,momentum=%g,rescale_grad=%.17g",
	         lr, momentum, 1.0 / (double)global);
	float w = 0, b = 0, gw, gb;
	dt_metrics_log *mlog = NULL;
	dt_key kw = 0, kb = 1;
	/* A worker started in a lost one's place (launch --restart) resumes
	 * at the step its predecessor reached; any other at step 0. */
	dt_key keys[2] = {kw, kb};
	size_t lens[2] = {1, 1};
	uint64_t step = 0;
	if (dt_kv_set_optimizer(kv, "sgd", params) ||
	    dt_kv_init(kv, kw, &w, 1) || dt_kv_init(kv, kb, &b, 1) ||
	    dt_kv_resume(kv, 2, keys, lens, &step) ||
	    dt_kv_pull(kv, kw, &w, 1) || dt_kv_pull(kv, kb, &b, 1))
		goto fail;
	if (dt_kv_rejoined(kv)) {
		fprintf(stderr,
		        "linreg: worker %d took a lost worker's place; "
		        "resuming at step %llu\n",
		        rank, (unsigned long long)step);
		fflush(stderr);
	}

	if (metrics && rank == 0) {
		char name[65];

		snprintf(name, sizeof(name), "%s %dw", type, nw);
		if (dt_metrics_open(metrics, label ? label : name, &mlog))
			goto fail;
	}

	/* (the epoch and batch of that step) */
	long ep0 = (long)(step / (uint64_t)nbatches);
	long bi0 = (long)(step % (uint64_t)nbatches);
	for (long ep = ep0; ep < epochs; ep++) {
		uint64_t st = (uint64_t)seed * 1000003u + (uint64_t)ep;
		double abs_err = 0, t0 = now(), tlast = t0, epoch_mae = 0;
		double sq_err = 0, epoch_mse = 0, tcomm = 0;
		long seen = 0, last_batch = 0;

		for (int i = 0; i < N; i++)
			perm[i] = (uint32_t)i;
		for (int i = N - 1; i > 0; i--) {
			uint32_t j =
			    (uint32_t)(splitmix64(&st) % (uint64_t)(i + 1));
			uint32_t t = perm[i];
			perm[i] = perm[j];
			perm[j] = t;
		}
		for (long bi = ep == ep0 ? bi0 : 0; bi < nbatches; bi++) {
			const uint32_t *idx = perm + bi * global + rank * batch;
			double sw = 0, sb = 0;
			uint64_t t_step = dt_obs_now(), t_comm;

			for (long k = 0; k < batch; k++) {
				double p = (double)w * x[idx[k]] + b;
				double d = p - y[idx[k]];
				sw += d * x[idx[k]];
				sb += d;
				abs_err += fabs(d);
				epoch_mae += fabs(d);
				sq_err += d * d;
				epoch_mse += d * d;
			}
			seen += batch;
			gw = (float)sw;
			gb = (float)sb;
			dt_kv_req r1, r2;
			double tc = now();
			t_comm = dt_obs_now();
			if (two_calls) {
				/* MXNet's kv.push then kv.pull, issued
				 * together: each pull sees the round of this
				 * worker's push before it. */
				dt_kv_req r3, r4;

				if (dt_kv_push_async(kv, kw, &gw, 1, &r1) ||
				    dt_kv_push_async(kv, kb, &gb, 1, &r2) ||
				    dt_kv_pull_async(kv, kw, &w, 1, &r3) ||
				    dt_kv_pull_async(kv, kb, &b, 1, &r4) ||
				    dt_kv_wait(kv, r1) || dt_kv_wait(kv, r2) ||
				    dt_kv_wait(kv, r3) || dt_kv_wait(kv, r4))
					goto fail;
			} else if (dt_kv_pushpull_async(kv, kw, &gw, &w, 1,
			                                &r1) ||
			           dt_kv_pushpull_async(kv, kb, &gb, &b, 1,
			                                &r2) ||
			           dt_kv_wait(kv, r1) || dt_kv_wait(kv, r2))
				goto fail;
			tcomm += now() - tc;
			dt_obs_phase(DT_PHASE_COMM, t_comm);
			dt_obs_phase(DT_PHASE_STEP, t_step);
			if ((bi + 1) % disp == 0 && rank == 0) {
				double t = now(),
				       n = (double)((bi + 1 - last_batch) *
				                    batch);
				double speed = (double)(bi + 1 - last_batch) *
				               (double)batch / (t - tlast);
				printf("Epoch[%ld] Batch [%ld-%ld] Speed: %.2f "
				       "samples/sec mae=%.6f\n",
				       ep, last_batch, bi + 1, speed,
				       abs_err / n);
				fflush(stdout);
				dt_metrics_rec r = {
				    (int)ep,     bi + 1, speed,      "mae",
				    abs_err / n, NAN,    sq_err / n, NAN,
				    tcomm,       -1};
				if (mlog && dt_metrics_write(mlog, &r))
					goto fail;
				tlast = t;
				last_batch = bi + 1;
				abs_err = sq_err = 0;
			}
		}
		if (rank == 0) {
			double t = now() - t0;

			printf("Epoch[%ld] Train-mae=%.6f Time cost=%.3f\n", ep,
			       epoch_mae / (double)seen, t);
			fflush(stdout);
			dt_metrics_rec r = {(int)ep,
			                    -1,
			                    t > 0 ? (double)seen / t : -1,
			                    "mae",
			                    epoch_mae / (double)seen,
			                    NAN,
			                    epoch_mse / (double)seen,
			                    NAN,
			                    tcomm,
			                    -1};
			if (mlog && dt_metrics_write(mlog, &r))
				goto fail;
		}
	}
	printf("w=%.9g b=%.9g\n", w, b);
	free(x);
	free(y);
	free(perm);
	if (dt_metrics_close(mlog) != DT_OK) {
		fprintf(stderr, "linreg: %s\n", dt_errmsg());
		dt_kv_destroy(kv);
		return 1;
	}
	if (dt_kv_destroy(kv) != DT_OK) {
		fprintf(stderr, "linreg: %s\n", dt_errmsg());
		return 1;
	}
	return 0;
fail:
	fprintf(stderr, "linreg: %s\n", dt_errmsg());
	free(x);
	free(y);
	free(perm);
	dt_metrics_close(mlog);
	dt_kv_destroy(kv);
	return 1;
}
