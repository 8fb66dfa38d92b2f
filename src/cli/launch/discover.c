/*
 * discover.c - `dtrain launch --host-discovery-script S` for an elastic job
 * of the local or ssh back-end (docs/elastic.md): every few seconds the
 * launcher runs S, which prints the hosts the job may use now, one "host:slots"
 * (or "host", one slot) a line. The launcher keeps one worker per slot running,
 * up to --max-workers: it starts a worker for a new slot (it joins the
 * running job at the members' next commit), and stops (SIGTERM) the
 * workers of a host that is no longer listed, or beyond its slots (the job
 * goes on without them, as after any loss). A host whose workers failed
 * DISCOVER_FAILS times is left out from then on (blacklisted), and says so.
 *
 * With the local back-end every worker runs on this machine: a host name is
 * the label of the slots it brings. The workers the launch started fill the
 * slots of the first listing, in its order. A back-end with a joiner op
 * (ssh) starts each worker on its host (with a secret file of its own,
 * so a host listed again after its workers were stopped takes workers
 * again), and its launch's workers are on the hosts it placed them on; a
 * host it cannot use (not in the host file) is left out, and said so
 * once.
 *
 * Runs in the supervising loop (supervise.c calls discover_tick from its
 * timers); the script's run is bounded by DISCOVER_SCRIPT_S.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/launch/launch.h"

#define DISCOVER_HOSTS    256   /* hosts one listing may name */
#define DISCOVER_OUT      65536 /* bytes of the script's output read */
#define DISCOVER_SCRIPT_S 10    /* the script's run, at most */
#define DISCOVER_FAILS    3     /* failed workers that blacklist a host */

struct dhost {
	char name[256];
	long slots;
	int fails;
	int black;
};

struct dl_discover {
	const struct opts *o;
	const struct ctx *c;
	const struct hosts *h;
	const char *script;
	long max_workers;
	uint64_t interval_ns, next_at;
	int placed;   /* the launch's workers have hosts of the listing */
	int warned;   /* the last run's failure was said */
	long started; /* workers started by discovery (labels) */
	struct dhost known[DISCOVER_HOSTS]; /* every host seen, for blame */
	size_t nknown;
	unsigned char *counted; /* by proc: its failure was counted */
	unsigned char *stopped; /* by proc: stopped by discovery */
	size_t cap;
};

static int
is_worker(const struct proc *p)
{
	return strncmp(p->label, "worker ", 7) == 0;
}

static int
running(const struct proc *p)
{
	return p->pid > 0 && !p->exited;
}

/* Whether the scheduler's last word is that the job waits for workers
 * below its minimum (output.c reads it from its log). */
static int
below_min(const struct run *r)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].is_scheduler)
			return r->p[i].el_below && !r->p[i].aborted;
	return 0;
}

static struct dhost *
known_host(struct dl_discover *d, const char *name, int add)
{
	for (size_t i = 0; i < d->nknown; i++)
		if (strcmp(d->known[i].name, name) == 0)
			return &d->known[i];
	if (!add || d->nknown == DISCOVER_HOSTS)
		return NULL;
	snprintf(d->known[d->nknown].name, sizeof(d->known[0].name), "%.255s",
	         name);
	return &d->known[d->nknown++];
}

/* Read the script's output (at most DISCOVER_OUT bytes) by the deadline;
 * the script is killed past it. Returns its text (malloc'd), or NULL with
 * *why set. */
