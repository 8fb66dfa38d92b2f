/*
 * tcp.c - the TCP transport (transport.h): stream sockets, non-blocking,
 * TCP_NODELAY (set once on a listener, whose accepted sockets inherit it),
 * and a receive low-water mark while a big payload comes in.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"
#include "net/sock.h"
#include "net/transport.h"

#define LOWAT_MIN   (1u << 20)   /* payload rest worth a receive low mark */
#define LOWAT_PIECE (256u << 10) /* ...and the mark */

static int
tune(int fd)
{
	int one = 1;

	return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void
link_init(dt_link *l, int fd)
{
	l->ops = &dt__tcp_transport;
	l->fd = fd;
	l->priv = NULL; /* the SO_RCVLOWAT set now (0: the default) */
}

static dt_err
tcp_listen(const char *host, int port, int inherited_fd, dt_link *lis,
           int *bound_port)
{
	int fd = inherited_fd;
	dt_err err;

	if (fd < 0)
		err = dt__sock_listen(host, port, "this node's socket", &fd,
		                      bound_port);
	else
		err = dt__sock_adopt(fd, bound_port);
	if (err)
		return err;
	if ((err = dt__sock_set_nonblock(fd))) {
		close(fd);
		return err;
	}
	link_init(lis, fd);
	/* Set once here: Linux copies TCP_NODELAY from a listener to the
	 * sockets it accepts, so accepting costs no setsockopt per connection
	 * (a join of thousands of nodes accepts thousands). A listener that
	 * cannot take it (an inherited socket that is not TCP) accepts
	 * sockets that cannot either. */
	(void)tune(fd);
	return DT_OK;
}

/* (the kernel caps the backlog at net.core.somaxconn) */
static void
tcp_set_queue(dt_link *lis, int n)
{
	if (lis->fd >= 0)
		(void)listen(lis->fd, n);
}

static int
tcp_accept(dt_link *lis, dt_link *out, char *addr, size_t cap)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int fd = accept4(lis->fd, (struct sockaddr *)&ss, &len,
		                 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
		}
		dt__sock_addr_str(&ss, addr, cap);
		link_init(out, fd);
		return 1;
	}
}

static dt_err
tcp_connect(const char *host, int port, uint64_t deadline_ns, const char *what,
            dt_link *out)
{
	int fd;
	dt_err err = dt__sock_connect(host, port, deadline_ns, what, &fd);

	if (err)
		return err;
	(void)tune(fd);
	link_init(out, fd);
	return DT_OK;
}

static ssize_t
tcp_recv(dt_link *l, void *buf, size_t len)
{
	return read(l->fd, buf, len);
}

static ssize_t
tcp_sendv(dt_link *l, const struct iovec *iov, int iovcnt)
{
	struct msghdr mh = {.msg_iov = (struct iovec *)iov,
	                    .msg_iovlen = (size_t)iovcnt};

	return sendmsg(l->fd, &mh, MSG_NOSIGNAL);
}

static int
tcp_wait_writable(dt_link *l, int timeout_ms)
{
	struct pollfd pfd = {.fd = l->fd, .events = POLLOUT};

	return poll(&pfd, 1, timeout_ms) == 1 && (pfd.revents & POLLOUT);
}

/*
 * While a big payload comes in, have epoll report the socket readable only
 * once a good piece of it is there (SO_RCVLOWAT): fewer wake-ups and bigger
 * reads. The mark is never more than what is still to come, and is 1
 * between frames.
 */
static void
tcp_expect(dt_link *l, uint64_t rest)
{
	int bytes = rest >= LOWAT_MIN ? (int)LOWAT_PIECE : 1;
	int now = (int)(intptr_t)l->priv;

	if (now == bytes || (now == 0 && bytes == 1))
		return;
	if (setsockopt(l->fd, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes)) ==
	    0)
		l->priv = (void *)(intptr_t)bytes;
}

static void
tcp_shutdown(dt_link *l)
{
	if (l->fd >= 0)
		shutdown(l->fd, SHUT_RDWR);
}

static void
tcp_close(dt_link *l)
{
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
}

/* Any peer with a host and a port. */
static int
tcp_can_reach(const dt_peer_addr *peer)
{
	return peer->host != NULL && *peer->host != '\0' && peer->port > 0 &&
	       peer->port < 65536;
}

const dt_transport_ops dt__tcp_transport = {
    .name = "tcp",
    .can_reach = tcp_can_reach,
    .listen = tcp_listen,
    .accept = tcp_accept,
    .connect = tcp_connect,
    .recv = tcp_recv,
    .sendv = tcp_sendv,
    .wait_writable = tcp_wait_writable,
    .expect = tcp_expect,
    .shutdown = tcp_shutdown,
    .close = tcp_close,
    .set_queue = tcp_set_queue,
};
