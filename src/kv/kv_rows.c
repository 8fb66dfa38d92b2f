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
#include "kv/kv_api.h"
#include "kv/rstore.h"

/* ---- the public calls ---- */

/* ---- row_sparse tables ---- */

dt_kv_rtab *
dt__kv_rtab_find(dt_kv *kv, dt_key key)
{
	dt_hnode *h = dt__table_find(&kv->rtabs, key);

	return h ? DT_CONTAINER_OF(h, dt_kv_rtab, hn) : NULL;
}

void
dt__kv_rtab_free(dt_kv_rtab *t)
{
	if (t->local) {
		dt__rs_fini(t->local);
		free(t->local);
	}
	dt__unmap_zero(t->resid, t->resid_bytes);
	free(t->mark);
	free(t);
}

/* Tables up to this many rows find a row listed twice with a bitmap
 * (32 MiB at most); bigger ones by sorting a copy of the ids. */
#define MARK_ROWS ((uint64_t)1 << 28)

static dt_err
rtab_init(dt_kv *kv, dt_key key, uint64_t rows, size_t width, const float *val)
{
	dt_kv_rtab *t;
	dt_err err;

	KV_NEED(kv != NULL, "row_sparse init of key %llu: kv is NULL",
	        (unsigned long long)key);
	KV_NEED(rows >= 1 && rows <= DT_RS_MAX_ROWS && width >= 1 &&
	            width <= DT_RS_MAX_WIDTH,
	        "row_sparse init of key %llu: %llu rows of width %zu (1 to "
	        "%llu rows, width 1 to %llu)",
	        (unsigned long long)key, (unsigned long long)rows, width,
	        (unsigned long long)DT_RS_MAX_ROWS,
	        (unsigned long long)DT_RS_MAX_WIDTH);
	if (dt__kv_rtab_find(kv, key) || dt__kv_local_find(kv, key))
		return dt__fail(DT_EEXIST,
		                "row_sparse init of key %llu: the key is "
		                "already initialised",
		                (unsigned long long)key);
	if ((t = dt__calloc(1, sizeof(*t))) == NULL)
		return DT_ENOMEM;
	t->key = key;
	t->rows = rows;
	t->width = width;
	if (rows <= MARK_ROWS &&
	    (t->mark = calloc((size_t)(rows / 64 + 1), 8)) == NULL) {
		free(t);
		return dt__fail(DT_ENOMEM,
		                "row_sparse init of key %llu: out of memory",
		                (unsigned long long)key);
	}
	if (!kv->client) {
		dt_opt none = {0};

		if ((t->local = dt__calloc(1, sizeof(*t->local))) == NULL) {
			dt__kv_rtab_free(t);
			return DT_ENOMEM;
		}
		if ((err = dt__rs_init(t->local, key, rows, 0, rows, width, 1,
		                       0, kv->have_opt ? &kv->opt : &none))) {
			free(t->local);
			t->local = NULL;
			dt__kv_rtab_free(t);
			return err;
		}
		if (val)
			memcpy(t->local->val, val, t->local->val_bytes);
	} else if ((err = dt__kv_client_row_init(kv->client, t, val))) {
		dt__kv_rtab_free(t);
		return err;
	}
	kv->inited = 1;
	dt__table_insert(&kv->rtabs, &t->hn, key);
	return DT_OK;
}

/* init is collective, as dt_kv_init. */
dt_err
dt_kv_init_row_sparse(dt_kv *kv, dt_key key, uint64_t rows, size_t width,
                      const float *val)
{
	dt_err err = rtab_init(kv, key, rows, width, val);

	if (kv == NULL || !kv->client)
		return err;
	return dt__kv_client_agree_setup(kv->client, err);
}

/* Whether a row is listed twice in ids (1, *dup: the first found), with
 * a bitmap for tables of up to MARK_ROWS rows, else a sort; -1: out of
 * memory. */
static int
find_dup_row(dt_kv_rtab *t, size_t nrows, const uint64_t *ids, uint64_t *dup)
{
	size_t i;
	int r = 0;

	if (t->mark == NULL)
		return dt__kv_find_duplicate(nrows, ids, dup);
	for (i = 0; i < nrows && !r; i++) {
		uint64_t bit = (uint64_t)1 << (ids[i] % 64);

		if (t->mark[ids[i] / 64] & bit) {
			r = 1;
			*dup = ids[i];
		}
		t->mark[ids[i] / 64] |= bit;
	}
	while (i--) /* (all clear again) */
		t->mark[ids[i] / 64] &= ~((uint64_t)1 << (ids[i] % 64));
	return r;
}

