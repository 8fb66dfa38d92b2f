/*
 * van.c - the transport-independent part of a node's messaging: one epoll
 * I/O thread per node, frames cut from each link's byte stream, payloads
 * received into their final buffer, scatter-gather sends, corking and the
 * polling wait. How bytes move is the transport's (transport.h; tcp.c).
 *
 * Threads: the I/O thread (started by dt__van_start, named "dt-io") owns
 * every connection's receive state and runs the owner's hooks. The
 * handshake thread ("dt-hs", see "the handshake thread" below) owns the TCP
 * listener and each accepted connection until it has authenticated, so
 * strangers' connections and handshakes never cost the I/O thread a
 * moment; it hands a finished connection to the I/O thread. Senders are
 * any threads; each connection's send side is serialised by its send_mu.
 * The connection list is guarded by van->mu. When a connection goes down
 * the I/O thread shuts it down, then closes its link under send_mu
 * (senders re-check `open` under that lock before each write, so none
 * writes to a recycled descriptor) and frees its buffers; the small
 * dt_conn itself lives until the van is destroyed, so a sender still
 * holding it never touches freed memory.
 *
 * Size: it holds the event loop, the handshake thread, receive framing,
 * the send queue and corking, and the encrypted records. A split by
 * concern (each in its own file, encryption as a layer over a transport)
 * was built and then taken back: under attack and ASan an encrypted job
 * lost a frame with both sides idle. It returns with that fixed and a test
 * in which the inner link refuses writes; until then this file is whole,
 * because its parts share the connection struct.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/spin.h"
#include "common/util.h"
#include "net/auth.h"
#include "net/transport.h"
#include "net/van.h"

#define STAGE_CAP  (256u << 10) /* receive staging buffer per connection */
#define DIRECT_MIN (32u << 10)  /* payload rest read straight into place */
#define SEND_CHUNK (1u << 20)   /* bytes per sendmsg call at most */
#define POLL_BIG   (64u << 10)  /* payload rest that extends a poll */
#define RXBUF_KEEP (64u << 20)  /* larger receive buffers are not kept */
#define IOV_BATCH  64
#define CUT_MIN    (1u << 20) /* DT_CUT_EVERY cuts frames this big */
#define TX_RECS    16         /* sealed records per write at most */
#define RX_RAW_CAP (2 * DT_REC_WIRE)
#define CORK_BUF   (256u << 10) /* held bytes per connection at most */
#define SWEEP_NS   250000000ull /* stuck queues are looked for this often */

/* Bytes waiting to be sent: [off, off + len) of buf. */
typedef struct dt_sendq {
	uint8_t *buf;
	size_t off, len, cap;
} dt_sendq;

enum rx_state { RX_HDR, RX_META, RX_PAYLOAD };

/* Where an accepted connection is in the handshake (auth.h). */
enum auth_state { AUTH_DONE, AUTH_HELLO, AUTH_PROOF };

struct dt_conn {
	dt_van *van;
	dt_link link;    /* fd -1 once closed (under send_mu) */
	atomic_int peer; /* set by the owner's threads, read by all */
	atomic_int open;
	atomic_int vouched; /* the owner knows the peer (dt__conn_vouch) */
	uint64_t born_ns;   /* accepted at */
	int peer_pid;       /* the kernel's, at the link's start (0: none) */
	/* When bytes last came in (or the connection was made): the
	 * heartbeats' measure of a peer's silence (dt__conn_silent_ns). */
	atomic_uint_fast64_t heard_ns;
	uint64_t note; /* the owner's, in the reading thread (dt__conn_note) */
	char addr[64];
	pthread_mutex_t send_mu;
	uint8_t *obuf; /* (send_mu) frames held by a corked thread */
	size_t olen, ocap;
	/* The writer and the queue (see "sending" below). */
	pthread_cond_t idle_cv; /* CLOCK_MONOTONIC; busy dropped */
	int busy;               /* (send_mu) a writer works without send_mu */
	int close_deferred;     /* (send_mu) down while busy: it closes */
	int shut_after;         /* (send_mu) shut down once queue is out */
	dt_sendq wq, pq;        /* (send_mu) wire bytes, then frames */
	uint64_t q_moved_ns;    /* (send_mu) when the queue last moved */
	atomic_int want_out;    /* epoll reports c writable too */
	int ring; /* a shared-memory link: bytes come without waking fd */
	dt_conn *next;
	/* (handshake thread) its place in a pending list (hs_q), oldest
	 * first, while the handshake thread owns the connection. */
	dt_conn *hs_prev, *hs_next;
	int hs_list;

	/* Authentication: until it is done, the connection's bytes go to a
	 * fixed buffer, never to a frame, a hook or the log. */
	enum auth_state auth; /* (I/O thread) */
	uint8_t hsbuf[DT_AUTH_MAX_LEN];
	size_t hs_got;
	dt_auth_hs hs;
	/* Encryption (DTRAIN_ENCRYPT): sealing under send_mu, opening in
	 * the I/O thread; NULL when the connection is in the clear. */
	dt_crypt *tx;
	uint8_t *txbuf;   /* (send_mu) sealed records, TX_RECS of them */
	uint8_t *txplain; /* (send_mu) a record's plaintext being gathered */
	dt_crypt *rx;
	uint8_t *rxraw; /* records as read */
	size_t raw_off, raw_len;
	uint8_t *rxplain; /* an opened record not yet taken */
	size_t plain_off, plain_len;

	/* Receive state, owned by the I/O thread. */
	enum rx_state state;
	uint8_t *stage;
	size_t stage_len; /* bytes in stage */
	size_t stage_off; /* bytes of stage consumed */
	uint8_t hdrbuf[DT_HDR_SIZE];
	size_t got;
	dt_msg_hdr h;
	uint8_t *meta;
	size_t meta_cap;
	uint8_t *rxbuf;
	size_t rxcap;
	uint8_t *dest; /* NULL while discarding */
	int external;
	int discard;
	int stream;
	uint64_t payload_got;
};

struct dt_van {
	dt_van_hooks hooks;
	const dt_transport_ops *tp;
	int epfd;
	int evfd;
	dt_link lis; /* the listener, fd -1 if none */
	/* Peers on this host (DTRAIN_TRANSPORT=auto): the shared-memory
	 * listener, and how many such links there are. */
	int local;
	dt_link loc;
	atomic_int nrings;
	unsigned poll_tick; /* (dispatch_mu) */
	/* Out of descriptors: the listener is out of epoll until then (its
	 * readiness would otherwise spin the I/O thread), and the log says
	 * so once a second at most. */
	atomic_uint_fast64_t accept_paused_until;
	uint64_t accept_logged_ns; /* (dispatch_mu) */
	/* The guard (dt__van_guard): accepted connections the owner has not
	 * vouched for, how long they may stay so, and how many at once. */
	atomic_int unvouched;
	uint64_t vouch_ns; /* 0: no guard */
	int max_unvouched;
	uint64_t swept_ns;         /* (dispatch_mu) */
	uint64_t refuse_logged_ns; /* (dispatch_mu) */
	/* Authentication: the job key (NULL: DTRAIN_AUTH=none), how long a
	 * handshake may take, and the once-a-second log of failures. */
	dt_auth *auth;
	uint64_t handshake_ns;
	uint64_t auth_logged_ns; /* (dispatch_mu) */
	/* The handshake thread (see "the handshake thread"): its epoll (the
	 * TCP listener, pending connections, hs_evfd to stop it), the
	 * pending connections oldest first and how many, the listener's
	 * pause for want of descriptors, the connections given up in the
	 * current round of events (freed at its end), and its once-a-second
	 * logs. All but hs_epfd and hs_evfd are the handshake thread's. */
	pthread_t hs_thread;
	int hs_started;
	int hs_epfd, hs_evfd;
	struct hs_queue {
		dt_conn *head, *tail;
	} hs_q[2]; /* HS_SILENT, HS_TALKING */
	dt_conn *hs_dead;
	int hs_count;
	uint64_t hs_scanned_ns;
	atomic_uint_fast64_t hs_paused_until;
	uint64_t hs_logged_ns, hs_evict_logged_ns, hs_pause_logged_ns;
	/* Set by dt__van_stop_dials: dialling gives up at once. */
	atomic_int dial_stop;
	pthread_t thread;
	int started;
	pthread_mutex_t mu;
	/* Held while events are handled, by the I/O thread or by a caller
	 * that polls while it waits (dt__van_wait): hooks never run in two
	 * threads at once. */
	pthread_mutex_t dispatch_mu;
	/* Waiting callers (dt__van_wait): polling now, or asleep expecting the
	 * I/O thread to deliver. While some poll and none sleeps, or for a
	 * short while after a poll found its answer, the I/O thread is parked
	 * on park_cv, so the bytes the pollers read wake nobody. */
	atomic_int pollers;
	atomic_int sleepers;
	atomic_uint_fast64_t linger_until;
	pthread_mutex_t park_mu;
	pthread_cond_t park_cv; /* CLOCK_MONOTONIC */
	int parked;             /* (park_mu) */
	dt_conn *conns;
	uint64_t max_payload;
	int send_timeout_ms;
	atomic_uint_fast64_t sent;
	atomic_uint_fast64_t recvd;
	atomic_int stopping;
	/* The reading side's own stalls: when a dispatch that is still
	 * running began (0: none runs), and when the last one that took
	 * longer than STALL_NS ended. A peer is not silent while this node
	 * itself did not read (dt__conn_silent_ns). */
	atomic_uint_fast64_t busy_since;
	atomic_uint_fast64_t stall_end;
	/* Fault injection (DT_CUT_EVERY): every cut_every-th frame of
	 * CUT_MIN bytes or more is cut inside its payload. */
	atomic_uint cut_every;
	atomic_uint cut_n;
	/* Connections with a queue that waits for room (want_out), and when
	 * they were last looked at for one that does not move. */
	atomic_int queued_conns;
	uint64_t stuck_swept_ns; /* (dispatch_mu) */
};

