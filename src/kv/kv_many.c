/*
 * kv_many.c - many-key requests on a worker (KV_*_MANY): a call naming
 * many keys sends one request per server holding all of its keys, their
 * lengths and values; keys that cannot go batched (big arrays, compressed
 * pushes, keys inited one by one) go one by one through kv_dense.c.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/spin.h"
#include "common/table.h"
#include "kv/client_impl.h"

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

void
dt__kvc_send_many_part(dt_kv_client *c, op *o, int server, dt_msg_hdr *h,
                       const void *meta, uint32_t meta_len,
                       const struct iovec *iov, int iovcnt, float *out,
                       size_t nvals)
{
	sub *s = malloc(sizeof(*s));
	logent *le = NULL;
	void *ids = NULL;
	int64_t pidx = 0;
	int parked = 0;
	dt_err err = DT_OK;

	/* Recovery (row requests; batched ones are not sent with it): a
	 * copy to send again, as dt__kvc_send_part keeps. */
	if (s && c->recover &&
	    !dt__kvc_log_part(c, h, meta, meta_len, iov, iovcnt, &le, &ids)) {
		free(s);
		s = NULL;
	}
	if (c->recover) {
		pthread_mutex_lock(&c->send_mu);
		dt__kvc_run_replays(c);
	}
	pthread_mutex_lock(&c->mu);
	if (s && le && dt__kvc_push_cmd(h->cmd) &&
	    (pidx = dt__kvc_next_push(c, h->key, server)) < 0) {
		dt__kvc_logent_drop(le);
		free(s);
		s = NULL;
	}
	if (s == NULL) {
		free(ids);
		dt__kvc_op_fail(o, DT_ENOMEM, "out of memory");
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
	/* A restarted server gets it in its dt__kvc_replay, in order. */
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
		dt__kvc_send_failed(c, o, h->seq, err);
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
		o = dt__kvc_new_op(c, mcmd, b->keys[0], (int)nparts, &req);
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
			dt__kvc_send_many_part(c, o, s, &h, NULL, 0, iov, n,
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
