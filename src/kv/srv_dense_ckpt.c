/*
 * srv_dense_ckpt.c - the dense store kind's checkpoint section: each key's
 * value, optimizer state, step count and the pushes of each worker it
 * holds (ckpt.c's key records), written between two rounds and read back
 * into an empty store; and what the workers hear of it under recovery
 * (dense_held). The kind's requests are in srv_dense.c.
 *
 * Threads: the node's I/O thread.
 */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_impl.h"
#include "kv/server.h"
#include "kv/srv_dense.h"

uint64_t
dense_count(kv_server *s)
{
	return s->ndense;
}

static size_t
dense_state_len(kv_server *s, const entry *e)
{
	return e->state ? dt__opt_state_len(&s->opt, e->len) : 0;
}

size_t
dense_snap_bytes(kv_server *s)
{
	dt_table_iter it;
	size_t size = 8;

	for (dt_hnode *h = dt__table_first(&s->keys, &it); h;
	     h = dt__table_next(&it)) {
		entry *e = DT_CONTAINER_OF(h, entry, hn);

		if (e->initialised)
			size +=
			    8 * (7 + (size_t)s->nworkers) +
			    sizeof(float) * (e->len + dense_state_len(s, e));
	}
	return size;
}

void
dense_snapshot(kv_server *s, dt_wbuf *w)
{
	dt_table_iter it;

	dt__wbuf_u64(w, dense_count(s));
	for (dt_hnode *h = dt__table_first(&s->keys, &it); h;
	     h = dt__table_next(&it)) {
		entry *e = DT_CONTAINER_OF(h, entry, hn);
		dt_ckpt_key k = {.key = e->key,
		                 .n = e->n,
		                 .offset = e->offset,
		                 .len = e->len,
		                 .steps = e->steps,
		                 .applied = e->applied,
		                 .state_len = dense_state_len(s, e),
		                 .val = e->val,
		                 .state = e->state};

		if (e->initialised)
			dt__ckpt_key(w, &k, (uint32_t)s->nworkers);
	}
}

void
dense_held(kv_server *s, dt_key *keys, uint64_t *applied)
{
	dt_table_iter it;
	size_t k = 0;

	for (dt_hnode *h = dt__table_first(&s->keys, &it); h;
	     h = dt__table_next(&it)) {
		entry *e = DT_CONTAINER_OF(h, entry, hn);

		if (!e->initialised)
			continue;
		keys[k] = e->key;
		memcpy(applied + k * (size_t)s->nworkers, e->applied,
		       sizeof(uint64_t) * (size_t)s->nworkers);
		k++;
	}
}

/* One key of a checkpoint into the store (k: checked by ckpt.c). */
static dt_err
load_key(kv_server *s, const char *path, const dt_ckpt_key *k)
{
	entry *e;

	if (k->state_len != dt__opt_state_len(&s->opt, k->len))
		return dt__fail(DT_EFORMAT,
		                "%s: key %llu has %llu optimizer state floats, "
		                "its optimizer needs %zu",
		                path, (unsigned long long)k->key,
		                (unsigned long long)k->state_len,
		                dt__opt_state_len(&s->opt, k->len));
	if (dense_find(s, k->key))
		return dt__fail(DT_EFORMAT, "%s: key %llu twice", path,
		                (unsigned long long)k->key);
	if ((e = dense_insert(s, k->key)) == NULL ||
	    dense_alloc(s, e, k->n, k->offset, (size_t)k->len))
		return dt__fail(DT_ENOMEM, "%s: out of memory for key %llu",
		                path, (unsigned long long)k->key);
	memcpy(e->val, k->val, (size_t)k->len * sizeof(float));
	if (k->state_len)
		memcpy(e->state, k->state,
		       (size_t)k->state_len * sizeof(float));
	memcpy(e->applied, k->applied, (size_t)s->nworkers * sizeof(uint64_t));
	e->steps = k->steps;
	e->initialised = 1;
	s->ninit++;
	s->ndense++;
	e->restored = 1;
	return DT_OK;
}

/* The dense keys' section: its count is the header's (h->nkeys). */
dt_err
dense_load(kv_server *s, const char *path, dt_rbuf *r, const dt_ckpt_head *h)
{
	dt_ckpt_key k = {0};
	dt_err err = DT_OK;

	if ((k.applied = calloc(h->nworkers, sizeof(uint64_t))) == NULL)
		return dt__fail(DT_ENOMEM, "%s: out of memory", path);
	for (uint64_t i = 0; i < h->nkeys && err == DT_OK; i++)
		if ((err = dt__ckpt_next_key(path, r, h, &k)) == DT_OK)
			err = load_key(s, path, &k);
	free(k.applied);
	return err;
}

void
dense_drop(kv_server *s)
{
	dt_table_iter it;
	dt_hnode *h;

	while ((h = dt__table_first(&s->keys, &it)) != NULL) {
		entry *e = DT_CONTAINER_OF(h, entry, hn);

		dt__table_remove(&s->keys, h);
		dense_free_entry(e);
	}
	s->ndense = 0;
}
