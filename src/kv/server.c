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
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/table.h"
#include "kv/kv_impl.h"

/* Pushes at least this big are applied while they stream in. */
#define STREAM_MIN (256u << 10)

typedef struct waiter {
	int worker; /* rank */
	int cmd;
	uint64_t seq;
	uint64_t n, offset; /* what an INIT asked for */
	struct waiter *next;
} waiter;

typedef struct deferred {
	int worker;
	int cmd;
	uint64_t seq;
	float *data;
	struct deferred *next;
} deferred;

typedef struct entry {
	dt_key key;
	uint64_t n;      /* the whole array's length */
	uint64_t offset; /* of this server's slice */
	size_t len;      /* of the slice */
	int initialised;
	float *val;
	float *merge;
	float *state;
	uint64_t steps;
	int npushed;
	uint8_t *pushed; /* by worker rank, this round */
	waiter *answers; /* answered at the end of the round */
	waiter *inits;   /* INITs waiting for rank 0's value */
	deferred *later; /* second pushes in a round, oldest first */
	dt_hnode hn;     /* in keys */
} entry;

typedef struct kv_server {
	dt_node *node;
	int nservers, nworkers; /* the job's */
	int sync;
	dt_opt opt;    /* kind DT_OPT_NONE: the value is the sum of a round */
	dt_table keys; /* entries by key */
} kv_server;

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
	if (e->pushed == NULL) {
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
	free(e->val);
	free(e->merge);
	free(e->state);
	free(e->pushed);
	free(e);
}

static void
reply(kv_server *s, int worker, int cmd, uint64_t seq, dt_key key,
      const float *val, size_t len)
{
	dt_msg_hdr h = {.cmd = (uint8_t)cmd,
	                .flags = DT_F_RESPONSE,
	                .seq = seq,
	                .key = key};
	struct iovec iov = {(void *)val, len * sizeof(float)};
	dt_err err;

	/* From the value itself: before it changes, touch() has PS_RESEND
	 * keep a copy of what it still holds of it. */
	err = dt__node_send_ex(s->node, dt__node_worker_id(s->node, worker), &h,
	                       NULL, 0, val ? &iov : NULL, val ? 1 : 0,
	                       DT_SEND_STABLE);
	if (err)
		DT_LOG(1, "answer to worker %d: %s", worker, dt_errmsg());
}

static void reply_error(kv_server *s, int worker, int cmd, uint64_t seq,
                        dt_key key, dt_err code, const char *fmt, ...)
    DT_PRINTF(7, 8);

static void
reply_error(kv_server *s, int worker, int cmd, uint64_t seq, dt_key key,
            dt_err code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	dt_wbuf w;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	DT_LOG(1, "error for worker %d: %s", worker, msg);
	dt__wbuf_init(&w);
	dt_msg_hdr h = {.cmd = (uint8_t)cmd,
	                .flags = DT_F_RESPONSE | DT_F_ERROR,
	                .seq = seq,
	                .key = key};
	if (dt__kv_error_encode(code, msg, &w) == DT_OK)
		dt__node_send(s->node, dt__node_worker_id(s->node, worker), &h,
		              w.data, (uint32_t)w.len, NULL, 0);
	dt__wbuf_fini(&w);
}

static int
queue(waiter **list, int worker, int cmd, uint64_t seq, uint64_t n,
      uint64_t offset)
{
	waiter *w = malloc(sizeof(*w)), **p = list;

	if (w == NULL)
		return -1;
	*w = (waiter){worker, cmd, seq, n, offset, NULL};
	while (*p)
		p = &(*p)->next;
	*p = w;
	return 0;
}

/* The end of a dist_sync round: update once, then answer everyone. */
static void push_sync(kv_server *s, entry *e, int worker, int cmd, uint64_t seq,
                      const float *g, int streamed);

/* e's value is about to change (see reply). */
static void
touch(kv_server *s, entry *e)
{
	dt__node_before_write(s->node, e->val, e->len * sizeof(float));
}

