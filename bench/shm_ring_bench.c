/*
 * shm_ring_bench.c - the shared-memory ring (src/net/shm_ring.c) against
 * the sockets it is to replace between processes of one host: an echo
 * round trip of SIZE bytes between this process and a forked one.
 *
 *   build/bench/shm_ring_bench [--json] [--quick]
 *
 * Columns (median round trip, microseconds, of the same run):
 *   ring   - two rings, both readers polling (the van's polling wait);
 *   ring+bell - the reader arms the ring and sleeps on an eventfd each
 *            time (the cost when nobody polls);
 *   tcp    - a loopback TCP connection, TCP_NODELAY, blocking calls;
 *   unix   - a Unix stream socket pair, blocking calls.
 * Then tcp/ring, the speed-up over today's transport. --json prints one
 * object per size with the same fields.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "net/shm_ring.h"

#define RING_CAP (1u << 20)

static double
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int
cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void
die(const char *what)
{
	fprintf(stderr, "shm_ring_bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* One end of a ring pair: what it reads and what it writes, and the
 * eventfd that wakes its reader (bell: sleep on it each time). */
typedef struct end {
	dt_ring rx, tx;
	int rx_bell, tx_bell, bell;
} end;

static int
ring_send(end *e, const uint8_t *buf, size_t n)
{
	size_t off = 0;

	while (off < n) {
		struct iovec iov = {(void *)(buf + off), n - off};
		ssize_t w = dt__ring_write(&e->tx, &iov, 1);

		if (w < 0)
			return -1;
		off += (size_t)w;
		if (w > 0 && dt__ring_wake(&e->tx)) {
			uint64_t one = 1;

			if (write(e->tx_bell, &one, 8) != 8)
				return -1;
		}
	}
	return 0;
}

static int
ring_recv(end *e, uint8_t *buf, size_t n)
{
	size_t off = 0;

	while (off < n) {
		ssize_t r = dt__ring_read(&e->rx, buf + off, n - off);

		if (r < 0)
			return -1;
		off += (size_t)r;
		if (r > 0 || !e->bell)
			continue;
		if (dt__ring_arm(&e->rx))
			continue;
		struct pollfd p = {e->rx_bell, POLLIN, 0};
		uint64_t v;

		if (poll(&p, 1, 10000) != 1 || read(e->rx_bell, &v, 8) != 8)
			return -1;
	}
	return 0;
}

