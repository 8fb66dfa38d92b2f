/*
 * merge.c - a subtree's end-of-job counters in one block of bounded size
 * (merge.h): a node's counters added, two blocks merged, and the wire form
 * a node sends its tree parent (REPORT kind 4). merge_report.c prints one.
 *
 * Every part merges so that the order and grouping of the merges do not
 * matter: sums, maxima, histograms bucket by bucket, the smallest keys of
 * the union (a key among the smallest of all the subtrees' keys is among
 * the smallest of any part that holds it), the smallest missing ids and
 * the top rows in one total order (the figure, then the id).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/util.h"
#include "obs/merge.h"

/* ---- histograms ---- */

static void
mhist_add_hist(dt__mhist *m, const dt__hist *h)
{
	m->n += h->n;
	m->sum += h->sum;
	if (h->max > m->max)
		m->max = h->max;
	for (int i = 0; i < DT_HIST_BUCKETS; i++)
		m->b[i] += h->b[i];
}

static void
mhist_merge(dt__mhist *into, const dt__mhist *m)
{
	into->n += m->n;
	into->sum += m->sum;
	if (m->max > into->max)
		into->max = m->max;
	for (int i = 0; i < DT_HIST_BUCKETS; i++)
		into->b[i] += m->b[i];
}

static uint64_t
mhist_count(const void *h, int i)
{
	return ((const dt__mhist *)h)->b[i];
}

uint64_t
dt__mhist_quantile(const dt__mhist *h, double q)
{
	return dt__hist_quantile_by(h->n, h->max, q, mhist_count, h);
}

/* ---- the top rows ---- */

/* Whether a goes before b: the larger figure, then the smaller id. */
static int
top_before(const dt__mtop *a, const dt__mtop *b)
{
	return a->rank > b->rank || (a->rank == b->rank && a->id < b->id);
}

/* Put row r among the DT_MERGE_TOP first of v (*n rows, in order). */
static void
top_insert(dt__mtop *v, uint32_t *n, const dt__mtop *r)
{
	uint32_t at = *n;

	while (at > 0 && top_before(r, &v[at - 1]))
		at--;
	if (at >= DT_MERGE_TOP)
		return;
	uint32_t last = *n < DT_MERGE_TOP ? *n : DT_MERGE_TOP - 1;

	memmove(&v[at + 1], &v[at], (last - at) * sizeof(*v));
	v[at] = *r;
	if (*n < DT_MERGE_TOP)
		(*n)++;
}

/* ---- a node's counters ---- */

void
dt__merged_init(dt__merged *m)
{
	memset(m, 0, sizeof(*m));
}

static void
add_traffic(dt__merged *m, const dt_stats *s, int (*role_of)(void *arg, int id),
            void *arg)
{
	for (int i = 0; i < s->npeers; i++) {
		const dt_peer_stats *p = &s->peers[i];
		int r = role_of(arg, p->id);
		uint64_t *t;

		if (r < 0 || r >= DT_MERGE_ROLES)
			continue;
		t = m->traffic[s->role][r];
		t[DT_MT_MSGS_SENT] += p->msgs_sent;
		t[DT_MT_BYTES_SENT] += p->bytes_sent;
		t[DT_MT_MSGS_RECV] += p->msgs_recv;
		t[DT_MT_BYTES_RECV] += p->bytes_recv;
	}
}

/* Merge the sorted rows a (na) and b (nb) into out (the smallest
 * DT_STATS_MAX_KEYS keys; the calls on the others go to *omitted). */
static uint32_t
keys_union(const dt_key_stats *a, uint32_t na, const dt_key_stats *b,
           uint32_t nb, dt_key_stats *out, uint64_t *omitted)
{
	uint32_t i = 0, j = 0, k = 0;

	while (i < na || j < nb) {
		dt_key_stats r;

		if (j >= nb || (i < na && a[i].key < b[j].key)) {
			r = a[i++];
		} else if (i >= na || b[j].key < a[i].key) {
			r = b[j++];
		} else {
			r = a[i++];
			r.pushes += b[j].pushes;
			r.pulls += b[j].pulls;
			r.bytes_pushed += b[j].bytes_pushed;
			r.bytes_pulled += b[j].bytes_pulled;
			j++;
		}
		if (k < DT_STATS_MAX_KEYS)
			out[k++] = r;
		else
			*omitted += r.pushes + r.pulls;
	}
	return k;
}

