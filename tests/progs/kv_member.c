/*
 * kv_member.c - a member of the job (it holds the secret and is its only
 * worker) that asks a live server for what a buggy or hostile worker
 * could, with requests of a few kilobytes: an init whose value is empty,
 * a row table of 2^36 rows and pushes of rows spread over it, a pull
 * naming one wide row 256 times, a switch to dist_sync under a dist_async
 * key (the store runs in dist_async with sgd on the server). Each must be
 * refused with its fault named, the server's resident memory must stay within
 * 32 MiB of where it was, and the server must go on: a key and a table made
 * afterwards are pushed and pulled, a pull of a whole 128 MiB table is
 * answered. Run as the only worker of a job with one server on this host:
 * dtrain launch -n 1 -s 1 -- kv_member (tests/security/member_limits.sh).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/bytes.h"
#include "kv/kv_impl.h"
#include "raw_ask.h"

#define WIDE ((uint64_t)1 << 21) /* floats of a wide row: 8 MiB */

static int failures;
static int server_pid;

/* Send one request and wait (60 s at most) for its answer. */
static int
ask(dt_node *n, int cmd, dt_key key, uint64_t arg0, uint64_t arg1,
    uint32_t arg2, const void *meta, uint32_t meta_len, const void *body,
    size_t len)
{
	dt_msg_hdr h = {.cmd = (uint8_t)cmd,
	                .key = key,
	                .arg0 = arg0,
	                .arg1 = arg1,
	                .arg2 = arg2};

	return raw_ask("kv_member", 60, n, &h, meta, meta_len, body, len);
}

static void
expect_error(const char *what, dt_err code, const char *words)
{
	if (!answer.error || answer.code != code ||
	    strstr(answer.msg, words) == NULL) {
		fprintf(
		    stderr,
		    "kv_member FAILED: %s: answer error=%d %s '%s', want %s "
		    "saying '%s'\n",
		    what, answer.error, dt_errname(answer.code), answer.msg,
		    dt_errname(code), words);
		failures++;
	} else {
		printf("kv_member: %s refused: %s\n", what, answer.msg);
	}
}

static void
expect_ok(const char *what, uint64_t len)
{
	if (answer.error || answer.len != len) {
		fprintf(stderr,
		        "kv_member FAILED: %s: error=%d '%s', %llu bytes (want "
		        "%llu)\n",
		        what, answer.error, answer.msg,
		        (unsigned long long)answer.len,
		        (unsigned long long)len);
		failures++;
	}
}

