/*
 * van_accept.c - how connections come in: the listeners (TCP, and the one
 * for peers on this host), accepting, the guard against strangers who are
 * never introduced, and the handshake thread ("dt-hs") that holds each
 * TCP connection until it has authenticated (auth.h), evicting the oldest
 * pending ones when strangers crowd in. A connection that passed is handed
 * to the I/O thread (van_loop.c); the same-host listener's are accepted by
 * the I/O thread itself and authenticate there (van_recv.c). With
 * DT_SHARED_LOOP the same work runs in rounds on the process's shared
 * handshake loop (van_hs_round, van_hs_tick) instead of a thread per van.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "net/seal.h"
#include "net/van_int.h"

dt_err
dt__van_listen(dt_van *v, const char *host, int port, int fd, int *bound_port)
{
	dt_err err =
	    van_host_tp(v)->listen(host, port, fd, &v->lis, bound_port);

	if (err)
		return err;
	van_size_queues(v);
	/* The handshake thread accepts (see "the handshake thread"). */
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &v->lis};
	if (epoll_ctl(v->hs_epfd, EPOLL_CTL_ADD, v->lis.fd, &ev) < 0)
		return dt__fail(DT_ESYS, "epoll_ctl: %s", strerror(errno));
	return DT_OK;
}

#define ACCEPT_PAUSE_NS 100000000ull /* 100 ms */

/* accept failed for want of resources: stop watching lis (in epoll epfd)
 * until *until, and say so once a second at most (*logged belongs to the
 * calling thread). Its readiness would otherwise spin the thread. */
static void
accept_pause(int epfd, dt_link *lis, atomic_uint_fast64_t *until,
             uint64_t *logged, int err)
{
	uint64_t now = dt__now_ns();

	epoll_ctl(epfd, EPOLL_CTL_DEL, lis->fd, NULL);
	atomic_store(until, now + ACCEPT_PAUSE_NS);
	if (van_once_a_second(logged, now))
		dt__log(0, "accept: %s; not accepting for %llu ms",
		        strerror(err),
		        (unsigned long long)(ACCEPT_PAUSE_NS / 1000000));
}

/* Watch lis again once its pause is over (the pausing thread). */
void
van_accept_resume(int epfd, dt_link *lis, atomic_uint_fast64_t *until)
{
	uint64_t at = atomic_load(until);

	if (at == 0 || dt__now_ns() < at)
		return;
	atomic_store(until, 0);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = lis};
	epoll_ctl(epfd, EPOLL_CTL_ADD, lis->fd, &ev);
}

/* Close the connections that were not introduced in time (dispatch_mu
 * held; a connection whose bytes this node has not read yet gets twice
 * the time); at most every 100 ms, and only while there are any. */
void
van_sweep_unvouched(dt_van *v)
{
	uint64_t now;
	int waiting;

	if (atomic_load(&v->unvouched) == 0 ||
	    (now = dt__now_ns()) - v->swept_ns < 100000000ull)
		return;
	v->swept_ns = now;
	pthread_mutex_lock(&v->mu);
	for (dt_conn *c = v->uv_head; c; c = c->uv_next) {
		if (atomic_load(&c->vouched) || !atomic_load(&c->open) ||
		    now - c->born_ns < v->vouch_ns)
			continue;
		/* Bytes it sent wait unread: this node, not the peer, is
		 * late (a job's members all dial at once, and a busy node
		 * reads their HELLOs late). It gets as long again. */
		if (now - c->born_ns < 2 * v->vouch_ns &&
		    (c->polled ? c->link.ops->pending(&c->link)
		               : ioctl(c->link.fd, FIONREAD, &waiting) == 0 &&
		                     waiting > 0))
			continue;
		dt__log(0, "dropping %s: not introduced within %.1f s", c->addr,
		        (double)v->vouch_ns / 1e9);
		dt__van_close(v, c);
	}
	pthread_mutex_unlock(&v->mu);
}

