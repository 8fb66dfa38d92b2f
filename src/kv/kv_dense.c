/*
 * kv_dense.c - dense keys on a worker: a request for one key is cut by
 * the placement map (placement.c: a whole key on one server, or a slice of
 * a big one on each of several) and sent as one sub-request per part,
 * compressed when the store compresses gradients (the residual of each key is
 * kept here).
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

/* One key's init, without the workers' agreement (dt_kv_init, and each
 * key of a batched init made one by one). */
dt_err
dt__kv_init_one(dt_kv *kv, dt_key key, const float *val, size_t n)
{
	dt_kv_req req;
	dt_err err;

	if ((err = dt__kv_check_args(kv, "init", key, val, val, n)))
		return err;
	KV_NEED(n > 0, "init of key %llu: an array has at least one element",
	        (unsigned long long)key);
	if (dt__kv_rtab_find(kv, key))
		return dt__fail(
		    DT_ESTATE,
		    "init of key %llu: the key is a row_sparse table "
		    "(dt_kv_init_row_sparse); use the row_sparse "
		    "calls for it",
		    (unsigned long long)key);
	kv->inited = 1;
	if (!kv->client)
		return dt__kv_local_init(kv, key, val, n);
	dt__kv_client_note_single(kv->client, key);
	if ((err = dt__kv_client_start(kv->client, DT_CMD_KV_INIT, key, val,
	                               NULL, n, &req)))
		return err;
	return dt__kv_client_wait(kv->client, req);
}

/*
 * init is collective: every worker returns once rank 0's value is in the
 * store (a first init or a re-init alike), and an error any worker met
 * (a length that differs, say) is every worker's.
 */
dt_err
dt_kv_init(dt_kv *kv, dt_key key, const float *val, size_t n)
{
	dt_err err;

	KV_NEED(kv != NULL, "init of key %llu: kv is NULL",
	        (unsigned long long)key);
	err = dt__kv_init_one(kv, key, val, n);
	if (!kv->client)
		return err;
	return dt__kv_client_agree_setup(kv->client, err);
}

dt_err
dt_kv_push_async(dt_kv *kv, dt_key key, const float *val, size_t n,
                 dt_kv_req *req)
{
	local_entry *e = NULL;
	dt_err err;

	KV_NEED(req != NULL, "push of key %llu: req is NULL",
	        (unsigned long long)key);
	*req = 0;
	if ((err = dt__kv_check_args(kv, "push", key, val, val, n)) ||
	    (err = dt__kv_async_check(kv, "push", key)))
		return err;
	if (kv->client)
		return dt__kv_client_start(kv->client, DT_CMD_KV_PUSH, key, val,
		                           NULL, n, req);
	if ((err = dt__kv_local_get(kv, "push", key, n, &e)))
		return err;
	return dt__kv_local_apply(kv, e, val, 1);
}

dt_err
dt_kv_pull_async(dt_kv *kv, dt_key key, float *out, size_t n, dt_kv_req *req)
{
	local_entry *e = NULL;
	dt_err err;

	KV_NEED(req != NULL, "pull of key %llu: req is NULL",
	        (unsigned long long)key);
	*req = 0;
	if ((err = dt__kv_check_args(kv, "pull", key, out, out, n)))
		return err;
	if (kv->client)
		return dt__kv_client_start(kv->client, DT_CMD_KV_PULL, key,
		                           NULL, out, n, req);
	if ((err = dt__kv_local_get(kv, "pull", key, n, &e)))
		return err;
	dt__kv_local_out(kv, out, e->val, n);
	return DT_OK;
}

dt_err
dt_kv_pushpull_async(dt_kv *kv, dt_key key, const float *val, float *out,
                     size_t n, dt_kv_req *req)
{
	local_entry *e = NULL;
	dt_err err;

	KV_NEED(req != NULL, "pushpull of key %llu: req is NULL",
	        (unsigned long long)key);
	*req = 0;
	if ((err = dt__kv_check_args(kv, "pushpull", key, val, out, n)) ||
	    (err = dt__kv_async_check(kv, "pushpull", key)))
		return err;
	if (kv->client)
		return dt__kv_client_start(kv->client, DT_CMD_KV_PUSHPULL, key,
		                           val, out, n, req);
	if ((err = dt__kv_local_get(kv, "pushpull", key, n, &e)) ||
	    (err = dt__kv_local_apply(kv, e, val, 1)))
		return err;
	dt__kv_local_out(kv, out, e->val, n);
	return DT_OK;
}

