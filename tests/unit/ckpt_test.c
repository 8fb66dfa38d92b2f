/*
 * ckpt_test.c - a server checkpoint file read back as hostile bytes: a
 * good file is read exactly (keys, values, optimizer state, counts); the
 * same file cut at every length, with each byte flipped, with a wrong
 * version, or with a header that lies about its sizes (checksum made to
 * match) is an error naming the file and the fault, never a crash; the
 * many-key store's section likewise, and read back into a store as it
 * was written; older versions (1, 2) still load; and a
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

#include "kv/kstore.h"
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
	                  .nkeys = 2,
	                  .placement = "balanced",
	                  .split = 4096};

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
	dt__wbuf_u64(w, 0);       /* no row tables */
	dt__ks_snapshot(NULL, w); /* an empty many-key section (24 bytes) */
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
	if (h.version >= 3) {
		dt_kstore ks;

		dt__ks_init(&ks, (int)h.nworkers, h.sync, &h.opt);
		err = dt__ks_load(&ks, "f.ckpt", &r);
		dt__ks_fini(&ks);
		if (err)
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
	assert_string_equal(h.placement, "balanced");
	assert_int_equal(h.split, 4096);
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
	dt_kstore ks;
	dt__ks_init(&ks, 3, 1, &h.opt);
	assert_int_equal(dt__ks_load(&ks, "f.ckpt", &r), DT_OK);
	assert_int_equal(ks.nrec, 0);
	dt__ks_fini(&ks);
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

static void
no_done(void *arg, uint32_t h, size_t n)
{
	(void)arg;
	(void)h;
	(void)n;
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
 * and a version 2 file (before the many-key store was kept) read as they
 * did: their keys, and no row tables or many-key keys. */
/* build()'s file as version v wrote it: without the key placement (the
 * header's last 20 bytes, at 107) and without its last cut bytes before
 * the trailer; its length. */
static size_t
old_file(const dt_wbuf *w, uint8_t *old, uint8_t v, size_t cut)
{
	size_t at = 107, pl = 20, body = w->len - DT_CKPT_TRAILER - cut;

	memcpy(old, w->data, at);
	memcpy(old + at, w->data + at + pl, body - at - pl);
	old[8] = v;
	return dt__ckpt_seal(old, body - pl);
}

static void
test_version_1(void **state)
{
	dt_wbuf w;
	uint8_t *old;
	size_t body, len;
	dt_rbuf r;
	dt_ckpt_head h;

	(void)state;
	build(&w);
	old = malloc(w.len);
	/* version 1: without the tables' count and the many-key section */
	len = old_file(&w, old, 1, 8 + 24);
	assert_int_equal(read_all(old, len), DT_OK);
	assert_int_equal(dt__ckpt_open("f.ckpt", old, len, &r, &h), DT_OK);
	assert_string_equal(h.placement, ""); /* (not recorded) */
	/* and the version 3 file, cut at the same place, is damaged */
	body = w.len - DT_CKPT_TRAILER - 8 - 24;
	memcpy(old, w.data, body);
	dt__ckpt_seal(old, body);
	assert_int_equal(read_all(old, body + DT_CKPT_TRAILER), DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "no count of row tables"));
	/* version 2: the row tables' count, no many-key section */
	len = old_file(&w, old, 2, 24);
	assert_int_equal(read_all(old, len), DT_OK);
	body = w.len - DT_CKPT_TRAILER - 24;
	memcpy(old, w.data, body);
	dt__ckpt_seal(old, body);
	assert_int_equal(read_all(old, body + DT_CKPT_TRAILER), DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "many-key section is cut short"));
	free(old);
	dt__wbuf_fini(&w);
}

/* A many-key store of 2 workers in dist_sync with sgd and momentum: a run
 * of 80 one-float keys (one init) and 9 keys of 3 floats, some rounds. */
