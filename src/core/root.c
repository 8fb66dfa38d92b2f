/*
 * root.c - a member's connection to the scheduler in a job with a control
 * tree (docs/scale.md). Once the start-up barrier has passed, a node's
 * control traffic goes over the tree: barriers, heartbeats, a lost node's
 * news, the end and the merged counters travel between tree parents and
 * children. So a worker whose tree parent is another node closes its
 * connection to the scheduler then ("parks" it), and the scheduler holds
 * its tree children's connections and the servers' (the end counts the
 * servers' closes), not one per node. The scheduler takes the close of a
 * node that is not its child after the start-up barrier as no news
 * (tree_end.c: dt__sched_tree_quiet): the node's tree parent tells if it
 * is lost.
 *
 * What still needs the scheduler dials it again on demand: a LOOKUP (of
 * an address, or of the hosts of ranks) holds the connection while it
 * waits for its answer, dialling it if parked, and closes it again once
 * no other lookup holds it; any other message to the scheduler (a TEXT)
 * dials it and leaves it open. A dialled connection says HELLO with the
 * node's id first, and the scheduler takes it as that node's
 * (dt__sched_root_hello). Jobs without the tree, servers, nodes under the
 * scheduler and nodes that record a timeline (which talk to the
 * scheduler at their end) keep their connection as before.
 *
 * Threads: parking, holding and dialling are the callers' (a node's start,
 * a lookup); the I/O thread never dials, so a message to a parked
 * scheduler from it fails. The fields are guarded by node->mu; peers[0]
 * is published with release order as before. A connection this node
 * closes while idle is first made a stranger's (peer -1), so that its
 * close is not taken for the scheduler's loss (lifecycle.c).
 */
#include <string.h>

#include "core/node_impl.h"
#include "core/sched_impl.h"

/* (mu held) Close the connection if parking is on and nothing holds it:
 * the connection to close, taken out of peers[0], or NULL. */
static dt_conn *
take_idle_locked(dt_node *n)
{
	dt_conn *c;

	if (!n->root_park || n->root_users > 0 || n->root_dialing)
		return NULL;
	c = __atomic_load_n(&n->peers[0], __ATOMIC_ACQUIRE);
	if (c == NULL)
		return NULL;
	/* (no longer the scheduler's: its close is no news, lifecycle.c,
	 * and a frame still in flight on it is a stranger's) */
	dt__conn_set_peer(c, -1);
	__atomic_store_n(&n->peers[0], NULL, __ATOMIC_RELEASE);
	__atomic_store_n(&n->root, NULL, __ATOMIC_RELEASE);
	return c;
}

static void
close_if_idle(dt_node *n)
{
	dt_conn *c;

	pthread_mutex_lock(&n->mu);
	c = take_idle_locked(n);
	pthread_mutex_unlock(&n->mu);
	if (c)
		dt__van_close(n->van, c);
}

/* Whether this node closes its connection to the scheduler while idle. */
static int
parks(const dt_node *n)
{
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);

	/* (a node under the scheduler talks to it over this connection;
	 * a server's close is how the scheduler sees it leave at the end;
	 * PS_RESEND, recovery and elastic jobs have no tree) */
	return p != NULL && p->parent != 0 && n->role == DT_ROLE_WORKER &&
	       !n->links && !n->recover && !n->elastic && !n->tracing;
}

void
dt__root_park_joined(dt_node *n)
{
	dt_msg_hdr h = {.cmd = DT_CMD_JOIN_PARK, .sender = (uint32_t)n->id};
	dt_conn *c;
	int called;

	pthread_mutex_lock(&n->mu);
	called = n->join_parked == 2;
	pthread_mutex_unlock(&n->mu);
	c = __atomic_load_n(&n->peers[0], __ATOMIC_ACQUIRE);
	if (!called || c == NULL)
		return;
	/* (arg0 1: it closes the connection now, which is then no loss;
	 * 0: it keeps it, and its place in the scheduler's window is free) */
	h.arg0 = (uint64_t)parks(n);
	if (dt__van_send(n->van, c, &h, NULL, 0, NULL, 0))
		return; /* (its close says the rest) */
	dt__root_park(n);
}

void
dt__root_park(dt_node *n)
{
	if (!parks(n))
		return;
	pthread_mutex_lock(&n->mu);
	if (n->root_park) { /* (at its parked join's end already) */
		pthread_mutex_unlock(&n->mu);
		return;
	}
	n->root_park = 1;
	pthread_mutex_unlock(&n->mu);
	close_if_idle(n);
	DT_LOG(1, "closed the idle connection to the scheduler: the control "
	          "traffic goes over the tree (dialled again when needed)");
}

/* Dial the scheduler and say who this node is (HELLO, its node id): the
 * connection becomes peers[0] again. */
