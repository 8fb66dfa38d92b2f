/*
 * kv_server_test.c - what a member of the job may ask of a parameter
 * server, played against the server's real message handling
 * (fuzz/kv_server_harness.h: src/kv/server.c with the node played in
 * memory): an init whose value is empty or cut is refused and makes no
 * key; a row table past DTRAIN_MAX_TABLE_BYTES (the 2^36-row one, or one
 * more table than the limit holds) is refused, so pushes of rows spread
 * over it cannot grow the server; a pull naming a row twice is refused
 * before any answer is made; a big answer's buffer goes back once it is
 * sent; a switch to dist_sync once a key has a dist_async value is
 * refused; after each refusal the store still answers as before; a row
 * table in a checkpoint comes back in a server started from it (values,
 * each worker's pushes, not the rounds after); and a worker's row
 * requests sent back to back, as a restarted server's replay sends them,
 * wait for their rounds in order; the many-key store likewise in a
 * checkpoint (and a file of another key placement refused), and its
 * batched requests, replayed before their init or back to back, parked
 * until they can be served. Each store kind's requests are driven here
 * without a launcher: a dense key's rounds, a streamed push, the router
 * handing a request to the kind holding its key, dense requests parked
 * before their init on a restarted server, and a dense key in a
 * checkpoint; and what a restarted worker asks of the many-key store and
 * of a row table (the pushes held, a pull as of the round it resumes at).
 * An elastic job's dense rounds follow the membership the scheduler
 * sends, and refuse pushes of an old one by name.
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

/* This process's resident memory, in KiB. */
static long
rss_kib(void)
{
	FILE *f = fopen("/proc/self/statm", "r"); /* (pages: size, resident) */
	long size = 0, res = 0;

	if (f == NULL)
		return 0;
	if (fscanf(f, "%ld %ld", &size, &res) != 2)
		res = 0;
	fclose(f);
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void
send_frame(int w, int cmd, dt_key key, uint64_t arg0, uint64_t arg1,
           uint32_t arg2, const void *meta, uint32_t meta_len,
           const void *payload, uint64_t payload_len)
{
	dt_msg_hdr h = {.version = DT_WIRE_VERSION,
	                .cmd = (uint8_t)cmd,
	                .seq = h_ans.count + 1,
	                .key = key,
	                .arg0 = arg0,
	                .arg1 = arg1,
	                .arg2 = arg2,
	                .meta_len = meta_len,
	                .payload_len = payload_len};

	h_frame(w, &h, meta, payload);
}

/* The last answer was an error of code with text in its message. */
static void
refused(dt_err code, const char *text)
{
	assert_true(h_ans.last.flags & DT_F_ERROR);
	assert_int_equal(h_ans.code, code);
	if (strstr(h_ans.msg, text) == NULL)
		fail_msg("answer \"%s\" does not say \"%s\"", h_ans.msg, text);
}

static void
answered(uint64_t bytes)
{
	if (h_ans.last.flags & DT_F_ERROR)
		fail_msg("refused: %s", h_ans.msg);
	assert_int_equal(h_ans.bytes, bytes);
}

static void
row_init(dt_key key, uint64_t rows, uint64_t width)
{
	uint8_t meta[16];

	dt__put_u64(meta, 0);
	dt__put_u64(meta + 8, rows);
	send_frame(0, DT_CMD_KV_ROW_INIT, key, rows, width, 0, meta, 16, NULL,
	           0);
}

/* ids (count u64) then, for a push, count * width floats of 1. */
static uint8_t *
rows_body(const uint64_t *ids, size_t count, size_t width, int push,
          size_t *len)
{
	size_t n = count * 8 + (push ? count * width * 4 : 0);
	uint8_t *b = malloc(n + 1);
	float one = 1.0f;

	assert_non_null(b);
	for (size_t i = 0; i < count; i++)
		dt__put_u64(b + 8 * i, ids[i]);
	for (size_t i = 0; push && i < count * width; i++)
		memcpy(b + count * 8 + 4 * i, &one, 4);
	*len = n;
	return b;
}

static void
rows_req(int w, int cmd, dt_key key, const uint64_t *ids, size_t count,
         size_t width)
{
	size_t len;
	uint8_t *b =
	    rows_body(ids, count, width, cmd != DT_CMD_KV_ROW_PULL, &len);

	send_frame(w, cmd, key, count, width, 0, NULL, 0, b, len);
	free(b);
}

/* A KV_INIT carrying the value bit with an empty or cut value is refused
 * and makes no key; a whole one then makes it. */
static void
test_init_value(void **state)
{
	float v[4] = {1, 2, 3, 4};
	kv_server *s;
	entry *e;

	(void)state;
	assert_non_null(s = h_start());
	send_frame(0, DT_CMD_KV_INIT, 5, 1000, 0, DT_KV_INIT_HAS_VALUE, NULL, 0,
	           NULL, 0);
	refused(DT_ESIZE, "init of key 5: a value of 0 bytes");
	e = dense_find(s, 5);
	assert_true(e == NULL || !e->initialised);
	send_frame(0, DT_CMD_KV_INIT, 5, 4, 0, DT_KV_INIT_HAS_VALUE, NULL, 0, v,
	           6); /* (a float and a half) */
	refused(DT_ESIZE, "whole floats");
	send_frame(0, DT_CMD_KV_INIT, 5, 4, 2, DT_KV_INIT_HAS_VALUE, NULL, 0, v,
	           16); /* (4 floats from offset 2 of 4) */
	refused(DT_ESIZE, "inside the array");
	e = dense_find(s, 5);
	assert_true(e == NULL || !e->initialised);
	/* worker 1 waits for the value; worker 0's whole value comes */
	send_frame(1, DT_CMD_KV_INIT, 5, 4, 0, 0, NULL, 0, NULL, 0);
	send_frame(0, DT_CMD_KV_INIT, 5, 4, 0, DT_KV_INIT_HAS_VALUE, NULL, 0, v,
	           16);
	answered(0);
	assert_non_null(e = dense_find(s, 5));
	assert_true(e->initialised && e->len == 4 && e->val[3] == 4.0f);
	send_frame(1, DT_CMD_KV_PULL, 5, 4, 0, 0, NULL, 0, NULL, 0);
	answered(16);
	h_stop();
}

/* Tables past DTRAIN_MAX_TABLE_BYTES are refused: the 2^36-row table of
 * width 1, with the default limit (half the memory) and a set one, and a
 * second table the limit has no room left for; pushes of rows spread over
 * the refused table then find no table and cost nothing. */
static void
test_table_limit(void **state)
{
	uint64_t ids[12288];
	long before;

	(void)state;
	unsetenv("DTRAIN_MAX_TABLE_BYTES");
	assert_non_null(h_start());
	row_init(7, (uint64_t)1 << 36, 1);
	refused(DT_ESIZE, "more than DTRAIN_MAX_TABLE_BYTES");
	h_stop();

	setenv("DTRAIN_MAX_TABLE_BYTES", "67108864", 1); /* 64 MiB */
	assert_non_null(h_start());
	row_init(7, (uint64_t)1 << 36, 1);
	refused(DT_ESIZE, "row_sparse init of key 7: 68719476736 rows of "
	                  "width 1 take");
	/* Rows 2^22 apart, as the review's 98 KB push: 2 pages each. */
	for (size_t i = 0; i < 12288; i++)
		ids[i] = (uint64_t)i << 22;
	before = rss_kib();
	rows_req(0, DT_CMD_KV_ROW_PUSH, 7, ids, 12288, 1);
	refused(DT_ENOKEY, "unknown key");
	rows_req(1, DT_CMD_KV_ROW_PUSH, 7, ids, 12288, 1);
	refused(DT_ENOKEY, "unknown key");
	print_message("RSS after the spread pushes: %+ld KiB\n",
	              rss_kib() - before);
	assert_true(rss_kib() - before < 16384);
	/* 1.25 Mi rows of width 1 in dist_sync: 20 bytes a row (a value, a
	 * round slot, a round's row and sum), 25 MiB: two such tables fit in
	 * 64 MiB, a third does not. */
	row_init(8, (uint64_t)5 << 18, 1);
	answered(0);
	row_init(9, (uint64_t)5 << 18, 1);
	answered(0);
	row_init(10, (uint64_t)5 << 18, 1);
	refused(DT_ESIZE, "the tables here already");
	/* Every row of a table within the limit: no more than it maps. */
	for (size_t i = 0; i < 12288; i++)
		ids[i] = (uint64_t)i << 6;
	before = rss_kib();
	rows_req(0, DT_CMD_KV_ROW_PUSH, 8, ids, 12288, 1);
	rows_req(1, DT_CMD_KV_ROW_PUSH, 8, ids, 12288, 1);
	answered(0);
	assert_true(rss_kib() - before < 64 * 1024 + 8192);
	h_stop();
	unsetenv("DTRAIN_MAX_TABLE_BYTES");
}

/* A pull naming a row twice is refused before an answer is made (256
 * times a row of 2^21 floats asked 2 GiB); a pull of every row is
 * answered, and its 128 MiB buffer goes back once sent. */
static void
test_pull_limits(void **state)
{
	uint64_t ids[256];
	kv_server *s;
	long before;

	(void)state;
	setenv("DTRAIN_MAX_TABLE_BYTES", "1073741824", 1); /* 1 GiB */
	assert_non_null(s = h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 0, 0, 0, NULL, 0, NULL, 0);
	answered(0); /* (dist_async) */
	row_init(11, 16, (uint64_t)1 << 21);
	answered(0);
	for (size_t i = 0; i < 256; i++)
		ids[i] = 3;
	before = rss_kib();
	rows_req(1, DT_CMD_KV_ROW_PULL, 11, ids, 256, (size_t)1 << 21);
	refused(DT_EINVAL, "row_sparse_pull of key 11: row 3 is listed twice");
	print_message("RSS after the pull of one row 256 times: %+ld KiB\n",
	              rss_kib() - before);
	assert_true(rss_kib() - before < 16384);
	for (size_t i = 0; i < 16; i++)
		ids[i] = 15 - i;
	rows_req(1, DT_CMD_KV_ROW_PULL, 11, ids, 16, (size_t)1 << 21);
	answered((uint64_t)16 << 23);
	assert_true(s->gath_cap <= ((size_t)64 << 20)); /* (SCRATCH_KEEP) */
	/* and the table still takes pushes and answers pulls */
	rows_req(0, DT_CMD_KV_ROW_PUSHPULL, 11, ids + 15, 1, (size_t)1 << 21);
	answered((uint64_t)1 << 23);
	h_stop();
	unsetenv("DTRAIN_MAX_TABLE_BYTES");
}

/* A switch to dist_sync after a key got its value in dist_async is
 * refused (its rounds would add into a merge buffer it never got); the
 * key keeps working in dist_async. */
static void
test_config_mode(void **state)
{
	float v[4] = {1, 2, 3, 4};

	(void)state;
	assert_non_null(h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 0, 0, 0, NULL, 0, NULL, 0);
	answered(0);
	send_frame(0, DT_CMD_KV_INIT, 1, 4, 0, DT_KV_INIT_HAS_VALUE, NULL, 0, v,
	           16);
	answered(0);
	send_frame(1, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	refused(DT_ESTATE, "keys, batched keys or row_sparse tables exist in "
	                   "dist_async mode");
	send_frame(0, DT_CMD_KV_PUSH, 1, 4, 0, 0, NULL, 0, v, 16);
	answered(0);
	send_frame(1, DT_CMD_KV_PUSHPULL, 1, 4, 0, 0, NULL, 0, v, 16);
	answered(16);
	h_stop();
}

/* A round of row pushes of table key: worker 0's rows a, worker 1's b
 * (values 1); both answered. */
static void
row_round(dt_key key, const uint64_t *a, size_t na, const uint64_t *b,
          size_t nb, size_t width)
{
	uint64_t n0 = h_ans.count;

	rows_req(0, DT_CMD_KV_ROW_PUSH, key, a, na, width);
	rows_req(1, DT_CMD_KV_ROW_PUSH, key, b, nb, width);
	assert_int_equal(h_ans.count, n0 + 2);
	answered(0);
}

/* The checkpoint variables unset and a test's checkpoint directory (its
 * file and the one before) removed. */
static void
ckpt_dir_done(const char *dir)
{
	char path[64];

	unsetenv("DTRAIN_CHECKPOINT_LOAD");
	unsetenv("DTRAIN_CHECKPOINT_EVERY");
	unsetenv("DTRAIN_CHECKPOINT_DIR");
	snprintf(path, sizeof(path), "%s/server-0.ckpt", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/server-0.ckpt.prev", dir);
	unlink(path);
	assert_int_equal(rmdir(dir), 0);
}

/* A row table in a checkpoint: a server started from the file has the
 * values, the pushes of each worker and the step count of the rounds
 * before it (not those after), and an init of the same table keeps
 * them. */
static void
test_rows_checkpoint(void **state)
{
	char dir[] = "/tmp/kv_server_test.XXXXXX";
	const uint64_t r13[2] = {1, 3}, r39[2] = {3, 9}, r2[1] = {2};
	kv_server *s;
	rtable *t;

	(void)state;
	assert_non_null(mkdtemp(dir));
	setenv("DTRAIN_CHECKPOINT_DIR", dir, 1);
	setenv("DTRAIN_CHECKPOINT_EVERY", "0", 1);
	assert_non_null(s = h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	row_init(7, 10, 2);
	answered(0);
	row_round(7, r13, 2, r39, 2, 2);
	send_frame(0, DT_CMD_KV_CHECKPOINT, 0, 0, 0, 0, NULL, 0, NULL, 0);
	answered(0);
	row_round(7, r2, 1, r2, 1, 2); /* (after the checkpoint) */
	h_stop();
	setenv("DTRAIN_CHECKPOINT_LOAD", "1", 1);
	assert_non_null(s = h_start());
	assert_non_null(t = find_rows(s, 7));
	assert_true(t->restored);
	assert_int_equal(t->applied[0], 1);
	assert_int_equal(t->applied[1], 1);
	assert_true(t->rs.val[2] == 1.0f && t->rs.val[6] == 2.0f &&
	            t->rs.val[18] == 1.0f && t->rs.val[4] == 0.0f);
	row_init(7, 10, 2); /* the workers' init: the values stay */
	answered(0);
	assert_true(t->rs.val[6] == 2.0f);
	row_init(8, 10, 2); /* a table the file does not have is made */
	answered(0);
	h_stop();
	ckpt_dir_done(dir);
}

/* dist_sync, as a restarted server's replay sends them: a worker's second
 * push of a table waits for the round of its first, and its pull waits
 * for the round of its last push, so it sees it. */
static void
test_rows_replay_order(void **state)
{
	const uint64_t r0[1] = {0}, r1[1] = {1}, both[2] = {0, 1};
	float got[2];
	uint64_t n0;

	(void)state;
	assert_non_null(h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	row_init(9, 4, 1);
	answered(0);
	n0 = h_ans.count;
	rows_req(0, DT_CMD_KV_ROW_PUSH, 9, r0, 1, 1);
	rows_req(0, DT_CMD_KV_ROW_PUSH, 9, r1, 1, 1);   /* waits */
	rows_req(0, DT_CMD_KV_ROW_PULL, 9, both, 2, 1); /* waits */
	assert_int_equal(h_ans.count, n0);
	rows_req(1, DT_CMD_KV_ROW_PUSH, 9, r0, 1, 1); /* round 1 ends */
	assert_int_equal(h_ans.count, n0 + 2);
	assert_int_equal(h_ans.errors, 0);
	rows_req(1, DT_CMD_KV_ROW_PUSH, 9, r1, 1, 1); /* round 2 ends */
	assert_int_equal(h_ans.count, n0 + 5);
	assert_int_equal(h_ans.last.cmd, DT_CMD_KV_ROW_PULL);
	answered(8);
	memcpy(got, h_ans.data, sizeof(got));
	assert_true(got[0] == 2.0f && got[1] == 2.0f);
	h_stop();
}

/* A batched request of the keys 100 .. 100 + n - 1, one float each; for a
 * push, every value v. */
static void
many_req(int w, int cmd, size_t n, float v)
{
	int vals = cmd != DT_CMD_KV_PULL_MANY;
	uint8_t *b = malloc(n * 12);

	assert_non_null(b);
	for (size_t i = 0; i < n; i++) {
		dt__put_u64(b + 8 * i, 100 + i);
		memcpy(b + 8 * n + 4 * i, &v, 4);
	}
	send_frame(w, cmd, 100, n, 1, 0, NULL, 0, b, n * (vals ? 12 : 8));
	free(b);
}

/* A batched request naming its keys as a range (DT_KV_KEY_RANGE): keys
 * k0, k0 + d ... (n of them); for a push, key i's value is v + i. */
static void
range_req(int w, int cmd, uint64_t k0, uint64_t d, size_t n, float v)
{
	int vals = cmd != DT_CMD_KV_PULL_MANY;
	uint8_t *b = malloc(16 + 4 * n);

	assert_non_null(b);
	dt__put_u64(b, k0);
	dt__put_u64(b + 8, d);
	for (size_t i = 0; i < n; i++) {
		float x = v + (float)i;

		memcpy(b + 16 + 4 * i, &x, 4);
	}
	send_frame(w, cmd, k0, n, 1, DT_KV_KEY_RANGE, NULL, 0, b,
	           16 + (vals ? 4 * n : 0));
	free(b);
}

/* The values of the last answer (at most 64). */
static void
got_values(float *got, size_t n)
{
	assert_true(n * 4 <= sizeof(h_ans.data) && h_ans.bytes == n * 4);
	memcpy(got, h_ans.data, n * 4);
}

/* Key ranges in dist_sync: a range that is a stretch of the init's run
 * (the span path) and one that is not (listed, looked up) give the same
 * sums as listed keys, a short range too; a second push of one worker in
 * an open round names the key; and what is refused: an init, a step of
 * 0, a range past 2^64 - 1, a body of the wrong size, more keys than the
 * store holds, an unknown key, a server that recovers. */
static void
test_many_range(void **state)
{
	kv_server *s;
	uint64_t n0;
	float got[64];

	(void)state;
	assert_non_null(s = h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	many_req(0, DT_CMD_KV_INIT_MANY, 128, 0.5f); /* keys 100 .. 227 */
	answered(0);
	n0 = h_ans.count;
	range_req(0, DT_CMD_KV_PUSH_MANY, 100, 1, 128, 0.0f);
	/* a second push of worker 0 in the open round: named */
	range_req(0, DT_CMD_KV_PUSH_MANY, 120, 1, 64, 0.0f);
	refused(DT_ESTATE, "of key 120: this worker's push of it");
	range_req(1, DT_CMD_KV_PUSH_MANY, 100, 1, 128, 1000.0f);
	assert_int_equal(h_ans.count, n0 + 3);
	answered(0);
	/* key 100 + i is 2i + 1000: a stretch of the run, by span */
	range_req(1, DT_CMD_KV_PULL_MANY, 110, 1, 64, 0);
	got_values(got, 64);
	for (int i = 0; i < 64; i++)
		assert_true(got[i] == (float)(2 * (10 + i) + 1000));
	/* every other key (no run of step 2): listed and looked up */
	range_req(0, DT_CMD_KV_PULL_MANY, 101, 2, 64, 0);
	got_values(got, 64);
	for (int i = 0; i < 64; i++)
		assert_true(got[i] == (float)(2 * (1 + 2 * i) + 1000));
	/* a pushpull of every other key, and a short range (10 keys) */
	range_req(0, DT_CMD_KV_PUSHPULL_MANY, 101, 2, 64, 1.0f);
	range_req(1, DT_CMD_KV_PUSHPULL_MANY, 101, 2, 64, 2.0f);
	got_values(got, 64);
	for (int i = 0; i < 64; i++)
		assert_true(got[i] == (float)(3 + 2 * i));
	range_req(1, DT_CMD_KV_PULL_MANY, 101, 2, 10, 0);
	got_values(got, 10);
	for (int i = 0; i < 10; i++)
		assert_true(got[i] == (float)(3 + 2 * i));
	assert_int_equal(h_ans.errors, 1);
	/* a single-key pull of a key whose round holds the puller's range
	 * push waits for that round: answered after the push, with the sum */
	n0 = h_ans.count;
	range_req(1, DT_CMD_KV_PUSH_MANY, 100, 1, 128, 5.0f);
	send_frame(1, DT_CMD_KV_PULL, 130, 1, 0, 0, NULL, 0, NULL, 0);
	assert_int_equal(h_ans.count, n0);
	range_req(0, DT_CMD_KV_PUSH_MANY, 100, 1, 128, 7.0f);
	assert_int_equal(h_ans.count, n0 + 3);
	assert_int_equal(h_ans.last.cmd, DT_CMD_KV_PULL);
	got_values(got, 1);
	assert_true(got[0] == (5.0f + 30) + (7.0f + 30));
	/* refusals */
	range_req(0, DT_CMD_KV_INIT_MANY, 300, 1, 64, 0.0f);
	refused(DT_EPROTO, "a key range is for a push, pull or pushpull");
	range_req(0, DT_CMD_KV_PULL_MANY, 100, 0, 64, 0);
	refused(DT_EPROTO, "a step of 0");
	range_req(0, DT_CMD_KV_PULL_MANY, UINT64_MAX - 100, 2, 64, 0);
	refused(DT_EPROTO, "past 2^64 - 1");
	send_frame(0, DT_CMD_KV_PULL_MANY, 100, 64, 1, DT_KV_KEY_RANGE, NULL, 0,
	           got, 24);
	refused(DT_ESIZE, "body of 24 bytes, expected 16");
	range_req(0, DT_CMD_KV_PULL_MANY, 100, 1, 129, 0);
	refused(DT_ENOKEY, "more keys than the store holds (128)");
	range_req(0, DT_CMD_KV_PULL_MANY, 200, 1, 64, 0);
	refused(DT_ENOKEY, "of key 228: unknown key");
	s->rejoined = 1; /* (as a server in a lost one's place) */
	range_req(0, DT_CMD_KV_PULL_MANY, 100, 1, 64, 0);
	refused(DT_EPROTO, "a key range to a server that recovers");
	s->rejoined = 0;
	h_stop();
}

/* The many-key store in a checkpoint: a server started from the file has
 * the keys, the values and update counts of the rounds before it (not
 * those after), keeps them at the workers' init, and answers a pull with
 * them; the file's placement is this job's. */
static void
test_many_checkpoint(void **state)
{
	char dir[] = "/tmp/kv_server_test.XXXXXX";
	kv_server *s;
	float got[40];

	(void)state;
	assert_non_null(mkdtemp(dir));
	setenv("DTRAIN_CHECKPOINT_DIR", dir, 1);
	setenv("DTRAIN_CHECKPOINT_EVERY", "0", 1);
	assert_non_null(s = h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	many_req(0, DT_CMD_KV_INIT_MANY, 40, 0.5f);
	answered(0);
	many_req(0, DT_CMD_KV_PUSH_MANY, 40, 1.0f);
	many_req(1, DT_CMD_KV_PUSH_MANY, 40, 2.0f); /* round 1: 3 */
	answered(0);
	send_frame(0, DT_CMD_KV_CHECKPOINT, 0, 0, 0, 0, NULL, 0, NULL, 0);
	answered(0);
	many_req(0, DT_CMD_KV_PUSH_MANY, 40, 4.0f); /* (after it) */
	many_req(1, DT_CMD_KV_PUSH_MANY, 40, 4.0f);
	h_stop();
	setenv("DTRAIN_CHECKPOINT_LOAD", "1", 1);
	assert_non_null(s = h_start());
	assert_true(s->ks_on && s->ks_restored);
	assert_int_equal(s->ks.nrec, 40);
	assert_int_equal(s->ks.updates[39], 1);
	many_req(0, DT_CMD_KV_INIT_MANY, 40, 0.5f); /* the values stay */
	answered(0);
	many_req(1, DT_CMD_KV_PULL_MANY, 40, 0);
	answered(160);
	memcpy(got, h_ans.data, sizeof(got));
	for (int i = 0; i < 40; i++)
		assert_true(got[i] == 3.0f);
	h_stop();
	/* under another placement the file is refused, naming both */
	setenv("DTRAIN_KV_PLACEMENT", "mxnet", 1);
	assert_null(h_start());
	assert_non_null(strstr(dt_errmsg(), "under key placement balanced"));
	assert_non_null(strstr(dt_errmsg(), "this job's is mxnet"));
	unsetenv("DTRAIN_KV_PLACEMENT");
	ckpt_dir_done(dir);
}

/* On a server that took a lost one's place, batched requests as the
 * replays send them: worker 1's pushes before worker 0's init wait for
 * it, and a worker's pushes sent back to back each wait for the round of
 * the one before; the sums come out as in order, with no error. On a
 * server without recovery (DTRAIN_RECOVER), a second push in a round is
 * refused. */
static void
test_many_replay_park(void **state)
{
	kv_server *s;
	uint64_t n0;
	float got[40];

	(void)state;
	assert_non_null(s = h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	s->rejoined = 1; /* (as a server in a lost one's place) */
	n0 = h_ans.count;
	many_req(1, DT_CMD_KV_PUSH_MANY, 40, 1.0f); /* before the init */
	many_req(1, DT_CMD_KV_PUSH_MANY, 40, 10.0f);
	assert_int_equal(h_ans.count, n0);
	many_req(0, DT_CMD_KV_INIT_MANY, 40, 0.0f);
	assert_int_equal(h_ans.count, n0 + 1);
	many_req(0, DT_CMD_KV_PUSH_MANY, 40, 2.0f);  /* round 1: 3 */
	many_req(0, DT_CMD_KV_PUSH_MANY, 40, 20.0f); /* round 2: 30 */
	assert_int_equal(h_ans.count, n0 + 5);
	assert_int_equal(h_ans.errors, 0);
	many_req(0, DT_CMD_KV_PULL_MANY, 40, 0);
	answered(160);
	memcpy(got, h_ans.data, sizeof(got));
	for (int i = 0; i < 40; i++)
		assert_true(got[i] == 30.0f);
	s->rejoined = 0; /* (and this node has no DTRAIN_RECOVER) */
	many_req(0, DT_CMD_KV_PUSH_MANY, 40, 1.0f);
	many_req(0, DT_CMD_KV_PUSH_MANY, 40, 1.0f);
	refused(DT_ESTATE, "has not been answered yet");
	h_stop();
}

/* A single-key request of key with n floats of value v (NULL: none). */
static void
dense_req(int w, int cmd, dt_key key, uint64_t n, const float *v)
{
	send_frame(w, cmd, key, n, 0,
	           cmd == DT_CMD_KV_INIT && v ? DT_KV_INIT_HAS_VALUE : 0, NULL,
	           0, v, v ? n * sizeof(float) : 0);
}

/* The last answer's first float, or u64. */
static float
ans_f32(void)
{
	float f;

	memcpy(&f, h_ans.data, sizeof(f));
	return f;
}

static uint64_t
ans_u64(void)
{
	return dt__get_u64(h_ans.data);
}

/* KV_RESUME of key from worker w: how many of its pushes the store
 * holds. */
static uint64_t
resumed(int w, dt_key key, uint64_t n)
{
	dt_msg_hdr h = {.version = DT_WIRE_VERSION,
	                .cmd = DT_CMD_KV_RESUME,
	                .seq = h_ans.count + 1,
	                .key = key,
	                .arg0 = n};

	h_frame(w, &h, NULL, NULL);
	answered(8);
	return ans_u64();
}

/* A dist_sync server with dense key 7 of 4 floats, v from worker 0 and
 * worker 1's init answered. */
static void
sync_key7(const float *v)
{
	assert_non_null(h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	dense_req(0, DT_CMD_KV_INIT, 7, 4, v);
	answered(0);
	dense_req(1, DT_CMD_KV_INIT, 7, 4, NULL);
	answered(0);
}

/* A dense key's dist_sync rounds, its requests handed to the dense kind
 * directly: a push waits for the round, a pull of a worker that pushed
 * waits to see its own push, a second push of a worker in a round joins
 * the next one, and KV_RESUME counts each worker's pushes held. */
static void
test_dense_rounds(void **state)
{
	float v[4] = {1, 2, 3, 4}, g1[4] = {1, 1, 1, 1}, g2[4] = {2, 2, 2, 2};
	float g10[4] = {10, 10, 10, 10}, g20[4] = {20, 20, 20, 20};
	uint64_t n0;

	(void)state;
	sync_key7(v);
	n0 = h_ans.count;
	dense_req(0, DT_CMD_KV_PUSH, 7, 4, g1);
	dense_req(0, DT_CMD_KV_PULL, 7, 4, NULL); /* sees its own push */
	dense_req(0, DT_CMD_KV_PUSH, 7, 4, g10);  /* the next round's */
	assert_int_equal(h_ans.count, n0);
	assert_int_equal(resumed(0, 7, 4), 2); /* (open round, next one) */
	n0 = h_ans.count;
	dense_req(1, DT_CMD_KV_PUSH, 7, 4, g2); /* round 1 over: 3 */
	assert_int_equal(h_ans.count, n0 + 3);
	answered(0);
	dense_req(1, DT_CMD_KV_PULL, 7, 4, NULL);
	answered(16);
	assert_true(ans_f32() == 3.0f);
	dense_req(1, DT_CMD_KV_PUSHPULL, 7, 4, g20); /* round 2: 30 */
	answered(16);
	assert_true(ans_f32() == 30.0f);
	assert_int_equal(resumed(0, 7, 4), 2);
	assert_int_equal(resumed(1, 7, 4), 2);
	assert_int_equal(h_ans.errors, 0);
	dense_req(0, DT_CMD_KV_PUSH, 7, 5, g1); /* (its length is 4) */
	refused(DT_ESIZE, "length 5 != initialised length 4");
	h_stop();
}

/* A pull sent after pushes held for later rounds (a worker's replay to a
 * restarted server sends several rounds' pushes back to back, then the
 * pull that followed them) sees the round of the last of them, not the
 * open one; KV_RESUME does not count it as a push. */
static void
test_dense_pull_after_held(void **state)
{
	float v[4] = {1, 2, 3, 4}, g1[4] = {1, 1, 1, 1}, g2[4] = {2, 2, 2, 2};
	float g10[4] = {10, 10, 10, 10}, g20[4] = {20, 20, 20, 20};
	float g100[4] = {100, 100, 100, 100}, g200[4] = {200, 200, 200, 200};

	(void)state;
	sync_key7(v);
	dense_req(0, DT_CMD_KV_PUSH, 7, 4, g1);   /* round 1 */
	dense_req(0, DT_CMD_KV_PUSH, 7, 4, g10);  /* held for round 2 */
	dense_req(0, DT_CMD_KV_PUSH, 7, 4, g100); /* held for round 3 */
	dense_req(0, DT_CMD_KV_PULL, 7, 4, NULL); /* after round 3 */
	assert_int_equal(resumed(0, 7, 4), 3);
	dense_req(1, DT_CMD_KV_PUSH, 7, 4, g2); /* round 1 over: 3 */
	assert_int_equal(h_ans.pulls, 0);
	dense_req(1, DT_CMD_KV_PUSH, 7, 4, g20); /* round 2 over: 30 */
	assert_int_equal(h_ans.pulls, 0);
	dense_req(1, DT_CMD_KV_PUSH, 7, 4, g200); /* round 3 over: 300 */
	assert_int_equal(h_ans.pulls, 1);
	assert_true(h_ans.pull_f32 == 300.0f);
	/* nothing held: answered at once */
	dense_req(0, DT_CMD_KV_PULL, 7, 4, NULL);
	assert_int_equal(h_ans.pulls, 2);
	assert_true(h_ans.pull_f32 == 300.0f);
	/* a push in the open round, one held, a pull: after the second */
	dense_req(0, DT_CMD_KV_PUSH, 7, 4, g1);
	dense_req(0, DT_CMD_KV_PUSH, 7, 4, g10);
	dense_req(0, DT_CMD_KV_PULL, 7, 4, NULL);
	dense_req(1, DT_CMD_KV_PUSH, 7, 4, g2); /* 3 */
	assert_int_equal(h_ans.pulls, 2);
	dense_req(1, DT_CMD_KV_PUSHPULL, 7, 4, g20); /* 30 */
	assert_int_equal(h_ans.pulls, 3);
	assert_true(h_ans.pull_f32 == 30.0f);
	assert_int_equal(h_ans.errors, 0);
	h_stop();
}

/* A dense push of an elastic job naming membership epoch. */
static void
elastic_push(int w, int cmd, dt_key key, uint64_t epoch, const float *g)
{
	send_frame(w, cmd, key, 4, 0, (uint32_t)(epoch << DT_KV_EPOCH_SHIFT),
	           NULL, 0, g, 4 * sizeof(float));
}

/* The scheduler's membership epoch of the workers of ranks ws (count),
 * the last change removing node gone (0: none), handed to the server. */
static void
membership(uint64_t epoch, const int *ws, int count, int gone)
{
	h_epoch = epoch;
	h_nmembers = count;
	for (int i = 0; i < count; i++)
		h_members[i] = 2 + ws[i];
	h_hooks.on_membership(h_hooks.arg, (dt_node *)(void *)&h_node_tag,
	                      epoch, gone, gone != 0);
}

/* An elastic job's dense rounds: a round waits for the live workers of
 * the membership; a change drops the open round and answers its push
 * DT_EMEMBERSHIP; a push of an old membership, or from a worker outside
 * the membership, is refused by name; one of a membership still to come
 * waits for it; a round sums in rank order; batched calls are refused. */
static void
test_elastic_rounds(void **state)
{
	float v[4] = {0}, g1[4] = {1, 1, 1, 1}, g2[4] = {2, 2, 2, 2};
	const int both[] = {0, 1}, w0[] = {0};
	uint64_t n0;

	(void)state;
	h_elastic = 1;
	h_epoch = 0;
	assert_non_null(h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	dense_req(0, DT_CMD_KV_INIT, 7, 4, v);
	answered(0);
	n0 = h_ans.count;
	elastic_push(0, DT_CMD_KV_PUSHPULL, 7, 0, g1); /* waits for worker 1 */
	assert_int_equal(h_ans.count, n0);
	membership(1, w0, 1, 3); /* worker 1 lost */
	refused(DT_EMEMBERSHIP, "its round was dropped: membership 0 -> 1 "
	                        "(worker 1 was lost)");
	elastic_push(0, DT_CMD_KV_PUSH, 7, 0, g1);
	refused(DT_EMEMBERSHIP, "membership 0 is over");
	elastic_push(1, DT_CMD_KV_PUSH, 7, 1, g1);
	refused(DT_EMEMBERSHIP, "worker 1, which is not in membership 1");
	elastic_push(0, DT_CMD_KV_PUSHPULL, 7, 1, g2); /* the round is it */
	answered(16);
	assert_true(ans_f32() == 2.0f);
	n0 = h_ans.count;
	elastic_push(0, DT_CMD_KV_PUSHPULL, 7, 2, g1); /* kept for 2 */
	assert_int_equal(h_ans.count, n0);
	membership(2, both, 2, 0);
	assert_int_equal(h_ans.count, n0); /* (now waits for worker 1) */
	elastic_push(1, DT_CMD_KV_PUSHPULL, 7, 2, g2);
	assert_int_equal(h_ans.count, n0 + 2);
	answered(16);
	assert_true(ans_f32() == 3.0f);
	send_frame(0, DT_CMD_KV_PUSH_MANY, 0, 1, 0, 0, NULL, 0, NULL, 0);
	refused(DT_ENOTSUP, "in an elastic job");
	h_stop();
	h_elastic = 0;
}

/* A push big enough to be applied as it streams in (through the dense
 * kind's chunk) sums as a whole one does, bit for bit. */
static void
test_dense_streamed(void **state)
{
	size_t n = 1u << 17; /* 512 KiB: streamed */
	float *a = malloc(n * 4), *b = malloc(n * 4), first[2];

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	for (size_t i = 0; i < n; i++) {
		a[i] = 0.1f * (float)(i % 97);
		b[i] = 0.3f * (float)(i % 89);
	}
	assert_non_null(h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	for (dt_key key = 1; key <= 2; key++) {
		dense_req(0, DT_CMD_KV_INIT, key, n, a);
		answered(0);
	}
	/* key 1 streamed; key 2 in pieces below the streaming size */
	dense_req(0, DT_CMD_KV_PUSH, 1, n, a);
	dense_req(1, DT_CMD_KV_PUSHPULL, 1, n, b);
	answered(n * 4);
	memcpy(first, h_ans.data, sizeof(first));
	assert_true(first[0] == a[0] + b[0] && first[1] == a[1] + b[1]);
	kv_server *s = h_hooks.arg;
	entry *e1 = dense_find(s, 1), *e2 = dense_find(s, 2);
	for (size_t off = 0; off < n; off += 1024) {
		for (size_t i = 0; i < 1024; i++)
			e2->val[off + i] = a[off + i] + b[off + i];
	}
	assert_memory_equal(e1->val, e2->val, n * 4);
	free(a);
	free(b);
	h_stop();
}

/* The router hands a single-key request to the kind holding its key: a
 * key of the many-key store is pushed and pulled there, a dense init of a
 * row table's key is refused naming the call that made it, and a key no
 * kind holds is refused as unknown. */
static void
test_kind_routing(void **state)
{
	float one = 1.0f, two = 2.0f, v[3] = {5, 6, 7};

	(void)state;
	assert_non_null(h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	many_req(0, DT_CMD_KV_INIT_MANY, 4, 0.5f); /* keys 100 .. 103 */
	answered(0);
	row_init(50, 10, 2);
	answered(0);
	dense_req(0, DT_CMD_KV_PUSH, 101, 1, &one);
	dense_req(1, DT_CMD_KV_PUSH, 101, 1, &two);
	answered(0);
	dense_req(0, DT_CMD_KV_PULL, 101, 1, NULL);
	answered(4);
	assert_true(ans_f32() == 3.0f);
	assert_null(dense_find(h_hooks.arg, 101)); /* (not a dense key) */
	dense_req(0, DT_CMD_KV_INIT, 50, 2, v);
	refused(DT_ESTATE, "initialised by a row_sparse init");
	dense_req(0, DT_CMD_KV_PUSH, 999, 2, v);
	refused(DT_ENOKEY, "unknown key");
	dense_req(0, DT_CMD_KV_INIT, 102, 3, v); /* (its length is 1) */
	refused(DT_ESIZE, "length 3 != initialised length 1");
	h_stop();
}

/* On a server that took a lost one's place, a worker's push and
 * KV_RESUME of a dense key sent before worker 0's init wait for it, then
 * count as in order; a key that never comes is refused once every
 * worker's replay is over. */
static void
test_dense_park(void **state)
{
	float v[2] = {1, 1}, g[2] = {2, 2};
	kv_server *s;
	uint64_t n0;

	(void)state;
	assert_non_null(s = h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	s->rejoined = 1; /* (as a server in a lost one's place) */
	assert_non_null(s->replayed = calloc(H_WORKERS, 1));
	n0 = h_ans.count;
	dense_req(1, DT_CMD_KV_PUSH, 9, 2, g);
	dense_req(1, DT_CMD_KV_PUSH, 11, 2, g); /* (never initialised) */
	send_frame(1, DT_CMD_KV_RESUME, 9, 2, 0, 0, NULL, 0, NULL, 0);
	assert_int_equal(h_ans.count, n0);
	dense_req(0, DT_CMD_KV_INIT, 9, 2, v);
	assert_int_equal(h_ans.count, n0 + 2); /* the init, the resume */
	answered(8);
	assert_int_equal(ans_u64(), 1);
	dense_req(0, DT_CMD_KV_PUSHPULL, 9, 2, g); /* round 1: 4 */
	answered(8);
	assert_true(ans_f32() == 4.0f);
	assert_int_equal(h_ans.errors, 0);
	send_frame(0, DT_CMD_KV_REPLAYED, 0, 0, 0, 0, NULL, 0, NULL, 0);
	send_frame(1, DT_CMD_KV_REPLAYED, 0, 0, 0, 0, NULL, 0, NULL, 0);
	refused(DT_ENOKEY, "key 11: unknown key");
	h_stop();
}

/* A dense key in a checkpoint: a server started from the file has its
 * value and each worker's pushes of the rounds before it (not after), and
 * an init keeps them. */
static void
test_dense_checkpoint(void **state)
{
	char dir[] = "/tmp/kv_server_test.XXXXXX";
	float v[3] = {1, 2, 3}, g[3] = {1, 1, 1};
	kv_server *s;

	(void)state;
	assert_non_null(mkdtemp(dir));
	setenv("DTRAIN_CHECKPOINT_DIR", dir, 1);
	setenv("DTRAIN_CHECKPOINT_EVERY", "0", 1);
	assert_non_null(h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	dense_req(0, DT_CMD_KV_INIT, 4, 3, v);
	dense_req(0, DT_CMD_KV_PUSH, 4, 3, g);
	dense_req(1, DT_CMD_KV_PUSH, 4, 3, g); /* round 1: 2 */
	answered(0);
	send_frame(0, DT_CMD_KV_CHECKPOINT, 0, 0, 0, 0, NULL, 0, NULL, 0);
	answered(0);
	dense_req(0, DT_CMD_KV_PUSH, 4, 3, v); /* (after it) */
	dense_req(1, DT_CMD_KV_PUSH, 4, 3, v);
	h_stop();
	setenv("DTRAIN_CHECKPOINT_LOAD", "1", 1);
	assert_non_null(s = h_start());
	assert_int_equal(s->ndense, 1);
	dense_req(0, DT_CMD_KV_INIT, 4, 3, v); /* the value stays */
	answered(0);
	assert_int_equal(resumed(1, 4, 3), 1);
	dense_req(1, DT_CMD_KV_PULL, 4, 3, NULL);
	answered(12);
	assert_true(ans_f32() == 2.0f);
	h_stop();
	ckpt_dir_done(dir);
}

/* A single-key pull of key from worker w as of round `round` (a
 * restarted worker's first). */
static void
pull_round(int w, dt_key key, uint64_t n, uint64_t round)
{
	uint8_t meta[8];

	dt__put_u64(meta, round);
	send_frame(w, DT_CMD_KV_PULL, key, n, 0, DT_KV_AT_ROUND, meta, 8, NULL,
	           0);
}

/* Recovery on the many-key store (DTRAIN_RECOVER, dist_sync): KV_RESUME
 * of its key counts the worker's pushes its rounds hold and the one
 * pending; a pull as of a round gets the value after that round, now or
 * (the round after closed) the one kept from before it; older rounds and
 * a row table's key asked as a dense one are refused, naming why. */
static void
test_many_resume(void **state)
{
	kv_server *s;

	(void)state;
	h_recover = 1;
	assert_non_null(s = h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	many_req(0, DT_CMD_KV_INIT_MANY, 40, 0.5f); /* keys 100 .. 139 */
	answered(0);
	row_init(50, 10, 2);
	answered(0);
	many_req(0, DT_CMD_KV_PUSH_MANY, 40, 1.0f);
	many_req(1, DT_CMD_KV_PUSH_MANY, 40, 2.0f); /* round 1: 3 */
	answered(0);
	many_req(0, DT_CMD_KV_PUSH_MANY, 40, 4.0f); /* round 2, open */
	assert_int_equal(resumed(0, 100, 1), 2);
	assert_int_equal(resumed(1, 139, 1), 1);
	pull_round(1, 100, 1, 1); /* (worker 1 resumes at step 1) */
	answered(4);
	assert_true(ans_f32() == 3.0f);
	many_req(1, DT_CMD_KV_PUSH_MANY, 40, 8.0f); /* round 2: 12 */
	answered(0);
	pull_round(1, 101, 1, 1); /* the value before round 2 */
	answered(4);
	assert_true(ans_f32() == 3.0f);
	pull_round(1, 101, 1, 2);
	answered(4);
	assert_true(ans_f32() == 12.0f);
	assert_int_equal(h_ans.errors, 0);
	pull_round(1, 101, 1, 0);
	refused(DT_ESTATE, "only the value of the round before is kept");
	send_frame(1, DT_CMD_KV_RESUME, 100, 2, 0, 0, NULL, 0, NULL, 0);
	refused(DT_ESIZE, "resume of key 100");
	send_frame(1, DT_CMD_KV_RESUME, 50, 10, 0, 0, NULL, 0, NULL, 0);
	refused(DT_ESIZE, "resume of key 50: a table of 10 rows of width 0");
	h_stop();
	h_recover = 0;
}

/* KV_RESUME of row table key from worker w, its part of rows from row
 * lo, width wide: how many of the worker's pushes the table holds. */
static uint64_t
rows_resumed(int w, dt_key key, uint64_t rows, uint64_t lo, uint32_t width)
{
	send_frame(w, DT_CMD_KV_RESUME, key, rows, lo, width, NULL, 0, NULL, 0);
	answered(8);
	return ans_u64();
}

/* A row pull of ids from worker w as of round `round` (a restarted
 * worker's first). */
static void
rows_pull_round(int w, dt_key key, const uint64_t *ids, size_t count,
                uint64_t round)
{
	uint8_t meta[8], b[64];

	assert_true(count <= 8);
	dt__put_u64(meta, round);
	for (size_t i = 0; i < count; i++)
		dt__put_u64(b + 8 * i, ids[i]);
	send_frame(w, DT_CMD_KV_ROW_PULL, key, count, 1, DT_KV_AT_ROUND, meta,
	           8, b, count * 8);
}

/* The last answer's floats are want[0..n). */
static void
rows_are(const float *want, size_t n)
{
	float got[8];

	answered(n * 4);
	memcpy(got, h_ans.data, n * 4);
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i])
			fail_msg("row %zu: %g, want %g", i, (double)got[i],
			         (double)want[i]);
}

/* Recovery on a row table (DTRAIN_RECOVER, dist_sync): KV_RESUME counts
 * the worker's pushes the table holds (its rounds, the one in the open
 * round, one kept for the next); a pull as of a round is answered at once
 * with the rows after that round, now or (the round after closed) as
 * kept from before it - the rows that round changed, the others as they
 * are; an older round and a part of another shape are refused, naming
 * why. */
static void
test_rows_resume(void **state)
{
	const uint64_t r13[2] = {1, 3}, r3[1] = {3}, r1[1] = {1},
	               r35[2] = {3, 5}, r135[3] = {1, 3, 5};
	const float round1[3] = {1, 2, 0}, round2[3] = {1, 1, 1};

	(void)state;
	h_recover = 1;
	assert_non_null(h_start());
	send_frame(0, DT_CMD_KV_CONFIG, 0, 1, 0, 0, NULL, 0, NULL, 0);
	row_init(60, 10, 1);
	answered(0);
	row_round(60, r13, 2, r3, 1, 1); /* round 1: rows 1, 3 = 1, 2 */
	rows_req(0, DT_CMD_KV_ROW_PUSH, 60, r1, 1, 1); /* round 2, open */
	assert_int_equal(rows_resumed(0, 60, 10, 0, 1), 2);
	assert_int_equal(rows_resumed(1, 60, 10, 0, 1), 1);
	rows_pull_round(0, 60, r135, 3, 1); /* (not held by the open round) */
	rows_are(round1, 3);
	rows_req(1, DT_CMD_KV_ROW_PUSH, 60, r35, 2, 1); /* round 2 closes */
	answered(0);
	rows_pull_round(1, 60, r135, 3, 1); /* the rows before round 2 */
	rows_are(round1, 3);
	rows_pull_round(1, 60, r135, 3, 2);
	rows_are(round2, 3);
	rows_req(0, DT_CMD_KV_ROW_PUSH, 60, r1, 1, 1); /* round 3, open */
	rows_req(0, DT_CMD_KV_ROW_PUSH, 60, r1, 1, 1); /* kept for round 4 */
	assert_int_equal(rows_resumed(0, 60, 10, 0, 1), 4);
	assert_int_equal(h_ans.errors, 0);
	rows_pull_round(1, 60, r135, 3, 0);
	refused(DT_ESTATE, "only the rows of the round before are kept");
	send_frame(1, DT_CMD_KV_RESUME, 60, 10, 0, 2, NULL, 0, NULL, 0);
	refused(DT_ESIZE, "resume of key 60: a table of 10 rows of width 2");
	h_stop();
	h_recover = 0;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init_value),
	    cmocka_unit_test(test_table_limit),
	    cmocka_unit_test(test_pull_limits),
	    cmocka_unit_test(test_config_mode),
	    cmocka_unit_test(test_rows_checkpoint),
	    cmocka_unit_test(test_rows_replay_order),
	    cmocka_unit_test(test_many_checkpoint),
	    cmocka_unit_test(test_many_range),
	    cmocka_unit_test(test_many_replay_park),
	    cmocka_unit_test(test_dense_rounds),
	    cmocka_unit_test(test_dense_pull_after_held),
	    cmocka_unit_test(test_dense_streamed),
	    cmocka_unit_test(test_kind_routing),
	    cmocka_unit_test(test_dense_park),
	    cmocka_unit_test(test_dense_checkpoint),
	    cmocka_unit_test(test_many_resume),
	    cmocka_unit_test(test_rows_resume),
	    cmocka_unit_test(test_elastic_rounds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
