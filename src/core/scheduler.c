/*
 * scheduler.c - the scheduler's side of the cluster protocol: admit nodes,
 * assign ranks, send each node its assignment (directory.c), run barriers
 * (sched_barrier.c), end the job in order, and abort it - never hang it -
 * when a node is lost.
 *
 * Rank rule (deterministic, docs/cluster.md): within each role, a node that
 * asked for a rank (DMLC_WORKER_ID / DMLC_SERVER_ID, or the rank mpirun or
 * srun gave it) gets it if it is in range and nobody with a smaller address
 * asked for it too; the other nodes, sorted by (host, port), fill the free
 * ranks in ascending order.
 *
 * A process that joins the running job in a lost node's place (recovery)
 * is rejoin.c's; the state both files share is in sched_impl.h.
 *
 * Threads: joins, barriers, departures and losses are handled in the I/O
 * thread; the thread that called dt_node_start()/dt_node_serve() waits for
 * them on node->cv. Every field of dt_sched is guarded by node->mu.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/bytes.h"
#include "core/sched_impl.h"

void
dt__sched_send_abort(dt_node *n, dt_conn *c, const char *reason)
{
	dt_msg_hdr h = {.cmd = DT_CMD_ABORT};

	h.recver = (uint32_t)dt__conn_peer(c);
	dt__van_send(n->van, c, &h, reason, (uint32_t)strlen(reason), NULL, 0);
}

/* Abort the job: tell every node why, and fail the scheduler. Once: the
 * nodes that end on the first abort must not bring a second one, with
 * another reason, that could reach a node first. */
static void
abort_job(dt_node *n, const char *reason, int lost)
{
	int again = 0;

	pthread_mutex_lock(&n->mu);
	if (n->sched) {
		again = n->sched->aborting;
		n->sched->aborting = 1;
	}
	pthread_mutex_unlock(&n->mu);
	if (again)
		return;
	/* Over the control tree, down its edges (tree_end.c). */
	if (dt__sched_tree_abort(n, reason, lost)) {
		dt__node_set_fatal(n, DT_EPEER, "aborting the job: %s", reason);
		return;
	}
	for (int id = 1; id < n->ntable; id++) {
		dt_conn *c = __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE);
		if (c && dt__conn_is_open(c))
			dt__sched_send_abort(n, c, reason);
	}
	pthread_mutex_lock(&n->mu);
	for (int i = 0; n->sched && i < n->sched->nj; i++)
		if (n->sched->j[i].conn &&
		    dt__conn_peer(n->sched->j[i].conn) < 0)
			dt__sched_send_abort(n, n->sched->j[i].conn, reason);
	pthread_mutex_unlock(&n->mu);
	dt__node_set_fatal(n, DT_EPEER, "aborting the job: %s", reason);
}

void
dt__sched_abort(dt_node *n, const char *reason)
{
	abort_job(n, reason, -1);
}

void
dt__sched_abort_lost(dt_node *n, const char *reason, int lost)
{
	abort_job(n, reason, lost);
}

/* The joiner an ADD_NODE on c describes. */
static void
joiner_of(dt_conn *c, const dt__msg_add_node *a, joiner *j)
{
	j->conn = c;
	j->role = a->role;
	j->want = a->want;
	memcpy(j->host, a->host, sizeof(j->host));
	j->port = a->port;
	j->pid = a->pid;
	memcpy(j->hostid, a->hostid, sizeof(j->hostid));
	memcpy(j->local, a->local, sizeof(j->local));
	memcpy(j->token, a->token, sizeof(j->token));
}

/* Refuse a node started for a job of other sizes than this one's. */
static void
refuse_sizes(dt_node *n, dt_conn *c, const dt__msg_add_node *a)
{
	char reason[512];

	snprintf(reason, sizeof(reason),
	         "a %s at %s:%d was started with DMLC_NUM_SERVER=%d "
	         "DMLC_NUM_WORKER=%d but this job has %d servers and %d "
	         "workers",
	         dt_role_name(a->role), a->host, a->port, a->num_servers,
	         a->num_workers, n->num_servers, n->num_workers);
	dt__log(0, "refusing a node: %s", reason);
	dt__sched_send_abort(n, c, reason);
	dt__van_close(n->van, c);
}

