/*
 * client.c - a worker's side of a dist store: cut each request by the
 * placement rule into one message per server, match the answers, and let
 * the caller wait for the whole operation.
 *
 * An operation (dt_kv_req) has one sub-request per server part. Answers
 * with a payload (pull, pushpull) are received straight into the caller's
 * output buffer: payload_dest finds the sub-request by its sequence number
 * and returns the right slice of the output, so a pull costs no copy.
 *
 * Threads: the caller's thread starts and waits; the node's I/O thread
 * completes sub-requests. Both tables and every op's state are guarded by
 * c->mu; c->cv is signalled when an op completes or the node fails.
 *
 * Recovery (DTRAIN_RECOVER=1, docs/fault-tolerance.md): every request that
 * changes a server's store (configure, set optimizer, init, push) is also
 * kept in a log per server, with a copy of its data, until that server
 * says a checkpoint on disk holds it (KV_CKPT_DONE). When a new process
 * takes a lost server's place, it says what its checkpoint holds; the
 * requests after that, and every request still unanswered, are sent to
 * it again in their first order (replay), before any new request to it.
 * The replay runs in a caller's thread (the next start or wait), with
 * send_mu held, as every send is: so nothing overtakes it.
 *
 * Size: it holds the worker's side of every store kind (dense keys, many-
 * key requests, row tables) with their op/sub machinery and waits;
 * splitting it by store kind behind one ops table is the next architecture
 * step, and until then the kinds share the op machinery here.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/spin.h"
#include "common/table.h"
#include "kv/kv_impl.h"

typedef struct op {
	dt_kv_req id;
	int cmd;
	dt_key key;
	int remaining;
	dt_err err;
	char msg[512];
	dt_hnode hn; /* in ops, by id */
	dt_lnode ln; /* in op_order */
	/* Observability: the call's start, when its last part was handed to
	 * the transport, the payload bytes sent and answered (c->mu). */
	uint64_t t0, t_sent, out_bytes, in_bytes;
} op;

/* Recovery: a request kept to be sent again to a restarted server. */
typedef struct logent {
	uint64_t seq; /* its first sequence number */
	int cmd;
	dt_key key;
	uint64_t arg0, arg1, arg2;
	uint64_t pidx; /* pushes: which push of this key to this server */
	uint8_t *meta;
	uint32_t meta_len;
	uint8_t *data; /* a copy of the payload (compressed, if it was) */
	size_t len;    /* bytes */
	int lost;      /* a push whose copy was not kept (DTRAIN_REPLAY_MAX) */
	dt_lnode ln;   /* in its server's log, oldest first */
} logent;

typedef struct sub {
	uint64_t seq;
	int server_id;
	void *dest;
	size_t bytes; /* of the value at dest (fp32, or halves: half_out) */
	unsigned enc; /* the answer's encoding asked for */
	int half_out; /* dest takes the halves as they come (fp16 arrays) */
	op *op;
	/* What was sent, to send it again (recovery). */
	int cmd;
	dt_key key;
	uint64_t arg0, arg1, arg2;
	logent *log;
	/* Recovery: a row pull's ids, to send again (row requests carry
	 * their ids as payload; the others logged keep theirs in log). */
	void *ids;
	size_t ids_len;
	dt_hnode hn; /* in subs, by seq */
} sub;

/* A key, and how many of this worker's pushes of it a server's
 * checkpoint holds (KV_CKPT_DONE). */
typedef struct held_key {
	dt_key key;
	uint64_t pushes;
} held_key;

/* Per server (recovery). */
typedef struct srv {
	dt_list log;    /* (mu) */
	int restarted;  /* (mu) a new process: its requests wait */
	int replay_due; /* (mu) its KV_CKPT_DONE came: replay now */
	size_t nheld;   /* (mu) what that said, sorted by key */
	held_key *held;
} srv;

/* A key's compression residual: what its pushes have not sent yet. */
typedef struct resid {
	dt_key key;
	size_t n;
	float *r;
	dt_hnode hn;
} resid;

/* Pushes of a key to each server so far (recovery). */
typedef struct keycount {
	dt_key key;
	uint64_t *pushes; /* by server rank */
	/* A restarted worker (dt_kv_resume): by server rank, the pushes of
	 * its predecessor the server holds (not sent again); and whether the
	 * key's next pull asks for the value of the round it resumes at. */
	uint64_t *held;
	int pull_at;
	dt_hnode hn;
} keycount;

/* A server's part of a batched call (reused from call to call). */
typedef struct mpart {
	size_t count, nvals, fill, vfill;
	size_t uniform; /* every key's length, unless mixed */
	int mixed;
	uint64_t *keys;
	uint32_t *lens;
	float *vals, *ans;
	uint8_t *enc; /* a row push, compressed */
	size_t keys_cap, lens_cap, vals_cap, ans_cap, enc_cap; /* bytes */
} mpart;

struct dt_kv_client {
	dt_node *node;
	int sync;
	size_t bound;
	dt_kv_part *parts;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	dt_gen done_gen; /* bumped when an op completes (common/spin.h) */
	uint64_t next_seq;
	uint64_t next_op;
	dt_table subs;    /* sub-requests in flight, by seq (mu) */
	dt_table ops;     /* ops not yet waited for, by id (mu) */
	dt_list op_order; /* the same ops, oldest first (mu) */
	/* Recovery (see the top). */
	int recover;
	int nservers;            /* (the node may be gone by destroy) */
	pthread_mutex_t send_mu; /* every send, and a replay whole */
	srv *srv;                /* by server rank */
	dt_table counts;         /* keycount by key (mu) */
	int replay_due;          /* (mu) some srv's is */
	uint64_t kept_bytes;     /* (mu) the logs' copies */
	uint64_t replay_max;     /* DTRAIN_REPLAY_MAX, bytes */
	int over_max;            /* (mu) told that copies were not kept */
	/* A process in a lost worker's place (recovery): it skips the
	 * set-up its predecessor did, and dt_kv_resume says where the
	 * predecessor stopped. */
	int rejoined;
	int resumed;          /* dt_kv_resume ran */
	uint64_t resume_step; /* what it said */
	/* Compression (the caller's thread only). */
	dt_quant_spec comp;
	unsigned pull_enc; /* DT_QUANT_NONE or DT_QUANT_FP16 */
	dt_table resids;   /* resid by key */
	uint8_t *cbuf;     /* a compressed part being sent */
	size_t cbuf_cap;
	/* Batched calls (the caller's thread only). */
	int batch;        /* sent as KV_*_MANY (dt__kv_client_batches) */
	mpart *mp;        /* by server rank */
	dt_table singles; /* keys of single-key inits (their store's) */
};

static sub *
take_sub(dt_kv_client *c, uint64_t seq)
{
	dt_hnode *h = dt__table_take(&c->subs, seq);

	return h ? DT_CONTAINER_OF(h, sub, hn) : NULL;
}

static sub *
find_sub(dt_kv_client *c, uint64_t seq)
{
	dt_hnode *h = dt__table_find(&c->subs, seq);

	return h ? DT_CONTAINER_OF(h, sub, hn) : NULL;
}

static op *
find_op(dt_kv_client *c, dt_kv_req id, int unlink)
{
	dt_hnode *h =
	    unlink ? dt__table_take(&c->ops, id) : dt__table_find(&c->ops, id);
	op *o = h ? DT_CONTAINER_OF(h, op, hn) : NULL;

	if (o && unlink)
		dt__list_remove(&o->ln);
	return o;
}

static void
op_fail(op *o, dt_err err, const char *msg)
{
	if (o->err == DT_OK) {
		o->err = err;
		snprintf(o->msg, sizeof(o->msg), "%s", msg);
	}
}

/* Complete a sub-request (under c->mu); 1 if its op is now complete, and
 * the caller signals c->cv once it has dropped the lock (the woken waiter
 * then does not block on the mutex). */
/* What a finished op was, for the counters and the timeline: its event
 * kind and latency class (-1: none), and whether it is batched. */
static void
op_kinds(int cmd, int *ev, int *lat, int *batched)
{
	*batched = 0;
	switch (cmd) {
	case DT_CMD_KV_PUSH_MANY:
	case DT_CMD_KV_PULL_MANY:
	case DT_CMD_KV_PUSHPULL_MANY:
		*batched = 1;
		*ev = cmd == DT_CMD_KV_PUSH_MANY   ? DT_EV_KV_PUSH_MANY
		      : cmd == DT_CMD_KV_PULL_MANY ? DT_EV_KV_PULL_MANY
		                                   : DT_EV_KV_PUSHPULL_MANY;
		*lat = cmd == DT_CMD_KV_PUSH_MANY   ? DT_LAT_PUSH
		       : cmd == DT_CMD_KV_PULL_MANY ? DT_LAT_PULL
		                                    : DT_LAT_PUSHPULL;
		return;
	case DT_CMD_KV_PUSH:
	case DT_CMD_KV_ROW_PUSH:
		*ev = DT_EV_KV_PUSH, *lat = DT_LAT_PUSH;
		return;
	case DT_CMD_KV_PULL:
	case DT_CMD_KV_ROW_PULL:
		*ev = DT_EV_KV_PULL, *lat = DT_LAT_PULL;
		return;
	case DT_CMD_KV_PUSHPULL:
	case DT_CMD_KV_ROW_PUSHPULL:
		*ev = DT_EV_KV_PUSHPULL, *lat = DT_LAT_PUSHPULL;
		return;
	case DT_CMD_KV_INIT:
	case DT_CMD_KV_INIT_MANY:
	case DT_CMD_KV_ROW_INIT:
		*ev = DT_EV_KV_INIT, *lat = -1;
		return;
	default:
		*ev = -1, *lat = -1;
	}
}

/* An op completed (c->mu held): count it, and put its phases on the
 * timeline (the call; queued until its last part was handed over; then
 * on the wire and at the servers until the last answer). */
static void
op_record(op *o)
{
	int ev, lat, batched;
	uint64_t now = dt__now_ns(), sent = o->t_sent ? o->t_sent : now;

	op_kinds(o->cmd, &ev, &lat, &batched);
	if (lat >= 0 && o->err == DT_OK) {
		if (batched)
			dt__obs_kv_batch(lat, o->out_bytes, o->in_bytes,
			                 now - o->t0);
		else
			dt__obs_kv(lat, o->key, o->out_bytes, o->in_bytes,
			           now - o->t0);
	}
	if (ev < 0 || !dt__tracing())
		return;
	unsigned f = (batched ? 0 : DT_EVF_KEY) | DT_EVF_BYTES;
	uint64_t id = (uint64_t)o->id;

	dt__trace_async(ev, id, o->t0, now, o->key, f,
	                o->out_bytes + o->in_bytes, -1);
	dt__trace_async(DT_EV_KV_QUEUED, id, o->t0, sent, o->key, f,
	                o->out_bytes, -1);
	dt__trace_async(DT_EV_KV_INFLIGHT, id, sent, now, o->key, f,
	                o->in_bytes, -1);
}

