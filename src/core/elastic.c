/*
 * elastic.c - the membership of an elastic job (DTRAIN_ELASTIC=1): which
 * workers are live, and its epoch.
 *
 * The scheduler is the one authority. It starts at epoch 0 with every
 * worker of the table. When a worker is lost (closed connection, silent
 * heartbeats, a SIGKILL) or leaves on purpose (a scheduled removal: its
 * WORKER_DONE with arg0 = 1), it is taken out of the list, the epoch goes
 * up by one, and every remaining worker gets the whole new list in one
 * MEMBERSHIP message, instead of the job being aborted. When fewer than
 * DTRAIN_ELASTIC_MIN remain, the scheduler holds the new list back: the
 * survivors wait (told how long) for workers to join, and the first
 * membership they get has the joiners in it; after DTRAIN_ELASTIC_TIMEOUT
 * seconds without enough, it ends the job, naming the minimum (the
 * "below the minimum" functions). Members keep the last list
 * they were given (a MEMBERSHIP of an epoch not above theirs is ignored)
 * and tell their apps (on_membership); the collectives re-form their
 * communicator over it when the program takes the change (coll/elastic.c).
 *
 * The scheduler counts a removed worker as done, so the job ends when the
 * survivors are, and its barriers over the workers count the live ones.
 * With parameter servers, every server gets the same MEMBERSHIP messages
 * as the workers: its dist_sync rounds wait for the live workers, and a
 * change drops the rounds in flight (kv/srv_elastic.c).
 *
 * Locking: the fields (n->el_*) are guarded by n->mu.
 *
 * Why one file of about a thousand lines: the scheduler's half (remove,
 * join, grow, below the minimum) and the members' half (on_msg, the wait
 * for a membership) read and write the same n->el_* fields under that
 * one lock, through small helpers (ensure_ids, count_joining,
 * below_left_ms) that would otherwise become library-wide names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/limits.h"
#include "core/sched_impl.h"

dt_err
dt__elastic_config(dt_node *n)
{
	long on, lo, hi, wait_s;
	dt_err err;
	int w = n->cfg.num_workers;

	if ((err = dt__env_long("DTRAIN_ELASTIC", 0, 0, 1, &on)))
		return err;
	n->elastic = (int)on;
	if (!on)
		return DT_OK;
	if ((err = dt__env_long("DTRAIN_ELASTIC_MIN", 1, 1, DT_MAX_ROLE_NODES,
	                        &lo)) ||
	    (err = dt__env_long("DTRAIN_ELASTIC_MAX", w, 1, DT_MAX_ROLE_NODES,
	                        &hi)) ||
	    (err = dt__env_long("DTRAIN_ELASTIC_TIMEOUT", 600, 1, 7 * 86400,
	                        &wait_s)))
		return err;
	n->el_timeout_ns = (uint64_t)wait_s * 1000000000ull;
	if (n->recover)
		return dt__fail(
		    DT_ECONFIG,
		    "DTRAIN_ELASTIC=1 and DTRAIN_RECOVER=1 (--restart) "
		    "exclude each other: a lost worker either leaves "
		    "the membership or is replaced in its place");
	/* Its tables have a row for each worker it may grow to: the same
	 * bound as a job of that many workers. */
	if ((err = dt__job_size_check(n->cfg.num_servers, hi, "DMLC_NUM_SERVER",
	                              "DTRAIN_ELASTIC_MAX")))
		return err;
	if (lo > w || hi < w)
		return dt__fail(
		    DT_ECONFIG,
		    "DMLC_NUM_WORKER=%d is outside DTRAIN_ELASTIC_MIN=%ld "
		    "..DTRAIN_ELASTIC_MAX=%ld",
		    w, lo, hi);
	n->el_min = (int)lo;
	n->el_max = (int)hi;
	return DT_OK;
}

int
dt__node_elastic(const dt_node *n)
{
	return n ? n->elastic : 0;
}

int
dt__node_elastic_min(const dt_node *n)
{
	return n ? n->el_min : 0;
}

int
dt__elastic_slots(const dt_node *n)
{
	return n->elastic ? DT_MAX(n->el_max, n->num_workers) : n->num_workers;
}

int
dt__node_elastic_slots(const dt_node *n)
{
	return n ? dt__elastic_slots(n) : 0;
}

int
dt__node_elastic_max(const dt_node *n)
{
	return n && n->elastic ? n->el_max : 0;
}

int
dt__node_elastic_joiner(const dt_node *n)
{
	return n ? n->el_joiner : 0;
}

/* A count the I/O thread keeps under the node's lock. */
static int
locked_count(dt_node *n, const int *count)
{
	int k;

	pthread_mutex_lock(&n->mu);
	k = *count;
	pthread_mutex_unlock(&n->mu);
	return k;
}