static void
on_add_node(dt_node *n, dt_conn *c, dt_msg *m)
{
	dt_sched *s = n->sched;
	dt__msg_add_node a;
	joiner j = {0};
	char reason[512];

	if (dt__msg_add_node_decode(m->meta, m->hdr.meta_len, &a)) {
		dt__log(0, "dropping %s: malformed ADD_NODE (%s)",
		        dt__conn_addr(c), dt_errmsg());
		dt__van_close(n->van, c);
		return;
	}
	joiner_of(c, &a, &j);
	if (a.num_servers != n->num_servers ||
	    a.num_workers != n->num_workers) {
		refuse_sizes(n, c, &a);
		return;
	}
	if (n->recover) {
		int assigned;

		pthread_mutex_lock(&n->mu);
		assigned = s->assigned;
		pthread_mutex_unlock(&n->mu);
		if (assigned) {
			dt__sched_rejoin(n, c, &j);
			return;
		}
	}
	pthread_mutex_lock(&n->mu);
	if (n->elastic && j.role == DT_ROLE_WORKER && s->running) {
		/* (running is never cleared: the join decides under its own
		 * lock) */
		pthread_mutex_unlock(&n->mu);
		dt__elastic_sched_join(n, c, &j);
		return;
	}
	int have = j.role == DT_ROLE_SERVER ? s->nj_servers
	                                    : s->nj - s->nj_servers,
	    room = j.role == DT_ROLE_SERVER ? n->num_servers : n->num_workers;
	/* An elastic job's worker beyond the first W, started before the job
	 * runs (before its ranks are assigned, or while the members still
	 * get their tables): it joins the running job once it runs
	 * (dt__sched_start). */
	if (n->elastic && j.role == DT_ROLE_WORKER &&
	    (have >= room || s->assigned) && !s->running &&
	    s->nheld < 1 + n->num_servers + dt__elastic_slots(n)) {
		joiner *h = &s->held[s->nheld++];

		*h = j;
		h->until = UINT64_MAX;
		pthread_mutex_unlock(&n->mu);
		dt__conn_vouch(c);
		DT_LOG(1,
		       "a worker at %s:%d (pid %d) beyond the job's %d waits "
		       "for it to start, to join it",
		       j.host, j.port, j.pid, n->num_workers);
		return;
	}
	if (have >= room || s->assigned) {
		pthread_mutex_unlock(&n->mu);
		snprintf(reason, sizeof(reason),
		         "the job is full (%d servers and %d workers have "
		         "joined; this job has %d %ss)",
		         n->num_servers, n->num_workers, room,
		         dt_role_name(j.role));
		dt__log(0, "refusing a %s at %s:%d: %s", dt_role_name(j.role),
		        j.host, j.port, reason);
		dt__sched_send_abort(n, c, reason);
		dt__van_close(n->van, c);
		return;
	}
	if (dt__conn_vouched(c)) { /* (it joined already) */
		pthread_mutex_unlock(&n->mu);
		dt__log(0, "dropping %s: second ADD_NODE", dt__conn_addr(c));
		dt__van_close(n->van, c);
		return;
	}
	/* (a large job's worker: called back once all have joined) */
	int parked = dt__sched_park_locked(n, &j, c);

	s->j[s->nj++] = j;
	s->nj_servers += j.role == DT_ROLE_SERVER;
	dt__conn_vouch(c); /* a node of this job, waiting for its table */
	DT_LOG(1, "a %s at %s:%d (pid %d) joined: %d of %d nodes",
	       dt_role_name(j.role), j.host, j.port, j.pid, s->nj, s->expected);
	/* (the start waits for the last one: waking it at every join was a
	 * switch of threads per node at the root) */
	if (s->nj == s->expected && s->park_pending == 0)
		pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	if (parked)
		dt__sched_park_tell(n, c, &j);
}

/* A worker's WORKER_DONE (over the control tree: a child's count of its
 * subtree's); 0 if the sender may not send one. */
static int
on_worker_done(dt_node *n, dt_conn *c, dt_msg *m)
{
	dt_sched *s = n->sched;
	int peer = dt__conn_peer(c);
	char name[64];

	__atomic_add_fetch(&s->end_done, 1, __ATOMIC_RELAXED);
	/* (over the control tree: a child's subtree's count) */
	if (dt__sched_tree_done(n, c, m))
		return 1;
	if (peer <= 0 || dt__id_role(n, peer) != DT_ROLE_WORKER)
		return 0;
	/* (a worker that joined but was never taken in: not one the end
	 * waits for) */
	if (n->elastic && dt__elastic_sched_joining(n, peer) &&
	    dt__elastic_sched_remove(n, peer, "it stopped", 0))
		return 1;
	/* arg0 1: it leaves an elastic job that goes on */
	if (m->hdr.arg0 == 1 &&
	    dt__elastic_sched_remove(n, peer, "its schedule", 0))
		return 1;
	pthread_mutex_lock(&n->mu);
	if (!s->left[peer]) {
		s->left[peer] = 1;
		s->workers_done++;
	}
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	DT_LOG(1, "%s is done (%d of %d workers)",
	       dt__node_name(n, peer, name, sizeof(name)), s->workers_done,
	       s->workers_total);
	return 1;
}

