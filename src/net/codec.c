/*
 * codec.c - encode and validate frame headers; metadata readers/writers.
 *
 * The decoder is the first code to touch bytes from a peer, so it trusts
 * nothing: each field is checked against its limit before any caller sizes
 * a buffer from it. fuzz/fuzz_codec.c drives it with arbitrary bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "net/codec.h"

_Static_assert(sizeof(float) == 4, "dtrain needs 32-bit floats");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error                                                                         \
    "dtrain's wire payloads are little-endian; big-endian hosts are not supported"
#endif

static const char *const cmd_names[DT_CMD_COLL_LAST + 1] = {
#define NAME(name, num, dir) [num] = #name,
    DT_PROTO_COMMANDS(NAME)
#undef NAME
};

const char *
dt__cmd_name(unsigned cmd)
{
	static _Thread_local char buf[16];

	if (cmd < DT_ARRAY_LEN(cmd_names) && cmd_names[cmd])
		return cmd_names[cmd];
	snprintf(buf, sizeof(buf), "cmd %u", cmd);
	return buf;
}

int
dt__cmd_is_control(unsigned cmd)
{
	return cmd >= DT_CMD_CONTROL_FIRST && cmd <= DT_CMD_CONTROL_LAST;
}

int
dt__cmd_in_range(unsigned cmd)
{
	/* The control range holds only the commands the table names; the
	 * other ranges belong to their layers, which refuse what they do
	 * not know. */
	if (dt__cmd_is_control(cmd))
		return cmd_names[cmd] != NULL;
	return cmd >= DT_CMD_KV_FIRST && cmd <= DT_CMD_COLL_LAST;
}

void
dt__hdr_encode(const dt_msg_hdr *h, uint8_t out[DT_HDR_SIZE])
{
	dt__put_u32(out + 0, DT_WIRE_MAGIC);
	out[4] = DT_WIRE_VERSION;
	out[5] = h->cmd;
	dt__put_u16(out + 6, h->flags);
	dt__put_u32(out + 8, h->sender);
	dt__put_u32(out + 12, h->recver);
	dt__put_u64(out + 16, h->seq);
	dt__put_u64(out + 24, h->key);
	dt__put_u64(out + 32, h->arg0);
	dt__put_u64(out + 40, h->arg1);
	dt__put_u32(out + 48, h->arg2);
	dt__put_u32(out + 52, h->meta_len);
	dt__put_u64(out + 56, h->payload_len);
}

dt_err
dt__hdr_decode(const uint8_t in[DT_HDR_SIZE], uint64_t max_payload,
               dt_msg_hdr *h)
{
	uint32_t magic = dt__get_u32(in);

	if (magic != DT_WIRE_MAGIC)
		return dt__fail(DT_EPROTO,
		                "bad frame magic 0x%08x (expected 0x%08x): "
		                "not a dtrain peer",
		                magic, DT_WIRE_MAGIC);
	h->version = in[4];
	if (h->version != DT_WIRE_VERSION)
		return dt__fail(DT_EPROTO,
		                "protocol version %u not supported (this node "
		                "speaks %u)",
		                h->version, DT_WIRE_VERSION);
	h->cmd = in[5];
	if (!dt__cmd_in_range(h->cmd))
		return dt__fail(DT_EPROTO, "unknown command %u", h->cmd);
	h->flags = dt__get_u16(in + 6);
	if (h->flags & ~(DT_F_REQUEST | DT_F_RESPONSE | DT_F_ERROR | DT_F_LINK))
		return dt__fail(DT_EPROTO, "unknown flags 0x%x", h->flags);
	h->sender = dt__get_u32(in + 8);
	h->recver = dt__get_u32(in + 12);
	h->seq = dt__get_u64(in + 16);
	h->key = dt__get_u64(in + 24);
	h->arg0 = dt__get_u64(in + 32);
	h->arg1 = dt__get_u64(in + 40);
	h->arg2 = dt__get_u32(in + 48);
	h->meta_len = dt__get_u32(in + 52);
	if (h->meta_len > DT_MAX_META)
		return dt__fail(DT_ETOOBIG,
		                "%s: metadata length %u exceeds the limit %u",
		                dt__cmd_name(h->cmd), h->meta_len, DT_MAX_META);
	h->payload_len = dt__get_u64(in + 56);
	if (h->payload_len > max_payload)
		return dt__fail(DT_ETOOBIG,
		                "%s: payload length %llu exceeds the limit "
		                "%llu (DT_MAX_MESSAGE)",
		                dt__cmd_name(h->cmd),
		                (unsigned long long)h->payload_len,
		                (unsigned long long)max_payload);
	return DT_OK;
}

void
dt__wbuf_init(dt_wbuf *w)
{
	w->data = w->inline_buf;
	w->len = 0;
	w->cap = sizeof(w->inline_buf);
	w->failed = 0;
}

