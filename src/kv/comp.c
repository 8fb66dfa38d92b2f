/*
 * comp.c - gradient compression in the KVStore (docs/compression.md): the
 * setting's parser, the push body's encoder (with the worker's residual)
 * and the server's decoder, and the encoding fields of a request's arg2.
 * The codecs themselves are common/quant.c.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_impl.h"

static const char *const kind_names[] = {"none", "fp16", "2bit", "1bit"};

const char *
dt__kv_comp_name(dt_quant_kind kind)
{
	return (unsigned)kind < DT_ARRAY_LEN(kind_names) ? kind_names[kind]
	                                                 : "unknown";
}

static int
kind_of(const char *s, size_t len, dt_quant_kind *out)
{
	for (size_t i = 0; i < DT_ARRAY_LEN(kind_names); i++)
		if (strlen(kind_names[i]) == len &&
		    strncmp(kind_names[i], s, len) == 0) {
			*out = (dt_quant_kind)i;
			return 0;
		}
	return -1;
}

static dt_err
threshold_of(const char *spec, const char *s, float *out)
{
	char *end;
	double t;

	errno = 0;
	t = strtod(s, &end);
	if (end == s || *end != '\0' || errno || !isfinite(t) || fabs(t) > 1e30)
		return dt__fail(DT_EINVAL,
		                "gradient compression '%s': threshold '%s' is "
		                "not a finite number",
		                spec, s);
	*out = (float)t;
	return DT_OK;
}

dt_err
dt__kv_comp_parse(const char *spec, dt_kv_comp *out)
{
	dt_kv_comp c = {DT_QUANT_NONE, 0.0f, DT_KV_COMP_MIN_SIZE};
	char buf[128], *tok, *save = NULL;
	int have_t = 0;
	dt_err err;

	if (spec == NULL || strlen(spec) >= sizeof(buf))
		return dt__fail(DT_EINVAL, "gradient compression: %s",
		                spec ? "setting too long" : "setting is NULL");
	snprintf(buf, sizeof(buf), "%s", spec);
	if (strchr(buf, '=') == NULL) { /* "2bit" or "2bit:0.5" */
		char *colon = strchr(buf, ':');
		size_t len = colon ? (size_t)(colon - buf) : strlen(buf);

		if (kind_of(buf, len, &c.kind))
			goto unknown;
		if (colon) {
			if ((err = threshold_of(spec, colon + 1, &c.threshold)))
				return err;
			have_t = 1;
		}
	} else { /* MXNet's dict as "type=2bit,threshold=0.5" */
		int have_type = 0;

		for (tok = strtok_r(buf, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			char *eq = strchr(tok, '=');

			if (eq == NULL)
				goto bad_item;
			*eq = '\0';
			if (strcmp(tok, "type") == 0) {
				if (kind_of(eq + 1, strlen(eq + 1), &c.kind))
					goto unknown;
				have_type = 1;
			} else if (strcmp(tok, "threshold") == 0) {
				if ((err = threshold_of(spec, eq + 1,
				                        &c.threshold)))
					return err;
				have_t = 1;
			} else if (strcmp(tok, "min_size") == 0) {
				char *end;
				unsigned long long v;

				errno = 0;
				v = strtoull(eq + 1, &end, 10);
				if (end == eq + 1 || *end || errno ||
				    eq[1] == '-' || v > ((size_t)1 << 48))
					return dt__fail(
					    DT_EINVAL,
					    "gradient compression '%s': "
					    "min_size '%s' is not a count of "
					    "values",
					    spec, eq + 1);
				c.min_size = (size_t)v;
			} else {
				goto bad_item;
			}
		}
		if (!have_type)
			return dt__fail(
			    DT_EINVAL,
			    "gradient compression '%s': no type=", spec);
	}
	switch (c.kind) {
	case DT_QUANT_2BIT:
		if (!have_t)
			c.threshold = 0.5f; /* MXNet's default */
		if (!(c.threshold > 0.0f))
			return dt__fail(DT_EINVAL,
			                "gradient compression '%s': the 2bit "
			                "threshold must be positive",
			                spec);
		break;
	case DT_QUANT_1BIT:
		if (!have_t)
			c.threshold = 0.0f; /* the classes split at 0 */
		break;
	default:
		if (have_t)
			return dt__fail(
			    DT_EINVAL,
			    "gradient compression '%s': %s takes no "
			    "threshold",
			    spec, dt__kv_comp_name(c.kind));
	}
	*out = c;
	return DT_OK;
unknown:
	return dt__fail(DT_EINVAL,
	                "gradient compression '%s': unknown type (none, fp16, "
	                "2bit[:threshold], 1bit[:threshold])",
	                spec);
bad_item:
	return dt__fail(DT_EINVAL,
	                "gradient compression '%s': expected type=...,"
	                "threshold=...,min_size=...",
	                spec);
}