/* A HELLO on a connection that is no member's yet: a node dialling the
 * scheduler again; 0 if it is none of those. */
static int
on_hello(dt_node *n, dt_conn *c, dt_msg *m)
{
	uint32_t id = m->hdr.sender;

	if (dt__conn_peer(c) != -1 || id == 0 || id >= (uint32_t)n->ntable)
		return 0;
	/* PS_RESEND: after a lost connection, saying who it is */
	if (n->links)
		return dt__link_adopt(n, c, (int)id);
	/* Over the control tree: a worker that closed its idle connection
	 * dials again (a lookup). */
	return dt__sched_root_hello(n, c, (int)id);
}

void
dt__sched_on_msg(dt_node *n, dt_conn *c, dt_msg *m)
{
	dt_sched *s = n->sched;
	int peer = dt__conn_peer(c);

	switch (m->hdr.cmd) {
	case DT_CMD_ADD_NODE:
		if (peer >= 0) {
			dt__van_close(n->van, c);
			return;
		}
		on_add_node(n, c, m);
		return;
	case DT_CMD_LOOKUP:
		dt__dir_sched_on_lookup(n, c, m);
		return;
	case DT_CMD_BARRIER:
		dt__sched_on_barrier(n, c, m);
		return;
	case DT_CMD_GROW:
		if (peer <= 0 || dt__id_role(n, peer) != DT_ROLE_WORKER)
			break;
		dt__elastic_sched_grow(n, peer, m);
		return;
	case DT_CMD_WORKER_DONE:
		if (on_worker_done(n, c, m))
			return;
		break;
	case DT_CMD_TEXT:
		if (peer <= 0) /* only from a node that joined */
			break;
		dt__node_log_text(n, peer, m);
		return;
	case DT_CMD_HEARTBEAT:
		dt__sched_hb_note(n, peer);
		return;
	case DT_CMD_TREE_LOST:
		dt__sched_on_tree_lost(n, c, m);
		return;
	case DT_CMD_ACK:
		return;
	case DT_CMD_CLOCK:
		if (peer <= 0)
			break;
		dt__report_on_clock(n, c, m);
		return;
	case DT_CMD_REPORT:
		if (peer <= 0)
			break;
		__atomic_add_fetch(&s->end_reports, 1, __ATOMIC_RELAXED);
		dt__report_on_msg(n, c, m);
		return;
	case DT_CMD_JOIN_PARK:
		dt__sched_park_on_msg(n, c, m);
		return;
	case DT_CMD_BYE:
		if (peer > 0)
			dt__link_bye_from(n, peer);
		pthread_mutex_lock(&n->mu);
		pthread_cond_broadcast(&n->cv); /* (nodes_gone) */
		pthread_mutex_unlock(&n->mu);
		return;
	case DT_CMD_HELLO:
		if (on_hello(n, c, m))
			return;
		break;
	default:
		break;
	}
	dt__log(0, "dropping %s: unexpected %s", dt__conn_addr(c),
	        dt__cmd_name(m->hdr.cmd));
	dt__van_close(n->van, c);
}

/* A server's connection ended, or its link did: once the job is ending,
 * that server has left (counted once), and the end that waits for it is
 * woken. Returns whether the end was expected: a node that said it was
 * done, or a server at the end. (No wake-up otherwise: over the control
 * tree every worker under another node closes its idle connection once
 * started, and waking the scheduler's waiting thread at each of those
 * closes was a switch of threads per node at the root.) */
static int
left_at_end(dt_node *n, int peer)
{
	dt_sched *s = n->sched;
	int expected;

	pthread_mutex_lock(&n->mu);
	expected = s->left[peer] ||
	           (dt__id_role(n, peer) == DT_ROLE_SERVER && s->ending);
	if (dt__id_role(n, peer) == DT_ROLE_SERVER && s->ending &&
	    !s->left[peer]) {
		s->left[peer] = 1;
		s->servers_closed++;
		pthread_cond_broadcast(&n->cv);
	}
	pthread_mutex_unlock(&n->mu);
	return expected;
}

