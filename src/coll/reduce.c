/*
 * reduce.c - the reduction kernels of the collectives: dst = a op b for
 * each element type and reduction, and the division of an average.
 *
 * They run in the I/O thread on data straight from the socket buffer (the
 * ring's reduce-scatter) and in the executing thread (recursive doubling),
 * so they are plain loops the compiler vectorises; restrict is not used
 * because dst may alias a or b. Every rank reduces in the same order
 * (see algo.c), so results are bitwise identical across ranks.
 */
/*
 * GCC (12) vectorises none of these loops at the project's -O2: its cheap
 * cost model refuses the run-time alias checks they need (dst may alias
 * an input). The kernels are most of the CPU time of a large reduction,
 * so this file asks for -O3's vectoriser; clang vectorises them at -O2.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

#include <stdint.h>
#include <string.h>

#include "coll/coll_impl.h"
#include "common/quant.h"

size_t
dt_dtype_size(dt_dtype dtype)
{
	switch (dtype) {
	case DT_FLOAT32:
		return 4;
	case DT_FLOAT64:
		return 8;
	case DT_INT32:
		return 4;
	case DT_FLOAT16:
		return 2;
	}
	return 0;
}

const char *
dt_dtype_name(dt_dtype dtype)
{
	switch (dtype) {
	case DT_FLOAT32:
		return "float32";
	case DT_FLOAT64:
		return "float64";
	case DT_INT32:
		return "int32";
	case DT_FLOAT16:
		return "float16";
	}
	return "?";
}

const char *
dt_coll_op_name(dt_coll_op op)
{
	switch (op) {
	case DT_COLL_SUM:
		return "sum";
	case DT_COLL_AVG:
		return "average";
	case DT_COLL_MIN:
		return "min";
	case DT_COLL_MAX:
		return "max";
	}
	return "?";
}

int
dt__coll_dtype_valid(int dtype)
{
	return dtype == DT_FLOAT32 || dtype == DT_FLOAT64 ||
	       dtype == DT_INT32 || dtype == DT_FLOAT16;
}

int
dt__coll_op_valid(int op)
{
	return op >= DT_COLL_SUM && op <= DT_COLL_MAX;
}

/*
 * One loop per (type, op). Integer sums wrap modulo 2^32 like MPI's (done
 * in unsigned arithmetic, so overflow is defined).
 */
#define DT_RED_LOOP(T, EXPR)                                                   \
	do {                                                                   \
		T *d_ = dst;                                                   \
		const T *a_ = a, *b_ = b;                                      \
		for (size_t i = 0; i < n; i++) {                               \
			T x = a_[i], y = b_[i];                                \
			d_[i] = (EXPR);                                        \
		}                                                              \
	} while (0)

/*
 * On x86-64 the kernels are built twice, for AVX2 and for the baseline
 * (SSE2), and the loader picks the one the processor runs (GCC's
 * target_clones, an ifunc): eight floats an instruction instead of four,
 * about half the instructions of a float sum. Each element is still
 * the one addition (or comparison) x op y, whatever the width, so both
 * give the same bits, on every rank and beside every other algorithm.
 * Not under ThreadSanitizer, which instruments the loader's choice with
 * calls into its runtime before that runtime has started.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) &&         \
    defined(__ELF__) && !defined(__SANITIZE_THREAD__)
#define DT_KERNEL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DT_KERNEL_CLONES
#endif

DT_KERNEL_CLONES static void
reduce_f32(dt_coll_op op, void *dst, const void *a, const void *b, size_t n)
{
	switch (op) {
	case DT_COLL_SUM:
	case DT_COLL_AVG:
		DT_RED_LOOP(float, x + y);
		break;
	case DT_COLL_MIN:
		DT_RED_LOOP(float, y < x ? y : x);
		break;
	case DT_COLL_MAX:
		DT_RED_LOOP(float, y > x ? y : x);
		break;
	}
}

DT_KERNEL_CLONES static void
reduce_f64(dt_coll_op op, void *dst, const void *a, const void *b, size_t n)
{
	switch (op) {
	case DT_COLL_SUM:
	case DT_COLL_AVG:
		DT_RED_LOOP(double, x + y);
		break;
	case DT_COLL_MIN:
		DT_RED_LOOP(double, y < x ? y : x);
		break;
	case DT_COLL_MAX:
		DT_RED_LOOP(double, y > x ? y : x);
		break;
	}
}

DT_KERNEL_CLONES static void
reduce_i32(dt_coll_op op, void *dst, const void *a, const void *b, size_t n)
{
	switch (op) {
	case DT_COLL_SUM:
	case DT_COLL_AVG:
		DT_RED_LOOP(int32_t, (int32_t)((uint32_t)x + (uint32_t)y));
		break;
	case DT_COLL_MIN:
		DT_RED_LOOP(int32_t, y < x ? y : x);
		break;
	case DT_COLL_MAX:
		DT_RED_LOOP(int32_t, y > x ? y : x);
		break;
	}
}

/* Halves: a block of each operand widened (so dst may alias either),
 * combined in float32, rounded back. */