static char *
run_script(const char *script, const char **why)
{
	int pfd[2], status = 0;
	size_t len = 0;
	char *out = malloc(DISCOVER_OUT + 1);
	uint64_t end = dt__now_ns() + DISCOVER_SCRIPT_S * NS_PER_S;
	pid_t pid;

	*why = "out of memory";
	if (out == NULL || pipe2(pfd, O_CLOEXEC) != 0) {
		free(out);
		return NULL;
	}
	if ((pid = fork()) == 0) {
		int null = open("/dev/null", O_RDONLY);
		sigset_t none;

		/* (a group of its own: a hung script goes with what it
		 * started) */
		setpgid(0, 0);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(null, 0);
		dup2(pfd[1], 1);
		execl("/bin/sh", "sh", "-c", script, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	if (pid > 0)
		setpgid(pid, pid); /* (as the child does: whichever is first) */
	if (pid < 0) {
		*why = strerror(errno);
		close(pfd[0]);
		free(out);
		return NULL;
	}
	for (;;) {
		uint64_t now = dt__now_ns();
		struct pollfd p = {.fd = pfd[0], .events = POLLIN};
		ssize_t k;

		if (now >= end) {
			*why = "it ran longer than 10 s";
			break;
		}
		if (poll(&p, 1, (int)((end - now) / NS_PER_MS) + 1) <= 0)
			continue;
		k = read(pfd[0], out + len, DISCOVER_OUT - len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			*why = NULL;
			break;
		}
		if ((len += (size_t)k) == DISCOVER_OUT) {
			*why = "it printed more than 64 KiB";
			break;
		}
	}
	close(pfd[0]);
	if (*why)
		kill(-pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (*why == NULL && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
		*why = "it failed (exit status not 0)";
	if (*why) {
		free(out);
		return NULL;
	}
	out[len] = '\0';
	return out;
}

/* "host:slots" lines into list; the count, or -1 (*why) for a bad line. */
static long
parse_listing(char *text, struct dhost *list, const char **why)
{
	long n = 0;

	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *colon, *end;
		long slots = 1;

		line[strcspn(line, "\r")] = '\0';
		if (line[0] == '\0' || line[0] == '#')
			continue;
		if ((colon = strrchr(line, ':')) != NULL) {
			*colon = '\0';
			errno = 0;
			slots = strtol(colon + 1, &end, 10);
			if (errno || *end || end == colon + 1 || slots < 0 ||
			    slots > MAX_SLOTS) {
				*why = "a line is not host:slots with 0 to "
				       "1024 slots";
				return -1;
			}
		}
		if (line[0] == '\0' || strlen(line) >= sizeof(list[0].name) ||
		    strspn(line, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ"
		                 "RSTUVWXYZ0123456789.-_") != strlen(line)) {
			*why = "a host name is empty, too long or has "
			       "characters other than letters, digits, . - _";
			return -1;
		}
		if (n == DISCOVER_HOSTS) {
			*why = "it lists more than 256 hosts";
			return -1;
		}
		snprintf(list[n].name, sizeof(list[n].name), "%s", line);
		list[n].slots = slots;
		n++;
	}
	return n;
}

/* Count the workers that failed since the last look against their host;
 * blacklist a host at DISCOVER_FAILS. */
static void
count_failures(struct run *r, struct dl_discover *d)
{
	for (size_t i = 0; i < r->n && i < d->cap; i++) {
		struct proc *p = &r->p[i];
		struct dhost *h;

		if (!is_worker(p) || !p->exited || d->counted[i])
			continue;
		d->counted[i] = 1;
		if ((p->code == CLD_EXITED && p->status == 0) ||
		    d->stopped[i] || (h = known_host(d, p->host, 1)) == NULL)
			continue;
		if (++h->fails == DISCOVER_FAILS && !h->black) {
			h->black = 1;
			say("host %s: %d of its workers failed; starting no "
			    "more workers there (blacklisted)",
			    h->name, DISCOVER_FAILS);
		}
	}
}

/* Start one worker on host, a copy of the launch's first worker without
 * its rank request (a worker that joins takes the id the scheduler
 * gives). 0 if none could be. */
static int
start_worker(struct run *r, struct dl_discover *d, const char *host)
{
	const struct proc *t = NULL;
	struct proc *p;
	dt_err err = DT_OK;

	for (size_t i = 0; i < r->n && t == NULL; i++)
		if (is_worker(&r->p[i]))
			t = &r->p[i];
	if (t == NULL || r->spare == 0 || r->n >= d->cap)
		return 0;
	p = &r->p[r->n];
	proc_init(p, t->kind, host, "worker %ld", d->started);
	p->tag_role = t->tag_role;
	if (d->o->be->joiner) {
		/* (a back-end that starts it on that host) */
		if ((err = d->o->be->joiner(p, d->c, d->h, host, d->started,
		                            d->o->cmd, (size_t)d->o->ncmd))) {
			struct dhost *k = known_host(d, host, 1);

			/* (a failure to prepare it takes a number too: the
			 * next try gets a directory of its own) */
			if (err != DT_EINVAL)
				d->started++;
			strv_free(&p->argv);
			strv_free(&p->pre_argv);
			strv_free(&p->env);
			memset(p, 0, sizeof(*p));
			/* A host it cannot use at all is left out at once;
			 * one it failed to prepare counts as a failed worker
			 * (as does one whose secret file cannot be written:
			 * its process exits 1 before it is the worker). */
			if (k && err != DT_EINVAL && !k->black) {
				say("a worker for host %s: %s", host,
				    dt_errmsg());
				if (++k->fails < DISCOVER_FAILS)
					return 0;
			}
			if (k && !k->black)
				say("host %s: %s; starting no workers there",
				    host, dt_errmsg());
			if (k)
				k->black = 1;
			return 0;
		}
	} else {
		p->exec_path = t->exec_path;
		p->secret_env = t->secret_env;
		p->show_env = t->show_env;
		for (size_t k = 0; k < t->argv.n && !err; k++)
			err = strv_dup(&p->argv, t->argv.v[k]);
		for (size_t k = 0; k < t->env.n && !err; k++)
			if (strncmp(t->env.v[k], "DMLC_WORKER_ID=", 15) != 0)
				err = strv_dup(&p->env, t->env.v[k]);
	}
	d->started++;
	r->n++;
	r->spare--;
	if (err || spawn(r, p) != DT_OK) {
		say("a worker for host %s: %s", host, dt_errmsg());
		return 0;
	}
	say("host %s has a free slot: started %s (pid %d) to join the "
	    "elastic job",
	    host, p->label, (int)p->pid);
	return 1;
}

/* Workers running on host (and not being stopped), among p[0..upto). */
static long
on_host(const struct run *r, const struct dl_discover *d, const char *host,
        size_t upto)
{
	long used = 0;

	for (size_t k = 0; k < upto && k < r->n && k < d->cap; k++)
		used += is_worker(&r->p[k]) && running(&r->p[k]) &&
		        !d->stopped[k] && strcmp(r->p[k].host, host) == 0;
	return used;
}

/* The launch's workers take the slots of the first listing, in order. */
static void
place_launched(struct run *r, struct dl_discover *d, const struct dhost *list,
               long nlist)
{
	for (size_t i = 0; i < r->n && i < d->cap; i++) {
		struct proc *p = &r->p[i];

		if (!is_worker(p) || !running(p))
			continue;
		for (long h = 0; h < nlist; h++)
			if (!list[h].black &&
			    on_host(r, d, list[h].name, i) < list[h].slots) {
				snprintf(p->host, sizeof(p->host), "%.255s",
				         list[h].name);
				break;
			}
	}
	d->placed = 1;
}

/* Stop the workers of hosts not listed (or blacklisted), or beyond their
 * slots. Returns the workers that go on running. */
static long
fit_workers(struct run *r, struct dl_discover *d, const struct dhost *list,
            long nlist)
{
	long total = 0;

	/* (a back-end that places workers on hosts has put them there) */
	if (!d->placed && d->o->be->joiner == NULL)
		place_launched(r, d, list, nlist);
	d->placed = 1;
	for (size_t i = 0; i < r->n && i < d->cap; i++) {
		struct proc *p = &r->p[i];
		long slots = -1;

		if (!is_worker(p) || !running(p) || d->stopped[i])
			continue;
		for (long h = 0; h < nlist; h++)
			if (strcmp(list[h].name, p->host) == 0)
				slots = list[h].black ? 0 : list[h].slots;
		if (on_host(r, d, p->host, i) < slots) {
			total++;
			continue;
		}
		d->stopped[i] = 1;
		say("host %s is %s: stopping %s (pid %d); the elastic job goes "
		    "on without it",
		    p->host, slots < 0 ? "no longer listed" : "over its slots",
		    p->label, (int)p->pid);
		kill(-p->pid, SIGTERM);
	}
	return total;
}

void
discover_tick(struct run *r, uint64_t now)
{
	struct dl_discover *d = r->disc;
	struct dhost list[DISCOVER_HOSTS];
	const char *why = NULL;
	long nlist, total;
	char *text;

	if (d == NULL || r->stopping || now < d->next_at)
		return;
	d->next_at = now + d->interval_ns;
	count_failures(r, d);
	/* The job is ending once a worker finished: no one joins then -
	 * unless the scheduler waits for workers below the minimum (a
	 * worker that left on its schedule has finished too). */
	for (size_t i = 0; i < r->n && !below_min(r); i++)
		if (is_worker(&r->p[i]) && r->p[i].exited &&
		    r->p[i].code == CLD_EXITED && r->p[i].status == 0)
			return;
	if ((text = run_script(d->script, &why)) == NULL ||
	    (nlist = parse_listing(text, list, &why)) < 0) {
		if (!d->warned)
			say("--host-discovery-script %s: %s; keeping the "
			    "hosts as they are",
			    d->script, why);
		d->warned = 1;
		free(text);
		return;
	}
	free(text);
	d->warned = 0;
	for (long h = 0; h < nlist; h++) {
		struct dhost *k = known_host(d, list[h].name, 1);

		list[h].black = k && k->black;
	}
	total = fit_workers(r, d, list, nlist);
	for (long h = 0; h < nlist && total < d->max_workers; h++) {
		long used = on_host(r, d, list[h].name, r->n);

		while (!list[h].black && used < list[h].slots &&
		       total < d->max_workers &&
		       start_worker(r, d, list[h].name)) {
			used++;
			total++;
		}
	}
}

uint64_t
discover_next(const struct run *r)
{
	return r->disc && !r->stopping ? r->disc->next_at : 0;
}

dt_err
discover_create(struct run *r, const struct opts *o, const struct ctx *c,
                const struct hosts *h, size_t nprocs)
{
	struct dl_discover *d;

	if (o->discovery == NULL)
		return DT_OK;
	if ((d = calloc(1, sizeof(*d))) == NULL)
		return dt__fail(DT_ENOMEM, "host discovery");
	d->o = o;
	d->c = c;
	d->h = h;
	d->script = o->discovery;
	d->max_workers = o->max_workers;
	d->interval_ns = DISCOVER_INTERVAL_S * NS_PER_S;
	d->next_at = dt__now_ns() + d->interval_ns;
	d->started = o->workers;
	d->cap = nprocs;
	d->counted = calloc(nprocs, 1);
	d->stopped = calloc(nprocs, 1);
	if (d->counted == NULL || d->stopped == NULL) {
		free(d->counted);
		free(d->stopped);
		free(d);
		return dt__fail(DT_ENOMEM, "host discovery");
	}
	r->disc = d;
	return DT_OK;
}

void
discover_free(struct run *r)
{
	if (r->disc == NULL)
		return;
	free(r->disc->counted);
	free(r->disc->stopped);
	free(r->disc);
	r->disc = NULL;
}
