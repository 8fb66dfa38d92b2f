/*
 * server.c - a parameter server's store: the values of the keys (or the
 * slices of big keys) placed on this server, dist_sync rounds, dist_async
 * updates, and the optimizer when updates run on the servers.
 *
 * dist_sync: a round of a key collects one push per worker, summed in the
 * key's merge buffer (with one worker the push itself is the sum, with no
 * copy); when every worker has pushed, the update runs
 * once (the optimizer, or "the value is the sum" without one) and only
 * then do the round's pushes get their answers. A worker that pushes the
 * same key again before the round is over is not counted twice: its push
 * waits for the next round. A pull from a worker that has pushed in the
 * current round is answered at the round's end, so it sees its own push.
 * dist_async: each push is applied as it arrives.
 *
 * Threads: everything here runs in the node's I/O thread, so a key's
 * updates are atomic by construction and the store needs no lock.
 *
 * Layout: the store kinds are behind one ops table (server.h):
 * checkpoints, rejoin, the mode and optimizer settings, the check of
 * which store holds a key and the single-key requests for another kind's
 * keys loop over them. Row tables live in rserver.c, the many-key store's
 * requests in srv_many.c, the answers in srv_reply.c.
 *
 * Size: two ideas remain here, over 1,000 lines together: the message
 * router with the checkpoint writer, and the dense kind. They are not
 * split yet because the dense kind's rounds, the router's streamed pushes
 * (payload_dest, payload_chunk) and the checkpoint snapshot share the
 * dense key table without an interface; moving the dense kind into a file
 * of its own is what remains of the split.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/table.h"
#include "kv/kstore.h"
#include "kv/kv_impl.h"
#include "kv/rstore.h"
#include "kv/server.h"

/* Pushes at least this big are applied while they stream in. */
#define STREAM_MIN (256u << 10)

typedef struct waiter {
	int worker; /* rank */
	int cmd;
	uint64_t seq;
	uint64_t n, offset; /* what an INIT asked for */
	unsigned enc;       /* a pull's or pushpull's answer encoding */
	struct waiter *next;
} waiter;

typedef struct deferred {
	int worker;
	int cmd;
	uint64_t seq;
	unsigned enc; /* the answer's encoding */
	float *data;  /* the push, decoded */
	struct deferred *next;
} deferred;

/* A request for a key not initialised yet, on a server that took a lost
 * one's place: the workers' replays come in any order, and the INIT (from
 * worker 0's) may come after another worker's pushes. */
typedef struct parked {
	dt_msg_hdr h;
	int worker;
	uint8_t *meta;
	float *data;
	struct parked *next;
} parked;

typedef struct entry {
	dt_key key;
	uint64_t n;      /* the whole array's length */
	uint64_t offset; /* of this server's slice */
	size_t len;      /* of the slice */
	int initialised;
	float *val;
	float *merge;
	float *state;
	float *prev; /* recovery, dist_sync: the value before the last round
	                (a restarted worker recomputes that round) */
	uint64_t steps;
	uint64_t *applied; /* by worker rank: its pushes in val (checkpoints) */
	int restored;      /* loaded from a checkpoint: an INIT keeps val */
	int npushed;
	uint8_t *pushed; /* by worker rank, this round */
	waiter *answers; /* answered at the end of the round */
	waiter *inits;   /* INITs waiting for rank 0's value */
	deferred *later; /* second pushes in a round, oldest first */
	parked *parked;  /* before its INIT, oldest first (recovery) */
	dt_hnode hn;     /* in keys */
} entry;

/* A snapshot of the store on its way to disk. */
struct ckpt_job {
	uint8_t *buf;
	size_t len;
	uint64_t number;
	/* What the workers are told once it is on disk (recovery): its
	 * keys, and each key's pushes of each worker in it. */
	size_t nkeys;
	dt_key *keys;
	uint64_t *applied; /* nkeys x nworkers */
};

static entry *
find(kv_server *s, dt_key key)
{
	dt_hnode *h = dt__table_find(&s->keys, key);

	return h ? DT_CONTAINER_OF(h, entry, hn) : NULL;
}

static entry *
insert(kv_server *s, dt_key key)
{
	entry *e;

	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return NULL;
	e->pushed = calloc((size_t)s->nworkers, 1);
	e->applied = calloc((size_t)s->nworkers, sizeof(uint64_t));
	if (e->pushed == NULL || e->applied == NULL) {
		free(e->pushed);
		free(e->applied);
		free(e);
		return NULL;
	}
	e->key = key;
	dt__table_insert(&s->keys, &e->hn, key);
	return e;
}

static void
free_entry(entry *e)
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
	while (e->parked) {
		parked *q = e->parked;
		e->parked = q->next;
		free(q->meta);
		free(q->data);
		free(q);
	}
	free(e->val);
	free(e->merge);
	free(e->state);
	free(e->prev);
	free(e->pushed);
	free(e->applied);
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
 * A push of a sync round. g is the pushed array, or NULL when it was
 * streamed: then payload_chunk already added it into the merge buffer, or
 * (one worker) already applied it to the value.
 */
static void
push_sync(kv_server *s, entry *e, int worker, int cmd, uint64_t seq,
          unsigned enc, const float *g, int streamed)
{
	if (e->pushed[worker]) {
		deferred *d = malloc(sizeof(*d)), **p = &e->later;

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
		*d = (deferred){worker, cmd, seq, enc, d->data, NULL};
		while (*p)
			p = &(*p)->next;
		*p = d;
		return;
	}
	if (queue(&e->answers, worker, cmd, seq, 0, 0, enc)) {
		srv_reply_error(s, worker, cmd, seq, e->key, DT_ENOMEM,
		                "out of memory");
		return;
	}
	e->pushed[worker] = 1;
	e->npushed++;
	if (s->nworkers == 1) { /* the round is this push */
		if (!streamed) {
			finish_round(s, e, g);
			return;
		}
		if (s->opt.kind != DT_OPT_NONE)
			e->steps++;
		round_done(s, e);
		return;
	}
	if (!streamed) {
		uint64_t t0 = dt__now_ns();

		dt__kv_add(e->merge, g, e->len);
		srv_busy(DT_EV_KV_MERGE, t0, e->key, e->len * sizeof(float),
		         dt__node_worker_id(s->node, worker));
	}
	if (e->npushed == s->nworkers)
		finish_round(s, e, e->merge);
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

static int
alloc_value(kv_server *s, entry *e, uint64_t n, uint64_t offset, size_t len)
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

/* A recovery request (KV_RESUME, a pull as of a round) for a key another
 * store kind holds is refused (1), naming the call that made it: only
 * dense keys keep what a restarted worker asks for. */
static int
held_elsewhere(kv_server *s, int worker, const dt_msg_hdr *h)
{
	const srv_kind *home = srv_home_of(s, h->key, &srv_dense_kind);

	if (home == NULL)
		return 0;
	srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESTATE,
	                "%s of key %llu: the key was initialised by %s, "
	                "which keeps nothing for a restarted worker",
	                dt__kv_op_name(h->cmd), (unsigned long long)h->key,
	                home->made_by);
	return 1;
}

