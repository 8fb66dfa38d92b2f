/*
 * plan.c - the plan of a job: every process with its command line and
 * variables, made by the back-end of --launcher; the variables every
 * process shares, and the job's id and secret.
 */
#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/launch/launch.h"

extern char **environ;

void
procs_free(struct proc *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		strv_free(&p[i].argv);
		strv_free(&p[i].pre_argv);
		strv_free(&p[i].env);
		for (int k = 0; k < 2; k++) {
			if (p[i].out[k].fd >= 0)
				close(p[i].out[k].fd);
			free(p[i].out[k].buf);
		}
	}
	free(p);
}

static struct proc *
proc_vinit(struct proc *p, enum kind kind, const char *host, const char *fmt,
           va_list ap)
{
	memset(p, 0, sizeof(*p));
	p->kind = kind;
	p->out[0].fd = p->out[1].fd = -1;
	p->out[0].dst = 1;
	p->out[1].dst = 2;
	snprintf(p->host, sizeof(p->host), "%s", host);
	vsnprintf(p->label, sizeof(p->label), fmt, ap);
	return p;
}

struct proc *
proc_init(struct proc *p, enum kind kind, const char *host, const char *fmt,
          ...)
{
	va_list ap;

	va_start(ap, fmt);
	proc_vinit(p, kind, host, fmt, ap);
	va_end(ap);
	return p;
}

#define TOKEN_VAR "DTRAIN_NODE_TOKEN="

/* A process of its own rank gets a fresh random place token: its restart
 * (--restart) is started with the same variables, so it presents the
 * token, and the scheduler gives a lost node's place to nobody else
 * (docs/security.md). */
static dt_err
add_place_token(struct proc *p)
{
	unsigned char raw[16];
	char hex[2 * sizeof(raw) + 1];
	dt_err err;

	randombytes_buf(raw, sizeof(raw));
	sodium_bin2hex(hex, sizeof(hex), raw, sizeof(raw));
	err = strv_addf(&p->env, TOKEN_VAR "%s", hex);
	sodium_memzero(raw, sizeof(raw));
	sodium_memzero(hex, sizeof(hex));
	return err;
}

/* Variables of a process: role, rank request, the common ones. */
dt_err
role_env(struct proc *p, const struct ctx *c, const char *role,
         const char *id_var, long id, int remote)
{
	dt_err err = strv_addf(&p->env, "DMLC_ROLE=%s", role);

	if (!err && id_var)
		err = strv_addf(&p->env, "%s=%ld", id_var, id);
	if (!err && remote)
		err = strv_extend(&p->env, c->forward.v, c->forward.n);
	if (!err)
		err = strv_extend(&p->env, c->common.v, c->common.n);
	if (!err && id_var)
		err = add_place_token(p);
	return err;
}

struct proc *
plan_next(struct plan *pl, enum kind kind, const char *host, const char *fmt,
          ...)
{
	struct proc *p;
	va_list ap;

	if (pl->n == pl->max)
		return NULL;
	va_start(ap, fmt);
	p = proc_vinit(&pl->p[pl->n++], kind, host, fmt, ap);
	va_end(ap);
	return p;
}

dt_err
role_cmd(struct proc *p, const struct ctx *c, const char *role, char **cmd,
         size_t ncmd)
{
	dt_err err;

	if (cmd)
		return strv_extend(&p->argv, cmd, ncmd);
	if ((err = strv_dup(&p->argv, c->exe_name)))
		return err;
	return strv_dup(&p->argv, role);
}

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

/* `dtrain rank-exec` in front of a command that mpirun or srun runs once
 * per rank, so that a failed rank is named (rank.c); DTRAIN_RANK_WRAP=0
 * leaves it out (a host without dtrain at the launcher's path). */
dt_err
rank_wrap(struct proc *p, const struct ctx *c)
{
	dt_err err;

	if (!c->rank_wrap)
		return DT_OK;
	if ((err = strv_dup(&p->argv, c->exe_name)) ||
	    (err = strv_dup(&p->argv, "rank-exec")))
		return err;
	return strv_dup(&p->argv, "--");
}

