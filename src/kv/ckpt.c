/*
 * ckpt.c - a server's checkpoint: the file format (docs/fault-tolerance.md
 * has it byte by byte), writing it so that a crash at any moment leaves a
 * good file, and reading it back as hostile bytes.
 *
 * Format, version 3, little-endian throughout:
 *   magic "DTRAINCK", u32 version (3),
 *   u32 server rank, u32 servers, u32 workers, u8 sync, u8 has optimizer,
 *   [the optimizer as KV_SET_OPT carries it, if it has one],
 *   u64 checkpoint number, u64 round count, the key placement (u32
 *   length and the name of the policy, "balanced" or "mxnet"; u64 split
 *   bound in floats), then one section per store
 *   kind, in this order, each a u64 count and its records:
 *   - dense keys, per key: u64 key, u64 n (whole array), u64 offset, u64
 *     len (this slice), u64 steps (optimizer updates), u64
 *     applied[workers] (pushes of each worker in the value), u64 state
 *     length, f32 value[len], f32 state[state length];
 *   - row_sparse tables, per table: u64 key, u64 rows (the whole
 *     table's), u64 lo, u64 n (the rows [lo, lo + n) held here), u64
 *     width, u64 steps, u64 applied[workers], u64 state length, f32
 *     value[n * width], f32 state[state length];
 *   - the many-key store (kstore_ckpt.c), not a count and records but
 *     its arrays: u64 records, u64 floats (their lengths summed), u32
 *     state floats per value float (0, 1 or 2: the optimizer's), u32
 *     runs; then per run u64 first key, u64 stride, u64 keys, u32 first
 *     record, u32 length; u64 key[records], u32 length[records], u32
 *     updates[records] (rounds in dist_sync, pushes in dist_async), u32
 *     steps[records] (optimizer updates; 0 without one), f32
 *     value[floats], f32 state[floats * state floats per value float];
 *   trailer: u64 length of all before it, u32 CRC-32 (zlib) of those bytes,
 *   "DTCKEND\0".
 *
 * Written to a new file of a random name in the same directory (created
 * exclusively, never through a link: common/file.c), fsync'd, and renamed
 * over the last one, which is first renamed to <name>.prev; the directory
 * is fsync'd after. So at every moment the directory holds a complete file
 * (the new one, or the previous one), and a file found damaged at load
 * leaves the previous good one to use.
 *
 * Version 2 is version 3 without the many-key section (the many-key store
 * was not kept then), and version 1 has the dense keys' section only: both
 * still load. A newer version is refused by name.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/file.h"
#include "kv/kstore.h"
#include "kv/kv_impl.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint floats are written as little-endian bytes"
#endif

static const char MAGIC[8] = {'D', 'T', 'R', 'A', 'I', 'N', 'C', 'K'};
static const char END[8] = {'D', 'T', 'C', 'K', 'E', 'N', 'D', '\0'};
#define VERSION 3u
#define TRAILER DT_CKPT_TRAILER
/* Sanity bound on the counts of a header (a job has far fewer). */
#define ROLE_MAX 65536u

void
dt__ckpt_begin(dt_wbuf *w, const dt_ckpt_head *h)
{
	dt__wbuf_bytes(w, MAGIC, sizeof(MAGIC));
	dt__wbuf_u32(w, VERSION);
	dt__wbuf_u32(w, h->rank);
	dt__wbuf_u32(w, h->nservers);
	dt__wbuf_u32(w, h->nworkers);
	dt__wbuf_u8(w, (uint8_t)(h->sync != 0));
	dt__wbuf_u8(w, (uint8_t)(h->opt.kind != DT_OPT_NONE));
	if (h->opt.kind != DT_OPT_NONE)
		dt__opt_encode(&h->opt, w);
	dt__wbuf_u64(w, h->number);
	dt__wbuf_u64(w, h->rounds);
	dt__wbuf_str(w, h->placement);
	dt__wbuf_u64(w, h->split);
}

