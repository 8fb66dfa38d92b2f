/*
 * quant_test.c - the compression codecs (common/quant.h) against plain
 * scalar references: fp16 over every half and a million float bit
 * patterns (with the compiler's _Float16 as the reference where it has
 * one), the saturation, infinities, NaN, subnormals and ties; 2-bit and
 * 1-bit byte for byte and residual for residual at lengths around the word
 * and block sizes, on edge values (+-threshold, NaN, infinities,
 * denormals); error feedback across steps (nothing lost); and hostile
 * input to the decoders (bad codes, bits past the end, non-finite scales)
 * refused with nothing added.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/quant.h"

static float
bitsf(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static uint32_t
fbits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static uint16_t
half_of(float f)
{
	uint8_t b[2];

	dt__quant_fp16(&f, b, 1);
	return (uint16_t)(b[0] | b[1] << 8);
}

static float
float_of(uint16_t h)
{
	uint8_t b[2] = {(uint8_t)h, (uint8_t)(h >> 8)};
	float f;

	dt__dequant_fp16(b, &f, 1);
	return f;
}

static void
test_fp16_every_half(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = float_of((uint16_t)h);
		uint16_t back = half_of(f);

		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) { /* NaN */
			assert_true(isnan(f));
			assert_int_equal(back, h | 0x200); /* quieted */
			continue;
		}
		assert_int_equal(back, h);
#ifdef __FLT16_MAX__
		{
			_Float16 r;
			uint16_t h16 = (uint16_t)h;

			memcpy(&r, &h16, 2);
			assert_true(fbits(f) == fbits((float)r));
		}
#endif
	}
}

/* The bulk conversions (8 at a time where the CPU has F16C) give the same
 * bits as one value at a time (the portable code): every half, the edges
 * of rounding and saturation, and a million random float bit patterns. */
static void
test_fp16_bulk(void **state)
{
	enum { M = 1 << 20 };
	static uint8_t h[2 * M], h1[2];
	static float f[M], g[M];
	static const float edges[] = {
	    65504.0f,     65519.99f,       65520.0f,   1e30f,
	    -1e30f,       65505.0f,        -65530.0f,  0x1p-24f,
	    0x1p-25f,     0x1.8p-24f,      0x1.8p-25f, 0x1p-14f,
	    0x1.ffcp-15f, 1.0f + 0x1p-11f, -0.0f,      0.0f};
	uint64_t x = 99;

	(void)state;
	for (uint32_t i = 0; i < 65536; i++) {
		h[2 * i] = (uint8_t)i;
		h[2 * i + 1] = (uint8_t)(i >> 8);
	}
	dt__dequant_fp16(h, f, 65536);
	for (uint32_t i = 0; i < 65536; i++)
		assert_true(fbits(f[i]) == fbits(float_of((uint16_t)i)));
	for (size_t i = 0; i < M; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		f[i] = i < sizeof(edges) / sizeof(*edges)
		           ? edges[i]
		           : bitsf((uint32_t)(x >> 32));
	}
	f[20] = bitsf(0x7f800001); /* a signalling NaN */
	f[21] = bitsf(0xffc12345);
	f[22] = INFINITY;
	dt__quant_fp16(f, h, M);
	for (size_t i = 0; i < M; i++) {
		dt__quant_fp16(&f[i], h1, 1);
		if (memcmp(h + 2 * i, h1, 2))
			fail_msg("value %zu (%#x): bulk %02x%02x, one %02x%02x",
			         i, fbits(f[i]), h[2 * i + 1], h[2 * i], h1[1],
			         h1[0]);
	}
	dt__dequant_fp16(h, g, M);
	for (size_t i = 0; i < M; i += 97)
		assert_true(
		    fbits(g[i]) ==
		    fbits(float_of((uint16_t)(h[2 * i] | h[2 * i + 1] << 8))));
}

