/*
 * supervise.c - one poll() loop over the processes' output pipes and a
 * signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP) that stops the whole job as
 * soon as any process fails, the launcher is interrupted, or --timeout
 * passes, names the failure most likely the cause, and starts a lost
 * server again under --restart.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/launch/launch.h"

/* A process that stops its own ranks (mpirun) gets this long before
 * SIGTERM reaches the rest of its session. */
#define LEADER_WAIT_MS 1500
/* Below an elastic job's minimum the launcher waits this much longer than
 * the scheduler, whose end of the wait (an abort) then ends the job. */
#define HOLD_MARGIN_S 30

static void
describe_status(int code, int status, char *buf, size_t len)
{
	if (code == CLD_EXITED)
		snprintf(buf, len, "exited with status %d", status);
	else
		snprintf(buf, len, "killed by signal %d (%s)%s", status,
		         strsignal(status),
		         code == CLD_DUMPED ? ", core dumped" : "");
}

static void
describe(const struct proc *p, char *buf, size_t len)
{
	describe_status(p->code, p->status, buf, len);
}

static int
all_exited(const struct run *r, int main_only)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].pid > 0 && !r->p[i].exited &&
		    (!main_only || r->p[i].kind == KIND_MAIN))
			return 0;
	return 1; /* never-started processes (a failed spawn) count too */
}

static int
streams_closed(const struct run *r)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].out[0].fd >= 0 || r->p[i].out[1].fd >= 0)
			return 0;
	return 1;
}

/* Begin stopping the job: SIGTERM now, SIGKILL TERM_WAIT_S later. The
 * first reason (and exit status) wins. */
static void
stop_job(struct run *r, int rc)
{
	if (r->stopping)
		return;
	r->stopping = 1;
	r->rc = rc;
	r->kill_at = dt__now_ns() + TERM_WAIT_S * NS_PER_S;
	r->session_term_at = 0;
	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].term_leader && r->p[i].pid > 0 && !r->p[i].exited)
			r->session_term_at =
			    dt__now_ns() + LEADER_WAIT_MS * NS_PER_MS;
	kill_leaders(r, SIGTERM);
}

/* Which of the exits seen at once to report first (lower first): the
 * first failure is the one named, and of exits that arrive together the
 * cause is likelier a process killed by a signal than one that exited 1,
 * a worker than a server, a server than the scheduler (which exits when it
 * loses any node). */
static int
blame_order(const struct proc *p)
{
	if (p->code == CLD_EXITED && p->status == 0)
		return 100;
	if (p->code != CLD_EXITED)
		return 0;
	return 10 + (p->is_scheduler ? 2 : p->kind == KIND_SERVICE ? 1 : 0);
}

#define BLAME_WAIT_NS (300 * NS_PER_MS)
/* A server or the scheduler that fails first has most often lost a node
 * whose own exit is on its way (slowed by whatever runs at its exit: a
 * leak checker, a core dump): wait longer for it. */
#define BLAME_WAIT_SERVICE_NS (1500 * NS_PER_MS)

/* A live child's state change of the kind `what` (WSTOPPED, WEXITED),
 * looked at without reaping it (WNOWAIT): 1 with *si filled, else 0. */
static int
peek(const struct proc *p, int what, siginfo_t *si)
{
	if (p->pid <= 0 || p->exited)
		return 0;
	memset(si, 0, sizeof(*si));
	return waitid(P_PID, (id_t)p->pid, si, what | WNOHANG | WNOWAIT) == 0 &&
	       si->si_pid == p->pid;
}

/* A process of the job that is stopped now (SIGSTOP, SIGTSTP, a
 * debugger), and its stop signal; NULL: none. Its peers see it fall
 * silent, the scheduler ends the job naming it, and the others exit 1:
 * it, not the first of them, is the cause. (A process on another host is
 * not this launcher's child, and its freeze is seen only by the nodes.) */
static struct proc *
frozen(struct run *r, int *sig)
{
	for (size_t i = 0; i < r->n; i++) {
		struct proc *p = &r->p[i];
		siginfo_t si;

		if (peek(p, WSTOPPED, &si) && si.si_code == CLD_STOPPED) {
			*sig = si.si_status;
			return p;
		}
	}
	return NULL;
}

static struct proc *scheduler_proc(struct run *r);

/* The scheduler ended an elastic job that waited below its minimum: that
 * is the cause to name, not the first node that exited for it. */
