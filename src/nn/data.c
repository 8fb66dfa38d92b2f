/*
 * data.c - data sets in memory: MNIST idx files (gzipped or plain) and CSV.
 *
 * Files are read through zlib's gzopen/gzread, which decompress gzip and
 * pass plain files through unchanged, so one path serves both (and .csv.gz
 * too). Everything read from a file is checked before it is trusted: the
 * magic number, dimensions against fixed limits, and the payload length
 * against the header. Payloads are read in growing chunks rather than
 * allocated from the header, so a corrupt header cannot make us allocate
 * more than the file really holds. Errors name the file and the sizes.
 * MNIST files of a size worth it go through the host's decoded-data cache
 * (data_cache.c): the arrays of one process's decode are mapped by the
 * next.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "common/file.h"
#include "common/util.h"
#include "dtrain/nn.h"
#include "nn/data_cache.h"

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define IDX_MAX_COUNT    100000000u /* samples */
#define IDX_MAX_SIDE     4096u      /* rows, cols */
#define CHUNK            (1u << 20)
#define CSV_MAX_BYTES    ((size_t)1 << 32)

/* path for gzread if it is a regular file (a FIFO would block gzopen:
 * refused by name, at once); src, if not NULL, gets the identity of the
 * file opened. */
static dt_err
gz_open_regular(const char *path, gzFile *f, dt__data_src *src)
{
	struct stat st;
	int fd;
	dt_err err;

	*f = NULL;
	if ((err = dt__file_open_regular(DT_EIO, "data file ", path, &fd)))
		return err;
	if (src != NULL) {
		if (fstat(fd, &st) != 0) {
			close(fd);
			return dt__fail(DT_EIO, "%s: %s", path,
			                strerror(errno));
		}
		dt__data_src_of(&st, src);
	}
	if ((*f = gzdopen(fd, "rb")) == NULL) {
		close(fd);
		return dt__fail(DT_ENOMEM, "%s: out of memory", path);
	}
	return DT_OK;
}

static uint32_t
get_be32(const unsigned char *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 |
	       (uint32_t)b[2] << 8 | b[3];
}

static void
put_be32(unsigned char *b, uint32_t v)
{
	b[0] = (unsigned char)(v >> 24);
	b[1] = (unsigned char)(v >> 16);
	b[2] = (unsigned char)(v >> 8);
	b[3] = (unsigned char)v;
}

