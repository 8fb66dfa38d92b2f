/*
 * net_bench.c - round-trip latency and streaming throughput between two
 * nodes over dtrain's transport (the van, src/net/van*.c), each measured
 * beside a plain TCP socket pair in the same run, for messages of 8 B to
 * 16 MiB.
 *
 * Both sides of every measurement are separate processes (fork), talking
 * over 127.0.0.1, so they share nothing but the kernel - as two nodes on
 * one host do. The two transports get the same pattern:
 *   - round trip: the client sends one message of the size, the server
 *     echoes it back, the client waits for the whole echo; p50 and p99
 *     over many round trips after a warm-up;
 *   - throughput: the client sends N messages back to back, the server
 *     reads each one whole and answers the last with a small ack; payload
 *     bits over the time from the first send to the ack (median of 3).
 * Plain TCP is blocking sockets with TCP_NODELAY, one write per message
 * and read loops filling a buffer of the message's size. dtrain is the van
 * as the layers above use it: the client's thread sends, the van's I/O
 * thread receives the reply into the client's buffer (payload_dest, as a
 * pull does) and wakes the client's thread; the server echoes from its
 * I/O thread.
 *
 *   build/bench/net_bench [--json] [--quick] [--size BYTES]
 *
 * --quick runs a twentieth of the iterations (a smoke test); --size runs
 * one of the sizes only (for profiling).
 * --json prints one JSON object per size with the fields size,
 * dtrain_rtt_us, tcp_rtt_us, rtt_ratio, dtrain_gbps, tcp_gbps, gbps_ratio
 * (and the p99s). The targets: small-message round trip <= 1.5x
 * the plain socket's; 16 MiB throughput >= 0.9x.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/spin.h"
#include "common/util.h"
#include "net/van.h"

#define CMD_PING DT_CMD_KV_FIRST
#define CMD_DATA (DT_CMD_KV_FIRST + 1)
#define CMD_ACK  (DT_CMD_KV_FIRST + 2)

static const size_t sizes[] = {8, 64, 1024, 4096, 65536, 1u << 20, 16u << 20};

typedef struct plan {
	int rtt_iters;
	int rtt_warmup;
	int stream_count;
} plan;

static int quick;

static plan
plan_for(size_t size)
{
	plan p;

	if (size <= 65536) {
		p.rtt_iters = 5000;
		p.rtt_warmup = 500;
	} else if (size <= (1u << 20)) {
		p.rtt_iters = 300;
		p.rtt_warmup = 30;
	} else {
		p.rtt_iters = 30;
		p.rtt_warmup = 3;
	}
	/* Stream at least 256 MiB, or 100000 messages of small sizes. */
	p.stream_count = (int)DT_MAX((size_t)8, (256u << 20) / size);
	if (p.stream_count > 100000)
		p.stream_count = 100000;
	if (quick) {
		p.rtt_iters = DT_MAX(p.rtt_iters / 20, 5);
		p.rtt_warmup = DT_MAX(p.rtt_warmup / 10, 1);
		p.stream_count = DT_MAX(p.stream_count / 20, 4);
	}
	return p;
}

static void
die(const char *what)
{
	fprintf(stderr, "net_bench: %s: %s\n", what,
	        errno ? strerror(errno) : dt_errmsg());
	exit(1);
}

static double
now_us(void)
{
	return (double)dt__now_ns() / 1e3;
}

static double
percentile(double *v, int n, double q)
{
	int i;

	qsort(v, (size_t)n, sizeof(*v), dt__cmp_double);
	i = (int)(q * (n - 1) + 0.5);
	return v[i];
}

/* ------------------------------------------------------------------ */
/* Plain TCP: blocking sockets, TCP_NODELAY.                           */

static int
listen_local(int *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		die("socket");
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		die("bind/listen");
	*port = ntohs(sa.sin_port);
	return fd;
}

static void
nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int
tcp_connect(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect");
	nodelay(fd);
	return fd;
}

