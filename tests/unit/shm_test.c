/*
 * shm_test.c - the same-host transport (net/shm.c) through its ops table,
 * below the van: many peers at once, each stream whole and in order; a
 * writer killed (SIGKILL) in the middle of a message; big pieces copied
 * once (remote segments), with a writer killed while one waits; strangers
 * whose set-up is not the one expected; strangers without the proof of the
 * job key, or of another user, that get nothing allocated; a peer that
 * claims a segment and never copies it, which a serving thread never
 * waits for; answers read by one thread into the buffer another thread
 * sent their requests from; and no file left anywhere.
 *
 * The writers are forked processes, as peers are.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/bytes.h"
#include "common/util.h"
#include "net/shm_ring.h"
#include "net/transport.h"
#include "unit/fds.h"

static const dt_transport_ops *T = &dt__shm_transport;

static void
endpoint(char *name, size_t cap, const char *what)
{
	snprintf(name, cap, "dtrain-test.%d.%s", (int)getpid(), what);
}

/* The byte at position i of peer k's stream. */
static uint8_t
byte_of(int k, uint64_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13 ^ (uint64_t)k * 97);
}

/* Accept one link within 5 s. */
static void
accept_one(dt_link *lis, dt_link *out)
{
	char addr[64];
	uint64_t end = dt__now_ns() + 5000000000ull;

	for (;;) {
		int rc = T->accept(lis, out, addr, sizeof(addr));

		if (rc == 1)
			return;
		assert_int_equal(rc, 0);
		assert_true(dt__now_ns() < end);
		struct pollfd p = {.fd = lis->fd, .events = POLLIN};
		poll(&p, 1, 100);
	}
}

/* Read from l until len bytes came (0 at the end of the stream first):
 * how many came. Sleeps on l->fd as the van does. */
static size_t
read_until(dt_link *l, uint8_t *buf, size_t len, int *eof)
{
	size_t got = 0;
	uint64_t end = dt__now_ns() + 20000000000ull;

	*eof = 0;
	while (got < len) {
		ssize_t n = T->recv(l, buf + got, len - got);

		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		if (n == 0) {
			*eof = 1;
			return got;
		}
		assert_true(errno == EAGAIN || errno == EINTR);
		assert_true(dt__now_ns() < end);
		struct pollfd p = {.fd = l->fd, .events = POLLIN};
		poll(&p, 1, 100);
	}
	return got;
}

/* A child: connect to name and write len bytes of stream k in pieces of
 * up to piece bytes (sleeping on room as the van does), then close. With
 * stop_at > 0, stop after that many bytes and wait to be killed. With go,
 * first wait for the reader's go (a byte: it has taken our set-up, so it
 * offers remote segments if it does at all). */
static void
writer(const char *name, int k, size_t len, size_t piece, size_t stop_at,
       int go)
{
	dt_link l;
	uint8_t *buf = malloc(piece), b;
	size_t done = 0;
	int eof;

	if (buf == NULL || T->connect(name, 0, dt__now_ns() + 5000000000ull,
	                              "test", &l) != DT_OK)
		_exit(2);
	if (go && read_until(&l, &b, 1, &eof) != 1)
		_exit(3);
	while (done < len) {
		size_t n = len - done < piece ? len - done : piece;

		if (stop_at && done + n > stop_at)
			n = stop_at - done;
		for (size_t i = 0; i < n; i++)
			buf[i] = byte_of(k, done + i);
		size_t off = 0;
		while (off < n) {
			/* A big piece goes as a frame does: a head, the body,
			 * a tail (the body may go as a remote segment). */
			struct iovec iov[3] = {{buf + off, n - off}};
			int cnt = 1;

			if (n - off >= 4096) {
				iov[0].iov_len = 100;
				iov[1] = (struct iovec){buf + off + 100,
				                        n - off - 200};
				iov[2] = (struct iovec){buf + n - 100, 100};
				cnt = 3;
			}
			ssize_t w = T->sendv(&l, iov, cnt);

			if (w > 0) {
				off += (size_t)w;
				continue;
			}
			if (w < 0 && errno != EAGAIN)
				_exit(3);
			T->wait_writable(&l, 100);
		}
		done += n;
		if (stop_at && done == stop_at)
			for (;;)
				pause(); /* until SIGKILL */
	}
	T->close(&l);
	_exit(0);
}

static pid_t
spawn(const char *name, int k, size_t len, size_t piece, size_t stop_at, int go)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		writer(name, k, len, piece, stop_at, go);
	return pid;
}

static int
reap(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}

/* The ring a link gets without DTRAIN_SHM_RING, by the job's nodes on the
 * host: 1 MiB up to 64, then halved as they double, never below 64 KiB. */
static void
test_ring_fit(void **state)
{
	(void)state;
	assert_int_equal(dt__shm_ring_fit(0), 1u << 20);
	assert_int_equal(dt__shm_ring_fit(1), 1u << 20);
	assert_int_equal(dt__shm_ring_fit(64), 1u << 20);
	assert_int_equal(dt__shm_ring_fit(65), 512u << 10);
	assert_int_equal(dt__shm_ring_fit(128), 512u << 10);
	assert_int_equal(dt__shm_ring_fit(256), 256u << 10);
	assert_int_equal(dt__shm_ring_fit(1000), 64u << 10);
	assert_int_equal(dt__shm_ring_fit(1000000), 64u << 10);
}

