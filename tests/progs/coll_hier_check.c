/*
 * coll_hier_check.c - the checker of the hierarchical allreduce, run under
 * `dtrain launch` on ranks spread over several hosts (network namespaces,
 * or one machine whose ranks claim hosts with DT_HOST_ID) by
 * tests/integration/coll_hier.sh.
 *
 * Every rank learns the hosts of all ranks (an allgather of a hash of its
 * host id: DT_HOST_ID, else the boot id and network namespace, as the node
 * itself does), then allreduces every type and reduction, in place and
 * not, over sizes around the chunk and block boundaries, with two kinds of
 * input:
 *   - fractions, whose float sums depend on the order of the additions:
 *     every rank must get the same bits and, with --expect hier, exactly
 *     the sum in the order docs/collectives.md gives for the hierarchy
 *     (computed here from every rank's input with the library's own
 *     kernels);
 *   - small integers, whose sums are exact in every order: the result
 *     must equal the exact one.
 * Rank 0 prints one "digest" line per call, so that the test can compare
 * a hierarchical run with a flat one where the order does not matter.
 *
 *   coll_hier_check [--expect hier|flat] [--quick]
 * Exit status 0 when every check passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/coll_impl.h"
#include "common/quant.h"
#include "dtrain/coll.h"

static int rank_, size_, failures, checks;
static int nhosts, nlocal, *host_of, *pos_rank; /* pos_rank[h * L + j] */

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "coll_hier_check rank %d: FAIL: ", rank_);     \
		fprintf(stderr, __VA_ARGS__);                                  \
		fputc('\n', stderr);                                           \
		failures++;                                                    \
	} while (0)

static const dt_dtype dtypes[] = {DT_FLOAT32, DT_FLOAT64, DT_INT32, DT_FLOAT16};
static const char *const dtype_names[] = {"float32", "float64", "int32",
                                          "float16"};
static const dt_coll_op ops[] = {DT_COLL_SUM, DT_COLL_AVG, DT_COLL_MIN,
                                 DT_COLL_MAX};
static const char *const op_names[] = {"sum", "avg", "min", "max"};

static uint64_t
fnv(const void *p, size_t n, uint64_t h)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 1099511628211ull;
	}
	return h;
}

/* This host's id, as the node computes it (dt__host_id). */
static uint64_t
host_hash(void)
{
	const char *env = getenv("DT_HOST_ID");
	char boot[128] = "", ns[128] = "";
	FILE *f;
	ssize_t k;

	if (env && *env)
		return fnv(env, strlen(env), 1469598103934665603ull);
	if ((f = fopen("/proc/sys/kernel/random/boot_id", "r")) != NULL) {
		if (fgets(boot, sizeof(boot), f) == NULL)
			boot[0] = 0;
		fclose(f);
	}
	if ((k = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1)) > 0)
		ns[k] = 0;
	return fnv(ns, strlen(ns),
	           fnv(boot, strlen(boot), 1469598103934665603ull));
}

/* Hosts numbered by their lowest rank, ranks within a host by rank: the
 * library's own numbering (comm.c). 0 if the hosts do not all hold the
 * same number of ranks. */
static int
learn_layout(dt_coll *c)
{
	uint64_t mine = host_hash();
	int32_t me[2] = {(int32_t)(mine >> 32), (int32_t)mine};
	int32_t *all = calloc((size_t)size_, 2 * sizeof(int32_t));
	int *count;

	host_of = malloc((size_t)size_ * sizeof(int));
	pos_rank = malloc((size_t)size_ * sizeof(int));
	count = calloc((size_t)size_, sizeof(int));
	if (!all || !host_of || !pos_rank || !count ||
	    dt_coll_allgather(c, me, all, 2, DT_INT32)) {
		fprintf(stderr, "host layout: %s\n", dt_errmsg());
		exit(1);
	}
	for (int r = 0; r < size_; r++) {
		host_of[r] = -1;
		for (int q = 0; q < r && host_of[r] < 0; q++)
			if (all[2 * q] == all[2 * r] &&
			    all[2 * q + 1] == all[2 * r + 1])
				host_of[r] = host_of[q];
		if (host_of[r] < 0)
			host_of[r] = nhosts++;
		count[host_of[r]]++;
	}
	nlocal = size_ / nhosts;
	for (int h = 0; h < nhosts; h++)
		if (count[h] != nlocal)
			nlocal = 0;
	if (nlocal) {
		for (int h = 0; h < nhosts; h++) {
			int j = 0;
			for (int r = 0; r < size_; r++)
				if (host_of[r] == h)
					pos_rank[h * nlocal + j++] = r;
		}
	}
	free(all);
	free(count);
	return nlocal > 0;
}

