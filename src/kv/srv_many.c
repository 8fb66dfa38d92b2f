/*
 * srv_many.c - the many-key store kind on a server: batched requests
 * (KV_*_MANY) over the store of kstore.c, single-key requests for its keys,
 * its dist_sync rounds (a request is answered when the rounds of all its
 * keys are over), its checkpoint section (srv_many_ckpt.c over
 * kstore_ckpt.c, with a restarted worker's KV_RESUME) and its part in
 * recovery (requests parked on a server that took a lost one's place).
 *
 * The router (server.c: dispatch) hands it its messages; it reaches the
 * other kinds only through their ops (srv_home_of). Everything here runs in
 * the node's I/O thread.
 */
#include <stdlib.h>
#include <string.h>

#include "kv/kstore.h"
#include "kv/kv_impl.h"
#include "kv/server.h"

/* A batched dist_sync push waiting for its keys' rounds (KV_PUSH_MANY,
 * KV_PUSHPULL_MANY); its handle is its index + 1. */
struct breq {
	int worker; /* -1: free */
	int cmd;
	uint64_t seq;
	unsigned answer;
	size_t count, remaining;
	uint32_t *idx;  /* a pushpull's records, to answer with */
	int span;       /* ... or (idx NULL) the span of count records */
	uint32_t first; /* from this one (dt__ks_span) */
	uint32_t next_free;
	struct mpull *pulls; /* single-key pulls of its keys by its worker,
	                        answered after it */
};

/* A single-key pull of a key with this worker's push pending, answered
 * after that push's request. */
typedef struct mpull {
	int worker, cmd;
	uint64_t seq;
	uint32_t rec;
	unsigned enc;
	struct mpull *next;
} mpull;

/* Append a pull to q's; 1: no memory. */
static int
mpull_add(breq *q, int worker, int cmd, uint64_t seq, uint32_t rec,
          unsigned enc)
{
	mpull *w = calloc(1, sizeof(*w)), **p;

	if (w == NULL)
		return 1;
	*w = (mpull){
	    .worker = worker, .cmd = cmd, .seq = seq, .rec = rec, .enc = enc};
	for (p = &q->pulls; *p; p = &(*p)->next)
		;
	*p = w;
	return 0;
}

static void on_many(kv_server *s, int worker, const dt_msg *m);
static int many_single(kv_server *s, int worker, const dt_msg_hdr *h,
                       const uint8_t *meta, const float *payload);

/*
 * Recovery: a batched request waits, parked, on a server that took a lost
 * one's place, when it cannot be served yet though it will be once the
 * workers' replays are in:
 *   - its first key is not in the store yet (the workers' replays come in
 *     any order: worker 0's, with the init, may come after another
 *     worker's pushes), while the replays last;
 *   - (pending) in dist_sync, it pushes a key that the worker's previous
 *     push still waits on: a replay sends a worker's pushes back to back,
 *     where the worker had waited for each round's end;
 *   - an earlier request of the same worker is parked: its order is kept.
 * Outside recovery nothing is parked (and a second push in a round is
 * refused). 1: parked (or refused for want of memory).
 */
static int
many_park(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta,
          const void *payload, int pending)
{
	int behind = 0;

	if (!s->rejoined && s->mparked == NULL &&
	    !(pending && dt__node_recover(s->node)))
		return 0;
	for (const srv_kept *q = s->mparked; q; q = q->next)
		behind |= q->worker == worker;
	if (!behind && !pending &&
	    (!s->rejoined || h->cmd == DT_CMD_KV_INIT_MANY || h->arg0 == 0 ||
	     payload == NULL || h->payload_len < 8 ||
	     (s->ks_on &&
	      dt__ks_find(&s->ks, dt__get_u64(payload)) != DT_KS_NONE)))
		return 0;
	if (srv_keep(&s->mparked, worker, h, meta, payload))
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_ENOMEM,
		                "%s: out of memory", dt__kv_op_name(h->cmd));
	return 1;
}

/* Whether worker has a request parked. */
static int
worker_parked(const kv_server *s, int worker)
{
	for (const srv_kept *q = s->mparked; q; q = q->next)
		if (q->worker == worker)
			return 1;
	return 0;
}

/* Append q to the parked requests. */
static void
many_repark(kv_server *s, srv_kept *q)
{
	srv_kept **p = &s->mparked;

	while (*p)
		p = &(*p)->next;
	q->next = NULL;
	*p = q;
}