static void
add_batched(dt_key_stats *into, const dt_key_stats *r)
{
	into->key = DT_STATS_KEY_BATCHED;
	into->pushes += r->pushes;
	into->pulls += r->pulls;
	into->bytes_pushed += r->bytes_pushed;
	into->bytes_pulled += r->bytes_pulled;
}

/* A worker's key rows (ascending, batched last) into m's table. */
static void
add_keys(dt__merged *m, const dt_stats *s)
{
	dt_key_stats *tmp = malloc(sizeof(m->keys));
	uint32_t n = 0;

	for (int i = 0; i < s->nkeys; i++) {
		if (s->keys[i].key == DT_STATS_KEY_BATCHED)
			add_batched(&m->batched, &s->keys[i]);
		else
			n = (uint32_t)i + 1; /* (the batched row is last) */
	}
	m->keys_omitted += s->keys_omitted;
	if (tmp == NULL) { /* (out of memory: counted, not kept) */
		for (uint32_t i = 0; i < n; i++)
			m->keys_omitted += s->keys[i].pushes + s->keys[i].pulls;
		return;
	}
	m->nkeys =
	    keys_union(m->keys, m->nkeys, s->keys, n, tmp, &m->keys_omitted);
	memcpy(m->keys, tmp, m->nkeys * sizeof(*tmp));
	free(tmp);
}

static uint64_t
bytes_recv(const dt_stats *s)
{
	uint64_t b = 0;

	for (int i = 0; i < s->npeers; i++)
		b += s->peers[i].bytes_recv;
	return b;
}

/* A worker's and a server's own parts. */
static void
add_worker(dt__merged *m, const dt_stats *s, const dt__hist *lat,
           const dt__hist *step)
{
	add_keys(m, s);
	for (int k = 0; lat && k < DT_LAT_COUNT; k++)
		mhist_add_hist(&m->lat[k], &lat[k]);
	if (step)
		mhist_add_hist(&m->step, step);
	m->steps += s->steps;
	m->step_ns += s->step_ns;
	m->comm_ns += s->comm_ns;
	m->forward_ns += s->forward_ns;
	m->backward_ns += s->backward_ns;
	if (s->steps == 0)
		return;
	dt__hist p50 = {0};

	dt__hist_add(&p50, s->step_p50_ns);
	mhist_add_hist(&m->worker_p50, &p50);
	dt__mtop r = {s->id,
	              s->step_p50_ns,
	              {s->steps, s->step_p99_ns, s->comm_ns, s->step_ns}};
	top_insert(m->slow, &m->nslow, &r);
}

static void
add_server(dt__merged *m, const dt_stats *s)
{
	m->merges += s->merges;
	m->merge_ns += s->merge_ns;
	m->updates += s->updates;
	m->update_ns += s->update_ns;
	dt__mtop r = {s->id,
	              bytes_recv(s),
	              {s->merges, s->updates, s->merge_ns + s->update_ns, 0}};
	top_insert(m->busy, &m->nbusy, &r);
}

void
dt__merged_add_node(dt__merged *m, const dt_stats *s,
                    const dt__hist lat[DT_LAT_COUNT], const dt__hist *step,
                    int (*role_of)(void *arg, int id), void *arg)
{
	if (s->role < 0 || s->role >= DT_MERGE_ROLES)
		return;
	m->nodes[s->role]++;
	if (s->wall_ns > m->wall_max_ns)
		m->wall_max_ns = s->wall_ns;
	add_traffic(m, s, role_of, arg);
	if (s->role == 0)
		return; /* (the scheduler: its traffic only) */
	if (s->role == 2)
		add_worker(m, s, lat, step);
	else
		add_server(m, s);
	if (s->coll_ops) {
		m->coll_ops += s->coll_ops;
		m->coll_bytes += s->coll_bytes;
		m->coll_ns += s->coll_ns;
		m->coll_nodes++;
		m->coll_busbw_sum += s->coll_busbw;
	}
}

