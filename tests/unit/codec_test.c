/*
 * codec_test.c - the wire codec (src/net/codec.c): frame headers encoded
 * and decoded field by field, the checks a header must pass before anyone
 * sizes a buffer from it, and the metadata writer and reader.
 *
 * Round trips run over fields drawn from a fixed-seed generator, so a
 * failure can be replayed. Every rejection is checked twice: the error code
 * (DT_EPROTO for a frame that is not ours, DT_ETOOBIG for a length over its
 * limit) and the message, which must name the field. Truncated reads use
 * heap copies of exactly the readable length, so under ASan a read one byte
 * too far is a crash, not a silent pass.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/util.h"
#include "net/codec.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t
rng(void)
{
	/* xorshift64*: small, fixed seed, good enough for test fields. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

/* Every command a header may carry: the control set and the app ranges. */
static uint8_t
random_cmd(void)
{
	switch (rng() % 3) {
	case 0:
		return (uint8_t)(DT_CMD_ADD_NODE +
		                 rng() % (DT_CMD_TEXT - DT_CMD_ADD_NODE + 1));
	case 1:
		return (uint8_t)(DT_CMD_KV_FIRST +
		                 rng() %
		                     (DT_CMD_KV_LAST - DT_CMD_KV_FIRST + 1));
	default:
		return (uint8_t)(DT_CMD_COLL_FIRST +
		                 rng() % (DT_CMD_COLL_LAST - DT_CMD_COLL_FIRST +
		                          1));
	}
}

static void
random_hdr(dt_msg_hdr *h, uint64_t max_payload)
{
	memset(h, 0, sizeof(*h));
	h->version = DT_WIRE_VERSION;
	h->cmd = random_cmd();
	h->flags = (uint16_t)(rng() % 8); /* any mix of the three flags */
	h->sender = (uint32_t)rng();
	h->recver = (uint32_t)rng();
	h->arg2 = (uint32_t)rng();
	h->seq = rng();
	h->key = rng();
	h->arg0 = rng();
	h->arg1 = rng();
	/* Lengths: often at the edges, otherwise anywhere within limits. */
	switch (rng() % 4) {
	case 0:
		h->meta_len = 0;
		break;
	case 1:
		h->meta_len = DT_MAX_META;
		break;
	default:
		h->meta_len = (uint32_t)(rng() % (DT_MAX_META + 1ull));
	}
	switch (rng() % 4) {
	case 0:
		h->payload_len = 0;
		break;
	case 1:
		h->payload_len = max_payload;
		break;
	default:
		h->payload_len = max_payload == UINT64_MAX
		                     ? rng()
		                     : rng() % (max_payload + 1);
	}
}

static void
assert_hdr_equal(const dt_msg_hdr *a, const dt_msg_hdr *b)
{
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->cmd, b->cmd);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->sender, b->sender);
	assert_int_equal(a->recver, b->recver);
	assert_int_equal(a->arg2, b->arg2);
	assert_true(a->seq == b->seq);
	assert_true(a->key == b->key);
	assert_true(a->arg0 == b->arg0);
	assert_true(a->arg1 == b->arg1);
	assert_int_equal(a->meta_len, b->meta_len);
	assert_true(a->payload_len == b->payload_len);
}

/* The last error message contains every one of the given words. */
static void
assert_msg_has(const char *word)
{
	if (strstr(dt_errmsg(), word) == NULL)
		fail_msg("error message '%s' does not mention '%s'",
		         dt_errmsg(), word);
}

static void
test_hdr_round_trip_random(void **state)
{
	const uint64_t limits[] = {DT_DEFAULT_MAX_PAYLOAD, 1024, 1ull << 40,
	                           UINT64_MAX};

	(void)state;
	for (int i = 0; i < 20000; i++) {
		uint64_t max = limits[i % DT_ARRAY_LEN(limits)];
		uint8_t buf[DT_HDR_SIZE], again[DT_HDR_SIZE];
		dt_msg_hdr in, out;

		random_hdr(&in, max);
		memset(&out, 0xa5, sizeof(out));
		dt__hdr_encode(&in, buf);
		assert_int_equal(dt__hdr_decode(buf, max, &out), DT_OK);
		assert_hdr_equal(&in, &out);
		/* Decoding is the exact inverse: re-encoding gives the bytes.
		 */
		dt__hdr_encode(&out, again);
		assert_memory_equal(buf, again, DT_HDR_SIZE);
	}
}

