/*
 * rank.c - `dtrain rank-exec [--] CMD [ARGS...]`, the wrapper the mpi and
 * slurm back-ends put in front of every rank's command.
 *
 * mpirun and srun report a failed job by their own exit status, which
 * names no rank (srun's is often the SIGTERM it sent the others). The
 * wrapper runs CMD as its child, passes on every signal meant to stop it,
 * and when CMD fails writes one line on its standard error, RANK_MARK
 * "CODE STATUS"; mpirun --tag-output and srun --label mark that line with
 * the rank, and the launcher (output.c) names that rank. The wrapper then
 * ends as CMD did: the same exit status, or the same signal.
 *
 * CMD leads a process group of its own, and the signals go to the whole
 * group. When CMD has exited, whatever it left in its group (a child that
 * ignores SIGHUP, a daemon) gets SIGTERM, and SIGKILL RANK_KILL_MS later:
 * an engine that tracks processes by parent (Slurm's proctrack/linuxproc,
 * mpirun's orted) loses sight of an orphan, the wrapper does not: it is a
 * child subreaper, so orphans of CMD's tree become its children. If the
 * wrapper itself is killed (mpirun's orted sends SIGKILL right after
 * SIGTERM, see be_mpi.c), a guard process of its own group, waiting on a
 * pipe only the wrapper holds, kills CMD's group.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/launch/launch.h"

#define RANK_KILL_MS 2000

/* Reap every child that has exited but the guard (a subreaper's
 * orphans are its children); *guard becomes -1 if it was reaped too. */
static void
reap(pid_t *guard)
{
	pid_t w;

	while ((w = waitpid(-1, NULL, WNOHANG)) > 0)
		if (w == *guard)
			*guard = -1;
}

/* End what is left of CMD's group (reaping as it goes: a zombie would
 * keep the group alive). */
static void
end_group(pid_t pgid, pid_t *guard)
{
	reap(guard);
	if (kill(-pgid, SIGTERM) < 0)
		return; /* nothing left */
	kill(-pgid, SIGCONT);
	for (int i = 0; i < RANK_KILL_MS / 20; i++) {
		reap(guard);
		if (kill(-pgid, 0) < 0)
			return;
		usleep(20000);
	}
	kill(-pgid, SIGKILL);
	usleep(1000);
	reap(guard);
}

/* The guard: SIGKILL to CMD's group when the wrapper dies without
 * saying it is done. */
static pid_t
rank_guard(pid_t pgid, int *wfd)
{
	int fds[2], fd;
	ssize_t m;
	pid_t g;
	char c;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -1;
	if ((g = fork()) == 0) {
		setpgid(0, 0);
		close(fds[1]);
		if ((fd = open("/dev/null", O_RDWR)) >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			dup2(fd, 2);
		}
		c = 0;
		while ((m = read(fds[0], &c, 1)) < 0 && errno == EINTR)
			;
		if (m != 1 || c != 'd')
			kill(-pgid, SIGKILL);
		_exit(0);
	}
	close(fds[0]);
	if (g < 0) {
		close(fds[1]);
		return -1;
	}
	*wfd = fds[1];
	return g;
}

static void
rank_guard_done(pid_t g, int wfd)
{
	if (g <= 0)
		return;
	if (write(wfd, "d", 1) < 0) {
		/* the guard is gone: nothing to tell */
	}
	close(wfd);
	while (waitpid(g, NULL, 0) < 0 && errno == EINTR)
		; /* (ECHILD: reaped already) */
}

static void
on_chld(int sig)
{
	(void)sig;
}

#define RANK_EXEC_USAGE                                                        \
	"usage: dtrain rank-exec [--] CMD [ARGS...]\n"                         \
	"\n"                                                                   \
	"Runs CMD as one rank of a job that `dtrain launch --launcher mpi`\n"  \
	"or `--launcher slurm` started through mpirun or srun: the launcher\n" \
	"puts it before every rank's command. It passes signals on to CMD,\n"  \
	"ends CMD's whole process tree when it ends, and exits with CMD's\n"   \
	"status. Not meant to be run by hand (dtrain-rank-exec(1)).\n"

/* The signals rank-exec passes on to CMD's process group. */
static const int fwd_signals[] = {SIGINT,  SIGTERM, SIGHUP,
                                  SIGQUIT, SIGUSR1, SIGUSR2};

/* Fork CMD (argv) in a process group of its own, with the signal mask
 * old; its pid, or -1. */
