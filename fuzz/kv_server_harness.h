/*
 * kv_server_harness.h - a parameter server's real message handling
 * (src/kv/server.c and the files of its store kinds, compiled into the
 * including program) with the node
 * beneath it played in memory: the requests of a job's workers go in as
 * the node would hand them over (payload_dest chooses where a payload
 * lands, streamed ones come through payload_chunk, then on_msg), and the
 * answers are kept instead of sent. Used by the server fuzz target
 * (fuzz_kv_server_entry.h) and by tests/unit/kv_server_test.c.
 *
 * The server sees 1 server (itself, node 1) and H_WORKERS workers (nodes
 * 2, 3, ...); every sender is one of them, authenticated, as after the
 * handshake and HELLO. One server at a time per process.
 */
#ifndef DT_KV_SERVER_HARNESS_H
#define DT_KV_SERVER_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kv/kstore.h"
#include "kv/kv_impl.h"
#include "kv/rstore.h"
#include "net/van.h"

#define H_WORKERS 2

/* What the server answered last, and how many answers it sent. */
typedef struct h_answers {
	uint64_t count, errors;
	dt_msg_hdr last;
	dt_err code;       /* the last error's code (DT_OK: not an error) */
	char msg[512];     /* and its message */
	uint64_t bytes;    /* the last answer's payload */
	uint8_t data[256]; /* and its first bytes */
	char text[DT_KV_STALL_TEXT]; /* a KV_STALL answer's ("": none) */
	uint64_t pulls;              /* answers to KV_PULL that were values */
	float pull_f32;              /* and the last one's first float */
} h_answers;

static h_answers h_ans;
static dt__app_hooks h_hooks; /* what server_start attached */
static int h_attached;
static char h_conn_tag, h_node_tag; /* (their addresses are the handles) */
static int h_peer;                  /* the sender of the frame going in */

/* ---- the node, played: each stands for the function of core.h or
 * van.h it is renamed from below ---- */

static dt_err
h_node_send_ex(dt_node *n, int id, dt_msg_hdr *h, const void *meta,
               uint32_t meta_len, const struct iovec *iov, int iovcnt,
               unsigned flags)
{
	(void)n;
	(void)id;
	(void)flags;
	h_ans.count++;
	h_ans.last = *h;
	h_ans.bytes = 0;
	for (int i = 0; i < iovcnt; i++) {
		size_t room = sizeof(h_ans.data) -
		              (size_t)DT_MIN(h_ans.bytes, sizeof(h_ans.data));

		memcpy(h_ans.data + sizeof(h_ans.data) - room, iov[i].iov_base,
		       DT_MIN(room, iov[i].iov_len));
		h_ans.bytes += iov[i].iov_len;
	}
	h_ans.code = DT_OK;
	h_ans.msg[0] = '\0';
	h_ans.text[0] = '\0';
	if (h->cmd == DT_CMD_KV_STALL && !(h->flags & DT_F_ERROR) &&
	    dt__kv_stall_reply_decode(meta, meta_len, h_ans.text) != DT_OK)
		snprintf(h_ans.text, sizeof(h_ans.text), "(malformed)");
	if (h->cmd == DT_CMD_KV_PULL && !(h->flags & DT_F_ERROR) &&
	    h_ans.bytes >= sizeof(float)) {
		h_ans.pulls++;
		memcpy(&h_ans.pull_f32, h_ans.data, sizeof(float));
	}
	if (h->flags & DT_F_ERROR) {
		h_ans.errors++;
		if (dt__kv_error_decode(meta, meta_len, &h_ans.code, h_ans.msg,
		                        sizeof(h_ans.msg)) != DT_OK)
			h_ans.code = DT_EPROTO;
	}
	return DT_OK;
}

static dt_err
h_node_send(dt_node *n, int id, dt_msg_hdr *h, const void *meta,
            uint32_t meta_len, const struct iovec *iov, int iovcnt)
{
	return h_node_send_ex(n, id, h, meta, meta_len, iov, iovcnt, 0);
}