void
dt__sched_on_close(dt_node *n, dt_conn *c, dt_err why)
{
	dt_sched *s = n->sched;
	int peer = dt__conn_peer(c);

	if (s == NULL)
		return;
	if (peer < 0) {
		/* (a parked join's, closed by its worker: no news) */
		if (dt__sched_park_conn_closed(n, c))
			return;
		/* Not (yet) a member: forget it if it had asked to join. */
		pthread_mutex_lock(&n->mu);
		for (int i = 0; i < s->nj; i++) {
			if (s->j[i].conn != c)
				continue;
			if (!s->assigned) {
				dt__log(0,
				        "a %s at %s:%d left before the job "
				        "started",
				        dt_role_name(s->j[i].role),
				        s->j[i].host, s->j[i].port);
				s->nj_servers -= s->j[i].role == DT_ROLE_SERVER;
				s->j[i] = s->j[--s->nj];
			}
			break;
		}
		for (int i = 0; i < s->nheld; i++)
			if (s->held[i].conn == c) {
				s->held[i] = s->held[--s->nheld];
				break;
			}
		pthread_mutex_unlock(&n->mu);
		return;
	}
	int failed;

	pthread_mutex_lock(&n->mu);
	failed = n->fatal != DT_OK;
	pthread_mutex_unlock(&n->mu);
	/* PS_RESEND: the node may dial again (or this was an old
	 * connection, replaced already), also when it is done: only its BYE
	 * (or no connection again in time) ends its link. */
	if (!failed && dt__link_on_close(n, c, peer)) {
		if (n->recover)
			dt__sched_retry_held(n); /* its place may be free now */
		return;
	}
	__atomic_compare_exchange_n(&n->peers[peer], &(dt_conn *){c}, NULL, 0,
	                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	/* (a called-back worker that said it closes it: its tree parent
	 * watches it now) */
	if (dt__sched_park_closed(n, peer))
		return;
	if (left_at_end(n, peer) || failed)
		return;
	/* (over the control tree, its parent tells if it was lost) */
	if (dt__sched_tree_quiet(n, peer))
		return;
	dt__sched_peer_lost(n, peer,
	                    why == DT_ECLOSED ? "connection closed"
	                                      : dt_strerror(why));
}

void
dt__sched_peer_lost(dt_node *n, int peer, const char *why)
{
	dt_sched *s = n->sched;
	char name[64], reason[512];
	int skip;

	pthread_mutex_lock(&n->mu);
	skip = n->fatal != DT_OK || s->left[peer];
	pthread_mutex_unlock(&n->mu);
	if (skip || left_at_end(n, peer))
		return;
	if (dt__elastic_sched_remove(n, peer, why, 1))
		return;
	dt__node_name(n, peer, name, sizeof(name));
	if (n->recover) {
		/* A new process may take its place (rejoin); the serve loop
		 * ends the job if none does in time. */
		pthread_mutex_lock(&n->mu);
		if (!s->down_ns[peer])
			s->down_ns[peer] = dt__now_ns();
		pthread_cond_broadcast(&n->cv);
		pthread_mutex_unlock(&n->mu);
		dt__log(0,
		        "%s (pid %d at %s:%d) was lost (%s); waiting up to "
		        "DT_RESTART_TIMEOUT=%.3g s for a new process in its "
		        "place",
		        name, n->table[peer].pid, n->table[peer].host,
		        n->table[peer].port, why, (double)n->restart_ns * 1e-9);
		dt__sched_retry_held(n);
		return;
	}
	snprintf(reason, sizeof(reason),
	         "%s (pid %d at %s:%d) was lost before the job ended (%s)",
	         name, n->table[peer].pid, n->table[peer].host,
	         n->table[peer].port, why);
	abort_job(n, reason, peer);
}

static int
cmp_joiner(const void *a, const void *b)
{
	const joiner *x = a, *y = b;
	int c = strcmp(x->host, y->host);

	if (c)
		return c;
	return (x->port > y->port) - (x->port < y->port);
}

/* Assign ranks within one role by the documented rule. */
static void
assign_role(joiner *j, int nj, dt_role role, int count)
{
	char *taken = calloc((size_t)count + 1, 1);

	if (taken == NULL)
		return;
	for (int i = 0; i < nj; i++) { /* j is sorted by (host, port) */
		if (j[i].role != role)
			continue;
		j[i].rank = -1;
		if (j[i].want >= 0 && j[i].want < count && !taken[j[i].want]) {
			j[i].rank = j[i].want;
			taken[j[i].want] = 1;
		}
	}
	int next = 0;
	for (int i = 0; i < nj; i++) {
		if (j[i].role != role || j[i].rank >= 0)
			continue;
		while (taken[next])
			next++;
		j[i].rank = next;
		taken[next] = 1;
	}
	free(taken);
}

/*
 * The assignments of nodes 1..count-1, the servers' first. With
 * DT_TEST_SERVERS_ASSIGNED_LATE=MS (testing) the workers' go first and the
 * servers' MS milliseconds later, so that a worker's HELLO reaches a
 * server before the server's own assignment does (member.c keeps it).
 */
static dt_err
send_assignments(dt_node *n, const int *here, int count)
{
	int first = 1 + n->num_servers;
	long late = 0;
	dt_err err;

	if ((err = dt__env_long("DT_TEST_SERVERS_ASSIGNED_LATE", 0, 0, 60000,
	                        &late)))
		return err;
	if (late == 0)
		first = 1;
	for (int id = first; id < count && !err; id++)
		err = dt__dir_send_assign(n, NULL, id, here[id], 0, 0);
	if (late && !err) {
		struct timespec ts = {late / 1000, (late % 1000) * 1000000L};

		nanosleep(&ts, NULL);
		for (int id = 1; id < first && !err; id++)
			err = dt__dir_send_assign(n, NULL, id, here[id], 0, 0);
	}
	return err;
}

/*
 * Whether the job's barriers go over a control tree, and its shape
 * (docs/scale.md): from DTRAIN_CTRL_TREE_MIN servers and workers on, and
 * not in an elastic job, nor with PS_RESEND or recovery (their nodes
 * come and go; they keep the star). Once every node is seated.
 */
static dt_err
plan_tree(dt_node *n, int count)
{
	dt_sched *s = n->sched;
	dt_err err;

	if (count - 1 < s->tree_min || n->elastic || n->recover || n->rs_on)
		return DT_OK;
	pthread_mutex_lock(&n->mu);
	err = dt__tree_build(n->table, count, (int)s->tree_arity, &s->tree);
	pthread_mutex_unlock(&n->mu);
	if (err)
		return err;
	if ((s->tree_done = dt__calloc((size_t)count, 1)) == NULL)
		return DT_ENOMEM;
	n->tree_wait = 1; /* (the ASSIGNs carry the places) */
	DT_LOG(1,
	       "barriers go over a control tree of arity %ld: %d nodes "
	       "under the scheduler",
	       s->tree_arity, s->tree.nkids[0]);
	return DT_OK;
}

static dt_err
send_tables(dt_node *n)
{
	int count = 1 + n->num_servers + n->num_workers, *here;
	dt_err err;

	/* Each node gets its own small reply (directory.c): its id, the
	 * sizes, its host's count of nodes and, a worker, the servers'
	 * entries: O(S) for each, the counts of all hosts sorted once. Under
	 * mu: in an elastic job the I/O thread may seat a worker that joins
	 * the running job (dt__sched_seat) meanwhile. */
	if ((here = malloc(sizeof(int) * (size_t)n->ntable)) == NULL)
		return DT_ENOMEM;
	pthread_mutex_lock(&n->mu);
	err = dt__dir_host_counts(n, here);
	pthread_mutex_unlock(&n->mu);
	err = n->sched->park ? dt__sched_park_assign(n, here, count)
	                     : send_assignments(n, here, count);
	free(here);
	return err;
}

static int
all_joined(dt_node *n, const void *arg)
{
	(void)arg;
	return n->sched->nj == n->sched->expected &&
	       n->sched->park_pending == 0;
}

static int
started(dt_node *n, const void *arg)
{
	(void)arg;
	return n->sched->passed[DT_GROUP_ALL] >= 1;
}

/* Recovery: a lost node that no new process replaced in time (mu held).
 * Only a job that recovers marks its lost nodes (down_ns): another one
 * has none to look for among its N ids at each wake-up. */
static int
late_node(dt_node *n)
{
	uint64_t now = dt__now_ns();

	if (!n->recover)
		return 0;
	for (int id = 1; id < n->ntable; id++)
		if (n->sched->down_ns[id] &&
		    now - n->sched->down_ns[id] >= n->restart_ns)
			return id;
	return 0;
}

static int
workers_gone(dt_node *n, const void *arg)
{
	(void)arg;
	return n->sched->workers_done == n->sched->workers_total ||
	       late_node(n) || dt__sched_held_overdue(n) ||
	       dt__elastic_sched_below_over(n);
}

/* The end: every server left, and with PS_RESEND every worker's link
 * ended too (its BYE came after all it sent was acknowledged), so no
 * node is still dialling a scheduler that has gone. */
static int
nodes_gone(dt_node *n, const void *arg)
{
	(void)arg;
	if (n->sched->servers_closed != n->num_servers)
		return 0;
	for (int id = 1; id < n->ntable && n->links; id++)
		if (dt__id_role(n, id) == DT_ROLE_WORKER &&
		    !dt__link_ended(n, id))
			return 0;
	return 1;
}

dt_err
dt__sched_create(dt_node *n)
{
	dt_sched *s;
	/* (an elastic job: a row for every worker it may grow to) */
	int count = 1 + n->num_servers + dt__elastic_slots(n);

	s = dt__calloc(1, sizeof(*s));
	if (s == NULL)
		return DT_ENOMEM;
	s->expected = n->num_servers + n->num_workers;
	s->workers_total = n->num_workers;
	s->next_worker = 1 + n->num_servers + n->num_workers;
	s->j = dt__calloc((size_t)s->expected, sizeof(joiner));
	s->left = dt__calloc((size_t)count, sizeof(int));
	s->down_ns = dt__calloc((size_t)count, sizeof(uint64_t));
	s->restarts = dt__calloc((size_t)count, sizeof(int));
	s->held = dt__calloc((size_t)count, sizeof(joiner));
	s->token = dt__calloc((size_t)count, sizeof(*s->token));
	if (n->elastic &&
	    ((s->in_round = dt__calloc(8 * (size_t)count, 1)) == NULL ||
	     (s->joining = dt__calloc((size_t)count, 1)) == NULL))
		return DT_ENOMEM;
	n->table = dt__calloc_sparse((size_t)count, sizeof(dt_node_entry));
	n->peers = dt__calloc_sparse((size_t)count, sizeof(dt_conn *));
	n->sched = s;
	if (!s->j || !s->left || !s->down_ns || !s->restarts || !s->held ||
	    !s->token || !n->table || !n->peers)
		return DT_ENOMEM;
	return dt__sched_park_setup(n);
}

/* The workers held for an elastic job to start join it now, in the order
 * they came. */
static void
admit_early(dt_node *n)
{
	dt_sched *s = n->sched;
	joiner j;

	for (;;) {
		pthread_mutex_lock(&n->mu);
		if (s->nheld == 0) {
			/* (under the same lock as on_add_node's look: no
			 * worker is held after the last one was let in) */
			s->running = 1;
			pthread_mutex_unlock(&n->mu);
			return;
		}
		j = s->held[0];
		memmove(&s->held[0], &s->held[1],
		        sizeof(joiner) * (size_t)(s->nheld - 1));
		s->nheld--;
		pthread_mutex_unlock(&n->mu);
		dt__elastic_sched_join(n, j.conn, &j);
	}
}

/* Give node id to the joiner j on connection c (n->mu held): its row of
 * the table, its place token, and c as its connection. */
void
dt__sched_seat(dt_node *n, const joiner *j, dt_conn *c, int id, dt_role role,
               int rank)
{
	dt_node_entry *e = &n->table[id];

	e->role = role;
	e->rank = rank;
	e->id = id;
	e->port = j->port;
	e->pid = j->pid;
	snprintf(e->host, DT_HOST_MAX, "%s", j->host);
	snprintf(e->hostid, DT_HOSTID_MAX, "%s", j->hostid);
	snprintf(e->local, DT_LOCAL_MAX, "%s", j->local);
	e->known = 1;
	dt__dir_sched_changed(n);
	memcpy(n->sched->token[id], j->token, DT_NODE_TOKEN_MAX);
	if (j->parked) /* (no connection until it is called back) */
		memcpy(n->sched->park_ticket[id], j->ticket, DT_JOIN_TICKET);
	if (c == NULL)
		return;
	dt__conn_set_peer(c, id);
	__atomic_store_n(&n->peers[id], c, __ATOMIC_RELEASE);
}

/* Not every node joined within DT_JOIN_TIMEOUT (join_s): end the job,
 * saying how many of each role came. */
static dt_err
join_timed_out(dt_node *n, long join_s)
{
	dt_sched *s = n->sched;
	int ns, nw;
	char reason[256];

	pthread_mutex_lock(&n->mu);
	ns = s->nj_servers;
	nw = s->nj - s->nj_servers;
	pthread_mutex_unlock(&n->mu);
	snprintf(reason, sizeof(reason),
	         "only %d of %d servers and %d of %d workers joined "
	         "within %ld s (DT_JOIN_TIMEOUT)",
	         ns, n->num_servers, nw, n->num_workers, join_s);
	abort_job(n, reason, -1);
	dt__sched_park_abort_joiners(n, reason);
	return dt__fail(DT_ETIMEDOUT, "%s", reason);
}

/* Everyone is here: assign ranks and ids, and seat every joiner in the
 * table (count nodes; rows up to slots for an elastic job's growth). */
static void
seat_all(dt_node *n, int count, int slots)
{
	dt_sched *s = n->sched;

	pthread_mutex_lock(&n->mu);
	qsort(s->j, (size_t)s->nj, sizeof(joiner), cmp_joiner);
	assign_role(s->j, s->nj, DT_ROLE_SERVER, n->num_servers);
	assign_role(s->j, s->nj, DT_ROLE_WORKER, n->num_workers);
	n->ntable = slots;
	/* The rows of workers that may join an elastic job later: a rank
	 * and no address until one does. */
	for (int id = count; id < slots; id++)
		n->table[id] = (dt_node_entry){.role = DT_ROLE_WORKER,
		                               .rank = id - 1 - n->num_servers,
		                               .id = id};
	n->table[0] = (dt_node_entry){.role = DT_ROLE_SCHEDULER,
	                              .rank = 0,
	                              .id = 0,
	                              .port = n->port,
	                              .pid = (int)getpid(),
	                              .known = 1};
	snprintf(n->table[0].host, DT_HOST_MAX, "%s", n->host);
	for (int i = 0; i < s->nj; i++) {
		joiner *j = &s->j[i];
		int id = j->role == DT_ROLE_SERVER
		             ? dt__node_server_id(n, j->rank)
		             : dt__node_worker_id(n, j->rank);

		dt__sched_seat(n, j, j->conn, id, j->role, j->rank);
	}
	s->assigned = 1;
	pthread_mutex_unlock(&n->mu);
}

dt_err
dt__sched_start(dt_node *n)
{
	dt_sched *s = n->sched;
	long join_s;
	dt_err err;
	int count = 1 + n->num_servers + n->num_workers;
	int slots = 1 + n->num_servers + dt__elastic_slots(n);

	uint64_t t_join = dt__now_ns();

	if ((err = dt__env_long("DT_JOIN_TIMEOUT", 300, 1, 86400, &join_s)) ||
	    (err = dt__env_long("DTRAIN_CTRL_TREE_MIN", 256, 1,
	                        2L * DT_MAX_ROLE_NODES, &s->tree_min)) ||
	    (err = dt__env_long("DTRAIN_CTRL_ARITY", 16, DT_TREE_ARITY_MIN,
	                        DT_TREE_ARITY_MAX, &s->tree_arity)))
		return err;
	err = dt__node_wait(n, all_joined, NULL,
	                    dt__now_ns() + (uint64_t)join_s * 1000000000ull,
	                    "every node to join");
	if (err == DT_ETIMEDOUT)
		return join_timed_out(n, join_s);
	if (err)
		return err;
	seat_all(n, count, slots);
	dt__report_sched_names(n);
	if ((err = dt__link_create(n)))
		return err;
	for (int id = 1; id < count; id++)
		DT_LOG(1,
		       "assigned rank %d to the %s at %s:%d (pid %d, node "
		       "id %d)",
		       dt__id_rank(n, id), dt_role_name(dt__id_role(n, id)),
		       n->table[id].host, n->table[id].port, n->table[id].pid,
		       id);
	if ((err = plan_tree(n, count)) || (err = send_tables(n)))
		return err;
	DT_LOG(1, "the scheduler is connected to %d workers and %d servers",
	       n->num_workers, n->num_servers);
	/* Every node has joined: the start-up barrier is a matter of
	 * connecting to peers, bounded as the join was. */
	err = dt__node_wait(n, started, NULL,
	                    dt__now_ns() + (uint64_t)join_s * 1000000000ull,
	                    "the start-up barrier");
	if (err == DT_ETIMEDOUT)
		return dt__fail(DT_ETIMEDOUT,
		                "not every node reached the start-up barrier "
		                "within DT_JOIN_TIMEOUT=%ld s of joining",
		                join_s);
	if (err)
		return err;
	DT_LOG(1, "all %d nodes are ready", count);
	dt__sched_hb_start(n);
	if (n->elastic)
		admit_early(n);
	dt__report_sched_event(n, DT_EV_BOOTSTRAP, DT_TID_MAIN, t_join, 0);
	return DT_OK;
}

/* What the end took at the scheduler: with the star, a WORKER_DONE per
 * worker and a TERMINATE per server; over the control tree, a few per
 * child (tree_end.c). And each node's REPORT, when asked for. */
static void
log_end(dt_node *n)
{
	dt_sched *s = n->sched;
	unsigned long long done, reports, term = s->end_term;

	done = __atomic_load_n(&s->end_done, __ATOMIC_RELAXED);
	reports = __atomic_load_n(&s->end_reports, __ATOMIC_RELAXED);
	DT_LOG(1,
	       "the end took %llu messages at the scheduler: %llu "
	       "WORKER_DONE and %llu REPORT received, %llu TERMINATE sent",
	       done + reports + term, done, reports, term);
	if (s->tree.count > 0) {
		pthread_mutex_lock(&n->mu);
		unsigned long long redials = s->root_redials;
		pthread_mutex_unlock(&n->mu);
		DT_LOG(1,
		       "workers dialled the scheduler again %llu times after "
		       "closing their idle connections",
		       redials);
	}
}

dt_err
dt__sched_serve(dt_node *n)
{
	dt_sched *s = n->sched;
	dt_err err;
	long grace;

	int late = 0;

	for (;;) {
		if ((err = dt__node_wait(n, workers_gone, NULL, 0,
		                         "the workers")))
			return err;
		dt__sched_refuse_overdue(n);
		dt__elastic_sched_check_min(n);
		pthread_mutex_lock(&n->mu);
		late = late_node(n);
		int done = s->workers_done == s->workers_total;
		pthread_mutex_unlock(&n->mu);
		if (late || done)
			break;
	}
	if (late) {
		char name[64], reason[512];

		dt__node_name(n, late, name, sizeof(name));
		snprintf(
		    reason, sizeof(reason),
		    "%s (pid %d at %s:%d) was lost and no new process took "
		    "its place within DT_RESTART_TIMEOUT=%.3g s",
		    name, n->table[late].pid, n->table[late].host,
		    n->table[late].port, (double)n->restart_ns * 1e-9);
		abort_job(n, reason, -1);
		return dt__fail(DT_EPEER, "%s", reason);
	}
	DT_LOG(1, "all %d workers are done; ending the job", s->workers_total);
	pthread_mutex_lock(&n->mu);
	s->ending = 1;
	pthread_mutex_unlock(&n->mu);
	dt__elastic_sched_end(n);
	if (!dt__sched_tree_terminate(n))
		for (int r = 0; r < n->num_servers; r++) {
			dt_msg_hdr h = {.cmd = DT_CMD_TERMINATE};

			if (dt__node_send(n, dt__node_server_id(n, r), &h, NULL,
			                  0, NULL, 0) == DT_OK)
				s->end_term++;
		}
	if ((err = dt__env_long("DT_END_TIMEOUT", 30, 1, 3600, &grace)))
		return err;
	err = dt__node_wait(n, nodes_gone, NULL,
	                    dt__now_ns() + (uint64_t)grace * 1000000000ull,
	                    "the nodes to leave");
	if (err == DT_ETIMEDOUT && s->servers_closed != n->num_servers)
		return dt__fail(DT_ETIMEDOUT,
		                "%d of %d servers did not leave within %ld s "
		                "of the end",
		                n->num_servers - s->servers_closed,
		                n->num_servers, grace);
	if (err == DT_ETIMEDOUT)
		return dt__fail(DT_ETIMEDOUT,
		                "a worker did not say BYE within %ld s of the "
		                "end (PS_RESEND)",
		                grace);
	if (err == DT_OK)
		DT_LOG(1, "job over: every node has left");
	log_end(n);
	return err;
}

void
dt__sched_free(dt_node *n)
{
	if (n->sched == NULL)
		return;
	dt__sched_hb_log(n);
	free(n->sched->hb_from);
	free(n->sched->j);
	free(n->sched->left);
	free(n->sched->down_ns);
	free(n->sched->restarts);
	free(n->sched->held);
	free(n->sched->token);
	free(n->sched->in_round);
	free(n->sched->joining);
	free(n->sched->hostno);
	free(n->sched->tree_done);
	dt__free_sparse(n->sched->park_ticket);
	free(n->sched->park_open);
	free(n->sched->park_idle);
	dt__tree_free(&n->sched->tree);
	free(n->sched);
	n->sched = NULL;
}