static int
elastic_ended(struct run *r)
{
	struct proc *sched;

	if (r->hold_at == 0 || (sched = scheduler_proc(r)) == NULL ||
	    !sched->aborted || !sched->el_below)
		return 0;
	say("the elastic job had fewer workers than --min-workers %ld for "
	    "DTRAIN_ELASTIC_TIMEOUT=%ld s, and its scheduler ended it; "
	    "stopping the job",
	    r->elastic_min, r->elastic_wait_s);
	snprintf(r->reason, sizeof(r->reason),
	         "fewer workers than --min-workers %ld for %ld s",
	         r->elastic_min, r->elastic_wait_s);
	stop_job(r, RC_FAIL);
	return 1;
}

/* Name the failure to blame (a frozen process before any exit but a
 * signal's, then the lowest blame_order, the first seen among equals) and
 * stop the job. */
static void
blame(struct run *r)
{
	struct proc *best = NULL, *fz;
	char how[128];
	int sig = 0;

	long named = 0;

	r->blame_at = 0;
	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].is_scheduler && r->p[i].named_lost_pid)
			named = r->p[i].named_lost_pid;
	for (size_t i = 0; i < r->n; i++) {
		struct proc *p = &r->p[i];

		if (p->failed &&
		    (best == NULL || blame_order(p) < blame_order(best) ||
		     (blame_order(p) == blame_order(best) &&
		      p->exit_seq < best->exit_seq)))
			best = p;
	}
	/* Of failures alike (both exited non-zero), the one the scheduler
	 * lost first is the cause: the others were stopped for it. Exits
	 * noticed together are otherwise in plan order. */
	for (size_t i = 0; best && named && i < r->n; i++) {
		struct proc *p = &r->p[i];

		if (p->failed && p->pid == (pid_t)named &&
		    blame_order(p) == blame_order(best))
			best = p;
	}
	if (best == NULL || r->stopping)
		return;
	if (blame_order(best) > 0 && (fz = frozen(r, &sig)) != NULL) {
		say("%s (pid %d) is frozen (stopped by signal %d, %s): the "
		    "others lost it; stopping the job",
		    fz->label, (int)fz->pid, sig, strsignal(sig));
		snprintf(r->reason, sizeof(r->reason),
		         "%s frozen (stopped by signal %d, %s)", fz->label, sig,
		         strsignal(sig));
		stop_job(r, RC_FAIL);
		return;
	}
	if (elastic_ended(r))
		return;
	describe(best, how, sizeof(how));
	if (best->rank_code) {
		/* mpirun or srun: the rank that failed first, by its own
		 * wrapper's word. */
		char rhow[128];

		describe_status(best->rank_code, best->rank_status, rhow,
		                sizeof(rhow));
		say("%s %ld %s (%s, pid %d, %s); stopping the job",
		    best->tag_role, best->rank, rhow, best->label,
		    (int)best->pid, how);
		snprintf(r->reason, sizeof(r->reason), "%s %ld %s",
		         best->tag_role, best->rank, rhow);
	} else {
		say("%s (pid %d) %s; stopping the job", best->label,
		    (int)best->pid, how);
		snprintf(r->reason, sizeof(r->reason), "%s %s", best->label,
		         how);
	}
	stop_job(r, RC_FAIL);
}

/* --restart: whether a new process may take p's place (a server or a
 * worker of the local or ssh launcher, with restarts left for its role;
 * the scheduler's place is not kept). */
static int
restartable(const struct run *r, const struct proc *p)
{
	int worker = strncmp(p->label, "worker ", 7) == 0;

	if (r->restart_max == 0 || r->spare == 0 || p->line_tag != NULL ||
	    (!worker && strncmp(p->label, "server ", 7) != 0))
		return 0;
	return r->restarts[worker] < r->restart_max;
}

