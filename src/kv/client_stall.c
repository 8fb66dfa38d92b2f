/*
 * client_stall.c - the worker's stall report. A call that has waited
 * DT_KV_STALL seconds without an answer coming says, once, what it waits
 * for: the call, its keys, and for each server that still owes an answer
 * its name, address and the requests' sequence numbers. It then asks those
 * servers (KV_STALL) what they hold of those requests and logs their
 * answers as they come. The report changes nothing: the call keeps
 * waiting, and DT_WAIT_TIMEOUT still ends it.
 *
 * The waiting caller (client_op.c: dt__kv_client_wait) decides when a
 * stall is due; this file gathers the sub-requests under c->mu, then logs
 * and sends without it. The answers come on the I/O thread (client.c's
 * on_msg hands them here).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/table.h"
#include "kv/client_impl.h"

/* A day at most: a longer wait is DT_WAIT_TIMEOUT's business. */
dt_err
dt__kv_stall_env(uint64_t *ns)
{
	long v;
	dt_err err;

	if ((err = dt__env_long("DT_KV_STALL", 60, 0, 86400, &v)))
		return err;
	*ns = (uint64_t)v * 1000000000ull;
	return DT_OK;
}

/* What one server still owes of the call. */
typedef struct owed {
	int server_id;
	int parked; /* held here until that restarted server's replay */
	size_t n;   /* requests (only the first DT_KV_STALL_ASKS are asked) */
	uint64_t keys; /* a batched call's keys in those requests */
	dt_kv_stall_ask ask[DT_KV_STALL_ASKS];
} owed;

#define STALL_SERVERS 16 /* named in one report; the rest are counted */

static int
batched_cmd(int cmd)
{
	return cmd == DT_CMD_KV_INIT_MANY || cmd == DT_CMD_KV_PUSH_MANY ||
	       cmd == DT_CMD_KV_PULL_MANY || cmd == DT_CMD_KV_PUSHPULL_MANY;
}

/* The sub-requests of o still in flight, by server (c->mu held); the
 * number of servers (those past STALL_SERVERS counted in *more). */
static int
gather(dt_kv_client *c, const kv_op *o, owed *w, int *more)
{
	dt_table_iter it;
	int nw = 0;

	*more = 0;
	for (dt_hnode *h = dt__table_first(&c->subs, &it); h;
	     h = dt__table_next(&it)) {
		sub *s = DT_CONTAINER_OF(h, sub, hn);
		int i = 0;

		if (s->op != o)
			continue;
		while (i < nw && w[i].server_id != s->server_id)
			i++;
		if (i == nw) {
			if (nw == STALL_SERVERS) {
				(*more)++;
				continue;
			}
			int r = dt__kvc_server_rank(c, s->server_id);

			w[nw++] = (owed){.server_id = s->server_id,
			                 .parked = c->recover && r >= 0 &&
			                           r < c->nservers &&
			                           c->srv[r].restarted};
		}
		if (w[i].n < DT_KV_STALL_ASKS)
			w[i].ask[w[i].n] = (dt_kv_stall_ask){
			    (uint64_t)s->seq, (uint32_t)s->cmd, s->key};
		w[i].n++;
		if (batched_cmd(s->cmd))
			w[i].keys += s->arg0;
	}
	return nw;
}

/* One server's line: "server 0 (10.0.0.1:9000): request 57" and what this
 * worker knows itself (a restarted server's requests wait for its
 * replay). */
static void
server_line(dt_kv_client *c, const owed *w, int batched, char *buf, size_t cap)
{
	const dt_node_entry *e = dt__node_entry(c->node, w->server_id);
	char name[64];
	size_t len;

	len = (size_t)snprintf(
	    buf, cap, "%s (%s:%d): request%s",
	    dt__node_name(c->node, w->server_id, name, sizeof(name)),
	    e ? e->host : "?", e ? e->port : 0, w->n > 1 ? "s" : "");
	for (size_t i = 0; i < w->n && i < DT_KV_STALL_ASKS && len < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s %llu",
		                        i ? "," : "",
		                        (unsigned long long)w->ask[i].seq);
	if (w->n > DT_KV_STALL_ASKS && len < cap)
		len += (size_t)snprintf(buf + len, cap - len, " and %zu more",
		                        w->n - DT_KV_STALL_ASKS);
	if (batched && len < cap)
		len += (size_t)snprintf(buf + len, cap - len,
		                        " (%llu keys from %llu)",
		                        (unsigned long long)w->keys,
		                        (unsigned long long)w->ask[0].key);
	if (w->parked && len < cap)
		snprintf(buf + len, cap - len,
		         ", held here until the replay to that restarted "
		         "server (its KV_CKPT_DONE has not come)");
}

