/*
 * tree_barrier.c - a member's side of the control tree (tree.h has its
 * shape; scheduler.c builds it and is its root). In a job that uses the
 * tree (docs/scale.md says when), the scheduler's ASSIGN gives the node
 * its place: its parent (and the parent's address), its children and the
 * servers and workers of each subtree.
 *
 * A barrier over the tree: a node's own arrival (dt__tree_arrive, on the
 * caller's thread) and each child's aggregated BARRIER (on the I/O
 * thread) are counted per group mask; when the node's subtree is whole
 * for that mask, one BARRIER goes to the parent carrying the count and
 * the first error in the subtree. The scheduler counts its children's
 * arrivals against the group's size and sends BARRIER_DONE to them; each
 * node forwards it to its children whose subtree is in the group, before
 * its own waiting caller is woken. An interior node counts and forwards
 * whether or not it is in the barrier's group, and its program has no
 * part in it: a server forwards the workers' barriers.
 *
 * A lost node's news goes up the same edges: a node that finds a child
 * silent for PS_HEARTBEAT_TIMEOUT (watch.c), or whose link to a child
 * closed while the job runs (lifecycle.c), sends TREE_LOST to its parent;
 * each node passes one from a child on to its own parent, and the
 * scheduler ends the job naming the lost node (sched_watch.c).
 *
 * Connections: each node connects to its parent before the start-up
 * barrier (dt__tree_join), so the I/O threads, which never dial, find
 * every tree edge up: a worker's parent is a server it dialled at its
 * start, or a worker it dials (reach.c); a server's is a server it dials
 * the same way, or a worker, which dials every server at its start.
 *
 * Threads and locks: n->tree is set once, by the I/O thread under
 * node->mu (and with release order, for a sender on another thread that
 * asks whether a peer is a tree neighbour) before the node's start goes
 * on, so later readers need no lock; the open round's counts are guarded
 * by node->mu. A round cannot
 * overlap the next: a child sends its next arrival only after the
 * release of this one, which its parent forwards only after it sent its
 * own aggregate, resetting its counts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/node_impl.h"

static int
kid_of(const dt__tree_place *p, int id)
{
	for (int k = 0; k < p->nkids; k++)
		if (p->kid[k].id == id)
			return k;
	return -1;
}

int
dt__tree_child(const dt_node *n, int id)
{
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);

	return p && id > 0 ? kid_of(p, id) : -1;
}

dt_err
dt__tree_report_lost(dt_node *n, int lost, int reason, uint64_t silent_ns)
{
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);
	dt__msg_tree_lost l = {lost, reason, silent_ns};
	dt_msg_hdr h = {.cmd = DT_CMD_TREE_LOST};
	dt_wbuf w;
	dt_err err;

	if (p == NULL)
		return dt__fail(DT_EINVAL, "no control tree");
	dt__wbuf_init(&w);
	if ((err = dt__msg_tree_lost_encode(&l, &w)) == DT_OK)
		err = dt__node_send(n, p->parent, &h, w.data, (uint32_t)w.len,
		                    NULL, 0);
	dt__wbuf_fini(&w);
	return err;
}

void
dt__tree_on_lost(dt_node *n, dt_conn *c, const dt_msg *m)
{
	const dt__tree_place *p = n->tree;
	int peer = dt__conn_peer(c);
	dt__msg_tree_lost l;
	char name[64], lost[64];

	if (p == NULL || dt__tree_child(n, peer) < 0) {
		dt__log(0, "dropping %s: TREE_LOST not from a tree child",
		        dt__conn_addr(c));
		dt__van_close(n->van, c);
		return;
	}
	if (dt__msg_tree_lost_decode(m->meta, m->hdr.meta_len, n->ntable, &l) ||
	    (l.lost == n->id &&
	     dt__fail(DT_EPROTO, "TREE_LOST: about this node itself"))) {
		dt__log(0, "dropping %s: %s", dt__conn_addr(c), dt_errmsg());
		dt__van_close(n->van, c);
		return;
	}
	DT_LOG(1, "%s reports %s lost: telling the tree parent",
	       dt__node_name(n, peer, name, sizeof(name)),
	       dt__node_name(n, l.lost, lost, sizeof(lost)));
	if (dt__tree_report_lost(n, l.lost, l.reason, l.silent_ns))
		dt__log(0, "cannot pass TREE_LOST on to the tree parent: %s",
		        dt_errmsg());
}

int
dt__tree_edge(const dt_node *n, int id)
{
	/* (any thread that sends may ask, reach.c: the place is published
	 * with release order) */
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);

	return p && id > 0 && (p->parent == id || kid_of(p, id) >= 0);
}

