/*
 * client_op.c - the worker's operations and sub-requests: an operation
 * (dt_kv_req) is one call of the caller's, cut into one sub-request per
 * server part. This file makes them (dt__kvc_new_op, dt__kvc_send_part),
 * finds them by id or sequence number when answers come, completes and
 * fails them, counts them for observability, and lets the caller wait
 * for one or all of them with a deadline. Every store kind sends through
 * here.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/spin.h"
#include "common/table.h"
#include "kv/client_impl.h"

sub *
dt__kvc_take_sub(dt_kv_client *c, uint64_t seq)
{
	dt_hnode *h = dt__table_take(&c->subs, seq);

	return h ? DT_CONTAINER_OF(h, sub, hn) : NULL;
}

sub *
dt__kvc_find_sub(dt_kv_client *c, uint64_t seq)
{
	dt_hnode *h = dt__table_find(&c->subs, seq);

	return h ? DT_CONTAINER_OF(h, sub, hn) : NULL;
}

static kv_op *
find_op(dt_kv_client *c, dt_kv_req id, int unlink)
{
	dt_hnode *h =
	    unlink ? dt__table_take(&c->ops, id) : dt__table_find(&c->ops, id);
	kv_op *o = h ? DT_CONTAINER_OF(h, kv_op, hn) : NULL;

	if (o && unlink)
		dt__list_remove(&o->ln);
	return o;
}

void
dt__kvc_op_fail(kv_op *o, dt_err err, const char *msg)
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
op_record(kv_op *o)
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

int
dt__kvc_sub_done(dt_kv_client *c, sub *s)
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
int
dt__kvc_push_cmd(int cmd)
{
	return cmd == DT_CMD_KV_PUSH || cmd == DT_CMD_KV_PUSHPULL ||
	       cmd == DT_CMD_KV_ROW_PUSH || cmd == DT_CMD_KV_ROW_PUSHPULL;
}

int
dt__kvc_init_cmd(int cmd)
{
	return cmd == DT_CMD_KV_INIT || cmd == DT_CMD_KV_ROW_INIT;
}

int
dt__kvc_many_push_cmd(int cmd)
{
	return cmd == DT_CMD_KV_PUSH_MANY || cmd == DT_CMD_KV_PUSHPULL_MANY;
}

int
dt__kvc_logged_cmd(int cmd)
{
	return cmd == DT_CMD_KV_CONFIG || cmd == DT_CMD_KV_SET_OPT ||
	       dt__kvc_init_cmd(cmd) || dt__kvc_push_cmd(cmd) ||
	       cmd == DT_CMD_KV_INIT_MANY || dt__kvc_many_push_cmd(cmd);
}

/* What a push becomes once its value is in the server's checkpoint and
 * only its answer is missing (a pushpull's: the pull), and what a
 * pushpull becomes once its answer came (the push alone). */
int
dt__kvc_pull_of(int cmd)
{
	return cmd == DT_CMD_KV_ROW_PUSHPULL ? DT_CMD_KV_ROW_PULL
	                                     : DT_CMD_KV_PULL;
}

int
dt__kvc_push_of(int cmd)
{
	return cmd == DT_CMD_KV_ROW_PUSH || cmd == DT_CMD_KV_ROW_PUSHPULL
	           ? DT_CMD_KV_ROW_PUSH
	           : DT_CMD_KV_PUSH;
}

int
dt__kvc_server_rank(const dt_kv_client *c, int server_id)
{
	return server_id - dt__node_server_id(c->node, 0);
}

/* The send of sub-request seq of o failed with err (dt_errmsg() says
 * why): o fails, unless on_fail got there first. */
void
dt__kvc_send_failed(dt_kv_client *c, kv_op *o, uint64_t seq, dt_err err)
{
	char msg[512];
	sub *s;

	snprintf(msg, sizeof(msg), "%s", dt_errmsg());
	pthread_mutex_lock(&c->mu);
	if ((s = dt__kvc_take_sub(c, seq)) != NULL) {
		dt__kvc_op_fail(o, err, msg);
		dt__kvc_sub_done(c, s);
	}
	pthread_mutex_unlock(&c->mu);
	pthread_cond_broadcast(&c->cv);
}

