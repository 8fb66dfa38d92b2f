/*
 * tree_end.c - the end of a job over its control tree (tree.h has the
 * shape; tree_barrier.c the barriers and the news of a lost node): an
 * abort, the normal end and the workers' leaving, each a message per tree
 * edge, so the scheduler writes and reads a few per child, not one per
 * node (docs/scale.md, "The end of a job over the tree").
 *
 * ABORT goes down. Once the start-up barrier has passed (every node is
 * then connected to its parent), the scheduler sends ABORT to its
 * children only, and a node that gets one from its parent (or the
 * scheduler) passes it on to its own children, once, before it fails
 * with the scheduler's text: every node ends naming the same cause. When
 * the abort names a lost node, the scheduler also sends it to that node
 * (if its connection is open: a frozen node finds it when it runs again)
 * and to the lost node's children, which it knows from the shape: the
 * news would never pass through a frozen parent. So the scheduler writes
 * at most k + 1 + 2k ABORTs. A node whose parent's connection closes
 * without an ABORT still ends after PS_HEARTBEAT_TIMEOUT (watch.c).
 *
 * The workers' end goes up. A worker that stops counts itself done in its
 * subtree and waits, in dt_node_stop, until every worker below it is
 * done too (each child's WORKER_DONE carries its subtree's count); then
 * one WORKER_DONE carrying the subtree's count goes to its parent, and
 * it leaves. A server counts its children's the same way (it has no
 * count of its own), and passes the subtree's on when it is whole, so
 * the scheduler gets one WORKER_DONE per child holding workers. A child's
 * leaving after its WORKER_DONE is no loss to its parent (it said BYE);
 * one that ends without it is reported up (TREE_LOST) as any lost child.
 * The scheduler does not judge the closed connection of a node that is
 * not its child: its parent does, and tells.
 *
 * TERMINATE goes down, once every worker is done: to the scheduler's
 * children whose subtree holds servers, and from each server to its own
 * such children, before it leaves. A server's parent is always a server
 * or the scheduler (a parent's id is lower than its child's, and the
 * servers have the lowest ids), so the servers' subtrees are never cut
 * by a worker that has left. Servers still end after every worker is
 * done, as with the star.
 *
 * Threads: the member's counts are guarded by node->mu; the I/O thread
 * counts the children's, the worker's stopping thread its own, and
 * whichever makes the subtree whole sends the count up. The scheduler's
 * side runs in its I/O thread, and its serving thread for TERMINATE.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/sched_impl.h"

/* ---- a member's side ---- */

/* Send h (and meta) to tree neighbour id over the connection it has:
 * never dial (the I/O thread must not), and a neighbour that has left is
 * skipped. */
static dt_err
to_neighbour(dt_node *n, int id, dt_msg_hdr *h, const void *meta, uint32_t len)
{
	if (id < 0 || id >= n->ntable ||
	    __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) == NULL)
		return DT_ECLOSED;
	return dt__node_send(n, id, h, meta, len, NULL, 0);
}

/* Whether c is the scheduler's or this node's tree parent's. */
static int
from_above(const dt_node *n, dt_conn *c)
{
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);
	int peer = dt__conn_peer(c);

	return peer == 0 || (p && peer > 0 && peer == p->parent);
}

int
dt__tree_on_abort(dt_node *n, dt_conn *c, const dt_msg *m)
{
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);
	const char *text = m->meta ? (const char *)m->meta : "?";
	int first;

	if (!from_above(n, c))
		return 0;
	pthread_mutex_lock(&n->mu);
	first = !n->tree_abort_fwd;
	n->tree_abort_fwd = 1;
	pthread_mutex_unlock(&n->mu);
	/* (to the children first: once failed, this node's caller may leave
	 * and close their connections) */
	for (int k = 0; first && p && k < p->nkids; k++) {
		dt_msg_hdr h = {.cmd = DT_CMD_ABORT};

		(void)to_neighbour(n, p->kid[k].id, &h, m->meta,
		                   m->hdr.meta_len);
	}
	dt__node_set_fatal(n, DT_EPEER, "job aborted by the scheduler: %s",
	                   text);
	return 1;
}

