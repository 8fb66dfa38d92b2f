/*
 * join_park.c - the parked join of a large job (docs/scale.md, "The
 * parked join"), the scheduler's side; member.c and root.c have the
 * worker's.
 *
 * The scheduler answers a node's ADD_NODE only once every node has
 * joined (the ranks and the control tree follow from the whole set), so
 * it used to hold one connection per node through the join: at 100,000
 * nodes that is more descriptors than one process may have. From
 * DTRAIN_JOIN_PARK_MIN servers and workers (16,384), or when the job has
 * more nodes than the scheduler's descriptor limit leaves room for, in a
 * job over the control tree, a worker's join is parked instead: the
 * scheduler records its ADD_NODE and answers JOIN_PARK with a random
 * ticket, and the worker closes its connection and waits. Once every
 * node has joined, the scheduler calls each parked worker back at the
 * address it listens on (a few threads, DTRAIN_JOIN_DIALERS), says HELLO
 * with the worker's ticket, which only the scheduler has, and sends its
 * ASSIGN on that connection. The worker dials its tree parent, then says
 * JOIN_PARK (arg0 1: it closes the connection now; a worker under the
 * scheduler keeps it, arg0 0) and closes it. At most DTRAIN_JOIN_WINDOW
 * (1,024) called-back connections of workers under another node are
 * open at once: a call back waits for a place. So the scheduler holds the
 * joins in flight, the window, its tree children and the servers, which
 * join as before.
 *
 * A loss during the start is still named: a parked worker that has gone
 * is named when its call back fails (within DT_CONNECT_TIMEOUT), and one
 * lost after its assignment and before its JOIN_PARK closes its
 * connection without it (at once); after it, its tree parent reports it,
 * as after the start-up barrier.
 *
 * Threads: the settings are read when the scheduler is made; the parking
 * runs in the I/O thread (on_add_node); the call backs in threads of
 * their own, started and joined by the thread that runs the start
 * (dt__sched_start). Every field is dt_sched's, guarded by node->mu.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>

#include "core/sched_impl.h"

dt_err
dt__sched_park_setup(dt_node *n)
{
	dt_sched *s = n->sched;
	long min, tree_min;
	int nodes = n->num_servers + n->num_workers;
	struct rlimit rl;
	int tight;
	dt_err err;

	if ((err = dt__env_long("DTRAIN_JOIN_PARK_MIN", 16384, 1,
	                        2L * DT_MAX_ROLE_NODES, &min)) ||
	    (err = dt__env_long("DTRAIN_CTRL_TREE_MIN", 256, 1,
	                        2L * DT_MAX_ROLE_NODES, &tree_min)) ||
	    (err = dt__env_long("DTRAIN_JOIN_WINDOW", 1024, 1, 1 << 20,
	                        &s->park_window)) ||
	    (err = dt__env_long("DTRAIN_JOIN_DIALERS", 8, 1, 256,
	                        &s->park_dialers)))
		return err;
	/* (the star, an elastic job, PS_RESEND and recovery hold every
	 * node's connection anyway) */
	if (nodes < tree_min || n->elastic || n->recover || n->rs_on)
		return DT_OK;
	/* (a job that could not be held at once: its nodes and a margin
	 * for the scheduler's own descriptors) */
	tight = getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	        rl.rlim_cur != RLIM_INFINITY &&
	        (rlim_t)nodes + 1024 > rl.rlim_cur;
	if (nodes < min && !tight)
		return DT_OK;
	s->park_ticket =
	    dt__calloc_sparse((size_t)nodes + 1, sizeof(*s->park_ticket));
	s->park_open = dt__calloc((size_t)nodes + 1, 1);
	s->park_idle = dt__calloc((size_t)nodes + 1, 1);
	if (!s->park_ticket || !s->park_open || !s->park_idle)
		return DT_ENOMEM;
	s->park = 1;
	DT_LOG(1,
	       "%d servers and workers: the workers' joins are parked "
	       "(called back with their assignments, at most %ld "
	       "connections at once)",
	       nodes, s->park_window);
	return DT_OK;
}