/* One pass over the parked requests (oldest first): each worker's first
 * is handled again (parked again if it still cannot be served), the rest
 * of a worker whose first is parked again stay as they are. The number
 * served. */
static size_t
many_unpark_pass(kv_server *s, uint8_t *blocked)
{
	srv_kept *q = s->mparked;
	size_t served = 0;

	s->mparked = NULL;
	memset(blocked, 0, (size_t)s->nworkers);
	while (q) {
		srv_kept *next = q->next;
		int w = q->worker;

		if (blocked[w]) {
			many_repark(s, q);
			q = next;
			continue;
		}
		dt_msg m = {.hdr = q->h, .payload = q->payload};
		srv_kept *tail = s->mparked;

		while (tail && tail->next)
			tail = tail->next;
		if (dt__kv_many_cmd(q->h.cmd))
			on_many(s, w, &m);
		else
			(void)many_single(
			    s, w, &q->h, q->meta,
			    (const float *)(const void *)q->payload);
		/* (parked again: the list grew by a copy of it) */
		if ((tail ? tail->next : s->mparked) != NULL)
			blocked[w] = 1;
		else
			served++;
		q->next = NULL;
		srv_kept_free(q);
		q = next;
	}
	return served;
}

/* Rounds closed, the store has new keys, or the replays are over: what
 * was parked is handled again, until a pass serves none. Not re-entered
 * (a request served here that closes rounds is followed by another
 * pass). */
static void
many_unpark(kv_server *s)
{
	uint8_t *blocked;

	if (s->mp_busy || s->mparked == NULL)
		return;
	if ((blocked = malloc((size_t)s->nworkers)) == NULL) {
		dt__log(0, "batched requests parked for recovery: out of "
		           "memory to handle them again");
		return;
	}
	s->mp_busy = 1;
	while (s->mparked && many_unpark_pass(s, blocked))
		;
	s->mp_busy = 0;
	free(blocked);
}

/* Room for count record numbers in s->idx; NULL: no memory. */
static uint32_t *
idx_room(kv_server *s, size_t count)
{
	return (uint32_t *)(void *)dt__buf_reserve(
	    (uint8_t **)&s->idx, &s->idx_cap, DT_MAX(count, 1) * 4);
}

/* Answer a batched request with the values of records idx (in the
 * encoding asked), or with nothing (a push). */
static void
many_answer(kv_server *s, int worker, int cmd, uint64_t seq, unsigned enc,
            const uint32_t *idx, size_t count)
{
	size_t n = 0;

	if (cmd == DT_CMD_KV_PUSH_MANY || cmd == DT_CMD_KV_INIT_MANY ||
	    cmd == DT_CMD_KV_PUSH || cmd == DT_CMD_KV_INIT) {
		srv_reply(s, worker, cmd, seq, 0, NULL, 0);
		return;
	}
	for (size_t i = 0; i < count; i++)
		n += dt__ks_len(&s->ks, idx[i]);
	if (!dt__buf_reserve((uint8_t **)&s->gath, &s->gath_cap,
	                     DT_MAX(n, 1) * sizeof(float))) {
		srv_reply_error(s, worker, cmd, seq, 0, DT_ENOMEM,
		                "%s of %zu keys: out of memory for the answer "
		                "(%zu floats)",
		                dt__kv_op_name(cmd), count, n);
		return;
	}
	dt__ks_gather(&s->ks, idx, count, s->gath);
	srv_reply_val(s, worker, cmd, seq, 0, s->gath, n, enc, 1);
}

/* The same for a span of records (dt__ks_span): their values lie back to
 * back in the store and are sent from there. */
static void
many_answer_span(kv_server *s, int worker, int cmd, uint64_t seq, unsigned enc,
                 uint32_t first, size_t count)
{
	if (cmd == DT_CMD_KV_PUSH_MANY) {
		srv_reply(s, worker, cmd, seq, 0, NULL, 0);
		return;
	}
	/* (the van copies what it keeps past the send: a scratch buffer) */
	srv_reply_val(s, worker, cmd, seq, 0, dt__ks_val(&s->ks, first),
	              (size_t)(s->ks.off[first + count] - s->ks.off[first]),
	              enc, 1);
}

/* A batched request refused: the error, with the key it names said
 * better when that key lives in the single-key store. */
