/*
 * shm_ring_test.c - the shared-memory byte ring (src/net/shm_ring.c):
 * order across wrap-around with random write and read sizes, a write
 * larger than the ring, the checks on the peer's positions and on the
 * segment handed over, remote segments, the doorbell between two threads (no
 * wake-up lost, none while polling), and a writer in another process.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "net/shm_ring.h"

/* Byte i of the test stream. */
static uint8_t
byte_at(uint64_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

/* buf[0..n) must be bytes [at, at + n) of the stream. */
static void
expect_stream(const uint8_t *buf, ssize_t n, uint64_t at)
{
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] != byte_at(at + (uint64_t)i))
			fail_msg("byte %llu out of order",
			         (unsigned long long)(at + (uint64_t)i));
}

static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void
pair(size_t cap, dt_ring *rd, dt_ring *wr)
{
	int fd;

	assert_int_equal(dt__ring_create(cap, rd, &fd), DT_OK);
	assert_int_equal(dt__ring_attach(fd, cap, wr), DT_OK);
	close(fd);
}

static void
test_order_wrap(void **state)
{
	(void)state;
	dt_ring rd, wr;
	uint8_t src[6000], dst[6000];
	uint64_t in = 0, out = 0, s = 88172645463325252ull;
	const uint64_t total = 4u << 20;

	pair(DT_RING_MIN, &rd, &wr);
	while (out < total) {
		size_t n = 1 + rnd(&s) % sizeof(src);
		ssize_t w, r;

		for (size_t i = 0; i < n; i++)
			src[i] = byte_at(in + i);
		/* two pieces, to cross the iovec boundary too */
		struct iovec iov[2] = {{src, n / 3}, {src + n / 3, n - n / 3}};
		w = dt__ring_write(&wr, iov, 2);
		assert_true(w >= 0 && (size_t)w <= n);
		assert_true(in + (uint64_t)w - out <= DT_RING_MIN);
		in += (uint64_t)w;
		n = 1 + rnd(&s) % sizeof(dst);
		assert_int_equal(dt__ring_ready(&rd), (ssize_t)(in - out));
		r = dt__ring_read(&rd, dst, n);
		assert_int_equal(r, (ssize_t)(in - out < n ? in - out : n));
		expect_stream(dst, r, out);
		out += (uint64_t)r;
	}
	dt__ring_unmap(&rd);
	dt__ring_unmap(&wr);
}

static void
test_bigger_than_ring(void **state)
{
	(void)state;
	dt_ring rd, wr;
	size_t cap = DT_RING_MIN, big = 3 * cap + 123;
	uint8_t *src = malloc(big), *dst = malloc(big);
	size_t in = 0, out = 0;

	assert_non_null(src);
	assert_non_null(dst);
	for (size_t i = 0; i < big; i++)
		src[i] = byte_at(i);
	pair(cap, &rd, &wr);
	/* a full ring takes nothing more; the writer sees no room */
	struct iovec iov = {src, big};
	assert_int_equal(dt__ring_write(&wr, &iov, 1), (ssize_t)cap);
	assert_int_equal(dt__ring_ready(&wr), 0);
	iov = (struct iovec){src + cap, big - cap};
	assert_int_equal(dt__ring_write(&wr, &iov, 1), 0);
	in = cap;
	while (out < big) {
		ssize_t r = dt__ring_read(&rd, dst + out, big - out);

		assert_true(r > 0);
		out += (size_t)r;
		iov = (struct iovec){src + in, big - in};
		ssize_t w = dt__ring_write(&wr, &iov, 1);
		assert_true(w >= 0);
		in += (size_t)w;
	}
	assert_memory_equal(src, dst, big);
	assert_int_equal(dt__ring_read(&rd, dst, 1), 0);
	dt__ring_unmap(&rd);
	dt__ring_unmap(&wr);
	free(src);
	free(dst);
}

/* The header as a hostile peer would scribble on it. */
typedef struct {
	uint64_t magic;
	uint32_t version, pad;
	uint64_t cap;
	_Alignas(64) uint64_t head;
	_Alignas(64) uint64_t tail;
	_Alignas(64) uint32_t armed;
	_Alignas(64) uint32_t room_armed;
	_Alignas(64) uint64_t seg;
	_Alignas(64) uint64_t seg_at;
	uint64_t seg_addr, seg_len;
} raw_hdr;

