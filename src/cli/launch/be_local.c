/*
 * be_local.c - the local back-end: every process on this machine, started
 * by the launcher itself. The scheduler of every back-end is planned here.
 */
#include <string.h>

#include "cli/launch/launch.h"

/* A process on this machine: the scheduler, or any role with --launcher
 * local. cmd == NULL runs `dtrain ROLE`. p == NULL: the plan is full. */
dt_err
plan_local(struct proc *p, const struct ctx *c, const char *role,
           const char *id_var, long id, char **cmd, size_t ncmd)
{
	dt_err err;

	if (p == NULL)
		return dt__fail(DT_EINVAL, "the plan has no room for a %s",
		                role);
	p->show_env = 1;
	p->secret_env = c->secret_env;
	if ((err = role_env(p, c, role, id_var, id, 0)))
		return err;
	if (strcmp(role, "scheduler") == 0) {
		p->is_scheduler = 1;
		if ((err = strv_addf(&p->env, "DT_LISTEN_FD=%s", c->listen_fd)))
			return err;
	}
	if (cmd == NULL)
		p->exec_path = c->exe_exec;
	return role_cmd(p, c, role, cmd, ncmd);
}

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
};
