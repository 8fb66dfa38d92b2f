/*
 * stats.c - the process's counters (KV calls by key, their latency, a
 * server's merge and update time, collectives, training steps), their
 * snapshot into a dt_stats, its wire form for the end-of-job report, and
 * the table and straggler report the scheduler prints from every node's.
 *
 * All counters sit under one lock, taken once per KV call, collective or
 * step: cheap beside the work each stands for. Per key rows stop at
 * DT_STATS_MAX_KEYS (a store of millions of keys is counted in total by
 * batched calls, which never fill the table); later keys are counted as
 * omitted.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/table.h"
#include "common/util.h"
#include "obs/obs.h"

/* ---- histograms ---- */

static int
bucket_of(uint64_t v)
{
	if (v < 8)
		return (int)v;
	int e = 63 - __builtin_clzll(v); /* >= 3 */
	return (e - 2) * 8 + (int)((v >> (e - 3)) & 7);
}

/* The smallest value of bucket i. */
uint64_t
dt__hist_bucket_lo(int i)
{
	if (i < 8)
		return (uint64_t)i;
	int e = i / 8 + 2, sub = i % 8;
	return (8ull + (uint64_t)sub) << (e - 3);
}

void
dt__hist_add(dt__hist *h, uint64_t v)
{
	h->n++;
	h->sum += v;
	if (v > h->max)
		h->max = v;
	h->b[bucket_of(v)]++;
}

uint64_t
dt__hist_quantile_by(uint64_t n, uint64_t max, double q,
                     uint64_t (*count)(const void *, int), const void *h)
{
	uint64_t want, seen = 0;

	if (n == 0)
		return 0;
	want = (uint64_t)ceil(q * (double)n);
	if (want < 1)
		want = 1;
	for (int i = 0; i < DT_HIST_BUCKETS; i++) {
		seen += count(h, i);
		if (seen >= want) {
			uint64_t lo = dt__hist_bucket_lo(i),
			         hi = i + 1 < DT_HIST_BUCKETS
			                  ? dt__hist_bucket_lo(i + 1)
			                  : lo;
			uint64_t mid = lo + (hi - lo) / 2;
			return mid > max ? max : mid;
		}
	}
	return max;
}

static uint64_t
hist_count(const void *h, int i)
{
	return ((const dt__hist *)h)->b[i];
}

uint64_t
dt__hist_quantile(const dt__hist *h, double q)
{
	return dt__hist_quantile_by(h->n, h->max, q, hist_count, h);
}

void
dt__hist_merge(dt__hist *into, const dt__hist *h)
{
	into->n += h->n;
	into->sum += h->sum;
	if (h->max > into->max)
		into->max = h->max;
	for (int i = 0; i < DT_HIST_BUCKETS; i++)
		into->b[i] += h->b[i];
}

/* ---- the process's counters ---- */

typedef struct kstat {
	dt_hnode hn;
	dt_key_stats s;
} kstat;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint64_t start_ns;
	dt_table keys; /* kstat by key */
	uint64_t omitted;
	dt_key_stats batched;
	dt__hist lat[DT_LAT_COUNT];
	uint64_t merges, merge_ns, updates, update_ns;
	uint64_t coll_ops, coll_bytes, coll_ns;
	double coll_bus; /* bytes x the collective's bus factor */
	uint64_t steps, step_ns, comm_ns, forward_ns, backward_ns;
	dt__hist step;
} g; /* (mu) */

static void
start_clock(void)
{
	if (g.start_ns == 0)
		g.start_ns = dt__now_ns();
}

static void
count_key(dt_key_stats *k, int kind, uint64_t out, uint64_t in)
{
	if (kind != DT_LAT_PULL) {
		k->pushes++;
		k->bytes_pushed += out;
	}
	if (kind != DT_LAT_PUSH) {
		k->pulls++;
		k->bytes_pulled += in;
	}
}

void
dt__obs_kv(int kind, uint64_t key, uint64_t out_bytes, uint64_t in_bytes,
           uint64_t ns)
{
	pthread_mutex_lock(&mu);
	start_clock();
	if (kind >= 0 && kind < DT_LAT_COUNT)
		dt__hist_add(&g.lat[kind], ns);
	dt_hnode *h = dt__table_find(&g.keys, key);
	kstat *k = h ? DT_CONTAINER_OF(h, kstat, hn) : NULL;

	if (k == NULL && dt__table_count(&g.keys) < DT_STATS_MAX_KEYS &&
	    (k = calloc(1, sizeof(*k))) != NULL) {
		k->s.key = key;
		dt__table_insert(&g.keys, &k->hn, key);
	}
	if (k)
		count_key(&k->s, kind, out_bytes, in_bytes);
	else
		g.omitted++;
	pthread_mutex_unlock(&mu);
}