/* The server's resident memory, in KiB (its pid is in the node table). */
static long
server_rss_kib(void)
{
	char path[64];
	long size = 0, res = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/statm", server_pid);
	if ((f = fopen(path, "r")) == NULL) /* (pages: size, resident) */
		return 0;
	if (fscanf(f, "%ld %ld", &size, &res) != 2)
		res = 0;
	fclose(f);
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void
expect_rss(const char *what, long before)
{
	long now = server_rss_kib();

	printf("kv_member: server RSS %ld KiB after %s (%+ld)\n", now, what,
	       now - before);
	if (now == 0 || now - before > 32768) {
		fprintf(stderr,
		        "kv_member FAILED: the server grew by %ld KiB "
		        "after %s\n",
		        now - before, what);
		failures++;
	}
}

/* ids, then (a push) count * width floats of 1: a row request's body. */
static uint8_t *
rows_body(uint64_t first, uint64_t step, size_t count, size_t width,
          size_t *len)
{
	uint8_t *b;
	float one = 1.0f;

	*len = count * 8 + count * width * 4;
	if ((b = malloc(*len)) == NULL)
		return NULL;
	for (size_t i = 0; i < count; i++)
		dt__put_u64(b + 8 * i, first + step * i);
	for (size_t i = 0; i < count * width; i++)
		memcpy(b + count * 8 + 4 * i, &one, 4);
	return b;
}

#define ASK(...)                                                               \
	do {                                                                   \
		if (ask(n, __VA_ARGS__))                                       \
			return 1;                                              \
	} while (0)

/* The refusals, with the server's memory read before and after. */
static int
attacks(dt_node *n)
{
	float val[4] = {1, 2, 3, 4};
	uint8_t meta[16], *b;
	size_t len;
	long rss0 = server_rss_kib();
	dt_opt sgd;
	dt_wbuf w;

	printf("kv_member: server RSS %ld KiB before\n", rss0);
	/* dist_async with sgd on the server, a key made there; then a switch
	 * to dist_sync under it */
	ASK(DT_CMD_KV_CONFIG, 0, 0, 0, 0, NULL, 0, NULL, 0);
	expect_ok("dist_async", 0);
	if (dt__opt_parse("sgd", "lr=0.1", &sgd))
		return 1;
	dt__wbuf_init(&w);
	dt__opt_encode(&sgd, &w);
	ASK(DT_CMD_KV_SET_OPT, 0, 0, 0, 0, w.data, (uint32_t)w.len, NULL, 0);
	dt__wbuf_fini(&w);
	expect_ok("sgd", 0);
	ASK(DT_CMD_KV_INIT, 9, 4, 0, DT_KV_INIT_HAS_VALUE, NULL, 0, val, 16);
	expect_ok("an init in dist_async", 0);
	ASK(DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	expect_error("a switch to dist_sync under it", DT_ESTATE,
	             "exist in dist_async mode");

	ASK(DT_CMD_KV_INIT, 5, 1000, 0, DT_KV_INIT_HAS_VALUE, NULL, 0, NULL, 0);
	expect_error("an init with an empty value", DT_ESIZE,
	             "init of key 5: a value of 0 bytes");
	ASK(DT_CMD_KV_PULL, 5, 1000, 0, 0, NULL, 0, NULL, 0);
	expect_error("a pull of that key", DT_ENOKEY, "unknown key");

	dt__put_u64(meta, 0);
	dt__put_u64(meta + 8, (uint64_t)1 << 36);
	ASK(DT_CMD_KV_ROW_INIT, 7, (uint64_t)1 << 36, 1, 0, meta, 16, NULL, 0);
	expect_error("a table of 2^36 rows", DT_ESIZE,
	             "more than DTRAIN_MAX_TABLE_BYTES");
	if ((b = rows_body(0, (uint64_t)1 << 22, 8192, 1, &len)) == NULL)
		return 1;
	ASK(DT_CMD_KV_ROW_PUSH, 7, 8192, 1, 0, NULL, 0, b, len);
	free(b);
	expect_error("a push of 8192 rows spread over it", DT_ENOKEY,
	             "unknown key");
	expect_rss("the table of 2^36 rows and the push", rss0);

	dt__put_u64(meta + 8, 16);
	ASK(DT_CMD_KV_ROW_INIT, 8, 16, WIDE, 0, meta, 16, NULL, 0);
	expect_ok("a table of 16 rows of 8 MiB", 0);
	if ((b = rows_body(3, 0, 256, 0, &len)) == NULL)
		return 1;
	ASK(DT_CMD_KV_ROW_PULL, 8, 256, WIDE, 0, NULL, 0, b, len);
	free(b);
	expect_error("a pull of one 8 MiB row 256 times", DT_EINVAL,
	             "row 3 is listed twice in one request");
	expect_rss("the pull of one row 256 times", rss0);
	return 0;
}

/* The server goes on: the keys and tables that were made work. */
static int
goes_on(dt_node *n)
{
	float g[4] = {0.5f, 0.5f, 0.5f, 0.5f}, got[4];
	uint8_t *b;
	size_t len;

	ASK(DT_CMD_KV_PUSHPULL, 9, 4, 0, 0, NULL, 0, g, 16);
	expect_ok("a pushpull of the dist_async key", 16);
	memcpy(got, answer.head, sizeof(got));
	/* (4 - 0.1 x 0.5, give or take the default weight decay) */
	if (!answer.error && !(got[3] > 3.9f && got[3] < 4.0f)) {
		fprintf(stderr, "kv_member FAILED: pushpull gave %g\n",
		        (double)got[3]);
		failures++;
	}
	if ((b = rows_body(5, 1, 1, WIDE, &len)) == NULL)
		return 1;
	ASK(DT_CMD_KV_ROW_PUSHPULL, 8, 1, WIDE, 0, NULL, 0, b, len);
	free(b);
	expect_ok("a pushpull of row 5 of the wide table", WIDE * 4);
	if ((b = rows_body(15, (uint64_t)-1, 16, 0, &len)) == NULL)
		return 1;
	ASK(DT_CMD_KV_ROW_PULL, 8, 16, WIDE, 0, NULL, 0, b, len);
	free(b);
	expect_ok("a pull of the whole wide table", 16 * WIDE * 4);
	return 0;
}

int
main(void)
{
	dt_node *n = NULL;
	dt__app_hooks hooks = {.on_msg = raw_on_msg};
	const dt_node_entry *srv;

	if (dt__kv_register() || dt_node_init_from_env(&n) || n == NULL) {
		fprintf(stderr, "kv_member: %s\n",
		        n ? dt_errmsg() : "no cluster (DMLC_* not set)");
		return 1;
	}
	if (dt__node_attach(n, &dt__kv_app, &hooks)) {
		fprintf(stderr, "kv_member: attach: %s\n", dt_errmsg());
		return 1;
	}
	srv = dt__node_entry(n, dt__node_server_id(n, 0));
	server_pid = srv ? srv->pid : 0;
	if (attacks(n) || goes_on(n))
		return 1;
	if (dt_node_stop(n)) {
		fprintf(stderr, "kv_member: stop: %s\n", dt_errmsg());
		return 1;
	}
	if (failures == 0)
		printf("kv_member: every request refused with its fault "
		       "named, the server stayed small and went on\n");
	return failures ? 1 : 0;
}