/* This process's ring mappings (memfds) of exactly cap bytes of data. */
static int
rings_of(size_t cap)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (strstr(line, "memfd:dtrain-ring") &&
		    sscanf(line, "%lx-%lx", &lo, &hi) == 2 &&
		    hi - lo == 4096 + cap)
			n++;
	}
	fclose(f);
	return n;
}

/* 6 peers at once, 3 MiB each through 64 KiB rings (chosen by the fit to
 * a thousand nodes on the host), read by one thread polling them in turn:
 * every stream whole and in order, and the end of each stream seen after
 * its last byte. */
static void
test_many_peers(void **state)
{
	enum { PEERS = 6 };
	const size_t len = 3u << 20;
	char name[64];
	dt_link lis, l[PEERS];
	pid_t pid[PEERS];
	uint64_t got[PEERS] = {0};
	int ended[PEERS] = {0}, left = PEERS;
	uint8_t *buf = malloc(100000);

	(void)state;
	assert_non_null(buf);
	assert_null(getenv("DTRAIN_SHM_RING"));
	dt__shm_fit(1000);
	endpoint(name, sizeof(name), "many");
	assert_int_equal(T->listen(name, 0, -1, &lis, NULL), DT_OK);
	for (int k = 0; k < PEERS; k++)
		pid[k] = spawn(name, k, len, 1000 + 7919 * (size_t)k, 0, 0);
	for (int k = 0; k < PEERS; k++)
		accept_one(&lis, &l[k]);
	assert_true(rings_of(64u << 10) >= PEERS);
	/* which child is which: the first byte of each stream */
	int who[PEERS];
	for (int k = 0; k < PEERS; k++) {
		int eof;

		assert_int_equal(read_until(&l[k], buf, 1, &eof), 1);
		who[k] = -1;
		for (int j = 0; j < PEERS; j++)
			if (buf[0] == byte_of(j, 0))
				who[k] = j;
		assert_true(who[k] >= 0);
		got[k] = 1;
	}
	uint64_t end = dt__now_ns() + 30000000000ull;
	while (left > 0) {
		assert_true(dt__now_ns() < end);
		for (int k = 0; k < PEERS; k++) {
			if (ended[k])
				continue;
			size_t want = 1 + (size_t)(got[k] * 31 % 99999);
			ssize_t n = T->recv(&l[k], buf, want);

			if (n > 0) {
				for (ssize_t i = 0; i < n; i++)
					if (buf[i] !=
					    byte_of(who[k],
					            got[k] + (uint64_t)i))
						fail_msg(
						    "peer %d: byte %llu wrong",
						    who[k],
						    (unsigned long long)(got[k] +
						                         (uint64_t)
						                             i));
				got[k] += (uint64_t)n;
			} else if (n == 0) {
				assert_int_equal(got[k], len);
				ended[k] = 1;
				left--;
			} else {
				assert_true(errno == EAGAIN);
			}
		}
	}
	for (int k = 0; k < PEERS; k++) {
		assert_int_equal(reap(pid[k]), 0);
		T->close(&l[k]);
	}
	T->close(&lis);
	dt__shm_fit(0);
	free(buf);
}

/* A writer killed in the middle of a message: the bytes it wrote come
 * out, then the end of the stream, within a second of the kill, as a
 * closed TCP connection's would. */
static void
test_killed_mid_message(void **state)
{
	char name[64];
	dt_link lis, l;
	uint8_t *buf = malloc(1u << 20);
	int eof;

	(void)state;
	assert_non_null(buf);
	endpoint(name, sizeof(name), "kill");
	assert_int_equal(T->listen(name, 0, -1, &lis, NULL), DT_OK);
	pid_t pid = spawn(name, 3, 1u << 20, 4096, 300000, 0);
	accept_one(&lis, &l);
	assert_int_equal(read_until(&l, buf, 300000, &eof), 300000);
	for (size_t i = 0; i < 300000; i++)
		assert_int_equal(buf[i], byte_of(3, i));
	kill(pid, SIGKILL);
	uint64_t t0 = dt__now_ns();
	assert_int_equal(read_until(&l, buf, 1, &eof), 0);
	assert_true(eof);
	assert_true(dt__now_ns() - t0 < 1000000000ull);
	assert_int_equal(WTERMSIG(reap(pid)), SIGKILL);
	T->close(&l);
	T->close(&lis);
	free(buf);
}

/* Read all of stream k from l (len bytes, then its end) in pieces of
 * varying size, checking every byte; after delay_ms of nothing. */
static void
read_stream(dt_link *l, int k, size_t len, int delay_ms)
{
	uint8_t *buf = malloc(1u << 20);
	uint64_t got = 0, end = dt__now_ns() + 30000000000ull;

	assert_non_null(buf);
	if (delay_ms)
		poll(NULL, 0, delay_ms);
	for (;;) {
		size_t want = 1 + (size_t)(got * 7919 % (1u << 20));
		ssize_t n = T->recv(l, buf, want);

		if (n > 0) {
			for (ssize_t i = 0; i < n; i++)
				if (buf[i] != byte_of(k, got + (uint64_t)i))
					fail_msg(
					    "byte %llu wrong",
					    (unsigned long long)(got +
					                         (uint64_t)i));
			got += (uint64_t)n;
			continue;
		}
		if (n == 0)
			break;
		assert_int_equal(errno, EAGAIN);
		assert_true(dt__now_ns() < end);
		struct pollfd p = {.fd = l->fd, .events = POLLIN};
		poll(&p, 1, 100);
	}
	assert_int_equal(got, len);
	free(buf);
}

