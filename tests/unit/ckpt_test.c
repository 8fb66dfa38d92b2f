/*
 * ckpt_test.c - a server checkpoint file read back as hostile bytes: a
 * good file is read exactly (keys, values, optimizer state, counts); the
 * same file cut at every length, with each byte flipped, with a wrong
 * version, or with a header that lies about its sizes (checksum made to
 * match) is an error naming the file and the fault, never a crash; and a
 * write replaces the file atomically, keeping the last one as .prev.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "kv/kv_impl.h"

/* A file of two keys, 3 workers, sgd with momentum (state = value size). */
static void
build(dt_wbuf *w)
{
	static const float v1[3] = {1.5f, -2.0f, 0.25f}, s1[3] = {0.5f, 0, 1};
	static const float v2[1] = {42.0f}, s2[1] = {-1};
	uint64_t a1[3] = {7, 7, 7}, a2[3] = {1, 2, 3};
	dt_ckpt_head h = {.rank = 1,
	                  .nservers = 2,
	                  .nworkers = 3,
	                  .sync = 1,
	                  .number = 4,
	                  .rounds = 21,
	                  .nkeys = 2};

	assert_int_equal(dt__opt_parse("sgd", "lr=0.1,momentum=0.9", &h.opt),
	                 DT_OK);
	dt__wbuf_init(w);
	dt__ckpt_begin(w, &h);
	dt__wbuf_u64(w, h.nkeys); /* the dense keys' section */
	dt_ckpt_key k1 = {.key = 10,
	                  .n = 9,
	                  .offset = 3,
	                  .len = 3,
	                  .steps = 7,
	                  .applied = a1,
	                  .state_len = 3,
	                  .val = v1,
	                  .state = s1};
	dt_ckpt_key k2 = {.key = 11,
	                  .n = 1,
	                  .offset = 0,
	                  .len = 1,
	                  .steps = 2,
	                  .applied = a2,
	                  .state_len = 1,
	                  .val = v2,
	                  .state = s2};
	dt__ckpt_key(w, &k1, 3);
	dt__ckpt_key(w, &k2, 3);
	dt__wbuf_u64(w, 0); /* no row tables */
	dt__wbuf_reserve(w, DT_CKPT_TRAILER);
	assert_int_equal(dt__wbuf_err(w), DT_OK);
	w->len = dt__ckpt_seal(w->data, w->len);
}

/* Read all of buf; DT_OK only if the whole file is good. */
static dt_err
read_all(const uint8_t *buf, size_t len)
{
	dt_rbuf r;
	dt_ckpt_head h;
	dt_ckpt_key k;
	uint64_t applied[16], ntables;
	dt_err err;

	if ((err = dt__ckpt_open("f.ckpt", buf, len, &r, &h)))
		return err;
	if (h.nworkers > 16)
		return DT_EFORMAT;
	k.applied = applied;
	for (uint64_t i = 0; i < h.nkeys; i++)
		if ((err = dt__ckpt_next_key("f.ckpt", &r, &h, &k)))
			return err;
	if ((err = dt__ckpt_count("f.ckpt", &r, &h, "row tables", &ntables)))
		return err;
	for (uint64_t i = 0; i < ntables; i++) {
		dt_ckpt_table t = {.applied = applied};

		if ((err = dt__ckpt_next_table("f.ckpt", &r, &h, &t)))
			return err;
	}
	return r.off == r.len ? DT_OK : DT_EFORMAT;
}

static void
test_good_file(void **state)
{
	dt_wbuf w;
	dt_rbuf r;
	dt_ckpt_head h;
	dt_ckpt_key k;
	uint64_t applied[3], n;
	float v[3];

	(void)state;
	build(&w);
	assert_int_equal(dt__ckpt_open("f.ckpt", w.data, w.len, &r, &h), DT_OK);
	assert_int_equal(h.rank, 1);
	assert_int_equal(h.nservers, 2);
	assert_int_equal(h.nworkers, 3);
	assert_int_equal(h.number, 4);
	assert_int_equal(h.rounds, 21);
	assert_int_equal(h.nkeys, 2);
	assert_int_equal(h.opt.kind, DT_OPT_SGD);
	assert_true(h.opt.p.momentum == 0.9);
	k.applied = applied;
	assert_int_equal(dt__ckpt_next_key("f.ckpt", &r, &h, &k), DT_OK);
	assert_int_equal(k.key, 10);
	assert_int_equal(k.offset, 3);
	assert_int_equal(k.steps, 7);
	assert_int_equal(applied[2], 7);
	memcpy(v, k.val, sizeof(v));
	assert_true(v[0] == 1.5f && v[1] == -2.0f && v[2] == 0.25f);
	assert_int_equal(dt__ckpt_next_key("f.ckpt", &r, &h, &k), DT_OK);
	assert_int_equal(k.key, 11);
	assert_int_equal(applied[1], 2);
	assert_int_equal(dt__ckpt_count("f.ckpt", &r, &h, "row tables", &n),
	                 DT_OK);
	assert_int_equal(n, 0);
	assert_int_equal(r.off, r.len);
	dt__wbuf_fini(&w);
}

