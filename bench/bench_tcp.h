/*
 * bench_tcp.h - what the KV benchmarks share: a clock, percentiles, the
 * parsing of --ops, and the plain TCP baseline (a forked process on a loopback
 * socket pair doing the same exchange: send the bytes and wait for a 1-byte
 * answer (push), or send 1 byte and read the bytes back (pull), both sides with
 * TCP_NODELAY and blocking calls).
 */
#ifndef DT_BENCH_TCP_H
#define DT_BENCH_TCP_H

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double
now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int
cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

typedef struct result {
	double p50, p99, gbps;
} result;

static result
summarise(double *t, int iters, size_t bytes)
{
	result r;
	double sum = 0;

	for (int i = 0; i < iters; i++)
		sum += t[i];
	qsort(t, (size_t)iters, sizeof(double), cmp_d);
	r.p50 = t[iters / 2];
	r.p99 =
	    t[(int)(iters * 0.99) < iters ? (int)(iters * 0.99) : iters - 1];
	r.gbps = (double)bytes * iters / (sum * 1e3);
	return r;
}

static int
full_io(int fd, void *buf, size_t n, int wr)
{
	char *p = buf;
	while (n) {
		ssize_t k = wr ? write(fd, p, n) : read(fd, p, n);
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* The plain TCP baseline: op 0 = push-like, 1 = pull-like. */
static result
tcp_baseline(int op, size_t bytes, int iters)
{
	int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1, fd;
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	char *buf = malloc(bytes), ack = 1;
	double *t = malloc(sizeof(double) * (size_t)iters);
	result r = {0, 0, 0};
	pid_t pid;

	memset(buf, 1, bytes);
	bind(lfd, (struct sockaddr *)&a, sizeof(a));
	listen(lfd, 1);
	getsockname(lfd, (struct sockaddr *)&a, &al);
	pid = fork();
	if (pid == 0) {
		int c = accept(lfd, NULL, NULL);
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		for (int i = 0; i < iters; i++) {
			if (op == 0) {
				if (full_io(c, buf, bytes, 0) ||
				    full_io(c, &ack, 1, 1))
					break;
			} else {
				if (full_io(c, &ack, 1, 0) ||
				    full_io(c, buf, bytes, 1))
					break;
			}
		}
		_exit(0);
	}
	fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
		for (int i = 0; i < iters; i++) {
			double t0 = now_us();
			if (op == 0) {
				full_io(fd, buf, bytes, 1);
				full_io(fd, &ack, 1, 0);
			} else {
				full_io(fd, &ack, 1, 1);
				full_io(fd, buf, bytes, 0);
			}
			t[i] = now_us() - t0;
		}
		r = summarise(t, iters, bytes);
	}
	close(fd);
	close(lfd);
	waitpid(pid, NULL, 0);
	free(buf);
	free(t);
	return r;
}

/* "push,pushpull" into ops[3] (push, pull, pushpull); 1: a name that is
 * none of them. */
static inline int
parse_ops(const char *list, int ops[3])
{
	const char *names[] = {"push", "pull", "pushpull"};

	memset(ops, 0, 3 * sizeof(int));
	while (*list) {
		size_t len = strcspn(list, ",");
		int o = 0;

		while (o < 3 && !(strlen(names[o]) == len &&
		                  strncmp(list, names[o], len) == 0))
			o++;
		if (o == 3)
			return 1;
		ops[o] = 1;
		list += len + (list[len] == ',');
	}
	return 0;
}

#endif