/*
 * Give c, accepted and (with authentication on) authenticated, to the I/O
 * thread, where the owner's hooks see it; under the guard it counts as not
 * introduced until the owner vouches for it. Those are members (they hold
 * the secret) or, without authentication, anyone: over the cap they are
 * refused, the newcomer first. The caller no longer holds c.
 */
static void
hand_over(dt_van *v, dt_conn *c)
{
	if (c->stage == NULL && (c->stage = dt__malloc(STAGE_MIN)) == NULL) {
		dt__log(0, "refusing %s: out of memory", c->addr);
		van_conn_free(c);
		return;
	}
	c->stage_cap = STAGE_MIN;
	if (v->vouch_ns) {
		if (atomic_load(&v->unvouched) >= v->max_unvouched) {
			if (van_once_a_second(&v->hs_logged_ns, dt__now_ns()))
				dt__log(0,
				        "refusing connections (from %s and "
				        "maybe others): %d are not introduced "
				        "yet",
				        c->addr, v->max_unvouched);
			van_conn_free(c);
			return;
		}
		van_unvouched_add(v, c);
	}
	atomic_store(&c->heard_ns, dt__now_ns());
	if (van_conn_add(v, c) != DT_OK)
		dt__log(0, "cannot watch %s: %s", c->addr, dt_errmsg());
}

static void hs_take(dt_van *v, const dt_link *link, const char *addr);
static void hs_drop(dt_van *v, dt_conn *c, const char *reason);
static void hs_advance(dt_van *v, dt_conn *c);

/* Take every waiting connection of lis: the TCP listener's go to the
 * handshake thread's pending list (the caller is that thread), the
 * same-host listener's to the I/O thread (the caller, dispatch_mu held). */
void
van_accept_all(dt_van *v, dt_link *lis)
{
	int hs = lis == &v->lis;

	/* (the handshake thread takes 64 at a time, then reads what came on
	 * those it holds: a flood's backlog does not push a node's
	 * connection out before its first bytes are read) */
	for (int taken = 0; !hs || taken < 64; taken++) {
		char addr[64];
		dt_link link;
		dt_conn *c;
		int rc = lis->ops->accept(lis, &link, addr, sizeof(addr));

		if (rc < 0 && (errno == EMFILE || errno == ENFILE ||
		               errno == ENOBUFS || errno == ENOMEM)) {
			if (hs)
				accept_pause(v->hs_epfd, lis,
				             &v->hs_paused_until,
				             &v->hs_pause_logged_ns, errno);
			else
				accept_pause(v->epfd, lis,
				             &v->accept_paused_until,
				             &v->accept_logged_ns, errno);
			return;
		}
		if (rc < 0)
			dt__log(0, "accept: %s", strerror(errno));
		if (rc <= 0)
			return;
		if (hs) {
			hs_take(v, &link, addr);
			continue;
		}
		if (v->vouch_ns &&
		    atomic_load(&v->unvouched) >= v->max_unvouched) {
			/* Too many strangers at once: the newest waits for
			 * no one. */
			if (van_once_a_second(&v->refuse_logged_ns,
			                      dt__now_ns()))
				dt__log(0,
				        "refusing connections (from %s and "
				        "maybe others): %d are not introduced "
				        "yet",
				        addr, v->max_unvouched);
			link.ops->close(&link);
			continue;
		}
		c = van_conn_new(v, &link, 1);
		if (c == NULL) {
			dt__log(0, "refusing a connection: out of memory");
			link.ops->close(&link);
			continue;
		}
		snprintf(c->addr, sizeof(c->addr), "%s", addr);
		if (v->auth)
			c->auth = AUTH_HELLO;
		if (v->vouch_ns)
			van_unvouched_add(v, c);
		DT_LOG(2, "accepted a connection from %s", c->addr);
		if (van_conn_add(v, c) != DT_OK)
			dt__log(0, "cannot watch %s: %s", c->addr, dt_errmsg());
	}
}