/* The van whose events this thread handles now (dispatch), if any: its
 * sends never wait long for a peer (see "sending"). */
static _Thread_local dt_van *tl_dispatch;

/* A pointer value no buffer has: payload_dest returns it to discard. */
char dt__van_discard_tag;
char dt__van_stream_tag;

/* A connection over link; with its receive buffer when staged (one still in
 * the handshake gets it when it is handed over: a stranger costs little). */
static dt_conn *
conn_new(dt_van *v, const dt_link *link, int staged)
{
	dt_conn *c = dt__calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->stage = staged ? dt__malloc(STAGE_CAP) : NULL;
	if (staged && c->stage == NULL) {
		free(c);
		return NULL;
	}
	c->van = v;
	c->link = *link;
	c->ring = link->ops->pending != NULL;
	c->peer_pid = link->ops->peer_pid ? link->ops->peer_pid(link) : 0;
	atomic_store(&c->peer, -1);
	atomic_store(&c->vouched, 1);
	c->born_ns = dt__now_ns();
	atomic_store(&c->heard_ns, c->born_ns);
	atomic_store(&c->open, 1);
	pthread_mutex_init(&c->send_mu, NULL);
	dt__cond_init_monotonic(&c->idle_cv);
	snprintf(c->addr, sizeof(c->addr), "?");
	return c;
}

/* 1 at most once a second per *last (dispatch_mu held): log lines about
 * what a stranger can repeat at will. */
static int
once_a_second(uint64_t *last, uint64_t now)
{
	if (now - *last < 1000000000ull)
		return 0;
	*last = now;
	return 1;
}

/* The buffers of encryption (send_mu held, or nothing else runs on c). */
static void
crypt_buffers_free(dt_conn *c)
{
	free(c->txbuf);
	free(c->txplain);
	free(c->rxraw);
	free(c->rxplain);
	c->txbuf = c->txplain = c->rxraw = c->rxplain = NULL;
	c->raw_off = c->raw_len = c->plain_off = c->plain_len = 0;
}

static void
conn_free(dt_conn *c)
{
	if (c->link.fd >= 0)
		c->link.ops->close(&c->link);
	pthread_mutex_destroy(&c->send_mu);
	pthread_cond_destroy(&c->idle_cv);
	free(c->wq.buf);
	free(c->pq.buf);
	free(c->stage);
	free(c->meta);
	free(c->rxbuf);
	free(c->obuf);
	crypt_buffers_free(c);
	dt__crypt_free(c->tx);
	dt__crypt_free(c->rx);
	free(c);
}

/*
 * A connection's readiness goes to one thread only (EPOLLONESHOT): the I/O
 * thread and a polling caller (dt__van_wait) never both wake for the same
 * bytes. Whoever handled it re-arms it (dispatch).
 */
#define CONN_EVENTS (EPOLLIN | EPOLLRDHUP | EPOLLONESHOT)

/* Have the I/O thread go round its loop (and look at the rings again)
 * at once; at a stop, leave epoll_wait. */
static void
wake_io(dt_van *v)
{
	uint64_t one = 1;

	if (write(v->evfd, &one, sizeof(one)) < 0) {
		/* the eventfd cannot be full */
	}
}

/* Register c with the van's list and epoll. */
static dt_err
conn_add(dt_van *v, dt_conn *c)
{
	struct epoll_event ev = {.events = CONN_EVENTS, .data.ptr = c};

	pthread_mutex_lock(&v->mu);
	c->next = v->conns;
	v->conns = c;
	pthread_mutex_unlock(&v->mu);
	if (c->ring)
		atomic_fetch_add(&v->nrings, 1);
	if (epoll_ctl(v->epfd, EPOLL_CTL_ADD, c->link.fd, &ev) < 0) {
		atomic_store(&c->open, 0);
		return dt__fail(DT_ESYS, "epoll_ctl: %s", strerror(errno));
	}
	if (c->ring) /* the I/O thread may sleep already, without having
	                armed this ring (its handshake used the arming up) */
		wake_io(v);
	return DT_OK;
}

static void link_release(dt_conn *c);
static void unwant_writable(dt_van *v, dt_conn *c);
static void conn_writable(dt_van *v, dt_conn *c);
static void sweep_stuck(dt_van *v);

/* In the I/O thread: stop reading c and tell the owner. */
static void
conn_down(dt_van *v, dt_conn *c, dt_err why, const char *reason)
{
	atomic_store(&c->open, 0);
	if (atomic_exchange(&c->vouched, 1) == 0)
		atomic_fetch_sub(&v->unvouched, 1);
	if (c->ring)
		atomic_fetch_sub(&v->nrings, 1);
	epoll_ctl(v->epfd, EPOLL_CTL_DEL, c->link.fd, NULL);
	c->link.ops->shutdown(&c->link);
	/*
	 * Give the descriptor and the receive buffers back now, so a peer
	 * that connects and misbehaves again and again cannot exhaust them.
	 * Under send_mu: a sender re-checks `open` under that lock before
	 * every write, so it never writes to a recycled descriptor; a busy
	 * writer (one that writes without the lock) closes it when it is
	 * done (after the shutdown above it wakes at once).
	 */
	pthread_mutex_lock(&c->send_mu);
	unwant_writable(v, c);
	if (c->busy)
		c->close_deferred = 1; /* its writer closes when it is done */
	else
		link_release(c);
	pthread_mutex_unlock(&c->send_mu);
	free(c->stage);
	free(c->meta);
	free(c->rxbuf);
	c->stage = NULL;
	c->meta = NULL;
	c->rxbuf = NULL;
	c->meta_cap = c->rxcap = 0;
	if (c->auth != AUTH_DONE) {
		/* A stranger can fail the handshake at will: say so once a
		 * second at most. */
		if (once_a_second(&v->auth_logged_ns, dt__now_ns()))
			dt__log(0,
			        "refusing a connection from %s (and maybe "
			        "others since): %s",
			        c->addr, reason);
	} else if (why != DT_ECLOSED)
		dt__log(0, "dropping connection from %s: %s", c->addr, reason);
	else
		DT_LOG(1, "connection %s closed", c->addr);
	if (v->hooks.on_close)
		v->hooks.on_close(v->hooks.arg, c, why);
}

static void hs_drop(dt_van *v, dt_conn *c, const char *reason);
static void hs_free_dead(dt_van *v);

dt_err
dt__van_create(const dt_van_hooks *hooks, dt_van **out)
{
	dt_van *v;
	long maxmsg, tmo, hs;
	dt_auth *auth = NULL;
	dt_err err;

	err = dt__env_long("DT_MAX_MESSAGE", (long)DT_DEFAULT_MAX_PAYLOAD, 1024,
	                   (long)(1ull << 40) * 1, &maxmsg);
	if (err)
		return err;
	err = dt__env_long("DT_SEND_TIMEOUT", 120, 1, 86400, &tmo);
	if (err)
		return err;
	if ((err = dt__env_long("DT_HANDSHAKE_TIMEOUT", 10, 1, 86400, &hs)))
		return err;
	if ((err = dt__spin_configure()))
		return err;
	if ((err = dt__auth_from_env(&auth)))
		return err;
	v = dt__calloc(1, sizeof(*v));
	if (v == NULL) {
		dt__auth_free(auth);
		return DT_ENOMEM;
	}
	if ((err = dt__transport_choose(&v->tp, &v->local))) {
		dt__auth_free(auth);
		free(v);
		return err;
	}
	v->auth = auth;
	v->handshake_ns = (uint64_t)hs * 1000000000ull;
	v->hooks = *hooks;
	v->lis.fd = -1;
	v->loc.fd = -1;
	v->max_payload = (uint64_t)maxmsg;
	v->send_timeout_ms = (int)tmo * 1000;
	pthread_mutex_init(&v->mu, NULL);
	pthread_mutex_init(&v->dispatch_mu, NULL);
	pthread_mutex_init(&v->park_mu, NULL);
	dt__cond_init_monotonic(&v->park_cv);
	v->epfd = epoll_create1(EPOLL_CLOEXEC);
	v->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	v->hs_epfd = epoll_create1(EPOLL_CLOEXEC);
	v->hs_evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (v->epfd < 0 || v->evfd < 0 || v->hs_epfd < 0 || v->hs_evfd < 0) {
		err = dt__fail(DT_ESYS, "epoll/eventfd: %s", strerror(errno));
		goto fail;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	if (epoll_ctl(v->epfd, EPOLL_CTL_ADD, v->evfd, &ev) < 0 ||
	    epoll_ctl(v->hs_epfd, EPOLL_CTL_ADD, v->hs_evfd, &ev) < 0) {
		err = dt__fail(DT_ESYS, "epoll_ctl: %s", strerror(errno));
		goto fail;
	}
	*out = v;
	return DT_OK;
fail:
	if (v->epfd >= 0)
		close(v->epfd);
	if (v->evfd >= 0)
		close(v->evfd);
	if (v->hs_epfd >= 0)
		close(v->hs_epfd);
	if (v->hs_evfd >= 0)
		close(v->hs_evfd);
	dt__auth_free(v->auth);
	free(v);
	return err;
}

void
dt__van_destroy(dt_van *v)
{
	dt_conn *c, *next;

	if (v == NULL)
		return;
	atomic_store(&v->stopping, 1);
	pthread_mutex_lock(&v->park_mu);
	pthread_cond_signal(&v->park_cv);
	pthread_mutex_unlock(&v->park_mu);
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
	if (v->started) {
		wake_io(v);
		pthread_join(v->thread, NULL);
	}
	for (c = v->conns; c; c = next) {
		next = c->next;
		conn_free(c);
	}
	if (v->lis.fd >= 0)
		v->lis.ops->close(&v->lis);
	if (v->loc.fd >= 0)
		v->loc.ops->close(&v->loc);
	close(v->epfd);
	close(v->evfd);
	close(v->hs_epfd);
	close(v->hs_evfd);
	pthread_mutex_destroy(&v->mu);
	pthread_mutex_destroy(&v->dispatch_mu);
	pthread_mutex_destroy(&v->park_mu);
	pthread_cond_destroy(&v->park_cv);
	dt__auth_free(v->auth);
	free(v);
}

dt_err
dt__van_listen(dt_van *v, const char *host, int port, int fd, int *bound_port)
{
	dt_err err = v->tp->listen(host, port, fd, &v->lis, bound_port);

	if (err)
		return err;
	/* The handshake thread accepts (see "the handshake thread"). */
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &v->lis};
	if (epoll_ctl(v->hs_epfd, EPOLL_CTL_ADD, v->lis.fd, &ev) < 0)
		return dt__fail(DT_ESYS, "epoll_ctl: %s", strerror(errno));
	return DT_OK;
}

