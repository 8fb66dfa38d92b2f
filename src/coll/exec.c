/*
 * exec.c - what the collective algorithms (algo_*.c) and the router
 * (comm.c) share to run an operation: sending a message to a rank, waiting
 * for the operation's progress with a deadline (answering stall queries
 * meanwhile), failing it with a reason, and grow-only buffers. It calls
 * nothing above it in the collectives: algorithms call down into it, the
 * router calls the algorithms through their ops (algo.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "coll/algo.h"
#include "coll/p2p.h"

/*
 * ThreadSanitizer records the reads of a sendmsg() payload when the call
 * returns. A collective often receives into a block it sent earlier in
 * the same operation (the ring's allgather overwrites what its
 * reduce-scatter forwarded; see algo.c), which is safe because that data
 * can only arrive after the peer has received every byte we sent - but
 * the causality runs through other processes, which TSan cannot see, and
 * a descheduled sender makes it report a race. So the payload reads of our
 * own sends are hidden from it; locks are still tracked.
 */
#if defined(__SANITIZE_THREAD__)
#define DT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DT_TSAN 1
#endif
#endif
#ifdef DT_TSAN
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#define TSAN_IGNORE_BEGIN() __tsan_ignore_thread_begin()
#define TSAN_IGNORE_END()   __tsan_ignore_thread_end()
#else
#define TSAN_IGNORE_BEGIN() ((void)0)
#define TSAN_IGNORE_END()   ((void)0)
#endif

void
dt__coll_op_fail(coll_op *op, dt_err err, int need_abort, const char *fmt, ...)
{
	va_list ap;

	if (op->err)
		return; /* the first reason wins */
	op->err = err;
	op->need_abort = need_abort;
	va_start(ap, fmt);
	vsnprintf(op->msg, sizeof(op->msg), fmt, ap);
	va_end(ap);
}

uint64_t
dt__coll_timeout_ns(const dt_coll *c)
{
	return (uint64_t)(c->cfg.timeout_s * 1e9);
}

/* Progress for the executor (mu held). */
void
dt__coll_wake(dt_coll *c)
{
	dt__gen_bump(&c->cv_gen);
	pthread_cond_broadcast(&c->cv);
}

/* Wait (mu held) for progress or until_ns. A short wait is spent reading
 * the network in this thread rather than asleep (dt__node_wait_gen). */
void
dt__coll_cv_wait_until(dt_coll *c, uint64_t until_ns)
{
	if (until_ns <= dt__now_ns())
		return;
	/* The cv runs on CLOCK_MONOTONIC, dt__now_ns's clock. */
	dt__node_wait_gen(c->node, &c->cv_gen, &c->mu, &c->cv, until_ns);
}

dt_err
dt__coll_send(dt_coll *c, int rank, dt_msg_hdr *h, const void *meta,
              uint32_t meta_len, const void *payload, size_t bytes)
{
	struct iovec iov = {(void *)payload, bytes};
	dt_err err;

	TSAN_IGNORE_BEGIN();
	err = dt__node_send(c->node, dt__coll_peer_id(c, rank), h, meta,
	                    meta_len, bytes ? &iov : NULL, bytes ? 1 : 0);
	TSAN_IGNORE_END();
	if (err)
		return dt__fail(err, "sending %s to rank %d: %s",
		                dt__cmd_name(h->cmd), rank, dt_errmsg());
	return DT_OK;
}

void
dt__coll_answer_queries(dt_coll *c)
{
	while (c->nqueries > 0) {
		coll_query q = c->queries[--c->nqueries];
		dt_msg_hdr h = {.cmd = DT_CMD_COLL_STALL_REPLY,
		                .seq = q.seq,
		                .arg0 = c->next_seq,
		                .arg1 = c->cur ? c->cur->seq : 0};

		pthread_mutex_unlock(&c->mu);
		dt__coll_send(c, q.peer, &h, NULL, 0, NULL, 0);
		pthread_mutex_lock(&c->mu);
	}
}