/* Write a handshake message: small, and the first bytes on a new link, so
 * it fits in the socket's buffer at once unless the peer is broken. */
dt_err
van_send_small(dt_link *l, const uint8_t *buf, size_t len, uint64_t deadline)
{
	size_t done = 0;

	while (done < len) {
		struct iovec iov = {(void *)(buf + done), len - done};
		ssize_t w = l->ops->sendv(l, &iov, 1);

		if (w > 0) {
			done += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
		    dt__now_ns() < deadline) {
			l->ops->wait_writable(l, 10);
			continue;
		}
		return dt__fail(DT_ECLOSED, "handshake: cannot send: %s",
		                w < 0 ? strerror(errno) : "no progress");
	}
	return DT_OK;
}

/*
 * An accepted connection before it has authenticated: read the HELLO, then
 * the PROOF, each into the fixed buffer and no further (what follows them
 * stays in the kernel until then). Returns HS_MORE to go on reading,
 * HS_WAIT when nothing more is there now, HS_DONE once the peer has proved
 * it holds the key, HS_FAIL with *err (and the reason in dt_errmsg) when
 * the connection is to go. The thread that owns c's receive side calls it.
 */
int
van_handshake_read(dt_van *v, dt_conn *c, dt_err *err)
{
	size_t need =
	    c->auth == AUTH_HELLO ? DT_AUTH_HELLO_LEN : DT_AUTH_PROOF_LEN;
	ssize_t n =
	    c->link.ops->recv(&c->link, c->hsbuf + c->hs_got, need - c->hs_got);
	dt_crypt *tx, *rx;

	if (n == 0) {
		*err = dt__fail(DT_EAUTH,
		                "closed during the handshake (the peer may not "
		                "hold this job's secret)");
		return HS_FAIL;
	}
	if (n < 0) {
		if (errno == EINTR)
			return HS_MORE;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return HS_WAIT;
		*err = dt__fail(DT_ECLOSED, "%s", strerror(errno));
		return HS_FAIL;
	}
	c->hs_got += (size_t)n;
	if (c->hs_got < need)
		return HS_MORE;
	c->hs_got = 0;
	if (c->auth == AUTH_HELLO) {
		uint8_t out[DT_AUTH_CHALLENGE_LEN];

		*err = dt__auth_on_hello(v->auth, &c->hs, c->hsbuf, out);
		if (*err == DT_OK) {
			pthread_mutex_lock(&c->send_mu);
			*err =
			    c->link.fd < 0
			        ? dt__fail(DT_ECLOSED, "closed")
			        : van_send_small(&c->link, out, sizeof(out),
			                         dt__now_ns() + 1000000000ull);
			pthread_mutex_unlock(&c->send_mu);
		}
		if (*err)
			return HS_FAIL;
		c->auth = AUTH_PROOF;
		return HS_MORE;
	}
	if ((*err = dt__auth_on_proof(v->auth, &c->hs, c->hsbuf, &tx, &rx)))
		return HS_FAIL;
	if (tx != NULL) {
		/* Encrypted from here on: the records are a layer over the
		 * link (seal.c), under the send lock as senders see the link.
		 */
		pthread_mutex_lock(&c->send_mu);
		*err = dt__seal_wrap(&c->link, tx, rx);
		pthread_mutex_unlock(&c->send_mu);
		if (*err) {
			dt__crypt_free(tx);
			dt__crypt_free(rx);
			return HS_FAIL;
		}
	}
	c->auth = AUTH_DONE;
	DT_LOG(2, "%s authenticated%s", c->addr, rx ? " (encrypted)" : "");
	return HS_DONE;
}