dt_err
dt_kv_push(dt_kv *kv, dt_key key, const float *val, size_t n)
{
	dt_kv_req req;
	dt_err err = dt_kv_push_async(kv, key, val, n, &req);

	return err ? err : dt_kv_wait(kv, req);
}

dt_err
dt_kv_pull(dt_kv *kv, dt_key key, float *out, size_t n)
{
	dt_kv_req req;
	dt_err err = dt_kv_pull_async(kv, key, out, n, &req);

	return err ? err : dt_kv_wait(kv, req);
}

dt_err
dt_kv_pushpull(dt_kv *kv, dt_key key, const float *val, float *out, size_t n)
{
	dt_kv_req req;
	dt_err err = dt_kv_pushpull_async(kv, key, val, out, n, &req);

	return err ? err : dt_kv_wait(kv, req);
}

static void
to_half(uint16_t *out, const float *in, size_t n)
{
	dt__quant_fp16(in, (uint8_t *)out, n); /* (little-endian halves) */
}

dt_err
dt_kv_init_fp16(dt_kv *kv, dt_key key, const uint16_t *val, size_t n)
{
	float *w;
	dt_err err;

	KV_NEED(kv != NULL, "init of key %llu: kv is NULL",
	        (unsigned long long)key);
	if ((err = dt__kv_check_args(kv, "init", key, val, val, n)))
		return err;
	if ((w = dt__kv_scratch(kv, n)) == NULL)
		return dt__fail(DT_ENOMEM, "init of key %llu: out of memory",
		                (unsigned long long)key);
	dt__dequant_fp16((const uint8_t *)val, w, n);
	return dt_kv_init(kv, key, w, n);
}

/* A push, pull or pushpull of halves. */
static dt_err
half_op(dt_kv *kv, int cmd, dt_key key, const uint16_t *val, uint16_t *out,
        size_t n, dt_kv_req *req)
{
	const char *op = dt__kv_op_name(cmd);
	local_entry *e = NULL;
	dt_err err;

	KV_NEED(req != NULL, "%s of key %llu: req is NULL", op,
	        (unsigned long long)key);
	*req = 0;
	if ((err = dt__kv_check_args(kv, op, key,
	                             cmd == DT_CMD_KV_PULL ? out : val,
	                             cmd == DT_CMD_KV_PUSH ? val : out, n)) ||
	    (cmd != DT_CMD_KV_PULL && (err = dt__kv_async_check(kv, op, key))))
		return err;
	if (kv->client)
		return dt__kv_client_start_ex(kv->client, cmd, key, val, out, n,
		                              1, req);
	if ((err = dt__kv_local_get(kv, op, key, n, &e)))
		return err;
	if (cmd != DT_CMD_KV_PULL) {
		float *g = dt__kv_scratch(kv, n);

		if (g == NULL)
			return dt__fail(DT_ENOMEM,
			                "%s of key %llu: out of memory", op,
			                (unsigned long long)key);
		dt__dequant_fp16((const uint8_t *)val, g, n);
		if ((err = dt__kv_local_apply(kv, e, g, 0)))
			return err;
	}
	if (cmd != DT_CMD_KV_PUSH)
		to_half(out, e->val, n);
	return DT_OK;
}

dt_err
dt_kv_push_fp16_async(dt_kv *kv, dt_key key, const uint16_t *grad, size_t n,
                      dt_kv_req *req)
{
	KV_NEED(kv != NULL, "push of key %llu: kv is NULL",
	        (unsigned long long)key);
	return half_op(kv, DT_CMD_KV_PUSH, key, grad, NULL, n, req);
}

dt_err
dt_kv_pull_fp16_async(dt_kv *kv, dt_key key, uint16_t *out, size_t n,
                      dt_kv_req *req)
{
	KV_NEED(kv != NULL, "pull of key %llu: kv is NULL",
	        (unsigned long long)key);
	return half_op(kv, DT_CMD_KV_PULL, key, NULL, out, n, req);
}

