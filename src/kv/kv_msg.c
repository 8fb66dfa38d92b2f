/*
 * kv_msg.c - the KVStore's message bodies, encoder beside decoder
 * (docs/protocol.md). Most KV messages are header fields and a payload of
 * floats; the bodies with structure are an error answer and the optimizer
 * that KV_SET_OPT sends (as data: no code crosses the wire).
 */
#include <math.h>
#include <string.h>

#include "kv/kv_impl.h"

dt_err
dt__kv_error_encode(dt_err code, const char *msg, dt_wbuf *w)
{
	dt__wbuf_u32(w, (uint32_t)code);
	dt__wbuf_str(w, msg);
	return dt__wbuf_err(w);
}

dt_err
dt__kv_error_decode(const void *meta, size_t len, dt_err *code, char *msg,
                    size_t cap)
{
	dt_rbuf r;
	uint32_t c;
	dt_err err;

	dt__rbuf_init(&r, meta, len);
	c = dt__rbuf_u32(&r);
	dt__rbuf_str(&r, msg, cap);
	if ((err = dt__rbuf_err(&r, "KV error answer")))
		return err;
	if (c == 0 || c >= DT__ERR_COUNT)
		return dt__fail(DT_EPROTO, "KV error answer: error code %u", c);
	*code = (dt_err)c;
	return DT_OK;
}

void
dt__opt_encode(const dt_opt *o, dt_wbuf *w)
{
	dt__wbuf_u8(w, (uint8_t)o->kind);
	dt__wbuf_f64(w, o->p.lr);
	dt__wbuf_f64(w, o->p.momentum);
	dt__wbuf_f64(w, o->p.wd);
	dt__wbuf_f64(w, o->p.rescale_grad);
	dt__wbuf_f64(w, o->p.clip_gradient);
	dt__wbuf_f64(w, o->p.beta1);
	dt__wbuf_f64(w, o->p.beta2);
	dt__wbuf_f64(w, o->p.epsilon);
}

dt_err
dt__opt_decode(dt_rbuf *r, dt_opt *o)
{
	dt_err err;

	memset(o, 0, sizeof(*o));
	o->kind = (dt_opt_kind)dt__rbuf_u8(r);
	o->p.lr = dt__rbuf_f64(r);
	o->p.momentum = dt__rbuf_f64(r);
	o->p.wd = dt__rbuf_f64(r);
	o->p.rescale_grad = dt__rbuf_f64(r);
	o->p.clip_gradient = dt__rbuf_f64(r);
	o->p.beta1 = dt__rbuf_f64(r);
	o->p.beta2 = dt__rbuf_f64(r);
	o->p.epsilon = dt__rbuf_f64(r);
	if ((err = dt__rbuf_err(r, "KV_SET_OPT")))
		return err;
	if (o->kind != DT_OPT_SGD && o->kind != DT_OPT_ADAM)
		return dt__fail(DT_EPROTO, "KV_SET_OPT: unknown optimizer %d",
		                (int)o->kind);
	if (!isfinite(o->p.lr) || !isfinite(o->p.momentum) ||
	    !isfinite(o->p.wd) || !isfinite(o->p.rescale_grad) ||
	    !isfinite(o->p.clip_gradient) || !(o->p.momentum >= 0) ||
	    !(o->p.momentum < 1) ||
	    (o->kind == DT_OPT_ADAM &&
	     (!(o->p.beta1 >= 0 && o->p.beta1 < 1) ||
	      !(o->p.beta2 >= 0 && o->p.beta2 < 1) || !(o->p.epsilon > 0))))
		return dt__fail(DT_EPROTO, "KV_SET_OPT: parameters out of "
		                           "range");
	return DT_OK;
}

int
dt__kv_many_cmd(int cmd)
{
	return cmd == DT_CMD_KV_INIT_MANY || cmd == DT_CMD_KV_PUSH_MANY ||
	       cmd == DT_CMD_KV_PULL_MANY || cmd == DT_CMD_KV_PUSHPULL_MANY;
}

int
dt__kv_many_has_vals(int cmd)
{
	return cmd == DT_CMD_KV_INIT_MANY || cmd == DT_CMD_KV_PUSH_MANY ||
	       cmd == DT_CMD_KV_PUSHPULL_MANY;
}

/* The rest of dt__kv_many_decode for a range (DT_KV_KEY_RANGE): the
 * header's counts are within their limits already. */