static void
many_refuse(kv_server *s, int worker, const dt_msg_hdr *h, dt_err err,
            const dt_kv_many *b, size_t bad)
{
	dt_key key = b->count > bad ? dt__get_u64(b->keys + 8 * bad) : 0;
	const srv_kind *home = err == DT_ENOKEY && b->count > bad
	                           ? srv_home_of(s, key, &srv_many_kind)
	                           : NULL;

	if (home)
		srv_reply_error(
		    s, worker, h->cmd, h->seq, key, DT_ESTATE,
		    "%s of key %llu: the key was initialised by %s; "
		    "use its calls for it",
		    dt__kv_op_name(h->cmd), (unsigned long long)key,
		    home->made_by);
	else
		srv_reply_error(s, worker, h->cmd, h->seq, key, err, "%s",
		                dt_errmsg());
}

/* An init's values into records idx: every one, or after a checkpoint's
 * load only the records added since (n0 on): the values of a checkpoint
 * win, as a dense key's do, since the job resumes from them. */
static void
many_set_new(kv_server *s, const uint32_t *idx, size_t count, const float *vals,
             size_t n0)
{
	if (!s->ks_restored) {
		dt__ks_set(&s->ks, idx, count, vals);
		return;
	}
	for (size_t i = 0; i < count; i++) {
		if (idx[i] >= n0)
			dt__ks_set(&s->ks, &idx[i], 1, vals);
		vals += dt__ks_len(&s->ks, idx[i]);
	}
}

static void
on_init_many(kv_server *s, int worker, const dt_msg_hdr *h, const dt_kv_many *b)
{
	uint32_t *idx;
	size_t bad, n0;
	dt_err err;

	if (dt__node_recover(s->node) && !s->sync) {
		srv_reply_error(
		    s, worker, h->cmd, h->seq, 0, DT_ECONFIG,
		    "batched init: this server recovers lost nodes "
		    "(DTRAIN_RECOVER) in dist_async, where the many-key "
		    "store has no recovery; the workers send batched "
		    "calls key by key there when DTRAIN_RECOVER is set in "
		    "their environment too");
		return;
	}
	/* Made (again while empty) in the store's mode and optimizer now:
	 * both are fixed once it holds keys. */
	if (!s->ks_on || s->ks.nrec == 0) {
		if (s->ks_on)
			dt__ks_fini(&s->ks);
		dt__ks_init(&s->ks, s->nworkers, s->sync, &s->opt);
		/* (its update counts: for checkpoints and recovery) */
		s->ks.counted = s->ck_dir != NULL || dt__node_recover(s->node);
		/* (the round before: a restarted worker's first pull) */
		s->ks.keep_prev = s->sync && dt__node_recover(s->node);
		s->ks_on = 1;
	}
	/* A key has one home: the single-key store, a row_sparse table or
	 * this one. */
	for (size_t i = 0; i < b->count; i++) {
		dt_key key = dt__get_u64(b->keys + 8 * i);
		const srv_kind *home = srv_home_of(s, key, &srv_many_kind);

		if (home) {
			srv_reply_error(
			    s, worker, h->cmd, h->seq, key, DT_ESTATE,
			    "batched init of key %llu: the key was "
			    "initialised by %s; use its calls for it",
			    (unsigned long long)key, home->made_by);
			return;
		}
	}
	if ((idx = idx_room(s, b->count)) == NULL) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_ENOMEM,
		                "batched init of %zu keys: out of memory",
		                b->count);
		return;
	}
	n0 = s->ks.nrec;
	if ((err = dt__ks_resolve(&s->ks, "batched init", b->count, b->keys,
	                          &b->lens, 1, idx, &bad))) {
		many_refuse(s, worker, h, err, b, bad);
		return;
	}
	many_set_new(s, idx, b->count, (const float *)(const void *)b->vals,
	             n0);
	s->ninit += s->ks.nrec - n0;
	DT_LOG(2, "batched init: %zu keys (%zu new), %zu in the store",
	       b->count, s->ks.nrec - n0, s->ks.nrec);
	srv_reply(s, worker, h->cmd, h->seq, 0, NULL, 0);
	for (size_t i = 0; s->rejoined && i < b->count; i++)
		srv_unpark_key(s, dt__get_u64(b->keys + 8 * i));
	many_unpark(s);
}

