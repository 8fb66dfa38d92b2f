/*
 * kv_sparse_bench.c - many keys per call: push, pull and pushpull of
 * 10^4 ... 10^7 one-float keys in one batched call (ps-lite's
 * test_kv_app_benchmark: keys 0..N-1, one float each), beside a plain TCP
 * exchange of the same request bytes measured in the same run.
 *
 *   dtrain launch -n W -s S -- build/bench/kv_sparse_bench [--json]
 *       [--quick] [--min N] [--max N] [--random] [--async] [--ops LIST]
 *       [--iters N] [--starts] [--keys-only | --rows-only]
 *       [--table-rows R]
 *
 * Every worker makes the same calls (dist_sync, no optimizer: a round's
 * sum is the value; with --async dist_async, where each push is applied
 * at once, by sgd lr=1 on the servers as dist_async asks for an optimizer:
 * the value is the init less every push); rank 0 prints the median time
 * per call, the time per
 * key, and the TCP baseline: the request's bytes alone (12 per key for a
 * push or pushpull, 8 for a pull) sent one way over a socket pair and
 * answered with one byte. The answer's values are not in it: a pull moves
 * half as much again as its baseline, a pushpull a third more. x_tcp is
 * the call's time over the baseline's. --random lists the keys as 64-bit
 * hashes in random order instead of 0..N-1. After the largest size, the
 * server's resident memory is read from /proc (1 server on this host) and
 * reported per key. --min and --max pick the sizes (powers of ten from
 * 10^4), --ops the calls (a comma-separated list of push, pull and
 * pushpull), --iters the timed calls per size. --starts has every worker
 * print the start time of each timed call (the host's monotonic clock,
 * shared by its processes): how far apart the workers start a round.
 *
 * Then row_sparse (MXNet's row_sparse_pull workload): a table of R rows x
 * 64 floats (R = 10^7, 10^6 with --quick; zeros at first: only touched
 * rows cost memory), split over the servers by row range; push, pull and
 * pushpull of 10^3, 10^4 and 10^5 distinct rows spread over the whole
 * table, beside TCP moving the same bytes (ids and rows one way; for a
 * pull the ids one way and the rows back; a pushpull both).
 */
#include <dirent.h>

#include "bench_tcp.h"
#include "dtrain/kv.h"

/* The resident set of this job's first server (a process whose
 * environment has DMLC_ROLE=server and this process's
 * DMLC_PS_ROOT_PORT), in bytes; 0 if none is found. */
static size_t
server_rss(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	size_t rss = 0;
	char port[64];
	const char *p = getenv("DMLC_PS_ROOT_PORT");

	if (d == NULL || p == NULL) {
		if (d)
			closedir(d);
		return 0;
	}
	snprintf(port, sizeof(port), "DMLC_PS_ROOT_PORT=%s", p);
	while ((e = readdir(d)) != NULL && rss == 0) {
		char path[300], buf[8192];
		FILE *f;
		size_t n;

		if (e->d_name[0] < '0' || e->d_name[0] > '9' ||
		    atoi(e->d_name) == getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%s/environ", e->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		int server = 0, ours = 0;
		buf[n] = 0;
		for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
			server |= strcmp(buf + i, "DMLC_ROLE=server") == 0;
			ours |= strcmp(buf + i, port) == 0;
		}
		if (!server || !ours)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/statm", e->d_name);
		if ((f = fopen(path, "r")) != NULL) {
			unsigned long size, res;

			if (fscanf(f, "%lu %lu", &size, &res) == 2)
				rss =
				    (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
			fclose(f);
		}
	}
	closedir(d);
	return rss;
}

static uint64_t
hash64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "kv_sparse_bench: " __VA_ARGS__);              \
		fprintf(stderr, ": %s\n", dt_errmsg());                        \
		return 1;                                                      \
	} while (0)

/* Row-sparse push, pull and pushpull of 10^3 ... 10^5 rows of a table of
 * trows x 64 floats. */
