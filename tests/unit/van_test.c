/*
 * van_test.c - the TCP transport (src/net/van*.c) in one process: two vans
 * on 127.0.0.1 with port 0, talking through real sockets.
 *
 * What is checked: frames of every size class (empty, one byte, a page,
 * larger than the receive staging buffer and the 16 MiB + 3 that crosses
 * every boundary) arrive intact (CRC-32 of the payload) and in order, also
 * when several threads send on one connection at once; payload_dest places
 * a payload in the caller's buffer; DT_VAN_DISCARD drops one without
 * disturbing the next message; DT_VAN_STREAM hands one over in aligned,
 * ordered pieces that add up to it; a raw socket that sends garbage, a
 * truncated frame or an oversized declared length is dropped with a
 * logged reason while the van goes on serving its other peers; connecting
 * to a closed port fails in time with a message naming the address.
 *
 * Every wait is a poll of shared state with a deadline; no test sleeps a
 * fixed time. Each test ends by checking that the process holds exactly
 * the descriptors it held before (libuv's "the loop closes clean"); ASan's
 * leak checker covers memory in the sanitizer build.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "common/util.h"
#include "net/auth.h"
#include "net/seal.h"
#include "net/sock.h"
#include "net/transport.h"
#include "net/van.h"
#include "unit/fds.h"

#define WAIT_MS    30000 /* generous: the sanitizer build is slow */
#define MAX_RECS   4096
#define MAX_CLOSES 512

/* What a van's hooks saw, written by its I/O thread. */
typedef struct rec {
	dt_msg_hdr h;
	uint32_t crc;      /* CRC-32 of the payload as delivered */
	uint32_t meta_crc; /* of the metadata */
	int meta_nul;      /* meta[meta_len] == '\0' */
	int null_payload;
	int external;
	int streamed;
	void *payload;
	dt_conn *conn;
} rec;

typedef struct sink {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	rec recs[MAX_RECS];
	int nrec;
	dt_conn *close_conn[MAX_CLOSES];
	dt_err close_why[MAX_CLOSES];
	int nclose;
	/* payload_dest behaviour: */
	uint64_t ext_key; /* payloads of this key go to ext_buf */
	uint8_t *ext_buf;
	uint64_t ext_cap;
	uint64_t discard_key; /* payloads of this key are dropped */
	uint64_t stream_key;  /* payloads of this key are streamed */
	uint64_t stream_off;  /* next offset payload_chunk should see */
	uint32_t stream_crc;  /* of the pieces so far */
	int stream_pieces;
	int stream_bad;         /* a piece was misaligned or out of order */
	uint32_t dest_meta_crc; /* meta as payload_dest saw it */
	int dest_calls;
	/* Echo every message back on its connection. */
	dt_van *echo_van;
	/* While gate is set, on_msg waits (the van stops reading); gated
	 * counts the messages that came to the gate. */
	int gate;
	int gated;
	/* Bumped with every broadcast of cv, for dt__van_wait; by_waiter
	 * counts the messages handled in the thread waiter (waiter_set). */
	dt_gen gen;
	pthread_t waiter;
	int waiter_set;
	int by_waiter;
} sink;

static void
sink_init(sink *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->ext_key = UINT64_MAX;
	s->discard_key = UINT64_MAX;
	s->stream_key = UINT64_MAX;
	s->stream_crc = (uint32_t)crc32(0, NULL, 0);
}

static void
sink_fini(sink *s)
{
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
}

static void
on_msg(void *arg, dt_conn *c, dt_msg *m)
{
	sink *s = arg;
	rec r = {0};

	pthread_mutex_lock(&s->mu);
	s->gated++;
	pthread_cond_broadcast(&s->cv);
	while (s->gate)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	r.h = m->hdr;
	r.null_payload = m->payload == NULL;
	r.external = m->payload_external;
	r.streamed = m->streamed;
	r.payload = m->payload;
	r.conn = c;
	r.crc = (uint32_t)crc32(0, NULL, 0);
	if (m->streamed) {
		/* The pieces are in; the next streamed payload starts anew. */
		if (s->stream_off != m->hdr.payload_len)
			s->stream_bad = 1;
		r.crc = s->stream_crc;
		s->stream_off = 0;
		s->stream_crc = (uint32_t)crc32(0, NULL, 0);
	} else if (m->payload) {
		/* zlib's crc32 takes a uInt length: feed it in pieces. */
		const uint8_t *p = m->payload;
		uint64_t left = m->hdr.payload_len;
		while (left) {
			uInt n = (uInt)DT_MIN(left, 1u << 30);
			r.crc = (uint32_t)crc32(r.crc, p, n);
			p += n;
			left -= n;
		}
	}
	r.meta_crc = (uint32_t)crc32(0, m->meta, m->meta ? m->hdr.meta_len : 0);
	r.meta_nul = m->meta == NULL || m->meta[m->hdr.meta_len] == '\0';
	if (s->echo_van) {
		dt_msg_hdr h = m->hdr;
		struct iovec iov = {m->payload,
		                    m->payload ? m->hdr.payload_len : 0};
		dt__van_send(s->echo_van, c, &h, m->meta, m->hdr.meta_len, &iov,
		             1);
	}
	pthread_mutex_lock(&s->mu);
	if (s->nrec < MAX_RECS)
		s->recs[s->nrec++] = r;
	if (s->waiter_set && pthread_equal(pthread_self(), s->waiter))
		s->by_waiter++;
	dt__gen_bump(&s->gen);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void *
payload_dest(void *arg, dt_conn *c, const dt_msg_hdr *h, const uint8_t *meta)
{
	sink *s = arg;

	(void)c;
	s->dest_calls++;
	s->dest_meta_crc = (uint32_t)crc32(0, meta, meta ? h->meta_len : 0);
	if (h->key == s->discard_key)
		return DT_VAN_DISCARD;
	if (h->key == s->stream_key)
		return DT_VAN_STREAM;
	if (h->key == s->ext_key && h->payload_len <= s->ext_cap)
		return s->ext_buf;
	return NULL;
}

static void
payload_chunk(void *arg, dt_conn *c, const dt_msg_hdr *h, const void *data,
              uint64_t off, size_t len)
{
	sink *s = arg;

	(void)c;
	if (off != s->stream_off || off % 4 || len % 4 || len == 0 ||
	    off + len > h->payload_len || (uintptr_t)data % 4)
		s->stream_bad = 1;
	s->stream_crc = (uint32_t)crc32(s->stream_crc, data, (uInt)len);
	s->stream_off = off + len;
	s->stream_pieces++;
}

static void
on_close(void *arg, dt_conn *c, dt_err why)
{
	sink *s = arg;

	pthread_mutex_lock(&s->mu);
	if (s->nclose < MAX_CLOSES) {
		s->close_conn[s->nclose] = c;
		s->close_why[s->nclose] = why;
		s->nclose++;
	}
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* Wait until *counter >= want (under s->mu) or WAIT_MS pass. */
static int
wait_count(sink *s, const int *counter, int want)
{
	uint64_t deadline = dt__now_ns() + WAIT_MS * 1000000ull;
	int ok;

	pthread_mutex_lock(&s->mu);
	while (*counter < want && dt__now_ns() < deadline) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&s->cv, &s->mu, &ts);
	}
	ok = *counter >= want;
	pthread_mutex_unlock(&s->mu);
	return ok;
}

/* Read a counter the I/O thread writes, under the sink's lock. */
static int
sink_read(sink *s, const int *counter)
{
	int v;

	pthread_mutex_lock(&s->mu);
	v = *counter;
	pthread_mutex_unlock(&s->mu);
	return v;
}

#define NREC(s)   sink_read((s), &(s)->nrec)
#define NCLOSE(s) sink_read((s), &(s)->nclose)

#define WAIT_RECS(s, n)   assert_true(wait_count((s), &(s)->nrec, (n)))
#define WAIT_CLOSES(s, n) assert_true(wait_count((s), &(s)->nclose, (n)))

static uint32_t
crc_of(const void *p, size_t n)
{
	return (uint32_t)crc32(crc32(0, NULL, 0), p, (uInt)n);
}

static void
fill_random(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		p[i] = (uint8_t)((x * 0x2545f4914f6cdd1dull) >> 56);
	}
}

static void
assert_msg_has(const char *msg, const char *word)
{
	if (strstr(msg, word) == NULL)
		fail_msg("message '%s' does not mention '%s'", msg, word);
}

/* ---- fixture: the descriptors held before a test, checked after it. */

static int fds_before;
static int saved_stderr = -1;

static void capture_end(char *out, size_t cap);

static int
setup(void **state)
{
	(void)state;
	unsetenv("DT_MAX_MESSAGE");
	unsetenv("DT_SEND_TIMEOUT");
	fds_before = count_fds();
	return 0;
}

/* The same tests again with every frame encrypted (DTRAIN_ENCRYPT=1). */
static int
setup_encrypted(void **state)
{
	setenv("DTRAIN_ENCRYPT", "1", 1);
	return setup(state);
}

/* ...and with the pair on the same-host transport (shm.c), with a small
 * ring so that big frames wrap around it and wait for room many times. */
static int g_shm;

static int
setup_shm(void **state)
{
	g_shm = 1;
	setenv("DTRAIN_SHM_RING", "65536", 1);
	return setup(state);
}

static int
setup_shm_encrypted(void **state)
{
	setenv("DTRAIN_ENCRYPT", "1", 1);
	return setup_shm(state);
}

/* ...and on the process's shared loops (DT_SHARED_LOOP=1): the vans of a
 * test have no thread of their own, and one thread serves both ends. */
static int
setup_shared(void **state)
{
	setenv("DT_SHARED_LOOP", "1", 1);
	return setup(state);
}

static int
setup_shm_shared(void **state)
{
	setenv("DT_SHARED_LOOP", "1", 1);
	return setup_shm(state);
}

static int
teardown(void **state)
{
	(void)state;
	if (saved_stderr >= 0)
		capture_end(NULL, 0);
	unsetenv("DT_SHARED_LOOP");
	unsetenv("DT_MAX_MESSAGE");
	unsetenv("DTRAIN_ENCRYPT");
	unsetenv("DTRAIN_SHM_RING");
	g_shm = 0;
	/* A leak is more descriptors after than before, for good: one still
	 * closing (a peer's end let go by its thread) is given a few
	 * seconds, and fewer than before (a sanitizer's own file) is none. */
	for (uint64_t end = dt__now_ns() + 5000000000ull;
	     count_fds() > fds_before && dt__now_ns() < end;)
		usleep(10000);
	if (count_fds() > fds_before) {
		fprintf(stderr, "descriptor leak: %d open before, %d after\n",
		        fds_before, count_fds());
		return -1;
	}
	return 0;
}

/* ---- stderr capture, to check the logged drop reasons. */

static FILE *capture_file;

static void
capture_begin(void)
{
	fflush(stderr);
	capture_file = tmpfile();
	assert_non_null(capture_file);
	saved_stderr = dup(2);
	assert_true(saved_stderr >= 0);
	dup2(fileno(capture_file), 2);
}

/* Restore stderr; copy what was logged into out (NUL-terminated). */
static void
capture_end(char *out, size_t cap)
{
	size_t n = 0;

	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	saved_stderr = -1;
	if (out && cap) {
		rewind(capture_file);
		n = fread(out, 1, cap - 1, capture_file);
		out[n] = '\0';
	}
	fclose(capture_file);
	capture_file = NULL;
	if (out && cap)
		fputs(out,
		      stderr); /* keep the log visible in the test output */
}

/* ---- a pair of vans: a listens, b connects. */

typedef struct pair {
	sink sa, sb;
	dt_van *a, *b;
	int port;
	char local[64]; /* a's shared-memory endpoint (g_shm) */
	dt_conn *cb;    /* b's connection to a */
} pair;

/* Hooks of a van: on_msg and on_close always, payload_dest and
 * payload_chunk as asked (HOOK_* flags). */
#define HOOK_DEST  1
#define HOOK_CHUNK 2

static dt_van *
make_van(sink *s, int with)
{
	dt_van_hooks hooks = {
	    .arg = s,
	    .on_msg = on_msg,
	    .payload_dest = (with & HOOK_DEST) ? payload_dest : NULL,
	    .payload_chunk = (with & HOOK_CHUNK) ? payload_chunk : NULL,
	    .on_close = on_close};
	dt_van *v = NULL;

	assert_int_equal(dt__van_create(&hooks, &v), DT_OK);
	assert_non_null(v);
	return v;
}

/* DT_SEND_TIMEOUT for a alone (NULL: the default for both), so that a
 * test of a's timeout does not also time b's sends to a, which take their
 * time under a sanitizer on a loaded machine. */
static const char *g_a_send_timeout;

