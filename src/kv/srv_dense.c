/*
 * srv_dense.c - the dense store kind on a server: the values of the keys
 * (or the slices of big keys) placed on this server by single-key calls
 * (dt_kv_init, dt_kv_push, dt_kv_pull), their dist_sync rounds and
 * dist_async updates, the optimizer when updates run on the servers, the
 * pushes applied as they stream in, its checkpoint section and its part
 * in recovery.
 *
 * dist_sync: a round of a key collects one push per worker, summed in the
 * key's merge buffer (with one worker the push itself is the sum, with no
 * copy); when every worker has pushed, the update runs
 * once (the optimizer, or "the value is the sum" without one) and only
 * then do the round's pushes get their answers. A worker that pushes the
 * same key again before the round is over is not counted twice: its push
 * waits for the next round. A pull from a worker that has pushed in the
 * current round is answered at the round's end, so it sees its own push;
 * one sent after pushes held for later rounds waits for the last of them.
 * dist_async: each push is applied as it arrives.
 *
 * The router (server.c) hands it the single-key requests of its keys,
 * and of keys no kind holds yet (adopt: an init makes one); it reaches
 * the other kinds only through their ops (srv_home_of).
 *
 * Threads: everything here runs in the node's I/O thread, so a key's
 * updates are atomic by construction and the store needs no lock.
 *
 * Size: a round's pushes, the pushes and pulls held for later rounds,
 * the streamed pushes and the recovery requests all change the same
 * entry through the same private helpers (push_sync, round_done, queue),
 * so they stay one file of about 1,050 lines; its checkpoint section and
 * its stall report, which only read an entry, have files of their own.
 */
#include <stdlib.h>
#include <string.h>

#include "common/table.h"
#include "kv/kv_impl.h"
#include "kv/server.h"
#include "kv/srv_dense.h"

/* Pushes at least this big are applied while they stream in. */
#define STREAM_MIN (256u << 10)

entry *
dense_find(kv_server *s, dt_key key)
{
	dt_hnode *h = dt__table_find(&s->keys, key);

	return h ? DT_CONTAINER_OF(h, entry, hn) : NULL;
}

entry *
dense_insert(kv_server *s, dt_key key)
{
	entry *e;

	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return NULL;
	e->pushed = calloc((size_t)s->nworkers, 1);
	e->applied = calloc((size_t)s->nworkers, sizeof(uint64_t));
	e->nheld = calloc((size_t)s->nworkers, sizeof(uint32_t));
	if (e->pushed == NULL || e->applied == NULL || e->nheld == NULL) {
		free(e->pushed);
		free(e->applied);
		free(e->nheld);
		free(e);
		return NULL;
	}
	e->key = key;
	dt__table_insert(&s->keys, &e->hn, key);
	return e;
}

void
dense_free_entry(entry *e)
{
	while (e->answers) {
		waiter *w = e->answers;
		e->answers = w->next;
		free(w);
	}
	while (e->inits) {
		waiter *w = e->inits;
		e->inits = w->next;
		free(w);
	}
	while (e->later) {
		deferred *d = e->later;
		e->later = d->next;
		free(d->data);
		free(d);
	}
	while (e->pulls) {
		deferred *d = e->pulls;
		e->pulls = d->next;
		free(d);
	}
	srv_kept_free(e->parked);
	free(e->val);
	free(e->merge);
	free(e->state);
	free(e->prev);
	free(e->hold);
	free(e->pushed);
	free(e->applied);
	free(e->nheld);
	free(e);
}

static int
queue(waiter **list, int worker, int cmd, uint64_t seq, uint64_t n,
      uint64_t offset, unsigned enc)
{
	waiter *w = malloc(sizeof(*w)), **p = list;

	if (w == NULL)
		return -1;
	*w = (waiter){worker, cmd, seq, n, offset, enc, NULL};
	while (*p)
		p = &(*p)->next;
	*p = w;
	return 0;
}

/* The end of a dist_sync round: update once, then answer everyone. */
static void push_sync(kv_server *s, entry *e, int worker, int cmd, uint64_t seq,
                      unsigned enc, const float *g, int streamed);

/* e's value is about to change (see reply). */
static void
touch(kv_server *s, entry *e)
{
	dt__node_before_write(s->node, e->val, e->len * sizeof(float));
}

static void unpark(kv_server *s, entry *e);

/* A request answered at the end of the open round (0), or refused for
 * want of memory (-1). */
