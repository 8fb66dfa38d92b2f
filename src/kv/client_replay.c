/*
 * client_replay.c - recovery on a worker's side (DTRAIN_RECOVER=1,
 * docs/fault-tolerance.md): the replay log.
 *
 * Every request that changes a server's store (configure, set optimizer,
 * init, push) is also kept in a log per server, with a copy of its data,
 * until that server says a checkpoint on disk holds it (KV_CKPT_DONE).
 * When a new process takes a lost server's place, it says what its
 * checkpoint holds; the requests after that, and every request still
 * unanswered, are sent to it again in their first order (replay), before
 * any new request to it. The replay runs with send_mu held, as every send
 * is, so nothing overtakes it: in the I/O thread as soon as the server's
 * word comes when no caller is sending, else in the caller's thread once
 * it lets go of send_mu (or in a wait that sees it due). A process in a
 * lost worker's place says where its predecessor stopped with
 * dt_kv_resume (dt__kv_client_resume).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/spin.h"
#include "common/table.h"
#include "kv/client_impl.h"

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
	free(e->pidxs);
	free(e);
}

/* A copy of a request about to be sent (no lock held), its payload the
 * iovcnt pieces of iov (none: not kept); NULL: no memory. */
logent *
dt__kvc_log_new(const dt_msg_hdr *h, const void *meta, uint32_t meta_len,
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
int64_t
dt__kvc_next_push(dt_kv_client *c, dt_key key, int r)
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

int
dt__kvc_many_pidx(dt_kv_client *c, logent *le, int r)
{
	size_t count = (size_t)le->arg0;

	if (le->data == NULL || le->len / 8 < count ||
	    (le->pidxs = malloc(DT_MAX(count, 1) * sizeof(uint64_t))) == NULL)
		return -1;
	for (size_t i = 0; i < count; i++) {
		int64_t p = dt__kvc_next_push(c, dt__kv_u64_at(le->data, i), r);

		if (p < 0)
			return -1; /* (the counts of this request's keys
			              then run ahead: the job ends anyway) */
		le->pidxs[i] = (uint64_t)p;
	}
	return 0;
}

/*
 * How much of batched request e (logged) a checkpoint that holds held[0..n)
 * has: 1 all of it, 0 none, -1 some of its keys and not others. An init
 * is held once its keys are in the file; a push once each key's push
 * (pidxs) is. In dist_sync a server takes a snapshot between requests, so
 * a request is held whole or not at all, unless the workers list a key's
 * pushes in different batches (some keys of a request may then have
 * closed their rounds before a snapshot and others after).
 */
static int
many_held(const logent *e, const held_key *held, size_t n)
{
	size_t count = (size_t)e->arg0, yes = 0;

	if (e->data == NULL || e->len / 8 < count)
		return 0;
	for (size_t i = 0; i < count; i++) {
		int64_t have = held_of(held, n, dt__kv_u64_at(e->data, i));

		yes += have >= 0 &&
		       (e->pidxs == NULL || e->pidxs[i] < (uint64_t)have);
	}
	return yes == count ? 1 : yes == 0 ? 0 : -1;
}

/*
 * A restarted server's replay, sent at once from the I/O thread unless a
 * caller is sending (send_mu taken). Waiting for the caller's next call
 * is not enough: this worker may be outside the KVStore (in a barrier
 * over the workers, computing, or done and stopping) while another worker
 * waits for a round that this worker's replayed pushes close, and would
 * wait for ever (that other worker is then kept from the barrier too). A
 * caller that holds send_mu now sees the replay due when it lets go
 * (dt__kvc_send_unlock). The I/O thread never waits for send_mu: its
 * holder may be waiting for a peer that waits for this node to read.
 */
static void
replay_unless_sending(dt_kv_client *c)
{
	if (pthread_mutex_trylock(&c->send_mu) != 0)
		return;
	dt__kvc_run_replays(c);
	pthread_mutex_unlock(&c->send_mu);
}

void
dt__kvc_send_unlock(dt_kv_client *c)
{
	int due;

	/* The I/O thread marks a replay due before it tries send_mu: either
	 * its try comes after this unlock and succeeds, or the mark is seen
	 * here. */
	for (;;) {
		pthread_mutex_unlock(&c->send_mu);
		pthread_mutex_lock(&c->mu);
		due = c->replay_due;
		pthread_mutex_unlock(&c->mu);
		if (!due)
			return;
		pthread_mutex_lock(&c->send_mu);
		dt__kvc_run_replays(c);
	}
}

/* KV_CKPT_DONE from server id sid (I/O thread). */
void
dt__kvc_on_ckpt_done(dt_kv_client *c, int sid, const dt_msg *m)
{
	dt_rbuf r;
	uint64_t number, count;
	held_key *held = NULL;
	int rank = dt__kvc_server_rank(c, sid),
	    restarted = (m->hdr.arg2 & 1) != 0;

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
			if (dt__kv_many_cmd(e->cmd)) {
				if (many_held(e, held, (size_t)count) != 1)
					continue;
			} else if (have < 0 || e->cmd == DT_CMD_KV_CONFIG ||
			           e->cmd == DT_CMD_KV_SET_OPT ||
			           (!dt__kvc_init_cmd(e->cmd) &&
			            e->pidx >= (uint64_t)have))
				continue;
			if ((s = dt__kvc_find_sub(c, e->seq)) != NULL)
				s->log = NULL;
			logent_free(c, e);
		}
	}
	pthread_mutex_unlock(&c->mu);
	DT_LOG(1, "server %d %s checkpoint #%llu (%llu keys)", rank,
	       restarted ? "restarted from" : "wrote",
	       (unsigned long long)number, (unsigned long long)count);
	free(held);
	if (restarted) {
		pthread_cond_broadcast(&c->cv);
		replay_unless_sending(c);
	}
}