uint32_t
dt__kv_enc(dt_quant_kind push, dt_quant_kind answer)
{
	return (uint32_t)push | (uint32_t)answer << 8;
}

void
dt__kv_comp_encode(const dt_kv_comp *c, const float *g, float *res, size_t n,
                   uint8_t *out)
{
	switch (c->kind) {
	case DT_QUANT_FP16:
		dt__quant_fp16(g, out, n);
		break;
	case DT_QUANT_2BIT:
		dt__quant_2bit(g, res, n, c->threshold, out);
		break;
	case DT_QUANT_1BIT:
		dt__quant_1bit(g, res, n, c->threshold, out);
		break;
	default:
		memcpy(out, g, n * sizeof(float));
	}
}

dt_err
dt__kv_push_check(const dt_msg_hdr *h, const uint8_t *meta, size_t n,
                  dt_quant_kind *kind, float *t)
{
	dt_quant_kind k = (dt_quant_kind)DT_KV_ENC_PUSH(h->arg2);
	unsigned a = DT_KV_ENC_ANSWER(h->arg2);
	int pushes = h->cmd == DT_CMD_KV_PUSH || h->cmd == DT_CMD_KV_PUSHPULL;
	int answers = h->cmd == DT_CMD_KV_PULL || h->cmd == DT_CMD_KV_PUSHPULL;

	if ((h->arg2 & 0xffff0000u) || (!pushes && k) || (!answers && a))
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
	if (h->meta_len != (k == DT_QUANT_2BIT ? 4u : 0u))
		return dt__fail(DT_EPROTO,
		                "%u bytes of meta (a 2bit push has its "
		                "threshold, 4 bytes; other requests none)",
		                h->meta_len);
	*t = 0.0f;
	if (k == DT_QUANT_2BIT) {
		uint32_t tb = (uint32_t)meta[0] | (uint32_t)meta[1] << 8 |
		              (uint32_t)meta[2] << 16 | (uint32_t)meta[3] << 24;

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
			return dt__fail(
			    DT_ESIZE,
			    "%llu bytes, but %s of %zu values is "
			    "%llu bytes",
			    (unsigned long long)h->payload_len,
			    k == DT_QUANT_NONE ? "fp32" : dt__kv_comp_name(k),
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
	for (int i = 0; i < 4; i++)
		meta[i] = (uint8_t)(tb >> (8 * i));
}

dt_err
dt__kv_comp_decode(dt_quant_kind kind, float t, const uint8_t *in, size_t n,
                   float *out)
{
	switch (kind) {
	case DT_QUANT_FP16:
		dt__dequant_fp16(in, out, n);
		return DT_OK;
	case DT_QUANT_2BIT:
		memset(out, 0, n * sizeof(float));
		return dt__dequant_2bit_add(in, n, t, out);
	case DT_QUANT_1BIT:
		memset(out, 0, n * sizeof(float));
		return dt__dequant_1bit_add(in, n, out);
	default:
		memcpy(out, in, n * sizeof(float));
		return DT_OK;
	}
}