static pid_t
start_cmd(char **argv, const sigset_t *old)
{
	struct sigaction sa = {0};
	pid_t pid, parent = getpid();
	int n;

	if ((pid = fork()) < 0) {
		fprintf(stderr, "dtrain rank-exec: fork: %s\n",
		        strerror(errno));
		return -1;
	}
	if (pid == 0) {
		/* CMD dies with the wrapper, whatever kills it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(RC_FAIL);
		setpgid(0, 0);
		sa.sa_handler = SIG_DFL;
		sigaction(SIGCHLD, &sa, NULL);
		sigprocmask(SIG_SETMASK, old, NULL);
		execvp(argv[0], argv);
		n = errno;
		fprintf(stderr, "dtrain rank-exec: cannot run '%s': %s\n",
		        argv[0], strerror(n));
		_exit(n == ENOENT || n == ENOTDIR ? 127 : 126);
	}
	setpgid(pid, pid); /* (whichever of the two runs first) */
	return pid;
}

/* Pass the signals of set on to CMD (pid's group) until CMD ends; its
 * wait status. Orphans that came to us are reaped on the way, the guard
 * among them (*guard becomes -1). */
static int
relay_until_exit(const sigset_t *set, pid_t pid, pid_t *guard)
{
	siginfo_t si;
	int ws, st = 0, done = 0;
	pid_t w;

	while (!done) {
		int sig = sigwaitinfo(set, &si);

		if (sig < 0)
			continue; /* EINTR */
		if (sig != SIGCHLD) {
			if (kill(-pid, sig) < 0)
				kill(pid, sig);
			if (sig != SIGUSR1 && sig != SIGUSR2)
				kill(-pid, SIGCONT);
			continue;
		}
		/* CMD, or orphans that came to us. */
		while ((w = waitpid(-1, &ws, WNOHANG)) > 0) {
			if (w == pid) {
				st = ws;
				done = 1;
			} else if (w == *guard) {
				*guard = -1;
			}
		}
	}
	return st;
}

/* CMD failed (wait status st): say how on stderr, for the launcher. */
static void
mark_failure(int st)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "%s%d %d\n", RANK_MARK,
	                 WIFEXITED(st)   ? CLD_EXITED
	                 : WCOREDUMP(st) ? CLD_DUMPED
	                                 : CLD_KILLED,
	                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));

	if (write(2, line, (size_t)n) < 0) {
		/* nothing to do: the exit status still says it */
	}
}

int
dt__cli_rank_exec(int argc, char **argv)
{
	struct sigaction sa = {0};
	sigset_t set, old;
	int i = 1, st, gfd = -1;
	pid_t guard, pid;

	/* --help is help only before `--`: after it, it is CMD's. */
	if (i < argc &&
	    (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) {
		fputs(RANK_EXEC_USAGE, stdout);
		return 0;
	}
	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	if (i >= argc) {
		fputs(RANK_EXEC_USAGE, stderr);
		return RC_USAGE;
	}
	/* Every signal to pass on waits in sigwaitinfo; SIGCHLD too (a
	 * handler of its own, so that it is never discarded). */
	sa.sa_handler = on_chld;
	sigaction(SIGCHLD, &sa, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	for (size_t k = 0; k < DT_ARRAY_LEN(fwd_signals); k++)
		sigaddset(&set, fwd_signals[k]);
	sigprocmask(SIG_BLOCK, &set, &old);
	/* What CMD's processes leave when their parent dies comes to us,
	 * not to init: it stays in the rank's process tree, where the
	 * engine (Slurm's proctrack/linuxproc) and end_group find it. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if ((pid = start_cmd(argv + i, &old)) < 0)
		return RC_FAIL;
	sa.sa_handler = SIG_IGN; /* (a guard gone: its pipe's EPIPE) */
	sigaction(SIGPIPE, &sa, NULL);
	guard = rank_guard(pid, &gfd);
	st = relay_until_exit(&set, pid, &guard);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		mark_failure(st);
	end_group(pid, &guard);
	rank_guard_done(guard, gfd);
	if (WIFSIGNALED(st)) {
		/* End by the same signal, without a core of our own. */
		struct rlimit nocore = {0, 0};
		int sig = WTERMSIG(st);

		setrlimit(RLIMIT_CORE, &nocore);
		sa.sa_handler = SIG_DFL;
		sigaction(sig, &sa, NULL);
		sigdelset(&old, sig);
		sigprocmask(SIG_SETMASK, &old, NULL);
		raise(sig);
		return 128 + sig;
	}
	return WEXITSTATUS(st);
}
