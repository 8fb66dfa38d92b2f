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
} op;

typedef struct sub {
	uint64_t seq;
	int server_id;
	float *dest;
	size_t bytes;
	op *op;
	dt_hnode hn; /* in subs, by seq */
} sub;

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
static int
sub_done(dt_kv_client *c, sub *s)
{
	int done = --s->op->remaining == 0;

	if (done)
		dt__gen_bump(&c->done_gen);
	free(s);
	return done;
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
	if (s && s->dest && h->payload_len == s->bytes)
		dest = s->dest;
	pthread_mutex_unlock(&c->mu);
	return dest;
}

static void
on_msg(void *arg, dt_node *n, dt_conn *conn, dt_msg *m)
{
	dt_kv_client *c = arg;
	const dt_msg_hdr *h = &m->hdr;
	char name[64], msg[512];
	sub *s;

	if (!(h->flags & DT_F_RESPONSE))
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
	if (h->flags & DT_F_ERROR) {
		dt_err code;

		if (dt__kv_error_decode(m->meta, h->meta_len, &code, msg,
		                        sizeof(msg))) {
			code = DT_EPROTO;
			snprintf(msg, sizeof(msg), "malformed error answer");
		}
		op_fail(s->op, code, msg);
	} else if (s->dest && (h->payload_len != s->bytes || !m->payload)) {
		snprintf(msg, sizeof(msg),
		         "%s of key %llu: %s answered %llu bytes, expected %zu",
		         dt__kv_op_name(s->op->cmd),
		         (unsigned long long)s->op->key,
		         dt__node_name(n, (int)h->sender, name, sizeof(name)),
		         (unsigned long long)h->payload_len, s->bytes);
		op_fail(s->op, DT_ESIZE, msg);
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
	if ((err = dt__node_attach(node, &dt__kv_app, &app))) {
		dt__table_fini(&c->subs);
		dt__table_fini(&c->ops);
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
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
	     h = dt__table_next(&it))
		free(DT_CONTAINER_OF(h, sub, hn));
	dt__table_fini(&c->subs);
	for (dt_lnode *l; (l = dt__list_pop_front(&c->op_order));) {
		op *o = DT_CONTAINER_OF(l, op, ln);

		dt__table_remove(&c->ops, &o->hn);
		free(o);
	}
	dt__table_fini(&c->ops);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c->parts);
	free(c);
}

/* Send one sub-request; the sub is registered before the send. */
static void
send_part(dt_kv_client *c, op *o, int server, dt_msg_hdr *h, const void *meta,
          uint32_t meta_len, const float *val, float *out, size_t len)
{
	struct iovec iov = {(void *)val, len * sizeof(float)};
	sub *s = malloc(sizeof(*s));
	dt_err err;

	pthread_mutex_lock(&c->mu);
	if (s == NULL) {
		op_fail(o, DT_ENOMEM, "out of memory");
		o->remaining--;
		pthread_mutex_unlock(&c->mu);
		return;
	}
	h->seq = c->next_seq++;
	*s = (sub){.seq = h->seq,
	           .server_id = dt__node_server_id(c->node, server),
	           .dest = out,
	           .bytes = out ? len * sizeof(float) : 0,
	           .op = o};
	dt__table_insert(&c->subs, &s->hn, s->seq);
	pthread_mutex_unlock(&c->mu);

	/* The caller keeps val untouched until the answer (kv.h). */
	err = dt__node_send_ex(c->node, s->server_id, h, meta, meta_len,
	                       val ? &iov : NULL, val ? 1 : 0, DT_SEND_STABLE);
	if (err) {
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", dt_errmsg());
		pthread_mutex_lock(&c->mu);
		s = take_sub(c, h->seq);
		if (s) { /* not already failed by on_fail */
			op_fail(o, err, msg);
			sub_done(c, s);
		}
		pthread_mutex_unlock(&c->mu);
		pthread_cond_broadcast(&c->cv);
	}
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
	o->remaining = parts;
	dt__table_insert(&c->ops, &o->hn, o->id);
	dt__list_push_back(&c->op_order, &o->ln);
	pthread_mutex_unlock(&c->mu);
	*req = o->id;
	return o;
}

dt_err
dt__kv_client_start(dt_kv_client *c, int cmd, dt_key key, const float *val,
                    float *out, size_t n, dt_kv_req *req)
{
	int nparts, rank0 = dt_node_rank(c->node) == 0;
	op *o;
	dt_err err;

	if ((err = dt__node_check(c->node)))
		return err;
	nparts = dt__kv_place(key, n, dt_node_num_servers(c->node), c->bound,
	                      c->parts);
	if ((o = new_op(c, cmd, key, nparts, req)) == NULL)
		return DT_ENOMEM;
	for (int i = 0; i < nparts; i++) {
		dt_kv_part *p = &c->parts[i];
		dt_msg_hdr h = {.cmd = (uint8_t)cmd,
		                .flags = DT_F_REQUEST,
		                .key = key,
		                .arg0 = n,
		                .arg1 = p->offset};
		const float *pv = NULL;
		float *po = NULL;

		if (cmd == DT_CMD_KV_INIT) {
			if (rank0) {
				h.arg2 = DT_KV_INIT_HAS_VALUE;
				pv = val + p->offset;
			}
		} else if (cmd == DT_CMD_KV_PUSH) {
			pv = val + p->offset;
		} else if (cmd == DT_CMD_KV_PULL) {
			po = out + p->offset;
		} else if (cmd == DT_CMD_KV_PUSHPULL) {
			pv = val + p->offset;
			po = out + p->offset;
		}
		send_part(c, o, p->server, &h, NULL, 0, pv, po, p->len);
	}
	return DT_OK;
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
	uint64_t until = dt__now_ns() + dt__node_wait_ns(c->node);
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
		dt__node_wait_gen(c->node, &c->done_gen, &c->mu, &c->cv, until);
	}
	find_op(c, req, 1);
	pthread_mutex_unlock(&c->mu);
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
		send_part(c, o, s, &h, meta, meta_len, NULL, NULL, 0);
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
