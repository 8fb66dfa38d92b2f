/*
 * coll_bench.c - bandwidth and latency of dtrain's collectives, in the
 * manner of nccl-tests: for message sizes from 4 KiB to 64 MiB (doubling),
 * the mean time of one operation (the slowest rank's), the algorithm
 * bandwidth algbw = bytes / time and the bus bandwidth
 *   busbw = algbw * 2(n-1)/n   allreduce
 *         = algbw * (n-1)/n    allgather, reduce_scatter
 *         = algbw              broadcast
 * which compares with the link speed whatever the number of ranks.
 * bytes is the size of the largest buffer: the allreduce's, the
 * allgather's output and the reduce-scatter's input (float32 elements).
 *
 * Run it under the launcher, one process per rank:
 *   dtrain launch -n 2 -s 0 -- build/bench/coll_bench [--json]
 * bench/coll_bench_mpi.c prints the same for OpenMPI; bench/run_coll.sh
 * runs both and prints the ratios.
 *
 * Options: --op allreduce|allgather|reduce_scatter|broadcast|all
 * (default allreduce), --min-bytes N, --max-bytes N, --iters N (default:
 * chosen per size), --json (one object per line, rank 0 only),
 * --warmup-s S (default 0.3: seconds of calls before the first size; 0
 * makes the number of calls exact, for counting events per call),
 * --compression fp16|2bit|1bit (the allreduce is then the distributed
 * optimizer's compressed average of the float32 buffer, in place, encoding
 * and decoding included; bytes and bandwidths stay those of the float32
 * buffer: an effective bandwidth).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dtrain/coll.h"

#include "coll_bench_common.h"

static int compressed, in_place;

static dt_err
run_once(dt_coll *c, int op, float *a, float *b, size_t count)
{
	int n = dt_coll_size(c);

	switch (op) {
	case 0:
		if (compressed)
			return dt_coll_dist_opt_average(c, b, count);
		return dt_coll_allreduce(c, in_place ? DT_COLL_IN_PLACE : a, b,
		                         count, DT_FLOAT32, DT_COLL_SUM);
	case 1:
		return dt_coll_allgather(c, a, b, count / (size_t)n,
		                         DT_FLOAT32);
	case 2:
		return dt_coll_reduce_scatter(c, a, b, count / (size_t)n,
		                              DT_FLOAT32, DT_COLL_SUM);
	case 3:
		return dt_coll_broadcast(c, a, count, DT_FLOAT32, 0);
	}
	return DT_EINVAL;
}

int
main(int argc, char **argv)
{
	size_t min_bytes = 4096, max_bytes = 64u << 20;
	int json = 0, iters_opt = 0, first_op = 0, last_op = 0;
	double warmup_s = 0.3;
	const char *comp = "none";
	dt_coll *c;
	dt_err err;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = 1;
		} else if (strcmp(argv[i], "--in-place") == 0) {
			in_place = 1;
		} else if (strcmp(argv[i], "--min-bytes") == 0 &&
		           i + 1 < argc) {
			min_bytes = strtoull(argv[++i], NULL, 0);
		} else if (strcmp(argv[i], "--max-bytes") == 0 &&
		           i + 1 < argc) {
			max_bytes = strtoull(argv[++i], NULL, 0);
		} else if (strcmp(argv[i], "--compression") == 0 &&
		           i + 1 < argc) {
			comp = argv[++i];
		} else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
			iters_opt = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--warmup-s") == 0 && i + 1 < argc) {
			warmup_s = atof(argv[++i]);
		} else if (strcmp(argv[i], "--op") == 0 && i + 1 < argc) {
			const char *o = argv[++i];
			if (strcmp(o, "all") == 0) {
				first_op = 0;
				last_op = 3;
				continue;
			}
			first_op = -1;
			for (int k = 0; k < 4; k++)
				if (strcmp(o, op_names[k]) == 0)
					first_op = last_op = k;
			if (first_op < 0) {
				fprintf(stderr, "coll_bench: unknown op %s\n",
				        o);
				return 2;
			}
		} else {
			fprintf(
			    stderr,
			    "usage: coll_bench [--op NAME|all] [--json] "
			    "[--min-bytes N] [--max-bytes N] [--iters N] "
			    "[--warmup-s S] [--compression C] [--in-place]\n");
			return 2;
		}
	}
	if ((err = dt_coll_init(&c))) {
		fprintf(stderr, "coll_bench: %s\n", dt_errmsg());
		return 1;
	}
	int rank = dt_coll_rank(c), n = dt_coll_size(c);
	if ((err = dt_coll_set_compression(c, comp)))
		goto fail;
	compressed = strcmp(comp, "none") != 0;
	float *a = dt__aligned_alloc(max_bytes),
	      *b = dt__aligned_alloc(max_bytes);
	if (a == NULL || b == NULL) {
		fprintf(stderr, "coll_bench: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < max_bytes / 4; i++)
		a[i] = b[i] = (float)(i % 7);
	if (rank == 0 && !json)
		printf("# dtrain coll_bench: %d ranks, float32, compression "
		       "%s\n"
		       "# %-15s %12s %11s %11s %11s\n",
		       n, comp, "op", "bytes", "time_us", "algbw_GB/s",
		       "busbw_GB/s");
	/* Warm up connections, caches and (virtual) CPUs for 0.3 s (or
	 * --warmup-s) before the first size; coll_bench_mpi does the same. The
	 * time is rank 0's, shared so that every rank runs as many warm-up
	 * calls. */
	for (double until = 0;;) {
		double now = dt__now_s();
		if (rank == 0 && until == 0)
			until = now + warmup_s;
		double go = rank == 0 ? (now < until) : 0;
		if ((err = dt_coll_broadcast(c, &go, 1, DT_FLOAT64, 0)))
			goto fail;
		if (!go)
			break;
		for (int w = 0; w < 20; w++)
			if ((err = run_once(c, first_op, a, b, min_bytes / 4)))
				goto fail;
	}
	for (int op = first_op; op <= last_op; op++) {
		for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
			size_t count = bytes / 4;
			int iters = iters_opt;
			double t0, dt;

			if (iters <= 0) {
				double want =
				    (512.0 * (1 << 20)) / (double)bytes;
				iters = want > 1000 ? 1000
				        : want < 5  ? 5
				                    : (int)want;
			}
			for (int w = 0; w < 2 + iters / 10; w++)
				if ((err = run_once(c, op, a, b, count)))
					goto fail;
			if ((err = dt_coll_barrier(c)))
				goto fail;
			t0 = dt__now_s();
			for (int it = 0; it < iters; it++)
				if ((err = run_once(c, op, a, b, count)))
					goto fail;
			dt = (dt__now_s() - t0) / iters;
			/* The slowest rank's time is the operation's. */
			if ((err =
			         dt_coll_allreduce(c, DT_COLL_IN_PLACE, &dt, 1,
			                           DT_FLOAT64, DT_COLL_MAX)))
				goto fail;
			if (rank != 0)
				continue;
			double algbw = (double)bytes / dt / 1e9;
			double busbw = algbw * bus_factor(op, n);
			if (json)
				printf("{\"impl\":\"dtrain\",\"op\":\"%s\","
				       "\"compression\":\"%s\","
				       "\"bytes\":%zu,\"ranks\":%d,"
				       "\"time_us\":%.2f,\"algbw_gbps\":%.4f,"
				       "\"busbw_gbps\":%.4f}\n",
				       op_names[op], comp, bytes, n, dt * 1e6,
				       algbw, busbw);
			else
				printf("  %-15s %12zu %11.2f %11.3f %11.3f\n",
				       op_names[op], bytes, dt * 1e6, algbw,
				       busbw);
			fflush(stdout);
		}
	}
	free(a);
	free(b);
	return dt_coll_finalize(c) ? 1 : 0;
fail:
	fprintf(stderr, "coll_bench rank %d: %s\n", rank, dt_errmsg());
	dt_coll_finalize(c);
	return 1;
}
