/*
 * fuzz_kv_entry.h - the checks of the KV-body fuzz target
 * (fuzz/fuzz_kv.c), shared with its CTest replay of fuzz/corpus/kv. An
 * input is given to the decoders of kv/kv_msg.c: an error answer (what a
 * worker reads from a server) and KV_SET_OPT's optimizer (what a server
 * reads from worker 0). Besides "no crash, no overread", it traps when a
 * decoder fails without a message, when a decoded error code is outside
 * the table of codes or its message is not terminated, when a decoded
 * optimizer has a parameter outside what the server accepts, or when a
 * decoded value does not encode back to a block that decodes the same.
 */
#ifndef DT_FUZZ_KV_ENTRY_H
#define DT_FUZZ_KV_ENTRY_H

#include "fuzz_check.h"
#include <math.h>
#include <stdlib.h>

#include "kv/kstore.h"
#include "kv/rstore.h"
#include "kv/kv_impl.h"

static void
fuzz_kv_error(const uint8_t *data, size_t size)
{
	char msg[512], again[512];
	dt_err code, code2;
	dt_wbuf w;

	memset(msg, 0x5a, sizeof(msg));
	dt__clear_error();
	if (dt__kv_error_decode(data, size, &code, msg, sizeof(msg))) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		return;
	}
	FUZZ_CHECK(code > DT_OK && (int)code < DT__ERR_COUNT);
	FUZZ_CHECK(memchr(msg, '\0', sizeof(msg)) != NULL);
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__kv_error_encode(code, msg, &w) == DT_OK);
	FUZZ_CHECK(dt__kv_error_decode(w.data, w.len, &code2, again,
	                               sizeof(again)) == DT_OK);
	FUZZ_CHECK(code2 == code && strcmp(msg, again) == 0);
	dt__wbuf_fini(&w);
}

static void
fuzz_kv_opt(const uint8_t *data, size_t size)
{
	dt_opt o, o2;
	dt_rbuf r;
	dt_wbuf w;

	dt__rbuf_init(&r, data, size);
	dt__clear_error();
	if (dt__opt_decode(&r, &o)) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		return;
	}
	FUZZ_CHECK(o.kind == DT_OPT_SGD || o.kind == DT_OPT_ADAM);
	FUZZ_CHECK(isfinite(o.p.lr) && o.p.momentum >= 0 && o.p.momentum < 1);
	dt__wbuf_init(&w);
	dt__opt_encode(&o, &w);
	FUZZ_CHECK(dt__wbuf_err(&w) == DT_OK);
	dt__rbuf_init(&r, w.data, w.len);
	FUZZ_CHECK(dt__opt_decode(&r, &o2) == DT_OK);
	FUZZ_CHECK(memcmp(&o.p, &o2.p, sizeof(o.p)) == 0 && o.kind == o2.kind);
	dt__wbuf_fini(&w);
}

/* KV_STALL: a query (what a server reads) and an answer (what a worker
 * logs) decode within their limits and encode back the same. */
static void
fuzz_kv_stall(const uint8_t *data, size_t size)
{
	dt_kv_stall_ask a[DT_KV_STALL_ASKS], b[DT_KV_STALL_ASKS];
	char text[DT_KV_STALL_TEXT], again[DT_KV_STALL_TEXT];
	size_t n = 0, n2 = 0;
	dt_wbuf w;

	dt__clear_error();
	if (dt__kv_stall_query_decode(data, size, a, &n) != DT_OK) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
	} else {
		FUZZ_CHECK(n >= 1 && n <= DT_KV_STALL_ASKS);
		for (size_t i = 0; i < n; i++)
			FUZZ_CHECK(a[i].cmd >= DT_CMD_KV_FIRST &&
			           a[i].cmd <= DT_CMD_KV_LAST);
		dt__wbuf_init(&w);
		FUZZ_CHECK(dt__kv_stall_query_encode(a, n, &w) == DT_OK);
		FUZZ_CHECK(w.len == size && memcmp(w.data, data, size) == 0);
		FUZZ_CHECK(dt__kv_stall_query_decode(w.data, w.len, b, &n2) ==
		               DT_OK &&
		           n2 == n);
		dt__wbuf_fini(&w);
	}
	dt__clear_error();
	if (dt__kv_stall_reply_decode(data, size, text) != DT_OK) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		return;
	}
	FUZZ_CHECK(memchr(text, '\0', sizeof(text)) != NULL);
	for (const char *p = text; *p; p++)
		FUZZ_CHECK(*p >= 0x20 && *p <= 0x7e);
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__kv_stall_reply_encode(text, &w) == DT_OK);
	FUZZ_CHECK(dt__kv_stall_reply_decode(w.data, w.len, again) == DT_OK);
	FUZZ_CHECK(strcmp(text, again) == 0);
	dt__wbuf_fini(&w);
}

