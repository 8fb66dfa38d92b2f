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
#include "kv/kv_api.h"
#include "kv/rstore.h"

/* ---- the public calls ---- */

/* ---- batched forms: start everything, then wait for everything ---- */

static dt_err
wait_reqs(dt_kv *kv, dt_kv_req *reqs, size_t n, dt_err first)
{
	dt__err_kept k;

	dt__err_keep(&k, first);
	for (size_t i = 0; i < n; i++) {
		dt_err err = dt_kv_wait(kv, reqs[i]);
		if (err && !k.err)
			dt__err_keep(&k, err);
	}
	return dt__err_restore(&k);
}

/* A batched call key by key (a local store; with DTRAIN_RECOVER_BATCHED=0
 * or in dist_async under DTRAIN_RECOVER; and a restarted worker's first
 * calls after dt_kv_resume): every request started, then all waited
 * for. */
static dt_err
batch_one_by_one(dt_kv *kv, int cmd, const dt_kv_batch *b)
{
	dt_kv_req stack[64], *reqs = b->nkeys <= 64
	                                 ? stack
	                                 : dt__calloc(b->nkeys, sizeof(*reqs));
	size_t started = 0, off = 0;
	dt_err err = DT_OK;

	if (reqs == NULL)
		return DT_ENOMEM;
	/* Small frames to one server leave in one write (van.h corking); a
	 * failed flush ends the connection, and the waits report it. */
	if (kv->node)
		dt__node_cork(kv->node);
	for (; started < b->nkeys; started++) {
		size_t i = started, len = b->lens ? b->lens[i] : 1;
		const float *v = b->vals    ? b->vals + off
		                 : b->pvals ? b->pvals[i]
		                            : NULL;
		float *out = b->outs    ? b->outs + off
		             : b->pouts ? b->pouts[i]
		                        : NULL;

		off += len;
		if (cmd == DT_CMD_KV_PUSH)
			err =
			    dt_kv_push_async(kv, b->keys[i], v, len, &reqs[i]);
		else if (cmd == DT_CMD_KV_PULL)
			err = dt_kv_pull_async(kv, b->keys[i], out, len,
			                       &reqs[i]);
		else
			err = dt_kv_pushpull_async(kv, b->keys[i], v, out, len,
			                           &reqs[i]);
		if (err)
			break;
	}
	if (kv->node)
		(void)dt__node_uncork(kv->node);
	err = wait_reqs(kv, reqs, started, err);
	if (reqs != stack)
		free(reqs);
	return err;
}

/* Every batched call: the arrays checked, then the keys sent batched
 * (dt__kv_client_many) or one by one. */
static dt_err
batch_call(dt_kv *kv, int cmd, const dt_kv_batch *b)
{
	const char *op = dt__kv_op_name(cmd);
	int has_vals = cmd != DT_CMD_KV_PULL,
	    has_out = cmd == DT_CMD_KV_PULL || cmd == DT_CMD_KV_PUSHPULL;
	dt_err err;

	KV_NEED(kv != NULL, "batched %s: kv is NULL", op);
	KV_NEED(b->nkeys == 0 || b->keys,
	        "batched %s of %zu keys: keys is NULL", op, b->nkeys);
	KV_NEED(b->nkeys == 0 || !has_vals || b->vals || b->pvals,
	        "batched %s of %zu keys: values are NULL", op, b->nkeys);
	KV_NEED(b->nkeys == 0 || !has_out || b->outs || b->pouts,
	        "batched %s of %zu keys: outputs are NULL", op, b->nkeys);
	if (b->nkeys == 0)
		return DT_OK;
	for (size_t i = 0;
	     (b->pvals || b->pouts || cmd == DT_CMD_KV_INIT) && i < b->nkeys;
	     i++) {
		size_t len = b->lens ? b->lens[i] : 1;

		KV_NEED(len > 0 || cmd != DT_CMD_KV_INIT,
		        "init of key %llu: an array has at least one element",
		        (unsigned long long)b->keys[i]);
		KV_NEED(len == 0 || !has_vals || !b->pvals || b->pvals[i],
		        "%s of key %llu: NULL buffer", op,
		        (unsigned long long)b->keys[i]);
		KV_NEED(len == 0 || !has_out || !b->pouts || b->pouts[i],
		        "%s of key %llu: NULL buffer", op,
		        (unsigned long long)b->keys[i]);
	}
	if ((cmd == DT_CMD_KV_PUSH || cmd == DT_CMD_KV_PUSHPULL) &&
	    (err = dt__kv_async_check(kv, op, b->keys[0])))
		return err;
	if (cmd == DT_CMD_KV_INIT && kv->client &&
	    (err = dt__kv_client_place_init(kv->client, b)))
		return err;
	if (kv->client && dt__kv_client_batches(kv->client) &&
	    (cmd == DT_CMD_KV_INIT ||
	     !dt__kv_client_resuming(kv->client, b->nkeys, b->keys))) {
		/* (the servers find a key listed twice in their parts) */
		if (cmd == DT_CMD_KV_INIT)
			kv->inited = 1;
		return dt__kv_client_many(kv->client, cmd, b);
	}
	if ((err = dt__kv_no_duplicates(op, b->nkeys, b->keys)))
		return err;
	if (cmd != DT_CMD_KV_INIT)
		return batch_one_by_one(kv, cmd, b);
	/* Inits are few and wait on rank 0: one by one. */
	size_t off = 0;
	for (size_t i = 0; i < b->nkeys && !err; i++) {
		size_t len = b->lens ? b->lens[i] : 1;

		err = dt__kv_init_one(
		    kv, b->keys[i], b->vals ? b->vals + off : b->pvals[i], len);
		off += len;
	}
	return err;
}

