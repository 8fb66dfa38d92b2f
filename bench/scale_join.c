/*
 * scale_join.c - the member that bench/scale_bench.sh starts by the
 * hundred: it joins the job (dt_node_init_from_env returns once the
 * start-up barrier over every node has passed), says so with the wall
 * clock, then holds its connections until the bench has counted them
 * (the file named by SCALE_HOLD_FILE appears), passes one more barrier
 * and leaves. A server or the scheduler serves inside
 * dt_node_init_from_env and never gets here.
 *
 *   SCALE_HOLD_FILE=/tmp/go dtrain launch -n 64 -s 8 -- \
 *       build/bench/scale_join
 *
 * Prints "up <rank> <unix time in ns>" once joined, "left <rank>" at the
 * end; without SCALE_HOLD_FILE it does not hold.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/node.h"

/* How long a member holds at most: the bench counts within seconds, and
 * a bench that died must not leave members behind for long. */
#define HOLD_MAX_S 600

static long long
wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Wait for the file to appear, polling, for HOLD_MAX_S at most. */
static int
hold(const char *path)
{
	struct timespec nap = {0, 50000000};

	for (int i = 0; i < HOLD_MAX_S * 20; i++) {
		if (access(path, F_OK) == 0)
			return 0;
		nanosleep(&nap, NULL);
	}
	fprintf(stderr, "scale_join: %s did not appear in %d s\n", path,
	        HOLD_MAX_S);
	return -1;
}

int
main(int argc, char **argv)
{
	const char *hold_file = getenv("SCALE_HOLD_FILE");
	dt_node *node;
	int rank;

	(void)argv;
	if (argc > 1) {
		fprintf(stderr, "usage: scale_join (no options; run it under "
		                "dtrain launch)\n");
		return 2;
	}
	if (dt_node_init_from_env(&node) != DT_OK) {
		fprintf(stderr, "scale_join: %s\n", dt_errmsg());
		return 1;
	}
	if (node == NULL) {
		fprintf(stderr, "scale_join: DMLC_ROLE unset; run it under "
		                "dtrain launch\n");
		return 1;
	}
	rank = dt_node_rank(node);
	printf("up %d %lld\n", rank, wall_ns());
	fflush(stdout);
	if (hold_file && *hold_file && hold(hold_file) != 0)
		goto fail;
	if (dt_node_barrier(node, DT_GROUP_WORKERS) != DT_OK)
		goto fail;
	printf("left %d\n", rank);
	fflush(stdout);
	return dt_node_stop(node) == DT_OK ? 0 : 1;
fail:
	fprintf(stderr, "scale_join: %s\n", dt_errmsg());
	dt_node_stop(node);
	return 1;
}