/* An elastic job (DTRAIN_ELASTIC=1), as a test sets it before h_start,
 * and the membership the node would have from the scheduler: its epoch
 * and the node ids of its workers (h_node_membership). */
static int h_elastic;
static uint64_t h_epoch;
static int h_members[H_WORKERS], h_nmembers;

static int
h_node_elastic(const dt_node *n)
{
	(void)n;
	return h_elastic;
}

static int
h_node_elastic_slots(const dt_node *n)
{
	(void)n;
	return H_WORKERS;
}

static int
h_node_membership(dt_node *n, uint64_t *epoch, int *ids, int cap)
{
	(void)n;
	*epoch = h_epoch;
	for (int i = 0; i < h_nmembers && i < cap; i++)
		ids[i] = h_members[i];
	return h_nmembers;
}

static const char *
h_node_name(const dt_node *n, int id, char *buf, size_t cap)
{
	(void)n;
	snprintf(buf, cap, "worker %d", id - 2);
	return buf;
}

static int
h_node_worker_id(const dt_node *n, int rank)
{
	(void)n;
	return 2 + rank;
}

/* Whether the node recovers lost nodes (DTRAIN_RECOVER), as a test
 * sets it before h_start. */
static int h_recover;

static int
h_node_recover(const dt_node *n)
{
	(void)n;
	return h_recover;
}

static int
h_node_zero(const dt_node *n)
{
	(void)n;
	return 0;
}

static int
h_node_rank(const dt_node *n)
{
	(void)n;
	return 0;
}

static int
h_node_num_servers(const dt_node *n)
{
	(void)n;
	return 1;
}

static int
h_node_num_workers(const dt_node *n)
{
	(void)n;
	return H_WORKERS;
}

static uint64_t
h_node_wait_ns(const dt_node *n)
{
	(void)n;
	return 1000000000ull;
}

static dt_err
h_node_attach(dt_node *n, const dt__app_class *cls, const dt__app_hooks *hk)
{
	(void)n;
	(void)cls;
	h_hooks = *hk;
	h_attached = 1;
	return DT_OK;
}

static void
h_node_detach(dt_node *n, const dt__app_class *cls)
{
	(void)n;
	(void)cls;
	h_attached = 0;
}

static void *
h_node_app_arg(dt_node *n, const dt__app_class *cls)
{
	(void)n;
	(void)cls;
	return h_attached ? h_hooks.arg : NULL;
}

static void
h_node_before_write(dt_node *n, const void *p, size_t bytes)
{
	(void)n;
	(void)p;
	(void)bytes;
}

static void
h_node_close(dt_node *n, dt_conn *c)
{
	(void)n;
	(void)c;
}

static int
h_conn_peer(const dt_conn *c)
{
	(void)c;
	return h_peer;
}

static const char *
h_conn_addr(const dt_conn *c)
{
	(void)c;
	return "127.0.0.1:1";
}

static dt_err
h_app_register(const dt__app_class *cls)
{
	(void)cls;
	return DT_OK;
}

/* (the van's tags, by which payload_dest says "drop" or "stream") */
static char h_discard_tag, h_stream_tag;

#define dt__van_discard_tag   h_discard_tag
#define dt__van_stream_tag    h_stream_tag
#define dt__app_register      h_app_register
#define dt__node_send         h_node_send
#define dt__node_send_ex      h_node_send_ex
#define dt__node_worker_id    h_node_worker_id
#define dt__node_recover      h_node_recover
#define dt__node_rejoined     h_node_zero
#define dt__node_wait_ns      h_node_wait_ns
#define dt__node_attach       h_node_attach
#define dt__node_detach       h_node_detach
#define dt__node_app_arg      h_node_app_arg
#define dt__node_before_write h_node_before_write
#define dt__node_close        h_node_close
#define dt__conn_peer         h_conn_peer
#define dt__conn_addr         h_conn_addr
#define dt_node_rank          h_node_rank
#define dt_node_num_servers   h_node_num_servers
#define dt_node_num_workers   h_node_num_workers