/* Input element i of rank r: fractions (frac) or integers in [-50, 50]. */
static double
val(int frac, int r, size_t i, int salt)
{
	long k = (long)((i * 7919u + (size_t)r * 104729u + (size_t)salt * 31u) %
	                1009u);

	if (!frac)
		return (double)((r * 31 + (long)(i % 100003) * 17 + salt * 7) %
		                101) -
		       50;
	return (double)(k - 504) / 97.0 + r * 0.013;
}

static void
put(dt_dtype t, void *buf, size_t i, double v)
{
	switch (t) {
	case DT_FLOAT32:
		((float *)buf)[i] = (float)v;
		break;
	case DT_FLOAT64:
		((double *)buf)[i] = v;
		break;
	case DT_INT32:
		((int32_t *)buf)[i] = (int32_t)(v * 97.0);
		break;
	case DT_FLOAT16: {
		float f = (float)v;

		dt__quant_fp16(&f, (uint8_t *)buf + 2 * i, 1);
		break;
	}
	}
}

/*
 * The hierarchical order (docs/collectives.md): local block b of L,
 * sub-block k of H of it; each host sums block b in its ring order from
 * local position b + 1 round to b, then the hosts' sums of sub-block k are
 * added from host k + 1 round to k; AVG divides the total.
 */
static void
ref_hier(dt_dtype t, dt_coll_op op, uint8_t *const *in, uint8_t *want,
         size_t count, uint8_t *tmp)
{
	size_t esz = dt_dtype_size(t), boff, blen, off, len;
	int H = nhosts, L = nlocal;

	for (int b = 0; b < L; b++) {
		dt__coll_block(count, L, b, &boff, &blen);
		for (int k = 0; k < H; k++) {
			dt__coll_block(blen, H, k, &off, &len);
			off += boff;
			if (len == 0)
				continue;
			for (int s = 1; s <= H; s++) {
				int h = (k + s) % H;
				uint8_t *acc = s == 1 ? want : tmp;

				memcpy(acc + off * esz,
				       in[pos_rank[h * L + (b + 1) % L]] +
				           off * esz,
				       len * esz);
				for (int u = 2; u <= L; u++)
					dt__coll_reduce(
					    t, op, acc + off * esz,
					    acc + off * esz,
					    in[pos_rank[h * L + (b + u) % L]] +
					        off * esz,
					    len);
				if (s > 1)
					dt__coll_reduce(t, op, want + off * esz,
					                tmp + off * esz,
					                want + off * esz, len);
			}
			if (op == DT_COLL_AVG)
				dt__coll_scale(t, want + off * esz, len, size_);
		}
	}
}

/* The exact result for integer inputs (any order). */
static void
ref_exact(dt_dtype t, dt_coll_op op, uint8_t *want, size_t count, int salt)
{
	for (size_t i = 0; i < count; i++) {
		double acc = val(0, 0, i, salt);

		for (int r = 1; r < size_; r++) {
			double v = val(0, r, i, salt);
			if (op == DT_COLL_MIN)
				acc = v < acc ? v : acc;
			else if (op == DT_COLL_MAX)
				acc = v > acc ? v : acc;
			else
				acc += v;
		}
		if (op == DT_COLL_AVG && t == DT_INT32) {
			long s = (long)(acc * 97.0);
			((int32_t *)want)[i] = (int32_t)(s / size_);
			continue;
		}
		if (op == DT_COLL_AVG)
			acc /= size_;
		put(t, want, i, acc);
	}
}

