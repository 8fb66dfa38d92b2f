/*
 * sched_watch.c - the scheduler's side of heartbeats (watch.c runs them):
 * whom it beats and judges, the heartbeats it received, and the loss of a
 * node reported up the control tree.
 *
 * With the star, the scheduler beats and judges every node of the job.
 * Over the control tree (docs/scale.md) it beats and judges only its own
 * children, the host leaders: every other node is beaten and judged by
 * its parent, and a parent that finds a child silent for
 * PS_HEARTBEAT_TIMEOUT (or its link to the child closed while the job
 * runs) sends TREE_LOST up the tree (tree_barrier.c passes it on). Here it
 * ends the job as the scheduler's own judgement would, naming the lost
 * node, its pid and host. A node that dies is still seen at once through
 * the close of its connection to the scheduler (scheduler.c), which stays
 * open in a tree job: it carries ASSIGN, LOOKUP's answers and ABORT.
 *
 * The heartbeats received since the start-up barrier are counted by
 * sender, and logged in one line at the end (PS_VERBOSE=1): how many a
 * second, from how many nodes, how many of those the scheduler's tree
 * children.
 *
 * Threads: dt__sched_watch_list runs on the heartbeat thread, the rest on
 * the I/O thread, but dt__sched_hb_start (the start's caller) and
 * dt__sched_hb_log (the end); the fields they share are guarded by
 * node->mu.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sched_impl.h"

int
dt__sched_watch_list(dt_node *n, dt_conn **out, int *ids, int cap, int *judge)
{
	dt_sched *s = n->sched;
	const dt__tree *t;
	int k = 0;

	if (s == NULL)
		return 0;
	t = &s->tree;
	if (!s->assigned) {
		*judge = 0;
		for (int i = 0; i < s->nj && k < cap; i++) {
			ids[k] = 0;
			out[k++] = s->j[i].conn;
		}
		return k;
	}
	*judge = 1;
	/* Over the tree: its children only (each list ascends). */
	int tree = t->count > 0, end = tree ? t->nkids[0] : n->ntable - 1;

	for (int i = 0; i < end && k < cap; i++) {
		int id = tree ? t->kids[t->first[0] + i] : i + 1;
		int gone = s->left[id] ||
		           (s->ending && dt__id_role(n, id) == DT_ROLE_SERVER);

		ids[k] = id;
		out[k++] =
		    gone ? NULL
		         : __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE);
	}
	return k;
}

void
dt__sched_hb_start(dt_node *n)
{
	dt_sched *s = n->sched;
	uint32_t *from = dt__calloc((size_t)n->ntable, sizeof(*from));

	pthread_mutex_lock(&n->mu);
	if (from && s->hb_from == NULL) {
		s->hb_from = from;
		s->hb_n = n->ntable;
		s->hb_since = dt__now_ns();
		from = NULL;
	}
	pthread_mutex_unlock(&n->mu);
	free(from); /* (none: no count, and the end says nothing) */
}

void
dt__sched_hb_note(dt_node *n, int peer)
{
	dt_sched *s = n->sched;

	pthread_mutex_lock(&n->mu);
	if (s->hb_from && peer > 0 && peer < s->hb_n) {
		s->hb_from[peer]++;
		s->hb_total++;
	}
	pthread_mutex_unlock(&n->mu);
}

void
dt__sched_hb_log(dt_node *n)
{
	dt_sched *s = n->sched;
	const dt__tree *t = &s->tree;
	int nodes = 0, kids = 0;
	char shape[96];

	if (s->hb_from == NULL)
		return;
	for (int id = 1; id < s->hb_n; id++) {
		if (s->hb_from[id] == 0)
			continue;
		nodes++;
		kids += t->count == 0 || (id < t->count && t->parent[id] == 0);
	}
	/* (to now, the end: a second's heartbeats come over a second) */
	double span = (double)(dt__now_ns() - s->hb_since) * 1e-9;

	if (t->count > 0)
		snprintf(shape, sizeof(shape), "%d of its %d tree children",
		         kids, t->nkids[0]);
	else
		snprintf(shape, sizeof(shape), "the star: every node");
	DT_LOG(1,
	       "heartbeats received since the start: %llu from %d nodes "
	       "(%s) in %.1f s, %.1f a second",
	       (unsigned long long)s->hb_total, nodes, shape, span,
	       span > 0 ? (double)s->hb_total / span : 0.0);
}

/* Whether node lost hangs under the root's child kid. */
static int
in_subtree(const dt__tree *t, int kid, int lost)
{
	int x = lost;

	for (int hops = 0; x > 0 && hops < t->count; hops++) {
		if (x == kid)
			return 1;
		x = t->parent[x];
	}
	return 0;
}

void
dt__sched_on_tree_lost(dt_node *n, dt_conn *c, const dt_msg *m)
{
	dt_sched *s = n->sched;
	const dt__tree *t = &s->tree;
	int peer = dt__conn_peer(c), skip;
	dt__msg_tree_lost l;
	char who[DT_HOST_MAX + 96], parent[64], reason[DT_HOST_MAX + 256];

	if (t->count == 0 || peer <= 0 || peer >= t->count ||
	    t->parent[peer] != 0) {
		dt__log(0, "dropping %s: TREE_LOST not from a tree child",
		        dt__conn_addr(c));
		dt__van_close(n->van, c);
		return;
	}
	if (dt__msg_tree_lost_decode(m->meta, m->hdr.meta_len, t->count, &l) ||
	    (!in_subtree(t, peer, l.lost) &&
	     dt__fail(DT_EPROTO, "TREE_LOST: node %d is not under node %d",
	              l.lost, peer))) {
		dt__log(0, "dropping %s: %s", dt__conn_addr(c), dt_errmsg());
		dt__van_close(n->van, c);
		return;
	}
	pthread_mutex_lock(&n->mu);
	skip = n->fatal != DT_OK || s->left[l.lost] ||
	       (s->ending && dt__id_role(n, l.lost) == DT_ROLE_SERVER);
	pthread_mutex_unlock(&n->mu);
	if (skip)
		return;
	dt__watch_describe(n, l.lost, NULL, who, sizeof(who));
	dt__node_name(n, t->parent[l.lost], parent, sizeof(parent));
	if (l.reason == DT_TREE_LOST_SILENT)
		snprintf(
		    reason, sizeof(reason),
		    "%s sent nothing for %.1f s (PS_HEARTBEAT_TIMEOUT=%.3g "
		    "s; seen by its tree parent, %s)",
		    who, (double)l.silent_ns * 1e-9,
		    (double)n->hb_timeout_ns * 1e-9, parent);
	else
		snprintf(reason, sizeof(reason),
		         "%s was lost before the job ended (its connection to "
		         "its tree parent, %s, closed)",
		         who, parent);
	dt__log(0, "%s", reason);
	dt__sched_abort_lost(n, reason, l.lost);
}