/* Start the new processes note_exit asked for, in the spare slots. */
static void
restart_procs(struct run *r)
{
	size_t n = r->n;

	for (size_t i = 0; i < n && !r->stopping; i++) {
		struct proc *old = &r->p[i], *p;
		dt_err err = DT_OK;

		if (!old->restart_wanted || r->spare == 0)
			continue;
		old->restart_wanted = 0;
		old->replaced = 1;
		p = &r->p[r->n];
		proc_init(p, old->kind, old->host, "%s", old->label);
		p->tag_role = old->tag_role;
		p->line_tag = old->line_tag;
		p->term_leader = old->term_leader;
		p->strip_cr = old->strip_cr;
		p->show_env = old->show_env;
		p->exec_path = old->exec_path;
		p->secret_env = old->secret_env;
		p->stdin_data = old->stdin_data;
		for (size_t k = 0; k < old->argv.n && !err; k++)
			err = strv_dup(&p->argv, old->argv.v[k]);
		for (size_t k = 0; k < old->env.n && !err; k++)
			err = strv_dup(&p->env, old->env.v[k]);
		r->n++;
		r->spare--;
		if (err || spawn(r, p) != DT_OK) {
			say("%s: %s; stopping the job", p->label, dt_errmsg());
			snprintf(r->reason, sizeof(r->reason),
			         "%s could not be started again", p->label);
			stop_job(r, RC_FAIL);
		}
	}
}

/* The scheduler's process, or NULL (--no-scheduler). Its output read
 * first, so that what it said before a worker's exit is known. */
static struct proc *
scheduler_proc(struct run *r)
{
	for (size_t i = 0; i < r->n; i++) {
		struct proc *p = &r->p[i];

		if (!p->is_scheduler)
			continue;
		for (int k = 0; k < 2; k++)
			for (int t = 0; t < 64 && p->out[k].fd >= 0; t++)
				if (!stream_read(p, &p->out[k]))
					break;
		return p;
	}
	return NULL;
}

/* An elastic job: what a worker's death does. 1: at least the minimum
 * of workers remain, and the scheduler gives them a membership without
 * it; 2: fewer remain, and the scheduler waits for workers to join (up to
 * DTRAIN_ELASTIC_TIMEOUT), as does this launcher; 0: the job fails (not
 * elastic, no worker left, or the scheduler is ending the job). Those that
 * finished already count: the job ended well for them. */
static int
elastic_goes_on(struct run *r, const struct proc *p)
{
	struct proc *sched = scheduler_proc(r);
	long workers = 0, left;

	if (r->elastic_min <= 0 || strncmp(p->label, "worker ", 7) != 0 ||
	    (sched && sched->aborted))
		return 0;
	for (size_t i = 0; i < r->n; i++)
		workers += strncmp(r->p[i].label, "worker ", 7) == 0;
	left = workers - r->elastic_lost - 1;
	if (left < 1) {
		say("%s (pid %d): no worker of the elastic job remains",
		    p->label, (int)p->pid);
		return 0;
	}
	r->elastic_lost++;
	if (left >= r->elastic_min)
		return 1;
	if (r->hold_at == 0) {
		r->hold_at =
		    dt__now_ns() +
		    (uint64_t)(r->elastic_wait_s + HOLD_MARGIN_S) * NS_PER_S;
		r->hold_reports = sched ? sched->el_reports : 0;
	}
	return 2;
}

/* Below the minimum: the wait ends when the scheduler announces a
 * membership of at least the minimum (workers joined: started by the host
 * discovery or by hand), or fails the job at its deadline, which the
 * scheduler's own (DTRAIN_ELASTIC_TIMEOUT) comes before. */
static void
elastic_hold_tick(struct run *r, uint64_t now)
{
	struct proc *sched;

	if (r->hold_at == 0 || r->stopping)
		return;
	sched = scheduler_proc(r);
	/* (at the deadline, a membership announced before this launcher
	 * saw the loss counts too: the scheduler's last word is what is) */
	if (sched && !sched->el_below && sched->el_live >= r->elastic_min &&
	    (sched->el_reports != r->hold_reports || now >= r->hold_at)) {
		say("the elastic job has %ld workers again (--min-workers "
		    "%ld)",
		    sched->el_live, r->elastic_min);
		r->hold_at = 0;
		r->elastic_lost = 0;
		for (size_t i = 0; i < r->n; i++)
			r->elastic_lost +=
			    strncmp(r->p[i].label, "worker ", 7) == 0;
		/* (from the scheduler's count: workers started by hand
		 * count, those this launcher lost do not) */
		r->elastic_lost -= sched->el_live;
		return;
	}
	if (now < r->hold_at)
		return;
	say("the elastic job had fewer workers than --min-workers %ld for "
	    "%ld s (DTRAIN_ELASTIC_TIMEOUT %ld s and %d s more); stopping it",
	    r->elastic_min, r->elastic_wait_s + HOLD_MARGIN_S,
	    r->elastic_wait_s, HOLD_MARGIN_S);
	snprintf(r->reason, sizeof(r->reason),
	         "fewer workers than --min-workers %ld for %ld s",
	         r->elastic_min, r->elastic_wait_s + HOLD_MARGIN_S);
	stop_job(r, RC_FAIL);
}

