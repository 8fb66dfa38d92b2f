/*
 * kv_rows.c - checks row_sparse tables end to end; run one copy per
 * worker under `dtrain launch` (tests/integration/kv_rows.sh), or alone
 * with TYPE local.
 *
 *   kv_rows sum TYPE     no optimizer: a table split over the servers by
 *                        row range (at MXNET_KVSTORE_BIGARRAY_BOUND=64)
 *                        and a small one on one server; each round every
 *                        worker pushes its own rows in its own order - the
 *                        edges of every server's range among them, rows
 *                        other workers push too, and in one round nothing
 *                        at all from odd ranks; push and pushpull by
 *                        turns; the whole table pulled after each round
 *                        (in a shuffled order, with repeats) and checked
 *                        exactly against the union of the round's rows
 *                        (inputs are small integers, so any summation
 *                        order gives the same bits)
 *   kv_rows async        dist_async with sgd (lr 1, gradients -1): rank 0
 *                        makes all its pushes while the others wait at a
 *                        barrier (progress without them), then they make
 *                        theirs; every push applied exactly once (5
 *                        pushes each, or KV_ROWS_PUSHES)
 *   kv_rows adam TYPE    lazy adam on the servers against a local store
 *                        run here on the round's summed gradients (exact
 *                        eighths: the sums are exact): equal bit for bit,
 *                        rows never pushed keep their first value
 *   kv_rows comp         2bit compression on the pushed values: pushes
 *                        below the threshold wait in the worker's residual
 *                        (per row) and go out once they reach it
 *   kv_rows errors       unknown key, row out of range, another width,
 *                        a row listed twice, a second init, a single-key
 *                        init of a table's key and row calls on a dense
 *                        key: each refused with its reason, and the table
 *                        keeps serving
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "dtrain/kv.h"
#include "kv/kv_impl.h"

static int failures;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr,                                        \
			        "kv_rows FAILED at line %d: ", __LINE__);      \
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
			fprintf(stderr, "kv_rows: %s failed at line %d: %s\n", \
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

static uint64_t
mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

typedef struct table {
	dt_key key;
	uint64_t rows;
	size_t width;
	float *want; /* what the store should hold */
} table;

static int nservers_, bound_;

/* Whether worker w pushes row r of t in round k (edges of every
 * server's range always; odd ranks nothing in round 2). */
static int
pushes_row(const table *t, int w, int k, uint64_t r)
{
	if (k == 2 && w % 2)
		return 0;
	for (int s = 0; s < nservers_; s++) {
		uint64_t lo, n;

		dt__kv_rows_place(t->key, t->rows, t->width, nservers_,
		                  (size_t)bound_, s, &lo, &n);
		if (n && (r == lo || r == lo + n - 1))
			return 1;
	}
	return mix(t->key * 1000003u + (uint64_t)w * 7919u + (uint64_t)k * 31u +
	           r * 0x9e3779b97f4a7c15ull) %
	           5 ==
	       0;
}

static float
grad(int w, int k, uint64_t r, size_t c)
{
	return (float)((w + 1) * (k + 1) + (int)(r % 7) + (int)c);
}

/* This worker's rows of round k, in its own (shuffled) order, and their
 * gradients. */
static size_t
my_rows(const table *t, int w, int k, uint64_t *ids, float *g)
{
	size_t n = 0;

	for (uint64_t r = 0; r < t->rows; r++)
		if (pushes_row(t, w, k, r))
			ids[n++] = r;
	for (size_t i = n; i > 1; i--) {
		size_t j = mix((uint64_t)w * 131 + (uint64_t)k * 17 + i) % i;
		uint64_t x = ids[i - 1];

		ids[i - 1] = ids[j];
		ids[j] = x;
	}
	for (size_t i = 0; i < n; i++)
		for (size_t c = 0; c < t->width; c++)
			g[i * t->width + c] = grad(w, k, ids[i], c);
	return n;
}

