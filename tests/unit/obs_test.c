/*
 * obs_test.c - the observability layer (obs/): the latency histogram's
 * quantiles against sorted samples, the counters block's wire form (a
 * round trip, and every malformed block refused), the timeline record's
 * wire form and its checks, the event buffer's cap and ownership, the
 * trace file the scheduler writes, and the metrics log's lines.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/bytes.h"
#include "dtrain/nn.h"
#include "obs/obs.h"

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void
test_hist_quantiles(void **state)
{
	static dt__hist h;
	static uint64_t v[10000];
	uint64_t s = 88172645463325252ull;

	(void)state;
	memset(&h, 0, sizeof(h));
	assert_int_equal(dt__hist_quantile(&h, 0.5), 0);
	for (int i = 0; i < 10000; i++) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		/* log-uniform from 1 us to 1 s */
		v[i] =
		    (uint64_t)(1000.0 * pow(1e6, (double)(s % 100000) / 1e5));
		dt__hist_add(&h, v[i]);
	}
	qsort(v, 10000, sizeof(v[0]), cmp_u64);
	const double q[] = {0.01, 0.5, 0.9, 0.99, 1.0};
	for (size_t k = 0; k < sizeof(q) / sizeof(q[0]); k++) {
		uint64_t want = v[(size_t)ceil(q[k] * 10000) - 1];
		uint64_t got = dt__hist_quantile(&h, q[k]);

		/* within a bucket: 1/8 of a power of two either way */
		assert_true((double)got >= (double)want * 0.87 &&
		            (double)got <= (double)want * 1.13);
	}
	assert_int_equal(h.n, 10000);
	assert_int_equal(h.max, v[9999]);
	/* small values are exact */
	memset(&h, 0, sizeof(h));
	for (uint64_t i = 0; i < 8; i++)
		dt__hist_add(&h, i);
	assert_int_equal(dt__hist_quantile(&h, 0.5), 3);
}

static dt_stats
sample(void)
{
	static dt_peer_stats peers[3] = {
	    {0, 1, 64, 2, 128}, {1, 10, 4000, 11, 4100}, {2, 0, 0, 0, 0}};
	static dt_key_stats keys[2] = {{7, 3, 3, 12000, 12000},
	                               {DT_STATS_KEY_BATCHED, 1, 0, 80, 0}};
	dt_stats s = {.id = 2,
	              .role = 2,
	              .rank = 0,
	              .wall_ns = 123456789,
	              .npeers = 3,
	              .peers = peers,
	              .nkeys = 2,
	              .keys = keys,
	              .keys_omitted = 5,
	              .merges = 9,
	              .coll_busbw = 1.5e9,
	              .steps = 42,
	              .step_p50_ns = 1000,
	              .step_p99_ns = 5000};
	s.latency[1] = (dt_latency){3, 100, 90, 200, 210};
	return s;
}

static void
test_stats_wire(void **state)
{
	dt_stats s = sample(), d;
	uint8_t *p;
	size_t len;

	(void)state;
	assert_int_equal(dt__stats_encode(&s, &p, &len), DT_OK);
	assert_int_equal(dt__stats_decode(p, len, &d), DT_OK);
	assert_int_equal(d.id, 2);
	assert_int_equal(d.npeers, 3);
	assert_int_equal(d.nkeys, 2);
	assert_memory_equal(d.peers, s.peers, 3 * sizeof(*d.peers));
	assert_memory_equal(d.keys, s.keys, 2 * sizeof(*d.keys));
	assert_memory_equal(&d.latency[1], &s.latency[1], sizeof(dt_latency));
	assert_int_equal(d.wall_ns, 123456789);
	assert_int_equal(d.steps, 42);
	assert_true(d.coll_busbw == 1.5e9);
	dt_stats_fini(&d);

	/* Every cut of the block is refused. */
	for (size_t cut = 0; cut < len; cut += 7)
		assert_int_equal(dt__stats_decode(p, cut, &d), DT_EPROTO);
	/* A count beyond its limit, before anything is allocated. */
	uint8_t *q = malloc(len);
	memcpy(q, p, len);
	dt__put_u32(q + 12, 1u << 30);
	assert_int_equal(dt__stats_decode(q, len, &d), DT_EPROTO);
	assert_non_null(strstr(dt_errmsg(), "peers"));
	/* A peer naming a node id out of range. */
	memcpy(q, p, len);
	dt__put_u64(q + len - 2 * 40 - 40, DT_MAX_NODES);
	assert_int_equal(dt__stats_decode(q, len, &d), DT_EPROTO);
	/* A role that is none. */
	memcpy(q, p, len);
	dt__put_u32(q + 4, 7);
	assert_int_equal(dt__stats_decode(q, len, &d), DT_EPROTO);
	free(q);
	free(p);
}

