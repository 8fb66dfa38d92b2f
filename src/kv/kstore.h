/*
 * kstore.h - a server's many-key store: the keys that workers send in
 * batched calls (KV_*_MANY), millions of them, each a small array.
 *
 * The per-key store of server.c spends a few hundred bytes on each key (an
 * entry with its own allocations); this one spends a few dozen, and looks
 * up a whole request's keys in one pass:
 *   - an index: open addressing with linear probing, 12-byte slots (key,
 *     record number), at most 80% full, grown by rehashing;
 *   - records in the order keys were added: record r's values are
 *     val[off[r] .. off[r + 1]) in one arena, so a request that lists keys
 *     in the order they were added reads the arena front to back;
 *   - per record, only what the store's mode needs: optimizer state and
 *     step counts (an optimizer), a merge buffer, one pending request per
 *     worker and a count (dist_sync);
 *   - a bitmap over records finds a key listed twice in one request;
 *   - a few runs: keys k0, k0 + d, k0 + 2d ... that one init added as
 *     consecutive records of one length. A request listing a stretch of
 *     such a run in order (ps-lite's 0..N-1, or its share on one of S
 *     servers: every S-th key) is resolved as a span of records in one
 *     pass over its key list, with no lookup: the keys are checked to be
 *     that progression, so they are known, of the right length and
 *     listed once each.
 * The store does no I/O and takes no lock: the server's I/O thread owns it.
 */
#ifndef DT_KV_KSTORE_H
#define DT_KV_KSTORE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dtrain/err.h"
#include "kv/kv_impl.h"

/* Keys k0 + j * stride (j < n) are records r0 + j, each of len floats. */
typedef struct dt_ks_run {
	uint64_t k0, stride, n;
	uint32_t r0, len;
} dt_ks_run;

#define DT_KS_RUNS 16 /* runs kept (the newest replace the oldest) */

typedef struct dt_kstore {
	/* the index */
	uint8_t *slots; /* cap slots of 12 bytes: u64 key, u32 record + 1 */
	size_t cap;
	/* records */
	size_t nrec, rec_cap;
	uint64_t *off; /* rec_cap + 1 */
	float *val;    /* val_cap floats; off[nrec] used */
	size_t val_cap;
	uint8_t *mark; /* rec_cap bits */
	/* an optimizer's */
	dt_opt opt;
	size_t sk;       /* state floats per value float (0, 1, 2) */
	float *state;    /* val_cap * sk */
	uint32_t *steps; /* per record (an optimizer) */
	/* per record: its updates (dist_sync: rounds; dist_async: pushes),
	 * for checkpoints and recovery (a restarted server tells each worker
	 * how many of its pushes of a key its checkpoint holds); kept only
	 * when counted is set, before the first key is added */
	int counted;
	uint32_t *updates;
	/* dist_sync under recovery: each value as it was before its last
	 * round (a restarted worker pulls the round it computes again);
	 * kept only when keep_prev is set, before the first key is added */
	int keep_prev;
	float *prev; /* val_cap */
	/* dist_sync's */
	int nworkers;
	int sync;
	float *merge;      /* val_cap, zeros between rounds */
	uint32_t *pend;    /* rec_cap * nworkers: request handles, 0: none */
	uint32_t *npushed; /* per record */
	size_t *wpend;     /* per worker: its records with a push pending */
	/* A deferred span (kstore.c: defer): records dfirst .. dfirst +
	 * dcount - 1 hold the pushes of dn workers, handles dh[worker] (0:
	 * none), and nothing else pending, though their pend and npushed
	 * entries are still zero (dcount 0: none). */
	size_t dcount;
	uint32_t dfirst, dn;
	uint32_t *dh; /* nworkers */
	/* runs of keys added in order (see above) */
	dt_ks_run runs[DT_KS_RUNS];
	size_t nruns;
} dt_kstore;

/* An empty store for nworkers workers, in mode sync, updating with opt
 * (kind DT_OPT_NONE: a round's sum, or the last push, is the value). */
void dt__ks_init(dt_kstore *ks, int nworkers, int sync, const dt_opt *opt);
void dt__ks_fini(dt_kstore *ks);
/* The optimizer's parameters change (not its kind). */
void dt__ks_set_opt(dt_kstore *ks, const dt_opt *opt);

/*
 * Look up count keys (u64, little-endian, unaligned) with lengths lens
 * into idx (record numbers). create: keys not in the store are added
 * (their values are left for the caller to set) - else a missing key is
 * an error. Fails with nothing changed on the first key that is missing,
 * listed twice, or of another length than its record; *bad is its index
 * and the error message names it (op: "push", ...). Room for the new keys
 * is made before any is added.
 */
dt_err dt__ks_resolve(dt_kstore *ks, const char *op, size_t count,
                      const uint8_t *keys, const dt_ks_lens *lens, int create,
                      uint32_t *idx, size_t *bad);