int
dt__node_elastic_waiting(dt_node *n)
{
	return locked_count(n, &n->el_waiting);
}

int
dt__node_elastic_announced(dt_node *n)
{
	return locked_count(n, &n->el_announced);
}

dt_err
dt__node_elastic_grow(dt_node *n, int count, uint64_t step, int exact)
{
	dt_msg_hdr h = {.cmd = DT_CMD_GROW,
	                .arg0 = (uint64_t)count,
	                .arg1 = step,
	                .arg2 = exact ? 1u : 0u};

	if (!n->elastic)
		return dt__fail(DT_ESTATE, "growing a job that is not elastic "
		                           "(DTRAIN_ELASTIC=1)");
	return dt__node_send(n, 0, &h, NULL, 0, NULL, 0);
}

int
dt__elastic_live(dt_node *n)
{
	return n->el_ids ? n->el_n : n->num_workers;
}

/* (mu held) The list of epoch 0, every worker, made on first use. */
static int
ensure_ids(dt_node *n)
{
	if (n->el_ids)
		return 0;
	n->el_ids =
	    calloc((size_t)DT_MAX(dt__elastic_slots(n), 1), sizeof(int));
	if (n->el_ids == NULL)
		return -1;
	for (int r = 0; r < n->num_workers; r++)
		n->el_ids[r] = dt__node_worker_id(n, r);
	n->el_n = n->num_workers;
	return 0;
}

int
dt__node_membership(dt_node *n, uint64_t *epoch, int *ids, int cap)
{
	int count;

	pthread_mutex_lock(&n->mu);
	if (ensure_ids(n)) {
		pthread_mutex_unlock(&n->mu);
		return 0;
	}
	*epoch = n->el_epoch;
	count = n->el_n;
	for (int i = 0; i < count && i < cap; i++)
		ids[i] = n->el_ids[i];
	pthread_mutex_unlock(&n->mu);
	return count;
}

int
dt__elastic_member(dt_node *n, int id)
{
	int in = 0;

	if (!n->elastic)
		return 1;
	pthread_mutex_lock(&n->mu);
	if (ensure_ids(n))
		in = 1; /* (no list to say otherwise) */
	for (int i = 0; !in && i < n->el_n; i++)
		in = n->el_ids[i] == id;
	pthread_mutex_unlock(&n->mu);
	return in;
}

static int
epoch_above(dt_node *n, const void *arg)
{
	return n->el_epoch > *(const uint64_t *)arg;
}

/* How long past the scheduler's hold a member still waits for its word:
 * the scheduler ends the job at the hold's end, and its ABORT needs no
 * more than this to arrive, even on a loaded machine. */
#define HOLD_MARGIN_NS (30 * 1000000000ull)

dt_err
dt__node_wait_membership(dt_node *n, uint64_t above, uint64_t deadline_ns)
{
	dt_err err;
	char what[96];

	snprintf(what, sizeof(what), "membership %llu from the scheduler",
	         (unsigned long long)above + 1);
	for (;;) {
		uint64_t until;

		err = dt__node_wait(n, epoch_above, &above, deadline_ns, what);
		if (err != DT_ETIMEDOUT)
			return err;
		/* While the job is below its minimum, the scheduler holds
		 * the membership back for up to DTRAIN_ELASTIC_TIMEOUT,
		 * which may be longer than this wait: the member waits as
		 * long as the scheduler said it would, and a bit. */
		pthread_mutex_lock(&n->mu);
		until = n->el_hold_until;
		pthread_mutex_unlock(&n->mu);
		if (until == 0 || until + HOLD_MARGIN_NS <= deadline_ns ||
		    dt__now_ns() >= until + HOLD_MARGIN_NS)
			return err;
		deadline_ns = until + HOLD_MARGIN_NS;
	}
}

dt_err
dt__node_elastic_leave(dt_node *n)
{
	dt_msg_hdr h = {
	    .cmd = DT_CMD_WORKER_DONE, .flags = DT_F_REQUEST, .arg0 = 1};

	if (!n->elastic)
		return dt__fail(DT_ESTATE, "leaving a job that is not elastic "
		                           "(DTRAIN_ELASTIC=1)");
	return dt__node_send(n, 0, &h, NULL, 0, NULL, 0);
}

/* (scheduler) The members now into ids (room for ntable); their count, 0
 * without memory. */
static int
copy_members(dt_node *n, int *ids)
{
	int count = 0;

	pthread_mutex_lock(&n->mu);
	if (ensure_ids(n) == 0) {
		count = n->el_n;
		memcpy(ids, n->el_ids, sizeof(int) * (size_t)count);
	}
	pthread_mutex_unlock(&n->mu);
	return count;
}

/* The servers of a job with servers get every membership too: their
 * rounds count its live workers (kv/srv_elastic.c). */
