/*
 * table.h - the containers every module shares: an id-keyed hash table
 * that grows with its contents, and a doubly linked list. Both are
 * intrusive: the caller embeds a dt_hnode / dt_lnode in its own struct and
 * gets the struct back with DT_CONTAINER_OF, so neither allocates per
 * entry, and a lookup, insert or removal costs O(1) (expected, for the
 * table) at any number of entries.
 *
 * Neither locks: the owner guards a table or list with its own lock.
 */
#ifndef DT_COMMON_TABLE_H
#define DT_COMMON_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define DT_CONTAINER_OF(ptr, type, member)                                     \
	((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* A 64-bit finaliser (splitmix64's): every bit of k reaches every bit of
 * the result, so keys that share low bits (sequence numbers, strided ids)
 * spread evenly. */
static inline uint64_t
dt__mix64(uint64_t k)
{
	k ^= k >> 30;
	k *= 0xbf58476d1ce4e5b9ull;
	k ^= k >> 27;
	k *= 0x94d049bb133111ebull;
	k ^= k >> 31;
	return k;
}

/* ---- hash table, keyed by a 64-bit id ---- */

typedef struct dt_hnode {
	struct dt_hnode *next;
	uint64_t key;
} dt_hnode;

/*
 * The bucket array doubles when the table holds more entries than buckets
 * (it does not shrink: a walk costs O(the most entries it held)). An insert
 * never fails: if the bigger array cannot be had, the chains just grow
 * longer. Keys are mixed before use, so keys
 * that share low bits (sequence numbers, strided ids) spread evenly.
 */
typedef struct dt_table {
	dt_hnode **buckets; /* nbuckets entries (or &one: out of memory) */
	size_t nbuckets;    /* 0 or a power of two */
	size_t count;
	dt_hnode *one;
} dt_table;

/* An all-zero dt_table is an empty table too. */
void dt__table_init(dt_table *t);
/* Free the bucket array; the entries are the caller's. */
void dt__table_fini(dt_table *t);
/* Add n under key (a key may be present once; the caller checks). */
void dt__table_insert(dt_table *t, dt_hnode *n, uint64_t key);
dt_hnode *dt__table_find(const dt_table *t, uint64_t key);
/* Find and unlink the entry of key; NULL if there is none. */
dt_hnode *dt__table_take(dt_table *t, uint64_t key);
/* Unlink n, which is in t. */
void dt__table_remove(dt_table *t, dt_hnode *n);
static inline size_t
dt__table_count(const dt_table *t)
{
	return t->count;
}

/*
 * Walk every entry; the current one may be removed (or freed after its
 * removal) during the walk, others may not change:
 *   dt_table_iter it;
 *   for (dt_hnode *h = dt__table_first(t, &it); h; h = dt__table_next(&it))
 */
typedef struct dt_table_iter {
	const dt_table *t;
	size_t bucket;
	dt_hnode *next;
} dt_table_iter;

dt_hnode *dt__table_first(const dt_table *t, dt_table_iter *it);
dt_hnode *dt__table_next(dt_table_iter *it);

/* ---- doubly linked list ---- */

typedef struct dt_lnode {
	struct dt_lnode *prev, *next; /* NULL while on no list */
} dt_lnode;

typedef struct dt_list {
	dt_lnode head; /* a ring through head */
} dt_list;

static inline void
dt__list_init(dt_list *l)
{
	l->head.prev = l->head.next = &l->head;
}

static inline int
dt__list_empty(const dt_list *l)
{
	return l->head.next == &l->head;
}

static inline int
dt__list_linked(const dt_lnode *n)
{
	return n->next != NULL;
}

static inline void
dt__list_insert_before(dt_lnode *at, dt_lnode *n)
{
	n->next = at;
	n->prev = at->prev;
	at->prev->next = n;
	at->prev = n;
}

static inline void
dt__list_push_back(dt_list *l, dt_lnode *n)
{
	dt__list_insert_before(&l->head, n);
}

static inline void
dt__list_push_front(dt_list *l, dt_lnode *n)
{
	dt__list_insert_before(l->head.next, n);
}

static inline void
dt__list_remove(dt_lnode *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = NULL;
}

/* The first node, or NULL. */
static inline dt_lnode *
dt__list_first(const dt_list *l)
{
	return dt__list_empty(l) ? NULL : l->head.next;
}

/* The node after n, or NULL at the end. */
static inline dt_lnode *
dt__list_next(const dt_list *l, const dt_lnode *n)
{
	return n->next == &l->head ? NULL : n->next;
}

static inline dt_lnode *
dt__list_pop_front(dt_list *l)
{
	dt_lnode *n = dt__list_first(l);

	if (n)
		dt__list_remove(n);
	return n;
}

#endif