/* The note of a parked join's connection (dt__conn_set_note: the I/O
 * thread's, which runs the ADD_NODE and the close). */
#define PARK_NOTE 0x5041524b4a4f494eull

int
dt__sched_park_locked(dt_node *n, joiner *j, dt_conn *c)
{
	size_t got = 0;

	if (!n->sched->park || j->role != DT_ROLE_WORKER)
		return 0;
	while (got < sizeof(j->ticket)) {
		ssize_t r =
		    getrandom(j->ticket + got, sizeof(j->ticket) - got, 0);

		if (r <= 0)
			return 0; /* (it waits on its connection instead) */
		got += (size_t)r;
	}
	j->parked = 1;
	j->conn = NULL;
	dt__conn_set_note(c, PARK_NOTE);
	n->sched->park_pending++;
	return 1;
}

int
dt__sched_park_conn_closed(dt_node *n, dt_conn *c)
{
	dt_sched *s = n->sched;

	if (!s->park || dt__conn_note(c) != PARK_NOTE)
		return 0;
	pthread_mutex_lock(&n->mu);
	if (--s->park_pending == 0 && s->nj == s->expected)
		pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	return 1;
}

void
dt__sched_park_tell(dt_node *n, dt_conn *c, const joiner *j)
{
	dt_msg_hdr h = {.cmd = DT_CMD_JOIN_PARK, .flags = DT_F_RESPONSE};

	/* (the worker closes c once it has read this: c is no joiner's
	 * now, and its close is no news, scheduler.c) */
	if (dt__van_send(n->van, c, &h, j->ticket, DT_JOIN_TICKET, NULL, 0))
		dt__log(0, "cannot park the join of %s: %s", dt__conn_addr(c),
		        dt_errmsg());
}

/*
 * A run of call backs: to the seated parked workers with their
 * assignments (ids 1..count-1, those without a connection), or, once
 * the job is aborted (reason set), with an ABORT: the remaining seated
 * ones, or before any was seated the joiners in list.
 */
typedef struct park_run {
	dt_node *n;
	const int *here;
	int count;
	joiner *list; /* (an abort before the seating: nlist joiners) */
	int nlist, next_listed;
	uint64_t deadline; /* DT_JOIN_TIMEOUT from the first call back */
	dt_err err;        /* (mu) the first failure */
	char reason[512];  /* (mu) the abort's, once err is set */
	uint64_t cpu_ns;   /* (mu) the callers' processor time, at their end */
} park_run;

/* A caller ends: its processor time joins the run's (the scheduler logs
 * it: a thread that has ended is in no per-thread count any more). */