static void
round_done(kv_server *s, entry *e)
{
	e->npushed = 0;
	memset(e->pushed, 0, (size_t)s->nworkers);
	while (e->answers) {
		waiter *w = e->answers;

		e->answers = w->next;
		reply(s, w->worker, w->cmd, w->seq, e->key,
		      w->cmd == DT_CMD_KV_PUSH ? NULL : e->val, e->len);
		free(w);
	}
	/* Pushes that came early for this new round join it now. */
	while (e->later && !e->pushed[e->later->worker]) {
		deferred *d = e->later;

		e->later = d->next;
		push_sync(s, e, d->worker, d->cmd, d->seq, d->data, 0);
		free(d->data);
		free(d);
	}
}

static void
finish_round(kv_server *s, entry *e, const float *sum)
{
	touch(s, e);
	if (s->opt.kind != DT_OPT_NONE) {
		e->steps++;
		dt__opt_apply(&s->opt, e->val, sum, e->state, e->len, e->steps);
	} else {
		memcpy(e->val, sum, e->len * sizeof(float));
	}
	if (sum == e->merge) /* the next round adds into zeros */
		memset(e->merge, 0, e->len * sizeof(float));
	round_done(s, e);
}

/*
 * A push of a sync round. g is the pushed array, or NULL when it was
 * streamed: then payload_chunk already added it into the merge buffer, or
 * (one worker) already applied it to the value.
 */
static void
push_sync(kv_server *s, entry *e, int worker, int cmd, uint64_t seq,
          const float *g, int streamed)
{
	if (e->pushed[worker]) {
		deferred *d = malloc(sizeof(*d)), **p = &e->later;

		if (d)
			d->data = malloc(e->len * sizeof(float));
		if (d == NULL || d->data == NULL) {
			free(d);
			reply_error(s, worker, cmd, seq, e->key, DT_ENOMEM,
			            "%s of key %llu: out of memory holding a "
			            "second push of this round",
			            dt__kv_op_name(cmd),
			            (unsigned long long)e->key);
			return;
		}
		memcpy(d->data, g, e->len * sizeof(float));
		*d = (deferred){worker, cmd, seq, d->data, NULL};
		while (*p)
			p = &(*p)->next;
		*p = d;
		return;
	}
	if (queue(&e->answers, worker, cmd, seq, 0, 0)) {
		reply_error(s, worker, cmd, seq, e->key, DT_ENOMEM,
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
	if (!streamed)
		dt__kv_add(e->merge, g, e->len);
	if (e->npushed == s->nworkers)
		finish_round(s, e, e->merge);
}

static void
push_async(kv_server *s, entry *e, int worker, int cmd, uint64_t seq,
           const float *g)
{
	touch(s, e);
	if (s->opt.kind != DT_OPT_NONE) {
		e->steps++;
		dt__opt_apply(&s->opt, e->val, g, e->state, e->len, e->steps);
	} else {
		memcpy(e->val, g, e->len * sizeof(float));
	}
	reply(s, worker, cmd, seq, e->key,
	      cmd == DT_CMD_KV_PUSH ? NULL : e->val, e->len);
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
	if (!e->val || (s->sync && !e->merge) || (st && !e->state))
		return -1;
	return 0;
}

static void
on_init(kv_server *s, int worker, const dt_msg *m)
{
	const dt_msg_hdr *h = &m->hdr;
	int has_value = (h->arg2 & DT_KV_INIT_HAS_VALUE) != 0;
	size_t len = (size_t)(h->payload_len / sizeof(float));
	entry *e = find(s, h->key);

	if (has_value && m->payload == NULL && h->payload_len) {
		reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		            "init of key %llu: slice too large",
		            (unsigned long long)h->key);
		return;
	}
	if (e && e->initialised) {
		size_t want = has_value ? len : e->len;
		if (e->n != h->arg0 || e->offset != h->arg1 || e->len != want) {
			reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
			            "init of key %llu: length %llu != "
			            "initialised length %llu",
			            (unsigned long long)h->key,
			            (unsigned long long)h->arg0,
			            (unsigned long long)e->n);
			return;
		}
		if (has_value) { /* rank 0 sets the value again */
			touch(s, e);
			memcpy(e->val, m->payload, len * sizeof(float));
			e->steps = 0;
			if (e->state)
				memset(e->state, 0,
				       dt__opt_state_len(&s->opt, e->len) *
				           sizeof(float));
		}
		reply(s, worker, h->cmd, h->seq, h->key, NULL, 0);
		return;
	}
	if (e == NULL && (e = insert(s, h->key)) == NULL) {
		reply_error(s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
		            "init of key %llu: out of memory",
		            (unsigned long long)h->key);
		return;
	}
	if (!has_value) { /* wait for rank 0's value */
		if (queue(&e->inits, worker, h->cmd, h->seq, h->arg0, h->arg1))
			reply_error(s, worker, h->cmd, h->seq, h->key,
			            DT_ENOMEM, "out of memory");
		return;
	}
	if (alloc_value(s, e, h->arg0, h->arg1, len)) {
		reply_error(s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
		            "init of key %llu: out of memory for %zu floats",
		            (unsigned long long)h->key, len);
		return;
	}
	memcpy(e->val, m->payload, len * sizeof(float));
	e->initialised = 1;
	DT_LOG(2, "key %llu initialised: %zu floats at offset %llu of %llu",
	       (unsigned long long)h->key, len, (unsigned long long)h->arg1,
	       (unsigned long long)h->arg0);
	reply(s, worker, h->cmd, h->seq, h->key, NULL, 0);
	while (e->inits) {
		waiter *w = e->inits;

		e->inits = w->next;
		if (w->n != e->n || w->offset != e->offset)
			reply_error(
			    s, w->worker, w->cmd, w->seq, e->key, DT_ESIZE,
			    "init of key %llu: length %llu != "
			    "initialised length %llu",
			    (unsigned long long)e->key,
			    (unsigned long long)w->n, (unsigned long long)e->n);
		else
			reply(s, w->worker, w->cmd, w->seq, e->key, NULL, 0);
		free(w);
	}
}