static int
at_round_end(kv_server *s, entry *e, int worker, int cmd, uint64_t seq,
             unsigned enc)
{
	if (queue(&e->answers, worker, cmd, seq, 0, 0, enc) == 0)
		return 0;
	srv_reply_error(s, worker, cmd, seq, e->key, DT_ENOMEM,
	                "out of memory");
	return -1;
}

/* A dist_sync pull: answered at the end of the round that holds the
 * worker's push, or at once when it has none open. */
static void
answer_pull(kv_server *s, entry *e, int worker, int cmd, uint64_t seq,
            unsigned enc)
{
	if (e->pushed[worker]) {
		at_round_end(s, e, worker, cmd, seq, enc);
		return;
	}
	srv_reply_enc(s, worker, cmd, seq, e->key, e->val, e->len, enc);
}

/*
 * A held push of worker is about to join the open round: the pulls it
 * sent after that push and no other held one are answered at this
 * round's end, with it. (A worker's replay to a restarted server sends
 * several rounds' pushes back to back, then the pull that followed them:
 * the pull must see the round of the last, not the open one.)
 */
static void
release_pulls(kv_server *s, entry *e, int worker)
{
	deferred **p = &e->pulls;

	e->nheld[worker]--;
	while (*p) {
		deferred *d = *p;

		if (d->worker != worker || --d->ahead > 0) {
			p = &d->next;
			continue;
		}
		*p = d->next;
		at_round_end(s, e, worker, d->cmd, d->seq, d->enc);
		free(d);
	}
}

static void
round_done(kv_server *s, entry *e)
{
	uint64_t t0 = dt__now_ns();

	for (int w = 0; w < s->nworkers; w++)
		e->applied[w]++;
	s->rounds++;
	e->npushed = 0;
	memset(e->pushed, 0, (size_t)s->nworkers);
	while (e->answers) {
		waiter *w = e->answers;

		e->answers = w->next;
		srv_reply_enc(s, w->worker, w->cmd, w->seq, e->key,
		              w->cmd == DT_CMD_KV_PUSH ? NULL : e->val, e->len,
		              w->enc);
		free(w);
	}
	srv_busy(DT_EV_KV_REPLY, t0, e->key, 0, -1);
	/* Pushes that came early for this new round join it now. */
	while (e->later && !e->pushed[e->later->worker]) {
		deferred *d = e->later;

		e->later = d->next;
		if (e->later == NULL)
			e->later_last = NULL;
		release_pulls(s, e, d->worker);
		push_sync(s, e, d->worker, d->cmd, d->seq, d->enc, d->data, 0);
		free(d->data);
		free(d);
	}
	srv_maybe_checkpoint(s);
}

static void
finish_round(kv_server *s, entry *e, const float *sum)
{
	uint64_t t0 = dt__now_ns();

	touch(s, e);
	if (e->prev)
		memcpy(e->prev, e->val, e->len * sizeof(float));
	if (s->opt.kind != DT_OPT_NONE) {
		e->steps++;
		dt__opt_apply(&s->opt, e->val, sum, e->state, e->len, e->steps);
	} else {
		memcpy(e->val, sum, e->len * sizeof(float));
	}
	if (sum == e->merge) /* the next round adds into zeros */
		memset(e->merge, 0, e->len * sizeof(float));
	srv_busy(DT_EV_KV_UPDATE, t0, e->key, e->len * sizeof(float), -1);
	round_done(s, e);
}

/*
 * An elastic job's round sum: the pushes added in worker rank order, not
 * in the order they came, so that a run and its replay (the same
 * membership at the same steps) add the same floats in the same order and
 * end bit for bit the same whatever the timing. The merge buffer
 * otherwise.
 */
static const float *
held_sum(kv_server *s, entry *e)
{
	int first = 1;

	if (e->hold == NULL)
		return e->merge;
	for (int w = 0; w < s->nworkers; w++) {
		const float *g = e->hold + (size_t)w * e->len;

		if (!e->pushed[w])
			continue;
		if (first)
			memcpy(e->merge, g, e->len * sizeof(float));
		else
			dt__kv_add(e->merge, g, e->len);
		first = 0;
	}
	return e->merge;
}

/*
 * A push of a sync round. g is the pushed array, or NULL when it was
 * streamed: then payload_chunk already added it into the merge buffer, or
 * (one worker) already applied it to the value.
 */