static void
send_membership_servers(dt_node *n, const dt_wbuf *w, uint64_t epoch, int gone,
                        int lost)
{
	for (int i = 0; i < n->num_servers; i++) {
		dt_msg_hdr h = {.cmd = DT_CMD_MEMBERSHIP,
		                .arg0 = epoch,
		                .arg1 = (uint64_t)gone,
		                .arg2 = (uint64_t)lost};

		(void)dt__node_send(n, dt__node_server_id(n, i), &h, w->data,
		                    (uint32_t)w->len, NULL, 0);
	}
}

/* Send the membership to every live worker (scheduler); lost: 1 a worker
 * was lost, 0 one left on schedule, 2 the membership grew. */
static void
send_membership(dt_node *n, const int *ids, int count, uint64_t epoch, int gone,
                int lost)
{
	dt_wbuf w;

	dt__wbuf_init(&w);
	if (dt__msg_membership_encode(ids, count, &w) == DT_OK) {
		send_membership_servers(n, &w, epoch, gone, lost);
		for (int i = 0; i < count; i++) {
			dt_msg_hdr h = {.cmd = DT_CMD_MEMBERSHIP,
			                .arg0 = epoch,
			                .arg1 = (uint64_t)gone,
			                .arg2 = (uint64_t)lost};

			(void)dt__node_send(n, ids[i], &h, w.data,
			                    (uint32_t)w.len, NULL, 0);
		}
	}
	dt__wbuf_fini(&w);
}

static void send_waiting(dt_node *n);
static uint64_t below_left_ms(dt_node *n);
static void below_min_begin(dt_node *n, int peer, const char *why, int lost,
                            int count);
static void below_min_fill(dt_node *n, int later);

/* A worker that joined but was not taken in yet went: it was never a
 * member, so nothing changes but the count the members are told. */
static int
forget_joiner(dt_node *n, int peer, const char *why)
{
	dt_sched *s = n->sched;
	char name[64];

	pthread_mutex_lock(&n->mu);
	if (s->joining == NULL || !s->joining[peer]) {
		pthread_mutex_unlock(&n->mu);
		return 0;
	}
	s->joining[peer] = 0;
	s->left[peer] = 1;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	dt__log(0,
	        "%s (pid %d at %s:%d) went before the members took it in "
	        "(%s); the job goes on without it",
	        dt__node_name(n, peer, name, sizeof(name)), n->table[peer].pid,
	        n->table[peer].host, n->table[peer].port, why);
	send_waiting(n);
	return 1;
}

int
dt__elastic_sched_remove(dt_node *n, int peer, const char *why, int lost)
{
	dt_sched *s = n->sched;
	int *ids = NULL, count = 0, found = -1;
	uint64_t epoch = 0;
	char name[64], reason[512];

	if (!n->elastic || s == NULL || peer <= 0 || peer >= n->ntable ||
	    dt__id_role(n, peer) != DT_ROLE_WORKER)
		return 0;
	if (forget_joiner(n, peer, why))
		return 1;
	pthread_mutex_lock(&n->mu);
	if (ensure_ids(n) == 0)
		for (int i = 0; i < n->el_n; i++)
			if (n->el_ids[i] == peer)
				found = i;
	if (found < 0) {
		pthread_mutex_unlock(&n->mu);
		return 1; /* taken out already */
	}
	memmove(&n->el_ids[found], &n->el_ids[found + 1],
	        sizeof(int) * (size_t)(n->el_n - found - 1));
	n->el_n--;
	n->el_epoch++;
	n->el_gone = peer;
	if (!s->left[peer]) {
		s->left[peer] = 1;
		s->workers_done++;
	}
	/* Its arrival at an open barrier no longer counts. */
	for (int mask = 1; mask < 8 && s->in_round; mask++)
		if (s->in_round[mask * n->ntable + peer]) {
			s->in_round[mask * n->ntable + peer] = 0;
			s->arrived[mask]--;
		}
	epoch = n->el_epoch;
	count = n->el_n;
	ids = malloc(sizeof(int) * (size_t)DT_MAX(count, 1));
	if (ids)
		memcpy(ids, n->el_ids, sizeof(int) * (size_t)count);
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	dt__node_name(n, peer, name, sizeof(name));
	if (count == 0 || ids == NULL) {
		/* (no survivor holds the state a joiner would take) */
		snprintf(
		    reason, sizeof(reason), "%s (pid %d at %s:%d) %s (%s): %s",
		    name, n->table[peer].pid, n->table[peer].host,
		    n->table[peer].port, lost ? "was lost" : "left", why,
		    ids ? "no worker remains" : "no memory for the membership");
		free(ids);
		dt__sched_abort(n, reason);
		return 1;
	}
	/* The rounds it was missing from may be whole now. */
	for (int mask = 1; mask < 8; mask++)
		if (mask & DT_GROUP_WORKERS)
			dt__sched_barrier_recheck(n, mask);
	if (count < n->el_min) {
		free(ids);
		below_min_begin(n, peer, why, lost, count);
		return 1;
	}
	dt__log(0,
	        "%s (pid %d at %s:%d) %s (%s): membership %llu has %d "
	        "worker%s",
	        name, n->table[peer].pid, n->table[peer].host,
	        n->table[peer].port, lost ? "was lost" : "left on schedule",
	        why, (unsigned long long)epoch, count, count == 1 ? "" : "s");
	send_membership(n, ids, count, epoch, peer, lost);
	free(ids);
	return 1;
}