/* Ask a server what it holds of the requests it owes; its answer comes
 * to dt__kvc_on_stall_reply. A failed send is only logged: the report
 * must not change what the call does. */
static void
ask(dt_kv_client *c, const owed *w)
{
	size_t n = w->n < DT_KV_STALL_ASKS ? w->n : DT_KV_STALL_ASKS;
	dt_msg_hdr h = {.cmd = DT_CMD_KV_STALL, .flags = DT_F_REQUEST};
	dt_wbuf b;

	dt__wbuf_init(&b);
	pthread_mutex_lock(&c->mu);
	c->stall_asks++;
	pthread_mutex_unlock(&c->mu);
	if (dt__kv_stall_query_encode(w->ask, n, &b) != DT_OK ||
	    dt__node_send(c->node, w->server_id, &h, b.data, (uint32_t)b.len,
	                  NULL, 0) != DT_OK) {
		dt__log(0, "stall: could not ask node %d: %s", w->server_id,
		        dt_errmsg());
		pthread_mutex_lock(&c->mu);
		c->stall_asks--;
		pthread_mutex_unlock(&c->mu);
	}
	dt__wbuf_fini(&b);
}

void
dt__kvc_stall_report(dt_kv_client *c, kv_op *o, uint64_t waited_ns)
{
	owed w[STALL_SERVERS];
	char line[512];
	int nw, more, batched = batched_cmd(o->cmd);
	uint64_t keys = 0;

	pthread_mutex_lock(&c->mu);
	nw = gather(c, o, w, &more);
	pthread_mutex_unlock(&c->mu);
	if (nw == 0)
		return; /* (answered meanwhile) */
	for (int i = 0; i < nw; i++)
		keys += w[i].keys;
	if (batched)
		dt__log(0,
		        "stall: %s #%llu of %llu keys still owed (from key "
		        "%llu) has had no answer for %llu s; it waits for %d "
		        "server%s%s",
		        dt__kv_op_name(o->cmd), (unsigned long long)o->id,
		        (unsigned long long)keys, (unsigned long long)o->key,
		        (unsigned long long)(waited_ns / 1000000000ull),
		        nw + more, nw + more > 1 ? "s" : "",
		        more ? " (the first named below)" : "");
	else
		dt__log(0,
		        "stall: %s #%llu of key %llu has had no answer for "
		        "%llu s; it waits for %d server%s%s",
		        dt__kv_op_name(o->cmd), (unsigned long long)o->id,
		        (unsigned long long)o->key,
		        (unsigned long long)(waited_ns / 1000000000ull),
		        nw + more, nw + more > 1 ? "s" : "",
		        more ? " (the first named below)" : "");
	for (int i = 0; i < nw; i++) {
		server_line(c, &w[i], batched, line, sizeof(line));
		dt__log(0, "stall: %s of key %llu waits for %s",
		        dt__kv_op_name(o->cmd), (unsigned long long)o->key,
		        line);
		ask(c, &w[i]);
	}
}

void
dt__kvc_on_stall_reply(dt_kv_client *c, dt_conn *conn, const dt_msg *m)
{
	const dt_msg_hdr *h = &m->hdr;
	char name[64], text[DT_KV_STALL_TEXT];
	dt_err code;

	int asked;

	dt__node_name(c->node, (int)h->sender, name, sizeof(name));
	if (dt__conn_peer(conn) != (int)h->sender)
		return;
	/* Only as many answers as questions are logged: a peer cannot fill
	 * the log with answers nobody asked for. */
	pthread_mutex_lock(&c->mu);
	asked = c->stall_asks > 0;
	c->stall_asks -= asked;
	pthread_mutex_unlock(&c->mu);
	if (!asked) {
		DT_LOG(1, "ignoring a KV_STALL answer nobody asked for from %s",
		       name);
		return;
	}
	if (h->flags & DT_F_ERROR) {
		if (dt__kv_error_decode(m->meta, h->meta_len, &code, text,
		                        sizeof(text)) == DT_OK) {
			/* (printable only, as the answers: no line of the
			 * log forged or hidden by a peer) */
			for (char *t = text; *t; t++)
				if (*t < 0x20 || *t > 0x7e)
					*t = '?';
			dt__log(0, "stall: %s could not say: %s", name, text);
		} else
			dt__log(0, "stall: %s sent a malformed error answer",
			        name);
		return;
	}
	if (dt__kv_stall_reply_decode(m->meta, h->meta_len, text) != DT_OK) {
		dt__log(0, "stall: ignoring %s's answer: %s", name,
		        dt_errmsg());
		return;
	}
	dt__log(0, "stall: %s says: %s", name, text);
}