static void
push_sync(kv_server *s, entry *e, int worker, int cmd, uint64_t seq,
          unsigned enc, const float *g, int streamed)
{
	if (e->pushed[worker]) {
		deferred *d = malloc(sizeof(*d));

		if (d)
			d->data = malloc(e->len * sizeof(float));
		if (d == NULL || d->data == NULL) {
			free(d);
			srv_reply_error(
			    s, worker, cmd, seq, e->key, DT_ENOMEM,
			    "%s of key %llu: out of memory holding a "
			    "second push of this round",
			    dt__kv_op_name(cmd), (unsigned long long)e->key);
			return;
		}
		memcpy(d->data, g, e->len * sizeof(float));
		*d = (deferred){worker, cmd, seq, enc, d->data, 0, NULL};
		/* (at the end in O(1): a replay holds thousands) */
		if (e->later)
			e->later_last->next = d;
		else
			e->later = d;
		e->later_last = d;
		e->nheld[worker]++;
		return;
	}
	if (at_round_end(s, e, worker, cmd, seq, enc))
		return;
	e->pushed[worker] = 1;
	if (e->npushed++ == 0 && s->stall_ns) { /* (the stall report) */
		e->t_open = dt__now_ns();
		e->stall_told = 0;
	}
	if (srv_round_size(s) == 1) { /* the round is this push */
		if (!streamed) {
			finish_round(s, e, g);
			return;
		}
		if (s->opt.kind != DT_OPT_NONE)
			e->steps++;
		round_done(s, e);
		return;
	}
	if (e->hold) /* (elastic: summed at the round's end) */
		memcpy(e->hold + (size_t)worker * e->len, g,
		       e->len * sizeof(float));
	else if (!streamed) {
		uint64_t t0 = dt__now_ns();

		dt__kv_add(e->merge, g, e->len);
		srv_busy(DT_EV_KV_MERGE, t0, e->key, e->len * sizeof(float),
		         dt__node_worker_id(s->node, worker));
	}
	if (e->npushed == srv_round_size(s))
		finish_round(s, e, held_sum(s, e));
}

static void
push_async(kv_server *s, entry *e, int worker, int cmd, uint64_t seq,
           unsigned enc, const float *g)
{
	uint64_t t0 = dt__now_ns();

	touch(s, e);
	if (s->opt.kind != DT_OPT_NONE) {
		e->steps++;
		dt__opt_apply(&s->opt, e->val, g, e->state, e->len, e->steps);
	} else {
		memcpy(e->val, g, e->len * sizeof(float));
	}
	e->applied[worker]++;
	s->rounds++;
	srv_busy(DT_EV_KV_UPDATE, t0, e->key, e->len * sizeof(float),
	         dt__node_worker_id(s->node, worker));
	t0 = dt__now_ns();
	srv_reply_enc(s, worker, cmd, seq, e->key,
	              cmd == DT_CMD_KV_PUSH ? NULL : e->val, e->len, enc);
	srv_busy(DT_EV_KV_REPLY, t0, e->key, 0,
	         dt__node_worker_id(s->node, worker));
	srv_maybe_checkpoint(s);
}

int
dense_alloc(kv_server *s, entry *e, uint64_t n, uint64_t offset, size_t len)
{
	size_t st = dt__opt_state_len(&s->opt, len);

	e->n = n;
	e->offset = offset;
	e->len = len;
	e->val = malloc(DT_MAX(len, 1) * sizeof(float));
	e->merge = s->sync ? calloc(DT_MAX(len, 1), sizeof(float)) : NULL;
	e->state = st ? calloc(st, sizeof(float)) : NULL;
	/* (recovery: a restarted worker may need the round before) */
	e->prev = s->sync && dt__node_recover(s->node)
	              ? malloc(DT_MAX(len, 1) * sizeof(float))
	              : NULL;
	e->hold = s->sync && s->elastic
	              ? malloc(DT_MAX(len, 1) * sizeof(float) *
	                       (size_t)DT_MAX(s->nworkers, 1))
	              : NULL;
	if (s->sync && s->elastic && e->hold == NULL)
		return -1;
	if (!e->val || (s->sync && !e->merge) || (st && !e->state) ||
	    (s->sync && dt__node_recover(s->node) && !e->prev))
		return -1;
	return 0;
}

/*
 * Refuse (1) an init's value that is not whole floats, at least one,
 * inside the declared array: an empty one would make a key of no floats
 * that every later call and checkpoint carries, whatever length it
 * claims.
 */
static int
init_value_bad(kv_server *s, int worker, const dt_msg_hdr *h)
{
	uint64_t len = h->payload_len / sizeof(float);

	if (len && h->payload_len % sizeof(float) == 0 && h->arg1 < h->arg0 &&
	    len <= h->arg0 - h->arg1)
		return 0;
	srv_reply_error(
	    s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
	    "init of key %llu: a value of %llu bytes at offset %llu "
	    "of an array of %llu floats (1 float or more, whole "
	    "floats, inside the array)",
	    (unsigned long long)h->key, (unsigned long long)h->payload_len,
	    (unsigned long long)h->arg1, (unsigned long long)h->arg0);
	return 1;
}