/* The reader's go to a writer spawned with go, once the writer's set-up
 * has come (taking it is what offers segments). */
static void
send_go(dt_link *l)
{
	uint8_t go = 1;
	struct iovec iov = {&go, 1};
	uint64_t end = dt__now_ns() + 5000000000ull;
	ssize_t w;

	while ((w = T->sendv(l, &iov, 1)) < 0 && errno == EAGAIN) {
		assert_true(dt__now_ns() < end);
		T->wait_writable(l, 100);
	}
	assert_int_equal(w, 1);
}

/*
 * Copy once: pieces of DTRAIN_SHM_COPY_ONCE bytes or more go as remote
 * segments that the reader copies from the writer's memory. The stream is
 * whole and in order whether the reader reads at once (most bytes copied
 * once), starts 150 ms after its go (the writer takes its first segment
 * back after 20 ms and fills the ring with its bytes instead: at least the
 * ring's 64 KiB of a piece's body not copied once, later pieces copied
 * once again), or does not offer segments at all
 * (DTRAIN_SHM_COPY_ONCE=0 here: none is sent, whatever the writer's own
 * setting).
 */
static void
test_copy_once(void **state)
{
	const size_t len = 12u << 20;
	char name[64];
	dt_link lis, l;
	struct {
		int delay_ms;
		const char *reader_min;
		int expect; /* 2: most bytes copied once, 1: some, 0: none */
	} cases[] = {{0, "65536", 2}, {150, "65536", 1}, {0, "0", 0}};

	(void)state;
	setenv("DTRAIN_SHM_RING", "65536", 1);
	endpoint(name, sizeof(name), "once");
	for (size_t c = 0, tries = 0; c < sizeof(cases) / sizeof(cases[0]);
	     c++) {
		setenv("DTRAIN_SHM_COPY_ONCE", "65536", 1); /* the writer's */
		assert_int_equal(T->listen(name, 0, -1, &lis, NULL), DT_OK);
		pid_t pid = spawn(name, 5, len, 700000, 0, 1);
		setenv("DTRAIN_SHM_COPY_ONCE", cases[c].reader_min, 1);
		accept_one(&lis, &l);
		uint64_t before = dt__shm_copied_once();
		send_go(&l);
		read_stream(&l, 5, len, cases[c].delay_ms);
		uint64_t once = dt__shm_copied_once() - before;

		assert_int_equal(reap(pid), 0);
		/* A reader that keeps up gets most bytes copied once; on a
		 * loaded machine a reader kept from the processor is late to
		 * claim, and the writer sends through the ring instead (as it
		 * should). So the prompt case is tried up to 3 times: once is
		 * enough to show the path works (at a load of 15 a run gave
		 * 2.1 MB of 12.6). */
		if (cases[c].expect == 2 && once < len / 2 && ++tries < 3) {
			T->close(&l);
			T->close(&lis);
			c--;
			continue;
		}
		tries = 0;
		if (cases[c].expect == 2 && once < len / 2)
			fail_msg("only %llu of %zu bytes copied once, 3 times",
			         (unsigned long long)once, len);
		/* (all heads and tails come to 18 * 200 bytes) */
		if (cases[c].expect == 1 && (once == 0 || once > len - 60000))
			fail_msg("a late reader: %llu of %zu bytes copied "
			         "once",
			         (unsigned long long)once, len);
		if (cases[c].expect == 0 && once != 0)
			fail_msg("%llu bytes copied once where none was "
			         "offered",
			         (unsigned long long)once);
		T->close(&l);
		T->close(&lis);
	}
	unsetenv("DTRAIN_SHM_COPY_ONCE");
	unsetenv("DTRAIN_SHM_RING");
}

/* A writer killed while its segment waits to be read: the reader sees
 * the bytes before it, then the end of the stream (never bytes of a dead
 * process, nor an error), within a second. */
static void
test_killed_with_segment(void **state)
{
	const size_t len = 1u << 20;
	char name[64];
	dt_link lis, l;
	uint8_t *buf = malloc(len);
	int eof;

	(void)state;
	assert_non_null(buf);
	setenv("DTRAIN_SHM_COPY_ONCE", "65536", 1);
	endpoint(name, sizeof(name), "killseg");
	assert_int_equal(T->listen(name, 0, -1, &lis, NULL), DT_OK);
	/* one piece of 1 MiB (head, body, tail), then it waits to be killed */
	pid_t pid = spawn(name, 4, len, len, len, 1);
	accept_one(&lis, &l);
	send_go(&l);
	assert_int_equal(read_until(&l, buf, 100, &eof), 100);
	kill(pid, SIGKILL);
	assert_int_equal(WTERMSIG(reap(pid)), SIGKILL);
	uint64_t t0 = dt__now_ns(), got = 100;
	/* Bytes that still come (the writer had taken its segment back
	 * before the kill) are the stream's; then the end. */
	for (;;) {
		size_t n = read_until(&l, buf, len, &eof);

		for (size_t i = 0; i < n; i++)
			assert_int_equal(buf[i], byte_of(4, got + i));
		got += n;
		assert_true(got <= len);
		if (eof)
			break;
	}
	assert_true(dt__now_ns() - t0 < 1000000000ull);
	T->close(&l);
	T->close(&lis);
	unsetenv("DTRAIN_SHM_COPY_ONCE");
	free(buf);
}