static void
caller_done(park_run *r)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru) != 0)
		return;
	pthread_mutex_lock(&r->n->mu);
	r->cpu_ns +=
	    (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
	        1000000000ull +
	    (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
	pthread_mutex_unlock(&r->n->mu);
}

/* Whether a call back may start: a place in the window, nothing left to
 * do, or an abort (whose call backs hold no place) (mu held). */
static int
window_open(dt_node *n, const void *arg)
{
	const park_run *r = arg;
	dt_sched *s = n->sched;

	return s->park_held < s->park_window || s->park_next >= r->count ||
	       r->err != DT_OK;
}

/* Dial a parked worker where it listens and say HELLO with its ticket:
 * the connection, or an error naming it. */
static dt_err
dial_back(dt_node *n, const char *name, const char *host, int port, int pid,
          const uint8_t *ticket, int id, dt_conn **out)
{
	dt_msg_hdr h = {.cmd = DT_CMD_HELLO,
	                .flags = DT_F_REQUEST,
	                .recver = (uint32_t)(id > 0 ? id : 0)};
	dt_err err;

	err = dt__van_connect(n->van, host, port, NULL,
	                      n->cfg.connect_timeout_ms, name, out);
	if (err)
		return dt__fail(err,
		                "%s (pid %d at %s:%d) was lost before the job "
		                "started: its join was parked, and calling it "
		                "back failed: %s",
		                name, pid, host, port, dt_errmsg());
	if ((err = dt__van_send(n->van, *out, &h, ticket, DT_JOIN_TICKET, NULL,
	                        0))) {
		dt__van_close(n->van, *out);
		return dt__fail(err,
		                "%s (pid %d at %s:%d): calling it back: %s",
		                name, pid, host, port, dt_errmsg());
	}
	return DT_OK;
}

/* Call seated worker id back with its ASSIGN, or with the ABORT of a job
 * that failed meanwhile (reason not NULL: the connection is closed once
 * it is written, and holds no place in the window). */
static dt_err
call_back(dt_node *n, int id, int here, const char *reason)
{
	dt_sched *s = n->sched;
	char host[DT_HOST_MAX], name[64];
	int port, pid;
	dt_conn *c;
	dt_err err;

	pthread_mutex_lock(&n->mu);
	snprintf(host, sizeof(host), "%s", n->table[id].host);
	port = n->table[id].port;
	pid = n->table[id].pid;
	pthread_mutex_unlock(&n->mu);
	dt__node_name(n, id, name, sizeof(name));
	if ((err = dial_back(n, name, host, port, pid, s->park_ticket[id], id,
	                     &c)))
		return err;
	if (reason) {
		dt__sched_send_abort(n, c, reason);
		dt__van_close(n->van, c);
		return DT_OK;
	}
	pthread_mutex_lock(&n->mu);
	dt__conn_set_peer(c, id);
	__atomic_store_n(&n->peers[id], c, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&n->mu);
	if ((err = dt__dir_send_assign(n, c, id, here, 0, 0)))
		return dt__fail(err,
		                "%s (pid %d at %s:%d): sending its assignment: "
		                "%s",
		                name, pid, host, port, dt_errmsg());
	return DT_OK;
}

/* The run failed (mu not held): the first failure aborts the job, naming
 * lost (-1: none), and the call backs from here on carry the ABORT. */
static void
run_fail(dt_node *n, park_run *r, dt_err err, const char *reason, int lost)
{
	int first;

	pthread_mutex_lock(&n->mu);
	first = r->err == DT_OK;
	if (first) {
		r->err = err;
		snprintf(r->reason, sizeof(r->reason), "%s", reason);
	}
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	if (!first)
		return;
	dt__log(0, "%s", reason);
	dt__sched_abort_lost(n, reason, lost);
}

/* The window stayed full until DT_JOIN_TIMEOUT: its first worker (called
 * back, and neither at its tree parent nor gone) ends the job, named. */
static void
window_stuck(dt_node *n, park_run *r)
{
	dt_sched *s = n->sched;
	char name[64], reason[512];
	int id = 0;

	pthread_mutex_lock(&n->mu);
	for (int i = 1; i < r->count && id == 0; i++)
		if (s->park_open[i])
			id = i;
	pthread_mutex_unlock(&n->mu);
	if (id == 0)
		snprintf(reason, sizeof(reason),
		         "the parked workers were not all called back within "
		         "DT_JOIN_TIMEOUT");
	else
		snprintf(reason, sizeof(reason),
		         "%s (pid %d at %s:%d) had its assignment but did not "
		         "say it reached its tree parent within "
		         "DT_JOIN_TIMEOUT",
		         dt__node_name(n, id, name, sizeof(name)),
		         n->table[id].pid, n->table[id].host,
		         n->table[id].port);
	run_fail(n, r, DT_ETIMEDOUT, reason, id ? id : -1);
}

/* The next seated worker to call back (mu held), taking its place in the
 * window unless the job is aborted; -1 if none is left. */
static int
next_seated(dt_node *n, park_run *r)
{
	dt_sched *s = n->sched;

	while (s->park_next < r->count) {
		int i = s->park_next++;

		if (__atomic_load_n(&n->peers[i], __ATOMIC_ACQUIRE))
			continue; /* (it waits on its own connection) */
		/* (one under the scheduler keeps its connection) */
		if (r->err == DT_OK && s->tree.parent[i] != 0) {
			s->park_open[i] = 1;
			s->park_held++;
		}
		return i;
	}
	return -1;
}

/* A thread that calls back: takes a place in the window, then the next
 * parked worker in id order (a worker's tree parent, of lower id, was
 * called back before it), until none is left; once the job is aborted,
 * the rest are called back with the ABORT. */
static void *
caller_main(void *arg)
{
	park_run *r = arg;
	dt_node *n = r->n;

	pthread_setname_np(pthread_self(), "dt-park");
	for (;;) {
		char reason[512];
		int id, aborting;
		dt_err err;

		err = dt__node_wait(n, window_open, r, r->deadline,
		                    "a place among the called-back "
		                    "connections");
		if (err == DT_ETIMEDOUT)
			window_stuck(n, r);
		pthread_mutex_lock(&n->mu);
		aborting = r->err != DT_OK;
		if (!aborting && err == DT_OK &&
		    n->sched->park_held >= n->sched->park_window) {
			pthread_mutex_unlock(&n->mu);
			continue; /* (another thread took the place) */
		}
		id = next_seated(n, r);
		snprintf(reason, sizeof(reason), "%s", r->reason);
		pthread_mutex_unlock(&n->mu);
		if (id < 0)
			break;
		/* (an abort that did not come from here, the node's own
		 * fatal error, is carried too) */
		if (!aborting && dt__node_check(n) != DT_OK) {
			run_fail(n, r, DT_EPEER, dt_errmsg(), -1);
			aborting = 1;
			pthread_mutex_lock(&n->mu);
			snprintf(reason, sizeof(reason), "%s", r->reason);
			pthread_mutex_unlock(&n->mu);
		}
		err = call_back(n, id, r->here[id], aborting ? reason : NULL);
		if (err && !aborting) {
			snprintf(reason, sizeof(reason), "%s", dt_errmsg());
			run_fail(n, r, err, reason, id);
		}
	}
	caller_done(r);
	return NULL;
}

/* Run fn on the scheduler's call-back threads, and wait for them. */
static dt_err
run_callers(dt_node *n, void *(*fn)(void *), park_run *r)
{
	pthread_t th[256];
	int started = 0;

	for (long i = 0; i < n->sched->park_dialers && i < 256; i++) {
		if (pthread_create(&th[started], NULL, fn, r) != 0)
			break;
		started++;
	}
	if (started == 0)
		return dt__fail(DT_ESYS, "no thread to call the parked "
		                         "workers back");
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	return DT_OK;
}

dt_err
dt__sched_park_assign(dt_node *n, const int *here, int count)
{
	dt_sched *s = n->sched;
	park_run r = {.n = n, .here = here, .count = count};
	long join_s;
	dt_err err;

	if ((err = dt__env_long("DT_JOIN_TIMEOUT", 300, 1, 86400, &join_s)))
		return err;
	/* The nodes that wait on their own connections (the servers) first,
	 * as before. */
	for (int id = 1; id < count && !err; id++)
		if (__atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE))
			err = dt__dir_send_assign(n, NULL, id, here[id], 0, 0);
	if (err)
		return err;
	uint64_t t0 = dt__now_ns();

	r.deadline = t0 + (uint64_t)join_s * 1000000000ull;
	pthread_mutex_lock(&n->mu);
	s->park_next = 1;
	pthread_mutex_unlock(&n->mu);
	if ((err = run_callers(n, caller_main, &r)))
		return err;
	if (r.err)
		return dt__fail(r.err, "%s", r.reason);
	DT_LOG(1,
	       "called back %d parked workers with their assignments in "
	       "%.2f s (the callers' processor time %.3f s)",
	       count - 1 - n->num_servers, (double)(dt__now_ns() - t0) * 1e-9,
	       (double)r.cpu_ns * 1e-9);
	return dt__node_check(n);
}

