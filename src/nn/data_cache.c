/*
 * data_cache.c - the decoded-data cache of MNIST idx files (data_cache.h).
 *
 * Inflating Fashion-MNIST's training set and turning its 47 million pixels
 * into floats costs a process a third of a second of processor time, and
 * a worker that joins a running job on a busy host gets a small share of
 * a processor: the load was most of its start. The first process that
 * decodes a pair of files writes the arrays to a file of the host's
 * memory (a tmpfs: $XDG_RUNTIME_DIR or /dev/shm); the others map that
 * file, copy-on-write, so that they start at once and share its pages.
 *
 * The file: a header of HDR_LEN bytes (fields below, native byte order:
 * the file never leaves the host), then n * dim floats of pixels, then
 * n * label_dim floats of labels. It is named by the user and a hash of
 * the sources' real paths; the header holds the sources' identity, so a
 * cache of files that have changed since is stale: it is ignored, and the
 * load that decodes them again writes a fresh one over it. A new file is
 * written under a random name and renamed into place (common/file.h), so
 * a reader sees a whole file or none; a reader that has mapped the old one
 * keeps it until it unmaps. Processes that miss at the same time take
 * turns on a lock file beside the cache (flock), so that one decodes and
 * writes and the others map its file: the workers of a new job would
 * otherwise all decode and write 188 MB each.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/util.h"
#include "nn/data_cache.h"

#define HDR_LEN   4096u /* the arrays start on a page */
#define HDR_USED  176u  /* the header's fields, checksum included */
#define VERSION   1u
#define MAX_COUNT 100000000u /* samples: as the idx reader's limits */
#define MAX_SIDE  4096u

static const char MAGIC[8] = {'d', 't', 'r', 'a', 'i', 'n', 'D', 'C'};

/* The header's fields by offset. */
enum {
	OFF_MAGIC = 0,     /* 8 bytes */
	OFF_VERSION = 8,   /* u32 */
	OFF_HDR_LEN = 12,  /* u32 */
	OFF_UID = 16,      /* u64 */
	OFF_N = 24,        /* u64 */
	OFF_DIM = 32,      /* u64 */
	OFF_LABEL = 40,    /* u64: label_dim */
	OFF_SHAPE = 48,    /* 3 x u32, then 4 bytes of zeros */
	OFF_SRC = 64,      /* 2 x 5 x u64: images', labels' identity */
	OFF_X = 144,       /* u64: offset of the pixels */
	OFF_Y = 152,       /* u64: offset of the labels */
	OFF_LEN = 160,     /* u64: the file's length */
	OFF_CHECKSUM = 168 /* u64: FNV-1a of the bytes before it */
};

static uint64_t
fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

#define FNV_BASIS 0xcbf29ce484222325ull

static uint64_t
get64(const unsigned char *h, size_t off)
{
	uint64_t v;

	memcpy(&v, h + off, sizeof(v));
	return v;
}

static uint32_t
get32(const unsigned char *h, size_t off)
{
	uint32_t v;

	memcpy(&v, h + off, sizeof(v));
	return v;
}

static void
put64(unsigned char *h, size_t off, uint64_t v)
{
	memcpy(h + off, &v, sizeof(v));
}

static void
put32(unsigned char *h, size_t off, uint32_t v)
{
	memcpy(h + off, &v, sizeof(v));
}

void
dt__data_src_of(const struct stat *st, dt__data_src *src)
{
	src->dev = (uint64_t)st->st_dev;
	src->ino = (uint64_t)st->st_ino;
	src->size = (uint64_t)st->st_size;
	src->mtime_s = (uint64_t)st->st_mtim.tv_sec;
	src->mtime_ns = (uint64_t)st->st_mtim.tv_nsec;
}

