/*
 * kv_optstate.c - saving and loading the optimizer state of a local store
 * (MXNet's save_optimizer_states / load_optimizer_states). A local store
 * runs its optimizer in this process (kv_local.c), so its state - each
 * key's momentum or Adam moments and its step count - is here to save. A
 * dist store's state is on its servers, which checkpoint it themselves
 * (ckpt.c, dt_kv_checkpoint); the calls refuse such a store and say so.
 *
 * Format, version 1, little-endian throughout:
 *   magic "DTRAINOS", u32 version (1), u32 optimizer kind (1 sgd,
 *   2 adam), u64 count, then per key: u64 key, u64 n (the array's
 *   length), u64 steps (updates made), u64 state length, f32
 *   state[state length];
 *   trailer: u64 length of all before it, u32 CRC-32 (zlib) of those
 *   bytes, "DTCKEND\0" (the trailer of a server checkpoint, ckpt.c).
 *
 * The optimizer's settings are not saved (MXNet's default, dump_optimizer
 * off): the program sets its optimizer again before it loads. A file read
 * back is hostile: its size is checked against the most this store's state
 * could take before it is read, and every record against the store before
 * anything changes, so a bad file leaves the store as it was.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/file.h"
#include "kv/kv_api.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "optimizer state floats are written as little-endian bytes"
#endif

static const char MAGIC[8] = {'D', 'T', 'R', 'A', 'I', 'N', 'O', 'S'};
#define VERSION  1u
#define HEAD_LEN (8 + 4 + 4 + 8)
#define REC_LEN  (4 * 8)

/* The floats of state a key holds now (none when its optimizer has no
 * state, or had none when the key was initialised). */
static size_t
state_len(const dt_kv *kv, const local_entry *e)
{
	return e->state ? dt__opt_state_len(&kv->opt, e->n) : 0;
}

/* Both calls need a local store with an optimizer and no row tables. */
static dt_err
check_store(const dt_kv *kv, const char *op)
{
	KV_NEED(kv != NULL, "%s: kv is NULL", op);
	if (kv->dist)
		return dt__fail(DT_ENOTSUP,
		                "%s: a %s store's optimizer state is on its "
		                "servers; dt_kv_checkpoint saves it there "
		                "(DTRAIN_CHECKPOINT_DIR)",
		                op, kv->type);
	if (!kv->have_opt)
		return dt__fail(DT_ESTATE,
		                "%s: the store has no optimizer (set one with "
		                "set_optimizer first)",
		                op);
	if (dt__table_count(&kv->rtabs))
		return dt__fail(DT_ENOTSUP,
		                "%s: the store has row_sparse tables, whose "
		                "optimizer state is not saved",
		                op);
	return DT_OK;
}

dt_err
dt_kv_save_optimizer_states(dt_kv *kv, const char *path)
{
	dt_table_iter it;
	dt__file_tmp t;
	dt_wbuf w;
	dt_err err;

	if ((err = check_store(kv, "save optimizer states")))
		return err;
	KV_NEED(path != NULL, "save optimizer states: path is NULL");
	dt__wbuf_init(&w);
	dt__wbuf_bytes(&w, MAGIC, sizeof(MAGIC));
	dt__wbuf_u32(&w, VERSION);
	dt__wbuf_u32(&w, (uint32_t)kv->opt.kind);
	dt__wbuf_u64(&w, dt__table_count(&kv->local));
	for (dt_hnode *h = dt__table_first(&kv->local, &it); h;
	     h = dt__table_next(&it)) {
		const local_entry *e = DT_CONTAINER_OF(h, local_entry, hn);
		size_t st = state_len(kv, e);

		dt__wbuf_u64(&w, e->key);
		dt__wbuf_u64(&w, e->n);
		dt__wbuf_u64(&w, e->steps);
		dt__wbuf_u64(&w, st);
		if (st)
			dt__wbuf_bytes(&w, e->state, st * sizeof(float));
	}
	/* Room for the trailer, which dt__ckpt_seal writes after the body. */
	size_t body = w.len;
	dt__wbuf_reserve(&w, DT_CKPT_TRAILER);
	if ((err = dt__wbuf_err(&w))) {
		err = dt__fail(DT_ENOMEM,
		               "save optimizer states: out of memory "
		               "for %zu bytes",
		               body);
		goto fail;
	}
	size_t len = dt__ckpt_seal(w.data, body);
	if ((err = dt__file_create_tmp("optimizer states ", path, 0600, &t)))
		goto fail;
	if (dt__write_all(t.fd, w.data, len) < 0) {
		err = dt__fail(DT_ESYS, "optimizer states %s: %s", path,
		               strerror(errno));
		dt__file_abort(&t);
		goto fail;
	}
	err = dt__file_commit(&t, 1);
fail:
	dt__wbuf_fini(&w);
	return err;
}