void
dt__wbuf_fini(dt_wbuf *w)
{
	if (w->data != w->inline_buf)
		free(w->data);
	dt__wbuf_init(w);
}

void
dt__wbuf_reserve(dt_wbuf *w, size_t n)
{
	if (w->failed || w->len + n <= w->cap)
		return;
	uint8_t *nd = w->data == w->inline_buf ? malloc(w->len + n)
	                                       : realloc(w->data, w->len + n);

	if (nd == NULL) {
		w->failed = 1;
		return;
	}
	if (w->data == w->inline_buf)
		memcpy(nd, w->data, w->len);
	w->data = nd;
	w->cap = w->len + n;
}

void
dt__wbuf_bytes(dt_wbuf *w, const void *p, size_t n)
{
	if (w->failed)
		return;
	if (w->len + n > w->cap) {
		size_t cap = w->cap * 2;
		uint8_t *nd;

		while (cap < w->len + n)
			cap *= 2;
		if (w->data == w->inline_buf) {
			nd = malloc(cap);
			if (nd)
				memcpy(nd, w->data, w->len);
		} else {
			nd = realloc(w->data, cap);
		}
		if (nd == NULL) {
			w->failed = 1;
			return;
		}
		w->data = nd;
		w->cap = cap;
	}
	if (n)
		memcpy(w->data + w->len, p, n);
	w->len += n;
}

void
dt__wbuf_u8(dt_wbuf *w, uint8_t v)
{
	dt__wbuf_bytes(w, &v, 1);
}

void
dt__wbuf_u32(dt_wbuf *w, uint32_t v)
{
	uint8_t b[4];

	dt__put_u32(b, v);
	dt__wbuf_bytes(w, b, 4);
}

void
dt__wbuf_u64(dt_wbuf *w, uint64_t v)
{
	uint8_t b[8];

	dt__put_u64(b, v);
	dt__wbuf_bytes(w, b, 8);
}

void
dt__wbuf_f64(dt_wbuf *w, double v)
{
	uint64_t u;

	memcpy(&u, &v, 8);
	dt__wbuf_u64(w, u);
}

void
dt__wbuf_str(dt_wbuf *w, const char *s)
{
	size_t n = strlen(s);

	dt__wbuf_u32(w, (uint32_t)n);
	dt__wbuf_bytes(w, s, n);
}

dt_err
dt__wbuf_err(const dt_wbuf *w)
{
	return w->failed ? dt__fail(DT_ENOMEM, "out of memory encoding a "
	                                       "message")
	                 : DT_OK;
}

void
dt__rbuf_init(dt_rbuf *r, const void *p, size_t len)
{
	r->p = p;
	r->len = p ? len : 0;
	r->off = 0;
	r->failed = 0;
}

const void *
dt__rbuf_bytes(dt_rbuf *r, size_t n)
{
	const void *p;

	if (r->failed || n > r->len - r->off) {
		r->failed = 1;
		return NULL;
	}
	p = r->p + r->off;
	r->off += n;
	return p;
}

uint8_t
dt__rbuf_u8(dt_rbuf *r)
{
	const uint8_t *p = dt__rbuf_bytes(r, 1);

	return p ? p[0] : 0;
}

uint32_t
dt__rbuf_u32(dt_rbuf *r)
{
	const uint8_t *p = dt__rbuf_bytes(r, 4);

	return p ? dt__get_u32(p) : 0;
}

uint64_t
dt__rbuf_u64(dt_rbuf *r)
{
	const uint8_t *p = dt__rbuf_bytes(r, 8);

	return p ? dt__get_u64(p) : 0;
}

double
dt__rbuf_f64(dt_rbuf *r)
{
	uint64_t u = dt__rbuf_u64(r);
	double v;

	memcpy(&v, &u, 8);
	return v;
}

void
dt__rbuf_str(dt_rbuf *r, char *out, size_t cap)
{
	uint32_t n = dt__rbuf_u32(r);
	const char *p;

	out[0] = '\0';
	if (r->failed)
		return;
	if (n >= cap) { /* longer than any legal value: reject, don't cut */
		r->failed = 1;
		return;
	}
	p = dt__rbuf_bytes(r, n);
	if (p == NULL)
		return;
	if (memchr(p, '\0', n) != NULL) { /* would cut the value: reject */
		r->failed = 1;
		return;
	}
	memcpy(out, p, n);
	out[n] = '\0';
}

dt_err
dt__rbuf_err(const dt_rbuf *r, const char *what)
{
	if (r->failed)
		return dt__fail(DT_EPROTO,
		                "%s: truncated or malformed metadata (%zu "
		                "bytes)",
		                what, r->len);
	return DT_OK;
}
