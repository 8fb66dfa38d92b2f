/*
 * idle_worker.c - a worker that joins its job, says so on stdout
 * ("idle_worker ready"), and stays in it until the file named by its first
 * argument exists (polled, 60 s at most), then leaves in order. Tests use
 * it to keep a job running while they do something to its nodes.
 */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/node.h"

int
main(int argc, char **argv)
{
	dt_node *n = NULL;

	if (argc != 2) {
		fprintf(stderr, "usage: idle_worker DONE_FILE\n");
		return 2;
	}
	if (dt_node_init_from_env(&n) != DT_OK || n == NULL) {
		fprintf(stderr, "idle_worker: %s\n",
		        n ? dt_errmsg() : "no cluster (DMLC_* not set)");
		return 1;
	}
	printf("idle_worker ready\n");
	fflush(stdout);
	for (int i = 0; i < 60 * 20 && access(argv[1], F_OK) != 0; i++) {
		struct timespec ts = {0, 50000000L};
		nanosleep(&ts, NULL);
	}
	if (dt_node_stop(n) != DT_OK) {
		fprintf(stderr, "idle_worker: %s\n", dt_errmsg());
		return 1;
	}
	return 0;
}
