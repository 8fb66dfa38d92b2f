/*
 * srv_stall.c - a server's side of the stall report. A worker whose call
 * has waited DT_KV_STALL seconds asks (KV_STALL) what this server holds of
 * the requests it still owes; the answer says, for each, what the store
 * kind holding its key knows (server.h: srv_kind's describe) - "in the
 * open round: round 12 of key 3 has the pushes of workers 0, 2; it waits
 * for worker 1" - or, when no kind holds it, that it never came (or was
 * answered already), naming the replays a rejoined server still waits
 * for. The server also logs, once each, its rounds open longer than
 * DT_KV_STALL (the kinds' stalled), looking at most once a second after a
 * message, so a push pays one clock read for it.
 *
 * Threads: the node's I/O thread, as the rest of the server.
 */
#include <stdio.h>
#include <string.h>

#include "kv/kv_impl.h"
#include "kv/server.h"

/* A rejoined server's missing replays: "workers 1, 3". */
static void
stall_replays_missing(const kv_server *s, char *buf, size_t cap)
{
	size_t len = 0;
	int named = 0;

	buf[0] = '\0';
	for (int w = 0; w < s->nworkers && len < cap; w++)
		if (s->replayed && !s->replayed[w]) {
			len += (size_t)snprintf(buf + len, cap - len, "%s%d",
			                        named ? ", " : "", w);
			named++;
		}
}

/* What this server holds of a: one phrase into buf. */
static void
stall_describe(kv_server *s, int worker, const dt_kv_stall_ask *a, char *buf,
               size_t cap)
{
	char missing[128];

	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->describe &&
		    (*kind)->describe(s, worker, a, buf, cap))
			return;
	if (s->rejoined) {
		stall_replays_missing(s, missing, sizeof(missing));
		snprintf(buf, cap,
		         "not held here: never received, or answered already; "
		         "this server took a lost one's place and waits for "
		         "the replays of workers %s",
		         missing);
		return;
	}
	snprintf(buf, cap,
	         "not held here: never received, or answered "
	         "already");
}

void
srv_on_stall(kv_server *s, int worker, const dt_msg *m)
{
	const dt_msg_hdr *h = &m->hdr;
	dt_kv_stall_ask a[DT_KV_STALL_ASKS];
	char text[DT_KV_STALL_TEXT], what[640];
	size_t n = 0, len = 0;
	dt_wbuf w;

	if (dt__kv_stall_query_decode(m->meta, h->meta_len, a, &n)) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_EPROTO, "%s",
		                dt_errmsg());
		return;
	}
	text[0] = '\0';
	for (size_t i = 0; i < n && len + 1 < sizeof(text); i++) {
		stall_describe(s, worker, &a[i], what, sizeof(what));
		len += (size_t)snprintf(
		    text + len, sizeof(text) - len,
		    "%srequest %llu (%s of key %llu): %s", i ? "; " : "",
		    (unsigned long long)a[i].seq, dt__kv_op_name((int)a[i].cmd),
		    (unsigned long long)a[i].key, what);
	}
	/* (level 1: a worker's questions must not fill this log; the
	 * worker logs the answer, and the open rounds are logged below) */
	DT_LOG(1, "stall: worker %d asks about its requests: %s", worker, text);
	/* The open rounds are looked at now, unless they were within the
	 * last 100 ms: however many questions come, at most ten looks over
	 * the keys a second. */
	if (s->stall_ns && dt__now_ns() + 900000000ull >= s->stall_next)
		s->stall_next = 0;
	srv_stall_tick(s);
	dt__wbuf_init(&w);
	dt_msg_hdr r = {
	    .cmd = DT_CMD_KV_STALL, .flags = DT_F_RESPONSE, .seq = h->seq};
	if (dt__kv_stall_reply_encode(text, &w) == DT_OK)
		dt__node_send(s->node, dt__node_worker_id(s->node, worker), &r,
		              w.data, (uint32_t)w.len, NULL, 0);
	dt__wbuf_fini(&w);
}

void
srv_stall_tick(kv_server *s)
{
	uint64_t now;

	if (s->stall_ns == 0)
		return;
	now = dt__now_ns();
	if (now < s->stall_next)
		return;
	s->stall_next = now + 1000000000ull;
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->stalled)
			(*kind)->stalled(s, now);
}