/* (an elastic job's membership, as a test sets it) */
#define dt__node_elastic       h_node_elastic
#define dt__node_elastic_slots h_node_elastic_slots
#define dt__node_membership    h_node_membership
#define dt__node_name          h_node_name
/* (the server's class and registration under names of their own: the
 * library's copy of server.c may be linked in beside this one) */
extern const dt__app_class h_kv_app;
dt_err h_kv_register(void);
#define dt__kv_app      h_kv_app
#define dt__kv_register h_kv_register
#define DT_SRV(name)    h_srv_##name
#include "kv/rserver.c"
#include "kv/srv_many.c"
#include "kv/srv_many_ckpt.c"
#include "kv/srv_dense.c"
#include "kv/srv_dense_ckpt.c"
#include "kv/srv_ckpt.c"
#include "kv/server.c"
#include "kv/srv_reply.c"
#include "kv/srv_elastic.c"
#include "kv/srv_stall.c"
#include "kv/srv_dense_stall.c"
#undef dt__kv_register
#undef dt__kv_app

/* ---- driving it ---- */

/* A server as a node starts one (DTRAIN_* limits from the environment). */
static kv_server *
h_start(void)
{
	memset(&h_ans, 0, sizeof(h_ans));
	if (server_start((dt_node *)(void *)&h_node_tag) != DT_OK)
		return NULL;
	return h_hooks.arg;
}

static void
h_stop(void)
{
	server_stop((dt_node *)(void *)&h_node_tag);
}

/*
 * Hand one frame from worker w to the server as the node would: the
 * payload goes where payload_dest says (a buffer of the server's, pieces
 * through payload_chunk, dropped, or a buffer of its own, here one of
 * exactly its length), then on_msg. h's sender and payload_len are set
 * here; meta is h->meta_len bytes.
 */
static void
h_frame(int w, dt_msg_hdr *h, const uint8_t *meta, const void *payload)
{
	dt_node *n = (dt_node *)(void *)&h_node_tag;
	dt_conn *c = (dt_conn *)(void *)&h_conn_tag;
	uint8_t *m0 = malloc(h->meta_len + 1);
	void *dest = NULL, *own = NULL;
	dt_msg m = {0};

	if (m0 == NULL)
		return;
	if (h->meta_len)
		memcpy(m0, meta, h->meta_len);
	m0[h->meta_len] = '\0'; /* (as the node: text meta ends in NUL) */
	h_peer = 2 + w;
	h->sender = (uint32_t)h_peer;
	h->recver = 1;
	h->flags |= DT_F_REQUEST;
	if (h->payload_len)
		dest = h_hooks.payload_dest(h_hooks.arg, n, c, h, m0);
	if (h->payload_len == 0) {
		/* no payload */
	} else if (dest == DT_VAN_DISCARD) {
		/* dropped: on_msg sees no payload */
	} else if (dest == DT_VAN_STREAM && h->payload_len % 4 == 0) {
		/* (pieces of at most 64 KiB, 4-byte aligned, as they come) */
		float *piece = malloc(65536);

		for (uint64_t off = 0; piece && off < h->payload_len;
		     off += 65536) {
			size_t len =
			    (size_t)DT_MIN(65536, h->payload_len - off);

			memcpy(piece, (const uint8_t *)payload + off, len);
			h_hooks.payload_chunk(h_hooks.arg, n, c, h, piece, off,
			                      len);
		}
		free(piece);
		m.streamed = 1;
	} else if (dest && dest != DT_VAN_STREAM) {
		memcpy(dest, payload, (size_t)h->payload_len);
		m.payload = dest;
		m.payload_external = 1;
	} else if ((own = malloc((size_t)h->payload_len)) != NULL) {
		memcpy(own, payload, (size_t)h->payload_len);
		m.payload = own;
	}
	m.hdr = *h;
	m.meta = m0;
	h_hooks.on_msg(h_hooks.arg, n, c, &m);
	free(own);
	free(m0);
}

#endif