/* dist_sync: n of a pending request's keys closed their rounds. */
static void
many_done(void *arg, uint32_t handle, size_t n)
{
	kv_server *s = arg;
	breq *q = &s->breqs[handle - 1];

	if (q->worker == 0) /* (each round holds one push of worker 0) */
		s->rounds += n;
	if ((q->remaining -= n) != 0)
		return;
	s->mp_progress = 1; /* (what is parked may go on: many_park) */
	uint64_t t0 = dt__now_ns();
	if (q->span)
		many_answer_span(s, q->worker, q->cmd, q->seq, q->answer,
		                 q->first, q->count);
	else
		many_answer(s, q->worker, q->cmd, q->seq, q->answer, q->idx,
		            q->count);
	srv_busy(DT_EV_KV_REPLY, t0, 0, 0,
	         dt__node_worker_id(s->node, q->worker));
	while (q->pulls) {
		mpull *w = q->pulls;

		q->pulls = w->next;
		many_answer(s, w->worker, w->cmd, w->seq, w->enc, &w->rec, 1);
		free(w);
	}
	free(q->idx);
	q->idx = NULL;
	q->worker = -1;
	q->next_free = s->breq_free;
	s->breq_free = handle;
}

/* A free pending-request slot's handle; 0: no memory. */
static uint32_t
breq_new(kv_server *s)
{
	uint32_t hd = s->breq_free;

	if (hd) {
		s->breq_free = s->breqs[hd - 1].next_free;
		return hd;
	}
	if (s->nbreqs >= UINT32_MAX - 1)
		return 0;
	breq *nb = realloc(s->breqs, (s->nbreqs + 1) * sizeof(*nb));
	if (nb == NULL)
		return 0;
	s->breqs = nb;
	s->breqs[s->nbreqs] = (breq){.worker = -1};
	return (uint32_t)++s->nbreqs;
}

/* The i-th key of a batched request (listed, or of its range). */
static dt_key
many_key(const dt_kv_many *b, size_t i)
{
	return b->step ? b->k0 + b->step * (uint64_t)i
	               : dt__get_u64(b->keys + 8 * i);
}

/*
 * dist_sync: worker's pushes g of records idx[0..count) (idx NULL: the
 * span first .. first + count - 1) join their rounds as one pending
 * request, answered (values in encoding enc, for a pushpull) once every
 * one of its rounds is over. b: the batched request's body, or NULL (a
 * single-key request: h->key), to name a key whose round still holds
 * this worker's push.
 */
static void
push_rounds(kv_server *s, int worker, const dt_msg_hdr *h, unsigned enc,
            const uint32_t *idx, uint32_t first, size_t count, const float *g,
            const dt_kv_many *b)
{
	const uint8_t *keys = b ? b->keys : NULL;
	const char *op = dt__kv_op_name(h->cmd);
	int pull =
	    h->cmd == DT_CMD_KV_PUSHPULL || h->cmd == DT_CMD_KV_PUSHPULL_MANY;
	uint32_t hd, *keep = NULL;
	size_t bad;

	if (idx ? dt__ks_pending(&s->ks, worker, idx, count, &bad)
	        : dt__ks_pending_span(&s->ks, worker, first, count, &bad)) {
		dt_key key = b ? many_key(b, bad) : h->key;

		/* (a listed request's payload starts with its keys; a range
		 * is never parked: on_many) */
		if (keys && !b->step && many_park(s, worker, h, NULL, keys, 1))
			return;
		srv_reply_error(
		    s, worker, h->cmd, h->seq, key, DT_ESTATE,
		    "%s of key %llu: this worker's push of it in the "
		    "round open now has not been answered yet (a key "
		    "of batched calls takes one push per worker per "
		    "round)",
		    op, (unsigned long long)key);
		return;
	}
	if ((hd = breq_new(s)) != 0 && pull && idx &&
	    (keep = malloc(count * sizeof(*keep))) == NULL) {
		s->breqs[hd - 1].next_free = s->breq_free;
		s->breq_free = hd;
		hd = 0;
	}
	if (hd == 0) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
		                "%s of %zu keys: out of memory", op, count);
		return;
	}
	if (keep)
		memcpy(keep, idx, count * sizeof(*keep));
	s->breqs[hd - 1] = (breq){.worker = worker,
	                          .cmd = h->cmd,
	                          .seq = h->seq,
	                          .answer = enc,
	                          .count = count,
	                          .remaining = count,
	                          .idx = keep,
	                          .first = first,
	                          .span = idx == NULL};
	uint64_t t0 = dt__now_ns();

	if (idx)
		dt__ks_push_sync(&s->ks, worker, hd, idx, count, g, keys,
		                 h->key, many_done, s);
	else
		dt__ks_push_sync_span(&s->ks, worker, hd, first, count, g, keys,
		                      many_done, s);
	if (count > DT_KS_TIMED) /* (else timed key by key) */
		srv_busy(DT_EV_KV_MERGE, t0, h->key, 0,
		         dt__node_worker_id(s->node, worker));
}