static void
test_event_wire(void **state)
{
	dt__tev e = {.ts = 5000,
	             .dur = 300,
	             .key = 7,
	             .bytes = 4000,
	             .id = 11,
	             .kind = DT_EV_KV_PUSH,
	             .tid = DT_TID_IO,
	             .flags = DT_EVF_KEY | DT_EVF_BYTES | DT_EVF_PEER,
	             .peer = 3},
	        d;
	uint8_t b[DT_TEV_WIRE];

	(void)state;
	dt__tev_encode(&e, 1000, b);
	assert_int_equal(dt__tev_decode(b, &d), DT_OK);
	assert_int_equal(d.ts, 6000); /* the clock offset applied */
	assert_int_equal(d.dur, 300);
	assert_int_equal(d.kind, DT_EV_KV_PUSH);
	assert_int_equal(d.peer, 3);
	e.kind = DT_EV_COUNT;
	dt__tev_encode(&e, 0, b);
	assert_int_equal(dt__tev_decode(b, &d), DT_EPROTO);
	e.kind = DT_EV_KV_PUSH;
	e.tid = DT_TID_COUNT;
	dt__tev_encode(&e, 0, b);
	assert_int_equal(dt__tev_decode(b, &d), DT_EPROTO);
	e.tid = 0;
	e.flags = 0x80;
	dt__tev_encode(&e, 0, b);
	assert_int_equal(dt__tev_decode(b, &d), DT_EPROTO);
	e.flags = DT_EVF_PEER;
	e.peer = -5;
	dt__tev_encode(&e, 0, b);
	assert_int_equal(dt__tev_decode(b, &d), DT_EPROTO);
}

typedef struct seen {
	size_t n;
	uint64_t last_ts;
	int ordered;
} seen;

static void
count_events(void *arg, const dt__tev *ev, size_t n)
{
	seen *s = arg;

	for (size_t i = 0; i < n; i++) {
		if (ev[i].ts < s->last_ts)
			s->ordered = 0;
		s->last_ts = ev[i].ts;
	}
	s->n += n;
}

static void
test_buffer(void **state)
{
	int owner, other, owned;
	seen s = {0, 0, 1};

	(void)state;
	unsetenv("DTRAIN_TIMELINE");
	assert_int_equal(dt__trace_begin(&owner, &owned), DT_OK);
	assert_int_equal(owned, 0); /* not asked for */
	assert_false(dt__tracing());
	dt__trace_span(DT_EV_KV_PUSH, 0, 1, 0, 0, 0, 0); /* a no-op */
	setenv("DTRAIN_TIMELINE", "/nonexistent/t.json", 1);
	setenv("DTRAIN_TIMELINE_MAX_EVENTS", "5000", 1);
	assert_int_equal(dt__trace_begin(&owner, &owned), DT_OK);
	assert_int_equal(owned, 1);
	assert_int_equal(dt__trace_begin(&other, &owned), DT_OK);
	assert_int_equal(owned, 0); /* one owner */
	assert_true(dt__tracing());
	for (uint64_t i = 0; i < 6000; i++) {
		dt__tev e = {.ts = i, .dur = 1, .kind = DT_EV_TRAIN_STEP};
		dt__trace_add(&e);
	}
	/* Only the owner ends it. */
	assert_int_equal(dt__trace_end(&other, count_events, &s), 0);
	assert_int_equal(s.n, 0);
	assert_int_equal(dt__trace_end(&owner, count_events, &s), 1000);
	assert_int_equal(s.n, 5000);
	assert_true(s.ordered);
	assert_false(dt__tracing());
	setenv("DTRAIN_TIMELINE_MAX_EVENTS", "0", 1);
	assert_int_equal(dt__trace_begin(&owner, &owned),
	                 DT_ECONFIG); /* a bad setting */
	unsetenv("DTRAIN_TIMELINE_MAX_EVENTS");
	unsetenv("DTRAIN_TIMELINE");
}