/* A socket connected to name, or -1. */
static int
raw_connect(const char *name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (s < 0)
		return -1;
	memcpy(sa.sun_path + 1, name, strlen(name));
	if (connect(s, (struct sockaddr *)&sa,
	            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
	                        strlen(name))) != 0) {
		close(s);
		return -1;
	}
	return s;
}

/* The proof of the job key a connection gives first ("DTL1" and the
 * token: all zero for the ops' listen, fill for a wrong one). */
static int
send_proof(int s, uint8_t fill)
{
	uint8_t p[4 + DT_SHM_TOKEN_LEN];

	memset(p, fill, sizeof(p));
	dt__put_u32(p, 0x314c5444u);
	return send(s, p, sizeof(p), MSG_NOSIGNAL) == (ssize_t)sizeof(p) ? 0
	                                                                 : -1;
}

/* Connect to name and send the proof, then hdr (len bytes) with fds (n of
 * them). */
static int
stranger(const char *name, const void *hdr, size_t len, const int *fds, int n)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(8 * sizeof(int))];
	} ctl;
	struct iovec iov = {(void *)hdr, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

	assert_true(s >= 0);
	memcpy(sa.sun_path + 1, name, strlen(name));
	assert_int_equal(
	    connect(s, (struct sockaddr *)&sa,
	            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
	                        strlen(name))),
	    0);
	assert_int_equal(send_proof(s, 0), 0);
	if (n > 0) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)n * sizeof(int));
	}
	assert_int_equal(sendmsg(s, &mh, MSG_NOSIGNAL), (ssize_t)len);
	return s;
}

/* Strangers' set-ups: each ends the link (recv: -1 EPROTO, or the end)
 * and leaves no descriptor of theirs open here. */
static void
test_bad_setups(void **state)
{
	char name[64];
	dt_link lis, l;
	uint8_t hdr[24] = {0}, b;
	int pfd[2], efd = eventfd(0, EFD_CLOEXEC);
	int memfd = memfd_create("not-a-ring", MFD_CLOEXEC);

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	assert_true(efd >= 0 && memfd >= 0);
	assert_int_equal(ftruncate(memfd, 4096 + 65536), 0);
	endpoint(name, sizeof(name), "bad");
	assert_int_equal(T->listen(name, 0, -1, &lis, NULL), DT_OK);
	dt__put_u32(hdr, 0x68537464u);
	dt__put_u32(hdr + 4, 2);
	dt__put_u64(hdr + 8, 65536);
	dt__put_u64(hdr + 16, 4096); /* the probe word's address */
	struct {
		const char *what;
		size_t len;
		int fds[4], n;
		int magic_wrong;
	} cases[] = {
	    {"no descriptors", 24, {0}, 0, 0},
	    {"two descriptors", 24, {efd, efd}, 2, 0},
	    {"four descriptors", 24, {memfd, efd, efd, efd}, 4, 0},
	    {"a pipe as a doorbell", 24, {memfd, pfd[0], efd}, 3, 0},
	    {"an unsealed memfd", 24, {memfd, efd, efd}, 3, 0},
	    {"a pipe as the ring", 24, {pfd[1], efd, efd}, 3, 0},
	    {"a wrong magic", 24, {memfd, efd, efd}, 3, 1},
	    {"a short header", 9, {memfd, efd, efd}, 3, 0},
	    {"the 16 bytes of version 1", 16, {memfd, efd, efd}, 3, 0},
	};
	int before = count_fds();

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t h[24];
		int eof;

		memcpy(h, hdr, sizeof(h));
		if (cases[i].magic_wrong)
			h[0] ^= 1;
		int s =
		    stranger(name, h, cases[i].len, cases[i].fds, cases[i].n);
		accept_one(&lis, &l);
		/* the link ends: an error or the end of the stream */
		uint64_t end = dt__now_ns() + 5000000000ull;
		ssize_t n;
		while ((n = T->recv(&l, &b, 1)) < 0 && errno == EAGAIN) {
			assert_true(dt__now_ns() < end);
			struct pollfd p = {.fd = l.fd, .events = POLLIN};
			poll(&p, 1, 50);
		}
		if (n != 0 && errno != EPROTO)
			fail_msg("%s: recv %zd, %s", cases[i].what, n,
			         strerror(errno));
		(void)eof;
		T->close(&l);
		close(s);
		if (count_fds() != before)
			fail_msg("%s: %d descriptors open, %d before",
			         cases[i].what, count_fds(), before);
	}
	T->close(&lis);
	close(pfd[0]);
	close(pfd[1]);
	close(efd);
	close(memfd);
}

/* How many of this process's descriptors are of a kind: "/memfd:",
 * "anon_inode:[eventfd]", "anon_inode:[eventpoll]". */
static int
count_kind(const char *kind)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		char path[300], target[256];
		ssize_t k;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		k = readlink(path, target, sizeof(target) - 1);
		if (k <= 0)
			continue;
		target[k] = '\0';
		n += strncmp(target, kind, strlen(kind)) == 0;
	}
	closedir(d);
	return n;
}

