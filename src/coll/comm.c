/*
 * comm.c - the communicator: joining (from dtrain launch, mpirun or srun),
 * the node hooks through which every collective message arrives, the
 * executor that runs one operation at a time, and the safety net -
 * signature checks, aborts that reach every rank, stall reports and lost
 * peers. It reaches the algorithms only through their ops (algo.h: one
 * file per algorithm, algo.c chooses); exec.c has the services both use;
 * api.c the public calls.
 *
 * Message routing (I/O thread, comm.h explains the threads): a message
 * carries its operation's sequence number. One for an operation already
 * finished is dropped (a straggler of a failed one); one for the operation
 * being executed is checked against its signature and schedule and placed
 * (into the user's buffer, a slot, or reduced from the socket buffer);
 * one for a later operation is kept in the early queue, capped at
 * DT_COLL_UNEXPECTED_MAX bytes, and replayed when that operation starts.
 * Since every operation's completion depends on every rank (algo.c), no
 * rank runs more than one operation ahead of another, which bounds the
 * early queue to one operation's eager (small) messages.
 *
 * Failure: a rank that finds a signature mismatch or a protocol error, or
 * whose operation stalls past DT_COLL_TIMEOUT, sends ABORT with the reason
 * to every rank; a rank receiving it fails that operation (at once, or
 * when it reaches it). A lost peer breaks the communicator.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll/algo.h"
#include "coll/comm.h"
#include "coll/exec.h"
#include "coll/p2p.h"

/* (mu held when elastic) The rank of node id, or -1. */
int
dt__coll_rank_of_id(const dt_coll *c, int id)
{
	int i = id - c->base_id;

	if (c->rank_of == NULL)
		return i >= 0 && i < c->size ? i : -1;
	return i >= 0 && i < c->nworkers ? c->rank_of[i] : -1;
}

/* Rank of the worker at the other end of conn, or -1. An elastic
 * communicator's ranks change (dt__coll_reform, under mu). */
static int
peer_rank(dt_coll *c, dt_conn *conn)
{
	int r, me;

	if (c->elastic)
		pthread_mutex_lock(&c->mu);
	r = dt__coll_rank_of_id(c, dt__conn_peer(conn));
	me = c->rank; /* (a re-form changes it too, under mu) */
	if (c->elastic)
		pthread_mutex_unlock(&c->mu);
	return r >= 0 && r != me ? r : -1;
}

/* ---- stall queries ---- */

/* ---- the early queue ---- */

void
dt__coll_early_free(coll_early *e)
{
	free(e->text);
	free(e->payload);
	free(e);
}

/* Keep a message of an operation not started yet, from rank peer, or
 * from node id when peer is -1 (mu held). */