dt_err
dt__coll_wait(dt_coll *c, coll_op *op, int (*pred)(coll_op *, void *),
              void *arg, int waiting_on)
{
	for (;;) {
		if (pred(op, arg))
			return DT_OK;
		if (op->err)
			return dt__fail(op->err, "%s", op->msg);
		if (c->nqueries) {
			dt__coll_answer_queries(c);
			continue;
		}
		/* A rank busy in a collective still answers the
		 * point-to-point senders it owes. */
		if (dt__coll_p2p_pending_acks(c)) {
			dt__coll_p2p_flush(c);
			continue;
		}
		uint64_t now = dt__now_ns();
		uint64_t deadline = op->progress_ns + dt__coll_timeout_ns(c);
		if (now >= deadline) {
			op->waiting_on = waiting_on;
			return DT_ETIMEDOUT;
		}
		/* No spinning before sleeping: on a machine with as many
		 * ranks as cores a spinning executor takes the core its own
		 * I/O thread needs (measured: twice as slow). */
		dt__coll_cv_wait_until(c,
		                       DT_MIN(deadline, now + 1000000000ull));
	}
}

dt_err
dt__coll_send_data(dt_coll *c, coll_op *op, int to, uint64_t key, uint64_t off,
                   uint64_t n, uint32_t flags, const void *payload,
                   size_t bytes)
{
	uint8_t meta[DT__COLL_META_CMA];
	uint32_t meta_len;
	dt_msg_hdr h = {.cmd = DT_CMD_COLL_DATA,
	                .seq = op->seq,
	                .key = key,
	                .arg0 = off,
	                .arg1 = n,
	                .arg2 = flags};

	/* With DT__CF_CMA the receiver reads the bytes where they are. */
	meta_len = dt__coll_meta_encode(&op->sig, (flags & DT__CF_CMA) != 0,
	                                (uint64_t)(uintptr_t)payload, meta);
	if (flags & DT__CF_CMA) {
		payload = NULL;
		bytes = 0;
	}
	return dt__coll_send(c, to, &h, meta, meta_len, payload, bytes);
}

dt_err
dt__coll_send_fin(dt_coll *c, coll_op *op, int to)
{
	dt_msg_hdr h = {.cmd = DT_CMD_COLL_FIN, .seq = op->seq};

	return dt__coll_send(c, to, &h, NULL, 0, NULL, 0);
}

dt_err
dt__coll_send_ready(dt_coll *c, coll_op *op, int to)
{
	uint8_t meta[DT__COLL_META_CMA];
	dt_msg_hdr h = {.cmd = DT_CMD_COLL_READY, .seq = op->seq};
	uint32_t len = dt__coll_meta_encode(&op->sig, 0, 0, meta);

	return dt__coll_send(c, to, &h, meta, len, NULL, 0);
}

void
dt__coll_mismatch(dt_coll *c, coll_op *op, int peer, const dt__coll_sig *theirs)
{
	char mine[160], other[160];
	int lo = c->rank < peer ? c->rank : peer;
	const dt__coll_sig *slo = c->rank < peer ? &op->sig : theirs;
	const dt__coll_sig *shi = c->rank < peer ? theirs : &op->sig;

	dt__coll_sig_describe(slo, mine, sizeof(mine));
	dt__coll_sig_describe(shi, other, sizeof(other));
	if (strcmp(mine, other) == 0 && slo->kind == DT__COLL_ALLGATHERV)
		snprintf(other + strlen(other), sizeof(other) - strlen(other),
		         " with other per-rank counts");
	else if (strcmp(mine, other) == 0)
		snprintf(other + strlen(other), sizeof(other) - strlen(other),
		         " with another group layout");
	dt__coll_op_fail(op, DT_EMISMATCH, 1,
	                 "%s #%llu: ranks disagree: rank %d called %s but "
	                 "rank %d called %s",
	                 dt__coll_kind_name(op->kind),
	                 (unsigned long long)op->num, lo, mine,
	                 lo == c->rank ? peer : c->rank, other);
}

dt_err
dt__coll_unexpected(coll_op *op, int peer)
{
	dt__coll_op_fail(
	    op, DT_EPROTO, 1, "%s #%llu: unexpected data from rank %d",
	    dt__coll_kind_name(op->kind), (unsigned long long)op->num, peer);
	return DT_EPROTO;
}
