/*
 * coll_check.c - the multi-rank checker of the collectives, run under
 * `dtrain launch -n N -s 0` (or mpirun) by tests/integration/coll_*.sh.
 *
 * Every rank builds deterministic inputs (small integers, so sums are
 * exact in every type and every order), computes locally what each
 * collective must return, runs it, and compares bit for bit: every
 * operation, data type and reduction, in place and out of place, for 0, 1,
 * 3, 1023 and 2^20+5 elements; then asynchronous, grouped and fused calls,
 * the barrier and the distributed-optimizer helpers.
 *
 *   coll_check             the correctness suite
 *   coll_check --quick     the same without the largest size
 *   coll_check --mismatch  the last rank passes another count, type or
 *                          operation: every rank must get DT_EMISMATCH
 *                          naming both calls, then carry on
 *   coll_check --stall     the last rank skips an allreduce (run with a
 *                          short DT_COLL_TIMEOUT): every rank must get the
 *                          stall report naming it, then carry on
 *   coll_check --die       the last rank exits before an allreduce: the
 *                          others must get an error, not hang
 *   coll_check --compression SPEC
 *                          the distributed optimizer's compressed sums and
 *                          averages (dt_coll_set_compression) over 4 steps,
 *                          with a layout of tensors over and under min_size
 *                          and without one: every rank must return, bit for
 *                          bit, what the test computes by running every
 *                          rank's encoder (residuals included) and adding
 *                          the decoded bodies in rank order
 *   coll_check --sizes     allreduces of alternating sizes (1 MiB + 4
 *                          bytes and 4 MiB of float32), back to back:
 *                          the second moves the bounds of the blocks, so
 *                          a rank that starts it while others still copy
 *                          the first's result must not overwrite that
 *   coll_check --order     sums of fractions, whose rounding depends on
 *                          the order of the additions: identical on every
 *                          rank and, by the same-host paths, in rank order
 *   coll_check --node ...  join the job first (dt_node_init_from_env) and
 *                          attach with dt_coll_init_node, as the KVStore's
 *                          horovod type does
 * Exit status 0 when every check passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/quant.h"
#include "dtrain/coll.h"
#include "dtrain/node.h"

static int rank_, size_, failures, checks;

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "coll_check rank %d: FAIL: ", rank_);          \
		fprintf(stderr, __VA_ARGS__);                                  \
		fputc('\n', stderr);                                           \
		failures++;                                                    \
	} while (0)

static const size_t sizes[] = {0, 1, 3, 1023, (1u << 20) + 5};
static const dt_dtype dtypes[] = {DT_FLOAT32, DT_FLOAT64, DT_INT32, DT_FLOAT16};
static const dt_coll_op ops[] = {DT_COLL_SUM, DT_COLL_AVG, DT_COLL_MIN,
                                 DT_COLL_MAX};

/* Input element i of rank r: an integer in [-50, 50]. */
static int
val(int r, size_t i, int salt)
{
	return (int)((r * 31 + (long)(i % 100003) * 17 + salt * 7) % 101) - 50;
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
		((int32_t *)buf)[i] = (int32_t)v;
		break;
	case DT_FLOAT16: { /* (halves hold these integers exactly) */
		float f = (float)v;

		dt__quant_fp16(&f, (uint8_t *)buf + 2 * i, 1);
		break;
	}
	}
}

static double
get16(const void *buf, size_t i)
{
	float f;

	dt__dequant_fp16((const uint8_t *)buf + 2 * i, &f, 1);
	return f;
}

static void
fill(dt_dtype t, void *buf, size_t n, int r, int salt)
{
	for (size_t i = 0; i < n; i++)
		put(t, buf, i, val(r, i, salt));
}

/* What op over all ranks gives for element i, in type t. */
static void
ref_reduce(dt_dtype t, dt_coll_op op, void *out, size_t i, int salt)
{
	long acc = val(0, i, salt);

	for (int r = 1; r < size_; r++) {
		long v = val(r, i, salt);
		if (op == DT_COLL_MIN)
			acc = v < acc ? v : acc;
		else if (op == DT_COLL_MAX)
			acc = v > acc ? v : acc;
		else
			acc += v;
	}
	if (op != DT_COLL_AVG) {
		put(t, out, i, (double)acc);
		return;
	}
	switch (t) {
	case DT_FLOAT32:
		((float *)out)[i] = (float)acc / (float)size_;
		break;
	case DT_FLOAT64:
		((double *)out)[i] = (double)acc / (double)size_;
		break;
	case DT_INT32:
		((int32_t *)out)[i] = (int32_t)(acc / size_);
		break;
	case DT_FLOAT16: /* the exact sum, divided in float32, rounded */
		put(t, out, i, (double)((float)acc / (float)size_));
		break;
	}
}

