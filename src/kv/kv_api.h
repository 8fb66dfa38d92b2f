/*
 * kv_api.h - the state of a store handle (struct dt_kv) that the public
 * calls share between their files: the router of the calls (kv.c), the
 * local store and device aggregation (kv_local.c) and each store kind's
 * public calls (kv_dense.c, kv_many.c, kv_rows.c). Private to src/kv.
 */
#ifndef DT_KV_API_H
#define DT_KV_API_H

#include <stdint.h>

#include "common/table.h"
#include "kv/kv_impl.h"

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

/* Every public call names what was wrong with its arguments. */
#define KV_NEED(cond, ...)                                                     \
	do {                                                                   \
		if (!(cond))                                                   \
			return dt__fail(DT_EINVAL, __VA_ARGS__);               \
	} while (0)

/* ---- kv_local.c ---- */

local_entry *dt__kv_local_find(dt_kv *kv, dt_key key);
/* What a pull returns: the value, rounded to fp16 when asked (as a dist
 * store's answer would be). */
void dt__kv_local_out(const dt_kv *kv, float *out, const float *val, size_t n);
dt_err dt__kv_local_init(dt_kv *kv, dt_key key, const float *val, size_t n);
dt_err dt__kv_local_get(dt_kv *kv, const char *op, dt_key key, size_t n,
                        local_entry **out);
/* The local store applies a compressed push as a server would: what the
 * codec sends (the residual keeps the rest), decoded. */
dt_err dt__kv_local_apply(dt_kv *kv, local_entry *e, const float *g,
                          int compress);

/* ---- kv.c ---- */

/* A call's arguments checked, naming what was wrong (op: "push", ...). */
dt_err dt__kv_check_args(const dt_kv *kv, const char *op, dt_key key,
                         const void *a, const void *b, size_t n);
dt_err dt__kv_async_check(dt_kv *kv, const char *op, dt_key key);
/* A scratch array of n floats (kv->scratch, shared with aggregation). */
float *dt__kv_scratch(dt_kv *kv, size_t n);

/* ---- kv_dense.c ---- */

/* One key's init, without the workers' agreement (dt_kv_init, and each key of a
 * batched init made one by one). */
dt_err dt__kv_init_one(dt_kv *kv, dt_key key, const float *val, size_t n);

/* ---- kv_rows.c ---- */

/* A row table by key (NULL: none); freeing one. */
dt_kv_rtab *dt__kv_rtab_find(dt_kv *kv, dt_key key);
void dt__kv_rtab_free(dt_kv_rtab *t);

#endif