static void
pair_open(pair *p, int with)
{
	memset(p, 0, sizeof(*p));
	sink_init(&p->sa);
	sink_init(&p->sb);
	if (g_a_send_timeout)
		setenv("DT_SEND_TIMEOUT", g_a_send_timeout, 1);
	p->a = make_van(&p->sa, with);
	if (g_a_send_timeout)
		unsetenv("DT_SEND_TIMEOUT");
	p->b = make_van(&p->sb, 0);
	assert_int_equal(dt__van_listen(p->a, "127.0.0.1", 0, -1, &p->port),
	                 DT_OK);
	assert_true(p->port > 0);
	if (g_shm) {
		assert_int_equal(
		    dt__van_listen_local(p->a, p->local, sizeof(p->local)),
		    DT_OK);
		assert_true(p->local[0] != '\0');
	}
	assert_int_equal(dt__van_start(p->a), DT_OK);
	assert_int_equal(dt__van_start(p->b), DT_OK);
	assert_int_equal(dt__van_connect(p->b, "127.0.0.1", p->port, p->local,
	                                 5000, "van a", &p->cb),
	                 DT_OK);
	assert_non_null(p->cb);
	/* the connection is on the transport asked for */
	assert_int_equal(strstr(dt__conn_addr(p->cb), "(shm)") != NULL, g_shm);
	assert_true(dt__conn_is_open(p->cb));
	assert_int_equal(dt__conn_peer(p->cb), -1);
}

static void
pair_close(pair *p)
{
	dt__van_destroy(p->b);
	dt__van_destroy(p->a);
	sink_fini(&p->sa);
	sink_fini(&p->sb);
}

/* Send one frame from b to a with the payload cut into pieces. */
static dt_err
send_pieces(dt_van *v, dt_conn *c, uint8_t cmd, uint64_t seq, uint64_t key,
            const char *meta, const uint8_t *payload, size_t len, int pieces)
{
	struct iovec iov[4];
	size_t cut[5] = {0};
	dt_msg_hdr h = {.cmd = cmd, .seq = seq, .key = key};
	int n = 0;

	/* Cut at 1 byte, then in halves: odd boundaries on purpose. */
	cut[0] = 0;
	if (pieces >= 2 && len >= 2)
		cut[++n] = 1;
	if (pieces >= 3 && len >= 4)
		cut[++n] = len / 2 + 1;
	cut[++n] = len;
	for (int i = 0; i < n; i++)
		iov[i] = (struct iovec){(void *)(payload + cut[i]),
		                        cut[i + 1] - cut[i]};
	return dt__van_send(v, c, &h, meta, meta ? (uint32_t)strlen(meta) : 0,
	                    iov, n);
}

/* ---- tests ---- */

/* b sent and a received exactly total bytes, nothing closed; close. */
static void
check_counts_and_close(pair *p, uint64_t total)
{
	uint64_t sent, recvd;

	dt__van_counters(p->b, &sent, &recvd);
	assert_true(sent == total);
	dt__van_counters(p->a, &sent, &recvd);
	assert_true(recvd == total);
	assert_int_equal(NCLOSE(&p->sa), 0);
	pair_close(p);
}

static void
test_sizes_in_order(void **state)
{
	const size_t sizes[] = {0,
	                        1,
	                        4096,
	                        32767,
	                        32768,
	                        256 << 10,
	                        (256 << 10) + 1,
	                        (16u << 20) + 3,
	                        3};
	enum { N = DT_ARRAY_LEN(sizes) };
	uint32_t want_crc[N], want_meta[N];
	char meta[N][32];
	pair p;

	(void)state;
	pair_open(&p, 0);
	for (int i = 0; i < N; i++) {
		uint8_t *buf = malloc(sizes[i] ? sizes[i] : 1);
		assert_non_null(buf);
		fill_random(buf, sizes[i], (uint64_t)i + 1);
		want_crc[i] = crc_of(buf, sizes[i]);
		snprintf(meta[i], sizeof(meta[i]), "%s%d",
		         i % 2 ? "frame " : "", i);
		want_meta[i] = crc_of(meta[i], strlen(meta[i]));
		assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_TEXT,
		                             100 + (uint64_t)i, 7, meta[i], buf,
		                             sizes[i], 1 + i % 3),
		                 DT_OK);
		free(buf);
	}
	WAIT_RECS(&p.sa, N);
	for (int i = 0; i < N; i++) {
		rec *r = &p.sa.recs[i];

		assert_int_equal(r->h.seq, 100 + i); /* in order */
		assert_int_equal(r->h.cmd, DT_CMD_TEXT);
		assert_int_equal(r->h.key, 7);
		assert_int_equal(r->h.version, DT_WIRE_VERSION);
		assert_true(r->h.payload_len == sizes[i]);
		assert_int_equal(r->h.meta_len, strlen(meta[i]));
		assert_int_equal(r->crc, want_crc[i]);
		assert_int_equal(r->meta_crc, want_meta[i]);
		assert_true(r->meta_nul);
		assert_int_equal(r->null_payload, sizes[i] == 0);
		assert_int_equal(r->external, 0);
		assert_true(r->conn == p.sa.recs[0].conn);
	}
	uint64_t total = 0;
	for (int i = 0; i < N; i++)
		total += DT_HDR_SIZE + strlen(meta[i]) + sizes[i];
	check_counts_and_close(&p, total);
}

/* Corked sends (nested): small frames are held and leave at the outer
 * uncork, a big frame takes the held ones with it, and the receiver sees
 * every frame whole and in order, with the byte counters exact. */
static void
test_corked_in_order(void **state)
{
	const size_t sizes[] = {0, 1, 4096, 65536 - 64, 3,     (1u << 20) + 5,
	                        7, 8, 300,  65536,      65537, 9};
	enum { N = DT_ARRAY_LEN(sizes), ROUNDS = 40 };
	uint32_t want_crc[N];
	uint64_t total = 0;
	pair p;

	(void)state;
	pair_open(&p, 0);
	for (int round = 0; round < ROUNDS; round++) {
		dt__van_cork(p.b);
		dt__van_cork(p.b); /* nested: only the outer uncork flushes */
		for (int i = 0; i < N; i++) {
			uint8_t *buf = malloc(sizes[i] ? sizes[i] : 1);
			assert_non_null(buf);
			fill_random(buf, sizes[i], (uint64_t)i + 1);
			want_crc[i] = crc_of(buf, sizes[i]);
			assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_TEXT,
			                             (uint64_t)(round * N + i),
			                             7, "m", buf, sizes[i],
			                             1 + i % 3),
			                 DT_OK);
			total += DT_HDR_SIZE + 1 + sizes[i];
			free(buf);
		}
		assert_int_equal(dt__van_uncork(p.b), DT_OK);
		assert_int_equal(dt__van_uncork(p.b), DT_OK);
	}
	WAIT_RECS(&p.sa, N * ROUNDS);
	for (int k = 0; k < N * ROUNDS; k++) {
		rec *r = &p.sa.recs[k];

		assert_int_equal(r->h.seq, k); /* in order */
		assert_true(r->h.payload_len == sizes[k % N]);
		assert_int_equal(r->crc, want_crc[k % N]);
	}
	check_counts_and_close(&p, total);
}

/* The accepted side sends too: a echoes everything back to b. */
static void
test_echo(void **state)
{
	const size_t sizes[] = {0, 1, 4096, (16u << 20) + 3, 8};
	enum { N = DT_ARRAY_LEN(sizes) };
	uint32_t want[N];
	pair p;

	(void)state;
	pair_open(&p, 0);
	p.sa.echo_van = p.a;
	for (int i = 0; i < N; i++) {
		uint8_t *buf = malloc(sizes[i] + 1);
		assert_non_null(buf);
		fill_random(buf, sizes[i], 1000 + (uint64_t)i);
		want[i] = crc_of(buf, sizes[i]);
		assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_KV_FIRST + 1,
		                             (uint64_t)i, 0, "echo", buf,
		                             sizes[i], 3),
		                 DT_OK);
		free(buf);
	}
	WAIT_RECS(&p.sb, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(p.sb.recs[i].h.seq, i);
		assert_int_equal(p.sb.recs[i].h.cmd, DT_CMD_KV_FIRST + 1);
		assert_int_equal(p.sb.recs[i].crc, want[i]);
		assert_true(p.sb.recs[i].conn == p.cb);
	}
	pair_close(&p);
}

/*
 * A caller that waits (dt__van_wait) with no spin (DT_SPIN_US=0): with
 * DT_WAIT_DIRECT=1 it sleeps in epoll_wait itself and handles the echoes
 * it waits for in its own thread; with 0 the I/O thread handles them all
 * and wakes it. Either way every round trip completes, and a wake-up that
 * comes with no message (another thread's broadcast) ends the wait at
 * once, not at its deadline.
 */
static void
bump_later(sink *s)
{
	pthread_mutex_lock(&s->mu);
	dt__gen_bump(&s->gen);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void *
bump_main(void *arg)
{
	struct timespec ts = {0, 50 * 1000000L};

	nanosleep(&ts, NULL); /* (the waiter is asleep by then, or not) */
	bump_later(arg);
	return NULL;
}

static void
wait_round_trips(int direct)
{
	enum { ROUNDS = 200 };
	uint8_t byte = 7;
	pthread_t t;
	pair p;

	setenv("DT_SPIN_US", "0", 1);
	setenv("DT_WAIT_DIRECT", direct ? "1" : "0", 1);
	pair_open(&p, 0); /* (the vans read both at creation) */
	unsetenv("DT_SPIN_US");
	unsetenv("DT_WAIT_DIRECT");
	p.sa.echo_van = p.a;
	p.sb.waiter = pthread_self();
	p.sb.waiter_set = 1;
	pthread_mutex_lock(&p.sb.mu);
	for (int i = 0; i < ROUNDS; i++) {
		uint64_t until = dt__now_ns() + WAIT_MS * 1000000ull;

		pthread_mutex_unlock(&p.sb.mu);
		assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_KV_FIRST + 1,
		                             (uint64_t)i, 0, NULL, &byte, 1, 1),
		                 DT_OK);
		pthread_mutex_lock(&p.sb.mu);
		while (p.sb.nrec <= i && dt__now_ns() < until)
			dt__van_wait(p.b, &p.sb.gen, &p.sb.mu, &p.sb.cv, until);
		assert_int_equal(p.sb.nrec, i + 1);
	}
	if (direct)
		assert_true(p.sb.by_waiter > 0);
	else
		assert_int_equal(p.sb.by_waiter, 0);
	fprintf(stderr,
	        "DT_WAIT_DIRECT=%d: %d of %d echoes read by the waiter\n",
	        direct, p.sb.by_waiter, ROUNDS);

	/* A wake-up without a message. */
	uint64_t seen = dt__gen_get(&p.sb.gen), t0 = dt__now_ns();
	assert_int_equal(pthread_create(&t, NULL, bump_main, &p.sb), 0);
	while (dt__gen_get(&p.sb.gen) == seen &&
	       dt__now_ns() - t0 < WAIT_MS * 1000000ull)
		dt__van_wait(p.b, &p.sb.gen, &p.sb.mu, &p.sb.cv,
		             t0 + WAIT_MS * 1000000ull);
	pthread_mutex_unlock(&p.sb.mu);
	pthread_join(t, NULL);
	assert_true(dt__gen_get(&p.sb.gen) != seen);
	/* 50 ms of sleep and at most a few ms more; 5 s is a margin for a
	 * loaded machine, far below the 30 s deadline. */
	assert_true(dt__now_ns() - t0 < 5000000000ull);
	pair_close(&p);
}

static void
test_wait_direct(void **state)
{
	(void)state;
	wait_round_trips(1);
	wait_round_trips(0);
}

/*
 * Over shared memory, the I/O thread never sends a remote segment (a peer
 * could claim it and never copy it: shm_test's test_stalled_claim): a's
 * echo of a 4 MiB frame, sent from a's I/O thread, comes through the ring,
 * so at most b's own send (from this thread) is copied once. (Segments
 * are off by default: on here, from 256 KiB.)
 */
static void
test_io_thread_no_segments(void **state)
{
	const size_t len = 4u << 20;
	uint8_t *buf = malloc(len);
	pair p;

	(void)state;
	assert_non_null(buf);
	setenv("DTRAIN_SHM_COPY_ONCE", "262144", 1);
	pair_open(&p, 0);
	p.sa.echo_van = p.a;
	fill_random(buf, len, 77);
	uint64_t c0 = dt__shm_copied_once();
	assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_KV_FIRST + 1, 0, 0,
	                             "echo", buf, len, 1),
	                 DT_OK);
	WAIT_RECS(&p.sb, 1);
	uint64_t once = dt__shm_copied_once() - c0;
	assert_int_equal(p.sb.recs[0].crc, crc_of(buf, len));
	print_message("copied once: %llu of the %zu sent and %zu echoed\n",
	              (unsigned long long)once, len, len);
	if (once > len)
		fail_msg("the echo from the I/O thread went as remote "
		         "segments (%llu bytes copied once)",
		         (unsigned long long)once);
	free(buf);
	pair_close(&p);
	unsetenv("DTRAIN_SHM_COPY_ONCE");
}

