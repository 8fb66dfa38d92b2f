/*
 * be_local.c - the local back-end: every process on this machine, started
 * by the launcher itself (plan_local, plan.c, as the scheduler of every
 * back-end).
 */
#include <string.h>

#include "cli/launch/launch.h"

/* One process per rank, each with its rank in DMLC_SERVER_ID or
 * DMLC_WORKER_ID. */
static dt_err
local_role(struct plan *pl, const char *role, long count, char **cmd,
           size_t ncmd)
{
	int worker = strcmp(role, "worker") == 0;
	dt_err err = DT_OK;

	for (long i = 0; i < count && !err; i++)
		err = plan_local(
		    plan_next(pl, worker ? KIND_MAIN : KIND_SERVICE,
		              "localhost", "%s %ld", role, i),
		    pl->c, role, worker ? "DMLC_WORKER_ID" : "DMLC_SERVER_ID",
		    i, cmd, ncmd);
	return err;
}

const struct dl_backend dl_local = {
    .name = "local",
    .hosts = HOSTS_UNUSED,
    .restart = 1,
    .plan_role = local_role,
    .discovery = 1,
};