/* The three kinds a link allocates, as one figure to compare. */
static int
link_allocations(void)
{
	return count_kind("/memfd:") * 10000 +
	       count_kind("anon_inode:[eventfd]") * 100 +
	       count_kind("anon_inode:[eventpoll]");
}

/* A child of another user (65534): connects and sends the right proof,
 * holds the connection until told to go (its pipe ends). */
static void
other_user(const char *name, int go_fd)
{
	char b;
	int s;

	if (setgid(65534) != 0 || setuid(65534) != 0)
		_exit(5);
	if ((s = raw_connect(name)) < 0)
		_exit(6);
	/* (The listener may have refused us by our user before the proof
	 * is sent: the send then fails, which is the refusal too.) */
	(void)send_proof(s, 0);
	while (read(go_fd, &b, 1) < 0 && errno == EINTR) {
	}
	_exit(0);
}

/* A child of our user: 300 connections, half with a wrong proof and half
 * with none, all held until told to go; says "done" on done_fd. */
static void
flood(const char *name, int done_fd, int go_fd)
{
	static int socks[300];
	char b = 'd';

	for (int i = 0; i < 300; i++) {
		if ((socks[i] = raw_connect(name)) < 0)
			_exit(7);
		/* (A send after the listener closed the connection
		 * fails: that is a refusal too.) */
		if (i % 2 == 0)
			(void)send_proof(socks[i], 0xff);
	}
	if (write(done_fd, &b, 1) != 1)
		_exit(9);
	while (read(go_fd, &b, 1) < 0 && errno == EINTR) {
	}
	_exit(0);
}

/* Keep accepting on lis until *flag's pipe says done (or only for ms):
 * nothing may be admitted, and no ring, eventfd or epoll set may appear,
 * even for a moment. */
static void
accept_none(dt_link *lis, int done_fd, int ms, int alloc0)
{
	uint64_t end =
	    dt__now_ns() + (uint64_t)(done_fd >= 0 ? 20000 : ms) * 1000000ull;
	char addr[64];
	dt_link l;

	for (;;) {
		int rc = T->accept(lis, &l, addr, sizeof(addr));

		if (rc == 1)
			fail_msg("admitted a local connection from %s that "
			         "gave no proof of the job key",
			         addr);
		if (link_allocations() != alloc0)
			fail_msg("rings/eventfds/epoll sets: %d, %d before",
			         link_allocations(), alloc0);
		struct pollfd p[2] = {{.fd = lis->fd, .events = POLLIN},
		                      {.fd = done_fd, .events = POLLIN}};
		poll(p, done_fd >= 0 ? 2 : 1, 20);
		if (done_fd >= 0 && (p[1].revents & (POLLIN | POLLHUP)))
			return;
		if (dt__now_ns() >= end) {
			assert_true(done_fd < 0);
			return;
		}
	}
}

/*
 * Strangers get nothing allocated: a process of another user with the
 * right proof (as root: a child that takes uid 65534), and 300 local
 * connections of our user with a wrong proof or none. None is admitted,
 * no memfd, eventfd or epoll set appears while they come, the refusals
 * take at most a log line a second, naming how many were left out, and
 * then a member still gets in.
 */
static void
test_strangers_allocate_nothing(void **state)
{
	char name[64], logpath[] = "/tmp/dtrain-shm-test-XXXXXX";
	dt_link lis, l;
	int go[2], done[2], alloc0, fds0, saved, logfd;
	pid_t other = -1, many;
	char b;

	(void)state;
	endpoint(name, sizeof(name), "strangers");
	fds0 = count_fds();
	assert_int_equal(T->listen(name, 0, -1, &lis, NULL), DT_OK);
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(done), 0);
	alloc0 = link_allocations();
	/* The log goes to a file meanwhile, to be counted. */
	logfd = mkstemp(logpath);
	assert_true(logfd >= 0);
	unlink(logpath);
	fflush(stderr);
	saved = dup(2);
	dup2(logfd, 2);
	uint64_t t0 = dt__now_ns();
	fflush(NULL);
	if (geteuid() == 0) {
		other = fork();
		assert_true(other >= 0);
		if (other == 0) {
			close(go[1]);
			close(done[1]);
			other_user(name, go[0]);
		}
		/* Until its refusal is logged (the log's first line, before
		 * the flood's can hold it back). */
		uint64_t end = dt__now_ns() + 10000000000ull;
		for (;;) {
			char head[512] = {0};

			accept_none(&lis, -1, 50, alloc0);
			assert_true(pread(logfd, head, sizeof(head) - 1, 0) >=
			            0);
			if (strstr(head, "not this job's user"))
				break;
			assert_true(dt__now_ns() < end);
		}
	} else {
		print_message("another user: skipped (not root, cannot "
		              "take uid 65534)\n");
	}
	many = fork();
	assert_true(many >= 0);
	if (many == 0) {
		close(go[1]);
		flood(name, done[1], go[0]);
	}
	close(done[1]); /* a flood that dies is seen as the end */
	accept_none(&lis, done[0], 0, alloc0);
	assert_int_equal(read(done[0], &b, 1), 1);
	accept_none(&lis, -1, 200, alloc0);
	/* One more after a second: its line counts those left out. */
	poll(NULL, 0, 1100);
	int s = raw_connect(name);
	assert_true(s >= 0);
	assert_int_equal(send_proof(s, 0x55), 0);
	accept_none(&lis, -1, 200, alloc0);
	close(s);
	close(go[1]); /* the children go */
	if (other > 0)
		assert_int_equal(reap(other), 0);
	assert_int_equal(reap(many), 0);
	double secs = (double)(dt__now_ns() - t0) / 1e9;
	/* What waited for its proof sees its end; nothing is left. */
	accept_none(&lis, -1, 300, alloc0);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);

	char *log = calloc(1, 1 << 20);
	assert_non_null(log);
	assert_true(pread(logfd, log, (1 << 20) - 1, 0) >= 0);
	close(logfd);
	int lines = 0, counted = 0;
	for (char *p = log; (p = strstr(p, "refusing a local connection"));
	     p++) {
		lines++;
		char *eol = strchr(p, '\n');
		char *more = strstr(p, "more refused in the last second");
		counted += more != NULL && (eol == NULL || more < eol);
	}
	print_message("%d refusal lines in %.2f s, %d with a count\n", lines,
	              secs, counted);
	if (lines < 2 || lines > (int)secs + 2 || counted < 1)
		fail_msg("%d refusal lines (%d with a count) in %.1f s:\n%s",
		         lines, counted, secs, log);
	if (geteuid() == 0 && !strstr(log, "not this job's user"))
		fail_msg("no refusal of the other user:\n%s", log);
	free(log);

	/* A member (the right proof) still gets in. */
	pid_t pid = spawn(name, 7, 100000, 4096, 0, 0);
	accept_one(&lis, &l);
	read_stream(&l, 7, 100000, 0);
	assert_int_equal(reap(pid), 0);
	T->close(&l);
	T->close(&lis);
	close(go[0]);
	close(done[0]);
	assert_int_equal(count_fds(), fds0);
}

