/*
 * kstore_test.c - the many-key store (kv/kstore.h) and the batched
 * request body (kv/kv_msg.c): lookups against a model through growth and
 * adversarial keys, every refusal changing nothing (duplicates among new
 * and old keys, another length, an unknown key), dist_sync rounds and
 * their completions, dist_async with an optimizer against the same kernel
 * on a plain array, requests that list a run of keys in init's order
 * (spans: what is one and what is not, and their rounds bit for bit as key
 * by key), the body decoder's limits, and the division-free key
 * placement (common/util.h) against %.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/util.h"
#include "kv/kstore.h"

static uint64_t
rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static const dt_opt no_opt = {.kind = DT_OPT_NONE};

/* Keys as the wire has them (u64 little-endian). */
static uint8_t *
wire_keys(const uint64_t *k, size_t n)
{
	uint8_t *w = malloc(8 * (n ? n : 1));

	for (size_t i = 0; i < n; i++)
		dt__put_u64(w + 8 * i, k[i]);
	return w;
}

static void
test_lookup_model(void **state)
{
	(void)state;
	dt_kstore ks;
	size_t n = 200000, bad;
	uint64_t *keys = malloc(n * sizeof(*keys)), s = 88172645463325252ull;
	uint32_t *idx = malloc(n * sizeof(*idx));
	float *v = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));

	dt__ks_init(&ks, 1, 0, &no_opt);
	/* runs of consecutive keys, strided keys, random keys, 0, ~0 */
	for (size_t i = 0; i < n; i++) {
		keys[i] = i < n / 4    ? i
		          : i < n / 2  ? (uint64_t)i << 20
		          : i < n - 2  ? rng(&s)
		          : i == n - 2 ? UINT64_MAX
		                       : 0x8000000000000000ull;
		v[i] = (float)i;
	}
	/* added in pieces: the index and arrays grow under the lookups */
	for (size_t at = 0; at < n;) {
		size_t m = DT_MIN(n - at, 1 + at / 2);
		uint8_t *w = wire_keys(keys + at, m);
		dt_ks_lens one = {NULL, 1};

		assert_int_equal(
		    dt__ks_resolve(&ks, "init", m, w, &one, 1, idx, &bad),
		    DT_OK);
		dt__ks_set(&ks, idx, m, v + at);
		free(w);
		at += m;
	}
	assert_int_equal(ks.nrec, n);
	/* every key found, in a shuffled order, its value its own */
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)(rng(&s) % (i + 1));
		uint64_t t = keys[i];
		float tv = v[i];

		keys[i] = keys[j];
		keys[j] = t;
		v[i] = v[j];
		v[j] = tv;
	}
	uint8_t *w = wire_keys(keys, n);
	dt_ks_lens one = {NULL, 1};
	assert_int_equal(dt__ks_resolve(&ks, "pull", n, w, &one, 0, idx, &bad),
	                 DT_OK);
	dt__ks_gather(&ks, idx, n, out);
	assert_memory_equal(out, v, n * sizeof(float));
	for (size_t i = 0; i < n; i += 997)
		assert_int_equal(dt__ks_find(&ks, keys[i]), idx[i]);
	assert_int_equal(dt__ks_find(&ks, 12345678901ull), DT_KS_NONE);
	/* memory: the store's arrays per key, beside its value */
	assert_true(dt__ks_bytes(&ks) - 4 * n < 64 * n);
	free(w);
	dt__ks_fini(&ks);
	free(keys);
	free(idx);
	free(v);
	free(out);
}

