/*
 * shm.c - the same-host transport (transport.h): two shared-memory rings
 * (shm_ring.h) per link, one each way, beside a Unix stream socket.
 *
 * The socket (abstract namespace: no file anywhere) carries only the set-up
 * and the end: each side creates the ring it will read and two eventfds,
 * and sends the three descriptors to the other (SCM_RIGHTS) in one message
 * of 24 bytes. Afterwards every byte goes through the rings, and the
 * socket's end (EOF, the peer's process gone, crash included) is the link's
 * end, as with TCP. Nothing has a name, so nothing outlives the processes.
 *
 * The doorbells: "bell" wakes a reader that armed its ring (bytes came),
 * "room" a writer that armed the other ring (room came). A side that polls
 * (the van's polling wait, through pending) arms nothing, so the other
 * side's writes cost it no system call. The descriptor the van watches is
 * an epoll set of the socket, the bell and the room eventfds.
 *
 * The listener admits a connection only once it has passed shm_admit.c's
 * checks (our user, a cap, a proof of the job key), before anything is
 * allocated for it; the connector proves itself the same way.
 *
 * What comes over the socket after the proof is still a stranger's: the
 * message must be exactly one header with exactly three descriptors, the
 * first a sealed memfd of the size announced (shm_ring.c checks it), the
 * other two eventfds; anything else ends the link. After that the rings'
 * positions are checked on every use (shm_ring.c) and the bytes are read
 * like the wire's by the van, authentication first.
 *
 * Threads (transport.h): recv in the van's dispatching thread, sendv and
 * wait_writable under the link's send lock; the acceptor's set-up may be
 * finished by either, under the link's own lock.
 *
 * Size: its ideas are the ring link (set-up with its ring's size,
 * reading and writing, copy-once segments); admission has its own file
 * (shm_admit.c), and the rest shares the link's state, so it stays one
 * file at about 1,100 lines.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/util.h"
#include "common/spin.h"
#include "net/cma.h"
#include "net/shm_admit.h"
#include "net/shm_ring.h"
#include "net/transport.h"

#define SETUP_MAGIC   0x68537464u /* "dtSh" */
#define SETUP_VERSION 2u
#define SETUP_LEN     24
#define RING_DEFAULT  (1u << 20)
#define RING_FIT_MIN  (64u << 10) /* the smallest ring the fit chooses */
#define RING_BUDGET   (64u << 20) /* a process's receive rings, spread */

/* Remote segments (copy once): pieces of DTRAIN_SHM_COPY_ONCE bytes or
 * more that do not fit in the ring's free room are read by the peer
 * straight from the sender's memory. Off by default: a segment has the
 * reader copy alone, through the kernel's walk of the sender's pages,
 * while the sender waits, and costs a wake-up on each side, for every
 * piece the van writes (at most 2 MiB); through the ring both sides copy
 * at once and the reader's copy comes from the cache. A KV push of 1 MiB
 * cost its server 0.145 ms of processor time as a segment and 0.095 ms
 * through the ring (perf, under load), and a push of 16 such keys waited
 * for 16 pairs of wake-ups. */
#define COPY_ONCE_DEFAULT 0
#define SEG_MAX           (1ull << 40)
/* How long a posted segment waits for the reader to claim it before it
 * goes through the ring after all (the reader is busy elsewhere), how long
 * the sender then leaves segments alone, and how long a claimed one may
 * take to be copied. */
#define CLAIM_NS   (20ull * 1000000)
#define BACKOFF_NS (100ull * 1000000)
#define COPY_NS    (30ull * 1000000000)
#define SPIN_NS    (20ull * 1000)

/* A word at a known place with a known value: the peer reads it through
 * cross-memory attach at set-up to learn whether it can read our memory. */
static const volatile uint64_t probe_word = 0x626f725068537464ull;

extern const dt_transport_ops dt__shm_transport;

/* The happens-before edges of links (shm_link.order), by link. */
#define ORDER_SLOTS 1024
static atomic_uint order_slots[ORDER_SLOTS];

static atomic_uint_fast64_t copied_once; /* dt__shm_copied_once */

uint64_t
dt__shm_copied_once(void)
{
	return atomic_load_explicit(&copied_once, memory_order_relaxed);
}

/* What a dt_link's priv is: both structs below start with the kind. */
#define KIND_LINK     1
#define KIND_LISTENER 2