/* A single-key request (init, push, pull, pushpull) for a key of another
 * store kind that serves such requests: served there (1). */
static int
single_elsewhere(kv_server *s, int worker, const dt_msg_hdr *h,
                 const uint8_t *meta, const float *payload)
{
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->single &&
		    (*kind)->single(s, worker, h, meta, payload))
			return 1;
	return 0;
}

static void
on_init(kv_server *s, int worker, const dt_msg *m)
{
	const dt_msg_hdr *h = &m->hdr;
	int has_value = (h->arg2 & DT_KV_INIT_HAS_VALUE) != 0;
	size_t len = (size_t)(h->payload_len / sizeof(float));
	entry *e = find(s, h->key);
	const srv_kind *home;

	if (e == NULL && single_elsewhere(s, worker, h, NULL, m->payload))
		return;
	if ((home = srv_home_of(s, h->key, &srv_dense_kind)) != NULL) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESTATE,
		                "init of key %llu: the key was initialised by "
		                "%s; use its calls for it",
		                (unsigned long long)h->key, home->made_by);
		return;
	}
	if (has_value && m->payload == NULL && h->payload_len) {
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
			memcpy(e->val, m->payload, len * sizeof(float));
			e->steps = 0;
			if (e->state)
				memset(e->state, 0,
				       dt__opt_state_len(&s->opt, e->len) *
				           sizeof(float));
		}
		srv_reply(s, worker, h->cmd, h->seq, h->key, NULL, 0);
		return;
	}
	if (e == NULL && (e = insert(s, h->key)) == NULL) {
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
	if (alloc_value(s, e, h->arg0, h->arg1, len)) {
		srv_reply_error(
		    s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
		    "init of key %llu: out of memory for %zu floats",
		    (unsigned long long)h->key, len);
		return;
	}
	memcpy(e->val, m->payload, len * sizeof(float));
	e->initialised = 1;
	s->ninit++;
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
	entry *e = find(s, h->key);
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

/* ---- checkpoints ---- */

static void
job_free(ckpt_job *job)
{
	if (job == NULL)
		return;
	free(job->buf);
	free(job->keys);
	free(job->applied);
	free(job);
}

/*
 * Recovery: tell each worker which of its pushes a checkpoint holds
 * (KV_CKPT_DONE: u64 number, u64 count, then count x (u64 key, u64
 * pushes)); it keeps a copy of the later ones to send again should this
 * server be restarted from that file. arg2 bit 0: this server was just
 * restarted from it (or from nothing: count 0), and the later pushes are
 * wanted now.
 */
static void
tell_workers(kv_server *s, uint64_t number, size_t nkeys, const dt_key *keys,
             const uint64_t *applied, int restarted)
{
	for (int w = 0; w < s->nworkers; w++) {
		dt_wbuf b;
		dt_msg_hdr h = {.cmd = DT_CMD_KV_CKPT_DONE,
		                .flags = DT_F_REQUEST,
		                .arg2 = restarted ? 1u : 0u};

		dt__wbuf_init(&b);
		dt__wbuf_u64(&b, number);
		dt__wbuf_u64(&b, nkeys);
		for (size_t k = 0; k < nkeys; k++) {
			dt__wbuf_u64(&b, keys[k]);
			dt__wbuf_u64(
			    &b, applied[k * (size_t)s->nworkers + (size_t)w]);
		}
		if (dt__wbuf_err(&b) == DT_OK)
			(void)dt__node_send(s->node,
			                    dt__node_worker_id(s->node, w), &h,
			                    b.data, (uint32_t)b.len, NULL, 0);
		dt__wbuf_fini(&b);
	}
}

/* A checkpoint written since the last call: tell the workers (I/O
 * thread). */
static void
announce(kv_server *s)
{
	ckpt_job *job;

	if (s->ck_dir == NULL || !dt__node_recover(s->node))
		return;
	pthread_mutex_lock(&s->ck_mu);
	job = s->ck_ok;
	s->ck_ok = NULL;
	pthread_mutex_unlock(&s->ck_mu);
	if (job == NULL)
		return;
	tell_workers(s, job->number, job->nkeys, job->keys, job->applied, 0);
	job_free(job);
}

/* What the store's kinds hold, for the workers: each record's key and
 * the pushes of each worker in it (*keys and *applied malloc'd); DT_ENOMEM
 * when there is no room. */
static dt_err
held_all(kv_server *s, size_t *n, dt_key **keys, uint64_t **applied)
{
	size_t total = 0, k = 0;

	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->count)
			total += (size_t)(*kind)->count(s);
	*keys = malloc(sizeof(dt_key) * DT_MAX(total, 1));
	*applied =
	    malloc(sizeof(uint64_t) * DT_MAX(total, 1) * (size_t)s->nworkers);
	if (*keys == NULL || *applied == NULL) {
		free(*keys);
		free(*applied);
		*keys = NULL;
		*applied = NULL;
		return DT_ENOMEM;
	}
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++) {
		if ((*kind)->count == NULL)
			continue;
		(*kind)->held(s, *keys + k, *applied + k * (size_t)s->nworkers);
		k += (size_t)(*kind)->count(s);
	}
	*n = total;
	return DT_OK;
}

/* Recovery: this server took a lost one's place. Its store is the last
 * checkpoint (or empty); each worker hears what it holds of its pushes
 * and sends the rest again. */
static dt_err
rejoin(kv_server *s)
{
	size_t n;
	dt_key *keys;
	uint64_t *applied;

	if (held_all(s, &n, &keys, &applied))
		return dt__fail(DT_ENOMEM, "rejoining: out of memory");
	dt__log(0,
	        "taking server %d's place with %zu keys and tables "
	        "(checkpoint #%llu); the workers send again what came after",
	        s->rank, n, (unsigned long long)s->ck_number);
	tell_workers(s, s->ck_number, n, keys, applied, 1);
	free(keys);
	free(applied);
	return DT_OK;
}

