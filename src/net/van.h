/*
 * van.h - a node's message transport (ps-lite calls it the van).
 *
 * A van owns one listening socket, the connections to peers, and one I/O
 * thread that waits on all of them with epoll, cuts the byte streams into
 * frames (codec.h) and hands each complete message to the owner's on_msg
 * hook, in that thread (or in a waiting caller's, see dt__van_wait; hooks
 * never run concurrently). Any thread may send header, metadata and
 * payload with scatter-gather writes, with no copy of the payload; but the
 * thread that runs the hooks never waits long for a peer: what the socket
 * does not take at once is queued (a copy) and leaves when the socket can
 * take it, so a peer that does not read never stops a node from reading
 * (see dt__van_send).
 *
 * Receiving into the final buffer: when a header arrives, the payload_dest
 * hook may return the buffer the payload belongs in (a pending pull's
 * output, say); otherwise the payload goes into a per-connection buffer
 * that is reused, valid until on_msg returns.
 *
 * A connection that sends a bad frame is closed with a logged reason; the
 * van goes on serving the others. Connection objects live until the van is
 * destroyed, so a sender holding one never touches freed memory; a send on
 * a closed connection fails with DT_ECLOSED.
 *
 * How bytes move is a transport's (transport.h: an ops table, one file
 * per transport, chosen by DTRAIN_TRANSPORT): the van asks each whether it
 * can reach a peer and never names one; encryption is a layer over a
 * transport's link (seal.h). The hooks and send call are all the layers
 * above see.
 */
#ifndef DT_NET_VAN_H
#define DT_NET_VAN_H

#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/spin.h"
#include "net/codec.h"

typedef struct dt_van dt_van;
typedef struct dt_conn dt_conn;

typedef struct dt_msg {
	dt_msg_hdr hdr;
	const uint8_t *meta;  /* meta_len bytes, NUL-terminated for text */
	void *payload;        /* payload_len bytes */
	int payload_external; /* payload is the payload_dest buffer */
	int streamed;         /* payload went to payload_chunk */
} dt_msg;

typedef struct dt_van_hooks {
	void *arg;
	/* A complete message, in the I/O thread. */
	void (*on_msg)(void *arg, dt_conn *c, dt_msg *m);
	/*
	 * Where to put the payload of the message whose header and metadata
	 * have arrived, or NULL for the connection's buffer. The returned
	 * buffer must hold h->payload_len bytes. Optional.
	 */
	void *(*payload_dest)(void *arg, dt_conn *c, const dt_msg_hdr *h,
	                      const uint8_t *meta);
	/* A piece of a streamed payload: bytes [off, off + len). */
	void (*payload_chunk)(void *arg, dt_conn *c, const dt_msg_hdr *h,
	                      const void *data, uint64_t off, size_t len);
	/* A connection closed (why: DT_ECLOSED on EOF, else the error). */
	void (*on_close)(void *arg, dt_conn *c, dt_err why);
} dt_van_hooks;

/* payload_dest returns DT_VAN_DISCARD to read and drop a payload (a push of
 * the wrong size, say): on_msg then sees payload == NULL. */
extern char dt__van_discard_tag;
#define DT_VAN_DISCARD ((void *)&dt__van_discard_tag)
/* ...or DT_VAN_STREAM to be handed the payload in pieces, as it arrives,
 * through payload_chunk (each piece a multiple of 4 bytes long, at a
 * 4-byte multiple offset, its data 4-byte aligned); on_msg then sees
 * payload == NULL, streamed = 1. */
extern char dt__van_stream_tag;
#define DT_VAN_STREAM ((void *)&dt__van_stream_tag)

dt_err dt__van_create(const dt_van_hooks *hooks, dt_van **out);
/* Close every connection, stop the I/O thread and free the van. */
void dt__van_destroy(dt_van *v);

/*
 * Listen on host:port (port 0 = any), or adopt the bound socket fd when fd
 * >= 0 (DT_LISTEN_FD). *bound_port receives the port.
 */
dt_err dt__van_listen(dt_van *v, const char *host, int port, int fd,
                      int *bound_port);
