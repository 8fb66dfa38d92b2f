/*
 * kv.c - the public KVStore API (dtrain/kv.h): store types, the local
 * store, local multi-device aggregation, and the dispatch of dist stores
 * to client.c.
 *
 * The local store ("local", "device") keeps values in this process with
 * MXNet's semantics: a push replaces the value by the pushed (summed)
 * array, or runs the optimizer when one is set.
 *
 * Size: it holds the public KVStore calls, the local store and device
 * aggregation; the local store and device aggregation are to get a file of
 * their own with the split of the KVStore by store kind.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/table.h"
#include "kv/kv_impl.h"
#include "kv/rstore.h"

typedef struct local_entry {
	dt_key key;
	size_t n;
	float *val;
	float *state;
	float *res; /* compression's residual (allocated at the first push) */
	uint64_t steps;
	dt_hnode hn; /* in local */
} local_entry;

struct dt_kv {
	char type[32];
	int dist;
	int sync;
	int device;
	size_t bound;
	int nthreads;
	int have_opt;
	dt_opt opt;
	dt_node *node;
	dt_kv_client *client;
	dt_table local;   /* local_entry by key */
	dt_table rtabs;   /* row_sparse tables (dt_kv_rtab) by key */
	uint8_t *scratch; /* floats: local aggregation, fp16 arrays */
	size_t scratch_cap;
	int inited;         /* an init was made (compression is fixed then) */
	dt_quant_spec comp; /* gradient compression */
	int pull_fp16;      /* pulls return fp16 values */
	uint8_t *cbuf;      /* local store: a push, compressed */
	size_t cbuf_cap;
	uint8_t *dbuf; /* ... and decoded (floats) */
	size_t dbuf_cap;
};

static void rtab_free(dt_kv_rtab *t);
static dt_kv_rtab *rtab_find(dt_kv *kv, dt_key key);

static local_entry *
local_find(dt_kv *kv, dt_key key)
{
	dt_hnode *h = dt__table_find(&kv->local, key);

	return h ? DT_CONTAINER_OF(h, local_entry, hn) : NULL;
}

/* Every public call names what was wrong with its arguments. */
#define KV_NEED(cond, ...)                                                     \
	do {                                                                   \
		if (!(cond))                                                   \
			return dt__fail(DT_EINVAL, __VA_ARGS__);               \
	} while (0)

/* A program that uses the KVStore serves it in its server processes,
 * whichever entry point (dt_kv_create, dt_node_init_from_env) they start
 * through. */
__attribute__((constructor)) static void
kv_autoregister(void)
{
	(void)dt__kv_register();
}