/* Copy the store, in the file's format, and hand it to the writer; the
 * number it will have on disk. Runs in the I/O thread: the store does not
 * change meanwhile, and each kind writes its records as they are between
 * two rounds (a round's pushes so far are in merge buffers, not in the
 * values, and are not counted as applied). */
static dt_err
snapshot(kv_server *s, uint64_t *number)
{
	uint64_t t0 = dt__now_ns();
	dt_wbuf w;
	ckpt_job *job;
	dt_err err;
	dt_ckpt_head head = {.rank = (uint32_t)s->rank,
	                     .nservers = (uint32_t)s->nservers,
	                     .nworkers = (uint32_t)s->nworkers,
	                     .sync = s->sync,
	                     .opt = s->opt,
	                     .number = s->ck_number + 1,
	                     .rounds = s->rounds,
	                     .split = s->ck_split};
	/* One allocation of the file's size (header, sections, trailer). */
	size_t size = 256 + DT_CKPT_TRAILER;

	memcpy(head.placement, s->ck_placement, sizeof(head.placement));

	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->snapshot)
			size += (*kind)->snap_bytes(s);
	dt__wbuf_init(&w);
	dt__wbuf_reserve(&w, size);
	dt__ckpt_begin(&w, &head);
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->snapshot)
			(*kind)->snapshot(s, &w);
	dt__wbuf_reserve(&w, DT_CKPT_TRAILER); /* (the writer's) */
	if ((err = dt__wbuf_err(&w)) != DT_OK ||
	    (job = calloc(1, sizeof(*job))) == NULL) {
		dt__wbuf_fini(&w);
		return err ? err
		           : dt__fail(DT_ENOMEM, "checkpoint: out of memory");
	}
	job->buf = w.data; /* heap (reserved): taken over, not freed here */
	job->len = w.len;
	if (dt__node_recover(s->node) &&
	    held_all(s, &job->nkeys, &job->keys, &job->applied))
		job->nkeys = 0; /* (the workers keep their copies longer) */
	job->number = ++s->ck_number;
	s->ck_rounds_at = s->rounds;
	s->ck_last_ns = dt__now_ns();
	s->ck_snap_ns += s->ck_last_ns - t0;
	pthread_mutex_lock(&s->ck_mu);
	if (s->ck_next) /* not begun yet: this newer one replaces it */
		job_free(s->ck_next);
	s->ck_next = job;
	pthread_cond_broadcast(&s->ck_cv);
	pthread_mutex_unlock(&s->ck_mu);
	*number = job->number;
	return DT_OK;
}

static void *
writer_main(void *arg)
{
	kv_server *s = arg;

	pthread_mutex_lock(&s->ck_mu);
	for (;;) {
		ckpt_job *job = s->ck_next;

		if (job == NULL && s->ck_stop)
			break;
		if (job == NULL) {
			pthread_cond_wait(&s->ck_cv, &s->ck_mu);
			continue;
		}
		s->ck_next = NULL;
		pthread_mutex_unlock(&s->ck_mu);
		uint64_t t0 = dt__now_ns();
		job->len = dt__ckpt_seal(job->buf, job->len);
		dt_err err =
		    dt__ckpt_write(s->ck_dir, s->ck_name, job->buf, job->len);
		uint64_t dt = dt__now_ns() - t0;
		char msg[256];

		snprintf(msg, sizeof(msg), "%s", err ? dt_errmsg() : "");
		if (err)
			dt__log(0, "checkpoint #%llu not written: %s",
			        (unsigned long long)job->number, msg);
		else
			DT_LOG(1,
			       "checkpoint #%llu: %zu bytes in %s/%s (%.1f ms)",
			       (unsigned long long)job->number, job->len,
			       s->ck_dir, s->ck_name, (double)dt / 1e6);
		pthread_mutex_lock(&s->ck_mu);
		s->ck_done = job->number;
		s->ck_err = err;
		snprintf(s->ck_errmsg, sizeof(s->ck_errmsg), "%s", msg);
		s->ck_written += err == DT_OK;
		s->ck_write_ns += dt;
		pthread_cond_broadcast(&s->ck_cv);
		free(job->buf);
		job->buf = NULL;
		if (err == DT_OK) { /* the next to tell the workers */
			job_free(s->ck_ok);
			s->ck_ok = job;
		} else {
			job_free(job);
		}
	}
	pthread_mutex_unlock(&s->ck_mu);
	return NULL;
}

/* After a round (or an async update): a checkpoint if one is due. */
void
srv_maybe_checkpoint(kv_server *s)
{
	uint64_t number, nkeys;

	if (s->ck_dir == NULL)
		return;
	announce(s);
	/* (N rounds of every key and table) */
	nkeys = DT_MAX(dt__table_count(&s->keys) + dt__table_count(&s->rtabs) +
	                   (s->ks_on ? s->ks.nrec : 0),
	               1);
	if (!(s->ck_every &&
	      s->rounds - s->ck_rounds_at >= s->ck_every * nkeys) &&
	    !(s->ck_every_ns && dt__now_ns() - s->ck_last_ns >= s->ck_every_ns))
		return;
	if (snapshot(s, &number) != DT_OK)
		dt__log(0, "checkpoint skipped: %s", dt_errmsg());
}

/* KV_CHECKPOINT: a snapshot now, answered once it is on disk (the I/O
 * thread waits: every worker waits for this answer anyway). */
static void
on_checkpoint(kv_server *s, int worker, const dt_msg_hdr *h)
{
	uint64_t number;
	dt_err err;
	char msg[256];

	if (s->ck_dir == NULL) {
		srv_reply_error(
		    s, worker, h->cmd, h->seq, 0, DT_ESTATE,
		    "checkpoint: server %d has no DTRAIN_CHECKPOINT_DIR",
		    s->rank);
		return;
	}
	if ((err = snapshot(s, &number)) != DT_OK) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, err,
		                "checkpoint of server %d: %s", s->rank,
		                dt_errmsg());
		return;
	}
	/* As long as a worker waits for an answer (DT_WAIT_TIMEOUT): a disk
	 * that hangs fails the call, not the server. */
	uint64_t until = dt__now_ns() + dt__node_wait_ns(s->node);
	struct timespec ts = dt__timespec_at(until);

	pthread_mutex_lock(&s->ck_mu);
	while (s->ck_done < number && dt__now_ns() < until)
		pthread_cond_timedwait(&s->ck_cv, &s->ck_mu, &ts);
	if (s->ck_done < number) {
		err = DT_ETIMEDOUT;
		snprintf(msg, sizeof(msg),
		         "the file was not written within DT_WAIT_TIMEOUT");
	} else {
		err = s->ck_err;
		snprintf(msg, sizeof(msg), "%s", s->ck_errmsg);
	}
	pthread_mutex_unlock(&s->ck_mu);
	if (err)
		srv_reply_error(s, worker, h->cmd, h->seq, 0, err,
		                "checkpoint of server %d: %s", s->rank, msg);
	else
		srv_reply(s, worker, h->cmd, h->seq, 0, NULL, 0);
	announce(s);
}

