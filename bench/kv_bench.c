/*
 * kv_bench.c - KVStore push, pull and pushpull latency and throughput,
 * beside a plain TCP socket pair measured in the same run.
 *
 *   dtrain launch -n 1 -s 1 -- build/bench/kv_bench [--json] [--quick]
 *
 * For 4 KiB, 1 MiB and 16 MiB, with one key and with the same bytes over
 * 16 keys (batched calls), it times each operation's round trip: p50, p99
 * and throughput (10^9 payload bytes per second). The servers run
 * "sgd lr=1", so every push is added into the stored value (w -= g), as a
 * real server's update would. The baseline (rank 0 only) is a forked
 * process on a TCP socket pair doing the same exchange: send the bytes and
 * wait for a 1-byte answer (push), or send 1 byte and read the bytes back
 * (pull), both sides with TCP_NODELAY and blocking calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_tcp.h"
#include "dtrain/kv.h"

int
main(int argc, char **argv)
{
	int json = 0, quick = 0;
	const size_t sizes[] = {4096, 1 << 20, 16 << 20};
	const char *ops[] = {"push", "pull", "pushpull"};
	dt_kv *kv;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--quick") == 0)
			quick = 1;
		else {
			fprintf(stderr, "usage: kv_bench [--json] [--quick]\n");
			return 2;
		}
	}
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
	for (size_t si = 0; si < sizeof(sizes) / sizeof(*sizes); si++) {
		size_t bytes = sizes[si], n = bytes / sizeof(float);
		int iters = bytes <= 4096        ? 3000
		            : bytes <= (1 << 20) ? 300
		                                 : 40;
		if (quick)
			iters = iters / 10 + 3;
		for (int nkeys = 1; nkeys <= 16; nkeys *= 16) {
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
					if (i >= 0)
						t[i] = now_us() - t0;
				}
				if (rank != 0)
					continue;
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