static uint32_t
fuzz_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void
fuzz_kv_push(const uint8_t *data, size_t size)
{
	static const int cmds[] = {DT_CMD_KV_PUSH, DT_CMD_KV_PULL,
	                           DT_CMD_KV_PUSHPULL};
	dt_msg_hdr h = {0};
	dt_quant_kind kind;
	size_t n, mlen;
	const uint8_t *meta, *body;
	float t, *out;

	if (size < 10)
		return;
	h.cmd = (uint8_t)cmds[data[0] % 3];
	h.arg2 = fuzz_le32(data + 1);
	n = fuzz_le32(data + 5) & 0xffff; /* (a key's length: bounded) */
	mlen = data[9] % 8;
	if (size < 10 + mlen)
		return;
	meta = data + 10;
	body = meta + mlen;
	h.meta_len = (uint32_t)mlen;
	h.payload_len = size - 10 - mlen;
	dt__clear_error();
	if (dt__kv_push_check(&h, meta, n, &kind, &t)) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		return;
	}
	FUZZ_CHECK((unsigned)kind <= DT_QUANT_1BIT);
	if (h.cmd == DT_CMD_KV_PULL)
		return;
	FUZZ_CHECK(h.payload_len == (kind == DT_QUANT_NONE
	                                 ? n * sizeof(float)
	                                 : dt__quant_size(kind, n)));
	out = malloc((n + 1) * sizeof(float));
	FUZZ_CHECK(out != NULL);
	dt__clear_error();
	if (dt__quant_decode(kind, t, body, n, out)) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		FUZZ_CHECK(kind == DT_QUANT_2BIT || kind == DT_QUANT_1BIT);
		free(out);
		return;
	}
	if (kind == DT_QUANT_2BIT) {
		float *res = calloc(n + 1, sizeof(float));
		uint8_t *again = malloc(dt__quant_size(kind, n) + 1);
		dt_quant_spec c = {kind, t, 0};

		FUZZ_CHECK(res != NULL && again != NULL);
		for (size_t i = 0; i < n; i++)
			FUZZ_CHECK(out[i] == t || out[i] == -t || out[i] == 0);
		dt__quant_encode(&c, out, res, n, again);
		FUZZ_CHECK(memcmp(again, body, h.payload_len) == 0);
		free(res);
		free(again);
	} else if (kind == DT_QUANT_1BIT) {
		float pos, neg;

		memcpy(&pos, body, 4);
		memcpy(&neg, body + 4, 4);
		for (size_t i = 0; i < n; i++)
			FUZZ_CHECK(isfinite(out[i]) &&
			           (out[i] == pos || out[i] == neg));
	}
	free(out);
}

/*
 * A batched request (KV_*_MANY): [u8 command][u32 arg0][u32 arg1][u32
 * arg2], then the payload. What the decoder accepts adds up to the
 * payload exactly (a key range: 16 bytes of keys that stay below 2^64),
 * and its listed keys go into a fresh many-key store (as an
 * init would) and are found again, each where it went, or are refused
 * with a message (a key listed twice) and leave the store empty.
 */
static void
fuzz_kv_many(const uint8_t *data, size_t size)
{
	static const int cmds[] = {DT_CMD_KV_INIT_MANY, DT_CMD_KV_PUSH_MANY,
	                           DT_CMD_KV_PULL_MANY,
	                           DT_CMD_KV_PUSHPULL_MANY};
	dt_msg_hdr h = {0};
	dt_kv_many b;
	dt_opt none = {.kind = DT_OPT_NONE};
	dt_kstore ks;
	size_t bad;
	uint32_t *idx, *idx2;
	uint64_t sum = 0;

	if (size < 13)
		return;
	h.cmd = (uint8_t)cmds[data[0] % 4];
	h.arg0 = fuzz_le32(data + 1);
	h.arg1 = fuzz_le32(data + 5);
	h.arg2 = fuzz_le32(data + 9);
	h.payload_len = size - 13;
	dt__clear_error();
	if (dt__kv_many_decode(&h, size > 13 ? data + 13 : NULL, &b)) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		return;
	}
	FUZZ_CHECK(b.count == h.arg0);
	if (b.step) { /* a key range: 16 bytes of keys, none past 2^64 - 1 */
		FUZZ_CHECK(b.keys == NULL && b.count >= 1 && b.lens.uniform &&
		           h.cmd != DT_CMD_KV_INIT_MANY);
		FUZZ_CHECK(b.step <= (UINT64_MAX - b.k0) /
		                         (b.count > 1 ? b.count - 1 : 1));
		FUZZ_CHECK(b.nvals == (uint64_t)b.count * b.lens.uniform);
		FUZZ_CHECK(h.payload_len ==
		           16 +
		               (dt__kv_many_has_vals(h.cmd) ? 4 * b.nvals : 0));
		return;
	}
	for (size_t i = 0; i < b.count; i++) {
		uint32_t l = dt__ks_len_at(&b.lens, i);

		FUZZ_CHECK(l >= 1 && l <= DT_KS_MAX_LEN);
		sum += l;
	}
	FUZZ_CHECK(sum == b.nvals);
	FUZZ_CHECK(h.payload_len ==
	           b.count * (b.lens.lens ? 12 : 8) +
	               (dt__kv_many_has_vals(h.cmd) ? 4 * b.nvals : 0));
	idx = malloc(4 * (b.count + 1));
	idx2 = malloc(4 * (b.count + 1));
	FUZZ_CHECK(idx != NULL && idx2 != NULL);
	dt__ks_init(&ks, 2, 1, &none);
	dt__clear_error();
	/* (a server adds keys only from an init, whose values are in the
	 * body: the store it grows is bounded by what was received) */
	int create = dt__kv_many_has_vals(h.cmd);
	if (dt__ks_resolve(&ks, "init", b.count, b.keys, &b.lens, create, idx,
	                   &bad) == DT_OK) {
		FUZZ_CHECK(ks.nrec == b.count);
		FUZZ_CHECK(dt__ks_resolve(&ks, "pull", b.count, b.keys, &b.lens,
		                          0, idx2, &bad) == DT_OK);
		FUZZ_CHECK(memcmp(idx, idx2, 4 * b.count) == 0);
	} else {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		FUZZ_CHECK(ks.nrec == 0 && bad < b.count);
		for (size_t i = 0; i < b.count; i++)
			FUZZ_CHECK(
			    dt__ks_find(&ks, dt__get_u64(b.keys + 8 * i)) ==
			    DT_KS_NONE);
	}
	dt__ks_fini(&ks);
	free(idx);
	free(idx2);
}

