/*
 * transport.h - what the van (van*.c) needs of a transport: an ops table
 * that each transport fills in a file of its own (tcp.c; shm.c for peers
 * on the same host; RDMA later), so adding one means adding a file and a
 * line in transport.c, and nothing in the van or above net/ changes. A
 * layer may wrap another transport's link (seal.c: encrypted records).
 *
 * The van keeps everything that does not depend on how bytes move: frames
 * cut from the byte stream, payloads received into their final buffer,
 * corking, the polling wait, the I/O thread. A transport moves bytes of
 * one link in order, like a stream socket, and gives the van a descriptor
 * that epoll reports readable when bytes (or the end) have come: a socket,
 * or an eventfd a ring's writer rings.
 *
 * Threads: recv runs in one thread at a time per link (the van's dispatch
 * lock); sendv and wait_writable in one thread at a time (the link's send
 * lock), possibly beside a recv; shutdown from any thread; close once,
 * when nothing else runs on the link.
 */
#ifndef DT_NET_TRANSPORT_H
#define DT_NET_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "dtrain/err.h"

typedef struct dt_transport_ops dt_transport_ops;

/* Where a peer may be reached: its host and port, and the endpoint it
 * gave for peers on its own host (NULL or "" when none). */
typedef struct dt_peer_addr {
	const char *host;
	int port;
	const char *local;
} dt_peer_addr;

/* The proof of the job key a same-host connection gives before its
 * listener allocates anything for it (endpoint_listen, endpoint_connect):
 * the same for both ends of a job (dt__auth_local_token over the
 * endpoint's name; all zero without authentication). */
#define DT_LINK_TOKEN_LEN 32

/* arm's flags (below): room rather than bytes; fd quiet since the last
 * arm. */
#define DT_ARM_ROOM  1
#define DT_ARM_QUIET 2

/* One end of a link (or a listener), as a transport made it. */
typedef struct dt_link {
	const dt_transport_ops *ops;
	int fd;     /* what epoll watches; -1 once closed */
	void *priv; /* the transport's own state, if any */
} dt_link;

struct dt_transport_ops {
	const char *name; /* "tcp"; DTRAIN_TRANSPORT names it */

	/* Listen on host:port (port 0: any), or adopt inherited_fd >= 0. */
	dt_err (*listen)(const char *host, int port, int inherited_fd,
	                 dt_link *lis, int *bound_port);
	/* Take one waiting connection: 1 with *out and its peer's address
	 * in addr, 0 when none waits, -1 on an error worth logging (errno). */
	int (*accept)(dt_link *lis, dt_link *out, char *addr, size_t cap);
	/* Connect to host:port, retrying until deadline_ns (dt__now_ns). */
	dt_err (*connect)(const char *host, int port, uint64_t deadline_ns,
	                  const char *what, dt_link *out);

	/* Non-blocking I/O with read(2) / sendmsg(2) semantics: bytes moved,
	 * 0 at the end of the stream (recv), -1 with errno (EAGAIN: nothing
	 * now; EBADMSG: bytes a layer's check refused, the reason in
	 * dt_errmsg). sendv never raises SIGPIPE. */
	ssize_t (*recv)(dt_link *l, void *buf, size_t len);
	ssize_t (*sendv)(dt_link *l, const struct iovec *iov, int iovcnt);
	/* Wait up to timeout_ms (0: just look) for room to send: 1 if
	 * there is room. */
	int (*wait_writable)(dt_link *l, int timeout_ms);
	/* How many bytes of a payload are still to come (0 between frames):
	 * a transport may wake the reader less often meanwhile. Optional. */
	void (*expect)(dt_link *l, uint64_t rest);
	/* End both directions; the reader sees the end of the stream. Any
	 * thread, any number of times. */
	void (*shutdown)(dt_link *l);
	/* Free the link (fd = -1 afterwards). */
	void (*close)(dt_link *l);
	/* A listener: let about n connections wait at once to be accepted
	 * and to prove themselves (a job's joins come all at once, one per
	 * node). Optional (NULL: the transport's own queue). */
	void (*set_queue)(dt_link *lis, int n);