static void
test_fp16_edges(void **state)
{
	(void)state;
	assert_int_equal(half_of(65504.0f), 0x7bff);
	assert_int_equal(half_of(65519.99f), 0x7bff);
	assert_int_equal(half_of(65520.0f), 0x7bff); /* saturates */
	assert_int_equal(half_of(1e30f), 0x7bff);
	assert_int_equal(half_of(-1e30f), 0xfbff);
	assert_int_equal(half_of(INFINITY), 0x7c00);
	assert_int_equal(half_of(-INFINITY), 0xfc00);
	assert_true((half_of(NAN) & 0x7e00) == 0x7e00);
	assert_true(isnan(float_of(half_of(-NAN))));
	assert_int_equal(half_of(-0.0f), 0x8000);
	assert_int_equal(half_of(0x1p-24f), 0x0001);     /* smallest */
	assert_int_equal(half_of(0x1p-25f), 0x0000);     /* tie: even */
	assert_int_equal(half_of(0x1.8p-24f), 0x0002);   /* tie: even */
	assert_int_equal(half_of(0x1.8p-25f), 0x0001);   /* above the tie */
	assert_int_equal(half_of(bitsf(1)), 0x0000);     /* a float denormal */
	assert_int_equal(half_of(0x1p-14f), 0x0400);     /* smallest normal */
	assert_int_equal(half_of(0x1.ffcp-15f), 0x0400); /* rounds up to it */
	assert_int_equal(half_of(1.0f + 0x1p-11f), 0x3c00); /* tie: even */
	assert_int_equal(half_of(1.0f + 0x1.8p-10f), 0x3c02);
}

#ifdef __FLT16_MAX__
/* Random bit patterns against the compiler's conversion (which rounds to
 * nearest even but overflows to infinity instead of saturating). */
static void
test_fp16_random(void **state)
{
	uint64_t x = 88172645463325252ull;

	(void)state;
	for (int i = 0; i < 1000000; i++) {
		float f;
		_Float16 ref;
		uint16_t rh;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		f = bitsf((uint32_t)x);
		if (isnan(f) || fabsf(f) >= 65520.0f)
			continue;
		ref = (_Float16)f;
		memcpy(&rh, &ref, 2);
		assert_int_equal(half_of(f), rh);
	}
}
#endif

/* The 2-bit reference: exactly the documented rule, value by value. */
static void
ref_2bit(const float *in, float *res, size_t n, float t, uint8_t *out)
{
	memset(out, 0, dt__quant_size(DT_QUANT_2BIT, n));
	for (size_t i = 0; i < n; i++) {
		float v = in[i] + res[i];
		uint32_t c = 0;
		float sent = 0.0f;

		if (v >= t) {
			c = 1;
			sent = t;
		} else if (v <= -t) {
			c = 2;
			sent = -t;
		}
		res[i] = v - sent;
		out[4 * (i / 16) + (i % 16) / 4] |=
		    (uint8_t)(c << (2 * (i % 4)));
	}
}

static float
gen(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return (float)((int64_t)(*x % 2001) - 1000) / 1000.0f;
}

static const size_t lengths[] = {0,  1,   15,   16,   17,   31,  32,
                                 33, 100, 1023, 1024, 1025, 5000};

static void
test_2bit_reference(void **state)
{
	uint64_t x = 7;

	(void)state;
	for (size_t k = 0; k < DT_ARRAY_LEN(lengths); k++) {
		size_t n = lengths[k], bytes = dt__quant_size(DT_QUANT_2BIT, n);
		float *in = calloc(n + 1, 4), *r1 = calloc(n + 1, 4);
		float *r2 = calloc(n + 1, 4), *a1 = calloc(n + 1, 4);
		float *a2 = calloc(n + 1, 4);
		uint8_t *o1 = calloc(bytes + 1, 1), *o2 = calloc(bytes + 1, 1);
		const float t = 0.25f;

		for (int step = 0; step < 3; step++) {
			for (size_t i = 0; i < n; i++)
				in[i] = gen(&x);
			if (n > 8) { /* edges */
				in[0] = t;
				in[1] = -t;
				in[2] = bitsf(1); /* a denormal */
				in[3] = INFINITY;
				in[4] = -INFINITY;
				in[5] = nextafterf(t, 0) - r1[5];
			}
			dt__quant_2bit(in, r1, n, t, o1);
			ref_2bit(in, r2, n, t, o2);
			assert_memory_equal(o1, o2, bytes);
			for (size_t i = 0; i < n; i++)
				assert_true(fbits(r1[i]) == fbits(r2[i]) ||
				            (isnan(r1[i]) && isnan(r2[i])));
			assert_int_equal(dt__dequant_2bit_add(o1, n, t, a1),
			                 DT_OK);
			for (size_t i = 0; i < n; i++) {
				uint32_t c = (o2[i / 4] >> (2 * (i % 4))) & 3;

				a2[i] += c == 1 ? t : c == 2 ? -t : 0.0f;
				assert_true(fbits(a1[i]) == fbits(a2[i]));
			}
		}
		free(in);
		free(r1);
		free(r2);
		free(a1);
		free(a2);
		free(o1);
		free(o2);
	}
}

