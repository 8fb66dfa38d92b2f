/*
 * reach.c - connections between workers made on demand. A worker dials
 * the servers at start-up (member.c) but no other worker: the connection
 * to a worker is made when this node first sends to it (dt__node_send_ex
 * calls dt__reach_peer), so a job that uses only the KV store has none
 * between workers, and a collective opens only its algorithm's partners.
 *
 * A dial: the sending thread claims the peer's slot, dials it, says HELLO
 * and waits for HELLO_ACK (by DT_CONNECT_TIMEOUT), then sends. The
 * connection is published (peers[id]) only once the peer accepted it, so
 * nothing but the HELLO is written on a connection the peer may refuse;
 * every other thread sending to that peer meanwhile waits for the dial
 * (the slot's mutex) and sends after it, in its turn. The I/O thread never
 * dials: a hook that sends to a worker not yet connected gets an error.
 * In a job with a control tree (tree_barrier.c), a server dials its
 * parent server the same way, and accepts its child servers' dials.
 *
 * Two workers may dial each other at once. The rule: the connection
 * dialled by the lower node id wins. A node that receives a HELLO from a
 * worker of higher id while its own dial to that worker is under way
 * closes the incoming connection (nothing was sent on it but the HELLO);
 * the higher one accepts the lower one's connection even while its own
 * dial is under way, and that dial then gives way: its thread finds the
 * peer's connection published and sends on it. A dial whose connection is
 * closed before HELLO_ACK is tried again after a short nap, until the
 * peer's connection appears or the deadline passes.
 *
 * Threads and locks: the decision to dial (the slot's dialing flag) and
 * the decision to accept or publish a connection are both taken under
 * node->mu, with peers[id] read there, so exactly one connection is ever
 * published per pair. slot.mu serialises the dials to one peer and is
 * never held by the I/O thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/node_impl.h"

typedef struct reach_slot {
	/* One dial at a time to this peer; made at the first (made, node
	 * mu), so that the slots of peers never dialled stay untouched. */
	pthread_mutex_t mu;
	int made;
	int dialing; /* (node mu) a dial is under way */
	dt_conn *c;  /* (node mu) its connection, once made */
	int closed;  /* (node mu) c closed before HELLO_ACK */
} reach_slot;

struct dt__reach {
	int count;
	int dials; /* (node mu) dials under way, for the close hook */
	reach_slot *s;
};

/* The nap between two tries of one dial: short, since the peer's own
 * connection usually is on its way (a simultaneous dial). */
#define REDIAL_NAP_NS 20000000ull

dt_err
dt__reach_create(dt_node *n)
{
	dt__reach *R;

	if ((n->role != DT_ROLE_WORKER && !n->tree_wait) || n->reach)
		return DT_OK;
	if ((R = dt__calloc(1, sizeof(*R))) == NULL)
		return DT_ENOMEM;
	R->count = n->ntable;
	if ((R->s = dt__calloc_sparse((size_t)R->count, sizeof(*R->s))) ==
	    NULL) {
		free(R);
		return DT_ENOMEM;
	}
	n->reach = R;
	return DT_OK;
}

void
dt__reach_free(dt_node *n)
{
	dt__reach *R = n->reach;

	if (R == NULL)
		return;
	for (int i = 0; i < R->count; i++)
		if (R->s[i].made)
			pthread_mutex_destroy(&R->s[i].mu);
	dt__free_sparse(R->s);
	free(R);
	n->reach = NULL;
}

int
dt__reach_lazy(const dt_node *n, int id)
{
	if (n->reach == NULL || n->table == NULL || id <= 0 ||
	    id >= n->ntable || id == n->id)
		return 0;
	if (n->role == DT_ROLE_WORKER)
		return id > n->num_servers &&
		       dt__id_role(n, id) == DT_ROLE_WORKER;
	/* (a server: its parent or child server in the control tree) */
	return dt__id_role(n, id) == DT_ROLE_SERVER && dt__tree_edge(n, id);
}

/* Where to dial worker id: a restarted one's new address (PS_RESEND's
 * links keep it), else the table's. */
static void
peer_addr(dt_node *n, int id, char *host, size_t hcap, int *port, char *local,
          size_t lcap)
{
	const dt_node_entry *e = &n->table[id];

	if (dt__link_addr(n, id, host, hcap, port, local, lcap))
		return;
	snprintf(host, hcap, "%s", e->host);
	*port = e->port;
	snprintf(local, lcap, "%s", dt__node_local_of(n, e->hostid, e->local));
}

/* Name c as worker id's connection and publish it (node mu held). */
static void
publish_locked(dt_node *n, dt_conn *c, int id)
{
	dt__conn_set_peer(c, id);
	__atomic_store_n(&n->said_bye[id], 0, __ATOMIC_RELEASE);
	__atomic_store_n(&n->peers[id], c, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&n->cv);
}

typedef struct dial_goal {
	int id;
	dt_conn *c;
} dial_goal;