/* Load path (checked whole first, then applied): the header, then each
 * kind's section in the format's order. */
static dt_err
load_file(kv_server *s, const char *path)
{
	uint8_t *buf;
	size_t len;
	dt_rbuf r;
	dt_ckpt_head head;
	dt_err err;

	if ((err = dt__ckpt_read(path, &buf, &len)))
		return err;
	if ((err = dt__ckpt_open(path, buf, len, &r, &head)))
		goto out;
	if (head.rank != (uint32_t)s->rank ||
	    head.nservers != (uint32_t)s->nservers ||
	    head.nworkers != (uint32_t)s->nworkers) {
		err =
		    dt__fail(DT_EMISMATCH,
		             "%s is server %u's of a job of %u servers and %u "
		             "workers; this is server %d of %d and %d",
		             path, head.rank, head.nservers, head.nworkers,
		             s->rank, s->nservers, s->nworkers);
		goto out;
	}
	/* (a file older than version 3 does not say: it loads as before) */
	if (head.version >= 3 && (strcmp(head.placement, s->ck_placement) ||
	                          head.split != s->ck_split)) {
		err = dt__fail(
		    DT_EMISMATCH,
		    "%s was written under key placement %s (arrays of %llu "
		    "floats and more cut over the servers); this job's is %s "
		    "(%llu floats): its slices of the keys would not be this "
		    "job's. Start the job with the placement it was written "
		    "under (DTRAIN_KV_PLACEMENT, DTRAIN_KV_SPLIT_BYTES, "
		    "MXNET_KVSTORE_BIGARRAY_BOUND)",
		    path, head.placement, (unsigned long long)head.split,
		    s->ck_placement, (unsigned long long)s->ck_split);
		goto out;
	}
	s->sync = head.sync;
	s->opt = head.opt;
	for (const srv_kind *const *kind = srv_kinds; *kind && !err; kind++)
		if ((*kind)->load)
			err = (*kind)->load(s, path, &r, &head);
	if (err == DT_OK && r.off != r.len)
		err =
		    dt__fail(DT_EFORMAT, "%s: %zu bytes after the last record",
		             path, r.len - r.off);
	s->rounds = s->ck_rounds_at = head.rounds;
	s->ck_number = head.number;
out:
	free(buf);
	return err;
}

/* Empty the store (a checkpoint that did not load). */
static void
drop_keys(kv_server *s)
{
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->drop)
			(*kind)->drop(s);
	s->opt.kind = DT_OPT_NONE;
	s->sync = 1;
	s->ninit = 0;
	s->rounds = s->ck_rounds_at = s->ck_number = 0;
}

/* DTRAIN_CHECKPOINT_LOAD=1: the newest good checkpoint of this rank, else
 * the previous one; none at all is an empty start. */
static dt_err
load_checkpoint(kv_server *s)
{
	char path[4096], prev[4096];
	dt__err_kept first = {DT_OK, ""};
	dt_err err;

	snprintf(path, sizeof(path), "%s/%s", s->ck_dir, s->ck_name);
	snprintf(prev, sizeof(prev), "%s/%s.prev", s->ck_dir, s->ck_name);
	if (access(path, F_OK) != 0 && access(prev, F_OK) != 0) {
		dt__log(0, "no checkpoint in %s yet: starting empty",
		        s->ck_dir);
		return DT_OK;
	}
	if (access(path, F_OK) == 0) {
		if ((err = load_file(s, path)) == DT_OK)
			goto loaded;
		dt__err_keep(&first, err);
		dt__log(0, "%s; trying the previous checkpoint", first.msg);
		drop_keys(s);
	}
	if ((err = load_file(s, prev)) != DT_OK) {
		dt__err_kept second;

		dt__err_keep(&second, err);
		drop_keys(s);
		if (first.err)
			return dt__fail(err, "no usable checkpoint: %s; %s",
			                first.msg, second.msg);
		return dt__fail(err, "no usable checkpoint: %s", second.msg);
	}
	snprintf(path, sizeof(path), "%s", prev);
loaded:
	dt__log(0,
	        "restored checkpoint #%llu from %s: %zu keys, %zu row "
	        "tables and %zu many-key keys after %llu rounds",
	        (unsigned long long)s->ck_number, path,
	        dt__table_count(&s->keys), dt__table_count(&s->rtabs),
	        s->ks_on ? s->ks.nrec : (size_t)0,
	        (unsigned long long)s->rounds);
	return DT_OK;
}

/*
 * DTRAIN_MAX_TABLE_BYTES, at the server's start: the most bytes its
 * row_sparse tables may map together (values, optimizer state, round
 * slots). By default half the machine's memory: a table is refused when
 * the rows it asks for could not all be held, rather than after pushes
 * have made the machine run out.
 */
static dt_err
limits_config(kv_server *s)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	long def = pages > 0 && psize > 0 ? pages / 2 * psize : 1L << 32;
	long v;
	dt_err err;

	if ((err =
	         dt__env_long("DTRAIN_MAX_TABLE_BYTES", def, 1, 1L << 62, &v)))
		return err;
	s->max_table_bytes = (uint64_t)v;
	return DT_OK;
}

/* The job's key placement, as the workers will compute it from the same
 * variables (the server places nothing itself: placement.c). */
static dt_err
placement_config(kv_server *s)
{
	dt_kv_map *m;
	dt_err err;

	if ((err = dt__kv_map_from_env(s->nservers, &m)))
		return err;
	snprintf(s->ck_placement, sizeof(s->ck_placement), "%s",
	         dt__kv_map_policy(m));
	s->ck_split = dt__kv_map_split(m);
	dt__kv_map_destroy(m);
	return DT_OK;
}