/*
 * Recovery: the value of record r after round `meta`, for a worker that
 * took a lost one's place and computes that round's step again; as the
 * dense kind's (srv_dense.c: pull_at), the store is at that round or the
 * one after (keep_prev: the value before its last round).
 */
static void
many_pull_at(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta,
             uint32_t r, unsigned enc)
{
	uint64_t round = dt__get_u64(meta);
	const float *v =
	    s->sync ? dt__ks_val_at(&s->ks, r, round) : dt__ks_val(&s->ks, r);

	if (v == NULL) {
		srv_reply_error(
		    s, worker, h->cmd, h->seq, h->key, DT_ESTATE,
		    "pull of key %llu as of round %llu: the key is at round "
		    "%llu, and only the value of the round before is kept",
		    (unsigned long long)h->key, (unsigned long long)round,
		    (unsigned long long)(s->ks.updates ? s->ks.updates[r] : 0));
		return;
	}
	/* (scratch: the value before changes at the next round) */
	srv_reply_val(s, worker, h->cmd, h->seq, h->key, v,
	              dt__ks_len(&s->ks, r), enc, 1);
}

/*
 * A single-key request for a key of the many-key store (dt_kv_push on a
 * key that dt_kv_init_many made, say): served there, as a batched request
 * of one key. Its dist_sync pull waits for this worker's pending push of
 * the key, as a single-key store's does. What such a key does not take: a
 * second push of a worker in one round (its first must be answered).
 */
static void
one_in_many(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta,
            const float *payload, uint32_t r)
{
	size_t len = dt__ks_len(&s->ks, r), bad;
	unsigned enc = DT_KV_ENC_ANSWER(h->arg2);
	const char *op = dt__kv_op_name(h->cmd);
	dt_quant_kind kind;
	float t;
	dt_err err;

	if (h->arg0 != len || h->arg1 != 0) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		                "%s of key %llu: length %llu != initialised "
		                "length %zu",
		                op, (unsigned long long)h->key,
		                (unsigned long long)h->arg0, len);
		return;
	}
	/* Recovery: a replayed push behind this worker's pending one (or
	 * anything behind its parked requests) waits, as a batched one. */
	if ((s->mparked || dt__node_recover(s->node)) && s->sync &&
	    (worker_parked(s, worker) ||
	     (h->cmd != DT_CMD_KV_PULL &&
	      dt__ks_pending(&s->ks, worker, &r, 1, &bad))) &&
	    many_park(s, worker, h, meta, payload, 1))
		return;
	err = dt__kv_push_check(h, meta, len, &kind, &t);
	if (err && (err != DT_ESIZE || h->cmd != DT_CMD_KV_PULL)) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, err,
		                "%s of key %llu: %s", op,
		                (unsigned long long)h->key, dt_errmsg());
		return;
	}
	if (h->arg2 & DT_KV_AT_ROUND) { /* (a pull: push_check says) */
		many_pull_at(s, worker, h, meta, r, enc);
		return;
	}
	if (h->cmd == DT_CMD_KV_PULL) {
		if (s->sync && dt__ks_pending(&s->ks, worker, &r, 1, &bad)) {
			dt__ks_settle(&s->ks); /* (then pend has it) */
			uint32_t hd =
			    s->ks.pend[(size_t)r * (size_t)s->nworkers +
			               (size_t)worker];

			if (mpull_add(&s->breqs[hd - 1], worker, h->cmd, h->seq,
			              r, enc))
				srv_reply_error(s, worker, h->cmd, h->seq,
				                h->key, DT_ENOMEM,
				                "out of memory");
			return;
		}
		many_answer(s, worker, h->cmd, h->seq, enc, &r, 1);
		return;
	}
	if (payload == NULL && h->payload_len) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		                "%s of key %llu: payload dropped", op,
		                (unsigned long long)h->key);
		return;
	}
	if (kind != DT_QUANT_NONE) {
		if (!dt__buf_reserve(&s->dec, &s->dec_cap,
		                     len * sizeof(float))) {
			srv_reply_error(
			    s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
			    "%s of key %llu: out of memory decoding it", op,
			    (unsigned long long)h->key);
			return;
		}
		if ((err = dt__quant_decode(kind, t, (const uint8_t *)payload,
		                            len, (float *)(void *)s->dec))) {
			srv_reply_error(s, worker, h->cmd, h->seq, h->key, err,
			                "%s of key %llu: %s", op,
			                (unsigned long long)h->key,
			                dt_errmsg());
			return;
		}
		payload = (const float *)(void *)s->dec;
	}
	if (!s->sync) {
		dt__ks_apply(&s->ks, &r, 1, payload);
		s->rounds++;
		many_answer(s, worker, h->cmd, h->seq, enc, &r, 1);
		return;
	}
	push_rounds(s, worker, h, enc, &r, 0, 1, payload, NULL);
}

