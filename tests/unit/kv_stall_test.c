/*
 * kv_stall_test.c - the KVStore's stall report (KV_STALL). Its decoders
 * refuse every malformed body - a count of none or over the limit, a
 * command outside the KV range, a short or long body, an answer that is
 * not printable text - and take back what the encoders write. A server
 * (fuzz/kv_server_harness.h: the server's real message handling with the
 * node played in memory) answers a query about a push in an open round
 * with the round and the worker it waits for, about a second push with
 * the next round, about a request it never got with "never received",
 * and refuses a malformed query with an error answer; none of it changes
 * the round, which ends as before when the missing push comes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../fuzz/kv_server_harness.h"

static void
test_query_codec(void **state)
{
	dt_kv_stall_ask a[DT_KV_STALL_ASKS + 1], b[DT_KV_STALL_ASKS];
	size_t n = 0;
	dt_wbuf w;

	(void)state;
	for (int i = 0; i <= DT_KV_STALL_ASKS; i++)
		a[i] = (dt_kv_stall_ask){100 + (uint64_t)i, DT_CMD_KV_PUSH,
		                         (dt_key)i * 7};
	dt__wbuf_init(&w);
	assert_int_equal(dt__kv_stall_query_encode(a, 3, &w), DT_OK);
	assert_int_equal(w.len, 4 + 3 * 20);
	assert_int_equal(dt__kv_stall_query_decode(w.data, w.len, b, &n),
	                 DT_OK);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(b[i].seq, a[i].seq);
		assert_int_equal(b[i].cmd, a[i].cmd);
		assert_int_equal(b[i].key, a[i].key);
	}
	/* every cut of it is refused, with a message */
	for (size_t cut = 0; cut < w.len; cut++) {
		dt__clear_error();
		assert_int_equal(dt__kv_stall_query_decode(w.data, cut, b, &n),
		                 DT_EPROTO);
		assert_true(dt_errmsg()[0] != '\0');
	}
	/* a byte more than its requests */
	uint8_t more[4 + 3 * 20 + 1];

	memcpy(more, w.data, w.len);
	more[w.len] = 0;
	assert_int_equal(dt__kv_stall_query_decode(more, sizeof(more), b, &n),
	                 DT_EPROTO);
	assert_non_null(strstr(dt_errmsg(), "1 bytes after"));
	/* a command outside the KV range */
	dt__put_u32(more + 4 + 20 + 8, DT_CMD_COLL_DATA);
	assert_int_equal(dt__kv_stall_query_decode(more, w.len, b, &n),
	                 DT_EPROTO);
	assert_non_null(strstr(dt_errmsg(), "not a KV command"));
	dt__wbuf_fini(&w);
	/* no requests, or more than the limit (the encoder refuses too) */
	uint8_t cnt[4];

	dt__put_u32(cnt, 0);
	assert_int_equal(dt__kv_stall_query_decode(cnt, 4, b, &n), DT_EPROTO);
	dt__put_u32(cnt, DT_KV_STALL_ASKS + 1);
	assert_int_equal(dt__kv_stall_query_decode(cnt, 4, b, &n), DT_EPROTO);
	dt__put_u32(cnt, 0xffffffffu);
	assert_int_equal(dt__kv_stall_query_decode(cnt, 4, b, &n), DT_EPROTO);
	dt__wbuf_init(&w);
	assert_int_equal(dt__kv_stall_query_encode(a, DT_KV_STALL_ASKS + 1, &w),
	                 DT_EINVAL);
	dt__wbuf_fini(&w);
}

static void
test_reply_codec(void **state)
{
	char text[DT_KV_STALL_TEXT], big[DT_KV_STALL_TEXT + 1];
	dt_wbuf w;

	(void)state;
	dt__wbuf_init(&w);
	assert_int_equal(dt__kv_stall_reply_encode("round 3 of key 1", &w),
	                 DT_OK);
	assert_int_equal(dt__kv_stall_reply_decode(w.data, w.len, text), DT_OK);
	assert_string_equal(text, "round 3 of key 1");
	for (size_t cut = 0; cut < w.len; cut++)
		assert_int_equal(dt__kv_stall_reply_decode(w.data, cut, text),
		                 DT_EPROTO);
	/* a control character (a forged log line) and a byte past ASCII */
	uint8_t bad[64];

	memcpy(bad, w.data, w.len);
	bad[4 + 5] = '\n';
	assert_int_equal(dt__kv_stall_reply_decode(bad, w.len, text),
	                 DT_EPROTO);
	assert_string_equal(text, "");
	bad[4 + 5] = 0xc3;
	assert_int_equal(dt__kv_stall_reply_decode(bad, w.len, text),
	                 DT_EPROTO);
	dt__wbuf_fini(&w);
	/* a text of the limit's length, on either side */
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	dt__wbuf_init(&w);
	assert_int_equal(dt__kv_stall_reply_encode(big, &w), DT_EINVAL);
	dt__wbuf_fini(&w);
	dt__wbuf_init(&w);
	dt__wbuf_str(&w, big);
	assert_int_equal(dt__kv_stall_reply_decode(w.data, w.len, text),
	                 DT_EPROTO);
	dt__wbuf_fini(&w);
	big[DT_KV_STALL_TEXT - 1] = '\0';
	dt__wbuf_init(&w);
	assert_int_equal(dt__kv_stall_reply_encode(big, &w), DT_OK);
	assert_int_equal(dt__kv_stall_reply_decode(w.data, w.len, text), DT_OK);
	assert_int_equal(strlen(text), DT_KV_STALL_TEXT - 1);
	dt__wbuf_fini(&w);
}

