/*
 * srv_reply.c - what every store kind of a parameter server shares: its
 * answers (a value in fp32 or fp16, nothing, or an error naming what was
 * wrong) and the accounting of the server's busy time.
 *
 * The kinds' files (server.c, rserver.c) answer only through these, so the
 * wire form of an answer and the counters live in one place.
 */
#include <stdarg.h>
#include <stdio.h>

#include "kv/server.h"

void
srv_reply_held(kv_server *s, int worker, const dt_msg_hdr *h, uint64_t have)
{
	uint8_t b[8];
	struct iovec iov = {b, sizeof(b)};
	dt_msg_hdr a = {.cmd = (uint8_t)h->cmd,
	                .flags = DT_F_RESPONSE,
	                .seq = h->seq,
	                .key = h->key};

	dt__put_u64(b, have);
	if (dt__node_send_ex(s->node, dt__node_worker_id(s->node, worker), &a,
	                     NULL, 0, &iov, 1, 0))
		DT_LOG(1, "answer to worker %d: %s", worker, dt_errmsg());
}

void
srv_reply_val(kv_server *s, int worker, int cmd, uint64_t seq, dt_key key,
              const float *val, size_t len, unsigned enc, int scratch)
{
	dt_msg_hdr h = {.cmd = (uint8_t)cmd,
	                .flags = DT_F_RESPONSE,
	                .seq = seq,
	                .key = key};
	struct iovec iov = {(void *)val, len * sizeof(float)};
	unsigned flags = scratch ? 0 : DT_SEND_STABLE;
	dt_err err;

	if (val && enc == DT_QUANT_FP16) {
		if (!dt__buf_reserve(&s->half, &s->half_cap, 2 * len)) {
			srv_reply_error(s, worker, cmd, seq, key, DT_ENOMEM,
			                "%s of key %llu: out of memory for the "
			                "fp16 answer",
			                dt__kv_op_name(cmd),
			                (unsigned long long)key);
			return;
		}
		dt__quant_fp16(val, s->half, len);
		iov = (struct iovec){s->half, 2 * len};
		h.arg2 = DT_QUANT_FP16;
		flags = 0; /* (a scratch buffer: PS_RESEND copies it) */
	}
	err = dt__node_send_ex(s->node, dt__node_worker_id(s->node, worker), &h,
	                       NULL, 0, val ? &iov : NULL, val ? 1 : 0, flags);
	if (err)
		DT_LOG(1, "answer to worker %d: %s", worker, dt_errmsg());
}

void
srv_reply_enc(kv_server *s, int worker, int cmd, uint64_t seq, dt_key key,
              const float *val, size_t len, unsigned enc)
{
	srv_reply_val(s, worker, cmd, seq, key, val, len, enc, 0);
}

void
srv_reply(kv_server *s, int worker, int cmd, uint64_t seq, dt_key key,
          const float *val, size_t len)
{
	srv_reply_enc(s, worker, cmd, seq, key, val, len, DT_QUANT_NONE);
}

void
srv_reply_error(kv_server *s, int worker, int cmd, uint64_t seq, dt_key key,
                dt_err code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	dt_wbuf w;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	DT_LOG(1, "error for worker %d: %s", worker, msg);
	dt__wbuf_init(&w);
	dt_msg_hdr h = {.cmd = (uint8_t)cmd,
	                .flags = DT_F_RESPONSE | DT_F_ERROR,
	                .seq = seq,
	                .key = key};
	if (dt__kv_error_encode(code, msg, &w) == DT_OK)
		dt__node_send(s->node, dt__node_worker_id(s->node, worker), &h,
		              w.data, (uint32_t)w.len, NULL, 0);
	dt__wbuf_fini(&w);
}

void
srv_busy_part(int kind, uint64_t t0, dt_key key, uint64_t bytes, int peer,
              int count)
{
	uint64_t now = dt__now_ns();

	if (kind != DT_EV_KV_REPLY)
		dt__obs_server(kind == DT_EV_KV_UPDATE, count, now - t0);
	if (dt__tracing())
		dt__trace_span(kind, DT_TID_IO, t0, key,
		               DT_EVF_KEY | (bytes ? DT_EVF_BYTES : 0) |
		                   (peer >= 0 ? DT_EVF_PEER : 0),
		               bytes, peer);
}

void
srv_busy(int kind, uint64_t t0, dt_key key, uint64_t bytes, int peer)
{
	srv_busy_part(kind, t0, key, bytes, peer, 1);
}
