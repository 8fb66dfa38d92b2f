/*
 * launch.h - the modules of `dtrain launch`, internal to the command.
 *
 * The launcher is a pipeline: options and the host file (opts.c) give a
 * plan (plan.c): every process of the job with its command line and
 * variables, made by one back-end per engine (be_local.c, be_ssh.c,
 * be_mpi.c, be_slurm.c: the table below). The scheduler's address comes
 * from addr.c; spawn.c starts the processes so that none can outlive the
 * job; output.c turns their output into prefixed lines; supervise.c
 * watches them to the end; launch.c ties it together.
 *
 * Adding a back-end means writing one struct dl_backend in a file of its
 * own and listing it in dl_backends (backends.c).
 */
#ifndef DT_CLI_LAUNCH_H
#define DT_CLI_LAUNCH_H

#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "common/limits.h"
#include "common/util.h"

#define TERM_WAIT_S 3     /* SIGTERM, then SIGKILL this much later */
#define DRAIN_MS    1000  /* wait for pipes to close after all exits */
#define LINE_CAP    65536 /* longer output lines are split */
#define MAX_SLOTS   1024  /* slots= of one host */
#define MAX_TIMEOUT (100L * 365 * 24 * 3600)
#define NS_PER_MS   1000000ull
#define NS_PER_S    1000000000ull

/* Exit statuses (see docs/launcher.md). */
#define RC_FAIL    1
#define RC_USAGE   2
#define RC_TIMEOUT 124

/* The line a rank's wrapper (`dtrain rank-exec`, rank.c) writes on
 * its standard error when the rank fails: the marker, then "CODE STATUS"
 * as waitid gives them. Under mpirun and srun it arrives tagged with the
 * rank, so the launcher names the rank that failed. */
#define RANK_MARK "\036dtrain-rank-exit "

/* ------------------------------------------------------------------ */
/* Strings (strs.c).                                                   */

/* A NULL-terminated vector of owned strings. */
struct strv {
	char **v;
	size_t n, cap;
};

dt_err strv_add(struct strv *s, char *str); /* takes str; NULL: ENOMEM */
dt_err strv_dup(struct strv *s, const char *str);
dt_err strv_addf(struct strv *s, const char *fmt, ...) DT_PRINTF(2, 3);
dt_err strv_extend(struct strv *s, char *const *v, size_t n);
void strv_free(struct strv *s);

/* A growable string; an allocation failure is remembered, not fatal. */
struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

void sb_addn(struct sbuf *b, const char *s, size_t n);
void sb_add(struct sbuf *b, const char *s);
void sb_addq(struct sbuf *b, const char *s); /* one shell word */
char *sb_take(struct sbuf *b);               /* NULL if out of memory */

/* Whole writes to our stdout (1) or stderr (2); "dtrain launch: " lines. */
void write_all(int fd, const char *p, size_t n);
void say(const char *fmt, ...) DT_PRINTF(1, 2);

/* ------------------------------------------------------------------ */
/* Options and the host file (opts.c).                                 */

struct dl_backend;

struct opts {
	long workers; /* -n */
	long servers; /* -s, -1 = as many as workers */
	const char *hostfile;
	const struct dl_backend *be; /* --launcher */
	int launcher_set;
	struct strv env; /* --env, resolved to K=V */
	const char *sync_dir;
	struct strv sync_exclude; /* --sync-exclude patterns, for rsync */
	long timeout_s;           /* 0 = none */
	long grace_s; /* servers and scheduler finish after the workers */
	long restart; /* --restart: new processes per role for lost ones */
	/* --min-workers / --max-workers: an elastic job (0: not set) */
	long min_workers, max_workers;
	long elastic_timeout;  /* --elastic-timeout (0: not set) */
	const char *discovery; /* --host-discovery-script, or NULL */
	/* Workers DTRAIN_ELASTIC_SCHEDULE takes in ("+N"), which the local
	 * launcher starts with the job (0 with a discovery script) */
	long sched_joiners;
	int verbose, dry_run, no_scheduler, help;
	char **cmd; /* the worker command, NULL-terminated */
	int ncmd;
};

/* One line of the host file: "host[:port] [slots=N]". */
struct host {
	char *name;
	char *port; /* ssh port, or NULL */
	long slots; /* processes it takes per pass (1 unless slots=N) */
};

struct hosts {
	struct host *h;
	size_t n;
};

void usage(FILE *f);
dt_err parse_opts(int argc, char **argv, struct opts *o);
int is_reserved(const char *name, size_t n); /* set by the launcher */
dt_err read_hostfile(const char *path, struct hosts *out);
void hosts_free(struct hosts *h);