/* (mu held) Workers that joined and are not members yet: all of them, or
 * only the ready ones. */
static int
count_joining(dt_node *n, int ready_only)
{
	dt_sched *s = n->sched;
	int k = 0;

	for (int id = 0; s->joining && id < n->ntable; id++)
		k += s->joining[id] == 2 || (!ready_only && s->joining[id]);
	return k;
}

/* Tell every member how many workers are ready to join (GROW, arg0),
 * below the minimum, how many more milliseconds the scheduler waits for
 * enough of them (arg1; 0: it does not wait), and how many have asked to
 * join, ready or still starting (arg2): the members then look for them
 * at every step, not only at their commits. */
static void
send_waiting(dt_node *n)
{
	int *ids, count, ready, asked;
	uint64_t hold_ms;

	if ((ids = malloc(sizeof(int) * (size_t)n->ntable)) == NULL)
		return;
	count = copy_members(n, ids);
	pthread_mutex_lock(&n->mu);
	ready = count_joining(n, 1);
	asked = count_joining(n, 0);
	hold_ms = below_left_ms(n);
	pthread_mutex_unlock(&n->mu);
	for (int i = 0; i < count; i++) {
		dt_msg_hdr h = {.cmd = DT_CMD_GROW,
		                .arg0 = (uint64_t)ready,
		                .arg1 = hold_ms,
		                .arg2 = (uint64_t)asked};

		(void)dt__node_send(n, ids[i], &h, NULL, 0, NULL, 0);
	}
	free(ids);
}

/* Refuse a worker that asks to join; the reason names the bound. */
static void
refuse_join(dt_node *n, dt_conn *c, const joiner *j, int live, int waiting)
{
	char reason[512];

	/* The joiner learns why from the ABORT, and the job's log from this
	 * line: a worker started by hand for a job that cannot take it must
	 * not look like a network fault on either side. */
	if (live + waiting >= n->el_max)
		snprintf(reason, sizeof(reason),
		         "a worker at %s:%d (pid %d) asks to join the running "
		         "elastic job, which has %d workers%s: "
		         "DTRAIN_ELASTIC_MAX=%d is reached",
		         j->host, j->port, j->pid, live + waiting,
		         waiting ? " with those waiting to join" : "",
		         n->el_max);
	else
		snprintf(reason, sizeof(reason),
		         "a worker at %s:%d (pid %d) asks to join the running "
		         "elastic job (%d workers, DTRAIN_ELASTIC_MAX=%d): "
		         "every worker id up to DTRAIN_ELASTIC_MAX was given "
		         "once already, and ids are not used twice",
		         j->host, j->port, j->pid, live, n->el_max);
	dt__log(0, "refusing a node: %s", reason);
	dt__sched_send_abort(n, c, reason);
	dt__van_close(n->van, c);
}

/* Send the joiner at id its assignment (directory.c); arg1 = 1 tells it
 * that it joins a running job. */
static void
send_joiner_table(dt_node *n, dt_conn *c, int id)
{
	if (dt__dir_send_assign(n, c, id, 0, 1, 0) != DT_OK)
		dt__van_close(n->van, c);
}

/* Tell every member where the worker joining at id listens. */
static void
send_joiner_addr(dt_node *n, const joiner *j, int id)
{
	dt__msg_add_node a = {.role = DT_ROLE_WORKER,
	                      .want = id - 1 - n->num_servers,
	                      .port = j->port,
	                      .pid = j->pid,
	                      .num_servers = n->num_servers,
	                      .num_workers = n->num_workers};
	int *ids, count;
	dt_wbuf w;

	if ((ids = malloc(sizeof(int) * (size_t)n->ntable)) == NULL)
		return;
	snprintf(a.host, sizeof(a.host), "%s", j->host);
	snprintf(a.hostid, sizeof(a.hostid), "%s", j->hostid);
	snprintf(a.local, sizeof(a.local), "%s", j->local);
	/* (the members, and the workers joining with it: those may be
	 * taken in at the same commit) */
	count = copy_members(n, ids);
	pthread_mutex_lock(&n->mu);
	for (int k = 1; k < n->ntable && count < n->ntable; k++)
		if (k != id && n->sched->joining[k])
			ids[count++] = k;
	pthread_mutex_unlock(&n->mu);
	dt__wbuf_init(&w);
	if (dt__msg_add_node_encode(&a, &w) == DT_OK)
		for (int i = 0; i < count; i++) {
			dt_msg_hdr u = {.cmd = DT_CMD_NODE_UPDATE,
			                .key = (uint64_t)id};

			(void)dt__node_send(n, ids[i], &u, w.data,
			                    (uint32_t)w.len, NULL, 0);
		}
	dt__wbuf_fini(&w);
	free(ids);
}

