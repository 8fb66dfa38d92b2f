/*
 * tree_report.c - the end-of-job counters of a job with a control tree
 * (DTRAIN_STATS, DTRAIN_STATS_JSON), merged up the tree: each node sends
 * its parent ONE merged report (REPORT kind 4, obs/merge.h) holding its
 * own counters and its children's merged reports, of a size bounded
 * whatever its subtree's, so the scheduler reads one per child of its
 * own instead of one per node with a row per node in each
 * (docs/scale.md, "The end-of-job statistics over the tree").
 *
 * When: a report rides just before the message that ends the node's part
 * of the end (tree_end.c), on the same connection, so nothing new waits.
 * A worker's subtree holds only workers, each of which sends its report
 * before its WORKER_DONE: when the subtree is whole (done_count), every
 * child's report is in, and the worker sends its own, then WORKER_DONE. A
 * child whose WORKER_DONE came without a report is named missing. A
 * server's report goes at its stop, once TERMINATE came: its workers'
 * children have reported (before their WORKER_DONE), its server children
 * report after the TERMINATE it passed on; it waits for those up to 5 s
 * per server of its subtree (25 s at most, within the scheduler's
 * DT_END_TIMEOUT), and names missing the children whose report did not
 * come. The timeline's events still go to the scheduler directly
 * (report.c): they cannot be merged.
 *
 * Threads: the children's reports are merged on the I/O thread under the
 * trep's lock; the count of those in is under node->mu (the server's
 * wait).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/sched_impl.h"
#include "obs/merge.h"

_Static_assert(DT_STATS_MAX_KEYS * 40 + 32768 <= DT_MAX_META,
               "a merged report fits in a frame's metadata");

struct dt__trep {
	pthread_mutex_t mu;
	dt__merged *m; /* the children's, merged (NULL until one came) */
	uint8_t got[DT_TREE_KIDS_MAX];
	int sent; /* this node's went to its parent */
};

int
dt__report_stats_on(void)
{
	long on;

	if (dt__env_long("DTRAIN_STATS", 0, 0, 1, &on))
		on = 0;
	return on || dt__env_str("DTRAIN_STATS_JSON") != NULL;
}

/* The node's trep, made at first use (n->mu). */
static struct dt__trep *
trep_of(dt_node *n)
{
	struct dt__trep *t;

	pthread_mutex_lock(&n->mu);
	if ((t = n->trep) == NULL && (t = calloc(1, sizeof(*t))) != NULL) {
		pthread_mutex_init(&t->mu, NULL);
		n->trep = t;
	}
	pthread_mutex_unlock(&n->mu);
	return t;
}

static void
drop(dt_node *n, dt_conn *c, const char *why)
{
	dt__log(0, "dropping %s: REPORT: %s", dt__conn_addr(c), why);
	dt__van_close(n->van, c);
}

void
dt__tree_on_report(dt_node *n, dt_conn *c, const dt_msg *m)
{
	int peer = dt__conn_peer(c),
	    kid = peer > 0 ? dt__tree_child(n, peer) : -1;
	struct dt__trep *t;
	dt__merged *in;
	int again;

	if (m->hdr.arg0 != DT_REPORT_MERGED || kid < 0) {
		drop(n, c, "not a merged report from a tree child");
		return;
	}
	if ((t = trep_of(n)) == NULL || (in = malloc(sizeof(*in))) == NULL) {
		dt__log(0, "out of memory for a child's merged report");
		return;
	}
	if (dt__merged_decode(m->meta, m->hdr.meta_len, in)) {
		dt__err_kept why;

		dt__err_keep(&why, DT_EPROTO);
		free(in);
		drop(n, c, why.msg);
		return;
	}
	pthread_mutex_lock(&t->mu);
	again = t->got[kid];
	if (!again && t->m == NULL) {
		t->m = in;
		in = NULL;
	} else if (!again) {
		dt__merged_merge(t->m, in);
	}
	t->got[kid] = 1;
	pthread_mutex_unlock(&t->mu);
	free(in);
	if (again) {
		drop(n, c, "a second merged report");
		return;
	}
	pthread_mutex_lock(&n->mu);
	n->tree_reports++;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
}

static int
role_of(void *arg, int id)
{
	return (int)dt__id_role(arg, id);
}

static int
kids_reported(dt_node *n, const void *arg)
{
	return n->tree_reports >= *(const int *)arg;
}