static void
gate_set(sink *s, int closed)
{
	pthread_mutex_lock(&s->mu);
	s->gate = closed;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/*
 * The thread that reads never waits for a peer that does not read: a
 * echoes a 32 MiB frame to b, whose reading thread is held in a hook, and
 * a still answers a third van meanwhile (a handshake, then an echo)
 * while the frame waits; once b reads again, it gets the frame whole.
 * With stuck = 1, a's DT_SEND_TIMEOUT is 1 s instead, and the queue that
 * does not move ends the connection (on_close: DT_ETIMEDOUT).
 */
static void
hook_send_to_stuck_peer(int stuck)
{
	const size_t big = 32u << 20;
	uint8_t *buf = malloc(big);
	pair p, q;
	sink sc;
	dt_van *vc;
	dt_conn *cc = NULL, *toward_b;

	assert_non_null(buf);
	fill_random(buf, big, 77);
	g_a_send_timeout = stuck ? "1" : "600";
	pair_open(&p, 0);
	g_a_send_timeout = NULL;
	p.sa.echo_van = p.a;
	/* b's reading thread stops in its hook at a's first echo */
	gate_set(&p.sb, 1);
	assert_int_equal(
	    send_pieces(p.b, p.cb, DT_CMD_KV_FIRST, 0, 0, NULL, buf, 8, 1),
	    DT_OK);
	assert_true(wait_count(&p.sb, &p.sb.gated, 1));
	assert_int_equal(
	    send_pieces(p.b, p.cb, DT_CMD_KV_FIRST, 1, 0, NULL, buf, big, 3),
	    DT_OK);
	WAIT_RECS(&p.sa, 2);
	toward_b = p.sa.recs[1].conn;
	/* a third van is served meanwhile */
	memset(&q, 0, sizeof(q));
	sink_init(&sc);
	vc = make_van(&sc, 0);
	assert_int_equal(dt__van_start(vc), DT_OK);
	assert_int_equal(dt__van_connect(vc, "127.0.0.1", p.port, NULL, WAIT_MS,
	                                 "van a", &cc),
	                 DT_OK);
	assert_int_equal(
	    send_pieces(vc, cc, DT_CMD_KV_FIRST, 5, 0, "hi", buf, 4096, 2),
	    DT_OK);
	WAIT_RECS(&sc, 1);
	assert_int_equal(sc.recs[0].crc, crc_of(buf, 4096));
	if (!stuck) {
		/* the frame still waits, and arrives whole */
		assert_true(dt__conn_is_open(toward_b));
		assert_int_equal(NCLOSE(&p.sa), 0);
		gate_set(&p.sb, 0);
		WAIT_RECS(&p.sb, 2);
		assert_int_equal(p.sb.recs[0].h.seq, 0);
		assert_int_equal(p.sb.recs[1].h.seq, 1);
		assert_true(p.sb.recs[1].h.payload_len == big);
		assert_int_equal(p.sb.recs[1].crc, crc_of(buf, big));
		assert_int_equal(NCLOSE(&p.sa), 0);
	} else {
		WAIT_CLOSES(&p.sa, 1);
		assert_true(p.sa.close_conn[0] == toward_b);
		assert_int_equal(p.sa.close_why[0], DT_ETIMEDOUT);
		gate_set(&p.sb, 0);
		WAIT_CLOSES(&p.sb, 1);
	}
	dt__van_destroy(vc);
	sink_fini(&sc);
	pair_close(&p);
	free(buf);
}

static void
test_hook_never_waits(void **state)
{
	(void)state;
	hook_send_to_stuck_peer(0);
}

static void
test_stuck_queue_ends(void **state)
{
	(void)state;
	hook_send_to_stuck_peer(1);
}

/* Several threads share one connection; frames never interleave. */
#define SENDERS    4
#define PER_SENDER 150

typedef struct sender_arg {
	pair *p;
	int id;
	dt_err err;
} sender_arg;

static void *
sender_main(void *arg)
{
	sender_arg *a = arg;
	uint8_t *buf = malloc(70000);

	a->err = buf ? DT_OK : DT_ENOMEM;
	for (int i = 0; i < PER_SENDER && !a->err; i++) {
		size_t len = (size_t)((a->id * 7919 + i * 104729) % 70000);
		dt_msg_hdr h = {.cmd = DT_CMD_COLL_FIRST,
		                .key = (uint64_t)a->id,
		                .seq = (uint64_t)i};
		struct iovec iov = {buf, len};

		fill_random(buf, len, (uint64_t)(a->id * 100000 + i));
		h.arg0 = crc_of(buf, len);
		a->err = dt__van_send(a->p->b, a->p->cb, &h, NULL, 0, &iov, 1);
	}
	free(buf);
	return NULL;
}

static void
test_concurrent_senders(void **state)
{
	pthread_t th[SENDERS];
	sender_arg args[SENDERS];
	uint64_t next[SENDERS] = {0};
	pair p;

	(void)state;
	pair_open(&p, 0);
	for (int t = 0; t < SENDERS; t++) {
		args[t] = (sender_arg){&p, t, DT_OK};
		assert_int_equal(
		    pthread_create(&th[t], NULL, sender_main, &args[t]), 0);
	}
	for (int t = 0; t < SENDERS; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(args[t].err, DT_OK);
	}
	WAIT_RECS(&p.sa, SENDERS * PER_SENDER);
	for (int i = 0; i < SENDERS * PER_SENDER; i++) {
		rec *r = &p.sa.recs[i];

		assert_true(r->h.key < SENDERS);
		assert_true(r->h.seq == next[r->h.key]); /* per-thread order */
		next[r->h.key]++;
		assert_true(r->crc == r->h.arg0);
	}
	pair_close(&p);
}

/* payload_dest: the payload lands in the caller's buffer. */
static void
test_payload_dest(void **state)
{
	const size_t sizes[] = {10, (1u << 20) + 5, 0};
	pair p;

	(void)state;
	pair_open(&p, HOOK_DEST);
	p.sa.ext_cap = (1u << 20) + 5;
	p.sa.ext_buf = calloc(1, p.sa.ext_cap);
	assert_non_null(p.sa.ext_buf);
	p.sa.ext_key = 42;
	for (size_t i = 0; i < DT_ARRAY_LEN(sizes); i++) {
		uint8_t *buf = malloc(sizes[i] + 1);
		int before = NREC(&p.sa);

		assert_non_null(buf);
		fill_random(buf, sizes[i], 77 + i);
		assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_KV_FIRST, i, 42,
		                             "pull-reply", buf, sizes[i], 2),
		                 DT_OK);
		WAIT_RECS(&p.sa, before + 1);
		rec *r = &p.sa.recs[before];
		if (sizes[i]) {
			assert_int_equal(r->external, 1);
			assert_ptr_equal(r->payload, p.sa.ext_buf);
			assert_memory_equal(p.sa.ext_buf, buf, sizes[i]);
			/* The hook saw the message's metadata. */
			assert_int_equal(p.sa.dest_meta_crc,
			                 crc_of("pull-reply", 10));
		} else {
			/* No payload: no buffer asked for. */
			assert_int_equal(r->null_payload, 1);
		}
		free(buf);
	}
	/* Other keys still use the van's own buffer. */
	uint8_t small[100];
	fill_random(small, sizeof(small), 5);
	assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_KV_FIRST, 9, 1, NULL,
	                             small, sizeof(small), 1),
	                 DT_OK);
	WAIT_RECS(&p.sa, 4);
	assert_int_equal(p.sa.recs[3].external, 0);
	assert_true(p.sa.recs[3].payload != p.sa.ext_buf);
	assert_int_equal(p.sa.recs[3].crc, crc_of(small, sizeof(small)));
	/* payload_dest is asked only for messages with a payload. */
	assert_int_equal(p.sa.dest_calls, 3);
	pair_close(&p);
	free(p.sa.ext_buf);
}

/* DT_VAN_DISCARD reads a payload away; the stream stays in step. */
static void
test_discard(void **state)
{
	const size_t sizes[] = {1, 5000, (3u << 20) + 1};
	pair p;

	(void)state;
	pair_open(&p, HOOK_DEST);
	p.sa.discard_key = 13;
	for (size_t i = 0; i < DT_ARRAY_LEN(sizes); i++) {
		uint8_t *junk = malloc(sizes[i]);
		uint8_t next[333];
		int before = NREC(&p.sa);

		assert_non_null(junk);
		memset(junk, 0xdd, sizes[i]);
		fill_random(next, sizeof(next), i);
		assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_KV_FIRST, 1, 13,
		                             "wrong size", junk, sizes[i], 3),
		                 DT_OK);
		assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_KV_FIRST, 2, 14,
		                             "next", next, sizeof(next), 1),
		                 DT_OK);
		WAIT_RECS(&p.sa, before + 2);
		rec *d = &p.sa.recs[before], *n = &p.sa.recs[before + 1];
		assert_int_equal(d->h.key, 13);
		assert_int_equal(d->null_payload, 1);
		assert_true(d->h.payload_len == sizes[i]);
		assert_int_equal(d->meta_crc, crc_of("wrong size", 10));
		assert_int_equal(n->h.key, 14);
		assert_int_equal(n->h.seq, 2);
		assert_int_equal(n->crc, crc_of(next, sizeof(next)));
		free(junk);
	}
	assert_int_equal(NCLOSE(&p.sa), 0);
	pair_close(&p);
}

/* DT_VAN_STREAM: the payload comes in pieces, 4-byte aligned (offset and
 * address, whatever the meta before it), in order,
 * adding up to the payload; one that is not a multiple of 4 long, or a
 * van without payload_chunk, falls back to a buffer. */
static void
test_stream(void **state)
{
	const size_t sizes[] = {4, 8, 4096, (1u << 20) + 4, 3u << 20, 10, 0};
	pair p;

	(void)state;
	pair_open(&p, HOOK_DEST | HOOK_CHUNK);
	p.sa.stream_key = 5;
	for (size_t i = 0; i < DT_ARRAY_LEN(sizes); i++) {
		uint8_t *buf = malloc(sizes[i] + 1);
		int before = NREC(&p.sa);

		assert_non_null(buf);
		fill_random(buf, sizes[i], 500 + i);
		/* (meta of 3 bytes: the payload starts at an odd place in
		 * the receiver's stage, and still comes aligned) */
		assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_KV_FIRST, i, 5,
		                             i % 2 ? "pus" : "push", buf,
		                             sizes[i], 3),
		                 DT_OK);
		WAIT_RECS(&p.sa, before + 1);
		rec *r = &p.sa.recs[before];
		assert_int_equal(r->h.seq, i);
		assert_int_equal(r->crc, crc_of(buf, sizes[i]));
		if (sizes[i] && sizes[i] % 4 == 0) {
			assert_int_equal(r->streamed, 1);
			assert_int_equal(r->null_payload, 1);
		} else {
			assert_int_equal(r->streamed, 0);
			assert_int_equal(r->null_payload, sizes[i] == 0);
		}
		assert_int_equal(p.sa.stream_bad, 0);
		free(buf);
	}
	assert_true(p.sa.stream_pieces >= 5);
	pair_close(&p);

	/* No payload_chunk hook: DT_VAN_STREAM means a buffer. */
	pair_open(&p, HOOK_DEST);
	p.sa.stream_key = 5;
	uint8_t x[64];
	fill_random(x, sizeof(x), 9);
	assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_KV_FIRST, 1, 5, NULL, x,
	                             sizeof(x), 1),
	                 DT_OK);
	WAIT_RECS(&p.sa, 1);
	assert_int_equal(p.sa.recs[0].streamed, 0);
	assert_int_equal(p.sa.recs[0].null_payload, 0);
	assert_int_equal(p.sa.recs[0].crc, crc_of(x, sizeof(x)));
	assert_int_equal(p.sa.stream_pieces, 0);
	pair_close(&p);
}

/* DT_CUT_EVERY (dt__van_set_cut): every 2nd frame of 1 MiB or more is cut
 * inside its payload: the sender is told the connection closed, the
 * receiver streamed a part (ending on a whole float) and never delivers
 * the frame, and the connection ends on both sides. Small frames and the
 * 1st big one go whole. */
static void
test_cut_frame(void **state)
{
	const size_t big = (2u << 20) + 8;
	uint8_t *buf = malloc(big);
	pair p;

	(void)state;
	assert_non_null(buf);
	fill_random(buf, big, 77);
	pair_open(&p, HOOK_DEST | HOOK_CHUNK);
	p.sa.stream_key = 5;
	dt__van_set_cut(p.b, 2);
	assert_int_equal(
	    send_pieces(p.b, p.cb, DT_CMD_KV_FIRST, 1, 5, "pus", buf, 4096, 1),
	    DT_OK);
	assert_int_equal(
	    send_pieces(p.b, p.cb, DT_CMD_KV_FIRST, 2, 5, "pus", buf, big, 1),
	    DT_OK);
	WAIT_RECS(&p.sa, 2);
	assert_int_equal(p.sa.recs[1].crc, crc_of(buf, big));
	p.sa.stream_off = 0;
	p.sa.stream_crc = 0;
	assert_int_equal(
	    send_pieces(p.b, p.cb, DT_CMD_KV_FIRST, 3, 5, "pus", buf, big, 1),
	    DT_ECLOSED);
	assert_non_null(strstr(dt_errmsg(), "DT_CUT_EVERY"));
	WAIT_CLOSES(&p.sa, 1);
	WAIT_CLOSES(&p.sb, 1);
	assert_int_equal(NREC(&p.sa), 2); /* the cut frame never counts */
	/* what was streamed: a whole-float prefix of about half */
	assert_int_equal(p.sa.stream_bad, 0);
	assert_true(p.sa.stream_off <= big / 2 + 2);
	assert_int_equal(p.sa.stream_off % 4, 0);
	assert_int_equal(p.sa.stream_crc,
	                 p.sa.stream_off ? crc_of(buf, p.sa.stream_off) : 0);
	assert_false(dt__conn_is_open(p.cb));
	pair_close(&p);
	free(buf);
}

