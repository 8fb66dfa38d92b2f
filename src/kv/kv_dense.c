/*
 * kv_dense.c - dense keys on a worker: a request for one key is cut by
 * the placement rule (a whole key on one server, or a slice of a big one
 * per server) and sent as one sub-request per part, compressed when the
 * store compresses gradients (the residual of each key is kept here).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/spin.h"
#include "common/table.h"
#include "kv/client_impl.h"

/* The dt__kvc_residual of key (n floats, zeros at first), or NULL: no memory.
 */
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
		     (res = dt__kvc_residual(c, key, n)) == NULL))
			return dt__fail(
			    DT_ENOMEM,
			    "push of key %llu: out of memory for its "
			    "dt__kvc_residual",
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
		if ((k = dt__kvc_find_count(c, key)) != NULL && k->pull_at) {
			k->pull_at = 0;
			at = 1;
		}
		pthread_mutex_unlock(&c->mu);
		if (at) {
			dt__put_u64(meta, c->resume_step);
			meta_len = 8;
		}
	}
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
