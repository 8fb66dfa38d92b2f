/*
 * kv_many.c - checks batched (many-key) calls end to end; run one copy
 * per worker under `dtrain launch` (tests/integration/kv_many.sh).
 *
 *   kv_many sum NKEYS   dist_sync without an optimizer: NKEYS keys of
 *                       64-bit values (high bits set), lengths 1, 3 and
 *                       some at or over the big-array bound (sent key by
 *                       key in the same call); each worker lists them in
 *                       its own order; rounds of push, pull and pushpull
 *                       through both forms (_keys, _many), an empty call;
 *                       every value checked exactly (inputs are small
 *                       integers)
 *   kv_many async NKEYS dist_async with sgd (lr 1): every push applied
 *                       exactly once, whatever the order
 *   kv_many errors      unknown key, key listed twice, another length,
 *                       single-key calls on batched keys and the reverse:
 *                       each refused with its reason, nothing changed,
 *                       and the store keeps serving
 *   kv_many big NKEYS   one-float keys 0..NKEYS-1 (ps-lite's benchmark):
 *                       init, then push, pull and pushpull timed, values
 *                       checked; prints "big: N keys push X ms ..."
 *   kv_many runs NKEYS  NKEYS consecutive one-float keys made by one init
 *                       (each server's share a run, kstore.h): rounds with
 *                       some workers listing them in order (spans), the
 *                       others in reverse (lookups), and a stretch of them;
 *                       sums exact; a pull with two keys swapped served
 *                       as listed; a key listed twice or keys past the
 *                       run's end refused
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dtrain/kv.h"

static int failures;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr,                                        \
			        "kv_many FAILED at line %d: ", __LINE__);      \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			if (++failures > 20)                                   \
				exit(1);                                       \
		}                                                              \
	} while (0)

#define OK(call)                                                               \
	do {                                                                   \
		dt_err e_ = (call);                                            \
		if (e_ != DT_OK) {                                             \
			fprintf(stderr, "kv_many: %s failed at line %d: %s\n", \
			        #call, __LINE__, dt_errmsg());                 \
			exit(1);                                               \
		}                                                              \
	} while (0)

#define FAILS(call, code, text)                                                \
	do {                                                                   \
		dt_err e_ = (call);                                            \
		CHECK(e_ == (code) && strstr(dt_errmsg(), text),               \
		      "%s gave %d (%s), expected %d and \"%s\"", #call,        \
		      (int)e_, dt_errmsg(), (int)(code), text);                \
	} while (0)

/* A 64-bit key of index i: spread over the whole range. */
static dt_key
key_of(size_t i)
{
	return 0x9e3779b97f4a7c15ull * (i + 1) ^ ((uint64_t)i << 40);
}

static size_t bound_;

/* Key i's length: mostly 1, some 3, a few at or past the bound. */
static size_t
len_of(size_t i)
{
	if (i % 97 == 5)
		return bound_ + i % 3; /* key by key, maybe split */
	return i % 4 == 1 ? 3 : 1;
}

static float
grad(int rank, int round, size_t i, size_t j)
{
	return (float)((rank + 1) * (int)((i + j) % 5 + 1) + round);
}

/* A permutation of 0..n-1 for rank (each worker its own order). */
static size_t *
order(size_t n, int rank)
{
	size_t *p = malloc(n * sizeof(*p));
	uint64_t s = 0x1234567ull + (uint64_t)rank * 7919;

	for (size_t i = 0; i < n; i++)
		p[i] = i;
	for (size_t i = n; i > 1; i--) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		size_t j = (size_t)(s >> 33) % i, t = p[i - 1];

		p[i - 1] = p[j];
		p[j] = t;
	}
	return p;
}

typedef struct set {
	size_t n, total;
	dt_key *keys;
	size_t *lens, *off; /* off: into vals, in this set's order */
	float *vals, *outs;
	const float **pv;
	float **po;
	size_t *idx; /* the key index of each position */
} set;

static void
set_make(set *s, size_t n, int rank)
{
	size_t *p = order(n, rank);

	s->n = n;
	s->keys = malloc(n * sizeof(dt_key));
	s->lens = malloc(n * sizeof(size_t));
	s->off = malloc(n * sizeof(size_t));
	s->pv = malloc(n * sizeof(float *));
	s->po = malloc(n * sizeof(float *));
	s->idx = p;
	s->total = 0;
	for (size_t k = 0; k < n; k++) {
		s->keys[k] = key_of(p[k]);
		s->lens[k] = len_of(p[k]);
		s->off[k] = s->total;
		s->total += s->lens[k];
	}
	s->vals = malloc(s->total * sizeof(float));
	s->outs = malloc(s->total * sizeof(float));
	for (size_t k = 0; k < n; k++) {
		s->pv[k] = s->vals + s->off[k];
		s->po[k] = s->outs + s->off[k];
	}
}

