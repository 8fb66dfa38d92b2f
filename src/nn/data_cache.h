/*
 * data_cache.h - the decoded-data cache of data.c: one file per pair of
 * MNIST idx files, holding the arrays a load makes (pixels as floats,
 * labels), so that the other processes of the host map it instead of
 * inflating and converting the files again. Private to the nn module.
 *
 * The file is input like any other: it is used only when it is a regular
 * file of this user that no one else may write, and its header (magic,
 * version, dimensions within the idx limits, sizes that add up to the
 * file's length, a checksum) names the very source files (device, inode,
 * size, modification time) that are being loaded. Anything else is a
 * miss: the caller decodes the files and writes a fresh cache over it.
 */
#ifndef DT_NN_DATA_CACHE_H
#define DT_NN_DATA_CACHE_H

#include <stdint.h>
#include <sys/stat.h>

#include "dtrain/nn.h"

/* What identifies a source file's content: it changes when the file is
 * replaced or written. */
typedef struct dt__data_src {
	uint64_t dev, ino, size, mtime_s, mtime_ns;
} dt__data_src;

/* The cache file of one pair of sources. */
typedef struct dt__data_cache {
	char path[4096];     /* the cache file */
	dt__data_src src[2]; /* images, labels, as found before the load */
} dt__data_cache;

/* The source's identity from its status. */
void dt__data_src_of(const struct stat *st, dt__data_src *src);

/*
 * Where the cache of images and labels is, from DTRAIN_DATA_CACHE ("0" or
 * "off": none; a directory; unset: $XDG_RUNTIME_DIR, else /dev/shm), with
 * the sources' identity now. 1 when there is one to look for, 0 when the
 * cache is off, its directory is missing or a source cannot be found (the
 * load then reports the source).
 */
int dt__data_cache_locate(const char *images, const char *labels,
                          dt__data_cache *c);

/* Map the cache into out (x and y in the mapping, out->map set) if it is
 * whole, this user's, and made from the sources c names. 1 when it did;
 * 0, out untouched, otherwise. */
int dt__data_cache_map(const dt__data_cache *c, dt_dataset *out);

/*
 * After a decode of the sources whose identities (as the load opened
 * them) are src: write d to the cache unless a good one is there already,
 * then map the cache in place of d's arrays (the same bytes), freeing
 * them. A data set smaller than DT__DATA_CACHE_MIN bytes is not cached.
 * Best effort: on any failure d is left as it was.
 */
void dt__data_cache_keep(const dt__data_cache *c, const dt__data_src src[2],
                         dt_dataset *d);

/*
 * Wait for the other processes of this user that are decoding the same
 * files (the workers of a new job all load at once), then hold the cache's
 * lock (a file beside it, "<cache>.lock") while this one decodes and
 * writes: the others map what it wrote instead of decoding too. Only for
 * an images file of DT__DATA_CACHE_LOCK_MIN bytes or more (a small data
 * set leaves no lock file). The descriptor to give dt__data_cache_unlock,
 * or -1 when there is no lock (not worth one, not this user's, or held
 * by another for over DT__DATA_CACHE_LOCK_WAIT_S: this one decodes too).
 */
int dt__data_cache_lock(const dt__data_cache *c);
void dt__data_cache_unlock(int fd);

/* Undo dt__data_cache_map: unmap out's arrays. */
void dt__data_cache_unmap(dt_dataset *d);

/* Data sets under this many bytes of arrays decode in milliseconds: they
 * are never cached. */
#define DT__DATA_CACHE_MIN ((size_t)4 << 20)
/* An images file this big takes a while to decode: worth waiting for. */
#define DT__DATA_CACHE_LOCK_MIN ((uint64_t)256 << 10)
/* The longest a load waits for another process's decode. */
#define DT__DATA_CACHE_LOCK_WAIT_S 60

#endif
