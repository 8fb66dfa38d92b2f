/*
 * van_int.h - what the van's files share and nobody else sees: the
 * connection and van structs, their locks and owners, and the calls each
 * file offers the others. The van is split by concern:
 *
 *   van.c         connections' life (made, added to epoll, taken down,
 *                 freed), the van's creation, start and stop, accessors
 *   van_accept.c  listeners, accepting, the handshake thread ("dt-hs")
 *                 and its eviction of pending strangers
 *   van_dial.c    dialling a peer, through the first transport that can
 *                 reach it, with the connector's side of the handshake
 *   van_loop.c    the I/O thread ("dt-io"), dispatching events, the
 *                 polling wait of callers (dt__van_wait), and a van's
 *                 rounds on the process's shared loops (DT_SHARED_LOOP:
 *                 loop_shared.c) in place of its own threads
 *   van_recv.c    receive framing: frames cut from a link's bytes,
 *                 payloads into their final buffer
 *   van_send.c    the send queue, the one writer per connection, sending
 *   van_cork.c    corking: a thread's small frames leave in one write
 *
 * Encryption is not the van's: an encrypted link is a transport that wraps
 * another (seal.c), so the van moves plaintext on every link.
 */
#ifndef DT_NET_VAN_INT_H
#define DT_NET_VAN_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/uio.h>

#include "net/auth.h"
#include "net/loop_shared.h"
#include "net/transport.h"
#include "net/van.h"

#define STAGE_MIN  (16u << 10)  /* a connection's receive staging at first */
#define STAGE_CAP  (256u << 10) /* ...grown to at most this while bytes flow */
#define DIRECT_MIN (32u << 10)  /* payload rest read straight into place */
#define SEND_CHUNK (1u << 20)   /* bytes per sendmsg call at most */
#define POLL_BIG   (64u << 10)  /* payload rest that extends a poll */
#define RXBUF_KEEP (64u << 20)  /* larger receive buffers are not kept */
#define IOV_BATCH  64
#define CUT_MIN    (1u << 20)   /* DT_CUT_EVERY cuts frames this big */
#define CORK_BUF   (256u << 10) /* held bytes per connection at most */
#define SWEEP_NS   250000000ull /* stuck queues are looked for this often */
#define STALL_NS   100000000ull /* a dispatch this long is a stall */

/*
 * A connection's readiness goes to one thread only (EPOLLONESHOT): the I/O
 * thread and a polling caller (dt__van_wait) never both wake for the same
 * bytes. Whoever handled it re-arms it (van_loop.c).
 */
#define CONN_EVENTS (EPOLLIN | EPOLLRDHUP | EPOLLONESHOT)

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
	/* The writer and the queue (see "sending" in van_send.c). */
	pthread_cond_t idle_cv; /* CLOCK_MONOTONIC; busy dropped */
	int busy;               /* (send_mu) a writer works without send_mu */
	int close_deferred;     /* (send_mu) down while busy: it closes */
	int shut_after;         /* (send_mu) shut down once queue is out */
	dt_sendq pq;            /* (send_mu) frames not written yet */
	uint64_t q_moved_ns;    /* (send_mu) when the queue last moved */
	atomic_int want_out;    /* epoll reports c writable too */
	int polled; /* bytes come without waking fd (transport.h: pending) */
	/* (dispatch_mu) a polled link's fd was reported since it was last
	 * armed: its doorbells are to be taken (transport.h: DT_ARM_QUIET) */
	int rung;
	/* (dispatch_mu) handled since it was last armed (or new): only such
	 * a polled link needs arming again before the I/O thread sleeps. One
	 * left alone since is still armed, and its writer rings its doorbell
	 * (and epoll reports it) at its next write. */
	int touched;
	/* (van->mu) its place in the van's list of live connections (prev,
	 * next), or in the list of those taken down (next), and whether it
	 * is still in the live one; next also links the handshake thread's
	 * connections given up (hs_dead) */
	dt_conn *prev, *next;
	int live;
	/* (van->mu) its place in the list of connections not introduced
	 * yet (dt__van_guard), while it is in it */
	dt_conn *uv_prev, *uv_next;
	int uv_in;
	/* (handshake thread) its place in a pending list (hs_q), oldest
	 * first, while the handshake thread owns the connection. */
	dt_conn *hs_prev, *hs_next;
	int hs_list;
	/* (handshake thread) in hs_epfd: a connection whose handshake is
	 * done at once (its HELLO came with it) is never watched there */
	int hs_watched;

	/* Authentication: until it is done, the connection's bytes go to a
	 * fixed buffer, never to a frame, a hook or the log. */
	enum auth_state auth; /* (I/O thread) */
	/* (I/O thread) the peer closed, seen in the event that disarmed c
	 * (CONN_EVENTS is one shot): its close needs no more than close() */
	int eof;
	uint8_t hsbuf[DT_AUTH_MAX_LEN];
	size_t hs_got;
	dt_auth_hs hs;
	/* Receive state, owned by the I/O thread. */
	enum rx_state state;
	uint8_t *stage;
	size_t stage_cap; /* its size: STAGE_MIN, doubled while reads fill it */
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
	/* The transports in order of preference, NULL-terminated; the last
	 * reaches other hosts (van_host_tp). */
	const dt_transport_ops *tps[DT_TRANSPORTS_MAX];
	int epfd;
	int evfd;
	dt_link lis; /* the listener, fd -1 if none */
	/* The listener at an endpoint on this host (dt__van_listen_local),
	 * fd -1 if none, and how many polled links there are (see dt_conn's
	 * polled). */
	dt_link loc;
	atomic_int npolled;
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
	/* DT_SHARED_LOOP: the van has no threads of its own; its epoll set
	 * is a source of the process's shared I/O loop, its handshake set
	 * one of the shared handshake loop (van_loop.c: van_shared_start).
	 * Set before the van starts, cleared once it is taken out. */
	int shared;
	dt_loop *io_loop, *hs_loop;
	dt_loop_src *io_src, *hs_src;
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
	/* Of the pollers, those asleep in epoll_wait in the I/O thread's
	 * place (van_loop.c, epoll_sleep): a thread that handles events
	 * meant for them kicks them through the eventfd. */
	atomic_int epoll_sleepers;
	atomic_uint_fast64_t linger_until;
	pthread_mutex_t park_mu;
	pthread_cond_t park_cv; /* CLOCK_MONOTONIC */
	int parked;             /* (park_mu) */
	/* (mu) The live connections, newest first; those taken down, kept
	 * (small) until the van is destroyed, so that a sender that still
	 * holds one never touches freed memory, but out of the way of every
	 * walk of the live ones; and those not introduced yet, oldest first:
	 * the sweep of the guard walks these alone, so a join of thousands
	 * of nodes does not walk every connection ten times a second. */
	dt_conn *conns, *gone;
	dt_conn *uv_head, *uv_tail;
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