static void
set_free(set *s)
{
	free(s->keys);
	free(s->lens);
	free(s->off);
	free(s->vals);
	free(s->outs);
	free(s->pv);
	free(s->po);
	free(s->idx);
}

static void
fill_grads(set *s, int rank, int round)
{
	for (size_t k = 0; k < s->n; k++)
		for (size_t j = 0; j < s->lens[k]; j++)
			s->vals[s->off[k] + j] =
			    grad(rank, round, s->idx[k], j);
}

/* Every value of s->outs is the round's sum over nw workers (or, with
 * init_round < 0, the initial value). */
static void
check_outs(set *s, int nw, int round, const char *what)
{
	for (size_t k = 0; k < s->n; k++)
		for (size_t j = 0; j < s->lens[k]; j++) {
			float want = 0;

			if (round < 0)
				want = (float)(s->idx[k] % 1000) + (float)j;
			else
				for (int r = 0; r < nw; r++)
					want += grad(r, round, s->idx[k], j);
			float got = s->outs[s->off[k] + j];
			CHECK(got == want,
			      "%s: key %llu [%zu] = %g, expected %g (round %d)",
			      what, (unsigned long long)s->keys[k], j,
			      (double)got, (double)want, round);
		}
}

static void
run_sum(dt_kv *kv, size_t nkeys)
{
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	set s;

	set_make(&s, nkeys, rank);
	for (size_t k = 0; k < s.n; k++) /* rank 0's wins */
		for (size_t j = 0; j < s.lens[k]; j++)
			s.vals[s.off[k] + j] =
			    rank == 0 ? (float)(s.idx[k] % 1000) + (float)j
			              : -1.0f;
	OK(dt_kv_init_keys(kv, s.n, s.keys, s.vals, s.lens));
	OK(dt_kv_pull_many(kv, s.n, s.keys, s.po, s.lens));
	check_outs(&s, nw, -1, "pull after init");
	OK(dt_kv_push_keys(kv, 0, NULL, NULL, NULL)); /* an empty call */
	for (int round = 0; round < 4; round++) {
		fill_grads(&s, rank, round);
		memset(s.outs, 0, s.total * sizeof(float));
		switch (round) {
		case 0:
			OK(dt_kv_push_keys(kv, s.n, s.keys, s.vals, s.lens));
			OK(dt_kv_pull_keys(kv, s.n, s.keys, s.outs, s.lens));
			break;
		case 1:
			OK(dt_kv_pushpull_keys(kv, s.n, s.keys, s.vals, s.outs,
			                       s.lens));
			break;
		case 2:
			OK(dt_kv_push_many(kv, s.n, s.keys, s.pv, s.lens));
			OK(dt_kv_pull_many(kv, s.n, s.keys, s.po, s.lens));
			break;
		default: /* in place, as MXNet's pushpull(out=grad) */
			OK(dt_kv_pushpull_many(kv, s.n, s.keys, s.pv,
			                       (float *const *)s.pv, s.lens));
			memcpy(s.outs, s.vals, s.total * sizeof(float));
		}
		check_outs(&s, nw, round, "round");
	}
	/* One-float keys through the lens-NULL form, a subset. */
	size_t m = 0;
	for (size_t k = 0; k < s.n; k++)
		if (s.lens[k] == 1)
			s.keys[m] = s.keys[k], s.idx[m] = s.idx[k],
			s.lens[m] = 1, s.off[m] = m, m++;
	s.n = m;
	fill_grads(&s, rank, 9);
	OK(dt_kv_pushpull_keys(kv, m, s.keys, s.vals, s.outs, NULL));
	check_outs(&s, nw, 9, "one-float keys");
	OK(dt_kv_barrier(kv));
	printf("kv_many sum: %zu keys, 5 rounds, %d workers: exact\n", nkeys,
	       nw);
	set_free(&s);
}