/* A dense key's recovery request (a pull as of a round; a KV_RESUME of a
 * key no kind before this one took) for a key another store kind holds is
 * refused (1), naming the call that made it: that kind's own requests
 * ask for it. */
static int
held_elsewhere(kv_server *s, int worker, const dt_msg_hdr *h)
{
	const srv_kind *home = srv_home_of(s, h->key, &srv_dense_kind);

	if (home == NULL)
		return 0;
	srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESTATE,
	                "%s of key %llu: the key was initialised by %s; "
	                "use its calls for it",
	                dt__kv_op_name(h->cmd), (unsigned long long)h->key,
	                home->made_by);
	return 1;
}

/* KV_INIT: rank 0's value makes the key (or sets it again); the other
 * workers' inits wait for it. */
static void
on_init(kv_server *s, int worker, const dt_msg_hdr *h, const float *payload)
{
	int has_value = (h->arg2 & DT_KV_INIT_HAS_VALUE) != 0;
	size_t len = (size_t)(h->payload_len / sizeof(float));
	entry *e = dense_find(s, h->key);
	const srv_kind *home;

	if ((home = srv_home_of(s, h->key, &srv_dense_kind)) != NULL) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESTATE,
		                "init of key %llu: the key was initialised by "
		                "%s; use its calls for it",
		                (unsigned long long)h->key, home->made_by);
		return;
	}
	if (has_value && payload == NULL && h->payload_len) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		                "init of key %llu: slice too large",
		                (unsigned long long)h->key);
		return;
	}
	if (has_value && init_value_bad(s, worker, h))
		return;
	if (e && e->initialised) {
		size_t want = has_value ? len : e->len;
		if (e->n != h->arg0 || e->offset != h->arg1 || e->len != want) {
			srv_reply_error(s, worker, h->cmd, h->seq, h->key,
			                DT_ESIZE,
			                "init of key %llu: length %llu != "
			                "initialised length %llu",
			                (unsigned long long)h->key,
			                (unsigned long long)h->arg0,
			                (unsigned long long)e->n);
			return;
		}
		if (has_value && e->restored) {
			/* The value of a checkpoint wins: the job resumes
			 * from it, and the workers pull it. */
		} else if (has_value) { /* rank 0 sets the value again */
			touch(s, e);
			memcpy(e->val, payload, len * sizeof(float));
			e->steps = 0;
			if (e->state)
				memset(e->state, 0,
				       dt__opt_state_len(&s->opt, e->len) *
				           sizeof(float));
		}
		srv_reply(s, worker, h->cmd, h->seq, h->key, NULL, 0);
		return;
	}
	if (e == NULL && (e = dense_insert(s, h->key)) == NULL) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
		                "init of key %llu: out of memory",
		                (unsigned long long)h->key);
		return;
	}
	if (!has_value) { /* wait for rank 0's value */
		if (queue(&e->inits, worker, h->cmd, h->seq, h->arg0, h->arg1,
		          0))
			srv_reply_error(s, worker, h->cmd, h->seq, h->key,
			                DT_ENOMEM, "out of memory");
		return;
	}
	if (dense_alloc(s, e, h->arg0, h->arg1, len)) {
		srv_reply_error(
		    s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
		    "init of key %llu: out of memory for %zu floats",
		    (unsigned long long)h->key, len);
		return;
	}
	memcpy(e->val, payload, len * sizeof(float));
	e->initialised = 1;
	s->ninit++;
	s->ndense++;
	DT_LOG(2, "key %llu initialised: %zu floats at offset %llu of %llu",
	       (unsigned long long)h->key, len, (unsigned long long)h->arg1,
	       (unsigned long long)h->arg0);
	srv_reply(s, worker, h->cmd, h->seq, h->key, NULL, 0);
	while (e->inits) {
		waiter *w = e->inits;

		e->inits = w->next;
		if (w->n != e->n || w->offset != e->offset)
			srv_reply_error(
			    s, w->worker, w->cmd, w->seq, e->key, DT_ESIZE,
			    "init of key %llu: length %llu != "
			    "initialised length %llu",
			    (unsigned long long)e->key,
			    (unsigned long long)w->n, (unsigned long long)e->n);
		else
			srv_reply(s, w->worker, w->cmd, w->seq, e->key, NULL,
			          0);
		free(w);
	}
	unpark(s, e);
}