/* A row call's arguments against t: ids in range, and a push's listed
 * once each. */
static dt_err
rows_check(dt_kv *kv, const char *op, dt_key key, size_t nrows,
           const uint64_t *ids, const void *vals, const void *outs,
           size_t width, int push, dt_kv_rtab **out)
{
	dt_kv_rtab *t;

	KV_NEED(kv != NULL, "%s of key %llu: kv is NULL", op,
	        (unsigned long long)key);
	if ((t = dt__kv_rtab_find(kv, key)) == NULL)
		return dt__fail(DT_ENOKEY,
		                "%s of key %llu: unknown key (never "
		                "initialised with dt_kv_init_row_sparse)",
		                op, (unsigned long long)key);
	if (width != t->width)
		return dt__fail(DT_ESIZE,
		                "%s of key %llu: rows of width %zu, but the "
		                "table's are %zu wide",
		                op, (unsigned long long)key, width, t->width);
	KV_NEED(nrows == 0 || (ids && vals && outs),
	        "%s of key %llu: NULL buffer", op, (unsigned long long)key);
	KV_NEED(nrows <= DT_RS_MAX_ROWS &&
	            (uint64_t)nrows * width <= DT_RS_MAX_VALS,
	        "%s of key %llu: %zu rows of width %zu (at most %llu floats "
	        "a call)",
	        op, (unsigned long long)key, nrows, width,
	        (unsigned long long)DT_RS_MAX_VALS);
	*out = t;
	for (size_t i = 0; i < nrows; i++)
		if (ids[i] >= t->rows)
			return dt__fail(DT_EINVAL,
			                "%s of key %llu: row %llu is out of "
			                "range (the table has %llu rows)",
			                op, (unsigned long long)key,
			                (unsigned long long)ids[i],
			                (unsigned long long)t->rows);
	if (!push)
		return DT_OK;
	uint64_t dup = 0;
	int r = find_dup_row(t, nrows, ids, &dup);

	if (r < 0)
		return dt__fail(DT_ENOMEM, "%s of key %llu: out of memory", op,
		                (unsigned long long)key);
	if (r > 0)
		return dt__fail(
		    DT_EINVAL,
		    "%s of key %llu: row %llu is listed twice in one "
		    "push",
		    op, (unsigned long long)key, (unsigned long long)dup);
	return DT_OK;
}

/* (id, place in the request) for pull_unique's sort */
typedef struct row_at {
	uint64_t id;
	size_t at;
} row_at;

static int
row_at_cmp(const void *a, const void *b)
{
	uint64_t x = ((const row_at *)a)->id, y = ((const row_at *)b)->id;

	return (x > y) - (x < y);
}

static dt_err
pull_nomem(const dt_kv_rtab *t, size_t nrows)
{
	return dt__fail(DT_ENOMEM,
	                "row_sparse pull of key %llu: out of memory for %zu "
	                "rows",
	                (unsigned long long)t->key, nrows);
}

/*
 * A pull that names a row more than once (an embedding's batch does)
 * asks the servers for each row once and copies it to every place it was
 * asked for: a server refuses a row listed twice, so that no answer can
 * be bigger than its part of the table however few bytes ask for it.
 */
static dt_err
pull_unique(dt_kv *kv, dt_kv_rtab *t, size_t nrows, const uint64_t *ids,
            float *outs)
{
	size_t w = t->width, nu = 0;
	uint64_t dup, *uniq = NULL;
	row_at *by_id = NULL;
	float *got = NULL;
	dt_err err;
	int r = find_dup_row(t, nrows, ids, &dup);

	if (r == 0)
		return dt__kv_client_rows(kv->client, t, DT_CMD_KV_ROW_PULL,
		                          nrows, ids, NULL, outs);
	if (r < 0 || (by_id = malloc(nrows * sizeof(*by_id))) == NULL ||
	    (uniq = malloc(nrows * sizeof(*uniq))) == NULL) {
		err = pull_nomem(t, nrows);
		goto fail;
	}
	for (size_t i = 0; i < nrows; i++)
		by_id[i] = (row_at){ids[i], i};
	qsort(by_id, nrows, sizeof(*by_id), row_at_cmp);
	for (size_t i = 0; i < nrows; i++) {
		if (nu == 0 || uniq[nu - 1] != by_id[i].id)
			uniq[nu++] = by_id[i].id;
		by_id[i].id = nu - 1; /* (now: its place among the unique) */
	}
	if ((got = malloc(nu * w * sizeof(float))) == NULL) {
		err = pull_nomem(t, nrows);
		goto fail;
	}
	if ((err = dt__kv_client_rows(kv->client, t, DT_CMD_KV_ROW_PULL, nu,
	                              uniq, NULL, got)))
		goto fail;
	for (size_t i = 0; i < nrows; i++)
		memcpy(outs + by_id[i].at * w, got + by_id[i].id * w,
		       w * sizeof(float));
	err = DT_OK;
fail:
	free(by_id);
	free(uniq);
	free(got);
	return err;
}

