/*
 * comp.c - gradient compression in the KVStore (docs/compression.md): the
 * encoding fields of a data request (arg2 and a 2-bit push's meta) and the
 * server's check of them. The settings and codecs are common/quant*.c.
 */
#include <math.h>
#include <string.h>

#include "kv/kv_impl.h"

uint32_t
dt__kv_enc(dt_quant_kind push, dt_quant_kind answer)
{
	return (uint32_t)push | (uint32_t)answer << 8;
}

dt_err
dt__kv_push_check(const dt_msg_hdr *h, const uint8_t *meta, size_t n,
                  dt_quant_kind *kind, float *t)
{
	dt_quant_kind k = (dt_quant_kind)DT_KV_ENC_PUSH(h->arg2);
	unsigned a = DT_KV_ENC_ANSWER(h->arg2);
	int pushes = h->cmd == DT_CMD_KV_PUSH || h->cmd == DT_CMD_KV_PUSHPULL;
	int answers = h->cmd == DT_CMD_KV_PULL || h->cmd == DT_CMD_KV_PUSHPULL;

	int at = h->cmd == DT_CMD_KV_PULL && (h->arg2 & DT_KV_AT_ROUND);

	if ((h->arg2 & (at ? 0xfffe0000u : 0xffff0000u)) || (!pushes && k) ||
	    (!answers && a))
		return dt__fail(DT_EPROTO, "reserved encoding bits set (%#x)",
		                (unsigned)h->arg2);
	if ((unsigned)k > DT_QUANT_1BIT)
		return dt__fail(
		    DT_EPROTO,
		    "unknown compression %u (0 none, 1 fp16, 2 2bit, "
		    "3 1bit)",
		    (unsigned)k);
	if (a != DT_QUANT_NONE && a != DT_QUANT_FP16)
		return dt__fail(DT_EPROTO,
		                "answer encoding %u (0 fp32, 1 fp16 only)", a);
	if (h->meta_len != (k == DT_QUANT_2BIT ? 4u : at ? 8u : 0u))
		return dt__fail(DT_EPROTO,
		                "%u bytes of meta (a 2bit push has its "
		                "threshold, 4 bytes; a pull at a round its "
		                "number, 8; other requests none)",
		                h->meta_len);
	*t = 0.0f;
	if (k == DT_QUANT_2BIT) {
		uint32_t tb = dt__get_u32(meta);

		memcpy(t, &tb, sizeof(*t));
		if (!(isfinite(*t) && *t > 0.0f))
			return dt__fail(DT_EPROTO,
			                "2bit threshold %g is not a positive "
			                "finite number",
			                (double)*t);
	}
	if (pushes) {
		uint64_t want = k == DT_QUANT_NONE
		                    ? (uint64_t)n * sizeof(float)
		                    : (uint64_t)dt__quant_size(k, n);

		if (h->payload_len != want)
			return dt__fail(DT_ESIZE,
			                "%llu bytes, but %s of %zu values is "
			                "%llu bytes",
			                (unsigned long long)h->payload_len,
			                k == DT_QUANT_NONE ? "fp32"
			                                   : dt__quant_name(k),
			                n, (unsigned long long)want);
	}
	*kind = k;
	return DT_OK;
}

/* The meta of a 2-bit push: its threshold, little-endian. */
void
dt__kv_threshold_meta(float t, uint8_t meta[4])
{
	uint32_t tb;

	memcpy(&tb, &t, sizeof(tb));
	dt__put_u32(meta, tb);
}