/*
 * ---- the handshake thread ----
 *
 * Anyone who can reach the TCP port can open connections and start
 * handshakes, as fast as they like and without the secret. All of that is
 * this thread's: it accepts, keeps each connection that has not finished
 * its handshake on a list, oldest first, reads its HELLO and PROOF and does
 * the key work, and hands a connection that passed to the I/O thread
 * (hand_over). The I/O thread thus only ever sees members, and a flood of
 * handshakes costs the job the processor time of this thread, not the
 * latency of its messages. The thread sleeps in epoll_wait at a low
 * priority (nice 10 above the process's own).
 *
 * At most DT_MAX_PENDING_CONNS connections wait for their handshake: when
 * one more comes, the oldest that has sent nothing goes, else the oldest
 * (never the newcomer), so a stranger who holds many silent connections
 * open cannot keep a real node out: a real node sends its HELLO at once,
 * which takes it out of the silent ones' way, and it is done long before
 * it would be the oldest. A connection that has not finished within
 * DT_HANDSHAKE_TIMEOUT goes too.
 */

/* The pending lists: connections that have sent nothing yet, and those
 * that have (a real node sends its HELLO at once). One more than the cap
 * pushes out the oldest silent one, else the oldest of the others. */
enum { HS_SILENT, HS_TALKING };

static void
hs_append(dt_van *v, dt_conn *c, int list)
{
	struct hs_queue *q = &v->hs_q[list];

	c->hs_list = list;
	c->hs_next = NULL;
	c->hs_prev = q->tail;
	if (q->tail)
		q->tail->hs_next = c;
	else
		q->head = c;
	q->tail = c;
}

static void
hs_remove(dt_van *v, dt_conn *c)
{
	struct hs_queue *q = &v->hs_q[c->hs_list];

	if (c->hs_prev)
		c->hs_prev->hs_next = c->hs_next;
	else
		q->head = c->hs_next;
	if (c->hs_next)
		c->hs_next->hs_prev = c->hs_prev;
	else
		q->tail = c->hs_prev;
	c->hs_prev = c->hs_next = NULL;
}

/* Take c off the handshake thread's lists and, if it is watched there,
 * out of its epoll (a registration left behind would be called at every
 * wake-up of the socket for the connection's whole life). */
static void
hs_unlink(dt_van *v, dt_conn *c)
{
	hs_remove(v, c);
	v->hs_count--;
	if (c->hs_watched)
		epoll_ctl(v->hs_epfd, EPOLL_CTL_DEL, c->link.fd, NULL);
	c->hs_watched = 0;
}

/* Watch pending c for its next bytes (once watched, it stays so until
 * hs_unlink). 0, or -1 with errno. */
static int
hs_watch(dt_van *v, dt_conn *c)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};

	if (c->hs_watched)
		return 0;
	if (epoll_ctl(v->hs_epfd, EPOLL_CTL_ADD, c->link.fd, &ev) < 0)
		return -1;
	c->hs_watched = 1;
	return 0;
}

/* Give up a pending connection: closed now, freed at the end of the round
 * of events (a later event of the round may still name it). The owner
 * never saw it, so nobody else holds it. */
static void
hs_drop(dt_van *v, dt_conn *c, const char *reason)
{
	if (reason && van_once_a_second(&v->hs_logged_ns, dt__now_ns()))
		dt__log(0,
		        "refusing a connection from %s (and maybe others "
		        "since): %s",
		        c->addr, reason);
	hs_unlink(v, c);
	atomic_store(&c->open, 0);
	c->link.ops->close(&c->link);
	c->next = v->hs_dead;
	v->hs_dead = c;
}