/* A refused batched push e to server r: its keys' pushes are not counted,
 * nor in the push numbers of the later requests to r (mu held). */
static void
unlog_many(dt_kv_client *c, const logent *e, int r)
{
	size_t count = (size_t)e->arg0;
	held_key *k = malloc(DT_MAX(count, 1) * sizeof(*k));

	if (k == NULL) {
		dt__node_set_fatal(c->node, DT_ENOMEM,
		                   "recovery: out of memory after a refused "
		                   "batched push");
		return;
	}
	for (size_t i = 0; i < count; i++) {
		dt_hnode *h = dt__table_find(
		    &c->counts, k[i].key = dt__kv_u64_at(e->data, i));

		if (h)
			DT_CONTAINER_OF(h, keycount, hn)->pushes[r]--;
	}
	qsort(k, count, sizeof(*k), cmp_held);
	for (dt_lnode *l = dt__list_next(&c->srv[r].log, &e->ln); l;
	     l = dt__list_next(&c->srv[r].log, l)) {
		logent *x = DT_CONTAINER_OF(l, logent, ln);

		if (dt__kvc_push_cmd(x->cmd) && held_of(k, count, x->key) >= 0)
			x->pidx--;
		for (size_t j = 0; x->pidxs && j < (size_t)x->arg0; j++)
			if (held_of(k, count, dt__kv_u64_at(x->data, j)) >= 0)
				x->pidxs[j]--;
	}
	free(k);
}

/* A logged request the server refused changed nothing there: it is not
 * kept, and a refused push is not counted (mu held). */
void
dt__kvc_unlog_refused(dt_kv_client *c, sub *s)
{
	logent *e = s->log;
	int r = dt__kvc_server_rank(c, s->server_id);

	s->log = NULL;
	if (dt__kvc_push_cmd(e->cmd)) {
		dt_hnode *h = dt__table_find(&c->counts, e->key);

		for (dt_lnode *l = dt__list_next(&c->srv[r].log, &e->ln); l;
		     l = dt__list_next(&c->srv[r].log, l)) {
			logent *x = DT_CONTAINER_OF(l, logent, ln);

			if (x->key == e->key && dt__kvc_push_cmd(x->cmd))
				x->pidx--;
		}
		if (h)
			DT_CONTAINER_OF(h, keycount, hn)->pushes[r]--;
	} else if (dt__kvc_many_push_cmd(e->cmd) && e->pidxs) {
		unlog_many(c, e, r);
	}
	logent_free(c, e);
}

