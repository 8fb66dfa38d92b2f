/*
 * van_send.c - sending: dt__van_send and heartbeats, the one writer per
 * connection, the send queue that holds what a peer has not taken when the
 * dispatching thread may not wait for it, draining it when epoll reports
 * room, and ending connections whose queue does not move. Corking
 * (van_cork.c) holds small frames and hands them here in one write.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "common/util.h"
#include "net/van_int.h"

/*
 * ---- sending ----
 *
 * A connection has one writer at a time: the thread that holds send_mu
 * while busy is 0, or the thread that set busy (it writes with send_mu
 * released, so others can queue behind it meanwhile). Bytes not written yet
 * wait, in this order, in the link (a layer over it, such as encryption,
 * may hold what it took and could not write yet: the link's unsent) and
 * in the connection's queue pq, frames as the van sends them.
 *
 * The thread that handles events (the I/O thread, or a caller polling in
 * dt__van_wait), and any thread of a shared loop (loop_shared.h: the
 * heartbeats of every node of the process), never waits long for a peer: it
 * writes what the socket takes within NB_BUDGET_NS (and NB_WAIT_MS without
 * progress), queues the rest (a copy) and has epoll report the socket writable;
 * the rest leaves from there (van_conn_writable). A peer that stops reading, or
 * a connection its peer has already given up, thus never keeps a node from
 * serving its other connections and answering handshakes. A queue that does not
 * move for DT_SEND_TIMEOUT ends its connection (van_sweep_stuck); one that
 * would pass QUEUE_SLACK more than the largest frame ends it at once.
 *
 * Other threads may wait: they take the writer's place (busy), write what
 * is queued, then their frame, straight from the caller's buffers, then
 * whatever was queued behind them meanwhile, each write waiting for the
 * peer up to DT_SEND_TIMEOUT.
 */
#define NB_WAIT_MS   2
#define NB_BUDGET_NS 50000000ull
#define QUEUE_SLACK  (64u << 20)
#define QUEUE_MIN    (64u << 10)

/* What c's link holds unsent (c's writer, or send_mu held with no writer
 * busy). */
static size_t
link_unsent(const dt_conn *c)
{
	return c->link.fd >= 0 && c->link.ops->unsent
	           ? c->link.ops->unsent(&c->link)
	           : 0;
}

/* Bytes waiting to be sent (send_mu held, no writer busy). */
static size_t
queued(const dt_conn *c)
{
	return c->pq.len + link_unsent(c);
}

/*
 * Bytes are about to be written on an empty queue (send_mu held, no
 * writer busy): what the link does not take waits from now on, in the
 * queue or in a layer over the link (unsent), and van_sweep_stuck's clock
 * starts here. A layer may hold bytes with the queue still empty, so
 * sendq_room's start of the clock is not enough: without this, the clock
 * was that of an older queue (or none), and the first sweep ended a
 * healthy connection whose peer was merely reading the bytes.
 */
static void
queue_starts(dt_conn *c)
{
	c->q_moved_ns = dt__now_ns();
}

static void
sendq_free(dt_sendq *q)
{
	free(q->buf);
	memset(q, 0, sizeof(*q));
}

/* Room for add more bytes at the end of q (send_mu held, c's writer). */
static dt_err
sendq_room(dt_van *v, dt_conn *c, dt_sendq *q, size_t add)
{
	if (c->pq.len + add > v->max_payload + QUEUE_SLACK)
		return dt__fail(DT_ETOOBIG,
		                "send to %s: %zu bytes already wait for a peer "
		                "that does not read",
		                c->addr, c->pq.len);
	if (c->pq.len == 0)
		c->q_moved_ns = dt__now_ns(); /* the stall clock starts */
	if (q->off + q->len + add <= q->cap)
		return DT_OK;
	if (q->off > 0) {
		memmove(q->buf, q->buf + q->off, q->len);
		q->off = 0;
	}
	if (q->len + add <= q->cap)
		return DT_OK;
	size_t cap = DT_MAX(DT_MAX(q->cap * 2, q->len + add), QUEUE_MIN);
	uint8_t *b = realloc(q->buf, cap);

	if (b == NULL)
		return dt__fail(DT_ENOMEM,
		                "send to %s: no memory to queue %zu "
		                "bytes",
		                c->addr, add);
	q->buf = b;
	q->cap = cap;
	return DT_OK;
}