/* Put id among the smallest DT_MERGE_MISSING of m->missing. */
static void
missing_insert(dt__merged *m, int32_t id)
{
	uint32_t at = m->nmissing;

	while (at > 0 && id < m->missing[at - 1])
		at--;
	if (at >= DT_MERGE_MISSING || (at > 0 && m->missing[at - 1] == id))
		return; /* (kept ascending, each id once, as decoded) */
	uint32_t last =
	    m->nmissing < DT_MERGE_MISSING ? m->nmissing : DT_MERGE_MISSING - 1;

	memmove(&m->missing[at + 1], &m->missing[at],
	        (last - at) * sizeof(m->missing[0]));
	m->missing[at] = id;
	if (m->nmissing < DT_MERGE_MISSING)
		m->nmissing++;
}

void
dt__merged_missing(dt__merged *m, int id, int nodes)
{
	m->missing_nodes += (uint32_t)(nodes > 0 ? nodes : 0);
	missing_insert(m, id);
}

/* ---- merging two ---- */

static void
merge_keys(dt__merged *into, const dt__merged *m)
{
	dt_key_stats *tmp = malloc(sizeof(into->keys));

	if (m->batched.key)
		add_batched(&into->batched, &m->batched);
	into->keys_omitted += m->keys_omitted;
	if (tmp == NULL) {
		for (uint32_t i = 0; i < m->nkeys; i++)
			into->keys_omitted +=
			    m->keys[i].pushes + m->keys[i].pulls;
		return;
	}
	into->nkeys = keys_union(into->keys, into->nkeys, m->keys, m->nkeys,
	                         tmp, &into->keys_omitted);
	memcpy(into->keys, tmp, into->nkeys * sizeof(*tmp));
	free(tmp);
}

void
dt__merged_merge(dt__merged *into, const dt__merged *m)
{
	for (int r = 0; r < DT_MERGE_ROLES; r++) {
		into->nodes[r] += m->nodes[r];
		for (int p = 0; p < DT_MERGE_ROLES; p++)
			for (int k = 0; k < 4; k++)
				into->traffic[r][p][k] += m->traffic[r][p][k];
	}
	into->missing_nodes += m->missing_nodes;
	for (uint32_t i = 0; i < m->nmissing; i++)
		missing_insert(into, m->missing[i]);
	if (m->wall_max_ns > into->wall_max_ns)
		into->wall_max_ns = m->wall_max_ns;
	merge_keys(into, m);
	for (int k = 0; k < DT_LAT_COUNT; k++)
		mhist_merge(&into->lat[k], &m->lat[k]);
	into->merges += m->merges;
	into->merge_ns += m->merge_ns;
	into->updates += m->updates;
	into->update_ns += m->update_ns;
	into->coll_ops += m->coll_ops;
	into->coll_bytes += m->coll_bytes;
	into->coll_ns += m->coll_ns;
	into->coll_nodes += m->coll_nodes;
	into->coll_busbw_sum += m->coll_busbw_sum;
	into->steps += m->steps;
	into->step_ns += m->step_ns;
	into->comm_ns += m->comm_ns;
	into->forward_ns += m->forward_ns;
	into->backward_ns += m->backward_ns;
	mhist_merge(&into->step, &m->step);
	mhist_merge(&into->worker_p50, &m->worker_p50);
	for (uint32_t i = 0; i < m->nslow; i++)
		top_insert(into->slow, &into->nslow, &m->slow[i]);
	for (uint32_t i = 0; i < m->nbusy; i++)
		top_insert(into->busy, &into->nbusy, &m->busy[i]);
}

/* ---- the wire form (REPORT kind 4) ---- */