static int
bench_rows(dt_kv *kv, uint64_t trows, int json)
{
	const size_t w = 64, sizes[] = {1000, 10000, 100000};
	const char *ops[] = {"row_push", "row_pull", "row_pushpull"};
	const dt_key key = (dt_key)1 << 62;
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);

	if (dt_kv_init_row_sparse(kv, key, trows, w, NULL) != DT_OK)
		FAIL("row_sparse init of %llu rows", (unsigned long long)trows);
	if (rank == 0 && !json)
		printf("\n%-12s %7s %10s %8s %8s | %10s | %6s   (table %llu x "
		       "%zu)\n",
		       "op", "rows", "ms/call", "GB/s", "p99_ms", "tcp_ms",
		       "x_tcp", (unsigned long long)trows, w);
	for (size_t si = 0; si < 3; si++) {
		size_t n = sizes[si];
		uint64_t *ids = malloc(n * sizeof(*ids));
		float *val = malloc(n * w * sizeof(float));
		float *out = malloc(n * w * sizeof(float));
		int iters = n <= 10000 ? 30 : 10;
		double *t = malloc(sizeof(double) * (size_t)iters);

		if (!ids || !val || !out || !t)
			FAIL("out of memory for %zu rows", n);
		/* distinct rows over the whole table (a stride prime to
		 * it), each size its own */
		for (size_t i = 0; i < n; i++)
			ids[i] =
			    (2654435761ull * (i + si * 100000ull) + 12345) %
			    trows;
		for (size_t i = 0; i < n * w; i++)
			val[i] = (float)(i % 5);
		for (int o = 0; o < 3; o++) {
			dt_kv_barrier(kv);
			for (int i = -1; i < iters; i++) {
				double t0 = now_us();
				dt_err err =
				    o == 0 ? dt_kv_push_row_sparse(kv, key, n,
				                                   ids, val, w)
				    : o == 1
				        ? dt_kv_row_sparse_pull(kv, key, n, ids,
				                                out, w)
				        : dt_kv_pushpull_row_sparse(
				              kv, key, n, ids, val, out, w);
				if (err)
					FAIL("%s of %zu rows", ops[o], n);
				if (i >= 0)
					t[i] = now_us() - t0;
			}
			for (size_t i = 0; o > 0 && i < n * w; i++)
				if (out[i] != (float)nw * val[i])
					FAIL("%s of %zu rows: value %zu is %g, "
					     "expected %g",
					     ops[o], n, i, (double)out[i],
					     (double)((float)nw * val[i]));
			if (rank != 0)
				continue;
			size_t up = n * (8 + 4 * w), down = n * 4 * w;
			result r = summarise(t, iters, up);
			double tcp = 0;
			if (o != 1)
				tcp += tcp_baseline(0, up, iters).p50;
			if (o != 0)
				tcp +=
				    tcp_baseline(1, down, iters).p50 +
				    (o == 1 ? tcp_baseline(0, n * 8, iters).p50
				            : 0);
			double ms = r.p50 / 1e3,
			       bytes = (double)(o == 0   ? up
			                        : o == 1 ? n * 8 + down
			                                 : up + down);
			if (json)
				printf("{\"bench\":\"kv_sparse\",\"op\":\"%s\","
				       "\"rows\":%zu,\"width\":%zu,"
				       "\"table_rows\":%llu,\"workers\":%d,"
				       "\"ms\":%.3f,\"p99_ms\":%.3f,"
				       "\"tcp_ms\":%.3f}\n",
				       ops[o], n, w, (unsigned long long)trows,
				       nw, ms, r.p99 / 1e3, tcp / 1e3);
			else
				printf("%-12s %7zu %10.2f %8.2f %8.2f | %10.2f "
				       "| %6.2f\n",
				       ops[o], n, ms, bytes / r.p50 / 1e3,
				       r.p99 / 1e3, tcp / 1e3, r.p50 / tcp);
			fflush(stdout);
		}
		free(ids);
		free(val);
		free(out);
		free(t);
	}
	return 0;
}

/* What the many-key part runs (main's options). */
typedef struct keys_opts {
	int json, random, async, starts, iters;
	size_t min, max;
	int ops[3]; /* push, pull, pushpull: 1 to run */
} keys_opts;

/* One size's timed calls of op o (push, pull, pushpull) on n keys; the
 * check of the answers; rank 0's line. */