static void
check_equal(const char *what, dt_dtype t, const void *got, const void *want,
            size_t n)
{
	size_t esz = dt_dtype_size(t);

	checks++;
	for (size_t i = 0; i < n; i++) {
		if (memcmp((const char *)got + i * esz,
		           (const char *)want + i * esz, esz) == 0)
			continue;
		double g = t == DT_FLOAT32   ? ((const float *)got)[i]
		           : t == DT_FLOAT64 ? ((const double *)got)[i]
		           : t == DT_FLOAT16 ? get16(got, i)
		                             : ((const int32_t *)got)[i];
		double w = t == DT_FLOAT32   ? ((const float *)want)[i]
		           : t == DT_FLOAT64 ? ((const double *)want)[i]
		           : t == DT_FLOAT16 ? get16(want, i)
		                             : ((const int32_t *)want)[i];
		FAIL("%s: element %zu of %zu is %g, expected %g", what, i, n, g,
		     w);
		return;
	}
}

static int
call_ok(const char *what, dt_err err)
{
	checks++;
	if (err == DT_OK)
		return 1;
	FAIL("%s: %s: %s", what, dt_errname(err), dt_errmsg());
	return 0;
}

static void *
xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL) {
		fprintf(stderr, "coll_check: out of memory\n");
		exit(2);
	}
	return p;
}

static void
test_allreduce(dt_coll *c, size_t n, dt_dtype t, dt_coll_op op, int inplace)
{
	size_t esz = dt_dtype_size(t);
	char what[128];
	void *in = xmalloc(n * esz), *out = xmalloc(n * esz);
	void *want = xmalloc(n * esz);
	int salt = (int)op * 3 + (int)t + inplace;

	snprintf(what, sizeof(what), "allreduce(%zu, %s, %s, %s)", n,
	         dt_dtype_name(t), dt_coll_op_name(op),
	         inplace ? "in place" : "out of place");
	fill(t, in, n, rank_, salt);
	for (size_t i = 0; i < n; i++)
		ref_reduce(t, op, want, i, salt);
	if (inplace) {
		if (call_ok(what, dt_coll_allreduce(c, DT_COLL_IN_PLACE, in, n,
		                                    t, op)))
			check_equal(what, t, in, want, n);
	} else {
		memset(out, 0x7f, n * esz);
		if (call_ok(what, dt_coll_allreduce(c, in, out, n, t, op))) {
			check_equal(what, t, out, want, n);
			/* The input must be left alone. */
			fill(t, want, n, rank_, salt);
			check_equal("allreduce input untouched", t, in, want,
			            n);
		}
	}
	free(in);
	free(out);
	free(want);
}

static void
test_broadcast(dt_coll *c, size_t n, dt_dtype t, int root)
{
	size_t esz = dt_dtype_size(t);
	char what[128];
	void *buf = xmalloc(n * esz), *want = xmalloc(n * esz);

	snprintf(what, sizeof(what), "broadcast(%zu, %s, root %d)", n,
	         dt_dtype_name(t), root);
	fill(t, buf, n, rank_, 5);
	fill(t, want, n, root, 5);
	if (call_ok(what, dt_coll_broadcast(c, buf, n, t, root)))
		check_equal(what, t, buf, want, n);
	free(buf);
	free(want);
}

static void
test_allgatherv(dt_coll *c, const size_t *counts, dt_dtype t, int inplace,
                const char *label)
{
	size_t esz = dt_dtype_size(t), total = 0, off = 0, mine = 0;
	char what[160];

	for (int r = 0; r < size_; r++) {
		if (r == rank_)
			mine = total;
		total += counts[r];
	}
	void *send = xmalloc(counts[rank_] * esz);
	void *out = xmalloc(total * esz), *want = xmalloc(total * esz);
	snprintf(what, sizeof(what), "allgatherv(%s, total %zu, %s, %s)", label,
	         total, dt_dtype_name(t),
	         inplace ? "in place" : "out of place");
	fill(t, send, counts[rank_], rank_, 9);
	for (int r = 0; r < size_; r++) {
		fill(t, (char *)want + off * esz, counts[r], r, 9);
		off += counts[r];
	}
	memset(out, 0x7f, total * esz);
	if (inplace) {
		memcpy((char *)out + mine * esz, send, counts[rank_] * esz);
		if (call_ok(what, dt_coll_allgatherv(c, DT_COLL_IN_PLACE, out,
		                                     counts, t)))
			check_equal(what, t, out, want, total);
	} else if (call_ok(what, dt_coll_allgatherv(c, send, out, counts, t))) {
		check_equal(what, t, out, want, total);
	}
	free(send);
	free(out);
	free(want);
}