/* Queue n pieces behind what waits (send_mu held). */
static dt_err
sendq_put(dt_van *v, dt_conn *c, dt_sendq *q, const struct iovec *vec, int n)
{
	size_t total = 0;
	dt_err err;

	for (int i = 0; i < n; i++)
		total += vec[i].iov_len;
	if ((err = sendq_room(v, c, q, total)))
		return err;
	for (int i = 0; i < n; i++) {
		memcpy(q->buf + q->off + q->len, vec[i].iov_base,
		       vec[i].iov_len);
		q->len += vec[i].iov_len;
	}
	return DT_OK;
}

/*
 * Write what *pcur (*pleft pieces) holds, as c's writer; *pcur and *pleft
 * follow what was written (the pieces are changed in place). Waiting
 * (nb = 0): for room until deadline. Not waiting (nb = 1): returns DT_OK
 * with *pleft > 0 once the peer has taken nothing for NB_WAIT_MS, or at
 * deadline. Each call writes at most SEND_CHUNK bytes (no cut that would
 * leave a small tail): each call's end pushes its segments out, so the
 * receiver works on a big payload steadily instead of in bursts of half
 * the window. What the link holds unsent (a layer's, see link_unsent)
 * goes too: a waiting writer returns once it is out.
 */
static dt_err
link_write(dt_van *v, dt_conn *c, struct iovec **pcur, int *pleft,
           uint64_t deadline, int nb, const char *what)
{
	struct iovec *cur = *pcur;
	int left = *pleft;
	dt_err err = DT_OK;

	while (left > 0 || link_unsent(c) > 0) {
		int iovlen = 0;
		size_t cut = 0, full = 0, rest = 0, limit;
		ssize_t w;

		for (int i = 0; i < left; i++)
			rest += cur[i].iov_len;
		limit = rest < 2 * SEND_CHUNK ? rest : SEND_CHUNK;
		while (iovlen < DT_MIN(left, 1024) && cut < limit) {
			size_t len = cur[iovlen].iov_len;

			if (cut + len > limit) {
				full = len;
				cur[iovlen].iov_len = limit - cut;
				cut = limit;
			} else {
				cut += len;
			}
			iovlen++;
		}

		if (!atomic_load(&c->open)) {
			err = dt__fail(DT_ECLOSED,
			               "send %s to %s: connection closed", what,
			               c->addr);
			break;
		}
		w = c->link.ops->sendv(&c->link, cur, iovlen);
		if (full) /* put the cut piece's length back */
			cur[iovlen - 1].iov_len = full;
		if (w < 0) {
			uint64_t now;

			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK) {
				err = dt__fail(DT_ECLOSED, "send %s to %s: %s",
				               what, c->addr, strerror(errno));
				break;
			}
			now = dt__now_ns();
			if (nb) {
				if (now >= deadline ||
				    !c->link.ops->wait_writable(&c->link,
				                                NB_WAIT_MS))
					break; /* the rest waits in the queue */
				continue;
			}
			if (now >= deadline) {
				err = dt__fail(DT_ETIMEDOUT,
				               "send %s to %s: peer has not "
				               "read for %d s",
				               what, c->addr,
				               v->send_timeout_ms / 1000);
				break;
			}
			c->link.ops->wait_writable(
			    &c->link,
			    (int)DT_MIN((deadline - now) / 1000000 + 1, 1000));
			continue;
		}
		size_t done = (size_t)w;
		while (left > 0 && done >= cur->iov_len) {
			done -= cur->iov_len;
			cur++;
			left--;
		}
		if (left > 0 && done) {
			cur->iov_base = (uint8_t *)cur->iov_base + done;
			cur->iov_len -= done;
		}
	}
	*pcur = cur;
	*pleft = left;
	return err;
}

/* Give the descriptor and the send buffers back (send_mu held, no writer
 * busy): the connection is down. */
void
van_link_release(dt_conn *c)
{
	c->link.ops->close(&c->link);
	sendq_free(&c->pq);
	c->close_deferred = 0;
}

/* epoll: report c writable too (send_mu held). The dispatching thread
 * re-arms a connection after each event under the same lock (van_loop.c:
 * rearm), so a thread that does not dispatch (a heartbeat) may ask too. */