typedef struct shm_link {
	int kind;     /* KIND_LINK */
	int sock;     /* the Unix stream socket */
	int bell_in;  /* rung by the peer: bytes in rx */
	int room_in;  /* rung by the peer: room in tx */
	int bell_out; /* the peer's bell (its rx is our tx) */
	int room_out; /* the peer's room eventfd */
	int rx_fd;    /* our ring's memfd until it is sent */
	dt_ring rx, tx;
	atomic_int ready; /* the peer's set-up has come */
	atomic_int shut;
	/* What a thread did before it sent on the link, the send's own
	 * copy of its buffer included, happens before what a thread that
	 * reads the link afterwards does, as with a socket: both rings carry
	 * this edge (dt_ring.order), released when bytes or a segment are
	 * published and acquired before they are copied out. The bytes' own
	 * path goes through another process, or another mapping of the
	 * ring, neither of which ThreadSanitizer sees: without this edge, a
	 * reply that frees what its request's sender touched last, or lands
	 * where the request was sent from, is reported as a race. Both ends
	 * of a link and both directions use one slot (by the rings' inodes),
	 * so it holds with both ends in one process too. */
	atomic_uint *order;
	ino_t rx_ino;
	pthread_mutex_t setup_mu;
	int cred_pid;         /* SO_PEERCRED's pid of the other end (0: none) */
	int peer_pid;         /* cred_pid once its memory proved readable */
	size_t copy_once;     /* pieces this big go as segments (0: never) */
	uint64_t seg_off_til; /* writer: no segments before (dt__now_ns) */
	uint64_t rseg_addr;   /* reader: the claimed segment's rest */
	uint64_t rseg_left;
} shm_link;

/* A listener: its door (shm_admit.c); lis->fd is the set to watch. */
typedef struct shm_listener {
	int kind; /* KIND_LISTENER */
	dt_shm_admit *door;
} shm_listener;

/* DTRAIN_SHM_COPY_ONCE: the smallest piece sent as a remote segment. */
static dt_err
copy_once_min(size_t *out)
{
	long v;
	dt_err err = dt__env_long("DTRAIN_SHM_COPY_ONCE", COPY_ONCE_DEFAULT, 0,
	                          1L << 40, &v);

	if (err)
		return err;
	if (v != 0 && v < 4096)
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_SHM_COPY_ONCE=%ld: 0 (never) or 4096 "
		                "bytes and more",
		                v);
	*out = (size_t)v;
	return DT_OK;
}

/* The job's nodes on this host (dt__shm_fit), 0 until known. */
static atomic_int local_nodes;

void
dt__shm_fit(int nodes_here)
{
	atomic_store(&local_nodes, nodes_here > 0 ? nodes_here : 0);
}

/*
 * The default ring for a host of `here` job nodes: 1 MiB while a node's
 * receive rings, one per peer on the host, stay within RING_BUDGET (up to
 * 64 nodes), then the largest power of two that keeps them there, at
 * least 64 KiB: with a thousand nodes on a host (a simulation, a big
 * machine) a node would otherwise map a gigabyte of rings. Frames of any
 * size still pass (a ring is a stream; big pieces are copied once).
 */
size_t
dt__shm_ring_fit(int here)
{
	size_t cap = RING_DEFAULT;

	while (here > 0 && cap > RING_FIT_MIN &&
	       cap * (size_t)here > RING_BUDGET)
		cap /= 2;
	return cap;
}

/* DTRAIN_SHM_RING: the bytes of each ring (a power of two); unset, the
 * fit to this host's nodes. */
static dt_err
ring_size(size_t *out)
{
	long v;
	dt_err err =
	    dt__env_long("DTRAIN_SHM_RING",
	                 (long)dt__shm_ring_fit(atomic_load(&local_nodes)),
	                 64 << 10, DT_RING_MAX, &v);

	if (err)
		return err;
	if ((v & (v - 1)) != 0)
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_SHM_RING=%ld: the ring's size must be "
		                "a power of two (65536 to %u)",
		                v, DT_RING_MAX);
	*out = (size_t)v;
	return DT_OK;
}

dt_err
dt__shm_configure(void)
{
	size_t cap, min;
	dt_err err = ring_size(&cap);

	return err ? err : copy_once_min(&min);
}

static void
close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void
shm_free(shm_link *s)
{
	if (s == NULL)
		return;
	dt__ring_unmap(&s->rx);
	dt__ring_unmap(&s->tx);
	close_fd(&s->sock);
	close_fd(&s->bell_in);
	close_fd(&s->room_in);
	close_fd(&s->bell_out);
	close_fd(&s->room_out);
	close_fd(&s->rx_fd);
	pthread_mutex_destroy(&s->setup_mu);
	free(s);
}