static void
early_add(dt_coll *c, int peer, int id, const dt_msg *m)
{
	coll_early *e;
	size_t len = m->payload ? (size_t)m->hdr.payload_len : 0;

	if (c->broken)
		return;
	if (c->eq_bytes + len + m->hdr.meta_len > c->cfg.unexpected_max) {
		c->broken = DT_ENOMEM;
		snprintf(c->broken_msg, sizeof(c->broken_msg),
		         "more than %zu bytes of collective messages arrived "
		         "ahead of their operation (DT_COLL_UNEXPECTED_MAX); "
		         "are the ranks calling the same operations?",
		         c->cfg.unexpected_max);
		if (c->cur)
			dt__coll_op_fail(c->cur, c->broken, 1, "%s",
			                 c->broken_msg);
		dt__coll_wake(c);
		return;
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return;
	e->h = m->hdr;
	e->peer = peer;
	e->id = peer >= 0 ? dt__coll_peer_id(c, peer) : id;
	dt__coll_meta md;
	(void)dt__coll_meta_decode(m->meta, m->hdr.meta_len, m->hdr.cmd, &md);
	e->has_sig = md.has_sig;
	e->sig = md.sig;
	e->remote = md.remote;
	if (m->hdr.cmd == DT_CMD_COLL_ABORT)
		e->text = strndup(m->meta ? (const char *)m->meta : "",
		                  m->hdr.meta_len);
	if (len) {
		e->payload = malloc(len);
		if (e->payload == NULL) {
			dt__coll_early_free(e);
			return;
		}
		memcpy(e->payload, m->payload, len);
	} else if (m->hdr.payload_len) {
		e->h.payload_len = 0;
		e->dropped = 1;
	}
	c->eq_bytes += len + m->hdr.meta_len;
	dt__list_push_back(&c->early, &e->link);
}

/* Unlink and return the first early message of seq (of command cmd, or
 * any when cmd is 0), or NULL (mu held). */
static coll_early *
early_take(dt_coll *c, uint64_t seq, unsigned cmd)
{
	for (dt_lnode *l = dt__list_first(&c->early); l;
	     l = dt__list_next(&c->early, l)) {
		coll_early *e = DT_CONTAINER_OF(l, coll_early, link);

		if (e->h.seq != seq || (cmd && e->h.cmd != cmd))
			continue;
		dt__list_remove(l);
		c->eq_bytes -=
		    (e->payload ? e->h.payload_len : 0) + e->h.meta_len;
		return e;
	}
	return NULL;
}

/* Drop early messages of finished operations (mu held). */
void
dt__coll_early_purge(dt_coll *c)
{
	dt_lnode *l, *next;

	for (l = dt__list_first(&c->early); l; l = next) {
		coll_early *e = DT_CONTAINER_OF(l, coll_early, link);

		next = dt__list_next(&c->early, l);
		if (e->h.seq > c->done_seq)
			continue;
		dt__list_remove(l);
		c->eq_bytes -=
		    (e->payload ? e->h.payload_len : 0) + e->h.meta_len;
		dt__coll_early_free(e);
	}
}

/* ---- processing messages of the posted operation (mu held) ---- */

/* A DATA message (payload in hand, or NULL if dropped) for op. */
static void
posted_data(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
            const dt__coll_sig *sig, int has_sig, const void *payload,
            uint64_t remote)
{
	void *dest;
	int reduce;
	dt_err err;

	op->progress_ns = dt__now_ns();
	if (!has_sig) {
		dt__coll_op_fail(op, DT_EPROTO, 1,
		                 "%s #%llu: message without a signature from "
		                 "rank %d",
		                 dt__coll_kind_name(op->kind),
		                 (unsigned long long)op->num, peer);
		return;
	}
	if (!dt__coll_sig_equal(sig, &op->sig)) {
		dt__coll_mismatch(c, op, peer, sig);
		return;
	}
	if (op->err)
		return;
	if (dt__coll_algo_dest(c, op, peer, h, &dest, &reduce))
		return;
	if (h->payload_len && payload == NULL && dest != DT_VAN_DISCARD) {
		dt__coll_op_fail(op, DT_EPROTO, 1,
		                 "%s #%llu: the payload from rank %d was lost",
		                 dt__coll_kind_name(op->kind),
		                 (unsigned long long)op->num, peer);
		return;
	}
	if (reduce) {
		op->io_refs++;
		pthread_mutex_unlock(&c->mu);
		err = dt__coll_algo_deliver(c, op, peer, h, payload);
		pthread_mutex_lock(&c->mu);
		op->io_refs--;
		if (err) {
			dt__coll_op_fail(
			    op, err, 1, "%s #%llu: from rank %d: %s",
			    dt__coll_kind_name(op->kind),
			    (unsigned long long)op->num, peer, dt_errmsg());
			return;
		}
	} else if (dest && dest != DT_VAN_DISCARD) {
		memcpy(dest, payload, h->payload_len);
	}
	dt__coll_algo_done(c, op, peer, h, remote);
}

static void
posted_ready(dt_coll *c, coll_op *op, int peer, const dt__coll_sig *sig,
             int has_sig)
{
	op->progress_ns = dt__now_ns();
	if (!has_sig) {
		dt__coll_op_fail(op, DT_EPROTO, 1,
		                 "%s #%llu: READY without a signature from "
		                 "rank %d",
		                 dt__coll_kind_name(op->kind),
		                 (unsigned long long)op->num, peer);
		return;
	}
	if (!dt__coll_sig_equal(sig, &op->sig)) {
		dt__coll_mismatch(c, op, peer, sig);
		return;
	}
	if (dt__coll_algo_of(op)->ready) {
		/* The algorithm keeps its own account of its READYs. */
		if (dt__coll_algo_of(op)->ready(c, op, peer))
			return;
	} else if (op->algo == DT__ALG_STREAM && op->ready_mode &&
	           peer == op->sc.to) {
		op->ready_to = 1;
		return;
	}
	dt__coll_op_fail(
	    op, DT_EPROTO, 1, "%s #%llu: unexpected READY from rank %d",
	    dt__coll_kind_name(op->kind), (unsigned long long)op->num, peer);
}

static void
posted_abort(coll_op *op, int peer, dt_err err, const char *text)
{
	err = dt__err_from_wire((uint64_t)err, DT_EPEER);
	if (text && *text)
		dt__coll_op_fail(op, err, 0, "%s", text);
	else
		dt__coll_op_fail(op, err, 0, "%s #%llu: rank %d gave up",
		                 dt__coll_kind_name(op->kind),
		                 (unsigned long long)op->num, peer);
}

/* Replay the early messages of the operation just posted (mu held). */
static void
drain_early(dt_coll *c, coll_op *op)
{
	coll_early *e;

	/* An abort explains the operation's fate better than the stray data
	 * that came with it (a rank that skipped a call would otherwise see
	 * a mismatch against the next one). */
	if ((e = early_take(c, op->seq, DT_CMD_COLL_ABORT)) != NULL) {
		posted_abort(op, e->peer, (dt_err)e->h.arg2, e->text);
		dt__coll_early_free(e);
	}
	while ((e = early_take(c, op->seq, 0)) != NULL) {
		switch (e->h.cmd) {
		case DT_CMD_COLL_DATA:
			if (e->dropped)
				dt__coll_op_fail(
				    op, DT_ENOMEM, 1,
				    "%s #%llu: a message from rank "
				    "%d was dropped (over "
				    "DT_COLL_UNEXPECTED_MAX)",
				    dt__coll_kind_name(op->kind),
				    (unsigned long long)op->num, e->peer);
			else
				posted_data(c, op, e->peer, &e->h, &e->sig,
				            e->has_sig, e->payload, e->remote);
			break;
		case DT_CMD_COLL_READY:
			posted_ready(c, op, e->peer, &e->sig, e->has_sig);
			break;
		case DT_CMD_COLL_ABORT:
			posted_abort(op, e->peer, (dt_err)e->h.arg2, e->text);
			break;
		case DT_CMD_COLL_FIN:
			dt__coll_algo_fin(c, op, e->peer);
			break;
		}
		dt__coll_early_free(e);
	}
}

/* ---- node hooks (I/O thread) ---- */

/* In an elastic job, a worker that joined sends to the members as soon as
 * it has the new membership, which a member may not have taken yet: a
 * collective message of a later membership from a worker that is no rank
 * here yet waits in the early queue, under its node id, for the change
 * (dt__coll_reform gives it its rank). Its node id, else -1 (mu held). */
static int
future_member(const dt_coll *c, dt_conn *conn, const dt_msg_hdr *h)
{
	int id = dt__conn_peer(conn);

	if (!c->elastic || id < c->base_id || id >= c->base_id + c->nworkers ||
	    id == dt__coll_peer_id(c, c->rank) ||
	    (h->seq >> DT__COLL_EPOCH_SHIFT) <= c->epoch)
		return -1;
	switch (h->cmd) {
	case DT_CMD_COLL_DATA:
	case DT_CMD_COLL_FIN:
	case DT_CMD_COLL_READY:
	case DT_CMD_COLL_ABORT:
		return id;
	}
	return -1;
}

static void *
hook_payload_dest(void *arg, dt_node *n, dt_conn *conn, const dt_msg_hdr *h,
                  const uint8_t *meta)
{
	dt_coll *c = arg;
	int peer = peer_rank(c, conn);
	coll_op *op;
	dt__coll_meta md;
	void *dest = NULL;
	int reduce;

	(void)n;
	if (peer >= 0 && h->cmd == DT_CMD_COLL_P2P) {
		pthread_mutex_lock(&c->mu);
		dest = dt__coll_p2p_dest(c, peer, h);
		pthread_mutex_unlock(&c->mu);
		return dest;
	}
	if (peer < 0 && h->cmd == DT_CMD_COLL_DATA) {
		/* (into the connection buffer, kept by on_msg) */
		pthread_mutex_lock(&c->mu);
		if (future_member(c, conn, h) < 0 ||
		    c->eq_bytes + h->payload_len > c->cfg.unexpected_max)
			dest = DT_VAN_DISCARD;
		pthread_mutex_unlock(&c->mu);
		return dest;
	}
	if (peer < 0 || h->cmd != DT_CMD_COLL_DATA)
		return DT_VAN_DISCARD;
	pthread_mutex_lock(&c->mu);
	op = c->cur;
	if (h->seq <= c->done_seq) {
		dest = DT_VAN_DISCARD;
	} else if (op == NULL || op->seq != h->seq) {
		/* Early: into the connection buffer, copied by on_msg. */
		if (c->eq_bytes + h->payload_len > c->cfg.unexpected_max)
			dest = DT_VAN_DISCARD;
	} else if (dt__coll_meta_decode(meta, h->meta_len, h->cmd, &md) ||
	           !dt__coll_sig_equal(&md.sig, &op->sig) || op->err) {
		dest = DT_VAN_DISCARD; /* on_msg reports it */
	} else if (dt__coll_algo_dest(c, op, peer, h, &dest, &reduce)) {
		dest = DT_VAN_DISCARD;
	} else if (dest && dest != DT_VAN_DISCARD) {
		op->io_refs++;
		c->ext[peer] = 1;
		op->progress_ns = dt__now_ns();
	}
	pthread_mutex_unlock(&c->mu);
	return dest;
}

/* A message from a worker that is no rank here: kept for the membership
 * it belongs to when it comes from a worker that joins, else dropped. */
static void
not_a_rank(dt_coll *c, dt_conn *conn, const dt_msg *m)
{
	int id;

	pthread_mutex_lock(&c->mu);
	id = future_member(c, conn, &m->hdr);
	if (id >= 0)
		early_add(c, -1, id, m);
	pthread_mutex_unlock(&c->mu);
	if (id < 0)
		dt__log(0, "dropping %s from %s: not a peer worker",
		        dt__cmd_name(m->hdr.cmd), dt__conn_addr(conn));
}

static void
hook_on_msg(void *arg, dt_node *n, dt_conn *conn, dt_msg *m)
{
	dt_coll *c = arg;
	const dt_msg_hdr *h = &m->hdr;
	int peer = peer_rank(c, conn);
	coll_op *op;
	dt__coll_meta md;

	(void)n;
	if (peer < 0) {
		not_a_rank(c, conn, m);
		return;
	}
	pthread_mutex_lock(&c->mu);
	op = c->cur;
	if (c->elastic && h->cmd != DT_CMD_COLL_P2P &&
	    h->cmd != DT_CMD_COLL_P2P_ACK &&
	    (h->seq >> DT__COLL_EPOCH_SHIFT) < c->epoch) {
		/* Never mixed into this membership's operations. */
		DT_LOG(1, "dropping %s from rank %d: membership %llu != %llu",
		       dt__cmd_name(h->cmd), peer,
		       (unsigned long long)(h->seq >> DT__COLL_EPOCH_SHIFT),
		       (unsigned long long)c->epoch);
		pthread_mutex_unlock(&c->mu);
		return;
	}
	switch (h->cmd) {
	case DT_CMD_COLL_DATA:
		if (m->payload_external) {
			/* Landed in place (payload_dest took a reference). */
			if (op && op->seq == h->seq && c->ext[peer]) {
				c->ext[peer] = 0;
				op->io_refs--;
				op->progress_ns = dt__now_ns();
				dt__coll_algo_done(c, op, peer, h, 0);
			}
			break;
		}
		if (h->seq <= c->done_seq)
			break;
		if (op == NULL || op->seq != h->seq) {
			early_add(c, peer, -1, m);
			break;
		}
		(void)dt__coll_meta_decode(m->meta, h->meta_len, h->cmd, &md);
		posted_data(c, op, peer, h, &md.sig, md.has_sig, m->payload,
		            md.remote);
		break;
	case DT_CMD_COLL_FIN:
		if (h->seq <= c->done_seq)
			break;
		if (op == NULL || op->seq != h->seq) {
			early_add(c, peer, -1, m);
			break;
		}
		dt__coll_algo_fin(c, op, peer);
		break;
	case DT_CMD_COLL_READY:
		if (h->seq <= c->done_seq)
			break;
		if (op == NULL || op->seq != h->seq) {
			early_add(c, peer, -1, m);
			break;
		}
		(void)dt__coll_meta_decode(m->meta, h->meta_len, h->cmd, &md);
		posted_ready(c, op, peer, &md.sig, md.has_sig);
		break;
	case DT_CMD_COLL_ABORT:
		if (h->seq <= c->done_seq)
			break;
		if (op == NULL || op->seq != h->seq) {
			early_add(c, peer, -1, m);
			break;
		}
		posted_abort(op, peer, (dt_err)h->arg2,
		             m->meta ? (const char *)m->meta : "");
		break;
	case DT_CMD_COLL_P2P:
	case DT_CMD_COLL_P2P_ACK:
		dt__coll_p2p_on_msg(c, peer, m);
		break;
	case DT_CMD_COLL_STALL_QUERY:
		if (c->nqueries < DT__COLL_MAX_QUERIES)
			c->queries[c->nqueries++] =
			    (coll_query){.peer = peer, .seq = h->seq};
		pthread_cond_signal(&c->bg_cv);
		break;
	case DT_CMD_COLL_STALL_REPLY:
		if (h->seq == c->stall_seq)
			c->stall_reply[peer] = (int64_t)h->arg0;
		break;
	default:
		dt__log(0,
		        "dropping %s from rank %d: unknown collective "
		        "command",
		        dt__cmd_name(h->cmd), peer);
	}
	dt__coll_wake(c);
	pthread_mutex_unlock(&c->mu);
}

static void
hook_on_fail(void *arg, dt_node *n, int peer_id, dt_err err)
{
	dt_coll *c = arg;
	char why[600];
	int r;

	if (c->elastic && peer_id >= 0) {
		dt__coll_elastic_lost(c, peer_id, err);
		return;
	}
	r = peer_id - c->base_id;
	if (peer_id >= 0 && (r < 0 || r >= c->size))
		return; /* a server or the scheduler: not ours */
	if (peer_id < 0) {
		char fmsg[512];

		dt__node_fatal(n, fmsg, sizeof(fmsg));
		snprintf(why, sizeof(why), "%s",
		         fmsg[0] ? fmsg : dt_strerror(err));
	} else {
		const dt_node_entry *e = dt__node_entry(n, peer_id);

		snprintf(why, sizeof(why),
		         "lost rank %d (worker at %s:%d, pid %d): %s", r,
		         e ? e->host : "?", e ? e->port : 0, e ? e->pid : 0,
		         err == DT_EPEER ? "connection closed"
		                         : dt_strerror(err));
	}
	pthread_mutex_lock(&c->mu);
	if (r >= 0 && r < c->size) {
		c->dead[r] = 1;
		if (c->ext[r] && c->cur) {
			/* The van will not finish that payload. */
			c->ext[r] = 0;
			c->cur->io_refs--;
		}
	}
	if (!c->broken) {
		c->broken = peer_id < 0 ? err : DT_EPEER;
		snprintf(c->broken_msg, sizeof(c->broken_msg), "%s", why);
	}
	/*
	 * Fail the running operation if it still needs that rank (a rank
	 * that finished the operation may leave before we do), and tell the
	 * others, who may be waiting on us rather than on it.
	 */
	if (c->cur && (peer_id < 0 || dt__coll_algo_needs(c, c->cur, r))) {
		char kind[64];
		snprintf(kind, sizeof(kind), "%s",
		         dt__coll_kind_name(c->cur->kind));
		dt__coll_op_fail(c->cur, c->broken, peer_id >= 0,
		                 "%s #%llu: %s", kind,
		                 (unsigned long long)c->cur->num, why);
	}
	dt__coll_p2p_lost(c, peer_id < 0 ? -1 : r, c->broken, why);
	dt__coll_wake(c);
	pthread_cond_broadcast(&c->done_cv);
	pthread_mutex_unlock(&c->mu);
}

/* ---- the executor ---- */

static void
send_abort_all(dt_coll *c, coll_op *op)
{
	for (int r = 0; r < c->size; r++) {
		int dead;

		if (r == c->rank)
			continue;
		pthread_mutex_lock(&c->mu);
		dead = c->dead[r];
		pthread_mutex_unlock(&c->mu);
		if (dead)
			continue;
		dt_msg_hdr h = {.cmd = DT_CMD_COLL_ABORT,
		                .seq = op->seq,
		                .arg2 = (uint32_t)op->err};
		dt__coll_send(c, r, &h, op->msg, (uint32_t)strlen(op->msg),
		              NULL, 0);
	}
}

static void
append_list(char *buf, size_t cap, const int *ranks, int n)
{
	size_t len = strlen(buf);

	for (int i = 0; i < n && len + 16 < cap; i++) {
		snprintf(buf + len, cap - len, "%s%d", i ? ", " : "", ranks[i]);
		len = strlen(buf);
	}
}

/*
 * The operation made no progress for DT_COLL_TIMEOUT: ask every rank how
 * many operations it has called and name those that have not called this
 * one (executor; fills op->msg).
 */
static void
stall_report(dt_coll *c, coll_op *op)
{
	int *missing = calloc((size_t)c->size, sizeof(int));
	int *silent = calloc((size_t)c->size, sizeof(int));
	int nm = 0, ns = 0, answered;
	uint64_t grace =
	    (uint64_t)(DT_MIN(2.0, DT_MAX(0.5, c->cfg.timeout_s / 2)) * 1e9);
	uint64_t until;
	char text[1024];
	const char *kind = dt__coll_kind_name(op->kind);

	pthread_mutex_lock(&c->mu);
	c->stall_seq = op->seq;
	for (int r = 0; r < c->size; r++)
		c->stall_reply[r] = -1;
	pthread_mutex_unlock(&c->mu);
	for (int r = 0; r < c->size; r++) {
		if (r == c->rank)
			continue;
		dt_msg_hdr h = {.cmd = DT_CMD_COLL_STALL_QUERY, .seq = op->seq};
		dt__coll_send(c, r, &h, NULL, 0, NULL, 0);
	}
	until = dt__now_ns() + grace;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		answered = 1;
		for (int r = 0; r < c->size; r++)
			if (r != c->rank && c->stall_reply[r] < 0 &&
			    !c->dead[r])
				answered = 0;
		if (answered || dt__now_ns() >= until)
			break;
		if (c->nqueries) {
			dt__coll_answer_queries(c);
			continue;
		}
		dt__coll_cv_wait_until(c, until);
	}
	for (int r = 0; r < c->size && missing && silent; r++) {
		if (r == c->rank)
			continue;
		if (c->stall_reply[r] < 0)
			silent[ns++] = r;
		else if ((uint64_t)c->stall_reply[r] < op->seq)
			missing[nm++] = r;
	}
	c->stall_seq = 0;
	pthread_mutex_unlock(&c->mu);

	snprintf(text, sizeof(text), "%s #%llu stalled for %.0f s: ", kind,
	         (unsigned long long)op->num, c->cfg.timeout_s);
	if (nm) {
		strncat(text, nm > 1 ? "ranks " : "rank ",
		        sizeof(text) - strlen(text) - 1);
		append_list(text, sizeof(text), missing, nm);
		strncat(text,
		        nm > 1 ? " have not called it" : " has not called it",
		        sizeof(text) - strlen(text) - 1);
	}
	if (ns) {
		strncat(text, nm ? "; " : "", sizeof(text) - strlen(text) - 1);
		strncat(text, ns > 1 ? "ranks " : "rank ",
		        sizeof(text) - strlen(text) - 1);
		append_list(text, sizeof(text), silent, ns);
		strncat(text, ns > 1 ? " did not answer" : " did not answer",
		        sizeof(text) - strlen(text) - 1);
	}
	if (!nm && !ns) {
		size_t len = strlen(text);
		if (op->waiting_on >= 0)
			snprintf(text + len, sizeof(text) - len,
			         "every rank has called it; still waiting for "
			         "rank %d",
			         op->waiting_on);
		else
			snprintf(text + len, sizeof(text) - len,
			         "every rank has called it");
	}
	strncat(text, " (DT_COLL_TIMEOUT)", sizeof(text) - strlen(text) - 1);
	pthread_mutex_lock(&c->mu);
	dt__coll_op_fail(op, DT_ETIMEDOUT, 1, "%s", text);
	pthread_mutex_unlock(&c->mu);
	free(missing);
	free(silent);
}