void
dt__ckpt_key(dt_wbuf *w, const dt_ckpt_key *k, uint32_t nworkers)
{
	dt__wbuf_u64(w, k->key);
	dt__wbuf_u64(w, k->n);
	dt__wbuf_u64(w, k->offset);
	dt__wbuf_u64(w, k->len);
	dt__wbuf_u64(w, k->steps);
	for (uint32_t i = 0; i < nworkers; i++)
		dt__wbuf_u64(w, k->applied[i]);
	dt__wbuf_u64(w, k->state_len);
	dt__wbuf_bytes(w, k->val, k->len * sizeof(float));
	dt__wbuf_bytes(w, k->state, k->state_len * sizeof(float));
}

size_t
dt__ckpt_seal(uint8_t *buf, size_t body)
{
	uLong crc = crc32(0L, Z_NULL, 0);
	size_t off = 0;
	uint8_t *t = buf + body;

	while (off < body) { /* crc32() takes a uInt length */
		size_t piece = DT_MIN(body - off, (size_t)1 << 30);

		crc = crc32(crc, buf + off, (uInt)piece);
		off += piece;
	}
	for (int i = 0; i < 8; i++)
		t[i] = (uint8_t)((uint64_t)body >> (8 * i));
	for (int i = 0; i < 4; i++)
		t[8 + i] = (uint8_t)((uint32_t)crc >> (8 * i));
	memcpy(t + 12, END, sizeof(END));
	return body + DT_CKPT_TRAILER;
}

dt_err
dt__ckpt_write(const char *dir, const char *name, const void *buf, size_t len)
{
	char path[4096], prev[4096];
	dt__file_tmp t;
	dt_err err;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >=
	        (int)sizeof(path) ||
	    snprintf(prev, sizeof(prev), "%s/%s.prev", dir, name) >=
	        (int)sizeof(prev))
		return dt__fail(DT_ECONFIG, "checkpoint directory name too "
		                            "long");
	/* A new file under a random name, created exclusively: a link
	 * planted in the directory is never written through. */
	if ((err = dt__file_create_tmp("checkpoint ", path, 0600, &t)))
		return err;
	if (dt__write_all(t.fd, buf, len) < 0) {
		err = dt__fail(DT_ESYS, "checkpoint %s: %s", path,
		               strerror(errno));
		dt__file_abort(&t);
		return err;
	}
	/* The last good one becomes .prev; then the new one takes its name.
	 * Between the two, only .prev exists: a reader falls back to it.
	 * (rename(2) replaces a link at either name; it never follows it.) */
	if (rename(path, prev) < 0 && errno != ENOENT) {
		err = dt__fail(DT_ESYS, "checkpoint: renaming %s: %s", path,
		               strerror(errno));
		dt__file_abort(&t);
		return err;
	}
	return dt__file_commit(&t, 1);
}

dt_err
dt__ckpt_read(const char *path, uint8_t **buf, size_t *len)
{
	struct stat st;
	uint8_t *b;
	size_t got = 0;
	int fd;
	dt_err err;

	*buf = NULL;
	*len = 0;
	if ((err = dt__file_open_regular(DT_EIO, "checkpoint ", path, &fd)))
		return err;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return dt__fail(DT_ESYS, "checkpoint %s: %s", path,
		                strerror(errno));
	}
	if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX / 2 ||
	    (b = malloc((size_t)st.st_size + 1)) == NULL) {
		close(fd);
		return dt__fail(DT_ENOMEM, "%s: cannot hold %lld bytes", path,
		                (long long)st.st_size);
	}
	while (got < (size_t)st.st_size) {
		ssize_t k = read(fd, b + got, (size_t)st.st_size - got);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(fd);
	*buf = b;
	*len = got;
	return DT_OK;
}