static void
test_reduce_scatter(dt_coll *c, size_t count, dt_dtype t, dt_coll_op op,
                    int inplace)
{
	size_t esz = dt_dtype_size(t), total = count * (size_t)size_;
	char what[160];
	void *in = xmalloc(total * esz), *out = xmalloc(total * esz);
	void *all = xmalloc(total * esz);
	int salt = 11 + (int)op;

	snprintf(what, sizeof(what), "reduce_scatter(%zu per rank, %s, %s, %s)",
	         count, dt_dtype_name(t), dt_coll_op_name(op),
	         inplace ? "in place" : "out of place");
	fill(t, in, total, rank_, salt);
	for (size_t i = 0; i < total; i++)
		ref_reduce(t, op, all, i, salt);
	if (inplace) {
		if (call_ok(what, dt_coll_reduce_scatter(c, DT_COLL_IN_PLACE,
		                                         in, count, t, op)))
			check_equal(what, t, in,
			            (char *)all + (size_t)rank_ * count * esz,
			            count);
	} else if (call_ok(what,
	                   dt_coll_reduce_scatter(c, in, out, count, t, op))) {
		check_equal(what, t, out,
		            (char *)all + (size_t)rank_ * count * esz, count);
	}
	free(in);
	free(out);
	free(all);
}

/* Asynchronous calls, groups and fusion. */
static void
test_async_and_groups(dt_coll *c)
{
	enum { NT = 6 };
	const size_t counts[NT] = {1, 3, 1023, 7, 1u << 16, 0};
	float *in[NT], *want[NT];
	double *d = xmalloc(100 * sizeof(double));
	double *dwant = xmalloc(100 * sizeof(double));
	dt_coll_tensor ts[NT];
	dt_coll_handle *h[NT + 2];

	for (int i = 0; i < NT; i++) {
		in[i] = xmalloc(counts[i] * sizeof(float));
		want[i] = xmalloc(counts[i] * sizeof(float));
	}
	/* A grouped allreduce, in place: fused into one operation. */
	for (int i = 0; i < NT; i++) {
		fill(DT_FLOAT32, in[i], counts[i], rank_, 20 + i);
		for (size_t k = 0; k < counts[i]; k++)
			ref_reduce(DT_FLOAT32, DT_COLL_SUM, want[i], k, 20 + i);
		ts[i] = (dt_coll_tensor){DT_COLL_IN_PLACE, in[i], counts[i]};
	}
	if (call_ok("allreduce_group", dt_coll_allreduce_group(
	                                   c, ts, NT, DT_FLOAT32, DT_COLL_SUM)))
		for (int i = 0; i < NT; i++)
			check_equal("allreduce_group tensor", DT_FLOAT32, in[i],
			            want[i], counts[i]);

	/* Asynchronous calls, waited on in reverse order. */
	for (int i = 0; i < 3; i++) {
		fill(DT_FLOAT32, in[i + 2], counts[i + 2], rank_, 40 + i);
		for (size_t k = 0; k < counts[i + 2]; k++)
			ref_reduce(DT_FLOAT32, DT_COLL_MAX, want[i + 2], k,
			           40 + i);
		call_ok("allreduce_async",
		        dt_coll_allreduce_async(c, NULL, in[i + 2],
		                                counts[i + 2], DT_FLOAT32,
		                                DT_COLL_MAX, &h[i]));
	}
	fill(DT_FLOAT64, d, 100, rank_, 3);
	fill(DT_FLOAT64, dwant, 100, size_ - 1, 3);
	call_ok(
	    "broadcast_async",
	    dt_coll_broadcast_async(c, d, 100, DT_FLOAT64, size_ - 1, &h[3]));
	for (int i = 3; i >= 0; i--)
		call_ok("wait", dt_coll_wait(h[i]));
	for (int i = 0; i < 3; i++)
		check_equal("allreduce_async", DT_FLOAT32, in[i + 2],
		            want[i + 2], counts[i + 2]);
	check_equal("broadcast_async", DT_FLOAT64, d, dwant, 100);

	/* A group mixing types and kinds: runs of allreduces fuse. */
	call_ok("group_start", dt_coll_group_start(c));
	for (int i = 0; i < 4; i++) {
		fill(DT_FLOAT32, in[i], counts[i], rank_, 60 + i);
		for (size_t k = 0; k < counts[i]; k++)
			ref_reduce(DT_FLOAT32, DT_COLL_AVG, want[i], k, 60 + i);
		call_ok("grouped allreduce_async",
		        dt_coll_allreduce_async(c, NULL, in[i], counts[i],
		                                DT_FLOAT32, DT_COLL_AVG,
		                                &h[i]));
		if (i == 1) {
			fill(DT_FLOAT64, d, 100, rank_, 4);
			fill(DT_FLOAT64, dwant, 100, 0, 4);
			call_ok("grouped broadcast_async",
			        dt_coll_broadcast_async(c, d, 100, DT_FLOAT64,
			                                0, &h[NT]));
		}
	}
	call_ok("group_end", dt_coll_group_end(c));
	for (int i = 0; i < 4; i++)
		call_ok("grouped wait", dt_coll_wait(h[i]));
	call_ok("grouped wait", dt_coll_wait(h[NT]));
	for (int i = 0; i < 4; i++)
		check_equal("grouped allreduce", DT_FLOAT32, in[i], want[i],
		            counts[i]);
	check_equal("grouped broadcast", DT_FLOAT64, d, dwant, 100);

	/* The other asynchronous forms. */
	{
		size_t per = 33, *cnt = xmalloc(sizeof(size_t) * size_);
		int32_t *ag = xmalloc(per * 4 * size_),
		        *agw = xmalloc(per * 4 * size_);
		double *rs = xmalloc(per * 8 * size_), *rso = xmalloc(per * 8);
		double *rsw = xmalloc(per * 8 * size_);
		int32_t *mine = xmalloc(per * 4);

		for (int r = 0; r < size_; r++) {
			cnt[r] = per;
			fill(DT_INT32, agw + (size_t)r * per, per, r, 70);
		}
		fill(DT_INT32, mine, per, rank_, 70);
		fill(DT_FLOAT64, rs, per * size_, rank_, 71);
		for (size_t k = 0; k < per * size_; k++)
			ref_reduce(DT_FLOAT64, DT_COLL_SUM, rsw, k, 71);
		call_ok("allgatherv_async",
		        dt_coll_allgatherv_async(c, mine, ag, cnt, DT_INT32,
		                                 &h[0]));
		call_ok("reduce_scatter_async",
		        dt_coll_reduce_scatter_async(
		            c, rs, rso, per, DT_FLOAT64, DT_COLL_SUM, &h[1]));
		call_ok("wait", dt_coll_wait(h[0]));
		call_ok("wait", dt_coll_wait(h[1]));
		check_equal("allgatherv_async", DT_INT32, ag, agw, per * size_);
		check_equal("reduce_scatter_async", DT_FLOAT64, rso,
		            rsw + (size_t)rank_ * per, per);
		free(cnt);
		free(ag);
		free(agw);
		free(rs);
		free(rso);
		free(rsw);
		free(mine);
	}

	/* dt_coll_test eventually reports done. */
	int done = 0;
	call_ok("barrier_async (allreduce of 0)",
	        dt_coll_allreduce_async(c, NULL, in[0], 0, DT_FLOAT32,
	                                DT_COLL_SUM, &h[0]));
	for (int spins = 0; !done && spins < 100000; spins++) {
		dt_coll_test(h[0], &done);
		if (!done)
			usleep(100);
	}
	if (!done)
		FAIL("dt_coll_test never reported done");
	call_ok("wait after test", dt_coll_wait(h[0]));
	call_ok("barrier", dt_coll_barrier(c));

	for (int i = 0; i < NT; i++) {
		free(in[i]);
		free(want[i]);
	}
	free(d);
	free(dwant);
}