void
dt__kvc_on_peer_restart(void *arg, dt_node *n, int peer)
{
	dt_kv_client *c = arg;
	int rank = dt__kvc_server_rank(c, peer);

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

	p.h.cmd = (uint8_t)dt__kvc_pull_of(e->cmd);
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

/* A restarted server r needs push #pidx of key, whose copy was not kept:
 * the job cannot go on, and says why. */
static void
replay_lost(dt_kv_client *c, int r, dt_key key, uint64_t pidx)
{
	dt__node_set_fatal(c->node, DT_ESTATE,
	                   "server %d restarted, but its checkpoint does not "
	                   "hold push #%llu of key %llu from this worker, "
	                   "and this worker did not keep a copy of it: its "
	                   "copies had passed DTRAIN_REPLAY_MAX (%llu MiB) "
	                   "since the server's last checkpoint",
	                   r, (unsigned long long)pidx + 1,
	                   (unsigned long long)key,
	                   (unsigned long long)(c->replay_max >> 20));
}

/* A batched pushpull the checkpoint holds, whose answer is missing: its
 * pull, of the same keys (the head of its payload: keys, lengths). */
static item
many_pull(const item *x, const logent *e)
{
	item p = *x;

	p.h.cmd = DT_CMD_KV_PULL_MANY;
	p.h.arg2 =
	    dt__kv_enc(DT_QUANT_NONE, (dt_quant_kind)DT_KV_ENC_ANSWER(e->arg2));
	p.len = (size_t)e->arg0 * (e->arg1 ? 8 : 12);
	return p;
}

/* Batched request e of server v's log into the replay (as replay_logged
 * does for the others): 1 when it cannot be, *e->lost set or some of its
 * keys held and not others (the job then ends, named). */
static int
replay_many(dt_kv_client *c, srv *v, logent *e, sub *s, item *x, item *it,
            size_t *n, size_t *local)
{
	int held = many_held(e, v->held, v->nheld);

	if (held < 0 || (held == 0 && e->lost))
		return 1;
	if (held == 0) { /* sent again; a pushpull answered: its push */
		if (!s && e->cmd == DT_CMD_KV_PUSHPULL_MANY) {
			x->h.cmd = DT_CMD_KV_PUSH_MANY;
			x->h.arg2 = 0;
		}
		it[(*n)++] = *x;
		return 0;
	}
	if (s && e->cmd == DT_CMD_KV_PUSHPULL_MANY) {
		it[(*n)++] = many_pull(x, e);
	} else if (s && e->cmd == DT_CMD_KV_INIT_MANY) {
		it[(*n)++] = *x; /* (a restored store keeps the values) */
	} else if (s) { /* a push in the file: only its answer missing */
		dt__kvc_take_sub(c, s->seq);
		dt__kvc_sub_done(c, s);
		(*local)++;
	}
	return 0;
}

/* A restarted server r holds some keys of a batched push and not others:
 * the request cannot be sent again whole, and is not cut (the job ends,
 * saying why). */
static void
replay_split(dt_kv_client *c, int r, dt_key key)
{
	dt__node_set_fatal(c->node, DT_ESTATE,
	                   "server %d restarted, and its checkpoint holds the "
	                   "pushes of some keys of this worker's batched "
	                   "request (listing key %llu) and not of others: the "
	                   "workers listed those keys in different batched "
	                   "calls; a batched request is recovered when every "
	                   "worker sends the same keys together",
	                   r, (unsigned long long)key);
}

/* Server v's logged requests its checkpoint does not hold, as items in
 * it[*n..] (mu held); the answers that are in the file already complete
 * their subs here (*local counts them). Returns the first entry whose
 * copy is needed but gone, else NULL. */
static const logent *
replay_logged(dt_kv_client *c, srv *v, item *it, size_t *n, size_t *local)
{
	for (dt_lnode *l = dt__list_first(&v->log); l;
	     l = dt__list_next(&v->log, l)) {
		logent *e = DT_CONTAINER_OF(l, logent, ln);
		int64_t have = held_of(v->held, v->nheld, e->key);
		sub *s = dt__kvc_find_sub(c, e->seq);

		if (e->lost && !dt__kv_many_cmd(e->cmd) &&
		    (have < 0 || e->pidx >= (uint64_t)have))
			return e;
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

		if (dt__kv_many_cmd(e->cmd)) {
			if (replay_many(c, v, e, s, &x, it, n, local))
				return e;
			continue;
		}
		if (dt__kvc_push_cmd(e->cmd)) {
			if (have >= 0 && e->pidx < (uint64_t)have) {
				/* In the file already: only its answer is
				 * missing, if any. */
				if (s && dt__kvc_push_of(e->cmd) == e->cmd) {
					dt__kvc_take_sub(c, s->seq);
					dt__kvc_sub_done(c, s);
					(*local)++;
				} else if (s) {
					it[(*n)++] = held_pull(&x, e);
				}
				continue;
			}
			if (!s) { /* (its answer came) */
				x.h.cmd = (uint8_t)dt__kvc_push_of(e->cmd);
				x.h.arg2 &= ~(0xffu << 8);
			}
		} else if (dt__kvc_init_cmd(e->cmd) && have >= 0 && !s) {
			continue; /* the key is in the file */
		}
		it[(*n)++] = x;
	}
	return NULL;
}

/* Unanswered requests to server sid that change nothing (pulls,
 * checkpoints), as items in it[*n..cap) (mu held). */
static void
replay_unanswered(dt_kv_client *c, int sid, item *it, size_t *n, size_t cap)
{
	dt_table_iter ti;

	for (dt_hnode *h = dt__table_first(&c->subs, &ti); h;
	     h = dt__table_next(&ti)) {
		sub *s = DT_CONTAINER_OF(h, sub, hn);

		if (s->server_id != sid || s->log || *n == cap)
			continue;
		it[(*n)++] = (item){.order = s->seq,
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
}

/* Send server rank r's replay (send_mu held, mu not). */
void
dt__kvc_replay(dt_kv_client *c, int r)
{
	int sid = dt__node_server_id(c->node, r);
	srv *v = &c->srv[r];
	item *it = NULL;
	size_t n = 0, cap = 16, local = 0;

	pthread_mutex_lock(&c->mu);
	for (dt_lnode *l = dt__list_first(&v->log); l;
	     l = dt__list_next(&v->log, l))
		cap++;
	cap += dt__table_count(&c->subs);
	if ((it = calloc(cap, sizeof(*it))) != NULL) {
		const logent *lost = replay_logged(c, v, it, &n, &local);

		if (lost) {
			dt_key key = lost->key;
			uint64_t pidx =
			    lost->pidxs ? lost->pidxs[0] : lost->pidx;
			int many = dt__kv_many_cmd(lost->cmd) && !lost->lost;

			v->replay_due = 0;
			pthread_mutex_unlock(&c->mu);
			free(it);
			if (many)
				replay_split(c, r, key);
			else
				replay_lost(c, r, key, pidx);
			return;
		}
		replay_unanswered(c, sid, it, &n, cap);
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
void
dt__kvc_run_replays(dt_kv_client *c)
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
			dt__kvc_replay(c, r);
	}
}

keycount *
dt__kvc_find_count(dt_kv_client *c, dt_key key)
{
	dt_hnode *h = dt__table_find(&c->counts, key);

	return h ? DT_CONTAINER_OF(h, keycount, hn) : NULL;
}

/* Whether this push of key to server r is one the server holds from the
 * predecessor (then it is counted as made). */
int
dt__kvc_held_push(dt_kv_client *c, dt_key key, int r)
{
	keycount *k;
	int held = 0;

	pthread_mutex_lock(&c->mu);
	k = dt__kvc_find_count(c, key);
	if (k && k->held && k->pushes[r] < k->held[r]) {
		k->pushes[r]++;
		held = 1;
	}
	pthread_mutex_unlock(&c->mu);
	return held;
}

int
dt__kvc_take_pull_at(dt_kv_client *c, dt_key key, int pull)
{
	keycount *k;
	int at = 0;

	if (!c->resumed || !c->sync)
		return 0;
	pthread_mutex_lock(&c->mu);
	if ((k = dt__kvc_find_count(c, key)) != NULL && k->pull_at) {
		/* (a pushpull's answer is the value after its round: the
		 * value of that step is then no longer wanted) */
		k->pull_at = 0;
		at = pull;
	}
	pthread_mutex_unlock(&c->mu);
	return at;
}

/* Whether k has a held push or a pull at the resumed step left (mu). */
static int
count_left(const dt_kv_client *c, const keycount *k)
{
	if (k->pull_at)
		return 1;
	for (int r = 0; k->held && r < c->nservers; r++)
		if (k->pushes[r] < k->held[r])
			return 1;
	return 0;
}

int
dt__kv_client_resuming(dt_kv_client *c, size_t n, const dt_key *keys)
{
	dt_table_iter it;
	int left = 0;

	if (!c->resumed)
		return 0;
	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; !c->resume_over && !left && i < n; i++) {
		keycount *k = dt__kvc_find_count(c, keys[i]);

		left = k && count_left(c, k);
	}
	if (!left && !c->resume_over) { /* (any key at all?) */
		c->resume_over = 1;
		for (dt_hnode *h = dt__table_first(&c->counts, &it); h;
		     h = dt__table_next(&it))
			if (count_left(c, DT_CONTAINER_OF(h, keycount, hn)))
				c->resume_over = 0;
	}
	pthread_mutex_unlock(&c->mu);
	return left;
}

int
dt__kv_client_rejoined(const dt_kv_client *c)
{
	return c->rejoined;
}

/* A row table's parts as resume asks for them: server i's range of
 * rows (c->parts[k].server and .offset: its first row; *np of them). */
static void
rows_resume_parts(dt_kv_client *c, const dt_kv_rtab *t, int *np)
{
	*np = 0;
	for (int i = 0; i < c->nservers; i++) {
		uint64_t lo, n;

		dt__kv_rows_place(t->key, t->rows, t->width, c->nservers,
		                  c->bound, i, &lo, &n);
		if (n == 0)
			continue;
		c->parts[*np].server = i;
		c->parts[*np].offset = lo;
		(*np)++;
	}
}

/* Every key's parts asked at once (KV_RESUME), then all waited for; the
 * answer of key k's part i (pushes held) lands in ans[k * ns + i], and
 * pserver says which server that part is on (rank + 1; 0: no part). A
 * row table's part names its rows (arg0), first row here (arg1) and
 * width (arg2); a dense key's its length and offset. */
static dt_err
resume_ask(dt_kv_client *c, size_t nkeys, const dt_key *keys,
           const size_t *lens, const dt_kv_rtab *const *rtabs, uint8_t *ans,
           int *pserver, dt_kv_req *reqs)
{
	int ns = dt_node_num_servers(c->node);
	size_t asked = 0;
	dt_err err = DT_OK;

	for (; asked < nkeys && !err; asked++) {
		const dt_kv_rtab *t = rtabs ? rtabs[asked] : NULL;
		int np = 0;
		kv_op *o = NULL;

		if (t)
			rows_resume_parts(c, t, &np);
		else if ((err =
		              dt__kv_map_parts(c->map, "resume", keys[asked],
		                               lens[asked], 0, c->parts, &np)))
			break;
		o = dt__kvc_new_op(c, DT_CMD_KV_RESUME, keys[asked], np,
		                   &reqs[asked]);
		if (o == NULL) {
			err = dt__fail(DT_ENOMEM, "resume: out of memory");
			break;
		}
		for (int i = 0; i < np; i++) {
			dt_kv_part *p = &c->parts[i];
			dt_msg_hdr h = {.cmd = DT_CMD_KV_RESUME,
			                .flags = DT_F_REQUEST,
			                .key = keys[asked],
			                .arg0 = t ? t->rows : lens[asked],
			                .arg1 = p->offset,
			                .arg2 = t ? t->width : 0};
			size_t j = asked * (size_t)ns + (size_t)i;

			pserver[j] = p->server + 1; /* 0: no part */
			dt__kvc_send_part(c, o, p->server, &h, NULL, 0, NULL, 0,
			                  DT_SEND_STABLE, ans + 8 * j, 2, 0);
		}
	}
	for (size_t k = 0; k < asked; k++) {
		dt_err e = dt__kv_client_wait(c, reqs[k]);

		if (e && !err)
			err = e;
	}
	return err;
}

/* Each key's counts from the answers: every part's pushes are step s,
 * and those its server holds are not sent again (mu held). */
static dt_err
resume_counts(dt_kv_client *c, size_t nkeys, const dt_key *keys,
              const uint8_t *ans, const int *pserver, uint64_t s)
{
	int ns = dt_node_num_servers(c->node);

	for (size_t k = 0; k < nkeys; k++) {
		keycount *kc = dt__kvc_find_count(c, keys[k]);

		if (kc == NULL) {
			if ((kc = calloc(1, sizeof(*kc))) == NULL ||
			    (kc->pushes = calloc((size_t)ns, 8)) == NULL) {
				free(kc);
				return DT_ENOMEM;
			}
			kc->key = keys[k];
			dt__table_insert(&c->counts, &kc->hn, keys[k]);
		}
		if (kc->held == NULL &&
		    (kc->held = calloc((size_t)ns, 8)) == NULL)
			return DT_ENOMEM;
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
	return DT_OK;
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
                     const size_t *lens, const dt_kv_rtab *const *rtabs,
                     uint64_t *step)
{
	int ns = dt_node_num_servers(c->node);
	uint8_t *ans = NULL;
	int *pserver = NULL;
	dt_kv_req *reqs = NULL;
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
		err = dt__fail(DT_ENOMEM, "resume: out of memory");
		goto fail;
	}
	if ((err = resume_ask(c, nkeys, keys, lens, rtabs, ans, pserver, reqs)))
		goto fail;
	/* Where it resumes: the fewest pushes held of any part. */
	for (size_t j = 0; j < nkeys * (size_t)ns; j++)
		if (pserver[j] && dt__get_u64(ans + 8 * j) < s)
			s = dt__get_u64(ans + 8 * j);
	if (s == UINT64_MAX)
		s = 0;
	pthread_mutex_lock(&c->mu);
	err = resume_counts(c, nkeys, keys, ans, pserver, s);
	if (!err) {
		c->resumed = 1;
		c->resume_step = s;
	}
	pthread_mutex_unlock(&c->mu);
	if (err) {
		err = dt__fail(err, "resume: out of memory");
		goto fail;
	}
	*step = s;
	DT_LOG(1, "resuming at step %llu (%zu keys)", (unsigned long long)s,
	       nkeys);
fail:
	free(ans);
	free(pserver);
	free(reqs);
	return err;
}

/* Register and send one server's request (no lock held); its answer's
 * values (nvals floats) land in out. Failures end up in o. */
/* A log entry not on any list yet. */
void
dt__kvc_logent_drop(logent *e)
{
	free(e->meta);
	free(e->data);
	free(e->pidxs);
	free(e);
}

/* Recovery, for a row request: a log entry (*le) of one that changes the
 * store, or a copy of a pull's ids (*ids); 0 when out of memory. */
int
dt__kvc_log_part(dt_kv_client *c, const dt_msg_hdr *h, const void *meta,
                 uint32_t meta_len, const struct iovec *iov, int iovcnt,
                 logent **le, void **ids)
{
	size_t bytes = 0;
	int keep = 1;

	*le = NULL;
	*ids = NULL;
	if (h->cmd == DT_CMD_KV_ROW_PULL || h->cmd == DT_CMD_KV_PULL_MANY) {
		/* (a row pull's ids: its first piece; a batched pull's keys
		 * and lengths: all of it) */
		int n =
		    h->cmd == DT_CMD_KV_ROW_PULL ? DT_MIN(iovcnt, 1) : iovcnt;
		size_t off = 0;

		for (int i = 0; i < n; i++)
			bytes += iov[i].iov_len;
		if (bytes == 0)
			return 1;
		if ((*ids = malloc(bytes)) == NULL)
			return 0;
		for (int i = 0; i < n; off += iov[i].iov_len, i++)
			memcpy((uint8_t *)*ids + off, iov[i].iov_base,
			       iov[i].iov_len);
		return 1;
	}
	if (!dt__kvc_logged_cmd(h->cmd))
		return 1;
	for (int i = 0; i < iovcnt; i++)
		bytes += iov[i].iov_len;
	if ((dt__kvc_push_cmd(h->cmd) || dt__kvc_many_push_cmd(h->cmd)) &&
	    bytes)
		keep = dt__kvc_keep_copy(c, bytes);
	/* (a batched push not kept keeps its keys and lengths: all but its
	 * last piece, the values) */
	if ((*le = dt__kvc_log_new(h, meta, meta_len, iov,
	                           keep                            ? iovcnt
	                           : dt__kvc_many_push_cmd(h->cmd) ? iovcnt - 1
	                                                           : 0)) ==
	    NULL)
		return 0;
	(*le)->lost = !keep;
	return 1;
}