/* A single-key init of record r: rank 0's value sets it again (not after
 * a checkpoint's load: its value wins); the others' find it there. */
static void
init_in_many(kv_server *s, int worker, const dt_msg_hdr *h,
             const float *payload, uint32_t r)
{
	size_t len = dt__ks_len(&s->ks, r);

	if (h->arg0 != len || h->arg1 != 0 ||
	    ((h->arg2 & DT_KV_INIT_HAS_VALUE) &&
	     (payload == NULL || h->payload_len != len * sizeof(float)))) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		                "init of key %llu: length %llu != initialised "
		                "length %zu",
		                (unsigned long long)h->key,
		                (unsigned long long)h->arg0, len);
		return;
	}
	if ((h->arg2 & DT_KV_INIT_HAS_VALUE) && !s->ks_restored)
		dt__ks_set(&s->ks, &r, 1, payload);
	srv_reply(s, worker, h->cmd, h->seq, h->key, NULL, 0);
}

/* The kind's single-key requests (server.h: single). */
static int
many_single(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta,
            const float *payload)
{
	uint32_t r;

	if (!s->ks_on || (r = dt__ks_find(&s->ks, h->key)) == DT_KS_NONE)
		return 0;
	if (h->cmd == DT_CMD_KV_INIT)
		init_in_many(s, worker, h, payload, r);
	else
		one_in_many(s, worker, h, meta, payload, r);
	if (s->mparked && s->mp_progress) {
		s->mp_progress = 0; /* (recovery: rounds closed) */
		many_unpark(s);
	}
	return 1;
}

/* A pull, push or pushpull whose keys are a span of the store's records
 * (dt__ks_span: known, each once, of their lengths): no lookup. */
static void
on_many_span(kv_server *s, int worker, const dt_msg_hdr *h, const dt_kv_many *b,
             uint32_t first)
{
	const float *g = (const float *)(const void *)b->vals;

	if (h->cmd == DT_CMD_KV_PULL_MANY) {
		many_answer_span(s, worker, h->cmd, h->seq, b->answer, first,
		                 b->count);
		return;
	}
	if (!s->sync) {
		uint64_t t0 = dt__now_ns();

		dt__ks_apply_span(&s->ks, first, b->count, g);
		srv_busy(DT_EV_KV_UPDATE, t0, h->key, 0,
		         dt__node_worker_id(s->node, worker));
		s->rounds += b->count;
		many_answer_span(s, worker, h->cmd, h->seq, b->answer, first,
		                 b->count);
		return;
	}
	push_rounds(s, worker, h, b->answer, NULL, first, b->count, g, b);
}

/*
 * A key range (DT_KV_KEY_RANGE) that is no stretch of a run: its keys
 * listed in s->kexp, for the lookups. A range cannot name more keys than
 * the store holds (each is known and listed once), so what a peer can
 * make the server list is bounded by the store, not by the request's
 * 16 bytes. 1: refused (answered).
 */
static int
range_list(kv_server *s, int worker, const dt_msg_hdr *h, dt_kv_many *b)
{
	size_t nrec = s->ks_on ? s->ks.nrec : 0;

	if (b->count > nrec) {
		srv_reply_error(s, worker, h->cmd, h->seq, b->k0, DT_ENOKEY,
		                "%s of %zu keys from key %llu in steps of "
		                "%llu: more keys than the store holds (%zu): "
		                "some were never initialised with init",
		                dt__kv_op_name(h->cmd), b->count,
		                (unsigned long long)b->k0,
		                (unsigned long long)b->step, nrec);
		return 1;
	}
	if (!dt__buf_reserve(&s->kexp, &s->kexp_cap, b->count * 8)) {
		srv_reply_error(s, worker, h->cmd, h->seq, b->k0, DT_ENOMEM,
		                "%s of %zu keys: out of memory",
		                dt__kv_op_name(h->cmd), b->count);
		return 1;
	}
	for (size_t i = 0; i < b->count; i++)
		dt__put_u64(s->kexp + 8 * i, many_key(b, i));
	b->keys = s->kexp;
	return 0;
}

