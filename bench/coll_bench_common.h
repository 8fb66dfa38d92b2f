/*
 * coll_bench_common.h - what coll_bench.c (dtrain) and coll_bench_mpi.c
 * (OpenMPI) must compute the same way so their tables compare: the
 * operation names and nccl-tests' bus-bandwidth factors.
 */
#ifndef DT_BENCH_COLL_BENCH_COMMON_H
#define DT_BENCH_COLL_BENCH_COMMON_H

static const char *const op_names[] = {"allreduce", "allgather",
                                       "reduce_scatter", "broadcast"};

/* busbw = algbw * factor: 2(n-1)/n for allreduce, (n-1)/n for allgather
 * and reduce-scatter, 1 for broadcast. */
static inline double
bus_factor(int op, int n)
{
	if (n <= 1)
		return 1.0;
	switch (op) {
	case 0:
		return 2.0 * (n - 1) / n;
	case 1:
	case 2:
		return (double)(n - 1) / n;
	}
	return 1.0;
}

#endif
