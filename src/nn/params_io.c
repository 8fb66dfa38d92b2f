/*
 * params_io.c - parameter files: save, load, read and compare.
 *
 * The format is small and explicit (every integer little-endian, written
 * byte by byte, so it reads the same on any machine):
 *
 *   offset  size  field
 *   0       8     magic "DTPARAMS"
 *   8       4     u32 version, 1
 *   12      4     u32 tensor count T (1 .. 65536)
 *   then T tensors, each:
 *           2     u16 name length L (1 .. 255)
 *           L     name (bytes, no NUL)
 *           4     u32 ndim (1 .. 4)
 *           4*ndim u32 dims, each >= 1
 *           8     u64 float count = product of dims
 *           4*count float32 values (IEEE 754, little-endian)
 *   last    4     u32 CRC-32 (zlib's crc32) of every byte before it
 *
 * Files are written to a temporary name and renamed into place, so a crash
 * never leaves a half-written checkpoint under the real name. Reading loads
 * the file, checks the CRC, then walks the fields checking every length
 * against what remains before using it.
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

#define PARAMS_MAGIC       "DTPARAMS"
#define PARAMS_VERSION     1u
#define PARAMS_MAX_TENSORS 65536u
#define PARAMS_MAX_NAME    255u
#define PARAMS_MAX_BYTES   ((uint64_t)1 << 36)

struct dt_nn_params {
	int ntensors;
	dt_nn_tensor *tensors;
	char *names; /* ntensors x (PARAMS_MAX_NAME + 1) */
	float *data;
	size_t nfloats;
};

/* ---- writing ---- */

typedef struct writer {
	FILE *f;
	uLong crc;
	int failed;
} writer;

static void
put(writer *w, const void *p, size_t n)
{
	if (w->failed)
		return;
	if (fwrite(p, 1, n, w->f) != n) {
		w->failed = 1;
		return;
	}
	/* crc32 takes a uInt length: feed large blocks in pieces. */
	for (size_t off = 0; off < n; off += 1u << 30) {
		size_t k = DT_MIN(n - off, (size_t)1 << 30);

		w->crc = crc32(w->crc, (const Bytef *)p + off, (uInt)k);
	}
}

static void
put_u16(writer *w, uint16_t v)
{
	unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};

	put(w, b, 2);
}