/* Wait until the I/O thread no longer touches op's buffers (mu held). */
static void
quiesce(dt_coll *c, coll_op *op)
{
	uint64_t until;
	int closed = 0;

	if (op->io_refs == 0)
		return; /* (the usual case: no clock read) */
	until = dt__now_ns() + dt__coll_timeout_ns(c);
	while (op->io_refs > 0) {
		if (dt__now_ns() >= until) {
			if (closed)
				break;
			/* A peer stopped in the middle of a payload that
			 * lands in the caller's buffer: cut it off. */
			for (int r = 0; r < c->size; r++) {
				int id = c->base_id + r;
				if (!c->ext[r])
					continue;
				dt__log(0,
				        "closing the connection to rank %d: "
				        "a payload is stuck",
				        r);
				dt__node_close_peer(c->node, id);
			}
			closed = 1;
			until = dt__now_ns() + dt__coll_timeout_ns(c);
		}
		dt__coll_cv_wait_until(
		    c, DT_MIN(until, dt__now_ns() + 100000000ull));
	}
}

/* A finished operation: its span on the timeline (the executor's
 * track) and its bytes and time in the counters. */
static void
op_record(dt_coll *c, const coll_op *op, uint64_t t0)
{
	int kind = op->kind == DT__COLL_ALLREDUCE    ? DT_EV_COLL_ALLREDUCE
	           : op->kind == DT__COLL_BROADCAST  ? DT_EV_COLL_BROADCAST
	           : op->kind == DT__COLL_ALLGATHERV ? DT_EV_COLL_ALLGATHER
	                                             : DT_EV_COLL_OTHER;
	uint64_t bytes = (uint64_t)op->nelem * op->esz, now = dt__now_ns();

	if (op->err == DT_OK && op->kind != DT__COLL_BARRIER)
		dt__obs_coll(kind, bytes, c->size, now - t0);
	dt__trace_span(kind, DT_TID_COLL, t0, op->num,
	               DT_EVF_KEY | DT_EVF_BYTES, bytes, -1);
}