/* The layout is the documented one, little-endian, at fixed offsets. */
static void
test_hdr_layout(void **state)
{
	dt_msg_hdr h = {.cmd = DT_CMD_BARRIER,
	                .flags = DT_F_REQUEST | DT_F_ERROR,
	                .sender = 0x04030201u,
	                .recver = 0x14131211u,
	                .arg2 = 0x34333231u,
	                .seq = 0x0807060504030201ull,
	                .key = 0x1817161514131211ull,
	                .arg0 = 0x2827262524232221ull,
	                .arg1 = 0x3837363534333231ull,
	                .meta_len = 0x00010203u,
	                .payload_len = 0x0000000504030201ull};
	uint8_t b[DT_HDR_SIZE];

	(void)state;
	memset(b, 0xee, sizeof(b));
	dt__hdr_encode(&h, b);
	assert_memory_equal(b, "DTRN", 4);
	assert_int_equal(b[4], DT_WIRE_VERSION);
	assert_int_equal(b[5], DT_CMD_BARRIER);
	assert_int_equal(b[6], DT_F_REQUEST | DT_F_ERROR);
	assert_int_equal(b[7], 0);
	assert_int_equal(b[8], 0x01);
	assert_int_equal(b[11], 0x04);
	assert_int_equal(b[12], 0x11);
	assert_int_equal(b[16], 0x01);
	assert_int_equal(b[23], 0x08);
	assert_int_equal(b[24], 0x11);
	assert_int_equal(b[32], 0x21);
	assert_int_equal(b[40], 0x31);
	assert_int_equal(b[48], 0x31);
	assert_int_equal(b[51], 0x34);
	assert_int_equal(b[52], 0x03);
	assert_int_equal(b[55], 0x00);
	assert_int_equal(b[56], 0x01);
	assert_int_equal(b[60], 0x05);
	assert_int_equal(b[63], 0x00);
	/* The header's own version field is not trusted: encode writes ours. */
	h.version = 77;
	dt__hdr_encode(&h, b);
	assert_int_equal(b[4], DT_WIRE_VERSION);
}

static void
test_put_get(void **state)
{
	uint8_t b[8];

	(void)state;
	for (int i = 0; i < 1000; i++) {
		uint64_t v = rng();

		dt__put_u16(b, (uint16_t)v);
		assert_int_equal(dt__get_u16(b), (uint16_t)v);
		assert_int_equal(b[0], (uint8_t)v);
		dt__put_u32(b, (uint32_t)v);
		assert_int_equal(dt__get_u32(b), (uint32_t)v);
		assert_int_equal(b[3], (uint8_t)(v >> 24));
		dt__put_u64(b, v);
		assert_true(dt__get_u64(b) == v);
		assert_int_equal(b[7], (uint8_t)(v >> 56));
	}
}

/* A valid header to corrupt, one field at a time. */
static void
good_header(uint8_t b[DT_HDR_SIZE])
{
	dt_msg_hdr h = {.cmd = DT_CMD_HELLO, .flags = DT_F_REQUEST};

	h.meta_len = 10;
	h.payload_len = 100;
	dt__hdr_encode(&h, b);
}