static void
test_dist_opt(dt_coll *c)
{
	size_t n = 5000;
	float *p = xmalloc(n * sizeof(float)), *g = xmalloc(n * sizeof(float));
	float *want = xmalloc(n * sizeof(float));

	fill(DT_FLOAT32, p, n, rank_, 1);
	fill(DT_FLOAT32, want, n, 0, 1);
	if (call_ok("dist_opt_broadcast", dt_coll_dist_opt_broadcast(c, p, n)))
		check_equal("dist_opt_broadcast", DT_FLOAT32, p, want, n);
	fill(DT_FLOAT32, g, n, rank_, 2);
	for (size_t i = 0; i < n; i++)
		ref_reduce(DT_FLOAT32, DT_COLL_AVG, want, i, 2);
	if (call_ok("dist_opt_average", dt_coll_dist_opt_average(c, g, n)))
		check_equal("dist_opt_average", DT_FLOAT32, g, want, n);
	free(p);
	free(g);
	free(want);
}

static void
suite(dt_coll *c, int quick)
{
	size_t nsizes = (sizeof(sizes) / sizeof(sizes[0])) - (quick ? 1 : 0);

	for (size_t si = 0; si < nsizes; si++) {
		size_t n = sizes[si];
		for (size_t ti = 0; ti < sizeof(dtypes) / sizeof(dtypes[0]);
		     ti++) {
			dt_dtype t = dtypes[ti];
			for (size_t oi = 0; oi < 4; oi++)
				for (int ip = 0; ip < 2; ip++)
					test_allreduce(c, n, t, ops[oi], ip);
			test_broadcast(c, n, t, 0);
			test_broadcast(c, n, t, size_ - 1);

			size_t *counts = xmalloc(sizeof(size_t) * size_);
			for (int r = 0; r < size_; r++)
				counts[r] = n / size_ + (r < (int)(n % size_));
			for (int ip = 0; ip < 2; ip++)
				test_allgatherv(c, counts, t, ip, "even");
			/* Uneven: every other rank contributes nothing. */
			for (int r = 0; r < size_; r++)
				counts[r] = (r % 2) ? 0 : n;
			test_allgatherv(c, counts, t, 0, "uneven");
			free(counts);

			size_t per = (n + size_ - 1) / size_;
			test_reduce_scatter(c, per, t, ops[(si + ti) % 4], 0);
			test_reduce_scatter(c, per, t, ops[(si + ti + 1) % 4],
			                    1);
		}
	}
	/* allgather with equal counts (the convenience form). */
	{
		size_t n = 257;
		int32_t *in = xmalloc(n * 4), *out = xmalloc(n * 4 * size_);
		int32_t *want = xmalloc(n * 4 * size_);
		fill(DT_INT32, in, n, rank_, 8);
		for (int r = 0; r < size_; r++)
			fill(DT_INT32, want + (size_t)r * n, n, r, 8);
		if (call_ok("allgather",
		            dt_coll_allgather(c, in, out, n, DT_INT32)))
			check_equal("allgather", DT_INT32, out, want,
			            n * size_);
		free(in);
		free(out);
		free(want);
	}
	test_async_and_groups(c);
	test_dist_opt(c);
}