/* The word a set-up names for the peer's probe (shm.c's probe_word). */
static const volatile uint64_t claimer_probe = 0x626f725068537464ull;

/*
 * A child that speaks the set-up by hand: the right proof, a ring of its
 * own for us to write, offering remote segments, then it claims the first
 * segment posted and never copies it (says 'c' on said_fd when it did).
 */
static void
claimer(const char *name, int said_fd)
{
	uint8_t hdr[24];
	dt_ring r;
	int fds[3], s = raw_connect(name);
	uint64_t addr, len, end = dt__now_ns() + 20000000000ull;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(fds))];
	} ctl;
	struct iovec iov = {hdr, sizeof(hdr)};
	struct msghdr mh = {.msg_iov = &iov,
	                    .msg_iovlen = 1,
	                    .msg_control = ctl.buf,
	                    .msg_controllen = sizeof(ctl.buf)};

	/* Gone with the test, even one that fails before its kill. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (s < 0 || send_proof(s, 0) != 0 ||
	    dt__ring_create(65536, &r, &fds[0]) != DT_OK)
		_exit(10);
	fds[1] = eventfd(0, EFD_CLOEXEC);
	fds[2] = eventfd(0, EFD_CLOEXEC);
	dt__ring_set_remote_ok(&r);
	dt__put_u32(hdr, 0x68537464u);
	dt__put_u32(hdr + 4, 2);
	dt__put_u64(hdr + 8, 65536);
	dt__put_u64(hdr + 16, (uint64_t)(uintptr_t)&claimer_probe);
	memset(&ctl, 0, sizeof(ctl));
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	if (sendmsg(s, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(hdr))
		_exit(11);
	while (dt__ring_seg_claim(&r, 1ull << 40, &addr, &len) != 1) {
		if (dt__now_ns() >= end)
			_exit(0); /* nothing posted: the fix's case */
		poll(NULL, 0, 1);
	}
	if (write(said_fd, "c", 1) != 1)
		_exit(12);
	for (;;)
		pause(); /* until SIGKILL, the segment never done */
}

/*
 * A member that claims a copy-once segment and never copies it does not
 * hold a thread that serves others (the van's dispatching thread, here
 * this one marked so): its big piece goes through the ring, the send
 * returns at once, and the same thread then serves another peer's stream.
 */
static void
test_stalled_claim(void **state)
{
	const size_t len = 1u << 20;
	char name[64];
	dt_link lis, bad, good;
	int said[2];
	uint8_t *buf = calloc(1, len);

	(void)state;
	assert_non_null(buf);
	assert_int_equal(pipe(said), 0);
	setenv("DTRAIN_SHM_COPY_ONCE", "65536", 1);
	endpoint(name, sizeof(name), "claim");
	assert_int_equal(T->listen(name, 0, -1, &lis, NULL), DT_OK);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		claimer(name, said[1]);
	accept_one(&lis, &bad);

	int was = dt__transport_set_serving(1);
	uint64_t t0 = dt__now_ns(), end = t0 + 10000000000ull;
	struct iovec iov = {buf, len};
	ssize_t w;
	while ((w = T->sendv(&bad, &iov, 1)) < 0 && errno == EAGAIN) {
		assert_true(dt__now_ns() < end);
		T->wait_writable(&bad, 10);
	}
	uint64_t took = dt__now_ns() - t0;
	print_message("a serving thread's 1 MiB send to a claimer: %zd "
	              "bytes in %.3f ms\n",
	              w, (double)took / 1e6);
	assert_true(w > 0);
	if (took > 2000000000ull)
		fail_msg("the serving thread waited %.1f s for a peer",
		         (double)took / 1e9);
	/* The same thread serves another peer meanwhile. */
	pid_t other = spawn(name, 9, 2u << 20, 700000, 0, 0);
	accept_one(&lis, &good);
	read_stream(&good, 9, 2u << 20, 0);
	assert_int_equal(reap(other), 0);
	dt__transport_set_serving(was);

	kill(pid, SIGKILL);
	reap(pid);
	T->close(&good);
	T->close(&bad);
	T->close(&lis);
	close(said[0]);
	close(said[1]);
	unsetenv("DTRAIN_SHM_COPY_ONCE");
	free(buf);
}