/* Recovery: whether a push's copy of vbytes may be kept (within
 * DTRAIN_REPLAY_MAX: else a record without the data, and a restart that
 * needs it ends the job, named). */
int
dt__kvc_keep_copy(dt_kv_client *c, size_t vbytes)
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

/* A push the server holds from this worker's predecessor: a push is
 * then made (1: o counts this part as done), a pushpull becomes a pull
 * (0: its header changed here, its body dropped by the caller). */
static int
held_push_done(dt_kv_client *c, kv_op *o, dt_msg_hdr *h)
{
	if (h->cmd != DT_CMD_KV_PUSH) {
		h->cmd = DT_CMD_KV_PULL;
		h->arg2 = dt__kv_enc(DT_QUANT_NONE, DT_KV_ENC_ANSWER(h->arg2));
		return 0;
	}
	dt__kvc_part_done(c, o);
	return 1;
}

/*
 * An elastic job: a single-key push names the membership this worker
 * computes in - the one its program took last (dt_elastic_restore), not
 * the newest the scheduler announced - so that a server counts it only in
 * a round of that membership (kv/srv_elastic.c). 1: the epoch does not
 * fit (o failed).
 */
static int
stamp_epoch(dt_kv_client *c, kv_op *o, dt_msg_hdr *h)
{
	uint64_t ep;

	if ((h->cmd != DT_CMD_KV_PUSH && h->cmd != DT_CMD_KV_PUSHPULL) ||
	    !dt__node_elastic(c->node))
		return 0;
	ep = dt__node_elastic_taken(c->node);
	if (ep > DT_KV_EPOCH_MAX) {
		char msg[160];

		snprintf(msg, sizeof(msg),
		         "push of key %llu: membership %llu; an elastic job "
		         "with servers goes through at most %u membership "
		         "changes",
		         (unsigned long long)h->key, (unsigned long long)ep,
		         DT_KV_EPOCH_MAX);
		dt__kvc_op_fail(o, DT_ETOOBIG, msg);
		return 1;
	}
	h->arg2 |= (uint32_t)(ep << DT_KV_EPOCH_SHIFT);
	return 0;
}

void
dt__kvc_part_done(dt_kv_client *c, kv_op *o)
{
	int done;

	pthread_mutex_lock(&c->mu);
	done = --o->remaining == 0;
	if (done)
		dt__gen_bump(&c->done_gen);
	pthread_mutex_unlock(&c->mu);
	if (done)
		pthread_cond_broadcast(&c->cv);
}

/* A sub-request that is not sent after all (out of memory, or an epoch
 * the request may not carry: stamp_epoch failed the operation): its part
 * of o is over (mu held, and send_mu with recovery; both released). */
static void
abandon_part(dt_kv_client *c, kv_op *o, sub *s, logent *le)
{
	if (s == NULL)
		dt__kvc_op_fail(o, DT_ENOMEM, "out of memory");
	if (le)
		dt__kvc_logent_drop(le); /* (never sent) */
	free(s);
	o->remaining--;
	pthread_mutex_unlock(&c->mu);
	if (c->recover)
		dt__kvc_send_unlock(c);
}

/* Recovery: the replay log's entry of a request, to send again to a
 * restarted server; a push's data is copied only within
 * DTRAIN_REPLAY_MAX (keep_copy), else the entry says it is lost. NULL
 * when out of memory. */
static logent *
log_part(dt_kv_client *c, const dt_msg_hdr *h, const void *meta,
         uint32_t meta_len, const struct iovec *iov)
{
	int keep =
	    !(iov->iov_base && iov->iov_len && dt__kvc_push_cmd(h->cmd)) ||
	    dt__kvc_keep_copy(c, iov->iov_len);
	logent *le = dt__kvc_log_new(h, meta, meta_len, iov,
	                             keep && iov->iov_base ? 1 : 0);

	if (le && !keep)
		le->lost = 1;
	return le;
}