/* ---- raw sockets that do not speak the protocol ---- */

static void raw_send(int fd, const void *p, size_t n);

/* Read exactly n bytes from a blocking socket; 0 if it ends first. */
static int
raw_recv(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		ssize_t r = recv(fd, b, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return 0;
		b += r;
		n -= (size_t)r;
	}
	return 1;
}

/* The connector's handshake on a raw socket, with the key of auth (or the
 * environment's when NULL); when encrypting, the two directions' state
 * go to *tx and *rx. 1 if the van's challenge checked out. */
static int
raw_auth_with(int fd, const dt_auth *auth, dt_crypt **tx, dt_crypt **rx)
{
	uint8_t hello[DT_AUTH_HELLO_LEN], chal[DT_AUTH_CHALLENGE_LEN];
	uint8_t proof[DT_AUTH_PROOF_LEN];
	dt_auth *own = NULL;
	dt_crypt *t = NULL, *r = NULL;
	dt_auth_hs hs;
	int ok;

	if (auth == NULL) {
		assert_int_equal(dt__auth_from_env(&own), DT_OK);
		auth = own;
	}
	dt__auth_hello(auth, &hs, hello);
	raw_send(fd, hello, sizeof(hello));
	ok = raw_recv(fd, chal, sizeof(chal)) &&
	     dt__auth_on_challenge(auth, &hs, chal, proof, &t, &r) == DT_OK;
	if (ok)
		raw_send(fd, proof, sizeof(proof));
	if (tx && rx) {
		*tx = t;
		*rx = r;
	} else {
		dt__crypt_free(t);
		dt__crypt_free(r);
	}
	dt__auth_free(own);
	return ok;
}

static int
raw_connect_noauth(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;

	assert_true(fd >= 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* A raw socket that has authenticated (with the test secret): what it
 * sends next is judged as frames. */
static int
raw_connect(int port)
{
	int fd = raw_connect_noauth(port);

	assert_true(raw_auth_with(fd, NULL, NULL, NULL));
	return fd;
}

static void
raw_send(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		assert_true(w > 0);
		b += w;
		n -= (size_t)w;
	}
}

/* The van hangs up on fd: EOF (or a reset) within the deadline. */
static int
wait_hangup(int fd)
{
	uint64_t deadline = dt__now_ns() + WAIT_MS * 1000000ull;
	char b[256];

	while (dt__now_ns() < deadline) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (poll(&pfd, 1, 50) <= 0)
			continue;
		ssize_t n = recv(fd, b, sizeof(b), 0);
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
			return 1;
	}
	return 0;
}

static void
frame_header(uint8_t out[DT_HDR_SIZE], uint8_t cmd, uint32_t meta_len,
             uint64_t payload_len)
{
	dt_msg_hdr h = {
	    .cmd = cmd, .meta_len = meta_len, .payload_len = payload_len};

	dt__hdr_encode(&h, out);
}

typedef struct bad_case {
	const char *name;
	const char *logged; /* the reason must name this */
	dt_err why;         /* what on_close reports */
	int closes_first;   /* the client hangs up after sending */
	size_t ngarbage;    /* bytes of text garbage, or */
	uint8_t cmd;        /* a header with these fields, cut at cut */
	uint32_t meta_len;
	uint64_t payload_len;
	size_t cut;
	size_t extra; /* bytes of body sent after the header */
} bad_case;

static void
test_bad_peers(void **state)
{
	const uint64_t limit = 1u << 20; /* DT_MAX_MESSAGE for this van */
	const bad_case cases[] = {
	    {.name = "text garbage",
	     .logged = "magic",
	     .why = DT_EPROTO,
	     .ngarbage = 200},
	    {.name = "short garbage, then close",
	     .logged = "truncated",
	     .why = DT_EPROTO,
	     .closes_first = 1,
	     .ngarbage = 10},
	    {.name = "truncated header, then close",
	     .logged = "truncated",
	     .why = DT_EPROTO,
	     .closes_first = 1,
	     .cmd = DT_CMD_HELLO,
	     .cut = 30},
	    {.name = "oversized payload length",
	     .logged = "payload length",
	     .why = DT_ETOOBIG,
	     .cmd = DT_CMD_KV_FIRST,
	     .payload_len = limit + 1,
	     .cut = DT_HDR_SIZE},
	    {.name = "payload length 2^63",
	     .logged = "payload length",
	     .why = DT_ETOOBIG,
	     .cmd = DT_CMD_TEXT,
	     .meta_len = 4,
	     .payload_len = 1ull << 63,
	     .cut = DT_HDR_SIZE},
	    {.name = "oversized metadata length",
	     .logged = "metadata length",
	     .why = DT_ETOOBIG,
	     .cmd = DT_CMD_ADD_NODE,
	     .meta_len = DT_MAX_META + 1,
	     .cut = DT_HDR_SIZE},
	    {.name = "unknown command",
	     .logged = "command",
	     .why = DT_EPROTO,
	     .cmd = 200,
	     .cut = DT_HDR_SIZE},
	    {.name = "truncated metadata, then close",
	     .logged = "truncated",
	     .why = DT_EPROTO,
	     .closes_first = 1,
	     .cmd = DT_CMD_TEXT,
	     .meta_len = 100,
	     .cut = DT_HDR_SIZE,
	     .extra = 50},
	    {.name = "truncated payload, then close",
	     .logged = "truncated",
	     .why = DT_EPROTO,
	     .closes_first = 1,
	     .cmd = DT_CMD_KV_FIRST,
	     .payload_len = 1000,
	     .cut = DT_HDR_SIZE,
	     .extra = 999},
	    {.name = "payload within the limit, never sent",
	     .logged = "truncated",
	     .why = DT_EPROTO,
	     .closes_first = 1,
	     .cmd = DT_CMD_KV_FIRST,
	     .payload_len = limit,
	     .cut = DT_HDR_SIZE},
	};
	char log[16384];
	pair p;

	(void)state;
	setenv("DT_MAX_MESSAGE", "1048576", 1);
	pair_open(&p, 0);
	unsetenv("DT_MAX_MESSAGE");

	/* b is a good peer, connected before the trouble starts. */
	uint8_t hello[10] = "good peer";
	assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_TEXT, 1, 0, "x", hello,
	                             sizeof(hello), 1),
	                 DT_OK);
	WAIT_RECS(&p.sa, 1);

	for (size_t i = 0; i < DT_ARRAY_LEN(cases); i++) {
		const bad_case *bc = &cases[i];
		int fd, before = NCLOSE(&p.sa);
		uint8_t buf[DT_HDR_SIZE + 1024];
		size_t n;

		print_message("bad peer: %s\n", bc->name);
		capture_begin();
		fd = raw_connect(p.port);
		if (bc->ngarbage) {
			for (n = 0; n < bc->ngarbage; n++)
				buf[n] =
				    (uint8_t) "Not a dtrain peer! "[n % 19];
		} else {
			frame_header(buf, bc->cmd, bc->meta_len,
			             bc->payload_len);
			memset(buf + DT_HDR_SIZE, 'm', bc->extra);
			n = bc->cut + bc->extra;
		}
		raw_send(fd, buf, n);
		if (bc->closes_first)
			close(fd);
		WAIT_CLOSES(&p.sa, before + 1);
		if (!bc->closes_first) {
			/* The van hung up on the bad peer by itself. */
			assert_true(wait_hangup(fd));
			close(fd);
		}
		capture_end(log, sizeof(log));
		assert_int_equal(p.sa.close_why[before], bc->why);
		assert_true(p.sa.close_why[before] != DT_ECLOSED);
		assert_msg_has(log, "dropping connection from 127.0.0.1:");
		assert_msg_has(log, bc->logged);
		/* Nothing of it reached the owner. */
		assert_int_equal(NREC(&p.sa), 1);
	}

	/* The good peer is still served... */
	assert_true(dt__conn_is_open(p.cb));
	assert_int_equal(send_pieces(p.b, p.cb, DT_CMD_TEXT, 2, 0, "y", hello,
	                             sizeof(hello), 1),
	                 DT_OK);
	WAIT_RECS(&p.sa, 2);
	assert_int_equal(p.sa.recs[1].h.seq, 2);
	assert_int_equal(p.sa.recs[1].crc, crc_of(hello, sizeof(hello)));

	/* ...and so is a new one, sending a frame byte by byte. */
	int fd = raw_connect(p.port);
	uint8_t frame[DT_HDR_SIZE + 3 + 5];
	dt_msg_hdr h = {
	    .cmd = DT_CMD_TEXT, .seq = 3, .meta_len = 3, .payload_len = 5};
	dt__hdr_encode(&h, frame);
	memcpy(frame + DT_HDR_SIZE, "abc12345", 8);
	for (size_t i = 0; i < sizeof(frame); i++)
		raw_send(fd, frame + i, 1);
	WAIT_RECS(&p.sa, 3);
	assert_int_equal(p.sa.recs[2].h.seq, 3);
	assert_int_equal(p.sa.recs[2].crc, crc_of("12345", 5));
	assert_int_equal(p.sa.recs[2].meta_crc, crc_of("abc", 3));
	assert_true(p.sa.recs[2].conn != p.sa.recs[0].conn);

	/* A clean hang-up between frames is DT_ECLOSED, not logged as bad. */
	int before = NCLOSE(&p.sa);
	close(fd);
	WAIT_CLOSES(&p.sa, before + 1);
	assert_int_equal(p.sa.close_why[before], DT_ECLOSED);
	pair_close(&p);
}

/*
 * A dropped connection gives back its descriptor and buffers at once, not
 * when the van is destroyed: a scheduler that is port-scanned, probed by
 * a health check or sent garbage for a week must not run out of
 * descriptors (accept would then fail on every wake-up of the loop).
 */
