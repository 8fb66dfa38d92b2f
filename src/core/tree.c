/*
 * tree.c - the shape of a job's control tree (tree.h has the rule). The
 * scheduler builds it once every node has joined (scheduler.c) and sends
 * each node its place (TREE, msg.c); the barriers travel on it
 * (member.c: up to the parent, aggregated; down to the children).
 *
 * The build sorts the nodes by (host, id) once, so the nodes of a host
 * are a run whose first is the host's leader; within a run node i hangs
 * under node (i - 1) / k, and the leaders, in the order of their ids,
 * fill a k-ary heap under the root. The children lists are made in one
 * pass over the ids (so each list ascends), and the subtrees' counts in
 * one pass up a breadth-first order, which also proves every node is
 * reached from the root.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "core/tree.h"

int
dt__host_key_cmp(const void *a, const void *b)
{
	const dt__host_key *x = a, *y = b;
	int c = strcmp(x->host, y->host);

	return c ? c : (x->id > y->id) - (x->id < y->id);
}

static int
cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

void
dt__tree_free(dt__tree *t)
{
	free(t->parent);
	free(t->first);
	free(t->nkids);
	free(t->kids);
	free(t->servers);
	free(t->workers);
	memset(t, 0, sizeof(*t));
}

/* Each node's parent: inside its host, then the leaders under the root. */
static dt_err
set_parents(const dt_node_entry *table, int count, int k, int *parent)
{
	dt__host_key *v = malloc(sizeof(*v) * (size_t)count);
	int *leader = malloc(sizeof(int) * (size_t)count);
	int nv = 0, nl = 0;

	if (v == NULL || leader == NULL) {
		free(v);
		free(leader);
		return DT_ENOMEM;
	}
	for (int id = 1; id < count; id++)
		v[nv++] = (dt__host_key){table[id].host, id};
	qsort(v, (size_t)nv, sizeof(*v), dt__host_key_cmp);
	parent[0] = -1;
	for (int a = 0, b; a < nv; a = b) {
		for (b = a + 1; b < nv && strcmp(v[a].host, v[b].host) == 0;
		     b++)
			;
		leader[nl++] = v[a].id;
		for (int i = 1; i < b - a; i++)
			parent[v[a + i].id] = v[a + (i - 1) / k].id;
	}
	qsort(leader, (size_t)nl, sizeof(int), cmp_int);
	/* (position p's children are (p + 1) k .. (p + 2) k - 1, the root's
	 * 0 .. k - 1) */
	for (int p = 0; p < nl; p++)
		parent[leader[p]] = p < k ? 0 : leader[p / k - 1];
	free(v);
	free(leader);
	return DT_OK;
}

/* The children lists, by one pass over the ids (each list ascends). */
static void
set_kids(dt__tree *t)
{
	int count = t->count, at = 0;

	for (int id = 1; id < count; id++)
		t->nkids[t->parent[id]]++;
	for (int id = 0; id < count; id++) {
		t->first[id] = at;
		at += t->nkids[id];
		t->nkids[id] = 0;
	}
	for (int id = 1; id < count; id++) {
		int p = t->parent[id];

		t->kids[t->first[p] + t->nkids[p]++] = id;
	}
}

/* The subtrees' counts, up a breadth-first order from the root: DT_EINVAL
 * if a node is not reached (a cycle; the rule above makes none). */
static dt_err
set_counts(const dt_node_entry *table, dt__tree *t)
{
	int *order = malloc(sizeof(int) * (size_t)t->count), n = 1;

	if (order == NULL)
		return DT_ENOMEM;
	order[0] = 0;
	for (int i = 0; i < n; i++)
		for (int c = 0; c < t->nkids[order[i]]; c++)
			order[n++] = t->kids[t->first[order[i]] + c];
	if (n != t->count) {
		free(order);
		return dt__fail(DT_EINVAL,
		                "control tree: %d of %d nodes reached from the "
		                "root",
		                n, t->count);
	}
	for (int i = n - 1; i >= 0; i--) {
		int id = order[i];

		if (id > 0) {
			t->servers[id] += table[id].role == DT_ROLE_SERVER;
			t->workers[id] += table[id].role == DT_ROLE_WORKER;
			t->servers[t->parent[id]] += t->servers[id];
			t->workers[t->parent[id]] += t->workers[id];
		}
	}
	free(order);
	return DT_OK;
}

dt_err
dt__tree_build(const dt_node_entry *table, int count, int arity, dt__tree *t)
{
	dt_err err;

	memset(t, 0, sizeof(*t));
	if (count < 1 || arity < DT_TREE_ARITY_MIN || arity > DT_TREE_ARITY_MAX)
		return dt__fail(DT_EINVAL,
		                "control tree of %d nodes with arity %d (%d to "
		                "%d)",
		                count, arity, DT_TREE_ARITY_MIN,
		                DT_TREE_ARITY_MAX);
	t->count = count;
	t->parent = dt__calloc((size_t)count, sizeof(int));
	t->first = dt__calloc((size_t)count, sizeof(int));
	t->nkids = dt__calloc((size_t)count, sizeof(int));
	t->kids = dt__calloc((size_t)count, sizeof(int));
	t->servers = dt__calloc((size_t)count, sizeof(int));
	t->workers = dt__calloc((size_t)count, sizeof(int));
	if (!t->parent || !t->first || !t->nkids || !t->kids || !t->servers ||
	    !t->workers) {
		err = DT_ENOMEM;
		goto fail;
	}
	if ((err = set_parents(table, count, arity, t->parent)))
		goto fail;
	set_kids(t);
	if ((err = set_counts(table, t)))
		goto fail;
	return DT_OK;
fail:
	dt__tree_free(t);
	return err;
}

void
dt__tree_place_of(const dt__tree *t, int id, dt__tree_place *p)
{
	memset(p, 0, sizeof(*p));
	p->parent = t->parent[id];
	p->servers = t->servers[id];
	p->workers = t->workers[id];
	p->nkids = t->nkids[id];
	for (int c = 0; c < p->nkids && c < DT_TREE_KIDS_MAX; c++) {
		int kid = t->kids[t->first[id] + c];

		p->kid[c] =
		    (dt__tree_kid){kid, t->servers[kid], t->workers[kid]};
	}
}