/* The whole table pulled in a shuffled order with repeats, checked. */
static void
check_all(dt_kv *kv, const table *t, int k)
{
	size_t n = (size_t)t->rows + t->rows / 2;
	uint64_t *ids = calloc(n, sizeof(*ids));
	float *out = malloc(n * t->width * sizeof(*out));

	for (size_t i = 0; i < n; i++)
		ids[i] = i < t->rows ? (uint64_t)i
		                     : mix(i * 7 + (uint64_t)k) % t->rows;
	for (size_t i = n; i > 1; i--) {
		size_t j = mix(i + (uint64_t)k * 1000) % i;
		uint64_t x = ids[i - 1];

		ids[i - 1] = ids[j];
		ids[j] = x;
	}
	OK(dt_kv_row_sparse_pull(kv, t->key, n, ids, out, t->width));
	for (size_t i = 0; i < n; i++)
		for (size_t c = 0; c < t->width; c++)
			CHECK(out[i * t->width + c] ==
			          t->want[ids[i] * t->width + c],
			      "table %llu after round %d: row %llu [%zu] = %g, "
			      "expected %g",
			      (unsigned long long)t->key, k,
			      (unsigned long long)ids[i], c,
			      (double)out[i * t->width + c],
			      (double)t->want[ids[i] * t->width + c]);
	free(ids);
	free(out);
}

static void
table_init(dt_kv *kv, table *t, dt_key key, uint64_t rows, size_t width)
{
	t->key = key;
	t->rows = rows;
	t->width = width;
	t->want = malloc(rows * width * sizeof(float));
	for (size_t i = 0; i < rows * width; i++)
		t->want[i] = (float)(i % 13);
	OK(dt_kv_init_row_sparse(kv, key, rows, width, t->want));
}

static void
run_sum(dt_kv *kv, int rank, int nw)
{
	table tabs[2];

	table_init(kv, &tabs[0], 100, 1000, 4); /* split (4000 >= 64) */
	table_init(kv, &tabs[1], 101, 10, 3);   /* whole on one server */
	for (int k = 0; k < 6; k++) {
		for (int ti = 0; ti < 2; ti++) {
			table *t = &tabs[ti];
			size_t wd = t->width;
			uint64_t *ids = malloc(t->rows * 8 + 8);
			float *g = malloc(t->rows * wd * 4 + 4);
			float *out = malloc(t->rows * wd * 4 + 4);
			size_t n = my_rows(t, rank, k, ids, g);

			/* the expected table: rows of the union take their
			 * sums */
			float *sum = calloc(t->rows * wd, sizeof(float));
			char *hit = calloc(t->rows, 1);
			for (int w = 0; w < nw; w++)
				for (uint64_t r = 0; r < t->rows; r++)
					if (pushes_row(t, w, k, r)) {
						hit[r] = 1;
						for (size_t c = 0; c < wd; c++)
							sum[r * wd + c] +=
							    grad(w, k, r, c);
					}
			for (uint64_t r = 0; r < t->rows; r++)
				if (hit[r])
					memcpy(t->want + r * wd, sum + r * wd,
					       wd * sizeof(float));
			if (k % 2 == 0) {
				OK(dt_kv_push_row_sparse(kv, t->key, n, ids, g,
				                         wd));
			} else {
				OK(dt_kv_pushpull_row_sparse(kv, t->key, n, ids,
				                             g, out, wd));
				for (size_t i = 0; i < n * wd; i++)
					CHECK(
					    out[i] == t->want[ids[i / wd] * wd +
					                      i % wd],
					    "pushpull round %d row %llu: %g, "
					    "expected %g",
					    k, (unsigned long long)ids[i / wd],
					    (double)out[i],
					    (double)t->want[ids[i / wd] * wd +
					                    i % wd]);
			}
			check_all(kv, t, k);
			free(sum);
			free(hit);
			free(ids);
			free(g);
			free(out);
		}
	}
	/* an empty pull asks nothing of anyone */
	OK(dt_kv_row_sparse_pull(kv, 100, 0, NULL, NULL, 4));
	printf("kv_rows sum: %d rounds on 2 tables (rank %d of %d, %d "
	       "servers)\n",
	       6, rank, nw, nservers_);
	free(tabs[0].want);
	free(tabs[1].want);
}