#define F16_BLOCK 512

static void
reduce_f16(dt_coll_op op, void *dst, const void *a, const void *b, size_t n)
{
	float x[F16_BLOCK], y[F16_BLOCK];
	const uint8_t *pa = a, *pb = b;
	uint8_t *pd = dst;

	for (size_t base = 0; base < n; base += F16_BLOCK) {
		size_t m = n - base < F16_BLOCK ? n - base : F16_BLOCK;

		dt__dequant_fp16(pa + 2 * base, x, m);
		dt__dequant_fp16(pb + 2 * base, y, m);
		switch (op) {
		case DT_COLL_SUM:
		case DT_COLL_AVG:
			for (size_t i = 0; i < m; i++)
				x[i] += y[i];
			break;
		case DT_COLL_MIN:
			for (size_t i = 0; i < m; i++)
				x[i] = y[i] < x[i] ? y[i] : x[i];
			break;
		case DT_COLL_MAX:
			for (size_t i = 0; i < m; i++)
				x[i] = y[i] > x[i] ? y[i] : x[i];
			break;
		}
		dt__quant_fp16(x, pd + 2 * base, m);
	}
}

void
dt__coll_reduce(dt_dtype dtype, dt_coll_op op, void *dst, const void *a,
                const void *b, size_t n)
{
	switch (dtype) {
	case DT_FLOAT32:
		reduce_f32(op, dst, a, b, n);
		break;
	case DT_FLOAT64:
		reduce_f64(op, dst, a, b, n);
		break;
	case DT_INT32:
		reduce_i32(op, dst, a, b, n);
		break;
	case DT_FLOAT16:
		reduce_f16(op, dst, a, b, n);
		break;
	}
}

void
dt__coll_scale(dt_dtype dtype, void *buf, size_t n, int divisor)
{
	if (divisor == 1)
		return;
	switch (dtype) {
	case DT_FLOAT32: {
		/* Divide (not multiply by 1/n) so the result is the correctly
		 * rounded average of the exact sum when the sum is exact. */
		float *p = buf, d = (float)divisor;
		for (size_t i = 0; i < n; i++)
			p[i] = p[i] / d;
		break;
	}
	case DT_FLOAT64: {
		double *p = buf, d = (double)divisor;
		for (size_t i = 0; i < n; i++)
			p[i] = p[i] / d;
		break;
	}
	case DT_INT32: {
		int32_t *p = buf;
		for (size_t i = 0; i < n; i++)
			p[i] = p[i] / divisor;
		break;
	}
	case DT_FLOAT16: {
		uint8_t *p = buf;
		float x[F16_BLOCK], d = (float)divisor;

		for (size_t base = 0; base < n; base += F16_BLOCK) {
			size_t m = n - base < F16_BLOCK ? n - base : F16_BLOCK;

			dt__dequant_fp16(p + 2 * base, x, m);
			for (size_t i = 0; i < m; i++)
				x[i] = x[i] / d;
			dt__quant_fp16(x, p + 2 * base, m);
		}
		break;
	}
	}
}