static dt_err
dial(dt_node *n)
{
	dt_msg_hdr h = {.cmd = DT_CMD_HELLO,
	                .flags = DT_F_REQUEST,
	                .sender = (uint32_t)n->id,
	                .recver = 0,
	                .arg0 = n->gen};
	dt_conn *c;
	dt_err err;

	if (dt__van_dispatching(n->van))
		return dt__fail(
		    DT_ESTATE,
		    "the connection to the scheduler is closed while "
		    "idle, and the I/O thread does not dial it");
	err = dt__van_connect(n->van, n->cfg.root_uri, n->cfg.root_port, NULL,
	                      n->cfg.connect_timeout_ms, "scheduler", &c);
	if (err)
		return dt__fail(
		    err,
		    "dialling the scheduler again (DMLC_PS_ROOT_URI="
		    "%s DMLC_PS_ROOT_PORT=%d): %s",
		    n->cfg.root_uri, n->cfg.root_port, dt_errmsg());
	dt__conn_set_peer(c, 0);
	if ((err = dt__van_send(n->van, c, &h, NULL, 0, NULL, 0))) {
		dt__van_close(n->van, c);
		return err;
	}
	pthread_mutex_lock(&n->mu);
	__atomic_store_n(&n->peers[0], c, __ATOMIC_RELEASE);
	__atomic_store_n(&n->root, c, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&n->mu);
	DT_LOG(1, "dialled the scheduler again at %s:%d", n->cfg.root_uri,
	       n->cfg.root_port);
	return DT_OK;
}

static int
not_dialling(dt_node *n, const void *arg)
{
	(void)arg;
	return !n->root_dialing;
}

/* Make sure peers[0] is up: dial it if parked (one dialler at a time; the
 * others wait for its outcome). */
static dt_err
ensure_up(dt_node *n)
{
	uint64_t deadline =
	    dt__now_ns() + (uint64_t)n->cfg.connect_timeout_ms * 1000000ull;
	dt_err err;

	for (;;) {
		pthread_mutex_lock(&n->mu);
		if (__atomic_load_n(&n->peers[0], __ATOMIC_ACQUIRE) != NULL) {
			pthread_mutex_unlock(&n->mu);
			return DT_OK;
		}
		if (!n->root_dialing) {
			n->root_dialing = 1;
			pthread_mutex_unlock(&n->mu);
			break;
		}
		pthread_mutex_unlock(&n->mu);
		if ((err = dt__node_wait(n, not_dialling, NULL, deadline,
		                         "a dial of the scheduler")))
			return err;
	}
	err = dial(n);
	pthread_mutex_lock(&n->mu);
	n->root_dialing = 0;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	return err;
}

dt_err
dt__root_hold(dt_node *n)
{
	int park;
	dt_err err;

	pthread_mutex_lock(&n->mu);
	park = n->root_park;
	n->root_users++;
	pthread_mutex_unlock(&n->mu);
	if (!park || (err = ensure_up(n)) == DT_OK)
		return DT_OK;
	dt__root_release(n);
	return err;
}

void
dt__root_release(dt_node *n)
{
	pthread_mutex_lock(&n->mu);
	n->root_users--;
	pthread_mutex_unlock(&n->mu);
	close_if_idle(n);
}

dt_err
dt__root_reopen(dt_node *n)
{
	int park;

	pthread_mutex_lock(&n->mu);
	park = n->root_park;
	pthread_mutex_unlock(&n->mu);
	return park ? ensure_up(n) : DT_OK;
}

/* ---- The scheduler's side ---- */

int
dt__sched_root_hello(dt_node *n, dt_conn *c, int id)
{
	dt_sched *s = n->sched;
	char name[64];
	int ok;

	/* (a worker of the job that is not the scheduler's tree child, once
	 * the start-up barrier passed and while it has not left) */
	pthread_mutex_lock(&n->mu);
	ok = s->tree.count > 0 &&
	     (s->passed[DT_GROUP_ALL] >= 1 ||
	      dt__sched_park_idle_locked(n, id)) &&
	     id > 0 && id < s->tree.count && s->tree.parent[id] != 0 &&
	     dt__id_role(n, id) == DT_ROLE_WORKER && !s->left[id];
	if (ok) {
		/* (its old connection's close may not be read yet: it ends
		 * quietly, its peers[] slot no longer its own) */
		dt__conn_set_peer(c, id);
		__atomic_store_n(&n->peers[id], c, __ATOMIC_RELEASE);
		s->root_redials++;
	}
	pthread_mutex_unlock(&n->mu);
	if (ok)
		DT_LOG(1, "%s dialled again (its connection had been idle)",
		       dt__node_name(n, id, name, sizeof(name)));
	return ok;
}