/* Start op (mu held): its progress clock, and the failures it meets
 * before it runs. Returns op->err. */
static dt_err
op_begin(dt_coll *c, coll_op *op, dt_err err, uint64_t now)
{
	op->progress_ns = now;
	op->waiting_on = -1;
	c->cur = op;
	if (err)
		dt__coll_op_fail(op, err, 1, "%s #%llu: %s",
		                 dt__coll_kind_name(op->kind),
		                 (unsigned long long)op->num, dt_errmsg());
	else if (c->broken)
		dt__coll_op_fail(op, c->broken, 0, "%s #%llu: %s",
		                 dt__coll_kind_name(op->kind),
		                 (unsigned long long)op->num, c->broken_msg);
	else if (c->changing)
		dt__coll_op_fail(op, DT_EMEMBERSHIP, 0, "%s #%llu: %s",
		                 dt__coll_kind_name(op->kind),
		                 (unsigned long long)op->num, c->change_msg);
	else
		drain_early(c, op);
	return op->err;
}

/* A run that failed (err, mu held): the reason kept in op, or the stall
 * report asked for (mu released meanwhile). */
static void
op_failed(dt_coll *c, coll_op *op, dt_err err)
{
	if (err == DT_ETIMEDOUT && op->err == DT_OK) {
		pthread_mutex_unlock(&c->mu);
		stall_report(c, op);
		pthread_mutex_lock(&c->mu);
	} else if (op->err == DT_OK && c->elastic) {
		/* A failed send: in an elastic job, a member is gone and the
		 * scheduler's membership without it is on its way. */
		char why[200];

		snprintf(why, sizeof(why), "%s", dt_errmsg());
		dt__coll_elastic_change(c, "%s (membership %llu -> %llu)", why,
		                        (unsigned long long)c->epoch,
		                        (unsigned long long)c->epoch + 1);
	} else if (op->err == DT_OK) {
		/* A failed send: the peer is gone or going. */
		dt__coll_op_fail(op, err, 1, "%s #%llu: %s",
		                 dt__coll_kind_name(op->kind),
		                 (unsigned long long)op->num, dt_errmsg());
	}
}

