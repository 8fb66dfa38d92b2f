/*
 * barrier_probe.c - a test program for every role that checks barriers.
 *
 * Started for each role (by hand or by tests), it joins the cluster and, for
 * ROUNDS rounds and every group mask the node belongs to, marks its arrival
 * with a file in $PROBE_DIR, passes the barrier, and then checks that every
 * member of the group had marked its arrival: nobody passes a barrier
 * before everyone has reached it. Servers take part (they are not plain
 * `dtrain server`s here), then serve until the workers leave.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dtrain/node.h"

#define ROUNDS 3

static int
mark_and_check(dt_node *n, const char *dir, int mask, int round)
{
	char path[512];
	FILE *f;
	const char *role = dt_role_name(dt_node_role(n));

	snprintf(path, sizeof(path), "%s/m%d.r%d.%s%d", dir, mask, round, role,
	         dt_node_rank(n));
	if ((f = fopen(path, "w")) == NULL)
		return -1;
	fclose(f);
	if (dt_node_barrier(n, mask) != DT_OK) {
		fprintf(stderr, "barrier_probe: %s\n", dt_errmsg());
		return -1;
	}
	for (int r = 0; r < dt_node_num_servers(n) && (mask & DT_GROUP_SERVERS);
	     r++) {
		snprintf(path, sizeof(path), "%s/m%d.r%d.server%d", dir, mask,
		         round, r);
		if (access(path, F_OK) != 0) {
			fprintf(stderr,
			        "barrier_probe: passed barrier %d/%d "
			        "before server %d arrived\n",
			        mask, round, r);
			return -1;
		}
	}
	for (int r = 0; r < dt_node_num_workers(n) && (mask & DT_GROUP_WORKERS);
	     r++) {
		snprintf(path, sizeof(path), "%s/m%d.r%d.worker%d", dir, mask,
		         round, r);
		if (access(path, F_OK) != 0) {
			fprintf(stderr,
			        "barrier_probe: passed barrier %d/%d "
			        "before worker %d arrived\n",
			        mask, round, r);
			return -1;
		}
	}
	return 0;
}

int
main(void)
{
	const char *dir = getenv("PROBE_DIR");
	dt_node_config cfg;
	dt_node *n;
	int masks[] = {DT_GROUP_WORKERS, DT_GROUP_SERVERS,
	               DT_GROUP_SERVERS | DT_GROUP_WORKERS, DT_GROUP_ALL};
	int rc = 0;

	if (dir == NULL) {
		fprintf(stderr, "barrier_probe: PROBE_DIR is not set\n");
		return 2;
	}
	if (dt_node_config_from_env(&cfg, 1) != DT_OK ||
	    dt_node_start(&cfg, &n) != DT_OK) {
		fprintf(stderr, "barrier_probe: %s\n", dt_errmsg());
		return 1;
	}
	if (dt_node_role(n) != DT_ROLE_SCHEDULER) {
		int group = dt_node_role(n) == DT_ROLE_SERVER
		                ? DT_GROUP_SERVERS
		                : DT_GROUP_WORKERS;
		for (int round = 0; round < ROUNDS && rc == 0; round++)
			for (size_t i = 0; i < sizeof(masks) / sizeof(*masks);
			     i++)
				if ((masks[i] & group) &&
				    mark_and_check(n, dir, masks[i], round))
					rc = 1;
		if (rc == 0)
			printf("%s %d passed %d rounds of barriers\n",
			       dt_role_name(dt_node_role(n)), dt_node_rank(n),
			       ROUNDS);
	}
	if (rc == 0 && dt_node_role(n) != DT_ROLE_WORKER &&
	    dt_node_serve(n) != DT_OK) {
		fprintf(stderr, "barrier_probe: %s\n", dt_errmsg());
		rc = 1;
	}
	if (dt_node_stop(n) != DT_OK && rc == 0) {
		fprintf(stderr, "barrier_probe: %s\n", dt_errmsg());
		rc = 1;
	}
	return rc;
}
