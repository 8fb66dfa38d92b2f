/*
 * be_slurm.c - the slurm back-end: one `srun` step per role inside the
 * allocation the launcher runs in (salloc, sbatch), the environment passed
 * on by srun, each task behind the rank wrapper.
 */
#include <ctype.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/launch/launch.h"

/* " 3: " from srun --label. */
size_t
slurm_tag(const char *s, size_t n, long *rank)
{
	size_t i = 0, r0;

	while (i < n && s[i] == ' ')
		i++;
	for (r0 = i; i < n && isdigit((unsigned char)s[i]); i++)
		;
	if (i == r0 || i - r0 > 9 || i + 1 >= n || s[i] != ':' ||
	    s[i + 1] != ' ')
		return 0;
	*rank = strtol(s + r0, NULL, 10);
	return i + 2;
}

/* One srun per role; srun passes the environment on (--export=ALL) and
 * --label marks every line with the task's rank (SLURM_PROCID). */
static dt_err
slurm_role(struct plan *pl, const char *role, long np, char **cmd, size_t ncmd)
{
	const struct ctx *c = pl->c;
	int worker = strcmp(role, "worker") == 0;
	struct proc *p = plan_next(pl, worker ? KIND_MAIN : KIND_SERVICE,
	                           "slurm", "%ss", role);
	dt_err err;

	if (p == NULL)
		return dt__fail(DT_EINVAL, "the plan is full");
	p->line_tag = slurm_tag;
	p->tag_role = role;
	p->show_env = 1;
	p->secret_env = c->secret_env; /* srun passes the environment on */
	if ((err = role_env(p, c, role, NULL, 0, 1)) ||
	    (err = strv_dup(&p->argv, c->srun)) ||
	    (err = strv_addf(&p->argv, "--ntasks=%ld", np)) ||
	    (err = strv_dup(&p->argv, "--kill-on-bad-exit=1")) ||
	    /* The servers' and the workers' steps share the allocation's
	     * CPUs: without it the second waits for the first to end. */
	    (err = strv_dup(&p->argv, "--overlap")) ||
	    (err = strv_dup(&p->argv, "--label")) || (err = rank_wrap(p, c)))
		return err;
	return role_cmd(p, c, role, cmd, ncmd);
}

/* The address of this machine's name, which the compute nodes reach. */
static dt_err
slurm_sched_addr(struct in_addr *out)
{
	char name[256];

	if (gethostname(name, sizeof(name)) == 0 &&
	    resolve4("host name", name, out) == DT_OK &&
	    (ntohl(out->s_addr) >> 24) != 127)
		return DT_OK;
	out->s_addr = htonl(INADDR_LOOPBACK);
	say("warning: the scheduler listens on 127.0.0.1; set "
	    "DMLC_NODE_HOST to an address the compute nodes reach");
	return DT_OK;
}

const struct dl_backend dl_slurm = {
    .name = "slurm",
    .hosts = HOSTS_UNUSED,
    .plan_role = slurm_role,
    .sched_addr = slurm_sched_addr,
};
