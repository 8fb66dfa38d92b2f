/*
 * coll_bench_mpi.c - the same measurements as coll_bench.c for OpenMPI's
 * collectives (MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block,
 * MPI_Bcast) on the same sizes, with the same output, so that
 * bench/run_coll.sh can put them side by side. Built only when CMake finds
 * MPI. Run with mpirun -np N build/bench/coll_bench_mpi [--json] [--tag T]
 * (--tag names the transport in the JSON "impl" field, e.g. mpi-tcp).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_bench_common.h"

static int
run_once(int op, float *a, float *b, size_t count, int n)
{
	switch (op) {
	case 0:
		return MPI_Allreduce(a, b, (int)count, MPI_FLOAT, MPI_SUM,
		                     MPI_COMM_WORLD);
	case 1:
		return MPI_Allgather(a, (int)(count / n), MPI_FLOAT, b,
		                     (int)(count / n), MPI_FLOAT,
		                     MPI_COMM_WORLD);
	case 2:
		return MPI_Reduce_scatter_block(
		    a, b, (int)(count / n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	case 3:
		return MPI_Bcast(a, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
	}
	return MPI_ERR_OP;
}

int
main(int argc, char **argv)
{
	size_t min_bytes = 4096, max_bytes = 64u << 20;
	int json = 0, iters_opt = 0, first_op = 0, last_op = 0, rank, n;
	double warmup_s = 0.3;
	const char *tag = "mpi";

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = 1;
		} else if (strcmp(argv[i], "--tag") == 0 && i + 1 < argc) {
			tag = argv[++i];
		} else if (strcmp(argv[i], "--min-bytes") == 0 &&
		           i + 1 < argc) {
			min_bytes = strtoull(argv[++i], NULL, 0);
		} else if (strcmp(argv[i], "--max-bytes") == 0 &&
		           i + 1 < argc) {
			max_bytes = strtoull(argv[++i], NULL, 0);
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
			for (int k = 0; k < 4; k++)
				if (strcmp(o, op_names[k]) == 0)
					first_op = last_op = k;
		}
	}
	float *a = malloc(max_bytes), *b = malloc(max_bytes);
	if (a == NULL || b == NULL)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (size_t i = 0; i < max_bytes / 4; i++)
		a[i] = b[i] = (float)(i % 7);
	if (rank == 0 && !json)
		printf("# OpenMPI coll_bench_mpi (%s): %d ranks, float32\n"
		       "# %-15s %12s %11s %11s %11s\n",
		       tag, n, "op", "bytes", "time_us", "algbw_GB/s",
		       "busbw_GB/s");
	/* Warm up connections, caches and (virtual) CPUs for 0.3 s (or
	 * --warmup-s) before the first size, as coll_bench does. */
	for (double until = MPI_Wtime() + warmup_s;;) {
		int go = MPI_Wtime() < until;
		MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
		if (!go)
			break;
		for (int w = 0; w < 20; w++)
			run_once(first_op, a, b, min_bytes / 4, n);
	}
	for (int op = first_op; op <= last_op; op++) {
		for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
			size_t count = bytes / 4;
			int iters = iters_opt;
			double t0, dt, worst;

			if (iters <= 0) {
				double want =
				    (512.0 * (1 << 20)) / (double)bytes;
				iters = want > 1000 ? 1000
				        : want < 5  ? 5
				                    : (int)want;
			}
			for (int w = 0; w < 2 + iters / 10; w++)
				run_once(op, a, b, count, n);
			MPI_Barrier(MPI_COMM_WORLD);
			t0 = MPI_Wtime();
			for (int it = 0; it < iters; it++)
				run_once(op, a, b, count, n);
			dt = (MPI_Wtime() - t0) / iters;
			MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX,
			              MPI_COMM_WORLD);
			if (rank != 0)
				continue;
			double algbw = (double)bytes / worst / 1e9;
			double busbw = algbw * bus_factor(op, n);
			if (json)
				printf("{\"impl\":\"%s\",\"op\":\"%s\","
				       "\"bytes\":%zu,\"ranks\":%d,"
				       "\"time_us\":%.2f,\"algbw_gbps\":%.4f,"
				       "\"busbw_gbps\":%.4f}\n",
				       tag, op_names[op], bytes, n, worst * 1e6,
				       algbw, busbw);
			else
				printf("  %-15s %12zu %11.2f %11.3f %11.3f\n",
				       op_names[op], bytes, worst * 1e6, algbw,
				       busbw);
			fflush(stdout);
		}
	}
	free(a);
	free(b);
	MPI_Finalize();
	return 0;
}
