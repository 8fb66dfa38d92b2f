/*
 * kstore_ckpt.c - the many-key store (kstore.h) in a server's checkpoint:
 * its section written from the store's arrays, and read back as hostile
 * bytes into an empty store.
 *
 * The section is laid out as the store is, array by array (ckpt.c's head
 * and docs/fault-tolerance.md give it byte by byte): the keys, lengths
 * and counts of every record, then the values and the optimizer state as
 * the two arenas hold them. Writing it is a few copies, and reading it
 * back adds the keys through dt__ks_resolve - the store's own checks of
 * lengths, duplicates and limits - in the order they were written, so the
 * records come back in their order and the arenas are copied whole.
 *
 * A store's runs (keys that one init added as a progression) are written
 * too: without them a restored store would answer the same requests, but
 * look each key up instead of taking the run as a span. Each run read is
 * checked against the records it names before it is kept.
 */
#include <stdlib.h>
#include <string.h>

#include "kv/kstore.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint arrays are written as little-endian bytes"
#endif

#define HEAD_BYTES 24u /* u64 records, u64 floats, u32 sk, u32 runs */
#define RUN_BYTES  32u /* u64 k0, u64 stride, u64 n, u32 r0, u32 len */
#define REC_BYTES  20u /* u64 key, u32 len, u32 updates, u32 steps */

size_t
dt__ks_snap_bytes(const dt_kstore *ks)
{
	size_t n = ks ? ks->nrec : 0, v = n ? (size_t)ks->off[n] : 0;

	if (n == 0)
		return HEAD_BYTES;
	return HEAD_BYTES + ks->nruns * RUN_BYTES + n * REC_BYTES +
	       v * sizeof(float) * (1 + ks->sk);
}

void
dt__ks_snapshot(const dt_kstore *ks, dt_wbuf *w)
{
	size_t n = ks ? ks->nrec : 0, v = n ? (size_t)ks->off[n] : 0;

	dt__wbuf_u64(w, n);
	dt__wbuf_u64(w, v);
	dt__wbuf_u32(w, n ? (uint32_t)ks->sk : 0);
	dt__wbuf_u32(w, n ? (uint32_t)ks->nruns : 0);
	if (n == 0)
		return;
	for (size_t i = 0; i < ks->nruns; i++) {
		dt__wbuf_u64(w, ks->runs[i].k0);
		dt__wbuf_u64(w, ks->runs[i].stride);
		dt__wbuf_u64(w, ks->runs[i].n);
		dt__wbuf_u32(w, ks->runs[i].r0);
		dt__wbuf_u32(w, ks->runs[i].len);
	}
	uint64_t *keys = malloc(n * sizeof(uint64_t));

	if (keys == NULL) {
		w->failed = 1; /* (dt__wbuf_err: out of memory) */
		return;
	}
	dt__ks_keys(ks, keys);
	dt__wbuf_bytes(w, keys, n * 8);
	free(keys);
	for (size_t r = 0; r < n; r++)
		dt__wbuf_u32(w, (uint32_t)dt__ks_len(ks, (uint32_t)r));
	for (size_t r = 0; r < n; r++)
		dt__wbuf_u32(w, ks->updates ? ks->updates[r] : 0);
	for (size_t r = 0; r < n; r++)
		dt__wbuf_u32(w, ks->steps ? ks->steps[r] : 0);
	dt__wbuf_bytes(w, ks->val, v * sizeof(float));
	if (ks->sk)
		dt__wbuf_bytes(w, ks->state, v * ks->sk * sizeof(float));
}

/* The runs read (nruns of them, at p) are progressions of the records
 * they name; kept in ks if so. */
static dt_err
load_runs(dt_kstore *ks, const char *path, const uint8_t *p, uint32_t nruns,
          const uint8_t *keys)
{
	for (uint32_t i = 0; i < nruns; i++, p += RUN_BYTES) {
		dt_ks_run run = {.k0 = dt__get_u64(p),
		                 .stride = dt__get_u64(p + 8),
		                 .n = dt__get_u64(p + 16),
		                 .r0 = dt__get_u32(p + 24),
		                 .len = dt__get_u32(p + 28)};
		int ok = run.n > 0 && run.stride > 0 && run.len > 0 &&
		         run.r0 <= ks->nrec && run.n <= ks->nrec - run.r0;

		for (uint64_t j = 0; ok && j < run.n; j++) {
			uint32_t r = run.r0 + (uint32_t)j;

			ok =
			    dt__kv_u64_at(keys, r) == run.k0 + j * run.stride &&
			    dt__ks_len(ks, r) == run.len;
		}
		if (!ok)
			return dt__fail(DT_EFORMAT,
			                "%s: many-key run %u (keys from %llu, "
			                "%llu of them) does not match the "
			                "records it names",
			                path, i, (unsigned long long)run.k0,
			                (unsigned long long)run.n);
		ks->runs[ks->nruns++] = run;
	}
	return DT_OK;
}