static void
test_refusals_change_nothing(void **state)
{
	(void)state;
	dt_kstore ks;
	uint32_t idx[8];
	size_t bad;
	uint64_t k0[3] = {10, 20, 30};
	uint8_t l0[12];
	float v0[6] = {1, 2, 3, 4, 5, 6}, out[8];

	dt__ks_init(&ks, 1, 0, &no_opt);
	memset(l0, 0, sizeof(l0));
	l0[0] = 1, l0[4] = 2, l0[8] = 3; /* lengths 1, 2, 3 */
	dt_ks_lens lens = {l0, 0};
	uint8_t *w = wire_keys(k0, 3);
	assert_int_equal(dt__ks_resolve(&ks, "init", 3, w, &lens, 1, idx, &bad),
	                 DT_OK);
	dt__ks_set(&ks, idx, 3, v0);
	free(w);

	/* new keys with one listed twice: none of them stays */
	uint64_t k1[4] = {40, 50, 40, 60};
	dt_ks_lens one = {NULL, 1};
	w = wire_keys(k1, 4);
	assert_int_equal(dt__ks_resolve(&ks, "init", 4, w, &one, 1, idx, &bad),
	                 DT_EINVAL);
	assert_int_equal(bad, 2);
	assert_non_null(strstr(dt_errmsg(), "key 40 is listed twice"));
	assert_int_equal(ks.nrec, 3);
	for (int i = 0; i < 4; i++)
		assert_int_equal(dt__ks_find(&ks, k1[i]), DT_KS_NONE);
	free(w);
	/* an old key twice, another length, an unknown key */
	uint64_t k2[3] = {20, 10, 20};
	uint8_t l2[12] = {2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0};
	dt_ks_lens lens2 = {l2, 0};
	w = wire_keys(k2, 3);
	assert_int_equal(
	    dt__ks_resolve(&ks, "push", 3, w, &lens2, 0, idx, &bad), DT_EINVAL);
	assert_int_equal(bad, 2);
	free(w);
	uint64_t k3[2] = {10, 30};
	w = wire_keys(k3, 2);
	assert_int_equal(dt__ks_resolve(&ks, "push", 2, w, &one, 0, idx, &bad),
	                 DT_ESIZE);
	assert_non_null(
	    strstr(dt_errmsg(), "key 30: length 1 != initialised length 3"));
	free(w);
	uint64_t k4[2] = {10, 77};
	w = wire_keys(k4, 2);
	assert_int_equal(dt__ks_resolve(&ks, "pull", 2, w, &one, 0, idx, &bad),
	                 DT_ENOKEY);
	assert_int_equal(bad, 1);
	free(w);
	/* the marks of refused calls are gone: the same keys pass now */
	w = wire_keys(k0, 3);
	assert_int_equal(dt__ks_resolve(&ks, "pull", 3, w, &lens, 0, idx, &bad),
	                 DT_OK);
	dt__ks_gather(&ks, idx, 3, out);
	assert_memory_equal(out, v0, sizeof(v0));
	free(w);
	/* a new key's length must be 1 or more */
	uint64_t k5 = 99;
	dt_ks_lens zero = {NULL, 0};
	w = wire_keys(&k5, 1);
	assert_int_equal(dt__ks_resolve(&ks, "init", 1, w, &zero, 1, idx, &bad),
	                 DT_ESIZE);
	free(w);
	dt__ks_fini(&ks);
}

typedef struct done_log {
	int n;
	uint32_t h[16];
	size_t per[16]; /* keys told by handle (on_count) */
} done_log;

/* (for calls of many keys: counts only) */
static void
on_count(void *arg, uint32_t h, size_t n)
{
	done_log *d = arg;

	assert_true(h > 0 && h < 16);
	d->n += (int)n;
	d->per[h] += n;
}

static void
on_done(void *arg, uint32_t h, size_t n)
{
	done_log *d = arg;

	while (n--)
		d->h[d->n++] = h;
}

