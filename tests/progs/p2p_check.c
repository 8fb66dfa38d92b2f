/*
 * p2p_check.c - the multi-rank checker of point-to-point messages
 * (dt_coll_send / dt_coll_recv and their asynchronous forms), run under
 * `dtrain launch -n N -s 0` by tests/integration/coll_p2p.sh.
 *
 * Each rank sends to the next rank of a ring and receives from the
 * previous one, so with 2 ranks both directions run at once. Payloads are
 * made from (sender, tag, message index, element index), so the receiver
 * knows every bit it must get and checks them all.
 *
 *   p2p_check             every dtype at 0, 1, 3, 1023, 65537 elements and
 *                         16 MiB; 40 messages of one tag interleaved with
 *                         40 of another, received tag by tag (order per
 *                         tag); 64 tags in flight at once, received in
 *                         reverse; probing (dt_coll_probe) and waiting
 *                         for the first of two receives (dt_coll_wait_any);
 *                         then a barrier
 *   p2p_check --mismatch  rank 0 sends 10 float32 where rank 1 receives
 *                         12, then float64 where rank 1 receives float32:
 *                         both must get DT_EMISMATCH naming both calls,
 *                         then a correct exchange must work
 *   p2p_check --stall     (short DT_COLL_TIMEOUT) rank 0 sends a message
 *                         rank 1 never receives, rank 1 waits for one
 *                         rank 0 never sends: DT_ETIMEDOUT naming the pair,
 *                         and the same through dt_coll_wait_any
 *   p2p_check --cap       (DT_COLL_UNEXPECTED_MAX=1048576) rank 0 sends
 *                         2 MiB, over the cap a receiver may be made to
 *                         hold: both ranks must get DT_ENOMEM naming it,
 *                         then a correct exchange must work
 *   p2p_check --die       the last rank vanishes; rank 0's pending receive
 *                         from it (through dt_coll_wait_any), a probe of it
 *                         and a later send to it must fail
 * Exit status 0 when every check passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/coll.h"

static int rank_, size_, failures, checks;

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "p2p_check rank %d: FAIL: ", rank_);           \
		fprintf(stderr, __VA_ARGS__);                                  \
		fputc('\n', stderr);                                           \
		failures++;                                                    \
	} while (0)

static const dt_dtype dtypes[] = {DT_FLOAT32, DT_FLOAT64, DT_INT32, DT_FLOAT16};

/* Byte b of message (sender, tag, idx): any bit pattern will do, since
 * the receiver compares bytes, not values. */