/* A server: its server children report after the TERMINATE it passed
 * on; wait for every child's, a bounded time (a deeper server waits
 * less, so a missing report far below is named by the node above it, not
 * by every ancestor at once). */
static void
wait_for_kids(dt_node *n, const dt__tree_place *p)
{
	uint64_t ns =
	    5000000000ull * (uint64_t)(p->servers > 0 ? p->servers : 1);
	int want = p->nkids;

	if (ns > 25000000000ull)
		ns = 25000000000ull;
	if (dt__node_wait(n, kids_reported, &want, dt__now_ns() + ns,
	                  "the tree children's end-of-job reports"))
		DT_LOG(1, "%s", dt_errmsg());
}

/* This node's counters, its children's merged, and the missing named. */
static dt_err
build(dt_node *n, const dt__tree_place *p, struct dt__trep *t, dt__merged *out)
{
	dt__hist lat[DT_LAT_COUNT], step;
	dt_stats s;
	dt_err err;

	dt__merged_init(out);
	if ((err = dt_node_stats(n, &s)))
		return err;
	dt__obs_hists(lat, &step);
	dt__merged_add_node(out, &s, lat, &step, role_of, n);
	dt_stats_fini(&s);
	pthread_mutex_lock(&t->mu);
	if (t->m)
		dt__merged_merge(out, t->m);
	for (int k = 0; k < p->nkids; k++)
		if (!t->got[k])
			dt__merged_missing(out, p->kid[k].id,
			                   p->kid[k].servers +
			                       p->kid[k].workers);
	t->sent = 1;
	pthread_mutex_unlock(&t->mu);
	return DT_OK;
}

dt_err
dt__tree_report_send(dt_node *n)
{
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);
	struct dt__trep *t;
	dt__merged *m;
	uint8_t *buf;
	size_t len;
	dt_err err;

	if (p == NULL || !dt__report_stats_on())
		return DT_OK;
	/* Fault injection for tests: a report that never comes. */
	long skip;

	if ((err = dt__env_long("DT_REPORT_SKIP", 0, 0, 1, &skip)))
		return err;
	if (skip) {
		DT_LOG(1, "DT_REPORT_SKIP=1: no end-of-job report to the "
		          "tree parent");
		return DT_OK;
	}
	if (n->role == DT_ROLE_SERVER)
		wait_for_kids(n, p);
	if ((t = trep_of(n)) == NULL || (m = malloc(sizeof(*m))) == NULL)
		return dt__fail(DT_ENOMEM, "the merged end-of-job report");
	if ((err = build(n, p, t, m)) == DT_OK)
		err = dt__merged_encode(m, &buf, &len);
	if (err == DT_OK) {
		dt_msg_hdr h = {.cmd = DT_CMD_REPORT,
		                .flags = DT_F_REQUEST,
		                .arg0 = DT_REPORT_MERGED};

		err = dt__node_send(n, p->parent, &h, buf, (uint32_t)len, NULL,
		                    0);
		free(buf);
		if (err == DT_OK)
			DT_LOG(1,
			       "end-of-job report of %u nodes (%u missing) "
			       "sent to the tree parent: %zu bytes",
			       m->nodes[1] + m->nodes[2], m->missing_nodes,
			       len);
	}
	free(m);
	return err;
}

void
dt__tree_report_free(dt_node *n)
{
	struct dt__trep *t = n->trep;

	if (t == NULL)
		return;
	n->trep = NULL;
	free(t->m);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

/* ---- the scheduler's side (report.c keeps the merged block) ---- */

int
dt__sched_tree_job(dt_node *n)
{
	return n->sched && n->sched->tree.count > 0;
}

int
dt__sched_tree_root_child(dt_node *n, int peer)
{
	const dt__tree *t = n->sched ? &n->sched->tree : NULL;

	return t && t->count > 0 && peer > 0 && peer < t->count &&
	       t->parent[peer] == 0;
}

void
dt__sched_tree_missing(dt_node *n, dt__merged *m, const uint8_t *from,
                       int count)
{
	const dt__tree *t = &n->sched->tree;

	for (int i = 0; i < t->nkids[0]; i++) {
		int id = t->kids[t->first[0] + i];

		if (id < count && !from[id])
			dt__merged_missing(m, id,
			                   t->servers[id] + t->workers[id]);
	}
}
