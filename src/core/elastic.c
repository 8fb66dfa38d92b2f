/*
 * elastic.c - the membership of an elastic job (DTRAIN_ELASTIC=1): which
 * workers are live, and its epoch.
 *
 * The scheduler is the one authority. It starts at epoch 0 with every
 * worker of the table. When a worker is lost (closed connection, silent
 * heartbeats, a SIGKILL) or leaves on purpose (a scheduled removal: its
 * WORKER_DONE with arg0 = 1), it is taken out of the list, the epoch goes
 * up by one, and every remaining worker gets the whole new list in one
 * MEMBERSHIP message, instead of the job being aborted - as long as at
 * least DTRAIN_ELASTIC_MIN workers remain. Members keep the last list
 * they were given (a MEMBERSHIP of an epoch not above theirs is ignored)
 * and tell their apps (on_membership); the collectives re-form their
 * communicator over it when the program takes the change (coll/elastic.c).
 *
 * The scheduler counts a removed worker as done, so the job ends when the
 * survivors are, and its barriers over the workers count the live ones.
 * Elastic jobs have no servers: a server's rounds would need the same
 * change (its round sizes, the snapshot to go back to), which is not done;
 * such a job is refused at start-up on every node.
 *
 * Locking: the fields (n->el_*) are guarded by n->mu.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sched_impl.h"

dt_err
dt__elastic_config(dt_node *n)
{
	long on, lo, hi;
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
	                        &hi)))
		return err;
	if (n->cfg.num_servers > 0)
		return dt__fail(
		    DT_ENOTSUP,
		    "DTRAIN_ELASTIC=1 with DMLC_NUM_SERVER=%d: elastic "
		    "training works in the collectives mode only (a "
		    "job without servers: dtrain launch -s 0); with "
		    "parameter servers it is not supported yet",
		    n->cfg.num_servers);
	if (n->recover)
		return dt__fail(
		    DT_ECONFIG,
		    "DTRAIN_ELASTIC=1 and DTRAIN_RECOVER=1 (--restart) "
		    "exclude each other: a lost worker either leaves "
		    "the membership or is replaced in its place");
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
	n->el_ids = calloc((size_t)DT_MAX(n->num_workers, 1), sizeof(int));
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

dt_err
dt__node_wait_membership(dt_node *n, uint64_t above, uint64_t deadline_ns)
{
	dt_err err;
	char what[96];

	snprintf(what, sizeof(what), "membership %llu from the scheduler",
	         (unsigned long long)above + 1);
	err = dt__node_wait(n, epoch_above, &above, deadline_ns, what);
	return err;
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

/* Send the membership to every live worker (scheduler). */
static void
send_membership(dt_node *n, const int *ids, int count, uint64_t epoch, int gone,
                int lost)
{
	dt_wbuf w;

	dt__wbuf_init(&w);
	if (dt__msg_membership_encode(ids, count, &w) == DT_OK)
		for (int i = 0; i < count; i++) {
			dt_msg_hdr h = {.cmd = DT_CMD_MEMBERSHIP,
			                .arg0 = epoch,
			                .arg1 = (uint64_t)gone,
			                .arg2 = lost ? 1u : 0u};

			(void)dt__node_send(n, ids[i], &h, w.data,
			                    (uint32_t)w.len, NULL, 0);
		}
	dt__wbuf_fini(&w);
}

int
dt__elastic_sched_remove(dt_node *n, int peer, const char *why, int lost)
{
	dt_sched *s = n->sched;
	int *ids = NULL, count = 0, found = -1;
	uint64_t epoch = 0;
	char name[64], reason[512];

	if (!n->elastic || s == NULL || peer <= 0 || peer >= n->ntable ||
	    n->table[peer].role != DT_ROLE_WORKER)
		return 0;
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
	if (count < n->el_min || ids == NULL) {
		snprintf(reason, sizeof(reason),
		         "%s (pid %d at %s:%d) %s (%s): %d worker%s remain%s, "
		         "fewer than DTRAIN_ELASTIC_MIN=%d",
		         name, n->table[peer].pid, n->table[peer].host,
		         n->table[peer].port, lost ? "was lost" : "left", why,
		         count, count == 1 ? "" : "s", count == 1 ? "s" : "",
		         n->el_min);
		free(ids);
		dt__sched_abort(n, reason);
		return 1;
	}
	/* The rounds it was missing from may be whole now. */
	for (int mask = 1; mask < 8; mask++)
		if (mask & DT_GROUP_WORKERS)
			dt__sched_barrier_recheck(n, mask);
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

void
dt__elastic_sched_join(dt_node *n, dt_conn *c, const joiner *j)
{
	char reason[512];
	int live;

	pthread_mutex_lock(&n->mu);
	live = dt__elastic_live(n);
	pthread_mutex_unlock(&n->mu);
	/* The joiner learns why from the ABORT, and the job's log from this
	 * line: a worker started by hand for a job that cannot take it must
	 * not look like a network fault on either side. */
	if (live >= n->el_max)
		snprintf(reason, sizeof(reason),
		         "a worker at %s:%d (pid %d) asks to join the running "
		         "elastic job, which has %d workers: "
		         "DTRAIN_ELASTIC_MAX=%d is reached",
		         j->host, j->port, j->pid, live, n->el_max);
	else
		snprintf(reason, sizeof(reason),
		         "a worker at %s:%d (pid %d) asks to join the running "
		         "elastic job (%d workers, DTRAIN_ELASTIC_MAX=%d): "
		         "adding workers to a running job is not supported "
		         "yet",
		         j->host, j->port, j->pid, live, n->el_max);
	dt__log(0, "refusing a node: %s", reason);
	dt__sched_send_abort(n, c, reason);
	dt__van_close(n->van, c);
}

void
dt__elastic_member_on_msg(dt_node *n, dt_conn *c, const dt_msg *m)
{
	int *ids, count = 0;
	uint64_t epoch = m->hdr.arg0;
	int gone = (int)m->hdr.arg1, fresh = 0, lost = m->hdr.arg2 != 0;

	if (dt__conn_peer(c) != 0 || !n->elastic || !n->have_table ||
	    n->role != DT_ROLE_WORKER) {
		dt__log(0,
		        "dropping %s: MEMBERSHIP outside an elastic job's "
		        "worker, or not from the scheduler",
		        dt__conn_addr(c));
		dt__van_close(n->van, c);
		return;
	}
	ids = malloc(sizeof(int) * (size_t)DT_MAX(n->num_workers, 1));
	if (ids == NULL) {
		/* A membership not taken would leave this worker in the old
		 * one for good: end instead. */
		dt__node_set_fatal(n, DT_ENOMEM,
		                   "no memory for a MEMBERSHIP of %d workers",
		                   n->num_workers);
		return;
	}
	if (dt__msg_membership_decode(m->meta, m->hdr.meta_len,
	                              dt__node_worker_id(n, 0), n->num_workers,
	                              ids, &count)) {
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

void
dt__elastic_free(dt_node *n)
{
	free(n->el_ids);
	n->el_ids = NULL;
}