/* DTRAIN_CHECKPOINT_DIR and the rest, at the server's start. */
static dt_err
checkpoint_config(kv_server *s)
{
	const char *dir = dt__env_str("DTRAIN_CHECKPOINT_DIR");
	long every, load;
	uint64_t every_ns;
	struct stat st;
	dt_err err;

	if ((err = dt__env_long("DTRAIN_CHECKPOINT_EVERY", 100, 0, 1L << 40,
	                        &every)) ||
	    (err = dt__env_seconds("DTRAIN_CHECKPOINT_SECONDS", 0, 0,
	                           86400 * 365, &every_ns)) ||
	    (err = dt__env_long("DTRAIN_CHECKPOINT_LOAD", 0, 0, 1, &load)))
		return err;
	if (dir == NULL || *dir == '\0') {
		if (load)
			return dt__fail(DT_ECONFIG,
			                "DTRAIN_CHECKPOINT_LOAD=1 "
			                "needs DTRAIN_CHECKPOINT_DIR");
		return DT_OK;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return dt__fail(DT_ECONFIG, "DTRAIN_CHECKPOINT_DIR %s: %s", dir,
		                strerror(errno));
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    access(dir, W_OK | X_OK) < 0)
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_CHECKPOINT_DIR %s: not a writable "
		                "directory",
		                dir);
	if ((err = placement_config(s)))
		return err;
	if ((s->ck_dir = strdup(dir)) == NULL)
		return DT_ENOMEM;
	snprintf(s->ck_name, sizeof(s->ck_name), "server-%d.ckpt", s->rank);
	s->ck_every = (uint64_t)every;
	s->ck_every_ns = every_ns;
	s->ck_last_ns = dt__now_ns();
	/* A server that takes a lost one's place starts from its last
	 * checkpoint (recovery), as a whole job resumed from files. */
	if ((load || dt__node_rejoined(s->node)) && (err = load_checkpoint(s)))
		return err;
	pthread_mutex_init(&s->ck_mu, NULL);
	dt__cond_init_monotonic(&s->ck_cv); /* (on_checkpoint's deadline) */
	if (pthread_create(&s->ck_thread, NULL, writer_main, s) != 0) {
		pthread_cond_destroy(&s->ck_cv);
		pthread_mutex_destroy(&s->ck_mu);
		return dt__fail(DT_ESYS, "checkpoint writer thread");
	}
	s->ck_started = 1;
	return DT_OK;
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
	uint8_t b[8];

	if (e == NULL)
		return;
	have = e->applied[worker] + (s->sync && e->pushed[worker]);
	for (deferred *d = e->later; d; d = d->next)
		have += d->worker == worker;
	dt__put_u64(b, have);
	struct iovec iov = {b, sizeof(b)};
	dt_msg_hdr a = {.cmd = (uint8_t)h->cmd,
	                .flags = DT_F_RESPONSE,
	                .seq = h->seq,
	                .key = h->key};
	if (dt__node_send_ex(s->node, dt__node_worker_id(s->node, worker), &a,
	                     NULL, 0, &iov, 1, 0))
		DT_LOG(1, "answer to worker %d: %s", worker, dt_errmsg());
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

	/* (the dense store first: its keys are the common case) */
	if (find(s, h->key) == NULL &&
	    single_elsewhere(s, worker, h, meta, payload)) {
		srv_maybe_checkpoint(s); /* (after the whole request) */
		return;
	}
	if (h->cmd == DT_CMD_KV_PULL) {
		if ((e = check_access(s, worker, h, meta, 0, &kind, &t)) ==
		    NULL)
			return;
		if (h->arg2 & DT_KV_AT_ROUND) {
			pull_at(s, e, worker, h, meta, enc);
			return;
		}
		if (s->sync && e->pushed[worker]) {
			if (queue(&e->answers, worker, h->cmd, h->seq, 0, 0,
			          enc))
				srv_reply_error(s, worker, h->cmd, h->seq,
				                h->key, DT_ENOMEM,
				                "out of memory");
			return;
		}
		srv_reply_enc(s, worker, h->cmd, h->seq, h->key, e->val, e->len,
		              enc);
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
park(kv_server *s, int worker, const dt_msg *m)
{
	entry *e = find(s, m->hdr.key);
	parked *q, **p;

	if ((e && e->initialised) ||
	    (e == NULL && srv_home_of(s, m->hdr.key, &srv_dense_kind)))
		return 0; /* (another kind's key: on_data routes it there) */
	if ((e == NULL && (e = insert(s, m->hdr.key)) == NULL) ||
	    (q = calloc(1, sizeof(*q))) == NULL) {
		srv_reply_error(s, worker, m->hdr.cmd, m->hdr.seq, m->hdr.key,
		                DT_ENOMEM, "out of memory");
		return 1;
	}
	q->h = m->hdr;
	q->worker = worker;
	if (m->hdr.meta_len && (q->meta = malloc(m->hdr.meta_len)) != NULL)
		memcpy(q->meta, m->meta, m->hdr.meta_len);
	if (m->hdr.meta_len && q->meta == NULL)
		q->h.meta_len = 0; /* (then refused as malformed) */
	if (m->payload && m->hdr.payload_len &&
	    (q->data = malloc(m->hdr.payload_len)) != NULL)
		memcpy(q->data, m->payload, m->hdr.payload_len);
	for (p = &e->parked; *p; p = &(*p)->next)
		;
	*p = q;
	return 1;
}

void
srv_unpark_key(kv_server *s, dt_key key)
{
	entry *e = dt__table_count(&s->keys) ? find(s, key) : NULL;
	parked *q;

	if (e == NULL || e->initialised || e->inits || e->later)
		return;
	q = e->parked;
	e->parked = NULL;
	dt__table_remove(&s->keys, &e->hn);
	free_entry(e);
	while (q) {
		parked *next = q->next;

		on_data(s, q->worker, &q->h, q->meta, q->data, 0);
		free(q->meta);
		free(q->data);
		free(q);
		q = next;
	}
}

/* The key has its value now: what waited for it, in order. */
static void
unpark(kv_server *s, entry *e)
{
	while (e->parked) {
		parked *q = e->parked;

		e->parked = q->next;
		if (q->h.cmd == DT_CMD_KV_RESUME)
			on_resume(s, q->worker, &q->h, q->meta);
		else
			on_data(s, q->worker, &q->h, q->meta, q->data, 0);
		free(q->meta);
		free(q->data);
		free(q);
	}
}

/* A worker's replay is over; after every worker's, what still waits for
 * a value that never came is answered with the error it would have had. */
static void
on_replayed(kv_server *s, int worker)
{
	if (!s->rejoined || s->replayed == NULL || s->replayed[worker])
		return;
	s->replayed[worker] = 1;
	if (++s->nreplayed < s->nworkers)
		return;
	s->rejoined = 0;
	DT_LOG(1, "every worker has sent again what server %d lacked", s->rank);
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->replayed)
			(*kind)->replayed(s);
}