/* The end of op (mu held): the I/O thread done with it, its handles
 * completed. */
static void
op_end(dt_coll *c, coll_op *op)
{
	quiesce(c, op);
	c->cur = NULL;
	c->done_seq = op->seq;
	dt__coll_early_purge(c);
	for (int i = 0; i < op->nhandles; i++) {
		dt_coll_handle *h = op->handles[i];
		h->err = op->err;
		if (op->err)
			snprintf(h->msg, sizeof(h->msg), "%s", op->msg);
		else
			h->msg[0] = '\0';
		h->done = 1;
	}
	pthread_cond_broadcast(&c->done_cv);
}

/*
 * Run op in this thread. A call that succeeds takes the lock twice, once
 * to start and once to end, and reads the clock twice (its start, which is
 * also the start of its progress clock, and its end for the counters);
 * a failure also logs, tells the other ranks, and may ask them for a
 * stall report.
 */
void
dt__coll_execute(dt_coll *c, coll_op *op, int free_exec)
{
	dt_err err;
	uint64_t t0 = dt__now_ns();

	err = dt__coll_algo_prepare(c, op);
	if (op->ntensors > 1)
		dt__trace_span(DT_EV_COLL_FUSION, DT_TID_COLL, t0, 0,
		               DT_EVF_BYTES, op->nelem * op->esz, -1);
	pthread_mutex_lock(&c->mu);
	err = op_begin(c, op, err, t0);
	pthread_mutex_unlock(&c->mu);

	if (err == DT_OK)
		err = dt__coll_algo_run(c, op);
	pthread_mutex_lock(&c->mu);
	if (err == DT_OK) {
		op->err = DT_OK; /* a late failure after completion is moot */
		/* (the counters before the handles complete: a caller that
		 * reads them after its wait finds its operation there) */
		op_record(c, op, t0);
	} else {
		op_failed(c, op, err);
		pthread_mutex_unlock(&c->mu);
		if (op->err && op->need_abort)
			send_abort_all(c, op);
		if (op->err)
			DT_LOG(op->err == DT_ETIMEDOUT ? 0 : 1, "%s", op->msg);
		op_record(c, op, t0);
		pthread_mutex_lock(&c->mu);
	}
	op_end(c, op);
	/* (what the algorithm holds is freed before another call may use
	 * the op again: a few free()s, no wait) */
	dt__coll_algo_release(c, op);
	if (free_exec) {
		c->exec_busy = 0;
		if (!dt__list_empty(&c->queue))
			pthread_cond_signal(&c->bg_cv);
	}
	pthread_mutex_unlock(&c->mu);
}