/* A connection accepted on the TCP listener. */
static void
hs_take(dt_van *v, const dt_link *link, const char *addr)
{
	dt_conn *c = van_conn_new(v, link, 0);
	dt_link l = *link;

	if (c == NULL) {
		dt__log(0, "refusing a connection: out of memory");
		l.ops->close(&l);
		return;
	}
	snprintf(c->addr, sizeof(c->addr), "%s", addr);
	DT_LOG(2, "accepted a connection from %s", c->addr);
	if (v->auth == NULL) { /* DTRAIN_AUTH=none: nothing to wait for */
		hand_over(v, c);
		return;
	}
	if (v->vouch_ns && v->hs_count >= v->max_unvouched) {
		/* The oldest gives way to the newcomer (see above). */
		dt_conn *old = v->hs_q[HS_SILENT].head
		                   ? v->hs_q[HS_SILENT].head
		                   : v->hs_q[HS_TALKING].head;

		if (van_once_a_second(&v->hs_evict_logged_ns, dt__now_ns()))
			dt__log(0,
			        "%d connections wait for their handshake: "
			        "closing the oldest ones, from %s (and maybe "
			        "others since)",
			        v->hs_count, old->addr);
		hs_drop(v, old, NULL);
	}
	c->auth = AUTH_HELLO;
	hs_append(v, c, HS_SILENT);
	v->hs_count++;
	/* A node sends its HELLO as soon as it has connected: while a join
	 * keeps this thread busy it is there by the time the connection is
	 * accepted, and is answered now rather than after another epoll_wait
	 * (a silent stranger costs one read more). */
	hs_advance(v, c);
}

/*
 * Go on with pending c's handshake as far as its bytes allow, then watch
 * it for the next ones. Once the challenge is sent, its answer is a round
 * trip away: the thread waits for it without reading again. A connection
 * that sends its first bytes leaves the silent list.
 */
static void
hs_advance(dt_van *v, dt_conn *c)
{
	dt_err err;
	int r;

	do {
		enum auth_state was = c->auth;

		r = van_handshake_read(v, c, &err);
		if (r == HS_MORE && was == AUTH_HELLO && c->auth == AUTH_PROOF)
			r = HS_WAIT; /* (the challenge went out) */
	} while (r == HS_MORE);
	if (r == HS_DONE) {
		hs_unlink(v, c);
		hand_over(v, c);
		return;
	}
	if (r != HS_WAIT) {
		hs_drop(v, c, dt_errmsg());
		return;
	}
	if (c->hs_list == HS_SILENT && (c->auth != AUTH_HELLO || c->hs_got)) {
		hs_remove(v, c);
		hs_append(v, c, HS_TALKING);
	}
	if (hs_watch(v, c) < 0)
		hs_drop(v, c, strerror(errno));
}

/* A pending connection is readable: go on with its handshake. */
static void
hs_readable(dt_van *v, dt_conn *c)
{
	if (c->hs_list == HS_SILENT) { /* it speaks (or hangs up) */
		hs_remove(v, c);
		hs_append(v, c, HS_TALKING);
	}
	hs_advance(v, c);
}

/* How long a connection may take over its handshake. */
static uint64_t
hs_limit_ns(const dt_van *v)
{
	return v->vouch_ns ? v->vouch_ns : v->handshake_ns;
}

/* The reason given for a connection that did not finish its handshake in
 * time, formatted into why once (it is empty until then). */
static const char *
expired_why(char *why, size_t n, uint64_t limit)
{
	if (why[0] == '\0')
		snprintf(why, n,
		         "no handshake within %.1f s (DT_HANDSHAKE_TIMEOUT)",
		         (double)limit / 1e9);
	return why;
}

/* Close the pending connections whose time is up; returns the
 * milliseconds until the next look, -1 if none waits. The silent list is
 * in the order of age; the other, in the order the connections spoke, is
 * looked through every 100 ms. */