/*
 * Whether keys[0..count) (u64, little-endian, unaligned), each of lens,
 * are a stretch of one run, in order: then they are known keys, each listed
 * once and of its record's length, and they name records *first ..
 * *first + count - 1, whose values lie back to back from
 * dt__ks_val(ks, *first). 0: use dt__ks_resolve. One pass over the keys.
 */
int dt__ks_span(const dt_kstore *ks, size_t count, const uint8_t *keys,
                const dt_ks_lens *lens, uint32_t *first);
/* The same for a request that names its keys as a range (kv_impl.h:
 * DT_KV_KEY_RANGE): keys k0 + i * d (i < count, no wrap), each of len
 * floats. No pass over keys at all. */
int dt__ks_span_range(const dt_kstore *ks, size_t count, uint64_t k0,
                      uint64_t d, uint32_t len, uint32_t *first);

/* No record. */
#define DT_KS_NONE UINT32_MAX
/* The record of one key, or DT_KS_NONE. */
uint32_t dt__ks_find(const dt_kstore *ks, uint64_t key);

static inline size_t
dt__ks_len(const dt_kstore *ks, uint32_t r)
{
	return (size_t)(ks->off[r + 1] - ks->off[r]);
}

static inline float *
dt__ks_val(const dt_kstore *ks, uint32_t r)
{
	return ks->val + ks->off[r];
}

/* Copy the values of records idx[0..count) into out, back to back. (A
 * span's are back to back already: dt__ks_val(ks, first).) The _span forms
 * below take a span (dt__ks_span) for idx. */
void dt__ks_gather(const dt_kstore *ks, const uint32_t *idx, size_t count,
                   float *out);
/* Set them from vals (init): state and step counts start again. */
void dt__ks_set(dt_kstore *ks, const uint32_t *idx, size_t count,
                const float *vals);
/* dist_async: apply each key's gradient now. */
void dt__ks_apply(dt_kstore *ks, const uint32_t *idx, size_t count,
                  const float *g);
void dt__ks_apply_span(dt_kstore *ks, uint32_t first, size_t count,
                       const float *g);

/* dist_sync: write a deferred span's pushes into the per-record arrays
 * (before a caller reads pend or npushed itself). */
void dt__ks_settle(dt_kstore *ks);
/* dist_sync: whether worker has a push of any of idx pending (its index
 * into *bad). */
int dt__ks_pending(const dt_kstore *ks, int worker, const uint32_t *idx,
                   size_t count, size_t *bad);
int dt__ks_pending_span(const dt_kstore *ks, int worker, uint32_t first,
                        size_t count, size_t *bad);
/*
 * dist_sync: worker's pushes g of records idx join their rounds, as the
 * request whose handle is req (not 0). A round that this completes is
 * updated at once, and done(arg, h, n) is called for the handle of each
 * of its pushes (this request's included), n for n keys (n in all: a
 * request's keys may be told in several calls, at the end of this one). keys
 * (the request's u64 list, or NULL: its one key is key) name the keys on the
 * timeline: a request of at most DT_KS_TIMED keys is timed key by key.
 */
#define DT_KS_TIMED 16
void dt__ks_push_sync(dt_kstore *ks, int worker, uint32_t req,
                      const uint32_t *idx, size_t count, const float *g,
                      const uint8_t *keys, uint64_t key,
                      void (*done)(void *arg, uint32_t h, size_t n), void *arg);
/* The same for a span (dt__ks_span): records first .. first + count - 1. */
void dt__ks_push_sync_span(dt_kstore *ks, int worker, uint32_t req,
                           uint32_t first, size_t count, const float *g,
                           const uint8_t *keys,
                           void (*done)(void *arg, uint32_t h, size_t n),
                           void *arg);
/* The value of record r as of round `round` (its update count): the
 * value now, or (keep_prev) the one before its last round; NULL when the
 * record is at another round, or the value before is not kept. */
const float *dt__ks_val_at(const dt_kstore *ks, uint32_t r, uint64_t round);
/* Bytes the store holds (its arrays), for reports. */
size_t dt__ks_bytes(const dt_kstore *ks);

/*
 * Checkpoints (kstore_ckpt.c; the section's bytes are in ckpt.c's head
 * and docs/fault-tolerance.md). The store is written as it is between
 * rounds: values, optimizer state, step and update counts, and its runs;
 * a round's pushes so far (merge buffers, pending requests) are not in it.
 */
/* Every record's key, in record order, into keys[0..nrec) (a record's
 * key is kept only in the index). */
void dt__ks_keys(const dt_kstore *ks, uint64_t *keys);
/* Bytes dt__ks_snapshot writes at most. */
size_t dt__ks_snap_bytes(const dt_kstore *ks);
/* The store's section (ks NULL: an empty one). */
void dt__ks_snapshot(const dt_kstore *ks, dt_wbuf *w);
/* Read a section (hostile bytes: every count and length is checked
 * against what is left of the file and the store's limits before use)
 * into ks, empty and made by dt__ks_init for the file's mode and
 * optimizer. On error ks may hold part of it (dt__ks_fini it); the message
 * names path. */
dt_err dt__ks_load(dt_kstore *ks, const char *path, dt_rbuf *r);

#endif