dt_err
dt__ckpt_open(const char *path, const uint8_t *buf, size_t len, dt_rbuf *r,
              dt_ckpt_head *h)
{
	uint64_t body;
	uint32_t crc, version;
	uLong have = crc32(0L, Z_NULL, 0);
	size_t off = 0;

	memset(h, 0, sizeof(*h));
	if (len < sizeof(MAGIC) + 4 || memcmp(buf, MAGIC, sizeof(MAGIC)) != 0)
		return dt__fail(DT_EFORMAT, "%s: not a dtrain checkpoint",
		                path);
	version = (uint32_t)buf[8] | (uint32_t)buf[9] << 8 |
	          (uint32_t)buf[10] << 16 | (uint32_t)buf[11] << 24;
	if (version < 1 || version > VERSION)
		return dt__fail(DT_EFORMAT,
		                "%s: checkpoint format version %u; this dtrain "
		                "reads versions 1 to %u",
		                path, version, VERSION);
	h->version = version;
	if (len < sizeof(MAGIC) + 4 + TRAILER ||
	    memcmp(buf + len - sizeof(END), END, sizeof(END)) != 0)
		return dt__fail(DT_EFORMAT,
		                "%s: truncated (%zu bytes, no end mark)", path,
		                len);
	dt__rbuf_init(r, buf + len - TRAILER, TRAILER);
	body = dt__rbuf_u64(r);
	crc = dt__rbuf_u32(r);
	if (body != len - TRAILER)
		return dt__fail(DT_EFORMAT,
		                "%s: truncated or padded (%zu bytes, the "
		                "trailer says %llu)",
		                path, len, (unsigned long long)body + TRAILER);
	while (off < body) {
		size_t piece = DT_MIN((size_t)body - off, (size_t)1 << 30);

		have = crc32(have, buf + off, (uInt)piece);
		off += piece;
	}
	if ((uint32_t)have != crc)
		return dt__fail(DT_EFORMAT,
		                "%s: checksum mismatch (CRC-32 %08x, the file "
		                "says %08x): the file is damaged",
		                path, (unsigned)have, (unsigned)crc);
	dt__rbuf_init(r, buf, (size_t)body);
	(void)dt__rbuf_bytes(r, sizeof(MAGIC));
	(void)dt__rbuf_u32(r);
	h->rank = dt__rbuf_u32(r);
	h->nservers = dt__rbuf_u32(r);
	h->nworkers = dt__rbuf_u32(r);
	h->sync = dt__rbuf_u8(r);
	uint8_t has_opt = dt__rbuf_u8(r);
	if (has_opt && dt__opt_decode(r, &h->opt) != DT_OK)
		return dt__fail(DT_EFORMAT, "%s: bad optimizer: %s", path,
		                dt_errmsg());
	h->number = dt__rbuf_u64(r);
	h->rounds = dt__rbuf_u64(r);
	if (version >= 3) {
		dt__rbuf_str(r, h->placement, sizeof(h->placement));
		h->split = dt__rbuf_u64(r);
	}
	h->nkeys = dt__rbuf_u64(r);
	if (dt__rbuf_err(r, "checkpoint header"))
		return dt__fail(DT_EFORMAT, "%s: header cut short", path);
	if (h->sync > 1 || has_opt > 1 || h->nworkers == 0 ||
	    h->nworkers > ROLE_MAX || h->nservers == 0 ||
	    h->nservers > ROLE_MAX || h->rank >= h->nservers)
		return dt__fail(DT_EFORMAT,
		                "%s: header out of range (rank %u of %u "
		                "servers, %u workers)",
		                path, h->rank, h->nservers, h->nworkers);
	/* each key takes at least 6 + workers u64s */
	if (h->nkeys > (body - r->off) / (8 * (6 + (uint64_t)h->nworkers)))
		return dt__fail(DT_EFORMAT,
		                "%s: %llu keys cannot fit in %llu "
		                "bytes",
		                path, (unsigned long long)h->nkeys,
		                (unsigned long long)body);
	return DT_OK;
}