/* Check a push or pull against the key's slice; NULL + error if wrong. */
static entry *
check_access(kv_server *s, int worker, const dt_msg_hdr *h, int with_data)
{
	entry *e = find(s, h->key);
	const char *op = dt__kv_op_name(h->cmd);

	if (e == NULL || !e->initialised) {
		reply_error(s, worker, h->cmd, h->seq, h->key, DT_ENOKEY,
		            "%s of key %llu: unknown key (never initialised "
		            "with init)",
		            op, (unsigned long long)h->key);
		return NULL;
	}
	if (h->arg0 != e->n || h->arg1 != e->offset ||
	    (with_data && h->payload_len != e->len * sizeof(float))) {
		reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		            "%s of key %llu: length %llu != initialised "
		            "length %llu",
		            op, (unsigned long long)h->key,
		            (unsigned long long)h->arg0,
		            (unsigned long long)e->n);
		return NULL;
	}
	return e;
}

static void
on_msg(void *arg, dt_node *n, dt_conn *c, dt_msg *m)
{
	kv_server *s = arg;
	const dt_msg_hdr *h = &m->hdr;
	int sender = (int)h->sender;
	int worker = sender - 1 - s->nservers;
	entry *e;

	if (sender != dt__conn_peer(c) || worker < 0 || worker >= s->nworkers) {
		dt__log(0, "dropping %s: KV request from node %d, not a worker",
		        dt__conn_addr(c), sender);
		dt__node_close(n, c);
		return;
	}
	switch (h->cmd) {
	case DT_CMD_KV_CONFIG:
		s->sync = h->arg0 != 0;
		DT_LOG(1, "store mode: %s",
		       s->sync ? "dist_sync" : "dist_async");
		reply(s, worker, h->cmd, h->seq, 0, NULL, 0);
		return;
	case DT_CMD_KV_SET_OPT: {
		dt_rbuf r;
		dt_opt opt;

		dt__rbuf_init(&r, m->meta, h->meta_len);
		if (dt__opt_decode(&r, &opt)) {
			reply_error(s, worker, h->cmd, h->seq, 0, DT_EINVAL,
			            "set optimizer: %s", dt_errmsg());
			return;
		}
		if (dt__table_count(&s->keys) && opt.kind != s->opt.kind) {
			reply_error(s, worker, h->cmd, h->seq, 0, DT_ESTATE,
			            "set optimizer: keys are already "
			            "initialised with another optimizer; only "
			            "its parameters may change now");
			return;
		}
		s->opt = opt;
		DT_LOG(1,
		       "optimizer %s lr=%g momentum=%g wd=%g rescale_grad=%g",
		       opt.kind == DT_OPT_SGD ? "sgd" : "adam", opt.p.lr,
		       opt.p.momentum, opt.p.wd, opt.p.rescale_grad);
		reply(s, worker, h->cmd, h->seq, 0, NULL, 0);
		return;
	}
	case DT_CMD_KV_INIT:
		on_init(s, worker, m);
		return;
	case DT_CMD_KV_PUSH:
	case DT_CMD_KV_PUSHPULL:
		if ((e = check_access(s, worker, h, 1)) == NULL)
			return;
		if (m->payload == NULL && !m->streamed && e->len) {
			reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
			            "%s of key %llu: payload dropped",
			            dt__kv_op_name(h->cmd),
			            (unsigned long long)h->key);
			return;
		}
		if (s->sync)
			push_sync(s, e, worker, h->cmd, h->seq, m->payload,
			          m->streamed);
		else
			push_async(s, e, worker, h->cmd, h->seq, m->payload);
		return;
	case DT_CMD_KV_PULL:
		if ((e = check_access(s, worker, h, 0)) == NULL)
			return;
		if (s->sync && e->pushed[worker]) {
			if (queue(&e->answers, worker, h->cmd, h->seq, 0, 0))
				reply_error(s, worker, h->cmd, h->seq, h->key,
				            DT_ENOMEM, "out of memory");
			return;
		}
		reply(s, worker, h->cmd, h->seq, h->key, e->val, e->len);
		return;
	default:
		reply_error(s, worker, h->cmd, h->seq, h->key, DT_EPROTO,
		            "unknown KV command %u", h->cmd);
	}
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
		return h->payload_len > h->arg0 * sizeof(float) ? DT_VAN_DISCARD
		                                                : NULL;
	if (h->cmd != DT_CMD_KV_PUSH && h->cmd != DT_CMD_KV_PUSHPULL)
		return DT_VAN_DISCARD;
	e = find(s, h->key);
	if (e == NULL || !e->initialised ||
	    h->payload_len != e->len * sizeof(float))
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
	if (s->sync && h->payload_len >= STREAM_MIN && worker >= 0 &&
	    worker < s->nworkers && h->arg0 == e->n && h->arg1 == e->offset &&
	    !e->pushed[worker])
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
	if (s->nworkers > 1) {
		dt__kv_add(e->merge + i0, g, cnt);
		return;
	}
	touch(s, e);
	if (s->opt.kind != DT_OPT_NONE) {
		dt__opt_apply_range(&s->opt, e->val, g, e->state, e->len, i0,
		                    cnt, e->steps + 1);
	} else {
		memcpy(e->val + i0, g, cnt * sizeof(float));
	}
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
	s->nservers = dt_node_num_servers(n);
	s->nworkers = dt_node_num_workers(n);
	s->sync = 1;
	dt__table_init(&s->keys);
	app.arg = s;
	app.on_msg = on_msg;
	app.payload_dest = payload_dest;
	app.dest_pure = 1; /* it only chooses where a payload goes */
	app.payload_chunk = payload_chunk;
	if ((err = dt__node_attach(n, &dt__kv_app, &app))) {
		free(s);
	}
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
	dt_table_iter it;
	for (dt_hnode *h = dt__table_first(&s->keys, &it); h;
	     h = dt__table_next(&it))
		free_entry(DT_CONTAINER_OF(h, entry, hn));
	dt__table_fini(&s->keys);
	free(s);
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