static int
bench_keys_op(dt_kv *kv, const keys_opts *ko, int o, size_t n,
              const dt_key *keys, const float *val, float *out, double *t,
              int iters, size_t *pushes)
{
	const char *ops[] = {"push", "pull", "pushpull"};
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	/* dist_sync: a round's sum; dist_async (sgd lr=1, exact on these
	 * small integers): the init, val, less every push so far (a pull
	 * after the barrier; a pushpull's answer depends on the order of
	 * the workers' pushes, and is not checked) */
	float times = ko->async ? 1.0f - (float)*pushes : (float)nw;
	double *t0 = ko->starts ? malloc(sizeof(double) * (size_t)iters) : NULL;

	dt_kv_barrier(kv);
	for (int i = -1; i < iters; i++) {
		double start = now_us();
		dt_err err =
		    o == 0   ? dt_kv_push_keys(kv, n, keys, val, NULL)
		    : o == 1 ? dt_kv_pull_keys(kv, n, keys, out, NULL)
		             : dt_kv_pushpull_keys(kv, n, keys, val, out, NULL);
		if (err)
			FAIL("%s of %zu keys", ops[o], n);
		if (i >= 0)
			t[i] = now_us() - start;
		if (i >= 0 && t0)
			t0[i] = start;
	}
	if (o != 1)
		*pushes += (size_t)nw * (size_t)(iters + 1);
	for (size_t i = 0; o > 0 && !(ko->async && o == 2) && i < n; i++)
		if (out[i] != times * val[i])
			FAIL("%s of %zu keys: key %zu is %g, expected %g",
			     ops[o], n, i, (double)out[i],
			     (double)(times * val[i]));
	if (t0) {
		printf(
		    "{\"bench\":\"kv_sparse\",\"starts\":\"%s\",\"keys\":%zu,"
		    "\"rank\":%d,\"us\":[",
		    ops[o], n, rank);
		for (int i = 0; i < iters; i++)
			printf("%s%.1f", i ? "," : "", t0[i]);
		printf("]}\n");
		free(t0);
	}
	if (rank != 0)
		return 0;
	result r = summarise(t, iters, n * 12);
	/* the wire alone: the request one way (keys and values, or keys),
	 * the answer the other */
	size_t bytes = o == 1 ? n * 8 : n * 12;
	result b = tcp_baseline(0, bytes, iters);
	double ms = r.p50 / 1e3, tcp = b.p50 / 1e3;
	if (ko->json)
		printf("{\"bench\":\"kv_sparse\",\"op\":\"%s\","
		       "\"keys\":%zu,\"workers\":%d,\"mode\":\"%s\","
		       "\"ms\":%.3f,\"ns_per_key\":%.2f,"
		       "\"p99_ms\":%.3f,\"tcp_ms\":%.3f}\n",
		       ops[o], n, nw, ko->async ? "dist_async" : "dist_sync",
		       ms, r.p50 * 1e3 / (double)n, r.p99 / 1e3, tcp);
	else
		printf("%-9s %9zu %10.2f %8.1f %8.2f | %10.2f | %6.2f\n",
		       ops[o], n, ms, r.p50 * 1e3 / (double)n, r.p99 / 1e3, tcp,
		       ms / tcp);
	fflush(stdout);
	return 0;
}

/* Push, pull and pushpull of 10^4 ... max one-float keys in one call,
 * then the server's resident memory. */
