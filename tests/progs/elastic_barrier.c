/*
 * elastic_barrier.c - a worker of an elastic job (DTRAIN_ELASTIC=1) that
 * passes ROUNDS node barriers over the workers; launch rank DIE_RANK kills
 * itself (SIGKILL) instead of entering round DIE_ROUND. The others, who
 * entered that round with the old membership's count, must be let through
 * once the scheduler takes the lost worker out, and pass the later rounds
 * with the smaller count. Each prints "passed R" per round.
 *   elastic_barrier ROUNDS DIE_RANK DIE_ROUND
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtrain/node.h"

int
main(int argc, char **argv)
{
	dt_node *n = NULL;
	int rounds, die_rank, die_round;

	if (argc != 4) {
		fprintf(stderr, "usage: elastic_barrier ROUNDS DIE_RANK "
		                "DIE_ROUND\n");
		return 2;
	}
	rounds = atoi(argv[1]);
	die_rank = atoi(argv[2]);
	die_round = atoi(argv[3]);
	if (dt_node_init_from_env(&n) != DT_OK || n == NULL) {
		fprintf(stderr, "elastic_barrier: %s\n", dt_errmsg());
		return 1;
	}
	for (int r = 0; r < rounds; r++) {
		if (r == die_round && dt_node_rank(n) == die_rank)
			raise(SIGKILL);
		if (dt_node_barrier(n, DT_GROUP_WORKERS) != DT_OK) {
			fprintf(stderr, "elastic_barrier: round %d: %s\n", r,
			        dt_errmsg());
			dt_node_stop(n);
			return 1;
		}
		printf("rank %d passed %d\n", dt_node_rank(n), r);
		fflush(stdout);
	}
	return dt_node_stop(n) == DT_OK ? 0 : 1;
}