void
dt__obs_kv_batch(int kind, uint64_t out_bytes, uint64_t in_bytes, uint64_t ns)
{
	pthread_mutex_lock(&mu);
	start_clock();
	if (kind >= 0 && kind < DT_LAT_COUNT)
		dt__hist_add(&g.lat[kind], ns);
	g.batched.key = DT_STATS_KEY_BATCHED;
	count_key(&g.batched, kind, out_bytes, in_bytes);
	pthread_mutex_unlock(&mu);
}

void
dt__obs_server(int update, int count, uint64_t ns)
{
	pthread_mutex_lock(&mu);
	start_clock();
	if (update) {
		g.updates += count != 0;
		g.update_ns += ns;
	} else {
		g.merges += count != 0;
		g.merge_ns += ns;
	}
	pthread_mutex_unlock(&mu);
}

void
dt__obs_coll(int kind, uint64_t bytes, int ranks, uint64_t ns)
{
	/* NCCL's bus factors: what each rank's link carries per byte of
	 * the result, so that busbw compares with the link's speed. */
	double f = 1.0;

	if (ranks > 1 && kind == DT_EV_COLL_ALLREDUCE)
		f = 2.0 * (ranks - 1) / ranks;
	else if (ranks > 1 && kind == DT_EV_COLL_ALLGATHER)
		f = (double)(ranks - 1) / ranks;
	pthread_mutex_lock(&mu);
	start_clock();
	g.coll_ops++;
	g.coll_bytes += bytes;
	g.coll_ns += ns;
	g.coll_bus += (double)bytes * f;
	pthread_mutex_unlock(&mu);
}

uint64_t
dt_obs_now(void)
{
	return dt__now_ns();
}

void
dt_obs_phase(dt_phase ph, uint64_t t0)
{
	dt__obs_phase_span(ph, t0, dt__now_ns());
}

void
dt__obs_phase_span(dt_phase ph, uint64_t t0, uint64_t now)
{
	static const int kind[] = {DT_EV_TRAIN_STEP,     DT_EV_TRAIN_FORWARD,
	                           DT_EV_TRAIN_BACKWARD, DT_EV_TRAIN_COMM,
	                           DT_EV_TRAIN_UPDATE,   DT_EV_TRAIN_DATA};
	uint64_t ns = now > t0 ? now - t0 : 0;
	static int next_track = DT_TID_MAIN;
	static _Thread_local int track = -1;

	if ((unsigned)ph >= DT_ARRAY_LEN(kind))
		return;
	if (dt__tracing()) {
		if (track < 0) {
			int t = __atomic_fetch_add(&next_track, 1,
			                           __ATOMIC_RELAXED);
			/* (the I/O and executor tracks are not a trainer's) */
			track = t == 0 ? DT_TID_MAIN : t + DT_TID_OTHER - 1;
		}
		if (track < DT_TID_COUNT)
			dt__trace_range(kind[ph], track, t0, now, 0, 0, 0, 0);
	}
	pthread_mutex_lock(&mu);
	start_clock();
	switch (ph) {
	case DT_PHASE_STEP:
		g.steps++;
		g.step_ns += ns;
		dt__hist_add(&g.step, ns);
		break;
	case DT_PHASE_COMM:
		g.comm_ns += ns;
		break;
	case DT_PHASE_FORWARD:
		g.forward_ns += ns;
		break;
	case DT_PHASE_BACKWARD:
		g.backward_ns += ns;
		break;
	default:
		break;
	}
	pthread_mutex_unlock(&mu);
}

int
dt__key_stats_cmp(const void *a, const void *b)
{
	uint64_t x = ((const dt_key_stats *)a)->key,
	         y = ((const dt_key_stats *)b)->key;
	return x < y ? -1 : x > y;
}

static void
latency_of(const dt__hist *h, dt_latency *l)
{
	l->count = h->n;
	l->mean_ns = h->n ? h->sum / h->n : 0;
	l->p50_ns = dt__hist_quantile(h, 0.5);
	l->p99_ns = dt__hist_quantile(h, 0.99);
	l->max_ns = h->max;
}