static void
run_async(dt_kv *kv, size_t nkeys)
{
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	int pushes = 20;
	set s;

	OK(dt_kv_set_optimizer(kv, "sgd", "lr=1"));
	set_make(&s, nkeys, rank);
	memset(s.vals, 0, s.total * sizeof(float));
	OK(dt_kv_init_keys(kv, s.n, s.keys, s.vals, s.lens));
	for (int p = 0; p < pushes; p++) {
		fill_grads(&s, rank, p);
		if (p % 2)
			OK(dt_kv_push_keys(kv, s.n, s.keys, s.vals, s.lens));
		else
			OK(dt_kv_pushpull_keys(kv, s.n, s.keys, s.vals, s.outs,
			                       s.lens));
	}
	OK(dt_kv_barrier(kv));
	OK(dt_kv_pull_keys(kv, s.n, s.keys, s.outs, s.lens));
	for (size_t k = 0; k < s.n; k++)
		for (size_t j = 0; j < s.lens[k]; j++) {
			float want = 0;

			for (int r = 0; r < nw; r++)
				for (int p = 0; p < pushes; p++)
					want -= grad(r, p, s.idx[k], j);
			CHECK(s.outs[s.off[k] + j] == want,
			      "async: key %llu [%zu] = %g, expected %g",
			      (unsigned long long)s.keys[k], j,
			      (double)s.outs[s.off[k] + j], (double)want);
		}
	OK(dt_kv_barrier(kv));
	printf("kv_many async: %zu keys, %d pushes by %d workers: every "
	       "push applied once\n",
	       nkeys, pushes, nw);
	set_free(&s);
}

static void
run_errors(dt_kv *kv)
{
	/* (all on one server for 1, 2 or 3 servers: a part refused changes
	 * nothing on its server; other servers' parts are their own) */
	dt_key k[4] = {101, 107, 113, 119}, unknown[2] = {101, 999995};
	dt_key dup[3] = {107, 101, 107};
	size_t lens[4] = {1, 2, 1, 3}, bad_lens[2] = {1, 5},
	       dup_lens[3] = {2, 1, 2};
	float v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];

	OK(dt_kv_init_keys(kv, 4, k, v, lens));
	OK(dt_kv_init(kv, 555, v, 2));
	FAILS(dt_kv_pull_keys(kv, 2, unknown, out, NULL), DT_ENOKEY,
	      "key 999995: unknown key");
	FAILS(dt_kv_push_keys(kv, 2, unknown, v, NULL), DT_ENOKEY,
	      "key 999995: unknown key");
	FAILS(dt_kv_push_keys(kv, 3, dup, v, dup_lens), DT_EINVAL,
	      "key 107 is listed twice");
	/* keys sent one by one (past the bound) are checked too */
	dt_key big[2] = {9001, 9001};
	size_t big_lens[2] = {bound_ + 1, bound_ + 1};
	float *bv = calloc(2 * (bound_ + 1), sizeof(float));
	FAILS(dt_kv_push_keys(kv, 2, big, bv, big_lens), DT_EINVAL,
	      "key 9001 is listed twice");
	free(bv);
	FAILS(dt_kv_pull_keys(kv, 2, k, out, bad_lens), DT_ESIZE,
	      "key 107: length 5 != initialised length 2");
	FAILS(dt_kv_push_keys(kv, 2, k, v, bad_lens), DT_ESIZE,
	      "key 107: length 5 != initialised length 2");
	FAILS(dt_kv_init(kv, 113, v, 2), DT_ESIZE,
	      "key 113: length 2 != initialised length 1");
	OK(dt_kv_init(kv, 113, v + 3, 1)); /* rank 0 sets it again */
	FAILS(dt_kv_pull_keys(kv, 1, k, NULL, NULL), DT_EINVAL,
	      "outputs are NULL");
	/* Nothing changed: rank 0's values are still there. */
	OK(dt_kv_barrier(kv));
	OK(dt_kv_pull_keys(kv, 4, k, out, lens));
	for (int i = 0; i < 7; i++)
		CHECK(out[i] == v[i], "after the errors: value %d = %g", i,
		      (double)out[i]);
	/* Keys of either kind through either kind of call. */
	int nw = dt_kv_num_workers(kv);
	float g[3] = {1, 2, 3}, o1 = 0, o2[2] = {0, 0};
	dt_key single = 555;
	size_t two = 2;
	OK(dt_kv_push(kv, 101, g, 1));
	OK(dt_kv_pull(kv, 101, &o1, 1));
	CHECK(o1 == (float)nw, "single-key push of a batched key: %g",
	      (double)o1);
	OK(dt_kv_pushpull(kv, 107, g, o2, 2));
	CHECK(o2[1] == 2.0f * (float)nw, "single-key pushpull: %g",
	      (double)o2[1]);
	OK(dt_kv_pushpull_keys(kv, 1, &single, g, o2, &two));
	CHECK(o2[0] == (float)nw && o2[1] == 2.0f * (float)nw,
	      "batched pushpull of a single-key key: %g %g", (double)o2[0],
	      (double)o2[1]);
	OK(dt_kv_barrier(kv));
	printf("kv_many errors: each refused and named, store unchanged; "
	       "single-key and batched calls on keys of either kind\n");
}

