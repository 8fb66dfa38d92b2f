/*
 * launch.c - `dtrain launch`: start a whole job and supervise it to the end.
 *
 * This is MXNet's tools/launch.py made reliable. The launcher builds a plan
 * (one scheduler, S servers and W workers; or one mpirun or srun per role:
 * the back-end of --launcher decides), creates the scheduler's listening
 * socket itself so that no other program can take the port between
 * choosing and binding it, starts every process with pipes on its stdout
 * and stderr, and then runs one poll() loop over those pipes and a
 * signalfd. The loop prefixes every output line with the role and rank of
 * its process, and stops the whole job as soon as any process fails, the
 * launcher is interrupted, or --timeout passes. Nothing of a job outlives
 * it (spawn.c says how).
 *
 * The scheduler and servers are this same binary (`dtrain scheduler`,
 * `dtrain server` in cli/main.c); workers run the user's command. The
 * scheduler inherits the listening socket and finds it through
 * DT_LISTEN_FD.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/env_table.h"
#include "cli/cli.h"
#include "cli/launch/launch.h"

static const char *
prog(const char *var, const char *def)
{
	const char *v = dt__env_str(var);

	return v ? v : def;
}

static int
dry_run(struct proc *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *line = plan_line(&p[i]);

		printf("%s\n", line ? line : "(out of memory)");
		free(line);
	}
	fflush(stdout);
	return 0;
}

/* The fewest workers an elastic job goes on with: --min-workers, or
 * DTRAIN_ELASTIC_MIN (default 1) when DTRAIN_ELASTIC=1 is set by hand;
 * 0 when the job is not elastic. */
static long
elastic_min(const struct opts *o)
{
	const char *on = dt__env_str("DTRAIN_ELASTIC");
	long min = 1;

	if (o->min_workers)
		return o->min_workers;
	/* (with servers too: their workers are elastic as well) */
	if (on == NULL || strcmp(on, "1") != 0)
		return 0;
	if (dt__env_long("DTRAIN_ELASTIC_MIN", 1, 1, 1L << 20, &min))
		return 1;
	return min;
}

/* How long the scheduler of an elastic job below its minimum waits for
 * workers to join: DTRAIN_ELASTIC_TIMEOUT as the processes get it (the
 * last --env or --elastic-timeout, else this environment's), default 600. */
static long
elastic_wait(const struct opts *o)
{
	static const char key[] = "DTRAIN_ELASTIC_TIMEOUT=";
	const char *v = NULL;
	long s = 600;

	for (size_t i = 0; i < o->env.n; i++)
		if (strncmp(o->env.v[i], key, sizeof(key) - 1) == 0)
			v = o->env.v[i] + sizeof(key) - 1;
	if (v ? dt__parse_long("DTRAIN_ELASTIC_TIMEOUT", v, 1, 7 * 86400, &s)
	      : dt__env_long("DTRAIN_ELASTIC_TIMEOUT", 600, 1, 7 * 86400, &s))
		return 600;
	return s;
}

/*
 * Signals: SIGCHLD, SIGINT, SIGTERM and SIGHUP arrive through a signalfd
 * in the poll loop. A SIGCHLD inherited as ignored would make the kernel
 * reap children for us, and an ignored SIGTERM would never reach the
 * signalfd, so both are reset (SIGINT and SIGHUP inherited as ignored stay
 * ignored, as under nohup). What was there before is kept in r, for
 * run_job's end. -1 on failure, said.
 */