/*
 * Placement on the hosts of -H, the same for every back-end that places
 * processes itself (ssh, mpi): the host file's slots (each host as many
 * times as its slots=, in file order) taken in a cycle, the servers first
 * and the workers continuing where they ended (seed 001: five hosts and
 * -n 3 -s 3 put the servers on h1 h2 h3 and the workers on h4 h5 h1).
 * The ranks of a role on one host are then consecutive: a role's ranks go
 * host by host, in the order the hosts first come up, as mpirun fills the
 * slots of a host before the next.
 */
dt_err
plan_hosts(const struct plan *pl, int worker, const struct host ***out)
{
	const struct hosts *h = pl->h;
	long count = worker ? pl->o->workers : pl->o->servers;
	long start = worker ? pl->o->servers : 0, slots = 0;
	size_t *canon = NULL, *slot_host = NULL, *seen = NULL, *order = NULL;
	size_t norder = 0, k = 0;
	const struct host **res = NULL;

	*out = NULL;
	for (size_t j = 0; j < h->n; j++)
		slots += h->h[j].slots;
	if (slots == 0 || count <= 0)
		return dt__fail(DT_EINVAL, "no host for the %ss",
		                worker ? "worker" : "server");
	canon = calloc(h->n, sizeof(*canon));
	slot_host = calloc((size_t)slots, sizeof(*slot_host));
	seen = calloc(h->n, sizeof(*seen));
	order = calloc(h->n, sizeof(*order));
	res = calloc((size_t)count, sizeof(*res));
	if (!canon || !slot_host || !seen || !order || !res) {
		free(res);
		res = NULL;
		goto out;
	}
	/* A host listed twice is one host: its first line. */
	for (size_t j = 0; j < h->n; j++) {
		canon[j] = j;
		for (size_t f = 0; f < j; f++)
			if (strcmp(h->h[f].name, h->h[j].name) == 0) {
				canon[j] = f;
				break;
			}
	}
	for (size_t j = 0, s = 0; j < h->n; j++)
		for (long t = 0; t < h->h[j].slots; t++)
			slot_host[s++] = canon[j];
	/* How many of the role's ranks each host takes, in first-come
	 * order; then the ranks host by host. */
	for (long r = 0; r < count; r++) {
		size_t j = slot_host[(start + r) % slots];

		if (seen[j]++ == 0)
			order[norder++] = j;
	}
	for (size_t o = 0; o < norder; o++)
		for (size_t t = 0; t < seen[order[o]]; t++)
			res[k++] = &h->h[order[o]];
out:
	free(canon);
	free(slot_host);
	free(seen);
	free(order);
	if (res == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	*out = res;
	return DT_OK;
}

/* Every process of the job: the scheduler here, then the back-end's
 * servers and workers (and room for the new processes of --restart). */
dt_err
build_plan(const struct opts *o, const struct hosts *h, const struct ctx *c,
           struct proc **out, size_t *nout)
{
	struct plan pl = {.o = o, .h = h, .c = c};
	dt_err err = DT_OK;

	pl.max = (size_t)(1 + o->servers + o->workers + o->sched_joiners +
	                  2 * o->restart) +
	         DISCOVER_ROOM(o);
	if ((pl.p = calloc(pl.max, sizeof(*pl.p))) == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	if (!o->no_scheduler)
		err = plan_local(
		    plan_next(&pl, KIND_SERVICE, "localhost", "scheduler"), c,
		    "scheduler", NULL, 0, NULL, 0);
	if (!err && o->servers > 0)
		err = o->be->plan_role(&pl, "server", o->servers, NULL, 0);
	if (!err)
		err = o->be->plan_role(&pl, "worker", o->workers, o->cmd,
		                       (size_t)o->ncmd);
	/* The workers a replay's schedule takes in: no rank asked for, they
	 * join the running job (opts.c, sched_joiners). */
	for (long j = 0; j < o->sched_joiners && !err; j++)
		err = plan_local(plan_next(&pl, KIND_MAIN, "localhost",
		                           "worker %ld", o->workers + j),
		                 c, "worker", NULL, 0, o->cmd, (size_t)o->ncmd);
	if (err) {
		procs_free(pl.p, pl.n);
		return err;
	}
	*out = pl.p;
	*nout = pl.n;
	return DT_OK;
}

/* Add s to b quoted, with any place token's value shown as "..." (a
 * token is for its process alone; an ssh command line carries it too). */
static void
sb_addq_masked(struct sbuf *b, const char *s)
{
	const char *at = strstr(s, TOKEN_VAR);
	char *copy;
	size_t pre, hex;

	if (at == NULL || (copy = strdup(s)) == NULL) {
		sb_addq(b, at ? TOKEN_VAR "..." : s);
		return;
	}
	pre = (size_t)(at - s) + strlen(TOKEN_VAR);
	hex = strspn(s + pre, "0123456789abcdef");
	snprintf(copy + pre, strlen(s) + 1 - pre, "...%s", s + pre + hex);
	sb_addq(b, copy);
	free(copy);
}

/* One line of the plan: "worker 0 on localhost: env K=V ... CMD". */
char *
plan_line(const struct proc *p)
{
	struct sbuf b = {0};

	sb_add(&b, p->label);
	sb_add(&b, " on ");
	sb_add(&b, p->host);
	sb_add(&b, ":");
	if (p->show_env && p->env.n > 0) {
		sb_add(&b, " env");
		for (size_t i = 0; i < p->env.n; i++) {
			sb_add(&b, " ");
			sb_addq_masked(&b, p->env.v[i]);
		}
	}
	for (size_t i = 0; i < p->argv.n; i++) {
		sb_add(&b, " ");
		sb_addq_masked(&b, p->argv.v[i]);
	}
	return sb_take(&b);
}

/* Variables passed on to processes on other hosts (ssh, mpi, slurm), in
 * addition to the launcher's own and --env. OPENBLAS_* and OMP_* choose
 * the BLAS kernel and its threads, and with them the bits of every
 * product: a worker on another host computes as one here only with the
 * same ones (docs/launcher.md, "Placement and exact results"). */
static int
forwarded(const char *e)
{
	static const char *const prefixes[] = {"PS_", "MXNET_", "DT_",
	                                       "OPENBLAS_", "OMP_"};
	static const char *const names[] = {"DMLC_INTERFACE", "DTRAIN_AUTH",
	                                    "DTRAIN_ENCRYPT",
	                                    "DTRAIN_DATA_CACHE"};
	size_t len = strcspn(e, "=");

	if (is_reserved(e, len))
		return 0;
	for (size_t i = 0; i < DT_ARRAY_LEN(prefixes); i++)
		if (strncmp(e, prefixes[i], strlen(prefixes[i])) == 0)
			return 1;
	for (size_t i = 0; i < DT_ARRAY_LEN(names); i++)
		if (strlen(names[i]) == len && strncmp(e, names[i], len) == 0)
			return 1;
	return 0;
}

dt_err
build_ctx(const struct opts *o, struct ctx *c)
{
	dt_err err;

	if ((err = strv_addf(&c->common, "DMLC_PS_ROOT_URI=%s", c->uri)) ||
	    (err = strv_addf(&c->common, "DMLC_PS_ROOT_PORT=%s", c->port)) ||
	    (err = strv_addf(&c->common, "DMLC_NUM_SERVER=%ld", o->servers)) ||
	    (err = strv_addf(&c->common, "DMLC_NUM_WORKER=%ld", o->workers)) ||
	    (err = strv_dup(&c->common, "DTRAIN_LAUNCHED=1")) ||
	    (err = strv_extend(&c->common, o->env.v, o->env.n)))
		return err;
	for (size_t i = 0; environ[i]; i++) {
		const char *e = environ[i];
		size_t len = strcspn(e, "=");
		int dup = 0;

		for (size_t j = 0; j < o->env.n && !dup; j++)
			dup = strncmp(o->env.v[j], e, len) == 0 &&
			      o->env.v[j][len] == '=';
		if (!dup && forwarded(e) && (err = strv_dup(&c->forward, e)))
			return err;
	}
	return DT_OK;
}

/*
 * The job's id and secret (docs/security.md). The launcher's own
 * DTRAIN_SECRET or DTRAIN_SECRET_FILE is passed on as it is; otherwise a
 * fresh random secret is made for this job. DTRAIN_AUTH=none passes none.
 */
dt_err
prepare_auth(const struct opts *o, struct ctx *c)
{
	const char *id = dt__env_str("DTRAIN_JOB_ID");
	const char *mode = dt__env_str("DTRAIN_AUTH");
	const char *secret = dt__env_str("DTRAIN_SECRET");
	const char *file = dt__env_str("DTRAIN_SECRET_FILE");
	dt_err err;

	if (sodium_init() < 0)
		return dt__fail(DT_ESYS, "libsodium cannot start");
	if (id) {
		if (strlen(id) >= sizeof(c->job_id) ||
		    strspn(id, "abcdefghijklmnopqrstuvwxyz"
		               "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
		        strlen(id))
			return dt__fail(DT_ECONFIG,
			                "DTRAIN_JOB_ID must be at most %zu "
			                "letters, digits, '-', '_' or '.'",
			                sizeof(c->job_id) - 1);
		snprintf(c->job_id, sizeof(c->job_id), "%s", id);
	} else {
		uint8_t raw[16];

		randombytes_buf(raw, sizeof(raw));
		sodium_bin2hex(c->job_id, sizeof(c->job_id), raw, sizeof(raw));
	}
	if ((err = strv_addf(&c->common, "DTRAIN_JOB_ID=%s", c->job_id)))
		return err;
	if (o->sync_dir && asprintf(&c->sync_mark, "%s/.dtrain-new-%s",
	                            o->sync_dir, c->job_id) < 0) {
		c->sync_mark = NULL;
		return dt__fail(DT_ENOMEM, "out of memory");
	}
	if (mode && strcmp(mode, "none") == 0)
		return DT_OK;
	if (secret && file)
		return dt__fail(DT_ECONFIG, "both DTRAIN_SECRET and "
		                            "DTRAIN_SECRET_FILE are set; "
		                            "keep one");
	if (file) {
		if (asprintf(&c->secret_env, "DTRAIN_SECRET_FILE=%s", file) < 0)
			c->secret_env = NULL;
		return c->secret_env ? DT_OK : DT_ENOMEM;
	}
	if (secret) {
		c->secret_line = sodium_malloc(strlen(secret) + 2);
		if (c->secret_line)
			snprintf(c->secret_line, strlen(secret) + 2, "%s\n",
			         secret);
	} else {
		uint8_t raw[32];

		c->secret_line = sodium_malloc(2 * sizeof(raw) + 2);
		if (c->secret_line) {
			randombytes_buf(raw, sizeof(raw));
			sodium_bin2hex(c->secret_line, 2 * sizeof(raw) + 1, raw,
			               sizeof(raw));
			strcat(c->secret_line, "\n");
			sodium_memzero(raw, sizeof(raw));
		}
	}
	if (c->secret_line == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	size_t len = strlen(c->secret_line); /* with its newline */
	c->secret_env = sodium_malloc(len + 14);
	if (c->secret_env == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	snprintf(c->secret_env, len + 14, "DTRAIN_SECRET=%.*s", (int)len - 1,
	         c->secret_line);
	if (o->be->secret_file) {
		/* A name nobody can guess (not the job's id, which may be
		 * known): no one can plant anything there beforehand. */
		uint8_t raw[16];
		char hex[2 * sizeof(raw) + 1];

		randombytes_buf(raw, sizeof(raw));
		sodium_bin2hex(hex, sizeof(hex), raw, sizeof(raw));
		if (asprintf(&c->remote_secret_dir, "%s%s.dtrain-%s",
		             c->cwd[0] == '/' ? c->cwd : "",
		             c->cwd[0] == '/' ? "/" : "", hex) < 0) {
			c->remote_secret_dir = NULL;
			return dt__fail(DT_ENOMEM, "out of memory");
		}
	}
	return DT_OK;
}

void
ctx_free(struct ctx *c)
{
	strv_free(&c->common);
	strv_free(&c->forward);
	if (c->secret_line)
		sodium_free(c->secret_line); /* zeroes it */
	if (c->secret_env && strncmp(c->secret_env, "DTRAIN_SECRET=", 14) == 0)
		sodium_free(c->secret_env);
	else
		free(c->secret_env);
	free(c->remote_secret_dir);
	if (c->mpi_tmp)
		mpi_tmp_remove(c->mpi_tmp);
	free(c->mpi_tmp);
	c->mpi_tmp = NULL;
	free(c->sync_mark);
	c->sync_mark = NULL;
	free(c->unreached);
	c->secret_line = c->secret_env = c->remote_secret_dir = NULL;
	c->unreached = NULL;
}