static int
sub_done(dt_kv_client *c, sub *s)
{
	int done = --s->op->remaining == 0;

	if (done) {
		op_record(s->op);
		dt__gen_bump(&c->done_gen);
	}
	free(s->ids);
	free(s);
	return done;
}

/* ---- recovery: the logs and the replay ---- */

/* A request that adds one to a key's pushes (a dense key's or a row
 * table's: each server that holds part of a table gets every push). */
static int
push_cmd(int cmd)
{
	return cmd == DT_CMD_KV_PUSH || cmd == DT_CMD_KV_PUSHPULL ||
	       cmd == DT_CMD_KV_ROW_PUSH || cmd == DT_CMD_KV_ROW_PUSHPULL;
}

static int
init_cmd(int cmd)
{
	return cmd == DT_CMD_KV_INIT || cmd == DT_CMD_KV_ROW_INIT;
}

static int
logged_cmd(int cmd)
{
	return cmd == DT_CMD_KV_CONFIG || cmd == DT_CMD_KV_SET_OPT ||
	       init_cmd(cmd) || push_cmd(cmd);
}

/* What a push becomes once its value is in the server's checkpoint and
 * only its answer is missing (a pushpull's: the pull), and what a
 * pushpull becomes once its answer came (the push alone). */
static int
pull_of(int cmd)
{
	return cmd == DT_CMD_KV_ROW_PUSHPULL ? DT_CMD_KV_ROW_PULL
	                                     : DT_CMD_KV_PULL;
}

static int
push_of(int cmd)
{
	return cmd == DT_CMD_KV_ROW_PUSH || cmd == DT_CMD_KV_ROW_PUSHPULL
	           ? DT_CMD_KV_ROW_PUSH
	           : DT_CMD_KV_PUSH;
}

static int
server_rank(const dt_kv_client *c, int server_id)
{
	return server_id - dt__node_server_id(c->node, 0);
}

/* (mu held) */
static void
logent_free(dt_kv_client *c, logent *e)
{
	if (e->data) {
		/* a replay may have left it with the links, by reference */
		dt__node_before_write(c->node, e->data, e->len);
		c->kept_bytes -= e->len;
	}
	dt__list_remove(&e->ln);
	free(e->meta);
	free(e->data);
	free(e);
}

/* A copy of a request about to be sent (no lock held), its payload the
 * iovcnt pieces of iov (none: not kept); NULL: no memory. */
static logent *
log_new(const dt_msg_hdr *h, const void *meta, uint32_t meta_len,
        const struct iovec *iov, int iovcnt)
{
	logent *e = calloc(1, sizeof(*e));
	size_t len = 0, off = 0;
	const void *val = iovcnt ? iov[0].iov_base : NULL;

	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;

	if (e == NULL)
		return NULL;
	e->cmd = h->cmd;
	e->key = h->key;
	e->arg0 = h->arg0;
	e->arg1 = h->arg1;
	e->arg2 = h->arg2;
	if (meta_len && (e->meta = malloc(meta_len)) != NULL) {
		memcpy(e->meta, meta, meta_len);
		e->meta_len = meta_len;
	}
	if (val && len && (e->data = malloc(len)) != NULL) {
		for (int i = 0; i < iovcnt; i++) {
			memcpy(e->data + off, iov[i].iov_base, iov[i].iov_len);
			off += iov[i].iov_len;
		}
		e->len = len;
	}
	if ((meta_len && !e->meta) || (val && len && !e->data)) {
		free(e->meta);
		free(e->data);
		free(e);
		return NULL;
	}
	return e;
}

/* The next push number of key to server rank r (mu held); -1: memory. */
static int64_t
next_push(dt_kv_client *c, dt_key key, int r)
{
	dt_hnode *h = dt__table_find(&c->counts, key);
	keycount *k;

	if (h == NULL) {
		k = calloc(1, sizeof(*k));
		if (k == NULL ||
		    (k->pushes = calloc((size_t)dt_node_num_servers(c->node),
		                        sizeof(uint64_t))) == NULL) {
			free(k);
			return -1;
		}
		k->key = key;
		dt__table_insert(&c->counts, &k->hn, key);
	} else {
		k = DT_CONTAINER_OF(h, keycount, hn);
	}
	return (int64_t)k->pushes[r]++;
}

static int
cmp_held(const void *a, const void *b)
{
	const held_key *x = a, *y = b;

	return (x->key > y->key) - (x->key < y->key);
}

/* How many of this worker's pushes of key a checkpoint holds; -1: it
 * does not hold the key. */
static int64_t
held_of(const held_key *held, size_t n, dt_key key)
{
	held_key want = {.key = key}, *f;

	f = n ? bsearch(&want, held, n, sizeof(*held), cmp_held) : NULL;
	return f ? (int64_t)f->pushes : -1;
}

/* KV_CKPT_DONE from server id sid (I/O thread). */
static void
on_ckpt_done(dt_kv_client *c, int sid, const dt_msg *m)
{
	dt_rbuf r;
	uint64_t number, count;
	held_key *held = NULL;
	int rank = server_rank(c, sid), restarted = (m->hdr.arg2 & 1) != 0;

	if (!c->recover || rank < 0 || rank >= dt_node_num_servers(c->node))
		return;
	dt__rbuf_init(&r, m->meta, m->hdr.meta_len);
	number = dt__rbuf_u64(&r);
	count = dt__rbuf_u64(&r);
	if (dt__rbuf_err(&r, "KV_CKPT_DONE") ||
	    count > (m->hdr.meta_len - 16) / 16 ||
	    (held = malloc(sizeof(*held) * (size_t)DT_MAX(count, 1))) == NULL) {
		dt__log(0, "ignoring a malformed KV_CKPT_DONE");
		return;
	}
	for (uint64_t i = 0; i < count; i++) {
		held[i].key = dt__rbuf_u64(&r);
		held[i].pushes = dt__rbuf_u64(&r);
	}
	qsort(held, (size_t)count, sizeof(*held), cmp_held);
	pthread_mutex_lock(&c->mu);
	srv *v = &c->srv[rank];
	if (restarted) {
		free(v->held);
		v->held = held;
		v->nheld = (size_t)count;
		v->replay_due = 1;
		c->replay_due = 1;
		held = NULL;
		dt__gen_bump(&c->done_gen); /* a waiter runs the replay */
	} else if (!v->restarted) {
		/* What the file holds is not kept any more. */
		dt_lnode *l = dt__list_first(&v->log), *next;

		for (; l; l = next) {
			logent *e = DT_CONTAINER_OF(l, logent, ln);
			int64_t have = held_of(held, (size_t)count, e->key);
			sub *s;

			next = dt__list_next(&v->log, l);
			if (have < 0 || e->cmd == DT_CMD_KV_CONFIG ||
			    e->cmd == DT_CMD_KV_SET_OPT ||
			    (!init_cmd(e->cmd) && e->pidx >= (uint64_t)have))
				continue;
			if ((s = find_sub(c, e->seq)) != NULL)
				s->log = NULL;
			logent_free(c, e);
		}
	}
	pthread_mutex_unlock(&c->mu);
	if (restarted)
		pthread_cond_broadcast(&c->cv);
	DT_LOG(1, "server %d %s checkpoint #%llu (%llu keys)", rank,
	       restarted ? "restarted from" : "wrote",
	       (unsigned long long)number, (unsigned long long)count);
	free(held);
}

/* A logged request the server refused changed nothing there: it is not
 * kept, and a refused push is not counted (mu held). */
static void
unlog_refused(dt_kv_client *c, sub *s)
{
	logent *e = s->log;
	int r = server_rank(c, s->server_id);

	s->log = NULL;
	if (push_cmd(e->cmd)) {
		dt_hnode *h = dt__table_find(&c->counts, e->key);

		for (dt_lnode *l = dt__list_next(&c->srv[r].log, &e->ln); l;
		     l = dt__list_next(&c->srv[r].log, l)) {
			logent *x = DT_CONTAINER_OF(l, logent, ln);

			if (x->key == e->key && push_cmd(x->cmd))
				x->pidx--;
		}
		if (h)
			DT_CONTAINER_OF(h, keycount, hn)->pushes[r]--;
	}
	logent_free(c, e);
}

static void
on_peer_restart(void *arg, dt_node *n, int peer)
{
	dt_kv_client *c = arg;
	int rank = server_rank(c, peer);

	(void)n;
	if (!c->recover || rank < 0 || rank >= dt_node_num_servers(c->node))
		return;
	pthread_mutex_lock(&c->mu);
	c->srv[rank].restarted = 1; /* new requests wait for the replay */
	pthread_mutex_unlock(&c->mu);
}

/* One request to send again. */
typedef struct item {
	uint64_t order; /* its first sequence number */
	dt_msg_hdr h;
	const void *meta;
	uint32_t meta_len;
	const void *val;
	size_t len; /* bytes */
} item;

static int
cmp_item(const void *a, const void *b)
{
	const item *x = a, *y = b;

	return (x->order > y->order) - (x->order < y->order);
}

/* A pushpull the checkpoint holds, whose answer is missing: its pull (a
 * row pull carries the pushpull's ids, the first part of its payload). */
static item
held_pull(const item *x, const logent *e)
{
	item p = *x;

	p.h.cmd = (uint8_t)pull_of(e->cmd);
	p.h.arg2 =
	    dt__kv_enc(DT_QUANT_NONE, (dt_quant_kind)DT_KV_ENC_ANSWER(e->arg2));
	p.meta = NULL;
	p.meta_len = 0;
	p.val = NULL;
	p.len = 0;
	if (e->cmd == DT_CMD_KV_ROW_PUSHPULL && e->data &&
	    e->arg0 <= e->len / 8) {
		p.val = e->data;
		p.len = (size_t)e->arg0 * 8;
	}
	return p;
}

