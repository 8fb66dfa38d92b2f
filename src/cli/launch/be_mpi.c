/*
 * be_mpi.c - the mpi back-end: one `mpirun` per role (servers, workers),
 * every variable passed by -x, the ranks placed on the hosts of -H by the
 * launcher's own rule (plan_hosts) through --host, each rank behind the
 * rank wrapper so that a failing rank is named.
 */
#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/launch/launch.h"

/* "[1,3]<stdout>:" from mpirun --tag-output: returns its length and the
 * rank, or 0. */
size_t
mpi_tag(const char *s, size_t n, long *rank)
{
	size_t i = 1, r0;

	if (n < 1 || s[0] != '[')
		return 0;
	while (i < n && isdigit((unsigned char)s[i]))
		i++;
	if (i >= n || s[i++] != ',')
		return 0;
	for (r0 = i; i < n && isdigit((unsigned char)s[i]); i++)
		;
	if (i == r0 || i >= n || s[i] != ']' || i - r0 > 9)
		return 0;
	*rank = strtol(s + r0, NULL, 10);
	if (++i >= n || s[i] != '<')
		return 0;
	for (i++; i < n && isalpha((unsigned char)s[i]); i++)
		;
	if (i + 1 >= n || s[i] != '>' || s[i + 1] != ':')
		return 0;
	return i + 2;
}

/* The ssh port every host of -H shares (mpirun has one ssh command line
 * for all hosts), NULL for ssh's default; an error when they differ. */
static dt_err
common_port(const struct hosts *h, const char **port)
{
	*port = h->n ? h->h[0].port : NULL;
	for (size_t i = 1; i < h->n; i++) {
		const char *p = h->h[i].port;

		if ((p == NULL) != (*port == NULL) ||
		    (p && strcmp(p, *port) != 0))
			return dt__fail(DT_EINVAL,
			                "--launcher mpi: the hosts of -H have "
			                "different ssh ports (%s:%s, %s:%s); "
			                "mpirun uses one for all",
			                h->h[0].name, *port ? *port : "22",
			                h->h[i].name, p ? p : "22");
	}
	return DT_OK;
}

/* "--host a:2,b:1": the role's ranks, host by host, as plan_hosts places
 * them. */
static dt_err
host_list(struct plan *pl, int worker, long count, struct strv *argv)
{
	struct sbuf b = {0};
	const struct host *cur = NULL, **hosts;
	long k = 0;
	char num[24];
	dt_err err;

	if ((err = plan_hosts(pl, worker, &hosts)))
		return err;
	for (long i = 0; i <= count; i++) {
		const struct host *h = i < count ? hosts[i] : NULL;

		if (cur && (h == NULL || strcmp(h->name, cur->name) != 0)) {
			if (b.len)
				sb_add(&b, ",");
			sb_add(&b, cur->name);
			snprintf(num, sizeof(num), ":%ld", k);
			sb_add(&b, num);
			k = 0;
		}
		cur = h;
		k++;
	}
	free(hosts);
	if ((err = strv_dup(argv, "--host"))) {
		free(sb_take(&b));
		return err;
	}
	return strv_add(argv, sb_take(&b)); /* (NULL: out of memory) */
}

/* Open MPI 4 keeps a session directory per mpirun under one directory
 * per user and host ("/tmp/ompi.HOST.UID"), which every mpirun creates
 * when it is missing and removes when it is empty: two mpiruns starting
 * together (the servers' and the workers') race on it, and the loser
 * fails in orte_init ("A call to mkdir was unable to create the desired
 * directory ... File exists") before any rank runs. So each role's
 * mpirun gets a directory of its own on this host, inside one the
 * launcher makes and removes. (mpirun's daemons on the other hosts of
 * -H keep Open MPI's default, which nothing here could remove.) */
static int
mpi_before(const struct hosts *h, struct ctx *c, struct run *r)
{
	/* Under the directory the user chose for Open MPI, if any. */
	const char *names[] = {"OMPI_MCA_orte_local_tmpdir_base",
	                       "OMPI_MCA_orte_tmpdir_base", "TMPDIR"};
	const char *tmp = NULL;
	char *dir;

	(void)h;
	(void)r;
	for (size_t i = 0; i < DT_ARRAY_LEN(names) && !tmp; i++) {
		tmp = getenv(names[i]);
		if (tmp && tmp[0] != '/')
			tmp = NULL;
	}
	if (tmp == NULL)
		tmp = "/tmp";
	if (asprintf(&dir, "%s/dtrain-mpi-XXXXXX", tmp) < 0) {
		say("out of memory");
		return RC_FAIL;
	}
	/* (mkdtemp makes only the last part: Open MPI makes a missing
	 * base directory itself, so do the same for the one above) */
	if (mkdir(tmp, 0700) < 0 && errno != EEXIST) {
		say("cannot make %s for mpirun's session files: %s", tmp,
		    strerror(errno));
		free(dir);
		return RC_FAIL;
	}
	if (mkdtemp(dir) == NULL) {
		say("cannot make a directory for mpirun's session files in "
		    "%s: %s",
		    tmp, strerror(errno));
		free(dir);
		return RC_FAIL;
	}
	c->mpi_tmp = dir;
	return 0;
}