static void
want_writable(dt_van *v, dt_conn *c)
{
	if (atomic_load(&c->want_out) || c->link.fd < 0)
		return;
	atomic_store(&c->want_out, 1);
	atomic_fetch_add(&v->queued_conns, 1);
	if (c->polled) {
		/* Room is reported as readable once armed; if it is there
		 * already, have the I/O thread look at once. */
		if (van_arm_room(c))
			van_wake_io(v);
		return;
	}
	struct epoll_event ev = {.events = CONN_EVENTS | EPOLLOUT,
	                         .data.ptr = c};
	epoll_ctl(v->epfd, EPOLL_CTL_MOD, c->link.fd, &ev);
}

void
van_unwant_writable(dt_van *v, dt_conn *c)
{
	if (atomic_exchange(&c->want_out, 0))
		atomic_fetch_sub(&v->queued_conns, 1);
}

/* Write what waits, without waiting for the peer (send_mu held, no writer
 * busy). */
static dt_err
drain_nb(dt_van *v, dt_conn *c)
{
	uint64_t deadline = dt__now_ns() + NB_BUDGET_NS;
	dt_err err = DT_OK;

	dt_sendq *q = &c->pq;
	struct iovec iov = {q->buf + q->off, q->len}, *cur = &iov;
	int left = q->len > 0;
	size_t before = queued(c);

	if (before == 0)
		return DT_OK;
	err = link_write(v, c, &cur, &left, deadline, 1, "queued frames");
	size_t rest = left ? cur->iov_len : 0;

	q->off += q->len - rest;
	q->len = rest;
	if (q->len == 0)
		q->off = 0;
	if (queued(c) < before)
		c->q_moved_ns = dt__now_ns();
	return err;
}

/* Write what waits, waiting for the peer until deadline, as the busy
 * writer (send_mu held, released meanwhile). */
static dt_err
drain_wait(dt_van *v, dt_conn *c, uint64_t deadline)
{
	dt_err err = DT_OK;

	while (err == DT_OK && queued(c) > 0) {
		dt_sendq p = c->pq;
		struct iovec ip = {p.buf + p.off, p.len}, *cp = &ip;
		int lp = p.len > 0;

		memset(&c->pq, 0, sizeof(c->pq));
		pthread_mutex_unlock(&c->send_mu);
		err = link_write(v, c, &cp, &lp, deadline, 0, "queued frames");
		pthread_mutex_lock(&c->send_mu);
		/* keep a buffer for the next queue */
		if (c->pq.buf == NULL && p.buf != NULL) {
			c->pq = (dt_sendq){p.buf, 0, 0, p.cap};
			p.buf = NULL;
		}
		free(p.buf);
		c->q_moved_ns = dt__now_ns();
	}
	return err;
}

/* The busy writer is done (send_mu held). */
static void
busy_end(dt_conn *c, dt_err err)
{
	c->busy = 0;
	if (c->close_deferred)
		van_link_release(c); /* van_conn_down came meanwhile */
	else if ((err || c->shut_after) && c->link.fd >= 0)
		c->link.ops->shutdown(&c->link);
	pthread_cond_broadcast(&c->idle_cv);
}

/* Send vec without waiting for the peer (send_mu held, dispatching). */
static dt_err
send_nb_locked(dt_van *v, dt_conn *c, struct iovec *vec, int n,
               const char *what)
{
	dt_err err;

	if (c->busy) /* the busy writer takes it along */
		return sendq_put(v, c, &c->pq, vec, n);
	if (queued(c) > 0 && (err = drain_nb(v, c)))
		return err;
	if (queued(c) == 0) {
		int left = n;

		queue_starts(c);
		err = link_write(v, c, &vec, &left, dt__now_ns() + NB_BUDGET_NS,
		                 1, what);
		if (err)
			return err;
		if (left == 0) {
			/* all taken, but maybe not all written (a layer's) */
			if (link_unsent(c) > 0)
				want_writable(v, c);
			return DT_OK;
		}
		n = left;
	}
	if ((err = sendq_put(v, c, &c->pq, vec, n)) == DT_OK)
		want_writable(v, c);
	return err;
}

/* Send vec, waiting for the peer up to DT_SEND_TIMEOUT (send_mu held,
 * released while writing). */