static void
test_sync_rounds(void **state)
{
	(void)state;
	dt_kstore ks;
	uint32_t idx[3];
	size_t bad;
	uint64_t k[3] = {5, 6, 7};
	float z[3] = {0, 0, 0}, out[3];
	dt_ks_lens one = {NULL, 1};
	done_log d = {0};
	uint8_t *w = wire_keys(k, 3);

	dt__ks_init(&ks, 3, 1, &no_opt);
	assert_int_equal(dt__ks_resolve(&ks, "init", 3, w, &one, 1, idx, &bad),
	                 DT_OK);
	dt__ks_set(&ks, idx, 3, z);
	/* worker 0 pushes keys 5, 6, 7; worker 1 keys 7, 5; worker 2 all */
	float g0[3] = {1, 2, 3}, g1[2] = {10, 30}, g2[3] = {100, 200, 300};
	uint32_t i1[2] = {idx[2], idx[0]};
	dt__ks_push_sync(&ks, 0, 1, idx, 3, g0, NULL, 0, on_done, &d);
	assert_int_equal(d.n, 0);
	assert_true(dt__ks_pending(&ks, 0, idx, 3, &bad));
	assert_false(dt__ks_pending(&ks, 1, idx, 3, &bad));
	dt__ks_push_sync(&ks, 1, 2, i1, 2, g1, NULL, 0, on_done, &d);
	assert_int_equal(d.n, 0);
	dt__ks_push_sync(&ks, 2, 3, idx, 3, g2, NULL, 0, on_done, &d);
	/* keys 5 and 7 closed (3 pushes each, one done per push), key 6
	 * waits for worker 1 */
	assert_int_equal(d.n, 6);
	dt__ks_gather(&ks, idx, 3, out);
	assert_true(out[0] == 131.0f && out[1] == 0.0f && out[2] == 313.0f);
	float g1b = 20;
	dt__ks_push_sync(&ks, 1, 4, &idx[1], 1, &g1b, NULL, 0, on_done, &d);
	assert_int_equal(d.n, 9);
	dt__ks_gather(&ks, idx, 3, out);
	assert_true(out[1] == 222.0f);
	assert_false(dt__ks_pending(&ks, 0, idx, 3, &bad));
	free(w);
	dt__ks_fini(&ks);
}

static void
test_async_optimizer(void **state)
{
	(void)state;
	dt_kstore ks;
	dt_opt adam;
	uint32_t idx[2];
	size_t bad;
	uint64_t k[2] = {1, 2};
	uint8_t l[8] = {3, 0, 0, 0, 2, 0, 0, 0};
	dt_ks_lens lens = {l, 0};
	float v[5] = {1, 2, 3, 4, 5}, ref[5], st[10] = {0}, out[5];
	float g[5] = {0.5f, -1, 2, 0.25f, -3};

	assert_int_equal(dt__opt_parse("adam", "lr=0.1", &adam), DT_OK);
	dt__ks_init(&ks, 2, 0, &adam);
	uint8_t *w = wire_keys(k, 2);
	assert_int_equal(dt__ks_resolve(&ks, "init", 2, w, &lens, 1, idx, &bad),
	                 DT_OK);
	dt__ks_set(&ks, idx, 2, v);
	memcpy(ref, v, sizeof(v));
	for (uint64_t t = 1; t <= 3; t++) {
		dt__ks_apply(&ks, idx, 2, g);
		/* the reference: each key its own array, state and steps */
		dt__opt_apply(&adam, ref, g, st, 3, t);
		dt__opt_apply(&adam, ref + 3, g + 3, st + 6, 2, t);
	}
	dt__ks_gather(&ks, idx, 2, out);
	assert_memory_equal(out, ref, sizeof(ref));
	free(w);
	dt__ks_fini(&ks);
}

/* count keys k0, k0 + d, ... initialised in one call as records of len
 * floats (values v, or zeros). */
static void
init_run(dt_kstore *ks, uint64_t k0, uint64_t d, size_t count, uint32_t len)
{
	uint64_t *k = malloc(count * sizeof(*k));
	uint32_t *idx = malloc(count * sizeof(*idx));
	float *v = calloc(count * len, sizeof(float));
	dt_ks_lens l = {NULL, len};
	size_t bad;

	for (size_t i = 0; i < count; i++)
		k[i] = k0 + d * i;
	uint8_t *w = wire_keys(k, count);
	assert_int_equal(dt__ks_resolve(ks, "init", count, w, &l, 1, idx, &bad),
	                 DT_OK);
	dt__ks_set(ks, idx, count, v);
	free(w);
	free(k);
	free(idx);
	free(v);
}