/* ------------------------------------------------------------------ */
/* The plan (plan.c): every process of the job.                        */

/* MAIN processes (workers, rsync) must all exit 0 for the job to end;
 * SERVICE processes (scheduler, servers) must then finish by themselves. */
enum kind { KIND_MAIN, KIND_SERVICE };

struct stream {
	int fd;  /* read end of the pipe, -1 once closed */
	int dst; /* 1 or 2: our stdout or stderr */
	char *buf;
	size_t len, cap;
};

struct proc {
	char label[80];       /* "worker 1", "scheduler", "workers" */
	char host[256];       /* where it runs, for the plan */
	const char *tag_role; /* "worker"/"server" for tagged lines */
	enum kind kind;
	/* A process of several ranks (mpirun, srun) marks each line with
	 * the rank: the back-end's parser of that mark, or NULL. */
	size_t (*line_tag)(const char *s, size_t n, long *rank);
	int term_leader;  /* stop: SIGTERM to the leader alone first */
	int strip_cr;     /* remote pty output ends lines with \r\n */
	int is_scheduler; /* inherits the listening socket */
	/* The scheduler: the pid its "aborting the job: worker 1 (pid N
	 * ..." line named as the node lost, 0 if none (output.c). */
	long named_lost_pid;
	/* The scheduler: it said it ends the job (an abort), and of an
	 * elastic job the size of the last membership it announced, whether
	 * it said since that it waits below the minimum, and how many
	 * memberships it announced (output.c). */
	int aborted;
	long el_live;
	int el_below;
	unsigned el_reports;
	int show_env;           /* the plan shows the variables as env K=V */
	const char *exec_path;  /* path to exec, NULL: search argv[0] */
	const char *secret_env; /* "DTRAIN_SECRET=..." added unseen, or NULL */
	const char *stdin_data; /* written to the process's stdin, or NULL */
	/* A command run to its end first, in the process's own child (so
	 * the launcher never waits for it): pre_stdin on its input, at
	 * most pre_timeout_s; if it fails the process exits 1 instead of
	 * running argv (ssh's joiners: their secret file). */
	struct strv pre_argv;
	const char *pre_stdin;
	const char *pre_what; /* what it does, for the failure's line */
	int pre_timeout_s;
	struct strv argv;
	struct strv env; /* K=V added to the launcher's environment */
	pid_t pid;       /* 0 until started */
	int exited;
	int failed;         /* exited non-zero or by a signal */
	int restart_wanted; /* --restart: a new process is to take its place */
	int replaced;       /* one did */
	unsigned exit_seq;  /* in which order its exit was noted */
	/* It exited once the launcher was stopping the run: its status
	 * may be the launcher's signal's doing (ssh killed by SIGTERM
	 * exits 255, as when it cannot connect). */
	int in_stop;
	int code;   /* CLD_EXITED, CLD_KILLED or CLD_DUMPED */
	int status; /* exit status or signal */
	/* The first of its ranks that failed, from the wrapper's line. */
	long rank;
	int rank_code, rank_status; /* rank_code 0: none seen */
	struct stream out[2];
};

/* What the plan needs besides the options. */
struct ctx {
	const char *uri, *port, *listen_fd; /* scheduler address */
	const char *exe_exec;               /* dtrain to exec locally */
	const char *exe_name;  /* dtrain's path, shown and used remotely */
	const char *cwd;       /* directory of remote processes */
	const char *local_cwd; /* the launcher's directory, for rsync */
	const char *ssh, *rsync, *mpirun, *srun;
	char ssh_timeout[48]; /* "ConnectTimeout=N" (DTRAIN_SSH_CONNECT_TIMEOUT)
	                       */
	int rank_wrap;        /* DTRAIN_RANK_WRAP: rank-exec under mpi, slurm */
	struct strv common;   /* DMLC_* and DTRAIN_LAUNCHED, then --env */
	struct strv forward;  /* variables passed on to other hosts */
	/* Authentication (docs/security.md): the job's id, and the secret
	 * every process gets in its environment, never on a command line
	 * or in the plan: "DTRAIN_SECRET=<64 hex digits>" (made here, or the
	 * launcher's own), "DTRAIN_SECRET_FILE=PATH" (the launcher's own), or
	 * NULL with DTRAIN_AUTH=none. secret_line is the secret alone, what
	 * the ssh launcher writes to a file on each host. */
	char job_id[40];
	char *secret_env;
	char *secret_line;
	/* ssh: "DIR/.dtrain-<32 random hex digits>"; host I's secret is
	 * the file "secret" in the directory PREFIX-I (be_ssh.c). */
	char *remote_secret_dir;
	char *sync_mark; /* "DIR/.dtrain-new-JOB": a directory a copy made */
	/* mpi: "$TMPDIR/dtrain-mpi-XXXXXX", this host's session directories
	 * of the job's mpiruns, one per role (be_mpi.c); removed by
	 * ctx_free. */
	char *mpi_tmp;
	unsigned char *unreached; /* by host: ssh could not connect there */
};

