/*
 * quant.c - fp16, 2-bit and 1-bit codecs (quant.h). Plain C written so
 * that the compiler vectorises the inner loops (branch-free selects, no
 * aliasing between input and output); bench/compress_bench measures them
 * beside memcpy.
 */
#include <math.h>
#include <string.h>

#include "common/quant.h"

/* Values per block of the blocked loops. */
#define QBLOCK 1024

static inline uint32_t
le32(uint32_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	return __builtin_bswap32(v);
#else
	return v;
#endif
}

static inline void
put32(uint8_t *p, uint32_t v)
{
	v = le32(v);
	memcpy(p, &v, 4);
}

static inline uint32_t
get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32(v);
}

static inline uint32_t
fbits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float
bitsf(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

size_t
dt__quant_size(dt_quant_kind kind, size_t n)
{
	if (n > SIZE_MAX / 4 - 16)
		return 0;
	switch (kind) {
	case DT_QUANT_NONE:
		return 4 * n;
	case DT_QUANT_FP16:
		return 2 * n;
	case DT_QUANT_2BIT:
		return 4 * ((n + 15) / 16);
	case DT_QUANT_1BIT:
		return 8 + 4 * ((n + 31) / 32);
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* fp16                                                                */

/* Round to nearest even, saturating finite overflow to the largest half
 * (65504 = 0x7bff); infinities stay infinite, NaN stays NaN (quiet). */
static inline uint16_t
to_half(float f)
{
	uint32_t x = fbits(f), sign = (x >> 16) & 0x8000, o;

	x &= 0x7fffffff;
	if (x > 0x7f800000) { /* NaN: quiet, the payload's top bits */
		o = 0x7e00 | ((x >> 13) & 0x3ff);
	} else if (x == 0x7f800000) {
		o = 0x7c00;
	} else if (x >= 0x477ff000) { /* >= 65520: would round to inf */
		o = 0x7bff;
	} else if (x < 0x38800000) { /* below 2^-14: subnormal or zero */
		/* Adding 0.5 lines the value up on the half subnormal unit
		 * (2^-24) in the float's mantissa, rounding to even. */
		o = fbits(bitsf(x) + 0.5f) - fbits(0.5f);
	} else {
		uint32_t odd = (x >> 13) & 1;

		x += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
		o = x >> 13;
	}
	return (uint16_t)(o | sign);
}

static inline float
from_half(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, em = h & 0x7fffu, x;

	if (em > 0x7c00) /* NaN: quiet, its payload kept (as F16C does) */
		x = 0x7fc00000 | ((em & 0x3ff) << 13);
	else if (em == 0x7c00) /* inf */
		x = 0x7f800000;
	else if (em >= 0x400) /* normal */
		x = (em << 13) + ((uint32_t)(127 - 15) << 23);
	else /* subnormal or zero: em * 2^-24, exact */
		x = fbits((float)em * 0x1p-24f);
	return bitsf(x | sign);
}

/*
 * x86 with F16C converts 8 values an instruction (VCVTPS2PH, VCVTPH2PS:
 * IEEE round to nearest even, NaN quieted with its payload's top bits -
 * the rules above). Only the saturation is ours: finite values beyond
 * 65504 are set to +-65504 first. quant_test checks every half and a
 * million random floats against the portable code. Chosen at run time.
 */
#if defined(__x86_64__) && defined(__GNUC__) &&                                \
    (defined(__clang__) || __GNUC__ >= 9)
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#define HAVE_F16C_PATH 1

__attribute__((target("avx,f16c"))) static size_t
fp16_pack_f16c(const float *in, uint8_t *out, size_t n)
{
	const __m256 lim = _mm256_set1_ps(65504.0f),
	             inf = _mm256_set1_ps(__builtin_inff()),
	             abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps(in + i), ax = _mm256_and_ps(x, abs);
		__m256 over = _mm256_and_ps(_mm256_cmp_ps(ax, lim, _CMP_GT_OQ),
		                            _mm256_cmp_ps(ax, inf, _CMP_LT_OQ));
		__m256 sat = _mm256_or_ps(lim, _mm256_andnot_ps(abs, x));

		x = _mm256_blendv_ps(x, sat, over);
		_mm_storeu_si128((__m128i *)(void *)(out + 2 * i),
		                 _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT |
		                                        _MM_FROUND_NO_EXC));
	}
	return i;
}

__attribute__((target("avx,f16c"))) static size_t
fp16_unpack_f16c(const uint8_t *in, float *out, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(
		    out + i, _mm256_cvtph_ps(_mm_loadu_si128(
		                 (const __m128i *)(const void *)(in + 2 * i))));
	return i;
}

/* CPUID.1:ECX has AVX (bit 28), F16C (29) and OSXSAVE (27); XCR0 must
 * show the OS saving the AVX registers (bits 1 and 2). Asked once. */
static int
have_f16c(void)
{
	static _Atomic int known = -1;
	int k = atomic_load_explicit(&known, memory_order_relaxed);

	if (k < 0) {
		unsigned a, b, c, d;

		k = 0;
		if (__get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 7) == 7) {
			unsigned lo, hi;

			__asm__ volatile("xgetbv"
			                 : "=a"(lo), "=d"(hi)
			                 : "c"(0));
			k = (lo & 6) == 6;
		}
		atomic_store_explicit(&known, k, memory_order_relaxed);
	}
	return k;
}
#endif