/*
 * Recovery: a new process took worker peer's place. What its predecessor
 * asked and is still waiting is answered with sequence number 0 (ignored:
 * the new process numbers its requests from 1 again); its pushes stay
 * counted, and the new process does not send them again (dt_kv_resume).
 */
static void
on_peer_restart(void *arg, dt_node *n, int peer)
{
	kv_server *s = arg;
	int worker = peer - 1 - s->nservers;

	(void)n;
	if (worker < 0 || worker >= s->nworkers)
		return;
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->peer_restart)
			(*kind)->peer_restart(s, worker);
}

/* ---- the dense kind's ops ---- */

/* (an entry made by a request parked before its key's init is no key
 * yet: another kind's init may make it) */
static int
dense_owns(kv_server *s, dt_key key)
{
	entry *e = dt__table_count(&s->keys) ? find(s, key) : NULL;

	return e && e->initialised;
}

static uint64_t
dense_count(kv_server *s)
{
	dt_table_iter it;
	uint64_t n = 0;

	for (dt_hnode *h = dt__table_first(&s->keys, &it); h;
	     h = dt__table_next(&it))
		n += DT_CONTAINER_OF(h, entry, hn)->initialised != 0;
	return n;
}

static size_t
dense_state_len(kv_server *s, const entry *e)
{
	return e->state ? dt__opt_state_len(&s->opt, e->len) : 0;
}

static size_t
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

static void
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

static void
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
	if (find(s, k->key))
		return dt__fail(DT_EFORMAT, "%s: key %llu twice", path,
		                (unsigned long long)k->key);
	if ((e = insert(s, k->key)) == NULL ||
	    alloc_value(s, e, k->n, k->offset, (size_t)k->len))
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
	e->restored = 1;
	return DT_OK;
}

/* The dense keys' section: its count is the header's (h->nkeys). */
static dt_err
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
		for (parked *q = e->parked; q; q = q->next)
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

static void
dense_drop(kv_server *s)
{
	dt_table_iter it;
	dt_hnode *h;

	while ((h = dt__table_first(&s->keys, &it)) != NULL) {
		entry *e = DT_CONTAINER_OF(h, entry, hn);

		dt__table_remove(&s->keys, h);
		free_entry(e);
	}
}

const srv_kind srv_dense_kind = {
    .made_by = "a single-key call (dt_kv_init)",
    .owns = dense_owns,
    .count = dense_count,
    .snap_bytes = dense_snap_bytes,
    .snapshot = dense_snapshot,
    .held = dense_held,
    .load = dense_load,
    .peer_restart = dense_peer_restart,
    .replayed = dense_replayed,
    .drop = dense_drop,
};

/* (in the order of a checkpoint's sections) */
const srv_kind *const srv_kinds[] = {&srv_dense_kind, &srv_rows_kind,
                                     &srv_many_kind, NULL};

const srv_kind *
srv_home_of(kv_server *s, dt_key key, const srv_kind *self)
{
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if (*kind != self && (*kind)->owns(s, key))
			return *kind;
	return NULL;
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

/* KV_CONFIG: the store's mode. A kind that holds anything has its mode
 * fixed (its records were made for it); dense keys made in dist_async
 * have no merge buffers for dist_sync rounds. */
static void
on_config(kv_server *s, int worker, const dt_msg_hdr *h)
{
	int fixed = 0;

	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		fixed |= (*kind)->any && (*kind)->any(s);
	if ((fixed && (h->arg0 != 0) != s->sync) ||
	    (h->arg0 != 0 && !s->sync && async_keys(s))) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_ESTATE,
		                "configure: keys, batched keys or row_sparse "
		                "tables exist in %s mode",
		                s->sync ? "dist_sync" : "dist_async");
		return;
	}
	s->sync = h->arg0 != 0;
	DT_LOG(1, "store mode: %s", s->sync ? "dist_sync" : "dist_async");
	srv_reply(s, worker, h->cmd, h->seq, 0, NULL, 0);
}

/* KV_SET_OPT: once a key has a value, only the parameters may change. */
static void
on_set_opt(kv_server *s, int worker, const dt_msg *m)
{
	const dt_msg_hdr *h = &m->hdr;
	dt_rbuf r;
	dt_opt opt;

	dt__rbuf_init(&r, m->meta, h->meta_len);
	if (dt__opt_decode(&r, &opt)) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_EINVAL,
		                "set optimizer: %s", dt_errmsg());
		return;
	}
	if (s->ninit && opt.kind != s->opt.kind) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_ESTATE,
		                "set optimizer: keys are already initialised "
		                "with another optimizer; only its parameters "
		                "may change now");
		return;
	}
	s->opt = opt;
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->set_opt)
			(*kind)->set_opt(s, &opt);
	DT_LOG(1, "optimizer %s lr=%g momentum=%g wd=%g rescale_grad=%g",
	       opt.kind == DT_OPT_SGD ? "sgd" : "adam", opt.p.lr,
	       opt.p.momentum, opt.p.wd, opt.p.rescale_grad);
	srv_reply(s, worker, h->cmd, h->seq, 0, NULL, 0);
}

static void
dispatch(void *arg, dt_node *n, dt_conn *c, dt_msg *m)
{
	kv_server *s = arg;
	const dt_msg_hdr *h = &m->hdr;
	int sender = (int)h->sender;
	int worker = sender - 1 - s->nservers;

	if (sender != dt__conn_peer(c) || worker < 0 || worker >= s->nworkers) {
		dt__log(0, "dropping %s: KV request from node %d, not a worker",
		        dt__conn_addr(c), sender);
		dt__node_close(n, c);
		return;
	}
	switch (h->cmd) {
	case DT_CMD_KV_CONFIG:
		on_config(s, worker, h);
		return;
	case DT_CMD_KV_SET_OPT:
		on_set_opt(s, worker, m);
		return;
	case DT_CMD_KV_INIT:
		on_init(s, worker, m);
		return;
	case DT_CMD_KV_CHECKPOINT:
		on_checkpoint(s, worker, h);
		return;
	case DT_CMD_KV_REPLAYED:
		on_replayed(s, worker);
		return;
	case DT_CMD_KV_RESUME:
		if (s->rejoined && park(s, worker, m))
			return;
		on_resume(s, worker, h, m->meta);
		return;
	case DT_CMD_KV_INIT_MANY:
	case DT_CMD_KV_PUSH_MANY:
	case DT_CMD_KV_PULL_MANY:
	case DT_CMD_KV_PUSHPULL_MANY:
		srv_on_many(s, worker, m);
		/* Between requests: a snapshot holds each batched request
		 * whole or not at all, as far as its rounds are closed. */
		srv_maybe_checkpoint(s);
		return;
	case DT_CMD_KV_ROW_INIT:
		srv_on_row_init(s, worker, m);
		return;
	case DT_CMD_KV_ROW_PUSH:
	case DT_CMD_KV_ROW_PULL:
	case DT_CMD_KV_ROW_PUSHPULL:
		srv_on_rows(s, worker, m);
		return;
	case DT_CMD_KV_PUSH:
	case DT_CMD_KV_PUSHPULL:
	case DT_CMD_KV_PULL:
		if (s->rejoined && park(s, worker, m))
			return;
		if (m->streamed && s->streaming)
			s->streaming[worker].on = 0; /* whole: a new one next */
		on_data(s, worker, h, m->meta, m->payload, m->streamed);
		return;
	default:
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_EPROTO,
		                "unknown KV command %u", h->cmd);
	}
}