static void
test_every_cut_and_flip(void **state)
{
	dt_wbuf w;
	uint8_t *copy;

	(void)state;
	build(&w);
	copy = malloc(w.len);
	for (size_t len = 0; len < w.len; len++) {
		memcpy(copy, w.data, len);
		assert_int_not_equal(read_all(copy, len), DT_OK);
		assert_non_null(strstr(dt_errmsg(), "f.ckpt"));
	}
	for (size_t i = 0; i < w.len; i++) {
		memcpy(copy, w.data, w.len);
		copy[i] ^= 0x40;
		assert_int_not_equal(read_all(copy, w.len), DT_OK);
	}
	free(copy);
	dt__wbuf_fini(&w);
}

/* Rewrite the trailer of a changed body so that the checksum matches: the
 * reader must still catch the lie in the records themselves. */
static void
reseal(uint8_t *buf, size_t len)
{
	size_t body = len - 20;
	uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf, (uInt)body);

	for (int i = 0; i < 4; i++)
		buf[body + 8 + i] = (uint8_t)(crc >> (8 * i));
}

/* A version 1 file (the dense keys only, before row tables were kept)
 * reads as it did: its keys, and no row tables. */
static void
test_version_1(void **state)
{
	dt_wbuf w;
	uint8_t *old;
	size_t body;

	(void)state;
	build(&w);
	body = w.len - DT_CKPT_TRAILER - 8; /* (without the tables' count) */
	old = malloc(body + DT_CKPT_TRAILER);
	memcpy(old, w.data, body);
	old[8] = 1;
	assert_int_equal(dt__ckpt_seal(old, body), body + DT_CKPT_TRAILER);
	assert_int_equal(read_all(old, body + DT_CKPT_TRAILER), DT_OK);
	/* and the version 2 file, cut at the same place, is damaged */
	memcpy(old, w.data, body);
	dt__ckpt_seal(old, body);
	assert_int_equal(read_all(old, body + DT_CKPT_TRAILER), DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "no count of row tables"));
	free(old);
	dt__wbuf_fini(&w);
}

/* A row table's part is read back exactly; a width that would wrap
 * rows x width, or more floats than the file holds, is refused. */
static void
test_row_table(void **state)
{
	static const float val[6] = {1, 2, 3, 4, 5, -6}, st[6] = {0.5f};
	uint64_t applied[3] = {4, 5, 6}, got[3];
	dt_ckpt_head h = {.rank = 0, .nservers = 1, .nworkers = 3, .sync = 1};
	dt_ckpt_table t = {.key = 7,
	                   .rows = 100,
	                   .lo = 10,
	                   .n = 3,
	                   .width = 2,
	                   .steps = 9,
	                   .applied = applied,
	                   .state_len = 6,
	                   .val = val,
	                   .state = st};
	dt_ckpt_table r = {.applied = got};
	dt_ckpt_head rh;
	dt_rbuf rb;
	uint64_t count;
	float v[6];
	dt_wbuf w;

	(void)state;
	dt__wbuf_init(&w);
	dt__ckpt_begin(&w, &h);
	dt__wbuf_u64(&w, 0); /* no dense keys */
	dt__wbuf_u64(&w, 1);
	dt__ckpt_table(&w, &t, 3);
	dt__wbuf_reserve(&w, DT_CKPT_TRAILER);
	w.len = dt__ckpt_seal(w.data, w.len);
	assert_int_equal(dt__ckpt_open("t.ckpt", w.data, w.len, &rb, &rh),
	                 DT_OK);
	assert_int_equal(rh.version, 2);
	assert_int_equal(
	    dt__ckpt_count("t.ckpt", &rb, &rh, "row tables", &count), DT_OK);
	assert_int_equal(count, 1);
	assert_int_equal(dt__ckpt_next_table("t.ckpt", &rb, &rh, &r), DT_OK);
	assert_int_equal(r.key, 7);
	assert_int_equal(r.lo, 10);
	assert_int_equal(r.n, 3);
	assert_int_equal(r.width, 2);
	assert_int_equal(r.steps, 9);
	assert_int_equal(got[2], 6);
	memcpy(v, r.val, sizeof(v));
	assert_memory_equal(v, val, sizeof(v));
	assert_int_equal(rb.off, rb.len);
	/* width 2^62 + 1: n x width wraps to a small number */
	w.len -= DT_CKPT_TRAILER;
	size_t width_at = w.len - 12 * 4 - 8 - 3 * 8 - 8 - 8;

	memset(w.data + width_at, 0, 8);
	w.data[width_at] = 1;
	w.data[width_at + 7] = 0x40;
	w.len = dt__ckpt_seal(w.data, w.len);
	assert_int_equal(dt__ckpt_open("t.ckpt", w.data, w.len, &rb, &rh),
	                 DT_OK);
	assert_int_equal(
	    dt__ckpt_count("t.ckpt", &rb, &rh, "row tables", &count), DT_OK);
	assert_int_equal(dt__ckpt_next_table("t.ckpt", &rb, &rh, &r),
	                 DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "row table 7"));
	dt__wbuf_fini(&w);
}