static void
test_hostile_positions(void **state)
{
	(void)state;
	dt_ring rd, wr;
	uint8_t b[64] = {0};
	struct iovec iov = {b, sizeof(b)};

	/* a head more than the ring ahead of the reader */
	pair(DT_RING_MIN, &rd, &wr);
	((raw_hdr *)(void *)rd.hdr)->head = DT_RING_MIN + 1;
	errno = 0;
	assert_int_equal(dt__ring_read(&rd, b, sizeof(b)), -1);
	assert_int_equal(errno, EPROTO);
	assert_int_equal(dt__ring_ready(&rd), -1);
	/* fixed again, the ring stays broken */
	((raw_hdr *)(void *)rd.hdr)->head = 0;
	assert_int_equal(dt__ring_read(&rd, b, sizeof(b)), -1);
	dt__ring_unmap(&rd);
	dt__ring_unmap(&wr);

	/* a head that goes back */
	pair(DT_RING_MIN, &rd, &wr);
	assert_int_equal(dt__ring_write(&wr, &iov, 1), 64);
	assert_int_equal(dt__ring_ready(&rd), 64);
	((raw_hdr *)(void *)rd.hdr)->head = 10;
	assert_int_equal(dt__ring_read(&rd, b, sizeof(b)), -1);
	dt__ring_unmap(&rd);
	dt__ring_unmap(&wr);

	/* a tail past the head, and a tail that goes back */
	pair(DT_RING_MIN, &rd, &wr);
	((raw_hdr *)(void *)wr.hdr)->tail = 1;
	assert_int_equal(dt__ring_write(&wr, &iov, 1), -1);
	assert_int_equal(errno, EPROTO);
	dt__ring_unmap(&rd);
	dt__ring_unmap(&wr);
	pair(DT_RING_MIN, &rd, &wr);
	assert_int_equal(dt__ring_write(&wr, &iov, 1), 64);
	assert_int_equal(dt__ring_read(&rd, b, 64), 64);
	assert_int_equal(dt__ring_write(&wr, &iov, 1), 64);
	((raw_hdr *)(void *)wr.hdr)->tail = 0;
	assert_int_equal(dt__ring_write(&wr, &iov, 1), -1);
	dt__ring_unmap(&rd);
	dt__ring_unmap(&wr);

	/* the wrong side's call */
	pair(DT_RING_MIN, &rd, &wr);
	assert_int_equal(dt__ring_write(&rd, &iov, 1), -1);
	assert_int_equal(dt__ring_read(&wr, b, 1), -1);
	dt__ring_unmap(&rd);
	dt__ring_unmap(&wr);
}

/* Remote segments: the reader stops at a posted one's place, claims it
 * there, and the writer learns it is done; one taken back before the
 * claim is the ring's again; one posted where it cannot be, or of length
 * 0, breaks the ring. */
