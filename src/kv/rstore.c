/*
 * rstore.c - a row-sparse table (rstore.h has the design).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kv/rstore.h"

/* n zeroed bytes as a private anonymous mapping: pages are made when they
 * are first written, so rows never touched cost nothing. NULL: no room. */
void *
dt__map_zero(size_t n)
{
	void *p;

	if (n == 0)
		n = 1;
	p = mmap(NULL, n, PROT_READ | PROT_WRITE,
	         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void
dt__unmap_zero(void *p, size_t n)
{
	if (p)
		munmap(p, n ? n : 1);
}

dt_err
dt__rs_init(dt_rstore *t, dt_key key, uint64_t rows, uint64_t lo, uint64_t n,
            size_t width, int nworkers, int sync, const dt_opt *opt)
{
	uint64_t nvals = n * (uint64_t)width;

	memset(t, 0, sizeof(*t));
	if (rows == 0 || rows > DT_RS_MAX_ROWS || width == 0 ||
	    width > DT_RS_MAX_WIDTH || lo > rows || n > rows - lo ||
	    nvals > DT_RS_MAX_VALS || nworkers < 1)
		return dt__fail(DT_ESIZE,
		                "row_sparse table %llu: rows [%llu, %llu) of "
		                "%llu, width %zu (at most %llu rows, width "
		                "%llu, %llu floats a server)",
		                (unsigned long long)key, (unsigned long long)lo,
		                (unsigned long long)(lo + n),
		                (unsigned long long)rows, width,
		                (unsigned long long)DT_RS_MAX_ROWS,
		                (unsigned long long)DT_RS_MAX_WIDTH,
		                (unsigned long long)DT_RS_MAX_VALS);
	t->key = key;
	t->rows = rows;
	t->lo = lo;
	t->n = n;
	t->width = width;
	t->opt = *opt;
	t->nworkers = nworkers;
	t->sync = sync;
	t->val_bytes = (size_t)nvals * sizeof(float);
	t->state_bytes = dt__opt_state_len(opt, (size_t)nvals) * sizeof(float);
	t->val = dt__map_zero(t->val_bytes);
	t->state = t->state_bytes ? dt__map_zero(t->state_bytes) : NULL;
	t->mark = calloc((size_t)(n / 64 + 1), sizeof(uint64_t));
	t->pushed = calloc((size_t)nworkers, 1);
	if (sync && nworkers > 1) {
		t->slot_bytes = (size_t)n * sizeof(uint32_t);
		t->slot = dt__map_zero(t->slot_bytes);
	}
	if (t->val == NULL || (t->state_bytes && t->state == NULL) ||
	    t->mark == NULL || t->pushed == NULL ||
	    (sync && nworkers > 1 && t->slot == NULL)) {
		dt__rs_fini(t);
		return dt__fail(DT_ENOMEM,
		                "row_sparse table %llu: no room for %llu rows "
		                "of width %zu",
		                (unsigned long long)key, (unsigned long long)n,
		                width);
	}
	return DT_OK;
}

uint64_t
dt__rs_plan_bytes(uint64_t n, uint64_t width, int nworkers, int sync,
                  const dt_opt *opt)
{
	uint64_t per_row; /* bytes */

	/* (state is at most 2 floats a value: adam's; 2^40 rows of width
	 * 2^24 would wrap, so the product is checked first) */
	if (width > UINT32_MAX || (width && n > UINT64_MAX / (32 * width)))
		return UINT64_MAX;
	per_row = width * sizeof(float) * (1 + dt__opt_state_len(opt, 1));
	if (sync && nworkers > 1) /* (a slot; a round of every row's sum) */
		per_row +=
		    sizeof(uint32_t) + sizeof(uint64_t) + width * sizeof(float);
	return n * per_row + (n / 64 + 1) * sizeof(uint64_t);
}

void
dt__rs_fini(dt_rstore *t)
{
	dt__unmap_zero(t->val, t->val_bytes);
	dt__unmap_zero(t->state, t->state_bytes);
	dt__unmap_zero(t->slot, t->slot_bytes);
	free(t->mark);
	free(t->pushed);
	free(t->rrow);
	free(t->rsum);
	free(t->prow);
	free(t->pval);
	memset(t, 0, sizeof(*t));
}

void
dt__rs_set_opt(dt_rstore *t, const dt_opt *opt)
{
	/* (the kind is fixed once tables exist; momentum turned on later
	 * finds no state and updates as plain sgd, as the other stores) */
	if (opt->kind == t->opt.kind)
		t->opt = *opt;
}

dt_err
dt__rs_check(dt_rstore *t, const char *op, size_t count, const uint8_t *ids,
             int unique, size_t *bad)
{
	size_t i;
	dt_err err = DT_OK;

	for (i = 0; i < count; i++) {
		uint64_t id = dt__kv_u64_at(ids, i), r = id - t->lo;

		if (id < t->lo || r >= t->n) {
			err = dt__fail(
			    DT_EINVAL,
			    "%s of key %llu: row %llu is out of range (the "
			    "table has %llu rows%s)",
			    op, (unsigned long long)t->key,
			    (unsigned long long)id, (unsigned long long)t->rows,
			    t->n == t->rows ? ""
			                    : "; this server holds others");
			break;
		}
		if (!unique)
			continue;
		if (t->mark[r / 64] & ((uint64_t)1 << (r % 64))) {
			err = dt__fail(DT_EINVAL,
			               "%s of key %llu: row %llu is listed "
			               "twice in one request",
			               op, (unsigned long long)t->key,
			               (unsigned long long)id);
			break;
		}
		t->mark[r / 64] |= (uint64_t)1 << (r % 64);
	}
	/* (the marks go again: zero between calls) */
	for (size_t k = 0; unique && k < i; k++) {
		uint64_t r = dt__kv_u64_at(ids, k) - t->lo;

		t->mark[r / 64] &= ~((uint64_t)1 << (r % 64));
	}
	*bad = i;
	return err;
}

void
dt__rs_gather(const dt_rstore *t, size_t count, const uint8_t *ids, float *out)
{
	size_t w = t->width;

	for (size_t i = 0; i < count; i++) {
		const float *v = t->val + (dt__kv_u64_at(ids, i) - t->lo) * w;

		if (w == 1)
			out[i] = *v;
		else
			memcpy(out + i * w, v, w * sizeof(float));
	}
}

static int
u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Where local row r is among the rows the last round changed, or -1. */
static ptrdiff_t
prev_find(const dt_rstore *t, uint64_t r)
{
	size_t lo = 0, hi = t->nprev;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->prow[mid] == r)
			return (ptrdiff_t)mid;
		if (t->prow[mid] < r)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

void
dt__rs_gather_prev(const dt_rstore *t, size_t count, const uint8_t *ids,
                   float *out)
{
	size_t w = t->width;

	for (size_t i = 0; i < count; i++) {
		uint64_t r = dt__kv_u64_at(ids, i) - t->lo;
		ptrdiff_t k = prev_find(t, r);
		const float *v =
		    k >= 0 ? t->pval + (size_t)k * w : t->val + r * w;

		memcpy(out + i * w, v, w * sizeof(float));
	}
}

/* keep_prev: room for the n rows of the round about to close, made
 * before anything changes, so that a failure leaves the round as it was
 * (-1). */
static int
prev_room(dt_rstore *t, size_t n)
{
	size_t w = t->width, cap;
	uint64_t *pr;
	float *pv;

	if (n <= t->prev_cap)
		return 0;
	cap = DT_MAX(n, t->prev_cap + t->prev_cap / 2);
	if (cap > SIZE_MAX / sizeof(float) / w)
		return -1;
	if ((pr = realloc(t->prow, cap * sizeof(*pr))) == NULL)
		return -1;
	t->prow = pr;
	if ((pv = realloc(t->pval, cap * w * sizeof(*pv))) == NULL)
		return -1;
	t->pval = pv;
	t->prev_cap = cap;
	return 0;
}

/* keep_prev: the values of the rows in t->prow[0..n) (unique; room made)
 * before the round that is about to update them; the copy of the round
 * before goes. */
static void
prev_copy(dt_rstore *t, size_t n)
{
	size_t w = t->width;

	qsort(t->prow, n, sizeof(*t->prow), u64_cmp);
	for (size_t k = 0; k < n; k++)
		memcpy(t->pval + k * w, t->val + t->prow[k] * w,
		       w * sizeof(float));
	t->nprev = n;
}

/* Update local row r with gradient g (the store's rule). */
static inline void
update_row(dt_rstore *t, uint64_t r, const float *g)
{
	size_t w = t->width;

	if (t->opt.kind == DT_OPT_NONE) {
		memcpy(t->val + r * w, g, w * sizeof(float));
		return;
	}
	/* (state: [n*w] momenta or means, then [n*w] variances) */
	dt__opt_apply_range(&t->opt, t->val, g, t->state, t->n * w, r * w, w,
	                    t->steps);
}

void
dt__rs_apply(dt_rstore *t, size_t count, const uint8_t *ids, const float *g)
{
	if (t->opt.kind != DT_OPT_NONE)
		t->steps++;
	for (size_t i = 0; i < count; i++)
		update_row(t, dt__kv_u64_at(ids, i) - t->lo, g + i * t->width);
}

/* Room for n rows in the round. */
static int
round_room(dt_rstore *t, size_t n)
{
	size_t cap = t->round_cap;
	uint64_t *rr;
	float *rs;

	if (n <= cap)
		return 0;
	if (n >= UINT32_MAX)
		return -1;
	cap = DT_MAX(n, cap + cap / 2);
	if (cap > SIZE_MAX / sizeof(float) / t->width)
		return -1;
	if ((rr = realloc(t->rrow, cap * sizeof(*rr))) == NULL)
		return -1;
	t->rrow = rr;
	if ((rs = realloc(t->rsum, cap * t->width * sizeof(*rs))) == NULL)
		return -1;
	t->rsum = rs;
	t->round_cap = cap;
	return 0;
}

dt_err
dt__rs_push_sync(dt_rstore *t, int worker, size_t count, const uint8_t *ids,
                 const float *g, int *closed)
{
	size_t w = t->width;

	*closed = 0;
	if (t->nworkers == 1) { /* the round is this push */
		if (t->keep_prev) {
			if (prev_room(t, count))
				return dt__fail(
				    DT_ENOMEM,
				    "row_sparse push of key %llu: out "
				    "of memory keeping its %zu rows' "
				    "values before the round",
				    (unsigned long long)t->key, count);
			for (size_t i = 0; i < count; i++)
				t->prow[i] = dt__kv_u64_at(ids, i) - t->lo;
			prev_copy(t, count);
		}
		dt__rs_apply(t, count, ids, g);
		*closed = 1;
		return DT_OK;
	}
	/* (the last push's room for the values before the round too: at
	 * most the round's rows and its own) */
	if (round_room(t, t->nround + count) ||
	    (t->keep_prev && t->npushed + 1 == t->nworkers &&
	     prev_room(t, t->nround + count)))
		return dt__fail(DT_ENOMEM,
		                "row_sparse push of key %llu: out of memory "
		                "for the round's %zu rows",
		                (unsigned long long)t->key, t->nround + count);
	for (size_t i = 0; i < count; i++) {
		uint64_t r = dt__kv_u64_at(ids, i) - t->lo;
		uint32_t s = t->slot[r];
		const float *gi = g + i * w;

		if (s == 0) {
			s = (uint32_t)++t->nround;
			t->slot[r] = s;
			t->rrow[s - 1] = r;
			memcpy(t->rsum + (s - 1) * w, gi, w * sizeof(float));
		} else {
			dt__kv_add(t->rsum + (s - 1) * w, gi, w);
		}
	}
	t->pushed[worker] = 1;
	if (++t->npushed < t->nworkers)
		return DT_OK;
	if (t->keep_prev) {
		memcpy(t->prow, t->rrow, t->nround * sizeof(*t->prow));
		prev_copy(t, t->nround);
	}
	if (t->opt.kind != DT_OPT_NONE)
		t->steps++;
	for (size_t k = 0; k < t->nround; k++) {
		update_row(t, t->rrow[k], t->rsum + k * w);
		t->slot[t->rrow[k]] = 0;
	}
	t->nround = 0;
	t->npushed = 0;
	memset(t->pushed, 0, (size_t)t->nworkers);
	*closed = 1;
	return DT_OK;
}

size_t
dt__rs_bytes(const dt_rstore *t)
{
	return t->val_bytes + t->state_bytes + t->slot_bytes +
	       (size_t)(t->n / 64 + 1) * 8 + t->round_cap * (8 + t->width * 4) +
	       t->prev_cap * (8 + t->width * 4);
}
