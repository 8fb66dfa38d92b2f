/*
 * client.c - a worker's side of a dist store, the router: it creates and
 * destroys the worker's state, attaches it to the node, and routes what
 * the node hands it (where an answer's payload goes, an answer, a failed
 * peer, a restarted one) to the op machinery (client_op.c) and the replay
 * log (client_replay.c). It also holds the requests every server takes
 * alike (configure, optimizer, checkpoint, agreeing on set-up).
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
 * Each store kind's requests are cut and sent beside that kind's public
 * calls: dense keys in kv_dense.c, many-key requests in kv_many.c, row
 * tables in kv_rows.c. client_impl.h holds the state they share.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/spin.h"
#include "common/table.h"
#include "kv/client_impl.h"

static void *
payload_dest(void *arg, dt_node *n, dt_conn *conn, const dt_msg_hdr *h,
             const uint8_t *meta)
{
	dt_kv_client *c = arg;
	void *dest = DT_VAN_DISCARD;
	sub *s;

	pthread_mutex_lock(&c->mu);
	s = dt__kvc_find_sub(c, h->seq);
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
		dt__kvc_on_ckpt_done(c, (int)h->sender, m);
		return;
	}
	if (!(h->flags & DT_F_RESPONSE))
		return;
	if (h->cmd == DT_CMD_KV_STALL) {
		dt__kvc_on_stall_reply(c, conn, m);
		return;
	}
	if (h->seq == 0) /* a replayed request already answered once */
		return;
	pthread_mutex_lock(&c->mu);
	s = dt__kvc_take_sub(c, h->seq);
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
		dt__kvc_op_fail(s->op, code, msg);
		if (s->log)
			dt__kvc_unlog_refused(c, s);
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
		dt__kvc_op_fail(s->op, DT_ESIZE, msg);
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
	int done = dt__kvc_sub_done(c, s);
	pthread_mutex_unlock(&c->mu);
	if (done)
		pthread_cond_broadcast(&c->cv);
}

void
dt__kvc_on_fail(void *arg, dt_node *n, int peer, dt_err err)
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
		dt__kvc_op_fail(s->op, err, msg);
		dt__kvc_sub_done(c, s);
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

dt_err
dt__kv_client_create(dt_node *node, int sync, size_t bound, dt_kv_map *map,
                     dt_kv_client **out)
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
	c->batch = 1;
	if ((err = dt__kv_stall_env(&c->stall_ns))) {
		free(c->parts);
		free(c);
		return err;
	}
	if (c->recover) {
		long mib, batched;

		if ((err = dt__env_long("DTRAIN_REPLAY_MAX", 1024, 0, 1L << 30,
		                        &mib)) ||
		    (err = dt__env_long("DTRAIN_RECOVER_BATCHED", 1, 0, 1,
		                        &batched))) {
			free(c->parts);
			free(c);
			return err;
		}
		c->replay_max = (uint64_t)mib << 20;
		/* Recovery replays batched requests to a restarted server in
		 * dist_sync (a key's pushes that its checkpoint holds are its
		 * rounds), and a restarted worker's dt_kv_resume asks the
		 * many-key store as the dense one; in dist_async (no rounds)
		 * or when the job asks (DTRAIN_RECOVER_BATCHED=0) batched
		 * calls go key by key. */
		c->batch = batched && sync;
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
	app.on_fail = dt__kvc_on_fail;
	app.on_peer_restart = dt__kvc_on_peer_restart;
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
	c->map = map;
	*out = c;
	return DT_OK;
}

dt_err
dt__kv_client_parts(dt_kv_client *c, dt_key key, size_t n, dt_kv_part *parts,
                    int *nparts)
{
	return dt__kv_map_parts(c->map, "placement", key, n, 0, parts, nparts);
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
		kv_op *o = DT_CONTAINER_OF(l, kv_op, ln);

		dt__table_remove(&c->ops, &o->hn);
		free(o);
	}
	dt__table_fini(&c->ops);
	for (int i = 0; i < c->nservers; i++) {
		for (dt_lnode *l; (l = dt__list_pop_front(&c->srv[i].log));) {
			dt__kvc_logent_drop(DT_CONTAINER_OF(l, logent, ln));
		}
		free(c->srv[i].held);
	}
	dt__kv_map_destroy(c->map);
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

static dt_err
broadcast_to_servers(dt_kv_client *c, int cmd, uint64_t arg0, const void *meta,
                     uint32_t meta_len)
{
	dt_kv_req req;
	kv_op *o =
	    dt__kvc_new_op(c, cmd, 0, dt_node_num_servers(c->node), &req);

	if (o == NULL)
		return DT_ENOMEM;
	for (int s = 0; s < dt_node_num_servers(c->node); s++) {
		dt_msg_hdr h = {
		    .cmd = (uint8_t)cmd, .flags = DT_F_REQUEST, .arg0 = arg0};
		dt__kvc_send_part(c, o, s, &h, meta, meta_len, NULL, 0,
		                  DT_SEND_STABLE, NULL, 0, 0);
	}
	return dt__kv_client_wait(c, req);
}

/* A worker that joined a running elastic job: the set-up the members
 * agreed on at their start (the mode, the optimizer, the keys' inits)
 * is on the servers already, and they are in no barrier for it now. */
static int
elastic_joiner(const dt_kv_client *c)
{
	return dt__node_elastic_joiner(c->node);
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

	if ((c->rejoined && !c->resumed) || elastic_joiner(c))
		return DT_OK; /* (the servers have it) */
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

	if ((c->rejoined && !c->resumed) || elastic_joiner(c))
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
	if ((c->rejoined && !c->resumed) || elastic_joiner(c))
		return err; /* (the others agreed long ago) */
	return dt__kv_client_agree(c, err);
}