static void
run_big(dt_kv *kv, size_t n)
{
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	dt_key *keys = malloc(n * sizeof(*keys));
	float *v = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
	double t[3];

	for (size_t i = 0; i < n; i++) {
		keys[i] = i;
		v[i] = (float)(i % 100);
	}
	OK(dt_kv_init_keys(kv, n, keys, v, NULL));
	for (size_t i = 0; i < n; i++)
		v[i] = (float)((rank + 1) * (int)(i % 10));
	uint64_t t0 = dt__now_ns();
	OK(dt_kv_push_keys(kv, n, keys, v, NULL));
	uint64_t t1 = dt__now_ns();
	OK(dt_kv_pull_keys(kv, n, keys, out, NULL));
	uint64_t t2 = dt__now_ns();
	float want = 0;
	for (int r = 0; r < nw; r++)
		want += (float)(r + 1);
	for (size_t i = 0; i < n; i++)
		CHECK(out[i] == want * (float)(i % 10),
		      "big: key %zu = %g, expected %g", i, (double)out[i],
		      (double)(want * (float)(i % 10)));
	OK(dt_kv_pushpull_keys(kv, n, keys, v, out, NULL));
	uint64_t t3 = dt__now_ns();
	t[0] = (double)(t1 - t0) / 1e6;
	t[1] = (double)(t2 - t1) / 1e6;
	t[2] = (double)(t3 - t2) / 1e6;
	if (rank == 0)
		printf(
		    "kv_many big: %zu keys push %.1f ms pull %.1f ms pushpull "
		    "%.1f ms\n",
		    n, t[0], t[1], t[2]);
	OK(dt_kv_barrier(kv));
	free(keys);
	free(v);
	free(out);
}