/* Whether the count keys k (of length len each) are a span, and if so
 * that it names each key's own record. */
static int
span_of(dt_kstore *ks, const uint64_t *k, size_t count, uint32_t len)
{
	uint8_t *w = wire_keys(k, count);
	dt_ks_lens l = {NULL, len};
	uint32_t first = DT_KS_NONE;
	int r = dt__ks_span(ks, count, w, &l, &first);

	for (size_t i = 0; r && i < count; i++)
		assert_int_equal(dt__ks_find(ks, k[i]), first + (uint32_t)i);
	free(w);
	return r;
}

static void
test_spans(void **state)
{
	(void)state;
	dt_kstore ks;
	size_t n = 1000, bad;
	uint64_t k[1000];
	uint32_t idx[1000];
	dt_ks_lens one = {NULL, 1};

	dt__ks_init(&ks, 1, 1, &no_opt);
	init_run(&ks, 1000, 1, n, 1); /* keys 1000..1999 */
	init_run(&ks, 5000, 3, n, 2); /* keys 5000, 5003, ... of 2 floats */
	/* a run whole, a stretch of it, every key of the strided one */
	for (size_t i = 0; i < n; i++)
		k[i] = 1000 + i;
	assert_true(span_of(&ks, k, n, 1));
	assert_true(span_of(&ks, k + 100, 200, 1));
	for (size_t i = 0; i < n; i++)
		k[i] = 5000 + 3 * i;
	assert_true(span_of(&ks, k, n, 2));
	assert_true(span_of(&ks, k + 900, 100, 2));
	/* not spans: another length, every other key of a run, past its
	 * end, out of order, one key listed twice, one unknown, keys that
	 * wrap around 2^64 */
	assert_false(span_of(&ks, k, n, 1));
	for (size_t i = 0; i < 400; i++)
		k[i] = 1000 + 2 * i;
	assert_false(span_of(&ks, k, 400, 1));
	for (size_t i = 0; i < 200; i++)
		k[i] = 1900 + i;
	assert_false(span_of(&ks, k, 200, 1));
	for (size_t i = 0; i < 200; i++)
		k[i] = 1199 - i;
	assert_false(span_of(&ks, k, 200, 1));
	for (size_t i = 0; i < 200; i++)
		k[i] = 1000 + i;
	k[150] = 1149; /* (and 1150 missing) */
	assert_false(span_of(&ks, k, 200, 1));
	uint8_t *w = wire_keys(k, 200);
	assert_int_equal(
	    dt__ks_resolve(&ks, "push", 200, w, &one, 0, idx, &bad), DT_EINVAL);
	assert_int_equal(bad, 150);
	free(w);
	k[150] = 777777;
	assert_false(span_of(&ks, k, 200, 1));
	for (size_t i = 0; i < 200; i++)
		k[i] = UINT64_MAX - 99 + i; /* (100 is 0 again) */
	assert_false(span_of(&ks, k, 200, 1));
	/* keys of several runs are no span; their lookups still work */
	for (size_t i = 0; i < 200; i++)
		k[i] = i < 100 ? 1900 + i : 5000 + 3 * (i - 100);
	assert_false(span_of(&ks, k, 200, 1));
	dt__ks_fini(&ks);
}

/* Key ranges: dt__kv_key_step finds the step of a progression and only
 * of one; a range (k0, d, count) is a span exactly when the same keys
 * listed are, naming the same records. */