/* The fixed part: 8 counts (u32), the missing ids (u32 each), then u64s:
 * wall, traffic, the batched row (5) and keys omitted, 5 histograms of
 * 3 + DT_HIST_BUCKETS, 4 server figures, 4 collectives' and their busbw
 * (f64 bits), 5 phase sums, then the top rows (id u32 + 5 u64 each);
 * the key rows (5 u64 each) follow. */
#define HIST_U64  (3 + DT_HIST_BUCKETS)
#define TOP_BYTES (4 + 5 * 8)
#define FIXED_U64 (1 + 36 + 6 + 5 * HIST_U64 + 4 + 5 + 5)
#define HEAD_BYTES                                                             \
	(8 * 4 + DT_MERGE_MISSING * 4 + FIXED_U64 * 8 +                        \
	 2 * DT_MERGE_TOP * TOP_BYTES)

size_t
dt__merged_max_bytes(void)
{
	return HEAD_BYTES + (size_t)DT_STATS_MAX_KEYS * 40;
}

typedef struct wcur {
	uint8_t *q;
} wcur;

static void
w64(wcur *w, uint64_t v)
{
	dt__put_u64(w->q, v);
	w->q += 8;
}

static void
w32(wcur *w, uint32_t v)
{
	dt__put_u32(w->q, v);
	w->q += 4;
}

static void
w_hist(wcur *w, const dt__mhist *h)
{
	w64(w, h->n);
	w64(w, h->sum);
	w64(w, h->max);
	for (int i = 0; i < DT_HIST_BUCKETS; i++)
		w64(w, h->b[i]);
}

static void
w_key(wcur *w, const dt_key_stats *k)
{
	w64(w, k->key);
	w64(w, k->pushes);
	w64(w, k->pulls);
	w64(w, k->bytes_pushed);
	w64(w, k->bytes_pulled);
}

static void
w_tops(wcur *w, const dt__mtop *v, uint32_t n)
{
	for (uint32_t i = 0; i < DT_MERGE_TOP; i++) {
		dt__mtop r = i < n ? v[i] : (dt__mtop){0};

		w32(w, (uint32_t)r.id);
		w64(w, r.rank);
		for (int k = 0; k < 4; k++)
			w64(w, r.f[k]);
	}
}

static void
w_scalars(wcur *w, const dt__merged *m)
{
	uint64_t bits;

	w64(w, m->wall_max_ns);
	for (int r = 0; r < DT_MERGE_ROLES; r++)
		for (int p = 0; p < DT_MERGE_ROLES; p++)
			for (int k = 0; k < 4; k++)
				w64(w, m->traffic[r][p][k]);
	w_key(w, &m->batched);
	w64(w, m->keys_omitted);
	for (int k = 0; k < DT_LAT_COUNT; k++)
		w_hist(w, &m->lat[k]);
	w_hist(w, &m->step);
	w_hist(w, &m->worker_p50);
	w64(w, m->merges);
	w64(w, m->merge_ns);
	w64(w, m->updates);
	w64(w, m->update_ns);
	w64(w, m->coll_ops);
	w64(w, m->coll_bytes);
	w64(w, m->coll_ns);
	w64(w, m->coll_nodes);
	memcpy(&bits, &m->coll_busbw_sum, 8);
	w64(w, bits);
	w64(w, m->steps);
	w64(w, m->step_ns);
	w64(w, m->comm_ns);
	w64(w, m->forward_ns);
	w64(w, m->backward_ns);
}