static uint8_t
pattern(int sender, int tag, int idx, size_t b)
{
	uint64_t x = (uint64_t)b * 0x9E3779B97F4A7C15ull ^
	             ((uint64_t)sender << 56) ^ ((uint64_t)tag << 40) ^
	             ((uint64_t)idx << 24);

	x ^= x >> 29;
	return (uint8_t)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

static void
fill(uint8_t *p, size_t bytes, int sender, int tag, int idx)
{
	for (size_t b = 0; b < bytes; b++)
		p[b] = pattern(sender, tag, idx, b);
}

static void
verify(const char *what, const uint8_t *p, size_t bytes, int sender, int tag,
       int idx)
{
	checks++;
	for (size_t b = 0; b < bytes; b++) {
		if (p[b] != pattern(sender, tag, idx, b)) {
			FAIL("%s: byte %zu of %zu from rank %d (tag %d, "
			     "message %d) is %u, expected %u",
			     what, b, bytes, sender, tag, idx, p[b],
			     pattern(sender, tag, idx, b));
			return;
		}
	}
}

static int
ok(const char *what, dt_err err)
{
	checks++;
	if (err) {
		FAIL("%s: %s: %s", what, dt_errname(err), dt_errmsg());
		return 0;
	}
	return 1;
}

/* One message each way round the ring: receive posted first, so the
 * synchronous send cannot wait for a receiver that waits for us. */
static void
exchange(dt_coll *c, dt_dtype dt, size_t count, int tag, int idx)
{
	int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
	size_t bytes = count * dt_dtype_size(dt);
	uint8_t *out = malloc(bytes + 1), *in = malloc(bytes + 1);
	dt_coll_handle *h;
	char what[128];

	snprintf(what, sizeof(what), "%zu %s (tag %d)", count,
	         dt_dtype_name(dt), tag);
	fill(out, bytes, rank_, tag, idx);
	memset(in, 0xA5, bytes + 1);
	if (ok(what, dt_coll_recv_async(c, in, count, dt, prev, tag, &h))) {
		ok(what, dt_coll_send(c, out, count, dt, next, tag));
		if (ok(what, dt_coll_wait(h)))
			verify(what, in, bytes, prev, tag, idx);
		checks++;
		if (in[bytes] != 0xA5)
			FAIL("%s: a byte past the buffer was written", what);
	}
	free(out);
	free(in);
}

/* 40 messages on each of tags 100 and 101, sent alternately; received
 * first all of 101, then all of 100. */
static void
order_suite(dt_coll *c)
{
	enum { K = 40, N = 257 };
	int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
	static float out[2 * K][N], in[2 * K][N];
	dt_coll_handle *hs[2 * K], *hr[2 * K];

	for (int i = 0; i < K; i++)
		for (int t = 0; t < 2; t++) {
			fill((uint8_t *)out[2 * i + t], sizeof(out[0]), rank_,
			     100 + t, i);
			ok("order: send",
			   dt_coll_send_async(c, out[2 * i + t], N, DT_FLOAT32,
			                      next, 100 + t, &hs[2 * i + t]));
		}
	for (int t = 1; t >= 0; t--)
		for (int i = 0; i < K; i++)
			ok("order: recv",
			   dt_coll_recv_async(c, in[2 * i + t], N, DT_FLOAT32,
			                      prev, 100 + t, &hr[2 * i + t]));
	for (int j = 0; j < 2 * K; j++) {
		ok("order: wait send", dt_coll_wait(hs[j]));
		if (ok("order: wait recv", dt_coll_wait(hr[j])))
			verify("order per tag", (uint8_t *)in[j], sizeof(in[0]),
			       prev, 100 + j % 2, j / 2);
	}
}

/* 64 tags in flight, sizes varying by tag, receives posted in reverse. */
static void
tags_suite(dt_coll *c)
{
	enum { T = 64 };
	int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
	uint8_t *out[T], *in[T];
	dt_coll_handle *hs[T], *hr[T];

	for (int t = 0; t < T; t++) {
		size_t n = (size_t)t * 97 + 1;

		out[t] = malloc(n * 8);
		in[t] = malloc(n * 8);
		fill(out[t], n * 8, rank_, 1000 + t, 0);
	}
	for (int t = T - 1; t >= 0; t--)
		ok("tags: recv",
		   dt_coll_recv_async(c, in[t], (size_t)t * 97 + 1, DT_FLOAT64,
		                      prev, 1000 + t, &hr[t]));
	for (int t = 0; t < T; t++)
		ok("tags: send",
		   dt_coll_send_async(c, out[t], (size_t)t * 97 + 1, DT_FLOAT64,
		                      next, 1000 + t, &hs[t]));
	for (int t = 0; t < T; t++) {
		int done = 0;

		ok("tags: test", dt_coll_test(hs[t], &done));
		ok("tags: wait send", dt_coll_wait(hs[t]));
		if (ok("tags: wait recv", dt_coll_wait(hr[t])))
			verify("many tags", in[t], ((size_t)t * 97 + 1) * 8,
			       prev, 1000 + t, 0);
		free(out[t]);
		free(in[t]);
	}
}

static void probe_suite(dt_coll *c);

static void
suite(dt_coll *c)
{
	static const size_t counts[] = {0, 1, 3, 1023, 65537};

	for (size_t d = 0; d < 4; d++) {
		dt_dtype dt = dtypes[d];

		for (size_t i = 0; i < 5; i++)
			exchange(c, dt, counts[i], (int)(d * 10 + i), (int)i);
		/* 16 MiB whatever the element size. */
		exchange(c, dt, (16u << 20) / dt_dtype_size(dt),
		         (int)(d * 10 + 9), 9);
	}
	order_suite(c);
	tags_suite(c);
	probe_suite(c);
	ok("barrier after the messages", dt_coll_barrier(c));
}

/* Expect err with every fragment in the message. */
static void
expect(const char *what, dt_err err, dt_err want, const char *const *frags)
{
	checks++;
	if (err != want) {
		FAIL("%s: got %s (%s), expected %s", what, dt_errname(err),
		     err ? dt_errmsg() : "", dt_errname(want));
		return;
	}
	for (int i = 0; frags[i]; i++)
		if (strstr(dt_errmsg(), frags[i]) == NULL)
			FAIL("%s: message '%s' lacks '%s'", what, dt_errmsg(),
			     frags[i]);
	printf("p2p_check rank %d: %s: %s: %s\n", rank_, what, dt_errname(err),
	       dt_errmsg());
}

/* Poll dt_coll_probe for (peer, tag) for 30 s at most; the last answer. */
static dt_err
probe_until_ready(dt_coll *c, int peer, int tag, int *ready)
{
	dt_err err;

	for (int tries = 0; tries < 30000; tries++) {
		if ((err = dt_coll_probe(c, peer, tag, ready)) || *ready)
			return err;
		usleep(1000);
	}
	return DT_OK;
}

/* Poll dt_coll_test on h for 30 s at most. */
static void
test_until_done(dt_coll_handle *h)
{
	int done = 0;

	for (int tries = 0; tries < 30000 && !done; tries++) {
		ok("test", dt_coll_test(h, &done));
		if (!done)
			usleep(1000);
	}
}

/*
 * Probing: before the barrier nothing of tag 2000 has been sent, so the
 * probe says 0; after it the previous rank sends it and the probe must
 * turn to 1, the receive then taking the message, after which the probe
 * says 0 again.
 */
static void
probe_one(dt_coll *c, int next, int prev)
{
	float out[64], in[64];
	dt_coll_handle *h;
	int ready = -1;

	fill((uint8_t *)out, sizeof(out), rank_, 2000, 0);
	checks++;
	if (ok("probe before the send", dt_coll_probe(c, prev, 2000, &ready)) &&
	    ready != 0)
		FAIL("probe: a message not yet sent is ready (%d)", ready);
	ok("barrier before the probe", dt_coll_barrier(c));
	ok("probe: send",
	   dt_coll_send_async(c, out, 64, DT_FLOAT32, next, 2000, &h));
	checks++;
	if (ok("probe", probe_until_ready(c, prev, 2000, &ready)) && !ready)
		FAIL("probe: the message of tag 2000 never showed in 30 s");
	if (ok("probe: recv", dt_coll_recv(c, in, 64, DT_FLOAT32, prev, 2000)))
		verify("probe", (uint8_t *)in, sizeof(in), prev, 2000, 0);
	checks++;
	if (ok("probe after the recv", dt_coll_probe(c, prev, 2000, &ready)) &&
	    ready != 0)
		FAIL("probe: a message already received is still ready");
	ok("probe: wait send", dt_coll_wait(h));
}

/*
 * The first of two: of two receives posted (tags 2001, 2002), the previous
 * rank sends 2002 and holds 2001 until this rank has said (tag 2003) that
 * dt_coll_wait_any named the second; with both in, it names the first.
 */
static void
wait_any_two(dt_coll *c, int next, int prev)
{
	float out[2][64], in[2][64], go = 1, got = 0;
	dt_coll_handle *hs[3], *hr[2];
	int idx = -1;

	for (int t = 0; t < 2; t++)
		fill((uint8_t *)out[t], sizeof(out[t]), rank_, 2001 + t, 0);
	for (int t = 0; t < 2; t++)
		ok("wait_any: recv",
		   dt_coll_recv_async(c, in[t], 64, DT_FLOAT32, prev, 2001 + t,
		                      &hr[t]));
	ok("wait_any: send",
	   dt_coll_send_async(c, out[1], 64, DT_FLOAT32, next, 2002, &hs[0]));
	checks++;
	if (ok("wait_any", dt_coll_wait_any(hr, 2, &idx)) && idx != 1)
		FAIL("wait_any: named handle %d, only the second had a "
		     "message",
		     idx);
	ok("wait_any: go",
	   dt_coll_send_async(c, &go, 1, DT_FLOAT32, prev, 2003, &hs[1]));
	ok("wait_any: go recv",
	   dt_coll_recv(c, &got, 1, DT_FLOAT32, next, 2003));
	ok("wait_any: send",
	   dt_coll_send_async(c, out[0], 64, DT_FLOAT32, next, 2001, &hs[2]));
	test_until_done(hr[0]);
	checks++;
	idx = -1;
	if (ok("wait_any, both in", dt_coll_wait_any(hr, 2, &idx)) && idx != 0)
		FAIL("wait_any: named handle %d with both done, not the first",
		     idx);
	for (int t = 0; t < 2; t++)
		if (ok("wait_any: wait recv", dt_coll_wait(hr[t])))
			verify("wait_any", (uint8_t *)in[t], sizeof(in[t]),
			       prev, 2001 + t, 0);
	for (int i = 0; i < 3; i++)
		ok("wait_any: wait send", dt_coll_wait(hs[i]));
}

static void
probe_suite(dt_coll *c)
{
	int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
	dt_coll_handle *none = NULL;
	int ready, idx;

	probe_one(c, next, prev);
	wait_any_two(c, next, prev);
	/* Misuse is named, not waited on. */
	expect("probe of a negative tag", dt_coll_probe(c, prev, -1, &ready),
	       DT_EINVAL, (const char *[]){"tag -1", NULL});
	expect("wait_any of no handle", dt_coll_wait_any(&none, 1, &idx),
	       DT_EINVAL, (const char *[]){"NULL", NULL});
}

static void
mismatch_suite(dt_coll *c)
{
	float f[12] = {0};
	double d[12] = {0};

	if (rank_ == 0) {
		expect("count mismatch",
		       dt_coll_send(c, f, 10, DT_FLOAT32, 1, 1), DT_EMISMATCH,
		       (const char *[]){"10 float32", "12 float32", NULL});
		expect("type mismatch",
		       dt_coll_send(c, d, 12, DT_FLOAT64, 1, 2), DT_EMISMATCH,
		       (const char *[]){"12 float64", "12 float32", NULL});
	} else if (rank_ == 1) {
		expect("count mismatch",
		       dt_coll_recv(c, f, 12, DT_FLOAT32, 0, 1), DT_EMISMATCH,
		       (const char *[]){"10 float32", "12 float32", NULL});
		expect("type mismatch",
		       dt_coll_recv(c, f, 12, DT_FLOAT32, 0, 2), DT_EMISMATCH,
		       (const char *[]){"12 float64", "12 float32", NULL});
	}
	exchange(c, DT_INT32, 1000, 3, 0);
	ok("barrier after the mismatches", dt_coll_barrier(c));
}

static void
stall_suite(dt_coll *c)
{
	float f[4] = {0};

	if (rank_ == 0)
		expect("send never received",
		       dt_coll_send(c, f, 4, DT_FLOAT32, 1, 5), DT_ETIMEDOUT,
		       (const char *[]){"send to rank 1", "tag 5",
		                        "rank 1 has not received it", NULL});
	else if (rank_ == 1)
		expect("recv never sent",
		       dt_coll_recv(c, f, 4, DT_FLOAT32, 0, 6), DT_ETIMEDOUT,
		       (const char *[]){"recv from rank 0", "tag 6",
		                        "rank 0 has not sent it", NULL});
	if (rank_ < 2) {
		/* The first of two that never come, on both ranks at once
		 * (so that they reach the barrier together): both fail at
		 * the deadline, and wait_any returns rather than waits on. */
		dt_coll_handle *h[2];
		char from[32], sent[40];
		int idx = -1, other = 1 - rank_;

		snprintf(from, sizeof(from), "recv from rank %d", other);
		snprintf(sent, sizeof(sent), "rank %d has not sent it", other);
		ok("wait_any: recv",
		   dt_coll_recv_async(c, f, 4, DT_FLOAT32, other, 11, &h[0]));
		ok("wait_any: recv",
		   dt_coll_recv_async(c, f, 4, DT_FLOAT32, other, 12, &h[1]));
		checks++;
		if (ok("wait_any of a stall", dt_coll_wait_any(h, 2, &idx)) &&
		    idx != 0)
			FAIL("wait_any of a stall: named handle %d", idx);
		expect("wait_any never sent", dt_coll_wait(h[0]), DT_ETIMEDOUT,
		       (const char *[]){from, "tag 11", sent, NULL});
		expect("wait_any never sent", dt_coll_wait(h[1]), DT_ETIMEDOUT,
		       (const char *[]){"tag 12", NULL});
	}
	ok("barrier after the stalls", dt_coll_barrier(c));
}

static void
cap_suite(dt_coll *c)
{
	size_t n = (2u << 20) / sizeof(float);
	float *f = calloc(n, sizeof(float));

	if (rank_ == 0)
		expect("over the cap", dt_coll_send(c, f, n, DT_FLOAT32, 1, 9),
		       DT_ENOMEM,
		       (const char *[]){"DT_COLL_UNEXPECTED_MAX", NULL});
	else if (rank_ == 1)
		expect("over the cap", dt_coll_recv(c, f, n, DT_FLOAT32, 0, 9),
		       DT_ENOMEM,
		       (const char *[]){"DT_COLL_UNEXPECTED_MAX", NULL});
	free(f);
	exchange(c, DT_FLOAT32, 1000, 10, 0);
	ok("barrier after the cap", dt_coll_barrier(c));
}

static void
die_suite(dt_coll *c)
{
	float f[4] = {0};
	int last = size_ - 1;
	dt_coll_handle *h;

	const char *dir = getenv("COLL_CHECK_SYNC_DIR");
	char path[512];

	ok("barrier before the death", dt_coll_barrier(c));
	/* As in coll_check: the dying rank waits (30 s at most) until every
	 * other rank has said its barrier returned, so the job's abort
	 * cannot overtake the barrier's last message. */
	if (dir && rank_ != last) {
		FILE *fp;

		snprintf(path, sizeof(path), "%s/passed.%d", dir, rank_);
		if ((fp = fopen(path, "w")) != NULL)
			fclose(fp);
	}
	if (rank_ == last) {
		for (int r = 0, tries = 0; dir && r < last && tries < 3000;) {
			snprintf(path, sizeof(path), "%s/passed.%d", dir, r);
			if (access(path, F_OK) == 0) {
				r++;
				continue;
			}
			usleep(10000);
			tries++;
		}
		fflush(NULL);
		_exit(0); /* vanish without leaving the job */
	}
	if (rank_ != 0)
		return;
	if (!ok("recv posted",
	        dt_coll_recv_async(c, f, 4, DT_FLOAT32, last, 7, &h)))
		return;
	/* The first of one: it completes with the loss, not a hang. */
	int idx = -1, ready = 0;

	ok("wait_any on a dead peer", dt_coll_wait_any(&h, 1, &idx));
	dt_err err = dt_coll_wait(h);
	checks++;
	if (err == DT_OK || err == DT_ETIMEDOUT)
		FAIL("recv from a dead rank: %s", dt_errname(err));
	else
		printf("p2p_check rank 0: dead peer: %s: %s\n", dt_errname(err),
		       dt_errmsg());
	err = dt_coll_send(c, f, 4, DT_FLOAT32, last, 7);
	checks++;
	if (err == DT_OK || err == DT_ETIMEDOUT)
		FAIL("send to a dead rank: %s", dt_errname(err));
	/* A probe of the dead rank is an error at once, not "not yet". */
	err = dt_coll_probe(c, last, 8, &ready);
	checks++;
	if (err == DT_OK)
		FAIL("probe of a dead rank: DT_OK, ready %d", ready);
	else
		printf("p2p_check rank 0: dead peer probed: %s: %s\n",
		       dt_errname(err), dt_errmsg());
}

int
main(int argc, char **argv)
{
	int mode = 0;
	dt_coll *c;
	dt_err err;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--mismatch") == 0)
			mode = 1;
		else if (strcmp(argv[i], "--stall") == 0)
			mode = 2;
		else if (strcmp(argv[i], "--die") == 0)
			mode = 3;
		else if (strcmp(argv[i], "--cap") == 0)
			mode = 4;
		else {
			fprintf(stderr, "usage: p2p_check "
			                "[--mismatch|--stall|--cap|--die]\n");
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((err = dt_coll_init(&c))) {
		fprintf(stderr, "p2p_check: init: %s\n", dt_errmsg());
		return 1;
	}
	rank_ = dt_coll_rank(c);
	size_ = dt_coll_size(c);
	printf("p2p_check rank %d of %d\n", rank_, size_);
	if (size_ < 2) {
		float f = 0;

		checks++;
		if (dt_coll_send(c, &f, 1, DT_FLOAT32, 0, 0) != DT_EINVAL)
			FAIL("a send to oneself was not DT_EINVAL");
	} else if (mode == 0) {
		suite(c);
	} else if (mode == 1) {
		mismatch_suite(c);
	} else if (mode == 2) {
		stall_suite(c);
	} else if (mode == 4) {
		cap_suite(c);
	} else {
		die_suite(c);
	}
	if ((err = dt_coll_finalize(c)) && mode != 3)
		FAIL("finalize: %s: %s", dt_errname(err), dt_errmsg());
	printf("p2p_check rank %d: %d checks, %d failed\n", rank_, checks,
	       failures);
	return failures ? 1 : 0;
}