static void
test_key_ranges(void **state)
{
	(void)state;
	dt_kstore ks;
	uint64_t k[1000];
	uint32_t f1, f2;
	dt_ks_lens one = {NULL, 1}, two = {NULL, 2};

	for (size_t i = 0; i < 600; i++)
		k[i] = 7 + 5 * i;
	uint8_t *w = wire_keys(k, 600);
	assert_int_equal(dt__kv_key_step(w, 600), 5);
	assert_int_equal(dt__kv_key_step(w, 2), 5);
	assert_int_equal(dt__kv_key_step(w, 1), 0);
	dt__put_u64(w + 8 * 321, 1); /* (key 321 off) */
	assert_int_equal(dt__kv_key_step(w, 600), 0);
	free(w);
	k[0] = UINT64_MAX - 1; /* (then 2 wraps to 0: no progression) */
	k[1] = UINT64_MAX;
	k[2] = 0;
	w = wire_keys(k, 3);
	assert_int_equal(dt__kv_key_step(w, 3), 0);
	assert_int_equal(dt__kv_key_step(w, 2), 1);
	free(w);
	for (size_t i = 0; i < 600; i++)
		k[i] = 600 - i; /* (down: no step) */
	w = wire_keys(k, 600);
	assert_int_equal(dt__kv_key_step(w, 600), 0);
	free(w);

	dt__ks_init(&ks, 1, 1, &no_opt);
	init_run(&ks, 1000, 1, 1000, 1); /* keys 1000..1999 */
	init_run(&ks, 5000, 3, 1000, 2); /* keys 5000, 5003 ... of 2 */
	struct {
		uint64_t k0, d;
		size_t n;
		uint32_t len;
	} c[] = {
	    {1000, 1, 1000, 1},          {1100, 1, 200, 1},  {5000, 3, 1000, 2},
	    {5000 + 3 * 900, 3, 100, 2}, {5000, 3, 1000, 1}, {1000, 2, 400, 1},
	    {1900, 1, 200, 1},           {1000, 1, 63, 1},   {999, 1, 100, 1}};
	for (size_t x = 0; x < sizeof(c) / sizeof(c[0]); x++) {
		for (size_t i = 0; i < c[x].n; i++)
			k[i] = c[x].k0 + c[x].d * i;
		w = wire_keys(k, c[x].n);
		int listed = dt__ks_span(&ks, c[x].n, w,
		                         c[x].len == 1 ? &one : &two, &f1);
		int range = dt__ks_span_range(&ks, c[x].n, c[x].k0, c[x].d,
		                              c[x].len, &f2);
		assert_int_equal(listed, range);
		assert_int_equal(range, x < 4);
		if (range)
			assert_int_equal(f1, f2);
		free(w);
	}
	assert_false(dt__ks_span_range(&ks, 100, 1000, 0, 1, &f1));
	dt__ks_fini(&ks);
}

/* dist_async with sgd (momentum, clipping, weight decay): a span applied
 * in one call equals key by key bit for bit, values, momentum and step
 * counts. */
static void
test_span_sgd(void **state)
{
	(void)state;
	enum { N = 200 };
	dt_kstore a, b;
	dt_opt sgd;
	uint64_t k[N];
	uint32_t idx[N], first;
	float g[N], va[N];
	dt_ks_lens one = {NULL, 1};
	size_t bad;

	assert_int_equal(dt__opt_parse("sgd",
	                               "lr=0.3,momentum=0.9,wd=0.01,"
	                               "clip_gradient=2",
	                               &sgd),
	                 DT_OK);
	for (size_t i = 0; i < N; i++) {
		k[i] = 10 + 3 * i;
		g[i] = (float)((int)(i % 11) - 5) / 3.0f;
	}
	dt__ks_init(&a, 2, 0, &sgd);
	dt__ks_init(&b, 2, 0, &sgd);
	init_run(&a, 10, 3, N, 1);
	init_run(&b, 10, 3, N, 1);
	uint8_t *w = wire_keys(k, N);
	assert_int_equal(dt__ks_resolve(&a, "push", N, w, &one, 0, idx, &bad),
	                 DT_OK);
	assert_true(dt__ks_span(&b, N, w, &one, &first));
	for (int r = 0; r < 3; r++) {
		dt__ks_apply(&a, idx, N, g);
		dt__ks_apply_span(&b, first, N, g);
	}
	dt__ks_gather(&a, idx, N, va);
	assert_memory_equal(va, dt__ks_val(&b, first), sizeof(va));
	assert_memory_equal(a.state, b.state, N * sizeof(float));
	assert_memory_equal(a.steps, b.steps, N * sizeof(uint32_t));
	free(w);
	dt__ks_fini(&a);
	dt__ks_fini(&b);
}