/* One call: every rank the same bits, and the reference's. */
static void
one(dt_coll *c, int ti, int oi, int frac, size_t count, int inplace,
    int expect_hier, uint8_t **in, uint8_t *out, uint8_t *want, uint8_t *tmp)
{
	dt_dtype t = dtypes[ti];
	dt_coll_op op = ops[oi];
	size_t esz = dt_dtype_size(t), bytes = count * esz;
	int salt = (int)(count % 13) + ti * 3 + oi;
	uint64_t d;
	int32_t dd[2], *all = calloc((size_t)size_, sizeof(dd));
	char what[160];

	snprintf(what, sizeof(what), "allreduce(%zu %s, %s, %s, %s)", count,
	         dtype_names[ti], op_names[oi], frac ? "fractions" : "integers",
	         inplace ? "in place" : "out of place");
	for (int r = 0; r < size_; r++)
		for (size_t i = 0; i < count; i++)
			put(t, in[r], i, val(frac, r, i, salt));
	if (inplace)
		memcpy(out, in[rank_], bytes);
	checks++;
	if (dt_coll_allreduce(c, inplace ? DT_COLL_IN_PLACE : in[rank_], out,
	                      count, t, op)) {
		FAIL("%s: %s", what, dt_errmsg());
		free(all);
		return;
	}
	d = fnv(out, bytes, 1469598103934665603ull);
	dd[0] = (int32_t)(d >> 32);
	dd[1] = (int32_t)d;
	checks++;
	if (dt_coll_allgather(c, dd, all, 2, DT_INT32))
		FAIL("%s: digests: %s", what, dt_errmsg());
	for (int r = 0; r < size_; r++)
		if (all[2 * r] != dd[0] || all[2 * r + 1] != dd[1]) {
			FAIL("%s: rank %d got other bits than rank %d", what, r,
			     rank_);
			break;
		}
	if (!frac) {
		ref_exact(t, op, want, count, salt);
		checks++;
		if (memcmp(out, want, bytes))
			FAIL("%s: not the exact result", what);
	}
	if (frac && expect_hier) {
		ref_hier(t, op, in, want, count, tmp);
		checks++;
		if (memcmp(out, want, bytes))
			FAIL("%s: not the sum in the hierarchical order", what);
	}
	if (rank_ == 0)
		printf("digest %s %s %s %zu %s %016llx\n", dtype_names[ti],
		       op_names[oi], frac ? "fractions" : "integers", count,
		       inplace ? "inplace" : "outofplace",
		       (unsigned long long)d);
	free(all);
}

int
main(int argc, char **argv)
{
	int expect_hier = 0, quick = 0;
	const char *cb = getenv("DT_COLL_CHUNK_BYTES");
	size_t chunk = cb ? (size_t)atol(cb) : 524288, sizes[16], nsizes = 0;
	size_t maxn = 0;
	dt_coll *c;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--expect") && i + 1 < argc)
			expect_hier = !strcmp(argv[++i], "hier");
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
	}
	if (dt_coll_init(&c)) {
		fprintf(stderr, "coll_hier_check: init: %s\n", dt_errmsg());
		return 1;
	}
	rank_ = dt_coll_rank(c);
	size_ = dt_coll_size(c);
	if (!learn_layout(c) && expect_hier) {
		FAIL("the hosts do not hold the same number of ranks");
		dt_coll_finalize(c);
		return 1;
	}
	printf("coll_hier_check rank %d of %d: %d hosts x %d ranks\n", rank_,
	       size_, nhosts, nlocal);
	/* Around the chunks (float32's) and the blocks: a chunk of every
	 * sub-block and one more, and one element either side. */
	{
		size_t ce = chunk / 4, nb = (size_t)size_ * ce;
		size_t base[] = {0,      1,      3,         (size_t)size_ - 1,
		                 nb - 1, nb + 1, 2 * nb + 7};

		for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
			sizes[nsizes++] = base[i];
		if (!quick)
			sizes[nsizes++] = (1u << 20) + 5;
	}
	for (size_t i = 0; i < nsizes; i++)
		maxn = sizes[i] > maxn ? sizes[i] : maxn;
	uint8_t **in = calloc((size_t)size_, sizeof(*in));
	uint8_t *out = malloc(maxn * 8 + 8), *want = malloc(maxn * 8 + 8);
	uint8_t *tmp = malloc(maxn * 8 + 8);
	for (int r = 0; r < size_ && in; r++)
		in[r] = malloc(maxn * 8 + 8);
	if (!in || !out || !want || !tmp || !in[size_ - 1]) {
		fprintf(stderr, "coll_hier_check: out of memory\n");
		return 1;
	}
	for (int frac = 0; frac <= 1; frac++)
		for (size_t s = 0; s < nsizes; s++)
			for (int ti = 0; ti < 4; ti++)
				for (int oi = 0; oi < 4; oi++)
					for (int ip = 0; ip <= 1; ip++)
						one(c, ti, oi, frac, sizes[s],
						    ip, expect_hier, in, out,
						    want, tmp);
	printf("coll_hier_check rank %d of %d: %d checks, %d failed\n", rank_,
	       size_, checks, failures);
	fflush(stdout);
	if (dt_coll_finalize(c)) {
		fprintf(stderr, "finalize: %s\n", dt_errmsg());
		failures++;
	}
	for (int r = 0; r < size_; r++)
		free(in[r]);
	free(in);
	free(out);
	free(want);
	free(tmp);
	free(host_of);
	free(pos_rank);
	return failures ? 1 : 0;
}