/*
 * --order: sums whose rounding depends on the order of the additions
 * (fractions, not the exact integers of the suite), float32 and float64,
 * in place and out of place, at odd sizes. Every rank must get the same
 * bits - a hash of each result is gathered and compared - and, by the
 * same-host paths (run with DT_COLL_CMA_THRESHOLD=0), exactly the sum in
 * rank order, ((x0 + x1) + x2) + ..., which is computed here. The sizes where
 * that order rounds differently from adding from the last rank back are
 * counted: the check must be able to tell the orders apart.
 */
static const size_t order_sizes[] = {1, 3, 1023, 4099, 16383, 65537};

static double
frac(int r, size_t i)
{
	return (val(r, i, 5) + 0.1 * (r + 1)) / 3.0;
}

static uint64_t
hash_bytes(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* Element i of the rank-order sum (1) or of the sum from the last rank
 * back, x0 + (x1 + (x2 + ...)) (0). */
static double
order_sum(dt_dtype t, size_t i, int in_order)
{
	if (t == DT_FLOAT32) {
		float acc = (float)frac(0, i), back = (float)frac(size_ - 1, i);
		for (int r = 1; r < size_; r++)
			acc = acc + (float)frac(r, i);
		for (int r = size_ - 2; r >= 0; r--)
			back = (float)frac(r, i) + back;
		return in_order ? acc : back;
	}
	double acc = frac(0, i), back = frac(size_ - 1, i);
	for (int r = 1; r < size_; r++)
		acc = acc + frac(r, i);
	for (int r = size_ - 2; r >= 0; r--)
		back = frac(r, i) + back;
	return in_order ? acc : back;
}

static void
test_order(dt_coll *c, size_t n, dt_dtype t, int inplace, int *telling)
{
	size_t esz = dt_dtype_size(t);
	void *in = xmalloc(n * esz), *out = xmalloc(n * esz);
	void *want = xmalloc(n * esz);
	int32_t mine[2], *all = xmalloc(sizeof(int32_t) * 2 * size_);
	char what[96];
	int differs = 0;

	for (size_t i = 0; i < n; i++) {
		put(t, in, i, frac(rank_, i));
		put(t, want, i, order_sum(t, i, 1));
		differs |= order_sum(t, i, 1) != order_sum(t, i, 0);
	}
	*telling += differs;
	snprintf(what, sizeof(what), "rank-order allreduce %s n=%zu%s",
	         t == DT_FLOAT32 ? "float32" : "float64", n,
	         inplace ? " in place" : "");
	if (inplace)
		memcpy(out, in, n * esz);
	if (call_ok(what, dt_coll_allreduce(c, inplace ? DT_COLL_IN_PLACE : in,
	                                    out, n, t, DT_COLL_SUM))) {
		uint64_t h = hash_bytes(out, n * esz);
		mine[0] = (int32_t)(uint32_t)h;
		mine[1] = (int32_t)(uint32_t)(h >> 32);
		if (call_ok("gathering result hashes",
		            dt_coll_allgather(c, mine, all, 2, DT_INT32))) {
			checks++;
			for (int r = 0; r < size_; r++)
				if (all[2 * r] != mine[0] ||
				    all[2 * r + 1] != mine[1])
					FAIL("%s: rank %d's result differs "
					     "from mine",
					     what, r);
		}
		check_equal(what, t, out, want, n);
	}
	free(in);
	free(out);
	free(want);
	free(all);
}

static void
order_suite(dt_coll *c)
{
	int telling = 0;

	for (size_t si = 0; si < sizeof(order_sizes) / sizeof(order_sizes[0]);
	     si++)
		for (int ip = 0; ip < 2; ip++) {
			test_order(c, order_sizes[si], DT_FLOAT32, ip,
			           &telling);
			test_order(c, order_sizes[si], DT_FLOAT64, ip,
			           &telling);
		}
	checks++;
	if (size_ > 2 && telling == 0)
		FAIL("order: no size where the two orders round apart");
	printf(
	    "coll_check rank %d: rank order told apart from the reverse in %d "
	    "of %zu cases\n",
	    rank_, telling, 4 * sizeof(order_sizes) / sizeof(order_sizes[0]));
}

/* An error call: must fail with code want and a message holding each of
 * the needles. */
static void
expect_error(const char *what, dt_err got, dt_err want,
             const char *const *needles)
{
	const char *msg = dt_errmsg();

	checks++;
	if (got != want) {
		FAIL("%s: got %s (%s), expected %s", what, dt_errname(got), msg,
		     dt_errname(want));
		return;
	}
	for (int i = 0; needles[i]; i++)
		if (strstr(msg, needles[i]) == NULL) {
			FAIL("%s: message '%s' lacks '%s'", what, msg,
			     needles[i]);
			return;
		}
	printf("coll_check rank %d: %s: %s: %s\n", rank_, what, dt_errname(got),
	       msg);
}

/* After an error the communicator works on (small and large paths). */
static void
after_error_ok(dt_coll *c)
{
	test_allreduce(c, 1023, DT_FLOAT32, DT_COLL_SUM, 1);
	test_allreduce(c, (1u << 18) + 1, DT_FLOAT32, DT_COLL_SUM, 0);
}

/*
 * --sizes: pairs of allreduces of two sizes (1 MiB + 4 bytes, then
 * 4 MiB, float32 sums, out of place), called back to back - the inputs
 * and the expected sums made once, before - and both checked after each
 * pair: the second starts as soon as the first returns, while the others
 * may still be copying out the first's result.
 */
static void
sizes_suite(dt_coll *c)
{
	const size_t n[2] = {(1u << 18) + 1, 1u << 20};
	float *in[2], *out[2], *want[2];

	for (int k = 0; k < 2; k++) {
		in[k] = xmalloc(n[k] * sizeof(float));
		out[k] = xmalloc(n[k] * sizeof(float));
		want[k] = xmalloc(n[k] * sizeof(float));
		fill(DT_FLOAT32, in[k], n[k], rank_, 11 + k);
		for (size_t i = 0; i < n[k]; i++)
			ref_reduce(DT_FLOAT32, DT_COLL_SUM, want[k], i, 11 + k);
	}
	for (int i = 0; i < 12; i++) {
		dt_err err[2];

		for (int k = 0; k < 2; k++)
			memset(out[k], 0x7f, n[k] * sizeof(float));
		for (int k = 0; k < 2; k++)
			err[k] = dt_coll_allreduce(c, in[k], out[k], n[k],
			                           DT_FLOAT32, DT_COLL_SUM);
		for (int k = 0; k < 2; k++)
			if (call_ok(k ? "allreduce(4 MiB) after 1 MiB"
			              : "allreduce(1 MiB + 4) before 4 MiB",
			            err[k]))
				check_equal(k ? "allreduce(4 MiB) after 1 MiB"
				              : "allreduce(1 MiB + 4) before "
				                "4 MiB",
				            DT_FLOAT32, out[k], want[k], n[k]);
	}
	for (int k = 0; k < 2; k++) {
		free(in[k]);
		free(out[k]);
		free(want[k]);
	}
}

static void
mismatch_suite(dt_coll *c)
{
	int last = rank_ == size_ - 1;
	size_t big = 1u << 20;
	float *buf = xmalloc((big + 1) * sizeof(float));
	char a[64], b[64];
	dt_err err;

	memset(buf, 0, (big + 1) * sizeof(float));
	/* 1: a count mismatch on the small (recursive-doubling) path. */
	err = dt_coll_allreduce(c, NULL, buf, last ? 1001 : 1000, DT_FLOAT32,
	                        DT_COLL_SUM);
	snprintf(a, sizeof(a), "called allreduce(count=1000, float32, sum)");
	snprintf(b, sizeof(b), "rank %d called allreduce(count=1001",
	         size_ - 1);
	expect_error("count mismatch (small)", err, DT_EMISMATCH,
	             (const char *[]){"ranks disagree", a, b, NULL});
	after_error_ok(c);

	/* 2: a count mismatch on the ring path. */
	err = dt_coll_allreduce(c, NULL, buf, last ? big + 1 : big, DT_FLOAT32,
	                        DT_COLL_SUM);
	snprintf(a, sizeof(a), "allreduce(count=%zu, float32, sum)", big);
	snprintf(b, sizeof(b), "allreduce(count=%zu, float32, sum)", big + 1);
	expect_error("count mismatch (ring)", err, DT_EMISMATCH,
	             (const char *[]){"ranks disagree", a, b, NULL});
	after_error_ok(c);

	/* 3: another type. */
	err = dt_coll_allreduce(c, NULL, buf, 100, last ? DT_INT32 : DT_FLOAT32,
	                        DT_COLL_SUM);
	expect_error("type mismatch", err, DT_EMISMATCH,
	             (const char *[]){"allreduce(count=100, float32, sum)",
	                              "allreduce(count=100, int32, sum)",
	                              NULL});
	after_error_ok(c);

	/* 4: another reduction. */
	err = dt_coll_allreduce(c, NULL, buf, 100, DT_FLOAT32,
	                        last ? DT_COLL_MAX : DT_COLL_SUM);
	expect_error("reduction mismatch", err, DT_EMISMATCH,
	             (const char *[]){"float32, sum)", "float32, max)", NULL});

	/* 5: another operation (broadcast against allreduce). */
	if (last)
		err = dt_coll_broadcast(c, buf, 100, DT_FLOAT32, 0);
	else
		err = dt_coll_allreduce(c, NULL, buf, 100, DT_FLOAT32,
		                        DT_COLL_SUM);
	expect_error("operation mismatch", err, DT_EMISMATCH,
	             (const char *[]){"broadcast(count=100, float32, root=0)",
	                              "allreduce(count=100", NULL});
	after_error_ok(c);
	free(buf);
}

static void
stall_suite(dt_coll *c)
{
	int last = rank_ == size_ - 1;
	float buf[64] = {0};
	char who[64];
	const char *t = getenv("DT_COLL_TIMEOUT");
	int timeout = t ? atoi(t) : 60;
	dt_err err;

	snprintf(who, sizeof(who), "rank %d has not called it", size_ - 1);
	call_ok("barrier before the stall", dt_coll_barrier(c));
	if (last) {
		/* Skip the allreduce; the others time out and tell us. Come
		 * back before they time out on the next call. */
		sleep((unsigned)timeout + 1);
		err = dt_coll_barrier(c);
	} else {
		err = dt_coll_allreduce(c, NULL, buf, 64, DT_FLOAT32,
		                        DT_COLL_SUM);
	}
	expect_error("stall report", err, DT_ETIMEDOUT,
	             (const char *[]){"allreduce #", "stalled", who, NULL});
	after_error_ok(c);
}

static void
die_suite(dt_coll *c)
{
	float buf[1024] = {0};
	dt_err err;

	const char *dir = getenv("COLL_CHECK_SYNC_DIR");
	char path[512];

	call_ok("barrier before the death", dt_coll_barrier(c));
	/* The last message of a barrier may still be on its way to a rank
	 * when the dying one returns from it; if the job's abort overtook it
	 * (another connection), that rank's barrier would fail. So, given a
	 * directory, each rank says there that its barrier returned, and
	 * the dying rank waits for all of them (30 s at most). */
	if (dir && rank_ != size_ - 1) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/passed.%d", dir, rank_);
		if ((f = fopen(path, "w")) != NULL)
			fclose(f);
	}
	if (rank_ == size_ - 1) {
		for (int r = 0, tries = 0;
		     dir && r < size_ - 1 && tries < 3000;) {
			snprintf(path, sizeof(path), "%s/passed.%d", dir, r);
			if (access(path, F_OK) == 0) {
				r++;
				continue;
			}
			usleep(10000);
			tries++;
		}
		fflush(NULL);
		_exit(0); /* vanish without leaving the job */
	}
	err = dt_coll_allreduce(c, NULL, buf, 1024, DT_FLOAT32, DT_COLL_SUM);
	checks++;
	if (err == DT_OK) {
		FAIL("allreduce with a dead rank succeeded");
		return;
	}
	printf("coll_check rank %d: dead peer: %s: %s\n", rank_,
	       dt_errname(err), dt_errmsg());
	/* Later calls fail at once. */
	err = dt_coll_allreduce(c, NULL, buf, 1024, DT_FLOAT32, DT_COLL_SUM);
	if (err == DT_OK)
		FAIL("allreduce after a dead rank succeeded");
	checks++;
}

