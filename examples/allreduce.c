/*
 * allreduce.c - Horovod's hello world in dtrain: every rank contributes
 * a vector, allreduces it, checks the sum against what it knows every
 * rank contributed, and prints one line. Then a broadcast from rank 0 and
 * an average, checked the same way.
 *
 *   dtrain launch -n 4 -s 0 -- build/examples/allreduce
 *   dtrain launch -n 4 -s 0 --launcher mpi -- build/examples/allreduce
 *   DTRAIN_SECRET=... mpirun -np 4 -x DTRAIN_COLL_ROOT=127.0.0.1:29500 \
 *       -x DTRAIN_SECRET build/examples/allreduce
 *   build/examples/allreduce                  (one rank)
 *
 * Options: --count N (floats per rank, default 1000000).
 * Exit status 0 when every check passed on this rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"

/* Rank r's i-th element: small integers, so sums are exact in float. */
static float
value(int rank, size_t i)
{
	return (float)((rank + 1) * (int)(i % 13 + 1));
}

int
main(int argc, char **argv)
{
	size_t count = 1000000;
	dt_coll *c;
	float *buf;
	int rank, size, bad = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
			count = (size_t)strtoull(argv[++i], NULL, 10);
		} else if (strcmp(argv[i], "--help") == 0 ||
		           strcmp(argv[i], "-h") == 0) {
			printf("usage: allreduce [--count N]\n"
			       "Sums COUNT floats (1000000) over every rank "
			       "and checks the result.\n"
			       "Run it under `dtrain launch -n N -s 0 "
			       "--kvstore horovod`, mpirun or srun.\n");
			return 0;
		} else {
			fprintf(stderr, "usage: allreduce [--count N]\n");
			return 2;
		}
	}
	if (count == 0) {
		fprintf(stderr, "allreduce: --count must be at least 1\n");
		return 2;
	}
	if (dt_coll_init(&c) != DT_OK) {
		fprintf(stderr, "allreduce: %s\n", dt_errmsg());
		return 1;
	}
	rank = dt_coll_rank(c);
	size = dt_coll_size(c);
	buf = malloc(count * sizeof(float));
	if (buf == NULL) {
		fprintf(stderr, "allreduce: out of memory\n");
		dt_coll_finalize(c);
		return 1;
	}

	/* Sum: rank r contributes (r + 1) * k, so the sum is k * n(n+1)/2. */
	for (size_t i = 0; i < count; i++)
		buf[i] = value(rank, i);
	if (dt_coll_allreduce(c, DT_COLL_IN_PLACE, buf, count, DT_FLOAT32,
	                      DT_COLL_SUM) != DT_OK)
		goto fail;
	for (size_t i = 0; i < count && !bad; i++)
		bad = buf[i] != (float)((i % 13 + 1) * (size_t)size *
		                        (size_t)(size + 1) / 2);

	/* Broadcast: everyone ends with rank 0's values. */
	for (size_t i = 0; i < count; i++)
		buf[i] = value(rank, i);
	if (dt_coll_broadcast(c, buf, count, DT_FLOAT32, 0) != DT_OK)
		goto fail;
	for (size_t i = 0; i < count && !bad; i++)
		bad = buf[i] != value(0, i);

	/* Average of rank+1 over n ranks: (n+1)/2, exact in float here. */
	for (size_t i = 0; i < count; i++)
		buf[i] = (float)(rank + 1);
	if (dt_coll_allreduce(c, DT_COLL_IN_PLACE, buf, count, DT_FLOAT32,
	                      DT_COLL_AVG) != DT_OK)
		goto fail;
	for (size_t i = 0; i < count && !bad; i++)
		bad = buf[i] != (float)(size + 1) / 2.0f;

	printf("rank %d of %d: allreduce, broadcast and average of %zu "
	       "floats %s\n",
	       rank, size, count, bad ? "WRONG" : "correct");
	free(buf);
	if (dt_coll_finalize(c) != DT_OK) {
		fprintf(stderr, "allreduce: %s\n", dt_errmsg());
		return 1;
	}
	return bad ? 1 : 0;
fail:
	fprintf(stderr, "allreduce: rank %d: %s\n", rank, dt_errmsg());
	free(buf);
	dt_coll_finalize(c);
	return 1;
}
