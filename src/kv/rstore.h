/*
 * rstore.h - a row-sparse table (MXNet's row_sparse arrays): a key's
 * rows x width floats, or the range of rows one server holds, updated a
 * few rows at a time.
 *
 *   - The values (and an optimizer's state) are mapped zero pages: a table
 *     of ten million rows costs memory for the rows that are touched.
 *   - A push names its rows; only those rows change (MXNet's lazy_update):
 *     sgd and adam update a pushed row with the key's step count, the
 *     others keep their values and state. Without an optimizer a pushed
 *     row takes the pushed (or, in dist_sync, the summed) value.
 *   - dist_sync: a round collects one push per worker. Each row's pushes
 *     are summed in arrival order (as the dense store does) in a compact
 *     buffer of the round's rows; the round's rows are the union of the
 *     workers' rows, and each is updated once when the last push comes.
 *   - A bitmap over the rows finds a row listed twice in one request.
 * The store does no I/O and takes no lock: its owner (a server's I/O
 * thread, or a local store's caller) serialises the calls.
 */
#ifndef DT_KV_RSTORE_H
#define DT_KV_RSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"
#include "kv/kv_impl.h"

typedef struct dt_rstore {
	dt_key key;
	uint64_t rows;  /* the whole table's */
	uint64_t lo, n; /* the rows held here: [lo, lo + n) */
	size_t width;
	float *val; /* n * width */
	float *state;
	size_t val_bytes, state_bytes; /* their mappings */
	dt_opt opt;
	uint64_t steps; /* updates (sync: rounds) with an optimizer */
	uint64_t *mark; /* n bits, zero between calls */
	/* dist_sync's round */
	int nworkers, sync;
	int npushed;
	uint8_t *pushed;   /* by worker */
	uint32_t *slot;    /* n, mapped: 1 + the row's place in the round */
	size_t slot_bytes; /* its mapping */
	uint64_t *rrow;    /* the round's rows (local numbers) */
	float *rsum;       /* and their sums, width each */
	size_t nround, round_cap;
	/* dist_sync under recovery (keep_prev): the rows the last round
	 * changed (local numbers, sorted) with their values before it, for
	 * a restarted worker's pull as of that round (dt__rs_gather_prev). */
	int keep_prev;
	uint64_t *prow;
	float *pval;
	size_t nprev, prev_cap;
} dt_rstore;

/*
 * A table of rows x width whose rows [lo, lo + n) live here, all zeros,
 * for nworkers workers in mode sync, updated with opt (kind DT_OPT_NONE:
 * pushed rows take the pushed values). An error names what did not fit.
 */
dt_err dt__rs_init(dt_rstore *t, dt_key key, uint64_t rows, uint64_t lo,
                   uint64_t n, size_t width, int nworkers, int sync,
                   const dt_opt *opt);
void dt__rs_fini(dt_rstore *t);
/*
 * The bytes a table of n rows of width comes to hold once every row has
 * been written: values, optimizer state, the duplicate bitmap, and in
 * dist_sync the round slots and a round of every row (its rows and sums).
 * UINT64_MAX when it does not fit in 64 bits. A server checks it against its
 * limit (DTRAIN_MAX_TABLE_BYTES) before it makes the table.
 */
uint64_t dt__rs_plan_bytes(uint64_t n, uint64_t width, int nworkers, int sync,
                           const dt_opt *opt);
/* The optimizer's parameters change (not its kind). */
void dt__rs_set_opt(dt_rstore *t, const dt_opt *opt);

/*
 * Check count row ids (u64, little-endian, unaligned): each held here,
 * and - unique - none listed twice. On the first that is not, *bad is its
 * index and the error names it (op: "push", ...).
 */
dt_err dt__rs_check(dt_rstore *t, const char *op, size_t count,
                    const uint8_t *ids, int unique, size_t *bad);
/* Rows ids[0..count) (checked) into out, back to back. */
void dt__rs_gather(const dt_rstore *t, size_t count, const uint8_t *ids,
                   float *out);
/* Rows ids[0..count) (checked) as they were before the last dist_sync
 * round (keep_prev): a row that round changed from its kept copy, any
 * other from the values now. */
void dt__rs_gather_prev(const dt_rstore *t, size_t count, const uint8_t *ids,
                        float *out);
/* dist_async (and local stores): apply a push of rows ids (checked,
 * unique) with values g now. */
void dt__rs_apply(dt_rstore *t, size_t count, const uint8_t *ids,
                  const float *g);
/*
 * dist_sync: worker's push of rows ids (checked, unique) with values g
 * joins the open round. The caller has checked that worker has not pushed
 * in it (dt__rs_pushed). *closed: the push was the round's last - its
 * rows are updated (with keep_prev, their values before are kept first),
 * and a new round is open. DT_ENOMEM: nothing changed.
 */
dt_err dt__rs_push_sync(dt_rstore *t, int worker, size_t count,
                        const uint8_t *ids, const float *g, int *closed);
static inline int
dt__rs_pushed(const dt_rstore *t, int worker)
{
	return t->pushed[worker];
}
/* Bytes the table has touched or allocated (its rows' pages are
 * counted whole: what the kernel has mapped), for reports. */
size_t dt__rs_bytes(const dt_rstore *t);

#endif