/* ---- set-up ---- */

const dt__app_class dt__coll_app = {
    .name = "communicator",
    .cmd_first = DT_CMD_COLL_FIRST,
    .cmd_last = DT_CMD_COLL_LAST,
};

/*
 * The host number of each rank (*out, c->size of them; the caller frees
 * it): the scheduler's numbers (dt__node_lookup_hosts). An elastic job
 * asks for its rows' entries instead, as its workers come and go (rows of
 * workers still to come stay unknown until they join, and the scheduler
 * tells every member then), and numbers their hosts here.
 */
static dt_err
ranks_hosts(dt_coll *c, uint32_t **out)
{
	dt_node *n = c->node;
	/* (an elastic job's rows: every worker it may grow to; a worker
	 * joining it has a rank, its id's, past the members' count) */
	int rows = dt__node_elastic(n)
	               ? DT_MAX(c->size, dt__node_elastic_slots(n))
	               : c->size;
	uint32_t *v = malloc(sizeof(*v) * (size_t)rows);
	dt_err err;

	if ((*out = v) == NULL)
		return dt__fail(DT_ENOMEM, "hosts of %d ranks", rows);
	if (!dt__node_elastic(n))
		return dt__node_lookup_hosts(n, c->base_id, c->size, v);
	if ((err = dt__node_lookup(n, c->base_id, dt__node_elastic_slots(n))) &&
	    err != DT_EPEER)
		return err;
	/* (its hosts serve for the local ranks alone, the hierarchy being
	 * flat: 0 for this rank's host, 1 for another, one pass) */
	const dt_node_entry *me = dt__node_entry(n, c->base_id + c->rank);

	for (int r = 0; r < rows; r++) {
		const dt_node_entry *e = dt__node_entry(n, c->base_id + r);

		v[r] = !e || !me ? DT_HOST_UNKNOWN
		                 : (uint32_t)(strcmp(e->host, me->host) != 0);
	}
	return DT_OK;
}