static void
test_dropped_conns_release_fds(void **state)
{
	enum { N = 200 };
	uint8_t x = 1;
	pair p;
	int base;

	(void)state;
	pair_open(&p, 0);
	assert_int_equal(
	    send_pieces(p.b, p.cb, DT_CMD_TEXT, 1, 0, NULL, &x, 1, 1), DT_OK);
	WAIT_RECS(&p.sa, 1);
	base = count_fds();
	capture_begin(); /* N lines of drop reasons */
	for (int i = 0; i < N; i++) {
		int fd = raw_connect(p.port);
		if (i % 2)
			raw_send(fd,
			         "garbage, not a frame, not at all, no. "
			         "garbage, not a frame, not at all, no.",
			         76);
		close(fd); /* odd: a bad frame; even: a clean hang-up */
	}
	int ok = wait_count(&p.sa, &p.sa.nclose, N);
	capture_end(NULL, 0);
	assert_true(ok);
	/* The van closes each one after its on_close hook: poll for it. */
	uint64_t deadline = dt__now_ns() + 5000000000ull;
	while (count_fds() > base && dt__now_ns() < deadline) {
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (count_fds() != base)
		fail_msg("%d descriptors held after %d connections were "
		         "dropped (%d before)",
		         count_fds(), N, base);
	/* And the van still serves its good peer. */
	assert_int_equal(
	    send_pieces(p.b, p.cb, DT_CMD_TEXT, 2, 0, NULL, &x, 1, 1), DT_OK);
	WAIT_RECS(&p.sa, 2);
	pair_close(&p);
}

/* Many frames in one write: the van cuts them all out of one read. */
static void
test_coalesced_frames(void **state)
{
	enum { N = 500 };
	uint8_t *stream = malloc(N * (DT_HDR_SIZE + 16));
	size_t len = 0;
	pair p;

	(void)state;
	assert_non_null(stream);
	pair_open(&p, 0);
	for (int i = 0; i < N; i++) {
		dt_msg_hdr h = {.cmd = DT_CMD_TEXT,
		                .seq = (uint64_t)i,
		                .payload_len = (uint64_t)(i % 17)};
		dt__hdr_encode(&h, stream + len);
		len += DT_HDR_SIZE;
		memset(stream + len, i & 0xff, (size_t)(i % 17));
		len += (size_t)(i % 17);
	}
	int fd = raw_connect(p.port);
	raw_send(fd, stream, len);
	WAIT_RECS(&p.sa, N);
	for (int i = 0; i < N; i++) {
		uint8_t want[16];
		memset(want, i & 0xff, sizeof(want));
		assert_int_equal(p.sa.recs[i].h.seq, i);
		assert_int_equal(p.sa.recs[i].crc,
		                 crc_of(want, (size_t)(i % 17)));
	}
	close(fd);
	WAIT_CLOSES(&p.sa, 1);
	assert_int_equal(p.sa.close_why[0], DT_ECLOSED);
	pair_close(&p);
	free(stream);
}

/* A free port: bind port 0, read it, close the socket. */
static int
closed_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

static void
test_connect_closed_port(void **state)
{
	const int timeouts_ms[] = {0, 300, 1500};
	sink s;
	dt_van *v;

	(void)state;
	sink_init(&s);
	v = make_van(&s, 0);
	assert_int_equal(dt__van_start(v), DT_OK);
	for (size_t i = 0; i < DT_ARRAY_LEN(timeouts_ms); i++) {
		int port = closed_port();
		dt_conn *c = NULL;
		char where[64];
		uint64_t t0 = dt__now_ns();
		dt_err err = dt__van_connect(v, "127.0.0.1", port, NULL,
		                             timeouts_ms[i], "test peer", &c);
		double ms = (double)(dt__now_ns() - t0) / 1e6;

		assert_true(err == DT_ECONNREFUSED || err == DT_ETIMEDOUT);
		assert_null(c);
		/* It waited for the peer to come up, but not much longer. */
		assert_true(ms <= timeouts_ms[i] + 1000);
		assert_true(ms >= timeouts_ms[i] * 0.9);
		snprintf(where, sizeof(where), "127.0.0.1:%d", port);
		assert_msg_has(dt_errmsg(), where);
		assert_msg_has(dt_errmsg(), "test peer");
	}
	dt__van_destroy(v);
	sink_fini(&s);
}

/* A peer that starts listening late is reached by the retries. */
typedef struct late_arg {
	int port;
	dt_van *v;
	uint64_t delay_ns;
} late_arg;

static void *
late_listener(void *arg)
{
	late_arg *a = arg;
	uint64_t until = dt__now_ns() + a->delay_ns;
	int port = 0;

	/* Spin on the clock with short naps: the delay is the point. */
	while (dt__now_ns() < until) {
		struct timespec ts = {0, 5 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (dt__van_listen(a->v, "127.0.0.1", a->port, -1, &port) == DT_OK)
		dt__van_start(a->v);
	return NULL;
}

static void
test_connect_retries(void **state)
{
	sink sa, sb;
	dt_van *a, *b;
	dt_conn *c = NULL;
	pthread_t th;

	(void)state;
	sink_init(&sa);
	sink_init(&sb);
	a = make_van(&sa, 0);
	b = make_van(&sb, 0);
	assert_int_equal(dt__van_start(b), DT_OK);
	late_arg arg = {closed_port(), a, 300 * 1000000ull};
	pthread_create(&th, NULL, late_listener, &arg);
	dt_err err = dt__van_connect(b, "127.0.0.1", arg.port, NULL, 10000,
	                             "late peer", &c);
	pthread_join(th, NULL);
	if (err != DT_OK)
		fail_msg("connect: %s", dt_errmsg());
	uint8_t x = 1;
	assert_int_equal(send_pieces(b, c, DT_CMD_TEXT, 5, 0, NULL, &x, 1, 1),
	                 DT_OK);
	WAIT_RECS(&sa, 1);
	assert_int_equal(sa.recs[0].h.seq, 5);
	dt__van_destroy(b);
	dt__van_destroy(a);
	sink_fini(&sa);
	sink_fini(&sb);
}

/* A peer that accepts and at once closes every connection (one whose
 * pending slots strangers hold, say), until stop is set. */
typedef struct {
	int fd;
	atomic_int stop, cut;
} cutter_arg;

static void *
cutter_main(void *p)
{
	cutter_arg *a = p;

	while (!atomic_load(&a->stop)) {
		struct pollfd pfd = {.fd = a->fd, .events = POLLIN};

		if (poll(&pfd, 1, 20) != 1)
			continue;
		int fd = accept(a->fd, NULL, NULL);

		if (fd >= 0) {
			close(fd);
			atomic_fetch_add(&a->cut, 1);
		}
	}
	return NULL;
}

typedef struct {
	dt_van *v;
	int port;
	dt_err err;
	char msg[512];
} dial_arg;

static void *
dial_main(void *p)
{
	dial_arg *a = p;
	dt_conn *c = NULL;

	a->err = dt__van_connect(a->v, "127.0.0.1", a->port, NULL, 60000,
	                         "gone peer", &c);
	snprintf(a->msg, sizeof(a->msg), "%s", dt_errmsg());
	return NULL;
}

/* Dialling: a handshake cut again and again is tried again until the
 * deadline, and the error says what happened (not "wrong secret"); a dial
 * that waits for a peer that is gone stops at once when told to. */
static void
test_dial_cut_and_stop(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	cutter_arg cut = {.fd = socket(AF_INET, SOCK_STREAM, 0)};
	sink s;
	dt_van *v;
	pthread_t th;

	(void)state;
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(bind(cut.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(cut.fd, 16), 0);
	getsockname(cut.fd, (struct sockaddr *)&sa, &len);
	sink_init(&s);
	v = make_van(&s, 0);
	assert_int_equal(dt__van_start(v), DT_OK);
	pthread_create(&th, NULL, cutter_main, &cut);
	dt_conn *c = NULL;
	dt_err err = dt__van_connect(v, "127.0.0.1", ntohs(sa.sin_port), NULL,
	                             1500, "cut peer", &c);
	atomic_store(&cut.stop, 1);
	pthread_join(th, NULL);
	close(cut.fd);
	assert_int_equal(err, DT_ECLOSED);
	assert_true(atomic_load(&cut.cut) >= 2);
	assert_msg_has(dt_errmsg(), "before answering the handshake");
	assert_msg_has(dt_errmsg(), "times in");
	assert_msg_has(dt_errmsg(), "overloaded");
	assert_null(strstr(dt_errmsg(), "authentication failed"));

	/* A peer that is gone: refused until stopped, then at once. */
	dial_arg d = {.v = v, .port = closed_port()};
	pthread_create(&th, NULL, dial_main, &d);
	usleep(200000); /* (it dials meanwhile; the stop holds either way) */
	uint64_t t0 = dt__now_ns();
	dt__van_stop_dials(v);
	pthread_join(th, NULL);
	assert_true(dt__now_ns() - t0 < 5000000000ull); /* 60 s before */
	assert_int_equal(d.err, DT_ESHUTDOWN);
	assert_msg_has(d.msg, "shutting down");
	dt__van_destroy(v);
	sink_fini(&s);
}

/* Closing: the other side hears DT_ECLOSED; sends on it then fail. */
static void
test_close_and_send(void **state)
{
	uint8_t x[4] = {1, 2, 3, 4};
	pair p;

	(void)state;
	pair_open(&p, 0);
	assert_int_equal(
	    send_pieces(p.b, p.cb, DT_CMD_TEXT, 1, 0, NULL, x, 4, 1), DT_OK);
	WAIT_RECS(&p.sa, 1);
	dt_conn *ca = p.sa.recs[0].conn;
	dt__conn_set_peer(ca, 12);
	assert_int_equal(dt__conn_peer(ca), 12);
	assert_msg_has(dt__conn_addr(ca), g_shm ? "local pid " : "127.0.0.1:");

	/* a closes its end: both hooks run, b's with DT_ECLOSED. */
	dt__van_close(p.a, ca);
	WAIT_CLOSES(&p.sa, 1);
	WAIT_CLOSES(&p.sb, 1);
	assert_ptr_equal(p.sb.close_conn[0], p.cb);
	assert_int_equal(p.sb.close_why[0], DT_ECLOSED);
	assert_ptr_equal(p.sa.close_conn[0], ca);
	assert_false(dt__conn_is_open(p.cb));
	assert_false(dt__conn_is_open(ca));

	dt__clear_error();
	assert_int_equal(
	    send_pieces(p.b, p.cb, DT_CMD_TEXT, 2, 0, NULL, x, 4, 1),
	    DT_ECLOSED);
	char where[64];
	snprintf(where, sizeof(where), "127.0.0.1:%d", p.port);
	assert_msg_has(dt_errmsg(), where);
	dt_msg_hdr h = {.cmd = DT_CMD_TEXT};
	assert_int_equal(dt__van_send(p.a, ca, &h, NULL, 0, NULL, 0),
	                 DT_ECLOSED);
	/* Closing twice is harmless. */
	dt__van_close(p.a, ca);
	dt__van_close(p.b, p.cb);
	pair_close(&p);
	/* The I/O threads are gone: plain reads. No second on_close. */
	assert_int_equal(p.sa.nclose, 1);
	assert_int_equal(p.sb.nclose, 1);
}

/* A send larger than DT_MAX_MESSAGE is refused before a byte is sent. */
static void
test_send_too_big(void **state)
{
	uint8_t x[8] = {0};
	pair p;

	(void)state;
	setenv("DT_MAX_MESSAGE", "4096", 1);
	pair_open(&p, 0);
	unsetenv("DT_MAX_MESSAGE");
	struct iovec iov[2] = {{x, 8}, {NULL, 0}};
	uint8_t *big = calloc(1, 4089);
	assert_non_null(big);
	iov[1] = (struct iovec){big, 4089};
	dt_msg_hdr h = {.cmd = DT_CMD_KV_FIRST};
	dt__clear_error();
	assert_int_equal(dt__van_send(p.b, p.cb, &h, NULL, 0, iov, 2),
	                 DT_ETOOBIG);
	assert_msg_has(dt_errmsg(), "DT_MAX_MESSAGE");
	/* At the limit it goes, and the connection is still in step. */
	iov[1].iov_len = 4088;
	assert_int_equal(dt__van_send(p.b, p.cb, &h, NULL, 0, iov, 2), DT_OK);
	WAIT_RECS(&p.sa, 1);
	assert_true(p.sa.recs[0].h.payload_len == 4096);
	assert_int_equal(NCLOSE(&p.sa), 0);
	free(big);
	pair_close(&p);
}

/* A peer that stops reading: the send gives up after DT_SEND_TIMEOUT with
 * a message naming it, and the connection ends (a frame cut part-way
 * leaves nothing that could follow it in step). Encrypted too. */
static void
test_send_timeout(void **state)
{
	const size_t big = 64u << 20;
	uint8_t *buf = calloc(1, big);
	uint8_t hb[DT_HDR_SIZE];
	dt_msg_hdr h = {.cmd = DT_CMD_KV_FIRST, .seq = 1};
	dt_crypt *tx = NULL, *rx = NULL;
	static uint8_t sealed[DT_REC_WIRE];
	sink s;
	dt_van *v;
	int port = 0, fd;

	(void)state;
	assert_non_null(buf);
	sink_init(&s);
	setenv("DT_SEND_TIMEOUT", "1", 1);
	v = make_van(&s, 0);
	unsetenv("DT_SEND_TIMEOUT");
	assert_int_equal(dt__van_listen(v, "127.0.0.1", 0, -1, &port), DT_OK);
	assert_int_equal(dt__van_start(v), DT_OK);
	fd = raw_connect_noauth(port);
	assert_true(raw_auth_with(fd, NULL, &tx, &rx));
	dt__hdr_encode(&h, hb);
	if (tx) /* DTRAIN_ENCRYPT=1: the frame goes as a record */
		raw_send(fd, sealed,
		         dt__crypt_seal(tx, hb, sizeof(hb), sealed));
	else
		raw_send(fd, hb, sizeof(hb));
	assert_true(wait_count(&s, &s.nrec, 1));
	/* The peer never reads: 64 MiB cannot all go. */
	struct iovec iov = {buf, big};
	uint64_t t0 = dt__now_ns();
	dt__clear_error();
	assert_int_equal(dt__van_send(v, s.recs[0].conn, &h, NULL, 0, &iov, 1),
	                 DT_ETIMEDOUT);
	assert_msg_has(dt_errmsg(), "has not read for 1 s");
	assert_true(dt__now_ns() - t0 < 10000000000ull);
	/* ...and the connection is over, for the owner and the peer. */
	assert_true(wait_count(&s, &s.nclose, 1));
	assert_false(dt__conn_is_open(s.recs[0].conn));
	assert_true(wait_hangup(fd));
	close(fd);
	dt__crypt_free(tx);
	dt__crypt_free(rx);
	dt__van_destroy(v);
	sink_fini(&s);
	free(buf);
}

static void
test_bad_listen(void **state)
{
	sink s;
	dt_van *v;
	int port = 0;

	(void)state;
	sink_init(&s);
	v = make_van(&s, 0);
	dt__clear_error();
	assert_int_not_equal(dt__van_listen(v, "256.1.1.1", 0, -1, &port),
	                     DT_OK);
	assert_msg_has(dt_errmsg(), "256.1.1.1");
	dt__van_destroy(v);
	/* A van that never started is destroyed cleanly too. */
	sink_fini(&s);

	setenv("DT_MAX_MESSAGE", "lots", 1);
	dt_van_hooks hooks = {.arg = &s, .on_msg = on_msg};
	dt__clear_error();
	v = NULL;
	assert_int_equal(dt__van_create(&hooks, &v), DT_ECONFIG);
	assert_msg_has(dt_errmsg(), "DT_MAX_MESSAGE");
	unsetenv("DT_MAX_MESSAGE");
}

/* Out of descriptors, a pending connection must not spin the I/O thread
 * (its listener stays readable); once descriptors are free again the
 * connection is taken and its frame delivered. */
static void
test_accept_out_of_fds(void **state)
{
	struct rlimit old, low;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct rusage r0, r1;
	uint8_t hb[DT_HDR_SIZE];
	dt_msg_hdr h = {.cmd = DT_CMD_KV_FIRST, .seq = 7};
	static int fds[4096];
	int nfd = 0, cfd, port = 0;
	sink s;
	dt_van *v;

	(void)state;
	sink_init(&s);
	v = make_van(&s, 0);
	assert_int_equal(dt__van_listen(v, "127.0.0.1", 0, -1, &port), DT_OK);
	assert_int_equal(dt__van_start(v), DT_OK);
	cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(cfd >= 0);
	/* The log goes to a file meanwhile, to be counted. */
	char logpath[] = "/tmp/dtrain_van_test_log.XXXXXX";
	int logfd = mkstemp(logpath), saved_err = dup(2);
	assert_true(logfd >= 0 && saved_err >= 0);
	unlink(logpath);
	fflush(stderr);
	dup2(logfd, 2);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	if (low.rlim_cur > 1024)
		low.rlim_cur = 1024;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (nfd < (int)DT_ARRAY_LEN(fds)) {
		int fd = dup(cfd);
		if (fd < 0)
			break;
		fds[nfd++] = fd;
	}
	assert_int_equal(errno, EMFILE);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(cfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	/* (The handshake and the frame go once it can be accepted.) */
	/* Wait (with a deadline) for the I/O thread to meet the failing
	 * accept, then watch a window of 400 ms: a spinning I/O thread would
	 * burn all of it and log on every turn. */
	char buf[65536];
	ssize_t got = 0;
	uint64_t first = 0, limit = dt__now_ns() + WAIT_MS * 1000000ull;
	while (dt__now_ns() < limit) {
		got = pread(logfd, buf, sizeof(buf) - 1, 0);
		buf[got > 0 ? got : 0] = '\0';
		if (strstr(buf, "accept: ")) {
			first = dt__now_ns();
			break;
		}
		struct timespec ts = {0, 10000000L};
		nanosleep(&ts, NULL);
	}
	getrusage(RUSAGE_SELF, &r0);
	uint64_t end = dt__now_ns() + 400000000ull;
	while (dt__now_ns() < end) {
		struct timespec ts = {0, 20000000L};
		nanosleep(&ts, NULL);
	}
	getrusage(RUSAGE_SELF, &r1);
	double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
	             (double)(r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
	             (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) / 1e6 +
	             (double)(r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
	while (nfd > 0)
		close(fds[--nfd]);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	fflush(stderr);
	dup2(saved_err, 2);
	close(saved_err);
	/* A line about it once a second at most, not one per wake-up, and
	 * no busy thread. */
	int lines = 0, allowed = 2 + (int)((dt__now_ns() - first) / 1000000000);
	got = pread(logfd, buf, sizeof(buf) - 1, 0);
	buf[got > 0 ? got : 0] = '\0';
	for (char *p = buf; (p = strstr(p, "accept: ")) != NULL; p++)
		lines++;
	close(logfd);
	assert_true(first != 0);
	assert_true(lines >= 1 && lines <= allowed);
	assert_true(cpu < 0.3);
	/* Descriptors are back: the connection is taken, its frame comes. */
	assert_true(raw_auth_with(cfd, NULL, NULL, NULL));
	dt__hdr_encode(&h, hb);
	assert_int_equal(write(cfd, hb, sizeof(hb)), (ssize_t)sizeof(hb));
	assert_true(wait_count(&s, &s.nrec, 1));
	assert_int_equal(s.recs[0].h.seq, 7);
	close(cfd);
	dt__van_destroy(v);
	sink_fini(&s);
}

/* 1 if the van hung up on fd within ms (EOF or reset), 0 if not. */
static int
hung_up_within(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char b[64];

	if (poll(&p, 1, ms) <= 0)
		return 0;
	return read(fd, b, sizeof(b)) <= 0;
}

/* The guard: a connection nobody vouches for goes after its time, one
 * that is vouched for stays, and no more than the cap wait at once. */
static void
test_guard(void **state)
{
	uint8_t hb[DT_HDR_SIZE];
	dt_msg_hdr h = {.cmd = DT_CMD_KV_FIRST, .seq = 9};
	int port = 0, quiet, talker, extra;
	uint64_t t0;
	sink s;
	dt_van *v;

	(void)state;
	sink_init(&s);
	v = make_van(&s, 0);
	dt__van_guard(v, 5000000000ull, 1); /* 5 s, 1 at once */
	assert_int_equal(dt__van_listen(v, "127.0.0.1", 0, -1, &port), DT_OK);
	assert_int_equal(dt__van_start(v), DT_OK);
	talker = raw_connect(port);
	dt__hdr_encode(&h, hb);
	assert_int_equal(write(talker, hb, sizeof(hb)), (ssize_t)sizeof(hb));
	assert_true(wait_count(&s, &s.nrec, 1));
	/* The owner vouches for the one that spoke (as the core does on a
	 * good HELLO or ADD_NODE). */
	dt__conn_vouch(s.recs[0].conn);
	t0 = dt__now_ns();
	quiet = raw_connect_noauth(port);
	/* The one slot is the quiet one's until a newcomer comes: then the
	 * oldest that has not authenticated gives way, at once, long before
	 * anyone's time is up (a stranger holding silent connections cannot
	 * keep a real node out). */
	extra = raw_connect_noauth(port);
	assert_true(hung_up_within(quiet, 4500));
	assert_true(dt__now_ns() - t0 < 4900000000ull);
	/* The newcomer goes after its 5 s, not before (it was accepted
	 * after t0); the vouched one stays. */
	assert_false(hung_up_within(extra, 0));
	assert_true(hung_up_within(extra, 15000));
	assert_true(dt__now_ns() - t0 >= 4900000000ull);
	assert_false(hung_up_within(talker, 200));
	/* (strangers never reach the owner: no close reported) */
	assert_int_equal(sink_read(&s, &s.nclose), 0);
	close(quiet);
	close(talker);
	close(extra);
	dt__van_destroy(v);
	sink_fini(&s);
}

/* Past the cap the oldest connection that has sent nothing gives way,
 * before an older one that is in the middle of its handshake (a real node
 * sends its HELLO at once). */
static void
test_evict_silent_first(void **state)
{
	uint8_t hello[DT_AUTH_HELLO_LEN] = "DTH1";
	uint8_t chal[DT_AUTH_CHALLENGE_LEN];
	int port = 0, talking, silent, extra;
	sink s;
	dt_van *v;

	(void)state;
	sink_init(&s);
	v = make_van(&s, 0);
	dt__van_guard(v, 5000000000ull, 2); /* 5 s, 2 at once */
	assert_int_equal(dt__van_listen(v, "127.0.0.1", 0, -1, &port), DT_OK);
	assert_int_equal(dt__van_start(v), DT_OK);
	/* One that has said HELLO (its challenge came back: the van has
	 * read it), then a silent one, then one more than the cap: the
	 * kernel hands them over in that order. */
	talking = raw_connect_noauth(port);
	raw_send(talking, hello, sizeof(hello));
	assert_true(raw_recv(talking, chal, sizeof(chal)));
	silent = raw_connect_noauth(port);
	extra = raw_connect_noauth(port);
	assert_true(hung_up_within(silent, 4000));
	assert_false(hung_up_within(talking, 300));
	assert_false(hung_up_within(extra, 0));
	close(talking);
	close(silent);
	close(extra);
	dt__van_destroy(v);
	assert_int_equal(sink_read(&s, &s.nclose), 0);
	sink_fini(&s);
}

/*
 * Connections stuck in their handshake hold no one up: with a silent one,
 * one that sent half its HELLO, and a flood of bad HELLOs pending, a node
 * that connects after them is answered, authenticated and heard long
 * before the stuck ones' time is up (the handshake thread answers each as
 * its bytes come, never waiting for one). The stuck ones are then still
 * open (their time is not up), the bad ones were hung up on at once, and
 * none of them reached the owner. A good connection's close (one close()
 * once its peer has hung up) is reported and gives its descriptor back.
 */
static void
test_stuck_handshakes_hold_no_one(void **state)
{
	enum { BAD = 50 };
	uint8_t hello[DT_AUTH_HELLO_LEN] = "DTH1", bad[DT_AUTH_HELLO_LEN];
	uint8_t hb[DT_HDR_SIZE];
	dt_msg_hdr h = {.cmd = DT_CMD_KV_FIRST, .seq = 11};
	int port = 0, silent, slow, good, bads[BAD];
	uint64_t t0, took;
	sink s;
	dt_van *v;

	(void)state;
	sink_init(&s);
	v = make_van(&s, 0);
	dt__van_guard(v, 60000000000ull, 256); /* 60 s, 256 at once */
	assert_int_equal(dt__van_listen(v, "127.0.0.1", 0, -1, &port), DT_OK);
	assert_int_equal(dt__van_start(v), DT_OK);
	capture_begin(); /* the bad HELLOs' refusals */
	silent = raw_connect_noauth(port);
	slow = raw_connect_noauth(port);
	raw_send(slow, hello, sizeof(hello) / 2);
	memset(bad, 0x5a, sizeof(bad));
	for (int i = 0; i < BAD; i++) {
		bads[i] = raw_connect_noauth(port);
		raw_send(bads[i], bad, sizeof(bad));
	}
	t0 = dt__now_ns();
	good = raw_connect(port);
	dt__hdr_encode(&h, hb);
	raw_send(good, hb, sizeof(hb));
	assert_true(wait_count(&s, &s.nrec, 1));
	took = dt__now_ns() - t0;
	assert_int_equal(s.recs[0].h.seq, 11);
	for (int i = 0; i < BAD; i++) {
		assert_true(hung_up_within(bads[i], WAIT_MS));
		close(bads[i]);
	}
	capture_end(NULL, 0);
	/* (30 s of the stuck ones' 60 would still be "before"; on a quiet
	 * machine it takes milliseconds) */
	if (took >= 30000000000ull)
		fail_msg("a node behind stuck handshakes took %.1f s",
		         (double)took / 1e9);
	assert_false(hung_up_within(silent, 0));
	assert_false(hung_up_within(slow, 0));
	assert_int_equal(sink_read(&s, &s.nclose), 0);
	/* The good one hangs up: the van reports it (and the teardown finds
	 * every descriptor given back). */
	close(good);
	assert_true(wait_count(&s, &s.nclose, 1));
	close(silent);
	close(slow);
	dt__van_destroy(v);
	sink_fini(&s);
}

/* A TCP listener's accepted sockets come with TCP_NODELAY (set once on the
 * listener, which they inherit). */
static void
test_accepted_nodelay(void **state)
{
	dt_link lis, acc;
	char addr[64];
	int port = 0, fd, on = 0, got = 0;
	socklen_t len = sizeof(on);
	uint64_t deadline;

	(void)state;
	assert_int_equal(
	    dt__tcp_transport.listen("127.0.0.1", 0, -1, &lis, &port), DT_OK);
	fd = raw_connect_noauth(port);
	deadline = dt__now_ns() + (uint64_t)WAIT_MS * 1000000ull;
	while ((got = dt__tcp_transport.accept(&lis, &acc, addr,
	                                       sizeof(addr))) == 0 &&
	       dt__now_ns() < deadline) {
		struct pollfd p = {.fd = lis.fd, .events = POLLIN};

		(void)poll(&p, 1, 100);
	}
	assert_int_equal(got, 1);
	assert_int_equal(
	    getsockopt(acc.fd, IPPROTO_TCP, TCP_NODELAY, &on, &len), 0);
	assert_true(on != 0);
	acc.ops->close(&acc);
	lis.ops->close(&lis);
	close(fd);
}

/* The transport is chosen by name; an unknown one is refused by name. */
static void
test_transport_choice(void **state)
{
	const dt_transport_ops *tps[DT_TRANSPORTS_MAX];
	dt_van_hooks hooks = {.on_msg = NULL};
	dt_van *v = NULL;

	(void)state;
	char name[64];

	/* auto (the default): shared memory first, TCP last (other hosts) */
	unsetenv("DTRAIN_TRANSPORT");
	assert_int_equal(dt__transport_choose(tps), DT_OK);
	assert_string_equal(tps[0]->name, "shm");
	assert_string_equal(tps[1]->name, "tcp");
	assert_null(tps[2]);
	setenv("DTRAIN_TRANSPORT", "auto", 1);
	assert_int_equal(dt__transport_choose(tps), DT_OK);
	assert_string_equal(tps[0]->name, "shm");
	assert_null(tps[2]);
	setenv("DTRAIN_TRANSPORT", "tcp", 1);
	assert_int_equal(dt__transport_choose(tps), DT_OK);
	assert_string_equal(tps[0]->name, "tcp");
	assert_null(tps[1]);
	/* forced TCP: no shared-memory endpoint to give peers */
	assert_int_equal(dt__van_create(&hooks, &v), DT_OK);
	assert_int_equal(dt__van_listen_local(v, name, sizeof(name)), DT_OK);
	assert_string_equal(name, "");
	dt__van_destroy(v);
	v = NULL;
	setenv("DTRAIN_TRANSPORT", "carrier-pigeon", 1);
	assert_int_equal(dt__van_create(&hooks, &v), DT_ECONFIG);
	assert_null(v);
	assert_msg_has(dt_errmsg(), "DTRAIN_TRANSPORT='carrier-pigeon'");
	unsetenv("DTRAIN_TRANSPORT");
	/* the ring's size: a power of two within bounds */
	setenv("DTRAIN_SHM_RING", "100000", 1);
	assert_int_equal(dt__van_create(&hooks, &v), DT_ECONFIG);
	assert_msg_has(dt_errmsg(), "DTRAIN_SHM_RING=100000");
	setenv("DTRAIN_SHM_RING", "1024", 1);
	assert_int_equal(dt__van_create(&hooks, &v), DT_ECONFIG);
	unsetenv("DTRAIN_SHM_RING");
	assert_null(v);
	/* Every transport in the table fills every op the van calls. */
	for (int i = 0; dt__transports[i]; i++) {
		const dt_transport_ops *t = dt__transports[i];
		assert_non_null(t->listen);
		assert_non_null(t->accept);
		assert_non_null(t->connect);
		assert_non_null(t->recv);
		assert_non_null(t->sendv);
		assert_non_null(t->wait_writable);
		assert_non_null(t->shutdown);
		assert_non_null(t->close);
		assert_non_null(t->can_reach);
		/* an endpoint transport has all three of its ops */
		assert_int_equal(t->endpoint_new != NULL,
		                 t->endpoint_listen != NULL);
		assert_int_equal(t->endpoint_new != NULL,
		                 t->endpoint_connect != NULL);
	}
}

/* Two links of a socket pair, each wrapped in the encrypted-record layer
 * (seal.c) with the keys of a real handshake. */
static void
seal_pair(dt_auth **a, dt_link *c, dt_link *s, int sndbuf)
{
	uint8_t hello[DT_AUTH_HELLO_LEN], chal[DT_AUTH_CHALLENGE_LEN];
	uint8_t proof[DT_AUTH_PROOF_LEN];
	dt_crypt *ctx, *crx, *stx, *srx;
	dt_auth_hs hc, hs;
	int fds[2];

	assert_int_equal(
	    dt__auth_new("the seal test's secret", 22, "seal", 1, a), DT_OK);
	dt__auth_hello(*a, &hc, hello);
	assert_int_equal(dt__auth_on_hello(*a, &hs, hello, chal), DT_OK);
	assert_int_equal(
	    dt__auth_on_challenge(*a, &hc, chal, proof, &ctx, &crx), DT_OK);
	assert_int_equal(dt__auth_on_proof(*a, &hs, proof, &stx, &srx), DT_OK);
	assert_int_equal(socketpair(AF_UNIX,
	                            SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	                            0, fds),
	                 0);
	if (sndbuf)
		setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sndbuf,
		           sizeof(sndbuf));
	*c = (dt_link){&dt__tcp_transport, fds[0], NULL};
	*s = (dt_link){&dt__tcp_transport, fds[1], NULL};
	assert_int_equal(dt__seal_wrap(c, ctx, crx), DT_OK);
	assert_int_equal(dt__seal_wrap(s, stx, srx), DT_OK);
	assert_int_equal(c->fd, fds[0]); /* epoll still watches the socket */
	assert_non_null(c->ops->unsent);
	assert_null(c->ops->pending); /* as the inner link: a stream */
}

/* Read what s has now into out (at *got of cap). */
static void
seal_read_some(dt_link *s, uint8_t *out, size_t *got, size_t cap)
{
	while (*got < cap) {
		ssize_t n = s->ops->recv(s, out + *got, cap - *got);

		if (n <= 0) {
			assert_true(n < 0 && errno == EAGAIN);
			return;
		}
		*got += (size_t)n;
	}
}

/*
 * The encrypted layer over a link, without a van: what the inner link does
 * not take at once stays in the layer (unsent) and leaves first at the
 * next sendv or flush, so the peer gets every byte in order; a record
 * with a bad length, or a stream that ends inside a record, is EBADMSG
 * with the reason; close frees the layer and the inner link.
 */
static void
test_seal_layer(void **state)
{
	const size_t len = 3u << 20;
	uint8_t *in = malloc(len), *out = malloc(len);
	size_t sent = 0, got = 0, held_max = 0;
	uint64_t deadline = dt__now_ns() + 60000000000ull;
	dt_link c, s;
	dt_auth *a;

	(void)state;
	assert_non_null(in);
	assert_non_null(out);
	for (size_t i = 0; i < len; i++)
		in[i] = (uint8_t)(i * 2654435761u >> 13);
	seal_pair(&a, &c, &s, 64 << 10);
	while ((sent < len || c.ops->unsent(&c) > 0) &&
	       dt__now_ns() < deadline) {
		struct iovec iov = {in + sent, DT_MIN(len - sent, 1u << 20)};
		ssize_t w = c.ops->sendv(&c, &iov, sent < len ? 1 : 0);

		assert_true(w >= 0 || errno == EAGAIN);
		if (w > 0)
			sent += (size_t)w;
		held_max = DT_MAX(held_max, c.ops->unsent(&c));
		seal_read_some(&s, out, &got, len);
	}
	while (got < len && dt__now_ns() < deadline)
		seal_read_some(&s, out, &got, len);
	assert_int_equal(sent, len);
	assert_int_equal(got, len);
	assert_memory_equal(in, out, len);
	assert_true(held_max > 0); /* the layer did hold records back */
	assert_int_equal(c.ops->unsent(&c), 0);
	assert_int_equal(c.ops->wait_writable(&c, 0), 1);

	/* A record header announcing no bytes. */
	uint8_t bad[8] = {0};
	assert_int_equal(write(c.fd, bad, sizeof(bad)), (ssize_t)sizeof(bad));
	errno = 0;
	assert_int_equal(s.ops->recv(&s, out, 64), -1);
	assert_int_equal(errno, EBADMSG);
	assert_msg_has(dt_errmsg(), "bad record length");
	c.ops->close(&c);
	s.ops->close(&s);
	assert_int_equal(c.fd, -1);
	dt__auth_free(a);

	/* A stream that ends inside a record. */
	seal_pair(&a, &c, &s, 0);
	bad[0] = 100; /* 100 bytes announced, 4 sent */
	assert_int_equal(write(c.fd, bad, sizeof(bad)), (ssize_t)sizeof(bad));
	c.ops->shutdown(&c);
	errno = 0;
	assert_int_equal(s.ops->recv(&s, out, 64), -1);
	assert_int_equal(errno, EBADMSG);
	assert_msg_has(dt_errmsg(), "ends inside a record");
	c.ops->close(&c);
	c.ops->shutdown(&c); /* after close: nothing */
	s.ops->close(&s);
	dt__auth_free(a);
	free(in);
	free(out);
}

/* Each transport says whether it can reach a peer (the van asks them, in
 * order, and names none): TCP any host and port, shared memory a peer that
 * gave its endpoint on this host. */
static void
test_reachability(void **state)
{
	dt_peer_addr far = {"10.1.2.3", 4000, NULL};
	dt_peer_addr near = {"127.0.0.1", 4000, "dtrain.1.00"};
	dt_peer_addr empty = {"127.0.0.1", 4000, ""};
	dt_peer_addr nohost = {NULL, 0, "dtrain.1.00"};

	(void)state;
	assert_true(dt__tcp_transport.can_reach(&far));
	assert_true(dt__tcp_transport.can_reach(&near));
	assert_false(dt__tcp_transport.can_reach(&nohost));
	assert_false(dt__shm_transport.can_reach(&far));
	assert_false(dt__shm_transport.can_reach(&empty));
	assert_true(dt__shm_transport.can_reach(&near));
	assert_true(dt__shm_transport.can_reach(&nohost));
	assert_null(dt__tcp_transport.endpoint_connect);
	assert_non_null(dt__shm_transport.endpoint_connect);
}

/* The socket helpers the van, the rendezvous and the launcher share. */
static void
test_sock_helpers(void **state)
{
	int fd = -1, port = 0, cfd = -1, sfd, port2;
	uint64_t t0;

	(void)state;
	assert_int_equal(
	    dt__sock_listen("127.0.0.1", 0, "test socket", &fd, &port), DT_OK);
	assert_true(port > 0);
	/* The same port again is busy, and the error says which. */
	assert_int_equal(
	    dt__sock_listen("127.0.0.1", port, "test socket", &sfd, &port2),
	    DT_ESYS);
	assert_msg_has(dt_errmsg(), "test socket: cannot listen on");
	assert_int_equal(dt__sock_connect("127.0.0.1", port,
	                                  dt__now_ns() + 5000000000ull, "peer",
	                                  &cfd),
	                 DT_OK);
	sfd = accept(fd, NULL, NULL);
	assert_true(sfd >= 0);
	close(sfd);
	close(cfd);
	close(fd);
	/* A closed port: refused until the deadline, then an error naming
	 * the peer, in about the time given. */
	t0 = dt__now_ns();
	assert_int_equal(dt__sock_connect("127.0.0.1", port,
	                                  dt__now_ns() + 300000000ull, "peer",
	                                  &cfd),
	                 DT_ECONNREFUSED);
	assert_true(dt__now_ns() - t0 < 3000000000ull);
	assert_msg_has(dt_errmsg(), "peer at 127.0.0.1:");
}

/* ---- authentication and encryption (auth.h) ---- */

/* Connect to port as a van made with the environment as it is now: the
 * error of dt__van_connect, with the van destroyed. */
static dt_err
van_connect_as(int port)
{
	sink s;
	dt_van *v = NULL;
	dt_conn *c = NULL;
	dt_van_hooks hooks = {
	    .arg = &s, .on_msg = on_msg, .on_close = on_close};
	dt_err err;

	sink_init(&s);
	if ((err = dt__van_create(&hooks, &v)))
		return err;
	if ((err = dt__van_start(v)) == DT_OK)
		err = dt__van_connect(v, "127.0.0.1", port, NULL, 2000, "van a",
		                      &c);
	char msg[512];
	snprintf(msg, sizeof(msg), "%s", dt_errmsg());
	dt__van_destroy(v);
	sink_fini(&s);
	dt__errmsg_set(msg);
	return err;
}

/* Nothing from a connection that has not authenticated reaches the owner,
 * and each way of failing the handshake is refused with a reason. */
static void
test_auth_refusals(void **state)
{
	char log[8192];
	const char *secret = getenv("DTRAIN_SECRET");
	pair p;

	(void)state;
	assert_non_null(secret);
	pair_open(&p, 0);

	/* 1. A frame without the handshake (row 1 of issue 11: a HELLO
	 * with a huge sender id): refused, nothing delivered. */
	{
		uint8_t hb[DT_HDR_SIZE];
		dt_msg_hdr h = {.cmd = DT_CMD_HELLO, .sender = 0xffffffffu};
		int fd, before = NCLOSE(&p.sa);

		capture_begin();
		fd = raw_connect_noauth(p.port);
		dt__hdr_encode(&h, hb);
		raw_send(fd, hb, sizeof(hb));
		assert_true(wait_hangup(fd));
		capture_end(log, sizeof(log));
		close(fd);
		/* (the handshake thread refused it: the owner never saw it) */
		assert_int_equal(NCLOSE(&p.sa), before);
		assert_msg_has(log, "without the handshake");
	}
	/* 2. Another secret: the van's challenge does not check out at the
	 * client, and a proof made up anyway is refused. */
	{
		dt_auth *other = NULL;
		uint8_t hello[DT_AUTH_HELLO_LEN], chal[DT_AUTH_CHALLENGE_LEN];
		uint8_t proof[DT_AUTH_PROOF_LEN] = "DTP1";
		uint8_t junk[DT_AUTH_PROOF_LEN];
		dt_crypt *tx, *rx;
		dt_auth_hs hs;
		int fd, before = NCLOSE(&p.sa);

		assert_int_equal(
		    dt__auth_new("not the job's secret!", 21, NULL, 0, &other),
		    DT_OK);
		capture_begin();
		fd = raw_connect_noauth(p.port);
		dt__auth_hello(other, &hs, hello);
		raw_send(fd, hello, sizeof(hello));
		assert_true(raw_recv(fd, chal, sizeof(chal)));
		assert_int_equal(
		    dt__auth_on_challenge(other, &hs, chal, junk, &tx, &rx),
		    DT_EAUTH);
		assert_msg_has(dt_errmsg(), "does not hold this job's key");
		memset(proof + 4, 0x5a, sizeof(proof) - 4);
		raw_send(fd, proof, sizeof(proof));
		assert_true(wait_hangup(fd));
		capture_end(log, sizeof(log));
		close(fd);
		/* (the log names it, once a second at most: not checked) */
		assert_int_equal(NCLOSE(&p.sa), before);
		dt__auth_free(other);
	}
	/* 3. The same secret, another job; another secret; encryption on
	 * one side only: a van that connects gets DT_EAUTH naming why. */
	setenv("DTRAIN_JOB_ID", "another-job", 1);
	assert_int_equal(van_connect_as(p.port), DT_EAUTH);
	assert_msg_has(dt_errmsg(), "authentication failed");
	assert_msg_has(dt_errmsg(), "DTRAIN_JOB_ID");
	unsetenv("DTRAIN_JOB_ID");
	setenv("DTRAIN_SECRET", "a secret of some other job", 1);
	assert_int_equal(van_connect_as(p.port), DT_EAUTH);
	assert_msg_has(dt_errmsg(), "DTRAIN_SECRET");
	setenv("DTRAIN_SECRET", secret, 1);
	setenv("DTRAIN_ENCRYPT", "1", 1);
	assert_int_equal(van_connect_as(p.port), DT_EAUTH);
	assert_msg_has(dt_errmsg(), "DTRAIN_ENCRYPT");
	unsetenv("DTRAIN_ENCRYPT");

	/* 4. A node that runs without authentication is refused when it
	 * sends its first frame. */
	{
		char *saved = strdup(secret);
		sink s;
		dt_van *v = NULL;
		dt_conn *c = NULL;
		dt_van_hooks hooks = {
		    .arg = &s, .on_msg = on_msg, .on_close = on_close};
		uint8_t x = 1;
		int before = NCLOSE(&p.sa);

		unsetenv("DTRAIN_SECRET");
		dt__clear_error();
		assert_int_equal(dt__van_create(&hooks, &v), DT_ECONFIG);
		assert_msg_has(dt_errmsg(), "DTRAIN_AUTH=none");
		setenv("DTRAIN_AUTH", "none", 1);
		sink_init(&s);
		capture_begin();
		assert_int_equal(dt__van_create(&hooks, &v), DT_OK);
		assert_int_equal(dt__van_start(v), DT_OK);
		assert_int_equal(dt__van_connect(v, "127.0.0.1", p.port, NULL,
		                                 2000, "van a", &c),
		                 DT_OK);
		(void)send_pieces(v, c, DT_CMD_TEXT, 1, 0, NULL, &x, 1, 1);
		/* Refused by the handshake thread: this side sees the end,
		 * the owner over there never saw the connection. */
		for (uint64_t t = dt__now_ns();
		     dt__conn_is_open(c) && dt__now_ns() - t < 10000000000ull;)
			usleep(1000);
		assert_false(dt__conn_is_open(c));
		dt__van_destroy(v);
		capture_end(log, sizeof(log));
		sink_fini(&s);
		assert_int_equal(NCLOSE(&p.sa), before);
		unsetenv("DTRAIN_AUTH");
		setenv("DTRAIN_SECRET", saved, 1);
		free(saved);
	}
	/* 5. DTRAIN_SECRET_FILE: refused while others may read it, used
	 * once only its owner may. */
	{
		char path[] = "/tmp/dtrain_van_test_secret.XXXXXX";
		int fd = mkstemp(path);
		char *saved = strdup(secret);

		assert_true(fd >= 0);
		assert_int_equal(write(fd, secret, strlen(secret)),
		                 (ssize_t)strlen(secret));
		assert_int_equal(write(fd, "\n", 1), 1);
		close(fd);
		unsetenv("DTRAIN_SECRET");
		setenv("DTRAIN_SECRET_FILE", path, 1);
		assert_int_equal(chmod(path, 0644), 0);
		assert_int_equal(van_connect_as(p.port), DT_ECONFIG);
		assert_msg_has(dt_errmsg(), "chmod 600");
		assert_int_equal(chmod(path, 0600), 0);
		assert_int_equal(van_connect_as(p.port), DT_OK);
		unlink(path);
		unsetenv("DTRAIN_SECRET_FILE");
		setenv("DTRAIN_SECRET", saved, 1);
		free(saved);
	}
	/* Nothing of any of them reached the owner; the good peer works. */
	assert_int_equal(NREC(&p.sa), 0);
	uint8_t y = 2;
	assert_int_equal(
	    send_pieces(p.b, p.cb, DT_CMD_TEXT, 9, 0, NULL, &y, 1, 1), DT_OK);
	WAIT_RECS(&p.sa, 1);
	assert_int_equal(p.sa.recs[0].h.seq, 9);
	pair_close(&p);
}

/* Records on an encrypted connection: one altered, replayed or of a bad
 * length ends the connection; the right ones are delivered. */
static void
test_encrypted_tamper(void **state)
{
	static uint8_t sealed[DT_REC_WIRE];
	uint8_t frame[DT_HDR_SIZE + 5];
	dt_msg_hdr h = {.cmd = DT_CMD_TEXT, .seq = 1};
	pair p;

	(void)state;
	pair_open(&p, 0); /* setup_encrypted: DTRAIN_ENCRYPT=1 */
	for (int round = 0; round < 3; round++) {
		dt_crypt *tx = NULL, *rx = NULL;
		int fd = raw_connect_noauth(p.port);
		int before = NCLOSE(&p.sa), nrec = NREC(&p.sa);
		size_t n;

		assert_true(raw_auth_with(fd, NULL, &tx, &rx));
		assert_non_null(tx);
		h.seq = (uint64_t)round;
		h.payload_len = 5;
		dt__hdr_encode(&h, frame);
		memcpy(frame + DT_HDR_SIZE, "hello", 5);
		n = dt__crypt_seal(tx, frame, sizeof(frame), sealed);
		raw_send(fd, sealed, n);
		WAIT_RECS(&p.sa, nrec + 1);
		capture_begin();
		if (round == 0) { /* a bit flipped */
			n = dt__crypt_seal(tx, frame, sizeof(frame), sealed);
			sealed[n / 2] ^= 1;
			raw_send(fd, sealed, n);
		} else if (round == 1) { /* the record again */
			raw_send(fd, sealed, n);
		} else { /* a length over the limit */
			dt__put_u32(sealed, DT_REC_MAX + 1);
			raw_send(fd, sealed, 64);
		}
		assert_true(wait_hangup(fd));
		WAIT_CLOSES(&p.sa, before + 1);
		capture_end(NULL, 0);
		assert_int_equal(p.sa.close_why[before], DT_EAUTH);
		assert_int_equal(NREC(&p.sa), nrec + 1);
		close(fd);
		dt__crypt_free(tx);
		dt__crypt_free(rx);
	}
	pair_close(&p);
}

/* Wait up to 5 s for this process to hold want threads; the count. */
static int
wait_threads(int want)
{
	uint64_t end = dt__now_ns() + 5000000000ull;
	int n;

	while ((n = count_threads()) != want && dt__now_ns() < end)
		usleep(10000);
	return n;
}

/*
 * On the shared loops (setup_shared), VANS vans cost the process two
 * threads in all (the shared I/O and handshake loops), not two each; they
 * serve every van's connections (each van dials the next, in a ring, and
 * sends it a frame); once the last van is gone, the loops' threads are
 * too.
 */
#define VANS 12

static void
test_shared_threads(void **state)
{
	dt_van *v[VANS];
	sink s[VANS];
	dt_conn *c[VANS];
	int port[VANS], before = count_threads();
	uint8_t buf[512];

	(void)state;
	fill_random(buf, sizeof(buf), 5);
	for (int i = 0; i < VANS; i++) {
		sink_init(&s[i]);
		v[i] = make_van(&s[i], 0);
		assert_int_equal(
		    dt__van_listen(v[i], "127.0.0.1", 0, -1, &port[i]), DT_OK);
		assert_int_equal(dt__van_start(v[i]), DT_OK);
	}
	assert_int_equal(wait_threads(before + 2), before + 2);
	for (int i = 0; i < VANS; i++)
		assert_int_equal(
		    dt__van_connect(v[i], "127.0.0.1", port[(i + 1) % VANS],
		                    NULL, WAIT_MS, "the next van", &c[i]),
		    DT_OK);
	for (int i = 0; i < VANS; i++) {
		dt_msg_hdr h = {.cmd = DT_CMD_KV_FIRST, .seq = (uint64_t)i};
		struct iovec iov = {buf, sizeof(buf)};

		assert_int_equal(dt__van_send(v[i], c[i], &h, NULL, 0, &iov, 1),
		                 DT_OK);
	}
	for (int i = 0; i < VANS; i++) {
		WAIT_RECS(&s[i], 1); /* the previous van's frame */
		assert_int_equal(s[i].recs[0].h.seq, (i + VANS - 1) % VANS);
		assert_int_equal(s[i].recs[0].crc, crc_of(buf, sizeof(buf)));
	}
	assert_int_equal(count_threads(), before + 2);
	for (int i = 0; i < VANS; i++)
		dt__van_destroy(v[i]);
	for (int i = 0; i < VANS; i++)
		sink_fini(&s[i]);
	assert_int_equal(wait_threads(before), before);
}

int
main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_sizes_in_order),
	    T(test_corked_in_order),
	    T(test_echo),
	    T(test_concurrent_senders),
	    T(test_payload_dest),
	    T(test_discard),
	    T(test_stream),
	    T(test_cut_frame),
	    T(test_bad_peers),
	    T(test_dropped_conns_release_fds),
	    T(test_coalesced_frames),
	    T(test_connect_closed_port),
	    T(test_connect_retries),
	    T(test_dial_cut_and_stop),
	    T(test_close_and_send),
	    T(test_send_too_big),
	    T(test_send_timeout),
	    T(test_hook_never_waits),
	    T(test_stuck_queue_ends),
	    T(test_bad_listen),
	    T(test_auth_refusals),
	    T(test_wait_direct),
	    cmocka_unit_test_setup_teardown(test_sizes_in_order,
	                                    setup_encrypted, teardown),
	    cmocka_unit_test_setup_teardown(test_corked_in_order,
	                                    setup_encrypted, teardown),
	    cmocka_unit_test_setup_teardown(test_echo, setup_encrypted,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_payload_dest, setup_encrypted,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_stream, setup_encrypted,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_encrypted_tamper,
	                                    setup_encrypted, teardown),
	    cmocka_unit_test_setup_teardown(test_send_timeout, setup_encrypted,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_hook_never_waits,
	                                    setup_encrypted, teardown),
	    cmocka_unit_test(test_transport_choice),
	    cmocka_unit_test(test_reachability),
	    T(test_seal_layer),
#define S(f) cmocka_unit_test_setup_teardown(f, setup_shm, teardown)
	    S(test_sizes_in_order),
	    S(test_corked_in_order),
	    S(test_echo),
	    S(test_concurrent_senders),
	    S(test_payload_dest),
	    S(test_discard),
	    S(test_stream),
	    S(test_cut_frame),
	    S(test_coalesced_frames),
	    S(test_close_and_send),
	    S(test_send_too_big),
	    S(test_send_timeout),
	    S(test_hook_never_waits),
	    S(test_stuck_queue_ends),
	    S(test_io_thread_no_segments),
	    S(test_wait_direct),
	    cmocka_unit_test_setup_teardown(test_echo, setup_shm_encrypted,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_stream, setup_shm_encrypted,
	                                    teardown),
#undef S
#define H(f) cmocka_unit_test_setup_teardown(f, setup_shared, teardown)
	    H(test_shared_threads),
	    H(test_sizes_in_order),
	    H(test_corked_in_order),
	    H(test_echo),
	    H(test_concurrent_senders),
	    H(test_payload_dest),
	    H(test_discard),
	    H(test_stream),
	    H(test_cut_frame),
	    H(test_bad_peers),
	    H(test_dropped_conns_release_fds),
	    H(test_coalesced_frames),
	    H(test_connect_retries),
	    H(test_dial_cut_and_stop),
	    H(test_close_and_send),
	    H(test_send_too_big),
	    H(test_send_timeout),
	    H(test_auth_refusals),
	    H(test_guard),
	    H(test_evict_silent_first),
	    H(test_stuck_handshakes_hold_no_one),
#undef H
#define HS(f) cmocka_unit_test_setup_teardown(f, setup_shm_shared, teardown)
	    HS(test_sizes_in_order),
	    HS(test_echo),
	    HS(test_concurrent_senders),
	    HS(test_stream),
	    HS(test_close_and_send),
#undef HS
	    cmocka_unit_test(test_accept_out_of_fds),
	    cmocka_unit_test(test_guard),
	    cmocka_unit_test(test_evict_silent_first),
	    T(test_stuck_handshakes_hold_no_one),
	    T(test_accepted_nodelay),
	    cmocka_unit_test(test_sock_helpers),
	};
#undef T

	if (getenv("VAN_TEST_FILTER")) /* one test, by name (debugging) */
		cmocka_set_test_filter(getenv("VAN_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