/* A connect to a name nobody listens on fails at once, naming it. */
/* A child: connect to name, then ROUNDS times wait for a byte from the
 * reader and answer with 8 bytes. */
#define BELL_ROUNDS 40
static void
pinger(const char *name)
{
	dt_link l;
	uint8_t b, out[8] = "pingpong";
	int eof;

	if (T->connect(name, 0, dt__now_ns() + 5000000000ull, "test", &l) !=
	    DT_OK)
		_exit(2);
	for (int i = 0; i < BELL_ROUNDS; i++) {
		struct iovec iov = {out, sizeof(out)};

		if (read_until(&l, &b, 1, &eof) != 1 ||
		    T->sendv(&l, &iov, 1) != (ssize_t)sizeof(out))
			_exit(3);
	}
	T->close(&l);
	_exit(0);
}

/* The van's sleep, as van_loop.c does it: arm for bytes, taking the
 * doorbells only when the descriptor was reported since the last arm
 * (DT_ARM_QUIET otherwise), then sleep on the descriptor. Every answer
 * must wake the sleeper (no bell lost), and a quiet arm with nothing
 * sent must leave the descriptor quiet (no stale bell that would spin
 * the I/O thread). */
static void
test_quiet_arm(void **state)
{
	char name[64];
	dt_link lis, l;
	uint8_t buf[8], go = 1;
	int rung = 1, eof;
	pid_t pid;

	(void)state;
	endpoint(name, sizeof(name), "quiet");
	assert_int_equal(T->listen(name, 0, -1, &lis, NULL), DT_OK);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		pinger(name);
	accept_one(&lis, &l);
	for (int i = 0; i < BELL_ROUNDS; i++) {
		struct iovec iov = {&go, 1};
		size_t got = 0;

		/* Nothing is coming: after a quiet arm the fd may still
		 * report a bell rung before it (a reader that found the
		 * bytes by arming), once; the arm after that report takes
		 * it, and the fd is quiet. */
		if (!T->arm(&l, rung ? 0 : DT_ARM_QUIET)) {
			struct pollfd p = {.fd = l.fd, .events = POLLIN};

			rung = 0;
			/* (before round 0 the peer's set-up is still to be
			 * read: recv takes it) */
			if (i > 0 && poll(&p, 1, 20) == 1) {
				assert_false(T->arm(&l, 0));
				assert_int_equal(poll(&p, 1, 20), 0);
			}
		}
		/* (round 0: the peer's set-up first, taken by recv) */
		for (uint64_t end = dt__now_ns() + 5000000000ull;;) {
			ssize_t w = T->sendv(&l, &iov, 1);

			if (w == 1)
				break;
			assert_true(w < 0 && errno == EAGAIN);
			assert_true(dt__now_ns() < end);
			(void)T->recv(&l, buf, 0);
			struct pollfd p = {.fd = l.fd, .events = POLLIN};
			poll(&p, 1, 10);
		}
		while (got < sizeof(buf)) {
			ssize_t n = T->recv(&l, buf + got, sizeof(buf) - got);

			if (n > 0) {
				got += (size_t)n;
				continue;
			}
			assert_true(n < 0 && errno == EAGAIN);
			if (T->arm(&l, rung ? 0 : DT_ARM_QUIET)) {
				rung = 0;
				continue;
			}
			rung = 0;
			/* The answer must ring: 5 s is a lost wake-up. */
			struct pollfd p = {.fd = l.fd, .events = POLLIN};
			assert_int_equal(poll(&p, 1, 5000), 1);
			rung = 1;
		}
		assert_memory_equal(buf, "pingpong", sizeof(buf));
	}
	assert_int_equal(read_until(&l, buf, 1, &eof), 0);
	assert_true(eof);
	assert_int_equal(reap(pid), 0);
	T->close(&l);
	T->close(&lis);
}

/*
 * A request's answer read into the memory the request was sent from (a
 * pushpull in place): one thread sends each round's bytes from buf, and
 * another, as the van's I/O thread does, reads the answer straight into
 * buf. The peer, a forked echo that adds 1 to every byte, is what orders
 * the sender's copy out of buf before the reader's copy into it; the
 * link's own happens-before edge must say so too (ThreadSanitizer sees
 * only this process, and the TSan pass reports a race when the edge is
 * released before the send's copy rather than after). Every answer is
 * checked byte for byte.
 */
#define ECHO_LEN    64
#define ECHO_ROUNDS 300

/* Send all of buf[0..len) within 5 s (not from the test's thread: no
 * cmocka assertion, a failure is the return value). */
