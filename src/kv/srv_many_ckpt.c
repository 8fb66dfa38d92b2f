/*
 * srv_many_ckpt.c - the many-key store kind's part in checkpoints and
 * recovery: its checkpoint section (the store's arrays, kstore_ckpt.c),
 * what the workers hear of it when a server rejoins (each record's
 * rounds), and the pushes of a restarted worker it holds (KV_RESUME).
 * The kind's requests are in srv_many.c.
 *
 * Threads: the node's I/O thread.
 */
#include <stdlib.h>
#include <string.h>

#include "kv/kstore.h"
#include "kv/kv_impl.h"
#include "kv/server.h"

uint64_t
many_count(kv_server *s)
{
	return s->ks_on ? s->ks.nrec : 0;
}

size_t
many_snap_bytes(kv_server *s)
{
	return dt__ks_snap_bytes(s->ks_on ? &s->ks : NULL);
}

void
many_snapshot(kv_server *s, dt_wbuf *w)
{
	dt__ks_snapshot(s->ks_on ? &s->ks : NULL, w);
}

/* Each record's key, and each worker's pushes in it: in dist_sync every
 * round holds one push of each worker, so each worker's count is the
 * record's rounds. (In dist_async the workers send batched calls key by
 * key when they recover: dt__kv_client_batches.) */
void
many_held(kv_server *s, dt_key *keys, uint64_t *applied)
{
	size_t nw = (size_t)s->nworkers;

	if (!s->ks_on)
		return;
	dt__ks_keys(&s->ks, keys);
	for (size_t r = 0; r < s->ks.nrec; r++)
		for (size_t w = 0; w < nw; w++)
			applied[r * nw + w] =
			    s->ks.updates ? s->ks.updates[r] : 0;
}

/* The many-key section (format version 3 on; older files have none). */
dt_err
many_load(kv_server *s, const char *path, dt_rbuf *r, const dt_ckpt_head *h)
{
	dt_err err;

	if (h->version < 3)
		return DT_OK;
	if (s->ks_on)
		dt__ks_fini(&s->ks);
	dt__ks_init(&s->ks, s->nworkers, s->sync, &s->opt);
	s->ks.keep_prev = s->sync && dt__node_recover(s->node);
	s->ks_on = 1;
	if ((err = dt__ks_load(&s->ks, path, r)))
		return err;
	s->ninit += s->ks.nrec;
	s->ks_restored = s->ks.nrec != 0;
	return DT_OK;
}

/* Whether a kept request of worker pushes key (a single-key push, or a
 * batched one listing it). */
static int
kept_pushes(const srv_kept *q, int worker, dt_key key)
{
	const uint8_t *keys = q->payload;

	if (q->worker != worker)
		return 0;
	if (q->h.cmd == DT_CMD_KV_PUSH || q->h.cmd == DT_CMD_KV_PUSHPULL)
		return q->h.key == key;
	if ((q->h.cmd != DT_CMD_KV_PUSH_MANY &&
	     q->h.cmd != DT_CMD_KV_PUSHPULL_MANY) ||
	    keys == NULL || q->h.payload_len / 8 < q->h.arg0)
		return 0;
	for (uint64_t i = 0; i < q->h.arg0; i++)
		if (dt__get_u64(keys + 8 * i) == key)
			return 1;
	return 0;
}

/*
 * Recovery, KV_RESUME of a key of the store: the pushes of worker it
 * holds - its rounds (in dist_sync each holds one push of every worker),
 * the one pending in the open round, and those parked behind it. In
 * dist_async the workers of a recovering job send batched calls key by
 * key (dt__kv_client_batches), so the store has no such keys.
 */
int
many_resume(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta)
{
	uint32_t r;
	size_t len, bad;
	uint64_t have;

	(void)meta;
	if (!s->ks_on || (r = dt__ks_find(&s->ks, h->key)) == DT_KS_NONE)
		return 0;
	len = dt__ks_len(&s->ks, r);
	if (h->arg0 != len || h->arg1 != 0 || !s->sync) {
		srv_reply_error(
		    s, worker, h->cmd, h->seq, h->key,
		    s->sync ? DT_ESIZE : DT_ESTATE, "resume of key %llu: %s",
		    (unsigned long long)h->key,
		    s->sync ? "not its initialised length"
		            : "a batched call's key keeps no pushes "
		              "in dist_async");
		return 1;
	}
	have = (s->ks.updates ? s->ks.updates[r] : 0) +
	       (uint64_t)dt__ks_pending(&s->ks, worker, &r, 1, &bad);
	for (const srv_kept *q = s->mparked; q; q = q->next)
		have += (uint64_t)kept_pushes(q, worker, h->key);
	srv_reply_held(s, worker, h, have);
	return 1;
}