static void
many_store(dt_kstore *ks)
{
	uint8_t keys[80 * 8], lens[9 * 4];
	uint32_t idx[80];
	float v[80], g[80];
	dt_ks_lens one = {.uniform = 1}, three = {.lens = lens};
	dt_opt opt;
	size_t bad;

	assert_int_equal(dt__opt_parse("sgd", "lr=0.5,momentum=0.9", &opt),
	                 DT_OK);
	dt__ks_init(ks, 2, 1, &opt);
	ks->counted = 1; /* (a server with checkpoints counts updates) */
	for (int i = 0; i < 80; i++) {
		dt__put_u64(keys + 8 * i, 1000 + 3 * (uint64_t)i);
		v[i] = (float)i * 0.25f;
		g[i] = (float)(i % 7) - 3.0f;
	}
	assert_int_equal(
	    dt__ks_resolve(ks, "init", 80, keys, &one, 1, idx, &bad), DT_OK);
	dt__ks_set(ks, idx, 80, v);
	for (int i = 0; i < 9; i++) {
		dt__put_u64(keys + 8 * i, 77 * (uint64_t)i + 5);
		dt__put_u32(lens + 4 * i, 3);
	}
	assert_int_equal(
	    dt__ks_resolve(ks, "init", 9, keys, &three, 1, idx, &bad), DT_OK);
	dt__ks_set(ks, idx, 9, v);
	/* two rounds of the run (both workers), one of the rest */
	for (uint32_t i = 0; i < 80; i++)
		idx[i] = i;
	for (int round = 0; round < 2; round++)
		for (int w = 0; w < 2; w++)
			dt__ks_push_sync(ks, w, 1, idx, 80, g, NULL, 0, no_done,
			                 NULL);
	for (uint32_t i = 0; i < 9; i++)
		idx[i] = 80 + i;
	for (int w = 0; w < 2; w++)
		dt__ks_push_sync(ks, w, 1, idx, 9, g, NULL, 0, no_done, NULL);
}

/* A file of a header and a many-key section of ks. */
static void
many_file(dt_wbuf *w, const dt_kstore *ks)
{
	dt_ckpt_head h = {.nservers = 1,
	                  .nworkers = 2,
	                  .sync = 1,
	                  .opt = ks->opt,
	                  .placement = "mxnet",
	                  .split = 1000};

	dt__wbuf_init(w);
	dt__ckpt_begin(w, &h);
	dt__wbuf_u64(w, 0); /* no dense keys */
	dt__wbuf_u64(w, 0); /* no row tables */
	dt__ks_snapshot(ks, w);
	dt__wbuf_reserve(w, DT_CKPT_TRAILER);
	assert_int_equal(dt__wbuf_err(w), DT_OK);
	w->len = dt__ckpt_seal(w->data, w->len);
}

/* Read file buf into a new store ks; DT_OK only if all of it is good. */
static dt_err
many_read(const uint8_t *buf, size_t len, dt_kstore *ks)
{
	dt_rbuf r;
	dt_ckpt_head h;
	dt_err err;

	memset(ks, 0, sizeof(*ks));
	if ((err = dt__ckpt_open("m.ckpt", buf, len, &r, &h)))
		return err;
	if (h.nkeys != 0 || dt__rbuf_u64(&r) != 0) /* (dense keys, tables) */
		return DT_EFORMAT;
	dt__ks_init(ks, (int)h.nworkers, h.sync, &h.opt);
	if ((err = dt__ks_load(ks, "m.ckpt", &r)))
		return err;
	return r.off == r.len ? DT_OK : DT_EFORMAT;
}

/* The many-key section reads back as the store was (keys, values, state,
 * counts, runs: a request of the run is still a span); a file cut short
 * or flipped anywhere, and sections that lie with a good checksum, are
 * errors naming the file, never a crash. */