/* A thread that calls the joiners of r->list back with the ABORT. */
static void *
abort_caller_main(void *arg)
{
	park_run *r = arg;
	dt_node *n = r->n;

	pthread_setname_np(pthread_self(), "dt-park");
	for (;;) {
		joiner *j;
		dt_conn *c;
		char name[64];

		pthread_mutex_lock(&n->mu);
		j = r->next_listed < r->nlist ? &r->list[r->next_listed++]
		                              : NULL;
		pthread_mutex_unlock(&n->mu);
		if (j == NULL)
			break;
		snprintf(name, sizeof(name), "a worker");
		if (dial_back(n, name, j->host, j->port, j->pid, j->ticket, -1,
		              &c)) {
			dt__log(0, "%s", dt_errmsg());
			continue;
		}
		dt__sched_send_abort(n, c, r->reason);
		dt__van_close(n->van, c);
	}
	caller_done(r);
	return NULL;
}

void
dt__sched_park_abort_joiners(dt_node *n, const char *reason)
{
	dt_sched *s = n->sched;
	park_run r = {.n = n};
	int k = 0;

	if (!s->park)
		return;
	pthread_mutex_lock(&n->mu);
	if (!s->assigned && s->nj > 0 &&
	    (r.list = malloc(sizeof(joiner) * (size_t)s->nj)) != NULL)
		for (int i = 0; i < s->nj; i++)
			if (s->j[i].parked)
				r.list[k++] = s->j[i];
	pthread_mutex_unlock(&n->mu);
	r.nlist = k;
	snprintf(r.reason, sizeof(r.reason), "%s", reason);
	if (k > 0) {
		DT_LOG(1, "calling back %d parked workers with the abort", k);
		(void)run_callers(n, abort_caller_main, &r);
	}
	free(r.list);
}