/*
 * Scratch (an answer's values, its fp16 form, a decoded push) is kept
 * from request to request up to this size, so steady traffic reuses it;
 * beyond it, it goes back once the request is done: one big answer must
 * not hold its memory for the rest of the job. (An answer's bytes are
 * copied by the send if they cannot go at once.)
 */
#define SCRATCH_KEEP ((size_t)64 << 20)

static void
scratch_trim(uint8_t **buf, size_t *cap)
{
	if (*cap <= SCRATCH_KEEP)
		return;
	free(*buf);
	*buf = NULL;
	*cap = 0;
}

static void
on_msg(void *arg, dt_node *n, dt_conn *c, dt_msg *m)
{
	kv_server *s = arg;

	dispatch(arg, n, c, m);
	scratch_trim((uint8_t **)&s->gath, &s->gath_cap);
	scratch_trim(&s->half, &s->half_cap);
	scratch_trim(&s->dec, &s->dec_cap);
}

/*
 * The buffer of the worker that sent h on c, for a payload of want bytes:
 * kept from request to request, so a big one costs no page faults. One
 * connection at a time receives into it (a frame cut with its connection
 * leaves it held: the next ones go to the connection's own buffer).
 * NULL: the frame gets a buffer of its own.
 */
static void *
rx_lend(kv_server *s, dt_conn *c, const dt_msg_hdr *h, uint64_t want)
{
	int w = (int)h->sender - 1 - s->nservers;
	struct rxbuf *rb = s->rx && w >= 0 && w < s->nworkers &&
	                           (int)h->sender == dt__conn_peer(c)
	                       ? &s->rx[w]
	                       : NULL;

	if (rb == NULL || (rb->holder && rb->holder != c) ||
	    h->payload_len != want ||
	    !dt__buf_reserve(&rb->buf, &rb->cap, (size_t)want))
		return NULL;
	rb->holder = c;
	return rb->buf;
}

/*
 * Drop (without buffering) any payload whose size is wrong for its key.
 * Payloads are never received straight into the merge buffer: pushes from
 * several workers arrive interleaved, and a round may end (and the merge
 * buffer be reused) while another worker's payload is still streaming in.
 */
static void *
payload_dest(void *arg, dt_node *n, dt_conn *c, const dt_msg_hdr *h,
             const uint8_t *meta)
{
	kv_server *s = arg;
	int worker = (int)h->sender - 1 - s->nservers;
	entry *e;

	if (h->cmd == DT_CMD_KV_INIT)
		return h->arg0 > UINT64_MAX / sizeof(float) ||
		               h->payload_len > h->arg0 * sizeof(float)
		           ? DT_VAN_DISCARD
		           : NULL;
	/* (on_many and on_rows check them whole) A batched request of
	 * one-length keys, or a row request of fp32 values, whose size
	 * matches its header lands in its worker's buffer (rx_lend). */
	if (dt__kv_many_cmd(h->cmd))
		return h->arg1 == 0 || h->arg1 > DT_KS_MAX_LEN ||
		               h->arg0 > DT_KS_MAX_KEYS
		           ? NULL
		           : rx_lend(s, c, h,
		                     h->arg0 * 8 + (dt__kv_many_has_vals(h->cmd)
		                                        ? h->arg0 * h->arg1 * 4
		                                        : 0));
	if (h->cmd == DT_CMD_KV_ROW_INIT) { /* its rows' values, or none */
		uint64_t rows = h->meta_len == 16 ? dt__get_u64(meta + 8) : 0;

		return h->arg1 <= DT_RS_MAX_WIDTH && rows <= DT_RS_MAX_ROWS &&
		               rows * h->arg1 <= DT_RS_MAX_VALS &&
		               h->payload_len == rows * h->arg1 * sizeof(float)
		           ? NULL
		           : DT_VAN_DISCARD;
	}
	if (dt__kv_rows_cmd(h->cmd))
		return h->arg1 == 0 || h->arg1 > DT_RS_MAX_WIDTH ||
		               h->arg0 > DT_RS_MAX_ROWS ||
		               DT_KV_ENC_PUSH(h->arg2) ||
		               h->arg0 * h->arg1 > DT_RS_MAX_VALS
		           ? NULL
		           : rx_lend(s, c, h,
		                     h->arg0 * 8 + (h->cmd != DT_CMD_KV_ROW_PULL
		                                        ? h->arg0 * h->arg1 * 4
		                                        : 0));
	if (h->cmd != DT_CMD_KV_PUSH && h->cmd != DT_CMD_KV_PUSHPULL)
		return DT_VAN_DISCARD;
	e = find(s, h->key);
	if (e == NULL && s->ks_on) { /* a key of batched calls (on_data) */
		uint32_t r = dt__ks_find(&s->ks, h->key);

		if (r != DT_KS_NONE)
			return h->payload_len <= dt__ks_len(&s->ks, r) * 4
			           ? NULL
			           : DT_VAN_DISCARD;
	}
	if (s->rejoined && (e == NULL || !e->initialised))
		return NULL; /* parked until its INIT (park) */
	if (e == NULL || !e->initialised)
		return DT_VAN_DISCARD;
	if (DT_KV_ENC_PUSH(h->arg2) != DT_QUANT_NONE) {
		/* Compressed: received whole (on_data checks and decodes
		 * it); never more than its kind's size for the key. */
		size_t want = dt__quant_size(
		    (dt_quant_kind)DT_KV_ENC_PUSH(h->arg2), e->len);

		return want && h->payload_len == want ? NULL : DT_VAN_DISCARD;
	}
	if (h->payload_len != e->len * sizeof(float))
		return DT_VAN_DISCARD;
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
	dt_quant_kind kind;
	float t;

	if (s->sync && h->payload_len >= STREAM_MIN && worker >= 0 &&
	    worker < s->nworkers && h->arg0 == e->n && h->arg1 == e->offset &&
	    !e->pushed[worker] &&
	    dt__kv_push_check(h, meta, e->len, &kind, &t) == DT_OK)
		return DT_VAN_STREAM;
	return NULL;
}

