/*
 * sched_barrier.c - barriers at the scheduler: each node's BARRIER (or,
 * over the control tree, each child's count of its subtree: tree.h)
 * counted per group mask against the group's size, and at the last one
 * BARRIER_DONE to every node of the group (over the tree, to the
 * scheduler's children, which pass it down), with the first error a node
 * brought to the round. An elastic job's barriers count its live workers,
 * and a worker that leaves its membership takes its arrival back
 * (elastic.c calls dt__sched_barrier_recheck).
 *
 * Threads: the I/O thread; every field it touches is dt_sched's, guarded
 * by node->mu.
 */
#include <stdio.h>
#include <string.h>

#include "core/sched_impl.h"

static int
group_size(dt_node *n, int mask)
{
	/* (an elastic job's barriers count its live workers) */
	return ((mask & DT_GROUP_SERVERS) ? n->num_servers : 0) +
	       ((mask & DT_GROUP_WORKERS) ? dt__elastic_live(n) : 0);
}

static int
in_group(const dt_node_entry *e, int mask)
{
	return (e->role == DT_ROLE_SERVER && (mask & DT_GROUP_SERVERS)) ||
	       (e->role == DT_ROLE_WORKER && (mask & DT_GROUP_WORKERS));
}

/* The arrivals one BARRIER brings (0: it may not come from peer): one,
 * from a node of the group; over the control tree, the whole subtree of
 * one of the root's children, which *kid names. */
static int
barrier_count(dt_node *n, int peer, int mask, const dt_msg *m, int *kid)
{
	const dt__tree *t = &n->sched->tree;

	*kid = -1;
	if (peer <= 0 || mask < 1 || mask > DT_GROUP_ALL)
		return 0;
	if (t->count == 0)
		return in_group(&n->table[peer], mask);
	for (int k = 0; k < t->nkids[0]; k++) {
		int id = t->kids[t->first[0] + k];
		int want =
		    dt__tree_in_mask(t->servers[id], t->workers[id], mask);

		if (id == peer) {
			*kid = k;
			return m->hdr.arg1 == (uint64_t)want ? want : 0;
		}
	}
	return 0;
}

void
dt__sched_on_barrier(dt_node *n, dt_conn *c, dt_msg *m)
{
	dt_sched *s = n->sched;
	int mask = (int)m->hdr.arg0;
	int peer = dt__conn_peer(c);
	int kid, count = barrier_count(n, peer, mask, m, &kid);

	if (count == 0) {
		dt__log(0,
		        "dropping %s: bad BARRIER (group mask %d, count "
		        "%llu)",
		        dt__conn_addr(c), mask,
		        (unsigned long long)m->hdr.arg1);
		dt__van_close(n->van, c);
		return;
	}
	/* A worker joining the running elastic job is in no round: its
	 * barrier says it is ready to be taken in. */
	if (n->elastic && dt__elastic_sched_joining(n, peer)) {
		if (mask == DT_GROUP_WORKERS)
			dt__elastic_sched_ready(n, peer);
		return;
	}
	pthread_mutex_lock(&n->mu);
	if (kid >= 0 && s->tree_in[mask][kid]) {
		pthread_mutex_unlock(&n->mu);
		dt__log(0,
		        "dropping %s: a second BARRIER over group mask %d "
		        "in one round",
		        dt__conn_addr(c), mask);
		dt__van_close(n->van, c);
		return;
	}
	if (kid >= 0)
		s->tree_in[mask][kid] = 1;
	if (m->hdr.key != 0 && s->round_err[mask] == 0) {
		char text[256], name[64];
		const char *shown = dt__printable(
		    m->meta ? (const char *)m->meta : "", text, sizeof(text));

		s->round_err[mask] =
		    (int)dt__err_from_wire(m->hdr.key, DT_EPEER);
		/* (over the tree, the text names its node already) */
		if (kid >= 0)
			snprintf(s->round_msg[mask], sizeof(s->round_msg[mask]),
			         "%s", shown);
		else
			snprintf(s->round_msg[mask], sizeof(s->round_msg[mask]),
			         "%s: %s",
			         dt__node_name(n, peer, name, sizeof(name)),
			         shown);
	}
	if (s->arrived[mask] == 0)
		s->first_ns[mask] = dt__now_ns();
	s->arrived[mask] += (uint64_t)count;
	s->msgs[mask]++;
	if (s->in_round)
		s->in_round[mask * n->ntable + peer] = 1;
	pthread_mutex_unlock(&n->mu);
	dt__sched_barrier_recheck(n, mask);
}

/* Whether worker id is outside an elastic job's membership: taken out,
 * not taken in yet, or a row no worker has had. */
static int
left_elastic(dt_node *n, int id)
{
	return dt__id_role(n, id) == DT_ROLE_WORKER &&
	       !dt__elastic_member(n, id);
}

void
dt__sched_barrier_recheck(dt_node *n, int mask)
{
	dt_sched *s = n->sched;
	int err = 0, size;
	char msg[256] = "";
	uint64_t first, msgs;

	pthread_mutex_lock(&n->mu);
	size = group_size(n, mask);
	first = s->first_ns[mask];
	if (s->arrived[mask] == 0 || (int)s->arrived[mask] != size) {
		pthread_mutex_unlock(&n->mu);
		return;
	}
	s->arrived[mask] = 0;
	msgs = s->msgs[mask];
	s->msgs[mask] = 0;
	memset(s->tree_in[mask], 0, sizeof(s->tree_in[mask]));
	s->passed[mask]++;
	err = s->round_err[mask];
	memcpy(msg, s->round_msg[mask], sizeof(msg));
	s->round_err[mask] = 0;
	s->round_msg[mask][0] = '\0';
	if (s->in_round)
		memset(s->in_round + mask * n->ntable, 0, (size_t)n->ntable);
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	dt__report_sched_event(n, DT_EV_BARRIER, DT_TID_IO, first,
	                       (uint64_t)mask);
	DT_LOG(1,
	       "barrier #%llu over group mask %d: all %d nodes arrived in "
	       "%llu messages",
	       (unsigned long long)s->passed[mask], mask, size,
	       (unsigned long long)msgs);
	/* (over the tree, to the root's children whose subtree is in the
	 * group, which pass it on: k of them, not N) */
	int tree = s->tree.count > 0;
	int end = tree ? s->tree.nkids[0] : n->ntable;

	for (int i = tree ? 0 : 1; i < end; i++) {
		int id = tree ? s->tree.kids[s->tree.first[0] + i] : i;

		/* (not to a worker an elastic job went on without) */
		if (tree ? !dt__tree_in_mask(s->tree.servers[id],
		                             s->tree.workers[id], mask)
		         : !in_group(&n->table[id], mask) ||
		               (n->elastic && left_elastic(n, id)))
			continue;
		dt_msg_hdr h = {.cmd = DT_CMD_BARRIER_DONE,
		                .flags = DT_F_RESPONSE,
		                .arg0 = (uint64_t)mask,
		                .key = (uint64_t)err};
		dt__node_send(n, id, &h, err ? msg : NULL,
		              err ? (uint32_t)strlen(msg) : 0, NULL, 0);
	}
}
