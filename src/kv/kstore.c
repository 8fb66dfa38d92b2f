/*
 * kstore.c - the many-key store of kstore.h: an open-addressing index over
 * records whose values sit back to back in one arena.
 *
 * Lookups of a request's keys run ahead of themselves: the slot of the key
 * AHEAD places on is prefetched while the current one is compared, so the
 * cache misses of a big index overlap instead of adding up.
 *
 * A request that lists a stretch of a run (kstore.h) needs no lookup at
 * all: comparing its keys with the progression is one sequential pass the
 * compiler vectorises, where the lookups were a random access each; it
 * then names consecutive records, so the dist_sync merge, the update and
 * the answer each work on one contiguous stretch of the arenas.
 *
 * Size: the index, the runs and the dist_sync rounds (with their deferred
 * spans) all work on the records through the same private helpers
 * (update, the marks, the per-record arrays), so they stay one file of
 * about 1,100 lines rather than sharing those helpers through a header.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/table.h"
#include "kv/kstore.h"

#define SLOT     12  /* bytes: u64 key, u32 record + 1 (0: empty) */
#define AHEAD    128 /* lookups prefetched ahead (a power of two) */
#define MIN_CAP  64
#define NO_REC   DT_KS_NONE
#define LOAD_MAX 0.8 /* the index is rebuilt larger past this */
#define LOAD_NEW 0.6 /* ... to this */

/*
 * The home slot of key in an index of cap slots. Keys are placed by runs:
 * the 16 keys that differ only in their low 4 bits get 16 neighbouring
 * slots, at a place the other bits pick at random (mixed, then scaled to
 * cap by a multiply-shift: any cap, not only powers of two). A request of
 * consecutive keys (feature ids, ps-lite's 0..N-1) then reads 3 cache
 * lines per 16 keys instead of 16; keys that share nothing are spread as
 * by any good hash; and since a run is 16 slots long, two runs that
 * overlap displace each other by 16 slots at most.
 */
#define RUN_BITS 4
static inline size_t
home(uint64_t key, size_t cap)
{
	size_t pos =
	    (size_t)(((unsigned __int128)dt__mix64(key >> RUN_BITS) * cap) >>
	             64) +
	    (size_t)(key & ((1u << RUN_BITS) - 1));

	return pos < cap ? pos : pos - cap;
}

static inline uint64_t
slot_key(const uint8_t *s)
{
	uint64_t k;

	memcpy(&k, s, 8);
	return k;
}

static inline uint32_t
slot_rec(const uint8_t *s)
{
	uint32_t r;

	memcpy(&r, s + 8, 4);
	return r;
}

static inline void
slot_put(uint8_t *s, uint64_t key, uint32_t rec1)
{
	memcpy(s, &key, 8);
	memcpy(s + 8, &rec1, 4);
}

/* The record of key (from its home slot pos), or NO_REC. */
static inline uint32_t
find_from(const dt_kstore *ks, uint64_t key, size_t pos)
{
	for (;;) {
		const uint8_t *s = ks->slots + SLOT * pos;
		uint32_t r1 = slot_rec(s);

		if (r1 == 0)
			return NO_REC;
		if (slot_key(s) == key)
			return r1 - 1;
		if (++pos == ks->cap)
			pos = 0;
	}
}

uint32_t
dt__ks_find(const dt_kstore *ks, uint64_t key)
{
	return ks->cap ? find_from(ks, key, home(key, ks->cap)) : NO_REC;
}

static void
put(uint8_t *slots, size_t cap, uint64_t key, uint32_t rec1)
{
	size_t pos = home(key, cap);

	while (slot_rec(slots + SLOT * pos) != 0)
		if (++pos == cap)
			pos = 0;
	slot_put(slots + SLOT * pos, key, rec1);
}

/* Remove key's slot; the run after it shifts back (no tombstones). */
static void
erase(dt_kstore *ks, uint64_t key)
{
	size_t cap = ks->cap, pos = home(key, cap);

	while (slot_key(ks->slots + SLOT * pos) != key ||
	       slot_rec(ks->slots + SLOT * pos) == 0)
		if (++pos == cap)
			pos = 0;
	for (size_t next = pos;;) {
		if (++next == cap)
			next = 0;
		uint8_t *s = ks->slots + SLOT * next;

		if (slot_rec(s) == 0)
			break;
		size_t h = home(slot_key(s), cap);
		/* s may move to the hole at pos if its home is not in
		 * (pos, next] (cyclically). */
		int stays = pos <= next ? (h > pos && h <= next)
		                        : (h > pos || h <= next);
		if (stays)
			continue;
		memcpy(ks->slots + SLOT * pos, s, SLOT);
		pos = next;
	}
	memset(ks->slots + SLOT * pos, 0, SLOT);
}

void
dt__ks_keys(const dt_kstore *ks, uint64_t *keys)
{
	for (size_t i = 0; i < ks->cap; i++) {
		const uint8_t *s = ks->slots + SLOT * i;
		uint32_t r1 = slot_rec(s);

		if (r1)
			keys[r1 - 1] = slot_key(s);
	}
}