dt_err
dt__ckpt_next_key(const char *path, dt_rbuf *r, const dt_ckpt_head *h,
                  dt_ckpt_key *k)
{
	size_t left;

	k->key = dt__rbuf_u64(r);
	k->n = dt__rbuf_u64(r);
	k->offset = dt__rbuf_u64(r);
	k->len = dt__rbuf_u64(r);
	k->steps = dt__rbuf_u64(r);
	for (uint32_t i = 0; i < h->nworkers; i++)
		k->applied[i] = dt__rbuf_u64(r);
	k->state_len = dt__rbuf_u64(r);
	if (dt__rbuf_err(r, "checkpoint key"))
		return dt__fail(DT_EFORMAT, "%s: a key's record is cut short",
		                path);
	left = r->len - r->off;
	if (k->len > k->n || k->offset > k->n - k->len ||
	    k->len > left / sizeof(float) ||
	    k->state_len > (left / sizeof(float)) - k->len)
		return dt__fail(
		    DT_EFORMAT,
		    "%s: key %llu: slice [%llu, +%llu) of %llu with "
		    "%llu state floats does not fit the file",
		    path, (unsigned long long)k->key,
		    (unsigned long long)k->offset, (unsigned long long)k->len,
		    (unsigned long long)k->n, (unsigned long long)k->state_len);
	k->val = dt__rbuf_bytes(r, k->len * sizeof(float));
	k->state = dt__rbuf_bytes(r, k->state_len * sizeof(float));
	return DT_OK;
}

void
dt__ckpt_table(dt_wbuf *w, const dt_ckpt_table *t, uint32_t nworkers)
{
	dt__wbuf_u64(w, t->key);
	dt__wbuf_u64(w, t->rows);
	dt__wbuf_u64(w, t->lo);
	dt__wbuf_u64(w, t->n);
	dt__wbuf_u64(w, t->width);
	dt__wbuf_u64(w, t->steps);
	for (uint32_t i = 0; i < nworkers; i++)
		dt__wbuf_u64(w, t->applied[i]);
	dt__wbuf_u64(w, t->state_len);
	dt__wbuf_bytes(w, t->val, t->n * t->width * sizeof(float));
	dt__wbuf_bytes(w, t->state, t->state_len * sizeof(float));
}

dt_err
dt__ckpt_count(const char *path, dt_rbuf *r, const dt_ckpt_head *h,
               const char *what, uint64_t *count)
{
	uint64_t left;

	*count = 0;
	if (h->version < 2)
		return DT_OK; /* (version 1 has dense keys only) */
	*count = dt__rbuf_u64(r);
	if (dt__rbuf_err(r, "checkpoint section"))
		return dt__fail(DT_EFORMAT, "%s: no count of %s", path, what);
	/* each record takes at least 7 + workers u64s */
	left = (uint64_t)(r->len - r->off);
	if (*count > left / (8 * (7 + (uint64_t)h->nworkers)))
		return dt__fail(DT_EFORMAT,
		                "%s: %llu %s cannot fit in the %llu bytes left",
		                path, (unsigned long long)*count, what,
		                (unsigned long long)left);
	return DT_OK;
}

dt_err
dt__ckpt_next_table(const char *path, dt_rbuf *r, const dt_ckpt_head *h,
                    dt_ckpt_table *t)
{
	uint64_t left;

	t->key = dt__rbuf_u64(r);
	t->rows = dt__rbuf_u64(r);
	t->lo = dt__rbuf_u64(r);
	t->n = dt__rbuf_u64(r);
	t->width = dt__rbuf_u64(r);
	t->steps = dt__rbuf_u64(r);
	for (uint32_t i = 0; i < h->nworkers; i++)
		t->applied[i] = dt__rbuf_u64(r);
	t->state_len = dt__rbuf_u64(r);
	if (dt__rbuf_err(r, "checkpoint table"))
		return dt__fail(DT_EFORMAT,
		                "%s: a row table's record is cut short", path);
	left = (uint64_t)(r->len - r->off) / sizeof(float);
	/* Each bound is checked before the product that uses it: a width
	 * near 2^64 must not wrap n * width. */
	if (t->rows > DT_RS_MAX_ROWS || t->n > t->rows ||
	    t->lo > t->rows - t->n || t->width == 0 ||
	    t->width > DT_RS_MAX_WIDTH || t->n * t->width > DT_RS_MAX_VALS ||
	    t->n * t->width > left || t->state_len > left - t->n * t->width)
		return dt__fail(
		    DT_EFORMAT,
		    "%s: row table %llu: rows [%llu, +%llu) of "
		    "%llu, width %llu, with %llu state floats does "
		    "not fit the file or the limits",
		    path, (unsigned long long)t->key, (unsigned long long)t->lo,
		    (unsigned long long)t->n, (unsigned long long)t->rows,
		    (unsigned long long)t->width,
		    (unsigned long long)t->state_len);
	t->val = dt__rbuf_bytes(r, t->n * t->width * sizeof(float));
	t->state = dt__rbuf_bytes(r, t->state_len * sizeof(float));
	return DT_OK;
}

