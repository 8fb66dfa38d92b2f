/*
 * kv.c - the public KVStore API (dtrain/kv.h), the router: it creates a
 * store of a type ("local", "device", "dist_sync", "dist_async"), sets
 * what applies to every key (optimizer, compression, pull precision),
 * waits, and routes each call to its store kind's file: dense keys
 * (kv_dense.c), many-key calls (kv_many.c), row tables (kv_rows.c). A
 * local store's values live in kv_local.c; a dist store's requests go to
 * the worker's side (client.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/table.h"
#include "kv/kv_api.h"
#include "kv/rstore.h"

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
	{
		dt_kv_map *map;

		if ((err = dt__kv_map_from_env(dt_node_num_servers(kv->node),
		                               &map)))
			goto fail;
		if ((err = dt__kv_client_create(kv->node, kv->sync, kv->bound,
		                                map, &kv->client))) {
			dt__kv_map_destroy(map);
			goto fail;
		}
	}
	if ((err = dt__kv_client_configure(kv->client)))
		goto fail;
	*out = kv;
	return DT_OK;
fail:
	dt_kv_destroy(kv);
	return err;
}

dt_err
dt__kv_parts_of(dt_kv *kv, dt_key key, size_t n, dt_kv_part *parts, int *nparts)
{
	KV_NEED(kv != NULL, "placement of key %llu: kv is NULL",
	        (unsigned long long)key);
	if (kv->client)
		return dt__kv_client_parts(kv->client, key, n, parts, nparts);
	parts[0] = (dt_kv_part){.server = 0, .offset = 0, .len = n};
	*nparts = 1;
	return DT_OK;
}

dt_err
dt_kv_destroy(dt_kv *kv)
{
	dt__err_kept k;

	if (kv == NULL)
		return DT_OK;
	dt__err_keep(&k, DT_OK);
	if (kv->client) {
		dt_err e1 = dt__kv_client_wait_all(kv->client);

		/* Recovery: a server lost after this worker's last call may
		 * still need its pushes since the server's last checkpoint to
		 * end the rounds another worker waits for. Its copies go with
		 * this process, so it leaves only once every worker is done
		 * (its I/O thread sends a replay meanwhile). */
		if (!e1 && kv->node && dt__node_recover(kv->node))
			e1 = dt_node_barrier(kv->node, DT_GROUP_WORKERS);
		if (e1)
			dt__err_keep(&k, e1);
	}
	if (kv->node) {
		dt_err e2 = dt_node_stop(kv->node); /* joins the I/O thread */
		if (e2 && !k.err)
			dt__err_keep(&k, e2);
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
		dt__kv_rtab_free(DT_CONTAINER_OF(h, dt_kv_rtab, hn));
	dt__table_fini(&kv->rtabs);
	free(kv->scratch);
	free(kv->cbuf);
	free(kv->dbuf);
	free(kv);
	return dt__err_restore(&k);
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

dt_node *
dt_kv_node(const dt_kv *kv)
{
	return kv ? kv->node : NULL;
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

/* ---- the calls ---- */

dt_err
dt__kv_check_args(const dt_kv *kv, const char *op, dt_key key, const void *a,
                  const void *b, size_t n)
{
	KV_NEED(kv != NULL, "%s of key %llu: kv is NULL", op,
	        (unsigned long long)key);
	if ((a == NULL || b == NULL) && n > 0)
		return dt__fail(DT_EINVAL, "%s of key %llu: NULL buffer", op,
		                (unsigned long long)key);
	return DT_OK;
}

dt_err
dt__kv_async_check(dt_kv *kv, const char *op, dt_key key)
{
	if (kv->dist && !kv->sync && !kv->have_opt)
		return dt__fail(DT_ESTATE,
		                "%s of key %llu: dist_async needs an optimizer "
		                "on the servers (dt_kv_set_optimizer before "
		                "init), as MXNet's update_on_kvstore",
		                op, (unsigned long long)key);
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

/* ---- multi-precision: fp16 arrays, an fp32 master in the store ---- */

/* A scratch array of n floats (kv->scratch, shared with aggregation). */
float *
dt__kv_scratch(dt_kv *kv, size_t n)
{
	return (float *)(void *)dt__buf_reserve(&kv->scratch, &kv->scratch_cap,
	                                        n * sizeof(float));
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
	/* (a row_sparse table's parts are its servers' ranges of rows) */
	const dt_kv_rtab **rt = calloc(DT_MAX(nkeys, 1), sizeof(*rt));
	dt_err err;

	if (rt == NULL)
		return dt__fail(DT_ENOMEM, "resume: out of memory");
	for (size_t i = 0; i < nkeys; i++) {
		const dt_kv_rtab *t = dt__kv_rtab_find(kv, keys[i]);

		if (t && lens[i] != t->rows * t->width) {
			free(rt);
			return dt__fail(DT_ESIZE,
			                "resume: key %llu is a row_sparse "
			                "table of %llu rows of width %zu, not "
			                "length %zu",
			                (unsigned long long)keys[i],
			                (unsigned long long)t->rows, t->width,
			                lens[i]);
		}
		rt[i] = t;
	}
	err = dt__kv_client_resume(kv->client, nkeys, keys, lens, rt, step);
	free(rt);
	return err;
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