void
dt__ks_init(dt_kstore *ks, int nworkers, int sync, const dt_opt *opt)
{
	memset(ks, 0, sizeof(*ks));
	ks->nworkers = nworkers;
	ks->sync = sync;
	ks->opt = *opt;
	ks->sk = dt__opt_state_len(opt, 1);
}

void
dt__ks_set_opt(dt_kstore *ks, const dt_opt *opt)
{
	ks->opt = *opt; /* (the kind is fixed once keys exist) */
}

void
dt__ks_fini(dt_kstore *ks)
{
	free(ks->slots);
	free(ks->off);
	free(ks->val);
	free(ks->mark);
	free(ks->state);
	free(ks->steps);
	free(ks->updates);
	free(ks->merge);
	free(ks->prev);
	free(ks->pend);
	free(ks->npushed);
	free(ks->wpend);
	free(ks->dh);
	memset(ks, 0, sizeof(*ks));
}

size_t
dt__ks_bytes(const dt_kstore *ks)
{
	size_t w = (size_t)ks->nworkers, b = ks->cap * SLOT;

	b += (ks->rec_cap + 1) * 8 + ks->val_cap * 4 + (ks->rec_cap + 7) / 8;
	if (ks->state)
		b += ks->val_cap * ks->sk * 4;
	if (ks->steps)
		b += ks->rec_cap * 4;
	if (ks->updates)
		b += ks->rec_cap * 4;
	if (ks->merge)
		b += ks->val_cap * 4 + ks->rec_cap * (w + 1) * 4;
	if (ks->prev)
		b += ks->val_cap * 4;
	return b;
}

/* Arrays at least this big go on huge pages where the kernel has them
 * (transparent huge pages on madvise): a lookup in a big index then costs
 * a cache miss, not a cache miss and a page walk. */
#define HUGE_MIN  ((size_t)4 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