/* Read exactly n bytes; *got says how many came (short at end of file). */
static dt_err
gz_read_full(gzFile f, const char *path, void *buf, size_t n, size_t *got)
{
	size_t done = 0;

	while (done < n) {
		unsigned want = (unsigned)DT_MIN(n - done, (size_t)CHUNK);
		int r = gzread(f, (char *)buf + done, want);

		if (r < 0) {
			int zerr;
			const char *msg = gzerror(f, &zerr);

			return dt__fail(DT_EFORMAT, "%s: read error: %s", path,
			                msg ? msg : "?");
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	*got = done;
	return DT_OK;
}

/*
 * Read an idx file of unsigned bytes with the given magic: ndims = 1
 * (labels) or 3 (images). dims gets the sizes, *data (caller frees) the
 * payload of dims[0] * dims[1] * dims[2] bytes, *src the file's identity.
 */
static dt_err
read_idx(const char *path, uint32_t magic, uint32_t dims[3], uint8_t **data,
         dt__data_src *src)
{
	unsigned char hdr[16];
	const int ndims = magic == IDX_IMAGES_MAGIC ? 3 : 1;
	const char *what = ndims == 3 ? "image" : "label";
	size_t hlen = 4 + 4 * (size_t)ndims, got = 0, total, have = 0, cap = 0;
	uint8_t *buf = NULL;
	gzFile f;
	dt_err err;
	char extra;

	*data = NULL;
	if ((err = gz_open_regular(path, &f, src)))
		return err;
	if ((err = gz_read_full(f, path, hdr, hlen, &got)))
		goto fail;
	if (got < 4 || get_be32(hdr) != magic) {
		err = dt__fail(DT_EFORMAT,
		               "%s: bad magic 0x%08x (expected "
		               "0x%08x, an idx file of %ss)",
		               path, got >= 4 ? get_be32(hdr) : 0, magic, what);
		goto fail;
	}
	if (got < hlen) {
		err = dt__fail(DT_EFORMAT,
		               "%s: truncated header (%zu of %zu "
		               "bytes)",
		               path, got, hlen);
		goto fail;
	}
	dims[1] = dims[2] = 1;
	for (int i = 0; i < ndims; i++)
		dims[i] = get_be32(hdr + 4 + 4 * i);
	if (dims[0] == 0 || dims[0] > IDX_MAX_COUNT ||
	    (ndims == 3 && (dims[1] == 0 || dims[1] > IDX_MAX_SIDE ||
	                    dims[2] == 0 || dims[2] > IDX_MAX_SIDE))) {
		err = dt__fail(DT_EFORMAT,
		               "%s: implausible dimensions %u x %u "
		               "x %u (at most %u samples of %u x %u)",
		               path, dims[0], dims[1], dims[2], IDX_MAX_COUNT,
		               IDX_MAX_SIDE, IDX_MAX_SIDE);
		goto fail;
	}
	total = (size_t)dims[0] * dims[1] * dims[2];
	while (have < total) {
		size_t want;

		if (have == cap) {
			size_t ncap =
			    DT_MIN(total, DT_MAX(cap * 2, (size_t)CHUNK));
			uint8_t *nb = realloc(buf, ncap);

			if (nb == NULL) {
				err = dt__fail(DT_ENOMEM,
				               "%s: no memory for "
				               "%zu bytes",
				               path, ncap);
				goto fail;
			}
			buf = nb;
			cap = ncap;
		}
		want = cap - have;
		if ((err = gz_read_full(f, path, buf + have, want, &got)))
			goto fail;
		have += got;
		if (got < want)
			break;
	}
	if (have < total) {
		err = dt__fail(DT_EFORMAT,
		               "%s: truncated: %zu of %zu bytes of "
		               "%u %ss",
		               path, have, total, dims[0], what);
		goto fail;
	}
	if ((err = gz_read_full(f, path, &extra, 1, &got)))
		goto fail;
	if (got != 0) {
		err = dt__fail(DT_EFORMAT,
		               "%s: longer than its header says "
		               "(%u %ss of %u x %u bytes)",
		               path, dims[0], what, dims[1], dims[2]);
		goto fail;
	}
	gzclose(f);
	*data = buf;
	return DT_OK;
fail:
	free(buf);
	gzclose(f);
	return err;
}

dt_err
dt_data_load_mnist(const char *images, const char *labels, dt_dataset *out)
{
	uint32_t idims[3], ldims[3];
	uint8_t *pix = NULL, *lab = NULL;
	dt__data_cache cache;
	dt__data_src src[2];
	int cached, lock = -1;
	size_t dim;
	dt_err err;

	if (images == NULL || labels == NULL || out == NULL)
		return dt__fail(DT_EINVAL, "load_mnist: NULL argument");
	memset(out, 0, sizeof(*out));
	/* The arrays another process decoded from these very files, if the
	 * host's cache has them (data_cache.c). */
	cached = dt__data_cache_locate(images, labels, &cache);
	if (cached && dt__data_cache_map(&cache, out))
		return DT_OK;
	/* Not there yet: if another process is decoding these files, its
	 * arrays, once it has written them; else decode them here. */
	if (cached && (lock = dt__data_cache_lock(&cache)) >= 0 &&
	    dt__data_cache_map(&cache, out)) {
		dt__data_cache_unlock(lock);
		return DT_OK;
	}
	if ((err = read_idx(images, IDX_IMAGES_MAGIC, idims, &pix, &src[0])) ||
	    (err = read_idx(labels, IDX_LABELS_MAGIC, ldims, &lab, &src[1])))
		goto fail;
	if (idims[0] != ldims[0]) {
		err = dt__fail(DT_ESIZE,
		               "%s has %u labels but %s has %u "
		               "images",
		               labels, ldims[0], images, idims[0]);
		goto fail;
	}
	dim = (size_t)idims[1] * idims[2];
	out->x = dt__malloc(sizeof(float) * dim * idims[0]);
	out->y = dt__malloc(sizeof(float) * idims[0]);
	if (out->x == NULL || out->y == NULL) {
		err = DT_ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < dim * idims[0]; i++)
		out->x[i] = (float)pix[i] / 255.0f;
	for (size_t i = 0; i < idims[0]; i++)
		out->y[i] = (float)lab[i];
	out->n = idims[0];
	out->dim = dim;
	out->label_dim = 1;
	out->shape[0] = 1;
	out->shape[1] = (int)idims[1];
	out->shape[2] = (int)idims[2];
	free(pix);
	free(lab);
	if (cached)
		dt__data_cache_keep(&cache, src, out);
	dt__data_cache_unlock(lock);
	return DT_OK;
fail:
	dt__data_cache_unlock(lock);
	free(pix);
	free(lab);
	dt_data_fini(out);
	return err;
}

dt_err
dt_data_load_mnist_dir(const char *dir, int train, dt_dataset *out)
{
	const char *pre = train ? "train" : "t10k";
	char img[4096], lab[4096];

	if (dir == NULL || out == NULL)
		return dt__fail(DT_EINVAL, "load_mnist_dir: NULL argument");
	snprintf(img, sizeof(img), "%s/%s-images-idx3-ubyte.gz", dir, pre);
	snprintf(lab, sizeof(lab), "%s/%s-labels-idx1-ubyte.gz", dir, pre);
	/* Fall back to uncompressed files of the same name. */
	if (access(img, R_OK) != 0)
		img[strlen(img) - 3] = '\0';
	if (access(lab, R_OK) != 0)
		lab[strlen(lab) - 3] = '\0';
	return dt_data_load_mnist(img, lab, out);
}

static int
ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

static dt_err
write_idx(const char *path, uint32_t magic, const uint32_t *dims, int ndims,
          const uint8_t *data)
{
	unsigned char hdr[16];
	size_t total = 1, done = 0;
	dt__file_tmp t;
	gzFile f;
	int fd;
	dt_err err;

	/* A new file of a random name beside path, created exclusively
	 * (never through a planted link), renamed over path when whole.
	 * zlib closes its own copy of the descriptor. "T" writes a plain
	 * file through the same calls. */
	if ((err = dt__file_create_tmp("data file ", path, 0666, &t)))
		return err;
	if ((fd = dup(t.fd)) < 0 ||
	    (f = gzdopen(fd, ends_with(path, ".gz") ? "wb" : "wbT")) == NULL) {
		if (fd >= 0)
			close(fd);
		dt__file_abort(&t);
		return dt__fail(DT_EIO, "%s: cannot write", path);
	}
	put_be32(hdr, magic);
	for (int i = 0; i < ndims; i++) {
		put_be32(hdr + 4 + 4 * i, dims[i]);
		total *= dims[i];
	}
	if (gzwrite(f, hdr, 4 + 4 * (unsigned)ndims) <= 0)
		goto fail;
	while (done < total) {
		unsigned n = (unsigned)DT_MIN(total - done, (size_t)CHUNK);

		if (gzwrite(f, data + done, n) != (int)n)
			goto fail;
		done += n;
	}
	if (gzclose(f) != Z_OK) {
		dt__file_abort(&t);
		return dt__fail(DT_EIO, "%s: write failed", path);
	}
	return dt__file_commit(&t, 0);
fail:
	gzclose(f);
	dt__file_abort(&t);
	return dt__fail(DT_EIO, "%s: write failed", path);
}

dt_err
dt_data_save_mnist(const dt_dataset *d, const char *images, const char *labels)
{
	uint32_t idims[3], ldims[1];
	uint8_t *pix = NULL, *lab = NULL;
	dt_err err = DT_ENOMEM;

	if (d == NULL || images == NULL || labels == NULL)
		return dt__fail(DT_EINVAL, "save_mnist: NULL argument");
	if (d->n == 0 || d->n > IDX_MAX_COUNT || d->label_dim != 1 ||
	    d->shape[0] != 1 || d->shape[1] <= 0 || d->shape[2] <= 0 ||
	    (size_t)d->shape[1] * d->shape[2] != d->dim)
		return dt__fail(DT_EINVAL,
		                "save_mnist: need 1 to %u samples "
		                "of 1 x H x W pixels and one label, not %zu of "
		                "%d x %d x %d and %zu",
		                IDX_MAX_COUNT, d->n, d->shape[0], d->shape[1],
		                d->shape[2], d->label_dim);
	if ((pix = dt__malloc(d->n * d->dim)) == NULL ||
	    (lab = dt__malloc(d->n)) == NULL)
		goto fail;
	for (size_t i = 0; i < d->n * d->dim; i++) {
		float v = d->x[i] * 255.0f;

		pix[i] = v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)lrintf(v);
	}
	for (size_t i = 0; i < d->n; i++) {
		float v = d->y[i];

		if (!(v >= 0.0f && v <= 255.0f) || v != (float)(int)v) {
			err = dt__fail(DT_EINVAL,
			               "save_mnist: label %g of "
			               "sample %zu is not an integer in "
			               "[0, 255]",
			               (double)v, i);
			goto fail;
		}
		lab[i] = (uint8_t)v;
	}
	idims[0] = ldims[0] = (uint32_t)d->n;
	idims[1] = (uint32_t)d->shape[1];
	idims[2] = (uint32_t)d->shape[2];
	if ((err = write_idx(images, IDX_IMAGES_MAGIC, idims, 3, pix)) ||
	    (err = write_idx(labels, IDX_LABELS_MAGIC, ldims, 1, lab)))
		goto fail;
fail:
	free(pix);
	free(lab);
	return err;
}

/* ---- CSV ---- */

/* Read a whole (possibly gzipped) file into a NUL-terminated buffer. */
static dt_err
slurp(const char *path, char **out, size_t *len)
{
	size_t have = 0, cap = 0, got = 0;
	char *buf = NULL;
	gzFile f;
	dt_err err;

	if ((err = gz_open_regular(path, &f, NULL)))
		return err;
	for (;;) {
		if (cap - have < CHUNK + 1) {
			char *nb;

			cap = cap ? cap * 2 : 4 * (size_t)CHUNK;
			if (cap > CSV_MAX_BYTES) {
				err = dt__fail(DT_ETOOBIG,
				               "%s: larger than %zu "
				               "bytes",
				               path, CSV_MAX_BYTES);
				goto fail;
			}
			if ((nb = realloc(buf, cap)) == NULL) {
				err = dt__fail(DT_ENOMEM,
				               "%s: no memory for "
				               "%zu bytes",
				               path, cap);
				goto fail;
			}
			buf = nb;
		}
		if ((err = gz_read_full(f, path, buf + have, CHUNK, &got)))
			goto fail;
		have += got;
		if (got < CHUNK)
			break;
	}
	gzclose(f);
	buf[have] = '\0';
	*out = buf;
	*len = have;
	return DT_OK;
fail:
	gzclose(f);
	free(buf);
	return err;
}

/*
 * Parse one line (NUL-terminated, no newline) into vals (up to max); return
 * the number of fields, or -1 with *bad set to the first non-numeric field.
 */
static long
parse_row(char *line, float *vals, long max, char **bad)
{
	long n = 0;
	char *p = line;

	for (;;) {
		char *end;
		double v;

		while (*p == ' ' || *p == '\t')
			p++;
		errno = 0;
		v = strtod(p, &end);
		if (end == p || errno == ERANGE) {
			*bad = p;
			return -1;
		}
		while (*end == ' ' || *end == '\t')
			end++;
		if (*end != ',' && *end != '\0') {
			*bad = p;
			return -1;
		}
		if (vals && n < max)
			vals[n] = (float)v;
		n++;
		if (*end == '\0')
			return n;
		p = end + 1;
	}
}

/* The error for a field of a CSV line that is not a number. */
static dt_err
csv_not_number(const char *path, size_t lineno, const char *line,
               const char *bad)
{
	size_t blen = strcspn(bad, ",");
	long col = 1;

	for (const char *q = line; q < bad; q++)
		col += *q == ',';
	return dt__fail(DT_EFORMAT,
	                "%s line %zu column %ld: '%.*s' is not a number", path,
	                lineno, col, (int)DT_MIN(blen, (size_t)32), bad);
}

/* The first data line of a CSV file has nf columns: check them against the
 * label column and the size bound, and allocate the dataset for at most
 * rows_max rows and the row buffer *vals. */
static dt_err
csv_columns(const char *path, size_t lineno, long nf, int label_col,
            size_t rows_max, dt_dataset *out, long *lc, float **vals)
{
	if (nf < 2)
		return dt__fail(DT_EFORMAT,
		                "%s line %zu: %ld column; need a label and at "
		                "least one feature",
		                path, lineno, nf);
	*lc = label_col < 0 ? nf - 1 : label_col;
	if (*lc >= nf)
		return dt__fail(DT_EINVAL,
		                "%s: label column %d but rows have %ld columns",
		                path, label_col, nf);
	if (rows_max > CSV_MAX_BYTES / (size_t)nf)
		return dt__fail(DT_ETOOBIG,
		                "%s: %zu rows of %ld columns are too many",
		                path, rows_max, nf);
	if ((out->x = dt__malloc(sizeof(float) * rows_max *
	                         (size_t)(nf - 1))) == NULL ||
	    (out->y = dt__malloc(sizeof(float) * rows_max)) == NULL ||
	    (*vals = dt__malloc(sizeof(float) * (size_t)nf)) == NULL)
		return DT_ENOMEM;
	return DT_OK;
}

dt_err
dt_data_load_csv(const char *path, int label_col, dt_dataset *out)
{
	char *text = NULL, *line, *next, *bad;
	size_t len = 0, rows_max = 1, row = 0, lineno = 0;
	long ncol = 0, lc = 0;
	int first = 1;
	float *vals = NULL;
	dt_err err;

	if (path == NULL || out == NULL)
		return dt__fail(DT_EINVAL, "load_csv: NULL argument");
	memset(out, 0, sizeof(*out));
	if ((err = slurp(path, &text, &len)))
		return err;
	for (size_t i = 0; i < len; i++)
		rows_max += text[i] == '\n';
	for (line = text; line != NULL; line = next) {
		long nf;

		lineno++;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (*line && line[strlen(line) - 1] == '\r')
			line[strlen(line) - 1] = '\0';
		if (line[strspn(line, " \t")] == '\0')
			continue;
		nf = parse_row(line, vals, ncol, &bad);
		if (nf < 0 && first) {
			first = 0; /* a header line */
			continue;
		}
		first = 0;
		if (nf < 0) {
			err = csv_not_number(path, lineno, line, bad);
			goto fail;
		}
		if (ncol == 0) {
			/* The first data line fixes the columns. */
			if ((err = csv_columns(path, lineno, nf, label_col,
			                       rows_max, out, &lc, &vals)))
				goto fail;
			ncol = nf;
			parse_row(line, vals, ncol, &bad);
		}
		if (nf != ncol) {
			err = dt__fail(DT_EFORMAT,
			               "%s line %zu: %ld columns, expected %ld",
			               path, lineno, nf, ncol);
			goto fail;
		}
		for (long c = 0, j = 0; c < ncol; c++) {
			if (c == lc)
				out->y[row] = vals[c];
			else
				out->x[row * (size_t)(ncol - 1) + j++] =
				    vals[c];
		}
		row++;
	}
	if (row == 0) {
		err = dt__fail(DT_EFORMAT, "%s: no data rows", path);
		goto fail;
	}
	out->n = row;
	out->dim = (size_t)(ncol - 1);
	out->label_dim = 1;
	out->shape[0] = 1;
	out->shape[1] = 1;
	out->shape[2] = (int)(ncol - 1);
	free(vals);
	free(text);
	return DT_OK;
fail:
	free(vals);
	free(text);
	dt_data_fini(out);
	return err;
}

void
dt_data_fini(dt_dataset *d)
{
	if (d == NULL)
		return;
	if (d->mapped != NULL) {
		dt__data_cache_unmap(d);
	} else {
		free(d->x);
		free(d->y);
	}
	memset(d, 0, sizeof(*d));
}

dt_err
dt_data_gather(const dt_dataset *d, const size_t *idx, size_t count, float *x,
               float *y)
{
	for (size_t i = 0; i < count; i++) {
		if (idx[i] >= d->n)
			return dt__fail(
			    DT_EINVAL,
			    "gather: index %zu of "
			    "position %zu is beyond the %zu samples",
			    idx[i], i, d->n);
	}
	for (size_t i = 0; i < count; i++) {
		memcpy(x + i * d->dim, d->x + idx[i] * d->dim,
		       sizeof(float) * d->dim);
		if (y)
			memcpy(y + i * d->label_dim,
			       d->y + idx[i] * d->label_dim,
			       sizeof(float) * d->label_dim);
	}
	return DT_OK;
}