static int
full_io(int fd, void *buf, size_t n, int wr)
{
	uint8_t *p = buf;

	while (n > 0) {
		ssize_t k = wr ? write(fd, p, n) : read(fd, p, n);

		if (k <= 0) {
			if (k < 0 && errno == EINTR)
				continue;
			return -1;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

enum { RING, BELL, TCP, UNIX_SOCK, NKIND };
static const char *const kind_name[NKIND] = {"ring", "ring_bell", "tcp",
                                             "unix"};

/* A connected pair of the kind (sockets), or -1s. */
static void
sock_pair(int kind, int fd[2])
{
	if (kind == UNIX_SOCK) {
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, fd) != 0)
			die("socketpair");
		return;
	}
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int one = 1, lis = socket(AF_INET, SOCK_STREAM, 0);

	if (lis < 0 || bind(lis, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    listen(lis, 1) != 0 ||
	    getsockname(lis, (struct sockaddr *)&a, &len) != 0)
		die("listen");
	fd[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (fd[0] < 0 || connect(fd[0], (struct sockaddr *)&a, sizeof(a)) != 0)
		die("connect");
	if ((fd[1] = accept(lis, NULL, NULL)) < 0)
		die("accept");
	close(lis);
	setsockopt(fd[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Median round trip (us) of iters echoes of size bytes. */
static double
measure(int kind, size_t size, int iters)
{
	uint8_t *buf = malloc(size);
	double *t = malloc(sizeof(double) * (size_t)iters);
	end me = {0}, peer = {0};
	int fd[2] = {-1, -1}, st;

	if (!buf || !t)
		die("malloc");
	memset(buf, 7, size);
	if (kind == RING || kind == BELL) {
		int a, b;

		/* each reader creates its ring */
		if (dt__ring_create(RING_CAP, &me.rx, &a) != DT_OK ||
		    dt__ring_create(RING_CAP, &peer.rx, &b) != DT_OK ||
		    dt__ring_attach(a, RING_CAP, &peer.tx) != DT_OK ||
		    dt__ring_attach(b, RING_CAP, &me.tx) != DT_OK) {
			fprintf(stderr, "shm_ring_bench: %s\n", dt_errmsg());
			exit(1);
		}
		close(a);
		close(b);
		me.rx_bell = peer.tx_bell = eventfd(0, EFD_CLOEXEC);
		peer.rx_bell = me.tx_bell = eventfd(0, EFD_CLOEXEC);
		me.bell = peer.bell = kind == BELL;
	} else {
		sock_pair(kind, fd);
	}
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		for (int i = 0; i < iters + 10; i++) {
			int bad = kind <= BELL
			              ? ring_recv(&peer, buf, size) ||
			                    ring_send(&peer, buf, size)
			              : full_io(fd[1], buf, size, 0) ||
			                    full_io(fd[1], buf, size, 1);
			if (bad)
				_exit(1);
		}
		_exit(0);
	}
	for (int i = -10; i < iters; i++) {
		double t0 = now_us();
		int bad = kind <= BELL ? ring_send(&me, buf, size) ||
		                             ring_recv(&me, buf, size)
		                       : full_io(fd[0], buf, size, 1) ||
		                             full_io(fd[0], buf, size, 0);
		if (bad) {
			kill(pid, SIGKILL);
			die(kind_name[kind]);
		}
		if (i >= 0)
			t[i] = now_us() - t0;
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0)
		die("the echo process failed");
	if (kind <= BELL) {
		dt__ring_unmap(&me.rx);
		dt__ring_unmap(&me.tx);
		dt__ring_unmap(&peer.rx);
		dt__ring_unmap(&peer.tx);
		close(me.rx_bell);
		close(me.tx_bell);
	} else {
		close(fd[0]);
		close(fd[1]);
	}
	qsort(t, (size_t)iters, sizeof(double), cmp_d);
	double med = t[iters / 2];
	free(t);
	free(buf);
	return med;
}

int
main(int argc, char **argv)
{
	static const size_t sizes[] = {64, 4096, 65536, 1u << 20, 16u << 20};
	int json = 0, quick = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--quick") == 0)
			quick = 1;
		else {
			fprintf(stderr,
			        "usage: shm_ring_bench [--json] [--quick]\n");
			return 2;
		}
	}
	if (!json)
		printf("echo round trip between two processes, median us "
		       "(ring: %u KiB)\n%-8s | %9s %9s %9s %9s | %7s\n",
		       RING_CAP >> 10, "size", "ring", "ring+bell", "tcp",
		       "unix", "tcp/ring");
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t size = sizes[k];
		double r[NKIND];
		size_t budget = quick ? (64u << 20) : (512u << 20);
		int iters = (int)(budget / (2 * size));

		if (iters > (quick ? 2000 : 20000))
			iters = quick ? 2000 : 20000;
		if (iters < 5)
			iters = 5;
		for (int kind = 0; kind < NKIND; kind++)
			r[kind] = measure(kind, size, iters);
		if (json)
			printf("{\"size\": %zu, \"iters\": %d, \"ring_us\": "
			       "%.2f, \"ring_bell_us\": %.2f, \"tcp_us\": "
			       "%.2f, \"unix_us\": %.2f, \"tcp_over_ring\": "
			       "%.2f}\n",
			       size, iters, r[RING], r[BELL], r[TCP],
			       r[UNIX_SOCK], r[TCP] / r[RING]);
		else
			printf("%-8zu | %9.2f %9.2f %9.2f %9.2f | %7.2f\n",
			       size, r[RING], r[BELL], r[TCP], r[UNIX_SOCK],
			       r[TCP] / r[RING]);
		fflush(stdout);
	}
	return 0;
}