static void
on_many(kv_server *s, int worker, const dt_msg *m)
{
	const dt_msg_hdr *h = &m->hdr;
	const char *op = dt__kv_op_name(h->cmd);
	dt_kv_many b;
	uint32_t *idx, first;
	size_t bad;
	dt_err err;

	if (m->payload && m->payload == s->rx[worker].buf)
		s->rx[worker].holder = NULL; /* (whole: used before the next) */
	/* Workers send ranges only without recovery, whose parked requests
	 * and replay logs read their keys as a list. */
	if ((h->arg2 & DT_KV_KEY_RANGE) &&
	    (s->rejoined || dt__node_recover(s->node))) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_EPROTO,
		                "%s: a key range to a server that recovers "
		                "lost nodes (DTRAIN_RECOVER): list the keys",
		                op);
		return;
	}
	if (many_park(s, worker, h, NULL, m->payload, 0))
		return;
	if ((err = dt__kv_many_decode(h, m->payload, &b))) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, err, "%s",
		                dt_errmsg());
		return;
	}
	if (b.step && s->ks_on &&
	    dt__ks_span_range(&s->ks, b.count, b.k0, b.step, b.lens.uniform,
	                      &first)) {
		on_many_span(s, worker, h, &b, first);
		return;
	}
	if (b.step && range_list(s, worker, h, &b))
		return;
	if (b.vals && ((uintptr_t)b.vals & 3)) { /* (never, from a worker) */
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_EPROTO,
		                "%s: values not aligned", op);
		return;
	}
	if (h->cmd == DT_CMD_KV_INIT_MANY) {
		on_init_many(s, worker, h, &b);
		return;
	}
	if (b.count == 0) {
		many_answer(s, worker, h->cmd, h->seq, b.answer, NULL, 0);
		return;
	}
	if (!s->ks_on) {
		many_refuse(s, worker, h,
		            dt__fail(DT_ENOKEY,
		                     "%s of key %llu: unknown key (never "
		                     "initialised with init)",
		                     op,
		                     (unsigned long long)dt__get_u64(b.keys)),
		            &b, 0);
		return;
	}
	if (!b.step && dt__ks_span(&s->ks, b.count, b.keys, &b.lens, &first)) {
		on_many_span(s, worker, h, &b, first);
		return;
	}
	if ((idx = idx_room(s, b.count)) == NULL) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_ENOMEM,
		                "%s of %zu keys: out of memory", op, b.count);
		return;
	}
	if ((err = dt__ks_resolve(&s->ks, op, b.count, b.keys, &b.lens, 0, idx,
	                          &bad))) {
		many_refuse(s, worker, h, err, &b, bad);
		return;
	}
	if (h->cmd == DT_CMD_KV_PULL_MANY) {
		/* (a worker's batched push is answered at its round's end,
		 * before it can pull: nothing of its own is pending) */
		many_answer(s, worker, h->cmd, h->seq, b.answer, idx, b.count);
		return;
	}
	const float *g = (const float *)(const void *)b.vals;

	if (!s->sync) {
		uint64_t t0 = dt__now_ns();

		dt__ks_apply(&s->ks, idx, b.count, g);
		srv_busy(DT_EV_KV_UPDATE, t0, h->key, 0,
		         dt__node_worker_id(s->node, worker));
		s->rounds += b.count;
		many_answer(s, worker, h->cmd, h->seq, b.answer, idx, b.count);
		return;
	}
	push_rounds(s, worker, h, b.answer, idx, 0, b.count, g, &b);
}

void
srv_on_many(kv_server *s, int worker, const dt_msg *m)
{
	on_many(s, worker, m);
	if (s->mparked && s->mp_progress) {
		s->mp_progress = 0; /* (recovery: rounds closed) */
		many_unpark(s);
	}
}

/* ---- the kind's ops ---- */

static int
many_owns(kv_server *s, dt_key key)
{
	return s->ks_on && dt__ks_find(&s->ks, key) != DT_KS_NONE;
}

static int
many_any(kv_server *s)
{
	return s->ks_on && s->ks.nrec;
}

