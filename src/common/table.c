/*
 * table.c - the id-keyed hash table of table.h: chained buckets in an
 * array that doubles with the number of entries.
 */
#include <stdlib.h>

#include "common/table.h"

#define MIN_BUCKETS 16

static inline dt_hnode **
bucket_of(const dt_table *t, uint64_t key)
{
	return &t->buckets[dt__mix64(key) & (t->nbuckets - 1)];
}

void
dt__table_init(dt_table *t)
{
	t->buckets = NULL;
	t->nbuckets = 0;
	t->count = 0;
	t->one = NULL;
}

void
dt__table_fini(dt_table *t)
{
	if (t->buckets != &t->one)
		free(t->buckets);
	dt__table_init(t);
}

/* Move every entry into a new array of nb buckets; keep the old one if
 * the new one cannot be had. */
static void
resize(dt_table *t, size_t nb)
{
	dt_hnode **nbk = calloc(nb, sizeof(*nbk));
	dt_hnode *all = NULL;

	if (nbk == NULL)
		return;
	for (size_t i = 0; i < t->nbuckets; i++) {
		dt_hnode *h = t->buckets[i], *next;

		for (; h; h = next) {
			next = h->next;
			h->next = all;
			all = h;
		}
	}
	if (t->buckets != &t->one)
		free(t->buckets);
	t->one = NULL;
	t->buckets = nbk;
	t->nbuckets = nb;
	while (all) {
		dt_hnode *h = all, **b = bucket_of(t, h->key);

		all = h->next;
		h->next = *b;
		*b = h;
	}
}

void
dt__table_insert(dt_table *t, dt_hnode *n, uint64_t key)
{
	dt_hnode **b;

	if (t->count >= t->nbuckets)
		resize(t, t->nbuckets < MIN_BUCKETS ? MIN_BUCKETS
		                                    : t->nbuckets * 2);
	if (t->nbuckets == 0) { /* no memory for the first array */
		t->buckets = &t->one;
		t->nbuckets = 1;
	}
	n->key = key;
	b = bucket_of(t, key);
	n->next = *b;
	*b = n;
	t->count++;
}

dt_hnode *
dt__table_find(const dt_table *t, uint64_t key)
{
	dt_hnode *h = t->nbuckets ? *bucket_of(t, key) : NULL;

	while (h && h->key != key)
		h = h->next;
	return h;
}

dt_hnode *
dt__table_take(dt_table *t, uint64_t key)
{
	dt_hnode **p;

	if (t->nbuckets == 0)
		return NULL;
	for (p = bucket_of(t, key); *p; p = &(*p)->next) {
		dt_hnode *h = *p;

		if (h->key != key)
			continue;
		*p = h->next;
		h->next = NULL;
		t->count--;
		return h;
	}
	return NULL;
}

void
dt__table_remove(dt_table *t, dt_hnode *n)
{
	dt_hnode **p;

	if (t->nbuckets == 0)
		return;
	for (p = bucket_of(t, n->key); *p; p = &(*p)->next) {
		if (*p != n)
			continue;
		*p = n->next;
		n->next = NULL;
		t->count--;
		return;
	}
}

static dt_hnode *
from_bucket(dt_table_iter *it)
{
	const dt_table *t = it->t;

	for (; it->bucket < t->nbuckets; it->bucket++) {
		dt_hnode *h = t->buckets[it->bucket];

		if (h) {
			it->bucket++;
			it->next = h->next;
			return h;
		}
	}
	return NULL;
}

dt_hnode *
dt__table_first(const dt_table *t, dt_table_iter *it)
{
	it->t = t;
	it->bucket = 0;
	it->next = NULL;
	return from_bucket(it);
}

dt_hnode *
dt__table_next(dt_table_iter *it)
{
	dt_hnode *h = it->next;

	if (h) {
		it->next = h->next;
		return h;
	}
	return from_bucket(it);
}