void
dt__obs_snapshot(dt_stats *s)
{
	size_t nk;

	pthread_mutex_lock(&mu);
	start_clock();
	s->wall_ns = dt__now_ns() - g.start_ns;
	nk = dt__table_count(&g.keys) + (g.batched.key ? 1 : 0);
	s->keys = nk ? calloc(nk, sizeof(*s->keys)) : NULL;
	s->nkeys = 0;
	if (s->keys) {
		dt_table_iter it;

		for (dt_hnode *h = dt__table_first(&g.keys, &it); h;
		     h = dt__table_next(&it))
			s->keys[s->nkeys++] = DT_CONTAINER_OF(h, kstat, hn)->s;
		qsort(s->keys, (size_t)s->nkeys, sizeof(*s->keys),
		      dt__key_stats_cmp);
		if (g.batched.key)
			s->keys[s->nkeys++] = g.batched;
	}
	s->keys_omitted = g.omitted + (s->keys ? 0 : nk);
	for (int i = 0; i < DT_LAT_COUNT; i++)
		latency_of(&g.lat[i], &s->latency[i]);
	s->merges = g.merges;
	s->merge_ns = g.merge_ns;
	s->updates = g.updates;
	s->update_ns = g.update_ns;
	s->coll_ops = g.coll_ops;
	s->coll_bytes = g.coll_bytes;
	s->coll_ns = g.coll_ns;
	s->coll_busbw = g.coll_ns ? g.coll_bus / ((double)g.coll_ns * 1e-9) : 0;
	s->steps = g.steps;
	s->step_ns = g.step_ns;
	s->comm_ns = g.comm_ns;
	s->forward_ns = g.forward_ns;
	s->backward_ns = g.backward_ns;
	s->step_p50_ns = dt__hist_quantile(&g.step, 0.5);
	s->step_p99_ns = dt__hist_quantile(&g.step, 0.99);
	pthread_mutex_unlock(&mu);
}

void
dt__obs_hists(dt__hist lat[DT_LAT_COUNT], dt__hist *step)
{
	pthread_mutex_lock(&mu);
	memcpy(lat, g.lat, sizeof(g.lat));
	*step = g.step;
	pthread_mutex_unlock(&mu);
}

void
dt__obs_stats_local(dt_stats *s)
{
	memset(s, 0, sizeof(*s));
	dt__obs_snapshot(s);
	s->role = 2; /* DT_ROLE_WORKER */
}

void
dt__obs_reset(void)
{
	dt_table_iter it;
	dt_hnode *h;

	pthread_mutex_lock(&mu);
	while ((h = dt__table_first(&g.keys, &it)) != NULL) {
		dt__table_remove(&g.keys, h);
		free(DT_CONTAINER_OF(h, kstat, hn));
	}
	dt__table_fini(&g.keys);
	memset(&g, 0, sizeof(g));
	g.start_ns = dt__now_ns();
	pthread_mutex_unlock(&mu);
}

void
dt_stats_fini(dt_stats *s)
{
	if (s == NULL)
		return;
	free(s->peers);
	free(s->keys);
	s->peers = NULL;
	s->keys = NULL;
	s->npeers = s->nkeys = 0;
}

/* ---- the wire form (REPORT kind 2) ---- */

/* The scalar fields in wire order. */
#define STATS_U64(X)                                                           \
	X(wall_ns)                                                             \
	X(keys_omitted)                                                        \
	X(merges)                                                              \
	X(merge_ns)                                                            \
	X(updates)                                                             \
	X(update_ns)                                                           \
	X(coll_ops)                                                            \
	X(coll_bytes)                                                          \
	X(coll_ns)                                                             \
	X(steps)                                                               \
	X(step_ns)                                                             \
	X(comm_ns)                                                             \
	X(forward_ns)                                                          \
	X(backward_ns)                                                         \
	X(step_p50_ns)                                                         \
	X(step_p99_ns)
#define COUNT_U64(f) +1
#define N_U64        (0 STATS_U64(COUNT_U64))
/* header: id, role, rank, npeers, nkeys (u32 each), busbw (f64 bits),
 * the scalars, 3 latencies of 5, then peers (5 u64) and keys (5 u64). */
#define HEAD_BYTES (5 * 4 + 8 + N_U64 * 8 + DT_LAT_COUNT * 5 * 8)

/* Five u64 at *q, which moves past them (a latency, a peer, a key). */
static void
put5(uint8_t **q, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e)
{
	const uint64_t v[5] = {a, b, c, d, e};

	for (int k = 0; k < 5; k++)
		dt__put_u64(*q + 8 * k, v[k]);
	*q += 40;
}