/* Check a push or pull against the key's slice, and its encodings
 * (*kind, *t: the push's); NULL + error if wrong. */
static entry *
check_access(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta,
             int with_data, dt_quant_kind *kind, float *t)
{
	entry *e = dense_find(s, h->key);
	const char *op = dt__kv_op_name(h->cmd);
	dt_err err;

	if (e == NULL &&
	    (h->cmd == DT_CMD_KV_RESUME || (h->arg2 & DT_KV_AT_ROUND)) &&
	    held_elsewhere(s, worker, h))
		return NULL;
	if (e == NULL || !e->initialised) {
		srv_reply_error(
		    s, worker, h->cmd, h->seq, h->key, DT_ENOKEY,
		    "%s of key %llu: unknown key (never initialised "
		    "with init)",
		    op, (unsigned long long)h->key);
		return NULL;
	}
	if ((err = dt__kv_push_check(h, meta, e->len, kind, t)) &&
	    err != DT_ESIZE) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, err,
		                "%s of key %llu: %s", op,
		                (unsigned long long)h->key, dt_errmsg());
		return NULL;
	}
	if (h->arg0 != e->n || h->arg1 != e->offset) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		                "%s of key %llu: length %llu != initialised "
		                "length %llu",
		                op, (unsigned long long)h->key,
		                (unsigned long long)h->arg0,
		                (unsigned long long)e->n);
		return NULL;
	}
	if (with_data && err) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, err,
		                "%s of key %llu: %s", op,
		                (unsigned long long)h->key, dt_errmsg());
		return NULL;
	}
	return e;
}

/*
 * Recovery: the value after round r (meta), for a worker that took a lost
 * one's place and computes that round's step again. In dist_sync the
 * key's rounds wait for this worker, so the key is at round r (its push
 * of the next round not here yet, or here and the round still open) or
 * at r + 1 (the round closed: the value before it is prev). dist_async
 * has no rounds to keep: the value now.
 */
static void
pull_at(kv_server *s, entry *e, int worker, const dt_msg_hdr *h,
        const uint8_t *meta, unsigned enc)
{
	uint64_t r = dt__get_u64(meta), now = e->applied[worker];

	if (!s->sync || r == now) {
		srv_reply_enc(s, worker, h->cmd, h->seq, h->key, e->val, e->len,
		              enc);
		return;
	}
	if (r + 1 == now && e->prev) {
		srv_reply_enc(s, worker, h->cmd, h->seq, h->key, e->prev,
		              e->len, enc);
		return;
	}
	srv_reply_error(
	    s, worker, h->cmd, h->seq, h->key, DT_ESTATE,
	    "pull of key %llu as of round %llu: the key is at round "
	    "%llu, and only the value of the round before is kept",
	    (unsigned long long)h->key, (unsigned long long)r,
	    (unsigned long long)now);
}

/* Recovery: how many pushes of this key slice from the worker the
 * store holds (applied, in the round open now, or waiting for the next):
 * a restarted worker does not send those again (dt_kv_resume). */
static void
on_resume(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta)
{
	dt_quant_kind kind;
	float t;
	entry *e = check_access(s, worker, h, meta, 0, &kind, &t);
	uint64_t have;

	if (e == NULL)
		return;
	have = e->applied[worker] + (s->sync && e->pushed[worker]);
	for (deferred *d = e->later; d; d = d->next)
		have += d->worker == worker;
	srv_reply_held(s, worker, h, have);
}

/* A pull behind this worker's held pushes: answered with the round the
 * last of them joins (release_pulls). */
static void
hold_pull(kv_server *s, entry *e, int worker, int cmd, uint64_t seq,
          unsigned enc)
{
	deferred *d = malloc(sizeof(*d)), **p = &e->pulls;

	if (d == NULL) {
		srv_reply_error(s, worker, cmd, seq, e->key, DT_ENOMEM,
		                "pull of key %llu: out of memory holding it",
		                (unsigned long long)e->key);
		return;
	}
	*d = (deferred){worker, cmd, seq, enc, NULL, e->nheld[worker], NULL};
	while (*p)
		p = &(*p)->next;
	*p = d;
}

