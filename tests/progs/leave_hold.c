/*
 * leave_hold.c - a worker that passes one barrier over the workers, then
 * leaves only when told: it holds until the file $LEAVE_DIR/go<rank>
 * appears (polled, for 120 s at most), then stops. The test that runs it
 * (tests/integration/leave_order.sh) chooses the order in which the
 * workers leave and what the scheduler is doing meanwhile. A server or
 * the scheduler serves inside dt_node_init_from_env and never gets here.
 *
 * After the barrier each worker says hello (a TEXT) to the next one:
 * connections between workers are made on demand, and the test watches
 * the one between the two workers close. Then a second barrier, after
 * which both connections' first frames are in.
 *
 * Prints "passed <rank>" after the barriers and "left <rank>" once
 * dt_node_stop has returned DT_OK; exits 1 with the error otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/node.h"

/* At most this long holding: a test that died must not leave us behind. */
#define HOLD_MAX_S 120

static int
hold(const char *dir, int rank)
{
	struct timespec nap = {0, 20000000};
	char path[512];

	snprintf(path, sizeof(path), "%s/go%d", dir, rank);
	for (int i = 0; i < HOLD_MAX_S * 50; i++) {
		if (access(path, F_OK) == 0)
			return 0;
		nanosleep(&nap, NULL);
	}
	fprintf(stderr, "leave_hold: %s did not appear in %d s\n", path,
	        HOLD_MAX_S);
	return -1;
}

int
main(void)
{
	const char *dir = getenv("LEAVE_DIR");
	dt_node *node;
	int rank;

	if (dir == NULL || *dir == '\0') {
		fprintf(stderr, "leave_hold: LEAVE_DIR is not set\n");
		return 2;
	}
	if (dt_node_init_from_env(&node) != DT_OK) {
		fprintf(stderr, "leave_hold: %s\n", dt_errmsg());
		return 1;
	}
	if (node == NULL) {
		fprintf(stderr, "leave_hold: run it under dtrain launch\n");
		return 1;
	}
	rank = dt_node_rank(node);
	if (dt_node_barrier(node, DT_GROUP_WORKERS) != DT_OK)
		goto fail;
	if (dt_node_num_workers(node) > 1 &&
	    dt_node_send_text(node, DT_ROLE_WORKER,
	                      (rank + 1) % dt_node_num_workers(node),
	                      "hello") != DT_OK)
		goto fail;
	if (dt_node_barrier(node, DT_GROUP_WORKERS) != DT_OK)
		goto fail;
	printf("passed %d\n", rank);
	fflush(stdout);
	if (hold(dir, rank) != 0) {
		dt_node_stop(node);
		return 1;
	}
	if (dt_node_stop(node) != DT_OK) {
		fprintf(stderr, "leave_hold: worker %d: %s\n", rank,
		        dt_errmsg());
		return 1;
	}
	printf("left %d\n", rank);
	fflush(stdout);
	return 0;
fail:
	fprintf(stderr, "leave_hold: %s\n", dt_errmsg());
	dt_node_stop(node);
	return 1;
}