/* The dial's wait is over: the peer has a connection (ours or its own),
 * or ours closed unanswered. */
static int
dial_settled(dt_node *n, const void *arg)
{
	const dial_goal *g = arg;

	return __atomic_load_n(&n->peers[g->id], __ATOMIC_ACQUIRE) != NULL ||
	       n->reach->s[g->id].closed;
}

/* Claim the slot (node mu): 0 if the peer has a connection already. */
static int
claim(dt_node *n, reach_slot *s, int id)
{
	int go;

	pthread_mutex_lock(&n->mu);
	go = __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) == NULL;
	if (go) {
		s->dialing = 1;
		s->c = NULL;
		s->closed = 0;
		n->reach->dials++;
	}
	pthread_mutex_unlock(&n->mu);
	return go;
}

/* The dial's end (node mu): whether the peer now has a connection. Our
 * connection, if it lost, is closed by the caller (*drop). */
static int
release(dt_node *n, reach_slot *s, int id, dt_conn **drop)
{
	dt_conn *p;

	pthread_mutex_lock(&n->mu);
	p = __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE);
	*drop = s->c && s->c != p ? s->c : NULL;
	s->dialing = 0;
	s->c = NULL;
	n->reach->dials--;
	pthread_mutex_unlock(&n->mu);
	return p != NULL;
}

/* One try: dial, say HELLO, wait. 1: the peer has a connection now; 0:
 * ours was refused or cut before HELLO_ACK (try again); -1: *errp. */
static int
try_dial(dt_node *n, reach_slot *s, int id, uint64_t deadline, const char *name,
         dt_err *errp)
{
	char host[DT_HOST_MAX], local[DT_LOCAL_MAX];
	uint64_t now = dt__now_ns();
	int port, ms;
	dt_conn *c = NULL, *drop;
	dt_err err;

	if (!claim(n, s, id))
		return 1;
	/* (its address was looked up before the first try: reach_peer) */
	peer_addr(n, id, host, sizeof(host), &port, local, sizeof(local));
	ms = (int)((deadline - now) / 1000000ull) + 1;
	err = dt__van_connect(n->van, host, port, local, ms, name, &c);
	if (err == DT_OK) {
		dt_msg_hdr h = {
		    .cmd = DT_CMD_HELLO, .flags = DT_F_REQUEST, .arg0 = n->gen};
		dial_goal g = {id, c};

		pthread_mutex_lock(&n->mu);
		s->c = c;
		pthread_mutex_unlock(&n->mu);
		h.sender = (uint32_t)n->id;
		h.recver = (uint32_t)id;
		/* (a send that fails found c closed: refused, as below) */
		if (dt__van_send(n->van, c, &h, NULL, 0, NULL, 0) == DT_OK)
			err = dt__node_wait(n, dial_settled, &g, deadline,
			                    "the HELLO_ACK");
	}
	if (release(n, s, id, &drop)) {
		if (drop)
			dt__van_close(n->van, drop); /* the peer's won */
		return 1;
	}
	if (drop)
		dt__van_close(n->van, drop);
	if (err == DT_OK && c)
		return 0; /* refused: the peer's dial wins, or it had no table
		             yet to take ours */
	*errp = err;
	return -1;
}

/* The end of one try. In an elastic job the peer may have been lost
 * just now: a refused dial to it would be retried by the van until
 * DT_CONNECT_TIMEOUT, holding the collective that needs it while the
 * scheduler's membership without it arrives. Short tries let the loop
 * see that membership between them and give up. */
#define ELASTIC_TRY_NS 250000000ull

static uint64_t
try_deadline(const dt_node *n, uint64_t deadline)
{
	uint64_t now = dt__now_ns();

	if (!n->elastic || deadline <= now + ELASTIC_TRY_NS)
		return deadline;
	return now + ELASTIC_TRY_NS;
}