dt_err
dt__merged_encode(const dt__merged *m, uint8_t **out, size_t *len)
{
	size_t n;
	uint8_t *p;

	if (m->nkeys > DT_STATS_MAX_KEYS || m->nmissing > DT_MERGE_MISSING ||
	    m->nslow > DT_MERGE_TOP || m->nbusy > DT_MERGE_TOP)
		return dt__fail(DT_EINVAL,
		                "merged report of %u keys, %u missing ids, "
		                "%u and %u top rows: over its bounds",
		                m->nkeys, m->nmissing, m->nslow, m->nbusy);
	n = HEAD_BYTES + (size_t)m->nkeys * 40;
	if (n > dt__merged_max_bytes() || (p = malloc(n)) == NULL)
		return dt__fail(DT_ENOMEM, "merged report of %zu bytes", n);
	wcur w = {p};

	for (int r = 0; r < DT_MERGE_ROLES; r++)
		w32(&w, m->nodes[r]);
	w32(&w, m->missing_nodes);
	w32(&w, m->nmissing);
	w32(&w, m->nkeys);
	w32(&w, m->nslow);
	w32(&w, m->nbusy);
	for (int i = 0; i < DT_MERGE_MISSING; i++)
		w32(&w, (uint32_t)(i < (int)m->nmissing ? m->missing[i] : 0));
	w_scalars(&w, m);
	w_tops(&w, m->slow, m->nslow);
	w_tops(&w, m->busy, m->nbusy);
	for (uint32_t i = 0; i < m->nkeys; i++)
		w_key(&w, &m->keys[i]);
	*out = p;
	*len = n;
	return DT_OK;
}

/* ---- decoding: every count checked before use ---- */

typedef struct rcur {
	const uint8_t *q;
} rcur;

static uint64_t
r64(rcur *r)
{
	uint64_t v = dt__get_u64(r->q);

	r->q += 8;
	return v;
}

static uint32_t
r32(rcur *r)
{
	uint32_t v = dt__get_u32(r->q);

	r->q += 4;
	return v;
}

/* A histogram whose buckets add up to its count (else quantiles lie). */
static dt_err
r_hist(rcur *r, dt__mhist *h, const char *what)
{
	uint64_t total = 0;

	h->n = r64(r);
	h->sum = r64(r);
	h->max = r64(r);
	for (int i = 0; i < DT_HIST_BUCKETS; i++) {
		h->b[i] = r64(r);
		if (h->b[i] > UINT64_MAX - total)
			return dt__fail(DT_EPROTO,
			                "merged report: %s histogram overflows",
			                what);
		total += h->b[i];
	}
	if (total != h->n)
		return dt__fail(DT_EPROTO,
		                "merged report: %s histogram of %llu values "
		                "holds %llu",
		                what, (unsigned long long)h->n,
		                (unsigned long long)total);
	return DT_OK;
}

static void
r_key(rcur *r, dt_key_stats *k)
{
	k->key = r64(r);
	k->pushes = r64(r);
	k->pulls = r64(r);
	k->bytes_pushed = r64(r);
	k->bytes_pulled = r64(r);
}

static dt_err
r_tops(rcur *r, dt__mtop *v, uint32_t n, const char *what)
{
	for (uint32_t i = 0; i < DT_MERGE_TOP; i++) {
		dt__mtop t;

		t.id = (int32_t)r32(r);
		t.rank = r64(r);
		for (int k = 0; k < 4; k++)
			t.f[k] = r64(r);
		if (i >= n)
			continue;
		if (t.id < 0 || t.id >= DT_MAX_NODES)
			return dt__fail(DT_EPROTO,
			                "merged report: %s row naming node %d",
			                what, (int)t.id);
		v[i] = t;
	}
	return DT_OK;
}