void
dt__quant_fp16(const float *in, uint8_t *out, size_t n)
{
	size_t i = 0;

#ifdef HAVE_F16C_PATH
	if (have_f16c())
		i = fp16_pack_f16c(in, out, n);
#endif
	for (; i < n; i++) {
		uint16_t h = to_half(in[i]);

		out[2 * i] = (uint8_t)h;
		out[2 * i + 1] = (uint8_t)(h >> 8);
	}
}

void
dt__dequant_fp16(const uint8_t *in, float *out, size_t n)
{
	size_t i = 0;

#ifdef HAVE_F16C_PATH
	if (have_f16c())
		i = fp16_unpack_f16c(in, out, n);
#endif
	for (; i < n; i++)
		out[i] = from_half((uint16_t)(in[2 * i] | in[2 * i + 1] << 8));
}

void
dt__dequant_fp16_inplace(void *buf, size_t n)
{
	uint8_t *b = buf, tmp[2 * QBLOCK];

	/* Block k's halves are copied out before its floats are written;
	 * the floats of blocks up to k end at byte 4(k+1)B, and the halves
	 * of the blocks after k start at 2n + 2(k+1)B, which is not before
	 * that unless block k is the last. */
	for (size_t base = 0; base < n; base += QBLOCK) {
		size_t m = n - base < QBLOCK ? n - base : QBLOCK;

		memcpy(tmp, b + 2 * n + 2 * base, 2 * m);
		dt__dequant_fp16(tmp, (float *)(void *)(b + 4 * base), m);
	}
}

void
dt__dequant_fp16_add(const uint8_t *in, float *acc, size_t n)
{
	float tmp[QBLOCK];

	for (size_t base = 0; base < n; base += QBLOCK) {
		size_t m = n - base < QBLOCK ? n - base : QBLOCK;

		dt__dequant_fp16(in + 2 * base, tmp, m);
		for (size_t i = 0; i < m; i++)
			acc[base + i] += tmp[i];
	}
}

/* ------------------------------------------------------------------ */
/* 2-bit                                                               */

/* Blocks of QBLOCK values: one straight loop the compiler vectorises
 * (compares, selects, the residual and a byte of code per value), then
 * the packing, 4 codes a byte. */

void
dt__quant_2bit(const float *restrict in, float *restrict res, size_t n, float t,
               uint8_t *restrict out)
{
	uint8_t code[QBLOCK];

	for (size_t base = 0; base < n; base += QBLOCK) {
		size_t m = n - base < QBLOCK ? n - base : QBLOCK;
		const float *x = in + base;
		float *r = res + base;
		uint8_t *o = out + base / 4;

		for (size_t j = 0; j < m; j++) {
			float v = x[j] + r[j];
			float p = v >= t ? t : 0.0f, q = v <= -t ? t : 0.0f;

			r[j] = v - p + q;
			code[j] = (uint8_t)((p != 0.0f) | (q != 0.0f) << 1);
		}
		for (size_t j = m; j < ((m + 15) & ~(size_t)15); j++)
			code[j] = 0; /* the last word's unused codes */
		for (size_t k = 0; k < (m + 15) / 16 * 4; k++)
			o[k] = (uint8_t)(code[4 * k] | code[4 * k + 1] << 2 |
			                 code[4 * k + 2] << 4 |
			                 code[4 * k + 3] << 6);
	}
}

dt_err
dt__dequant_2bit_add(const uint8_t *in, size_t n, float t, float *acc)
{
	size_t nw = (n + 15) / 16, full = n / 4;
	float tab[256][4];

	/* Every code is 0, 1 or 2, and the last word's unused codes are 0:
	 * checked before anything is added. */
	for (size_t w = 0; w < nw; w++) {
		uint32_t word = get32(in + 4 * w);
		size_t m = n - 16 * w < 16 ? n - 16 * w : 16;

		if (word & (word >> 1) & 0x55555555u)
			return dt__fail(DT_EPROTO,
			                "2-bit data: code 3 in word %zu", w);
		if (m < 16 && (word >> (2 * m)) != 0)
			return dt__fail(DT_EPROTO,
			                "2-bit data: bits past the last value");
	}
	if (n >= 1024) { /* each byte (4 codes) adds a row of a table */
		for (int b = 0; b < 256; b++)
			for (int j = 0; j < 4; j++) {
				int c = (b >> (2 * j)) & 3;

				tab[b][j] = c == 1 ? t : c == 2 ? -t : 0.0f;
			}
		for (size_t k = 0; k < full; k++) {
			const float *row = tab[in[k]];

			for (int j = 0; j < 4; j++)
				acc[4 * k + j] += row[j];
		}
	} else {
		full = 0; /* small: no table */
	}
	for (size_t i = 4 * full; i < n; i++) {
		uint32_t c = (in[i / 4] >> (2 * (i % 4))) & 3;

		acc[i] += c == 1 ? t : c == 2 ? -t : 0.0f;
	}
	return DT_OK;
}