static dt_err
send_wait_locked(dt_van *v, dt_conn *c, struct iovec *vec, int n,
                 const char *what)
{
	uint64_t deadline =
	    dt__now_ns() + (uint64_t)v->send_timeout_ms * 1000000ull;
	dt_err err;

	while (c->busy && atomic_load(&c->open)) {
		struct timespec ts = dt__timespec_at(deadline);

		if (dt__now_ns() >= deadline)
			return dt__fail(DT_ETIMEDOUT,
			                "send %s to %s: the send before it has "
			                "not ended in %d s",
			                what, c->addr,
			                v->send_timeout_ms / 1000);
		pthread_cond_timedwait(&c->idle_cv, &c->send_mu, &ts);
	}
	if (!atomic_load(&c->open) || c->link.fd < 0 || c->shut_after)
		return dt__fail(DT_ECLOSED, "send %s to %s: connection closed",
		                what, c->addr);
	c->busy = 1;
	err = drain_wait(v, c, deadline); /* what was there first */
	if (err == DT_OK) {
		int left = n;

		pthread_mutex_unlock(&c->send_mu);
		err = link_write(v, c, &vec, &left, deadline, 0, what);
		pthread_mutex_lock(&c->send_mu);
	}
	if (err == DT_OK)
		err = drain_wait(v, c, deadline); /* queued behind us */
	busy_end(c, err);
	return err;
}

/* Send vec on c as this thread may (send_mu held; c open). A failure ends
 * the connection: the stream may be cut inside a frame. */
dt_err
van_send_locked(dt_van *v, dt_conn *c, struct iovec *vec, int n,
                const char *what)
{
	dt_err err;

	/* (a shared loop's thread serves every node of the process: it
	 * never waits for one peer, whichever van it works for) */
	if (van_tl_dispatch != v && !dt__loop_thread())
		return send_wait_locked(v, c, vec, n, what); /* it ends c */
	err = send_nb_locked(v, c, vec, n, what);
	if (err && c->link.fd >= 0)
		c->link.ops->shutdown(&c->link);
	return err;
}

/* The corked frames' buffer, taken out of c while they are written (a
 * busy writer releases send_mu, and others may cork meanwhile). */
uint8_t *
van_obuf_take(dt_conn *c, size_t *len)
{
	uint8_t *b = c->obuf;

	*len = c->olen;
	c->obuf = NULL;
	c->olen = c->ocap = 0;
	return b;
}

void
van_obuf_put_back(dt_conn *c, uint8_t *b)
{
	if (c->obuf == NULL && b != NULL) {
		c->obuf = b;
		c->ocap = CORK_BUF;
	} else {
		free(b);
	}
}

/* Write the whole queue of a connection epoll says is writable
 * (dispatching). */
void
van_conn_writable(dt_van *v, dt_conn *c)
{
	pthread_mutex_lock(&c->send_mu);
	if (atomic_load(&c->open) && c->link.fd >= 0) {
		if (!c->busy && queued(c) > 0 && drain_nb(v, c) != DT_OK) {
			dt__log(0, "%s", dt_errmsg());
			c->link.ops->shutdown(&c->link);
		}
		if (c->busy || queued(c) == 0) {
			/* empty, or the busy writer takes the rest along */
			van_unwant_writable(v, c);
			if (c->shut_after && !c->busy)
				c->link.ops->shutdown(&c->link);
		}
	}
	pthread_mutex_unlock(&c->send_mu);
}

/* End the connections whose queue has not moved for DT_SEND_TIMEOUT
 * (dispatching); looked at a few times a second while any has a queue. */
void
van_sweep_stuck(dt_van *v)
{
	dt_conn *stuck[16];
	size_t bytes[16];
	int n = 0;
	uint64_t now = dt__now_ns();
	uint64_t limit = (uint64_t)v->send_timeout_ms * 1000000ull;

	if (atomic_load(&v->queued_conns) == 0 ||
	    now - v->stuck_swept_ns < SWEEP_NS)
		return;
	v->stuck_swept_ns = now;
	pthread_mutex_lock(&v->mu);
	for (dt_conn *c = v->conns; c && n < 16; c = c->next) {
		if (!atomic_load(&c->want_out) || !atomic_load(&c->open))
			continue;
		pthread_mutex_lock(&c->send_mu);
		/* (a queue may have started after now was read: a heartbeat
		 * queues from its own thread) */
		if (!c->busy && queued(c) > 0 && now > c->q_moved_ns &&
		    now - c->q_moved_ns > limit) {
			bytes[n] = queued(c);
			stuck[n++] = c;
		}
		pthread_mutex_unlock(&c->send_mu);
	}
	pthread_mutex_unlock(&v->mu);
	for (int i = 0; i < n; i++) {
		char why[160];

		snprintf(
		    why, sizeof(why),
		    "peer has not read for %d s (%zu bytes wait to be sent)",
		    v->send_timeout_ms / 1000, bytes[i]);
		if (atomic_load(&stuck[i]->open))
			van_conn_down(v, stuck[i], DT_ETIMEDOUT, why);
	}
}