/* The directory of the cache, or NULL when it is off. */
static const char *
cache_dir(void)
{
	const char *v = dt__env_str("DTRAIN_DATA_CACHE");
	struct stat st;

	if (v != NULL) {
		if (strcmp(v, "0") == 0 || strcmp(v, "off") == 0)
			return NULL;
		/* A directory the user names is made if missing (its
		 * parent must exist). */
		if (mkdir(v, 0700) != 0 && errno != EEXIST)
			return NULL;
		return v;
	}
	v = dt__env_str("XDG_RUNTIME_DIR");
	if (v != NULL && v[0] == '/' && stat(v, &st) == 0 &&
	    S_ISDIR(st.st_mode))
		return v;
	return stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm"
	                                                         : NULL;
}

int
dt__data_cache_locate(const char *images, const char *labels, dt__data_cache *c)
{
	const char *dir = cache_dir();
	char *ri = NULL, *rl = NULL;
	struct stat si, sl;
	uint64_t h = FNV_BASIS;
	int n, ok = 0;

	memset(c, 0, sizeof(*c));
	if (dir == NULL || stat(images, &si) != 0 || stat(labels, &sl) != 0 ||
	    !S_ISREG(si.st_mode) || !S_ISREG(sl.st_mode) ||
	    (ri = realpath(images, NULL)) == NULL ||
	    (rl = realpath(labels, NULL)) == NULL)
		goto out;
	h = fnv1a(h, ri, strlen(ri) + 1);
	h = fnv1a(h, rl, strlen(rl) + 1);
	n = snprintf(c->path, sizeof(c->path), "%s/dtrain-data-%lu-%016llx",
	             dir, (unsigned long)geteuid(), (unsigned long long)h);
	if (n <= 0 || (size_t)n >= sizeof(c->path))
		goto out;
	dt__data_src_of(&si, &c->src[0]);
	dt__data_src_of(&sl, &c->src[1]);
	ok = 1;
out:
	free(ri);
	free(rl);
	return ok;
}

/* The header of d made from sources src, in h (HDR_LEN bytes). */
static void
header_make(unsigned char *h, const dt_dataset *d, const dt__data_src src[2])
{
	uint64_t xbytes = (uint64_t)d->n * d->dim * sizeof(float);
	uint64_t ybytes = (uint64_t)d->n * d->label_dim * sizeof(float);

	memset(h, 0, HDR_LEN);
	memcpy(h + OFF_MAGIC, MAGIC, sizeof(MAGIC));
	put32(h, OFF_VERSION, VERSION);
	put32(h, OFF_HDR_LEN, HDR_LEN);
	put64(h, OFF_UID, (uint64_t)geteuid());
	put64(h, OFF_N, d->n);
	put64(h, OFF_DIM, d->dim);
	put64(h, OFF_LABEL, d->label_dim);
	for (int i = 0; i < 3; i++)
		put32(h, OFF_SHAPE + 4 * (size_t)i, (uint32_t)d->shape[i]);
	for (int s = 0; s < 2; s++) {
		const uint64_t v[5] = {src[s].dev, src[s].ino, src[s].size,
		                       src[s].mtime_s, src[s].mtime_ns};

		for (int i = 0; i < 5; i++)
			put64(h, OFF_SRC + 40 * (size_t)s + 8 * (size_t)i,
			      v[i]);
	}
	put64(h, OFF_X, HDR_LEN);
	put64(h, OFF_Y, HDR_LEN + xbytes);
	put64(h, OFF_LEN, HDR_LEN + xbytes + ybytes);
	put64(h, OFF_CHECKSUM, fnv1a(FNV_BASIS, h, OFF_CHECKSUM));
}

/*
 * Check a header read from a file of length len against the limits and
 * the sources c names; fill d's sizes (not its arrays). 0, or -1 with a
 * reason in *why.
 */