/* Error feedback: what is sent plus what stays equals what came in. */
static void
test_2bit_feedback(void **state)
{
	float in = 0.3f, res = 0.0f, got = 0.0f;
	uint8_t w[4];

	(void)state;
	for (int step = 1; step <= 100; step++) {
		dt__quant_2bit(&in, &res, 1, 0.5f, w);
		assert_int_equal(dt__dequant_2bit_add(w, 1, 0.5f, &got), DT_OK);
		assert_true(fabsf(got + res - 0.3f * (float)step) < 1e-4f);
		assert_true(fabsf(res) < 0.5f);
	}
	assert_true(fabsf(got - 29.5f) < 0.51f);
}

static void
test_2bit_hostile(void **state)
{
	uint8_t w[8] = {0};
	float acc[20] = {0};

	(void)state;
	w[1] = 0x0c; /* value 5's code is 3 */
	assert_int_equal(dt__dequant_2bit_add(w, 16, 1.0f, acc), DT_EPROTO);
	assert_non_null(strstr(dt_errmsg(), "code 3"));
	memset(w, 0, sizeof(w));
	w[3] = 0x40; /* value 15 set, but n = 10 */
	assert_int_equal(dt__dequant_2bit_add(w, 10, 1.0f, acc), DT_EPROTO);
	assert_non_null(strstr(dt_errmsg(), "past the last value"));
	/* Nothing was added by either. */
	for (int i = 0; i < 20; i++)
		assert_true(acc[i] == 0.0f);
	/* Sizes. */
	assert_int_equal(dt__quant_size(DT_QUANT_2BIT, 17), 8);
	assert_int_equal(dt__quant_size(DT_QUANT_1BIT, 33), 16);
	assert_int_equal(dt__quant_size(DT_QUANT_FP16, 3), 6);
	assert_int_equal(dt__quant_size(DT_QUANT_NONE, 3), 12);
	assert_int_equal(dt__quant_size((dt_quant_kind)9, 3), 0);
	assert_int_equal(dt__quant_size(DT_QUANT_NONE, SIZE_MAX / 2), 0);
}