static void
test_many_section(void **state)
{
	dt_kstore a, b;
	dt_wbuf w;
	uint8_t *copy, keys[80 * 8];
	uint32_t first;
	dt_ks_lens one = {.uniform = 1};
	size_t sec;

	(void)state;
	many_store(&a);
	many_file(&w, &a);
	if (many_read(w.data, w.len, &b) != DT_OK)
		fail_msg("%s", dt_errmsg());
	assert_int_equal(b.nrec, 89);
	assert_memory_equal(b.off, a.off, 90 * 8);
	assert_memory_equal(b.val, a.val, a.off[89] * sizeof(float));
	assert_memory_equal(b.state, a.state, a.off[89] * sizeof(float));
	assert_memory_equal(b.steps, a.steps, 89 * 4);
	assert_memory_equal(b.updates, a.updates, 89 * 4);
	assert_int_equal(b.updates[0], 2);
	assert_int_equal(b.updates[88], 1);
	for (int i = 0; i < 80; i++)
		dt__put_u64(keys + 8 * i, 1000 + 3 * (uint64_t)i);
	assert_true(dt__ks_span(&b, 80, keys, &one, &first));
	assert_int_equal(first, 0);
	assert_int_equal(dt__ks_find(&b, 77 * 8 + 5), 88);
	dt__ks_fini(&b);
	/* every cut, every flip */
	copy = malloc(w.len);
	for (size_t len = 0; len < w.len; len += 3) {
		memcpy(copy, w.data, len);
		assert_int_not_equal(many_read(copy, len, &b), DT_OK);
		dt__ks_fini(&b);
	}
	for (size_t i = 0; i < w.len; i++) {
		memcpy(copy, w.data, w.len);
		copy[i] ^= 0x40;
		assert_int_not_equal(many_read(copy, w.len, &b), DT_OK);
		dt__ks_fini(&b);
	}
	/* Lies, resealed: the section starts after the header (8 + 4 + 12
	 * + 2 + 65 + 16, the placement: 4 + 5 + 8), the dense keys' and the
	 * tables' counts. */
	sec = 8 + 4 + 12 + 2 + 65 + 16 + 17 + 16;
	struct lie {
		size_t at;
		uint64_t v;
		int width;
		const char *says;
	} lies[] = {
	    {sec, UINT64_MAX, 8, "cannot fit"},         /* records */
	    {sec, 1ull << 29, 8, "cannot fit"},         /* records, in range */
	    {sec + 8, UINT64_MAX / 4, 8, "cannot fit"}, /* floats */
	    {sec + 8, 80 + 9 * 3 - 1, 8, "sum to"},     /* floats */
	    {sec + 16, 2, 4, "optimizer state"},        /* state per float */
	    {sec + 20, 17, 4, "cannot fit"},            /* runs */
	    {sec + 24 + 16, 81, 8, "run 0"},            /* a run's n */
	    {sec + 24 + 32 + 8, 1000, 8, "listed twice"}, /* key 1 = key 0 */
	    /* lengths 0 and 2 where 1 and 1 were (the sum kept) */
	    {sec + 24 + 32 + 89 * 8, 2ull << 32, 8, "length 0"},
	};
	for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
		memcpy(copy, w.data, w.len);
		for (int k = 0; k < lies[i].width; k++)
			copy[lies[i].at + (size_t)k] =
			    (uint8_t)(lies[i].v >> (8 * k));
		reseal(copy, w.len);
		assert_int_equal(many_read(copy, w.len, &b), DT_EFORMAT);
		if (!strstr(dt_errmsg(), lies[i].says) ||
		    !strstr(dt_errmsg(), "m.ckpt"))
			fail_msg("lie %zu: %s", i, dt_errmsg());
		dt__ks_fini(&b);
	}
	free(copy);
	dt__wbuf_fini(&w);
	dt__ks_fini(&a);
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
	assert_int_equal(rh.version, 3);
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
	nkeys_off = 8 + 4 + 12 + 2 + 65 + 16 + 20; /* (+ the placement) */
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
	copy[8] = 4;
	assert_int_equal(read_all(copy, w.len), DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "version 4"));
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
	    cmocka_unit_test(test_many_section),
	    cmocka_unit_test(test_atomic_write),
	    cmocka_unit_test(test_planted_links),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