/* Start the I/O thread and the handshake thread; with DT_SHARED_LOOP=1,
 * add the van to the process's shared loops instead (loop_shared.h): it
 * then has no thread of its own. */
dt_err dt__van_start(dt_van *v);

/*
 * Listen for peers on this host too, through the first transport that
 * listens at an endpoint on this host (shared memory, unless
 * DTRAIN_TRANSPORT=tcp): name (cap bytes) receives the endpoint to give
 * them, "" when there is none.
 */
dt_err dt__van_listen_local(dt_van *v, char *name, size_t cap);

/*
 * Connect to host:port, and authenticate, retrying refused connections
 * and handshakes cut or left unanswered (with a growing, jittered nap)
 * until timeout_ms has passed; at the peer's endpoint on this host instead
 * when local names one (dt__van_listen_local) and a transport of this van
 * can reach it there, with TCP if that fails. what names the
 * peer in errors ("scheduler"). A peer whose answer does not prove the
 * job's key fails at once (DT_EAUTH); dt__van_stop_dials ends the wait
 * (DT_ESHUTDOWN).
 */
dt_err dt__van_connect(dt_van *v, const char *host, int port, const char *local,
                       int timeout_ms, const char *what, dt_conn **out);

/*
 * Make every dt__van_connect of v, now and later, give up within about
 * 20 ms (a TCP connect or a handshake in progress: within a second) with
 * DT_ESHUTDOWN:
 * the owner is failing or stopping and waits for nobody. Any thread.
 */
void dt__van_stop_dials(dt_van *v);

/*
 * Send one frame: h (meta_len and payload_len are filled in here), meta and
 * the payload pieces. Thread-safe, and frames never interleave. In a hook
 * (the thread that handles the van's events) it returns within about
 * 50 ms: what the peer has not taken by then waits in the connection's
 * queue (a copy) for epoll to report room, and a queue that does not move
 * for DT_SEND_TIMEOUT ends the connection (on_close: DT_ETIMEDOUT). Any
 * other thread waits until all bytes are in the kernel, up to
 * DT_SEND_TIMEOUT (DT_ETIMEDOUT, and the connection ends).
 */
dt_err dt__van_send(dt_van *v, dt_conn *c, dt_msg_hdr *h, const void *meta,
                    uint32_t meta_len, const struct iovec *iov, int iovcnt);

/*
 * Wait, with *mu held, for the state behind *g to move: the other side bumps
 * g (common/spin.h) and broadcasts cv under mu whenever it changes it.
 * Returns with *mu held when g moved, cv was signalled, or until_ns
 * (dt__now_ns clock; 0 = no limit; otherwise cv must use CLOCK_MONOTONIC)
 * passed; the caller re-checks its condition and loops.
 *
 * First, for up to DT_SPIN_US, the caller reads the network itself: it
 * handles whatever arrives (hooks still run in one thread at a time), so a
 * short answer costs no wake-up of the I/O thread or of the caller. Then,
 * with DT_WAIT_DIRECT (by default when the job oversubscribes the host),
 * it sleeps in epoll_wait in the I/O thread's place for up to 20 ms, so
 * that its answer wakes it directly; a broadcast of cv without a message
 * is seen within 1 ms then. The I/O thread stands aside meanwhile and takes
 * over again before the caller sleeps on cv. v may be NULL (a plain
 * condition wait).
 */
void dt__van_wait(dt_van *v, dt_gen *g, pthread_mutex_t *mu, pthread_cond_t *cv,
                  uint64_t until_ns);

/*
 * Corking (per thread, nestable): between dt__van_cork and dt__van_uncork,
 * this thread's frames of up to 64 KiB are held per connection and leave
 * together at the uncork, in one write per connection; a bigger frame
 * takes the held ones with it. Order on a connection is kept. Never wait
 * for an answer while corked. A flush that fails closes the connection
 * (its owner hears of it through on_close) and uncork returns the error.
 * The van corks the answers its hooks send while they handle the frames
 * of one read.
 */
void dt__van_cork(dt_van *v);
dt_err dt__van_uncork(dt_van *v);