/* Wait until the file path exists (5 minutes at most). */
static void
hold_until(const char *path, int made)
{
	printf("kv_rows async: holding after %d pushes until %s exists\n", made,
	       path);
	fflush(stdout);
	for (int i = 0; access(path, F_OK) != 0; i++) {
		if (i == 30000) {
			fprintf(stderr, "kv_rows FAILED: %s never came\n",
			        path);
			exit(1);
		}
		usleep(10000);
	}
}

static void
run_async(dt_kv *kv, int rank, int nw)
{
	table t;
	/* KV_ROWS_PUSHES: more pushes, for a job long enough to lose a
	 * server in (tests/integration/sparse_recovery.sh) */
	const char *pe = getenv("KV_ROWS_PUSHES");
	const int P = pe ? atoi(pe) : 5;

	/* KV_ROWS_HOLD=FILE: rank 0 stops halfway through its pushes until
	 * FILE exists, so that a test can lose a server while both workers
	 * still have pushes to make (a kill that comes once they are done
	 * tests nothing). */
	const char *hold = getenv("KV_ROWS_HOLD");

	OK(dt_kv_set_optimizer(kv, "sgd", "lr=1"));
	table_init(kv, &t, 200, 500, 2);
	for (int phase = 0; phase < 2; phase++) {
		if ((rank == 0) == (phase == 0))
			for (int k = 0; k < P; k++) {
				if (hold && rank == 0 && k == P / 2)
					hold_until(hold, k);
				uint64_t *ids = malloc(t.rows * 8);
				float *g = malloc(t.rows * t.width * 4);
				size_t n = my_rows(&t, rank, k, ids, g);

				for (size_t i = 0; i < n * t.width; i++)
					g[i] = -1.0f;
				OK(dt_kv_push_row_sparse(kv, t.key, n, ids, g,
				                         t.width));
				free(ids);
				free(g);
			}
		OK(dt_kv_barrier(kv));
	}
	for (int w = 0; w < nw; w++)
		for (int k = 0; k < P; k++)
			for (uint64_t r = 0; r < t.rows; r++)
				if (pushes_row(&t, w, k, r))
					for (size_t c = 0; c < t.width; c++)
						t.want[r * t.width + c] += 1.0f;
	check_all(kv, &t, P);
	printf("kv_rows async: %d pushes from each of %d workers\n", P, nw);
	free(t.want);
}