void
dt__elastic_sched_join(dt_node *n, dt_conn *c, const joiner *j)
{
	dt_sched *s = n->sched;
	int live, waiting, id;
	dt_node_entry *e;

	pthread_mutex_lock(&n->mu);
	live = ensure_ids(n) ? n->num_workers : n->el_n;
	waiting = count_joining(n, 0);
	id = s->next_worker;
	if (live + waiting >= n->el_max || id >= n->ntable || !s->joining) {
		pthread_mutex_unlock(&n->mu);
		refuse_join(n, c, j, live, waiting);
		return;
	}
	/* Ids are never given twice: a message of a lost worker's still on
	 * its way must not be taken for a newcomer's. */
	s->next_worker++;
	s->joining[id] = 1;
	e = &n->table[id];
	dt__sched_seat(n, j, c, id, DT_ROLE_WORKER, id - 1 - n->num_servers);
	pthread_mutex_unlock(&n->mu);
	dt__conn_vouch(c);
	dt__log(0,
	        "a worker at %s:%d (pid %d) joins the running elastic job as "
	        "worker %d (node id %d); the members take it in once it is "
	        "ready",
	        j->host, j->port, j->pid, e->rank, id);
	send_joiner_table(n, c, id);
	send_joiner_addr(n, j, id);
	/* (the members learn that a worker is on its way while it still
	 * loads its data: they take it in at the step it is ready) */
	send_waiting(n);
}

int
dt__elastic_sched_joining(dt_node *n, int peer)
{
	int on;

	pthread_mutex_lock(&n->mu);
	on = n->sched && n->sched->joining && peer > 0 && peer < n->ntable &&
	     n->sched->joining[peer];
	pthread_mutex_unlock(&n->mu);
	return on;
}

/* (mu held) Take the lowest ready joiners, up to want, into the list. */
static int
take_ready(dt_node *n, int want)
{
	dt_sched *s = n->sched;
	int took = 0;

	for (int id = 1; id < n->ntable && took < want; id++) {
		int at = n->el_n;

		if (s->joining[id] != 2)
			continue;
		s->joining[id] = 0;
		while (at > 0 && n->el_ids[at - 1] > id)
			at--;
		memmove(&n->el_ids[at + 1], &n->el_ids[at],
		        sizeof(int) * (size_t)(n->el_n - at));
		n->el_ids[at] = id;
		n->el_n++;
		took++;
	}
	return took;
}

/* Give the members' request if it can be: a new membership (epoch + 1)
 * with the ready joiners, to every member old and new. */
static void
try_grant(dt_node *n)
{
	dt_sched *s = n->sched;
	int *ids, count, took, want;
	uint64_t epoch;

	if ((ids = malloc(sizeof(int) * (size_t)n->ntable)) == NULL)
		return;
	pthread_mutex_lock(&n->mu);
	want = s->grow_want;
	/* (below the minimum, the joiners end the wait: below_min_fill) */
	if (want == 0 || ensure_ids(n) || s->below_since ||
	    (s->grow_exact && count_joining(n, 1) < want)) {
		pthread_mutex_unlock(&n->mu);
		free(ids);
		return;
	}
	s->grow_want = 0;
	took = take_ready(n, want);
	s->workers_total += took;
	n->el_epoch++;
	n->el_gone = 0;
	epoch = n->el_epoch;
	count = n->el_n;
	memcpy(ids, n->el_ids, sizeof(int) * (size_t)count);
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	dt__log(0, "membership %llu has %d workers: %d joined",
	        (unsigned long long)epoch, count, took);
	send_membership(n, ids, count, epoch, 0, 2);
	free(ids);
	send_waiting(n);
}

void
dt__elastic_sched_ready(dt_node *n, int peer)
{
	char name[64];

	pthread_mutex_lock(&n->mu);
	if (n->sched->joining[peer] == 1)
		n->sched->joining[peer] = 2;
	pthread_mutex_unlock(&n->mu);
	dt__log(0, "%s is ready to join",
	        dt__node_name(n, peer, name, sizeof(name)));
	below_min_fill(n, 1);
	send_waiting(n);
	try_grant(n);
}