/* The processes being planned; back-ends append to it. */
struct plan {
	const struct opts *o;
	const struct hosts *h;
	const struct ctx *c;
	struct proc *p;
	size_t n, max;
};

struct proc *proc_init(struct proc *p, enum kind kind, const char *host,
                       const char *fmt, ...) DT_PRINTF(4, 5);
void procs_free(struct proc *p, size_t n);
/* The next process of the plan (zeroed), or NULL when it is full. */
struct proc *plan_next(struct plan *pl, enum kind kind, const char *host,
                       const char *fmt, ...) DT_PRINTF(4, 5);
/* DMLC_ROLE, the rank request id_var=id, the forwarded (remote) and the
 * common variables. */
dt_err role_env(struct proc *p, const struct ctx *c, const char *role,
                const char *id_var, long id, int remote);
/* argv += cmd, or `dtrain ROLE` when cmd is NULL. */
dt_err role_cmd(struct proc *p, const struct ctx *c, const char *role,
                char **cmd, size_t ncmd);
/* The hosts of a role's ranks, *out[i] for rank i (malloc'd; the
 * caller frees it), by one rule for every back-end that places processes
 * on hosts (plan.c says it). O(ranks + slots + hosts^2). */
dt_err plan_hosts(const struct plan *pl, int worker, const struct host ***out);
dt_err build_plan(const struct opts *o, const struct hosts *h,
                  const struct ctx *c, struct proc **out, size_t *nout);
char *plan_line(const struct proc *p);
dt_err build_ctx(const struct opts *o, struct ctx *c);
dt_err prepare_auth(const struct opts *o, struct ctx *c);
void ctx_free(struct ctx *c);

/* ------------------------------------------------------------------ */
/* Back-ends.                                                          */

struct run;

struct dl_backend {
	const char *name;
	enum { HOSTS_UNUSED, HOSTS_OPTIONAL, HOSTS_REQUIRED } hosts;
	int restart; /* --restart can start a lost server again */
	/* --sync-dst-dir: copy the working directory to the hosts; an exit
	 * status, 0 to go on. NULL: not supported. */
	int (*sync)(const struct opts *o, const struct hosts *h, struct ctx *c,
	            struct run *r);
	/* The secret reaches the processes as a file the launcher writes
	 * on every host (ssh); otherwise through the environment. */
	int secret_file;
	/* Append the processes of a role ("server": cmd NULL, or
	 * "worker") with count ranks to the plan. */
	dt_err (*plan_role)(struct plan *pl, const char *role, long count,
	                    char **cmd, size_t ncmd);
	/* Where the scheduler listens when it is not on the first host of
	 * -H or DMLC_NODE_HOST; NULL: 127.0.0.1. */
	dt_err (*sched_addr)(struct in_addr *out);
	/* Before the job's processes start, and after they are gone (the
	 * ssh secret file): an exit status, 0 to go on. NULL: nothing. */
	int (*before)(const struct hosts *h, struct ctx *c, struct run *r);
	void (*after)(const struct hosts *h, struct ctx *c, struct run *r);
	/* --host-discovery-script: fill p (proc_init'ed) as a worker on
	 * host that joins the running elastic job (no rank asked for), or
	 * fail naming why it cannot run there; number is the one in its
	 * label, unique in the run. NULL: a copy of the launch's first
	 * worker without its rank, on this machine (local). */
	dt_err (*joiner)(struct proc *p, const struct ctx *c,
	                 const struct hosts *h, const char *host, long number,
	                 char **cmd, size_t ncmd);
	/* --host-discovery-script works with it (not with mpirun and srun,
	 * whose set of ranks is fixed when they start) */
	int discovery;
};

extern const struct dl_backend dl_local, dl_ssh, dl_mpi, dl_slurm;
extern const struct dl_backend *const dl_backends[];
extern const size_t dl_nbackends;

/* plan.c: a process on this machine (the scheduler, and every role of
 * the local back-end). */
dt_err plan_local(struct proc *p, const struct ctx *c, const char *role,
                  const char *id_var, long id, char **cmd, size_t ncmd);
/* be_ssh.c: the rsync of the working directory to every host (run by the
 * back-end's sync; shown by --dry-run). */