static void
test_segments(void **state)
{
	(void)state;
	dt_ring rd, wr;
	uint8_t b[256];
	struct iovec iov = {b, 100};
	uint64_t addr = 0, len = 0;

	for (int i = 0; i < 256; i++)
		b[i] = byte_at((uint64_t)i);
	pair(DT_RING_MIN, &rd, &wr);
	assert_false(dt__ring_remote_ok(&wr));
	dt__ring_set_remote_ok(&rd);
	assert_true(dt__ring_remote_ok(&wr));
	/* 100 bytes, a segment, then more bytes after it is done */
	assert_int_equal(dt__ring_write(&wr, &iov, 1), 100);
	dt__ring_seg_post(&wr, 0x1000, 5000);
	assert_int_equal(dt__ring_seg_state(&wr), DT_SEG_POSTED);
	assert_int_equal(dt__ring_seg_claim(&rd, 1u << 20, &addr, &len), 0);
	assert_int_equal(dt__ring_read(&rd, b + 128, 128), 100);
	expect_stream(b + 128, 100, 0);
	assert_int_equal(dt__ring_ready(&rd), 1); /* the segment */
	assert_int_equal(dt__ring_arm(&rd), 1);   /* do not sleep on it */
	assert_int_equal(dt__ring_read(&rd, b + 128, 128), 0);
	assert_int_equal(dt__ring_seg_claim(&rd, 1u << 20, &addr, &len), 1);
	assert_int_equal(addr, 0x1000);
	assert_int_equal(len, 5000);
	assert_int_equal(dt__ring_seg_state(&wr), DT_SEG_CLAIMED);
	assert_int_equal(dt__ring_seg_cancel(&wr), 0); /* too late */
	assert_int_equal(dt__ring_ready(&rd), 0);
	dt__ring_seg_done(&rd);
	assert_int_equal(dt__ring_seg_state(&wr), DT_SEG_DONE);
	iov.iov_base = b + 100;
	iov.iov_len = 28;
	assert_int_equal(dt__ring_write(&wr, &iov, 1), 28);
	assert_int_equal(dt__ring_read(&rd, b + 128, 128), 28);
	expect_stream(b + 128, 28, 100);
	/* taken back before the claim: the ring's bytes come instead */
	dt__ring_seg_post(&wr, 0x2000, 64);
	assert_int_equal(dt__ring_seg_cancel(&wr), 1);
	assert_int_equal(dt__ring_seg_state(&wr), DT_SEG_CANCELLED);
	assert_int_equal(dt__ring_seg_claim(&rd, 1u << 20, &addr, &len), 0);
	assert_int_equal(dt__ring_write(&wr, &iov, 1), 28);
	assert_int_equal(dt__ring_read(&rd, b + 128, 128), 28);
	expect_stream(b + 128, 28, 100);
	/* a state word of another segment: the writer's ring is done */
	dt__ring_seg_post(&wr, 0x3000, 64);
	((raw_hdr *)(void *)rd.hdr)->seg = (1000u << 3) | DT_SEG_DONE;
	assert_int_equal(dt__ring_seg_state(&wr), -1);
	dt__ring_unmap(&rd);
	dt__ring_unmap(&wr);

	/* a segment behind the reader, ahead of the head, or empty */
	for (int k = 0; k < 3; k++) {
		pair(DT_RING_MIN, &rd, &wr);
		iov.iov_base = b;
		iov.iov_len = 64;
		assert_int_equal(dt__ring_write(&wr, &iov, 1), 64);
		assert_int_equal(dt__ring_read(&rd, b + 128, 32), 32);
		dt__ring_seg_post(&wr, 0x1000, k == 2 ? 0 : 10);
		raw_hdr *h = (raw_hdr *)(void *)rd.hdr;
		if (k == 0)
			h->seg_at = 10;
		else if (k == 1)
			h->seg_at = 65;
		else
			h->seg_at = 32;
		errno = 0;
		if (k < 2)
			assert_int_equal(dt__ring_read(&rd, b + 128, 32), -1);
		else
			assert_int_equal(
			    dt__ring_seg_claim(&rd, 1u << 20, &addr, &len), -1);
		assert_int_equal(errno, EPROTO);
		dt__ring_unmap(&rd);
		dt__ring_unmap(&wr);
	}
}

static void
test_attach_checks(void **state)
{
	(void)state;
	dt_ring rd, wr;
	int fd;

	/* sizes */
	assert_int_equal(dt__ring_create(5000, &rd, &fd), DT_EINVAL);
	assert_int_equal(dt__ring_create(DT_RING_MIN / 2, &rd, &fd), DT_EINVAL);
	assert_int_equal(dt__ring_create(DT_RING_MIN, &rd, &fd), DT_OK);
	assert_int_equal(dt__ring_attach(fd, 2 * DT_RING_MIN, &wr), DT_EPROTO);
	assert_int_equal(dt__ring_attach(fd, 3 * DT_RING_MIN, &wr), DT_EPROTO);
	assert_non_null(strstr(dt_errmsg(), "announced"));
	/* a ring already in use */
	assert_int_equal(dt__ring_attach(fd, DT_RING_MIN, &wr), DT_OK);
	uint8_t b[8] = {0};
	struct iovec iov = {b, 8};
	assert_int_equal(dt__ring_write(&wr, &iov, 1), 8);
	dt_ring wr2;
	assert_int_equal(dt__ring_attach(fd, DT_RING_MIN, &wr2), DT_EPROTO);
	assert_non_null(strstr(dt_errmsg(), "not a new ring"));
	/* the segment cannot be shrunk under the reader */
	assert_int_not_equal(ftruncate(fd, 4096), 0);
	close(fd);
	dt__ring_unmap(&rd);
	dt__ring_unmap(&wr);

	/* an unsealed segment of the right size, and not a segment */
	fd = memfd_create("not-a-ring", MFD_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4096 + DT_RING_MIN), 0);
	assert_int_equal(dt__ring_attach(fd, DT_RING_MIN, &wr), DT_EPROTO);
	assert_non_null(strstr(dt_errmsg(), "sealed"));
	close(fd);
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(dt__ring_attach(p[0], DT_RING_MIN, &wr), DT_EPROTO);
	close(p[0]);
	close(p[1]);
}

/* Doorbell between two threads: the reader polls a little, then arms and
 * sleeps on an eventfd; a lost wake-up would leave it asleep (poll times
 * out: the test fails). */
typedef struct {
	dt_ring *wr;
	int efd;
	uint64_t total, wakes;
} writer_arg;