/* The same dist_sync rounds through spans as key by key: the same values
 * bit for bit, and every push told once per key - when one push closes
 * only some of a span's rounds, too. */
static void
test_span_rounds(void **state)
{
	(void)state;
	enum { N = 300, H = 120 };
	dt_kstore a, b;
	uint64_t k[N];
	uint32_t idx[N], first;
	float g[3][N], va[N], vb[N];
	done_log da = {0}, db = {0};
	dt_ks_lens one = {NULL, 1};
	size_t bad;

	for (size_t i = 0; i < N; i++) {
		k[i] = 40 + 2 * i; /* (one server's share of 2) */
		for (int x = 0; x < 3; x++)
			g[x][i] = 1.0f / (float)(i + 3 + x) * (x ? -1e3f : 1);
	}
	dt__ks_init(&a, 3, 1, &no_opt);
	dt__ks_init(&b, 3, 1, &no_opt);
	init_run(&a, 40, 2, N, 1);
	init_run(&b, 40, 2, N, 1);
	uint8_t *w = wire_keys(k, N);
	assert_int_equal(dt__ks_resolve(&a, "push", N, w, &one, 0, idx, &bad),
	                 DT_OK);
	assert_true(dt__ks_span(&b, N, w, &one, &first));
	/* worker 1 pushes the first H keys alone; workers 0 and 2 all of
	 * them (2's closes H rounds, then the rest wait for 1's second) */
	dt__ks_push_sync(&a, 1, 1, idx, H, g[1], NULL, 0, on_count, &da);
	dt__ks_push_sync_span(&b, 1, 1, first, H, g[1], NULL, on_count, &db);
	dt__ks_push_sync(&a, 0, 2, idx, N, g[0], NULL, 0, on_count, &da);
	dt__ks_push_sync_span(&b, 0, 2, first, N, g[0], NULL, on_count, &db);
	assert_true(dt__ks_pending_span(&b, 0, first, N, &bad));
	assert_int_equal(da.n, 0);
	assert_int_equal(db.n, 0);
	dt__ks_push_sync(&a, 2, 3, idx, N, g[2], NULL, 0, on_count, &da);
	dt__ks_push_sync_span(&b, 2, 3, first, N, g[2], NULL, on_count, &db);
	assert_int_equal(db.n, 3 * H);
	dt__ks_push_sync(&a, 1, 4, idx + H, N - H, g[1] + H, NULL, 0, on_count,
	                 &da);
	dt__ks_push_sync_span(&b, 1, 4, first + H, N - H, g[1] + H, NULL,
	                      on_count, &db);
	assert_int_equal(db.n, 3 * N);
	assert_int_equal(da.n, db.n);
	for (int x = 0; x < 5; x++)
		assert_int_equal(da.per[x], db.per[x]);
	assert_false(dt__ks_pending_span(&b, 0, first, N, &bad));
	assert_false(dt__ks_pending(&b, 1, idx, N, &bad));
	dt__ks_gather(&a, idx, N, va);
	memcpy(vb, dt__ks_val(&b, first), sizeof(vb));
	assert_memory_equal(va, vb, sizeof(va));
	/* a round of all three as spans: the sums again, and each handle
	 * told N times */
	for (int x = 0; x < 3; x++)
		dt__ks_push_sync_span(&b, x, (uint32_t)(5 + x), first, N, g[x],
		                      NULL, on_count, &db);
	for (int x = 0; x < 3; x++)
		dt__ks_push_sync(&a, x, (uint32_t)(5 + x), idx, N, g[x], NULL,
		                 0, on_count, &da);
	for (int x = 5; x < 8; x++)
		assert_int_equal(db.per[x], N);
	dt__ks_gather(&a, idx, N, va);
	assert_memory_equal(va, dt__ks_val(&b, first), sizeof(va));
	/* dist_async: a span applied as key by key */
	dt__ks_apply(&a, idx, N, g[2]);
	dt__ks_apply_span(&b, first, N, g[2]);
	dt__ks_gather(&a, idx, N, va);
	assert_memory_equal(va, dt__ks_val(&b, first), sizeof(va));
	free(w);
	dt__ks_fini(&a);
	dt__ks_fini(&b);
}