/* Send server rank r's replay (send_mu held, mu not). */
static void
replay(dt_kv_client *c, int r)
{
	int sid = dt__node_server_id(c->node, r);
	srv *v = &c->srv[r];
	item *it = NULL;
	size_t n = 0, cap = 0, local = 0;
	dt_table_iter ti;

	pthread_mutex_lock(&c->mu);
	const held_key *held = v->held;
	size_t nheld = v->nheld;

	cap = 16;
	for (dt_lnode *l = dt__list_first(&v->log); l;
	     l = dt__list_next(&v->log, l))
		cap++;
	cap += dt__table_count(&c->subs);
	it = calloc(cap, sizeof(*it));
	for (dt_lnode *l = dt__list_first(&v->log); l && it;
	     l = dt__list_next(&v->log, l)) {
		logent *e = DT_CONTAINER_OF(l, logent, ln);
		int64_t have = held_of(held, nheld, e->key);
		sub *s = find_sub(c, e->seq);

		if (e->lost && (have < 0 || e->pidx >= (uint64_t)have)) {
			/* The server needs a push whose copy is gone. */
			dt_key key = e->key;
			uint64_t pidx = e->pidx;

			v->replay_due = 0;
			pthread_mutex_unlock(&c->mu);
			free(it);
			dt__node_set_fatal(
			    c->node, DT_ESTATE,
			    "server %d restarted, but its checkpoint does not "
			    "hold push #%llu of key %llu from this worker, "
			    "and this worker did not keep a copy of it: its "
			    "copies had passed DTRAIN_REPLAY_MAX (%llu MiB) "
			    "since the server's last checkpoint",
			    r, (unsigned long long)pidx + 1,
			    (unsigned long long)key,
			    (unsigned long long)(c->replay_max >> 20));
			return;
		}
		item x = {.order = e->seq,
		          .h = {.cmd = (uint8_t)e->cmd,
		                .flags = DT_F_REQUEST,
		                .seq = s ? e->seq : 0,
		                .key = e->key,
		                .arg0 = e->arg0,
		                .arg1 = e->arg1,
		                .arg2 = e->arg2},
		          .meta = e->meta,
		          .meta_len = e->meta_len,
		          .val = e->data,
		          .len = e->len};

		if (push_cmd(e->cmd)) {
			if (have >= 0 && e->pidx < (uint64_t)have) {
				/* In the file already: only its answer is
				 * missing, if any. */
				if (s && push_of(e->cmd) == e->cmd) {
					take_sub(c, s->seq);
					sub_done(c, s);
					local++;
				} else if (s) {
					it[n++] = held_pull(&x, e);
				}
				continue;
			}
			if (!s) { /* (its answer came) */
				x.h.cmd = (uint8_t)push_of(e->cmd);
				x.h.arg2 &= ~(0xffu << 8);
			}
		} else if (init_cmd(e->cmd) && have >= 0 && !s) {
			continue; /* the key is in the file */
		}
		it[n++] = x;
	}
	/* Unanswered requests that change nothing (pulls, checkpoints). */
	for (dt_hnode *h = dt__table_first(&c->subs, &ti); h && it;
	     h = dt__table_next(&ti)) {
		sub *s = DT_CONTAINER_OF(h, sub, hn);

		if (s->server_id != sid || s->log || n == cap)
			continue;
		it[n++] = (item){.order = s->seq,
		                 .h = {.cmd = (uint8_t)s->cmd,
		                       .flags = DT_F_REQUEST,
		                       .seq = s->seq,
		                       .key = s->key,
		                       .arg0 = s->arg0,
		                       .arg1 = s->arg1,
		                       .arg2 = s->arg2},
		                 .val = s->ids,
		                 .len = s->ids_len};
	}
	v->replay_due = 0;
	pthread_mutex_unlock(&c->mu);
	if (local)
		pthread_cond_broadcast(&c->cv);
	if (it == NULL) {
		dt__node_set_fatal(c->node, DT_ENOMEM,
		                   "replay to server %d: out of memory", r);
		return;
	}
	qsort(it, n, sizeof(*it), cmp_item);
	dt__log(0, "sending %zu requests again to server %d (a new process)", n,
	        r);
	/* The log entries stay: a KV_CKPT_DONE does not trim this server's
	 * while it is marked restarted (until the end of this). */
	for (size_t i = 0; i < n; i++) {
		struct iovec iov = {(void *)it[i].val, it[i].len};

		(void)dt__node_send_ex(c->node, sid, &it[i].h, it[i].meta,
		                       it[i].meta_len, it[i].val ? &iov : NULL,
		                       it[i].val ? 1 : 0, DT_SEND_STABLE);
	}
	/* The end of this worker's replay: once the server has every
	 * worker's, a request for a key it still has no value for is an
	 * error again, not a wait. */
	dt_msg_hdr done = {.cmd = DT_CMD_KV_REPLAYED, .flags = DT_F_REQUEST};

	(void)dt__node_send(c->node, sid, &done, NULL, 0, NULL, 0);
	free(it);
	pthread_mutex_lock(&c->mu);
	v->restarted = 0;
	free(v->held);
	v->held = NULL;
	v->nheld = 0;
	pthread_mutex_unlock(&c->mu);
}

/* Any replay due, before anything else is sent (send_mu held). */
static void
run_replays(dt_kv_client *c)
{
	int due;

	pthread_mutex_lock(&c->mu);
	due = c->replay_due;
	c->replay_due = 0;
	pthread_mutex_unlock(&c->mu);
	if (!due)
		return;
	for (int r = 0; r < dt_node_num_servers(c->node); r++) {
		int mine;

		pthread_mutex_lock(&c->mu);
		mine = c->srv[r].replay_due;
		pthread_mutex_unlock(&c->mu);
		if (mine)
			replay(c, r);
	}
}

static void *
payload_dest(void *arg, dt_node *n, dt_conn *conn, const dt_msg_hdr *h,
             const uint8_t *meta)
{
	dt_kv_client *c = arg;
	void *dest = DT_VAN_DISCARD;
	sub *s;

	pthread_mutex_lock(&c->mu);
	s = find_sub(c, h->seq);
	if (s && s->dest && h->arg2 == s->enc) {
		if ((s->enc == DT_QUANT_NONE || s->half_out) &&
		    h->payload_len == s->bytes)
			dest = s->dest;
		/* fp16: into the output's second half, widened in place
		 * once whole (on_msg) */
		else if (s->enc == DT_QUANT_FP16 &&
		         h->payload_len == s->bytes / 2)
			dest = (uint8_t *)s->dest + s->bytes / 2;
	}
	pthread_mutex_unlock(&c->mu);
	return dest;
}

/* The answer's payload size for s. */
static size_t
answer_bytes(const sub *s)
{
	return s->enc == DT_QUANT_FP16 && !s->half_out ? s->bytes / 2
	                                               : s->bytes;
}

static void
on_msg(void *arg, dt_node *n, dt_conn *conn, dt_msg *m)
{
	dt_kv_client *c = arg;
	const dt_msg_hdr *h = &m->hdr;
	char name[64], msg[512];
	sub *s;

	if (h->cmd == DT_CMD_KV_CKPT_DONE && !(h->flags & DT_F_RESPONSE) &&
	    dt__conn_peer(conn) == (int)h->sender) {
		on_ckpt_done(c, (int)h->sender, m);
		return;
	}
	if (!(h->flags & DT_F_RESPONSE))
		return;
	if (h->seq == 0) /* a replayed request already answered once */
		return;
	pthread_mutex_lock(&c->mu);
	s = take_sub(c, h->seq);
	if (s == NULL || s->server_id != (int)h->sender) {
		pthread_mutex_unlock(&c->mu);
		dt__log(0, "ignoring an answer to unknown request %llu from %s",
		        (unsigned long long)h->seq,
		        dt__node_name(n, (int)h->sender, name, sizeof(name)));
		return;
	}
	if (!(h->flags & DT_F_ERROR))
		s->op->in_bytes += h->payload_len;
	if (h->flags & DT_F_ERROR) {
		dt_err code;

		if (dt__kv_error_decode(m->meta, h->meta_len, &code, msg,
		                        sizeof(msg))) {
			code = DT_EPROTO;
			snprintf(msg, sizeof(msg), "malformed error answer");
		}
		op_fail(s->op, code, msg);
		if (s->log)
			unlog_refused(c, s);
	} else if (s->dest && (h->arg2 != s->enc || !m->payload ||
	                       h->payload_len != answer_bytes(s))) {
		snprintf(msg, sizeof(msg),
		         "%s of key %llu: %s answered %llu bytes in encoding "
		         "%llu, expected %zu in %s",
		         dt__kv_op_name(s->op->cmd),
		         (unsigned long long)s->op->key,
		         dt__node_name(n, (int)h->sender, name, sizeof(name)),
		         (unsigned long long)h->payload_len,
		         (unsigned long long)h->arg2, answer_bytes(s),
		         s->enc == DT_QUANT_FP16 ? "fp16" : "fp32");
		op_fail(s->op, DT_ESIZE, msg);
	} else if (s->dest && s->half_out) {
		if (m->payload != s->dest) /* (not received in place) */
			memcpy(s->dest, m->payload, s->bytes);
	} else if (s->dest && s->enc == DT_QUANT_FP16) {
		/* The sub is ours (out of the table): widen the halves
		 * without the lock. */
		pthread_mutex_unlock(&c->mu);
		if ((uint8_t *)m->payload != (uint8_t *)s->dest + s->bytes / 2)
			memcpy((uint8_t *)s->dest + s->bytes / 2, m->payload,
			       s->bytes / 2);
		dt__dequant_fp16_inplace(s->dest, s->bytes / sizeof(float));
		pthread_mutex_lock(&c->mu);
	}
	int done = sub_done(c, s);
	pthread_mutex_unlock(&c->mu);
	if (done)
		pthread_cond_broadcast(&c->cv);
}