/* A push, pushpull or pull. */
static void
on_data(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta,
        const float *payload, int streamed)
{
	unsigned enc = DT_KV_ENC_ANSWER(h->arg2);
	dt_quant_kind kind;
	float t;
	entry *e;
	dt_err err;

	if (h->cmd == DT_CMD_KV_PULL) {
		if ((e = check_access(s, worker, h, meta, 0, &kind, &t)) ==
		    NULL)
			return;
		if (h->arg2 & DT_KV_AT_ROUND) {
			pull_at(s, e, worker, h, meta, enc);
			return;
		}
		if (s->sync && e->nheld[worker])
			hold_pull(s, e, worker, h->cmd, h->seq, enc);
		else if (s->sync)
			answer_pull(s, e, worker, h->cmd, h->seq, enc);
		else
			srv_reply_enc(s, worker, h->cmd, h->seq, h->key, e->val,
			              e->len, enc);
		return;
	}
	if ((e = check_access(s, worker, h, meta, 1, &kind, &t)) == NULL)
		return;
	if (payload == NULL && !streamed && h->payload_len) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		                "%s of key %llu: payload dropped",
		                dt__kv_op_name(h->cmd),
		                (unsigned long long)h->key);
		return;
	}
	if (kind != DT_QUANT_NONE) {
		/* Checked whole before it counts: a body that means nothing
		 * is the sender's error, and the round goes on. */
		if (!dt__buf_reserve(&s->dec, &s->dec_cap,
		                     e->len * sizeof(float))) {
			srv_reply_error(
			    s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
			    "%s of key %llu: out of memory decoding it",
			    dt__kv_op_name(h->cmd), (unsigned long long)h->key);
			return;
		}
		if ((err = dt__quant_decode(kind, t, (const uint8_t *)payload,
		                            e->len, (float *)(void *)s->dec))) {
			srv_reply_error(
			    s, worker, h->cmd, h->seq, h->key, err,
			    "%s of key %llu: %s", dt__kv_op_name(h->cmd),
			    (unsigned long long)h->key, dt_errmsg());
			return;
		}
		payload = (const float *)(void *)s->dec;
	}
	if (s->sync)
		push_sync(s, e, worker, h->cmd, h->seq, enc, payload, streamed);
	else
		push_async(s, e, worker, h->cmd, h->seq, enc, payload);
}

/* Recovery: a request for a key with no value yet waits for its INIT
 * (1), within the same bounds as the rest (the payload's size is the
 * message's, already under DT_MAX_MESSAGE). */
static int
park(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta,
     const float *payload)
{
	entry *e = dense_find(s, h->key);

	if ((e && e->initialised) ||
	    (e == NULL && srv_home_of(s, h->key, &srv_dense_kind)))
		return 0; /* (another kind's key: its ops serve it) */
	if ((e == NULL && (e = dense_insert(s, h->key)) == NULL) ||
	    srv_keep(&e->parked, worker, h, meta, payload))
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
		                "out of memory");
	return 1;
}

void
srv_unpark_key(kv_server *s, dt_key key)
{
	entry *e = dt__table_count(&s->keys) ? dense_find(s, key) : NULL;
	srv_kept *q;

	if (e == NULL || e->initialised || e->inits || e->later || e->pulls)
		return;
	q = e->parked;
	e->parked = NULL;
	dt__table_remove(&s->keys, &e->hn);
	dense_free_entry(e);
	while (q) {
		srv_kept *next = q->next;

		q->next = NULL;
		if (q->h.cmd == DT_CMD_KV_RESUME)
			srv_resume(s, q->worker, &q->h, q->meta);
		else
			srv_single(s, q->worker, &q->h, q->meta, q->payload, 0);
		srv_kept_free(q);
		q = next;
	}
}

/* The key has its value now: what waited for it, in order. */
static void
unpark(kv_server *s, entry *e)
{
	while (e->parked) {
		srv_kept *q = e->parked;

		e->parked = q->next;
		q->next = NULL;
		if (q->h.cmd == DT_CMD_KV_RESUME)
			on_resume(s, q->worker, &q->h, q->meta);
		else
			on_data(s, q->worker, &q->h, q->meta, q->payload, 0);
		srv_kept_free(q);
	}
}

/* ---- the dense kind's ops ---- */

/* (an entry made by a request parked before its key's init is no key
 * yet: another kind's init may make it) */
static int
dense_owns(kv_server *s, dt_key key)
{
	entry *e = dt__table_count(&s->keys) ? dense_find(s, key) : NULL;

	return e && e->initialised;
}