static void *
writer_main(void *arg)
{
	writer_arg *a = arg;
	uint8_t buf[5000];
	uint64_t in = 0, s = 0x9e3779b97f4a7c15ull;

	while (in < a->total) {
		size_t n = 1 + rnd(&s) % sizeof(buf);

		if (n > a->total - in)
			n = (size_t)(a->total - in);
		for (size_t i = 0; i < n; i++)
			buf[i] = byte_at(in + i);
		size_t off = 0;
		while (off < n) {
			struct iovec iov = {buf + off, n - off};
			ssize_t w = dt__ring_write(a->wr, &iov, 1);

			if (w < 0)
				return NULL;
			off += (size_t)w;
			if (w > 0 && dt__ring_wake(a->wr)) {
				uint64_t one = 1;

				a->wakes++;
				if (write(a->efd, &one, 8) != 8)
					return NULL;
			}
			if (w == 0)
				sched_yield(); /* full: the reader drains */
		}
		in += n;
	}
	return NULL;
}

static void
test_doorbell_threads(void **state)
{
	(void)state;
	dt_ring rd, wr;
	writer_arg a = {&wr, eventfd(0, EFD_CLOEXEC), 16u << 20, 0};
	pthread_t th;
	uint8_t buf[7000];
	uint64_t out = 0, sleeps = 0, arms = 0;

	assert_true(a.efd >= 0);
	pair(64u << 10, &rd, &wr);
	assert_int_equal(pthread_create(&th, NULL, writer_main, &a), 0);
	while (out < a.total) {
		ssize_t r = dt__ring_read(&rd, buf, sizeof(buf));

		assert_true(r >= 0);
		expect_stream(buf, r, out);
		out += (uint64_t)r;
		if (r > 0 || out == a.total)
			continue;
		arms++;
		if (dt__ring_arm(&rd))
			continue;
		struct pollfd pfd = {a.efd, POLLIN, 0};
		if (poll(&pfd, 1, 10000) != 1)
			fail_msg("asleep with %llu of %llu bytes read: a "
			         "wake-up was lost",
			         (unsigned long long)out,
			         (unsigned long long)a.total);
		uint64_t v;
		assert_int_equal(read(a.efd, &v, 8), 8);
		sleeps++;
	}
	pthread_join(th, NULL);
	assert_int_equal(out, a.total);
	/* every wake-up answered an arming: a polling reader costs none */
	assert_true(a.wakes <= arms);
	print_message("doorbell: %llu armings, %llu sleeps, %llu wake-ups for "
	              "%llu MiB\n",
	              (unsigned long long)arms, (unsigned long long)sleeps,
	              (unsigned long long)a.wakes,
	              (unsigned long long)(a.total >> 20));
	close(a.efd);
	dt__ring_unmap(&rd);
	dt__ring_unmap(&wr);
}

/* The writer in another process: the memfd handed over (here through
 * fork; the transport passes it on a socket), 8 MiB through 4 KiB. */
static void
test_other_process(void **state)
{
	(void)state;
	dt_ring rd;
	int fd, st;
	const uint64_t total = 8u << 20;

	assert_int_equal(dt__ring_create(DT_RING_MIN, &rd, &fd), DT_OK);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dt_ring wr;
		uint8_t buf[3000];
		uint64_t in = 0;

		dt__ring_unmap(&rd);
		if (dt__ring_attach(fd, DT_RING_MIN, &wr) != DT_OK)
			_exit(3);
		close(fd);
		while (in < total) {
			size_t n =
			    total - in < sizeof(buf) ? total - in : sizeof(buf);
			for (size_t i = 0; i < n; i++)
				buf[i] = byte_at(in + i);
			struct iovec iov = {buf, n};
			ssize_t w = dt__ring_write(&wr, &iov, 1);
			if (w < 0)
				_exit(4);
			in += (uint64_t)w;
		}
		_exit(0);
	}
	close(fd);
	uint8_t buf[5000];
	uint64_t out = 0;
	while (out < total) {
		ssize_t r = dt__ring_read(&rd, buf, sizeof(buf));

		assert_true(r >= 0);
		expect_stream(buf, r, out);
		out += (uint64_t)r;
		if (r == 0 && waitpid(pid, &st, WNOHANG) == pid)
			fail_msg("the writer ended (status %d) after %llu "
			         "bytes",
			         st, (unsigned long long)out);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	dt__ring_unmap(&rd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_order_wrap),
	    cmocka_unit_test(test_bigger_than_ring),
	    cmocka_unit_test(test_hostile_positions),
	    cmocka_unit_test(test_segments),
	    cmocka_unit_test(test_attach_checks),
	    cmocka_unit_test(test_doorbell_threads),
	    cmocka_unit_test(test_other_process),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