/* A link's state around its socket: our ring and eventfds made, the
 * epoll set the van watches in l->fd. */
static dt_err
shm_new(int sock, int cred_pid, dt_link *l)
{
	shm_link *s = dt__calloc(1, sizeof(*s));
	size_t cap = 0;
	dt_err err;

	if (s == NULL) {
		close(sock);
		return DT_ENOMEM;
	}
	s->kind = KIND_LINK;
	s->sock = sock;
	s->cred_pid = cred_pid;
	s->bell_in = s->room_in = s->bell_out = s->room_out = s->rx_fd = -1;
	pthread_mutex_init(&s->setup_mu, NULL);
	l->ops = &dt__shm_transport;
	l->fd = -1;
	l->priv = s;
	if ((err = ring_size(&cap)) || (err = copy_once_min(&s->copy_once)) ||
	    (err = dt__ring_create(cap, &s->rx, &s->rx_fd)))
		goto fail;
	struct stat st;
	s->rx_ino = fstat(s->rx_fd, &st) == 0 ? st.st_ino : 0;
	/* Armed from the start: the van may be asleep already when the
	 * link joins it. */
	(void)dt__ring_arm(&s->rx);
	s->bell_in = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->room_in = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	l->fd = epoll_create1(EPOLL_CLOEXEC);
	if (s->bell_in < 0 || s->room_in < 0 || l->fd < 0) {
		err = dt__fail(DT_ESYS, "shared-memory link: %s",
		               strerror(errno));
		goto fail;
	}
	int fds[3] = {sock, s->bell_in, s->room_in};
	for (int i = 0; i < 3; i++) {
		struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP,
		                         .data.fd = fds[i]};

		if (epoll_ctl(l->fd, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
			err = dt__fail(DT_ESYS, "shared-memory link: %s",
			               strerror(errno));
			goto fail;
		}
	}
	return DT_OK;
fail:
	close_fd(&l->fd);
	shm_free(s);
	l->priv = NULL;
	return err;
}

/* Send our set-up: the header and our three descriptors. The socket is
 * new and empty, so the SETUP_LEN bytes go at once or never. */
static dt_err
send_setup(shm_link *s)
{
	uint8_t hdr[SETUP_LEN];
	int fds[3] = {s->rx_fd, s->bell_in, s->room_in};
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(fds))];
	} ctl;
	struct iovec iov = {hdr, sizeof(hdr)};
	struct msghdr mh = {.msg_iov = &iov,
	                    .msg_iovlen = 1,
	                    .msg_control = ctl.buf,
	                    .msg_controllen = sizeof(ctl.buf)};
	struct cmsghdr *cm;
	ssize_t w;

	memset(&ctl, 0, sizeof(ctl));
	dt__put_u32(hdr, SETUP_MAGIC);
	dt__put_u32(hdr + 4, SETUP_VERSION);
	dt__put_u64(hdr + 8, s->rx.cap);
	dt__put_u64(hdr + 16, (uint64_t)(uintptr_t)&probe_word);
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	do
		w = sendmsg(s->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (w < 0 && errno == EINTR);
	if (w != SETUP_LEN)
		return dt__fail(
		    DT_ECLOSED,
		    "shared-memory link: cannot send the set-up: %s",
		    w < 0 ? strerror(errno) : "short write");
	close_fd(&s->rx_fd); /* the peer has its own now */
	return DT_OK;
}