dt_err
dt_kv_create(const char *type, dt_kv **out)
{
	static const struct {
		const char *name;
		int dist, sync, device;
	} types[] = {
	    {"local", 0, 1, 0},
	    {"device", 0, 1, 1},
	    {"dist", 1, 1, 0},
	    {"dist_sync", 1, 1, 0},
	    {"dist_async", 1, 0, 0},
	    {"dist_sync_device", 1, 1, 1},
	    {"dist_async_device", 1, 0, 1},
	};
	dt_kv *kv;
	long bound, nthreads;
	dt_err err;
	size_t i;

	KV_NEED(out != NULL, "kv_create: out is NULL");
	*out = NULL;
	if (type == NULL)
		return dt__fail(DT_EINVAL, "kvstore type is NULL");
	for (i = 0; i < DT_ARRAY_LEN(types); i++)
		if (strcmp(types[i].name, type) == 0)
			break;
	if (i == DT_ARRAY_LEN(types))
		return dt__fail(DT_EINVAL,
		                "unknown kvstore type '%s' (local, device, "
		                "dist_sync, dist_async, dist_sync_device, "
		                "dist_async_device)",
		                type);
	if ((err = dt__env_long("MXNET_KVSTORE_BIGARRAY_BOUND", 1000000, 1,
	                        (long)1 << 40, &bound)))
		return err;
	if ((err = dt__env_long("MXNET_KVSTORE_REDUCTION_NTHREADS", 4, 1, 256,
	                        &nthreads)))
		return err;
	kv = dt__calloc(1, sizeof(*kv));
	if (kv == NULL)
		return DT_ENOMEM;
	snprintf(kv->type, sizeof(kv->type), "%s", type);
	kv->dist = types[i].dist;
	kv->sync = types[i].sync;
	kv->device = types[i].device;
	kv->bound = (size_t)bound;
	kv->nthreads = (int)nthreads;
	if (!kv->dist) {
		*out = kv;
		return DT_OK;
	}
	{
		int served;

		err = dt__node_join_env(&kv->node, &served);
		/* MXNet: a server or scheduler process serves here, then
		 * ends. */
		if (served)
			dt__exit_served(err);
	}
	if (err)
		goto fail;
	if (kv->node == NULL) {
		err =
		    dt__fail(DT_ECONFIG,
		             "kvstore '%s' needs a cluster, but DMLC_ROLE "
		             "and DMLC_PS_ROOT_URI are not set: start the "
		             "program with `dtrain launch` (docs/launcher.md)",
		             type);
		goto fail;
	}
	if (dt_node_num_servers(kv->node) == 0) {
		err = dt__fail(DT_ECONFIG,
		               "kvstore '%s' needs servers, but "
		               "DMLC_NUM_SERVER=0",
		               type);
		goto fail;
	}
	if ((err = dt__kv_client_create(kv->node, kv->sync, kv->bound,
	                                &kv->client)))
		goto fail;
	if ((err = dt__kv_client_configure(kv->client)))
		goto fail;
	*out = kv;
	return DT_OK;
fail:
	dt_kv_destroy(kv);
	return err;
}

dt_err
dt_kv_destroy(dt_kv *kv)
{
	dt_err err = DT_OK;
	char msg[512] = "";

	if (kv == NULL)
		return DT_OK;
	if (kv->client) {
		err = dt__kv_client_wait_all(kv->client);
		if (err)
			snprintf(msg, sizeof(msg), "%s", dt_errmsg());
	}
	if (kv->node) {
		dt_err e2 = dt_node_stop(kv->node); /* joins the I/O thread */
		if (e2 && !err) {
			err = e2;
			snprintf(msg, sizeof(msg), "%s", dt_errmsg());
		}
	}
	dt__kv_client_destroy(kv->client);
	dt_table_iter it;
	for (dt_hnode *h = dt__table_first(&kv->local, &it); h;
	     h = dt__table_next(&it)) {
		local_entry *e = DT_CONTAINER_OF(h, local_entry, hn);

		free(e->val);
		free(e->state);
		free(e->res);
		free(e);
	}
	dt__table_fini(&kv->local);
	for (dt_hnode *h = dt__table_first(&kv->rtabs, &it); h;
	     h = dt__table_next(&it))
		rtab_free(DT_CONTAINER_OF(h, dt_kv_rtab, hn));
	dt__table_fini(&kv->rtabs);
	free(kv->scratch);
	free(kv->cbuf);
	free(kv->dbuf);
	free(kv);
	if (err)
		dt__fail(err, "%s", msg);
	return err;
}

const char *
dt_kv_type(const dt_kv *kv)
{
	return kv ? kv->type : "";
}

int
dt_kv_rank(const dt_kv *kv)
{
	return kv && kv->node ? dt_node_rank(kv->node) : 0;
}

dt_err
dt_kv_stats(dt_kv *kv, dt_stats *out)
{
	if (kv == NULL || out == NULL)
		return dt__fail(DT_EINVAL, "dt_kv_stats: %s is NULL",
		                kv ? "out" : "kv");
	if (kv->node)
		return dt_node_stats(kv->node, out);
	dt__obs_stats_local(out);
	return DT_OK;
}

int
dt_kv_num_workers(const dt_kv *kv)
{
	return kv && kv->node ? dt_node_num_workers(kv->node) : 1;
}

int
dt_kv_is_dist(const dt_kv *kv)
{
	return kv ? kv->dist : 0;
}