static int
bench_keys(dt_kv *kv, const keys_opts *ko)
{
	int rank = dt_kv_rank(kv);
	dt_key base = 0;
	size_t last = 0;

	if (rank == 0 && !ko->json)
		printf("%-9s %9s %10s %8s %8s | %10s | %6s\n", "op", "keys",
		       "ms/call", "ns/key", "p99_ms", "tcp_ms", "x_tcp");
	for (size_t n = 10000; n <= ko->max; n *= 10) {
		if (n < ko->min)
			continue;
		dt_key *keys = malloc(n * sizeof(*keys));
		float *val = malloc(n * sizeof(float));
		float *out = malloc(n * sizeof(float));
		int iters = ko->iters      ? ko->iters
		            : n <= 100000  ? 30
		            : n <= 1000000 ? 10
		                           : 5;
		double *t = malloc(sizeof(double) * (size_t)iters);

		if (!keys || !val || !out || !t)
			FAIL("out of memory for %zu keys", n);
		for (size_t i = 0; i < n; i++) {
			keys[i] = ko->random ? hash64(base + i) : base + i;
			val[i] = (float)(i % 7);
		}
		base += n; /* each size its own keys */
		if (dt_kv_init_keys(kv, n, keys, val, NULL) != DT_OK)
			FAIL("init of %zu keys", n);
		size_t pushes = 0;
		for (int o = 0; o < 3; o++)
			if (ko->ops[o] && bench_keys_op(kv, ko, o, n, keys, val,
			                                out, t, iters, &pushes))
				return 1;
		free(keys);
		free(val);
		free(out);
		free(t);
		last = n;
	}
	dt_kv_barrier(kv);
	if (rank == 0) {
		size_t rss = server_rss();

		if (rss && ko->json)
			printf("{\"bench\":\"kv_sparse\",\"server_rss_bytes\":"
			       "%zu,\"keys\":%zu}\n",
			       rss, (size_t)base);
		else if (rss)
			printf("server resident memory: %.1f MiB for %zu keys "
			       "(%.1f bytes per key; largest call %zu keys)\n",
			       (double)rss / 1048576.0, (size_t)base,
			       (double)rss / (double)base, last);
	}
	return 0;
}

static int
usage(void)
{
	fprintf(stderr, "usage: kv_sparse_bench [--json] [--quick] [--min N] "
	                "[--max N] [--random] [--async] [--ops LIST] "
	                "[--iters N] [--starts] [--keys-only | --rows-only] "
	                "[--table-rows R]\n");
	return 2;
}

int
main(int argc, char **argv)
{
	keys_opts ko = {.max = 10000000, .ops = {1, 1, 1}};
	int quick = 0, keys_part = 1, rows_part = 1;
	uint64_t trows = 0;
	dt_kv *kv;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--json") == 0)
			ko.json = 1;
		else if (strcmp(a, "--quick") == 0)
			quick = 1;
		else if (strcmp(a, "--random") == 0)
			ko.random = 1;
		else if (strcmp(a, "--async") == 0)
			ko.async = 1;
		else if (strcmp(a, "--starts") == 0)
			ko.starts = 1;
		else if (strcmp(a, "--keys-only") == 0)
			rows_part = 0;
		else if (strcmp(a, "--rows-only") == 0)
			keys_part = 0;
		else if (strcmp(a, "--min") == 0 && v && ++i)
			ko.min = (size_t)strtoull(v, NULL, 10);
		else if (strcmp(a, "--max") == 0 && v && ++i)
			ko.max = (size_t)strtoull(v, NULL, 10);
		else if (strcmp(a, "--iters") == 0 && v && ++i)
			ko.iters = atoi(v);
		else if (strcmp(a, "--ops") == 0 && v && ++i) {
			if (parse_ops(v, ko.ops))
				return usage();
		} else if (strcmp(a, "--table-rows") == 0 && v && ++i)
			trows = strtoull(v, NULL, 10);
		else
			return usage();
	}
	if (ko.iters < 0 || ko.iters > 100000)
		return usage();
	if (quick && ko.max > 1000000)
		ko.max = 1000000;
	if (trows == 0)
		trows = quick ? 1000000 : 10000000;
	if (trows < 200000) {
		fprintf(stderr, "kv_sparse_bench: --table-rows: at least "
		                "200000 (the rows of the largest call)\n");
		return 2;
	}
	if (dt_kv_create(ko.async ? "dist_async" : "dist_sync", &kv) != DT_OK)
		FAIL("create");
	if (ko.async && dt_kv_set_optimizer(kv, "sgd", "lr=1") != DT_OK)
		FAIL("sgd lr=1 on the servers");
	if (keys_part && bench_keys(kv, &ko))
		return 1;
	if (rows_part && bench_rows(kv, trows, ko.json))
		return 1;
	if (dt_kv_destroy(kv) != DT_OK)
		FAIL("destroy");
	return 0;
}