dt_err
dt__reach_peer(dt_node *n, int id)
{
	uint64_t t0 = dt__now_ns();
	uint64_t deadline =
	    t0 + (uint64_t)n->cfg.connect_timeout_ms * 1000000ull;
	reach_slot *s;
	char name[64];
	dt_err err;
	int tries = 0;

	if (!dt__reach_lazy(n, id))
		return dt__fail(DT_EINVAL, "node %d is not a worker to reach",
		                id);
	dt__node_name(n, id, name, sizeof(name));
	if (dt__van_dispatching(n->van))
		return dt__fail(DT_ESTATE,
		                "no connection to %s yet, and the I/O thread "
		                "does not dial",
		                name);
	s = &n->reach->s[id];
	pthread_mutex_lock(&n->mu);
	if (!s->made) {
		pthread_mutex_init(&s->mu, NULL);
		s->made = 1;
	}
	pthread_mutex_unlock(&n->mu);
	pthread_mutex_lock(&s->mu);
	/* (another thread's dial made it while this one waited) */
	if (__atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) != NULL) {
		pthread_mutex_unlock(&s->mu);
		return DT_OK;
	}
	for (;;) {
		if ((err = dt__node_check(n)))
			break;
		if (!dt__elastic_member(n, id)) {
			err = dt__fail(DT_EPEER, "it left the elastic job's "
			                         "membership");
			break;
		}
		/* (where it listens: asked of the scheduler the first time,
		 * directory.c; the send waits for the answer here) */
		if ((err = dt__node_lookup(n, id, 1)))
			break;
		tries++;
		int got =
		    try_dial(n, s, id, try_deadline(n, deadline), name, &err);

		/* (an elastic job's short try ran out: see try_deadline) */
		if (got < 0 && n->elastic &&
		    (err == DT_ECONNREFUSED || err == DT_ETIMEDOUT) &&
		    dt__now_ns() < deadline)
			got = 0;
		if (got != 0) {
			if (got == 1)
				err = DT_OK;
			break;
		}
		if (dt__now_ns() + REDIAL_NAP_NS >= deadline) {
			err = dt__fail(DT_ETIMEDOUT,
			               "it did not accept a connection (%d "
			               "tries)",
			               tries);
			break;
		}
		struct timespec nap = {0, (long)REDIAL_NAP_NS};

		nanosleep(&nap, NULL);
	}
	pthread_mutex_unlock(&s->mu);
	if (err == DT_OK) {
		dt__link_note_conn(n, id);
		DT_LOG(1, "connected to %s on demand in %.1f ms (%d tr%s)",
		       name, (double)(dt__now_ns() - t0) * 1e-6, tries,
		       tries == 1 ? "y" : "ies");
		return DT_OK;
	}
	if (err == DT_ESHUTDOWN) {
		dt_err fatal = dt__node_check(n);

		if (fatal)
			return fatal;
	}
	return dt__fail(err, "no connection to %s: %s%s", name, dt_errmsg(),
	                err == DT_ETIMEDOUT ? " (DT_CONNECT_TIMEOUT)" : "");
}

int
dt__reach_on_hello(dt_node *n, dt_conn *c, int id)
{
	dt__reach *R = n->reach;
	int verdict;
	char name[64];

	if (!dt__reach_lazy(n, id) || dt__conn_peer(c) != -1 ||
	    !dt__link_fresh(n, id))
		return -1;
	pthread_mutex_lock(&n->mu);
	if (__atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) != NULL)
		verdict = -1; /* (a second HELLO: refused the usual way) */
	else if (R->s[id].dialing && n->id < id)
		verdict = 0; /* our dial wins */
	else {
		/* HELLO_ACK goes before anything else on c: once c is
		 * published, another thread may write to it at once (the one
		 * whose own dial gave way), and the dialler takes nothing
		 * before its HELLO_ACK. The I/O thread's send does not wait. */
		dt_msg_hdr h = {.cmd = DT_CMD_HELLO_ACK,
		                .flags = DT_F_RESPONSE};

		h.sender = (uint32_t)n->id;
		h.recver = (uint32_t)id;
		verdict = 1;
		dt__conn_set_peer(c, id);
		if (dt__van_send(n->van, c, &h, NULL, 0, NULL, 0) == DT_OK &&
		    n->ctr)
			dt__ctr_sent(&n->ctr[id], DT_HDR_SIZE);
		publish_locked(n, c, id);
	}
	pthread_mutex_unlock(&n->mu);
	dt__node_name(n, id, name, sizeof(name));
	if (verdict == 1) {
		dt__link_note_conn(n, id);
		DT_LOG(1, "%s connected from %s", name, dt__conn_addr(c));
	} else if (verdict == 0) {
		DT_LOG(1,
		       "%s dialled this node while this node dialled it: "
		       "the lower id's connection wins, closing %s's",
		       name, name);
	}
	return verdict;
}

int
dt__reach_on_ack(dt_node *n, dt_conn *c, const dt_msg *m)
{
	dt__reach *R = n->reach;
	uint32_t id = m->hdr.sender;
	int taken = 0;

	if (R == NULL || dt__conn_peer(c) != -1 || id >= (uint32_t)R->count)
		return 0;
	pthread_mutex_lock(&n->mu);
	if (R->s[id].dialing && R->s[id].c == c) {
		taken = 1;
		if (__atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) == NULL) {
			publish_locked(n, c, (int)id);
			/* The HELLO counts once it is taken, on both sides
			 * (a refused one on neither: observability). */
			if (n->ctr)
				dt__ctr_sent(&n->ctr[id], DT_HDR_SIZE);
		}
	}
	pthread_mutex_unlock(&n->mu);
	return taken;
}

void
dt__reach_on_close(dt_node *n, dt_conn *c)
{
	dt__reach *R = n->reach;

	if (R == NULL)
		return;
	pthread_mutex_lock(&n->mu);
	for (int i = 0; R->dials > 0 && i < R->count; i++)
		if (R->s[i].dialing && R->s[i].c == c) {
			R->s[i].closed = 1;
			pthread_cond_broadcast(&n->cv);
		}
	pthread_mutex_unlock(&n->mu);
}