dt_err
dt_kv_set_optimizer(dt_kv *kv, const char *name, const char *params)
{
	dt_opt opt;
	dt_err err;

	KV_NEED(kv != NULL, "set optimizer: kv is NULL");
	KV_NEED(name != NULL, "set optimizer: name is NULL");
	if ((err = dt__opt_parse(name, params, &opt)))
		return err;
	if (!kv->client && (!kv->have_opt || opt.kind != kv->opt.kind)) {
		if (dt__table_count(&kv->local) || dt__table_count(&kv->rtabs))
			return dt__fail(DT_ESTATE,
			                "set optimizer: keys are already "
			                "initialised with another optimizer; "
			                "only its parameters may change now");
	}
	if (kv->client && (err = dt__kv_client_set_optimizer(kv->client, &opt)))
		return err;
	kv->opt = opt;
	kv->have_opt = 1;
	dt_table_iter it;
	for (dt_hnode *h = dt__table_first(&kv->rtabs, &it); h;
	     h = dt__table_next(&it)) {
		dt_kv_rtab *t = DT_CONTAINER_OF(h, dt_kv_rtab, hn);

		if (t->local)
			dt__rs_set_opt(t->local, &opt);
	}
	return DT_OK;
}

dt_err
dt_kv_set_gradient_compression(dt_kv *kv, const char *spec)
{
	dt_quant_spec comp;
	dt_err err;

	KV_NEED(kv != NULL, "set gradient compression: kv is NULL");
	if ((err = dt__quant_parse(spec, &comp)))
		return err;
	if (kv->inited)
		return dt__fail(DT_ESTATE,
		                "set gradient compression: call it before "
		                "init (keys are initialised already)");
	kv->comp = comp;
	if (kv->client)
		dt__kv_client_set_compression(kv->client, &comp);
	return DT_OK;
}

dt_err
dt_kv_set_pull_precision(dt_kv *kv, const char *precision)
{
	KV_NEED(kv != NULL, "set pull precision: kv is NULL");
	KV_NEED(precision && (strcmp(precision, "fp32") == 0 ||
	                      strcmp(precision, "fp16") == 0),
	        "set pull precision: '%s' is not fp32 or fp16",
	        precision ? precision : "(null)");
	kv->pull_fp16 = strcmp(precision, "fp16") == 0;
	if (kv->client)
		dt__kv_client_set_pull_fp16(kv->client, kv->pull_fp16);
	return DT_OK;
}

/* ---- local store ---- */

/* What a pull returns: the value, rounded to fp16 when asked (as a dist
 * store's answer would be). */
static void
local_out(const dt_kv *kv, float *out, const float *val, size_t n)
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