dt_err
dt__van_listen_local(dt_van *v, char *name, size_t cap)
{
	uint64_t nonce;
	char mine[64];
	dt_err err;

	*name = '\0';
	if (!v->local)
		return DT_OK;
	if (getrandom(&nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
		return dt__fail(DT_ESYS, "getrandom: %s", strerror(errno));
	snprintf(mine, sizeof(mine), "dtrain.%d.%016llx", (int)getpid(),
	         (unsigned long long)nonce);
	uint8_t token[DT_SHM_TOKEN_LEN];
	dt__auth_local_token(v->auth, mine, token);
	if ((err = dt__shm_listen(mine, token, &v->loc)))
		return err;
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &v->loc};
	if (epoll_ctl(v->epfd, EPOLL_CTL_ADD, v->loc.fd, &ev) < 0)
		return dt__fail(DT_ESYS, "epoll_ctl: %s", strerror(errno));
	snprintf(name, cap, "%s", mine);
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
	if (once_a_second(logged, now))
		dt__log(0, "accept: %s; not accepting for %llu ms",
		        strerror(err),
		        (unsigned long long)(ACCEPT_PAUSE_NS / 1000000));
}

/* Watch lis again once its pause is over (the pausing thread). */
static void
accept_resume(int epfd, dt_link *lis, atomic_uint_fast64_t *until)
{
	uint64_t at = atomic_load(until);

	if (at == 0 || dt__now_ns() < at)
		return;
	atomic_store(until, 0);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = lis};
	epoll_ctl(epfd, EPOLL_CTL_ADD, lis->fd, &ev);
}

/* Close the connections that were not introduced in time (dispatch_mu
 * held); at most every 100 ms, and only while there are any. */
static void
sweep_unvouched(dt_van *v)
{
	uint64_t now;

	if (atomic_load(&v->unvouched) == 0 ||
	    (now = dt__now_ns()) - v->swept_ns < 100000000ull)
		return;
	v->swept_ns = now;
	pthread_mutex_lock(&v->mu);
	for (dt_conn *c = v->conns; c; c = c->next) {
		if (atomic_load(&c->vouched) || !atomic_load(&c->open) ||
		    now - c->born_ns < v->vouch_ns)
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
	if (c->stage == NULL && (c->stage = dt__malloc(STAGE_CAP)) == NULL) {
		dt__log(0, "refusing %s: out of memory", c->addr);
		conn_free(c);
		return;
	}
	if (v->vouch_ns) {
		if (atomic_load(&v->unvouched) >= v->max_unvouched) {
			if (once_a_second(&v->hs_logged_ns, dt__now_ns()))
				dt__log(0,
				        "refusing connections (from %s and "
				        "maybe others): %d are not introduced "
				        "yet",
				        c->addr, v->max_unvouched);
			conn_free(c);
			return;
		}
		atomic_store(&c->vouched, 0);
		atomic_fetch_add(&v->unvouched, 1);
	}
	atomic_store(&c->heard_ns, dt__now_ns());
	if (conn_add(v, c) != DT_OK)
		dt__log(0, "cannot watch %s: %s", c->addr, dt_errmsg());
}

static void hs_take(dt_van *v, const dt_link *link, const char *addr);

/* Take every waiting connection of lis: the TCP listener's go to the
 * handshake thread's pending list (the caller is that thread), the
 * same-host listener's to the I/O thread (the caller, dispatch_mu held). */
static void
accept_all(dt_van *v, dt_link *lis)
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
			if (once_a_second(&v->refuse_logged_ns, dt__now_ns()))
				dt__log(0,
				        "refusing connections (from %s and "
				        "maybe others): %d are not introduced "
				        "yet",
				        addr, v->max_unvouched);
			link.ops->close(&link);
			continue;
		}
		c = conn_new(v, &link, 1);
		if (c == NULL) {
			dt__log(0, "refusing a connection: out of memory");
			link.ops->close(&link);
			continue;
		}
		snprintf(c->addr, sizeof(c->addr), "%s", addr);
		if (v->auth)
			c->auth = AUTH_HELLO;
		if (v->vouch_ns) {
			atomic_store(&c->vouched, 0);
			atomic_fetch_add(&v->unvouched, 1);
		}
		DT_LOG(2, "accepted a connection from %s", c->addr);
		if (conn_add(v, c) != DT_OK)
			dt__log(0, "cannot watch %s: %s", c->addr, dt_errmsg());
	}
}

static void
deliver(dt_van *v, dt_conn *c)
{
	dt_msg m;

	m.hdr = c->h;
	m.meta = c->meta;
	m.payload = c->discard || c->stream ? NULL : c->dest;
	m.payload_external = c->external;
	m.streamed = c->stream;
	if (c->meta)
		c->meta[c->h.meta_len] = '\0';
	atomic_fetch_add(&v->recvd,
	                 DT_HDR_SIZE + c->h.meta_len + c->h.payload_len);
	if (dt__verbose >= 2)
		dt__log(2, "recv %s from node %d seq=%llu key=%llu len=%llu",
		        dt__cmd_name(c->h.cmd), (int)c->h.sender,
		        (unsigned long long)c->h.seq,
		        (unsigned long long)c->h.key,
		        (unsigned long long)c->h.payload_len);
	v->hooks.on_msg(v->hooks.arg, c, &m);
	if (c->rxcap > RXBUF_KEEP) {
		free(c->rxbuf);
		c->rxbuf = NULL;
		c->rxcap = 0;
	}
	c->state = RX_HDR;
	c->got = 0;
	c->dest = NULL;
	c->external = 0;
	c->discard = 0;
	c->stream = 0;
}

/* Header and metadata are in: choose the payload's home. */
static dt_err
begin_payload(dt_van *v, dt_conn *c)
{
	void *dest = NULL;

	c->payload_got = 0;
	c->external = 0;
	c->discard = 0;
	c->stream = 0;
	if (c->h.payload_len == 0) {
		c->dest = NULL;
		return DT_OK;
	}
	if (v->hooks.payload_dest)
		dest = v->hooks.payload_dest(v->hooks.arg, c, &c->h, c->meta);
	if (dest == &dt__van_discard_tag) {
		c->discard = 1;
		c->dest = NULL;
	} else if (dest == &dt__van_stream_tag && v->hooks.payload_chunk &&
	           c->h.payload_len % 4 == 0) {
		c->stream = 1;
		c->dest = NULL;
	} else if (dest == &dt__van_stream_tag) {
		c->dest = NULL; /* cannot stream: buffer it */
		dest = NULL;
	}
	if (c->discard || c->stream) {
		/* nothing to allocate */
	} else if (dest) {
		c->dest = dest;
		c->external = 1;
	} else {
		if (c->rxcap < c->h.payload_len) {
			free(c->rxbuf);
			c->rxcap = 0;
			c->rxbuf = malloc(c->h.payload_len);
			if (c->rxbuf == NULL)
				return dt__fail(
				    DT_ENOMEM,
				    "cannot buffer a payload of "
				    "%llu bytes",
				    (unsigned long long)c->h.payload_len);
			c->rxcap = c->h.payload_len;
		}
		c->dest = c->rxbuf;
	}
	c->state = RX_PAYLOAD;
	return DT_OK;
}

/* Consume staged bytes; returns an error to drop the connection. */
static dt_err
consume(dt_van *v, dt_conn *c)
{
	dt_err err;

	while (c->stage_off < c->stage_len) {
		size_t avail = c->stage_len - c->stage_off;
		const uint8_t *p = c->stage + c->stage_off;
		size_t n;

		switch (c->state) {
		case RX_HDR:
			n = DT_MIN(avail, DT_HDR_SIZE - c->got);
			memcpy(c->hdrbuf + c->got, p, n);
			c->got += n;
			c->stage_off += n;
			if (c->got < DT_HDR_SIZE)
				break;
			err = dt__hdr_decode(c->hdrbuf, v->max_payload, &c->h);
			if (err)
				return err;
			c->got = 0;
			if (c->meta_cap < (size_t)c->h.meta_len + 1) {
				free(c->meta);
				c->meta = malloc((size_t)c->h.meta_len + 1);
				if (c->meta == NULL) {
					c->meta_cap = 0;
					return dt__fail(DT_ENOMEM,
					                "metadata buffer");
				}
				c->meta_cap = (size_t)c->h.meta_len + 1;
			}
			if (c->h.meta_len > 0) {
				c->state = RX_META;
				break;
			}
			if ((err = begin_payload(v, c)) != DT_OK)
				return err;
			if (c->h.payload_len == 0)
				deliver(v, c);
			break;
		case RX_META:
			n = DT_MIN(avail, c->h.meta_len - c->got);
			memcpy(c->meta + c->got, p, n);
			c->got += n;
			c->stage_off += n;
			if (c->got < c->h.meta_len)
				break;
			c->got = 0;
			if ((err = begin_payload(v, c)) != DT_OK)
				return err;
			if (c->h.payload_len == 0)
				deliver(v, c);
			break;
		case RX_PAYLOAD:
			n = (size_t)DT_MIN((uint64_t)avail,
			                   c->h.payload_len - c->payload_got);
			if (c->stream) {
				/* Whole floats only; keep a ragged tail. */
				n &= ~(size_t)3;
				if (n == 0)
					return DT_OK;
				if ((uintptr_t)p & 3) {
					/* Floats at an aligned address: the
					 * frames before may end anywhere.
					 * The rest moves to the front of the
					 * stage (malloc'd, so aligned). */
					memmove(c->stage, p, avail);
					c->stage_len = avail;
					c->stage_off = 0;
					p = c->stage;
				}
				v->hooks.payload_chunk(v->hooks.arg, c, &c->h,
				                       p, c->payload_got, n);
			} else if (!c->discard && n)
				memcpy(c->dest + c->payload_got, p, n);
			c->payload_got += n;
			c->stage_off += n;
			if (c->payload_got == c->h.payload_len)
				deliver(v, c);
			break;
		}
	}
	return DT_OK;
}

