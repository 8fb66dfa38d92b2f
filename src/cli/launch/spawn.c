/*
 * spawn.c - starting the job's processes so that none outlives the job:
 * - every child is the leader of its own session and process group, so the
 *   launcher signals the group and finds the rest of the session in /proc
 *   (mpirun, for one, puts each rank in a group of its own);
 * - every child dies with the launcher (PR_SET_PDEATHSIG), and a small guard
 *   process, forked first, kills every session of the job when the launcher
 *   itself is killed with SIGKILL, grandchildren included;
 * - exits are observed with WNOWAIT and children are reaped only at the very
 *   end (supervise.c), so the ids of their groups and sessions cannot be
 *   reused by an unrelated process while the launcher may still signal
 *   them.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/launch/launch.h"
#include "common/file.h"

extern char **environ;

static int
cmp_pid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Signal every process of the given sessions: the group of each session
 * leader, then whatever else /proc shows in the session (mpirun puts its
 * ranks in groups of their own). sids must be sorted.
 */
static void
kill_sessions(const pid_t *sids, size_t n, int sig, pid_t self)
{
	struct dirent *de;
	DIR *d;

	/* A stopped process (SIGSTOP, a debugger) acts on SIGTERM only once
	 * continued: continue it too. */
	for (size_t i = 0; i < n; i++) {
		kill(-sids[i], sig);
		if (sig == SIGTERM)
			kill(-sids[i], SIGCONT);
	}
	if ((d = opendir("/proc")) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		char path[64], buf[512], *rp;
		int pid, sid, ppid, pgrp, fd;
		ssize_t m;
		char state;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid = atoi(de->d_name);
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		m = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (m <= 0)
			continue;
		buf[m] = '\0';
		/* "pid (comm) state ppid pgrp session ...": comm may hold
		 * anything, so parse from the last ')'. */
		if ((rp = strrchr(buf, ')')) == NULL ||
		    sscanf(rp + 1, " %c %d %d %d", &state, &ppid, &pgrp,
		           &sid) != 4)
			continue;
		if (pid != self &&
		    bsearch(&(pid_t){sid}, sids, n, sizeof(pid_t), cmp_pid)) {
			kill(pid, sig);
			if (sig == SIGTERM)
				kill(pid, SIGCONT);
		}
	}
	closedir(d);
}

static void
kill_some(struct run *r, int sig, int leaders)
{
	pid_t *sids = calloc(r->n ? r->n : 1, sizeof(pid_t));
	size_t n = 0;

	for (size_t i = 0; i < r->n; i++) {
		const struct proc *p = &r->p[i];

		if (p->pid <= 0 || (!leaders && p->term_leader && !p->exited))
			continue;
		if (sids)
			sids[n++] = p->pid;
		else
			kill(-p->pid, sig);
	}
	if (sids) {
		qsort(sids, n, sizeof(pid_t), cmp_pid);
		kill_sessions(sids, n, sig, r->self);
	}
	free(sids);
}

/* Signal every process of the job (their whole sessions). */
void
kill_all(struct run *r, int sig)
{
	kill_some(r, sig, 1);
}

/*
 * The first step of stopping: a process that stops its own (term_leader:
 * mpirun tells its ranks on every host, through its ssh connections) gets
 * sig alone; the sessions of every other process get it whole. kill_all
 * later does the rest.
 */
void
kill_leaders(struct run *r, int sig)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].pid > 0 && r->p[i].term_leader && !r->p[i].exited) {
			kill(r->p[i].pid, sig);
			if (sig == SIGTERM)
				kill(r->p[i].pid, SIGCONT);
		}
	kill_some(r, sig, 0);
}

/*
 * The guard: a process forked before any child, in its own process group,
 * holding the read end of a pipe only the launcher can write. The launcher
 * sends it the session id of every child it starts, and 0 when it has
 * cleaned up itself. If the pipe reaches end of file first, the launcher
 * died without cleaning up (SIGKILL): the guard kills every session.
 */