static void
test_decode_limits(void **state)
{
	(void)state;
	uint8_t body[64] = {0};
	dt_kv_many b;
	dt_msg_hdr h = {.cmd = DT_CMD_KV_PUSH_MANY, .arg0 = 2, .arg1 = 1};

	/* 2 keys of 1 float: 16 + 8 bytes */
	h.payload_len = 24;
	assert_int_equal(dt__kv_many_decode(&h, body, &b), DT_OK);
	assert_int_equal(b.count, 2);
	assert_int_equal(b.nvals, 2);
	h.payload_len = 23;
	assert_int_equal(dt__kv_many_decode(&h, body, &b), DT_ESIZE);
	h.payload_len = 28;
	assert_int_equal(dt__kv_many_decode(&h, body, &b), DT_ESIZE);
	/* a count past the limit, before anything is read */
	h.arg0 = DT_KS_MAX_KEYS + 1;
	assert_int_equal(dt__kv_many_decode(&h, body, &b), DT_ESIZE);
	/* lengths per key: a zero length is refused */
	h.arg0 = 2;
	h.arg1 = 0;
	dt__put_u32(body + 16, 3);
	dt__put_u32(body + 20, 0);
	h.payload_len = 16 + 8 + 12;
	assert_int_equal(dt__kv_many_decode(&h, body, &b), DT_ESIZE);
	dt__put_u32(body + 20, 1);
	h.payload_len = 16 + 8 + 16;
	assert_int_equal(dt__kv_many_decode(&h, body, &b), DT_OK);
	assert_int_equal(b.nvals, 4);
	/* a pull carries no values; compressed bodies are refused */
	h.cmd = DT_CMD_KV_PULL_MANY;
	h.payload_len = 24;
	assert_int_equal(dt__kv_many_decode(&h, body, &b), DT_OK);
	assert_null(b.vals);
	h.arg2 = DT_QUANT_2BIT;
	assert_int_equal(dt__kv_many_decode(&h, body, &b), DT_EPROTO);
	h.arg2 = (uint64_t)DT_QUANT_FP16 << 8;
	assert_int_equal(dt__kv_many_decode(&h, body, &b), DT_OK);
	assert_int_equal(b.answer, DT_QUANT_FP16);
	h.cmd = DT_CMD_KV_PUSH;
	assert_int_equal(dt__kv_many_decode(&h, body, &b), DT_EPROTO);
}

static void
test_fastmod(void **state)
{
	(void)state;
	uint64_t s = 0x2545F4914F6CDD1Dull;
	uint64_t ds[] = {1, 2, 3, 5, 7, 64, 1000, 65535, 4294967295ull};

	for (size_t j = 0; j < sizeof(ds) / sizeof(*ds); j++) {
		dt_fastmod f = dt__fastmod_of(ds[j]);
		uint64_t edge[] = {0,     1,          ds[j] - 1,
		                   ds[j], UINT64_MAX, UINT64_MAX - 1};

		for (size_t e = 0; e < 6; e++)
			assert_int_equal(dt__fastmod(&f, edge[e]),
			                 edge[e] % ds[j]);
		for (int i = 0; i < 100000; i++) {
			uint64_t k = rng(&s);

			assert_int_equal(dt__fastmod(&f, k), k % ds[j]);
		}
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lookup_model),
	    cmocka_unit_test(test_refusals_change_nothing),
	    cmocka_unit_test(test_sync_rounds),
	    cmocka_unit_test(test_async_optimizer),
	    cmocka_unit_test(test_spans),
	    cmocka_unit_test(test_key_ranges),
	    cmocka_unit_test(test_span_rounds),
	    cmocka_unit_test(test_span_sgd),
	    cmocka_unit_test(test_decode_limits),
	    cmocka_unit_test(test_fastmod),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