static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	static char buf[1 << 16];
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void
test_timeline_file(void **state)
{
	char path[] = "/tmp/dt_obs_test_XXXXXX";
	struct stat st;
	int fd = mkstemp(path);
	dt__timeline *t;
	dt__tev x = {.ts = 2000,
	             .dur = 500,
	             .key = 3,
	             .kind = DT_EV_KV_MERGE,
	             .tid = DT_TID_IO,
	             .flags = DT_EVF_KEY},
	        a = {.ts = 1500,
	             .dur = 1000,
	             .id = 0x2a,
	             .kind = DT_EV_KV_PUSH,
	             .flags = DT_EVF_ASYNC | DT_EVF_BYTES,
	             .bytes = 4};

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(dt__timeline_open(path, 1000, &t), DT_OK);
	/* Not in place yet: written under another name, renamed at the
	 * end. */
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 0);
	dt__timeline_node(t, 1, "server \"0\"", 1);
	dt__timeline_event(t, 1, &x);
	dt__timeline_event(t, 3, &a);
	assert_int_equal(dt__timeline_close(t, "job \"over\""), DT_OK);
	const char *s = slurp(path);
	assert_non_null(strstr(s, "\"name\":\"merge\",\"cat\":\"kv\",\"ph\":"
	                          "\"X\",\"ts\":1.000,\"dur\":0.500,\"pid\":1,"
	                          "\"tid\":1,\"args\":{\"key\":3}"));
	assert_non_null(strstr(s, "\"ph\":\"b\",\"id\":\"0x2a\",\"ts\":0.500"));
	assert_non_null(strstr(s, "\"ph\":\"e\",\"id\":\"0x2a\",\"ts\":1.500"));
	assert_non_null(strstr(s, "server _0_")); /* quotes made safe */
	assert_non_null(strstr(s, "job 'over'"));
	assert_non_null(strstr(s, "]"));
	unlink(path);
}

static void
test_metrics_log(void **state)
{
	char path[] = "/tmp/dt_metrics_test_XXXXXX";
	int fd = mkstemp(path);
	dt_metrics_log *l;
	dt_metrics_rec r = {0,   50,  1234.5, "accuracy", 0.5,
	                    NAN, NAN, NAN,    0.25,       3.0};

	(void)state;
	close(fd);
	assert_int_equal(dt_metrics_open(path, "run \"a\"", &l), DT_OK);
	assert_int_equal(dt_metrics_write(l, &r), DT_OK);
	r.batch = -1;
	r.val = 0.75;
	r.samples_per_sec = -1;
	r.wall_s = -1;
	assert_int_equal(dt_metrics_write(l, &r), DT_OK);
	assert_int_equal(dt_metrics_close(l), DT_OK);
	const char *s = slurp(path);
	assert_non_null(strstr(
	    s, "{\"run\":\"run _a_\",\"epoch\":0,\"batch\":50,"
	       "\"samples_per_sec\":1234.50,\"metric\":\"accuracy\",\"train\":"
	       "0.500000,\"val\":null,\"loss\":null,\"val_loss\":null,"
	       "\"comm_s\":0.2500,\"wall_s\":3.0000}\n"));
	assert_non_null(strstr(s, "\"batch\":-1,\"samples_per_sec\":null"));
	assert_non_null(strstr(s, "\"val\":0.750000"));
	char big[100];
	memset(big, 'x', 99);
	big[99] = '\0';
	assert_int_equal(dt_metrics_open(path, big, &l), DT_EINVAL);
	assert_int_equal(dt_metrics_open("/nonexistent/dir/m.jsonl", NULL, &l),
	                 DT_EIO);
	assert_non_null(strstr(dt_errmsg(), "/nonexistent/dir/m.jsonl"));
	unlink(path);
}

/* The PS_VERBOSE counters line: exact text for a worker's, a server's
 * and a collective rank's counters, the rate since the mark, and a small
 * buffer cut, never overrun. */