static void
note_exit(struct run *r, struct proc *p)
{
	char how[128];
	int going;

	describe(p, how, sizeof(how));
	p->exit_seq = r->exits++;
	p->in_stop = r->stopping;
	if (r->stopping) {
		if (r->verbose)
			say("%s (pid %d) %s", p->label, (int)p->pid, how);
		return;
	}
	if ((p->code != CLD_EXITED || p->status != 0) && restartable(r, p)) {
		int role = strncmp(p->label, "worker ", 7) == 0;

		r->restarts[role]++;
		p->restart_wanted = 1;
		say("%s (pid %d) %s; starting a new one in its place (%ld of "
		    "%ld)",
		    p->label, (int)p->pid, how, r->restarts[role],
		    r->restart_max);
		return;
	}
	if ((p->code != CLD_EXITED || p->status != 0) &&
	    (going = elastic_goes_on(r, p)) != 0) {
		if (going == 1)
			say("%s (pid %d) %s; the elastic job goes on without "
			    "it",
			    p->label, (int)p->pid, how);
		else
			say("%s (pid %d) %s: fewer workers remain than the "
			    "elastic job's minimum of %ld; waiting up to %ld s "
			    "(DTRAIN_ELASTIC_TIMEOUT) for workers to join",
			    p->label, (int)p->pid, how, r->elastic_min,
			    r->elastic_wait_s);
		return;
	}
	if (p->code != CLD_EXITED || p->status != 0) {
		p->failed = 1;
		if (r->verbose)
			say("%s (pid %d) %s", p->label, (int)p->pid, how);
		/* A process killed by a signal is the likeliest cause: at
		 * once. Otherwise wait a moment for the exit that caused
		 * this one. */
		if (blame_order(p) == 0) {
			blame(r);
		} else {
			/* (a worker's failure after a service's: what the
			 * longer wait was for has come) */
			uint64_t at =
			    dt__now_ns() + (p->kind == KIND_SERVICE
			                        ? BLAME_WAIT_SERVICE_NS
			                        : BLAME_WAIT_NS);

			if (r->blame_at == 0 || at < r->blame_at)
				r->blame_at = at;
		}
		return;
	}
	if (r->verbose)
		say("%s (pid %d) %s", p->label, (int)p->pid, how);
	if (p->kind == KIND_MAIN && all_exited(r, 1) && !all_exited(r, 0) &&
	    r->grace_at == 0)
		r->grace_at =
		    dt__now_ns() + (uint64_t)r->grace_s * NS_PER_S + 1;
}

/* Look for exits without reaping (WNOWAIT): a zombie keeps its pid, so
 * its process group and session id stay ours until the end. */
static void
check_exits(struct run *r)
{
	size_t fresh[64], nfresh = 0;

	for (size_t i = 0; i < r->n; i++) {
		struct proc *p = &r->p[i];
		siginfo_t si;

		if (!peek(p, WEXITED, &si))
			continue;
		p->exited = 1;
		p->code = si.si_code;
		p->status = si.si_status;
		/* Its last words (already in the pipes) come before the
		 * launcher's message about its exit. The bound keeps a
		 * chatty grandchild from holding up the loop. */
		for (int k = 0; k < 2; k++)
			for (int t = 0; t < 64 && p->out[k].fd >= 0; t++)
				if (!stream_read(p, &p->out[k]))
					break;
		if (nfresh == DT_ARRAY_LEN(fresh))
			note_exit(r, p);
		else
			fresh[nfresh++] = i;
	}
	/* Report in blame order (stable: plan order among equals). */
	for (size_t a = 1; a < nfresh; a++)
		for (size_t b = a;
		     b > 0 && blame_order(&r->p[fresh[b]]) <
		                  blame_order(&r->p[fresh[b - 1]]);
		     b--) {
			size_t t = fresh[b];

			fresh[b] = fresh[b - 1];
			fresh[b - 1] = t;
		}
	for (size_t a = 0; a < nfresh; a++)
		note_exit(r, &r->p[fresh[a]]);
}

