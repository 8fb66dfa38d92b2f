/*
 * kv_bad_push.c - a worker that sends a server the KV data requests a
 * buggy (but authenticated) worker could: compressed pushes whose declared
 * encoding, size, meta or content is wrong, and pulls asking for an answer
 * encoding that does not exist. Each must be answered with an error naming
 * the fault, and the server must go on: a good 2-bit push afterwards is
 * summed, and pulls in fp32 and fp16 return it. Run as the only worker of
 * a job: dtrain launch -n 1 -s 1 -- kv_bad_push (integration/
 * kv_compression.sh).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/kv_impl.h"
#include "raw_ask.h"

#define N 40 /* values of the key */

static int failures;

/* Send one request about key 5 and wait (30 s at most) for its answer. */
static int
ask(dt_node *n, int cmd, unsigned arg2, const void *meta, uint32_t meta_len,
    const void *body, size_t len, uint64_t arg2_init)
{
	dt_msg_hdr h = {.cmd = (uint8_t)cmd,
	                .key = 5,
	                .arg0 = N,
	                .arg1 = 0,
	                .arg2 =
	                    cmd == DT_CMD_KV_INIT ? (uint32_t)arg2_init : arg2};

	return raw_ask("kv_bad_push", 30, n, &h, meta, meta_len, body, len);
}

/* The last answer was an error of code with word in its message. */
static void
expect_error(const char *what, dt_err code, const char *word)
{
	if (!answer.error || answer.code != code ||
	    strstr(answer.msg, word) == NULL ||
	    strstr(answer.msg, "key 5") == NULL) {
		fprintf(stderr,
		        "kv_bad_push FAILED: %s: answer error=%d %s '%s', want "
		        "%s naming '%s'\n",
		        what, answer.error, dt_errname(answer.code), answer.msg,
		        dt_errname(code), word);
		failures++;
	} else {
		printf("kv_bad_push: %s refused: %s\n", what, answer.msg);
	}
}

static void
put_f32(uint8_t *p, float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(u >> (8 * i));
}