void
dt__elastic_sched_grow(dt_node *n, int peer, const dt_msg *m)
{
	dt_sched *s = n->sched;

	if (!n->elastic || !dt__elastic_member(n, peer) || m->hdr.arg0 < 1 ||
	    m->hdr.arg0 > (uint64_t)n->el_max) {
		dt__log(0, "ignoring a GROW from node %d (count %llu)", peer,
		        (unsigned long long)m->hdr.arg0);
		return;
	}
	pthread_mutex_lock(&n->mu);
	s->grow_want = (int)m->hdr.arg0;
	s->grow_exact = m->hdr.arg2 != 0;
	pthread_mutex_unlock(&n->mu);
	DT_LOG(1, "the members ask for %d more workers at step %llu%s",
	       (int)m->hdr.arg0, (unsigned long long)m->hdr.arg1,
	       m->hdr.arg2 ? " (their schedule)" : "");
	try_grant(n);
}

void
dt__elastic_sched_end(dt_node *n)
{
	dt_sched *s = n->sched;

	for (int id = 1; n->elastic && s->joining && id < n->ntable; id++) {
		dt_conn *c;

		pthread_mutex_lock(&n->mu);
		c = s->joining[id]
		        ? __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE)
		        : NULL;
		/* (only a joiner's: a server's left counts its end) */
		if (s->joining[id])
			s->left[id] = 1;
		s->joining[id] = 0;
		pthread_mutex_unlock(&n->mu);
		if (c)
			dt__sched_send_abort(
			    n, c,
			    "the elastic job ended before its members took "
			    "this worker in");
	}
}

void
dt__elastic_member_on_msg(dt_node *n, dt_conn *c, const dt_msg *m)
{
	int *ids, count = 0;
	uint64_t epoch = m->hdr.arg0;
	int gone = (int)m->hdr.arg1, fresh = 0, lost = m->hdr.arg2 == 1;
	int slots = dt__elastic_slots(n);

	if (dt__conn_peer(c) != 0 || !n->elastic || !n->have_table ||
	    (n->role != DT_ROLE_WORKER && n->role != DT_ROLE_SERVER)) {
		dt__log(0,
		        "dropping %s: MEMBERSHIP outside an elastic job's "
		        "worker or server, or not from the scheduler",
		        dt__conn_addr(c));
		dt__van_close(n->van, c);
		return;
	}
	if (gone < 0 || gone >= n->ntable)
		gone = 0;
	ids = malloc(sizeof(int) * (size_t)DT_MAX(slots, 1));
	if (ids == NULL) {
		/* A membership not taken would leave this worker in the old
		 * one for good: end instead. */
		dt__node_set_fatal(n, DT_ENOMEM,
		                   "no memory for a MEMBERSHIP of %d workers",
		                   slots);
		return;
	}
	if (dt__msg_membership_decode(m->meta, m->hdr.meta_len,
	                              dt__node_worker_id(n, 0), slots, ids,
	                              &count)) {
		dt__node_set_fatal(n, DT_EPROTO, "the scheduler sent %s",
		                   dt_errmsg());
		free(ids);
		return;
	}
	pthread_mutex_lock(&n->mu);
	if (ensure_ids(n) == 0 && epoch > n->el_epoch) {
		memcpy(n->el_ids, ids, sizeof(int) * (size_t)count);
		n->el_n = count;
		n->el_epoch = epoch;
		n->el_gone = gone;
		n->el_hold_until = 0;
		fresh = 1;
		pthread_cond_broadcast(&n->cv);
	}
	pthread_mutex_unlock(&n->mu);
	free(ids);
	if (!fresh)
		return;
	DT_LOG(1, "membership %llu: %d workers", (unsigned long long)epoch,
	       count);
	for (int i = 0; i < DT__MAX_APPS; i++) {
		dt__app_hooks hk;

		if (!__atomic_load_n(&n->apps[i].cls, __ATOMIC_ACQUIRE))
			continue;
		hk = n->apps[i].hooks;
		if (hk.on_membership)
			hk.on_membership(hk.arg, n, epoch, gone, lost);
	}
}

/* Whether the scheduler and this worker are in a job that grows: the
 * messages below come only from the scheduler, to an elastic worker. */
static int
from_scheduler(dt_node *n, dt_conn *c, const char *what)
{
	if (dt__conn_peer(c) == 0 && n->elastic && n->have_table &&
	    n->role == DT_ROLE_WORKER)
		return 1;
	dt__log(0,
	        "dropping %s: %s outside an elastic job's worker, or not "
	        "from the scheduler",
	        dt__conn_addr(c), what);
	dt__van_close(n->van, c);
	return 0;
}