static void
many_set_opt(kv_server *s, const dt_opt *opt)
{
	if (many_any(s))
		dt__ks_set_opt(&s->ks, opt);
}

static void
many_drop(kv_server *s)
{
	if (s->ks_on && s->ks.nrec) {
		size_t b = dt__ks_bytes(&s->ks), n = s->ks.nrec;
		size_t v = (size_t)s->ks.off[n];

		DT_LOG(1,
		       "many-key store: %zu keys, %zu floats, %.1f MiB (%.1f "
		       "bytes per key beside the values)",
		       n, v, (double)b / 1048576.0,
		       (double)(b - 4 * v) / (double)n);
	}
	for (size_t i = 0; i < s->nbreqs; i++) {
		free(s->breqs[i].idx);
		while (s->breqs[i].pulls) {
			mpull *w = s->breqs[i].pulls;

			s->breqs[i].pulls = w->next;
			free(w);
		}
	}
	free(s->breqs);
	s->breqs = NULL;
	s->nbreqs = 0;
	s->breq_free = 0;
	srv_kept_free(s->mparked);
	s->mparked = NULL;
	if (s->ks_on)
		dt__ks_fini(&s->ks);
	s->ks_on = 0;
	s->ks_restored = 0;
}

/* Every worker's replay is over: what still waits for its keys is
 * answered with the error it would have had (s->rejoined is 0 now). */
static void
many_replayed(kv_server *s)
{
	many_unpark(s);
}

/* A new process took worker's place: the answers its predecessor waits
 * for go nowhere (sequence number 0). */
static void
many_peer_restart(kv_server *s, int worker)
{
	for (srv_kept *q = s->mparked; q; q = q->next)
		if (q->worker == worker)
			q->h.seq = 0;
	for (size_t i = 0; i < s->nbreqs; i++)
		if (s->breqs[i].worker == worker)
			s->breqs[i].seq = 0;
}

/* The kind's single-key requests as the router hands them (server.h:
 * single); a snapshot due after one comes after the whole request. */
static int
many_single_op(kv_server *s, int worker, const dt_msg_hdr *h,
               const uint8_t *meta, const float *payload, int streamed)
{
	(void)streamed; /* (only dense keys stream) */
	if (!many_single(s, worker, h, meta, payload))
		return 0;
	if (h->cmd != DT_CMD_KV_INIT)
		srv_maybe_checkpoint(s);
	return 1;
}

/* Where a payload of this kind goes: a batched request of one-length
 * keys whose size matches its header lands in its worker's buffer
 * (srv_on_many checks it whole); a single-key push of a key of the store
 * is received whole, never more than the key's length. */
static int
many_dest(kv_server *s, dt_conn *c, const dt_msg_hdr *h, const uint8_t *meta,
          void **where)
{
	uint32_t r;

	(void)meta;
	if (dt__kv_many_cmd(h->cmd)) {
		/* (a key range's list is its first key and step) */
		uint64_t keys = h->arg2 & DT_KV_KEY_RANGE ? 16 : h->arg0 * 8;

		*where = h->arg1 == 0 || h->arg1 > DT_KS_MAX_LEN ||
		                 h->arg0 > DT_KS_MAX_KEYS
		             ? NULL
		             : srv_rx_lend(s, c, h,
		                           keys + (dt__kv_many_has_vals(h->cmd)
		                                       ? h->arg0 * h->arg1 * 4
		                                       : 0));
		return 1;
	}
	if ((h->cmd != DT_CMD_KV_PUSH && h->cmd != DT_CMD_KV_PUSHPULL) ||
	    !s->ks_on || (r = dt__ks_find(&s->ks, h->key)) == DT_KS_NONE)
		return 0;
	*where =
	    h->payload_len <= dt__ks_len(&s->ks, r) * 4 ? NULL : DT_VAN_DISCARD;
	return 1;
}

/* Its section is the last of a checkpoint (format version 3 added it). */
const srv_kind srv_many_kind = {
    .made_by = "a batched call (dt_kv_init_keys)",
    .noun = "many-key keys",
    .owns = many_owns,
    .single = many_single_op,
    .resume = many_resume,
    .dest = many_dest,
    .set_opt = many_set_opt,
    .any = many_any,
    .count = many_count,
    .snap_bytes = many_snap_bytes,
    .snapshot = many_snapshot,
    .held = many_held,
    .load = many_load,
    .peer_restart = many_peer_restart,
    .replayed = many_replayed,
    .drop = many_drop,
};
