/*
 * seal_test.c - encrypted links (seal.c) in a pair of vans when the link
 * under the records is stingy: a test transport over TCP whose writes are
 * refused (EAGAIN) once a window of bytes is used up, or every other time
 * and cut short to 1, 7, 100 or 4096 bytes the other times, and whose
 * reads give one byte at a time.
 *
 * What is checked: a heartbeat (dt__van_beat) that finds room for less
 * than its record neither waits nor ends the connection: the link takes
 * what it can, the rest waits as queued bytes, and leaves when room comes;
 * frames of every size class, sent both ways (from a caller's thread and
 * from the I/O thread's hook, with heartbeats between them), all arrive
 * intact and in order; at the end nothing is left in the encrypted layer
 * or the send queues, no connection was closed, and the process holds the
 * descriptors it held before.
 *
 * The vans use the stingy transport alone (the test sets their transport
 * list, which van_int.h shows). Every wait polls with a deadline.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/util.h"
#include "net/transport.h"
#include "net/van.h"
#include "net/van_int.h"
#include "unit/fds.h"

#define WAIT_MS 60000 /* generous: the sanitizer build is slow */
#define MAX_GOT 256

/* ---- the stingy transport: TCP underneath, stingy on top ---- */

/* Bytes each side may still write (0: the acceptor, 1: the dialer); -1
 * for no limit. */
static atomic_long g_room[2];
/* Every other write refused, the others cut short. */
static atomic_int g_alternate;
/* Reads give one byte at a time. */
static atomic_int g_onebyte;
/* Writes refused so far: the test did make the link refuse. */
static atomic_long g_refused;

typedef struct stingy {
	int side;
	unsigned calls;
} stingy;

static const dt_transport_ops stingy_ops;

static int
stingy_adopt(dt_link *l, int side)
{
	stingy *s = calloc(1, sizeof(*s));

	if (s == NULL) {
		dt__tcp_transport.close(l);
		errno = ENOMEM;
		return -1;
	}
	s->side = side;
	l->ops = &stingy_ops;
	l->priv = s;
	return 0;
}

static dt_err
stingy_listen(const char *host, int port, int inherited_fd, dt_link *lis,
              int *bound_port)
{
	dt_err err =
	    dt__tcp_transport.listen(host, port, inherited_fd, lis, bound_port);

	if (err == DT_OK)
		lis->ops = &stingy_ops; /* its accept makes stingy links */
	return err;
}

static int
stingy_accept(dt_link *lis, dt_link *out, char *addr, size_t cap)
{
	int rc = dt__tcp_transport.accept(lis, out, addr, cap);

	return rc == 1 && stingy_adopt(out, 0) < 0 ? -1 : rc;
}

static dt_err
stingy_connect(const char *host, int port, uint64_t deadline_ns,
               const char *what, dt_link *out)
{
	dt_err err =
	    dt__tcp_transport.connect(host, port, deadline_ns, what, out);

	if (err == DT_OK && stingy_adopt(out, 1) < 0)
		return dt__fail(DT_ENOMEM, "stingy link");
	return err;
}

static ssize_t
stingy_recv(dt_link *l, void *buf, size_t len)
{
	return dt__tcp_transport.recv(
	    l, buf, atomic_load(&g_onebyte) ? DT_MIN(len, 1) : len);
}

static ssize_t
refuse(void)
{
	atomic_fetch_add(&g_refused, 1);
	errno = EAGAIN;
	return -1;
}