static void
on_fail(void *arg, dt_node *n, int peer, dt_err err)
{
	dt_kv_client *c = arg;
	char name[64], msg[512];

	if (peer < 0) {
		dt__node_fatal(n, msg, sizeof(msg));
	} else {
		snprintf(msg, sizeof(msg), "lost the connection to %s",
		         dt__node_name(n, peer, name, sizeof(name)));
	}
	pthread_mutex_lock(&c->mu);
	dt_table_iter it;
	for (dt_hnode *h = dt__table_first(&c->subs, &it); h;
	     h = dt__table_next(&it)) {
		sub *s = DT_CONTAINER_OF(h, sub, hn);

		if (peer >= 0 && s->server_id != peer)
			continue;
		dt__table_remove(&c->subs, h);
		op_fail(s->op, err, msg);
		sub_done(c, s);
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

dt_err
dt__kv_client_create(dt_node *node, int sync, size_t bound, dt_kv_client **out)
{
	dt_kv_client *c = dt__calloc(1, sizeof(*c));
	dt__app_hooks app = {0};
	dt_err err;

	if (c == NULL)
		return DT_ENOMEM;
	c->parts = dt__calloc((size_t)DT_MAX(dt_node_num_servers(node), 1),
	                      sizeof(dt_kv_part));
	if (c->parts == NULL) {
		free(c);
		return DT_ENOMEM;
	}
	c->node = node;
	c->sync = sync;
	c->bound = bound;
	c->next_seq = 1;
	c->next_op = 1;
	c->recover = dt__node_recover(node);
	c->rejoined = c->recover && dt__node_rejoined(node);
	if (c->recover) {
		long mib;

		if ((err = dt__env_long("DTRAIN_REPLAY_MAX", 1024, 0, 1L << 30,
		                        &mib))) {
			free(c->parts);
			free(c);
			return err;
		}
		c->replay_max = (uint64_t)mib << 20;
	}
	c->nservers = dt_node_num_servers(node);
	c->srv = dt__calloc((size_t)DT_MAX(dt_node_num_servers(node), 1),
	                    sizeof(srv));
	if (c->srv == NULL) {
		free(c->parts);
		free(c);
		return DT_ENOMEM;
	}
	for (int i = 0; i < dt_node_num_servers(node); i++)
		dt__list_init(&c->srv[i].log);
	c->mp = dt__calloc((size_t)DT_MAX(dt_node_num_servers(node), 1),
	                   sizeof(mpart));
	if (c->mp == NULL) {
		free(c->srv);
		free(c->parts);
		free(c);
		return DT_ENOMEM;
	}
	{
		const char *ck = dt__env_str("DTRAIN_CHECKPOINT_DIR");

		c->batch = !c->recover && (ck == NULL || *ck == '\0');
	}
	dt__table_init(&c->counts);
	dt__table_init(&c->resids);
	dt__table_init(&c->singles);
	pthread_mutex_init(&c->send_mu, NULL);
	pthread_mutex_init(&c->mu, NULL);
	dt__cond_init_monotonic(&c->cv); /* dt__van_wait's deadlines */
	dt__table_init(&c->subs);
	dt__table_init(&c->ops);
	dt__list_init(&c->op_order);
	app.arg = c;
	app.on_msg = on_msg;
	app.payload_dest = payload_dest;
	app.dest_pure = 1; /* it finds the output buffer, nothing more */
	app.on_fail = on_fail;
	app.on_peer_restart = on_peer_restart;
	if ((err = dt__node_attach(node, &dt__kv_app, &app))) {
		dt__table_fini(&c->subs);
		dt__table_fini(&c->ops);
		dt__table_fini(&c->counts);
		dt__table_fini(&c->resids);
		pthread_mutex_destroy(&c->mu);
		pthread_mutex_destroy(&c->send_mu);
		pthread_cond_destroy(&c->cv);
		free(c->mp);
		free(c->srv);
		free(c->parts);
		free(c);
		return err;
	}
	*out = c;
	return DT_OK;
}

void
dt__kv_client_destroy(dt_kv_client *c)
{
	if (c == NULL)
		return;
	/* The node is stopped (its I/O thread joined) or the app detached:
	 * nothing can call into c any more. */
	dt_table_iter it;
	for (dt_hnode *h = dt__table_first(&c->subs, &it); h;
	     h = dt__table_next(&it)) {
		free(DT_CONTAINER_OF(h, sub, hn)->ids);
		free(DT_CONTAINER_OF(h, sub, hn));
	}
	dt__table_fini(&c->subs);
	for (dt_lnode *l; (l = dt__list_pop_front(&c->op_order));) {
		op *o = DT_CONTAINER_OF(l, op, ln);

		dt__table_remove(&c->ops, &o->hn);
		free(o);
	}
	dt__table_fini(&c->ops);
	for (int i = 0; i < c->nservers; i++) {
		for (dt_lnode *l; (l = dt__list_pop_front(&c->srv[i].log));) {
			logent *e = DT_CONTAINER_OF(l, logent, ln);

			free(e->meta);
			free(e->data);
			free(e);
		}
		free(c->srv[i].held);
	}
	free(c->srv);
	for (dt_hnode *h = dt__table_first(&c->counts, &it); h;
	     h = dt__table_next(&it)) {
		keycount *k = DT_CONTAINER_OF(h, keycount, hn);

		free(k->pushes);
		free(k->held);
		free(k);
	}
	dt__table_fini(&c->counts);
	for (dt_hnode *h = dt__table_first(&c->resids, &it); h;
	     h = dt__table_next(&it)) {
		resid *r = DT_CONTAINER_OF(h, resid, hn);

		free(r->r);
		free(r);
	}
	dt__table_fini(&c->resids);
	free(c->cbuf);
	for (int i = 0; i < c->nservers; i++) {
		free(c->mp[i].keys);
		free(c->mp[i].lens);
		free(c->mp[i].vals);
		free(c->mp[i].ans);
		free(c->mp[i].enc);
	}
	free(c->mp);
	for (dt_hnode *h = dt__table_first(&c->singles, &it); h;
	     h = dt__table_next(&it))
		free(h);
	dt__table_fini(&c->singles);
	pthread_mutex_destroy(&c->mu);
	pthread_mutex_destroy(&c->send_mu);
	pthread_cond_destroy(&c->cv);
	free(c->parts);
	free(c);
}

static keycount *
find_count(dt_kv_client *c, dt_key key)
{
	dt_hnode *h = dt__table_find(&c->counts, key);

	return h ? DT_CONTAINER_OF(h, keycount, hn) : NULL;
}

/* Whether this push of key to server r is one the server holds from the
 * predecessor (then it is counted as made). */
static int
held_push(dt_kv_client *c, dt_key key, int r)
{
	keycount *k;
	int held = 0;

	pthread_mutex_lock(&c->mu);
	k = find_count(c, key);
	if (k && k->held && k->pushes[r] < k->held[r]) {
		k->pushes[r]++;
		held = 1;
	}
	pthread_mutex_unlock(&c->mu);
	return held;
}

/* The send of sub-request seq of o failed with err (dt_errmsg() says
 * why): o fails, unless on_fail got there first. */
static void
send_failed(dt_kv_client *c, op *o, uint64_t seq, dt_err err)
{
	char msg[512];
	sub *s;

	snprintf(msg, sizeof(msg), "%s", dt_errmsg());
	pthread_mutex_lock(&c->mu);
	if ((s = take_sub(c, seq)) != NULL) {
		op_fail(o, err, msg);
		sub_done(c, s);
	}
	pthread_mutex_unlock(&c->mu);
	pthread_cond_broadcast(&c->cv);
}

/* Recovery: whether a push's copy of vbytes may be kept (within
 * DTRAIN_REPLAY_MAX: else a record without the data, and a restart that
 * needs it ends the job, named). */
static int
keep_copy(dt_kv_client *c, size_t vbytes)
{
	int keep, tell;

	pthread_mutex_lock(&c->mu);
	keep = c->kept_bytes + vbytes <= c->replay_max;
	tell = !keep && !c->over_max;
	c->over_max |= !keep;
	pthread_mutex_unlock(&c->mu);
	if (tell)
		dt__log(0,
		        "the copies of pushes kept to replay to a restarted "
		        "server reach DTRAIN_REPLAY_MAX (%llu MiB): pushes "
		        "past it are not kept until a server checkpoint holds "
		        "the older ones, and a server restart that needs one "
		        "ends the job",
		        (unsigned long long)(c->replay_max >> 20));
	return keep;
}

/*
 * Send one sub-request; the sub is registered before the send. val is
 * vbytes of payload: the caller's (stable until the answer) or, when
 * vflags lacks DT_SEND_STABLE, a scratch buffer reused after the call.
 * out (len floats) receives the answer's value, in encoding h->arg2 asks.
 */
static void
send_part(dt_kv_client *c, op *o, int server, dt_msg_hdr *h, const void *meta,
          uint32_t meta_len, const void *val, size_t vbytes, unsigned vflags,
          void *out, size_t len, int half_out)
{
	struct iovec iov = {(void *)val, vbytes};
	sub *s = malloc(sizeof(*s));
	logent *le = NULL;
	int parked = 0;
	dt_err err = DT_OK;

	/* A restarted worker: a push its predecessor made already is not
	 * made again (a pushpull is then a pull). */
	if (c->resumed &&
	    (h->cmd == DT_CMD_KV_PUSH || h->cmd == DT_CMD_KV_PUSHPULL) &&
	    held_push(c, h->key, server)) {
		if (h->cmd == DT_CMD_KV_PUSH) {
			int done;

			free(s);
			pthread_mutex_lock(&c->mu);
			done = --o->remaining == 0;
			if (done)
				dt__gen_bump(&c->done_gen);
			pthread_mutex_unlock(&c->mu);
			if (done)
				pthread_cond_broadcast(&c->cv);
			return;
		}
		h->cmd = DT_CMD_KV_PULL;
		h->arg2 = dt__kv_enc(DT_QUANT_NONE, DT_KV_ENC_ANSWER(h->arg2));
		meta = NULL;
		meta_len = 0;
		val = NULL;
		vbytes = 0;
		iov = (struct iovec){NULL, 0};
	}
	/* Recovery: a copy, to send again to a restarted server (a push's
	 * data only within DTRAIN_REPLAY_MAX: keep_copy). */
	int keep = !(s && c->recover && val && vbytes && push_cmd(h->cmd)) ||
	           keep_copy(c, vbytes);

	if (s && c->recover && logged_cmd(h->cmd) &&
	    (le = log_new(h, meta, meta_len, &iov, keep && val ? 1 : 0)) ==
	        NULL) {
		free(s);
		s = NULL;
	}
	if (le && !keep)
		le->lost = 1;
	/* (without recovery nothing is replayed: no send order to keep) */
	if (c->recover) {
		pthread_mutex_lock(&c->send_mu);
		run_replays(c);
	}
	pthread_mutex_lock(&c->mu);
	int64_t pidx = 0;

	if (s && le &&
	    (h->cmd == DT_CMD_KV_PUSH || h->cmd == DT_CMD_KV_PUSHPULL) &&
	    (pidx = next_push(c, h->key, server)) < 0) {
		free(le->meta); /* (on no list yet, never sent) */
		free(le->data);
		free(le);
		free(s);
		s = NULL;
	}
	if (s == NULL) {
		op_fail(o, DT_ENOMEM, "out of memory");
		o->remaining--;
		pthread_mutex_unlock(&c->mu);
		if (c->recover)
			pthread_mutex_unlock(&c->send_mu);
		return;
	}
	h->seq = c->next_seq++;
	*s = (sub){.seq = h->seq,
	           .server_id = dt__node_server_id(c->node, server),
	           .dest = out,
	           .bytes = out ? len * (half_out ? 2 : sizeof(float)) : 0,
	           .enc = out ? DT_KV_ENC_ANSWER(h->arg2) : 0,
	           .half_out = half_out,
	           .op = o,
	           .cmd = h->cmd,
	           .key = h->key,
	           .arg0 = h->arg0,
	           .arg1 = h->arg1,
	           .arg2 = h->arg2,
	           .log = le};
	dt__table_insert(&c->subs, &s->hn, s->seq);
	o->out_bytes += vbytes;
	o->t_sent = dt__now_ns();
	if (le) {
		le->seq = h->seq;
		le->pidx = (uint64_t)pidx;
		dt__list_push_back(&c->srv[server].log, &le->ln);
		c->kept_bytes += le->len;
	}
	/* A restarted server gets it in its replay, in order. */
	parked = c->recover && c->srv[server].restarted;
	pthread_mutex_unlock(&c->mu);

	/* The caller keeps val untouched until the answer (kv.h). */
	if (!parked)
		err = dt__node_send_ex(c->node, s->server_id, h, meta, meta_len,
		                       val ? &iov : NULL, val ? 1 : 0, vflags);
	if (c->recover)
		pthread_mutex_unlock(&c->send_mu);
	if (err)
		send_failed(c, o, h->seq, err);
}

static op *
new_op(dt_kv_client *c, int cmd, dt_key key, int parts, dt_kv_req *req)
{
	op *o = dt__calloc(1, sizeof(*o));

	if (o == NULL)
		return NULL;
	pthread_mutex_lock(&c->mu);
	o->id = c->next_op++;
	o->cmd = cmd;
	o->key = key;
	o->t0 = dt__now_ns();
	o->remaining = parts;
	dt__table_insert(&c->ops, &o->hn, o->id);
	dt__list_push_back(&c->op_order, &o->ln);
	pthread_mutex_unlock(&c->mu);
	*req = o->id;
	return o;
}

/* The residual of key (n floats, zeros at first), or NULL: no memory. */
static float *
residual(dt_kv_client *c, dt_key key, size_t n)
{
	dt_hnode *h = dt__table_find(&c->resids, key);
	resid *r = h ? DT_CONTAINER_OF(h, resid, hn) : NULL;

	if (r && r->n != n) { /* initialised again with another length */
		dt__table_remove(&c->resids, &r->hn);
		free(r->r);
		free(r);
		r = NULL;
	}
	if (r == NULL) {
		if ((r = calloc(1, sizeof(*r))) == NULL ||
		    (r->r = calloc(DT_MAX(n, 1), sizeof(float))) == NULL) {
			free(r);
			return NULL;
		}
		r->key = key;
		r->n = n;
		dt__table_insert(&c->resids, &r->hn, key);
	}
	return r->r;
}

dt_err
dt__kv_client_start(dt_kv_client *c, int cmd, dt_key key, const float *val,
                    float *out, size_t n, dt_kv_req *req)
{
	return dt__kv_client_start_ex(c, cmd, key, val, out, n, 0, req);
}

dt_err
dt__kv_client_start_ex(dt_kv_client *c, int cmd, dt_key key, const void *val,
                       void *out, size_t n, int half, dt_kv_req *req)
{
	/* (a restarted worker 0 does not set the values again) */
	int nparts,
	    rank0 = dt_node_rank(c->node) == 0 && !(c->rejoined && !c->resumed);

	int pushes = cmd == DT_CMD_KV_PUSH || cmd == DT_CMD_KV_PUSHPULL;
	int comp = !half && pushes && c->comp.kind != DT_QUANT_NONE &&
	           n >= c->comp.min_size;
	size_t esz = half ? 2 : sizeof(float); /* the caller's element */
	uint8_t meta[8];
	uint32_t meta_len = 0;
	float *res = NULL;
	op *o;
	dt_err err;

	if ((err = dt__node_check(c->node)))
		return err;
	/* Compressed parts are made one at a time in one buffer (each send
	 * copies what it keeps), so the largest part is its size. */
	if (comp) {
		size_t want = dt__quant_size(c->comp.kind, n);

		if ((c->comp.kind != DT_QUANT_FP16 &&
		     (res = residual(c, key, n)) == NULL))
			return dt__fail(
			    DT_ENOMEM,
			    "push of key %llu: out of memory for its "
			    "residual",
			    (unsigned long long)key);
		if (!dt__buf_reserve(&c->cbuf, &c->cbuf_cap, want))
			return dt__fail(DT_ENOMEM,
			                "push of key %llu: out of memory "
			                "compressing it",
			                (unsigned long long)key);
	}
	if (comp && c->comp.kind == DT_QUANT_2BIT) {
		dt__kv_threshold_meta(c->comp.threshold, meta);
		meta_len = 4;
	}
	nparts = dt__kv_place(key, n, dt_node_num_servers(c->node), c->bound,
	                      c->parts);
	/* A restarted worker's first pull of a key: the value of the round
	 * it computes again (dt_kv_resume). */
	int at = 0;
	if (c->resumed && c->sync && cmd == DT_CMD_KV_PULL) {
		keycount *k;

		pthread_mutex_lock(&c->mu);
		if ((k = find_count(c, key)) != NULL && k->pull_at) {
			k->pull_at = 0;
			at = 1;
		}
		pthread_mutex_unlock(&c->mu);
		if (at) {
			dt__put_u64(meta, c->resume_step);
			meta_len = 8;
		}
	}
	if ((o = new_op(c, cmd, key, nparts, req)) == NULL)
		return DT_ENOMEM;
	for (int i = 0; i < nparts; i++) {
		dt_kv_part *p = &c->parts[i];
		dt_msg_hdr h = {.cmd = (uint8_t)cmd,
		                .flags = DT_F_REQUEST,
		                .key = key,
		                .arg0 = n,
		                .arg1 = p->offset};
		const void *pv = NULL;
		size_t vbytes = p->len * esz;
		unsigned vflags = DT_SEND_STABLE;
		void *po = NULL;
		const uint8_t *v8 = val;
		uint8_t *o8 = out;

		if (cmd ==
		    DT_CMD_KV_INIT) { /* (fp32: dt_kv_init_fp16 widens) */
			if (rank0) {
				h.arg2 = DT_KV_INIT_HAS_VALUE;
				pv = v8 + p->offset * sizeof(float);
				vbytes = p->len * sizeof(float);
			}
		} else if (pushes) {
			pv = v8 + p->offset * esz;
			if (cmd == DT_CMD_KV_PUSHPULL)
				po = o8 + p->offset * esz;
		} else if (cmd == DT_CMD_KV_PULL) {
			po = o8 + p->offset * esz;
		}
		if (comp) { /* each part its own body, as if it were a key */
			dt__quant_encode(
			    &c->comp, (const float *)val + p->offset,
			    res ? res + p->offset : NULL, p->len, c->cbuf);
			pv = c->cbuf;
			vbytes = dt__quant_size(c->comp.kind, p->len);
			vflags = 0;
		}
		if (cmd != DT_CMD_KV_INIT)
			h.arg2 =
			    dt__kv_enc(comp             ? c->comp.kind
			               : half && pushes ? DT_QUANT_FP16
			                                : DT_QUANT_NONE,
			               !po    ? DT_QUANT_NONE
			               : half ? DT_QUANT_FP16
			                      : (dt_quant_kind)c->pull_enc) |
			    (at ? DT_KV_AT_ROUND : 0);
		send_part(c, o, p->server, &h, meta, meta_len, pv,
		          pv ? vbytes : 0, vflags, po, p->len, half);
	}
	return DT_OK;
}

void
dt__kv_client_set_compression(dt_kv_client *c, const dt_quant_spec *comp)
{
	c->comp = *comp;
}

void
dt__kv_client_set_pull_fp16(dt_kv_client *c, int on)
{
	c->pull_enc = on ? DT_QUANT_FP16 : DT_QUANT_NONE;
}

dt_err
dt__kv_client_wait(dt_kv_client *c, dt_kv_req req)
{
	op *o;
	dt_err err;

	pthread_mutex_lock(&c->mu);
	o = find_op(c, req, 0);
	if (o == NULL) {
		pthread_mutex_unlock(&c->mu);
		return dt__fail(DT_EINVAL, "wait: unknown request %llu",
		                (unsigned long long)req);
	}
	/* A short answer comes before a sleep would end: the wait reads the
	 * network itself first (dt__node_wait_gen). A server that has not
	 * answered within DT_WAIT_TIMEOUT ends the node: its connections to
	 * the servers close (nothing more lands in a caller's buffer) and
	 * every pending call fails with the reason. */
	uint64_t t_wait = dt__now_ns();
	uint64_t until = t_wait + dt__node_wait_ns(c->node);
	int waited = o->remaining > 0;
	while (o->remaining > 0) {
		if (until && dt__now_ns() >= until) {
			int cmd = o->cmd;
			dt_key key = o->key;

			pthread_mutex_unlock(&c->mu);
			dt__node_set_fatal(
			    c->node, DT_ETIMEDOUT,
			    "%s of key %llu: no answer from the servers within "
			    "DT_WAIT_TIMEOUT=%llu s",
			    dt__cmd_name(cmd), (unsigned long long)key,
			    (unsigned long long)(dt__node_wait_ns(c->node) /
			                         1000000000ull));
			for (int s = 0; s < dt_node_num_servers(c->node); s++)
				dt__node_close_peer(
				    c->node, dt__node_server_id(c->node, s));
			pthread_mutex_lock(&c->mu);
			until = 0; /* the failure ends the wait */
			continue;
		}
		if (c->replay_due) { /* (a restarted server's, here) */
			pthread_mutex_unlock(&c->mu);
			pthread_mutex_lock(&c->send_mu);
			run_replays(c);
			pthread_mutex_unlock(&c->send_mu);
			pthread_mutex_lock(&c->mu);
			continue;
		}
		dt__node_wait_gen(c->node, &c->done_gen, &c->mu, &c->cv, until);
	}
	find_op(c, req, 1);
	pthread_mutex_unlock(&c->mu);
	if (waited)
		dt__trace_span(DT_EV_KV_WAIT, DT_TID_MAIN, t_wait, o->key,
		               DT_EVF_KEY, 0, -1);
	err = o->err;
	if (err)
		dt__fail(err, "%s", o->msg);
	free(o);
	return err;
}

dt_err
dt__kv_client_wait_all(dt_kv_client *c)
{
	dt_err first = DT_OK;
	char msg[512] = "";

	for (;;) {
		dt_kv_req id = 0;
		dt_err err;

		pthread_mutex_lock(&c->mu);
		if (!dt__list_empty(&c->op_order))
			id = DT_CONTAINER_OF(dt__list_first(&c->op_order), op,
			                     ln)
			         ->id;
		pthread_mutex_unlock(&c->mu);
		if (!id)
			break;
		err = dt__kv_client_wait(c, id);
		if (err && !first) {
			first = err;
			snprintf(msg, sizeof(msg), "%s", dt_errmsg());
		}
	}
	if (first)
		dt__fail(first, "%s", msg);
	return first;
}

static dt_err
broadcast_to_servers(dt_kv_client *c, int cmd, uint64_t arg0, const void *meta,
                     uint32_t meta_len)
{
	dt_kv_req req;
	op *o = new_op(c, cmd, 0, dt_node_num_servers(c->node), &req);

	if (o == NULL)
		return DT_ENOMEM;
	for (int s = 0; s < dt_node_num_servers(c->node); s++) {
		dt_msg_hdr h = {
		    .cmd = (uint8_t)cmd, .flags = DT_F_REQUEST, .arg0 = arg0};
		send_part(c, o, s, &h, meta, meta_len, NULL, 0, DT_SEND_STABLE,
		          NULL, 0, 0);
	}
	return dt__kv_client_wait(c, req);
}

/* What rank 0 did (err, with its message) reaches every worker: all of
 * them pass a barrier that carries the outcome. */
dt_err
dt__kv_client_agree(dt_kv_client *c, dt_err err)
{
	char msg[256];

	snprintf(msg, sizeof(msg), "%s", err ? dt_errmsg() : "");
	return dt__node_barrier_status(c->node, DT_GROUP_WORKERS, err, msg);
}

dt_err
dt__kv_client_set_optimizer(dt_kv_client *c, const dt_opt *opt)
{
	dt_wbuf w;
	dt_err err = DT_OK;

	if (c->rejoined && !c->resumed) /* (the servers have it) */
		return DT_OK;
	if (dt_node_rank(c->node) == 0) {
		dt__wbuf_init(&w);
		dt__opt_encode(opt, &w);
		err = dt__wbuf_err(&w);
		if (!err)
			err = broadcast_to_servers(c, DT_CMD_KV_SET_OPT, 0,
			                           w.data, (uint32_t)w.len);
		dt__wbuf_fini(&w);
	}
	return dt__kv_client_agree(c, err);
}

dt_err
dt__kv_client_configure(dt_kv_client *c)
{
	dt_err err = DT_OK;

	if (c->rejoined && !c->resumed)
		return DT_OK;
	if (dt_node_rank(c->node) == 0)
		err = broadcast_to_servers(c, DT_CMD_KV_CONFIG,
		                           (uint64_t)c->sync, NULL, 0);
	return dt__kv_client_agree(c, err);
}

/* Every request answered, every worker here (so in dist_sync every round
 * of every key is over), then rank 0 has each server write its file. */
dt_err
dt__kv_client_checkpoint(dt_kv_client *c)
{
	dt_err err;

	if ((err = dt__kv_client_wait_all(c)) ||
	    (err = dt__kv_client_agree(c, DT_OK)))
		return err;
	if (dt_node_rank(c->node) == 0)
		err = broadcast_to_servers(c, DT_CMD_KV_CHECKPOINT, 0, NULL, 0);
	return dt__kv_client_agree(c, err);
}

dt_err
dt__kv_client_agree_setup(dt_kv_client *c, dt_err err)
{
	if (c->rejoined && !c->resumed) /* the others agreed long ago */
		return err;
	return dt__kv_client_agree(c, err);
}

int
dt__kv_client_rejoined(const dt_kv_client *c)
{
	return c->rejoined;
}

/*
 * A restarted worker asks each server, for each part of each key, how
 * many of its predecessor's pushes the store holds; it resumes at the
 * fewest (*step: the pushes of each key its predecessor finished). Its
 * next pushes of a key that a server holds already are not sent again,
 * and its first pull of each key gets the value after round *step.
 */
dt_err
dt__kv_client_resume(dt_kv_client *c, size_t nkeys, const dt_key *keys,
                     const size_t *lens, uint64_t *step)
{
	int ns = dt_node_num_servers(c->node);
	uint8_t *ans;
	int *pserver;
	dt_kv_req *reqs;
	uint64_t s = UINT64_MAX;
	dt_err err = DT_OK;

	*step = 0;
	if (!c->rejoined || nkeys == 0)
		return DT_OK;
	if (c->resumed)
		return dt__fail(DT_ESTATE, "resume: already called once");
	ans = calloc(nkeys * (size_t)ns, 8);
	pserver = calloc(nkeys * (size_t)ns, sizeof(int));
	reqs = calloc(nkeys, sizeof(*reqs));
	if (!ans || !pserver || !reqs) {
		free(ans);
		free(pserver);
		free(reqs);
		return dt__fail(DT_ENOMEM, "resume: out of memory");
	}
	/* Every key's parts asked at once, then waited for. */
	size_t asked = 0;
	for (; asked < nkeys && !err; asked++) {
		int np = dt__kv_place(keys[asked], lens[asked], ns, c->bound,
		                      c->parts);
		op *o =
		    new_op(c, DT_CMD_KV_RESUME, keys[asked], np, &reqs[asked]);

		if (o == NULL) {
			err = dt__fail(DT_ENOMEM, "resume: out of memory");
			break;
		}
		for (int i = 0; i < np; i++) {
			dt_kv_part *p = &c->parts[i];
			dt_msg_hdr h = {.cmd = DT_CMD_KV_RESUME,
			                .flags = DT_F_REQUEST,
			                .key = keys[asked],
			                .arg0 = lens[asked],
			                .arg1 = p->offset};
			size_t j = asked * (size_t)ns + (size_t)i;

			pserver[j] = p->server + 1; /* 0: no part */
			send_part(c, o, p->server, &h, NULL, 0, NULL, 0,
			          DT_SEND_STABLE, ans + 8 * j, 2, 0);
		}
	}
	for (size_t k = 0; k < asked; k++) {
		dt_err e = dt__kv_client_wait(c, reqs[k]);

		if (e && !err)
			err = e;
	}
	if (err) {
		free(ans);
		free(pserver);
		free(reqs);
		return err;
	}
	/* Where it resumes: the fewest pushes held of any part. */
	for (size_t j = 0; j < nkeys * (size_t)ns; j++)
		if (pserver[j] && dt__get_u64(ans + 8 * j) < s)
			s = dt__get_u64(ans + 8 * j);
	if (s == UINT64_MAX)
		s = 0;
	pthread_mutex_lock(&c->mu);
	for (size_t k = 0; k < nkeys && !err; k++) {
		keycount *kc = find_count(c, keys[k]);

		if (kc == NULL) {
			if ((kc = calloc(1, sizeof(*kc))) == NULL ||
			    (kc->pushes = calloc((size_t)ns, 8)) == NULL) {
				free(kc);
				err = DT_ENOMEM;
				break;
			}
			kc->key = keys[k];
			dt__table_insert(&c->counts, &kc->hn, keys[k]);
		}
		if (kc->held == NULL &&
		    (kc->held = calloc((size_t)ns, 8)) == NULL) {
			err = DT_ENOMEM;
			break;
		}
		for (int i = 0; i < ns; i++) {
			size_t j = k * (size_t)ns + (size_t)i;
			int r = pserver[j] - 1;

			if (r < 0)
				continue;
			kc->pushes[r] = s;
			kc->held[r] = dt__get_u64(ans + 8 * j);
		}
		kc->pull_at = 1;
	}
	if (!err) {
		c->resumed = 1;
		c->resume_step = s;
	}
	pthread_mutex_unlock(&c->mu);
	free(ans);
	free(pserver);
	free(reqs);
	if (err)
		return dt__fail(err, "resume: out of memory");
	*step = s;
	DT_LOG(1, "resuming at step %llu (%zu keys)", (unsigned long long)s,
	       nkeys);
	return DT_OK;
}

/* ---- batched calls (KV_*_MANY) ---- */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "batched requests send keys and lengths as little-endian words"
#endif

int
dt__kv_client_batches(const dt_kv_client *c)
{
	return c->batch;
}

void
dt__kv_client_note_single(dt_kv_client *c, dt_key key)
{
	dt_hnode *h;

	if (!c->batch || dt__table_find(&c->singles, key))
		return;
	if ((h = calloc(1, sizeof(*h))) != NULL) /* (else: see kv_impl.h) */
		dt__table_insert(&c->singles, h, key);
}

/* Whether a key of len floats goes in a batched request (the same for
 * every command: a key's store follows from its length and the
 * compression, both fixed before the first init). */
static int
batchable(const dt_kv_client *c, size_t len)
{
	return len >= 1 && len < c->bound && len <= DT_KS_MAX_LEN &&
	       !(c->comp.kind != DT_QUANT_NONE && len >= c->comp.min_size);
}

/* ... and whether key is one (not a key of the single-key store). */
static inline int
batched_key(const dt_kv_client *c, dt_key key, size_t len)
{
	return batchable(c, len) && (dt__table_count(&c->singles) == 0 ||
	                             dt__table_find(&c->singles, key) == NULL);
}

static int
many_cmd_of(int cmd)
{
	switch (cmd) {
	case DT_CMD_KV_INIT:
		return DT_CMD_KV_INIT_MANY;
	case DT_CMD_KV_PUSH:
		return DT_CMD_KV_PUSH_MANY;
	case DT_CMD_KV_PULL:
		return DT_CMD_KV_PULL_MANY;
	}
	return DT_CMD_KV_PUSHPULL_MANY;
}

static int
cmp_key(const void *a, const void *b)
{
	dt_key x = *(const dt_key *)a, y = *(const dt_key *)b;

	return (x > y) - (x < y);
}

int
dt__kv_find_duplicate(size_t n, const uint64_t *v, uint64_t *dup)
{
	uint64_t stack[64], *k = n <= 64 ? stack : malloc(n * sizeof(*k));
	int found = 0;

	if (k == NULL)
		return -1;
	memcpy(k, v, n * sizeof(*k));
	qsort(k, n, sizeof(*k), cmp_key);
	for (size_t i = 1; i < n && !found; i++)
		if (k[i] == k[i - 1]) {
			*dup = k[i];
			found = 1;
		}
	if (k != stack)
		free(k);
	return found;
}

dt_err
dt__kv_no_duplicates(const char *what, size_t n, const dt_key *keys)
{
	uint64_t dup;
	int r = dt__kv_find_duplicate(n, keys, &dup);

	if (r < 0)
		return dt__fail(DT_ENOMEM, "batched %s: out of memory", what);
	if (r > 0)
		return dt__fail(DT_EINVAL,
		                "batched %s: key %llu is listed twice in one "
		                "call",
		                what, (unsigned long long)dup);
	return DT_OK;
}

/* The nbig keys of b that go key by key are listed once each. */
static dt_err
big_keys_unique(const dt_kv_client *c, int cmd, const dt_kv_batch *b,
                size_t nbig)
{
	dt_key *k = malloc(nbig * sizeof(*k));
	size_t n = 0;
	dt_err err;

	if (k == NULL)
		return dt__fail(DT_ENOMEM, "batched %s: out of memory",
		                dt__kv_op_name(cmd));
	for (size_t i = 0; i < b->nkeys; i++)
		if (!batched_key(c, b->keys[i], b->lens ? b->lens[i] : 1))
			k[n++] = b->keys[i];
	err = dt__kv_no_duplicates(dt__kv_op_name(cmd), n, k);
	free(k);
	return err;
}

/* Register and send one server's request (no lock held); its answer's
 * values (nvals floats) land in out. Failures end up in o. */
/* A log entry not on any list yet. */
static void
logent_drop(logent *e)
{
	free(e->meta);
	free(e->data);
	free(e);
}

/* Recovery, for a row request: a log entry (*le) of one that changes the
 * store, or a copy of a pull's ids (*ids); 0 when out of memory. */
static int
log_part(dt_kv_client *c, const dt_msg_hdr *h, const void *meta,
         uint32_t meta_len, const struct iovec *iov, int iovcnt, logent **le,
         void **ids)
{
	size_t bytes = 0;
	int keep = 1;

	*le = NULL;
	*ids = NULL;
	if (h->cmd == DT_CMD_KV_ROW_PULL) {
		if (iovcnt == 0 || iov[0].iov_len == 0)
			return 1;
		if ((*ids = malloc(iov[0].iov_len)) == NULL)
			return 0;
		memcpy(*ids, iov[0].iov_base, iov[0].iov_len);
		return 1;
	}
	if (!logged_cmd(h->cmd))
		return 1;
	for (int i = 0; i < iovcnt; i++)
		bytes += iov[i].iov_len;
	if (push_cmd(h->cmd) && bytes)
		keep = keep_copy(c, bytes);
	if ((*le = log_new(h, meta, meta_len, iov, keep ? iovcnt : 0)) == NULL)
		return 0;
	(*le)->lost = !keep;
	return 1;
}

static void
send_many_part(dt_kv_client *c, op *o, int server, dt_msg_hdr *h,
               const void *meta, uint32_t meta_len, const struct iovec *iov,
               int iovcnt, float *out, size_t nvals)
{
	sub *s = malloc(sizeof(*s));
	logent *le = NULL;
	void *ids = NULL;
	int64_t pidx = 0;
	int parked = 0;
	dt_err err = DT_OK;

	/* Recovery (row requests; batched ones are not sent with it): a
	 * copy to send again, as send_part keeps. */
	if (s && c->recover &&
	    !log_part(c, h, meta, meta_len, iov, iovcnt, &le, &ids)) {
		free(s);
		s = NULL;
	}
	if (c->recover) {
		pthread_mutex_lock(&c->send_mu);
		run_replays(c);
	}
	pthread_mutex_lock(&c->mu);
	if (s && le && push_cmd(h->cmd) &&
	    (pidx = next_push(c, h->key, server)) < 0) {
		logent_drop(le);
		free(s);
		s = NULL;
	}
	if (s == NULL) {
		free(ids);
		op_fail(o, DT_ENOMEM, "out of memory");
		if (--o->remaining == 0)
			dt__gen_bump(&c->done_gen);
		pthread_mutex_unlock(&c->mu);
		if (c->recover)
			pthread_mutex_unlock(&c->send_mu);
		return;
	}
	h->seq = c->next_seq++;
	*s = (sub){.seq = h->seq,
	           .server_id = dt__node_server_id(c->node, server),
	           .dest = out,
	           .bytes = out ? nvals * sizeof(float) : 0,
	           .enc = out ? DT_KV_ENC_ANSWER(h->arg2) : 0,
	           .op = o,
	           .cmd = h->cmd,
	           .key = h->key,
	           .arg0 = h->arg0,
	           .arg1 = h->arg1,
	           .arg2 = h->arg2,
	           .log = le,
	           .ids = ids,
	           .ids_len = ids ? iov[0].iov_len : 0};
	dt__table_insert(&c->subs, &s->hn, s->seq);
	for (int i = 0; i < iovcnt; i++)
		o->out_bytes += iov[i].iov_len;
	o->t_sent = dt__now_ns();
	if (le) {
		le->seq = h->seq;
		le->pidx = (uint64_t)pidx;
		dt__list_push_back(&c->srv[server].log, &le->ln);
		c->kept_bytes += le->len;
	}
	/* A restarted server gets it in its replay, in order. */
	parked = c->recover && c->srv[server].restarted;
	pthread_mutex_unlock(&c->mu);
	/* The caller's arrays and the part buffers stay as they are until
	 * the call returns, after the answer. */
	if (!parked)
		err = dt__node_send_ex(c->node, s->server_id, h, meta, meta_len,
		                       iov, iovcnt, DT_SEND_STABLE);
	if (c->recover)
		pthread_mutex_unlock(&c->send_mu);
	if (err)
		send_failed(c, o, h->seq, err);
}

/* Room for server part p of count keys and nvals floats. */
static int
part_room(mpart *p, int keys, int lens, int vals, int ans)
{
	size_t count = p->count, nvals = p->nvals;

	return (keys && !dt__buf_reserve((uint8_t **)&p->keys, &p->keys_cap,
	                                 DT_MAX(count, 1) * 8)) ||
	       (lens && !dt__buf_reserve((uint8_t **)&p->lens, &p->lens_cap,
	                                 DT_MAX(count, 1) * 4)) ||
	       (vals && !dt__buf_reserve((uint8_t **)&p->vals, &p->vals_cap,
	                                 DT_MAX(nvals, 1) * 4)) ||
	       (ans && !dt__buf_reserve((uint8_t **)&p->ans, &p->ans_cap,
	                                DT_MAX(nvals, 1) * 4));
}

dt_err
dt__kv_client_many(dt_kv_client *c, int cmd, const dt_kv_batch *b)
{
	int ns = dt_node_num_servers(c->node), mcmd = many_cmd_of(cmd);
	int has_vals = cmd != DT_CMD_KV_PULL,
	    has_ans = cmd == DT_CMD_KV_PULL || cmd == DT_CMD_KV_PUSHPULL;
	int send_batched = cmd != DT_CMD_KV_INIT || dt_node_rank(c->node) == 0;
	size_t nbig = 0, nparts = 0;
	dt_kv_req *reqs = NULL, req = 0;
	dt_err err = DT_OK;
	op *o = NULL;

	if ((err = dt__node_check(c->node)))
		return err;
	if (ns < 1)
		return dt__fail(DT_ESTATE, "batched call: no servers");
	/* Pass 1: each server's count, floats and whether its keys are all
	 * of one length. */
	for (int s = 0; s < ns; s++) {
		c->mp[s].count = c->mp[s].nvals = 0;
		c->mp[s].uniform = 0;
		c->mp[s].mixed = 0;
	}
	dt_fastmod fm = dt__fastmod_of((uint64_t)ns);
	int ones = b->lens == NULL && batchable(c, 1) &&
	           dt__table_count(&c->singles) == 0;

	if (ones && ns == 1) { /* (the common big case, at no cost a key) */
		c->mp[0].count = c->mp[0].nvals = b->nkeys;
		c->mp[0].uniform = 1;
	} else {
		for (size_t i = 0; i < b->nkeys; i++) {
			size_t len = b->lens ? b->lens[i] : 1;
			mpart *p;

			if (!ones && !batched_key(c, b->keys[i], len)) {
				nbig++;
				continue;
			}
			/* (dt__kv_place's rule below the bound: key mod S) */
			p = &c->mp[dt__fastmod(&fm, b->keys[i])];
			if (p->count == 0)
				p->uniform = len;
			else if (p->uniform != len)
				p->mixed = 1;
			p->count++;
			p->nvals += len;
		}
	}
	/* One server, every key batched, values back to back: the caller's
	 * arrays are sent and answered into as they are. */
	int direct = ns == 1 && nbig == 0 && (!has_vals || b->vals) &&
	             (!has_ans || b->outs);

	for (int s = 0; send_batched && s < ns; s++) {
		mpart *p = &c->mp[s];

		if (p->count == 0)
			continue;
		nparts++;
		if (p->nvals > SIZE_MAX / 8 ||
		    part_room(p, !direct, p->mixed, has_vals && !direct,
		              has_ans && !direct))
			return dt__fail(DT_ENOMEM,
			                "batched %s of %zu keys: out of memory",
			                dt__kv_op_name(cmd), b->nkeys);
	}
	/* The keys that go one by one are listed once each, too (each
	 * server checks its batched part). */
	if (nbig > 1 && (err = big_keys_unique(c, cmd, b, nbig)))
		return err;
	/* Pass 2: the parts' keys, lengths and values gathered (an init
	 * other than rank 0's sends none). */
	if (nparts && (!direct || c->mp[0].mixed)) {
		size_t off = 0;

		for (int s = 0; s < ns; s++)
			c->mp[s].fill = c->mp[s].vfill = 0;
		for (size_t i = 0; i < b->nkeys; i++) {
			size_t len = b->lens ? b->lens[i] : 1;
			mpart *p;

			if (!ones && !batched_key(c, b->keys[i], len)) {
				off += len;
				continue;
			}
			p = &c->mp[dt__fastmod(&fm, b->keys[i])];
			if (p->mixed)
				p->lens[p->fill] = (uint32_t)len;
			if (!direct) {
				p->keys[p->fill] = b->keys[i];
				if (has_vals) {
					const float *v = b->vals ? b->vals + off
					                         : b->pvals[i];

					if (len == 1)
						p->vals[p->vfill] = *v;
					else
						memcpy(p->vals + p->vfill, v,
						       len * sizeof(float));
				}
			}
			p->fill++;
			p->vfill += len;
			off += len;
		}
	}
	if (nparts) { /* (none for an init but rank 0's) */
		o = new_op(c, mcmd, b->keys[0], (int)nparts, &req);
		if (o == NULL)
			return DT_ENOMEM;
		for (int s = 0; s < ns; s++) {
			mpart *p = &c->mp[s];
			struct iovec iov[3];
			int n = 0;

			if (p->count == 0)
				continue;
			dt_msg_hdr h = {
			    .cmd = (uint8_t)mcmd,
			    .flags = DT_F_REQUEST,
			    .key = direct ? b->keys[0] : p->keys[0],
			    .arg0 = p->count,
			    .arg1 = p->mixed ? 0 : p->uniform,
			    .arg2 = has_ans
			                ? dt__kv_enc(DT_QUANT_NONE,
			                             (dt_quant_kind)c->pull_enc)
			                : 0};
			iov[n++] = (struct iovec){direct ? (void *)b->keys
			                                 : (void *)p->keys,
			                          p->count * 8};
			if (p->mixed)
				iov[n++] =
				    (struct iovec){p->lens, p->count * 4};
			if (has_vals)
				iov[n++] = (struct iovec){
				    direct ? (void *)b->vals : (void *)p->vals,
				    p->nvals * 4};
			send_many_part(c, o, s, &h, NULL, 0, iov, n,
			               !has_ans ? NULL
			               : direct ? b->outs
			                        : p->ans,
			               p->nvals);
		}
	}
	/* The keys that go one by one (big arrays, compressed pushes); every
	 * request is waited for, the batched one first. */
	size_t nreq = 0;

	if ((reqs = dt__calloc(nbig + 1, sizeof(*reqs))) == NULL)
		err = DT_ENOMEM;
	else if (o)
		reqs[nreq++] = req;
	for (size_t i = 0, off = 0; nbig && i < b->nkeys && !err; i++) {
		size_t len = b->lens ? b->lens[i] : 1;
		const float *v = !has_vals ? NULL
		                 : b->vals ? b->vals + off
		                           : b->pvals[i];
		float *out = !has_ans  ? NULL
		             : b->outs ? b->outs + off
		                       : b->pouts[i];

		off += len;
		if (batched_key(c, b->keys[i], len))
			continue;
		err = dt__kv_client_start(c, cmd, b->keys[i], v, out, len,
		                          &reqs[nreq]);
		if (!err)
			nreq++;
	}
	char msg[512] = "";
	if (err)
		snprintf(msg, sizeof(msg), "%s", dt_errmsg());
	if (reqs == NULL && o) /* (then the batched one alone) */
		reqs = &req, nreq = 1;
	for (size_t k = 0; k < nreq; k++) {
		dt_err e = dt__kv_client_wait(c, reqs[k]);

		if (e && !err) {
			err = e;
			snprintf(msg, sizeof(msg), "%s", dt_errmsg());
		}
	}
	if (reqs != &req)
		free(reqs);
	if (err)
		return dt__fail(err, "%s", msg);
	/* The answers back to the caller's places. */
	if (has_ans && !direct) {
		size_t off = 0;

		for (int s = 0; s < ns; s++)
			c->mp[s].fill = c->mp[s].vfill = 0;
		for (size_t i = 0; i < b->nkeys; i++) {
			size_t len = b->lens ? b->lens[i] : 1;
			float *out = b->outs ? b->outs + off : b->pouts[i];
			mpart *p;

			off += len;
			if (!ones && !batched_key(c, b->keys[i], len))
				continue;
			p = &c->mp[dt__fastmod(&fm, b->keys[i])];
			if (len == 1)
				*out = p->ans[p->vfill];
			else
				memcpy(out, p->ans + p->vfill,
				       len * sizeof(float));
			p->vfill += len;
		}
	}
	return DT_OK;
}

/* ---- row_sparse tables ---- */

/* Part i of t's rows on its servers. */
static void
rows_part(const dt_kv_client *c, const dt_kv_rtab *t, int i, uint64_t *lo,
          uint64_t *n)
{
	dt__kv_rows_place(t->key, t->rows, t->width, c->nservers, c->bound, i,
	                  lo, n);
}

dt_err
dt__kv_client_row_init(dt_kv_client *c, const dt_kv_rtab *t, const float *val)
{
	int ns = c->nservers, nparts = 0;
	dt_kv_req req;
	dt_err err;
	op *o;

	if ((err = dt__node_check(c->node)))
		return err;
	if (dt_node_rank(c->node) != 0)
		return DT_OK;
	for (int i = 0; i < ns; i++) {
		uint64_t lo, n;

		rows_part(c, t, i, &lo, &n);
		nparts += n > 0;
	}
	if ((o = new_op(c, DT_CMD_KV_ROW_INIT, t->key, nparts, &req)) == NULL)
		return DT_ENOMEM;
	for (int i = 0; i < ns; i++) {
		uint64_t lo, n;
		uint8_t meta[16];
		struct iovec iov;

		rows_part(c, t, i, &lo, &n);
		if (n == 0)
			continue;
		dt__put_u64(meta, lo);
		dt__put_u64(meta + 8, n);
		dt_msg_hdr h = {.cmd = DT_CMD_KV_ROW_INIT,
		                .flags = DT_F_REQUEST,
		                .key = t->key,
		                .arg0 = t->rows,
		                .arg1 = t->width,
		                .arg2 = val ? DT_KV_INIT_HAS_VALUE : 0};
		iov = (struct iovec){(void *)(val + lo * t->width),
		                     (size_t)n * t->width * sizeof(float)};
		send_many_part(c, o, i, &h, meta, sizeof(meta), &iov,
		               val ? 1 : 0, NULL, 0);
	}
	return dt__kv_client_wait(c, req);
}

/* Whether t's pushes are compressed (t->rows * width >= min_size). */
static int
rows_compressed(const dt_kv_client *c, const dt_kv_rtab *t)
{
	size_t w = t->width, m = c->comp.min_size;

	return c->comp.kind != DT_QUANT_NONE &&
	       t->rows >= m / w + (m % w != 0 ? 1 : 0);
}

/* Encode count rows ids of values g (back to back) into p->enc, with
 * the residual rows of t (error feedback): its body's size. */
static size_t
rows_encode(dt_kv_client *c, dt_kv_rtab *t, mpart *p, size_t count,
            const uint64_t *ids, const float *g)
{
	size_t w = t->width, n = count * w;
	float *r = NULL;

	if (c->comp.kind != DT_QUANT_FP16 && n) {
		r = (float *)(void *)c->cbuf;
		for (size_t i = 0; i < count; i++)
			memcpy(r + i * w, t->resid + ids[i] * w,
			       w * sizeof(float));
	}
	dt__quant_encode(&c->comp, g, r, n, p->enc);
	for (size_t i = 0; r && i < count; i++)
		memcpy(t->resid + ids[i] * w, r + i * w, w * sizeof(float));
	return dt__quant_size(c->comp.kind, n);
}

dt_err
dt__kv_client_rows(dt_kv_client *c, dt_kv_rtab *t, int cmd, size_t count,
                   const uint64_t *ids, const float *vals, float *outs)
{
	int ns = c->nservers, pushes = cmd != DT_CMD_KV_ROW_PULL,
	    answers = cmd != DT_CMD_KV_ROW_PUSH;
	int comp = pushes && rows_compressed(c, t);
	size_t w = t->width, nparts = 0;
	uint64_t lo, n;
	int split, home = -1;
	uint8_t meta[4];
	dt_kv_req req;
	dt_err err;
	op *o;

	if ((err = dt__node_check(c->node)))
		return err;
	/* Which servers hold the table (all of them when it is split, else
	 * its home); how many rows go to each. */
	for (int i = 0; i < ns; i++) {
		rows_part(c, t, i, &lo, &n);
		c->mp[i].count = 0;
		if (n == t->rows)
			home = i;
	}
	split = home < 0;
	if (!split)
		c->mp[home].count = count;
	else
		for (size_t i = 0; i < count; i++)
			c->mp[dt__kv_rows_server(t->key, t->rows, w, ns,
			                         c->bound, ids[i])]
			    .count++;
	if (comp && c->comp.kind != DT_QUANT_FP16 && t->resid == NULL) {
		t->resid_bytes = (size_t)(t->rows * w * sizeof(float));
		if ((t->resid = dt__map_zero(t->resid_bytes)) == NULL)
			return dt__fail(DT_ENOMEM,
			                "row_sparse push of key %llu: no room "
			                "for its compression residual",
			                (unsigned long long)t->key);
	}
	for (int i = 0; i < ns; i++) {
		mpart *p = &c->mp[i];
		size_t nv = p->count * w;

		if ((!split && i != home) || (!pushes && p->count == 0))
			continue;
		nparts++;
		p->nvals = nv;
		if ((split &&
		     dt__buf_reserve((uint8_t **)&p->keys, &p->keys_cap,
		                     DT_MAX(p->count, 1) * 8) == NULL) ||
		    (split && pushes &&
		     !dt__buf_reserve((uint8_t **)&p->vals, &p->vals_cap,
		                      DT_MAX(nv, 1) * 4)) ||
		    (split && answers &&
		     !dt__buf_reserve((uint8_t **)&p->ans, &p->ans_cap,
		                      DT_MAX(nv, 1) * 4)) ||
		    (comp && !dt__buf_reserve(&p->enc, &p->enc_cap,
		                              dt__quant_size(c->comp.kind,
		                                             DT_MAX(nv, 1)))) ||
		    (comp && !dt__buf_reserve(&c->cbuf, &c->cbuf_cap,
		                              DT_MAX(nv, 1) * 4)))
			return dt__fail(DT_ENOMEM,
			                "%s of %zu rows of key %llu: out of "
			                "memory",
			                dt__kv_op_name(cmd), count,
			                (unsigned long long)t->key);
	}
	if (nparts == 0)
		return DT_OK;
	/* The parts' ids and values (a split table). */
	if (split) {
		for (int i = 0; i < ns; i++)
			c->mp[i].fill = 0;
		for (size_t i = 0; i < count; i++) {
			mpart *p = &c->mp[dt__kv_rows_server(
			    t->key, t->rows, w, ns, c->bound, ids[i])];

			p->keys[p->fill] = ids[i];
			if (pushes)
				memcpy(p->vals + p->fill * w, vals + i * w,
				       w * sizeof(float));
			p->fill++;
		}
	}
	if (comp && c->comp.kind == DT_QUANT_2BIT)
		dt__kv_threshold_meta(c->comp.threshold, meta);
	if ((o = new_op(c, cmd, t->key, (int)nparts, &req)) == NULL)
		return DT_ENOMEM;
	for (int i = 0; i < ns; i++) {
		mpart *p = &c->mp[i];
		const uint64_t *pid = split ? p->keys : ids;
		const float *pv = split ? p->vals : vals;
		struct iovec iov[2];
		size_t vbytes = p->nvals * 4;
		int k = 0;

		if ((!split && i != home) || (!pushes && p->count == 0))
			continue;
		if (comp) {
			vbytes = rows_encode(c, t, p, p->count, pid, pv);
			pv = (const float *)(void *)p->enc;
		}
		if (p->count)
			iov[k++] = (struct iovec){(void *)pid, p->count * 8};
		if (pushes && vbytes)
			iov[k++] = (struct iovec){(void *)pv, vbytes};
		dt_msg_hdr h = {
		    .cmd = (uint8_t)cmd,
		    .flags = DT_F_REQUEST,
		    .key = t->key,
		    .arg0 = p->count,
		    .arg1 = w,
		    .arg2 = dt__kv_enc(comp ? c->comp.kind : DT_QUANT_NONE,
		                       answers ? (dt_quant_kind)c->pull_enc
		                               : DT_QUANT_NONE)};
		send_many_part(c, o, i, &h, meta,
		               comp && c->comp.kind == DT_QUANT_2BIT ? 4 : 0,
		               iov, k,
		               !answers ? NULL
		               : split  ? p->ans
		                        : outs,
		               p->nvals);
	}
	if ((err = dt__kv_client_wait(c, req)))
		return err;
	/* The answers back in the asked order (a split table). */
	if (answers && split) {
		for (int i = 0; i < ns; i++)
			c->mp[i].fill = 0;
		for (size_t i = 0; i < count; i++) {
			mpart *p = &c->mp[dt__kv_rows_server(
			    t->key, t->rows, w, ns, c->bound, ids[i])];

			memcpy(outs + i * w, p->ans + p->fill * w,
			       w * sizeof(float));
			p->fill++;
		}
	}
	return DT_OK;
}