int
dt__tree_on_terminate(dt_node *n, dt_conn *c)
{
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);
	int first, sent = 0;

	if (!from_above(n, c))
		return 0;
	pthread_mutex_lock(&n->mu);
	first = !n->tree_term_fwd;
	n->tree_term_fwd = 1;
	pthread_mutex_unlock(&n->mu);
	for (int k = 0; first && p && k < p->nkids; k++) {
		dt_msg_hdr h = {.cmd = DT_CMD_TERMINATE};

		if (p->kid[k].servers == 0)
			continue;
		if (to_neighbour(n, p->kid[k].id, &h, NULL, 0) == DT_OK)
			sent++;
	}
	if (first && p)
		DT_LOG(1,
		       "the job ends: TERMINATE passed on to %d tree "
		       "children",
		       sent);
	return 1;
}

/* Count `count` done workers of this node's subtree (kid: the child that
 * brought them, -1 for this worker itself); once the subtree is whole,
 * its count goes to the parent (the caller's thread). */
static dt_err
done_count(dt_node *n, int kid, int count)
{
	const dt__tree_place *p = n->tree;
	int whole;

	pthread_mutex_lock(&n->mu);
	if (kid >= 0) {
		if (n->tree_done_kid[kid]) {
			pthread_mutex_unlock(&n->mu);
			return dt__fail(DT_EPROTO, "a second WORKER_DONE");
		}
		n->tree_done_kid[kid] = 1;
	}
	n->tree_done += count;
	whole = !n->tree_done_sent && n->tree_done >= p->workers;
	if (whole)
		n->tree_done_sent = 1;
	pthread_mutex_unlock(&n->mu);
	if (!whole)
		return DT_OK;
	/* A worker's merged counters ride just before its WORKER_DONE
	 * (tree_report.c); a server's go at its stop. */
	if (n->role == DT_ROLE_WORKER && dt__tree_report_send(n))
		dt__log(0, "the end-of-job report was not sent: %s",
		        dt_errmsg());
	dt_msg_hdr h = {.cmd = DT_CMD_WORKER_DONE,
	                .flags = DT_F_REQUEST,
	                .arg1 = (uint64_t)p->workers};
	dt_err err = dt__node_send(n, p->parent, &h, NULL, 0, NULL, 0);

	pthread_mutex_lock(&n->mu);
	n->tree_done_sent = err ? -1 : 2; /* (wakes the stopping worker) */
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	return err;
}

void
dt__tree_on_worker_done(dt_node *n, dt_conn *c, const dt_msg *m)
{
	const dt__tree_place *p = n->tree;
	int peer = dt__conn_peer(c), kid = -1;
	char name[64];
	dt_err e;

	if (p && peer > 0)
		kid = dt__tree_child(n, peer);
	if (kid < 0 || p->kid[kid].workers == 0 ||
	    m->hdr.arg1 != (uint64_t)p->kid[kid].workers) {
		dt__log(0,
		        "dropping %s: WORKER_DONE counting %llu from a node "
		        "that is not a child with that many workers",
		        dt__conn_addr(c), (unsigned long long)m->hdr.arg1);
		dt__van_close(n->van, c);
		return;
	}
	DT_LOG(1, "%s: the %d workers of its subtree are done",
	       dt__node_name(n, peer, name, sizeof(name)), p->kid[kid].workers);
	if ((e = done_count(n, kid, p->kid[kid].workers)) == DT_EPROTO) {
		dt__log(0, "dropping %s (%s): %s", dt__conn_addr(c), name,
		        dt_errmsg());
		dt__van_close(n->van, c);
	} else if (e) {
		dt__log(0,
		        "cannot tell the tree parent that its workers are "
		        "done: %s",
		        dt_errmsg());
	}
}

int
dt__tree_child_done(dt_node *n, int id)
{
	int kid = dt__tree_child(n, id), done;

	if (kid < 0)
		return 0;
	pthread_mutex_lock(&n->mu);
	done = n->tree_done_kid[kid];
	pthread_mutex_unlock(&n->mu);
	return done;
}