static dt_err
rows_call(dt_kv *kv, int cmd, dt_key key, size_t nrows, const uint64_t *ids,
          const float *vals, float *outs, size_t width)
{
	const char *op = dt__kv_op_name(cmd);
	int push = cmd != DT_CMD_KV_ROW_PULL;
	dt_kv_rtab *t = NULL;
	dt_err err;

	if ((err = rows_check(
	         kv, op, key, nrows, ids, push ? (const void *)vals : ids,
	         cmd != DT_CMD_KV_ROW_PUSH ? (const void *)outs : ids, width,
	         push, &t)))
		return err;
	if (push && (err = dt__kv_async_check(kv, op, key)))
		return err;
	if (kv->client && cmd == DT_CMD_KV_ROW_PULL)
		return pull_unique(kv, t, nrows, ids, outs);
	if (kv->client)
		return dt__kv_client_rows(kv->client, t, cmd, nrows, ids, vals,
		                          outs);
	/* A local store: the table is here (a push applied at once). */
	if (push)
		dt__rs_apply(t->local, nrows, (const uint8_t *)ids, vals);
	if (cmd != DT_CMD_KV_ROW_PUSH) {
		dt__rs_gather(t->local, nrows, (const uint8_t *)ids, outs);
		if (kv->pull_fp16)
			dt__kv_local_out(kv, outs, outs, nrows * width);
	}
	return DT_OK;
}

dt_err
dt_kv_push_row_sparse(dt_kv *kv, dt_key key, size_t nrows,
                      const uint64_t *row_ids, const float *vals, size_t width)
{
	return rows_call(kv, DT_CMD_KV_ROW_PUSH, key, nrows, row_ids, vals,
	                 NULL, width);
}

dt_err
dt_kv_row_sparse_pull(dt_kv *kv, dt_key key, size_t nrows,
                      const uint64_t *row_ids, float *out, size_t width)
{
	return rows_call(kv, DT_CMD_KV_ROW_PULL, key, nrows, row_ids, NULL, out,
	                 width);
}

dt_err
dt_kv_pushpull_row_sparse(dt_kv *kv, dt_key key, size_t nrows,
                          const uint64_t *row_ids, const float *vals,
                          float *out, size_t width)
{
	return rows_call(kv, DT_CMD_KV_ROW_PUSHPULL, key, nrows, row_ids, vals,
	                 out, width);
}

/* ---- the worker's requests ---- */

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
	kv_op *o;

	if ((err = dt__node_check(c->node)))
		return err;
	/* (a process in a lost worker 0's place: the tables hold their
	 * values, which an init would set again) */
	if (dt_node_rank(c->node) != 0 || c->rejoined)
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

/* How one row request is cut (dt__kv_client_rows's steps share it). */
typedef struct rows_plan {
	int cmd, ns;
	int pushes, answers, comp;
	int at;    /* a restarted worker's first pull: as of its step */
	int split; /* the table is cut over the servers, else on home */
	int home;
	size_t nparts;
} rows_plan;

/* Whether server i gets a part of this request. */
static int
rows_sends(const dt_kv_client *c, const rows_plan *pl, int i)
{
	return (pl->split || i == pl->home) &&
	       (pl->pushes || c->mp[i].count != 0);
}

/* Which servers hold the table (all of them when it is split, else its
 * home); how many rows go to each. */