static void
test_lies_with_good_checksum(void **state)
{
	dt_wbuf w;
	uint8_t *copy;
	size_t nkeys_off;

	(void)state;
	build(&w);
	copy = malloc(w.len);
	/* The header: magic 8, version 4, three u32, two u8, the optimizer
	 * (1 + 8 doubles), number, rounds, then nkeys. */
	nkeys_off = 8 + 4 + 12 + 2 + 65 + 16;
	/* A huge key count. */
	memcpy(copy, w.data, w.len);
	memset(copy + nkeys_off, 0xff, 8);
	reseal(copy, w.len);
	assert_int_equal(read_all(copy, w.len), DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "cannot fit"));
	/* The first key's len (after key, n, offset) far too big. */
	memcpy(copy, w.data, w.len);
	memset(copy + nkeys_off + 8 + 24, 0x7f, 8);
	reseal(copy, w.len);
	assert_int_equal(read_all(copy, w.len), DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "does not fit"));
	/* A rank outside the servers. */
	memcpy(copy, w.data, w.len);
	copy[12] = 9;
	reseal(copy, w.len);
	assert_int_equal(read_all(copy, w.len), DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "out of range"));
	/* A newer version. */
	memcpy(copy, w.data, w.len);
	copy[8] = 3;
	assert_int_equal(read_all(copy, w.len), DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "version 3"));
	free(copy);
	dt__wbuf_fini(&w);
}

static void
test_atomic_write(void **state)
{
	char dir[] = "/tmp/dt_ckpt_test.XXXXXX", path[128], prev[128];
	uint8_t *buf;
	size_t len;
	dt_wbuf w;

	(void)state;
	assert_non_null(mkdtemp(dir));
	build(&w);
	snprintf(path, sizeof(path), "%s/server-1.ckpt", dir);
	snprintf(prev, sizeof(prev), "%s/server-1.ckpt.prev", dir);
	assert_int_equal(dt__ckpt_write(dir, "server-1.ckpt", w.data, 10),
	                 DT_OK);
	assert_int_equal(dt__ckpt_write(dir, "server-1.ckpt", w.data, w.len),
	                 DT_OK);
	assert_int_equal(dt__ckpt_read(path, &buf, &len), DT_OK);
	assert_int_equal(len, w.len);
	assert_memory_equal(buf, w.data, len);
	free(buf);
	assert_int_equal(dt__ckpt_read(prev, &buf, &len), DT_OK);
	assert_int_equal(len, 10); /* the last one, kept */
	free(buf);
	assert_int_equal(dt__ckpt_read("/nonexistent/x.ckpt", &buf, &len),
	                 DT_EIO);
	assert_int_equal(dt__ckpt_write("/nonexistent", "x.ckpt", w.data, 1),
	                 DT_EIO);
	unlink(path);
	unlink(prev);
	rmdir(dir);
	dt__wbuf_fini(&w);
}

/* Another user's links, at the name the writer used for its temporary
 * file (".server-1.ckpt.tmp") and at the final name, pointing to a file
 * of "root": neither is written through, and a FIFO in place of the
 * checkpoint is refused at once rather than hanging the reader. */
static void
test_planted_links(void **state)
{
	char dir[] = "/tmp/dt_ckpt_test_XXXXXX", path[128], tmp[128];
	char victim[128], fifo[128], got[16] = {0};
	uint8_t *buf;
	size_t len;
	dt_wbuf w;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	build(&w);
	snprintf(path, sizeof(path), "%s/server-1.ckpt", dir);
	snprintf(tmp, sizeof(tmp), "%s/.server-1.ckpt.tmp", dir);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	f = fopen(victim, "w"); /* the victim's file */
	assert_non_null(f);
	fputs("root's", f);
	fclose(f);
	assert_int_equal(symlink(victim, tmp), 0);
	assert_int_equal(symlink(victim, path), 0);
	assert_int_equal(dt__ckpt_write(dir, "server-1.ckpt", w.data, w.len),
	                 DT_OK);
	f = fopen(victim, "r");
	assert_non_null(f);
	assert_non_null(fgets(got, sizeof(got), f));
	fclose(f);
	assert_string_equal(got, "root's");
	assert_int_equal(dt__ckpt_read(path, &buf, &len), DT_OK);
	assert_int_equal(len, w.len);
	free(buf);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(dt__ckpt_read(fifo, &buf, &len), DT_EIO);
	assert_non_null(strstr(dt_errmsg(), "fifo is not a regular file"));
	unlink(fifo);
	unlink(tmp);
	unlink(path);
	snprintf(path, sizeof(path), "%s/server-1.ckpt.prev", dir);
	unlink(path); /* (the planted link, renamed) */
	unlink(victim);
	assert_int_equal(rmdir(dir), 0);
	dt__wbuf_fini(&w);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_good_file),
	    cmocka_unit_test(test_every_cut_and_flip),
	    cmocka_unit_test(test_lies_with_good_checksum),
	    cmocka_unit_test(test_version_1),
	    cmocka_unit_test(test_row_table),
	    cmocka_unit_test(test_atomic_write),
	    cmocka_unit_test(test_planted_links),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