dt_err build_sync(const struct opts *o, const struct hosts *h,
                  const struct ctx *c, struct proc **out, size_t *nout);
/* be_mpi.c, be_slurm.c: the rank marks of their lines. */
size_t mpi_tag(const char *s, size_t n, long *rank);
/* Remove the directory tree DIR (the mpi back-end's session
 * directories), not following symbolic links. */
void mpi_tmp_remove(const char *dir);
size_t slurm_tag(const char *s, size_t n, long *rank);
/* The rank wrapper in front of a command of mpirun or srun. */
dt_err rank_wrap(struct proc *p, const struct ctx *c);

/* ------------------------------------------------------------------ */
/* The scheduler's address (addr.c).                                   */

dt_err resolve4(const char *what, const char *host, struct in_addr *out);
dt_err scheduler_addr(const struct opts *o, const struct hosts *h,
                      struct in_addr *out);
dt_err listen_on(struct in_addr addr, int *fd_out, int *port_out);

/* ------------------------------------------------------------------ */
/* Running processes (spawn.c, output.c, supervise.c).                 */

struct run {
	struct proc *p;
	size_t n;
	int verbose;
	pid_t self;
	int sfd;       /* signalfd: SIGCHLD, SIGINT, SIGTERM, SIGHUP */
	int listen_fd; /* the scheduler's socket until it is handed over */
	int guard_fd;  /* write end of the guard's pipe, -1 without guard */
	pid_t guard_pid;
	sigset_t orig_mask;
	struct sigaction old_pipe, old_chld, old_term;
	struct rlimit orig_nofile;
	int nofile_raised;
	uint64_t deadline; /* --timeout, 0 = none */
	long timeout_s;
	long grace_s;
	/* State of the current supervise() call. */
	int stopping, killed;
	uint64_t kill_at, grace_at, session_term_at;
	/* A failure seen: who to blame is chosen at blame_at, among the
	 * failures seen by then (one exit often brings others, a moment
	 * later or sooner: the scheduler exits when it loses a node). */
	uint64_t blame_at;
	unsigned exits; /* exits noted, for their order */
	/* --restart: how many new processes each role may get, how many it
	 * got (servers, workers), and free slots after p[n] for them. */
	long restart_max;
	long restarts[2];
	/* An elastic job (DTRAIN_ELASTIC=1): a worker's death does not end
	 * it while at least elastic_min workers run (0: not elastic). */
	long elastic_min;
	long elastic_lost; /* workers it went on without */
	/* Below the minimum: the scheduler waits elastic_wait_s
	 * (DTRAIN_ELASTIC_TIMEOUT) for workers to join; the launcher keeps
	 * the job that long and a margin (hold_at, 0: not below it), until
	 * the scheduler announces a membership of at least the minimum
	 * after its hold_reports-th. */
	long elastic_wait_s;
	uint64_t hold_at;
	unsigned hold_reports;
	/* --host-discovery-script (discover.c), NULL without. */
	struct dl_discover *disc;
	size_t spare;
	int rc;
	char reason[256];
};

/* spawn.c */
void kill_all(struct run *r, int sig);
void kill_leaders(struct run *r, int sig); /* term_leader processes */
void guard_start(struct run *r);
void guard_stop(struct run *r);
dt_err spawn(struct run *r, struct proc *p);
void open_std_fds(void);
void raise_nofile(struct run *r, size_t nprocs);

/* output.c */
void stream_feed(struct proc *p, struct stream *st, const char *data, size_t n);
void stream_close(struct proc *p, struct stream *st);
int stream_read(struct proc *p, struct stream *st);

/* discover.c: --host-discovery-script. The script runs every
 * DISCOVER_INTERVAL_S seconds from the supervising loop's timers
 * (discover_tick; discover_next: when, 0 for never); nprocs: the room of
 * r->p, whose spare slots take the workers it starts. */
#define DISCOVER_INTERVAL_S 2
/* The room the plan keeps for the workers it may start (a new one for
 * each failed one too, until the hosts are blacklisted). */
#define DISCOVER_ROOM(o) ((o)->discovery ? (size_t)(4 * (o)->max_workers) : 0)
struct dl_discover;
dt_err discover_create(struct run *r, const struct opts *o, const struct ctx *c,
                       const struct hosts *h, size_t nprocs);
void discover_tick(struct run *r, uint64_t now);
uint64_t discover_next(const struct run *r);
void discover_free(struct run *r);

/* supervise.c: start p[0..n) and supervise them to the end; the exit
 * status for this set of processes (r->reason says why it failed). */
int run_procs(struct run *r, struct proc *p, size_t n);

#endif