static void
test_1bit(void **state)
{
	uint64_t x = 11;

	(void)state;
	for (size_t k = 0; k < DT_ARRAY_LEN(lengths); k++) {
		size_t n = lengths[k], bytes = dt__quant_size(DT_QUANT_1BIT, n);
		float *in = calloc(n + 1, 4), *res = calloc(n + 1, 4);
		float *before = calloc(n + 1, 4), *acc = calloc(n + 1, 4);
		uint8_t *out = calloc(bytes, 1);

		for (int step = 0; step < 3; step++) {
			double sp = 0, sn = 0, dp = 0, dn = 0;
			size_t np = 0;
			float pos, neg, t = step == 2 ? 0.25f : 0.0f;

			for (size_t i = 0; i < n; i++) {
				in[i] = gen(&x);
				before[i] = in[i] + res[i];
				if (before[i] >= t) {
					sp += before[i];
					np++;
				} else {
					sn += before[i];
				}
				acc[i] = 0.0f;
			}
			dt__quant_1bit(in, res, n, t, out);
			memcpy(&pos, out, 4);
			memcpy(&neg, out + 4, 4);
			/* The reconstruction values are the classes' means. */
			assert_true(fabs(pos - (np ? sp / (double)np : 0)) <
			            1e-5);
			assert_true(fabs(neg - (n - np ? sn / (double)(n - np)
			                               : 0)) < 1e-5);
			assert_int_equal(dt__dequant_1bit_add(out, n, acc),
			                 DT_OK);
			for (size_t i = 0; i < n; i++) {
				int bit = (out[8 + i / 8] >> (i % 8)) & 1;

				assert_int_equal(bit, before[i] >= t);
				assert_true(fbits(acc[i]) ==
				            fbits(bit ? pos : neg));
				/* residual = v - sent, exactly */
				assert_true(fbits(res[i]) ==
				            fbits(before[i] - acc[i]));
				if (bit)
					dp += res[i];
				else
					dn += res[i];
			}
			/* Each class's error sums to (about) zero. */
			assert_true(fabs(dp) < 1e-3 * (double)(n + 1));
			assert_true(fabs(dn) < 1e-3 * (double)(n + 1));
		}
		/* Hostile: a NaN scale, bits past the end. */
		if (n % 32) {
			uint8_t *bad = malloc(bytes);

			memcpy(bad, out, bytes);
			bad[bytes - 1] |= 0x80;
			assert_int_equal(dt__dequant_1bit_add(bad, n, acc),
			                 DT_EPROTO);
			memcpy(bad, out, bytes);
			memcpy(bad, &(float){NAN}, 4);
			assert_int_equal(dt__dequant_1bit_add(bad, n, acc),
			                 DT_EPROTO);
			free(bad);
		}
		free(in);
		free(res);
		free(before);
		free(acc);
		free(out);
	}
}

/* The residual stays bounded over many steps of the same input. */
static void
test_1bit_bounded(void **state)
{
	float in[5] = {0.9f, 0.1f, -0.2f, -0.7f, 0.05f}, res[5] = {0};
	float sum[5] = {0};
	uint8_t out[16];

	(void)state;
	for (int step = 1; step <= 1000; step++) {
		dt__quant_1bit(in, res, 5, 0.0f, out);
		assert_int_equal(dt__dequant_1bit_add(out, 5, sum), DT_OK);
		for (int i = 0; i < 5; i++) {
			assert_true(fabsf(res[i]) < 2.0f);
			assert_true(fabsf(sum[i] + res[i] -
			                  in[i] * (float)step) < 1e-2f);
		}
	}
}

/* A pull's fp16 answer, received into the second half of the output and
 * widened in place, equals the plain decoder's result at every length
 * (the block boundaries included). */
static void
test_fp16_inplace(void **state)
{
	static const size_t ns[] = {0,    1,    2,    3,    1023,  1024,
	                            1025, 2047, 2048, 4097, 100003};
	uint64_t x = 5;

	(void)state;
	for (size_t k = 0; k < DT_ARRAY_LEN(ns); k++) {
		size_t n = ns[k];
		float *src = malloc((n + 1) * 4), *want = malloc((n + 1) * 4);
		float *buf = malloc((n + 1) * 4);
		uint8_t *h = malloc(2 * n + 2);

		for (size_t i = 0; i < n; i++)
			src[i] = gen(&x) * 100.0f;
		dt__quant_fp16(src, h, n);
		dt__dequant_fp16(h, want, n);
		memcpy((uint8_t *)buf + 2 * n, h, 2 * n);
		dt__dequant_fp16_inplace(buf, n);
		for (size_t i = 0; i < n; i++)
			assert_true(fbits(buf[i]) == fbits(want[i]));
		free(src);
		free(want);
		free(buf);
		free(h);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fp16_every_half),
	    cmocka_unit_test(test_fp16_edges),
	    cmocka_unit_test(test_fp16_bulk),
	    cmocka_unit_test(test_fp16_inplace),
#ifdef __FLT16_MAX__
	    cmocka_unit_test(test_fp16_random),
#endif
	    cmocka_unit_test(test_2bit_reference),
	    cmocka_unit_test(test_2bit_feedback),
	    cmocka_unit_test(test_2bit_hostile),
	    cmocka_unit_test(test_1bit),
	    cmocka_unit_test(test_1bit_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
