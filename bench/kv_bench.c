/*
 * kv_bench.c - KVStore push, pull and pushpull latency and throughput,
 * beside a plain TCP socket pair measured in the same run.
 *
 *   dtrain launch -n 1 -s 1 -- build/bench/kv_bench [--json] [--quick]
 *       [--only BYTES:KEYS] [--ops LIST] [--iters N] [--starts]
 *
 * For 4 KiB, 1 MiB and 16 MiB, with one key and with the same bytes over
 * 16 keys (batched calls), it times each operation's round trip: p50, p99
 * and throughput (10^9 payload bytes per second). The servers run
 * "sgd lr=1", so every push is added into the stored value (w -= g), as a
 * real server's update would. The baseline (rank 0 only) is a forked
 * process on a TCP socket pair doing the same exchange: send the bytes and
 * wait for a 1-byte answer (push), or send 1 byte and read the bytes back
 * (pull), both sides with TCP_NODELAY and blocking calls.
 *
 * For a profile of one shape: --only runs one size (BYTES in all, over
 * KEYS keys of BYTES/KEYS each: 16777216:16 is 16 keys of 1 MiB), --ops
 * the calls (a comma-separated list of push, pull and pushpull), --iters
 * the timed calls, and --starts prints each op's first timed start and
 * last end on the host's monotonic clock, in seconds (the clock of perf
 * record -k CLOCK_MONOTONIC: perf report --time START,END keeps the
 * samples of the timed calls).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_tcp.h"
#include "dtrain/kv.h"

/* What main's options chose. */
typedef struct bench_opts {
	int json, quick, starts, iters;
	size_t only_bytes; /* 0: every size */
	int only_keys;
	int ops[3]; /* push, pull, pushpull: 1 to run */
} bench_opts;

static int
usage(void)
{
	fprintf(stderr,
	        "usage: kv_bench [--json] [--quick] [--only BYTES:KEYS] "
	        "[--ops LIST] [--iters N] [--starts]\n");
	return 2;
}

static int
parse_args(int argc, char **argv, bench_opts *bo)
{
	*bo = (bench_opts){.ops = {1, 1, 1}};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;

		if (strcmp(a, "--json") == 0)
			bo->json = 1;
		else if (strcmp(a, "--quick") == 0)
			bo->quick = 1;
		else if (strcmp(a, "--starts") == 0)
			bo->starts = 1;
		else if (strcmp(a, "--iters") == 0 && v && ++i)
			bo->iters = atoi(v);
		else if (strcmp(a, "--ops") == 0 && v && ++i) {
			if (parse_ops(v, bo->ops))
				return usage();
		} else if (strcmp(a, "--only") == 0 && v && ++i) {
			bo->only_bytes = (size_t)strtoull(v, &end, 10);
			bo->only_keys = *end == ':' ? atoi(end + 1) : 0;
			if ((bo->only_keys != 1 && bo->only_keys != 16) ||
			    bo->only_bytes < 64 ||
			    bo->only_bytes > (1ul << 30) ||
			    bo->only_bytes % (64ul * (size_t)bo->only_keys))
				return usage();
		} else
			return usage();
	}
	if (bo->iters < 0 || bo->iters > 1000000)
		return usage();
	return 0;
}