/* 1 if fd is an eventfd (what the peer says it is). */
static int
is_eventfd(int fd)
{
	char path[64], target[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return 0;
	target[n] = '\0';
	return strcmp(target, "anon_inode:[eventfd]") == 0;
}

/*
 * Whether this process can read the peer's memory (the same user, and a
 * ptrace scope that allows it): read its probe word at the address its
 * set-up gave. If so, tell it (remote_ok in the ring it writes) that it
 * may send big pieces as remote segments.
 */
static void
probe_peer(shm_link *s, uint64_t addr)
{
	uint64_t v = 0;
	dt__err_kept saved;

	if (s->copy_once == 0 || s->cred_pid <= 0)
		return;
	dt__err_keep(&saved, DT_OK);
	if (dt__cma_read(s->cred_pid, &v, addr, sizeof(v)) == DT_OK &&
	    v == probe_word) {
		s->peer_pid = s->cred_pid;
		dt__ring_set_remote_ok(&s->rx);
	}
	dt__err_restore(&saved); /* a refusal is an answer, not an error */
}

/*
 * Take the peer's set-up if it has come (setup_mu held): 1 when the link
 * is ready; -1 with errno EAGAIN when nothing has come yet, or with
 * another errno when the link is done (the reason in dt_errmsg for
 * EPROTO; ECONNRESET: it ended first).
 */
static int
take_setup(shm_link *s)
{
	uint8_t hdr[SETUP_LEN];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} ctl;
	struct iovec iov = {hdr, sizeof(hdr)};
	struct msghdr mh = {.msg_iov = &iov,
	                    .msg_iovlen = 1,
	                    .msg_control = ctl.buf,
	                    .msg_controllen = sizeof(ctl.buf)};
	int fds[4] = {-1, -1, -1, -1}, nfd = 0, bad = 0;
	ssize_t n;

	if (atomic_load(&s->ready))
		return 1;
	do
		n = recvmsg(s->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1; /* EAGAIN: not yet */
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm;
	     cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET ||
		    cm->cmsg_type != SCM_RIGHTS) {
			bad = 1;
			continue;
		}
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		for (size_t i = 0; i < k; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int),
			       sizeof(fd));
			if (nfd < 4)
				fds[nfd++] = fd;
			else
				close(fd);
		}
	}
	dt_err err = DT_OK;
	if (n == 0) {
		errno = ECONNRESET;
		err = dt__fail(DT_ECLOSED, "closed before its set-up");
	} else if (n != SETUP_LEN || bad || nfd != 3 ||
	           (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) ||
	           dt__get_u32(hdr) != SETUP_MAGIC ||
	           dt__get_u32(hdr + 4) != SETUP_VERSION) {
		err = dt__fail(DT_EPROTO,
		               "shared-memory link: the peer's set-up is not "
		               "one header with three descriptors");
	} else if (!is_eventfd(fds[1]) || !is_eventfd(fds[2])) {
		err = dt__fail(DT_EPROTO, "shared-memory link: the peer's "
		                          "doorbells are not eventfds");
	} else {
		uint64_t cap = dt__get_u64(hdr + 8);

		err = cap > DT_RING_MAX
		          ? dt__fail(DT_EPROTO,
		                     "shared-memory link: a ring of %llu "
		                     "bytes was announced",
		                     (unsigned long long)cap)
		          : dt__ring_attach(fds[0], (size_t)cap, &s->tx);
	}
	if (!err) {
		struct stat st;
		ino_t tx_ino = fstat(fds[0], &st) == 0 ? st.st_ino : 0;

		s->order = &order_slots[(s->rx_ino ^ tx_ino) % ORDER_SLOTS];
		s->rx.order = s->order;
		s->tx.order = s->order;
		probe_peer(s, dt__get_u64(hdr + 16));
	}
	if (nfd > 0)
		close(fds[0]); /* mapped, or refused */
	if (err) {
		for (int i = 1; i < nfd; i++)
			close(fds[i]);
		if (errno != ECONNRESET)
			errno = EPROTO;
		return -1;
	}
	s->bell_out = fds[1];
	s->room_out = fds[2];
	/* A peer's eventfd that blocks would stop us: never let it. */
	fcntl(s->bell_out, F_SETFL, O_NONBLOCK);
	fcntl(s->room_out, F_SETFL, O_NONBLOCK);
	atomic_store(&s->ready, 1);
	return 1;
}

static int
setup_done(shm_link *s)
{
	int rc;

	if (atomic_load_explicit(&s->ready, memory_order_acquire))
		return 1;
	pthread_mutex_lock(&s->setup_mu);
	rc = take_setup(s);
	pthread_mutex_unlock(&s->setup_mu);
	return rc;
}

static void
ring_bell(int fd)
{
	uint64_t one = 1;
	ssize_t w;

	do
		w = write(fd, &one, sizeof(one));
	while (w < 0 && errno == EINTR);
	/* EAGAIN: the counter is full, so the peer is rung already */
}

static void
drain(int fd)
{
	uint64_t v;

	while (read(fd, &v, sizeof(v)) < 0 && errno == EINTR) {
	}
}

static dt_err
shm_listen(const char *name, int port, int inherited_fd, dt_link *lis,
           int *bound_port)
{
	static const uint8_t none[DT_SHM_TOKEN_LEN];

	(void)port;
	(void)inherited_fd;
	if (bound_port)
		*bound_port = 0;
	return dt__shm_listen(name, none, lis);
}

