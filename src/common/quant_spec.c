/*
 * quant_spec.c - a compression setting as users write it ("2bit:0.5",
 * MXNet's "type=2bit,threshold=0.5", ...), and the encoder and decoder of
 * a body in that setting's codec. Shared by the KVStore's pushes and the
 * collectives' compressed reductions; the codecs are quant.c.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/quant.h"

static const char *const kind_names[] = {"none", "fp16", "2bit", "1bit"};

const char *
dt__quant_name(dt_quant_kind kind)
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
dt__quant_parse(const char *spec, dt_quant_spec *out)
{
	dt_quant_spec c = {DT_QUANT_NONE, 0.0f, DT_QUANT_MIN_SIZE};
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
			    spec, dt__quant_name(c.kind));
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

void
dt__quant_encode(const dt_quant_spec *c, const float *g, float *res, size_t n,
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
dt__quant_decode(dt_quant_kind kind, float t, const uint8_t *in, size_t n,
                 float *out)
{
	if (kind == DT_QUANT_FP16) {
		dt__dequant_fp16(in, out, n);
		return DT_OK;
	}
	if (kind == DT_QUANT_NONE) {
		memcpy(out, in, n * sizeof(float));
		return DT_OK;
	}
	memset(out, 0, n * sizeof(float));
	return dt__quant_decode_add(kind, t, in, n, out);
}

dt_err
dt__quant_decode_add(dt_quant_kind kind, float t, const uint8_t *in, size_t n,
                     float *acc)
{
	switch (kind) {
	case DT_QUANT_FP16:
		dt__dequant_fp16_add(in, acc, n);
		return DT_OK;
	case DT_QUANT_2BIT:
		return dt__dequant_2bit_add(in, n, t, acc);
	case DT_QUANT_1BIT:
		return dt__dequant_1bit_add(in, n, acc);
	default: {
		float v;

		for (size_t i = 0; i < n; i++) {
			memcpy(&v, in + 4 * i, 4);
			acc[i] += v;
		}
		return DT_OK;
	}
	}
}