int
main(int argc, char **argv)
{
	const size_t all_sizes[] = {4096, 1 << 20, 16 << 20};
	const char *ops[] = {"push", "pull", "pushpull"};
	bench_opts bo;
	dt_kv *kv;

	if (parse_args(argc, argv, &bo))
		return 2;
	int json = bo.json;
	const size_t *sizes = bo.only_bytes ? &bo.only_bytes : all_sizes;
	size_t nsizes = bo.only_bytes ? 1 : 3;
	if (dt_kv_create("dist_sync", &kv) != DT_OK ||
	    dt_kv_set_optimizer(kv, "sgd", "lr=1") != DT_OK) {
		fprintf(stderr, "kv_bench: %s\n", dt_errmsg());
		return 1;
	}
	int rank = dt_kv_rank(kv);
	if (rank == 0 && !json)
		printf("%-9s %5s %9s %9s %9s %8s | %9s %8s | %6s %6s\n", "op",
		       "keys", "bytes", "p50_us", "p99_us", "GB/s", "tcp_p50",
		       "tcp_GB/s", "p50x", "bw_x");
	dt_key next_key = 0;
	for (size_t si = 0; si < nsizes; si++) {
		size_t bytes = sizes[si], n = bytes / sizeof(float);
		int iters = bytes <= 4096        ? 3000
		            : bytes <= (1 << 20) ? 300
		                                 : 40;
		if (bo.quick)
			iters = iters / 10 + 3;
		if (bo.iters)
			iters = bo.iters;
		for (int nkeys = 1; nkeys <= 16; nkeys *= 16) {
			if (bo.only_keys && nkeys != bo.only_keys)
				continue;
			size_t per = n / (size_t)nkeys;
			float *val = calloc(n, sizeof(float));
			float *out = calloc(n, sizeof(float));
			dt_key keys[16];
			const float *vals[16];
			float *outs[16];
			size_t lens[16];
			double *t = malloc(sizeof(double) * (size_t)iters);

			for (int k = 0; k < nkeys; k++) {
				keys[k] = next_key++;
				vals[k] = val + (size_t)k * per;
				outs[k] = out + (size_t)k * per;
				lens[k] = per;
			}
			if (dt_kv_init_many(kv, (size_t)nkeys, keys, vals,
			                    lens) != DT_OK) {
				fprintf(stderr, "kv_bench: %s\n", dt_errmsg());
				return 1;
			}
			for (int o = 0; o < 3; o++) {
				double first = 0, last = 0;

				if (!bo.ops[o])
					continue;
				dt_kv_barrier(kv);
				for (int i = -iters / 10 - 1; i < iters; i++) {
					double t0 = now_us();
					dt_err err =
					    o == 0 ? dt_kv_push_many(
					                 kv, (size_t)nkeys,
					                 keys, vals, lens)
					    : o == 1
					        ? dt_kv_pull_many(
					              kv, (size_t)nkeys, keys,
					              outs, lens)
					        : dt_kv_pushpull_many(
					              kv, (size_t)nkeys, keys,
					              vals, outs, lens);
					if (err) {
						fprintf(stderr,
						        "kv_bench: %s\n",
						        dt_errmsg());
						return 1;
					}
					if (i == 0)
						first = t0;
					if (i >= 0)
						t[i] = (last = now_us()) - t0;
				}
				if (rank != 0)
					continue;
				if (bo.starts)
					printf("{\"window\":\"%s\",\"keys\":%d,"
					       "\"bytes\":%zu,\"calls\":%d,"
					       "\"start_s\":%.6f,\"end_s\":%."
					       "6f}\n",
					       ops[o], nkeys, per * nkeys * 4,
					       iters, first / 1e6, last / 1e6);
				result r = summarise(t, iters, per * nkeys * 4);
				result b = tcp_baseline(o == 1 ? 1 : 0,
				                        per * nkeys * 4, iters);
				if (json)
					printf("{\"op\":\"%s\",\"keys\":%d,"
					       "\"bytes\":%zu,\"p50_us\":%.2f,"
					       "\"p99_us\":%.2f,\"gbps\":%.3f,"
					       "\"tcp_p50_us\":%.2f,"
					       "\"tcp_gbps\":%.3f}\n",
					       ops[o], nkeys, per * nkeys * 4,
					       r.p50, r.p99, r.gbps, b.p50,
					       b.gbps);
				else
					printf(
					    "%-9s %5d %9zu %9.1f %9.1f %8.3f | "
					    "%9.1f %8.3f | %6.2f %6.2f\n",
					    ops[o], nkeys, per * nkeys * 4,
					    r.p50, r.p99, r.gbps, b.p50, b.gbps,
					    r.p50 / b.p50, r.gbps / b.gbps);
				fflush(stdout);
			}
			free(val);
			free(out);
			free(t);
		}
	}
	if (dt_kv_destroy(kv) != DT_OK) {
		fprintf(stderr, "kv_bench: %s\n", dt_errmsg());
		return 1;
	}
	return 0;
}