static dt_err
r_scalars(rcur *r, dt__merged *m)
{
	static const char *const lat[] = {"push", "pull", "pushpull"};
	uint64_t bits;
	dt_err err;

	m->wall_max_ns = r64(r);
	for (int a = 0; a < DT_MERGE_ROLES; a++)
		for (int p = 0; p < DT_MERGE_ROLES; p++)
			for (int k = 0; k < 4; k++)
				m->traffic[a][p][k] = r64(r);
	r_key(r, &m->batched);
	if (m->batched.key != 0 && m->batched.key != DT_STATS_KEY_BATCHED)
		return dt__fail(DT_EPROTO,
		                "merged report: a batched row of "
		                "key %llu",
		                (unsigned long long)m->batched.key);
	m->keys_omitted = r64(r);
	for (int k = 0; k < DT_LAT_COUNT; k++)
		if ((err = r_hist(r, &m->lat[k], lat[k])))
			return err;
	if ((err = r_hist(r, &m->step, "step")) ||
	    (err = r_hist(r, &m->worker_p50, "workers' step p50")))
		return err;
	m->merges = r64(r);
	m->merge_ns = r64(r);
	m->updates = r64(r);
	m->update_ns = r64(r);
	m->coll_ops = r64(r);
	m->coll_bytes = r64(r);
	m->coll_ns = r64(r);
	m->coll_nodes = r64(r);
	bits = r64(r);
	memcpy(&m->coll_busbw_sum, &bits, 8);
	if (!isfinite(m->coll_busbw_sum) || m->coll_busbw_sum < 0)
		m->coll_busbw_sum = 0;
	m->steps = r64(r);
	m->step_ns = r64(r);
	m->comm_ns = r64(r);
	m->forward_ns = r64(r);
	m->backward_ns = r64(r);
	return DT_OK;
}

/* The counts at the head, against their bounds. */
static dt_err
r_counts(rcur *r, dt__merged *m, size_t len)
{
	uint64_t total = 0;

	for (int a = 0; a < DT_MERGE_ROLES; a++)
		total += m->nodes[a] = r32(r);
	m->missing_nodes = r32(r);
	m->nmissing = r32(r);
	m->nkeys = r32(r);
	m->nslow = r32(r);
	m->nbusy = r32(r);
	if (total + m->missing_nodes > DT_MAX_NODES ||
	    m->nmissing > DT_MERGE_MISSING || m->nkeys > DT_STATS_MAX_KEYS ||
	    m->nslow > DT_MERGE_TOP || m->nbusy > DT_MERGE_TOP)
		return dt__fail(DT_EPROTO,
		                "merged report of %llu nodes and %u missing, "
		                "%u missing ids, %u keys, %u and %u top rows: "
		                "over the bounds",
		                (unsigned long long)total, m->missing_nodes,
		                m->nmissing, m->nkeys, m->nslow, m->nbusy);
	if (len != HEAD_BYTES + (size_t)m->nkeys * 40)
		return dt__fail(DT_EPROTO,
		                "merged report of %zu bytes for %u keys", len,
		                m->nkeys);
	for (int i = 0; i < DT_MERGE_MISSING; i++) {
		int32_t id = (int32_t)r32(r);

		if (i >= (int)m->nmissing)
			continue;
		if (id < 0 || id >= DT_MAX_NODES ||
		    (i > 0 && id <= m->missing[i - 1]))
			return dt__fail(DT_EPROTO,
			                "merged report: missing id %d out of "
			                "range or order",
			                (int)id);
		m->missing[i] = id;
	}
	return DT_OK;
}

dt_err
dt__merged_decode(const void *buf, size_t len, dt__merged *m)
{
	rcur r = {buf};
	dt_err err;

	/* (the length first: a block too short or too long costs nothing) */
	if (len < HEAD_BYTES || len > dt__merged_max_bytes())
		return dt__fail(DT_EPROTO,
		                "merged report of %zu bytes (%d to %zu)", len,
		                HEAD_BYTES, dt__merged_max_bytes());
	dt__merged_init(m);
	if ((err = r_counts(&r, m, len)) || (err = r_scalars(&r, m)) ||
	    (err = r_tops(&r, m->slow, m->nslow, "slowest worker")) ||
	    (err = r_tops(&r, m->busy, m->nbusy, "busiest server")))
		goto fail;
	for (uint32_t i = 0; i < m->nkeys; i++) {
		r_key(&r, &m->keys[i]);
		if (m->keys[i].key == DT_STATS_KEY_BATCHED ||
		    (i > 0 && m->keys[i].key <= m->keys[i - 1].key)) {
			err = dt__fail(DT_EPROTO,
			               "merged report: key row %u out of "
			               "order",
			               i);
			goto fail;
		}
	}
	return DT_OK;
fail:
	dt__merged_init(m);
	return err;
}