static int
remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0; /* on with the rest, whatever failed */
}

void
mpi_tmp_remove(const char *dir)
{
	nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* One mpirun for all processes of a role; -x passes every variable. The
 * rank comes from OMPI_COMM_WORLD_RANK, so no DMLC_*_ID is set. */
static dt_err
mpi_role(struct plan *pl, const char *role, long np, char **cmd, size_t ncmd)
{
	/* --bind-to none: a rank sees the same CPUs whatever the number of
	 * ranks on its host (mpirun binds to a core when there are at most
	 * two), as under the other back-ends. */
	static const char *const opts[] = {"--allow-run-as-root",
	                                   "--oversubscribe", "--tag-output",
	                                   "--bind-to", "none"};
	const struct ctx *c = pl->c;
	const struct opts *o = pl->o;
	int worker = strcmp(role, "worker") == 0;
	struct proc *p =
	    plan_next(pl, worker ? KIND_MAIN : KIND_SERVICE,
	              o->hostfile ? o->hostfile : "localhost", "%ss", role);
	const char *port = NULL;
	dt_err err;

	if (p == NULL)
		return dt__fail(DT_EINVAL, "the plan is full");
	p->line_tag = mpi_tag;
	p->tag_role = role;
	p->secret_env = c->secret_env;
	/* mpirun tells its ranks, on every host, to stop: it gets SIGTERM
	 * first, alone (its ssh connections cut by the same signal would
	 * leave the remote ranks to a timeout). */
	p->term_leader = 1;
	if ((err = role_env(p, c, role, NULL, 0, 1)) ||
	    (err = strv_dup(&p->argv, c->mpirun)))
		return err;
	for (size_t i = 0; i < DT_ARRAY_LEN(opts) && !err; i++)
		err = strv_dup(&p->argv, opts[i]);
	if (!err && !(err = strv_dup(&p->argv, "-np")))
		err = strv_addf(&p->argv, "%ld", np);
	if (!err && pl->h->n) {
		/* mpirun reaches other hosts through ssh: fail as fast. */
		if (!(err = common_port(pl->h, &port)) &&
		    !(err = host_list(pl, worker, np, &p->argv)) &&
		    !(err = strv_dup(&p->argv, "--mca")) &&
		    !(err = strv_dup(&p->argv, "plm_rsh_args")))
			err = strv_addf(&p->argv, "-o %s%s%s", c->ssh_timeout,
			                port ? " -p " : "", port ? port : "");
	}
	/* When mpirun stops a job, each orted sends its ranks SIGTERM and
	 * then sleeps 1 s before SIGKILL, whether they are gone or not: 3 s
	 * to stop a job over two hosts. The ranks' wrappers end their
	 * commands, whatever kills them (rank.c). */
	/* (Open MPI refuses a local base beside a global one: when the
	 * user set the global base, it is the one given, there and on the
	 * other hosts.) */
	if (!err && c->mpi_tmp && !(err = strv_dup(&p->argv, "--mca")) &&
	    !(err = strv_dup(&p->argv, getenv("OMPI_MCA_orte_tmpdir_base")
	                                   ? "orte_tmpdir_base"
	                                   : "orte_local_tmpdir_base")))
		err = strv_addf(&p->argv, "%s/%s", c->mpi_tmp, role);
	if (!err && !getenv("OMPI_MCA_odls_base_sigkill_timeout") &&
	    !(err = strv_dup(&p->argv, "--mca")) &&
	    !(err = strv_dup(&p->argv, "odls_base_sigkill_timeout")))
		err = strv_dup(&p->argv, "0");
	/* The launcher's own ssh (DTRAIN_SSH) is mpirun's too. */
	if (!err && pl->h->n && strcmp(c->ssh, "ssh") != 0 &&
	    !(err = strv_dup(&p->argv, "--mca")) &&
	    !(err = strv_dup(&p->argv, "plm_rsh_agent")))
		err = strv_dup(&p->argv, c->ssh);
	for (size_t i = 0; i < p->env.n && !err; i++)
		if (!(err = strv_dup(&p->argv, "-x")))
			err = strv_dup(&p->argv, p->env.v[i]);
	/* The secret by name: mpirun takes its value from its environment,
	 * so it is on no command line. */
	if (!err && c->secret_env && !(err = strv_dup(&p->argv, "-x")))
		err =
		    strv_addf(&p->argv, "%.*s",
		              (int)strcspn(c->secret_env, "="), c->secret_env);
	if (!err)
		err = rank_wrap(p, c);
	if (!err)
		err = role_cmd(p, c, role, cmd, ncmd);
	return err;
}

const struct dl_backend dl_mpi = {
    .name = "mpi",
    .hosts = HOSTS_OPTIONAL,
    .plan_role = mpi_role,
    .before = mpi_before,
};