static void
payload_chunk(void *arg, dt_node *n, dt_conn *c, const dt_msg_hdr *h,
              const void *data, uint64_t off, size_t len)
{
	kv_server *s = arg;
	entry *e = find(s, h->key);
	size_t i0 = (size_t)(off / sizeof(float)), cnt = len / sizeof(float);
	const float *g = data;

	if (e == NULL)
		return;
	int worker = (int)h->sender - 1 - s->nservers;
	if (s->streaming && worker >= 0 && worker < s->nworkers) {
		struct streaming *st = &s->streaming[worker];

		if (!st->on || st->seq != h->seq || st->key != h->key)
			*st = (struct streaming){h->seq, h->key, 0, 1};
		else if (off == 0 && st->used)
			DT_LOG(1,
			       "push of key %llu from worker %d comes again "
			       "after a cut: its first %llu bytes were used",
			       (unsigned long long)h->key, worker,
			       (unsigned long long)st->used);
		if (off + len <= st->used)
			return; /* used before the cut */
		if (off < st->used) {
			size_t skip = (size_t)(st->used - off);

			g += skip / sizeof(float);
			i0 += skip / sizeof(float);
			cnt -= skip / sizeof(float);
		}
		st->used = off + len;
	}
	if (s->nworkers > 1) {
		uint64_t t0 = dt__now_ns();

		dt__kv_add(e->merge + i0, g, cnt);
		srv_busy_part(DT_EV_KV_MERGE, t0, h->key, cnt * sizeof(float),
		              (int)h->sender, off == 0);
		return;
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
}

/* The writer finishes what it was given; then everything goes. */
static void
server_free(kv_server *s)
{
	if (s->ck_started) {
		pthread_mutex_lock(&s->ck_mu);
		s->ck_stop = 1;
		pthread_cond_broadcast(&s->ck_cv);
		pthread_mutex_unlock(&s->ck_mu);
		pthread_join(s->ck_thread, NULL);
		if (s->ck_written)
			dt__log(0,
			        "%llu checkpoints written (%.1f ms each on "
			        "average; %.2f ms of snapshots in the I/O "
			        "thread)",
			        (unsigned long long)s->ck_written,
			        (double)s->ck_write_ns / 1e6 /
			            (double)s->ck_written,
			        (double)s->ck_snap_ns / 1e6);
		job_free(s->ck_ok);
		pthread_cond_destroy(&s->ck_cv);
		pthread_mutex_destroy(&s->ck_mu);
	}
	if (s->ks_on && s->ks.nrec) {
		size_t b = dt__ks_bytes(&s->ks), n = s->ks.nrec;
		size_t v = (size_t)s->ks.off[n];

		DT_LOG(1,
		       "many-key store: %zu keys, %zu floats, %.1f MiB (%.1f "
		       "bytes per key beside the values)",
		       n, v, (double)b / 1048576.0,
		       (double)(b - 4 * v) / (double)n);
	}
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->drop)
			(*kind)->drop(s);
	dt__table_fini(&s->keys);
	dt__table_fini(&s->rtabs);
	free(s->ck_dir);
	free(s->replayed);
	free(s->streaming);
	free(s->dec);
	free(s->half);
	for (int w = 0; s->rx && w < s->nworkers; w++)
		free(s->rx[w].buf);
	free(s->rx);
	free(s->idx);
	free(s->gath);
	free(s);
}

/* The class's start hook: a server node's store. */
static dt_err
server_start(dt_node *n)
{
	kv_server *s = dt__calloc(1, sizeof(*s));
	dt__app_hooks app = {0};
	dt_err err;

	if (s == NULL)
		return DT_ENOMEM;
	s->node = n;
	s->rank = dt_node_rank(n);
	s->rejoined = dt__node_rejoined(n) && dt__node_recover(n);
	s->nservers = dt_node_num_servers(n);
	s->nworkers = dt_node_num_workers(n);
	if (s->rejoined &&
	    (s->replayed = calloc((size_t)s->nworkers, 1)) == NULL) {
		free(s);
		return DT_ENOMEM;
	}
	s->sync = 1;
	dt__table_init(&s->keys);
	dt__table_init(&s->rtabs);
	if ((s->streaming = calloc((size_t)DT_MAX(s->nworkers, 1),
	                           sizeof(*s->streaming))) == NULL ||
	    (s->rx = calloc((size_t)DT_MAX(s->nworkers, 1), sizeof(*s->rx))) ==
	        NULL) {
		free(s->rx);
		free(s->replayed);
		free(s->streaming);
		free(s);
		return DT_ENOMEM;
	}
	if ((err = limits_config(s)) || (err = checkpoint_config(s))) {
		server_free(s);
		return err;
	}
	app.arg = s;
	app.on_msg = on_msg;
	app.payload_dest = payload_dest;
	app.dest_pure = 1; /* it only chooses where a payload goes */
	app.payload_chunk = payload_chunk;
	app.on_peer_restart = on_peer_restart;
	app.stream_resumable = 1; /* (payload_chunk skips what it used) */
	if ((err = dt__node_attach(n, &dt__kv_app, &app))) {
		server_free(s);
		return err;
	}
	if (s->rejoined)
		err = rejoin(s);
	return err;
}

/* The class's stop hook, once the node's I/O thread is gone. */
static void
server_stop(dt_node *n)
{
	kv_server *s = dt__node_app_arg(n, &dt__kv_app);

	dt__node_detach(n, &dt__kv_app);
	if (s == NULL)
		return;
	server_free(s);
}

const dt__app_class dt__kv_app = {
    .name = "KVStore",
    .cmd_first = DT_CMD_KV_FIRST,
    .cmd_last = DT_CMD_KV_LAST,
    .start_roles = DT__ROLE_BIT(DT_ROLE_SERVER),
    .start = server_start,
    .stop = server_stop,
};

dt_err
dt__kv_register(void)
{
	return dt__app_register(&dt__kv_app);
}