dt_err
dt__shm_listen(const char *name, const uint8_t *token, dt_link *lis)
{
	shm_listener *L;
	dt_err err;

	if ((err = dt__shm_configure()))
		return err;
	if ((L = dt__calloc(1, sizeof(*L))) == NULL)
		return DT_ENOMEM;
	L->kind = KIND_LISTENER;
	if ((err = dt__shm_admit_open(name, token, &lis->fd, &L->door))) {
		free(L);
		return err;
	}
	lis->ops = &dt__shm_transport;
	lis->priv = L;
	return DT_OK;
}

static void
shm_set_queue(dt_link *lis, int n)
{
	shm_listener *L = lis->priv;

	if (L && L->kind == KIND_LISTENER)
		dt__shm_admit_set_queue(L->door, n);
}

static void
listener_free(shm_listener *L)
{
	dt__shm_admit_free(L->door);
	free(L);
}

/* A proven connection: make its link and send our set-up; 1, or -1 when
 * out of descriptors or memory (errno), 0 after another refusal. */
static int
admit(shm_listener *L, int fd, int pid, dt_link *out, char *addr, size_t cap)
{
	if (shm_new(fd, pid, out) != DT_OK) {
		int e = errno;

		dt__shm_admit_refuse(L->door, pid, dt_errmsg());
		if (e == EMFILE || e == ENFILE || e == ENOMEM) {
			errno = e; /* the van pauses accepting */
			return -1;
		}
		return 0;
	}
	if (send_setup(out->priv) != DT_OK) {
		out->ops->close(out);
		return 0;
	}
	snprintf(addr, cap, "local pid %d", pid);
	return 1;
}

/* The next connection that proved the job key, with its link made: 1
 * with *out, 0 when none is left to look at, -1 on an error of the
 * listening socket or of resources (errno). */
static int
shm_accept(dt_link *lis, dt_link *out, char *addr, size_t cap)
{
	shm_listener *L = lis->priv;
	int fd, pid, rc;

	for (;;) {
		if ((rc = dt__shm_admit_next(L->door, lis->fd, &fd, &pid)) != 1)
			return rc;
		/* admit closes fd when it refuses */
		if ((rc = admit(L, fd, pid, out, addr, cap)) != 0)
			return rc;
	}
}

static dt_err
shm_connect(const char *name, int port, uint64_t deadline_ns, const char *what,
            dt_link *out)
{
	static const uint8_t none[DT_SHM_TOKEN_LEN];

	(void)port;
	return dt__shm_connect(name, none, deadline_ns, what, out);
}