static void
rows_count(dt_kv_client *c, const dt_kv_rtab *t, size_t count,
           const uint64_t *ids, rows_plan *pl)
{
	uint64_t lo, n;

	pl->home = -1;
	for (int i = 0; i < pl->ns; i++) {
		rows_part(c, t, i, &lo, &n);
		c->mp[i].count = 0;
		if (n == t->rows)
			pl->home = i;
	}
	pl->split = pl->home < 0;
	if (!pl->split)
		c->mp[pl->home].count = count;
	else
		for (size_t i = 0; i < count; i++)
			c->mp[dt__kv_rows_server(t->key, t->rows, t->width,
			                         pl->ns, c->bound, ids[i])]
			    .count++;
}

/* Room for server part p of nv floats of this request. */
static int
rows_part_room(dt_kv_client *c, const rows_plan *pl, mpart *p, size_t nv)
{
	int split = pl->split, comp = pl->comp;

	return (split && dt__buf_reserve((uint8_t **)&p->keys, &p->keys_cap,
	                                 DT_MAX(p->count, 1) * 8) == NULL) ||
	       (split && pl->pushes &&
	        !dt__buf_reserve((uint8_t **)&p->vals, &p->vals_cap,
	                         DT_MAX(nv, 1) * 4)) ||
	       (split && pl->answers &&
	        !dt__buf_reserve((uint8_t **)&p->ans, &p->ans_cap,
	                         DT_MAX(nv, 1) * 4)) ||
	       (comp && !dt__buf_reserve(
	                    &p->enc, &p->enc_cap,
	                    dt__quant_size(c->comp.kind, DT_MAX(nv, 1)))) ||
	       (comp &&
	        !dt__buf_reserve(&c->cbuf, &c->cbuf_cap, DT_MAX(nv, 1) * 4));
}

/* The residual of a compressed table, and room in every part sent; the
 * parts counted. */
static dt_err
rows_room(dt_kv_client *c, dt_kv_rtab *t, size_t count, rows_plan *pl)
{
	size_t w = t->width;

	if (pl->comp && c->comp.kind != DT_QUANT_FP16 && t->resid == NULL) {
		t->resid_bytes = (size_t)(t->rows * w * sizeof(float));
		if ((t->resid = dt__map_zero(t->resid_bytes)) == NULL)
			return dt__fail(DT_ENOMEM,
			                "row_sparse push of key %llu: no room "
			                "for its compression residual",
			                (unsigned long long)t->key);
	}
	for (int i = 0; i < pl->ns; i++) {
		mpart *p = &c->mp[i];
		size_t nv = p->count * w;

		if (!rows_sends(c, pl, i))
			continue;
		pl->nparts++;
		p->nvals = nv;
		if (rows_part_room(c, pl, p, nv))
			return dt__fail(DT_ENOMEM,
			                "%s of %zu rows of key %llu: out of "
			                "memory",
			                dt__kv_op_name(pl->cmd), count,
			                (unsigned long long)t->key);
	}
	return DT_OK;
}

/* A split table's ids and values cut into the parts (gather), or its
 * answers put back in the asked order (!gather). */
static void
rows_shuffle(dt_kv_client *c, const dt_kv_rtab *t, const rows_plan *pl,
             size_t count, const uint64_t *ids, const float *vals, float *outs,
             int gather)
{
	size_t w = t->width;

	for (int i = 0; i < pl->ns; i++)
		c->mp[i].fill = 0;
	for (size_t i = 0; i < count; i++) {
		mpart *p = &c->mp[dt__kv_rows_server(t->key, t->rows, w, pl->ns,
		                                     c->bound, ids[i])];

		if (!gather)
			memcpy(outs + i * w, p->ans + p->fill * w,
			       w * sizeof(float));
		else {
			p->keys[p->fill] = ids[i];
			if (pl->pushes)
				memcpy(p->vals + p->fill * w, vals + i * w,
				       w * sizeof(float));
		}
		p->fill++;
	}
}

/*
 * A restarted worker's push of part i that server i holds from its
 * predecessor (dt_kv_resume) is not made again: a push's part is then
 * done (1), a pushpull's becomes a pull of its rows (*cmd; done when it
 * has none).
 */
static int
rows_held(dt_kv_client *c, const dt_kv_rtab *t, const rows_plan *pl, kv_op *o,
          int i, int *cmd)
{
	*cmd = pl->cmd;
	if (!c->resumed || !pl->pushes || !dt__kvc_held_push(c, t->key, i))
		return 0;
	if (pl->cmd == DT_CMD_KV_ROW_PUSHPULL && c->mp[i].count) {
		*cmd = DT_CMD_KV_ROW_PULL;
		return 0;
	}
	dt__kvc_part_done(c, o);
	return 1;
}