/* Arm c's polled link for room (want_writable): under send_mu, no busy
 * writer (the link's send side is the writer's). 1 if room is there. */
int
van_arm_room(dt_conn *c)
{
	return !c->busy && c->link.fd >= 0 && c->link.ops->arm(&c->link, 1);
}

void
dt__van_set_cut(dt_van *v, unsigned every)
{
	atomic_store(&v->cut_every, every);
}

/* DT_CUT_EVERY: keep of vec[0..n) (the frames held, then this one) only
 * the frames held, this one's header, meta and about half its payload
 * (ending inside a float); returns the pieces kept. */
static int
cut_frame(const dt_conn *c, const dt_msg_hdr *h, struct iovec *vec, int n,
          uint64_t held)
{
	uint64_t half = (h->payload_len / 2 & ~(uint64_t)3) + 2;
	uint64_t want = held + DT_HDR_SIZE + h->meta_len + half;
	int m = 0;

	for (uint64_t sum = 0; m < n && sum < want; m++) {
		if (sum + vec[m].iov_len > want)
			vec[m].iov_len = (size_t)(want - sum);
		sum += vec[m].iov_len;
	}
	dt__log(1,
	        "DT_CUT_EVERY: cutting %s to %s after %llu of its %llu "
	        "payload bytes",
	        dt__cmd_name(h->cmd), c->addr, (unsigned long long)half,
	        (unsigned long long)h->payload_len);
	return m;
}

dt_err
dt__van_send(dt_van *v, dt_conn *c, dt_msg_hdr *h, const void *meta,
             uint32_t meta_len, const struct iovec *iov, int iovcnt)
{
	struct iovec local[IOV_BATCH + 3];
	struct iovec *vec = local;
	uint8_t hb[DT_HDR_SIZE];
	uint64_t total = 0;
	int n = 0;
	dt_err err = DT_OK;

	h->meta_len = meta_len;
	h->payload_len = 0;
	for (int i = 0; i < iovcnt; i++)
		h->payload_len += iov[i].iov_len;
	if (h->payload_len > v->max_payload)
		return dt__fail(DT_ETOOBIG,
		                "%s of %llu bytes exceeds the message limit "
		                "%llu (DT_MAX_MESSAGE)",
		                dt__cmd_name(h->cmd),
		                (unsigned long long)h->payload_len,
		                (unsigned long long)v->max_payload);
	if (iovcnt > IOV_BATCH) {
		vec = malloc(sizeof(*vec) * (size_t)(iovcnt + 3));
		if (vec == NULL)
			return dt__fail(DT_ENOMEM, "send vector");
	}
	vec[n++] = (struct iovec){NULL, 0}; /* frames held before this one */
	dt__hdr_encode(h, hb);
	vec[n++] = (struct iovec){hb, DT_HDR_SIZE};
	if (meta_len)
		vec[n++] = (struct iovec){(void *)meta, meta_len};
	for (int i = 0; i < iovcnt; i++)
		if (iov[i].iov_len)
			vec[n++] = iov[i];
	total = DT_HDR_SIZE + meta_len + h->payload_len;

	if (dt__verbose >= 2)
		dt__log(2, "send %s to node %d seq=%llu key=%llu len=%llu",
		        dt__cmd_name(h->cmd), (int)h->recver,
		        (unsigned long long)h->seq, (unsigned long long)h->key,
		        (unsigned long long)h->payload_len);

	pthread_mutex_lock(&c->send_mu);
	if (!atomic_load(&c->open) || c->link.fd < 0 || c->shut_after) {
		err = dt__fail(DT_ECLOSED, "send %s to %s: connection closed",
		               dt__cmd_name(h->cmd), c->addr);
	} else if (van_hold_locked(v, c, vec + 1, n - 1, total)) {
		total = 0; /* counted when flushed */
	} else {
		unsigned every = atomic_load(&v->cut_every);
		size_t held;
		uint8_t *b = van_obuf_take(c, &held);
		int cut = every && h->payload_len >= CUT_MIN &&
		          atomic_fetch_add(&v->cut_n, 1) % every == every - 1;

		vec[0] = (struct iovec){b, held};
		if (cut)
			n = cut_frame(c, h, vec, n, held);
		err = van_send_locked(v, c, held ? vec : vec + 1,
		                      held ? n : n - 1, dt__cmd_name(h->cmd));
		van_obuf_put_back(c, b);
		total += held;
		if (cut && err == DT_OK) {
			/* nothing more after the cut: the connection ends
			 * when what waits is written */
			c->shut_after = 1;
			if (!c->busy && queued(c) == 0 && c->link.fd >= 0)
				c->link.ops->shutdown(&c->link);
			err = dt__fail(DT_ECLOSED,
			               "DT_CUT_EVERY: %s to %s cut inside its "
			               "payload",
			               dt__cmd_name(h->cmd), c->addr);
		}
	}
	pthread_mutex_unlock(&c->send_mu);
	if (err == DT_OK)
		atomic_fetch_add(&v->sent, total);
	if (vec != local)
		free(vec);
	return err;
}