static void
put_u32(writer *w, uint32_t v)
{
	unsigned char b[4];

	for (int i = 0; i < 4; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	put(w, b, 4);
}

static void
put_u64(writer *w, uint64_t v)
{
	unsigned char b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	put(w, b, 8);
}

static void
put_floats(writer *w, const float *x, size_t n)
{
	unsigned char b[4096 * 4];

	while (n > 0) {
		size_t k = DT_MIN(n, (size_t)4096);

		for (size_t i = 0; i < k; i++) {
			uint32_t u;

			memcpy(&u, &x[i], 4);
			for (int j = 0; j < 4; j++)
				b[4 * i + j] = (unsigned char)(u >> (8 * j));
		}
		put(w, b, 4 * k);
		x += k;
		n -= k;
	}
}

dt_err
dt_nn_params_write(const char *path, const dt_nn_tensor *t, int nt,
                   const float *buf)
{
	dt__file_tmp tmp;
	writer w = {NULL, 0, 0};
	dt_err err;

	if (path == NULL || t == NULL || buf == NULL || nt <= 0 ||
	    (unsigned)nt > PARAMS_MAX_TENSORS)
		return dt__fail(DT_EINVAL,
		                "params write: bad arguments (%d "
		                "tensors)",
		                nt);
	for (int i = 0; i < nt; i++) {
		size_t len = t[i].name ? strlen(t[i].name) : 0;
		uint64_t count = 1;

		if (t[i].ndim < 1 || t[i].ndim > DT_NN_MAX_DIMS)
			return dt__fail(DT_EINVAL,
			                "params write: tensor %d "
			                "has %d dimensions",
			                i, t[i].ndim);
		for (int d = 0; d < t[i].ndim; d++)
			count *=
			    (uint64_t)(t[i].shape[d] > 0 ? t[i].shape[d] : 0);
		if (len == 0 || len > PARAMS_MAX_NAME || count != t[i].size)
			return dt__fail(DT_EINVAL,
			                "params write: tensor %d "
			                "('%s'): name of %zu bytes, shape of "
			                "%llu floats, size %zu",
			                i, t[i].name ? t[i].name : "", len,
			                (unsigned long long)count, t[i].size);
	}
	/* A new file of a random name beside path, created exclusively
	 * (never through a planted link), renamed over path when whole. */
	if ((err = dt__file_create_tmp("params ", path, 0666, &tmp)))
		return err;
	if ((w.f = dt__file_stream(&tmp)) == NULL) {
		dt__file_abort(&tmp);
		return DT_ENOMEM;
	}
	w.crc = crc32(0L, Z_NULL, 0);
	put(&w, PARAMS_MAGIC, 8);
	put_u32(&w, PARAMS_VERSION);
	put_u32(&w, (uint32_t)nt);
	for (int i = 0; i < nt; i++) {
		size_t len = strlen(t[i].name);

		put_u16(&w, (uint16_t)len);
		put(&w, t[i].name, len);
		put_u32(&w, (uint32_t)t[i].ndim);
		for (int d = 0; d < t[i].ndim; d++)
			put_u32(&w, (uint32_t)t[i].shape[d]);
		put_u64(&w, (uint64_t)t[i].size);
		put_floats(&w, buf + t[i].offset, t[i].size);
	}
	{
		uLong crc = w.crc;
		unsigned char b[4];

		for (int i = 0; i < 4; i++)
			b[i] = (unsigned char)(crc >> (8 * i));
		if (!w.failed && fwrite(b, 1, 4, w.f) != 4)
			w.failed = 1;
	}
	if (w.failed) {
		int e = errno;

		dt__file_abort(&tmp);
		return dt__fail(DT_EIO, "%s: write failed: %s", path,
		                strerror(e));
	}
	return dt__file_commit(&tmp, 1);
}

dt_err
dt_nn_params_save(const dt_nn_model *m, const char *path)
{
	int nt = dt_nn_model_num_tensors(m);

	/* The table is contiguous in the model: pass its first entry. */
	return dt_nn_params_write(path, dt_nn_model_tensor(m, 0), nt,
	                          dt_nn_model_params((dt_nn_model *)m));
}

/* ---- reading ---- */

typedef struct reader {
	const unsigned char *p;
	size_t left;
} reader;

static int
get(reader *r, void *out, size_t n)
{
	if (r->left < n)
		return -1;
	memcpy(out, r->p, n);
	r->p += n;
	r->left -= n;
	return 0;
}

static uint64_t
le(const unsigned char *b, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

static int
get_uint(reader *r, int n, uint64_t *v)
{
	unsigned char b[8];

	if (get(r, b, (size_t)n))
		return -1;
	*v = le(b, n);
	return 0;
}

static dt_err
read_file(const char *path, unsigned char **out, size_t *len)
{
	struct stat st;
	unsigned char *buf;
	FILE *f;
	dt_err err;

	if ((err = dt__file_fopen_regular(DT_EIO, "params ", path, &f)))
		return err;
	if (fstat(fileno(f), &st) != 0) {
		fclose(f);
		return dt__fail(DT_EIO, "%s: %s", path, strerror(errno));
	}
	if ((uint64_t)st.st_size > PARAMS_MAX_BYTES) {
		fclose(f);
		return dt__fail(DT_ETOOBIG,
		                "%s: %lld bytes is over the limit "
		                "of %llu",
		                path, (long long)st.st_size,
		                (unsigned long long)PARAMS_MAX_BYTES);
	}
	if ((buf = dt__malloc((size_t)st.st_size)) == NULL) {
		fclose(f);
		return DT_ENOMEM;
	}
	if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		fclose(f);
		free(buf);
		return dt__fail(DT_EIO, "%s: read failed", path);
	}
	fclose(f);
	*out = buf;
	*len = (size_t)st.st_size;
	return DT_OK;
}

#define BAD(...)                                                               \
	do {                                                                   \
		err = dt__fail(DT_EFORMAT, __VA_ARGS__);                       \
		goto fail;                                                     \
	} while (0)

/* Tensor i of a parameter file: its name, shape and floats, which go to
 * p->data at *off (advanced past them). Every field is checked against
 * its bound and the bytes left before use. */
static dt_err
read_tensor(const char *path, reader *r, dt_nn_params *p, uint64_t i,
            uint64_t *off)
{
	dt_nn_tensor *t = &p->tensors[i];
	char *name = p->names + i * (PARAMS_MAX_NAME + 1);
	uint64_t nlen = 0, ndim = 0, count = 0, prod = 1;
	dt_err err;

	if (get_uint(r, 2, &nlen) || nlen == 0 || nlen > PARAMS_MAX_NAME ||
	    get(r, name, nlen) || memchr(name, '\0', nlen) != NULL)
		BAD("%s: tensor %llu: bad or truncated name", path,
		    (unsigned long long)i);
	t->name = name;
	if (get_uint(r, 4, &ndim) || ndim < 1 || ndim > DT_NN_MAX_DIMS)
		BAD("%s: tensor %s: bad dimension count", path, name);
	t->ndim = (int)ndim;
	for (uint64_t d = 0; d < ndim; d++) {
		uint64_t v;

		if (get_uint(r, 4, &v) || v == 0 || v > INT32_MAX)
			BAD("%s: tensor %s: bad dimension %llu", path, name,
			    (unsigned long long)d);
		t->shape[d] = (int)v;
		if (prod > PARAMS_MAX_BYTES / v)
			BAD("%s: tensor %s: shape too large", path, name);
		prod *= v;
	}
	if (get_uint(r, 8, &count) || count != prod)
		BAD("%s: tensor %s: count %llu does not match its shape "
		    "(%llu)",
		    path, name, (unsigned long long)count,
		    (unsigned long long)prod);
	if (count > r->left / 4)
		BAD("%s: tensor %s: %llu floats but only %zu bytes left", path,
		    name, (unsigned long long)count, r->left);
	t->offset = (size_t)*off;
	t->size = (size_t)count;
	t->wd_mult = 1.0f;
	for (uint64_t j = 0; j < count; j++) {
		uint32_t u = (uint32_t)le(r->p + 4 * j, 4);

		memcpy(&p->data[*off + j], &u, 4);
	}
	r->p += 4 * count;
	r->left -= 4 * count;
	*off += count;
	return DT_OK;
fail:
	return err;
}

dt_err
dt_nn_params_read(const char *path, dt_nn_params **out)
{
	unsigned char *buf = NULL;
	size_t len = 0;
	reader r;
	uint64_t version, nt, off = 0;
	dt_nn_params *p = NULL;
	uLong crc;
	dt_err err;

	if (path == NULL || out == NULL)
		return dt__fail(DT_EINVAL, "params read: NULL argument");
	*out = NULL;
	if ((err = read_file(path, &buf, &len)))
		return err;
	if (len < 8 || memcmp(buf, PARAMS_MAGIC, 8) != 0)
		BAD("%s: not a dtrain parameter file (bad magic)", path);
	if (len < 8 + 4 + 4 + 4)
		BAD("%s: truncated (%zu bytes)", path, len);
	crc = crc32(0L, Z_NULL, 0);
	for (size_t o = 0; o < len - 4; o += 1u << 30)
		crc = crc32(crc, buf + o,
		            (uInt)DT_MIN(len - 4 - o, (size_t)1 << 30));
	if ((uint32_t)crc != (uint32_t)le(buf + len - 4, 4))
		BAD("%s: CRC mismatch (file 0x%08x, computed 0x%08x): the file "
		    "is corrupt or truncated",
		    path, (unsigned)le(buf + len - 4, 4),
		    (unsigned)(uint32_t)crc);
	r.p = buf + 8;
	r.left = len - 8 - 4;
	if (get_uint(&r, 4, &version) || get_uint(&r, 4, &nt))
		BAD("%s: truncated header", path);
	if (version != PARAMS_VERSION)
		BAD("%s: version %llu, this dtrain reads version %u", path,
		    (unsigned long long)version, PARAMS_VERSION);
	if (nt == 0 || nt > PARAMS_MAX_TENSORS)
		BAD("%s: %llu tensors (1 to %u allowed)", path,
		    (unsigned long long)nt, PARAMS_MAX_TENSORS);
	if ((p = dt__calloc(1, sizeof(*p))) == NULL ||
	    (p->tensors = dt__calloc(nt, sizeof(dt_nn_tensor))) == NULL ||
	    (p->names = dt__calloc(nt, PARAMS_MAX_NAME + 1)) == NULL ||
	    /* Never more floats than the file's bytes can hold. */
	    (p->data = dt__malloc(len)) == NULL) {
		err = DT_ENOMEM;
		goto fail;
	}
	p->ntensors = (int)nt;
	for (uint64_t i = 0; i < nt; i++)
		if ((err = read_tensor(path, &r, p, i, &off)))
			goto fail;
	if (r.left != 0)
		BAD("%s: %zu unexpected bytes after the last tensor", path,
		    r.left);
	p->nfloats = (size_t)off;
	free(buf);
	*out = p;
	return DT_OK;
fail:
	free(buf);
	dt_nn_params_free(p);
	return err;
}

void
dt_nn_params_free(dt_nn_params *p)
{
	if (p == NULL)
		return;
	free(p->tensors);
	free(p->names);
	free(p->data);
	free(p);
}

int
dt_nn_params_num_tensors(const dt_nn_params *p)
{
	return p->ntensors;
}

const dt_nn_tensor *
dt_nn_params_tensor(const dt_nn_params *p, int i)
{
	if (i < 0 || i >= p->ntensors)
		return NULL;
	return &p->tensors[i];
}

const float *
dt_nn_params_data(const dt_nn_params *p)
{
	return p->data;
}

/* Same name and shape? Fills a message naming the first difference. */
static dt_err
same_tensor(const char *what_a, const dt_nn_tensor *a, const char *what_b,
            const dt_nn_tensor *b, int i)
{
	char sa[64], sb[64];

	if (strcmp(a->name, b->name) == 0 && a->ndim == b->ndim &&
	    memcmp(a->shape, b->shape, sizeof(int) * (size_t)a->ndim) == 0)
		return DT_OK;
	dt__shape_str(a->shape, a->ndim, sa, sizeof(sa));
	dt__shape_str(b->shape, b->ndim, sb, sizeof(sb));
	return dt__fail(DT_ESIZE,
	                "tensor %d differs: %s has %s (%s), %s has "
	                "%s (%s)",
	                i, what_a, a->name, sa, what_b, b->name, sb);
}

dt_err
dt_nn_params_load(dt_nn_model *m, const char *path)
{
	dt_nn_params *p = NULL;
	int nt = dt_nn_model_num_tensors(m);
	dt_err err;

	if ((err = dt_nn_params_read(path, &p)))
		return err;
	if (p->ntensors != nt) {
		err = dt__fail(DT_ESIZE,
		               "%s has %d tensors, the model '%s' "
		               "has %d",
		               path, p->ntensors, dt_nn_model_spec(m), nt);
		goto out;
	}
	for (int i = 0; i < nt; i++)
		if ((err = same_tensor(path, &p->tensors[i], "the model",
		                       dt_nn_model_tensor(m, i), i)))
			goto out;
	for (int i = 0; i < nt; i++) {
		const dt_nn_tensor *t = dt_nn_model_tensor(m, i);

		memcpy(dt_nn_model_params(m) + t->offset,
		       p->data + p->tensors[i].offset, sizeof(float) * t->size);
	}
out:
	dt_nn_params_free(p);
	return err;
}

dt_err
dt_nn_params_compare(const dt_nn_params *a, const dt_nn_params *b,
                     dt_nn_params_diff *out)
{
	dt_nn_params_diff d;
	dt_err err;

	if (a->ntensors != b->ntensors)
		return dt__fail(DT_ESIZE,
		                "the files have %d and %d tensors: "
		                "not the same model",
		                a->ntensors, b->ntensors);
	for (int i = 0; i < a->ntensors; i++)
		if ((err = same_tensor("the first file", &a->tensors[i],
		                       "the second", &b->tensors[i], i)))
			return err;
	memset(&d, 0, sizeof(d));
	d.max_abs = -1.0;
	for (int i = 0; i < a->ntensors; i++) {
		const float *x = a->data + a->tensors[i].offset;
		const float *y = b->data + b->tensors[i].offset;

		for (size_t j = 0; j < a->tensors[i].size; j++) {
			double u = x[j], v = y[j], ad, rd, den;

			if (isnan(u) || isnan(v)) {
				ad = (isnan(u) && isnan(v)) ? 0.0 : INFINITY;
				rd = ad;
			} else {
				ad = fabs(u - v);
				den = DT_MAX(fabs(u), fabs(v));
				rd = den > 0.0 ? ad / den : 0.0;
			}
			if (rd > d.max_rel)
				d.max_rel = rd;
			if (ad > d.max_abs) {
				d.max_abs = ad;
				d.worst_tensor = i;
				d.worst_index = j;
				d.worst_a = x[j];
				d.worst_b = y[j];
			}
		}
	}
	if (d.max_abs < 0.0)
		d.max_abs = 0.0;
	*out = d;
	return DT_OK;
}