static dt_err
many_range(const dt_msg_hdr *h, const uint8_t *p, dt_kv_many *out)
{
	const char *op = dt__kv_op_name(h->cmd);
	uint64_t count = h->arg0, len = h->payload_len, nvals = count * h->arg1;
	uint64_t want = 16 + (dt__kv_many_has_vals(h->cmd) ? 4 * nvals : 0);

	if (h->cmd == DT_CMD_KV_INIT_MANY || h->arg1 == 0 || count == 0)
		return dt__fail(DT_EPROTO,
		                "%s: a key range is for a push, pull or "
		                "pushpull of at least one key of one length "
		                "(here %llu keys, length %llu)",
		                op, (unsigned long long)count,
		                (unsigned long long)h->arg1);
	if (len != want || p == NULL)
		return dt__fail(DT_ESIZE,
		                "%s of a range of %llu keys: body of %llu "
		                "bytes, expected %llu",
		                op, (unsigned long long)count,
		                (unsigned long long)len,
		                (unsigned long long)want);
	out->k0 = dt__get_u64(p);
	out->step = dt__get_u64(p + 8);
	if (out->step == 0 ||
	    out->step > (UINT64_MAX - out->k0) / DT_MAX(count - 1, 1))
		return dt__fail(DT_EPROTO,
		                "%s: key range from %llu in steps of %llu: %s",
		                op, (unsigned long long)out->k0,
		                (unsigned long long)out->step,
		                out->step ? "its last key is past 2^64 - 1"
		                          : "a step of 0 lists a key twice");
	out->count = (size_t)count;
	out->lens.uniform = (uint32_t)h->arg1;
	out->nvals = nvals;
	out->answer = DT_KV_ENC_ANSWER(h->arg2);
	out->vals = dt__kv_many_has_vals(h->cmd) ? p + 16 : NULL;
	return DT_OK;
}

dt_err
dt__kv_many_decode(const dt_msg_hdr *h, const void *payload, dt_kv_many *out)
{
	const char *op = dt__kv_op_name(h->cmd);
	uint64_t count = h->arg0, len = h->payload_len, head, nvals = 0;
	const uint8_t *p = payload;
	unsigned enc = h->arg2 & ~DT_KV_KEY_RANGE;
	int range = (h->arg2 & DT_KV_KEY_RANGE) != 0;

	memset(out, 0, sizeof(*out));
	if (!dt__kv_many_cmd(h->cmd))
		return dt__fail(DT_EPROTO, "command %u is not a batched one",
		                h->cmd);
	if (DT_KV_ENC_PUSH(enc) != DT_QUANT_NONE || (enc >> 16) != 0 ||
	    (DT_KV_ENC_ANSWER(enc) != DT_QUANT_NONE &&
	     DT_KV_ENC_ANSWER(enc) != DT_QUANT_FP16) ||
	    (h->cmd == DT_CMD_KV_INIT_MANY && enc != 0))
		return dt__fail(DT_EPROTO,
		                "%s: encodings 0x%x (values go as fp32; "
		                "answers as fp32 or fp16)",
		                op, enc);
	if (count > DT_KS_MAX_KEYS)
		return dt__fail(DT_ESIZE, "%s of %llu keys: more than %llu", op,
		                (unsigned long long)count,
		                (unsigned long long)DT_KS_MAX_KEYS);
	if (h->arg1 > DT_KS_MAX_LEN)
		return dt__fail(DT_ESIZE,
		                "%s: key length %llu (at most %llu floats)", op,
		                (unsigned long long)h->arg1,
		                (unsigned long long)DT_KS_MAX_LEN);
	if (range)
		return many_range(h, p, out);
	head = count * (h->arg1 ? 8 : 12);
	if (len < head || (count && payload == NULL))
		return dt__fail(DT_ESIZE,
		                "%s of %llu keys: body of %llu bytes, shorter "
		                "than its key list",
		                op, (unsigned long long)count,
		                (unsigned long long)len);
	out->count = (size_t)count;
	out->keys = p;
	out->lens.uniform = (uint32_t)h->arg1;
	if (h->arg1 == 0 && count) {
		out->lens.lens = p + 8 * count;
		for (uint64_t i = 0; i < count; i++) {
			uint32_t l = dt__ks_len_at(&out->lens, (size_t)i);

			if (l == 0 || l > DT_KS_MAX_LEN)
				return dt__fail(
				    DT_ESIZE,
				    "%s: key %llu has length %u (1 to %llu)",
				    op,
				    (unsigned long long)dt__get_u64(p + 8 * i),
				    l, (unsigned long long)DT_KS_MAX_LEN);
			nvals += l;
		}
	} else {
		nvals = count * h->arg1;
	}
	out->nvals = nvals;
	out->answer = DT_KV_ENC_ANSWER(enc);
	if (!dt__kv_many_has_vals(h->cmd)) {
		if (len != head)
			return dt__fail(DT_ESIZE,
			                "%s of %llu keys: body of %llu bytes, "
			                "expected %llu",
			                op, (unsigned long long)count,
			                (unsigned long long)len,
			                (unsigned long long)head);
		return DT_OK;
	}
	if ((len - head) / 4 != nvals || (len - head) % 4)
		return dt__fail(DT_ESIZE,
		                "%s of %llu keys: %llu bytes of values for "
		                "%llu floats",
		                op, (unsigned long long)count,
		                (unsigned long long)(len - head),
		                (unsigned long long)nvals);
	out->vals = nvals ? p + head : NULL;
	return DT_OK;
}

