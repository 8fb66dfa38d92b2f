/*
 * kv_local.c - the local store ("local", "device") and multi-device
 * aggregation. The local store keeps values in this process with MXNet's
 * semantics: a push replaces the value by the pushed (summed) array, or
 * runs the optimizer when one is set. dt_kv_push_devices sums the arrays
 * of several devices (in threads for big ones) before one push.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/table.h"
#include "kv/kv_api.h"
#include "kv/rstore.h"

local_entry *
dt__kv_local_find(dt_kv *kv, dt_key key)
{
	dt_hnode *h = dt__table_find(&kv->local, key);

	return h ? DT_CONTAINER_OF(h, local_entry, hn) : NULL;
}

/* ---- local store ---- */

/* What a pull returns: the value, rounded to fp16 when asked (as a dist
 * store's answer would be). */
void
dt__kv_local_out(const dt_kv *kv, float *out, const float *val, size_t n)
{
	uint8_t h[2048];

	if (out != val)
		memmove(out, val, n * sizeof(float));
	for (size_t i = 0; kv->pull_fp16 && i < n; i += 1024) {
		size_t m = n - i < 1024 ? n - i : 1024;

		dt__quant_fp16(out + i, h, m);
		dt__dequant_fp16(h, out + i, m);
	}
}

dt_err
dt__kv_local_init(dt_kv *kv, dt_key key, const float *val, size_t n)
{
	local_entry *e = dt__kv_local_find(kv, key);

	if (e) {
		if (e->n != n)
			return dt__fail(DT_ESIZE,
			                "init of key %llu: length %zu != "
			                "initialised length %zu",
			                (unsigned long long)key, n, e->n);
		memcpy(e->val, val, n * sizeof(float));
		return DT_OK;
	}
	e = dt__calloc(1, sizeof(*e));
	if (e == NULL)
		return DT_ENOMEM;
	e->key = key;
	e->n = n;
	e->val = dt__malloc(DT_MAX(n, 1) * sizeof(float));
	size_t st = kv->have_opt ? dt__opt_state_len(&kv->opt, n) : 0;
	e->state = st ? dt__calloc(st, sizeof(float)) : NULL;
	if (e->val == NULL || (st && e->state == NULL)) {
		free(e->val);
		free(e);
		return DT_ENOMEM;
	}
	memcpy(e->val, val, n * sizeof(float));
	dt__table_insert(&kv->local, &e->hn, key);
	return DT_OK;
}

dt_err
dt__kv_local_get(dt_kv *kv, const char *op, dt_key key, size_t n,
                 local_entry **out)
{
	local_entry *e = dt__kv_local_find(kv, key);

	if (e == NULL)
		return dt__fail(DT_ENOKEY,
		                "%s of key %llu: unknown key (never "
		                "initialised with init)",
		                op, (unsigned long long)key);
	if (e->n != n)
		return dt__fail(DT_ESIZE,
		                "%s of key %llu: length %zu != initialised "
		                "length %zu",
		                op, (unsigned long long)key, n, e->n);
	*out = e;
	return DT_OK;
}

/* The local store applies a compressed push as a server would: what the
 * codec sends (the residual keeps the rest), decoded. */
dt_err
dt__kv_local_apply(dt_kv *kv, local_entry *e, const float *g, int compress)
{
	if (compress && kv->comp.kind != DT_QUANT_NONE &&
	    e->n >= kv->comp.min_size) {
		float *d;

		if (!dt__buf_reserve(&kv->cbuf, &kv->cbuf_cap,
		                     dt__quant_size(kv->comp.kind, e->n)) ||
		    !(d = (float *)(void *)dt__buf_reserve(
		          &kv->dbuf, &kv->dbuf_cap, e->n * sizeof(float))))
			return dt__fail(DT_ENOMEM,
			                "push of key %llu: out of memory "
			                "compressing it",
			                (unsigned long long)e->key);
		if (e->res == NULL && kv->comp.kind != DT_QUANT_FP16 &&
		    (e->res = calloc(e->n, sizeof(float))) == NULL)
			return dt__fail(
			    DT_ENOMEM,
			    "push of key %llu: out of memory for its "
			    "residual",
			    (unsigned long long)e->key);
		dt__quant_encode(&kv->comp, g, e->res, e->n, kv->cbuf);
		if (dt__quant_decode(kv->comp.kind, kv->comp.threshold,
		                     kv->cbuf, e->n, d))
			return DT_EPROTO; /* (our own encoding: never) */
		g = d;
	}
	if (kv->have_opt) {
		e->steps++;
		dt__opt_apply(&kv->opt, e->val, g, e->state, e->n, e->steps);
	} else if (g != e->val) {
		memcpy(e->val, g, e->n * sizeof(float));
	}
	return DT_OK;
}

/* ---- local aggregation over devices ---- */

typedef struct sum_job {
	float *dst;
	const float *const *vals;
	int ndev;
	size_t lo, hi;
} sum_job;

static void *
sum_range(void *arg)
{
	sum_job *j = arg;

	memcpy(j->dst + j->lo, j->vals[0] + j->lo,
	       (j->hi - j->lo) * sizeof(float));
	for (int d = 1; d < j->ndev; d++)
		dt__kv_add(j->dst + j->lo, j->vals[d] + j->lo, j->hi - j->lo);
	return NULL;
}

dt_err
dt_kv_push_devices(dt_kv *kv, dt_key key, const float *const *vals, int ndev,
                   size_t n)
{
	int nthreads;
	float *sum;

	KV_NEED(kv != NULL, "push of key %llu: kv is NULL",
	        (unsigned long long)key);
	if (ndev < 1 || vals == NULL)
		return dt__fail(
		    DT_EINVAL, "push of key %llu: %d devices (need at least 1)",
		    (unsigned long long)key, ndev);
	for (int d = 0; d < ndev; d++)
		if (vals[d] == NULL && n)
			return dt__fail(DT_EINVAL,
			                "push of key %llu: device %d's array "
			                "is NULL",
			                (unsigned long long)key, d);
	if (ndev == 1)
		return dt_kv_push(kv, key, vals[0], n);
	if ((sum = dt__kv_scratch(kv, n)) == NULL)
		return DT_ENOMEM;
	/* Big arrays are summed by MXNET_KVSTORE_REDUCTION_NTHREADS threads. */
	nthreads = n >= kv->bound ? kv->nthreads : 1;
	if (nthreads <= 1) {
		sum_job j = {sum, vals, ndev, 0, n};
		sum_range(&j);
	} else {
		pthread_t th[256];
		int running[256] = {0};
		sum_job jobs[256];

		for (int t = 0; t < nthreads; t++)
			jobs[t] = (sum_job){
			    sum, vals, ndev, n * (size_t)t / (size_t)nthreads,
			    n * (size_t)(t + 1) / (size_t)nthreads};
		for (int t = 1; t < nthreads; t++)
			running[t] = pthread_create(&th[t], NULL, sum_range,
			                            &jobs[t]) == 0;
		for (int t = 0; t < nthreads; t++)
			if (!running[t]) /* ours, or a thread that failed */
				sum_range(&jobs[t]);
		for (int t = 1; t < nthreads; t++)
			if (running[t])
				pthread_join(th[t], NULL);
	}
	return dt_kv_push(kv, key, sum, n);
}