static int
send_all(dt_link *l, const uint8_t *buf, size_t len)
{
	uint64_t end = dt__now_ns() + 5000000000ull;
	size_t off = 0;

	while (off < len) {
		struct iovec iov = {(void *)(buf + off), len - off};
		ssize_t w = T->sendv(l, &iov, 1);

		if (w > 0) {
			off += (size_t)w;
			continue;
		}
		if ((w < 0 && errno != EAGAIN) || dt__now_ns() >= end)
			return -1;
		T->wait_writable(l, 100);
	}
	return 0;
}

/* Read exactly len bytes into buf within 20 s: 0, else -1 (the end of the
 * stream first, an error, the deadline); *eof at the end before a byte. */
static int
recv_all(dt_link *l, uint8_t *buf, size_t len, int *eof)
{
	uint64_t end = dt__now_ns() + 20000000000ull;
	size_t got = 0;

	*eof = 0;
	while (got < len) {
		ssize_t n = T->recv(l, buf + got, len - got);

		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		if (n == 0) {
			*eof = got == 0;
			return -1;
		}
		if ((errno != EAGAIN && errno != EINTR) || dt__now_ns() >= end)
			return -1;
		struct pollfd p = {.fd = l->fd, .events = POLLIN};
		poll(&p, 1, 100);
	}
	return 0;
}

/* The peer: each ECHO_LEN bytes back with 1 added, until the end. */
static void
echo_child(const char *name)
{
	dt_link l;
	uint8_t buf[ECHO_LEN];
	int eof;

	if (T->connect(name, 0, dt__now_ns() + 5000000000ull, "test", &l) !=
	    DT_OK)
		_exit(2);
	while (recv_all(&l, buf, sizeof(buf), &eof) == 0) {
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i]++;
		if (send_all(&l, buf, sizeof(buf)))
			_exit(3);
	}
	T->close(&l);
	_exit(eof ? 0 : 4);
}

typedef struct echo_reader {
	dt_link *l;
	uint8_t *buf;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int answered; /* (mu) rounds whose answer came and was right */
	int bad;      /* (mu) a round's answer was wrong or did not come */
} echo_reader;

static void *
echo_read_main(void *arg)
{
	echo_reader *r = arg;
	int eof;

	for (int k = 0; k < ECHO_ROUNDS; k++) {
		int bad = recv_all(r->l, r->buf, ECHO_LEN, &eof) != 0;

		for (int i = 0; i < ECHO_LEN && !bad; i++)
			bad = r->buf[i] != (uint8_t)(k * 7 + i + 1);
		pthread_mutex_lock(&r->mu);
		r->bad = bad;
		r->answered += !bad;
		pthread_cond_signal(&r->cv);
		pthread_mutex_unlock(&r->mu);
		if (bad)
			break;
	}
	return NULL;
}

static void
test_answer_in_place(void **state)
{
	char name[64];
	dt_link lis, l;
	uint8_t buf[ECHO_LEN];
	echo_reader r = {.l = &l, .buf = buf};
	pthread_t th;
	pid_t pid;

	(void)state;
	endpoint(name, sizeof(name), "echo");
	assert_int_equal(T->listen(name, 0, -1, &lis, NULL), DT_OK);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		echo_child(name);
	accept_one(&lis, &l);
	pthread_mutex_init(&r.mu, NULL);
	pthread_cond_init(&r.cv, NULL);
	assert_int_equal(pthread_create(&th, NULL, echo_read_main, &r), 0);
	for (int k = 0; k < ECHO_ROUNDS; k++) {
		/* (the answer before is in and checked: buf is ours) */
		pthread_mutex_lock(&r.mu);
		while (r.answered < k && !r.bad)
			pthread_cond_wait(&r.cv, &r.mu);
		pthread_mutex_unlock(&r.mu);
		if (r.bad)
			break;
		for (int i = 0; i < ECHO_LEN; i++)
			buf[i] = (uint8_t)(k * 7 + i);
		assert_int_equal(send_all(&l, buf, sizeof(buf)), 0);
	}
	pthread_join(th, NULL);
	assert_false(r.bad);
	assert_int_equal(r.answered, ECHO_ROUNDS);
	T->close(&l);
	T->close(&lis);
	assert_int_equal(reap(pid), 0);
	pthread_mutex_destroy(&r.mu);
	pthread_cond_destroy(&r.cv);
}

static void
test_no_listener(void **state)
{
	dt_link l;

	(void)state;
	assert_int_equal(T->connect("dtrain-test.nobody", 0,
	                            dt__now_ns() + 1000000000ull, "van x", &l),
	                 DT_ECONNREFUSED);
	assert_non_null(strstr(dt_errmsg(), "@dtrain-test.nobody"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ring_fit),
	    cmocka_unit_test(test_many_peers),
	    cmocka_unit_test(test_killed_mid_message),
	    cmocka_unit_test(test_copy_once),
	    cmocka_unit_test(test_killed_with_segment),
	    cmocka_unit_test(test_bad_setups),
	    cmocka_unit_test(test_no_listener),
	    cmocka_unit_test(test_quiet_arm),
	    cmocka_unit_test(test_strangers_allocate_nothing),
	    cmocka_unit_test(test_stalled_claim),
	    cmocka_unit_test(test_answer_in_place),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