static ssize_t
stingy_sendv(dt_link *l, const struct iovec *iov, int iovcnt)
{
	static const size_t cuts[] = {1, 7, 100, 4096};
	stingy *s = l->priv;
	long room = atomic_load(&g_room[s->side]);
	struct iovec cut[64];
	size_t want = 0, cap, got = 0;
	int k = 0;
	ssize_t w;

	for (int i = 0; i < iovcnt; i++)
		want += iov[i].iov_len;
	if (want == 0)
		return 0;
	cap = want;
	if (atomic_load(&g_alternate)) {
		if (s->calls++ % 2 == 0)
			return refuse();
		cap = DT_MIN(cap, cuts[(s->calls / 2) % 4]);
	}
	if (room >= 0)
		cap = DT_MIN(cap, (size_t)room);
	if (cap == 0)
		return refuse();
	for (int i = 0; i < iovcnt && k < 64 && got < cap; i++) {
		cut[k] = iov[i];
		if (cut[k].iov_len > cap - got)
			cut[k].iov_len = cap - got;
		got += cut[k++].iov_len;
	}
	w = dt__tcp_transport.sendv(l, cut, k);
	if (w > 0 && room >= 0)
		atomic_fetch_sub(&g_room[s->side], (long)w);
	return w;
}

/* Room is the socket's once the window has some; none until then. */
static int
stingy_wait_writable(dt_link *l, int timeout_ms)
{
	stingy *s = l->priv;
	uint64_t end = dt__now_ns() + (uint64_t)timeout_ms * 1000000ull;

	for (;;) {
		uint64_t now = dt__now_ns();

		if (atomic_load(&g_room[s->side]) != 0)
			return dt__tcp_transport.wait_writable(
			    l, now < end ? (int)((end - now) / 1000000) : 0);
		if (now >= end)
			return 0;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

static void
stingy_shutdown(dt_link *l)
{
	dt__tcp_transport.shutdown(l);
}

static void
stingy_close(dt_link *l)
{
	free(l->priv);
	l->priv = NULL;
	dt__tcp_transport.close(l);
}

static const dt_transport_ops stingy_ops = {
    .name = "stingy",
    .listen = stingy_listen,
    .accept = stingy_accept,
    .connect = stingy_connect,
    .recv = stingy_recv,
    .sendv = stingy_sendv,
    .wait_writable = stingy_wait_writable,
    .shutdown = stingy_shutdown,
    .close = stingy_close,
};

static void
stingy_reset(void)
{
	atomic_store(&g_room[0], -1);
	atomic_store(&g_room[1], -1);
	atomic_store(&g_alternate, 0);
	atomic_store(&g_onebyte, 0);
	atomic_store(&g_refused, 0);
}

/* ---- what a van's hooks saw ---- */

typedef struct got {
	dt_msg_hdr h;
	uint64_t sum; /* of the payload as delivered */
} got;

typedef struct sink {
	pthread_mutex_t mu;
	got f[MAX_GOT];
	int n;
	int closes;
	int echo_errs;
	dt_van *echo; /* echo every frame but heartbeats back on its conn */
	dt_conn *conn;
} sink;

static uint64_t
sum_of(const uint8_t *p, uint64_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (uint64_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static void
on_msg(void *arg, dt_conn *c, dt_msg *m)
{
	sink *s = arg;
	got g = {m->hdr,
	         sum_of(m->payload, m->payload ? m->hdr.payload_len : 0)};

	if (s->echo && m->hdr.cmd != DT_CMD_HEARTBEAT) {
		dt_msg_hdr h = m->hdr;
		struct iovec iov = {m->payload,
		                    m->payload ? m->hdr.payload_len : 0};

		if (dt__van_send(s->echo, c, &h, NULL, 0, &iov, 1) != DT_OK)
			s->echo_errs++;
	}
	pthread_mutex_lock(&s->mu);
	s->conn = c;
	if (s->n < MAX_GOT)
		s->f[s->n++] = g;
	pthread_mutex_unlock(&s->mu);
}

static void
on_close(void *arg, dt_conn *c, dt_err why)
{
	sink *s = arg;

	(void)c;
	(void)why;
	pthread_mutex_lock(&s->mu);
	s->closes++;
	pthread_mutex_unlock(&s->mu);
}

static int
sink_count(sink *s)
{
	int n;

	pthread_mutex_lock(&s->mu);
	n = s->n;
	pthread_mutex_unlock(&s->mu);
	return n;
}

/* Poll until s has seen want frames or WAIT_MS pass. */
static int
wait_frames(sink *s, int want)
{
	uint64_t deadline = dt__now_ns() + WAIT_MS * 1000000ull;

	while (sink_count(s) < want && dt__now_ns() < deadline) {
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
	}
	return sink_count(s) >= want;
}

/* Bytes c still holds to send: queued, held for a corked thread, or in
 * the encrypted layer (unsent); *wants: room is still asked for. */
static size_t
held(dt_conn *c, int *wants)
{
	size_t n;

	pthread_mutex_lock(&c->send_mu);
	n = c->pq.len + c->olen +
	    (c->link.fd >= 0 && c->link.ops->unsent
	         ? c->link.ops->unsent(&c->link)
	         : 0);
	if (wants)
		*wants = atomic_load(&c->want_out);
	pthread_mutex_unlock(&c->send_mu);
	return n;
}

/* Poll until c holds nothing and asks for no room, or WAIT_MS pass. */
static int
wait_drained(dt_conn *c)
{
	uint64_t deadline = dt__now_ns() + WAIT_MS * 1000000ull;
	int wants = 1;

	while ((held(c, &wants) > 0 || wants) && dt__now_ns() < deadline) {
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
	}
	return held(c, &wants) == 0 && !wants;
}

/* ---- a pair of vans over the stingy transport, encrypted ---- */

typedef struct pair {
	sink sa, sb;
	dt_van *a, *b; /* a listens, b dials */
	dt_conn *cb;   /* b's connection to a */
} pair;

static int fds_before;

static dt_van *
make_van(sink *s)
{
	dt_van_hooks hooks = {.arg = s, .on_msg = on_msg, .on_close = on_close};
	dt_van *v = NULL;

	pthread_mutex_init(&s->mu, NULL);
	assert_int_equal(dt__van_create(&hooks, &v), DT_OK);
	v->tps[0] = &stingy_ops; /* the only transport, and the host one */
	v->tps[1] = NULL;
	return v;
}

static void
pair_open(pair *p)
{
	int port = 0;

	memset(p, 0, sizeof(*p));
	stingy_reset();
	p->a = make_van(&p->sa);
	p->b = make_van(&p->sb);
	assert_int_equal(dt__van_listen(p->a, "127.0.0.1", 0, -1, &port),
	                 DT_OK);
	assert_int_equal(dt__van_start(p->a), DT_OK);
	assert_int_equal(dt__van_start(p->b), DT_OK);
	assert_int_equal(dt__van_connect(p->b, "127.0.0.1", port, NULL, 5000,
	                                 "van a", &p->cb),
	                 DT_OK);
	/* the records are a layer over the stingy link */
	assert_string_equal(p->cb->link.ops->name, "sealed");
}

static void
pair_close(pair *p)
{
	dt__van_destroy(p->b);
	dt__van_destroy(p->a);
	pthread_mutex_destroy(&p->sa.mu);
	pthread_mutex_destroy(&p->sb.mu);
}

static dt_err
send_frame(dt_van *v, dt_conn *c, uint64_t seq, const uint8_t *payload,
           size_t len)
{
	dt_msg_hdr h = {.cmd = DT_CMD_KV_PUSH, .seq = seq, .key = seq * 7};
	struct iovec iov = {(void *)payload, len};

	return dt__van_send(v, c, &h, NULL, 0, &iov, 1);
}

static int
setup(void **state)
{
	(void)state;
	setenv("DTRAIN_ENCRYPT", "1", 1);
	unsetenv("DTRAIN_TRANSPORT");
	fds_before = count_fds();
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	unsetenv("DTRAIN_ENCRYPT");
	stingy_reset();
	if (count_fds() != fds_before) {
		fprintf(stderr, "descriptor leak: %d open before, %d after\n",
		        fds_before, count_fds());
		return -1;
	}
	return 0;
}

/* ---- tests ---- */

/*
 * A heartbeat on a link with room for 10 bytes, less than its record: the
 * call returns at once, the connection stays up, the rest waits in the
 * layer or the queue and reaches the peer once the link takes bytes again,
 * ahead of the frames sent after it.
 */
static void
test_beat_on_a_full_link(void **state)
{
	static uint8_t data[3000];
	dt_msg_hdr h = {.cmd = DT_CMD_HEARTBEAT, .sender = 1};
	uint64_t t0;
	pair p;
	int sent = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 31 + 7);
	pair_open(&p);
	assert_int_equal(send_frame(p.b, p.cb, 1, data, 1000), DT_OK);
	assert_true(wait_frames(&p.sa, 1));

	atomic_store(&g_room[1], 10);
	t0 = dt__now_ns();
	assert_int_equal(dt__van_beat(p.b, p.cb, &h, &sent), DT_OK);
	assert_int_equal(sent, 1);
	assert_true(dt__conn_is_open(p.cb));
	assert_true(held(p.cb, NULL) > 0); /* the record's rest waits */
	assert_true(atomic_load(&g_refused) > 0);
	/* It never waited for the peer (10x margin over the old 50 ms). */
	assert_true(dt__now_ns() - t0 < 500000000ull);
	assert_int_equal(sink_count(&p.sa), 1);

	atomic_store(&g_room[1], -1);
	assert_true(wait_frames(&p.sa, 2));
	assert_int_equal(p.sa.f[1].h.cmd, DT_CMD_HEARTBEAT);
	for (int i = 0; i < 3; i++)
		assert_int_equal(send_frame(p.b, p.cb, 2 + (uint64_t)i, data,
		                            1000 * (size_t)(i + 1)),
		                 DT_OK);
	assert_true(wait_frames(&p.sa, 5));
	for (int i = 0; i < 3; i++) {
		assert_int_equal(p.sa.f[2 + i].h.seq, 2 + (uint64_t)i);
		assert_int_equal(p.sa.f[2 + i].sum,
		                 sum_of(data, 1000 * (uint64_t)(i + 1)));
	}
	assert_true(wait_drained(p.cb));
	assert_int_equal(p.sa.closes, 0);
	assert_int_equal(p.sb.closes, 0);
	pair_close(&p);
}

/*
 * Frames of every size class from b's thread to a, each echoed back by a's
 * hook (the I/O thread: it never waits, so what the link refuses is
 * queued), heartbeats between them, while every other write is refused
 * and the others are cut short, and reads come one byte at a time: every
 * frame arrives intact and in order both ways, and at the end nothing is
 * held on either side.
 */
static void
test_frames_both_ways(void **state)
{
	static const size_t sizes[] = {0, 1, 100, 5000, 65536 + 7, 150001};
	const int rounds = 2, nsizes = (int)(sizeof(sizes) / sizeof(*sizes));
	const int nframes = rounds * nsizes;
	size_t maxlen = sizes[nsizes - 1];
	uint8_t *data = malloc(maxlen);
	int beats = 0, seen;
	pair p;

	(void)state;
	assert_non_null(data);
	for (size_t i = 0; i < maxlen; i++)
		data[i] = (uint8_t)((i * 2654435761u) >> 11);
	pair_open(&p);
	p.sa.echo = p.a;
	atomic_store(&g_alternate, 1);
	atomic_store(&g_onebyte, 1);
	for (int i = 0; i < nframes; i++) {
		dt_msg_hdr h = {.cmd = DT_CMD_HEARTBEAT, .sender = 1};
		int sent = 0;

		assert_int_equal(send_frame(p.b, p.cb, (uint64_t)i + 1, data,
		                            sizes[i % nsizes]),
		                 DT_OK);
		assert_int_equal(dt__van_beat(p.b, p.cb, &h, &sent), DT_OK);
		beats += sent;
	}
	assert_true(wait_frames(&p.sa, nframes + beats));
	assert_true(wait_frames(&p.sb, nframes));
	seen = 0;
	for (int i = 0; i < nframes + beats; i++) {
		const got *g = &p.sa.f[i];

		if (g->h.cmd == DT_CMD_HEARTBEAT)
			continue;
		assert_int_equal(g->h.seq, (uint64_t)seen + 1);
		assert_int_equal(g->sum, sum_of(data, sizes[seen % nsizes]));
		seen++;
	}
	assert_int_equal(seen, nframes);
	for (int i = 0; i < nframes; i++) {
		assert_int_equal(p.sb.f[i].h.seq, (uint64_t)i + 1);
		assert_int_equal(p.sb.f[i].h.payload_len, sizes[i % nsizes]);
		assert_int_equal(p.sb.f[i].sum,
		                 sum_of(data, sizes[i % nsizes]));
	}
	assert_true(atomic_load(&g_refused) > 0);
	atomic_store(&g_alternate, 0);
	atomic_store(&g_onebyte, 0);
	assert_true(wait_drained(p.cb));
	assert_true(wait_drained(p.sa.conn));
	assert_int_equal(p.sa.echo_errs, 0);
	assert_int_equal(p.sa.closes, 0);
	assert_int_equal(p.sb.closes, 0);
	pair_close(&p);
	free(data);
}

/* When the last sweep for stuck queues ran (van_sweep_stuck; the
 * dispatching thread's, read under its lock). */
static uint64_t
last_sweep(dt_van *v)
{
	uint64_t t;

	pthread_mutex_lock(&v->dispatch_mu);
	t = v->stuck_swept_ns;
	pthread_mutex_unlock(&v->dispatch_mu);
	return t;
}

/*
 * An answer from the I/O thread's hook that the link takes only 10 bytes
 * of: the layer takes all its plaintext and holds the rest of the record,
 * the van's queue stays empty. The sweep for stuck queues, which runs
 * while the rest waits, leaves the connection alone (its clock starts with
 * that answer, not with an older queue or none), and the answer arrives
 * once the link takes bytes again.
 */
static void
test_held_bytes_keep_the_connection(void **state)
{
	static uint8_t data[100];
	uint64_t t0, deadline;
	dt_conn *ca;
	pair p;

	(void)state;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i ^ 0x5a);
	pair_open(&p);
	p.sa.echo = p.a;
	atomic_store(&g_room[0], 10);
	assert_int_equal(send_frame(p.b, p.cb, 1, data, sizeof(data)), DT_OK);
	assert_true(wait_frames(&p.sa, 1));
	ca = p.sa.conn;
	t0 = dt__now_ns();
	assert_true(held(ca, NULL) > 0);
	pthread_mutex_lock(&ca->send_mu);
	assert_int_equal(ca->pq.len, 0); /* all of it in the layer */
	pthread_mutex_unlock(&ca->send_mu);

	/* Two sweeps after it (they run every SWEEP_NS while a queue
	 * waits). */
	deadline = t0 + WAIT_MS * 1000000ull;
	while (last_sweep(p.a) <= t0 + SWEEP_NS && dt__now_ns() < deadline) {
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
	assert_true(last_sweep(p.a) > t0 + SWEEP_NS);
	assert_true(dt__conn_is_open(ca));
	assert_int_equal(p.sa.closes, 0);

	atomic_store(&g_room[0], -1);
	assert_true(wait_frames(&p.sb, 1));
	assert_int_equal(p.sb.f[0].sum, sum_of(data, sizeof(data)));
	assert_true(wait_drained(ca));
	assert_int_equal(p.sa.closes, 0);
	assert_int_equal(p.sb.closes, 0);
	pair_close(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_beat_on_a_full_link, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_held_bytes_keep_the_connection,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_frames_both_ways, setup,
	                                    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
