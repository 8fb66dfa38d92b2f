/*
 * py_ref.c - the C side of the Python binding's bit-for-bit tests
 * (tests/python/): the same calls on the same data as
 * tests/python/ref_job.py, each rank's results written raw to
 * DIR/c_<mode>.<rank>, which the test compares byte for byte with what
 * the Python job wrote.
 *
 *   py_ref coll DIR N    allreduce of N float32 (sum, then average) and of
 *                        N float64 (sum), out of place, from dt_coll_init
 *   py_ref kv_sum DIR N  dist_sync without an optimizer: init key 0 with
 *                        zeros, push each rank's data, pull (the sum)
 *   py_ref kv_sgd DIR N  dist_sync with sgd (lr 0.1, momentum 0.9, wd
 *                        1e-4, rescale_grad 0.5) on the servers: init key
 *                        1, then three pushpulls of each rank's data
 *
 * The data are float32 of ±[0.125, 0.25) made from a hash of the index
 * and a seed, so that sums over ranks round and their order shows.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"
#include "dtrain/kv.h"

/* Element i of the data of seed: the same bits as ref_job.py's gen(). */
static float
gen(uint64_t i, uint64_t seed)
{
	uint32_t u = (uint32_t)(i * 2654435761u + seed * 0x9E3779B9u + 12345u);
	uint32_t bits;
	float f;

	u ^= u >> 16;
	u *= 0x45d9f3bu;
	u ^= u >> 16;
	bits = 0x3e000000u | (u >> 9) | ((u & 1u) << 31);
	memcpy(&f, &bits, sizeof(f));
	return f;
}

static int
save(const char *dir, const char *mode, int rank, const void *p, size_t n)
{
	char path[4096];
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "%s/c_%s.%d", dir, mode, rank);
	if ((f = fopen(path, "ab")) == NULL)
		return -1;
	ok = fwrite(p, 1, n, f) == n;
	return fclose(f) == 0 && ok ? 0 : -1;
}

static int
run_coll(const char *dir, size_t n)
{
	float *a = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
	double *d = malloc(n * sizeof(double)),
	       *dr = malloc(n * sizeof(double));
	dt_coll *c = NULL;
	int rc = -1, rank;

	if (!a || !r || !d || !dr || dt_coll_init(&c) != DT_OK)
		goto out;
	rank = dt_coll_rank(c);
	for (size_t i = 0; i < n; i++) {
		a[i] = gen(i, (uint64_t)rank);
		d[i] = (double)a[i] * 1.1;
	}
	if (dt_coll_allreduce(c, a, r, n, DT_FLOAT32, DT_COLL_SUM) ||
	    save(dir, "coll", rank, r, n * sizeof(float)) ||
	    dt_coll_allreduce(c, a, r, n, DT_FLOAT32, DT_COLL_AVG) ||
	    save(dir, "coll", rank, r, n * sizeof(float)) ||
	    dt_coll_allreduce(c, d, dr, n, DT_FLOAT64, DT_COLL_SUM) ||
	    save(dir, "coll", rank, dr, n * sizeof(double)))
		goto out;
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "py_ref coll: %s\n", dt_errmsg());
	if (c && dt_coll_finalize(c) != DT_OK)
		rc = -1;
	free(a);
	free(r);
	free(d);
	free(dr);
	return rc;
}

static int
run_kv(const char *dir, const char *mode, size_t n)
{
	int sgd = strcmp(mode, "kv_sgd") == 0, rc = -1, rank;
	float *v = calloc(n, sizeof(float)), *o = calloc(n, sizeof(float));
	dt_kv *kv = NULL;
	dt_key key = sgd ? 1 : 0;

	if (!v || !o || dt_kv_create("dist_sync", &kv) != DT_OK)
		goto out;
	rank = dt_kv_rank(kv);
	if (sgd && dt_kv_set_optimizer(kv, "sgd",
	                               "lr=0.1,momentum=0.9,wd=0.0001,"
	                               "rescale_grad=0.5"))
		goto out;
	for (size_t i = 0; i < n; i++)
		v[i] = sgd ? gen(i, 7) : 0.0f;
	if (dt_kv_init(kv, key, v, n))
		goto out;
	for (int step = 0; step < (sgd ? 3 : 1); step++) {
		for (size_t i = 0; i < n; i++)
			v[i] = gen(i, (uint64_t)(rank + 10 * step));
		if (dt_kv_pushpull(kv, key, v, o, n) ||
		    save(dir, mode, rank, o, n * sizeof(float)))
			goto out;
	}
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "py_ref %s: %s\n", mode, dt_errmsg());
	if (kv && dt_kv_destroy(kv) != DT_OK)
		rc = -1;
	free(v);
	free(o);
	return rc;
}

int
main(int argc, char **argv)
{
	size_t n;

	if (argc != 4 || (n = strtoul(argv[3], NULL, 10)) == 0) {
		fprintf(stderr, "usage: py_ref coll|kv_sum|kv_sgd DIR N\n");
		return 2;
	}
	if (strcmp(argv[1], "coll") == 0)
		return run_coll(argv[2], n) ? 1 : 0;
	if (strcmp(argv[1], "kv_sum") == 0 || strcmp(argv[1], "kv_sgd") == 0)
		return run_kv(argv[2], argv[1], n) ? 1 : 0;
	fprintf(stderr, "py_ref: unknown mode '%s'\n", argv[1]);
	return 2;
}