static void
run_adam(dt_kv *kv, const char *type, int rank, int nw)
{
	const char *params = "lr=0.02,wd=0.01,beta1=0.8";
	dt_kv *ref;
	table t;

	OK(dt_kv_set_optimizer(kv, "adam", params));
	table_init(kv, &t, 300, 700, 3);
	OK(dt_kv_create("local", &ref));
	OK(dt_kv_set_optimizer(ref, "adam", params));
	OK(dt_kv_init_row_sparse(ref, t.key, t.rows, t.width, t.want));
	for (int k = 0; k < 8; k++) {
		size_t wd = t.width;
		uint64_t *ids = malloc(t.rows * 8), *u = malloc(t.rows * 8);
		float *g = malloc(t.rows * wd * 4),
		      *sum = calloc(t.rows * wd, 4);
		size_t n = my_rows(&t, rank, k, ids, g), nu = 0;

		for (size_t i = 0; i < n * wd; i++)
			g[i] = (g[i] - 8.0f) / 8.0f; /* exact eighths */
		OK(dt_kv_push_row_sparse(kv, t.key, n, ids, g, wd));
		/* the round's sums, as one process would push them */
		for (uint64_t r = 0; r < t.rows; r++) {
			int hit = 0;

			for (int w = 0; w < nw; w++)
				if (pushes_row(&t, w, k, r)) {
					hit = 1;
					for (size_t c = 0; c < wd; c++)
						sum[nu * wd + c] +=
						    (grad(w, k, r, c) - 8.0f) /
						    8.0f;
				}
			if (hit)
				u[nu++] = r;
		}
		OK(dt_kv_push_row_sparse(ref, t.key, nu, u, sum, wd));
		free(ids);
		free(u);
		free(g);
		free(sum);
	}
	uint64_t *all = malloc(t.rows * 8);
	float *a = malloc(t.rows * t.width * 4),
	      *b = malloc(t.rows * t.width * 4);
	for (uint64_t r = 0; r < t.rows; r++)
		all[r] = r;
	OK(dt_kv_row_sparse_pull(kv, t.key, t.rows, all, a, t.width));
	OK(dt_kv_row_sparse_pull(ref, t.key, t.rows, all, b, t.width));
	size_t moved = 0;
	for (size_t i = 0; i < t.rows * t.width; i++) {
		CHECK(a[i] == b[i],
		      "%s adam: row %zu [%zu] = %.9g, one process "
		      "%.9g",
		      type, i / t.width, i % t.width, (double)a[i],
		      (double)b[i]);
		moved += a[i] != t.want[i];
	}
	CHECK(moved > t.rows, "adam moved only %zu values", moved);
	printf("kv_rows adam: %s equals one process bit for bit (%zu of %zu "
	       "values moved)\n",
	       type, moved, (size_t)(t.rows * t.width));
	free(all);
	free(a);
	free(b);
	free(t.want);
	OK(dt_kv_destroy(ref));
}

static void
run_comp(dt_kv *kv, int nw)
{
	uint64_t ids[10];
	float g[20], out[20];

	OK(dt_kv_set_gradient_compression(
	    kv, "type=2bit,threshold=0.5,min_size=1"));
	OK(dt_kv_init_row_sparse(kv, 400, 200, 2, NULL));
	for (int i = 0; i < 10; i++)
		ids[i] = (uint64_t)(i * 19); /* spread over the servers */
	for (int i = 0; i < 20; i++)
		g[i] = 0.25f;
	/* below the threshold: 0 is sent, 0.25 waits */
	OK(dt_kv_pushpull_row_sparse(kv, 400, 10, ids, g, out, 2));
	for (int i = 0; i < 20; i++)
		CHECK(out[i] == 0.0f, "2bit round 1: %g", (double)out[i]);
	/* 0.25 + 0.25 reaches it: 0.5 from each worker */
	OK(dt_kv_pushpull_row_sparse(kv, 400, 10, ids, g, out, 2));
	for (int i = 0; i < 20; i++)
		CHECK(out[i] == 0.5f * (float)nw, "2bit round 2: %g",
		      (double)out[i]);
	for (int i = 0; i < 10; i++)
		g[i] = -0.5f;
	OK(dt_kv_push_row_sparse(kv, 400, 5, ids, g, 2));
	OK(dt_kv_row_sparse_pull(kv, 400, 10, ids, out, 2));
	for (int i = 0; i < 20; i++)
		CHECK(out[i] == (i < 10 ? -0.5f : 0.5f) * (float)nw,
		      "2bit round 3 [%d]: %g", i, (double)out[i]);
	printf("kv_rows comp: 2bit residuals per row\n");
}