void
dt__sched_park_on_msg(dt_node *n, dt_conn *c, const dt_msg *m)
{
	dt_sched *s = n->sched;
	int peer = dt__conn_peer(c), ok;

	pthread_mutex_lock(&n->mu);
	ok = s->park && peer > 0 && peer < s->tree.count &&
	     dt__id_role(n, peer) == DT_ROLE_WORKER && m->hdr.arg0 <= 1;
	if (ok) {
		if (s->park_open[peer]) {
			s->park_open[peer] = 0;
			s->park_held--;
			pthread_cond_broadcast(&n->cv);
		}
		s->park_idle[peer] = m->hdr.arg0 == 1;
	}
	pthread_mutex_unlock(&n->mu);
	if (!ok) {
		dt__log(0, "dropping %s: unexpected JOIN_PARK",
		        dt__conn_addr(c));
		dt__van_close(n->van, c);
	}
}

int
dt__sched_park_closed(dt_node *n, int peer)
{
	dt_sched *s = n->sched;
	int quiet;

	pthread_mutex_lock(&n->mu);
	if (!s->park || peer <= 0 || peer >= s->tree.count) {
		pthread_mutex_unlock(&n->mu);
		return 0;
	}
	if (s->park_open[peer]) {
		s->park_open[peer] = 0;
		s->park_held--;
		pthread_cond_broadcast(&n->cv);
	}
	quiet = s->park_idle[peer];
	pthread_mutex_unlock(&n->mu);
	return quiet;
}

int
dt__sched_park_idle_locked(dt_node *n, int id)
{
	dt_sched *s = n->sched;

	return s->park && id > 0 && id < s->tree.count && s->park_idle[id];
}