dt_err
dt__stats_encode(const dt_stats *s, uint8_t **out, size_t *len)
{
	size_t n = HEAD_BYTES + (size_t)s->npeers * 40 + (size_t)s->nkeys * 40;
	uint8_t *p = malloc(n), *q = p;
	uint64_t bits;

	if (p == NULL)
		return dt__fail(DT_ENOMEM, "stats report of %zu bytes", n);
	dt__put_u32(q, (uint32_t)s->id), q += 4;
	dt__put_u32(q, (uint32_t)s->role), q += 4;
	dt__put_u32(q, (uint32_t)s->rank), q += 4;
	dt__put_u32(q, (uint32_t)s->npeers), q += 4;
	dt__put_u32(q, (uint32_t)s->nkeys), q += 4;
	memcpy(&bits, &s->coll_busbw, 8);
	dt__put_u64(q, bits), q += 8;
#define PUT(f) dt__put_u64(q, s->f), q += 8;
	STATS_U64(PUT)
#undef PUT
	for (int i = 0; i < DT_LAT_COUNT; i++) {
		const dt_latency *l = &s->latency[i];

		put5(&q, l->count, l->mean_ns, l->p50_ns, l->p99_ns, l->max_ns);
	}
	for (int i = 0; i < s->npeers; i++) {
		const dt_peer_stats *r = &s->peers[i];

		put5(&q, (uint64_t)r->id, r->msgs_sent, r->bytes_sent,
		     r->msgs_recv, r->bytes_recv);
	}
	for (int i = 0; i < s->nkeys; i++) {
		const dt_key_stats *r = &s->keys[i];

		put5(&q, r->key, r->pushes, r->pulls, r->bytes_pushed,
		     r->bytes_pulled);
	}
	*out = p;
	*len = n;
	return DT_OK;
}

dt_err
dt__stats_decode(const void *buf, size_t len, dt_stats *s)
{
	const uint8_t *q = buf;
	uint32_t npeers, nkeys;
	uint64_t bits;

	memset(s, 0, sizeof(*s));
	if (len < HEAD_BYTES)
		return dt__fail(DT_EPROTO,
		                "stats report of %zu bytes (%d "
		                "at least)",
		                len, HEAD_BYTES);
	s->id = (int)dt__get_u32(q), q += 4;
	s->role = (int)dt__get_u32(q), q += 4;
	s->rank = (int)dt__get_u32(q), q += 4;
	npeers = dt__get_u32(q), q += 4;
	nkeys = dt__get_u32(q), q += 4;
	if (npeers > DT_STATS_MAX_PEERS || nkeys > DT_STATS_MAX_KEYS + 1)
		return dt__fail(DT_EPROTO,
		                "stats report of %u peers and %u keys (%d and "
		                "%d at most)",
		                npeers, nkeys, DT_STATS_MAX_PEERS,
		                DT_STATS_MAX_KEYS + 1);
	if (len != HEAD_BYTES + (size_t)npeers * 40 + (size_t)nkeys * 40)
		return dt__fail(DT_EPROTO,
		                "stats report of %zu bytes for %u peers and %u "
		                "keys",
		                len, npeers, nkeys);
	if (s->role < 0 || s->role > 2 || s->rank < -1 ||
	    s->rank >= DT_MAX_ROLE_NODES || s->id < 0 ||
	    s->id >= DT_STATS_MAX_PEERS)
		return dt__fail(DT_EPROTO,
		                "stats report of node %d (role %d, "
		                "rank %d)",
		                s->id, s->role, s->rank);
	bits = dt__get_u64(q), q += 8;
	memcpy(&s->coll_busbw, &bits, 8);
	if (!isfinite(s->coll_busbw) || s->coll_busbw < 0)
		s->coll_busbw = 0;
#define GET(f) s->f = dt__get_u64(q), q += 8;
	STATS_U64(GET)
#undef GET
	for (int i = 0; i < DT_LAT_COUNT; i++) {
		dt_latency *l = &s->latency[i];
		l->count = dt__get_u64(q);
		l->mean_ns = dt__get_u64(q + 8);
		l->p50_ns = dt__get_u64(q + 16);
		l->p99_ns = dt__get_u64(q + 24);
		l->max_ns = dt__get_u64(q + 32);
		q += 40;
	}
	s->peers = npeers ? calloc(npeers, sizeof(*s->peers)) : NULL;
	s->keys = nkeys ? calloc(nkeys, sizeof(*s->keys)) : NULL;
	if ((npeers && !s->peers) || (nkeys && !s->keys)) {
		dt_stats_fini(s);
		return dt__fail(DT_ENOMEM, "stats report");
	}
	s->npeers = (int)npeers;
	s->nkeys = (int)nkeys;
	for (uint32_t i = 0; i < npeers; i++, q += 40) {
		uint64_t id = dt__get_u64(q);

		if (id >= DT_STATS_MAX_PEERS) {
			dt_stats_fini(s);
			return dt__fail(DT_EPROTO,
			                "stats report naming node %llu",
			                (unsigned long long)id);
		}
		s->peers[i] = (dt_peer_stats){
		    (int)id, dt__get_u64(q + 8), dt__get_u64(q + 16),
		    dt__get_u64(q + 24), dt__get_u64(q + 32)};
	}
	for (uint32_t i = 0; i < nkeys; i++, q += 40)
		s->keys[i] = (dt_key_stats){
		    dt__get_u64(q), dt__get_u64(q + 8), dt__get_u64(q + 16),
		    dt__get_u64(q + 24), dt__get_u64(q + 32)};
	return DT_OK;
}