static void
run_errors(dt_kv *kv, int rank)
{
	uint64_t ids[3] = {1, 2, 1}, far[1] = {50};
	float v[12] = {0}, out[12];

	table t;
	table_init(kv, &t, 500, 50, 4);
	float dense[4] = {1, 2, 3, 4};
	OK(dt_kv_init(kv, 501, dense, 4));
	if (rank == 0) {
		FAILS(dt_kv_push_row_sparse(kv, 999, 1, ids, v, 4), DT_ENOKEY,
		      "never initialised");
		FAILS(dt_kv_row_sparse_pull(kv, 500, 1, far, out, 4), DT_EINVAL,
		      "row 50 is out of range");
		FAILS(dt_kv_push_row_sparse(kv, 500, 2, ids, v, 3), DT_ESIZE,
		      "width 3");
		FAILS(dt_kv_push_row_sparse(kv, 500, 3, ids, v, 4), DT_EINVAL,
		      "row 1 is listed twice");
		FAILS(dt_kv_pushpull_row_sparse(kv, 500, 3, ids, v, out, 4),
		      DT_EINVAL, "listed twice");
		FAILS(dt_kv_push_row_sparse(kv, 500, 2, ids, NULL, 4),
		      DT_EINVAL, "NULL");
		FAILS(dt_kv_push_row_sparse(kv, 501, 1, ids, v, 4), DT_ENOKEY,
		      "never initialised with dt_kv_init_row_sparse");
		FAILS(dt_kv_push(kv, 500, v, 4), DT_ENOKEY, "");
	}
	/* collective refusals: every worker gets them */
	FAILS(dt_kv_init_row_sparse(kv, 500, 50, 4, NULL), DT_EEXIST,
	      "already initialised");
	FAILS(dt_kv_init_row_sparse(kv, 501, 50, 4, NULL), DT_EEXIST,
	      "already initialised");
	FAILS(dt_kv_init(kv, 500, dense, 4), DT_ESTATE, "row_sparse table");
	FAILS(dt_kv_init_row_sparse(kv, 502, 0, 4, NULL), DT_EINVAL, "0 rows");
	/* nothing changed, and the table still serves */
	uint64_t all[50];
	float a[200];
	for (int r = 0; r < 50; r++)
		all[r] = (uint64_t)r;
	OK(dt_kv_row_sparse_pull(kv, 500, 50, all, a, 4));
	CHECK(memcmp(a, t.want, sizeof(a)) == 0, "table changed by errors");
	OK(dt_kv_push_row_sparse(kv, 500, 2, ids, v, 4));
	OK(dt_kv_row_sparse_pull(kv, 500, 2, ids, out, 4));
	for (int i = 0; i < 8; i++)
		CHECK(out[i] == 0.0f, "after errors: %g", (double)out[i]);
	printf("kv_rows errors: each refused with its reason\n");
	free(t.want);
}

int
main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	const char *type = argc > 2 ? argv[2] : "dist_sync";
	const char *env;
	dt_kv *kv;
	int rank, nw;

	if (strcmp(mode, "async") == 0)
		type = "dist_async";
	OK(dt_kv_create(type, &kv));
	if (getenv("DTRAIN_TEST_PULL_FP16"))
		OK(dt_kv_set_pull_precision(kv, "fp16"));
	rank = dt_kv_rank(kv);
	nw = dt_kv_num_workers(kv);
	nservers_ = (env = getenv("DMLC_NUM_SERVER")) && dt_kv_is_dist(kv)
	                ? atoi(env)
	                : 1;
	bound_ = (env = getenv("MXNET_KVSTORE_BIGARRAY_BOUND")) ? atoi(env)
	                                                        : 1000000;
	if (strcmp(mode, "sum") == 0)
		run_sum(kv, rank, nw);
	else if (strcmp(mode, "async") == 0)
		run_async(kv, rank, nw);
	else if (strcmp(mode, "adam") == 0)
		run_adam(kv, type, rank, nw);
	else if (strcmp(mode, "comp") == 0)
		run_comp(kv, nw);
	else if (strcmp(mode, "errors") == 0)
		run_errors(kv, rank);
	else {
		fprintf(stderr, "usage: kv_rows sum|async|adam|comp|errors "
		                "[TYPE]\n");
		return 2;
	}
	OK(dt_kv_destroy(kv));
	return failures ? 1 : 0;
}