/* Keys B + i (i < n) made by one init; see the head. */
static void
run_runs(dt_kv *kv, size_t n)
{
	const dt_key base = (dt_key)1 << 40;
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	dt_key *keys = malloc((n + 100) * sizeof(*keys)), *rev;
	float *v = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
	float *vr = malloc(n * sizeof(float)), sum = 0;

	rev = malloc(n * sizeof(*rev));
	for (size_t i = 0; i < n + 100; i++)
		keys[i] = base + i;
	for (size_t i = 0; i < n; i++) {
		rev[i] = keys[n - 1 - i];
		v[i] = (float)(i % 7);
	}
	OK(dt_kv_init_keys(kv, n, keys, v, NULL));
	for (int r = 0; r < nw; r++)
		sum += (float)(r + 1);
	/* a round: even ranks in order, odd ranks in reverse */
	for (size_t i = 0; i < n; i++)
		v[i] = (float)((rank + 1) * (int)(i % 7));
	for (size_t i = 0; i < n; i++)
		vr[i] = v[n - 1 - i];
	if (rank % 2 == 0)
		OK(dt_kv_push_keys(kv, n, keys, v, NULL));
	else
		OK(dt_kv_push_keys(kv, n, rev, vr, NULL));
	OK(dt_kv_pull_keys(kv, n, keys, out, NULL));
	for (size_t i = 0; i < n; i++)
		CHECK(out[i] == sum * (float)(i % 7), "runs: key %zu = %g", i,
		      (double)out[i]);
	/* a pushpull the other way round */
	if (rank % 2 == 1)
		OK(dt_kv_pushpull_keys(kv, n, keys, v, out, NULL));
	else {
		OK(dt_kv_pushpull_keys(kv, n, rev, vr, out, NULL));
		for (size_t i = 0; i < n / 2; i++) {
			float t = out[i];

			out[i] = out[n - 1 - i];
			out[n - 1 - i] = t;
		}
	}
	for (size_t i = 0; i < n; i++)
		CHECK(out[i] == sum * (float)(i % 7),
		      "runs pushpull: key %zu = %g", i, (double)out[i]);
	/* a stretch of the run, in order, by every worker */
	size_t from = n / 3, m = n / 3;
	OK(dt_kv_push_keys(kv, m, keys + from, v + from, NULL));
	OK(dt_kv_pull_keys(kv, n, keys, out, NULL));
	for (size_t i = 0; i < n; i++)
		CHECK(out[i] == sum * (float)(i % 7), "runs stretch: key %zu",
		      i);
	/* Every d-th key of the run (d = 2, 3: ranges of other steps, on
	 * one server or split over all, an odd count) pushed and pulled:
	 * the same sums. */
	for (size_t d = 2; d <= 3; d++) {
		size_t nd = ((n - 2) / d) | 1;
		dt_key *kd = malloc(nd * sizeof(*kd));
		float *vd = malloc(nd * sizeof(float)),
		      *od = malloc(nd * sizeof(float));

		for (size_t i = 0; i < nd; i++) {
			kd[i] = base + 1 + d * i;
			vd[i] = v[1 + d * i];
		}
		OK(dt_kv_push_keys(kv, nd, kd, vd, NULL));
		OK(dt_kv_pull_keys(kv, nd, kd, od, NULL));
		for (size_t i = 0; i < nd; i++)
			CHECK(od[i] == sum * (float)((1 + d * i) % 7),
			      "runs, every %zu-th key: key %zu = %g", d,
			      1 + d * i, (double)od[i]);
		OK(dt_kv_pushpull_keys(kv, nd, kd, vd, od, NULL));
		for (size_t i = 0; i < nd; i++)
			CHECK(od[i] == sum * (float)((1 + d * i) % 7),
			      "runs, every %zu-th key, pushpull: key %zu", d,
			      1 + d * i);
		free(kd);
		free(vd);
		free(od);
	}
	/* Two keys of one server swapped, then one of them listed twice:
	 * that server's part keeps its first and last keys and its count,
	 * so only the check of every key finds that it is no span. */
	const char *ns_env = getenv("DMLC_NUM_SERVER");
	size_t ns = ns_env ? (size_t)strtoul(ns_env, NULL, 10) : 1;
	keys[150] = base + 150 + ns;
	keys[150 + ns] = base + 150;
	OK(dt_kv_pull_keys(kv, 300, keys, out, NULL));
	for (size_t i = 0; i < 300; i++)
		CHECK(out[i] == sum * (float)((keys[i] - base) % 7),
		      "runs, two keys swapped: key %zu", i);
	keys[150] = base + 150 - ns;
	FAILS(dt_kv_pull_keys(kv, 300, keys, out, NULL), DT_EINVAL,
	      "listed twice");
	keys[150] = base + 150;
	keys[150 + ns] = base + 150 + ns;
	/* refused whole: keys past the run's end */
	FAILS(dt_kv_pull_keys(kv, 200, keys + n - 100, out, NULL), DT_ENOKEY,
	      "unknown key");
	OK(dt_kv_pull_keys(kv, n, keys, out, NULL));
	for (size_t i = 0; i < n; i++)
		CHECK(out[i] == sum * (float)(i % 7),
		      "runs after refusals: "
		      "key %zu",
		      i);
	OK(dt_kv_barrier(kv));
	if (rank == 0)
		printf("kv_many runs: %zu keys in order and reversed, a "
		       "stretch, every 2nd and 3rd key, refusals named\n",
		       n);
	free(keys);
	free(rev);
	free(v);
	free(vr);
	free(out);
}

int
main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	const char *type = getenv("KV_MANY_TYPE");
	const char *b = getenv("MXNET_KVSTORE_BIGARRAY_BOUND");
	size_t n = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 1000;
	dt_kv *kv;

	bound_ = b ? (size_t)strtoull(b, NULL, 10) : 1000000;
	if (!strcmp(mode, "async") && !type)
		type = "dist_async";
	OK(dt_kv_create(type ? type : "dist_sync", &kv));
	if (!strcmp(mode, "sum"))
		run_sum(kv, n);
	else if (!strcmp(mode, "async"))
		run_async(kv, n);
	else if (!strcmp(mode, "errors"))
		run_errors(kv);
	else if (!strcmp(mode, "big"))
		run_big(kv, n);
	else if (!strcmp(mode, "runs"))
		run_runs(kv, n);
	else {
		fprintf(stderr,
		        "usage: kv_many sum|async|errors|big|runs [N]\n");
		return 2;
	}
	OK(dt_kv_destroy(kv));
	if (failures)
		fprintf(stderr, "kv_many: %d failures\n", failures);
	return failures ? 1 : 0;
}
