/*
 * hello_cluster.c - the smallest dtrain program: join the cluster, pass
 * barriers, say hello to every other node, leave.
 *
 * Started for every role with the same command (as in MXNet's "Manually
 * Launching Jobs"): as scheduler or server it serves and exits 0; as a
 * worker it prints its rank, passes a barrier over the workers, sends a
 * line to each server and to the next worker, and passes a second barrier.
 *
 *   dtrain launch -n 2 -s 2 -- build/examples/hello_cluster
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/node.h"

int
main(int argc, char **argv)
{
	dt_node *node;
	char text[128];
	int rank, nw, ns;

	if (argc > 1) {
		int help = strcmp(argv[1], "--help") == 0 ||
		           strcmp(argv[1], "-h") == 0;

		fprintf(help ? stdout : stderr,
		        "usage: hello_cluster (no options)\n"
		        "Joins the job its DMLC_* variables describe, passes "
		        "barriers and says hello.\n"
		        "Run it under `dtrain launch -n 2 -s 2 -- "
		        "hello_cluster`.\n");
		return help ? 0 : 2;
	}
	if (dt_node_init_from_env(&node) != DT_OK) {
		fprintf(stderr, "hello_cluster: %s\n", dt_errmsg());
		return 1;
	}
	if (node == NULL) {
		printf(
		    "hello_cluster: no cluster configured (DMLC_ROLE unset); "
		    "run it under `dtrain launch`\n");
		return 0;
	}
	rank = dt_node_rank(node);
	nw = dt_node_num_workers(node);
	ns = dt_node_num_servers(node);
	printf("worker %d of %d is up (%d servers)\n", rank, nw, ns);
	fflush(stdout);
	if (dt_node_barrier(node, DT_GROUP_WORKERS) != DT_OK)
		goto fail;
	for (int s = 0; s < ns; s++) {
		snprintf(text, sizeof(text), "hello from worker %d", rank);
		if (dt_node_send_text(node, DT_ROLE_SERVER, s, text) != DT_OK)
			goto fail;
	}
	if (nw > 1) {
		snprintf(text, sizeof(text), "hello from worker %d", rank);
		if (dt_node_send_text(node, DT_ROLE_WORKER, (rank + 1) % nw,
		                      text) != DT_OK)
			goto fail;
	}
	if (dt_node_barrier(node, DT_GROUP_WORKERS) != DT_OK)
		goto fail;
	printf("worker %d passed the barriers; leaving\n", rank);
	fflush(stdout);
	if (dt_node_stop(node) != DT_OK) {
		fprintf(stderr, "hello_cluster: %s\n", dt_errmsg());
		return 1;
	}
	return 0;
fail:
	fprintf(stderr, "hello_cluster: %s\n", dt_errmsg());
	dt_node_stop(node);
	return 1;
}