void
dt__elastic_member_on_grow(dt_node *n, dt_conn *c, const dt_msg *m)
{
	if (!from_scheduler(n, c, "GROW"))
		return;
	uint64_t hold_ms = DT_MIN(m->hdr.arg1, 30ull * 86400 * 1000);
	int was;

	pthread_mutex_lock(&n->mu);
	n->el_waiting = (int)DT_MIN(m->hdr.arg0, (uint64_t)n->el_max);
	n->el_announced = (int)DT_MIN(m->hdr.arg2, (uint64_t)n->el_max);
	was = n->el_hold_until != 0;
	n->el_hold_until = hold_ms ? dt__now_ns() + hold_ms * 1000000ull : 0;
	pthread_mutex_unlock(&n->mu);
	DT_LOG(1, "%d workers wait to join (%d asked)", (int)m->hdr.arg0,
	       (int)DT_MIN(m->hdr.arg2, (uint64_t)n->el_max));
	if (hold_ms && !was)
		dt__log(0,
		        "the job has fewer workers than DTRAIN_ELASTIC_MIN=%d: "
		        "waiting up to %.0f s more for workers to join",
		        n->el_min, (double)hold_ms * 1e-3);
}

void
dt__elastic_member_on_update(dt_node *n, dt_conn *c, const dt_msg *m)
{
	dt__msg_add_node a;
	uint64_t id = m->hdr.key;
	dt_node_entry *e;

	if (!from_scheduler(n, c, "NODE_UPDATE"))
		return;
	if (id <= (uint64_t)n->num_servers || id >= (uint64_t)n->ntable ||
	    id == (uint64_t)n->id ||
	    dt__msg_add_node_decode(m->meta, m->hdr.meta_len, &a) ||
	    a.role != DT_ROLE_WORKER) {
		dt__log(0, "ignoring a malformed NODE_UPDATE");
		return;
	}
	/* (a dial to it reads the row after the MEMBERSHIP that takes it
	 * in, which comes after this on the same connection) */
	e = &n->table[id];
	dt__dir_learn(n, (int)id, a.host, a.port, a.pid, a.hostid, a.local);
	DT_LOG(1, "worker %d (node id %d, pid %d at %s:%d) joins the job",
	       e->rank, (int)id, a.pid, a.host, a.port);
}

static int
self_member(dt_node *n, const void *arg)
{
	(void)arg;
	for (int i = 0; n->el_ids && i < n->el_n; i++)
		if (n->el_ids[i] == n->id)
			return 1;
	return 0;
}

dt_err
dt__elastic_joiner_ready(dt_node *n)
{
	dt_msg_hdr h = {.cmd = DT_CMD_BARRIER,
	                .flags = DT_F_REQUEST,
	                .arg0 = DT_GROUP_WORKERS};
	dt_err err;

	if ((err = dt__node_send(n, 0, &h, NULL, 0, NULL, 0)))
		return err;
	DT_LOG(1, "ready to join; waiting for the members to take this "
	          "worker in");
	err = dt__node_wait(n, self_member, NULL, dt__now_ns() + n->wait_ns,
	                    "the members' next commit to take this worker in");
	if (err == DT_ETIMEDOUT)
		return dt__fail(err, "%s (DT_WAIT_TIMEOUT)", dt_errmsg());
	return err;
}

/*
 * Below the minimum. A change that leaves fewer than DTRAIN_ELASTIC_MIN
 * workers does not end the job at once (Horovod's contract): the survivors
 * are waiting for their next membership already (a loss fails their
 * operation, a scheduled leaving is at a commit), and the scheduler holds
 * it back, telling them for how long (GROW arg1), until enough workers
 * that join are ready. Then one membership takes the change and the
 * joiners together, and the joiners get the state by the restore's
 * broadcast, as after a grow. A worker lost while waiting only makes the
 * list shorter; the last one lost ends the job (no one would hold the
 * state). After DTRAIN_ELASTIC_TIMEOUT the serve loop ends the job
 * (dt__elastic_sched_check_min) with a message naming the minimum.
 */

/* (mu held) The hold's milliseconds left; 0 when the job is not below its
 * minimum, 1 at least while it is. */
static uint64_t
below_left_ms(dt_node *n)
{
	dt_sched *s = n->sched;
	uint64_t now = dt__now_ns(), end;

	if (s == NULL || s->below_since == 0)
		return 0;
	end = s->below_since + n->el_timeout_ns;
	return end > now ? DT_MAX((end - now) / 1000000ull, 1ull) : 1;
}

/* A change left count (< DTRAIN_ELASTIC_MIN, > 0) workers: wait for
 * joiners, unless those ready are enough already. */
