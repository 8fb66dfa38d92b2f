/*
 * kv_rows.c - row tables on a worker (row_sparse): a table's rows are cut
 * by range into one part per server; a row push or pull sends each server
 * the ids (and values) of its rows only.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/spin.h"
#include "common/table.h"
#include "kv/client_impl.h"

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
	if ((o = dt__kvc_new_op(c, DT_CMD_KV_ROW_INIT, t->key, nparts, &req)) ==
	    NULL)
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
		dt__kvc_send_many_part(c, o, i, &h, meta, sizeof(meta), &iov,
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
 * the dt__kvc_residual rows of t (error feedback): its body's size. */
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
			                "for its compression dt__kvc_residual",
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
	if ((o = dt__kvc_new_op(c, cmd, t->key, (int)nparts, &req)) == NULL)
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
		dt__kvc_send_many_part(
		    c, o, i, &h, meta,
		    comp && c->comp.kind == DT_QUANT_2BIT ? 4 : 0, iov, k,
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
