/*
 * be_ssh.c - the ssh back-end: one `ssh -tt HOST` per process, placed on
 * the hosts of -H (plan_hosts), each behind a small supervisor on the
 * remote side; the working directory copied first with --sync-dst-dir;
 * the job's secret in a file of mode 0600, in a directory of mode 0700
 * and of a random name, on every host for the job's duration; a worker
 * that --host-discovery-script brings gets a directory of its own, written
 * just before it starts (joiner_secret).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/launch/launch.h"

static dt_err
ssh_prefix(struct strv *a, const struct ctx *c, const struct host *h)
{
	const char *const opts[] = {"-o", "StrictHostKeyChecking=no",
	                            "-o", "BatchMode=yes",
	                            "-o", c->ssh_timeout,
	                            "-o", "ServerAliveInterval=15",
	                            "-tt"};
	dt_err err = strv_dup(a, c->ssh);

	for (size_t i = 0; i < DT_ARRAY_LEN(opts) && !err; i++)
		err = strv_dup(a, opts[i]);
	if (!err && h->port) {
		if (!(err = strv_dup(a, "-p")))
			err = strv_dup(a, h->port);
	}
	if (!err)
		err = strv_dup(a, h->name);
	return err;
}

/*
 * The remote side's supervisor, a POSIX shell script that runs CMD ("$@")
 * as the leader of a session and process group of its own and waits for
 * it. It stays the terminal's session leader, so when the ssh connection
 * drops (the launcher stopping the job, a network failure) it is the one
 * the kernel sends SIGHUP: it then sends SIGTERM to CMD's whole group
 * (once, whatever signals follow), and SIGKILL to what is left of the
 * group as soon as CMD itself has exited (a watchdog kills the group 2 s
 * later at the most, CMD included, if CMD ignores SIGTERM), so a program
 * that ignores SIGHUP, and whatever it started, ends with the job. When
 * CMD exits by itself, what it left
 * running in its group is ended the same way. Its exit status is CMD's
 * (129 when it was stopped).
 *
 * $k, set before it, names the host's secret directory (or is empty):
 * when the connection drops, the supervisor removes it before anything
 * else, so the secret does not outlive a launcher that was killed with
 * no chance to clean up (kill -9: its ssh processes die with it, and the
 * hang-up reaches every host). A CMD that exits by itself leaves it, for
 * a process --restart starts in its place.
 */
static const char remote_supervisor[] =
    "p=; stop() { kill -TERM -$p 2>/dev/null || kill -TERM $p 2>/dev/null; "
    "( i=0; while kill -0 $p 2>/dev/null && [ $i -lt 20 ]; do sleep 0.1; "
    "i=$((i + 1)); done; kill -KILL -$p 2>/dev/null ) & w=$!; "
    "wait $p 2>/dev/null; kill -KILL -$p 2>/dev/null; wait $w 2>/dev/null; "
    "}; "
    "trap 'trap \"\" HUP INT TERM; [ -n \"$k\" ] && rm -rf \"$k\"; "
    "[ -n \"$p\" ] && stop; exit 129' "
    "HUP INT TERM; if command -v setsid >/dev/null 2>&1; then "
    "setsid \"$@\" & else \"$@\" & fi; p=$!; wait $p; rc=$?; "
    "trap \"\" HUP INT TERM; stop; exit $rc";

/*
 * A process on another host:
 * ssh -tt HOST 'cd DIR && exec env K=V... sh -c SUPERVISOR dtrain-remote CMD'.
 * The remote side runs on a pseudo-terminal, so when the launcher kills ssh
 * the connection drops and the remote process gets SIGHUP. Its secret is
 * the file in the host's directory, or (joiner >= 0) in the directory of
 * the discovery's worker number joiner.
 */