static int
read_full(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int
write_full(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The server side: echo every message, or read count and ack. */
static void
tcp_server(int lfd, size_t size, int rtt, int count)
{
	int fd = accept(lfd, NULL, NULL);
	uint8_t *buf = malloc(size);
	char ack = 'k';

	if (fd < 0 || buf == NULL)
		_exit(1);
	nodelay(fd);
	if (rtt) {
		while (read_full(fd, buf, size) == 0)
			if (write_full(fd, buf, size) != 0)
				break;
	} else {
		for (int i = 0; i < count; i++)
			if (read_full(fd, buf, size) != 0)
				_exit(1);
		write_full(fd, &ack, 1);
		while (read(fd, buf, size) > 0) {
		}
	}
	_exit(0);
}

static pid_t
tcp_fork(size_t size, int rtt, int count, int *cfd)
{
	int port, lfd = listen_local(&port);
	pid_t pid = fork();

	if (pid < 0)
		die("fork");
	if (pid == 0)
		tcp_server(lfd, size, rtt, count);
	close(lfd);
	*cfd = tcp_connect(port);
	return pid;
}

static void
reap(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0) {
		fprintf(stderr, "net_bench: the server process failed\n");
		exit(1);
	}
}

static void
tcp_rtt(size_t size, plan p, double *p50, double *p99)
{
	uint8_t *out = malloc(size), *in = malloc(size);
	double *t = malloc(sizeof(double) * (size_t)p.rtt_iters);
	int fd;
	pid_t pid;

	if (!out || !in || !t)
		die("malloc");
	memset(out, 0x5a, size);
	pid = tcp_fork(size, 1, 0, &fd);
	for (int i = -p.rtt_warmup; i < p.rtt_iters; i++) {
		double t0 = now_us();

		out[0] = (uint8_t)i;
		if (write_full(fd, out, size) || read_full(fd, in, size))
			die("tcp round trip");
		if (i >= 0)
			t[i] = now_us() - t0;
	}
	if (memcmp(in, out, size) != 0)
		die("tcp echo differs");
	close(fd);
	reap(pid);
	*p50 = percentile(t, p.rtt_iters, 0.5);
	*p99 = percentile(t, p.rtt_iters, 0.99);
	free(out);
	free(in);
	free(t);
}

static double
tcp_stream(size_t size, plan p)
{
	uint8_t *out = malloc(size);
	char ack;
	double t0, us;
	int fd;
	pid_t pid;

	if (!out)
		die("malloc");
	memset(out, 0x33, size);
	pid = tcp_fork(size, 0, p.stream_count, &fd);
	t0 = now_us();
	for (int i = 0; i < p.stream_count; i++)
		if (write_full(fd, out, size))
			die("tcp stream");
	if (read_full(fd, &ack, 1))
		die("tcp ack");
	us = now_us() - t0;
	close(fd);
	reap(pid);
	free(out);
	return (double)size * p.stream_count * 8 / (us * 1e3);
}

/* ------------------------------------------------------------------ */
/* dtrain: two vans.                                                   */

typedef struct vside {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t got;   /* messages received (client) */
	dt_gen got_gen; /* bumped with got, for the spin (common/spin.h) */
	int closed;     /* the peer hung up (server) */
	dt_van *van;
	uint8_t *dest; /* the client's receive buffer */
	size_t dest_cap;
	int rtt; /* server: echo; else ack the last DATA */
} vside;

static void
vside_init(vside *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
}

static void
server_on_msg(void *arg, dt_conn *c, dt_msg *m)
{
	vside *s = arg;
	dt_msg_hdr h = {.cmd = CMD_ACK, .seq = m->hdr.seq};

	if (m->hdr.cmd == CMD_PING) {
		struct iovec iov = {m->payload, m->hdr.payload_len};

		h.cmd = CMD_PING;
		if (dt__van_send(s->van, c, &h, NULL, 0, &iov, 1))
			die("echo");
	} else if (m->hdr.cmd == CMD_DATA && m->hdr.arg0 == 1) {
		if (dt__van_send(s->van, c, &h, NULL, 0, NULL, 0))
			die("ack");
	}
}

static void
on_close(void *arg, dt_conn *c, dt_err why)
{
	vside *s = arg;

	(void)c;
	(void)why;
	pthread_mutex_lock(&s->mu);
	s->closed = 1;
	dt__gen_bump(&s->got_gen);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void
client_on_msg(void *arg, dt_conn *c, dt_msg *m)
{
	vside *s = arg;

	(void)c;
	(void)m;
	pthread_mutex_lock(&s->mu);
	s->got++;
	dt__gen_bump(&s->got_gen);
	pthread_mutex_unlock(&s->mu);
	/* Signal after unlocking, or the woken thread blocks on the mutex
	 * at once: a second futex round trip, ~1-3 us here. */
	pthread_cond_signal(&s->cv);
}

static void *
client_dest(void *arg, dt_conn *c, const dt_msg_hdr *h, const uint8_t *meta)
{
	vside *s = arg;

	(void)c;
	(void)meta;
	return h->payload_len <= s->dest_cap ? s->dest : NULL;
}

static void
van_server(int lfd)
{
	vside s;
	dt_van_hooks hooks = {
	    .arg = &s, .on_msg = server_on_msg, .on_close = on_close};
	int port;

	vside_init(&s);
	if (dt__van_create(&hooks, &s.van) ||
	    dt__van_listen(s.van, NULL, 0, lfd, &port) || dt__van_start(s.van))
		_exit(1);
	pthread_mutex_lock(&s.mu);
	while (!s.closed)
		pthread_cond_wait(&s.cv, &s.mu);
	pthread_mutex_unlock(&s.mu);
	dt__van_destroy(s.van);
	_exit(0);
}

static pid_t
van_fork(vside *s, dt_conn **c)
{
	int port, lfd = listen_local(&port);
	dt_van_hooks hooks = {.arg = s,
	                      .on_msg = client_on_msg,
	                      .payload_dest = client_dest,
	                      .on_close = on_close};
	pid_t pid;

	fflush(NULL);
	pid = fork(); /* before any thread of this process starts */
	if (pid < 0)
		die("fork");
	if (pid == 0)
		van_server(lfd);
	close(lfd);
	if (dt__van_create(&hooks, &s->van) || dt__van_start(s->van) ||
	    dt__van_connect(s->van, "127.0.0.1", port, NULL, 10000,
	                    "bench server", c))
		die("van");
	return pid;
}

static void
wait_got(vside *s, uint64_t want)
{
	/* Wait as the library's callers do (kv/client.c, coll/comm.c). */
	pthread_mutex_lock(&s->mu);
	while (s->got < want && !s->closed)
		dt__van_wait(s->van, &s->got_gen, &s->mu, &s->cv, 0);
	pthread_mutex_unlock(&s->mu);
	if (s->got < want)
		die("the bench server hung up");
}

static void
van_rtt(size_t size, plan p, double *p50, double *p99)
{
	uint8_t *out = malloc(size);
	double *t = malloc(sizeof(double) * (size_t)p.rtt_iters);
	vside s;
	dt_conn *c;
	pid_t pid;

	vside_init(&s);
	s.dest_cap = size;
	s.dest = malloc(size);
	if (!out || !t || !s.dest)
		die("malloc");
	memset(out, 0x5a, size);
	pid = van_fork(&s, &c);
	for (int i = -p.rtt_warmup; i < p.rtt_iters; i++) {
		dt_msg_hdr h = {.cmd = CMD_PING, .seq = (uint64_t)i};
		struct iovec iov = {out, size};
		double t0 = now_us();

		out[0] = (uint8_t)i;
		if (dt__van_send(s.van, c, &h, NULL, 0, &iov, 1))
			die("van send");
		wait_got(&s, (uint64_t)(i + p.rtt_warmup + 1));
		if (i >= 0)
			t[i] = now_us() - t0;
	}
	if (memcmp(s.dest, out, size) != 0)
		die("van echo differs");
	dt__van_destroy(s.van);
	reap(pid);
	*p50 = percentile(t, p.rtt_iters, 0.5);
	*p99 = percentile(t, p.rtt_iters, 0.99);
	free(out);
	free(t);
	free(s.dest);
}

static double
van_stream(size_t size, plan p)
{
	uint8_t *out = malloc(size);
	vside s;
	dt_conn *c;
	double t0, us;
	pid_t pid;

	if (!out)
		die("malloc");
	memset(out, 0x33, size);
	vside_init(&s);
	pid = van_fork(&s, &c);
	t0 = now_us();
	for (int i = 0; i < p.stream_count; i++) {
		dt_msg_hdr h = {.cmd = CMD_DATA,
		                .seq = (uint64_t)i,
		                .arg0 = i == p.stream_count - 1};
		struct iovec iov = {out, size};

		if (dt__van_send(s.van, c, &h, NULL, 0, &iov, 1))
			die("van stream");
	}
	wait_got(&s, 1);
	us = now_us() - t0;
	dt__van_destroy(s.van);
	reap(pid);
	free(out);
	return (double)size * p.stream_count * 8 / (us * 1e3);
}

/* ------------------------------------------------------------------ */

static double
median3(double a, double b, double c)
{
	double v[3] = {a, b, c};

	qsort(v, 3, sizeof(double), dt__cmp_double);
	return v[1];
}

static void
fmt_size(size_t n, char *out, size_t cap)
{
	if (n >= (1u << 20))
		snprintf(out, cap, "%zu MiB", n >> 20);
	else if (n >= 1024)
		snprintf(out, cap, "%zu KiB", n >> 10);
	else
		snprintf(out, cap, "%zu B", n);
}

int
main(int argc, char **argv)
{
	int json = 0;
	size_t only = 0;
	double small_ratio_max = 0, big_ratio = 0;

	/* Both vans are this process's: a secret of its own, unless the
	 * environment chose (DTRAIN_ENCRYPT=1 measures encrypted frames). */
	if (!getenv("DTRAIN_SECRET") && !getenv("DTRAIN_SECRET_FILE") &&
	    !getenv("DTRAIN_AUTH")) {
		unsigned char raw[32];
		char hex[65];

		if (sodium_init() < 0)
			return 1;
		randombytes_buf(raw, sizeof(raw));
		sodium_bin2hex(hex, sizeof(hex), raw, sizeof(raw));
		setenv("DTRAIN_SECRET", hex, 1);
	}

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = 1;
		} else if (strcmp(argv[i], "--quick") == 0) {
			quick = 1;
		} else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
			only = (size_t)strtoull(argv[++i], NULL, 10);
		} else {
			fprintf(stderr, "usage: net_bench [--json] [--quick] "
			                "[--size BYTES]\n");
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	if (!json) {
		printf("dtrain van vs plain TCP over 127.0.0.1 (two "
		       "processes)%s\n",
		       quick ? ", --quick" : "");
		printf("%-8s | %19s | %19s | %5s | %8s | %8s | %5s\n", "",
		       "dtrain RTT us", "TCP RTT us", "RTT", "dtrain", "TCP",
		       "tput");
		printf("%-8s | %9s %9s | %9s %9s | %5s | %8s | %8s | %5s\n",
		       "size", "p50", "p99", "p50", "p99", "ratio", "Gb/s",
		       "Gb/s", "ratio");
		printf("---------+---------------------+---------------------+"
		       "-------+----------+----------+------\n");
	}
	for (size_t k = 0; k < DT_ARRAY_LEN(sizes); k++) {
		size_t size = sizes[k];
		plan p = plan_for(size);
		double d50, d99, t50, t99, dg[3], tg[3], dgbps, tgbps;
		char name[32];

		if (only && size != only)
			continue;
		tcp_rtt(size, p, &t50, &t99);
		van_rtt(size, p, &d50, &d99);
		for (int r = 0; r < 3; r++) {
			tg[r] = tcp_stream(size, p);
			dg[r] = van_stream(size, p);
		}
		tgbps = median3(tg[0], tg[1], tg[2]);
		dgbps = median3(dg[0], dg[1], dg[2]);
		if (size <= 4096)
			small_ratio_max = DT_MAX(small_ratio_max, d50 / t50);
		if (size == (16u << 20))
			big_ratio = dgbps / tgbps;
		if (json) {
			printf("{\"size\": %zu, \"dtrain_rtt_us\": %.2f, "
			       "\"dtrain_rtt_p99_us\": %.2f, \"tcp_rtt_us\": "
			       "%.2f, \"tcp_rtt_p99_us\": %.2f, \"rtt_ratio\": "
			       "%.3f, \"dtrain_gbps\": %.3f, \"tcp_gbps\": "
			       "%.3f, \"gbps_ratio\": %.3f}\n",
			       size, d50, d99, t50, t99, d50 / t50, dgbps,
			       tgbps, dgbps / tgbps);
		} else {
			fmt_size(size, name, sizeof(name));
			printf("%-8s | %9.1f %9.1f | %9.1f %9.1f | %5.2f | "
			       "%8.2f | %8.2f | %5.2f\n",
			       name, d50, d99, t50, t99, d50 / t50, dgbps,
			       tgbps, dgbps / tgbps);
		}
		fflush(stdout);
	}
	if (!json && !only)
		printf("\ntargets: small-message RTT <= 1.5x TCP: %.2fx %s; "
		       "16 MiB throughput >= 0.9x TCP: %.2fx %s\n",
		       small_ratio_max,
		       small_ratio_max <= 1.5 ? "met" : "MISSED", big_ratio,
		       big_ratio >= 0.9 ? "met" : "MISSED");
	return 0;
}