/*
 * Send one sub-request; the sub is registered before the send. val is
 * vbytes of payload: the caller's (stable until the answer) or, when
 * vflags lacks DT_SEND_STABLE, a scratch buffer reused after the call.
 * out (len floats) receives the answer's value, in encoding h->arg2 asks.
 */
void
dt__kvc_send_part(dt_kv_client *c, kv_op *o, int server, dt_msg_hdr *h,
                  const void *meta, uint32_t meta_len, const void *val,
                  size_t vbytes, unsigned vflags, void *out, size_t len,
                  int half_out)
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
	    dt__kvc_held_push(c, h->key, server)) {
		if (held_push_done(c, o, h)) {
			free(s);
			return;
		}
		meta = NULL;
		meta_len = 0;
		val = NULL;
		vbytes = 0;
		iov = (struct iovec){NULL, 0};
	}
	if (s && c->recover && dt__kvc_logged_cmd(h->cmd) &&
	    (le = log_part(c, h, meta, meta_len, &iov)) == NULL) {
		free(s);
		s = NULL;
	}
	/* (without recovery nothing is replayed: no send order to keep) */
	if (c->recover) {
		pthread_mutex_lock(&c->send_mu);
		dt__kvc_run_replays(c);
	}
	pthread_mutex_lock(&c->mu);
	int64_t pidx = 0;

	if (s && le &&
	    (h->cmd == DT_CMD_KV_PUSH || h->cmd == DT_CMD_KV_PUSHPULL) &&
	    (pidx = dt__kvc_next_push(c, h->key, server)) < 0) {
		dt__kvc_logent_drop(le); /* (never sent) */
		le = NULL;
		free(s);
		s = NULL;
	}
	if (s == NULL || stamp_epoch(c, o, h)) {
		abandon_part(c, o, s, le);
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
		dt__kvc_send_unlock(c);
	if (err)
		dt__kvc_send_failed(c, o, h->seq, err);
}

kv_op *
dt__kvc_new_op(dt_kv_client *c, int cmd, dt_key key, int parts, dt_kv_req *req)
{
	kv_op *o = dt__calloc(1, sizeof(*o));

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

dt_err
dt__kv_client_wait(dt_kv_client *c, dt_kv_req req)
{
	kv_op *o;
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
	/* DT_KV_STALL: an answer is progress; a stall without one since the
	 * call began (or since the last answer) is reported once. */
	uint64_t t_prog = o->t0;
	uint64_t stall_at = c->stall_ns ? t_prog + c->stall_ns : 0;
	int left = o->remaining;
	while (o->remaining > 0) {
		if (o->remaining != left) {
			left = o->remaining;
			t_prog = dt__now_ns();
			stall_at = c->stall_ns ? t_prog + c->stall_ns : 0;
		}
		if (stall_at && dt__now_ns() >= stall_at) {
			pthread_mutex_unlock(&c->mu);
			dt__kvc_stall_report(c, o, dt__now_ns() - t_prog);
			pthread_mutex_lock(&c->mu);
			stall_at = 0; /* once per stall */
			continue;
		}
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
			dt__kvc_run_replays(c);
			pthread_mutex_unlock(&c->send_mu);
			pthread_mutex_lock(&c->mu);
			continue;
		}
		dt__node_wait_gen(c->node, &c->done_gen, &c->mu, &c->cv,
		                  stall_at && (!until || stall_at < until)
		                      ? stall_at
		                      : until);
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
	dt__err_kept k;

	dt__err_keep(&k, DT_OK);
	for (;;) {
		dt_kv_req id = 0;
		dt_err err;

		pthread_mutex_lock(&c->mu);
		if (!dt__list_empty(&c->op_order))
			id = DT_CONTAINER_OF(dt__list_first(&c->op_order),
			                     kv_op, ln)
			         ->id;
		pthread_mutex_unlock(&c->mu);
		if (!id)
			break;
		err = dt__kv_client_wait(c, id);
		if (err && !k.err)
			dt__err_keep(&k, err);
	}
	return dt__err_restore(&k);
}