static int
subtree_told(dt_node *n, const void *arg)
{
	(void)arg;
	return n->tree_done_sent == 2 || n->tree_done_sent == -1;
}

dt_err
dt__tree_leave(dt_node *n)
{
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);
	dt_err err;

	if (p == NULL)
		return DT_OK;
	if (p->workers > 1)
		DT_LOG(1,
		       "%s is done; waiting for the other %d workers of its "
		       "tree subtree",
		       dt__log_name(), p->workers - 1);
	if ((err = done_count(n, -1, 1)))
		return err;
	err = dt__node_wait(n, subtree_told, NULL, dt__now_ns() + n->wait_ns,
	                    "the workers of its tree subtree to be done");
	if (err == DT_OK && n->tree_done_sent < 0)
		err = dt__fail(DT_ECLOSED,
		               "cannot tell the tree parent that the workers "
		               "of its subtree are done");
	return err;
}

/* ---- the scheduler's side ---- */

int
dt__sched_tree_quiet(dt_node *n, int peer)
{
	dt_sched *s = n->sched;
	int quiet;

	pthread_mutex_lock(&n->mu);
	quiet = s->tree.count > 0 && s->passed[DT_GROUP_ALL] >= 1 && peer > 0 &&
	        peer < s->tree.count && s->tree.parent[peer] != 0;
	pthread_mutex_unlock(&n->mu);
	return quiet;
}

/* The ABORT to node id, if its connection is open; 1 if sent. */
static int
abort_to(dt_node *n, int id, const char *reason)
{
	dt_conn *c = __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE);

	if (c == NULL || !dt__conn_is_open(c))
		return 0;
	dt__sched_send_abort(n, c, reason);
	return 1;
}

int
dt__sched_tree_abort(dt_node *n, const char *reason, int lost)
{
	dt_sched *s = n->sched;
	const dt__tree *t = &s->tree;
	int on, kids = 0, below = 0, self = 0, known;
	char name[64];

	pthread_mutex_lock(&n->mu);
	on = t->count > 0 && s->passed[DT_GROUP_ALL] >= 1;
	pthread_mutex_unlock(&n->mu);
	if (!on)
		return 0;
	for (int i = 0; i < t->nkids[0]; i++)
		kids += abort_to(n, t->kids[t->first[0] + i], reason);
	/* The lost node's subtree would hear it only through that node,
	 * which may be frozen: its children get it here, and pass it on
	 * (and the node itself, unless it is a child of the root). */
	known = lost > 0 && lost < t->count;
	if (known && t->parent[lost] != 0)
		self = abort_to(n, lost, reason);
	for (int i = 0; known && i < t->nkids[lost]; i++)
		below += abort_to(n, t->kids[t->first[lost] + i], reason);
	pthread_mutex_lock(&n->mu);
	s->tree_aborted = 1;
	s->abort_lost = lost;
	pthread_mutex_unlock(&n->mu);
	if (known)
		DT_LOG(1,
		       "ABORT sent over the control tree to %d nodes: %d of "
		       "its %d children, and %d of the lost %s and its %d "
		       "children",
		       kids + self + below, kids, t->nkids[0], self + below,
		       dt__node_name(n, lost, name, sizeof(name)),
		       t->nkids[lost]);
	else
		DT_LOG(1,
		       "ABORT sent over the control tree to %d nodes: %d of "
		       "its %d children",
		       kids, kids, t->nkids[0]);
	return 1;
}

/* The connections still open to nodes other than the lost one. */
static int
still_open(dt_node *n, dt_conn **cs, int cap, int lost)
{
	int k = dt__van_open_conns(n->van, cs, cap), open = 0;

	for (int i = 0; i < k && i < cap; i++)
		open += lost <= 0 || dt__conn_peer(cs[i]) != lost;
	return open + (k > cap ? k - cap : 0);
}