/* The van whose events this thread handles now (van_loop.c's dispatch), if
 * any: its sends never wait long for a peer (see van_send.c). */
extern _Thread_local dt_van *van_tl_dispatch;

/* The transport that reaches other hosts: the last of the van's list. */
static inline const dt_transport_ops *
van_host_tp(const dt_van *v)
{
	int i = 0;

	while (v->tps[i + 1])
		i++;
	return v->tps[i];
}

/* van.c: a connection's life. */
dt_conn *van_conn_new(dt_van *v, const dt_link *link, int staged);
void van_conn_free(dt_conn *c);
dt_err van_conn_add(dt_van *v, dt_conn *c);
void van_conn_down(dt_van *v, dt_conn *c, dt_err why, const char *reason);
/* c is not introduced yet: counted in v->unvouched, and in the guard's
 * list (before van_conn_add). */
void van_unvouched_add(dt_van *v, dt_conn *c);
void van_wake_io(dt_van *v);
/* Read DT_WAIT_DIRECT (van_loop.c) for dt__van_wait. */
dt_err dt__van_wait_configure(void);
/* Size the listeners' queues to max_unvouched (before the I/O thread
 * runs: dt__van_guard, the listens). */
void van_size_queues(dt_van *v);
int van_once_a_second(uint64_t *last, uint64_t now);

/* van_accept.c: listeners and the handshake thread. */
enum { HS_MORE, HS_WAIT, HS_DONE, HS_FAIL }; /* van_handshake_read */
void van_accept_all(dt_van *v, dt_link *lis);
void van_accept_resume(int epfd, dt_link *lis, atomic_uint_fast64_t *until);
void van_sweep_unvouched(dt_van *v);
int van_handshake_read(dt_van *v, dt_conn *c, dt_err *err);
dt_err van_send_small(dt_link *l, const uint8_t *buf, size_t len,
                      uint64_t deadline);
void *van_hs_main(void *arg);
void van_hs_round(void *arg);
void van_hs_tick(void *arg);
void van_hs_stop(dt_van *v);

/* van_loop.c */
void *van_io_main(void *arg);
dt_err van_shared_start(dt_van *v);
void van_shared_stop(dt_van *v);

/* van_recv.c */
void van_conn_readable(dt_van *v, dt_conn *c);

/* van_send.c */
dt_err van_send_locked(dt_van *v, dt_conn *c, struct iovec *vec, int n,
                       const char *what);
void van_conn_writable(dt_van *v, dt_conn *c);
void van_unwant_writable(dt_van *v, dt_conn *c);
int van_arm_room(dt_conn *c);
void van_link_release(dt_conn *c);
void van_sweep_stuck(dt_van *v);
uint8_t *van_obuf_take(dt_conn *c, size_t *len);
void van_obuf_put_back(dt_conn *c, uint8_t *b);

/* van_cork.c */
int van_hold_locked(dt_van *v, dt_conn *c, const struct iovec *vec, int n,
                    uint64_t total);

#endif