/* The most bytes a file of this store's state can hold: every key's
 * record and state, with the head and the trailer. */
static size_t
max_file_len(const dt_kv *kv)
{
	dt_table_iter it;
	size_t len = HEAD_LEN + DT_CKPT_TRAILER;

	for (dt_hnode *h = dt__table_first(&kv->local, &it); h;
	     h = dt__table_next(&it)) {
		const local_entry *e = DT_CONTAINER_OF(h, local_entry, hn);

		len += REC_LEN + state_len(kv, e) * sizeof(float);
	}
	return len;
}

/* Read path whole into *buf (len bytes), refusing a file longer than cap
 * before reading it. */
static dt_err
read_capped(const char *path, size_t cap, uint8_t **buf, size_t *len)
{
	struct stat st;
	size_t got = 0;
	int fd;
	dt_err err;

	*buf = NULL;
	if ((err =
	         dt__file_open_regular(DT_EIO, "optimizer states ", path, &fd)))
		return err;
	if (fstat(fd, &st) < 0) {
		err = dt__fail(DT_ESYS, "optimizer states %s: %s", path,
		               strerror(errno));
		goto fail;
	}
	if ((uint64_t)st.st_size > cap) {
		err = dt__fail(DT_EFORMAT,
		               "optimizer states %s: %lld bytes, more than "
		               "this store's state can take (%zu)",
		               path, (long long)st.st_size, cap);
		goto fail;
	}
	if ((*buf = dt__malloc((size_t)st.st_size + 1)) == NULL) {
		err = DT_ENOMEM;
		goto fail;
	}
	while (got < (size_t)st.st_size) {
		ssize_t k = read(fd, *buf + got, (size_t)st.st_size - got);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	*len = got;
fail:
	close(fd);
	return err;
}

static const char *
kind_name(uint32_t kind)
{
	return kind == DT_OPT_SGD    ? "sgd"
	       : kind == DT_OPT_ADAM ? "adam"
	                             : "an unknown optimizer";
}

/* zlib's CRC-32 of n bytes (crc32() takes a uInt length). */
static uint32_t
crc_of(const uint8_t *p, size_t n)
{
	uLong crc = crc32(0L, Z_NULL, 0);

	for (size_t off = 0; off < n;) {
		size_t piece = DT_MIN(n - off, (size_t)1 << 30);

		crc = crc32(crc, p + off, (uInt)piece);
		off += piece;
	}
	return (uint32_t)crc;
}

/* Check the head and the trailer; r is left at the first record. */
static dt_err
open_file(const dt_kv *kv, const char *path, const uint8_t *buf, size_t len,
          dt_rbuf *r, uint64_t *count)
{
	uint64_t body = 0;
	uint32_t crc = 0;

	if (len < HEAD_LEN + DT_CKPT_TRAILER ||
	    memcmp(buf, MAGIC, sizeof(MAGIC)) != 0)
		return dt__fail(DT_EFORMAT,
		                "optimizer states %s: not a dtrain optimizer "
		                "state file",
		                path);
	for (int i = 0; i < 8; i++)
		body |= (uint64_t)buf[len - DT_CKPT_TRAILER + i] << (8 * i);
	for (int i = 0; i < 4; i++)
		crc |= (uint32_t)buf[len - DT_CKPT_TRAILER + 8 + i] << (8 * i);
	if (body != len - DT_CKPT_TRAILER ||
	    memcmp(buf + len - 8, "DTCKEND", 8) != 0 ||
	    crc_of(buf, body) != crc)
		return dt__fail(DT_EFORMAT,
		                "optimizer states %s: damaged or truncated "
		                "(its length or checksum does not match)",
		                path);
	dt__rbuf_init(r, buf, body);
	dt__rbuf_bytes(r, sizeof(MAGIC));
	uint32_t version = dt__rbuf_u32(r), kind = dt__rbuf_u32(r);
	*count = dt__rbuf_u64(r);
	if (version != VERSION)
		return dt__fail(DT_EFORMAT,
		                "optimizer states %s: format version %u; this "
		                "dtrain reads version %u",
		                path, version, VERSION);
	if (kind != (uint32_t)kv->opt.kind)
		return dt__fail(DT_ESTATE,
		                "optimizer states %s: saved from %s, this "
		                "store runs %s (set the same optimizer first)",
		                path, kind_name(kind), kind_name(kv->opt.kind));
	if (*count > dt__table_count(&kv->local))
		return dt__fail(DT_EFORMAT,
		                "optimizer states %s: %llu keys, more than the "
		                "store's %zu",
		                path, (unsigned long long)*count,
		                dt__table_count(&kv->local));
	return DT_OK;
}

/* One record checked against the store: its entry into *e, its step
 * count into *steps, its state at *state (state_len(e) floats). */
static dt_err
next_record(dt_kv *kv, const char *path, dt_rbuf *r, local_entry **e,
            uint64_t *steps, const void **state)
{
	dt_key key = dt__rbuf_u64(r);
	uint64_t n = dt__rbuf_u64(r);
	uint64_t st;

	*steps = dt__rbuf_u64(r);
	st = dt__rbuf_u64(r);

	if (dt__rbuf_err(r, "record"))
		return dt__fail(DT_EFORMAT,
		                "optimizer states %s: truncated "
		                "record",
		                path);
	if ((*e = dt__kv_local_find(kv, key)) == NULL)
		return dt__fail(DT_ENOKEY,
		                "optimizer states %s: key %llu is not "
		                "initialised in this store",
		                path, (unsigned long long)key);
	if (n != (*e)->n || st != state_len(kv, *e))
		return dt__fail(
		    DT_ESIZE,
		    "optimizer states %s: key %llu has length %llu "
		    "and %llu state floats; the store's has %zu and "
		    "%zu",
		    path, (unsigned long long)key, (unsigned long long)n,
		    (unsigned long long)st, (*e)->n, state_len(kv, *e));
	if ((*state = dt__rbuf_bytes(r, st * sizeof(float))) == NULL && st)
		return dt__fail(DT_EFORMAT,
		                "optimizer states %s: key %llu's state is "
		                "truncated",
		                path, (unsigned long long)key);
	return DT_OK;
}

static int
cmp_key(const void *a, const void *b)
{
	dt_key x = *(const dt_key *)a, y = *(const dt_key *)b;

	return x < y ? -1 : x > y;
}

/* Check every record, then apply them: keys the file does not name
 * start again from no state, as keys new to an MXNet updater do. */
static dt_err
apply_file(dt_kv *kv, const char *path, dt_rbuf *r, uint64_t count)
{
	dt_rbuf start = *r;
	dt_key *keys = dt__calloc(count ? count : 1, sizeof(dt_key));
	local_entry *e;
	const void *state;
	uint64_t steps;
	dt_table_iter it;
	dt_err err = DT_OK;

	if (keys == NULL)
		return DT_ENOMEM;
	for (uint64_t i = 0; i < count; i++) {
		if ((err = next_record(kv, path, r, &e, &steps, &state)))
			goto fail;
		keys[i] = e->key;
	}
	if (r->off != r->len) {
		err = dt__fail(DT_EFORMAT,
		               "optimizer states %s: %zu bytes after the last "
		               "record",
		               path, r->len - r->off);
		goto fail;
	}
	qsort(keys, count, sizeof(dt_key), cmp_key);
	for (uint64_t i = 1; i < count; i++)
		if (keys[i] == keys[i - 1]) {
			err = dt__fail(DT_EFORMAT,
			               "optimizer states %s: key %llu listed "
			               "twice",
			               path, (unsigned long long)keys[i]);
			goto fail;
		}
	for (dt_hnode *h = dt__table_first(&kv->local, &it); h;
	     h = dt__table_next(&it)) {
		e = DT_CONTAINER_OF(h, local_entry, hn);
		e->steps = 0;
		if (e->state)
			memset(e->state, 0, state_len(kv, e) * sizeof(float));
	}
	*r = start;
	for (uint64_t i = 0; i < count; i++) {
		/* Read again; every record passed its checks above. */
		(void)next_record(kv, path, r, &e, &steps, &state);
		e->steps = steps;
		if (state_len(kv, e))
			memcpy(e->state, state,
			       state_len(kv, e) * sizeof(float));
	}
fail:
	free(keys);
	return err;
}

dt_err
dt_kv_load_optimizer_states(dt_kv *kv, const char *path)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	uint64_t count = 0;
	dt_rbuf r;
	dt_err err;

	if ((err = check_store(kv, "load optimizer states")))
		return err;
	KV_NEED(path != NULL, "load optimizer states: path is NULL");
	if ((err = read_capped(path, max_file_len(kv), &buf, &len)) ||
	    (err = open_file(kv, path, buf, len, &r, &count)))
		goto fail;
	err = apply_file(kv, path, &r, count);
fail:
	free(buf);
	return err;
}