static int
take_signals(struct run *r)
{
	struct sigaction sa = {0};
	sigset_t set;

	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, &r->old_pipe);
	sa.sa_handler = SIG_DFL;
	sigaction(SIGCHLD, &sa, &r->old_chld);
	sigaction(SIGTERM, &sa, &r->old_term);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, &r->orig_mask);
	if ((r->sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
		say("signalfd: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* The scheduler's socket, before anything starts (r->listen_fd), and the
 * address every process dials: uri (INET_ADDRSTRLEN) and port (16). With
 * --no-scheduler, the one this environment names, if any. -1 on failure,
 * said. */
static int
scheduler_socket(const struct opts *o, const struct hosts *h, struct run *r,
                 char *uri, char *port)
{
	struct in_addr addr;
	int portnum = 0;
	dt_err err;

	if (o->no_scheduler && dt__env_str("DMLC_PS_ROOT_URI") &&
	    dt__env_str("DMLC_PS_ROOT_PORT")) {
		snprintf(uri, INET_ADDRSTRLEN, "%s",
		         getenv("DMLC_PS_ROOT_URI"));
		snprintf(port, 16, "%s", getenv("DMLC_PS_ROOT_PORT"));
		return 0;
	}
	if ((err = scheduler_addr(o, h, &addr)) ||
	    (err = listen_on(addr, &r->listen_fd, &portnum))) {
		say("%s", dt_errmsg());
		return -1;
	}
	inet_ntop(AF_INET, &addr, uri, INET_ADDRSTRLEN);
	snprintf(port, 16, "%d", portnum);
	if (o->no_scheduler) {
		close(r->listen_fd);
		r->listen_fd = -1;
	}
	return 0;
}

static int
run_job(const struct opts *o, const struct hosts *h, struct ctx *c)
{
	struct run r = {.sfd = -1, .listen_fd = -1, .guard_fd = -1};
	struct proc *p = NULL;
	size_t n = 0;
	char uri[INET_ADDRSTRLEN], port[16], lfd[16];
	int rc = RC_FAIL;
	dt_err err;

	r.verbose = o->verbose;
	r.self = getpid();
	r.timeout_s = o->timeout_s;
	r.grace_s = o->grace_s;
	if (o->timeout_s)
		r.deadline = dt__now_ns() + (uint64_t)o->timeout_s * NS_PER_S;
	open_std_fds();

	if (take_signals(&r))
		goto out;
	guard_start(&r);
	if (scheduler_socket(o, h, &r, uri, port))
		goto out;
	snprintf(lfd, sizeof(lfd), "%d", r.listen_fd);
	c->uri = uri;
	c->port = port;
	c->listen_fd = lfd;
	if ((err = build_ctx(o, c)) || (err = prepare_auth(o, c))) {
		say("%s", dt_errmsg());
		goto out;
	}
	if (o->verbose)
		say("scheduler address %s:%s", uri, port);

	if (o->sync_dir && (rc = o->be->sync(o, h, c, &r)) != 0)
		goto out;
	if (o->be->before && (rc = o->be->before(h, c, &r)) != 0)
		goto out;
	if ((err = build_plan(o, h, c, &p, &n))) {
		say("%s", dt_errmsg());
		rc = RC_FAIL;
		goto out;
	}
	raise_nofile(&r,
	             n + (size_t)(o->workers + o->servers + 2 * o->restart) +
	                 DISCOVER_ROOM(o));
	r.restart_max = o->restart;
	r.elastic_min = elastic_min(o);
	r.elastic_wait_s = elastic_wait(o);
	r.spare = (size_t)(2 * o->restart) + DISCOVER_ROOM(o);
	if ((err = discover_create(&r, o, c, h, n + r.spare))) {
		say("%s", dt_errmsg());
		rc = RC_FAIL;
		goto out;
	}
	rc = run_procs(&r, p, n);
	n = r.n; /* (with the restarted and discovered ones) */
	discover_free(&r);
	r.restart_max = 0;
	r.spare = 0;
	if (rc != 0)
		say("job failed: %s", r.reason);
	else if (o->verbose)
		say("job finished");
	if (o->be->after)
		o->be->after(h, c, &r);
out:
	procs_free(p, n);
	if (r.listen_fd >= 0)
		close(r.listen_fd);
	guard_stop(&r);
	if (r.sfd >= 0)
		close(r.sfd);
	if (r.nofile_raised)
		setrlimit(RLIMIT_NOFILE, &r.orig_nofile);
	sigprocmask(SIG_SETMASK, &r.orig_mask, NULL);
	sigaction(SIGCHLD, &r.old_chld, NULL);
	sigaction(SIGTERM, &r.old_term, NULL);
	sigaction(SIGPIPE, &r.old_pipe, NULL);
	return rc;
}

/*
 * `dtrain launch`; argv[0] is "launch". Returns the exit status: 0 when
 * every worker exited 0 and the servers and the scheduler then finished by
 * themselves; 1 when a process failed, did not finish within --grace, or
 * could not be started; 2 for bad usage (the message names the option);
 * 124 when --timeout passed; 128+N when the launcher got signal N. Every
 * process of the job has been stopped and reaped when it returns.
 */
int
dt__cli_launch(int argc, char **argv)
{
	struct opts o;
	struct hosts h = {0};
	struct ctx c = {0};
	char self[PATH_MAX], cwd[PATH_MAX];
	ssize_t m;
	dt_err err;
	int rc = RC_USAGE;

	if ((err = parse_opts(argc, argv, &o)) != DT_OK) {
		fprintf(stderr, "dtrain launch: %s\n", dt_errmsg());
		fprintf(stderr, "Try 'dtrain launch --help'.\n");
		goto out;
	}
	if (o.help) {
		usage(stdout);
		rc = 0;
		goto out;
	}
	/* A misspelt variable is named here once, for the whole job: the
	 * nodes it starts (DTRAIN_LAUNCHED) do not repeat it. */
	dt__env_warn_unknown("dtrain launch");
	if (o.hostfile && o.be->hosts == HOSTS_UNUSED)
		say("warning: -H is not used by --launcher %s", o.be->name);
	else if (o.hostfile && (err = read_hostfile(o.hostfile, &h))) {
		fprintf(stderr, "dtrain launch: %s\n", dt_errmsg());
		goto out;
	}
	if (getcwd(cwd, sizeof(cwd)) == NULL) {
		say("getcwd: %s", strerror(errno));
		rc = RC_FAIL;
		goto out;
	}
	if ((m = readlink("/proc/self/exe", self, sizeof(self) - 1)) < 0)
		snprintf(self, sizeof(self), "dtrain");
	else
		self[m] = '\0';
	c.exe_exec = prog("DTRAIN_EXE", "/proc/self/exe");
	c.exe_name = prog("DTRAIN_EXE", self);
	c.cwd = o.sync_dir ? o.sync_dir : cwd;
	c.local_cwd = cwd;
	c.ssh = prog("DTRAIN_SSH", "ssh");
	c.rsync = prog("DTRAIN_RSYNC", "rsync");
	c.mpirun = prog("DTRAIN_MPIRUN", "mpirun");
	c.srun = prog("DTRAIN_SRUN", "srun");
	{
		long t;

		if ((err = dt__env_long("DTRAIN_SSH_CONNECT_TIMEOUT", 10, 1,
		                        3600, &t))) {
			fprintf(stderr, "dtrain launch: %s\n", dt_errmsg());
			goto out;
		}
		snprintf(c.ssh_timeout, sizeof(c.ssh_timeout),
		         "ConnectTimeout=%ld", t);
		if ((err = dt__env_long("DTRAIN_RANK_WRAP", 1, 0, 1, &t))) {
			fprintf(stderr, "dtrain launch: %s\n", dt_errmsg());
			goto out;
		}
		c.rank_wrap = (int)t;
	}

	if (o.dry_run) {
		struct proc *p = NULL;
		size_t n = 0;
		int here = o.be->hosts == HOSTS_UNUSED && !o.be->sched_addr;

		/* The address is shown as given: nothing is resolved. */
		c.uri = dt__env_str("DMLC_NODE_HOST");
		if (here || c.uri == NULL)
			c.uri = !here && h.n ? h.h[0].name : "127.0.0.1";
		c.port = "PORT";
		c.listen_fd = "FD";
		rc = RC_FAIL;
		if ((err = build_ctx(&o, &c)) || (err = prepare_auth(&o, &c)) ||
		    (o.sync_dir && (err = build_sync(&o, &h, &c, &p, &n)))) {
			say("%s", dt_errmsg());
			goto out;
		}
		dry_run(p, n);
		procs_free(p, n);
		if ((err = build_plan(&o, &h, &c, &p, &n))) {
			say("%s", dt_errmsg());
			goto out;
		}
		rc = dry_run(p, n);
		procs_free(p, n);
		goto out;
	}
	rc = run_job(&o, &h, &c);
out:
	ctx_free(&c);
	hosts_free(&h);
	strv_free(&o.env);
	strv_free(&o.sync_exclude);
	return rc;
}