/* ------------------------------------------------------------------ */
/* 1-bit                                                               */

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

void
dt__quant_1bit(const float *restrict in, float *restrict res, size_t n, float t,
               uint8_t *restrict out)
{
	uint8_t code[QBLOCK];
	double spos = 0, sneg = 0;
	size_t npos = 0;
	float pos, neg;

	/* Pass 1, by blocks: v into res, the classes' sums and counts in 4
	 * lanes (vector extensions: the compiler does not vectorise a float
	 * sum by itself), added up in double after each block. */
	for (size_t base = 0; base < n; base += QBLOCK) {
		size_t m = n - base < QBLOCK ? n - base : QBLOCK, j = 0;
		const float *x = in + base;
		float *r = res + base;
		v4f sp = {0, 0, 0, 0}, sn = {0, 0, 0, 0}, tv = {t, t, t, t};
		v4i cp = {0, 0, 0, 0};

		for (; j + 4 <= m; j += 4) {
			v4f xv, rv, v;
			v4i p;

			memcpy(&xv, x + j, sizeof(xv));
			memcpy(&rv, r + j, sizeof(rv));
			v = xv + rv;
			memcpy(r + j, &v, sizeof(v));
			p = v >= tv; /* -1 where v >= t */
			sp += (v4f)((v4i)v & p);
			sn += (v4f)((v4i)v & ~p);
			cp -= p;
		}
		for (; j < m; j++) {
			float v = x[j] + r[j];

			r[j] = v;
			if (v >= t) {
				spos += v;
				npos++;
			} else {
				sneg += v;
			}
		}
		for (int l = 0; l < 4; l++) {
			spos += sp[l];
			sneg += sn[l];
			npos += (size_t)cp[l];
		}
	}
	pos = npos ? (float)(spos / (double)npos) : 0.0f;
	neg = n - npos ? (float)(sneg / (double)(n - npos)) : 0.0f;
	put32(out, fbits(pos));
	put32(out + 4, fbits(neg));
	/* Pass 2: the bits and what stays in the residual. */
	for (size_t base = 0; base < n; base += QBLOCK) {
		size_t m = n - base < QBLOCK ? n - base : QBLOCK;
		float *r = res + base;
		uint8_t *o = out + 8 + base / 8;

		for (size_t j = 0; j < m; j++) {
			float v = r[j], p = v >= t ? 1.0f : 0.0f;

			r[j] = v - (p != 0.0f ? pos : neg);
			code[j] = (uint8_t)p;
		}
		for (size_t j = m; j < ((m + 31) & ~(size_t)31); j++)
			code[j] = 0; /* the last word's unused bits */
		for (size_t k = 0; k < (m + 31) / 32 * 4; k++) {
			const uint8_t *c = code + 8 * k;

			o[k] = (uint8_t)(c[0] | c[1] << 1 | c[2] << 2 |
			                 c[3] << 3 | c[4] << 4 | c[5] << 5 |
			                 c[6] << 6 | c[7] << 7);
		}
	}
}

dt_err
dt__dequant_1bit_add(const uint8_t *in, size_t n, float *acc)
{
	float pos = bitsf(get32(in)), neg = bitsf(get32(in + 4));
	size_t nw = (n + 31) / 32, full = n / 8;
	const uint8_t *bits = in + 8;
	float tab[256][8];

	if (!isfinite(pos) || !isfinite(neg))
		return dt__fail(DT_EPROTO,
		                "1-bit data: a reconstruction value is not "
		                "finite (%g, %g)",
		                (double)pos, (double)neg);
	if (n % 32 && (get32(bits + 4 * (nw - 1)) >> (n % 32)) != 0)
		return dt__fail(DT_EPROTO,
		                "1-bit data: bits past the last value");
	if (n >= 2048) { /* each byte adds a row of a table, 8 floats */
		for (int b = 0; b < 256; b++)
			for (int j = 0; j < 8; j++)
				tab[b][j] = (b >> j) & 1 ? pos : neg;
		for (size_t k = 0; k < full; k++) {
			const float *row = tab[bits[k]];

			for (int j = 0; j < 8; j++)
				acc[8 * k + j] += row[j];
		}
	} else {
		full = 0;
	}
	for (size_t i = 8 * full; i < n; i++)
		acc[i] += (bits[i / 8] >> (i % 8)) & 1 ? pos : neg;
	return DT_OK;
}