/* init is collective (see dt_kv_init): the outcome agreed at the end. */
static dt_err
batch_init(dt_kv *kv, const dt_kv_batch *b)
{
	dt_err err = batch_call(kv, DT_CMD_KV_INIT, b);

	if (kv == NULL || !kv->client)
		return err;
	return dt__kv_client_agree_setup(kv->client, err);
}

dt_err
dt_kv_init_many(dt_kv *kv, size_t nkeys, const dt_key *keys,
                const float *const *vals, const size_t *lens)
{
	dt_kv_batch b = {
	    .nkeys = nkeys, .keys = keys, .lens = lens, .pvals = vals};

	KV_NEED(nkeys == 0 || lens, "batched init of %zu keys: lens is NULL",
	        nkeys);
	return batch_init(kv, &b);
}

dt_err
dt_kv_push_many(dt_kv *kv, size_t nkeys, const dt_key *keys,
                const float *const *vals, const size_t *lens)
{
	dt_kv_batch b = {
	    .nkeys = nkeys, .keys = keys, .lens = lens, .pvals = vals};

	KV_NEED(nkeys == 0 || lens, "batched push of %zu keys: lens is NULL",
	        nkeys);
	return batch_call(kv, DT_CMD_KV_PUSH, &b);
}

dt_err
dt_kv_pull_many(dt_kv *kv, size_t nkeys, const dt_key *keys, float *const *outs,
                const size_t *lens)
{
	dt_kv_batch b = {
	    .nkeys = nkeys, .keys = keys, .lens = lens, .pouts = outs};

	KV_NEED(nkeys == 0 || lens, "batched pull of %zu keys: lens is NULL",
	        nkeys);
	return batch_call(kv, DT_CMD_KV_PULL, &b);
}

dt_err
dt_kv_pushpull_many(dt_kv *kv, size_t nkeys, const dt_key *keys,
                    const float *const *vals, float *const *outs,
                    const size_t *lens)
{
	dt_kv_batch b = {.nkeys = nkeys,
	                 .keys = keys,
	                 .lens = lens,
	                 .pvals = vals,
	                 .pouts = outs};

	KV_NEED(nkeys == 0 || lens,
	        "batched pushpull of %zu keys: lens is NULL", nkeys);
	KV_NEED(nkeys == 0 || (vals && outs),
	        "batched pushpull of %zu keys: values or outputs are NULL",
	        nkeys);
	return batch_call(kv, DT_CMD_KV_PUSHPULL, &b);
}