/* Names of the processes still running, for messages. */
static void
running_list(const struct run *r, char *buf, size_t len)
{
	size_t k = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < r->n && k + 1 < len; i++) {
		const struct proc *p = &r->p[i];
		int m;

		if (p->pid <= 0 || p->exited)
			continue;
		m = snprintf(buf + k, len - k, "%s%s (pid %d)", k ? ", " : "",
		             p->label, (int)p->pid);
		if (m < 0 || (size_t)m >= len - k) {
			snprintf(buf + (len > 5 ? len - 5 : 0), 5, "...");
			break;
		}
		k += (size_t)m;
	}
}

static void
on_signal(struct run *r, int sig)
{
	const char *name = sig == SIGINT    ? "SIGINT"
	                   : sig == SIGTERM ? "SIGTERM"
	                                    : "SIGHUP";

	if (r->stopping) {
		if (!r->killed) {
			say("got %s again; killing the job now", name);
			kill_all(r, SIGKILL);
			r->killed = 1;
		}
		return;
	}
	say("got %s; stopping the job", name);
	snprintf(r->reason, sizeof(r->reason), "stopped by %s", name);
	stop_job(r, 128 + sig);
}

static void
on_timers(struct run *r, uint64_t now)
{
	char list[512];

	if (!r->stopping && r->blame_at && now >= r->blame_at)
		blame(r);
	discover_tick(r, now);
	elastic_hold_tick(r, now);
	if (!r->stopping && r->deadline && now >= r->deadline) {
		say("the job did not finish within --timeout %ld s; stopping "
		    "it",
		    r->timeout_s);
		snprintf(r->reason, sizeof(r->reason), "timed out after %ld s",
		         r->timeout_s);
		stop_job(r, RC_TIMEOUT);
	}
	if (!r->stopping && r->grace_at && now >= r->grace_at &&
	    !all_exited(r, 0)) {
		running_list(r, list, sizeof(list));
		say("all workers finished, but %s did not exit within %ld s "
		    "(--grace); stopping the job%s",
		    list, r->grace_s,
		    strstr(list, "scheduler (pid")
		        ? " (a worker program that exits without joining the "
		          "job, one that does not use dtrain, leaves the "
		          "scheduler waiting for it)"
		        : "");
		snprintf(r->reason, sizeof(r->reason),
		         "servers or scheduler did not finish");
		stop_job(r, RC_FAIL);
	}
	if (r->stopping && !r->killed && r->session_term_at &&
	    now >= r->session_term_at) {
		r->session_term_at = 0;
		kill_all(r, SIGTERM);
	}
	if (r->stopping && !r->killed && now >= r->kill_at) {
		if (!all_exited(r, 0)) {
			running_list(r, list, sizeof(list));
			say("%s still running %d s after SIGTERM; killing",
			    list, TERM_WAIT_S);
		}
		kill_all(r, SIGKILL);
		r->killed = 1;
	}
}

static uint64_t
min_deadline(uint64_t a, uint64_t b)
{
	return a == 0 ? b : b == 0 ? a : DT_MIN(a, b);
}

/*
 * Every process has exited, but its output may still be open: something
 * outside it (a daemon it left) holds the pipe. Give it a moment, kill
 * the sessions, then give up on the output. 1 when the loop is over.
 */
static int
drained(struct run *r, uint64_t now, uint64_t *drain_at, int *drain_killed)
{
	if (streams_closed(r))
		return 1;
	if (*drain_at == 0) {
		*drain_at = now + DRAIN_MS * NS_PER_MS;
	} else if (now >= *drain_at) {
		if (*drain_killed) {
			say("output pipes still open after all processes "
			    "exited; not waiting");
			return 1;
		}
		kill_all(r, SIGKILL);
		*drain_killed = 1;
		*drain_at = now + DRAIN_MS * NS_PER_MS;
	}
	return 0;
}

/* poll's timeout (ms, -1: none) for the next of the run's deadlines. */
static int
next_timeout(struct run *r, uint64_t now, uint64_t drain_at)
{
	uint64_t next = 0;

	if (!r->stopping)
		next = min_deadline(
		    min_deadline(min_deadline(r->deadline, r->grace_at),
		                 min_deadline(r->blame_at, r->hold_at)),
		    discover_next(r));
	else if (!r->killed)
		next = min_deadline(r->kill_at, r->session_term_at);
	next = min_deadline(next, drain_at);
	if (next == 0)
		return -1;
	return next <= now
	           ? 0
	           : (int)DT_MIN((next - now + NS_PER_MS - 1) / NS_PER_MS,
	                         (uint64_t)INT_MAX);
}