/* The arrays of n records and v floats (at their places in the file) into
 * ks, whose records they now are. */
static dt_err
load_records(dt_kstore *ks, const char *path, size_t n, size_t v,
             const uint8_t *keys, const uint8_t *lens, const uint8_t *upd,
             const uint8_t *steps, const uint8_t *val, const uint8_t *state)
{
	dt_ks_lens l = {.lens = lens};
	uint64_t sum = 0;
	uint32_t *idx;
	size_t bad;
	dt_err err;

	/* Each length is at least 1 and at most 2^30 (dt__ks_resolve
	 * checks each), so n of them sum far below 2^64. */
	for (size_t i = 0; i < n; i++)
		sum += dt__get_u32(lens + 4 * i);
	if (sum != v)
		return dt__fail(DT_EFORMAT,
		                "%s: the many-key records' lengths sum to "
		                "%llu floats, the section says %zu",
		                path, (unsigned long long)sum, v);
	if ((idx = malloc(n * sizeof(*idx))) == NULL)
		return dt__fail(DT_ENOMEM,
		                "%s: out of memory for %zu many-key records",
		                path, n);
	ks->counted = 1; /* (before the first record is added) */
	err = dt__ks_resolve(ks, "checkpoint", n, keys, &l, 1, idx, &bad);
	free(idx);
	if (err)
		return dt__fail(DT_EFORMAT, "%s: many-key record %zu: %s", path,
		                bad, dt_errmsg());
	memcpy(ks->val, val, v * sizeof(float));
	if (ks->sk)
		memcpy(ks->state, state, v * ks->sk * sizeof(float));
	memcpy(ks->updates, upd, n * 4);
	if (ks->steps)
		memcpy(ks->steps, steps, n * 4);
	return DT_OK;
}

dt_err
dt__ks_load(dt_kstore *ks, const char *path, dt_rbuf *r)
{
	uint64_t n = dt__rbuf_u64(r), v = dt__rbuf_u64(r), left;
	uint32_t sk = dt__rbuf_u32(r), nruns = dt__rbuf_u32(r);

	if (dt__rbuf_err(r, "checkpoint many-key section"))
		return dt__fail(DT_EFORMAT,
		                "%s: the many-key section is cut short", path);
	if (n == 0 && v == 0 && nruns == 0)
		return DT_OK;
	left = (uint64_t)(r->len - r->off);
	/* Every bound before the products that use it: n, v and nruns come
	 * from the file. */
	if (sk != ks->sk)
		return dt__fail(DT_EFORMAT,
		                "%s: the many-key section keeps %u optimizer "
		                "state floats per value, the file's optimizer "
		                "has %zu",
		                path, sk, ks->sk);
	if (n == 0 || n > DT_KS_MAX_KEYS || nruns > DT_KS_RUNS ||
	    n > left / REC_BYTES || v < n || v > left / sizeof(float) ||
	    nruns * RUN_BYTES + n * REC_BYTES + v * sizeof(float) * (1 + sk) >
	        left)
		return dt__fail(DT_EFORMAT,
		                "%s: %llu many-key records of %llu floats in "
		                "%u runs cannot fit the %llu bytes left or the "
		                "store's limits",
		                path, (unsigned long long)n,
		                (unsigned long long)v, nruns,
		                (unsigned long long)left);
	const uint8_t *runs = dt__rbuf_bytes(r, nruns * RUN_BYTES),
	              *keys = dt__rbuf_bytes(r, n * 8),
	              *lens = dt__rbuf_bytes(r, n * 4),
	              *upd = dt__rbuf_bytes(r, n * 4),
	              *steps = dt__rbuf_bytes(r, n * 4),
	              *val = dt__rbuf_bytes(r, v * sizeof(float)),
	              *state = dt__rbuf_bytes(r, v * sk * sizeof(float));
	dt_err err;

	if (dt__rbuf_err(r, "checkpoint many-key section"))
		return dt__fail(DT_EFORMAT,
		                "%s: the many-key section is cut short", path);
	if ((err = load_records(ks, path, (size_t)n, (size_t)v, keys, lens, upd,
	                        steps, val, state)))
		return err;
	return load_runs(ks, path, runs, nruns, keys);
}