/*
 * A row request (KV_ROW_PUSH, _PULL, _PUSHPULL) as a server reads it:
 * [u8 command][u32 arg0][u32 arg1][u32 arg2][u8 meta length][meta], the
 * payload. What decodes has its parts within the payload and its limits;
 * its rows are then checked against a 64-row table held from row 8 of
 * 80, and a fp32 push's rows applied - a refused check leaves no mark.
 */
static void
fuzz_kv_rows(const uint8_t *data, size_t size)
{
	static const int cmds[] = {DT_CMD_KV_ROW_PUSH, DT_CMD_KV_ROW_PULL,
	                           DT_CMD_KV_ROW_PUSHPULL};
	dt_msg_hdr h = {0};
	dt_kv_rows b;
	dt_opt none = {.kind = DT_OPT_NONE};
	dt_rstore t;
	size_t bad, ml;
	int closed;

	if (size < 14 || (ml = data[13]) > size - 14)
		return;
	h.cmd = (uint8_t)cmds[data[0] % 3];
	h.key = 3;
	h.arg0 = fuzz_le32(data + 1);
	h.arg1 = fuzz_le32(data + 5);
	h.arg2 = fuzz_le32(data + 9);
	h.meta_len = (uint32_t)ml;
	h.payload_len = size - 14 - ml;
	dt__clear_error();
	if (dt__kv_rows_decode(&h, data + 14,
	                       size > 14 + ml ? data + 14 + ml : NULL, &b)) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		return;
	}
	FUZZ_CHECK(b.count == h.arg0 && b.width == h.arg1 && b.width >= 1);
	FUZZ_CHECK(b.count * 8 + b.body_len == h.payload_len);
	FUZZ_CHECK(b.body_len ==
	           (h.cmd == DT_CMD_KV_ROW_PULL ? 0
	            : b.push == DT_QUANT_NONE
	                ? 4 * b.count * b.width
	                : dt__quant_size(b.push, b.count * b.width)));
	if (b.width > 64)
		return;
	FUZZ_CHECK(dt__rs_init(&t, 3, 80, 8, 64, b.width, 2, 1, &none) ==
	           DT_OK);
	dt__clear_error();
	if (dt__rs_check(&t, "push", b.count, b.ids, 1, &bad) == DT_OK) {
		float *out = malloc(4 * (b.count * b.width + 1));

		FUZZ_CHECK(out != NULL);
		if (h.cmd != DT_CMD_KV_ROW_PULL && b.push == DT_QUANT_NONE) {
			float *g = malloc(4 * (b.count * b.width + 1));

			FUZZ_CHECK(g != NULL);
			if (b.count)
				memcpy(g, b.body, 4 * b.count * b.width);
			FUZZ_CHECK(dt__rs_push_sync(&t, 1, b.count, b.ids, g,
			                            &closed) == DT_OK);
			FUZZ_CHECK(!closed && t.nround <= b.count);
			free(g);
		}
		dt__rs_gather(&t, b.count, b.ids, out);
		free(out);
	} else {
		FUZZ_CHECK(dt_errmsg()[0] != '\0' && bad < b.count);
	}
	for (size_t i = 0; i < 64 / 64 + 1; i++)
		FUZZ_CHECK(t.mark[i] == 0);
	dt__rs_fini(&t);
}

static int
dt_fuzz_kv_one(const uint8_t *data, size_t size)
{
	fuzz_kv_error(data, size);
	fuzz_kv_opt(data, size);
	fuzz_kv_push(data, size);
	fuzz_kv_many(data, size);
	fuzz_kv_rows(data, size);
	fuzz_kv_stall(data, size);
	return 0;
}

#endif