dt_err
dt__van_beat(dt_van *v, dt_conn *c, dt_msg_hdr *h, int *sent)
{
	uint8_t hb[DT_HDR_SIZE];
	struct iovec iov = {hb, DT_HDR_SIZE}, *cur = &iov;
	int left = 1;
	dt_err err = DT_OK;

	*sent = 0;
	h->meta_len = 0;
	h->payload_len = 0;
	dt__hdr_encode(h, hb);
	if (pthread_mutex_trylock(&c->send_mu) != 0)
		return DT_OK; /* a send is under way: it speaks for us */
	if (!atomic_load(&c->open) || c->link.fd < 0 || c->shut_after) {
		err = dt__fail(DT_ECLOSED, "send %s to %s: connection closed",
		               dt__cmd_name(h->cmd), c->addr);
	} else if (!c->busy && queued(c) == 0 && c->olen == 0 &&
	           c->link.ops->wait_writable(&c->link, 0)) {
		/*
		 * Room, but maybe for less than the frame: a shared-memory
		 * ring says so for one free byte, and an encrypted link's
		 * record is longer than the header. The link takes what it
		 * can at once (no deadline: this thread never waits for a
		 * peer); what it did not take, and what a layer over it holds
		 * (unsent), wait as any queued bytes for room that epoll
		 * reports (van_conn_writable). Waiting here instead, and
		 * ending the connection when a busy peer had not read within
		 * a moment, cut healthy connections inside a frame.
		 */
		queue_starts(c);
		err = link_write(v, c, &cur, &left, 0, 1, dt__cmd_name(h->cmd));
		if (err == DT_OK && left > 0)
			err = sendq_put(v, c, &c->pq, cur, left);
		if (err == DT_OK && queued(c) > 0)
			want_writable(v, c);
		if (err && c->link.fd >= 0)
			c->link.ops->shutdown(&c->link);
		if (err == DT_OK) {
			*sent = 1;
			atomic_fetch_add(&v->sent, DT_HDR_SIZE);
		}
	}
	pthread_mutex_unlock(&c->send_mu);
	return err;
}

void
dt__van_close(dt_van *v, dt_conn *c)
{
	/* The I/O thread sees the shutdown as EOF, reports it and closes.
	 * What waits to be sent, and the frames held (corked) for c, leave
	 * first as far as the peer takes them at once: a refusal sent just
	 * before the close reaches the peer, but a close never waits for a
	 * peer that does not read. */
	pthread_mutex_lock(&c->send_mu);
	if (c->link.fd >= 0) {
		if (!c->busy && atomic_load(&c->open)) {
			struct iovec iov = {c->obuf, c->olen};

			if (c->olen > 0 &&
			    sendq_put(v, c, &c->pq, &iov, 1) == DT_OK)
				atomic_fetch_add(&v->sent, c->olen);
			c->olen = 0;
			if (queued(c) > 0)
				(void)drain_nb(v, c);
		}
		c->link.ops->shutdown(&c->link);
	}
	pthread_mutex_unlock(&c->send_mu);
}