static void
frame(int w, int cmd, uint64_t seq, dt_key key, uint64_t n, const void *meta,
      uint32_t meta_len, const float *v)
{
	dt_msg_hdr h = {
	    .version = DT_WIRE_VERSION,
	    .cmd = (uint8_t)cmd,
	    .seq = seq,
	    .key = key,
	    .arg0 = n,
	    .arg2 = cmd == DT_CMD_KV_INIT && v ? DT_KV_INIT_HAS_VALUE : 0,
	    .meta_len = meta_len,
	    .payload_len = v ? n * sizeof(float) : 0};

	h_frame(w, &h, meta, v);
}

/* Worker w asks about its request seq (cmd of key); the answer's text. */
static const char *
ask(int w, uint64_t seq, int cmd, dt_key key)
{
	dt_kv_stall_ask a = {seq, (uint32_t)cmd, key};
	dt_wbuf b;
	uint64_t n0 = h_ans.count;

	dt__wbuf_init(&b);
	assert_int_equal(dt__kv_stall_query_encode(&a, 1, &b), DT_OK);
	frame(w, DT_CMD_KV_STALL, 0, 0, 0, b.data, (uint32_t)b.len, NULL);
	dt__wbuf_fini(&b);
	assert_int_equal(h_ans.count, n0 + 1);
	assert_int_equal(h_ans.last.cmd, DT_CMD_KV_STALL);
	assert_true(h_ans.last.flags & DT_F_RESPONSE);
	assert_false(h_ans.last.flags & DT_F_ERROR);
	return h_ans.text;
}

static void
says(const char *text, const char *part)
{
	if (strstr(text, part) == NULL)
		fail_msg("answer \"%s\" does not say \"%s\"", text, part);
}

static void
test_server_answers(void **state)
{
	float v[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1};
	uint64_t n0;

	(void)state;
	setenv("DT_KV_STALL", "1", 1);
	assert_non_null(h_start());
	frame(0, DT_CMD_KV_CONFIG, 1, 0, 1, NULL, 0, NULL);
	frame(0, DT_CMD_KV_INIT, 2, 7, 4, NULL, 0, v);
	frame(1, DT_CMD_KV_INIT, 1, 7, 4, NULL, 0, NULL);
	n0 = h_ans.count;
	frame(0, DT_CMD_KV_PUSH, 3, 7, 4, NULL, 0, g);
	frame(0, DT_CMD_KV_PUSH, 4, 7, 4, NULL, 0, g); /* the next round's */
	assert_int_equal(h_ans.count, n0);
	says(ask(0, 3, DT_CMD_KV_PUSH, 7),
	     "request 3 (push of key 7): in the open round: round 1 of key 7 "
	     "has the pushes of worker 0; it waits for worker 1");
	says(ask(0, 4, DT_CMD_KV_PUSH, 7), "held for the next one");
	says(ask(0, 9, DT_CMD_KV_PULL, 7), "request 9 (pull of key 7): not "
	                                   "held here: never received");
	says(ask(1, 5, DT_CMD_KV_PUSH, 8), "never received");
	/* a malformed query: an error answer, nothing else changes */
	uint8_t junk[3] = {1, 2, 3};

	frame(0, DT_CMD_KV_STALL, 0, 0, 0, junk, sizeof(junk), NULL);
	assert_true(h_ans.last.flags & DT_F_ERROR);
	assert_int_equal(h_ans.code, DT_EPROTO);
	/* the round ends as it would have: worker 0's push, worker 1's */
	n0 = h_ans.count;
	frame(1, DT_CMD_KV_PUSH, 2, 7, 4, NULL, 0, g);
	assert_int_equal(h_ans.count, n0 + 2);
	assert_false(h_ans.last.flags & DT_F_ERROR);
	says(ask(0, 4, DT_CMD_KV_PUSH, 7),
	     "in the open round: round 2 of key 7 has the pushes of worker 0; "
	     "it waits for worker 1");
	h_stop();
	unsetenv("DT_KV_STALL");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_query_codec),
	    cmocka_unit_test(test_reply_codec),
	    cmocka_unit_test(test_server_answers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