/*
 * A header-only frame (a heartbeat) that never waits: sent (*sent = 1)
 * when c's send side is free and has room, else skipped (*sent = 0, DT_OK:
 * a send under way, or a peer that does not read, speaks for itself). Room
 * for part of it is enough: what the link does not take at once waits in
 * c's queue and leaves when epoll reports room, as the I/O thread's sends
 * do. Any thread; an error (DT_ECLOSED, DT_ENOMEM) ends c.
 */
dt_err dt__van_beat(dt_van *v, dt_conn *c, dt_msg_hdr *h, int *sent);

/*
 * How long c's peer has been silent at now (dt__now_ns): since bytes last
 * came from it, or since this node's reading side last came back from a
 * stall of its own (a hook that ran for a long time), whichever is later;
 * 0 while such a stall goes on. So a node busy in a long computation never
 * takes its peers for dead.
 */
uint64_t dt__conn_silent_ns(const dt_conn *c, uint64_t now);

/* The van's open connections: up to cap of them in out (a connection
 * stays valid until dt__van_destroy, closed or not); returns how many are
 * open, more than cap when they did not all fit. Any thread. */
int dt__van_open_conns(dt_van *v, dt_conn **out, int cap);

/* Close a connection (the on_close hook runs in the I/O thread). What
 * waits to be sent leaves first as far as the peer takes it at once; a
 * close never waits for a peer that does not read. */
void dt__van_close(dt_van *v, dt_conn *c);
/* Fault injection for tests (DT_CUT_EVERY, with PS_RESEND): every
 * every-th frame of 1 MiB or more that is sent is cut inside its payload
 * and its connection ended; 0: never. */
void dt__van_set_cut(dt_van *v, unsigned every);

/*
 * The guard against strangers, off unless the owner calls this before
 * dt__van_start: an accepted connection must be vouched for by the owner
 * (dt__conn_vouch, or a peer id >= 0 through dt__conn_set_peer) within
 * vouch_ns of its arrival, or it is closed with a logged reason; and at
 * most max_unvouched such connections are kept at once (more are closed
 * at once, logged once a second at most). A slow or silent stranger thus
 * holds no descriptor or buffer for long. Connections this node made
 * (dt__van_connect) need no vouching.
 */
void dt__van_guard(dt_van *v, uint64_t vouch_ns, int max_unvouched);
void dt__conn_vouch(dt_conn *c);
/* Whether the owner vouched for c (or dialled it). */
int dt__conn_vouched(const dt_conn *c);

/* Owner-defined tag of a connection (the peer's node id), -1 initially;
 * a tag >= 0 vouches for the connection. */
void dt__conn_set_peer(dt_conn *c, int peer);
int dt__conn_peer(const dt_conn *c);
/* A word the owner keeps with a connection, read and written only in the
 * thread that runs its hooks (what it decided about the frame being read). */
void dt__conn_set_note(dt_conn *c, uint64_t note);
uint64_t dt__conn_note(const dt_conn *c);
/* "127.0.0.1:40211" */
const char *dt__conn_addr(const dt_conn *c);
/* The pid of the process at the other end as the kernel reported it when
 * the connection was made (SO_PEERCRED on a same-host link), or 0 when
 * the transport cannot tell (TCP): the only pid to aim cross-memory
 * copies at, since a peer's own word for its pid proves nothing. */
int dt__conn_peer_pid(const dt_conn *c);
int dt__conn_is_open(const dt_conn *c);

/* 1 if this thread is handling v's events now (a hook runs), or is a
 * thread of the process's shared loops (DT_SHARED_LOOP), which serve every
 * node of the process: such a thread must not wait for a lock that a
 * sender may hold while it waits for a peer, nor for a peer's answer. */
int dt__van_dispatching(const dt_van *v);

/* 1 if v is served by the process's shared loops (DT_SHARED_LOOP=1, read
 * when v was made): its owner's periodic work goes there too. */
int dt__van_shared(const dt_van *v);

/* The largest payload a frame may carry (DT_MAX_MESSAGE). */
uint64_t dt__van_max_payload(const dt_van *v);

/* Bytes sent and received by the van (observability, benchmarks). */
void dt__van_counters(dt_van *v, uint64_t *sent, uint64_t *recvd);

#endif