int
main(void)
{
	dt_node *n = NULL;
	dt__app_hooks hooks = {.on_msg = raw_on_msg};
	float val[N], got[N];
	uint8_t half[4 * N], t05[4], tnan[4], body[4 * N];
	size_t b2 = dt__quant_size(DT_QUANT_2BIT, N);
	size_t b1 = dt__quant_size(DT_QUANT_1BIT, N);

	if (dt__kv_register() || dt_node_init_from_env(&n) || n == NULL) {
		fprintf(stderr, "kv_bad_push: %s\n",
		        n ? dt_errmsg() : "no cluster (DMLC_* not set)");
		return 1;
	}
	if (dt__node_attach(n, &dt__kv_app, &hooks)) {
		fprintf(stderr, "kv_bad_push: attach: %s\n", dt_errmsg());
		return 1;
	}
	put_f32(t05, 0.5f);
	put_f32(tnan, NAN);
	for (int i = 0; i < N; i++)
		val[i] = 1.0f;
#define ASK(...)                                                               \
	do {                                                                   \
		if (ask(n, __VA_ARGS__))                                       \
			return 1;                                              \
	} while (0)
	ASK(DT_CMD_KV_INIT, 0, NULL, 0, val, sizeof(val), DT_KV_INIT_HAS_VALUE);
	if (answer.error) {
		fprintf(stderr, "kv_bad_push: init: %s\n", answer.msg);
		return 1;
	}

	memset(body, 0, sizeof(body));
	ASK(DT_CMD_KV_PUSH, 9, NULL, 0, body, 4 * N, 0);
	expect_error("a push in encoding 9", DT_EPROTO, "unknown compression");
	ASK(DT_CMD_KV_PUSH, DT_QUANT_2BIT, t05, 4, body, b2 + 4, 0);
	expect_error("a 2bit push of the wrong size", DT_ESIZE,
	             "2bit of 40 values is 12 bytes");
	ASK(DT_CMD_KV_PUSH, DT_QUANT_FP16, NULL, 0, body, 4 * N, 0);
	expect_error("an fp16 push of fp32's size", DT_ESIZE,
	             "fp16 of 40 values is 80 bytes");
	ASK(DT_CMD_KV_PUSH, DT_QUANT_2BIT, NULL, 0, body, b2, 0);
	expect_error("a 2bit push without its threshold", DT_EPROTO, "meta");
	ASK(DT_CMD_KV_PUSH, DT_QUANT_2BIT, tnan, 4, body, b2, 0);
	expect_error("a 2bit push with a NaN threshold", DT_EPROTO,
	             "threshold");
	memset(body, 0xff, b2); /* every code 3 */
	ASK(DT_CMD_KV_PUSH, DT_QUANT_2BIT, t05, 4, body, b2, 0);
	expect_error("a 2bit push of code 3", DT_EPROTO, "code 3");
	memset(body, 0, b1);
	put_f32(body, INFINITY);
	ASK(DT_CMD_KV_PUSHPULL, DT_QUANT_1BIT, NULL, 0, body, b1, 0);
	expect_error("a 1bit push with an infinite mean", DT_EPROTO,
	             "not finite");
	ASK(DT_CMD_KV_PULL, 2u << 8, NULL, 0, NULL, 0, 0);
	expect_error("a pull asking for a 2bit answer", DT_EPROTO,
	             "answer encoding");
	ASK(DT_CMD_KV_PUSH, 1u << 20, NULL, 0, val, sizeof(val), 0);
	expect_error("a push with reserved bits", DT_EPROTO, "reserved");
	ASK(DT_CMD_KV_PUSH, DT_QUANT_NONE | DT_QUANT_FP16 << 8, NULL, 0, val,
	    sizeof(val), 0);
	expect_error("a push asking for an answer", DT_EPROTO, "reserved");

	/* The server goes on: a good 2bit push (every value +0.5) is the
	 * round's sum, in fp32 and fp16 pulls alike. */
	memset(body, 0x55, b2);
	body[10] = body[11] = 0; /* (the last word holds 8 values) */
	ASK(DT_CMD_KV_PUSH, DT_QUANT_2BIT, t05, 4, body, b2, 0);
	if (answer.error) {
		fprintf(stderr, "kv_bad_push FAILED: good push: %s\n",
		        answer.msg);
		failures++;
	}
	ASK(DT_CMD_KV_PULL, 0, NULL, 0, NULL, 0, 0);
	memcpy(got, answer.head, sizeof(got));
	for (int i = 0; i < N; i++)
		if (answer.error || answer.len != sizeof(got) ||
		    got[i] != 0.5f) {
			fprintf(stderr,
			        "kv_bad_push FAILED: fp32 pull [%d] = %g (%zu "
			        "bytes, error %d)\n",
			        i, got[i], answer.len, answer.error);
			failures++;
			break;
		}
	ASK(DT_CMD_KV_PULL, DT_QUANT_FP16 << 8, NULL, 0, NULL, 0, 0);
	memcpy(half, answer.head, DT_MIN(answer.len, sizeof(half)));
	dt__dequant_fp16(half, got, N);
	for (int i = 0; i < N; i++)
		if (answer.error || answer.len != 2 * N ||
		    answer.arg2 != DT_QUANT_FP16 || got[i] != 0.5f) {
			fprintf(stderr,
			        "kv_bad_push FAILED: fp16 pull [%d] = %g (%zu "
			        "bytes, encoding %u)\n",
			        i, got[i], answer.len, answer.arg2);
			failures++;
			break;
		}
	if (dt_node_stop(n)) {
		fprintf(stderr, "kv_bad_push: stop: %s\n", dt_errmsg());
		return 1;
	}
	if (failures == 0)
		printf("kv_bad_push: every bad request refused, the server "
		       "went on\n");
	return failures ? 1 : 0;
}