static void
dense_peer_restart(kv_server *s, int worker)
{
	dt_table_iter it;

	for (dt_hnode *h = dt__table_first(&s->keys, &it); h;
	     h = dt__table_next(&it)) {
		entry *e = DT_CONTAINER_OF(h, entry, hn);

		for (waiter *w = e->answers; w; w = w->next)
			if (w->worker == worker)
				w->seq = 0;
		for (waiter *w = e->inits; w; w = w->next)
			if (w->worker == worker)
				w->seq = 0;
		for (deferred *d = e->later; d; d = d->next)
			if (d->worker == worker)
				d->seq = 0;
		for (deferred *d = e->pulls; d; d = d->next)
			if (d->worker == worker)
				d->seq = 0;
		for (srv_kept *q = e->parked; q; q = q->next)
			if (q->worker == worker)
				q->h.seq = 0;
	}
}

static void
dense_replayed(kv_server *s)
{
	dt_table_iter it;

	for (dt_hnode *h = dt__table_first(&s->keys, &it); h;
	     h = dt__table_next(&it)) {
		entry *e = DT_CONTAINER_OF(h, entry, hn);

		if (!e->initialised)
			unpark(s, e); /* each answered: unknown key */
	}
}

/* Whether a key has a value made in dist_async: it has no merge buffer
 * (nor a recovery copy), so dist_sync rounds cannot run on it. */
static int
async_keys(kv_server *s)
{
	dt_table_iter it;

	for (dt_hnode *h = dt__table_first(&s->keys, &it); h;
	     h = dt__table_next(&it)) {
		entry *e = DT_CONTAINER_OF(h, entry, hn);

		if (e->initialised && e->merge == NULL)
			return 1;
	}
	return 0;
}

/* A request of this kind (its key's, or one no kind holds): parked on a
 * rejoined server until the key's init comes, else served. */
static void
dense_serve(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta,
            const float *payload, int streamed)
{
	if (s->rejoined && h->cmd != DT_CMD_KV_INIT &&
	    park(s, worker, h, meta, payload))
		return;
	if (h->cmd == DT_CMD_KV_INIT)
		on_init(s, worker, h, payload);
	else if (h->cmd == DT_CMD_KV_RESUME)
		on_resume(s, worker, h, meta);
	else
		on_data(s, worker, h, meta, payload, streamed);
}

/* (an entry made by a parked request is this kind's too: what waits in
 * it keeps its order) */
static int
dense_single(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta,
             const float *payload, int streamed)
{
	if (dt__table_count(&s->keys) == 0 || dense_find(s, h->key) == NULL)
		return 0;
	dense_serve(s, worker, h, meta, payload, streamed);
	return 1;
}

static int
dense_resume(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta)
{
	return dense_single(s, worker, h, meta, NULL, 0);
}

/*
 * Where a push's payload goes: dropped (without buffering) when its size
 * is wrong for its key. Payloads are never received straight into the
 * merge buffer: pushes from several workers arrive interleaved, and a
 * round may end (and the merge buffer be reused) while another worker's
 * payload is still streaming in.
 */
static int
dense_dest(kv_server *s, dt_conn *c, const dt_msg_hdr *h, const uint8_t *meta,
           void **where)
{
	int worker = (int)h->sender - 1 - s->nservers;
	dt_quant_kind kind;
	float t;
	entry *e;

	(void)c;
	if ((h->cmd != DT_CMD_KV_PUSH && h->cmd != DT_CMD_KV_PUSHPULL) ||
	    (e = dense_find(s, h->key)) == NULL)
		return 0;
	if (!e->initialised) /* parked until its INIT (park), or refused */
		*where = s->rejoined ? NULL : DT_VAN_DISCARD;
	else if (DT_KV_ENC_PUSH(h->arg2) != DT_QUANT_NONE) {
		/* Compressed: received whole (on_data checks and decodes
		 * it); never more than its kind's size for the key. */
		size_t want = dt__quant_size(
		    (dt_quant_kind)DT_KV_ENC_PUSH(h->arg2), e->len);

		*where = want && h->payload_len == want ? NULL : DT_VAN_DISCARD;
	} else if (h->payload_len != e->len * sizeof(float))
		*where = DT_VAN_DISCARD;
	/*
	 * A big push of a worker that has not pushed in this round is
	 * applied as it streams in, piece by piece while the piece is still
	 * in cache: added into the merge buffer (which is all zeros at the
	 * start of a round), or - when the push is the whole round (one
	 * worker, whose next request comes after this one) - given to the
	 * optimizer directly. The round cannot end meanwhile: it waits for
	 * this worker's push. dist_async does not stream: there a pull from
	 * another worker must never see half a push.
	 */
	else if (s->sync && !s->elastic && h->payload_len >= STREAM_MIN &&
	         worker >= 0 && worker < s->nworkers && h->arg0 == e->n &&
	         h->arg1 == e->offset && !e->pushed[worker] &&
	         dt__kv_push_check(h, meta, e->len, &kind, &t) == DT_OK)
		*where = DT_VAN_STREAM;
	else
		*where = NULL;
	return 1;
}