static int
header_check(const unsigned char *h, uint64_t len, const dt__data_cache *c,
             dt_dataset *d, const char **why)
{
	uint64_t n, dim, s1, s2, xbytes;

	*why = "not a data cache file, or of another version";
	if (memcmp(h + OFF_MAGIC, MAGIC, sizeof(MAGIC)) != 0 ||
	    get32(h, OFF_VERSION) != VERSION ||
	    get32(h, OFF_HDR_LEN) != HDR_LEN)
		return -1;
	*why = "its header is damaged";
	if (get64(h, OFF_CHECKSUM) != fnv1a(FNV_BASIS, h, OFF_CHECKSUM))
		return -1;
	*why = "another user's";
	if (get64(h, OFF_UID) != (uint64_t)geteuid())
		return -1;
	*why = "implausible dimensions";
	n = get64(h, OFF_N);
	dim = get64(h, OFF_DIM);
	s1 = get32(h, OFF_SHAPE + 4);
	s2 = get32(h, OFF_SHAPE + 8);
	if (n == 0 || n > MAX_COUNT || get32(h, OFF_SHAPE) != 1 || s1 == 0 ||
	    s1 > MAX_SIDE || s2 == 0 || s2 > MAX_SIDE || dim != s1 * s2 ||
	    get64(h, OFF_LABEL) != 1)
		return -1;
	*why = "its sizes do not add up to its length";
	xbytes = n * dim * sizeof(float);
	if (get64(h, OFF_X) != HDR_LEN || get64(h, OFF_Y) != HDR_LEN + xbytes ||
	    get64(h, OFF_LEN) != HDR_LEN + xbytes + n * sizeof(float) ||
	    get64(h, OFF_LEN) != len)
		return -1;
	*why = "stale: made from other source files";
	for (int s = 0; s < 2; s++) {
		const dt__data_src *src = &c->src[s];
		const uint64_t v[5] = {src->dev, src->ino, src->size,
		                       src->mtime_s, src->mtime_ns};

		for (int i = 0; i < 5; i++)
			if (get64(h, OFF_SRC + 40 * (size_t)s +
			                 8 * (size_t)i) != v[i])
				return -1;
	}
	d->n = (size_t)n;
	d->dim = (size_t)dim;
	d->label_dim = 1;
	d->shape[0] = 1;
	d->shape[1] = (int)s1;
	d->shape[2] = (int)s2;
	return 0;
}

/* Read the cache's header and map it. 0, or -1 with *why (NULL: there is
 * no cache file). */
static int
map_file(const dt__data_cache *c, dt_dataset *d, const char **why)
{
	unsigned char h[HDR_USED];
	struct stat st;
	void *p;
	int fd;

	*why = NULL;
	/* O_NOFOLLOW: the file itself, never a link planted in a shared
	 * directory; O_NONBLOCK: a FIFO at the name does not hang us. */
	fd = open(c->path,
	          O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		if (errno != ENOENT)
			*why = "cannot be opened";
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		*why = "not a regular file";
		goto fail;
	}
	if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		*why = "another user's, or others may write it";
		goto fail;
	}
	if ((uint64_t)st.st_size < HDR_LEN ||
	    pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		*why = "truncated";
		goto fail;
	}
	if (header_check(h, (uint64_t)st.st_size, c, d, why) != 0)
		goto fail;
	/* Private: a process that writes into its arrays gets its own copy
	 * of the page, as it would own malloc'd arrays. */
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE,
	         fd, 0);
	if (p == MAP_FAILED) {
		*why = "cannot be mapped";
		goto fail;
	}
	close(fd);
	d->x = (float *)((char *)p + HDR_LEN);
	d->y = d->x + d->n * d->dim;
	d->mapped = p;
	d->mapped_len = (size_t)st.st_size;
	return 0;
fail:
	close(fd);
	return -1;
}

int
dt__data_cache_map(const dt__data_cache *c, dt_dataset *out)
{
	dt_dataset d = {0};
	const char *why;

	if (map_file(c, &d, &why) != 0) {
		if (why != NULL)
			DT_LOG(1, "data cache %s: %s: not used", c->path, why);
		return 0;
	}
	*out = d;
	DT_LOG(1, "data cache %s: mapped (%zu samples)", c->path, d.n);
	return 1;
}