static dt_err
local_init(dt_kv *kv, dt_key key, const float *val, size_t n)
{
	local_entry *e = local_find(kv, key);

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

static dt_err
local_get(dt_kv *kv, const char *op, dt_key key, size_t n, local_entry **out)
{
	local_entry *e = local_find(kv, key);

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
static dt_err
local_apply(dt_kv *kv, local_entry *e, const float *g, int compress)
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

/* ---- the calls ---- */

static dt_err
check_args(const dt_kv *kv, const char *op, dt_key key, const void *a,
           const void *b, size_t n)
{
	KV_NEED(kv != NULL, "%s of key %llu: kv is NULL", op,
	        (unsigned long long)key);
	if ((a == NULL || b == NULL) && n > 0)
		return dt__fail(DT_EINVAL, "%s of key %llu: NULL buffer", op,
		                (unsigned long long)key);
	return DT_OK;
}

static dt_err
async_check(dt_kv *kv, const char *op, dt_key key)
{
	if (kv->dist && !kv->sync && !kv->have_opt)
		return dt__fail(DT_ESTATE,
		                "%s of key %llu: dist_async needs an optimizer "
		                "on the servers (dt_kv_set_optimizer before "
		                "init), as MXNet's update_on_kvstore",
		                op, (unsigned long long)key);
	return DT_OK;
}

/* One key's init, without the workers' agreement (init_one's callers). */
static dt_err
init_one(dt_kv *kv, dt_key key, const float *val, size_t n)
{
	dt_kv_req req;
	dt_err err;

	if ((err = check_args(kv, "init", key, val, val, n)))
		return err;
	KV_NEED(n > 0, "init of key %llu: an array has at least one element",
	        (unsigned long long)key);
	if (rtab_find(kv, key))
		return dt__fail(
		    DT_ESTATE,
		    "init of key %llu: the key is a row_sparse table "
		    "(dt_kv_init_row_sparse); use the row_sparse "
		    "calls for it",
		    (unsigned long long)key);
	kv->inited = 1;
	if (!kv->client)
		return local_init(kv, key, val, n);
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
	err = init_one(kv, key, val, n);
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
	if ((err = check_args(kv, "push", key, val, val, n)) ||
	    (err = async_check(kv, "push", key)))
		return err;
	if (kv->client)
		return dt__kv_client_start(kv->client, DT_CMD_KV_PUSH, key, val,
		                           NULL, n, req);
	if ((err = local_get(kv, "push", key, n, &e)))
		return err;
	return local_apply(kv, e, val, 1);
}

dt_err
dt_kv_pull_async(dt_kv *kv, dt_key key, float *out, size_t n, dt_kv_req *req)
{
	local_entry *e = NULL;
	dt_err err;

	KV_NEED(req != NULL, "pull of key %llu: req is NULL",
	        (unsigned long long)key);
	*req = 0;
	if ((err = check_args(kv, "pull", key, out, out, n)))
		return err;
	if (kv->client)
		return dt__kv_client_start(kv->client, DT_CMD_KV_PULL, key,
		                           NULL, out, n, req);
	if ((err = local_get(kv, "pull", key, n, &e)))
		return err;
	local_out(kv, out, e->val, n);
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
	if ((err = check_args(kv, "pushpull", key, val, out, n)) ||
	    (err = async_check(kv, "pushpull", key)))
		return err;
	if (kv->client)
		return dt__kv_client_start(kv->client, DT_CMD_KV_PUSHPULL, key,
		                           val, out, n, req);
	if ((err = local_get(kv, "pushpull", key, n, &e)) ||
	    (err = local_apply(kv, e, val, 1)))
		return err;
	local_out(kv, out, e->val, n);
	return DT_OK;
}

dt_err
dt_kv_wait(dt_kv *kv, dt_kv_req req)
{
	KV_NEED(kv != NULL, "wait: kv is NULL");
	if (req == 0 || kv->client == NULL)
		return DT_OK;
	return dt__kv_client_wait(kv->client, req);
}

dt_err
dt_kv_wait_all(dt_kv *kv)
{
	KV_NEED(kv != NULL, "wait_all: kv is NULL");
	return kv->client ? dt__kv_client_wait_all(kv->client) : DT_OK;
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

/* ---- multi-precision: fp16 arrays, an fp32 master in the store ---- */

/* A scratch array of n floats (kv->scratch, shared with aggregation). */
static float *
scratch(dt_kv *kv, size_t n)
{
	return (float *)(void *)dt__buf_reserve(&kv->scratch, &kv->scratch_cap,
	                                        n * sizeof(float));
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
	if ((err = check_args(kv, "init", key, val, val, n)))
		return err;
	if ((w = scratch(kv, n)) == NULL)
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
	if ((err = check_args(kv, op, key, cmd == DT_CMD_KV_PULL ? out : val,
	                      cmd == DT_CMD_KV_PUSH ? val : out, n)) ||
	    (cmd != DT_CMD_KV_PULL && (err = async_check(kv, op, key))))
		return err;
	if (kv->client)
		return dt__kv_client_start_ex(kv->client, cmd, key, val, out, n,
		                              1, req);
	if ((err = local_get(kv, op, key, n, &e)))
		return err;
	if (cmd != DT_CMD_KV_PULL) {
		float *g = scratch(kv, n);

		if (g == NULL)
			return dt__fail(DT_ENOMEM,
			                "%s of key %llu: out of memory", op,
			                (unsigned long long)key);
		dt__dequant_fp16((const uint8_t *)val, g, n);
		if ((err = local_apply(kv, e, g, 0)))
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

/* ---- batched forms: start everything, then wait for everything ---- */

static dt_err
wait_reqs(dt_kv *kv, dt_kv_req *reqs, size_t n, dt_err first)
{
	char msg[512] = "";

	if (first)
		snprintf(msg, sizeof(msg), "%s", dt_errmsg());
	for (size_t i = 0; i < n; i++) {
		dt_err err = dt_kv_wait(kv, reqs[i]);
		if (err && !first) {
			first = err;
			snprintf(msg, sizeof(msg), "%s", dt_errmsg());
		}
	}
	if (first)
		dt__fail(first, "%s", msg);
	return first;
}

/* A batched call key by key (a local store; and with DTRAIN_RECOVER or
 * DTRAIN_CHECKPOINT_DIR, which the many-key store does not serve): every
 * request started, then all waited for. */
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
	    (err = async_check(kv, op, b->keys[0])))
		return err;
	if (kv->client && dt__kv_client_batches(kv->client)) {
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

		err = init_one(kv, b->keys[i],
		               b->vals ? b->vals + off : b->pvals[i], len);
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
	if ((sum = scratch(kv, n)) == NULL)
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

dt_err
dt_kv_barrier(dt_kv *kv)
{
	KV_NEED(kv != NULL, "barrier: kv is NULL");
	if (!kv->node)
		return DT_OK;
	return dt_node_barrier(kv->node, DT_GROUP_WORKERS);
}

dt_err
dt_kv_resume(dt_kv *kv, size_t nkeys, const dt_key *keys, const size_t *lens,
             uint64_t *step)
{
	KV_NEED(kv != NULL, "resume: kv is NULL");
	KV_NEED(step != NULL, "resume: step is NULL");
	KV_NEED(nkeys == 0 || (keys != NULL && lens != NULL),
	        "resume: NULL keys or lens");
	*step = 0;
	if (!kv->client)
		return DT_OK;
	for (size_t i = 0; i < nkeys; i++)
		KV_NEED(lens[i] > 0, "resume: key %llu has length 0",
		        (unsigned long long)keys[i]);
	return dt__kv_client_resume(kv->client, nkeys, keys, lens, step);
}

int
dt_kv_rejoined(const dt_kv *kv)
{
	return kv && kv->client && dt__kv_client_rejoined(kv->client);
}

dt_err
dt_kv_checkpoint(dt_kv *kv)
{
	KV_NEED(kv != NULL, "checkpoint: kv is NULL");
	if (!kv->client)
		return dt__fail(DT_ESTATE,
		                "checkpoint: a %s store has no servers to "
		                "checkpoint (save the parameters instead)",
		                kv->type);
	return dt__kv_client_checkpoint(kv->client);
}

/* ---- row_sparse tables ---- */

static dt_kv_rtab *
rtab_find(dt_kv *kv, dt_key key)
{
	dt_hnode *h = dt__table_find(&kv->rtabs, key);

	return h ? DT_CONTAINER_OF(h, dt_kv_rtab, hn) : NULL;
}

static void
rtab_free(dt_kv_rtab *t)
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
	if (rtab_find(kv, key) || local_find(kv, key))
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
			rtab_free(t);
			return DT_ENOMEM;
		}
		if ((err = dt__rs_init(t->local, key, rows, 0, rows, width, 1,
		                       0, kv->have_opt ? &kv->opt : &none))) {
			free(t->local);
			t->local = NULL;
			rtab_free(t);
			return err;
		}
		if (val)
			memcpy(t->local->val, val, t->local->val_bytes);
	} else if ((err = dt__kv_client_row_init(kv->client, t, val))) {
		rtab_free(t);
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
	if ((t = rtab_find(kv, key)) == NULL)
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
	if (push && (err = async_check(kv, op, key)))
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
			local_out(kv, outs, outs, nrows * width);
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