dt_err
dt_kv_init_keys(dt_kv *kv, size_t nkeys, const dt_key *keys, const float *vals,
                const size_t *lens)
{
	dt_kv_batch b = {
	    .nkeys = nkeys, .keys = keys, .lens = lens, .vals = vals};

	return batch_init(kv, &b);
}

dt_err
dt_kv_push_keys(dt_kv *kv, size_t nkeys, const dt_key *keys, const float *vals,
                const size_t *lens)
{
	dt_kv_batch b = {
	    .nkeys = nkeys, .keys = keys, .lens = lens, .vals = vals};

	return batch_call(kv, DT_CMD_KV_PUSH, &b);
}

dt_err
dt_kv_pull_keys(dt_kv *kv, size_t nkeys, const dt_key *keys, float *outs,
                const size_t *lens)
{
	dt_kv_batch b = {
	    .nkeys = nkeys, .keys = keys, .lens = lens, .outs = outs};

	return batch_call(kv, DT_CMD_KV_PULL, &b);
}

dt_err
dt_kv_pushpull_keys(dt_kv *kv, size_t nkeys, const dt_key *keys,
                    const float *vals, float *outs, const size_t *lens)
{
	dt_kv_batch b = {.nkeys = nkeys,
	                 .keys = keys,
	                 .lens = lens,
	                 .vals = vals,
	                 .outs = outs};

	return batch_call(kv, DT_CMD_KV_PUSHPULL, &b);
}

/* ---- the worker's requests ---- */

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
	return len >= 1 && len < dt__kv_map_split(c->map) &&
	       len <= DT_KS_MAX_LEN &&
	       !(c->comp.kind != DT_QUANT_NONE && len >= c->comp.min_size);
}

/* ... and whether key is one (not a key of the single-key store). */
static inline int
batched_key(const dt_kv_client *c, dt_key key, size_t len)
{
	return batchable(c, len) && (dt__table_count(&c->singles) == 0 ||
	                             dt__table_find(&c->singles, key) == NULL);
}

typedef struct key_len {
	dt_key key;
	size_t len;
} key_len;

static int
cmp_key_len(const void *a, const void *b)
{
	dt_key x = ((const key_len *)a)->key, y = ((const key_len *)b)->key;

	return (x > y) - (x < y);
}