dt_err
dt__shm_connect(const char *name, const uint8_t *token, uint64_t deadline_ns,
                const char *what, dt_link *out)
{
	struct sockaddr_un sa;
	socklen_t len = 0;
	dt_err err;
	int fd, pid = 0;

	if ((err = dt__shm_abstract_addr(name, &sa, &len)))
		return err;
	/* The link's socket: set-up, then only its end. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return dt__fail(DT_ESYS, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, len) < 0) {
		err =
		    dt__fail(errno == ECONNREFUSED ? DT_ECONNREFUSED : DT_ESYS,
		             "%s at local endpoint @%s: %s", what, name,
		             strerror(errno));
		close(fd);
		return err;
	}
	if ((err = dt__shm_admit_prove(fd, token, what, name, &pid))) {
		close(fd);
		return err;
	}
	if ((err = shm_new(fd, pid, out)))
		return err;
	shm_link *s = out->priv;
	if ((err = send_setup(s)))
		goto fail;
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		uint64_t now = dt__now_ns();

		if (take_setup(s) == 1)
			return DT_OK;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			err = dt__fail(DT_ECLOSED, "%s at @%s: %s", what, name,
			               errno == EPROTO ? dt_errmsg()
			                               : strerror(errno));
			goto fail;
		}
		if (now >= deadline_ns) {
			err = dt__fail(DT_ETIMEDOUT,
			               "%s at @%s did not set up the "
			               "shared-memory link in time",
			               what, name);
			goto fail;
		}
		poll(&p, 1,
		     (int)DT_MIN((deadline_ns - now) / 1000000 + 1, 100));
	}
fail:
	out->ops->close(out);
	return err;
}

/* The socket's end, looked at without waiting: 1 at EOF or an error. */
static int
peer_gone(shm_link *s)
{
	char b;
	ssize_t n = recv(s->sock, &b, 1, MSG_DONTWAIT | MSG_PEEK);

	if (n > 0) { /* nothing may come on the socket after the set-up */
		dt__fail(DT_EPROTO, "shared-memory link: stray bytes on the "
		                    "socket");
		return 1;
	}
	return n == 0 ||
	       (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/*
 * Sleep on a doorbell of ours (fd) until it rings, the peer's socket ends,
 * or *slice_ns passes (at most until end); 1 if the socket ended. The
 * slices start short and double up to 1 ms: the van's I/O thread watches
 * the same doorbells and may take a ring meant for this thread, which
 * then costs at most a slice, and a short wait (the usual case: a reader
 * making room) stays short.
 */
static int
nap(shm_link *s, int fd, uint64_t end, uint64_t *slice_ns)
{
	uint64_t now = dt__now_ns();

	if (now >= end)
		return 0;
	uint64_t t = DT_MIN(*slice_ns, end - now);
	struct timespec ts = {(time_t)(t / 1000000000ull),
	                      (long)(t % 1000000000ull)};
	struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
	                      {.fd = s->sock, .events = POLLRDHUP}};

	if (ppoll(p, 2, &ts, NULL) > 0 && (p[0].revents & POLLIN) &&
	    fd != s->sock)
		drain(fd);
	*slice_ns = DT_MIN(*slice_ns * 2, 1000000ull);
	return (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

/* Reader: the next bytes of the claimed segment, copied from the peer. */
static ssize_t
seg_read(shm_link *s, void *buf, size_t len)
{
	size_t n = (size_t)DT_MIN((uint64_t)len, s->rseg_left);

	if (dt__cma_read(s->peer_pid, buf, s->rseg_addr, n) != DT_OK) {
		if (peer_gone(s))
			return 0; /* it ended mid-segment: its end */
		dt__fail(DT_EPROTO,
		         "shared-memory link: the peer's segment is not "
		         "readable: %s",
		         dt_errmsg());
		errno = EPROTO;
		return -1;
	}
	atomic_fetch_add_explicit(&copied_once, n, memory_order_relaxed);
	s->rseg_addr += n;
	s->rseg_left -= n;
	if (s->rseg_left == 0) {
		dt__ring_seg_done(&s->rx);
		ring_bell(s->room_out); /* its sender waits for this */
	}
	return (ssize_t)n;
}

/* Reader: claim a segment posted at our place: 1, 0 (none), -1 (EPROTO). */
static int
seg_take(shm_link *s)
{
	uint64_t addr, len;
	int rc = dt__ring_seg_claim(&s->rx, SEG_MAX, &addr, &len);

	if (rc == 1 && s->peer_pid == 0) {
		dt__fail(DT_EPROTO, "shared-memory link: the peer sent a "
		                    "remote segment, which it was not offered");
		rc = -1;
	}
	if (rc < 0) {
		errno = EPROTO;
		return -1;
	}
	if (rc == 1) {
		s->rseg_addr = addr;
		s->rseg_left = len;
	}
	return rc;
}

static ssize_t
shm_recv(dt_link *l, void *buf, size_t len)
{
	shm_link *s = l->priv;
	int rc = setup_done(s);
	ssize_t n;

	if (rc < 0)
		return errno == ECONNRESET ? 0 : -1;
again:
	if (s->rseg_left > 0)
		return seg_read(s, buf, len);
	n = dt__ring_read(&s->rx, buf, len);
	if (n > 0) {
		if (dt__ring_wake(&s->rx))
			ring_bell(s->room_out);
		return n;
	}
	if (n < 0)
		return n; /* EPROTO */
	if ((rc = seg_take(s)) != 0) {
		if (rc < 0)
			return -1;
		goto again;
	}
	if (atomic_load(&s->shut))
		return 0;
	if (peer_gone(s)) {
		/* What the peer wrote before it went still counts. */
		n = dt__ring_read(&s->rx, buf, len);
		if (n > 0 && dt__ring_wake(&s->rx))
			ring_bell(s->room_out);
		return n;
	}
	/* Empty: whoever sleeps on l->fd next is woken by the next write.
	 * (A bell taken here is always followed by arming again: the bell
	 * may have been the one a sleeping I/O thread waits for.) */
	drain(s->bell_in);
	if (dt__ring_arm(&s->rx))
		goto again;
	errno = EAGAIN;
	return -1;
}

/* Writer: put what fits of iov in the ring, waking the reader. */
static ssize_t
ring_send(shm_link *s, const struct iovec *iov, int iovcnt)
{
	ssize_t n = dt__ring_write(&s->tx, iov, iovcnt);

	if (n > 0) {
		if (dt__ring_wake(&s->tx))
			ring_bell(s->bell_out);
		return n;
	}
	if (n == 0) {
		size_t want = 0;

		for (int i = 0; i < iovcnt; i++)
			want += iov[i].iov_len;
		if (want == 0)
			return 0;
		errno = peer_gone(s) ? EPIPE : EAGAIN;
	}
	return -1;
}

/*
 * Writer: the first piece of iov to send as a remote segment, or -1: one
 * of DTRAIN_SHM_COPY_ONCE bytes or more that does not fit in the ring's
 * free room after what comes before it (*before bytes). What fits goes
 * through the ring even so: the call then returns at once, where a
 * segment waits for the reader (two wake-ups on a busy machine) to save a
 * copy. Small sends look at their lengths only. Never from a thread that
 * serves other peers (the van's dispatching thread answering a pull): a
 * peer could claim the segment and not copy it, and such a thread must
 * not wait for one peer; its bytes go through the ring, where a peer that
 * does not read only fills the ring, and the van queues the rest.
 */
static int
big_piece(shm_link *s, const struct iovec *iov, int iovcnt, size_t *before)
{
	ssize_t room = -1;

	/* A thread that serves others never waits for this peer to copy. */
	if (s->copy_once == 0 || dt__transport_serving())
		return -1;
	*before = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len >= s->copy_once) {
			if (room < 0 && (!dt__ring_remote_ok(&s->tx) ||
			                 (s->seg_off_til &&
			                  dt__now_ns() < s->seg_off_til) ||
			                 (room = dt__ring_ready(&s->tx)) < 0))
				return -1;
			if (*before + iov[i].iov_len > (size_t)room)
				return i;
		}
		*before += iov[i].iov_len;
	}
	return -1;
}

/*
 * Writer: send len bytes at p as a remote segment: 1 when the reader has
 * copied them all, 0 when it did not claim them in time (taken back: send
 * them through the ring), -1 when the link is done (errno).
 */
static int
seg_send(shm_link *s, const void *p, size_t len)
{
	uint64_t now = dt__now_ns(), claim_end = now + CLAIM_NS,
	         end = now + COPY_NS, spin_end = now + SPIN_NS, slice = 20000;

	dt__ring_seg_post(&s->tx, (uint64_t)(uintptr_t)p, len);
	if (dt__ring_wake(&s->tx))
		ring_bell(s->bell_out);
	for (;;) {
		int st = dt__ring_seg_state(&s->tx);

		if (st == DT_SEG_DONE)
			return 1;
		if (st < 0) {
			dt__fail(DT_EPROTO, "shared-memory link: the reader "
			                    "broke the segment's state");
			errno = EPROTO;
			return -1;
		}
		now = dt__now_ns();
		if (now < spin_end) {
			dt__cpu_relax();
			continue;
		}
		if (st == DT_SEG_POSTED && now >= claim_end &&
		    dt__ring_seg_cancel(&s->tx))
			return 0;
		if (atomic_load(&s->shut) || peer_gone(s)) {
			errno = EPIPE;
			return -1;
		}
		if (now >= end) {
			dt__fail(DT_ETIMEDOUT,
			         "shared-memory link: the reader took more "
			         "than %llu s to copy a segment",
			         COPY_NS / 1000000000ull);
			errno = ETIMEDOUT;
			return -1;
		}
		/* The reader rings our room doorbell when it is done. */
		(void)nap(s, s->room_in, claim_end > now ? claim_end : end,
		          &slice);
	}
}

static ssize_t
shm_sendv(dt_link *l, const struct iovec *iov, int iovcnt)
{
	shm_link *s = l->priv;
	int rc = setup_done(s), k;
	ssize_t n = 0, m;
	size_t before;

	if (rc < 0) {
		if (errno == ECONNRESET)
			errno = EPIPE;
		return -1;
	}
	if (atomic_load(&s->shut)) {
		errno = EPIPE;
		return -1;
	}
	if ((k = big_piece(s, iov, iovcnt, &before)) < 0)
		return ring_send(s, iov, iovcnt);
	/* What comes before the big piece goes first, all of it. */
	if (before > 0 &&
	    ((n = ring_send(s, iov, k)) < 0 || (size_t)n < before))
		return n;
	rc = seg_send(s, iov[k].iov_base, iov[k].iov_len);
	if (rc == 1)
		return n + (ssize_t)iov[k].iov_len;
	if (rc < 0) {
		/* The stream cannot go on after a segment that failed. */
		int e = errno;

		atomic_store(&s->shut, 1);
		shutdown(s->sock, SHUT_RDWR);
		errno = e;
		return -1;
	}
	/* Not claimed in time (the reader is busy): through the ring, and no
	 * segments for a while. */
	s->seg_off_til = dt__now_ns() + BACKOFF_NS;
	m = ring_send(s, iov + k, iovcnt - k);
	if (m < 0)
		return n > 0 ? n : -1;
	return n + m;
}

static int
shm_wait_writable(dt_link *l, int timeout_ms)
{
	shm_link *s = l->priv;
	uint64_t end = dt__now_ns() + (uint64_t)timeout_ms * 1000000ull,
	         slice = 20000;

	for (;;) {
		int rc = setup_done(s);

		if (rc < 0 && errno == EAGAIN)
			rc = 0; /* the peer's set-up is still to come */
		if (rc < 0 || atomic_load(&s->shut))
			return 1; /* sendv reports it */
		if (rc == 1) {
			ssize_t room = dt__ring_ready(&s->tx);

			if (room != 0)
				return 1; /* room, or a broken ring to report */
			if (dt__ring_arm(&s->tx))
				return 1;
		}
		if (dt__now_ns() >= end)
			return 0;
		/* The reader rings our room doorbell when it reads (the set-up
		 * comes on the socket). */
		if (nap(s, rc == 1 ? s->room_in : s->sock, end, &slice))
			return 1;
	}
}

static void
shm_shutdown(dt_link *l)
{
	shm_link *s = l->priv;

	if (s == NULL)
		return;
	atomic_store(&s->shut, 1);
	shutdown(s->sock, SHUT_RDWR);
}

static void
shm_close(dt_link *l)
{
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
	if (l->priv && *(const int *)l->priv == KIND_LISTENER)
		listener_free(l->priv);
	else
		shm_free(l->priv);
	l->priv = NULL;
}

static int
shm_peer_pid(const dt_link *l)
{
	const shm_link *s = l->priv;

	return s && s->kind == KIND_LINK && s->cred_pid > 0 ? s->cred_pid : 0;
}

static int
shm_pending(dt_link *l)
{
	shm_link *s = l->priv;

	return atomic_load_explicit(&s->ready, memory_order_acquire) &&
	       (s->rseg_left > 0 || dt__ring_ready(&s->rx) != 0);
}

static int
shm_arm(dt_link *l, int room)
{
	shm_link *s = l->priv;

	if (!atomic_load_explicit(&s->ready, memory_order_acquire))
		return 0; /* the set-up comes on the socket */
	if (room & DT_ARM_ROOM)
		return dt__ring_arm(&s->tx);
	/* Before the van sleeps: take the bells rung since (they woke it, or
	 * are stale; either way arming again covers what comes next). The
	 * polling side never takes a bell without arming again, so none
	 * meant for a sleeping thread is lost. A link whose descriptor was
	 * not reported since the last arm has no bell to take: had one
	 * rung, its descriptor would have been reported (DT_ARM_QUIET). */
	if (!(room & DT_ARM_QUIET)) {
		drain(s->bell_in);
		drain(s->room_in);
	}
	return dt__ring_arm(&s->rx) || s->rseg_left > 0;
}

/* A peer that gave its same-host endpoint (it is on this host). */
static int
shm_can_reach(const dt_peer_addr *peer)
{
	return peer->local != NULL && *peer->local != '\0';
}

/* A fresh listener name: this process's, with a random part, so a token
 * made for it (dt__auth_local_token) is good for this listener only. */
static dt_err
shm_endpoint_new(char *name, size_t cap)
{
	uint64_t nonce;

	if (getrandom(&nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
		return dt__fail(DT_ESYS, "getrandom: %s", strerror(errno));
	snprintf(name, cap, "dtrain.%d.%016llx", (int)getpid(),
	         (unsigned long long)nonce);
	return DT_OK;
}

const dt_transport_ops dt__shm_transport = {
    .name = "shm",
    .can_reach = shm_can_reach,
    .endpoint_new = shm_endpoint_new,
    .endpoint_listen = dt__shm_listen,
    .endpoint_connect = dt__shm_connect,
    .listen = shm_listen,
    .accept = shm_accept,
    .connect = shm_connect,
    .recv = shm_recv,
    .sendv = shm_sendv,
    .wait_writable = shm_wait_writable,
    .shutdown = shm_shutdown,
    .close = shm_close,
    .set_queue = shm_set_queue,
    .pending = shm_pending,
    .arm = shm_arm,
    .peer_pid = shm_peer_pid,
};