static void
test_reject_bad_magic(void **state)
{
	uint8_t b[DT_HDR_SIZE];
	dt_msg_hdr h;

	(void)state;
	for (int i = 0; i < 4; i++) {
		good_header(b);
		b[i] ^= 0x20; /* "dTRN", "DtRN", ... */
		dt__clear_error();
		assert_int_equal(dt__hdr_decode(b, DT_DEFAULT_MAX_PAYLOAD, &h),
		                 DT_EPROTO);
		assert_msg_has("magic");
	}
	memcpy(b, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
	assert_int_equal(dt__hdr_decode(b, DT_DEFAULT_MAX_PAYLOAD, &h),
	                 DT_EPROTO);
	assert_msg_has("magic");
	/* The magic is checked first, whatever else is wrong. */
	memset(b, 0xff, sizeof(b));
	assert_int_equal(dt__hdr_decode(b, DT_DEFAULT_MAX_PAYLOAD, &h),
	                 DT_EPROTO);
	assert_msg_has("magic");
}

static void
test_reject_version(void **state)
{
	uint8_t b[DT_HDR_SIZE];
	dt_msg_hdr h;
	const uint8_t others[] = {0, DT_WIRE_VERSION + 1, 2, 255};

	(void)state;
	for (size_t i = 0; i < DT_ARRAY_LEN(others); i++) {
		if (others[i] == DT_WIRE_VERSION)
			continue;
		good_header(b);
		b[4] = others[i];
		dt__clear_error();
		assert_int_equal(dt__hdr_decode(b, DT_DEFAULT_MAX_PAYLOAD, &h),
		                 DT_EPROTO);
		assert_msg_has("version");
		char num[8];
		snprintf(num, sizeof(num), "%u", others[i]);
		assert_msg_has(num);
	}
}

static int
cmd_is_known(unsigned c)
{
	return (c >= DT_CMD_ADD_NODE && c <= DT_CMD_JOIN_PARK) ||
	       (c >= DT_CMD_KV_FIRST && c <= DT_CMD_KV_LAST) ||
	       (c >= DT_CMD_COLL_FIRST && c <= DT_CMD_COLL_LAST);
}

static void
test_reject_unknown_command(void **state)
{
	uint8_t b[DT_HDR_SIZE];
	dt_msg_hdr h;
	int rejected = 0;

	(void)state;
	for (unsigned c = 0; c < 256; c++) {
		dt_err err;

		good_header(b);
		b[5] = (uint8_t)c;
		dt__clear_error();
		err = dt__hdr_decode(b, DT_DEFAULT_MAX_PAYLOAD, &h);
		if (cmd_is_known(c)) {
			assert_int_equal(err, DT_OK);
			assert_int_equal(h.cmd, c);
			continue;
		}
		assert_int_equal(err, DT_EPROTO);
		assert_msg_has("command");
		char num[8];
		snprintf(num, sizeof(num), "%u", c);
		assert_msg_has(num);
		rejected++;
	}
	/* 0, 23..31 and 96..255. */
	assert_int_equal(rejected, 1 + (32 - 23) + (256 - 96));
}

static void
test_reject_unknown_flags(void **state)
{
	uint8_t b[DT_HDR_SIZE];
	dt_msg_hdr h;

	(void)state;
	for (int bit = 0; bit < 16; bit++) {
		uint16_t f = (uint16_t)(1u << bit);
		dt_err err;

		good_header(b);
		dt__put_u16(b + 6, f);
		dt__clear_error();
		err = dt__hdr_decode(b, DT_DEFAULT_MAX_PAYLOAD, &h);
		if (f &
		    (DT_F_REQUEST | DT_F_RESPONSE | DT_F_ERROR | DT_F_LINK)) {
			assert_int_equal(err, DT_OK);
			assert_int_equal(h.flags, f);
		} else {
			assert_int_equal(err, DT_EPROTO);
			assert_msg_has("flags");
		}
	}
	good_header(b);
	dt__put_u16(b + 6, 0xffff);
	assert_int_equal(dt__hdr_decode(b, DT_DEFAULT_MAX_PAYLOAD, &h),
	                 DT_EPROTO);
	assert_msg_has("flags");
}

static void
test_reject_meta_len(void **state)
{
	uint8_t b[DT_HDR_SIZE];
	dt_msg_hdr h;
	const uint32_t bad[] = {DT_MAX_META + 1, DT_MAX_META * 2, UINT32_MAX};

	(void)state;
	good_header(b);
	dt__put_u32(b + 52, DT_MAX_META);
	assert_int_equal(dt__hdr_decode(b, DT_DEFAULT_MAX_PAYLOAD, &h), DT_OK);
	assert_int_equal(h.meta_len, DT_MAX_META);
	for (size_t i = 0; i < DT_ARRAY_LEN(bad); i++) {
		good_header(b);
		dt__put_u32(b + 52, bad[i]);
		dt__clear_error();
		assert_int_equal(dt__hdr_decode(b, DT_DEFAULT_MAX_PAYLOAD, &h),
		                 DT_ETOOBIG);
		assert_msg_has("metadata length");
		char num[16];
		snprintf(num, sizeof(num), "%u", bad[i]);
		assert_msg_has(num);
		/* The message names the command whose frame was refused. */
		assert_msg_has("HELLO");
	}
}

static void
test_reject_payload_len(void **state)
{
	uint8_t b[DT_HDR_SIZE];
	dt_msg_hdr h;
	const uint64_t limits[] = {1024, 1u << 20, DT_DEFAULT_MAX_PAYLOAD};

	(void)state;
	for (size_t i = 0; i < DT_ARRAY_LEN(limits); i++) {
		uint64_t max = limits[i];
		const uint64_t bad[] = {max + 1, max * 2, UINT64_MAX};

		good_header(b);
		dt__put_u64(b + 56, max);
		assert_int_equal(dt__hdr_decode(b, max, &h), DT_OK);
		assert_true(h.payload_len == max);
		for (size_t k = 0; k < DT_ARRAY_LEN(bad); k++) {
			char num[32];

			good_header(b);
			dt__put_u64(b + 56, bad[k]);
			dt__clear_error();
			assert_int_equal(dt__hdr_decode(b, max, &h),
			                 DT_ETOOBIG);
			assert_msg_has("payload length");
			assert_msg_has("DT_MAX_MESSAGE");
			snprintf(num, sizeof(num), "%llu",
			         (unsigned long long)bad[k]);
			assert_msg_has(num);
		}
	}
}

static void
test_cmd_names(void **state)
{
	(void)state;
	assert_string_equal(dt__cmd_name(DT_CMD_ADD_NODE), "ADD_NODE");
	assert_string_equal(dt__cmd_name(DT_CMD_ASSIGN), "ASSIGN");
	assert_string_equal(dt__cmd_name(DT_CMD_LOOKUP), "LOOKUP");
	assert_string_equal(dt__cmd_name(DT_CMD_TEXT), "TEXT");
	assert_string_equal(dt__cmd_name(200), "cmd 200");
	assert_string_equal(dt__cmd_name(DT_CMD_ACK), "ACK");
	assert_string_equal(dt__cmd_name(DT_CMD_NODE_UPDATE), "NODE_UPDATE");
	assert_string_equal(dt__cmd_name(DT_CMD_REPORT), "REPORT");
	assert_string_equal(dt__cmd_name(DT_CMD_CLOCK), "CLOCK");
	assert_string_equal(dt__cmd_name(DT_CMD_MEMBERSHIP), "MEMBERSHIP");
	assert_string_equal(dt__cmd_name(DT_CMD_GROW), "GROW");
	assert_string_equal(dt__cmd_name(DT_CMD_TREE), "TREE");
	assert_string_equal(dt__cmd_name(DT_CMD_TREE_LOST), "TREE_LOST");
	assert_string_equal(dt__cmd_name(DT_CMD_JOIN_PARK), "JOIN_PARK");
	assert_string_equal(dt__cmd_name(23), "cmd 23");
	assert_string_equal(dt__cmd_name(DT_CMD_KV_FIRST + 31), "cmd 63");
}

/* Values that survive a trip through the writer and the reader. */
static void
test_buf_round_trip(void **state)
{
	const double doubles[] = {0.0,    -0.0,     1.5,      -3.25e300,
	                          5e-324, INFINITY, -INFINITY};
	char big[2000];
	dt_wbuf w;
	dt_rbuf r;

	(void)state;
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	dt__wbuf_init(&w);
	dt__wbuf_u8(&w, 0);
	dt__wbuf_u8(&w, 255);
	dt__wbuf_u32(&w, 0);
	dt__wbuf_u32(&w, UINT32_MAX);
	dt__wbuf_u64(&w, UINT64_MAX);
	dt__wbuf_u64(&w, 0x0102030405060708ull);
	for (size_t i = 0; i < DT_ARRAY_LEN(doubles); i++)
		dt__wbuf_f64(&w, doubles[i]);
	dt__wbuf_f64(&w, NAN);
	dt__wbuf_str(&w, "");
	dt__wbuf_str(&w, "127.0.0.1");
	dt__wbuf_str(&w, big); /* past the inline buffer: grows to the heap */
	dt__wbuf_bytes(&w, "\0\1\2", 3);
	dt__wbuf_bytes(&w, NULL, 0);
	assert_int_equal(dt__wbuf_err(&w), DT_OK);
	assert_int_equal(w.len, 2 + 8 + 16 + 8 * (DT_ARRAY_LEN(doubles) + 1) +
	                            4 + 4 + 9 + 4 + sizeof(big) - 1 + 3);
	assert_true(w.data != w.inline_buf);

	/* Read back from an exact-size heap copy: no slack to hide in. */
	uint8_t *copy = malloc(w.len);
	assert_non_null(copy);
	memcpy(copy, w.data, w.len);
	dt__rbuf_init(&r, copy, w.len);
	assert_int_equal(dt__rbuf_u8(&r), 0);
	assert_int_equal(dt__rbuf_u8(&r), 255);
	assert_int_equal(dt__rbuf_u32(&r), 0);
	assert_int_equal(dt__rbuf_u32(&r), UINT32_MAX);
	assert_true(dt__rbuf_u64(&r) == UINT64_MAX);
	assert_true(dt__rbuf_u64(&r) == 0x0102030405060708ull);
	for (size_t i = 0; i < DT_ARRAY_LEN(doubles); i++) {
		double d = dt__rbuf_f64(&r);
		assert_memory_equal(&d, &doubles[i], sizeof(d)); /* bits */
	}
	assert_true(isnan(dt__rbuf_f64(&r)));
	char s[sizeof(big)];
	dt__rbuf_str(&r, s, sizeof(s));
	assert_string_equal(s, "");
	dt__rbuf_str(&r, s, sizeof(s));
	assert_string_equal(s, "127.0.0.1");
	dt__rbuf_str(&r, s, sizeof(s)); /* exactly cap-1 bytes: fits */
	assert_string_equal(s, big);
	const uint8_t *p = dt__rbuf_bytes(&r, 3);
	assert_non_null(p);
	assert_memory_equal(p, "\0\1\2", 3);
	assert_non_null(dt__rbuf_bytes(&r, 0));
	assert_int_equal(r.off, r.len);
	assert_int_equal(dt__rbuf_err(&r, "TEST"), DT_OK);
	/* One byte more is one too many. */
	assert_null(dt__rbuf_bytes(&r, 1));
	assert_int_equal(dt__rbuf_err(&r, "TEST"), DT_EPROTO);
	free(copy);
	dt__wbuf_fini(&w);
	assert_int_equal(w.len, 0);
	assert_true(w.data == w.inline_buf);
}

/* Many small writes, so the buffer grows several times. */
static void
test_wbuf_growth(void **state)
{
	dt_wbuf w;
	dt_rbuf r;

	(void)state;
	dt__wbuf_init(&w);
	for (uint32_t i = 0; i < 100000; i++)
		dt__wbuf_u32(&w, i * 2654435761u);
	assert_int_equal(dt__wbuf_err(&w), DT_OK);
	assert_int_equal(w.len, 400000);
	dt__rbuf_init(&r, w.data, w.len);
	for (uint32_t i = 0; i < 100000; i++)
		assert_int_equal(dt__rbuf_u32(&r), i * 2654435761u);
	assert_int_equal(dt__rbuf_err(&r, "growth"), DT_OK);
	dt__wbuf_fini(&w);
	/* fini leaves a usable, empty writer. */
	dt__wbuf_u8(&w, 7);
	assert_int_equal(w.len, 1);
	dt__wbuf_fini(&w);
}

/* An ADD_NODE-shaped block, as node.c writes it. */
static size_t
encode_add_node(dt_wbuf *w)
{
	dt__wbuf_init(w);
	dt__wbuf_u8(w, 2);
	dt__wbuf_u32(w, (uint32_t)-1);
	dt__wbuf_str(w, "10.1.2.3");
	dt__wbuf_u32(w, 40211);
	dt__wbuf_u32(w, 4242);
	dt__wbuf_u32(w, 2);
	dt__wbuf_u32(w, 3);
	return w->len;
}

typedef struct add_node {
	uint8_t role;
	int32_t want;
	char host[256];
	uint32_t port, pid, ns, nw;
} add_node;

static void
decode_add_node(dt_rbuf *r, add_node *a)
{
	a->role = dt__rbuf_u8(r);
	a->want = (int32_t)dt__rbuf_u32(r);
	dt__rbuf_str(r, a->host, sizeof(a->host));
	a->port = dt__rbuf_u32(r);
	a->pid = dt__rbuf_u32(r);
	a->ns = dt__rbuf_u32(r);
	a->nw = dt__rbuf_u32(r);
}

/*
 * Every strict prefix of a valid block fails, every value read after the
 * failure is zero, the reader never moves past the end, and the error
 * names the message.
 */
static void
test_rbuf_truncated(void **state)
{
	dt_wbuf w;
	size_t full = encode_add_node(&w);
	add_node a;
	dt_rbuf r;

	(void)state;
	for (size_t len = 0; len <= full; len++) {
		uint8_t *copy = malloc(len ? len : 1);

		assert_non_null(copy);
		memcpy(copy, w.data, len);
		dt__rbuf_init(&r, copy, len);
		memset(&a, 0x5a, sizeof(a));
		decode_add_node(&r, &a);
		assert_true(r.off <= r.len);
		if (len == full) {
			assert_int_equal(dt__rbuf_err(&r, "ADD_NODE"), DT_OK);
			assert_int_equal(a.role, 2);
			assert_int_equal(a.want, -1);
			assert_string_equal(a.host, "10.1.2.3");
			assert_int_equal(a.port, 40211);
			assert_int_equal(a.pid, 4242);
			assert_int_equal(a.ns, 2);
			assert_int_equal(a.nw, 3);
		} else {
			dt__clear_error();
			assert_int_equal(dt__rbuf_err(&r, "ADD_NODE"),
			                 DT_EPROTO);
			assert_msg_has("ADD_NODE");
			assert_msg_has("truncated");
			/* Values after the cut read as zero. */
			assert_int_equal(a.nw, 0);
			/* The error sticks even if later reads could fit. */
			assert_int_equal(dt__rbuf_u8(&r), 0);
			assert_null(dt__rbuf_bytes(&r, 0));
		}
		free(copy);
	}
	dt__wbuf_fini(&w);
}

static void
test_rbuf_str_limits(void **state)
{
	uint8_t b[4 + 16];
	char out[10];
	dt_rbuf r;

	(void)state;
	/* A string of cap bytes does not fit with its NUL: rejected. */
	dt__put_u32(b, 10);
	memcpy(b + 4, "0123456789", 10);
	dt__rbuf_init(&r, b, 14);
	memset(out, 'z', sizeof(out));
	dt__rbuf_str(&r, out, sizeof(out));
	assert_int_equal(r.failed, 1);
	assert_string_equal(out, ""); /* never a cut, unterminated value */
	assert_int_equal(dt__rbuf_err(&r, "ASSIGN"), DT_EPROTO);
	assert_msg_has("ASSIGN");

	/* cap-1 bytes fit. */
	dt__put_u32(b, 9);
	dt__rbuf_init(&r, b, 13);
	dt__rbuf_str(&r, out, sizeof(out));
	assert_int_equal(dt__rbuf_err(&r, "x"), DT_OK);
	assert_string_equal(out, "012345678");

	/* A NUL inside the string would cut it: rejected. */
	dt__put_u32(b, 5);
	memcpy(b + 4, "ab\0cd", 5);
	dt__rbuf_init(&r, b, 9);
	dt__rbuf_str(&r, out, sizeof(out));
	assert_int_equal(r.failed, 1);
	assert_string_equal(out, "");

	/* A declared length past the end of the block: no overread. */
	dt__put_u32(b, 8);
	uint8_t *tight = malloc(4 + 5);
	assert_non_null(tight);
	memcpy(tight, b, 4 + 5);
	dt__rbuf_init(&r, tight, 4 + 5);
	dt__rbuf_str(&r, out, sizeof(out));
	assert_int_equal(r.failed, 1);
	assert_string_equal(out, "");
	free(tight);

	/* A huge declared length with a huge cap: refused by the bound. */
	char *wide = malloc(1 << 16);
	assert_non_null(wide);
	dt__put_u32(b, UINT32_MAX);
	dt__rbuf_init(&r, b, sizeof(b));
	dt__rbuf_str(&r, wide, 1 << 16);
	assert_int_equal(r.failed, 1);
	assert_string_equal(wide, "");
	free(wide);

	/* The 4-byte length itself cut short. */
	dt__rbuf_init(&r, b, 3);
	dt__rbuf_str(&r, out, sizeof(out));
	assert_int_equal(r.failed, 1);
	assert_string_equal(out, "");
}

static void
test_rbuf_edges(void **state)
{
	uint8_t b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	dt_rbuf r;

	(void)state;
	/* A NULL block has no bytes, whatever length is claimed. */
	dt__rbuf_init(&r, NULL, 100);
	assert_int_equal(r.len, 0);
	assert_int_equal(dt__rbuf_u8(&r), 0);
	assert_int_equal(dt__rbuf_err(&r, "empty"), DT_EPROTO);

	/* Lengths that would wrap an unchecked `off + n`. */
	dt__rbuf_init(&r, b, sizeof(b));
	assert_int_equal(dt__rbuf_u8(&r), 1);
	assert_null(dt__rbuf_bytes(&r, SIZE_MAX));
	assert_true(r.off <= r.len);
	assert_null(dt__rbuf_bytes(&r, 1));
	dt__rbuf_init(&r, b, sizeof(b));
	assert_null(dt__rbuf_bytes(&r, SIZE_MAX - 2));
	dt__rbuf_init(&r, b, sizeof(b));
	assert_true(dt__rbuf_u64(&r) == 0x0807060504030201ull);
	assert_int_equal(dt__rbuf_err(&r, "x"), DT_OK);
	assert_true(dt__rbuf_u64(&r) == 0);
	assert_int_equal(dt__rbuf_err(&r, "x"), DT_EPROTO);
	/* An u32 across the end fails whole; it is not read in part. */
	dt__rbuf_init(&r, b, 6);
	assert_int_equal(dt__rbuf_u32(&r), 0x04030201u);
	assert_int_equal(dt__rbuf_u32(&r), 0);
	assert_int_equal(r.off, 4);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hdr_round_trip_random),
	    cmocka_unit_test(test_hdr_layout),
	    cmocka_unit_test(test_put_get),
	    cmocka_unit_test(test_reject_bad_magic),
	    cmocka_unit_test(test_reject_version),
	    cmocka_unit_test(test_reject_unknown_command),
	    cmocka_unit_test(test_reject_unknown_flags),
	    cmocka_unit_test(test_reject_meta_len),
	    cmocka_unit_test(test_reject_payload_len),
	    cmocka_unit_test(test_cmd_names),
	    cmocka_unit_test(test_buf_round_trip),
	    cmocka_unit_test(test_wbuf_growth),
	    cmocka_unit_test(test_rbuf_truncated),
	    cmocka_unit_test(test_rbuf_str_limits),
	    cmocka_unit_test(test_rbuf_edges),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