/* Step s of rank r's gradients, exactly summable in any order once
 * decoded (as kv_check's). */
static float
cgrad(dt_quant_kind kind, int r, int s, size_t i)
{
	switch (kind) {
	case DT_QUANT_2BIT:
		return (float)(((int)(i % 5) - 2) * 0.375 + r * 0.0625 -
		               s * 0.125);
	case DT_QUANT_1BIT:
		return i % 3 == 0 ? (float)-(r + 1) : (float)(r + 2 + s);
	default:
		return (float)val(r, i, s);
	}
}

static void
compression_suite(dt_coll *c, const char *spec)
{
	static const size_t layout[] = {3, 70000, 5, 100000};
	const size_t nl = sizeof(layout) / sizeof(layout[0]);
	dt_quant_spec q;

	if (!call_ok("set_compression", dt_coll_set_compression(c, spec)) ||
	    dt__quant_parse(spec, &q))
		return;
	for (int pass = 0; pass < 2; pass++) {
		/* pass 0: the layout; pass 1: one tensor (another n, so
		 * the residual starts again) */
		size_t n = pass == 0 ? 170008 : 4099;
		float *g = xmalloc(n * 4), *want = xmalloc(n * 4);
		float *res = calloc((size_t)size_ * n, 4), *d = xmalloc(n * 4);
		uint8_t *buf = xmalloc(dt__quant_size(q.kind, n) + 4 * n + 64);

		if (!call_ok("dist_opt_layout",
		             dt_coll_dist_opt_layout(c, layout,
		                                     pass == 0 ? (int)nl : 0)))
			return;
		for (int step = 0; step < 4; step++) {
			for (size_t i = 0; i < n; i++)
				g[i] = cgrad(q.kind, rank_, step, i);
			memset(want, 0, n * 4);
			for (int r = 0; r < size_; r++) {
				size_t off = 0;

				for (size_t t = 0; t < (pass ? 1 : nl); t++) {
					size_t len = pass ? n : layout[t];
					int enc = q.kind == DT_QUANT_FP16 ||
					          pass || len >= q.min_size;
					float *rr = res + (size_t)r * n + off;

					for (size_t i = 0; i < len; i++)
						d[i] = cgrad(q.kind, r, step,
						             off + i);
					if (enc && q.kind != DT_QUANT_FP16) {
						dt__quant_encode(&q, d, rr, len,
						                 buf);
						dt__quant_decode(q.kind,
						                 q.threshold,
						                 buf, len, d);
					} else if (enc) { /* (exact here) */
						dt__quant_fp16(d, buf, len);
						dt__dequant_fp16(buf, d, len);
					}
					for (size_t i = 0; i < len; i++)
						want[off + i] += d[i];
					off += len;
				}
			}
			if (step == 3) {
				if (call_ok(
				        "dist_opt_average",
				        dt_coll_dist_opt_average(c, g, n))) {
					for (size_t i = 0; i < n; i++)
						want[i] /= (float)size_;
					check_equal("compressed average",
					            DT_FLOAT32, g, want, n);
				}
			} else if (call_ok("dist_opt_sum",
			                   dt_coll_dist_opt_sum(c, g, n))) {
				check_equal("compressed sum", DT_FLOAT32, g,
				            want, n);
			}
		}
		free(g);
		free(want);
		free(res);
		free(d);
		free(buf);
	}
	/* A rank set otherwise (same sizes, another threshold) is named. */
	if (q.kind == DT_QUANT_2BIT && size_ > 1) {
		float g[64];
		dt_err err;

		for (int i = 0; i < 64; i++)
			g[i] = 1.0f;
		if (rank_ == size_ - 1)
			dt_coll_set_compression(c, "type=2bit,threshold=0.3");
		err = dt_coll_dist_opt_sum(c, g, 64);
		checks++;
		if (err != DT_EMISMATCH ||
		    strstr(dt_errmsg(), "another compression") == NULL)
			FAIL("a rank with another threshold: %s (%s)",
			     dt_errname(err), dt_errmsg());
		dt_coll_set_compression(c, spec);
		call_ok("dist_opt_sum after a mismatch",
		        dt_coll_dist_opt_sum(c, g, 64));
	}
}