/* n zeroed bytes (calloc's contract; free with free()). */
static void *
zalloc(size_t n)
{
	void *p;

	if (n < HUGE_MIN)
		return calloc(n ? n : 1, 1);
	n = (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	if (posix_memalign(&p, HUGE_PAGE, n))
		return NULL;
	(void)madvise(p, n, MADV_HUGEPAGE); /* (a hint: may be refused) */
	memset(p, 0, n);
	return p;
}

/* Grow *p from old to n elements of size esz, zeroing the new ones. */
static int
grow(void **p, size_t old, size_t n, size_t esz)
{
	void *q;

	if (n <= old && *p)
		return 0;
	if (n > SIZE_MAX / esz || (q = zalloc(n * esz)) == NULL)
		return -1;
	if (*p)
		memcpy(q, *p, old * esz);
	free(*p);
	*p = q;
	return 0;
}

/* Room for nrec records and nval floats (capacities grow by half, or to
 * what is asked, whichever is more). */
static int
reserve(dt_kstore *ks, size_t nrec, size_t nval)
{
	size_t w = (size_t)ks->nworkers;

	if (ks->sync && ks->wpend == NULL &&
	    (ks->wpend = calloc(w ? w : 1, sizeof(*ks->wpend))) == NULL)
		return -1;
	if (ks->sync && ks->dh == NULL &&
	    (ks->dh = calloc(w ? w : 1, sizeof(*ks->dh))) == NULL)
		return -1;
	if (nrec > ks->rec_cap) {
		size_t rc = DT_MAX(nrec, ks->rec_cap + ks->rec_cap / 2);
		size_t old = ks->rec_cap;

		if (rc > DT_KS_MAX_KEYS)
			rc = nrec;
		if (grow((void **)&ks->off, old ? old + 1 : 0, rc + 1, 8) ||
		    grow((void **)&ks->mark, (old + 7) / 8, (rc + 7) / 8, 1) ||
		    (ks->counted && grow((void **)&ks->updates, old, rc, 4)) ||
		    (ks->opt.kind != DT_OPT_NONE &&
		     grow((void **)&ks->steps, old, rc, 4)) ||
		    (ks->sync &&
		     (grow((void **)&ks->pend, old * w, rc * w, 4) ||
		      grow((void **)&ks->npushed, old, rc, 4))))
			return -1;
		ks->rec_cap = rc;
	}
	if (nval > ks->val_cap || ks->val == NULL) {
		size_t vc =
		    DT_MAX(DT_MAX(nval, 1), ks->val_cap + ks->val_cap / 2);
		size_t old = ks->val_cap;

		if (grow((void **)&ks->val, old, vc, 4) ||
		    (ks->sk &&
		     grow((void **)&ks->state, old * ks->sk, vc * ks->sk, 4)) ||
		    (ks->sync && grow((void **)&ks->merge, old, vc, 4)) ||
		    (ks->keep_prev && grow((void **)&ks->prev, old, vc, 4)))
			return -1;
		ks->val_cap = vc;
	}
	return 0;
}

/* An index for n keys: rebuilt larger when n passes LOAD_MAX of it. */
static int
reindex(dt_kstore *ks, size_t n)
{
	size_t cap;
	uint8_t *slots;

	if (ks->cap && (double)n <= LOAD_MAX * (double)ks->cap)
		return 0;
	cap = DT_MAX((size_t)((double)n / LOAD_NEW) + 1, MIN_CAP);
	if (cap > SIZE_MAX / SLOT || (slots = zalloc(cap * SLOT)) == NULL)
		return -1;
	for (size_t i = 0; i < ks->cap; i++) {
		const uint8_t *s = ks->slots + SLOT * i;
		uint32_t r1 = slot_rec(s);

		if (r1)
			put(slots, cap, slot_key(s), r1);
	}
	free(ks->slots);
	ks->slots = slots;
	ks->cap = cap;
	return 0;
}

static inline int
marked(const dt_kstore *ks, uint32_t r)
{
	return (ks->mark[r >> 3] >> (r & 7)) & 1;
}

static inline void
mark(dt_kstore *ks, uint32_t r, int on)
{
	if (on)
		ks->mark[r >> 3] |= (uint8_t)(1u << (r & 7));
	else
		ks->mark[r >> 3] &= (uint8_t) ~(1u << (r & 7));
}

/* Clear the marks of idx[0..n) (records below lim; NO_REC skipped). */
static void
unmark(dt_kstore *ks, const uint32_t *idx, size_t n, size_t lim)
{
	for (size_t i = 0; i < n; i++)
		if (idx[i] != NO_REC && idx[i] < lim)
			mark(ks, idx[i], 0);
}

/* ---- runs: requests that list keys in the order init added them ---- */

#define RUN_MIN   DT_KV_RANGE_MIN /* keys a run has at least (below: lookups) */
#define RUN_CHUNK 4096            /* keys compared between early exits */

/* Whether keys[from..count) are k0 + i * d (i their index). The compare
 * has no branch per key, so the compiler can vectorise it. */
static int
progression(const uint8_t *keys, size_t from, size_t count, uint64_t k0,
            uint64_t d)
{
	for (size_t i = from; i < count; i += RUN_CHUNK) {
		size_t end = count - i < RUN_CHUNK ? count : i + RUN_CHUNK;
		uint64_t diff = 0, e = k0 + d * (uint64_t)i;

		for (size_t j = i; j < end; j++, e += d)
			diff |= dt__kv_u64_at(keys, j) ^ e;
		if (diff)
			return 0;
	}
	return 1;
}

/* The common step of keys[0..count) if they may be a progression (at
 * least min keys; it increases without wrapping; the first two and the
 * last agree), else 0. A step of 0 would list a key twice: never a
 * progression. */
static uint64_t
step_of(const uint8_t *keys, size_t count, size_t min)
{
	uint64_t k0, d;

	if (count < min || count < 2)
		return 0;
	k0 = dt__kv_u64_at(keys, 0);
	d = dt__kv_u64_at(keys, 1) - k0;
	if (d == 0 || d > (UINT64_MAX - k0) / (uint64_t)(count - 1) ||
	    dt__kv_u64_at(keys, count - 1) != k0 + d * (uint64_t)(count - 1))
		return 0;
	return d;
}

uint64_t
dt__kv_key_step(const uint8_t *keys, size_t count)
{
	uint64_t d = count >= 2 ? step_of(keys, count, 2) : 0;

	/* (the first two and the last keys are checked: step_of) */
	return d && progression(keys, 2, count - 1, dt__kv_u64_at(keys, 0), d)
	           ? d
	           : 0;
}

/* Whether keys k0 + i * d (i < count), each of len floats, are a stretch
 * of one of the store's runs: then *first is the record of k0. */
static int
run_of(const dt_kstore *ks, size_t count, uint64_t k0, uint64_t d, uint32_t len,
       uint32_t *first)
{
	for (size_t i = 0; i < ks->nruns; i++) {
		const dt_ks_run *u = &ks->runs[i];
		uint64_t j0 = (k0 - u->k0) / d;

		if (u->stride != d || u->len != len || k0 < u->k0 ||
		    (k0 - u->k0) % d || j0 > u->n || count > u->n - j0)
			continue;
		*first = u->r0 + (uint32_t)j0;
		return 1;
	}
	return 0;
}

int
dt__ks_span(const dt_kstore *ks, size_t count, const uint8_t *keys,
            const dt_ks_lens *lens, uint32_t *first)
{
	uint64_t d = lens->lens ? 0 : step_of(keys, count, RUN_MIN), k0;

	if (d == 0)
		return 0;
	k0 = dt__kv_u64_at(keys, 0);
	/* (the first two and the last keys are checked: step_of) */
	return run_of(ks, count, k0, d, lens->uniform, first) &&
	       progression(keys, 2, count - 1, k0, d);
}

int
dt__ks_span_range(const dt_kstore *ks, size_t count, uint64_t k0, uint64_t d,
                  uint32_t len, uint32_t *first)
{
	return count >= RUN_MIN && d != 0 &&
	       run_of(ks, count, k0, d, len, first);
}

/* After count keys were added as records r0 ... in their order, each of
 * len floats: if they are a progression, the store keeps it as a run. */
static void
note_run(dt_kstore *ks, size_t count, const uint8_t *keys, uint32_t len,
         uint32_t r0)
{
	uint64_t d = step_of(keys, count, RUN_MIN);
	size_t at;

	if (d == 0 || len == 0 ||
	    !progression(keys, 2, count - 1, dt__kv_u64_at(keys, 0), d))
		return;
	/* (the oldest goes when the table is full) */
	if (ks->nruns < DT_KS_RUNS) {
		at = ks->nruns++;
	} else {
		memmove(ks->runs, ks->runs + 1,
		        (DT_KS_RUNS - 1) * sizeof(ks->runs[0]));
		at = DT_KS_RUNS - 1;
	}
	ks->runs[at] = (dt_ks_run){.k0 = dt__kv_u64_at(keys, 0),
	                           .stride = d,
	                           .n = count,
	                           .r0 = r0,
	                           .len = len};
}

/* Pass 1 of dt__ks_resolve: every key looked up (idx), its length and
 * uniqueness checked, the keys it marks left marked; the new keys counted
 * (*nnew, their floats *newval). On an error *at is the key's index. */
static dt_err
resolve_lookup(dt_kstore *ks, const char *op, size_t count, const uint8_t *keys,
               const dt_ks_lens *lens, int create, uint32_t *idx, size_t *at,
               size_t *nnew, size_t *newval)
{
	size_t pos[AHEAD], i;

	for (i = 0; i < count && i < AHEAD; i++) {
		pos[i] = home(dt__kv_u64_at(keys, i), ks->cap);
		__builtin_prefetch(ks->slots + SLOT * pos[i]);
	}
	for (i = 0; i < count; i++) {
		uint64_t key = dt__kv_u64_at(keys, i);
		uint32_t r = find_from(ks, key, pos[i & (AHEAD - 1)]);
		uint32_t len = dt__ks_len_at(lens, i);

		*at = i;
		if (i + AHEAD < count) {
			size_t p =
			    home(dt__kv_u64_at(keys, i + AHEAD), ks->cap);

			pos[i & (AHEAD - 1)] = p;
			__builtin_prefetch(ks->slots + SLOT * p);
		}
		idx[i] = r;
		if (r == NO_REC) {
			if (!create)
				return dt__fail(DT_ENOKEY,
				                "%s of key %llu: unknown key "
				                "(never initialised with init)",
				                op, (unsigned long long)key);
			if (len == 0 || len > DT_KS_MAX_LEN)
				return dt__fail(
				    DT_ESIZE,
				    "%s of key %llu: length %u (1 to %llu)", op,
				    (unsigned long long)key, len,
				    (unsigned long long)DT_KS_MAX_LEN);
			(*nnew)++;
			*newval += len;
			continue;
		}
		if (dt__ks_len(ks, r) != len)
			return dt__fail(DT_ESIZE,
			                "%s of key %llu: length %u != "
			                "initialised length %zu",
			                op, (unsigned long long)key, len,
			                dt__ks_len(ks, r));
		if (marked(ks, r))
			return dt__fail(DT_EINVAL,
			                "%s: key %llu is listed twice in one "
			                "call",
			                op, (unsigned long long)key);
		mark(ks, r, 1);
	}
	*at = count;
	return DT_OK;
}

/* Pass 2 of dt__ks_resolve (create): room first, then the nnew new keys
 * (newval floats) added; the marks cleared. On an error the keys added by
 * this call go again and *bad is the index of the key at fault. */
static dt_err
resolve_add(dt_kstore *ks, const char *op, size_t count, const uint8_t *keys,
            const dt_ks_lens *lens, uint32_t *idx, size_t nnew, size_t newval,
            size_t *bad)
{
	size_t n0 = ks->nrec, i;
	dt_err err = DT_OK;

	if (ks->nrec + nnew > DT_KS_MAX_KEYS) {
		unmark(ks, idx, count, n0);
		return dt__fail(DT_ESIZE,
		                "%s: %zu new keys would pass the store's "
		                "limit of %llu keys",
		                op, nnew, (unsigned long long)DT_KS_MAX_KEYS);
	}
	if (reserve(ks, ks->nrec + nnew,
	            (size_t)(ks->nrec ? ks->off[ks->nrec] : 0) + newval) ||
	    reindex(ks, ks->nrec + nnew)) {
		unmark(ks, idx, count, n0);
		return dt__fail(DT_ENOMEM, "%s: out of memory for %zu new keys",
		                op, nnew);
	}
	if (ks->nrec == 0)
		ks->off[0] = 0;
	for (i = 0; i < count; i++) {
		uint64_t key;
		uint32_t r;

		if (idx[i] != NO_REC)
			continue;
		key = dt__kv_u64_at(keys, i);
		r = find_from(ks, key, home(key, ks->cap));
		if (r != NO_REC) { /* added above: listed twice */
			err = dt__fail(DT_EINVAL,
			               "%s: key %llu is listed twice in one "
			               "call",
			               op, (unsigned long long)key);
			break;
		}
		r = (uint32_t)ks->nrec++;
		ks->off[r + 1] = ks->off[r] + dt__ks_len_at(lens, i);
		put(ks->slots, ks->cap, key, r + 1);
		idx[i] = r;
	}
	unmark(ks, idx, count, n0);
	/* Every key new, in order, of one length: maybe a run. */
	if (!err && nnew == count && lens->lens == NULL)
		note_run(ks, count, keys, lens->uniform, (uint32_t)n0);
	if (err) { /* the keys added by this call go again */
		for (size_t j = 0; j < i; j++)
			if (idx[j] >= n0)
				erase(ks, dt__kv_u64_at(keys, j));
		ks->nrec = n0;
		*bad = i;
	}
	return err;
}

dt_err
dt__ks_resolve(dt_kstore *ks, const char *op, size_t count, const uint8_t *keys,
               const dt_ks_lens *lens, int create, uint32_t *idx, size_t *bad)
{
	size_t nnew = 0, newval = 0, n0 = ks->nrec, at = 0;
	dt_err err;

	*bad = 0;
	if (count == 0)
		return DT_OK;
	if (ks->cap == 0) {
		if (!create) {
			*bad = 0;
			return dt__fail(
			    DT_ENOKEY,
			    "%s of key %llu: unknown key (never "
			    "initialised with init)",
			    op, (unsigned long long)dt__kv_u64_at(keys, 0));
		}
		if (reindex(ks, 0))
			return dt__fail(DT_ENOMEM, "%s: out of memory", op);
	}
	if ((err = resolve_lookup(ks, op, count, keys, lens, create, idx, &at,
	                          &nnew, &newval))) {
		unmark(ks, idx, at, n0);
		*bad = at;
		return err;
	}
	if (nnew == 0) {
		unmark(ks, idx, count, n0);
		return DT_OK;
	}
	return resolve_add(ks, op, count, keys, lens, idx, nnew, newval, bad);
}

void
dt__ks_gather(const dt_kstore *ks, const uint32_t *idx, size_t count,
              float *out)
{
	for (size_t i = 0; i < count; i++) {
		uint32_t r = idx[i];
		size_t len = dt__ks_len(ks, r);

		if (len == 1)
			*out = ks->val[ks->off[r]];
		else
			memcpy(out, dt__ks_val(ks, r), len * sizeof(float));
		out += len;
	}
}

void
dt__ks_set(dt_kstore *ks, const uint32_t *idx, size_t count, const float *vals)
{
	for (size_t i = 0; i < count; i++) {
		uint32_t r = idx[i];
		size_t len = dt__ks_len(ks, r);

		memcpy(dt__ks_val(ks, r), vals, len * sizeof(float));
		if (ks->sk)
			memset(ks->state + ks->off[r] * ks->sk, 0,
			       len * ks->sk * sizeof(float));
		if (ks->steps)
			ks->steps[r] = 0;
		vals += len;
	}
}

/* Records first .. first + count - 1 were updated at once (a fast path
 * that copies values instead of calling update). */
static void
count_updates(dt_kstore *ks, uint32_t first, size_t count)
{
	for (size_t i = 0; ks->updates && i < count; i++)
		ks->updates[first + i]++;
}

/* One update of record r with gradient g (its steps and updates
 * counted). */
static inline void
update(dt_kstore *ks, uint32_t r, const float *g)
{
	size_t len = dt__ks_len(ks, r);
	float *w = dt__ks_val(ks, r);

	if (ks->updates)
		ks->updates[r]++;
	if (ks->prev)
		memcpy(ks->prev + ks->off[r], w, len * sizeof(float));
	if (ks->opt.kind == DT_OPT_NONE) {
		if (len == 1)
			*w = *g;
		else
			memcpy(w, g, len * sizeof(float));
		return;
	}
	ks->steps[r]++;
	dt__opt_apply(&ks->opt, w, g,
	              ks->state ? ks->state + ks->off[r] * ks->sk : NULL, len,
	              ks->steps[r]);
}

/* The record a request's i-th key names: idx[i], or first + i in a span
 * (idx NULL). */
static inline uint32_t
rec_at(const uint32_t *idx, uint32_t first, size_t i)
{
	return idx ? idx[i] : first + (uint32_t)i;
}

static void
apply_sel(dt_kstore *ks, const uint32_t *idx, uint32_t first, size_t count,
          const float *g)
{
	for (size_t i = 0; i < count; i++) {
		uint32_t r = rec_at(idx, first, i);

		update(ks, r, g);
		g += dt__ks_len(ks, r);
	}
}

void
dt__ks_apply(dt_kstore *ks, const uint32_t *idx, size_t count, const float *g)
{
	apply_sel(ks, idx, 0, count, g);
}

void
dt__ks_apply_span(dt_kstore *ks, uint32_t first, size_t count, const float *g)
{
	size_t o = count ? (size_t)ks->off[first] : 0,
	       n = count ? (size_t)ks->off[first + count] - o : 0;

	/* (no optimizer: the values are the gradients, one copy) */
	if (ks->opt.kind == DT_OPT_NONE && count) {
		memcpy(dt__ks_val(ks, first), g, n * sizeof(float));
		count_updates(ks, first, count);
	} else if (ks->opt.kind == DT_OPT_SGD && count) {
		/* SGD works element by element and its state (momentum)
		 * lies back to back like the values: one call over the span
		 * gives each element what one call per key would, without a
		 * call per key. (Adam's bias correction is per key: its
		 * steps differ.) */
		if (ks->prev)
			memcpy(ks->prev + o, ks->val + o, n * sizeof(float));
		dt__opt_apply(&ks->opt, ks->val + o, g,
		              ks->state ? ks->state + o : NULL, n, 0);
		for (size_t i = 0; i < count; i++)
			ks->steps[first + i]++;
		count_updates(ks, first, count);
	} else
		apply_sel(ks, NULL, first, count, g);
}

static int
pending_sel(const dt_kstore *ks, int worker, const uint32_t *idx,
            uint32_t first, size_t count, size_t *bad)
{
	size_t w = (size_t)ks->nworkers;

	int in_d = ks->dcount && ks->dh[worker];

	/* (between rounds, the common case, no record has one: no scan) */
	if (ks->wpend == NULL || ks->wpend[worker] == 0)
		return 0;
	for (size_t i = 0; i < count; i++) {
		uint32_t r = rec_at(idx, first, i);

		if (ks->pend[(size_t)r * w + (size_t)worker] ||
		    (in_d && r - ks->dfirst < ks->dcount)) {
			*bad = i;
			return 1;
		}
	}
	return 0;
}

int
dt__ks_pending(const dt_kstore *ks, int worker, const uint32_t *idx,
               size_t count, size_t *bad)
{
	return pending_sel(ks, worker, idx, 0, count, bad);
}

int
dt__ks_pending_span(const dt_kstore *ks, int worker, uint32_t first,
                    size_t count, size_t *bad)
{
	return pending_sel(ks, worker, NULL, first, count, bad);
}

static void
ks_busy(int kind, uint64_t t0, uint64_t key, size_t len)
{
	dt__obs_server(kind == DT_EV_KV_UPDATE, 1, dt__now_ns() - t0);
	dt__trace_span(kind, DT_TID_IO, t0, key, DT_EVF_KEY | DT_EVF_BYTES,
	               len * sizeof(float), -1);
}

/* The done calls of one push_sync, gathered: per worker slot k, n keys of
 * handle h, told when k's handle changes and at the end - one call per
 * request rather than one per key. */
#define TALLY 32
typedef struct tally {
	uint32_t h[TALLY];
	size_t n[TALLY];
	void (*done)(void *arg, uint32_t h, size_t n);
	void *arg;
} tally;

static inline void
tally_add(tally *t, size_t k, uint32_t h)
{
	if (k >= TALLY) {
		t->done(t->arg, h, 1);
		return;
	}
	if (t->h[k] != h) {
		if (t->n[k])
			t->done(t->arg, t->h[k], t->n[k]);
		t->h[k] = h;
		t->n[k] = 0;
	}
	t->n[k]++;
}

static void
tally_flush(tally *t)
{
	for (size_t k = 0; k < TALLY; k++)
		if (t->n[k]) {
			t->done(t->arg, t->h[k], t->n[k]);
			t->n[k] = 0;
		}
}

/* A round of record r (its merge buffer m, len floats) is complete: its
 * value updated, and each of its pushes told. */
static void
close_round(dt_kstore *ks, uint32_t r, float *m, size_t len, tally *t)
{
	size_t w = (size_t)ks->nworkers;
	uint32_t *pend = ks->pend + (size_t)r * w;

	update(ks, r, m);
	memset(m, 0, len * sizeof(float));
	ks->npushed[r] = 0;
	for (size_t k = 0; k < w; k++) {
		uint32_t h = pend[k];

		pend[k] = 0;
		if (h) {
			ks->wpend[k]--;
			tally_add(t, k, h);
		}
	}
}

/* dt__ks_push_sync for records idx, or a span from first (idx NULL) whose
 * gradients were already added to the merge buffers (added). */
static void
push_sync_sel(dt_kstore *ks, int worker, uint32_t req, const uint32_t *idx,
              uint32_t first, size_t count, const float *g, const uint8_t *keys,
              uint64_t key, int added, tally *t)
{
	size_t w = (size_t)ks->nworkers;
	/* A few keys (single-key calls, small batches) are timed key by key
	 * for the counters and timeline; a big batch as a whole by the
	 * server (a clock read per key would cost more than the key). */
	int timed = count <= DT_KS_TIMED;
	uint64_t t0 = 0;

	for (size_t i = 0; i < count; i++) {
		uint32_t r = rec_at(idx, first, i);
		size_t len = dt__ks_len(ks, r);
		uint32_t *pend = ks->pend + (size_t)r * w;
		float *m = ks->merge + ks->off[r];
		uint64_t k = timed && keys ? dt__kv_u64_at(keys, i) : key;

		if (timed)
			t0 = dt__now_ns();
		if (w == 1) { /* the round is this push */
			update(ks, r, g);
			if (timed)
				ks_busy(DT_EV_KV_UPDATE, t0, k, len);
			tally_add(t, 0, req);
			g += len;
			continue;
		}
		/* (summed in arrival order, as the single-key store does) */
		if (!added)
			dt__kv_add(m, g, len);
		if (timed)
			ks_busy(DT_EV_KV_MERGE, t0, k, len);
		if (pend[worker] == 0)
			ks->wpend[worker]++;
		pend[worker] = req;
		g += len;
		if (++ks->npushed[r] < (uint32_t)w)
			continue;
		if (timed)
			t0 = dt__now_ns();
		close_round(ks, r, m, len, t);
		if (timed)
			ks_busy(DT_EV_KV_UPDATE, t0, k, len);
	}
	tally_flush(t);
}

void
dt__ks_push_sync(dt_kstore *ks, int worker, uint32_t req, const uint32_t *idx,
                 size_t count, const float *g, const uint8_t *keys,
                 uint64_t key, void (*done)(void *arg, uint32_t h, size_t n),
                 void *arg)
{
	tally t = {.done = done, .arg = arg};

	dt__ks_settle(ks);
	push_sync_sel(ks, worker, req, idx, 0, count, g, keys, key, 0, &t);
}

/* Every round of the count records whose pending handles are pend
 * (count x nworkers) closed at once: each worker's handles told as runs
 * of one handle (one call for a request's keys in the span, the usual
 * case, instead of one per key), worker by worker as tally_flush would,
 * then cleared. */
static void
tell_runs(dt_kstore *ks, uint32_t *pend, size_t count, tally *t)
{
	size_t w = (size_t)ks->nworkers;

	tally_flush(t);
	for (size_t k = 0; k < w; k++)
		for (size_t i = 0, j; i < count; i = j) {
			uint32_t h = pend[i * w + k];

			for (j = i + 1; j < count && pend[j * w + k] == h; j++)
				;
			if (h == 0) /* (none pending: nothing to tell) */
				continue;
			ks->wpend[k] -= j - i;
			t->done(t->arg, h, j - i);
		}
	memset(pend, 0, count * w * sizeof(*pend));
}

/* Every round of records first .. first + count - 1 is complete: each
 * value updated with its sum, in record order as close_round would (with
 * no optimizer the sums become the values in one copy), the merge
 * buffers zeroed. */
static void
close_values(dt_kstore *ks, uint32_t first, size_t count)
{
	size_t o = (size_t)ks->off[first],
	       n = (size_t)ks->off[first + count] - o;

	if (ks->opt.kind != DT_OPT_NONE) {
		for (size_t i = 0; i < count; i++) {
			uint32_t r = first + (uint32_t)i;

			update(ks, r, ks->merge + ks->off[r]);
		}
		memset(ks->merge + o, 0, n * sizeof(float));
		return;
	}
	if (ks->prev)
		memcpy(ks->prev + o, ks->val + o, n * sizeof(float));
	memcpy(ks->val + o, ks->merge + o, n * sizeof(float));
	memset(ks->merge + o, 0, n * sizeof(float));
	count_updates(ks, first, count);
}

void
dt__ks_settle(dt_kstore *ks)
{
	size_t w = (size_t)ks->nworkers, c = ks->dcount;
	uint32_t *pend, *np;

	if (c == 0)
		return;
	pend = ks->pend + (size_t)ks->dfirst * w;
	np = ks->npushed + ks->dfirst;
	for (size_t k = 0; k < w; k++)
		for (size_t i = 0; ks->dh[k] && i < c; i++)
			pend[i * w + k] = ks->dh[k];
	for (size_t i = 0; i < c; i++)
		np[i] = ks->dn;
	memset(ks->dh, 0, w * sizeof(*ks->dh));
	ks->dcount = 0;
	ks->dn = 0;
}

/*
 * The usual dist_sync round of a batched call: every worker pushes the
 * same span, one after the other, while nothing else is pending. Then
 * the per-record marks (a handle per record and worker, a count per
 * record) are not written at all: the span is deferred (kstore.h: dcount
 * ...) with one handle per worker, and the last worker's push closes
 * every round in one sweep and tells each handle once. Anything else that
 * meets a deferred span writes it out first (dt__ks_settle), so the
 * per-record state is then what span_rounds would have made. 1: taken.
 */
static int
defer(dt_kstore *ks, int worker, uint32_t req, uint32_t first, size_t count,
      tally *t)
{
	size_t w = (size_t)ks->nworkers;

	if (ks->dcount == 0) {
		for (size_t k = 0; k < w; k++)
			if (ks->wpend[k]) /* (something pending: as before) */
				return 0;
		ks->dfirst = first;
		ks->dcount = count;
	} else if (ks->dfirst != first || ks->dcount != count ||
	           ks->dh[worker]) {
		return 0;
	}
	ks->dh[worker] = req;
	ks->wpend[worker] += count;
	if (++ks->dn < (uint32_t)w)
		return 1;
	close_values(ks, first, count);
	ks->dcount = 0;
	ks->dn = 0;
	for (size_t k = 0; k < w; k++) {
		uint32_t h = ks->dh[k];

		ks->dh[k] = 0;
		if (h) {
			ks->wpend[k] -= count;
			t->done(t->arg, h, count);
		}
	}
	return 1;
}

/* A span's pushes of worker (more than DT_KS_TIMED keys, their gradients
 * already in the merge buffers) join their rounds: first this worker's
 * mark on each, then the rounds it closed - when it closed them all (the
 * last worker's push, with no optimizer) their sums become the values in
 * one copy. */
static void
span_rounds(dt_kstore *ks, int worker, uint32_t req, uint32_t first,
            size_t count, tally *t)
{
	size_t w = (size_t)ks->nworkers, closed = 0, marked = 0;
	uint32_t *pend = ks->pend + (size_t)first * w,
	         *np = ks->npushed + first;

	uint32_t *mine = pend + worker, nw = (uint32_t)w;

	/* Three loops rather than one: this worker's handles (with none of
	 * its pushes pending anywhere, the usual case, without a look at
	 * what was there), then the counts, a contiguous loop that the
	 * compiler vectorises. */
	if (ks->wpend[worker] == 0) {
		for (size_t i = 0; i < count; i++)
			mine[i * w] = req;
		marked = count;
	} else {
		for (size_t i = 0; i < count; i++) {
			marked += mine[i * w] == 0;
			mine[i * w] = req;
		}
	}
	for (size_t i = 0; i < count; i++)
		closed += ++np[i] == nw;
	ks->wpend[worker] += marked;
	if (closed == count && ks->opt.kind == DT_OPT_NONE) {
		close_values(ks, first, count);
		memset(np, 0, count * sizeof(*np));
		tell_runs(ks, pend, count, t);
	} else {
		for (size_t i = 0; closed && i < count; i++) {
			uint32_t r = first + (uint32_t)i;

			if (np[i] == (uint32_t)w)
				close_round(ks, r, ks->merge + ks->off[r],
				            dt__ks_len(ks, r), t);
		}
	}
	tally_flush(t);
}

void
dt__ks_push_sync_span(dt_kstore *ks, int worker, uint32_t req, uint32_t first,
                      size_t count, const float *g, const uint8_t *keys,
                      void (*done)(void *arg, uint32_t h, size_t n), void *arg)
{
	size_t n =
	    count ? (size_t)(ks->off[first + count] - ks->off[first]) : 0;
	tally t = {.done = done, .arg = arg};

	if (ks->nworkers == 1 && ks->opt.kind == DT_OPT_NONE &&
	    count > DT_KS_TIMED) {
		/* Each round is this push and its value the gradient: one
		 * copy, then every key's round answered. */
		if (ks->prev)
			memcpy(ks->prev + ks->off[first], dt__ks_val(ks, first),
			       n * sizeof(float));
		memcpy(dt__ks_val(ks, first), g, n * sizeof(float));
		count_updates(ks, first, count);
		done(arg, req, count);
		return;
	}
	/* The span's merge buffers lie back to back too: its gradients are
	 * added in one sweep (each element the same sum, in the same
	 * arrival order, as key by key). */
	if (ks->nworkers > 1)
		dt__kv_add(ks->merge + ks->off[first], g, n);
	if (ks->nworkers > 1 && count > DT_KS_TIMED &&
	    defer(ks, worker, req, first, count, &t))
		return;
	dt__ks_settle(ks);
	if (ks->nworkers > 1 && count > DT_KS_TIMED)
		span_rounds(ks, worker, req, first, count, &t);
	else
		push_sync_sel(ks, worker, req, NULL, first, count, g, keys, 0,
		              ks->nworkers > 1, &t);
}

const float *
dt__ks_val_at(const dt_kstore *ks, uint32_t r, uint64_t round)
{
	uint64_t now = ks->updates ? ks->updates[r] : 0;

	if (round == now)
		return dt__ks_val(ks, r);
	if (ks->prev && round + 1 == now)
		return ks->prev + ks->off[r];
	return NULL;
}