static void
guard_main(int rfd, int sfd)
{
	pid_t *sids = NULL;
	size_t n = 0, cap = 0;
	int fd;

	setpgid(0, 0);
	close(sfd);
	if ((fd = open("/dev/null", O_RDWR)) >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	for (;;) {
		int32_t v;
		ssize_t m = read(rfd, &v, sizeof(v));

		if (m < 0 && errno == EINTR)
			continue;
		if (m != (ssize_t)sizeof(v))
			break;
		if (v == 0)
			_exit(0);
		if (n == cap) {
			pid_t *q = realloc(sids, (cap = cap ? 2 * cap : 64) *
			                             sizeof(pid_t));
			if (q == NULL)
				continue;
			sids = q;
		}
		sids[n++] = v;
	}
	if (n > 0) {
		qsort(sids, n, sizeof(pid_t), cmp_pid);
		kill_sessions(sids, n, SIGKILL, getpid());
		/* Once more for processes forked during the first pass. */
		kill_sessions(sids, n, SIGKILL, getpid());
	}
	_exit(0);
}

void
guard_start(struct run *r)
{
	int fds[2];
	pid_t pid;

	r->guard_fd = -1;
	if (pipe2(fds, O_CLOEXEC) < 0)
		return;
	if ((pid = fork()) == 0) {
		close(fds[1]);
		guard_main(fds[0], r->sfd);
	}
	close(fds[0]);
	if (pid < 0) {
		close(fds[1]);
		if (r->verbose)
			say("warning: no guard process: %s", strerror(errno));
		return;
	}
	r->guard_fd = fds[1];
	r->guard_pid = pid;
}

static void
guard_send(struct run *r, pid_t pid)
{
	int32_t v = (int32_t)pid;

	/* If the guard is gone, children still die by PDEATHSIG. */
	if (r->guard_fd >= 0 && write(r->guard_fd, &v, sizeof(v)) < 0)
		return;
}

void
guard_stop(struct run *r)
{
	if (r->guard_fd < 0)
		return;
	guard_send(r, 0);
	close(r->guard_fd);
	r->guard_fd = -1;
	while (waitpid(r->guard_pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* The environment of a child: ours without the launcher's own variables
 * and the ones it adds, then the additions. Pointers are borrowed. */
static char **
build_envp(const struct strv *add, const char *extra)
{
	size_t n = 0, k = 0;
	char **envp;

	while (environ[n])
		n++;
	if ((envp = calloc(n + add->n + 2, sizeof(*envp))) == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		const char *e = environ[i];
		size_t len = strcspn(e, "=");
		int skip = is_reserved(e, len);

		for (size_t j = 0; j < add->n && !skip; j++)
			skip = strncmp(add->v[j], e, len) == 0 &&
			       add->v[j][len] == '=';
		if (!skip)
			envp[k++] = environ[i];
	}
	for (size_t j = 0; j < add->n; j++)
		envp[k++] = add->v[j];
	if (extra)
		envp[k++] = (char *)extra;
	envp[k] = NULL;
	return envp;
}

/*
 * In the child, before its exec: run p's pre_argv to its end, its input
 * p->pre_stdin, within p->pre_timeout_s (killed past it). The command
 * stays in the child's process group and session, so stopping the
 * process stops it too. 0 when it exited 0.
 */
static int
run_pre(const struct proc *p)
{
	uint64_t end = dt__now_ns() + (uint64_t)p->pre_timeout_s * NS_PER_S;
	size_t len = p->pre_stdin ? strlen(p->pre_stdin) : 0;
	int pi[2], status = 0, wrote;
	pid_t pid, got;

	if (pipe2(pi, O_CLOEXEC) < 0 || (pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		dup2(pi[0], 0);
		execvp(p->pre_argv.v[0], p->pre_argv.v);
		_exit(127);
	}
	close(pi[0]);
	/* (a line, less than PIPE_BUF: the pipe takes it at once, unless
	 * the command has already failed and gone, which its status says) */
	wrote = len == 0 || write(pi[1], p->pre_stdin, len) == (ssize_t)len;
	close(pi[1]);
	while ((got = waitpid(pid, &status, WNOHANG)) == 0 ||
	       (got < 0 && errno == EINTR)) {
		struct timespec ts = {0, 10 * 1000 * 1000};

		if (dt__now_ns() >= end) {
			kill(pid, SIGKILL);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			return -1;
		}
		nanosleep(&ts, NULL);
	}
	return got == pid && wrote && WIFEXITED(status) &&
	               WEXITSTATUS(status) == 0
	           ? 0
	           : -1;
}

/* In the child: become a session leader, die with the launcher, wire the
 * pipes, run the command that comes first (if any), undo the launcher's
 * signal settings, exec. Never returns. */
static void
child_exec(const struct run *r, const struct proc *p, char **envp, int ifd,
           int ofd, int efd)
{
	const char *prog = p->argv.v[0];
	char msg[512];
	int fd, e;

	setsid();
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != r->self)
		_exit(1); /* the launcher died before prctl */
	if (ifd >= 0)
		dup2(ifd, 0);
	else if ((fd = open("/dev/null", O_RDONLY)) >= 0 && fd != 0) {
		dup2(fd, 0);
		close(fd);
	}
	dup2(ofd, 1);
	dup2(efd, 2);
	if (p->is_scheduler && r->listen_fd >= 0)
		fcntl(r->listen_fd, F_SETFD, 0);
	sigaction(SIGPIPE, &r->old_pipe, NULL);
	/* (the default until the command that comes first is waited for) */
	signal(SIGCHLD, SIG_DFL);
	sigaction(SIGTERM, &r->old_term, NULL);
	/* (A limit the launcher raised for the job stays raised: the
	 * scheduler of a big job needs a descriptor per node.) */
	sigprocmask(SIG_SETMASK, &r->orig_mask, NULL);
	/* (after the signals' reset: a stop's SIGTERM ends it meanwhile) */
	if (p->pre_argv.n && run_pre(p) != 0) {
		snprintf(msg, sizeof(msg),
		         "dtrain launch: %s failed (or took over %d s)\n",
		         p->pre_what ? p->pre_what : p->pre_argv.v[0],
		         p->pre_timeout_s);
		if (write(2, msg, strlen(msg)) < 0)
			_exit(1);
		_exit(1);
	}
	sigaction(SIGCHLD, &r->old_chld, NULL);
	if (p->exec_path)
		execve(p->exec_path, p->argv.v, envp);
	else
		execvpe(prog, p->argv.v, envp);
	e = errno;
	snprintf(msg, sizeof(msg), "dtrain launch: cannot run '%s': %s\n", prog,
	         strerror(e));
	if (write(2, msg, strlen(msg)) < 0)
		_exit(127);
	_exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
}

dt_err
spawn(struct run *r, struct proc *p)
{
	int po[2] = {-1, -1}, pe[2] = {-1, -1}, pi[2] = {-1, -1};
	char **envp = build_envp(&p->env, p->secret_env);
	dt_err err = DT_OK;
	pid_t pid;

	if (envp == NULL)
		return dt__fail(DT_ENOMEM, "starting %s: out of memory",
		                p->label);
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0 ||
	    (p->stdin_data && pipe2(pi, O_CLOEXEC) < 0)) {
		err = dt__fail(DT_ESYS, "starting %s: pipe: %s", p->label,
		               strerror(errno));
		goto out;
	}
	/* Signals stay blocked across fork: the child restores the mask
	 * just before exec, so no handler runs in between. */
	if ((pid = fork()) < 0) {
		err = dt__fail(DT_ESYS, "starting %s: fork: %s", p->label,
		               strerror(errno));
		goto out;
	}
	if (pid == 0)
		child_exec(r, p, envp, pi[0], po[1], pe[1]);
	p->pid = pid;
	if (p->stdin_data) {
		/* Small (< PIPE_BUF): the pipe takes it at once. */
		size_t len = strlen(p->stdin_data);

		if (write(pi[1], p->stdin_data, len) != (ssize_t)len)
			say("%s: cannot write its input: %s", p->label,
			    strerror(errno));
	}
	guard_send(r, pid);
	p->out[0].fd = po[0];
	p->out[1].fd = pe[0];
	po[0] = pe[0] = -1;
	for (int k = 0; k < 2; k++)
		fcntl(p->out[k].fd, F_SETFL,
		      fcntl(p->out[k].fd, F_GETFL) | O_NONBLOCK);
	if (r->verbose)
		say("started %s (pid %d)", p->label, (int)pid);
out:
	for (int k = 0; k < 2; k++) {
		if (po[k] >= 0)
			close(po[k]);
		if (pe[k] >= 0)
			close(pe[k]);
		if (pi[k] >= 0)
			close(pi[k]);
	}
	free(envp);
	return err;
}

/* Make sure 0, 1 and 2 are open, so no socket or pipe of ours lands on
 * them and is then overwritten in a child. */
void
open_std_fds(void)
{
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF &&
		    open("/dev/null", O_RDWR) < 0)
			break;
}

/* Make room for two pipes per process. The limits to restore are the
 * ones found before the first raise (a back-end may ask again, for more). */
void
raise_nofile(struct run *r, size_t nprocs)
{
	struct rlimit before;

	if (dt__nofile_raise((unsigned long)(2 * nprocs + 64), &before) &&
	    !r->nofile_raised) {
		r->orig_nofile = before;
		r->nofile_raised = 1;
	}
}
