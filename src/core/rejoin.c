/*
 * rejoin.c - recovery's side of the scheduler (DTRAIN_RECOVER,
 * docs/fault-tolerance.md): a server or worker that asks to join a running
 * job takes the place of the lost node whose place token it presents
 * (docs/security.md, "Taking a lost node's place"), under that node's id
 * and rank. It gets its assignment (arg2: the count of restarts, so it
 * knows it rejoins), and every other node the new address (NODE_UPDATE),
 * which starts their link to it again. A process that asks before its
 * node's loss is noticed is held (beaten by the watch thread, watch.c)
 * until the loss, or refused after DT_RESTART_TIMEOUT.
 *
 * Runs in the I/O thread (ADD_NODE, a closed connection) and the thread
 * that serves the job (refusals of overdue processes); the state is the
 * scheduler's (sched_impl.h), under node->mu.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sched_impl.h"

int
dt__sched_held_list(dt_node *n, dt_conn **out, int cap)
{
	dt_sched *s = n->sched;
	int k = 0;

	for (int i = 0; s && i < s->nheld && k < cap; i++)
		out[k++] = s->held[i].conn;
	return k;
}

static void
refuse(dt_node *n, dt_conn *c, const char *reason)
{
	dt__log(0, "refusing a node: %s", reason);
	dt__sched_send_abort(n, c, reason);
	dt__van_close(n->van, c);
}

/* Whether node id's place is free (mu held): it was lost, and did not
 * leave at its end. */
static int
place_lost(dt_node *n, int id)
{
	dt_sched *s = n->sched;

	return !s->left[id] && (s->down_ns[id] || dt__link_down(n, id));
}

/* The node of j's role whose place j may take (mu held): of the nodes
 * whose place token j presents (one, with dtrain launch; several where
 * an engine gives every process of a role one token), a lost one, the
 * rank j asks for first; else, none being lost yet, the rank it asks
 * for, else the first. -1: j presents no node's token. A node that joined
 * without a token has a place nobody can take. */
static int
token_place(dt_node *n, const joiner *j)
{
	dt_sched *s = n->sched;
	int id = -1, lost = 0;

	if (j->token[0] == '\0')
		return -1;
	for (int k = 1; k < n->ntable; k++) {
		int down, wanted = dt__id_rank(n, k) == j->want;

		if (dt__id_role(n, k) != j->role || !s->token[k][0] ||
		    !dt__same_bytes(s->token[k], j->token, DT_NODE_TOKEN_MAX))
			continue;
		down = place_lost(n, k);
		if (id < 0 || (down && !lost) || (down == lost && wanted))
			id = k;
		lost |= down;
		if (down && wanted)
			break;
	}
	return id;
}

/* Refuse a process whose place token names no node of the job. */
static void
refuse_stranger(dt_node *n, dt_conn *c, const joiner *j)
{
	char reason[512];
	const char *role = dt_role_name(j->role);

	if (j->token[0] == '\0')
		snprintf(reason, sizeof(reason),
		         "the job is running, and a %s at %s:%d (pid %d) asks "
		         "for a place in it without a place token "
		         "(DTRAIN_NODE_TOKEN): only a process that presents a "
		         "lost %s's token may take its place",
		         role, j->host, j->port, j->pid, role);
	else
		snprintf(reason, sizeof(reason),
		         "the job is running, and a %s at %s:%d (pid %d) asks "
		         "for a place in it with a place token "
		         "(DTRAIN_NODE_TOKEN) that is no %s's of this job",
		         role, j->host, j->port, j->pid, role);
	refuse(n, c, reason);
}

/* Give j node id's place (its restarts-th successor): its table, and its
 * address to everyone else. */
static void
admit(dt_node *n, dt_conn *c, const joiner *j, int id, int restarts)
{
	dt_sched *s = n->sched;
	char name[64];
	dt_node_entry *e = &n->table[id];
	dt_wbuf w;

	/* The scheduler's entry takes the new address, so a LOOKUP made
	 * from now on gets it (directory.c); the members that know the old
	 * one get it below. */
	pthread_mutex_lock(&n->mu);
	snprintf(e->host, DT_HOST_MAX, "%s", j->host);
	e->port = j->port;
	e->pid = j->pid;
	snprintf(e->hostid, DT_HOSTID_MAX, "%s", j->hostid);
	snprintf(e->local, DT_LOCAL_MAX, "%s", j->local);
	dt__dir_sched_changed(n);
	pthread_mutex_unlock(&n->mu);
	dt__conn_vouch(c);
	dt__link_restart_peer(n, id, c, NULL, 0, NULL);
	/* Its assignment (arg2: the count of restarts). */
	(void)dt__dir_send_assign(n, c, id, 0, 0, (uint64_t)restarts);
	dt__node_name(n, id, name, sizeof(name));
	dt__log(0, "%s is back: pid %d at %s:%d (restart %d)", name, j->pid,
	        j->host, j->port, restarts);
	/* Everyone else: its new address. */
	dt__msg_add_node a = {.role = j->role,
	                      .want = dt__id_rank(n, id),
	                      .port = j->port,
	                      .pid = j->pid,
	                      .num_servers = n->num_servers,
	                      .num_workers = n->num_workers};
	snprintf(a.host, sizeof(a.host), "%s", j->host);
	snprintf(a.hostid, sizeof(a.hostid), "%s", j->hostid);
	snprintf(a.local, sizeof(a.local), "%s", j->local);
	dt__wbuf_init(&w);
	if (dt__msg_add_node_encode(&a, &w) == DT_OK)
		for (int k = 1; k < n->ntable; k++) {
			dt_msg_hdr u = {.cmd = DT_CMD_NODE_UPDATE,
			                .key = (uint64_t)id,
			                .arg0 = (uint64_t)restarts};

			if (k != id && !s->left[k])
				dt__node_send(n, k, &u, w.data, (uint32_t)w.len,
				              NULL, 0);
		}
	dt__wbuf_fini(&w);
}