dt_err
dt__kv_client_place_init(dt_kv_client *c, const dt_kv_batch *b)
{
	size_t n = 0, split = dt__kv_map_split(c->map);
	key_len *k;
	dt_err err = DT_OK;

	for (size_t i = 0; i < b->nkeys; i++)
		n += (b->lens ? b->lens[i] : 1) >= split;
	if (n == 0)
		return DT_OK;
	if ((k = malloc(n * sizeof(*k))) == NULL)
		return dt__fail(DT_ENOMEM, "batched init: out of memory");
	n = 0;
	for (size_t i = 0; i < b->nkeys; i++) {
		size_t len = b->lens ? b->lens[i] : 1;

		if (len >= split)
			k[n++] = (key_len){b->keys[i], len};
	}
	qsort(k, n, sizeof(*k), cmp_key_len);
	for (size_t i = 0; i < n && !err; i++) {
		int np;

		/* (A key listed twice is the caller's checks' to name.) */
		if (i + 1 < n && k[i + 1].key == k[i].key)
			break;
		err = dt__kv_map_parts(c->map, "init", k[i].key, k[i].len, 1,
		                       c->parts, &np);
	}
	free(k);
	return err;
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
dt__kvc_send_many_part(dt_kv_client *c, kv_op *o, int server, dt_msg_hdr *h,
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

	/* Recovery (row and batched requests): a copy to send again, as
	 * send_part keeps. */
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
	if (s && le &&
	    ((dt__kvc_push_cmd(h->cmd) &&
	      (pidx = dt__kvc_next_push(c, h->key, server)) < 0) ||
	     (dt__kvc_many_push_cmd(h->cmd) &&
	      dt__kvc_many_pidx(c, le, server) < 0))) {
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
			dt__kvc_send_unlock(c);
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
	           .ids_len = 0};
	/* (a row pull's ids are its first piece; a batched pull's keys and
	 * lengths its whole payload) */
	for (int i = 0; ids && i < (h->cmd == DT_CMD_KV_ROW_PULL ? 1 : iovcnt);
	     i++)
		s->ids_len += iov[i].iov_len;
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
		dt__kvc_send_unlock(c);
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

/* How one batched call is cut (dt__kv_client_many's passes share it). */
typedef struct many_plan {
	int ns, mcmd;
	int has_vals, has_ans;
	int ones;   /* every key one float and batched, none inited alone */
	int direct; /* the caller's arrays are sent and answered into */
	size_t nbig, nparts;
	dt_fastmod fm;
	uint64_t mask; /* ns - 1 when ns is a power of two, else 0 */
	int pow2;
	/* key ranges (plan_range); rg's ranges are sent from here, so the
	 * plan outlives the call's answers */
	int range;
	kv_ranges rg;
} many_plan;

/* The server of a batched key (dt__kv_place's rule below the bound: key
 * mod S; a mask when S is a power of two). */
static inline size_t
part_of(const many_plan *pl, dt_key key)
{
	return pl->pow2 ? (size_t)(key & pl->mask)
	                : (size_t)dt__fastmod(&pl->fm, key);
}

/*
 * The one-float case (pl->ones, flat arrays) over up to ONES_MAX servers:
 * a key's part and place follow from its server alone, so each pass is one
 * tight loop with the parts' write positions in local pointers, not one
 * that reads and writes each part's counters through memory per key.
 */
#define ONES_MAX 64

static int
ones_flat(const many_plan *pl, const dt_kv_batch *b)
{
	return pl->ones && pl->ns <= ONES_MAX && (!pl->has_vals || b->vals) &&
	       (!pl->has_ans || b->outs);
}

static void
count_ones(dt_kv_client *c, const dt_kv_batch *b, const many_plan *pl)
{
	size_t cnt[ONES_MAX] = {0};

	if (pl->ns == 2) { /* (a sum of low bits: no counter in memory) */
		for (size_t i = 0; i < b->nkeys; i++)
			cnt[1] += (size_t)(b->keys[i] & 1);
		cnt[0] = b->nkeys - cnt[1];
	} else {
		for (size_t i = 0; i < b->nkeys; i++)
			cnt[part_of(pl, b->keys[i])]++;
	}
	for (int s = 0; s < pl->ns; s++) {
		c->mp[s].count = c->mp[s].nvals = cnt[s];
		c->mp[s].uniform = cnt[s] ? 1 : 0;
	}
}

/* Two servers: both parts' positions in registers, each key written
 * through the one its low bit picks (no branch to mispredict on keys in
 * random order). */
static void
gather_two(dt_kv_client *c, const dt_kv_batch *b, int vals)
{
	uint64_t *k0 = c->mp[0].keys, *k1 = c->mp[1].keys;
	float *v0 = c->mp[0].vals, *v1 = c->mp[1].vals;

	for (size_t i = 0; vals && i < b->nkeys; i++) {
		uint64_t key = b->keys[i];
		size_t odd = (size_t)(key & 1);

		*(odd ? k1 : k0) = key;
		*(odd ? v1 : v0) = b->vals[i];
		k1 += odd;
		k0 += 1 - odd;
		v1 += odd;
		v0 += 1 - odd;
	}
	for (size_t i = 0; !vals && i < b->nkeys; i++) {
		uint64_t key = b->keys[i];
		size_t odd = (size_t)(key & 1);

		*(odd ? k1 : k0) = key;
		k1 += odd;
		k0 += 1 - odd;
	}
}

static void
gather_ones(dt_kv_client *c, const dt_kv_batch *b, const many_plan *pl)
{
	uint64_t *kp[ONES_MAX];
	float *vp[ONES_MAX];

	if (pl->ns == 2) {
		gather_two(c, b, pl->has_vals);
		return;
	}
	for (int s = 0; s < pl->ns; s++) {
		kp[s] = c->mp[s].keys;
		vp[s] = c->mp[s].vals;
	}
	if (pl->has_vals)
		for (size_t i = 0; i < b->nkeys; i++) {
			size_t s = part_of(pl, b->keys[i]);

			*kp[s]++ = b->keys[i];
			*vp[s]++ = b->vals[i];
		}
	else
		for (size_t i = 0; i < b->nkeys; i++) {
			size_t s = part_of(pl, b->keys[i]);

			*kp[s]++ = b->keys[i];
		}
}

static void
scatter_ones(dt_kv_client *c, const dt_kv_batch *b, const many_plan *pl)
{
	const float *ap[ONES_MAX];

	if (pl->ns == 2) { /* (as gather_two) */
		const float *a0 = c->mp[0].ans, *a1 = c->mp[1].ans;

		for (size_t i = 0; i < b->nkeys; i++) {
			size_t odd = (size_t)(b->keys[i] & 1);

			b->outs[i] = *(odd ? a1 : a0);
			a1 += odd;
			a0 += 1 - odd;
		}
		return;
	}
	for (int s = 0; s < pl->ns; s++)
		ap[s] = c->mp[s].ans;
	for (size_t i = 0; i < b->nkeys; i++)
		b->outs[i] = *ap[part_of(pl, b->keys[i])]++;
}

/*
 * Whether the call goes as key ranges (kv_range.c), and if so each
 * server's count: its keys must be k0, k0 + d, k0 + 2d ... (ps-lite's
 * 0..N-1, feature ids in order), one float each, none alone, from flat
 * arrays, with no recovery (whose replay logs and parked requests read
 * key lists), and every server's range long enough to be worth it.
 */
static void
plan_range(dt_kv_client *c, int cmd, const dt_kv_batch *b, many_plan *pl)
{
	size_t n = b->nkeys;

	if (!pl->ones || c->recover || cmd == DT_CMD_KV_INIT ||
	    pl->ns > DT_KVC_RANGES_MAX ||
	    n < DT_KV_RANGE_MIN * (size_t)pl->ns ||
	    (pl->has_vals && !b->vals) || (pl->has_ans && !b->outs) ||
	    !dt__kvc_ranges_plan(&pl->rg, b->keys, n, pl->ns))
		return;
	pl->range = 1;
	for (int s = 0; s < pl->ns; s++) {
		c->mp[s].count = c->mp[s].nvals = pl->rg.count[s];
		c->mp[s].uniform = pl->rg.count[s] ? 1 : 0;
		c->mp[s].mixed = 0;
	}
	/* One server holds them all: the caller's arrays as they are. */
	pl->direct = pl->rg.period == 1;
}

/* Pass 1: each server's count, floats and whether its keys are all of
 * one length; the keys that go one by one are counted in nbig. */
static void
many_count(dt_kv_client *c, const dt_kv_batch *b, many_plan *pl)
{
	for (int s = 0; s < pl->ns; s++) {
		c->mp[s].count = c->mp[s].nvals = 0;
		c->mp[s].uniform = 0;
		c->mp[s].mixed = 0;
	}
	/* (One server and every key batched: the common big case, at no
	 * cost a key.) */
	if (pl->ones && pl->ns == 1) {
		c->mp[0].count = c->mp[0].nvals = b->nkeys;
		c->mp[0].uniform = 1;
	} else if (ones_flat(pl, b)) {
		count_ones(c, b, pl);
	} else {
		for (size_t i = 0; i < b->nkeys; i++) {
			size_t len = b->lens ? b->lens[i] : 1;
			mpart *p;

			if (!pl->ones && !batched_key(c, b->keys[i], len)) {
				pl->nbig++;
				continue;
			}
			p = &c->mp[part_of(pl, b->keys[i])];
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
	pl->direct = pl->ns == 1 && pl->nbig == 0 &&
	             (!pl->has_vals || b->vals) && (!pl->has_ans || b->outs);
}

/* Room in each server's part buffers; the parts to send counted. */
static dt_err
many_room(dt_kv_client *c, int cmd, const dt_kv_batch *b, many_plan *pl)
{
	int direct = pl->direct;

	for (int s = 0; s < pl->ns; s++) {
		mpart *p = &c->mp[s];

		if (p->count == 0)
			continue;
		pl->nparts++;
		if (p->nvals > SIZE_MAX / 8 ||
		    part_room(p, !direct && !pl->range, p->mixed,
		              pl->has_vals && !direct, pl->has_ans && !direct))
			return dt__fail(DT_ENOMEM,
			                "batched %s of %zu keys: out of memory",
			                dt__kv_op_name(cmd), b->nkeys);
	}
	return DT_OK;
}

/* Pass 2: the parts' keys, lengths and values gathered. */
static void
many_gather(dt_kv_client *c, const dt_kv_batch *b, const many_plan *pl)
{
	size_t off = 0;

	if (pl->range) { /* (only the values; none for a pull) */
		if (pl->has_vals)
			dt__kvc_ranges_gather(&pl->rg, pl->ns, b->vals,
			                      b->nkeys, c->mp);
		return;
	}
	if (ones_flat(pl, b) && !pl->direct) {
		gather_ones(c, b, pl);
		return;
	}
	for (int s = 0; s < pl->ns; s++)
		c->mp[s].fill = c->mp[s].vfill = 0;
	for (size_t i = 0; i < b->nkeys; i++) {
		size_t len = b->lens ? b->lens[i] : 1;
		mpart *p;

		if (!pl->ones && !batched_key(c, b->keys[i], len)) {
			off += len;
			continue;
		}
		p = &c->mp[part_of(pl, b->keys[i])];
		if (p->mixed)
			p->lens[p->fill] = (uint32_t)len;
		if (!pl->direct) {
			p->keys[p->fill] = b->keys[i];
			if (pl->has_vals) {
				const float *v =
				    b->vals ? b->vals + off : b->pvals[i];

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

/* One request per server holding batched keys, all under one op (*req
 * names it); NULL when out of memory. */
static kv_op *
many_send(dt_kv_client *c, const dt_kv_batch *b, const many_plan *pl,
          dt_kv_req *req)
{
	int direct = pl->direct;
	kv_op *o =
	    dt__kvc_new_op(c, pl->mcmd, b->keys[0], (int)pl->nparts, req);

	for (int s = 0; o && s < pl->ns; s++) {
		mpart *p = &c->mp[s];
		struct iovec iov[3];
		int n = 0;

		if (p->count == 0)
			continue;
		dt_msg_hdr h = {
		    .cmd = (uint8_t)pl->mcmd,
		    .flags = DT_F_REQUEST,
		    .key = pl->range ? pl->rg.rng[s][0]
		           : direct  ? b->keys[0]
		                     : p->keys[0],
		    .arg0 = p->count,
		    .arg1 = p->mixed ? 0 : p->uniform,
		    .arg2 = pl->has_ans ? dt__kv_enc(DT_QUANT_NONE,
		                                     (dt_quant_kind)c->pull_enc)
		                        : 0};
		if (pl->range) {
			h.arg2 |= DT_KV_KEY_RANGE;
			iov[n++] = (struct iovec){(void *)pl->rg.rng[s], 16};
		} else {
			iov[n++] = (struct iovec){direct ? (void *)b->keys
			                                 : (void *)p->keys,
			                          p->count * 8};
		}
		if (p->mixed)
			iov[n++] = (struct iovec){p->lens, p->count * 4};
		if (pl->has_vals)
			iov[n++] = (struct iovec){direct ? (void *)b->vals
			                                 : (void *)p->vals,
			                          p->nvals * 4};
		dt__kvc_send_many_part(c, o, s, &h, NULL, 0, iov, n,
		                       !pl->has_ans ? NULL
		                       : direct     ? b->outs
		                                    : p->ans,
		                       p->nvals);
	}
	return o;
}

/* The keys that go one by one (big arrays, compressed pushes) started;
 * then every request waited for, the batched one (req, when o) first. */
static dt_err
many_big_and_wait(dt_kv_client *c, int cmd, const dt_kv_batch *b,
                  const many_plan *pl, kv_op *o, dt_kv_req req)
{
	size_t nreq = 0;
	dt_kv_req *reqs;
	dt_err err = DT_OK;

	if ((reqs = dt__calloc(pl->nbig + 1, sizeof(*reqs))) == NULL)
		err = DT_ENOMEM;
	else if (o)
		reqs[nreq++] = req;
	for (size_t i = 0, off = 0; pl->nbig && i < b->nkeys && !err; i++) {
		size_t len = b->lens ? b->lens[i] : 1;
		const float *v = !pl->has_vals ? NULL
		                 : b->vals     ? b->vals + off
		                               : b->pvals[i];
		float *out = !pl->has_ans ? NULL
		             : b->outs    ? b->outs + off
		                          : b->pouts[i];

		off += len;
		if (batched_key(c, b->keys[i], len))
			continue;
		err = dt__kv_client_start(c, cmd, b->keys[i], v, out, len,
		                          &reqs[nreq]);
		if (!err)
			nreq++;
	}
	dt__err_kept kept;
	dt__err_keep(&kept, err);
	if (reqs == NULL && o) /* (then the batched one alone) */
		reqs = &req, nreq = 1;
	for (size_t k = 0; k < nreq; k++) {
		dt_err e = dt__kv_client_wait(c, reqs[k]);

		if (e && !kept.err)
			dt__err_keep(&kept, e);
	}
	if (reqs != &req)
		free(reqs);
	return dt__err_restore(&kept);
}

/* The answers of the batched parts back to the caller's places. */
static void
many_scatter(dt_kv_client *c, const dt_kv_batch *b, const many_plan *pl)
{
	size_t off = 0;

	if (pl->range) {
		dt__kvc_ranges_scatter(&pl->rg, pl->ns, c->mp, b->nkeys,
		                       b->outs);
		return;
	}
	if (ones_flat(pl, b)) {
		scatter_ones(c, b, pl);
		return;
	}
	for (int s = 0; s < pl->ns; s++)
		c->mp[s].fill = c->mp[s].vfill = 0;
	for (size_t i = 0; i < b->nkeys; i++) {
		size_t len = b->lens ? b->lens[i] : 1;
		float *out = b->outs ? b->outs + off : b->pouts[i];
		mpart *p;

		off += len;
		if (!pl->ones && !batched_key(c, b->keys[i], len))
			continue;
		p = &c->mp[part_of(pl, b->keys[i])];
		if (len == 1)
			*out = p->ans[p->vfill];
		else
			memcpy(out, p->ans + p->vfill, len * sizeof(float));
		p->vfill += len;
	}
}

dt_err
dt__kv_client_many(dt_kv_client *c, int cmd, const dt_kv_batch *b)
{
	/* (a restarted worker 0 does not set the values again: the
	 * servers hold the trained ones) */
	int send_batched =
	    cmd != DT_CMD_KV_INIT ||
	    (dt_node_rank(c->node) == 0 && !(c->rejoined && !c->resumed));
	many_plan pl = {.ns = dt_node_num_servers(c->node),
	                .mcmd = many_cmd_of(cmd),
	                .has_vals = cmd != DT_CMD_KV_PULL,
	                .has_ans =
	                    cmd == DT_CMD_KV_PULL || cmd == DT_CMD_KV_PUSHPULL};
	dt_kv_req req = 0;
	dt_err err;
	kv_op *o = NULL;

	if ((err = dt__node_check(c->node)))
		return err;
	if (pl.ns < 1)
		return dt__fail(DT_ESTATE, "batched call: no servers");
	pl.fm = dt__fastmod_of((uint64_t)pl.ns);
	pl.pow2 = (pl.ns & (pl.ns - 1)) == 0;
	pl.mask = (uint64_t)pl.ns - 1;
	pl.ones = b->lens == NULL && batchable(c, 1) &&
	          dt__table_count(&c->singles) == 0;
	if (send_batched)
		plan_range(c, cmd, b, &pl);
	if (!pl.range)
		many_count(c, b, &pl);
	if (send_batched && (err = many_room(c, cmd, b, &pl)))
		return err;
	/* The keys that go one by one are listed once each, too (each
	 * server checks its batched part). */
	if (pl.nbig > 1 && (err = big_keys_unique(c, cmd, b, pl.nbig)))
		return err;
	/* (An init other than rank 0's sends no batched part.) */
	if (pl.nparts && (!pl.direct || c->mp[0].mixed))
		many_gather(c, b, &pl);
	if (pl.nparts && (o = many_send(c, b, &pl, &req)) == NULL)
		return DT_ENOMEM;
	if ((err = many_big_and_wait(c, cmd, b, &pl, o, req)))
		return err;
	if (pl.has_ans && !pl.direct)
		many_scatter(c, b, &pl);
	return DT_OK;
}