void
dt__tree_set_place(dt_node *n, dt__tree_place *p)
{
	char name[64];

	pthread_mutex_lock(&n->mu);
	__atomic_store_n(&n->tree, p, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	DT_LOG(1,
	       "control tree: parent %s, %d children, %d servers and %d "
	       "workers in this subtree",
	       p->parent ? dt__node_name(n, p->parent, name, sizeof(name))
	                 : "the scheduler",
	       p->nkids, p->servers, p->workers);
}

static int
parent_connected(dt_node *n, const void *arg)
{
	(void)arg;
	return __atomic_load_n(&n->peers[n->tree->parent], __ATOMIC_ACQUIRE) !=
	       NULL;
}

dt_err
dt__tree_join(dt_node *n)
{
	uint64_t deadline =
	    dt__now_ns() + (uint64_t)n->cfg.connect_timeout_ms * 1000000ull;
	char name[64];
	int parent;
	dt_err err;

	if (!n->tree_wait || n->tree == NULL)
		return DT_OK;
	parent = n->tree->parent;
	if (parent == 0 || parent_connected(n, NULL))
		return DT_OK;
	dt__node_name(n, parent, name, sizeof(name));
	/* A worker's or server's parent of its own role: dialled now. A
	 * server's parent that is a worker dials it (every server) at its
	 * own start. */
	if (dt__reach_lazy(n, parent))
		err = dt__reach_peer(n, parent);
	else
		err = dt__node_wait(n, parent_connected, NULL, deadline,
		                    "the connection from its tree parent");
	if (err)
		return dt__fail(err, "control tree: no connection to %s: %s",
		                name, dt_errmsg());
	return DT_OK;
}

/*
 * Count `count` arrivals of mask's open round: this node's own (kid -1)
 * or child kid's aggregate, with the first error in it (err, and its text
 * already naming the node it came from). When the subtree is whole, the
 * round's aggregate goes to the parent.
 */
static dt_err
tree_count(dt_node *n, int mask, int kid, int count, int err, const char *text)
{
	const dt__tree_place *p = n->tree;
	int want = dt__tree_in_mask(p->servers, p->workers, mask);
	int first_err;
	char msg[256];

	pthread_mutex_lock(&n->mu);
	if (kid >= 0) {
		if (n->tree_in[mask][kid]) {
			pthread_mutex_unlock(&n->mu);
			return dt__fail(
			    DT_EPROTO,
			    "a second BARRIER over group mask %d in "
			    "one round",
			    mask);
		}
		n->tree_in[mask][kid] = 1;
	}
	if (err && n->tree_err[mask] == 0) {
		n->tree_err[mask] = err;
		snprintf(n->tree_msg[mask], sizeof(n->tree_msg[mask]), "%s",
		         text);
	}
	n->tree_arrived[mask] += (uint64_t)count;
	if (n->tree_arrived[mask] < (uint64_t)want) {
		pthread_mutex_unlock(&n->mu);
		return DT_OK;
	}
	n->tree_arrived[mask] = 0;
	memset(n->tree_in[mask], 0, sizeof(n->tree_in[mask]));
	first_err = n->tree_err[mask];
	memcpy(msg, n->tree_msg[mask], sizeof(msg));
	n->tree_err[mask] = 0;
	n->tree_msg[mask][0] = '\0';
	pthread_mutex_unlock(&n->mu);

	dt_msg_hdr h = {.cmd = DT_CMD_BARRIER,
	                .flags = DT_F_REQUEST,
	                .arg0 = (uint64_t)mask,
	                .arg1 = (uint64_t)want,
	                .key = (uint64_t)first_err};

	return dt__node_send(n, p->parent, &h, first_err ? msg : NULL,
	                     first_err ? (uint32_t)strlen(msg) : 0, NULL, 0);
}

dt_err
dt__tree_arrive(dt_node *n, int mask, dt_err mine, const char *msg)
{
	char name[64], text[256], shown[200];

	text[0] = '\0';
	if (mine) {
		dt__printable(msg ? msg : "", shown, sizeof(shown));
		snprintf(text, sizeof(text), "%s: %s",
		         dt__node_name(n, n->id, name, sizeof(name)), shown);
	}
	return tree_count(n, mask, -1, 1, (int)mine, text);
}

void
dt__tree_on_barrier(dt_node *n, dt_conn *c, const dt_msg *m)
{
	const dt__tree_place *p = n->tree;
	int peer = dt__conn_peer(c), mask = (int)m->hdr.arg0, kid = -1;
	int want = 0, err;
	char name[64], text[256];
	dt_err e;

	if (p && peer > 0 && (kid = kid_of(p, peer)) >= 0 && mask >= 1 &&
	    mask <= DT_GROUP_ALL)
		want = dt__tree_in_mask(p->kid[kid].servers,
		                        p->kid[kid].workers, mask);
	if (want == 0 || m->hdr.arg1 != (uint64_t)want) {
		dt__log(0,
		        "dropping %s: BARRIER over group mask %d counting %llu "
		        "from a node that is not a child with that many in "
		        "the group",
		        dt__conn_addr(c), mask,
		        (unsigned long long)m->hdr.arg1);
		dt__van_close(n->van, c);
		return;
	}
	err = m->hdr.key ? (int)dt__err_from_wire(m->hdr.key, DT_EPEER) : 0;
	dt__printable(m->meta ? (const char *)m->meta : "", text, sizeof(text));
	if ((e = tree_count(n, mask, kid, want, err, text)) == DT_EPROTO) {
		dt__log(0, "dropping %s (%s): %s", dt__conn_addr(c),
		        dt__node_name(n, peer, name, sizeof(name)),
		        dt_errmsg());
		dt__van_close(n->van, c);
	} else if (e) {
		dt__log(0,
		        "barrier over group mask %d: cannot reach the tree "
		        "parent: %s",
		        mask, dt_errmsg());
	}
}

int
dt__tree_on_done(dt_node *n, dt_conn *c, const dt_msg *m)
{
	const dt__tree_place *p = n->tree;
	int mask = (int)m->hdr.arg0;

	if (p == NULL || dt__conn_peer(c) != p->parent)
		return 0;
	/* (to the children first: this node's caller, once woken, may
	 * leave the job and close their connections) */
	for (int k = 0; k < p->nkids; k++) {
		if (dt__tree_in_mask(p->kid[k].servers, p->kid[k].workers,
		                     mask) == 0)
			continue;
		dt_msg_hdr h = {.cmd = DT_CMD_BARRIER_DONE,
		                .flags = DT_F_RESPONSE,
		                .arg0 = m->hdr.arg0,
		                .key = m->hdr.key};

		if (dt__node_send(n, p->kid[k].id, &h, m->meta, m->hdr.meta_len,
		                  NULL, 0))
			dt__log(0, "barrier over group mask %d: %s", mask,
			        dt_errmsg());
	}
	return 1;
}