static dt_err
plan_ssh(struct proc *p, const struct ctx *c, const struct host *h,
         size_t host_index, long joiner, const char *role, const char *id_var,
         long id, char **cmd, size_t ncmd)
{
	struct sbuf b = {0}, sup = {0};
	char *dir = NULL, *script;
	dt_err err;

	p->strip_cr = 1;
	if ((err = role_env(p, c, role, id_var, id, 1)))
		return err;
	if (c->remote_secret_dir) {
		if ((joiner < 0
		         ? asprintf(&dir, "%s-%zu", c->remote_secret_dir,
		                    host_index)
		         : asprintf(&dir, "%s-%zu-w%ld", c->remote_secret_dir,
		                    host_index, joiner)) < 0)
			return dt__fail(DT_ENOMEM, "out of memory");
		err = strv_addf(&p->env, "DTRAIN_SECRET_FILE=%s/secret", dir);
		if (err) {
			free(dir);
			return err;
		}
	} else if (c->secret_env && (err = strv_dup(&p->env, c->secret_env)))
		return err; /* a DTRAIN_SECRET_FILE of the user's */
	sb_add(&sup, "k=");
	sb_addq(&sup, dir ? dir : "");
	sb_add(&sup, "; ");
	sb_add(&sup, remote_supervisor);
	free(dir);
	if ((script = sb_take(&sup)) == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	sb_add(&b, "cd ");
	sb_addq(&b, c->cwd);
	sb_add(&b, " && exec env");
	for (size_t i = 0; i < p->env.n; i++) {
		sb_add(&b, " ");
		sb_addq(&b, p->env.v[i]);
	}
	sb_add(&b, " sh -c ");
	sb_addq(&b, script);
	free(script);
	sb_add(&b, " dtrain-remote");
	if (cmd) {
		for (size_t i = 0; i < ncmd; i++) {
			sb_add(&b, " ");
			sb_addq(&b, cmd[i]);
		}
	} else {
		sb_add(&b, " ");
		sb_addq(&b, c->exe_name);
		sb_add(&b, " ");
		sb_add(&b, role);
	}
	if ((err = ssh_prefix(&p->argv, c, h)))
		return err;
	return strv_add(&p->argv, sb_take(&b));
}

/* One ssh per distinct host running remote_cmd (a shell line), with input
 * stdin_data: the secret's file written before the job, removed after.
 * The line runs after "i=I;", I the index of the host's first line in the
 * host file (the number in its secret directory's name). */
static dt_err
build_host_steps(const struct hosts *h, const struct ctx *c, const char *what,
                 const char *remote_cmd, const char *stdin_data,
                 const unsigned char *skip, struct proc **out, size_t *nout)
{
	struct proc *p = calloc(h->n ? h->n : 1, sizeof(*p));
	size_t n = 0;
	dt_err err = DT_OK;

	if (p == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	for (size_t i = 0; i < h->n && !err; i++) {
		const char *const opts[] = {"-o", "StrictHostKeyChecking=no",
		                            "-o", "BatchMode=yes",
		                            "-o", c->ssh_timeout};
		size_t k;

		for (k = 0; k < i; k++)
			if (strcmp(h->h[k].name, h->h[i].name) == 0)
				break;
		if (k < i || (skip && skip[i]))
			continue;
		proc_init(&p[n], KIND_MAIN, h->h[i].name, "%s %s", what,
		          h->h[i].name);
		p[n].stdin_data = stdin_data;
		err = strv_dup(&p[n].argv, c->ssh);
		for (size_t j = 0; j < DT_ARRAY_LEN(opts) && !err; j++)
			err = strv_dup(&p[n].argv, opts[j]);
		if (!err && h->h[i].port && !(err = strv_dup(&p[n].argv, "-p")))
			err = strv_dup(&p[n].argv, h->h[i].port);
		if (!err)
			err = strv_dup(&p[n].argv, h->h[i].name);
		if (!err)
			err = strv_addf(&p[n].argv, "i=%zu; %s", i, remote_cmd);
		n++;
	}
	if (err) {
		procs_free(p, n);
		return err;
	}
	*out = p;
	*nout = n;
	return DT_OK;
}

/* rsync the working directory to DIR on every host, once per host. */
dt_err
build_sync(const struct opts *o, const struct hosts *h, const struct ctx *c,
           struct proc **out, size_t *nout)
{
	struct proc *p = calloc(h->n, sizeof(*p));
	size_t n = 0;
	dt_err err = DT_OK;

	if (p == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	for (size_t i = 0; i < h->n && !err; i++) {
		struct sbuf b = {0};
		char *rsh, *rpath;
		size_t k;

		for (k = 0; k < i; k++)
			if (strcmp(h->h[k].name, h->h[i].name) == 0)
				break;
		if (k < i)
			continue; /* already synced */
		proc_init(&p[n], KIND_MAIN, h->h[i].name, "sync %s",
		          h->h[i].name);
		p[n].show_env = 1;
		sb_addq(&b, c->ssh);
		sb_add(&b, " -o StrictHostKeyChecking=no -o BatchMode=yes -o ");
		sb_add(&b, c->ssh_timeout);
		if (h->h[i].port) {
			sb_add(&b, " -p ");
			sb_add(&b, h->h[i].port);
		}
		rsh = sb_take(&b);
		/* A directory this copy makes gets a mark, so that it can be
		 * removed if another host's copy fails. */
		sb_add(&b, "--rsync-path=if [ ! -e ");
		sb_addq(&b, o->sync_dir);
		sb_add(&b, " ]; then mkdir -p ");
		sb_addq(&b, o->sync_dir);
		sb_add(&b, " && : >");
		sb_addq(&b, c->sync_mark);
		sb_add(&b, "; fi && rsync");
		rpath = sb_take(&b);
		err = strv_dup(&p[n].argv, c->rsync);
		if (!err)
			err = strv_dup(&p[n].argv, "-az");
		/* A repository's history is never needed to run the job. */
		if (!err)
			err = strv_dup(&p[n].argv, "--exclude=.git/");
		for (size_t x = 0; x < o->sync_exclude.n && !err; x++)
			err = strv_addf(&p[n].argv, "--exclude=%s",
			                o->sync_exclude.v[x]);
		if (!err)
			err = strv_dup(&p[n].argv, "-e");
		if (!err) {
			err = strv_add(&p[n].argv, rsh); /* takes rsh */
			rsh = NULL;
		}
		if (!err) {
			err = strv_add(&p[n].argv, rpath);
			rpath = NULL;
		}
		if (!err)
			err = strv_addf(&p[n].argv, "%s/", c->local_cwd);
		if (!err)
			err = strv_addf(&p[n].argv, "%s:%s/", h->h[i].name,
			                o->sync_dir);
		free(rsh);
		free(rpath);
		n++;
	}
	if (err) {
		procs_free(p, n);
		return err;
	}
	*out = p;
	*nout = n;
	return DT_OK;
}

/* By host of h: whether ssh never connected there (it exited 255 before
 * running anything) in the steps p[0..n); NULL if out of memory. A 255
 * once the launcher was stopping the steps does not count: ssh killed by
 * the launcher's SIGTERM exits 255 too, after it may have connected and
 * made something that must then be removed. */
static unsigned char *
unreached_hosts(const struct hosts *h, const struct proc *p, size_t n)
{
	unsigned char *u = calloc(h->n ? h->n : 1, 1);

	for (size_t i = 0; u && i < n; i++)
		for (size_t k = 0; k < h->n; k++)
			if (p[i].exited && !p[i].in_stop &&
			    p[i].code == CLD_EXITED && p[i].status == 255 &&
			    strcmp(p[i].host, h->h[k].name) == 0)
				u[k] = 1;
	return u;
}

/* The ssh launcher's secret file on every host: written before the job
 * (mode 0600 in a new directory of mode 0700, from ssh's input: on no
 * command line), removed after. */
static int
remote_secret(const struct hosts *h, struct ctx *c, struct run *r, int remove)
{
	struct proc *p = NULL;
	size_t n = 0;
	char *cmd = NULL;
	struct sbuf b = {0};
	int rc;
	dt_err err;

	/* mkdir makes a new directory (0700 under umask 077) or fails,
	 * whatever is at that name, a link included: the secret is written
	 * where no other user can have put anything. rm -rf removes a link
	 * in its place, not what it points to. */
	sb_add(&b, "cd ");
	sb_addq(&b, c->cwd);
	sb_add(&b, remove ? " && rm -rf " : " && umask 077 && mkdir ");
	sb_addq(&b, c->remote_secret_dir);
	sb_add(&b, "-\"$i\"");
	if (remove) {
		/* (and those of the workers the discovery started there) */
		sb_add(&b, " ");
		sb_addq(&b, c->remote_secret_dir);
		sb_add(&b, "-\"$i\"-w*");
	} else {
		sb_add(&b, " && cat > ");
		sb_addq(&b, c->remote_secret_dir);
		sb_add(&b, "-\"$i\"/secret");
	}
	if ((cmd = sb_take(&b)) == NULL) {
		say("out of memory");
		return RC_FAIL;
	}
	err = build_host_steps(
	    h, c, remove ? "removing the secret on" : "writing the secret on",
	    cmd, remove ? NULL : c->secret_line, remove ? c->unreached : NULL,
	    &p, &n);
	free(cmd);
	if (err) {
		say("%s", dt_errmsg());
		return RC_FAIL;
	}
	if (n == 0) {
		procs_free(p, n);
		return 0;
	}
	raise_nofile(r, n);
	rc = run_procs(r, p, n);
	/* Where ssh could not even connect (status 255 before anything
	 * ran) nothing was written: no need to go back and remove it. */
	if (!remove)
		c->unreached = unreached_hosts(h, p, n);
	procs_free(p, n);
	if (rc != 0 && remove)
		say("the job's secret file may be left on a host: %s",
		    r->reason);
	else if (rc != 0)
		say("job failed before it started: %s", r->reason);
	return rc;
}

/*
 * --sync-dst-dir: copy the working directory to every host. When a copy
 * fails (or the launcher is stopped), the directories this copy made on
 * the hosts it reached are removed again, so no host keeps half a tree;
 * a directory that was there before keeps what was copied into it (as
 * rsync leaves it). When all succeed, the marks go.
 */
static int
ssh_sync(const struct opts *o, const struct hosts *h, struct ctx *c,
         struct run *r)
{
	struct proc *p = NULL;
	size_t n = 0;
	unsigned char *unreached = NULL;
	struct sbuf b = {0};
	char *cmd;
	dt_err err;
	int rc, rc2;

	if ((err = build_sync(o, h, c, &p, &n))) {
		say("%s", dt_errmsg());
		return RC_FAIL;
	}
	raise_nofile(r, n);
	rc = run_procs(r, p, n);
	if (rc != 0) {
		say("copying the working directory failed (%s)", r->reason);
		/* Where ssh never connected (rsync's 255) nothing was made. */
		unreached = unreached_hosts(h, p, n);
	}
	procs_free(p, n);
	p = NULL;
	n = 0;
	if (rc == 0) {
		sb_add(&b, "rm -f ");
		sb_addq(&b, c->sync_mark);
	} else {
		sb_add(&b, "if [ -e ");
		sb_addq(&b, c->sync_mark);
		sb_add(&b, " ]; then rm -rf ");
		sb_addq(&b, o->sync_dir);
		sb_add(&b, "; fi");
	}
	cmd = sb_take(&b);
	err = cmd ? build_host_steps(h, c,
	                             rc == 0 ? "ending the copy on"
	                                     : "removing the copy on",
	                             cmd, NULL, unreached, &p, &n)
	          : dt__fail(DT_ENOMEM, "out of memory");
	free(cmd);
	free(unreached);
	if (err) {
		say("%s", dt_errmsg());
		return RC_FAIL;
	}
	if (rc != 0)
		r->deadline = dt__now_ns() + 30 * NS_PER_S;
	rc2 = n ? run_procs(r, p, n) : 0;
	procs_free(p, n);
	if (rc2 != 0 && rc == 0)
		say("copying the working directory: %s", r->reason);
	else if (rc2 != 0)
		say("a partial copy may be left on a host: %s", r->reason);
	return rc ? rc : rc2;
}

/* The index of the first line of the host file naming h's host: the
 * number of its secret directory (build_host_steps's i). */
static size_t
host_index(const struct plan *pl, const struct host *h)
{
	size_t k = 0;

	while (k < pl->h->n && strcmp(pl->h->h[k].name, h->name) != 0)
		k++;
	return k;
}

static dt_err
ssh_role(struct plan *pl, const char *role, long count, char **cmd, size_t ncmd)
{
	int worker = strcmp(role, "worker") == 0;
	const struct host **hosts;
	dt_err err;

	if ((err = plan_hosts(pl, worker, &hosts)))
		return err;
	for (long i = 0; i < count && !err; i++) {
		struct proc *p =
		    plan_next(pl, worker ? KIND_MAIN : KIND_SERVICE,
		              hosts[i]->name, "%s %ld", role, i);

		err = p ? plan_ssh(p, pl->c, hosts[i], host_index(pl, hosts[i]),
		                   -1, role,
		                   worker ? "DMLC_WORKER_ID" : "DMLC_SERVER_ID",
		                   i, cmd, ncmd)
		        : dt__fail(DT_EINVAL, "the plan is full");
	}
	free(hosts);
	return err;
}

/* How long writing a joiner's secret file may take, connecting included
 * (the worker's own process waits for it: spawn.c's run_pre). */
#define JOINER_SECRET_S 20

/*
 * Have the worker the discovery starts on host h (p) first write its secret
 * file, in the directory dir, by the same rules as the host's at the start:
 * a new directory (mkdir fails on anything already at that name, a link
 * included) of mode 0700 under umask 077, the secret from ssh's input,
 * never on a command line. The worker's own ssh cannot carry it: its input
 * goes through a pseudo-terminal, which would echo it. So a first ssh
 * writes it, run by the worker's process before it becomes the worker's
 * ssh: the launcher's loop goes on meanwhile (signals, deaths, the other
 * workers), and a write that fails or hangs ends that process with status
 * 1, a failed worker. A directory of its own, not the host's: the host's
 * went when its workers were stopped (their supervisors remove it as the
 * connection drops), and a worker stopped later takes only its own.
 */
static dt_err
joiner_secret(struct proc *p, const struct ctx *c, const struct host *h,
              const char *dir)
{
	const char *const opts[] = {"-o", "StrictHostKeyChecking=no",
	                            "-o", "BatchMode=yes",
	                            "-o", c->ssh_timeout};
	struct strv *a = &p->pre_argv;
	struct sbuf b = {0};
	char *line;
	dt_err err = strv_dup(a, c->ssh);

	for (size_t j = 0; j < DT_ARRAY_LEN(opts) && !err; j++)
		err = strv_dup(a, opts[j]);
	if (!err && h->port && !(err = strv_dup(a, "-p")))
		err = strv_dup(a, h->port);
	if (!err)
		err = strv_dup(a, h->name);
	sb_add(&b, "cd ");
	sb_addq(&b, c->cwd);
	sb_add(&b, " && umask 077 && mkdir ");
	sb_addq(&b, dir);
	sb_add(&b, " && cat > ");
	sb_addq(&b, dir);
	sb_add(&b, "/secret");
	line = sb_take(&b);
	if (!err)
		err = strv_add(a, line); /* (takes it, NULL included) */
	else
		free(line);
	if (err) {
		strv_free(a);
		return err;
	}
	p->pre_stdin = c->secret_line;
	p->pre_what = "writing its secret file over ssh";
	p->pre_timeout_s = JOINER_SECRET_S;
	return DT_OK;
}

/* A worker that --host-discovery-script's listing brings to host: only a
 * host of the host file (a host outside it is refused, by name), with a
 * secret file of its own written first. */
static dt_err
ssh_joiner(struct proc *p, const struct ctx *c, const struct hosts *h,
           const char *host, long number, char **cmd, size_t ncmd)
{
	char *dir = NULL;
	dt_err err;

	for (size_t k = 0; k < h->n; k++) {
		if (strcmp(h->h[k].name, host) != 0)
			continue;
		if (c->remote_secret_dir && c->secret_line) {
			if (asprintf(&dir, "%s-%zu-w%ld", c->remote_secret_dir,
			             k, number) < 0)
				return dt__fail(DT_ENOMEM, "out of memory");
			err = joiner_secret(p, c, &h->h[k], dir);
			free(dir);
			if (err)
				return err;
		}
		return plan_ssh(p, c, &h->h[k], k,
		                c->remote_secret_dir ? number : -1, "worker",
		                NULL, 0, cmd, ncmd);
	}
	return dt__fail(DT_EINVAL,
	                "it is not in the host file (-H), and the ssh "
	                "launcher starts workers only on those hosts (the "
	                "job's secret is written on them at the start)");
}

static int
ssh_before(const struct hosts *h, struct ctx *c, struct run *r)
{
	int rc;

	if (c->remote_secret_dir == NULL)
		return 0;
	if ((rc = remote_secret(h, c, r, 0)) != 0)
		(void)remote_secret(h, c, r, 1);
	return rc;
}

static void
ssh_after(const struct hosts *h, struct ctx *c, struct run *r)
{
	if (c->remote_secret_dir == NULL)
		return;
	/* Whatever became of the job, and within a short while. */
	r->deadline = dt__now_ns() + 30 * NS_PER_S;
	(void)remote_secret(h, c, r, 1);
}

const struct dl_backend dl_ssh = {
    .name = "ssh",
    .hosts = HOSTS_REQUIRED,
    .restart = 1,
    .sync = ssh_sync,
    .secret_file = 1,
    .plan_role = ssh_role,
    .before = ssh_before,
    .after = ssh_after,
    .joiner = ssh_joiner,
    .discovery = 1,
};