dt_err
dt__ckpt_summary(const char *path, const uint8_t *buf, size_t len,
                 char *summary, size_t cap)
{
	dt_rbuf r;
	dt_ckpt_head h;
	dt_ckpt_key k;
	uint64_t floats = 0, ntables = 0, nmany = 0;
	dt_kstore ks;
	dt_err err;

	if ((err = dt__ckpt_open(path, buf, len, &r, &h)))
		return err;
	k.applied = calloc(h.nworkers, sizeof(uint64_t));
	if (k.applied == NULL)
		return DT_ENOMEM;
	for (uint64_t i = 0; i < h.nkeys && err == DT_OK; i++) {
		err = dt__ckpt_next_key(path, &r, &h, &k);
		floats += k.len;
	}
	if (err == DT_OK)
		err = dt__ckpt_count(path, &r, &h, "row tables", &ntables);
	for (uint64_t i = 0; i < ntables && err == DT_OK; i++) {
		dt_ckpt_table t = {.applied = k.applied};

		err = dt__ckpt_next_table(path, &r, &h, &t);
		floats += t.n * t.width;
	}
	/* The many-key section is read into a store of its own: the store's
	 * own checks are the section's. */
	dt__ks_init(&ks, (int)h.nworkers, h.sync, &h.opt);
	if (err == DT_OK && h.version >= 3 &&
	    (err = dt__ks_load(&ks, path, &r)) == DT_OK && ks.nrec) {
		nmany = ks.nrec;
		floats += ks.off[ks.nrec];
	}
	dt__ks_fini(&ks);
	if (err == DT_OK && r.off != r.len)
		err = dt__fail(DT_EFORMAT, "%s: %zu bytes after the last key",
		               path, r.len - r.off);
	free(k.applied);
	if (err)
		return err;
	if (cap)
		snprintf(
		    summary, cap,
		    "server %u of %u, %u workers, %s, optimizer %s, "
		    "checkpoint #%llu after %llu rounds, %llu keys, %llu "
		    "row tables, %llu many-key keys, %llu floats, placement "
		    "%s (arrays of %llu floats and more cut; format version "
		    "%u)",
		    h.rank, h.nservers, h.nworkers,
		    h.sync ? "dist_sync" : "dist_async",
		    h.opt.kind == DT_OPT_SGD    ? "sgd"
		    : h.opt.kind == DT_OPT_ADAM ? "adam"
		                                : "none",
		    (unsigned long long)h.number, (unsigned long long)h.rounds,
		    (unsigned long long)h.nkeys, (unsigned long long)ntables,
		    (unsigned long long)nmany, (unsigned long long)floats,
		    *h.placement ? h.placement : "not recorded",
		    (unsigned long long)h.split, h.version);
	return DT_OK;
}

dt_err
dt_kv_checkpoint_inspect(const char *path, char *summary, size_t cap)
{
	uint8_t *buf;
	size_t len;
	dt_err err;

	if (path == NULL || (summary == NULL && cap))
		return dt__fail(DT_EINVAL, "checkpoint inspect: NULL argument");
	if ((err = dt__ckpt_read(path, &buf, &len)))
		return err;
	err = dt__ckpt_summary(path, buf, len, summary, cap);
	free(buf);
	return err;
}