dt_err
dt_kv_pushpull_fp16_async(dt_kv *kv, dt_key key, const uint16_t *grad,
                          uint16_t *out, size_t n, dt_kv_req *req)
{
	KV_NEED(kv != NULL, "pushpull of key %llu: kv is NULL",
	        (unsigned long long)key);
	return half_op(kv, DT_CMD_KV_PUSHPULL, key, grad, out, n, req);
}

dt_err
dt_kv_push_fp16(dt_kv *kv, dt_key key, const uint16_t *grad, size_t n)
{
	dt_kv_req req;
	dt_err err = dt_kv_push_fp16_async(kv, key, grad, n, &req);

	return err ? err : dt_kv_wait(kv, req);
}

dt_err
dt_kv_pull_fp16(dt_kv *kv, dt_key key, uint16_t *out, size_t n)
{
	dt_kv_req req;
	dt_err err = dt_kv_pull_fp16_async(kv, key, out, n, &req);

	return err ? err : dt_kv_wait(kv, req);
}

dt_err
dt_kv_pushpull_fp16(dt_kv *kv, dt_key key, const uint16_t *grad, uint16_t *out,
                    size_t n)
{
	dt_kv_req req;
	dt_err err = dt_kv_pushpull_fp16_async(kv, key, grad, out, n, &req);

	return err ? err : dt_kv_wait(kv, req);
}

/* ---- the worker's requests ---- */

/* The residual of key (n floats, zeros at first), or NULL: no memory. */
float *
dt__kvc_residual(dt_kv_client *c, dt_key key, size_t n)
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

/* A compressed push of key (n floats): its residual (*res, none for fp16)
 * and room for its biggest compressed part; a 2-bit push's threshold in
 * meta. Compressed parts are made one at a time in one buffer (each send
 * copies what it keeps), so the largest part is its size. */
static dt_err
comp_ready(dt_kv_client *c, dt_key key, size_t n, float **res, uint8_t *meta,
           uint32_t *meta_len)
{
	size_t want = dt__quant_size(c->comp.kind, n);

	if ((c->comp.kind != DT_QUANT_FP16 &&
	     (*res = dt__kvc_residual(c, key, n)) == NULL))
		return dt__fail(DT_ENOMEM,
		                "push of key %llu: out of memory for its "
		                "residual",
		                (unsigned long long)key);
	if (!dt__buf_reserve(&c->cbuf, &c->cbuf_cap, want))
		return dt__fail(DT_ENOMEM,
		                "push of key %llu: out of memory "
		                "compressing it",
		                (unsigned long long)key);
	if (c->comp.kind == DT_QUANT_2BIT) {
		dt__kv_threshold_meta(c->comp.threshold, meta);
		*meta_len = 4;
	}
	return DT_OK;
}

/* Whether this is a restarted worker's first pull of key, which asks for
 * the value of the round it computes again (dt_kv_resume); then the
 * round is in meta. */
static int
pull_at_round(dt_kv_client *c, int cmd, dt_key key, uint8_t *meta,
              uint32_t *meta_len)
{
	int at;

	if (cmd != DT_CMD_KV_PULL && cmd != DT_CMD_KV_PUSHPULL)
		return 0;
	at = dt__kvc_take_pull_at(c, key, cmd == DT_CMD_KV_PULL);
	if (at) {
		dt__put_u64(meta, c->resume_step);
		*meta_len = 8;
	}
	return at;
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
	kv_op *o;
	dt_err err;

	if ((err = dt__node_check(c->node)))
		return err;
	/* (An init places a key the first time; every worker makes the
	 * same inits in the same order, so each reaches the same map.) */
	if ((err = dt__kv_map_parts(c->map, dt__kv_op_name(cmd), key, n,
	                            cmd == DT_CMD_KV_INIT, c->parts, &nparts)))
		return err;
	if (comp && (err = comp_ready(c, key, n, &res, meta, &meta_len)))
		return err;
	int at = pull_at_round(c, cmd, key, meta, &meta_len);
	if ((o = dt__kvc_new_op(c, cmd, key, nparts, req)) == NULL)
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
		dt__kvc_send_part(c, o, p->server, &h, meta, meta_len, pv,
		                  pv ? vbytes : 0, vflags, po, p->len, half);
	}
	return DT_OK;
}