static void
below_min_begin(dt_node *n, int peer, const char *why, int lost, int count)
{
	dt_sched *s = n->sched;
	char name[64];
	double left;

	pthread_mutex_lock(&n->mu);
	if (s->below_since == 0)
		s->below_since = dt__now_ns();
	s->below_gone = peer;
	s->below_lost = lost;
	left = (double)below_left_ms(n) * 1e-3;
	pthread_mutex_unlock(&n->mu);
	dt__log(0,
	        "%s (pid %d at %s:%d) %s (%s): %d worker%s remain%s, fewer "
	        "than DTRAIN_ELASTIC_MIN=%d; waiting up to %.0f s "
	        "(DTRAIN_ELASTIC_TIMEOUT) for workers to join",
	        dt__node_name(n, peer, name, sizeof(name)), n->table[peer].pid,
	        n->table[peer].host, n->table[peer].port,
	        lost ? "was lost" : "left on schedule", why, count,
	        count == 1 ? "" : "s", count == 1 ? "s" : "", n->el_min, left);
	send_waiting(n);
	below_min_fill(n, 0);
}

/* If the job is below its minimum and the ready joiners bring it back to
 * it, take them all (up to DTRAIN_ELASTIC_MAX) in one membership, which
 * every member, old and new, gets.
 *
 * later: the wait began before (a joiner got ready since). The membership
 * then says "lost" even when the change was a scheduled leaving: a
 * survivor may have taken a membership sent before the wait (two workers
 * leaving at one commit give two), whose sync includes the second leaver
 * and waits on it; it must fail and take this one. A survivor still
 * finishing its step before the commit had all the leavers' data long
 * before a joiner could start, so no operation that should finish fails. */
static void
below_min_fill(dt_node *n, int later)
{
	dt_sched *s = n->sched;
	int *ids, count, took, gone, lost;
	uint64_t epoch, waited;

	if ((ids = malloc(sizeof(int) * (size_t)n->ntable)) == NULL)
		return; /* (the next ready joiner, or the timeout, decides) */
	pthread_mutex_lock(&n->mu);
	if (s->below_since == 0 || ensure_ids(n) ||
	    n->el_n + count_joining(n, 1) < n->el_min) {
		pthread_mutex_unlock(&n->mu);
		free(ids);
		return;
	}
	/* Only as many as the minimum needs: the others are taken in by the
	 * members, at a step they agree on, as any joiner is. A replay of
	 * the run, whose later joiners are all ready from its start, then
	 * takes the same number here. */
	took = take_ready(n, n->el_min - n->el_n);
	s->workers_total += took;
	s->grow_want = 0; /* (a request from before the change is spent) */
	waited = dt__now_ns() - s->below_since;
	s->below_since = 0;
	gone = s->below_gone;
	lost = s->below_lost || later;
	n->el_epoch++;
	n->el_gone = gone;
	epoch = n->el_epoch;
	count = n->el_n;
	memcpy(ids, n->el_ids, sizeof(int) * (size_t)count);
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	dt__log(0,
	        "membership %llu has %d workers: %d joined; the job has "
	        "DTRAIN_ELASTIC_MIN=%d again after %.1f s below it",
	        (unsigned long long)epoch, count, took, n->el_min,
	        (double)waited * 1e-9);
	send_membership(n, ids, count, epoch, gone, lost);
	free(ids);
	send_waiting(n);
}

int
dt__elastic_sched_below_over(dt_node *n)
{
	dt_sched *s = n->sched;

	return n->elastic && s && s->below_since &&
	       dt__now_ns() - s->below_since >= n->el_timeout_ns;
}

void
dt__elastic_sched_check_min(dt_node *n)
{
	char reason[256];
	int live;

	pthread_mutex_lock(&n->mu);
	if (!dt__elastic_sched_below_over(n)) {
		pthread_mutex_unlock(&n->mu);
		return;
	}
	/* (the wait is over: the serve loop's next wait sees the abort) */
	n->sched->below_since = 0;
	live = dt__elastic_live(n);
	pthread_mutex_unlock(&n->mu);
	snprintf(
	    reason, sizeof(reason),
	    "%d worker%s live, fewer than DTRAIN_ELASTIC_MIN=%d for %.0f s "
	    "(DTRAIN_ELASTIC_TIMEOUT): not enough workers joined",
	    live, live == 1 ? "" : "s", n->el_min,
	    (double)n->el_timeout_ns * 1e-9);
	dt__log(0, "the elastic job ends: %s", reason);
	dt__sched_abort(n, reason);
}

void
dt__node_elastic_take(dt_node *n, uint64_t epoch)
{
	pthread_mutex_lock(&n->mu);
	if (epoch > n->el_taken)
		n->el_taken = epoch;
	pthread_mutex_unlock(&n->mu);
}

uint64_t
dt__node_elastic_taken(dt_node *n)
{
	uint64_t epoch;

	pthread_mutex_lock(&n->mu);
	epoch = n->el_taken;
	pthread_mutex_unlock(&n->mu);
	return epoch;
}

void
dt__elastic_free(dt_node *n)
{
	free(n->el_ids);
	n->el_ids = NULL;
}