int
dt__kv_rows_cmd(int cmd)
{
	return cmd == DT_CMD_KV_ROW_PUSH || cmd == DT_CMD_KV_ROW_PULL ||
	       cmd == DT_CMD_KV_ROW_PUSHPULL;
}

dt_err
dt__kv_rows_decode(const dt_msg_hdr *h, const uint8_t *meta,
                   const void *payload, dt_kv_rows *out)
{
	const char *op = dt__kv_op_name(h->cmd);
	uint64_t count = h->arg0, width = h->arg1, len = h->payload_len, want;
	dt_quant_kind k = (dt_quant_kind)DT_KV_ENC_PUSH(h->arg2);
	unsigned a = DT_KV_ENC_ANSWER(h->arg2);
	int pushes = h->cmd != DT_CMD_KV_ROW_PULL;
	int answers = h->cmd != DT_CMD_KV_ROW_PUSH;

	memset(out, 0, sizeof(*out));
	if (!dt__kv_rows_cmd(h->cmd))
		return dt__fail(DT_EPROTO, "command %u is not a row request",
		                h->cmd);
	out->at = h->cmd == DT_CMD_KV_ROW_PULL && (h->arg2 & DT_KV_AT_ROUND);
	if (((h->arg2 & ~(uint64_t)DT_KV_AT_ROUND) >> 16) ||
	    ((h->arg2 & DT_KV_AT_ROUND) && !out->at) || (!pushes && k) ||
	    (!answers && a) || (unsigned)k > DT_QUANT_1BIT ||
	    (a != DT_QUANT_NONE && a != DT_QUANT_FP16))
		return dt__fail(DT_EPROTO,
		                "%s of key %llu: encodings %#llx (pushed "
		                "values as none, fp16, 2bit or 1bit; answers "
		                "as fp32 or fp16)",
		                op, (unsigned long long)h->key,
		                (unsigned long long)h->arg2);
	if (h->meta_len != (k == DT_QUANT_2BIT ? 4u : out->at ? 8u : 0u))
		return dt__fail(DT_EPROTO,
		                "%s of key %llu: %u bytes of meta (a 2bit "
		                "push has its threshold, 4 bytes; a pull as "
		                "of a round its round, 8; other row requests "
		                "none)",
		                op, (unsigned long long)h->key, h->meta_len);
	if (out->at)
		out->round = dt__get_u64(meta);
	if (k == DT_QUANT_2BIT) {
		uint32_t tb = dt__get_u32(meta);

		memcpy(&out->t, &tb, sizeof(out->t));
		if (!(isfinite(out->t) && out->t > 0.0f))
			return dt__fail(DT_EPROTO,
			                "%s of key %llu: 2bit threshold %g is "
			                "not a positive finite number",
			                op, (unsigned long long)h->key,
			                (double)out->t);
	}
	if (count > DT_RS_MAX_ROWS || width == 0 || width > DT_RS_MAX_WIDTH ||
	    count * width > DT_RS_MAX_VALS)
		return dt__fail(DT_ESIZE,
		                "%s of key %llu: %llu rows of width %llu "
		                "(width 1 to %llu, at most %llu floats)",
		                op, (unsigned long long)h->key,
		                (unsigned long long)count,
		                (unsigned long long)width,
		                (unsigned long long)DT_RS_MAX_WIDTH,
		                (unsigned long long)DT_RS_MAX_VALS);
	want = count * 8;
	if (pushes)
		want +=
		    k == DT_QUANT_NONE
		        ? count * width * 4
		        : (uint64_t)dt__quant_size(k, (size_t)(count * width));
	if (len != want || (count && payload == NULL))
		return dt__fail(
		    DT_ESIZE,
		    "%s of key %llu: body of %llu bytes, but %llu "
		    "rows of width %llu%s%s are %llu",
		    op, (unsigned long long)h->key, (unsigned long long)len,
		    (unsigned long long)count, (unsigned long long)width,
		    pushes ? " in " : "", pushes ? dt__quant_name(k) : "",
		    (unsigned long long)want);
	out->count = (size_t)count;
	out->width = (size_t)width;
	out->ids = payload;
	out->body =
	    pushes && count ? (const uint8_t *)payload + count * 8 : NULL;
	out->body_len = (size_t)(len - count * 8);
	out->push = k;
	out->answer = a;
	return DT_OK;
}