/* Write d to a new cache file and rename it into place; 0 or -1. */
static int
write_file(const dt__data_cache *c, const dt__data_src src[2],
           const dt_dataset *d)
{
	unsigned char h[HDR_LEN];
	dt__data_cache now = *c;
	dt_dataset other = {0};
	dt__file_tmp t;
	const char *why;

	if (dt__file_create_tmp("data cache ", c->path, 0600, &t) != DT_OK)
		return -1;
	header_make(h, d, src);
	if (dt__write_all(t.fd, h, HDR_LEN) != 0 ||
	    dt__write_all(t.fd, d->x, d->n * d->dim * sizeof(float)) != 0 ||
	    dt__write_all(t.fd, d->y, d->n * d->label_dim * sizeof(float)) !=
	        0) {
		dt__file_abort(&t);
		return -1;
	}
	/* Another process may have placed the same data meanwhile (all the
	 * workers of a new job decode at once): keep its file, whose pages
	 * the others share already. */
	memcpy(now.src, src, sizeof(now.src));
	if (map_file(&now, &other, &why) == 0) {
		dt__data_cache_unmap(&other);
		dt__file_abort(&t);
		return 0;
	}
	return dt__file_commit(&t, 0) == DT_OK ? 0 : -1;
}

void
dt__data_cache_keep(const dt__data_cache *c, const dt__data_src src[2],
                    dt_dataset *d)
{
	dt__data_cache now = *c;
	dt_dataset m = {0};
	const char *why;

	if ((d->n * (d->dim + d->label_dim)) * sizeof(float) <
	        DT__DATA_CACHE_MIN ||
	    d->label_dim != 1 || d->mapped != NULL)
		return;
	/* The sources as the decode opened them: the cache says what its
	 * arrays were made from, even if a file changed since the lookup. */
	memcpy(now.src, src, sizeof(now.src));
	if (map_file(&now, &m, &why) != 0) {
		if (write_file(c, src, d) != 0) {
			DT_LOG(1, "data cache %s: could not be written",
			       c->path);
			return;
		}
		if (map_file(&now, &m, &why) != 0)
			return;
	}
	if (m.n != d->n || m.dim != d->dim) {
		dt__data_cache_unmap(&m);
		return;
	}
	free(d->x);
	free(d->y);
	*d = m;
}

int
dt__data_cache_lock(const dt__data_cache *c)
{
	char p[sizeof(c->path) + 8];
	uint64_t end, pause_us = 1000;
	struct stat st;
	int fd, n;

	if (c->src[0].size < DT__DATA_CACHE_LOCK_MIN)
		return -1;
	n = snprintf(p, sizeof(p), "%s.lock", c->path);
	if (n <= 0 || (size_t)n >= sizeof(p))
		return -1;
	/* Only a regular file of this user's: a lock someone else planted
	 * could keep us waiting (the deadline would end it anyway). */
	fd = open(p,
	          O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
	              O_NOCTTY,
	          0600);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_uid != geteuid()) {
		close(fd);
		return -1;
	}
	end = dt__now_ns() + (uint64_t)DT__DATA_CACHE_LOCK_WAIT_S * 1000000000u;
	while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		if ((errno != EWOULDBLOCK && errno != EINTR) ||
		    dt__now_ns() >= end) {
			DT_LOG(1,
			       "data cache %s: not waiting for another "
			       "process's decode any longer",
			       c->path);
			close(fd);
			return -1;
		}
		/* A decode takes a third of a second alone: look a few
		 * times a second at most once it has been a while. */
		usleep((useconds_t)pause_us);
		pause_us = DT_MIN(pause_us * 2, (uint64_t)50000);
	}
	return fd;
}

void
dt__data_cache_unlock(int fd)
{
	if (fd >= 0)
		close(fd); /* and with it the lock */
}

void
dt__data_cache_unmap(dt_dataset *d)
{
	if (d->mapped != NULL)
		munmap(d->mapped, d->mapped_len);
	d->mapped = NULL;
	d->mapped_len = 0;
	d->x = d->y = NULL;
}