void
dt__sched_tree_linger(dt_node *n)
{
	dt_sched *s = n->sched;
	uint64_t t0 = dt__now_ns(), until;
	int cap, open, lost;
	dt_conn **cs;

	if (s == NULL || n->van == NULL)
		return;
	pthread_mutex_lock(&n->mu);
	lost = s->tree_aborted ? s->abort_lost : -2;
	pthread_mutex_unlock(&n->mu);
	if (lost == -2)
		return;
	until = t0 + (n->hb_timeout_ns ? n->hb_timeout_ns : 10000000000ull);
	cap = n->ntable + 16;
	if ((cs = malloc(sizeof(*cs) * (size_t)cap)) == NULL)
		return;
	while ((open = still_open(n, cs, cap, lost)) > 0 &&
	       dt__now_ns() < until) {
		struct timespec ts = {0, 10000000L};

		nanosleep(&ts, NULL);
	}
	free(cs);
	DT_LOG(1,
	       "%d nodes' connections still open %.2f s after the abort "
	       "(the scheduler stays while its ABORT goes down the tree)",
	       open, (double)(dt__now_ns() - t0) * 1e-9);
}

/* Every worker in the subtree of id is done (n->mu held): its end is no
 * loss. An explicit stack: a subtree may be as deep as the tree. */
static void
mark_left(dt_node *n, int id)
{
	dt_sched *s = n->sched;
	const dt__tree *t = &s->tree;
	int *stack = malloc(sizeof(int) * (size_t)t->count), top = 0;

	if (stack == NULL) { /* (only its own close is then expected) */
		s->left[id] = 1;
		return;
	}
	stack[top++] = id;
	while (top > 0) {
		int x = stack[--top];

		if (dt__id_role(n, x) == DT_ROLE_WORKER)
			s->left[x] = 1;
		for (int i = 0; i < t->nkids[x] && top < t->count; i++)
			stack[top++] = t->kids[t->first[x] + i];
	}
	free(stack);
}

int
dt__sched_tree_done(dt_node *n, dt_conn *c, const dt_msg *m)
{
	dt_sched *s = n->sched;
	const dt__tree *t = &s->tree;
	int peer = dt__conn_peer(c), again;
	char name[64];

	if (t->count == 0)
		return 0;
	if (peer <= 0 || peer >= t->count || t->parent[peer] != 0 ||
	    t->workers[peer] == 0 ||
	    m->hdr.arg1 != (uint64_t)t->workers[peer]) {
		dt__log(0,
		        "dropping %s: WORKER_DONE counting %llu from a node "
		        "that is not a tree child with that many workers",
		        dt__conn_addr(c), (unsigned long long)m->hdr.arg1);
		dt__van_close(n->van, c);
		return 1;
	}
	pthread_mutex_lock(&n->mu);
	again = s->tree_done == NULL || s->tree_done[peer];
	if (!again) {
		s->tree_done[peer] = 1;
		mark_left(n, peer);
		s->workers_done += t->workers[peer];
	}
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	if (again) {
		dt__log(0, "dropping %s: a second WORKER_DONE",
		        dt__conn_addr(c));
		dt__van_close(n->van, c);
		return 1;
	}
	DT_LOG(1, "the %d workers under %s are done (%d of %d workers)",
	       t->workers[peer], dt__node_name(n, peer, name, sizeof(name)),
	       s->workers_done, s->workers_total);
	return 1;
}

int
dt__sched_tree_terminate(dt_node *n)
{
	const dt__tree *t = &n->sched->tree;
	int sent = 0;

	if (t->count == 0)
		return 0;
	for (int i = 0; i < t->nkids[0]; i++) {
		int id = t->kids[t->first[0] + i];
		dt_msg_hdr h = {.cmd = DT_CMD_TERMINATE};

		if (t->servers[id] > 0 &&
		    dt__node_send(n, id, &h, NULL, 0, NULL, 0) == DT_OK)
			sent++;
	}
	n->sched->end_term = (uint64_t)sent;
	DT_LOG(1,
	       "TERMINATE sent over the control tree to %d nodes: its "
	       "children whose subtree holds servers (of its %d)",
	       sent, t->nkids[0]);
	return 1;
}