/* ---- KV_STALL (docs/protocol.md) ---- */

dt_err
dt__kv_stall_query_encode(const dt_kv_stall_ask *a, size_t n, dt_wbuf *w)
{
	if (n > DT_KV_STALL_ASKS)
		return dt__fail(DT_EINVAL, "KV_STALL: %zu requests, at most %d",
		                n, DT_KV_STALL_ASKS);
	dt__wbuf_u32(w, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		dt__wbuf_u64(w, a[i].seq);
		dt__wbuf_u32(w, a[i].cmd);
		dt__wbuf_u64(w, a[i].key);
	}
	return dt__wbuf_err(w);
}

/* The count is checked before any request is read, and the body must end
 * where the last request does: a peer cannot make the server read or keep
 * more than DT_KV_STALL_ASKS requests. */
dt_err
dt__kv_stall_query_decode(const void *meta, size_t len, dt_kv_stall_ask *a,
                          size_t *n)
{
	dt_rbuf r;
	uint32_t cnt;
	dt_err err;

	dt__rbuf_init(&r, meta, len);
	cnt = dt__rbuf_u32(&r);
	if ((err = dt__rbuf_err(&r, "KV_STALL query")))
		return err;
	if (cnt == 0 || cnt > DT_KV_STALL_ASKS)
		return dt__fail(DT_EPROTO,
		                "KV_STALL query: %u requests, expected 1 to %d",
		                cnt, DT_KV_STALL_ASKS);
	for (uint32_t i = 0; i < cnt; i++) {
		a[i].seq = dt__rbuf_u64(&r);
		a[i].cmd = dt__rbuf_u32(&r);
		a[i].key = dt__rbuf_u64(&r);
		if (!r.failed &&
		    (a[i].cmd < DT_CMD_KV_FIRST || a[i].cmd > DT_CMD_KV_LAST))
			return dt__fail(
			    DT_EPROTO,
			    "KV_STALL query: request %u names command "
			    "%u, not a KV command",
			    i, a[i].cmd);
	}
	if ((err = dt__rbuf_err(&r, "KV_STALL query")))
		return err;
	if (r.off != len)
		return dt__fail(
		    DT_EPROTO,
		    "KV_STALL query: %zu bytes after its %u requests",
		    len - r.off, cnt);
	*n = cnt;
	return DT_OK;
}

dt_err
dt__kv_stall_reply_encode(const char *text, dt_wbuf *w)
{
	if (strlen(text) >= DT_KV_STALL_TEXT)
		return dt__fail(DT_EINVAL,
		                "KV_STALL answer: %zu bytes, at most %d",
		                strlen(text), DT_KV_STALL_TEXT - 1);
	dt__wbuf_str(w, text);
	return dt__wbuf_err(w);
}

/* The text goes to the worker's log: a byte that is not printable ASCII
 * (a control character could forge or hide log lines) refuses it. */
dt_err
dt__kv_stall_reply_decode(const void *meta, size_t len, char *text)
{
	dt_rbuf r;
	dt_err err;

	dt__rbuf_init(&r, meta, len);
	dt__rbuf_str(&r, text, DT_KV_STALL_TEXT);
	if ((err = dt__rbuf_err(&r, "KV_STALL answer")))
		return err;
	if (r.off != len) {
		text[0] = '\0';
		return dt__fail(DT_EPROTO,
		                "KV_STALL answer: %zu bytes after its text",
		                len - r.off);
	}
	for (const unsigned char *p = (const unsigned char *)text; *p; p++)
		if (*p < 0x20 || *p > 0x7e) {
			unsigned b = *p;

			text[0] = '\0';
			return dt__fail(DT_EPROTO,
			                "KV_STALL answer: byte 0x%02x is not "
			                "printable",
			                b);
		}
	return DT_OK;
}