/* Each part sent, under op o. */
static void
rows_send(dt_kv_client *c, dt_kv_rtab *t, const rows_plan *pl, kv_op *o,
          const uint64_t *ids, const float *vals, float *outs)
{
	int comp = pl->comp, two_bit = comp && c->comp.kind == DT_QUANT_2BIT;
	uint8_t meta[8];
	uint32_t meta_len = 0;

	if (two_bit) {
		dt__kv_threshold_meta(c->comp.threshold, meta);
		meta_len = 4;
	} else if (pl->at) {
		dt__put_u64(meta, c->resume_step);
		meta_len = 8;
	}
	for (int i = 0; i < pl->ns; i++) {
		mpart *p = &c->mp[i];
		const uint64_t *pid = pl->split ? p->keys : ids;
		const float *pv = pl->split ? p->vals : vals;
		struct iovec iov[2];
		size_t vbytes = p->nvals * 4;
		int k = 0, cmd;

		if (!rows_sends(c, pl, i) || rows_held(c, t, pl, o, i, &cmd))
			continue;
		if (cmd != pl->cmd) { /* (a held pushpull: its rows' pull) */
			dt_msg_hdr h = {
			    .cmd = (uint8_t)cmd,
			    .flags = DT_F_REQUEST,
			    .key = t->key,
			    .arg0 = p->count,
			    .arg1 = t->width,
			    .arg2 = dt__kv_enc(DT_QUANT_NONE, c->pull_enc)};

			iov[0] = (struct iovec){(void *)pid, p->count * 8};
			dt__kvc_send_many_part(c, o, i, &h, NULL, 0, iov, 1,
			                       pl->split ? p->ans : outs,
			                       p->nvals);
			continue;
		}
		if (comp) {
			vbytes = rows_encode(c, t, p, p->count, pid, pv);
			pv = (const float *)(void *)p->enc;
		}
		if (p->count)
			iov[k++] = (struct iovec){(void *)pid, p->count * 8};
		if (pl->pushes && vbytes)
			iov[k++] = (struct iovec){(void *)pv, vbytes};
		dt_msg_hdr h = {
		    .cmd = (uint8_t)pl->cmd,
		    .flags = DT_F_REQUEST,
		    .key = t->key,
		    .arg0 = p->count,
		    .arg1 = t->width,
		    .arg2 = dt__kv_enc(comp ? c->comp.kind : DT_QUANT_NONE,
		                       pl->answers ? (dt_quant_kind)c->pull_enc
		                                   : DT_QUANT_NONE) |
		            (pl->at ? DT_KV_AT_ROUND : 0)};
		dt__kvc_send_many_part(c, o, i, &h, meta, meta_len, iov, k,
		                       !pl->answers ? NULL
		                       : pl->split  ? p->ans
		                                    : outs,
		                       p->nvals);
	}
}

dt_err
dt__kv_client_rows(dt_kv_client *c, dt_kv_rtab *t, int cmd, size_t count,
                   const uint64_t *ids, const float *vals, float *outs)
{
	rows_plan pl = {.cmd = cmd,
	                .ns = c->nservers,
	                .pushes = cmd != DT_CMD_KV_ROW_PULL,
	                .answers = cmd != DT_CMD_KV_ROW_PUSH};
	dt_kv_req req;
	dt_err err;
	kv_op *o;

	if ((err = dt__node_check(c->node)))
		return err;
	pl.comp = pl.pushes && rows_compressed(c, t);
	pl.at = pl.answers &&
	        dt__kvc_take_pull_at(c, t->key, cmd == DT_CMD_KV_ROW_PULL);
	rows_count(c, t, count, ids, &pl);
	if ((err = rows_room(c, t, count, &pl)))
		return err;
	if (pl.nparts == 0)
		return DT_OK;
	if (pl.split)
		rows_shuffle(c, t, &pl, count, ids, vals, NULL, 1);
	if ((o = dt__kvc_new_op(c, cmd, t->key, (int)pl.nparts, &req)) == NULL)
		return DT_ENOMEM;
	rows_send(c, t, &pl, o, ids, vals, outs);
	if ((err = dt__kv_client_wait(c, req)))
		return err;
	if (pl.answers && pl.split)
		rows_shuffle(c, t, &pl, count, ids, NULL, outs, 0);
	return DT_OK;
}