/* Write a handshake message: small, and the first bytes on a new link, so
 * it fits in the socket's buffer at once unless the peer is broken. */
static dt_err
send_small(dt_link *l, const uint8_t *buf, size_t len, uint64_t deadline)
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

/* What handshake_read found. */
enum { HS_MORE, HS_WAIT, HS_DONE, HS_FAIL };

/*
 * An accepted connection before it has authenticated: read the HELLO, then
 * the PROOF, each into the fixed buffer and no further (what follows them
 * stays in the kernel until then). Returns HS_MORE to go on reading,
 * HS_WAIT when nothing more is there now, HS_DONE once the peer has proved
 * it holds the key, HS_FAIL with *err (and the reason in dt_errmsg) when
 * the connection is to go. The thread that owns c's receive side calls it.
 */
static int
handshake_read(dt_van *v, dt_conn *c, dt_err *err)
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
			*err = c->link.fd < 0
			           ? dt__fail(DT_ECLOSED, "closed")
			           : send_small(&c->link, out, sizeof(out),
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
	pthread_mutex_lock(&c->send_mu);
	c->tx = tx;
	pthread_mutex_unlock(&c->send_mu);
	c->rx = rx;
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

/* Take c off the handshake thread's lists and epoll. */
static void
hs_unlink(dt_van *v, dt_conn *c)
{
	hs_remove(v, c);
	v->hs_count--;
	epoll_ctl(v->hs_epfd, EPOLL_CTL_DEL, c->link.fd, NULL);
}

/* Give up a pending connection: closed now, freed at the end of the round
 * of events (a later event of the round may still name it). The owner
 * never saw it, so nobody else holds it. */
static void
hs_drop(dt_van *v, dt_conn *c, const char *reason)
{
	if (reason && once_a_second(&v->hs_logged_ns, dt__now_ns()))
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
	dt_conn *c = conn_new(v, link, 0);
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

		if (once_a_second(&v->hs_evict_logged_ns, dt__now_ns()))
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
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
	if (epoll_ctl(v->hs_epfd, EPOLL_CTL_ADD, c->link.fd, &ev) < 0)
		hs_drop(v, c, strerror(errno));
}

/* A pending connection is readable: go on with its handshake. */
static void
hs_readable(dt_van *v, dt_conn *c)
{
	dt_err err;

	if (c->hs_list == HS_SILENT) { /* it speaks (or hangs up) */
		hs_remove(v, c);
		hs_append(v, c, HS_TALKING);
	}
	for (;;) {
		switch (handshake_read(v, c, &err)) {
		case HS_MORE:
			continue;
		case HS_WAIT:
			return;
		case HS_DONE:
			hs_unlink(v, c);
			hand_over(v, c);
			return;
		default:
			hs_drop(v, c, dt_errmsg());
			return;
		}
	}
}

/* How long a connection may take over its handshake. */
static uint64_t
hs_limit_ns(const dt_van *v)
{
	return v->vouch_ns ? v->vouch_ns : v->handshake_ns;
}

/* Close the pending connections whose time is up; returns the
 * milliseconds until the next look, -1 if none waits. The silent list is
 * in the order of age; the other, in the order the connections spoke, is
 * looked through every 100 ms. */
static int
hs_expire(dt_van *v)
{
	uint64_t now = dt__now_ns(), limit = hs_limit_ns(v);
	char why[96];
	dt_conn *c, *next;
	int tmo = -1;

	snprintf(why, sizeof(why),
	         "no handshake within %.1f s (DT_HANDSHAKE_TIMEOUT)",
	         (double)limit / 1e9);
	while ((c = v->hs_q[HS_SILENT].head) && now - c->born_ns >= limit)
		hs_drop(v, c, why);
	if ((c = v->hs_q[HS_SILENT].head))
		tmo = (int)((c->born_ns + limit - now) / 1000000) + 1;
	if (v->hs_q[HS_TALKING].head == NULL)
		return tmo;
	if (now - v->hs_scanned_ns >= 100000000ull) {
		v->hs_scanned_ns = now;
		for (c = v->hs_q[HS_TALKING].head; c; c = next) {
			next = c->hs_next;
			if (now - c->born_ns >= limit)
				hs_drop(v, c, why);
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
		conn_free(c);
	}
}

static void *
hs_thread(void *arg)
{
	dt_van *v = arg;
	struct epoll_event evs[64];

	/* Strangers' handshakes wait for the job's own work, not the other
	 * way round (on Linux a thread's nice value is its own). */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid),
	                getpriority(PRIO_PROCESS, 0) + 10) < 0) {
		/* not allowed: it runs at the process's priority */
	}
	while (!atomic_load(&v->stopping)) {
		uint64_t until = atomic_load(&v->hs_paused_until), now;
		int tmo = hs_expire(v), n;

		hs_free_dead(v);
		if (until && (now = dt__now_ns()) < until) {
			int p = (int)((until - now) / 1000000) + 1;

			tmo = tmo < 0 || p < tmo ? p : tmo;
		} else if (until) {
			accept_resume(v->hs_epfd, &v->lis, &v->hs_paused_until);
		}
		n = epoll_wait(v->hs_epfd, evs, 64, tmo);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			dt__log(0, "epoll_wait (handshakes): %s",
			        strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;

			if (p == NULL)
				continue; /* hs_evfd: the van stops */
			if (p == &v->lis) {
				accept_all(v, &v->lis);
				continue;
			}
			if (atomic_load(&((dt_conn *)p)->open))
				hs_readable(v, p);
		}
		hs_free_dead(v);
	}
	return NULL;
}

/*
 * Read opened records into buf (an encrypted connection), with read(2)'s
 * results: a short count only once the link has nothing more now, so the
 * reader's "drained" logic holds. A record that does not open sets errno
 * EBADMSG (the reason in dt_errmsg).
 */