/* A piece of a streamed push (dense_dest): into the merge buffer, or
 * (one worker) through the optimizer into the value. */
static int
dense_chunk(kv_server *s, const dt_msg_hdr *h, const float *g, size_t i0,
            size_t cnt, uint64_t off)
{
	entry *e = dense_find(s, h->key);

	if (e == NULL)
		return 0;
	if (s->nworkers > 1) {
		uint64_t t0 = dt__now_ns();

		dt__kv_add(e->merge + i0, g, cnt);
		srv_busy_part(DT_EV_KV_MERGE, t0, h->key, cnt * sizeof(float),
		              (int)h->sender, off == 0);
		return 1;
	}
	touch(s, e);
	if (e->prev && off == 0) /* (the round before, as finish_round) */
		memcpy(e->prev, e->val, e->len * sizeof(float));
	if (s->opt.kind != DT_OPT_NONE) {
		dt__opt_apply_range(&s->opt, e->val, g, e->state, e->len, i0,
		                    cnt, e->steps + 1);
	} else {
		memcpy(e->val + i0, g, cnt * sizeof(float));
	}
	return 1;
}

/* The requests held in list (pushes for later rounds, or pulls behind
 * them), each refused: its round was dropped. */
static void
drop_held(kv_server *s, entry *e, deferred **list, const char *why)
{
	while (*list) {
		deferred *d = *list;

		*list = d->next;
		srv_reply_error(s, d->worker, d->cmd, d->seq, e->key,
		                DT_EMEMBERSHIP, "%s of key %llu: dropped: %s",
		                dt__kv_op_name(d->cmd),
		                (unsigned long long)e->key, why);
		free(d->data);
		free(d);
	}
}

/*
 * An elastic job's membership changed: every open round is dropped -
 * its merge, its pushes and the requests waiting for its end, answered
 * DT_EMEMBERSHIP - and so are second pushes waiting for the next one. The
 * values stay: in dist_sync they are only the last rounds' sums, and the
 * workers go back to their own commit.
 */
static void
dense_discard(kv_server *s, const char *why)
{
	dt_table_iter it;
	size_t dropped = 0;

	for (dt_hnode *h = dt__table_first(&s->keys, &it); h;
	     h = dt__table_next(&it)) {
		entry *e = DT_CONTAINER_OF(h, entry, hn);

		if (!e->initialised || (e->npushed == 0 && !e->later))
			continue;
		dropped++;
		while (e->answers) {
			waiter *w = e->answers;

			e->answers = w->next;
			srv_reply_error(
			    s, w->worker, w->cmd, w->seq, e->key,
			    DT_EMEMBERSHIP,
			    "%s of key %llu: its round was dropped: "
			    "%s",
			    dt__kv_op_name(w->cmd), (unsigned long long)e->key,
			    why);
			free(w);
		}
		drop_held(s, e, &e->later, why);
		e->later_last = NULL;
		drop_held(s, e, &e->pulls, why);
		memset(e->nheld, 0, (size_t)s->nworkers * sizeof(uint32_t));
		if (e->merge)
			memset(e->merge, 0, e->len * sizeof(float));
		e->npushed = 0;
		memset(e->pushed, 0, (size_t)s->nworkers);
	}
	if (dropped)
		DT_LOG(1, "%zu open rounds dropped: %s", dropped, why);
}

/* Dense keys made in dist_async have no merge buffers (nor recovery
 * copies) for dist_sync rounds; the other way round is fine. */
static int
dense_takes_mode(kv_server *s, int sync)
{
	return !(sync && !s->sync && async_keys(s));
}

/* Its section is the first of a checkpoint. */
const srv_kind srv_dense_kind = {
    .made_by = "a single-key call (dt_kv_init)",
    .noun = "keys",
    .owns = dense_owns,
    .single = dense_single,
    .adopt = dense_serve,
    .resume = dense_resume,
    .dest = dense_dest,
    .chunk = dense_chunk,
    .takes_mode = dense_takes_mode,
    .count = dense_count,
    .snap_bytes = dense_snap_bytes,
    .snapshot = dense_snapshot,
    .held = dense_held,
    .load = dense_load,
    .peer_restart = dense_peer_restart,
    .replayed = dense_replayed,
    .drop = dense_drop,
    .discard = dense_discard,
    .describe = dense_describe,
    .stalled = dense_stalled,
};
