/*
 * quant.h - the codecs of gradient compression (docs/compression.md): fp16
 * on the wire, and 2-bit and 1-bit quantisation with error feedback. They
 * are the kernels under the KVStore's and the collectives' compression;
 * each works on a flat array of floats and a byte buffer in a fixed,
 * documented layout (little-endian), so the two sides of a connection
 * agree whatever their machines.
 *
 * Error feedback: the compressor adds the caller's residual (what earlier
 * calls did not send) to the input, sends what it can, and keeps the rest
 * in the residual. Nothing is lost, only delayed.
 *
 * Decoders take hostile bytes: the length is the caller's to check
 * (dt__quant_size), and a 2-bit code that means nothing is an error, not a
 * value.
 */
#ifndef DT_COMMON_QUANT_H
#define DT_COMMON_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

typedef enum {
	DT_QUANT_NONE = 0, /* fp32 as it is */
	DT_QUANT_FP16 = 1, /* IEEE half, round to nearest even, saturating */
	DT_QUANT_2BIT = 2, /* +threshold, -threshold or 0; 16 values a word */
	DT_QUANT_1BIT = 3, /* two reconstruction values and one bit a value */
} dt_quant_kind;

/* Bytes of the compressed form of n values (0 for an unknown kind). */
size_t dt__quant_size(dt_quant_kind kind, size_t n);

/* fp16: n floats to n halves (2 bytes each, little-endian) and back.
 * Finite values beyond the half range saturate to +-65504; infinities and
 * NaN are kept (NaN quiet, sign kept); values below the smallest half
 * subnormal round to a signed zero. */
void dt__quant_fp16(const float *in, uint8_t *out, size_t n);
void dt__dequant_fp16(const uint8_t *in, float *out, size_t n);
/* In place: buf holds n halves at byte 2n (its second half); they
 * become n floats from byte 0 (a pull's answer received into the
 * caller's output, then widened). */
void dt__dequant_fp16_inplace(void *buf, size_t n);
/* acc[i] += the i-th half of in. */
void dt__dequant_fp16_add(const uint8_t *in, float *acc, size_t n);

/* 2-bit (MXNet's rule): v = in[i] + res[i]; v >= t sends +t, v <= -t
 * sends -t, anything else 0; res[i] = v - sent. Value i is bits 2(i%16)
 * and 2(i%16)+1 of 32-bit word i/16: code 1 is +t, code 2 is -t, 0 is 0.
 * t must be positive and finite. */
void dt__quant_2bit(const float *in, float *res, size_t n, float t,
                    uint8_t *out);
/* acc[i] += the i-th value; DT_EPROTO (nothing added) if a code is 3. */
dt_err dt__dequant_2bit_add(const uint8_t *in, size_t n, float t, float *acc);

/* 1-bit (Seide et al., "1-Bit Stochastic Gradient Descent", 2014):
 * v = in[i] + res[i]; two reconstruction values, the mean of the v >= t
 * and the mean of the v < t (0 for an empty class), go first as two
 * floats; then bit i (bit i%32 of word i/32) is 1 for v >= t. The value
 * sent is its class's mean and res[i] = v - sent, so the error of each
 * class sums to zero in every call and the residual stays bounded. t (the
 * split, 0 in the paper) must be finite; the decoder does not need it. */
void dt__quant_1bit(const float *in, float *res, size_t n, float t,
                    uint8_t *out);
/* acc[i] += the i-th value; DT_EPROTO (nothing added) if a reconstruction
 * value is not finite. */
dt_err dt__dequant_1bit_add(const uint8_t *in, size_t n, float *acc);

/* A compression setting (quant_spec.c). */
typedef struct dt_quant_spec {
	dt_quant_kind kind; /* DT_QUANT_NONE: off */
	float threshold;    /* 2bit: the value sent; 1bit: the split */
	size_t min_size;    /* arrays of fewer values go as fp32 (KVStore) */
} dt_quant_spec;

/* Arrays under this many values are not compressed unless the setting
 * says otherwise (docs/compression.md: why). */
#define DT_QUANT_MIN_SIZE 65536

/* "none", "fp16", "2bit[:t]", "1bit[:t]", or MXNet's dictionary as
 * "type=2bit,threshold=t[,min_size=n]"; every fault named. */
dt_err dt__quant_parse(const char *spec, dt_quant_spec *out);
const char *dt__quant_name(dt_quant_kind kind);
/* The body of n values g in c's codec: dt__quant_size(kind, n) bytes (4n
 * for none) into out; res (n floats) is the array's residual (unused by
 * fp16 and none). */
void dt__quant_encode(const dt_quant_spec *c, const float *g, float *res,
                      size_t n, uint8_t *out);
/* A body of n values (its length checked by the caller) into out (n
 * floats, overwritten); DT_EPROTO if its content is invalid. */
dt_err dt__quant_decode(dt_quant_kind kind, float t, const uint8_t *in,
                        size_t n, float *out);
/* The same added into acc (nothing added on DT_EPROTO). */
dt_err dt__quant_decode_add(dt_quant_kind kind, float t, const uint8_t *in,
                            size_t n, float *acc);

#endif