dt_err
dt__coll_attach(dt_coll *c)
{
	dt_node *n = c->node;
	dt__app_hooks app = {.arg = c,
	                     .on_msg = hook_on_msg,
	                     .payload_dest = hook_payload_dest,
	                     .on_fail = hook_on_fail,
	                     .on_membership = dt__coll_on_membership};
	uint32_t *hosts = NULL;
	dt_err err;

	if (dt_node_role(n) != DT_ROLE_WORKER)
		return dt__fail(DT_EINVAL,
		                "collectives run among workers; "
		                "this node is a %s",
		                dt_role_name(dt_node_role(n)));
	c->rank = dt_node_rank(n);
	c->size = dt_node_num_workers(n);
	c->base_id = 1 + dt_node_num_servers(n);
	/* The ranks' hosts (the local ranks, the hierarchical map) are asked
	 * of the scheduler once, here: their numbers alone, a few bytes per
	 * host, not every rank's entry (CMA's pids, on one host, ask for
	 * those: api.c). */
	if ((err = ranks_hosts(c, &hosts))) {
		free(hosts);
		return err;
	}
	c->local_rank = 0;
	c->local_size = 0;
	for (int r = 0; r < c->size; r++) {
		/* (c->rank < the rows ranks_hosts made: an elastic joiner's
		 * is its id's, below the job's slots) */
		if (hosts[c->rank] == DT_HOST_UNKNOWN ||
		    hosts[r] != hosts[c->rank])
			continue;
		if (r < c->rank)
			c->local_rank++;
		c->local_size++;
	}
	c->elastic = dt__node_elastic(n);
	/* By rank and by worker id: an elastic job's arrays have room for
	 * every worker it may grow to. */
	c->nworkers = c->elastic ? dt__node_elastic_slots(n) : c->size;
	c->dead = calloc((size_t)c->nworkers, 1);
	c->ext = calloc((size_t)c->nworkers, 1);
	c->stall_reply = calloc((size_t)c->nworkers, sizeof(int64_t));
	c->ids = calloc((size_t)c->nworkers, sizeof(int));
	c->rank_of = calloc((size_t)c->nworkers, sizeof(int));
	if (!c->dead || !c->ext || !c->stall_reply || !c->ids || !c->rank_of) {
		free(hosts);
		return dt__fail(DT_ENOMEM, "communicator of %d ranks", c->size);
	}
	for (int r = 0; r < c->nworkers; r++) {
		c->ids[r] = c->base_id + r;
		c->rank_of[r] = r < c->size ? r : -1;
	}
	if (c->elastic && dt__node_elastic_joiner(n)) {
		/* A worker joining the running job: until it takes the
		 * membership that admits it (dt_elastic_restore), every worker
		 * id is a rank of its own, so that what the members send in
		 * that membership before then is kept and given its new rank
		 * at the change (reform.c), whoever sends it. */
		for (int r = 0; r < c->nworkers; r++)
			c->rank_of[r] = r;
		c->size = c->nworkers;
		c->changing = 1;
		snprintf(c->change_msg, sizeof(c->change_msg),
		         "this worker joins the running job: its state comes "
		         "from the members (dt_elastic_restore)");
	}
	err = c->elastic ? DT_OK : dt__coll_hier_map(c, hosts);
	free(hosts);
	return err ? err : dt__node_attach(n, &dt__coll_app, &app);
}