static ssize_t
crypt_recv(dt_conn *c, uint8_t *buf, size_t len)
{
	size_t done = 0;

	if (c->rxraw == NULL) {
		c->rxraw = malloc(RX_RAW_CAP);
		c->rxplain = malloc(DT_REC_MAX);
		if (c->rxraw == NULL || c->rxplain == NULL) {
			errno = ENOMEM;
			return -1;
		}
	}
	for (;;) {
		if (c->plain_off < c->plain_len) {
			size_t n =
			    DT_MIN(len - done, c->plain_len - c->plain_off);

			memcpy(buf + done, c->rxplain + c->plain_off, n);
			c->plain_off += n;
			done += n;
		}
		if (done == len)
			return (ssize_t)done;
		size_t have = c->raw_len - c->raw_off;
		if (have >= DT_REC_HDR) {
			const uint8_t *rec = c->rxraw + c->raw_off;
			size_t pl = dt__crypt_rec_len(rec);
			size_t whole = DT_REC_HDR + pl + DT_REC_TAG;

			if (pl == 0) {
				dt__fail(DT_EAUTH, "bad record length %u",
				         (unsigned)dt__get_u32(rec));
				errno = EBADMSG;
				return -1;
			}
			if (have >= whole) {
				/* Straight into buf when it takes the whole
				 * record. */
				int direct = len - done >= pl;
				uint8_t *dst = direct ? buf + done : c->rxplain;

				if (dt__crypt_open(c->rx, rec, whole, dst)) {
					errno = EBADMSG;
					return -1;
				}
				c->raw_off += whole;
				if (direct) {
					done += pl;
				} else {
					c->plain_off = 0;
					c->plain_len = pl;
				}
				continue;
			}
		}
		if (c->raw_off == c->raw_len) {
			c->raw_off = c->raw_len = 0;
		} else if (RX_RAW_CAP - c->raw_len < DT_REC_WIRE) {
			memmove(c->rxraw, c->rxraw + c->raw_off, have);
			c->raw_len = have;
			c->raw_off = 0;
		}
		ssize_t n = c->link.ops->recv(&c->link, c->rxraw + c->raw_len,
		                              RX_RAW_CAP - c->raw_len);
		if (n > 0) {
			c->raw_len += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		/* Bytes in hand go first; the end or the error comes again
		 * on the next call. */
		if (done > 0)
			return (ssize_t)done;
		if (n == 0 && c->raw_len > c->raw_off) {
			dt__fail(DT_EAUTH, "the stream ends inside a record");
			errno = EBADMSG;
			return -1;
		}
		return n;
	}
}

static ssize_t
conn_recv(dt_conn *c, void *buf, size_t len)
{
	if (c->rx)
		return crypt_recv(c, buf, len);
	return c->link.ops->recv(&c->link, buf, len);
}

/*
 * Tell the transport how much of a payload is still to come whenever
 * reading stops (TCP then wakes the reader less often: tcp.c), so what it
 * knows is never more than the truth, and 0 between frames.
 */
static void
fit_lowat(dt_conn *c)
{
	if (c->link.ops->expect)
		c->link.ops->expect(&c->link,
		                    c->state == RX_PAYLOAD
		                        ? c->h.payload_len - c->payload_got
		                        : 0);
}

/* Read until the kernel has nothing more (or the connection is down). */
static void
read_all(dt_van *v, dt_conn *c)
{
	for (;;) {
		ssize_t n;

		if (c->auth != AUTH_DONE) {
			/* (a same-host link: TCP ones come authenticated) */
			dt_err err;
			int r = handshake_read(v, c, &err);

			if (r == HS_FAIL)
				conn_down(v, c, err, dt_errmsg());
			if (r == HS_FAIL || r == HS_WAIT)
				return;
			continue;
		}
		if (c->stage_off == c->stage_len) {
			c->stage_off = c->stage_len = 0;
		} else if (c->stage_off > 0 && c->stage_len == STAGE_CAP) {
			/* A ragged tail left by a stream: move it to the front.
			 */
			memmove(c->stage, c->stage + c->stage_off,
			        c->stage_len - c->stage_off);
			c->stage_len -= c->stage_off;
			c->stage_off = 0;
		}
		if (c->state == RX_PAYLOAD && !c->discard && !c->stream &&
		    c->stage_off == c->stage_len &&
		    c->h.payload_len - c->payload_got >= DIRECT_MIN) {
			/* Big rest of a payload: read it straight into place.
			 */
			size_t want =
			    (size_t)(c->h.payload_len - c->payload_got);

			n = conn_recv(c, c->dest + c->payload_got, want);
			if (n > 0) {
				c->payload_got += (uint64_t)n;
				if (c->payload_got == c->h.payload_len)
					deliver(v, c);
				if ((size_t)n < want)
					return; /* drained; epoll says when more
					           comes */
				continue;
			}
		} else {
			size_t want = STAGE_CAP - c->stage_len;

			n = conn_recv(c, c->stage + c->stage_len, want);
			if (n > 0) {
				dt_err err;

				c->stage_len += (size_t)n;
				/* The answers to the requests of one read leave
				 * together (corking). */
				dt__van_cork(v);
				err = consume(v, c);
				(void)dt__van_uncork(v);
				if (err) {
					conn_down(v, c, err, dt_errmsg());
					return;
				}
				if (!atomic_load(&c->open) || (size_t)n < want)
					return;
				continue;
			}
		}
		if (n == 0) {
			if (c->state != RX_HDR || c->got != 0)
				conn_down(v, c, DT_EPROTO,
				          "connection closed in the middle of "
				          "a frame (truncated message)");
			else
				conn_down(v, c, DT_ECLOSED, "closed by peer");
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		if (errno == EBADMSG) {
			char why[256];

			snprintf(why, sizeof(why), "%s", dt_errmsg());
			conn_down(v, c, DT_EAUTH, why);
			return;
		}
		conn_down(v, c, DT_ECLOSED, strerror(errno));
		return;
	}
}

/* The connection is readable. */
static void
conn_readable(dt_van *v, dt_conn *c)
{
	atomic_store(&c->heard_ns, dt__now_ns());
	read_all(v, c);
	if (atomic_load(&c->open))
		fit_lowat(c);
}

/* Handle what epoll reported (dispatch_mu held). Returns 1 if a big payload
 * is still coming in on one of the connections. */
/* A dispatch longer than this is a stall of the reading side. */
#define STALL_NS 100000000ull

static int dispatch_events(dt_van *v, const struct epoll_event *evs, int n);

/* The mark of an "event" made up for a shared-memory link whose ring holds
 * bytes (or room): epoll did not report it, so it need not be re-armed. */
#define RING_EV EPOLLMSG

/* Arm c's ring of room (want_writable): under send_mu, with no busy
 * writer (the ring is the writer's). 1 if there is room already. */
static int
arm_room(dt_conn *c)
{
	return !c->busy && c->link.fd >= 0 && c->link.ops->arm(&c->link, 1);
}

/*
 * Add to evs (n of cap used) the shared-memory links with bytes to read
 * (dispatch_mu held): without arming (pending, no system call) while
 * polling; arming them (asking for a doorbell), and for room those that
 * wait for it, before the I/O thread sleeps. Returns the new n.
 */
static int
ring_events(dt_van *v, struct epoll_event *evs, int n, int cap, int arm)
{
	if (atomic_load_explicit(&v->nrings, memory_order_relaxed) == 0)
		return n;
	pthread_mutex_lock(&v->mu);
	for (dt_conn *c = v->conns; c && n < cap; c = c->next) {
		if (!c->ring ||
		    !atomic_load_explicit(&c->open, memory_order_relaxed))
			continue;
		int ready = arm ? c->link.ops->arm(&c->link, 0)
		                : c->link.ops->pending(&c->link);

		if (arm && atomic_load(&c->want_out)) {
			pthread_mutex_lock(&c->send_mu);
			ready |= arm_room(c);
			pthread_mutex_unlock(&c->send_mu);
		}
		if (ready)
			evs[n++] = (struct epoll_event){
			    .events = EPOLLIN | RING_EV, .data.ptr = c};
	}
	pthread_mutex_unlock(&v->mu);
	return n;
}

static int
dispatch(dt_van *v, const struct epoll_event *evs, int n)
{
	uint64_t t0 = dt__now_ns(), t1;
	int big;

	atomic_store(&v->busy_since, t0);
	dt_van *outer = tl_dispatch;

	tl_dispatch = v;
	int served = dt__transport_set_serving(1);
	big = dispatch_events(v, evs, n);
	dt__transport_set_serving(served);
	tl_dispatch = outer;
	t1 = dt__now_ns();
	if (t1 - t0 > STALL_NS)
		atomic_store(&v->stall_end, t1);
	atomic_store(&v->busy_since, 0);
	return big;
}

static int
dispatch_events(dt_van *v, const struct epoll_event *evs, int n)
{
	int big = 0;

	if (v->loc.fd >= 0)
		accept_resume(v->epfd, &v->loc, &v->accept_paused_until);
	sweep_unvouched(v);
	sweep_stuck(v);
	for (int i = 0; i < n; i++) {
		void *p = evs[i].data.ptr;

		if (p == NULL) { /* the wake-up (or stop) eventfd */
			uint64_t x;

			if (read(v->evfd, &x, sizeof(x)) < 0) {
				/* nothing was there */
			}
			continue;
		}
		if (p == &v->lis || p == &v->loc) {
			accept_all(v, p);
			continue;
		}
		dt_conn *c = p;
		/* A shared-memory link's room comes as readable (its arm). */
		if ((evs[i].events & EPOLLOUT ||
		     (c->ring && atomic_load(&c->want_out))) &&
		    atomic_load(&c->open))
			conn_writable(v, c);
		if ((evs[i].events & ~(uint32_t)EPOLLOUT) &&
		    atomic_load(&c->open))
			conn_readable(v, c);
		if (atomic_load(&c->open)) {
			struct epoll_event ev = {
			    .events = CONN_EVENTS |
			              (!c->ring && atomic_load(&c->want_out)
			                   ? EPOLLOUT
			                   : 0),
			    .data.ptr = c};
			/* (a ring's bytes found by polling used no event) */
			if (!(evs[i].events & RING_EV))
				epoll_ctl(v->epfd, EPOLL_CTL_MOD, c->link.fd,
				          &ev);
			if (c->state == RX_PAYLOAD &&
			    c->h.payload_len - c->payload_got >= POLL_BIG)
				big = 1;
		}
	}
	return big;
}

/* How long the I/O thread stays parked after a poll found its answer: the
 * next wait usually follows at once (a training loop, a benchmark). */
#define LINGER_NS 500000ull

static int
io_should_park(dt_van *v, uint64_t now)
{
	return atomic_load(&v->sleepers) == 0 &&
	       (atomic_load(&v->pollers) > 0 ||
	        now < atomic_load(&v->linger_until));
}

/* The I/O thread stands aside while callers poll (see dt_van). */
static void
io_park(dt_van *v)
{
	pthread_mutex_lock(&v->park_mu);
	v->parked = 1;
	while (!atomic_load(&v->stopping) && io_should_park(v, dt__now_ns())) {
		struct timespec ts = dt__timespec_at(dt__now_ns() + LINGER_NS);

		pthread_cond_timedwait(&v->park_cv, &v->park_mu, &ts);
	}
	v->parked = 0;
	pthread_mutex_unlock(&v->park_mu);
}

static void
io_unpark(dt_van *v)
{
	atomic_store(&v->linger_until, 0);
	pthread_mutex_lock(&v->park_mu);
	if (v->parked)
		pthread_cond_signal(&v->park_cv);
	pthread_mutex_unlock(&v->park_mu);
}

static void *
io_thread(void *arg)
{
	dt_van *v = arg;
	struct epoll_event evs[64];

	while (!atomic_load(&v->stopping)) {
		int n;

		if (io_should_park(v, dt__now_ns())) {
			io_park(v);
			continue;
		}
		uint64_t until = atomic_load(&v->accept_paused_until), now;
		int tmo = -1;

		if (until && (now = dt__now_ns()) < until)
			tmo = (int)((until - now) / 1000000) + 1;
		else if (until)
			tmo = 0;
		if (atomic_load(&v->unvouched) > 0 && (tmo < 0 || tmo > 100))
			tmo = 100; /* sweep_unvouched's rounds */
		if (atomic_load(&v->queued_conns) > 0 &&
		    (tmo < 0 || tmo > (int)(SWEEP_NS / 1000000)))
			tmo = (int)(SWEEP_NS / 1000000); /* sweep_stuck's */
		/* Shared-memory links: ask for their doorbells, or do not
		 * sleep if bytes came meanwhile. */
		int nr = 0;

		if (atomic_load_explicit(&v->nrings, memory_order_relaxed)) {
			pthread_mutex_lock(&v->dispatch_mu);
			nr = ring_events(v, evs + 32, 0, 32, 1);
			pthread_mutex_unlock(&v->dispatch_mu);
		}

		n = epoll_wait(v->epfd, evs, 32, nr ? 0 : tmo);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			dt__log(0, "epoll_wait: %s", strerror(errno));
			break;
		}
		if (nr)
			memmove(evs + n, evs + 32, (size_t)nr * sizeof(*evs));
		n += nr;
		pthread_mutex_lock(&v->dispatch_mu);
		(void)dispatch(v, evs, n);
		pthread_mutex_unlock(&v->dispatch_mu);
	}
	return NULL;
}

/* Handle whatever has arrived, in this thread, unless another thread is at
 * it; never blocks. Returns 1 if it read part of a big payload that is
 * still coming in (dispatch). */
static int
poll_once(dt_van *v)
{
	struct epoll_event evs[64];
	char saved[512];
	int n, big = 0;

	if (pthread_mutex_trylock(&v->dispatch_mu) != 0)
		return 0;
	/* Shared-memory links are looked at directly; epoll (sockets, a
	 * link's end) every 16th round while there are any. */
	n = atomic_load_explicit(&v->nrings, memory_order_relaxed) > 0 &&
	            (++v->poll_tick & 15) != 0
	        ? 0
	        : epoll_wait(v->epfd, evs, 32, 0);
	n = ring_events(v, evs, n < 0 ? 0 : n, 64, 0);
	if (n > 0) {
		/* The hooks may record errors; they are not this caller's. */
		snprintf(saved, sizeof(saved), "%s", dt_errmsg());
		big = dispatch(v, evs, n);
		dt__errmsg_set(saved);
	}
	pthread_mutex_unlock(&v->dispatch_mu);
	return big;
}

/* Poll until *g moves from seen (1) or the spin budget is spent (0). */
static int
spin_poll(dt_van *v, dt_gen *g, uint64_t seen)
{
	uint64_t now = dt__now_ns(), end = now + dt__spin_budget_ns();
	int found = 0, yield_mask = dt__spin_yields() ? 0 : 63;

	atomic_fetch_add(&v->pollers, 1);
	for (unsigned i = 1;; i++) {
		int big = poll_once(v);

		if (dt__gen_get(g) != seen) {
			found = 1;
			break;
		}
		/* Bytes of a big payload came in: keep reading it here while
		 * it flows (a pull's answer), as the I/O thread would. */
		if (big)
			end = dt__now_ns() + dt__spin_budget_ns();
		if ((now = dt__now_ns()) >= end)
			break;
		/* Let a thread that wants this CPU run. */
		if ((i & (unsigned)yield_mask) == 0)
			sched_yield();
	}
	if (found)
		atomic_store(&v->linger_until, now + LINGER_NS);
	else
		atomic_fetch_add(&v->sleepers, 1); /* before pollers drops */
	atomic_fetch_sub(&v->pollers, 1);
	if (!found)
		io_unpark(v);
	return found;
}

void
dt__van_wait(dt_van *v, dt_gen *g, pthread_mutex_t *mu, pthread_cond_t *cv,
             uint64_t until_ns)
{
	uint64_t seen = dt__gen_get(g);
	int slept = 0;

	if (v && v->started && !atomic_load(&v->stopping) &&
	    dt__spin_budget_ns() > 0) {
		int found;

		pthread_mutex_unlock(mu);
		found = spin_poll(v, g, seen);
		pthread_mutex_lock(mu);
		if (found)
			return;
		slept = 1; /* counted in v->sleepers by spin_poll */
	}
	if (dt__gen_get(g) == seen) {
		if (until_ns == 0) {
			pthread_cond_wait(cv, mu);
		} else if (until_ns > dt__now_ns()) {
			struct timespec ts = dt__timespec_at(until_ns);

			pthread_cond_timedwait(cv, mu, &ts);
		}
	}
	if (slept)
		atomic_fetch_sub(&v->sleepers, 1);
}

dt_err
dt__van_start(dt_van *v)
{
	if (pthread_create(&v->thread, NULL, io_thread, v) != 0)
		return dt__fail(DT_ESYS, "cannot start the I/O thread");
	pthread_setname_np(v->thread, "dt-io");
	v->started = 1;
	if (pthread_create(&v->hs_thread, NULL, hs_thread, v) != 0)
		return dt__fail(DT_ESYS, "cannot start the handshake thread");
	pthread_setname_np(v->hs_thread, "dt-hs");
	v->hs_started = 1;
	return DT_OK;
}

/* Read exactly len bytes of a handshake from a new link by deadline (or
 * until dt__van_stop_dials). */
static dt_err
recv_small(dt_van *v, dt_link *l, uint8_t *buf, size_t len, uint64_t deadline)
{
	size_t got = 0;

	while (got < len) {
		if (atomic_load(&v->dial_stop))
			return dt__fail(DT_ESHUTDOWN, "this node is shutting "
			                              "down");
		ssize_t n = l->ops->recv(l, buf + got, len - got);
		uint64_t now;

		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		/* The end of the stream is no proof of a wrong secret: a
		 * peer that is overloaded, or that gave this connection's
		 * place to a newer one, ends it too. dt__van_connect
		 * tries again. */
		if (n == 0)
			return dt__fail(DT_ECLOSED,
			                "closed the connection before "
			                "answering the handshake");
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return dt__fail(DT_ECLOSED,
			                "cut the connection before answering "
			                "the handshake (%s)",
			                strerror(errno));
		if ((now = dt__now_ns()) >= deadline)
			return dt__fail(DT_ETIMEDOUT,
			                "did not answer the handshake in time");
		struct pollfd pfd = {.fd = l->fd, .events = POLLIN};
		poll(&pfd, 1, (int)DT_MIN((deadline - now) / 1000000 + 1, 100));
	}
	return DT_OK;
}

/* The connector's side of the handshake (auth.h), before the link joins
 * the van. */
static dt_err
handshake_connect(dt_van *v, dt_link *l, uint64_t until, dt_crypt **tx,
                  dt_crypt **rx)
{
	uint64_t deadline = DT_MIN(dt__now_ns() + v->handshake_ns, until);
	uint8_t hello[DT_AUTH_HELLO_LEN], chal[DT_AUTH_CHALLENGE_LEN];
	uint8_t proof[DT_AUTH_PROOF_LEN];
	dt_auth_hs hs;
	dt_err err;

	dt__auth_hello(v->auth, &hs, hello);
	if ((err = send_small(l, hello, sizeof(hello), deadline)) ||
	    (err = recv_small(v, l, chal, sizeof(chal), deadline)) ||
	    (err = dt__auth_on_challenge(v->auth, &hs, chal, proof, tx, rx)))
		return err;
	if ((err = send_small(l, proof, sizeof(proof), deadline))) {
		dt__crypt_free(*tx);
		dt__crypt_free(*rx);
		*tx = *rx = NULL;
	}
	return err;
}

/*
 * ---- dialling ----
 *
 * dt__van_connect tries until its deadline: a refused connect (the peer
 * is not up yet), and a connection cut or left unanswered during the
 * handshake (the peer is busy, or a stranger's connections pushed this
 * one out: see "the handshake thread"), are tried again after a nap that
 * doubles up to DIAL_NAP_MAX with a random part, so that many nodes cut at
 * once do not all come back at once. A peer whose answer does not prove
 * the key is a wrong secret, and no nap changes that: it fails at once.
 * dt__van_stop_dials ends every dial at once; TCP connects are made in
 * slices of DIAL_SLICE_NS for that (a new connect per slice costs what
 * the kernel's own first SYN retransmission would).
 */
#define DIAL_SLICE_NS 1000000000ull
#define DIAL_NAP_MIN  20   /* ms */
#define DIAL_NAP_MAX  1000 /* ms */

static int
dial_stopped(dt_van *v, const char *what, const char *host, int port)
{
	if (!atomic_load(&v->dial_stop))
		return 0;
	dt__fail(DT_ESHUTDOWN,
	         "stopped dialling %s at %s:%d: this node is shutting down",
	         what, host, port);
	return 1;
}

/* Sleep about nap_ms (half of it random), never past deadline; 0 if
 * dialling was stopped meanwhile. */
static int
dial_nap(dt_van *v, int nap_ms, uint64_t deadline)
{
	uint32_t r = 0;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
		r = (uint32_t)dt__now_ns();
	uint64_t ns = (uint64_t)(nap_ms / 2 + r % (uint32_t)(nap_ms / 2 + 1)) *
	              1000000ull;
	uint64_t end = DT_MIN(dt__now_ns() + ns, deadline);

	for (uint64_t now; (now = dt__now_ns()) < end;) {
		uint64_t step = DT_MIN(end - now, 20000000ull);
		struct timespec ts = {0, (long)step};

		if (atomic_load(&v->dial_stop))
			return 0;
		nanosleep(&ts, NULL);
	}
	return !atomic_load(&v->dial_stop);
}

/* The link to the peer, through shared memory when local names it, else
 * TCP, retried in slices until deadline (see "dialling"). */
static dt_err
dial_link(dt_van *v, const char *host, int port, const char *local,
          uint64_t deadline, const char *what, dt_link *link)
{
	uint64_t t0 = dt__now_ns();
	dt_err err;

	if (v->local && local && *local) {
		/* A peer on this host: shared memory, else TCP after all. */
		uint8_t token[DT_SHM_TOKEN_LEN];

		dt__auth_local_token(v->auth, local, token);
		if (dt__shm_connect(local, token, deadline, what, link) ==
		    DT_OK)
			return DT_OK;
		DT_LOG(1, "%s: shared memory refused (%s); using TCP", what,
		       dt_errmsg());
	}
	for (;;) {
		if (dial_stopped(v, what, host, port))
			return DT_ESHUTDOWN;
		uint64_t slice = DT_MIN(deadline, dt__now_ns() + DIAL_SLICE_NS);

		err = v->tp->connect(host, port, slice, what, link);
		/* (a name that does not resolve yet is tried again until the
		 * deadline too: the transport says so at the slice's end) */
		if (err == DT_ECONFIG && slice < deadline &&
		    dt__now_ns() >= slice)
			continue;
		if (err == DT_OK ||
		    (err != DT_ECONNREFUSED && err != DT_ETIMEDOUT))
			return err;
		if (dt__now_ns() >= deadline)
			break;
	}
	/* The last slice's reason (after its ": "), for the whole wait. */
	const char *why = strrchr(dt_errmsg(), ':');
	char last[128];

	snprintf(last, sizeof(last), "%s", why ? why + 2 : dt_errmsg());
	return dt__fail(err, "%s at %s:%d unreachable after %.1f s: %s", what,
	                host, port, (double)(dt__now_ns() - t0) / 1e9, last);
}

dt_err
dt__van_connect(dt_van *v, const char *host, int port, const char *local,
                int timeout_ms, const char *what, dt_conn **out)
{
	uint64_t t0 = dt__now_ns();
	uint64_t deadline = t0 + (uint64_t)timeout_ms * 1000000ull;
	dt_link link;
	dt_conn *c;
	dt_crypt *tx = NULL, *rx = NULL;
	int cut = 0, nap = DIAL_NAP_MIN;
	char why[512];
	dt_err err;

	for (;;) {
		if ((err = dial_link(v, host, port, local, deadline, what,
		                     &link)))
			return err;
		if (v->auth == NULL ||
		    (err = handshake_connect(v, &link, deadline, &tx, &rx)) ==
		        DT_OK)
			break;
		snprintf(why, sizeof(why), "%s", dt_errmsg());
		link.ops->close(&link);
		if (err == DT_ESHUTDOWN) {
			dial_stopped(v, what, host, port);
			return err;
		}
		if (err == DT_EAUTH) /* the answer did not prove the key */
			return dt__fail(err,
			                "authentication failed: %s at %s:%d: "
			                "%s",
			                what, host, port, why);
		cut++;
		DT_LOG(1, "%s at %s:%d: %s; trying again", what, host, port,
		       why);
		if (dt__now_ns() >= deadline || !dial_nap(v, nap, deadline) ||
		    dt__now_ns() >= deadline) {
			if (dial_stopped(v, what, host, port))
				return DT_ESHUTDOWN;
			return dt__fail(
			    err,
			    "%s at %s:%d: %s (%d times in %.1f s): it may be "
			    "overloaded by connections that do not "
			    "authenticate, or not hold this job's secret",
			    what, host, port, why, cut,
			    (double)(dt__now_ns() - t0) / 1e9);
		}
		nap = DT_MIN(nap * 2, DIAL_NAP_MAX);
	}
	c = conn_new(v, &link, 1);
	if (c == NULL) {
		dt__crypt_free(tx);
		dt__crypt_free(rx);
		link.ops->close(&link);
		return DT_ENOMEM;
	}
	c->tx = tx;
	c->rx = rx;
	snprintf(c->addr, sizeof(c->addr), "%s:%d%s", host, port,
	         c->ring ? " (shm)" : "");
	if (conn_add(v, c) != DT_OK)
		return DT_ESYS;
	DT_LOG(2, "connected to %s at %s", what, c->addr);
	*out = c;
	return DT_OK;
}

void
dt__van_stop_dials(dt_van *v)
{
	atomic_store(&v->dial_stop, 1);
}

/*
 * ---- sending ----
 *
 * A connection has one writer at a time: the thread that holds send_mu
 * while busy is 0, or the thread that set busy (it writes with send_mu
 * released, so others can queue behind it meanwhile). Bytes not written yet
 * wait in the connection's queue, in this order: wq, bytes as they go on
 * the wire (the rest of sealed records), then pq, frames not sealed yet
 * (on a link in the clear, the wire bytes themselves).
 *
 * The thread that handles events (the I/O thread, or a caller polling in
 * dt__van_wait) never waits long for a peer: it writes what the socket
 * takes within NB_BUDGET_NS (and NB_WAIT_MS without progress), queues the
 * rest (a copy) and has epoll report the socket writable; the rest leaves
 * from there (conn_writable). A peer that stops reading, or a connection
 * its peer has already given up, thus never keeps a node from serving its
 * other connections and answering handshakes. A queue that does not move
 * for DT_SEND_TIMEOUT ends its connection (sweep_stuck); one that would
 * pass QUEUE_SLACK more than the largest frame ends it at once.
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

static size_t
queued(const dt_conn *c)
{
	return c->wq.len + c->pq.len;
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
	if (queued(c) + add > v->max_payload + QUEUE_SLACK)
		return dt__fail(DT_ETOOBIG,
		                "send to %s: %zu bytes already wait for a peer "
		                "that does not read",
		                c->addr, queued(c));
	if (queued(c) == 0)
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
 * the window.
 */
static dt_err
raw_write(dt_van *v, dt_conn *c, struct iovec **pcur, int *pleft,
          uint64_t deadline, int nb, const char *what)
{
	struct iovec *cur = *pcur;
	int left = *pleft;
	dt_err err = DT_OK;

	while (left > 0) {
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

/*
 * Seal what *pcur holds into records and write them, up to TX_RECS records
 * per write, as c's writer (raw_write's contract). When the peer is slow
 * (nb), the records sealed but not written go to wq, which is empty on
 * entry, and *pcur tells the plaintext left.
 */
static dt_err
sealed_write(dt_van *v, dt_conn *c, struct iovec **pcur, int *pleft,
             uint64_t deadline, int nb, const char *what)
{
	const size_t cap = (size_t)TX_RECS * DT_REC_WIRE;
	struct iovec *cur = *pcur;
	int left = *pleft;
	size_t gathered = 0;
	dt_err err = DT_OK;

	if (c->txbuf == NULL) {
		c->txbuf = malloc(cap);
		c->txplain = malloc(DT_REC_MAX);
		if (c->txbuf == NULL || c->txplain == NULL)
			return dt__fail(DT_ENOMEM,
			                "send %s: out of memory for "
			                "encryption",
			                what);
	}
	while (left > 0 || gathered > 0) {
		size_t used = 0;

		while (used + DT_REC_WIRE <= cap) {
			size_t take;

			if (left == 0) {
				if (gathered > 0)
					used += dt__crypt_seal(
					    c->tx, c->txplain, gathered,
					    c->txbuf + used);
				gathered = 0;
				break;
			}
			if (gathered == 0 && cur->iov_len >= DT_REC_MAX) {
				/* A whole record straight from the caller's */
				take = DT_REC_MAX;
				used += dt__crypt_seal(c->tx, cur->iov_base,
				                       take, c->txbuf + used);
			} else {
				take =
				    DT_MIN(cur->iov_len, DT_REC_MAX - gathered);
				memcpy(c->txplain + gathered, cur->iov_base,
				       take);
				gathered += take;
				if (gathered == DT_REC_MAX) {
					used += dt__crypt_seal(
					    c->tx, c->txplain, gathered,
					    c->txbuf + used);
					gathered = 0;
				}
			}
			cur->iov_base = (uint8_t *)cur->iov_base + take;
			cur->iov_len -= take;
			if (cur->iov_len == 0) {
				cur++;
				left--;
			}
		}
		struct iovec wire = {c->txbuf, used}, *wc = &wire;
		int wl = used > 0;

		if ((err = raw_write(v, c, &wc, &wl, deadline, nb, what)))
			break;
		if (wl > 0) { /* nb, and the peer is slow */
			err = sendq_put(v, c, &c->wq, wc, 1);
			if (err == DT_OK && gathered > 0 &&
			    (err = sendq_room(v, c, &c->wq,
			                      gathered + DT_REC_HDR +
			                          DT_REC_TAG)) == DT_OK)
				c->wq.len += dt__crypt_seal(
				    c->tx, c->txplain, gathered,
				    c->wq.buf + c->wq.off + c->wq.len);
			break;
		}
	}
	*pcur = cur;
	*pleft = left;
	return err;
}

/* Frames onto the wire: sealed when the link is encrypted. */
static dt_err
put_bytes(dt_van *v, dt_conn *c, struct iovec **pcur, int *pleft,
          uint64_t deadline, int nb, const char *what)
{
	if (c->tx)
		return sealed_write(v, c, pcur, pleft, deadline, nb, what);
	return raw_write(v, c, pcur, pleft, deadline, nb, what);
}

/* Give the descriptor and the send buffers back (send_mu held, no writer
 * busy): the connection is down. */
static void
link_release(dt_conn *c)
{
	c->link.ops->close(&c->link);
	crypt_buffers_free(c);
	sendq_free(&c->wq);
	sendq_free(&c->pq);
	c->close_deferred = 0;
}

/* epoll: report c writable too (send_mu held, in the dispatching thread,
 * which re-arms connections: see dispatch_events). */
static void
want_writable(dt_van *v, dt_conn *c)
{
	if (atomic_load(&c->want_out) || c->link.fd < 0)
		return;
	atomic_store(&c->want_out, 1);
	atomic_fetch_add(&v->queued_conns, 1);
	if (c->ring) {
		/* Room is reported as readable once armed; if it is there
		 * already, have the I/O thread look at once. */
		if (arm_room(c))
			wake_io(v);
		return;
	}
	struct epoll_event ev = {.events = CONN_EVENTS | EPOLLOUT,
	                         .data.ptr = c};
	epoll_ctl(v->epfd, EPOLL_CTL_MOD, c->link.fd, &ev);
}

static void
unwant_writable(dt_van *v, dt_conn *c)
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

	for (int pass = 0; pass < 2 && err == DT_OK; pass++) {
		dt_sendq *q = pass == 0 ? &c->wq : &c->pq;
		struct iovec iov = {q->buf + q->off, q->len}, *cur = &iov;
		int left = q->len > 0;

		if (left == 0)
			continue;
		err = pass == 0 ? raw_write(v, c, &cur, &left, deadline, 1,
		                            "queued bytes")
		                : put_bytes(v, c, &cur, &left, deadline, 1,
		                            "queued frames");
		size_t rest = left ? cur->iov_len : 0;

		if (rest < q->len)
			c->q_moved_ns = dt__now_ns();
		q->off += q->len - rest;
		q->len = rest;
		if (q->len == 0)
			q->off = 0;
		if (c->wq.len > 0)
			break; /* wire bytes first */
	}
	return err;
}

/* Write what waits, waiting for the peer until deadline, as the busy
 * writer (send_mu held, released meanwhile). */
static dt_err
drain_wait(dt_van *v, dt_conn *c, uint64_t deadline)
{
	dt_err err = DT_OK;

	while (err == DT_OK && queued(c) > 0) {
		dt_sendq w = c->wq, p = c->pq;
		struct iovec iw = {w.buf + w.off, w.len}, *cw = &iw;
		struct iovec ip = {p.buf + p.off, p.len}, *cp = &ip;
		int lw = w.len > 0, lp = p.len > 0;

		memset(&c->wq, 0, sizeof(c->wq));
		memset(&c->pq, 0, sizeof(c->pq));
		pthread_mutex_unlock(&c->send_mu);
		err = raw_write(v, c, &cw, &lw, deadline, 0, "queued bytes");
		if (err == DT_OK)
			err = put_bytes(v, c, &cp, &lp, deadline, 0,
			                "queued frames");
		pthread_mutex_lock(&c->send_mu);
		/* keep a buffer for the next queue */
		if (c->pq.buf == NULL && p.buf != NULL) {
			c->pq = (dt_sendq){p.buf, 0, 0, p.cap};
			p.buf = NULL;
		}
		free(p.buf);
		free(w.buf);
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
		link_release(c); /* conn_down came meanwhile */
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

		err = put_bytes(v, c, &vec, &left, dt__now_ns() + NB_BUDGET_NS,
		                1, what);
		if (err || left == 0)
			return err;
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
		err = put_bytes(v, c, &vec, &left, deadline, 0, what);
		pthread_mutex_lock(&c->send_mu);
	}
	if (err == DT_OK)
		err = drain_wait(v, c, deadline); /* queued behind us */
	busy_end(c, err);
	return err;
}

/* Send vec on c as this thread may (send_mu held; c open). A failure ends
 * the connection: the stream may be cut inside a frame. */
static dt_err
send_locked(dt_van *v, dt_conn *c, struct iovec *vec, int n, const char *what)
{
	dt_err err;

	if (tl_dispatch != v)
		return send_wait_locked(v, c, vec, n, what); /* it ends c */
	err = send_nb_locked(v, c, vec, n, what);
	if (err && c->link.fd >= 0)
		c->link.ops->shutdown(&c->link);
	return err;
}

/* The corked frames' buffer, taken out of c while they are written (a
 * busy writer releases send_mu, and others may cork meanwhile). */
static uint8_t *
obuf_take(dt_conn *c, size_t *len)
{
	uint8_t *b = c->obuf;

	*len = c->olen;
	c->obuf = NULL;
	c->olen = c->ocap = 0;
	return b;
}

static void
obuf_put_back(dt_conn *c, uint8_t *b)
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
static void
conn_writable(dt_van *v, dt_conn *c)
{
	pthread_mutex_lock(&c->send_mu);
	if (atomic_load(&c->open) && c->link.fd >= 0) {
		if (!c->busy && queued(c) > 0 && drain_nb(v, c) != DT_OK) {
			dt__log(0, "%s", dt_errmsg());
			c->link.ops->shutdown(&c->link);
		}
		if (c->busy || queued(c) == 0) {
			/* empty, or the busy writer takes the rest along */
			unwant_writable(v, c);
			if (c->shut_after && !c->busy)
				c->link.ops->shutdown(&c->link);
		}
	}
	pthread_mutex_unlock(&c->send_mu);
}

/* End the connections whose queue has not moved for DT_SEND_TIMEOUT
 * (dispatching); looked at a few times a second while any has a queue. */
static void
sweep_stuck(dt_van *v)
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
		if (!c->busy && queued(c) > 0 && now - c->q_moved_ns > limit) {
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
			conn_down(v, stuck[i], DT_ETIMEDOUT, why);
	}
}

/* ---- corking: a thread's small frames leave in one write ---- */

#define CORK_MAX   (64u << 10) /* frames up to this size are held */
#define CORK_CONNS 64

static _Thread_local struct {
	dt_van *v;
	int depth;
	int nconns;
	dt_conn *conns[CORK_CONNS]; /* connections holding this thread's */
} cork;

/* Send what c holds for corked threads. */
static dt_err
flush(dt_van *v, dt_conn *c)
{
	dt_err err = DT_OK;

	pthread_mutex_lock(&c->send_mu);
	if (c->olen > 0 && atomic_load(&c->open) && c->link.fd >= 0 &&
	    !c->shut_after) {
		size_t len;
		uint8_t *b = obuf_take(c, &len);
		struct iovec iov = {b, len};

		err = send_locked(v, c, &iov, 1, "held frames");
		if (err == DT_OK)
			atomic_fetch_add(&v->sent, len);
		obuf_put_back(c, b);
	}
	c->olen = 0;
	pthread_mutex_unlock(&c->send_mu);
	return err;
}

void
dt__van_cork(dt_van *v)
{
	if (cork.depth > 0 && cork.v != v)
		return; /* corked on another van: this one sends at once */
	cork.v = v;
	cork.depth++;
}

dt_err
dt__van_uncork(dt_van *v)
{
	dt_err first = DT_OK;

	if (cork.v != v || cork.depth == 0 || --cork.depth > 0)
		return DT_OK;
	for (int i = 0; i < cork.nconns; i++) {
		dt_err err = flush(v, cork.conns[i]);

		if (err && first == DT_OK)
			first = err;
	}
	cork.nconns = 0;
	cork.v = NULL;
	return first;
}

/* Hold a small frame in c's buffer if this thread is corked (send_mu held):
 * 1 if held. */
static int
hold_locked(dt_van *v, dt_conn *c, const struct iovec *vec, int n,
            uint64_t total)
{
	if (cork.v != v || cork.depth == 0 || total > CORK_MAX ||
	    c->olen + total > CORK_BUF)
		return 0; /* sent at once, with what is held */
	if (c->ocap < CORK_BUF) {
		uint8_t *b = realloc(c->obuf, CORK_BUF);

		if (b == NULL)
			return 0;
		c->obuf = b;
		c->ocap = CORK_BUF;
	}
	int listed = 0;

	for (int i = 0; i < cork.nconns && !listed; i++)
		listed = cork.conns[i] == c;
	if (!listed && cork.nconns == CORK_CONNS)
		return 0; /* no room to remember c: send at once */
	for (int i = 0; i < n; i++) {
		memcpy(c->obuf + c->olen, vec[i].iov_base, vec[i].iov_len);
		c->olen += vec[i].iov_len;
	}
	if (!listed)
		cork.conns[cork.nconns++] = c;
	return 1;
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
	} else if (hold_locked(v, c, vec + 1, n - 1, total)) {
		total = 0; /* counted when flushed */
	} else {
		unsigned every = atomic_load(&v->cut_every);
		size_t held;
		uint8_t *b = obuf_take(c, &held);
		int cut = every && h->payload_len >= CUT_MIN &&
		          atomic_fetch_add(&v->cut_n, 1) % every == every - 1;

		vec[0] = (struct iovec){b, held};
		if (cut)
			n = cut_frame(c, h, vec, n, held);
		err = send_locked(v, c, held ? vec : vec + 1, held ? n : n - 1,
		                  dt__cmd_name(h->cmd));
		obuf_put_back(c, b);
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
		/* Room for far more than a header: the write cannot block. */
		err = put_bytes(v, c, &cur, &left, dt__now_ns() + NB_BUDGET_NS,
		                0, dt__cmd_name(h->cmd));
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

uint64_t
dt__conn_silent_ns(const dt_conn *c, uint64_t now)
{
	const dt_van *v = c->van;
	uint64_t busy = atomic_load(&v->busy_since);
	uint64_t heard = atomic_load(&c->heard_ns);
	uint64_t stall = atomic_load(&v->stall_end);

	if (busy && now > busy && now - busy > STALL_NS)
		return 0; /* this node is not reading: it cannot tell */
	if (stall > heard)
		heard = stall;
	return now > heard ? now - heard : 0;
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

void
dt__conn_set_peer(dt_conn *c, int peer)
{
	atomic_store(&c->peer, peer);
	if (peer >= 0)
		dt__conn_vouch(c);
}

void
dt__conn_vouch(dt_conn *c)
{
	if (atomic_exchange(&c->vouched, 1) == 0)
		atomic_fetch_sub(&c->van->unvouched, 1);
}

void
dt__van_guard(dt_van *v, uint64_t vouch_ns, int max_unvouched)
{
	v->vouch_ns = vouch_ns;
	v->max_unvouched = max_unvouched;
}

void
dt__conn_set_note(dt_conn *c, uint64_t note)
{
	c->note = note;
}

uint64_t
dt__conn_note(const dt_conn *c)
{
	return c->note;
}

int
dt__conn_peer(const dt_conn *c)
{
	return atomic_load(&c->peer);
}

const char *
dt__conn_addr(const dt_conn *c)
{
	return c->addr;
}

int
dt__conn_peer_pid(const dt_conn *c)
{
	return c->peer_pid;
}

int
dt__conn_is_open(const dt_conn *c)
{
	return atomic_load(&c->open);
}

int
dt__van_dispatching(const dt_van *v)
{
	return v != NULL && tl_dispatch == v;
}

uint64_t
dt__van_max_payload(const dt_van *v)
{
	return v->max_payload;
}

void
dt__van_counters(dt_van *v, uint64_t *sent, uint64_t *recvd)
{
	*sent = atomic_load(&v->sent);
	*recvd = atomic_load(&v->recvd);
}