static void
test_stats_line(void **state)
{
	(void)state;
	dt_peer_stats peers[2] = {{0, 3, 2000, 4, 1000}, {1, 7, 8000, 5, 4000}};
	dt_stats s = {.wall_ns = 2500000000ull, .npeers = 2, .peers = peers};
	dt__stats_mark mark = {500000000ull, 0, 1000};
	char line[512];

	s.latency[2] = (dt_latency){10, 0, 51200, 1500000, 0};
	s.steps = 4;
	s.step_ns = 4000000;
	s.comm_ns = 1000000;
	s.step_p50_ns = 980;
	dt__stats_line(line, sizeof(line), &s, &mark);
	assert_string_equal(line, "stats at 2.5 s: sent 0.01 MB in 10 frames "
	                          "(5.0 kB/s), received 0.01 MB in 9 frames "
	                          "(2.0 kB/s); pushpull 10, p50 51.2 us, p99 "
	                          "1.50 ms; steps 4, p50 980 ns, "
	                          "communication 25.0%");
	assert_true(mark.wall_ns == s.wall_ns && mark.bytes_sent == 10000 &&
	            mark.bytes_recv == 5000);

	/* a server, then a collective rank; no time since the mark */
	memset(&s.latency, 0, sizeof(s.latency));
	s.steps = 0;
	s.merges = 4;
	s.merge_ns = 4000;
	s.updates = 2;
	s.update_ns = 3000000;
	dt__stats_line(line, sizeof(line), &s, &mark);
	assert_string_equal(line, "stats at 2.5 s: sent 0.01 MB in 10 frames "
	                          "(0.0 kB/s), received 0.01 MB in 9 frames "
	                          "(0.0 kB/s); merges 4 (1.0 us each), "
	                          "updates 2 (1.50 ms each)");
	s.merges = s.updates = 0;
	s.coll_ops = 3;
	s.coll_bytes = 3000000;
	s.coll_busbw = 2.5e9;
	dt__stats_line(line, sizeof(line), &s, &mark);
	assert_non_null(
	    strstr(line, "; collectives 3, 3.00 MB, busbw 2.50 GB/s"));

	char small[24];
	memset(small, 'x', sizeof(small));
	dt__stats_line(small, 20, &s, &mark);
	assert_int_equal(strlen(small), 19);
	assert_int_equal(small[20], 'x');
}

/* The --stats key table sums every worker's keys and lists the 10 with
 * most bytes pushed, however many keys there are (30 here, a different
 * set on each worker, the biggest seen last). */
static void
test_report_top_keys(void **state)
{
	(void)state;
	dt_key_stats k0[30], k1[30];
	dt_stats w0 = {.id = 1, .role = 2, .nkeys = 30, .keys = k0};
	dt_stats w1 = {.id = 2, .role = 2, .nkeys = 30, .keys = k1};
	dt_stats *all[3] = {NULL, &w0, &w1};
	const char *names[3] = {"scheduler", "worker 0", "worker 1"};
	char *text = NULL;
	size_t len = 0;

	w0.latency[0].count = w1.latency[0].count = 1;
	for (int i = 0; i < 30; i++) {
		/* worker 0: keys 0..29; worker 1: keys 10..39 */
		k0[i] = (dt_key_stats){(uint64_t)i, 1, 0,
		                       (uint64_t)(i + 1) * 1000000, 0};
		k1[i] = (dt_key_stats){(uint64_t)(i + 10), 1, 0,
		                       (uint64_t)(i + 11) * 1000000, 0};
	}
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	dt__stats_report(f, all, names, 3);
	fclose(f);
	/* key k's total is (k+1) MB from each worker that has it: 29 (60 MB)
	 * down to 20 (42 MB), both workers'; 39, on one, has 40 MB */
	const char *t = strstr(text, "KV keys");
	assert_non_null(t);
	const char *want[] = {"29 ", "28 ", "27 ", "26 ", "25 ",
	                      "24 ", "23 ", "22 ", "21 ", "20 "};
	const char *line = strchr(strchr(t, '\n') + 1, '\n') + 1;
	for (int i = 0; i < 10; i++) {
		assert_memory_equal(line, want[i], 3);
		assert_true(strncmp(line + 11, "        2", 9) == 0);
		line = strchr(line, '\n') + 1;
	}
	assert_null(strstr(t, "\n39 "));
	assert_non_null(strstr(t, "60.000"));
	free(text);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hist_quantiles),
	    cmocka_unit_test(test_stats_wire),
	    cmocka_unit_test(test_event_wire),
	    cmocka_unit_test(test_buffer),
	    cmocka_unit_test(test_timeline_file),
	    cmocka_unit_test(test_metrics_log),
	    cmocka_unit_test(test_stats_line),
	    cmocka_unit_test(test_report_top_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