	/*
	 * A transport whose bytes come without waking fd (shared memory)
	 * has these two; NULL otherwise. pending: 1 if bytes wait to be
	 * read (no system call: the van's polling wait asks it; recv's
	 * thread). arm: before the van sleeps on fd, ask for fd to be woken
	 * at the next bytes (room 0, recv's thread), or at the next room to
	 * send (room 1, sendv's thread); 1 if what it would wait for is
	 * there already (do not sleep). Such a link has no EPOLLOUT: room
	 * is reported as fd readable, once armed. Arming for bytes with
	 * DT_ARM_QUIET added (room 2) says that fd was not reported since
	 * the last arm: a doorbell left from before need not be taken (a
	 * system call per link), which keeps a process with many idle
	 * links from paying for each at every sleep.
	 */
	int (*pending)(dt_link *l);
	int (*arm)(dt_link *l, int room);
	/* Bytes a layer over another link (seal.c) has taken from sendv
	 * and not written yet (sendv's thread): they leave at the next
	 * sendv, wait_writable or sendv of no bytes (0 once all are out).
	 * Optional (NULL: 0). */
	size_t (*unsent)(const dt_link *l);
	/* The pid of the process at the other end as the kernel saw it
	 * when the link was made (SO_PEERCRED), or 0 when the transport
	 * cannot tell (TCP). Optional (NULL: 0). */
	int (*peer_pid)(const dt_link *l);

	/*
	 * Reachability (as NCCL's transports answer canConnect): 1 if this
	 * transport can reach peer. The van dials through the first
	 * transport of its list that can, falling back to the next ones if
	 * it refuses, and never names a transport itself. NULL: any peer.
	 */
	int (*can_reach)(const dt_peer_addr *peer);
	/*
	 * A transport that reaches peers through an endpoint named on this
	 * host (shared memory) has these three; NULL otherwise. endpoint_new
	 * writes a fresh name for a listener of this process into name (cap
	 * bytes); endpoint_listen listens there and endpoint_connect
	 * connects to a peer's (peer->local) once, until deadline_ns, each
	 * with the token (DT_LINK_TOKEN_LEN bytes) for that name.
	 */
	dt_err (*endpoint_new)(char *name, size_t cap);
	dt_err (*endpoint_listen)(const char *name, const uint8_t *token,
	                          dt_link *lis);
	dt_err (*endpoint_connect)(const char *name, const uint8_t *token,
	                           uint64_t deadline_ns, const char *what,
	                           dt_link *out);
};

/* The transports built in, by name (NULL-terminated). */
extern const dt_transport_ops *const dt__transports[];
extern const dt_transport_ops dt__tcp_transport;
extern const dt_transport_ops dt__shm_transport;

/*
 * The choice DTRAIN_TRANSPORT makes: out (DT_TRANSPORTS_MAX entries, the
 * last NULL) receives the transports to use in order of preference, the
 * last of them the one that reaches other hosts (TCP): "auto" (the
 * default) puts shared memory first for peers on this host, "tcp" uses
 * TCP alone.
 */
#define DT_TRANSPORTS_MAX 4
dt_err dt__transport_choose(const dt_transport_ops *out[DT_TRANSPORTS_MAX]);
/* Check DTRAIN_SHM_RING and DTRAIN_SHM_COPY_ONCE (shm.c). */
dt_err dt__shm_configure(void);
/* The job's nodes on this host (from the node's assignment), and the ring
 * a link made from now on gets without DTRAIN_SHM_RING (shm.c). */
void dt__shm_fit(int nodes_here);
size_t dt__shm_ring_fit(int nodes_here);
/*
 * The same-host listener and connector (shm.c; its endpoint_listen and
 * endpoint_connect) with the token of DT_LINK_TOKEN_LEN bytes. The ops'
 * listen and connect use an all-zero token.
 */
#define DT_SHM_TOKEN_LEN DT_LINK_TOKEN_LEN
dt_err dt__shm_listen(const char *name, const uint8_t *token, dt_link *lis);
dt_err dt__shm_connect(const char *name, const uint8_t *token,
                       uint64_t deadline_ns, const char *what, dt_link *out);
/*
 * Whether the calling thread serves other peers (the van's dispatching
 * thread: the I/O thread, or a caller polling in dt__van_wait). Such a
 * thread never waits for one peer: the shared-memory transport sends all
 * its bytes through the ring, never as a remote segment the peer could
 * claim and not finish. Set and restored by the van around dispatching;
 * returns the previous value.
 */
int dt__transport_set_serving(int on);
int dt__transport_serving(void);
/* Bytes this process has received as remote segments (copied once,
 * straight from the sender's memory), over all its links. */
uint64_t dt__shm_copied_once(void);

#endif