void
dt__sched_rejoin(dt_node *n, dt_conn *c, const joiner *j)
{
	dt_sched *s = n->sched;
	int id = -1, restarts = 0;
	char reason[512], name[64];

	pthread_mutex_lock(&n->mu);
	id = token_place(n, j);
	if (id < 0) {
		pthread_mutex_unlock(&n->mu);
		refuse_stranger(n, c, j);
		return;
	}
	dt__node_name(n, id, name, sizeof(name));
	if (place_lost(n, id)) {
		s->down_ns[id] = 0;
		restarts = ++s->restarts[id];
	} else if (!s->left[id] && s->nheld < n->num_servers + n->num_workers) {
		/* Perhaps its predecessor's end is not noticed yet. */
		joiner *h = &s->held[s->nheld++];

		*h = *j;
		h->conn = c;
		h->until = dt__now_ns() + n->restart_ns;
		pthread_mutex_unlock(&n->mu);
		/* A node of this job: its wait is bounded by until, not by
		 * the handshake guard (DT_HANDSHAKE_TIMEOUT), which would
		 * drop it first. */
		dt__conn_vouch(c);
		dt__log(0,
		        "a %s at %s:%d (pid %d) asks for the place of %s, "
		        "which is not lost yet: waiting up to "
		        "DT_RESTART_TIMEOUT=%.3g s for its loss",
		        dt_role_name(j->role), j->host, j->port, j->pid, name,
		        (double)n->restart_ns * 1e-9);
		return;
	} else {
		pthread_mutex_unlock(&n->mu);
		snprintf(reason, sizeof(reason),
		         "the job is running and %s, whose place a %s at "
		         "%s:%d asks for, has left, or too many processes "
		         "wait for a place already",
		         name, dt_role_name(j->role), j->host, j->port);
		refuse(n, c, reason);
		return;
	}
	pthread_mutex_unlock(&n->mu);
	admit(n, c, j, id, restarts);
}

/* Take the first held process that ready() accepts into *j; 0: none. */
static int
take_held(dt_node *n, int (*ready)(dt_node *, const joiner *, uint64_t),
          joiner *j)
{
	dt_sched *s = n->sched;
	uint64_t now = dt__now_ns();
	int k, found;

	pthread_mutex_lock(&n->mu);
	for (k = 0; k < s->nheld && !ready(n, &s->held[k], now); k++)
		;
	found = k < s->nheld;
	if (found) {
		*j = s->held[k];
		s->held[k] = s->held[--s->nheld];
	}
	pthread_mutex_unlock(&n->mu);
	return found;
}

static int
has_place(dt_node *n, const joiner *j, uint64_t now)
{
	int id = token_place(n, j);

	(void)now;
	return id > 0 && place_lost(n, id);
}

static int
wait_over(dt_node *n, const joiner *j, uint64_t now)
{
	(void)n;
	return j->until <= now;
}

/* A loss was noticed: a held process may take its place now. */
void
dt__sched_retry_held(dt_node *n)
{
	joiner j;

	while (take_held(n, has_place, &j))
		dt__sched_rejoin(n, j.conn, &j);
}

/* Refuse the held processes whose wait is over (the serve loop). */
void
dt__sched_refuse_overdue(dt_node *n)
{
	joiner j;
	char reason[512];

	while (take_held(n, wait_over, &j)) {
		snprintf(
		    reason, sizeof(reason),
		    "the job is running and no %s of it was lost within "
		    "DT_RESTART_TIMEOUT=%.3g s: there is no place for a %s "
		    "at %s:%d",
		    dt_role_name(j.role), (double)n->restart_ns * 1e-9,
		    dt_role_name(j.role), j.host, j.port);
		refuse(n, j.conn, reason);
	}
}

int
dt__sched_held_overdue(dt_node *n)
{
	uint64_t now = dt__now_ns();

	for (int k = 0; k < n->sched->nheld; k++)
		if (wait_over(n, &n->sched->held[k], now))
			return 1;
	return 0;
}