static int
hs_expire(dt_van *v)
{
	uint64_t now = dt__now_ns(), limit = hs_limit_ns(v);
	char why[96] = "";
	dt_conn *c, *next;
	int tmo = -1;

	/* The reason is formatted only when a connection is dropped: this
	 * runs at every wake-up of the handshake thread, and under a flood of
	 * strangers formatting a double each time was a measurable share of
	 * the thread's work. */
	while ((c = v->hs_q[HS_SILENT].head) && now - c->born_ns >= limit)
		hs_drop(v, c, expired_why(why, sizeof(why), limit));
	if ((c = v->hs_q[HS_SILENT].head))
		tmo = (int)((c->born_ns + limit - now) / 1000000) + 1;
	if (v->hs_q[HS_TALKING].head == NULL)
		return tmo;
	if (now - v->hs_scanned_ns >= 100000000ull) {
		v->hs_scanned_ns = now;
		for (c = v->hs_q[HS_TALKING].head; c; c = next) {
			next = c->hs_next;
			if (now - c->born_ns >= limit)
				hs_drop(v, c,
				        expired_why(why, sizeof(why), limit));
		}
	}
	return tmo < 0 || tmo > 100 ? 100 : tmo;
}

static void
hs_free_dead(dt_van *v)
{
	while (v->hs_dead) {
		dt_conn *c = v->hs_dead;

		v->hs_dead = c->next;
		van_conn_free(c);
	}
}

/*
 * One round of the handshake thread's work: the expiries, then the events
 * of hs_epfd, waiting for them up to wait (1) or not at all (0: a round on
 * the shared handshake loop, which waited for them itself). 0 once
 * epoll_wait failed for good.
 */
static int
hs_round(dt_van *v, int wait)
{
	struct epoll_event evs[64];
	uint64_t until = atomic_load(&v->hs_paused_until), now;
	int tmo = hs_expire(v), n;

	hs_free_dead(v);
	if (until && (now = dt__now_ns()) < until) {
		int p = (int)((until - now) / 1000000) + 1;

		tmo = tmo < 0 || p < tmo ? p : tmo;
	} else if (until) {
		van_accept_resume(v->hs_epfd, &v->lis, &v->hs_paused_until);
	}
	n = epoll_wait(v->hs_epfd, evs, 64, wait ? tmo : 0);
	if (n < 0) {
		if (errno == EINTR)
			return 1;
		dt__log(0, "epoll_wait (handshakes): %s", strerror(errno));
		return 0;
	}
	for (int i = 0; i < n; i++) {
		void *p = evs[i].data.ptr;

		if (p == NULL)
			continue; /* hs_evfd: the van stops */
		if (p == &v->lis) {
			van_accept_all(v, &v->lis);
			continue;
		}
		if (atomic_load(&((dt_conn *)p)->open))
			hs_readable(v, p);
	}
	hs_free_dead(v);
	return 1;
}

void *
van_hs_main(void *arg)
{
	dt_van *v = arg;

	/* Strangers' handshakes wait for the job's own work, not the other
	 * way round (on Linux a thread's nice value is its own). */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid),
	                getpriority(PRIO_PROCESS, 0) + 10) < 0) {
		/* not allowed: it runs at the process's priority */
	}
	while (!atomic_load(&v->stopping) && hs_round(v, 1))
		;
	return NULL;
}

/* The shared handshake loop (DT_SHARED_LOOP): hs_epfd has events. */
void
van_hs_round(void *arg)
{
	(void)hs_round(arg, 0);
}

/* The shared handshake loop's periodic call: the expiries and the end of
 * a listener's pause, while there are any (the loop's one thread owns
 * hs_count and the lists, as the handshake thread does). */
void
van_hs_tick(void *arg)
{
	dt_van *v = arg;

	if (v->hs_count > 0 || atomic_load(&v->hs_paused_until) || v->hs_dead)
		(void)hs_round(v, 0);
}

/* Stop the handshake thread and give up the connections it holds (the van
 * is being destroyed). */
void
van_hs_stop(dt_van *v)
{
	if (v->hs_started) {
		uint64_t one = 1;

		if (write(v->hs_evfd, &one, sizeof(one)) < 0) {
			/* the eventfd cannot be full */
		}
		pthread_join(v->hs_thread, NULL);
	}
	for (int q = 0; q < 2; q++)
		while (v->hs_q[q].head)
			hs_drop(v, v->hs_q[q].head, NULL);
	hs_free_dead(v);
}