int
main(int argc, char **argv)
{
	int quick = 0, mode = 0, attach = 0;
	const char *spec = NULL;
	dt_node *node = NULL;
	dt_coll *c;
	dt_err err;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0)
			quick = 1;
		else if (strcmp(argv[i], "--mismatch") == 0)
			mode = 1;
		else if (strcmp(argv[i], "--stall") == 0)
			mode = 2;
		else if (strcmp(argv[i], "--die") == 0)
			mode = 3;
		else if (strcmp(argv[i], "--node") == 0)
			attach = 1;
		else if (strcmp(argv[i], "--order") == 0)
			mode = 4;
		else if (strcmp(argv[i], "--sizes") == 0)
			mode = 5;
		else if (strcmp(argv[i], "--compression") == 0 && i + 1 < argc)
			spec = argv[++i];
		else {
			fprintf(stderr,
			        "usage: coll_check [--quick] "
			        "[--mismatch|--stall|--die|--order|--sizes] "
			        "[--node]\n");
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (attach) {
		/* As the KVStore does: the node first, then collectives on it.
		 */
		if ((err = dt_node_init_from_env(&node)) || node == NULL ||
		    (err = dt_coll_init_node(node, &c))) {
			fprintf(stderr, "coll_check: init_node: %s\n",
			        node ? dt_errmsg() : "no cluster");
			return 1;
		}
	} else if ((err = dt_coll_init(&c))) {
		fprintf(stderr, "coll_check: init: %s\n", dt_errmsg());
		return 1;
	}
	rank_ = dt_coll_rank(c);
	size_ = dt_coll_size(c);
	if (dt_coll_local_rank(c) < 0 ||
	    dt_coll_local_rank(c) >= dt_coll_local_size(c) ||
	    dt_coll_local_size(c) > size_)
		FAIL("local rank %d of %d in a job of %d",
		     dt_coll_local_rank(c), dt_coll_local_size(c), size_);
	if (spec)
		compression_suite(c, spec);
	else if (mode == 0)
		suite(c, quick);
	else if (mode == 4)
		order_suite(c);
	else if (mode == 5)
		sizes_suite(c);
	else if (size_ < 2)
		printf(
		    "coll_check: error tests need 2 ranks or more; skipped\n");
	else if (mode == 1)
		mismatch_suite(c);
	else if (mode == 2)
		stall_suite(c);
	else
		die_suite(c);
	err = dt_coll_finalize(c);
	if (err && mode != 3)
		FAIL("finalize: %s", dt_errmsg());
	if (node && (err = dt_node_stop(node)) && mode != 3)
		FAIL("node stop: %s", dt_errmsg());
	printf("coll_check rank %d of %d: %d checks, %d failed\n", rank_, size_,
	       checks, failures);
	return failures ? 1 : 0;
}
