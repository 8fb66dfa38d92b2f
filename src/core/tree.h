/*
 * tree.h - the control tree of a job (tree.c): the shape the scheduler
 * computes once every node has joined, and the place of one node in it,
 * which the scheduler sends that node alone (TREE, msg.c).
 *
 * The tree is host-aware: the nodes of one host form a subtree under
 * their host leader (the lowest node id of the host), k-ary inside the
 * host; the host leaders form a k-ary tree under the scheduler (node 0),
 * which is the root. A host leader thus has up to 2k children (k of its
 * host, k leaders), any other node up to k, the scheduler up to k.
 */
#ifndef DT_CORE_TREE_H
#define DT_CORE_TREE_H

#include "core/core.h"

/* The bounds on the arity (DTRAIN_CTRL_ARITY) and the most children one
 * node can have in a tree of the largest arity. */
#define DT_TREE_ARITY_MIN 2
#define DT_TREE_ARITY_MAX 64
#define DT_TREE_KIDS_MAX  (2 * DT_TREE_ARITY_MAX)

/* One child of a node: its id and the servers and workers of its
 * subtree, itself included. */
typedef struct dt__tree_kid {
	int id;
	int servers, workers;
} dt__tree_kid;

/* One node's place: its parent (0: the scheduler), the servers and
 * workers of its subtree (itself included) and its children. */
typedef struct dt__tree_place {
	int parent;
	int servers, workers;
	int nkids;
	dt__tree_kid kid[DT_TREE_KIDS_MAX];
} dt__tree_place;

/* The whole tree, on the scheduler: by node id 0..count-1 (0 the root),
 * its parent (-1 for the root), its children kids[first[id] ..
 * first[id] + nkids[id]), ascending, and its subtree's servers and
 * workers. */
typedef struct dt__tree {
	int count;
	int *parent;
	int *first;
	int *nkids;
	int *kids;
	int *servers, *workers;
} dt__tree;

/*
 * Build the tree of the nodes table[1..count-1] (table[0] is the
 * scheduler), grouped by their host (the entries' host names), with the
 * given arity (DT_TREE_ARITY_MIN..DT_TREE_ARITY_MAX). O(N log N) in all.
 * On DT_OK the caller frees t with dt__tree_free; on error t holds
 * nothing to free.
 */
dt_err dt__tree_build(const dt_node_entry *table, int count, int arity,
                      dt__tree *t);
void dt__tree_free(dt__tree *t);

/* Node id's place (id >= 1), read from the whole tree. */
void dt__tree_place_of(const dt__tree *t, int id, dt__tree_place *p);

/* A node id and its host's name, and their order: by host, then by id
 * (the nodes of a host are then a run, its lowest id first). Shared with
 * the scheduler's count of nodes per host (directory.c). */
typedef struct dt__host_key {
	const char *host;
	int id;
} dt__host_key;
int dt__host_key_cmp(const void *a, const void *b);

/* The count of a subtree's nodes in the barrier groups of mask
 * (DT_GROUP_SERVERS, DT_GROUP_WORKERS). */
static inline int
dt__tree_in_mask(int servers, int workers, int mask)
{
	return ((mask & DT_GROUP_SERVERS) ? servers : 0) +
	       ((mask & DT_GROUP_WORKERS) ? workers : 0);
}

#endif