/* The signals that came (signalfd): SIGCHLD's exits and restarts, the
 * others passed on. */
static void
take_signals(struct run *r)
{
	struct signalfd_siginfo si;
	int chld = 0;

	while (read(r->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGCHLD)
			chld = 1;
		else
			on_signal(r, (int)si.ssi_signo);
	}
	if (chld) {
		check_exits(r);
		restart_procs(r);
	}
}

/* The end: what the processes left behind in their sessions goes too;
 * then they are reaped, which frees their ids. */
static void
reap_all(struct run *r)
{
	kill_all(r, SIGKILL);
	for (size_t i = 0; i < r->n; i++) {
		struct proc *p = &r->p[i];

		for (int k = 0; k < 2; k++)
			stream_close(p, &p->out[k]);
		if (p->pid > 0)
			while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
				;
	}
}

/*
 * Supervise r->p until every process has exited and its output is read;
 * then kill what is left of their sessions and reap them. Returns the exit
 * status of the launcher for this set of processes.
 */
static int
supervise(struct run *r)
{
	size_t cap = 1 + 2 * (r->n + r->spare);
	struct pollfd *pfd = calloc(cap, sizeof(*pfd));
	struct stream **pst = calloc(cap, sizeof(*pst));
	struct proc **pp = calloc(cap, sizeof(*pp));
	uint64_t drain_at = 0;
	int drain_killed = 0;

	if (!pfd || !pst || !pp) {
		say("out of memory; stopping the job");
		stop_job(r, RC_FAIL);
		kill_all(r, SIGKILL);
		r->killed = 1;
	}
	check_exits(r);
	while (pfd && pst && pp) {
		uint64_t now = dt__now_ns();
		size_t nfd = 0;
		int n;

		on_timers(r, now);
		if (!r->stopping && r->blame_at && all_exited(r, 0))
			blame(r); /* no exit left to wait for */
		if (all_exited(r, 0) &&
		    drained(r, now, &drain_at, &drain_killed))
			break;
		pfd[nfd++] = (struct pollfd){.fd = r->sfd, .events = POLLIN};
		for (size_t i = 0; i < r->n; i++)
			for (int k = 0; k < 2; k++)
				if (r->p[i].out[k].fd >= 0) {
					pst[nfd] = &r->p[i].out[k];
					pp[nfd] = &r->p[i];
					pfd[nfd++] = (struct pollfd){
					    .fd = r->p[i].out[k].fd,
					    .events = POLLIN};
				}
		n = poll(pfd, nfd, next_timeout(r, now, drain_at));
		if (n < 0 && errno != EINTR) {
			say("poll: %s; stopping the job", strerror(errno));
			stop_job(r, RC_FAIL);
			kill_all(r, SIGKILL);
			r->killed = 1;
			break;
		}
		for (size_t i = 1; n > 0 && i < nfd; i++)
			if (pfd[i].revents)
				stream_read(pp[i], pst[i]);
		if (n > 0 && pfd[0].revents)
			take_signals(r);
	}
	free(pfd);
	free(pst);
	free(pp);
	reap_all(r);
	if (!r->stopping)
		r->rc = 0;
	return r->rc;
}

int
run_procs(struct run *r, struct proc *p, size_t n)
{
	r->p = p;
	r->n = n;
	r->stopping = r->killed = 0;
	r->kill_at = r->grace_at = r->blame_at = r->session_term_at = 0;
	r->rc = -1;
	r->reason[0] = '\0';
	for (size_t i = 0; i < n && !r->stopping; i++) {
		if (r->verbose) {
			char *line = plan_line(&p[i]);

			say("plan: %s", line ? line : p[i].label);
			free(line);
		}
		if (spawn(r, &p[i]) != DT_OK) {
			say("%s; stopping the job", dt_errmsg());
			snprintf(r->reason, sizeof(r->reason), "%s",
			         dt_errmsg());
			stop_job(r, RC_FAIL);
		}
		if (p[i].is_scheduler && r->listen_fd >= 0) {
			/* Now only the scheduler holds it: if it dies,
			 * connecting nodes are refused, not left hanging. */
			close(r->listen_fd);
			r->listen_fd = -1;
		}
	}
	return supervise(r);
}
