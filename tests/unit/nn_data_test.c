/*
 * nn_data_test.c - data readers, the split sampler and the metrics.
 *
 * MNIST idx files go through temporary files both gzipped and plain: a
 * round trip, and the failures a user meets (missing file, wrong magic,
 * truncated or over-long files, image and label counts that differ, absurd
 * dimensions), each with the file named in the message. CSV: headers,
 * label columns, bad numbers and ragged rows. The sampler: equal batch
 * counts on every part, parts that together make exactly the global batch
 * of a single process, and per-epoch permutations shared by all parts.
 * The Speedometer line is checked character for character.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "dtrain/nn.h"

/* First indices of the permutation of seed 5, epoch 0 (portability). */
#define SAMPLER_FIRST0 41u
#define SAMPLER_FIRST1 209u

static char dir[256];

static int
setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/dtrain_nn_data_XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int
teardown(void **state)
{
	char cmd[300];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static const char *
path(const char *name)
{
	static char buf[4][512];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

static void
write_bytes(const char *p, const void *b, size_t n, int gz)
{
	if (gz) {
		gzFile f = gzopen(p, "wb");

		assert_non_null(f);
		assert_int_equal(gzwrite(f, b, (unsigned)n), (int)n);
		assert_int_equal(gzclose(f), Z_OK);
	} else {
		FILE *f = fopen(p, "wb");

		assert_non_null(f);
		assert_int_equal(fwrite(b, 1, n, f), n);
		assert_int_equal(fclose(f), 0);
	}
}

static void
write_text(const char *p, const char *text)
{
	write_bytes(p, text, strlen(text), 0);
}

/* An idx header: magic and big-endian dimensions. */
static size_t
idx_header(unsigned char *b, uint32_t magic, int nd, const uint32_t *d)
{
	size_t n = 0;

	for (int i = -1; i < nd; i++) {
		uint32_t v = i < 0 ? magic : d[i];

		b[n++] = (unsigned char)(v >> 24);
		b[n++] = (unsigned char)(v >> 16);
		b[n++] = (unsigned char)(v >> 8);
		b[n++] = (unsigned char)v;
	}
	return n;
}

static void
make_dataset(dt_dataset *d, size_t n, int h, int w)
{
	memset(d, 0, sizeof(*d));
	d->n = n;
	d->dim = (size_t)h * w;
	d->label_dim = 1;
	d->shape[0] = 1;
	d->shape[1] = h;
	d->shape[2] = w;
	d->x = malloc(sizeof(float) * n * d->dim);
	d->y = malloc(sizeof(float) * n);
	for (size_t i = 0; i < n * d->dim; i++)
		d->x[i] = (float)((i * 37) % 256) / 255.0f;
	for (size_t i = 0; i < n; i++)
		d->y[i] = (float)(i % 10);
}

static void
test_mnist_round_trip(void **state)
{
	const int gz[2] = {0, 1};

	(void)state;
	for (int k = 0; k < 2; k++) {
		dt_dataset d, e;
		const char *img = path(gz[k] ? "img.gz" : "img");
		const char *lab = path(gz[k] ? "lab.gz" : "lab");
		unsigned char head[4];
		FILE *f;

		make_dataset(&d, 7, 5, 4);
		assert_int_equal(dt_data_save_mnist(&d, img, lab), DT_OK);
		/* The files really are gzip or plain idx. */
		f = fopen(img, "rb");
		assert_non_null(f);
		assert_int_equal(fread(head, 1, 4, f), 4);
		fclose(f);
		if (gz[k]) {
			assert_int_equal(head[0], 0x1f);
			assert_int_equal(head[1], 0x8b);
		} else {
			assert_int_equal(head[2], 0x08);
			assert_int_equal(head[3], 0x03);
		}
		assert_int_equal(dt_data_load_mnist(img, lab, &e), DT_OK);
		assert_int_equal(e.n, 7);
		assert_int_equal(e.dim, 20);
		assert_int_equal(e.label_dim, 1);
		assert_int_equal(e.shape[0], 1);
		assert_int_equal(e.shape[1], 5);
		assert_int_equal(e.shape[2], 4);
		/* Pixels are k/255 exactly, so the trip is lossless. */
		assert_memory_equal(e.x, d.x, sizeof(float) * 7 * 20);
		assert_memory_equal(e.y, d.y, sizeof(float) * 7);
		dt_data_fini(&d);
		dt_data_fini(&e);
		assert_null(e.x);
		assert_int_equal(e.n, 0);
		dt_data_fini(&e); /* twice is fine */
	}
}

static void
expect_fail(const char *img, const char *lab, dt_err code, const char *frag)
{
	dt_dataset d;

	memset(&d, 0xff, sizeof(d));
	if (dt_data_load_mnist(img, lab, &d) != code)
		fail_msg("%s + %s: expected %s, got '%s'", img, lab,
		         dt_errname(code), dt_errmsg());
	assert_null(d.x);
	assert_null(d.y);
	assert_int_equal(d.n, 0);
	if (strstr(dt_errmsg(), frag) == NULL)
		fail_msg("message '%s' lacks '%s'", dt_errmsg(), frag);
}

static void
test_mnist_errors(void **state)
{
	unsigned char b[64 + 16];
	uint32_t d3[3] = {2, 4, 4}, d1[1] = {2};
	size_t n;
	char img[512], lab[512], lab3[512];

	(void)state;
	/* A good pair to mix with bad files. */
	snprintf(img, sizeof(img), "%s", path("good-img.gz"));
	snprintf(lab, sizeof(lab), "%s", path("good-lab"));
	n = idx_header(b, 0x803, 3, d3);
	memset(b + n, 7, 32);
	write_bytes(img, b, n + 32, 1);
	n = idx_header(b, 0x801, 1, d1);
	b[n] = 1;
	b[n + 1] = 2;
	write_bytes(lab, b, n + 2, 0);
	{
		dt_dataset d;

		assert_int_equal(dt_data_load_mnist(img, lab, &d), DT_OK);
		assert_int_equal(d.n, 2);
		assert_float_equal(d.x[0], 7.0 / 255, 1e-7);
		assert_float_equal(d.y[1], 2.0, 0);
		dt_data_fini(&d);
	}

	/* Missing file: DT_EIO naming it. */
	expect_fail(path("nope.gz"), lab, DT_EIO, "nope.gz");
	expect_fail(img, path("nolabels"), DT_EIO, "nolabels");

	/* Labels where images belong, and the other way round. */
	expect_fail(lab, img, DT_EFORMAT, "bad magic 0x00000801");
	expect_fail(img, img, DT_EFORMAT, "expected 0x00000801");

	/* Truncated payload, plain and gzipped. */
	n = idx_header(b, 0x803, 3, d3);
	write_bytes(path("short"), b, n + 20, 0);
	expect_fail(path("short"), lab, DT_EFORMAT, "truncated: 20 of 32");
	write_bytes(path("short.gz"), b, n + 20, 1);
	expect_fail(path("short.gz"), lab, DT_EFORMAT, "truncated");
	/* Truncated header. */
	write_bytes(path("hdr"), b, 6, 0);
	expect_fail(path("hdr"), lab, DT_EFORMAT, "truncated header");
	/* A corrupt gzip stream (cut in the middle). */
	{
		gzFile f;
		unsigned char big[4096];
		FILE *raw;
		long len;
		char *all;

		n = idx_header(big, 0x803, 3, (uint32_t[]){16, 16, 16});
		for (size_t i = n; i < sizeof(big); i++)
			big[i] = (unsigned char)(i * 131);
		f = gzopen(path("cut.gz"), "wb");
		gzwrite(f, big, sizeof(big));
		gzclose(f);
		raw = fopen(path("cut.gz"), "rb");
		fseek(raw, 0, SEEK_END);
		len = ftell(raw);
		rewind(raw);
		all = malloc((size_t)len);
		assert_int_equal(fread(all, 1, (size_t)len, raw), (size_t)len);
		fclose(raw);
		write_bytes(path("cut.gz"), all, (size_t)len / 2, 0);
		free(all);
		expect_fail(path("cut.gz"), lab, DT_EFORMAT, "cut.gz");
	}
	/* Longer than the header says. */
	n = idx_header(b, 0x803, 3, d3);
	write_bytes(path("long"), b, n + 33, 0);
	expect_fail(path("long"), lab, DT_EFORMAT, "longer than its header");
	/* Absurd dimensions are refused before any allocation. */
	n = idx_header(b, 0x803, 3, (uint32_t[]){4000000000u, 28, 28});
	write_bytes(path("huge"), b, n, 0);
	expect_fail(path("huge"), lab, DT_EFORMAT, "implausible");
	n = idx_header(b, 0x803, 3, (uint32_t[]){2, 0, 4});
	write_bytes(path("zero"), b, n, 0);
	expect_fail(path("zero"), lab, DT_EFORMAT, "implausible");
	/* Counts that differ. */
	snprintf(lab3, sizeof(lab3), "%s", path("lab3"));
	n = idx_header(b, 0x801, 1, (uint32_t[]){3});
	write_bytes(lab3, b, n + 3, 0);
	expect_fail(img, lab3, DT_ESIZE, "has 3 labels but");

	/* Saving refuses what idx cannot hold. */
	{
		dt_dataset d;

		make_dataset(&d, 2, 2, 2);
		d.y[1] = 3.5f;
		assert_int_equal(dt_data_save_mnist(&d, path("a"), path("b")),
		                 DT_EINVAL);
		d.y[1] = 1;
		d.shape[0] = 3;
		assert_int_equal(dt_data_save_mnist(&d, path("a"), path("b")),
		                 DT_EINVAL);
		dt_data_fini(&d);
	}
}

static void
test_fashion_mnist(void **state)
{
	const char *fm = "/usr/share/datasets/fashion-mnist";
	dt_dataset d;
	int counts[10] = {0};

	(void)state;
	if (access(fm, R_OK) != 0) {
		print_message("skipped: %s not installed\n", fm);
		return;
	}
	assert_int_equal(dt_data_load_mnist_dir(fm, 0, &d), DT_OK);
	assert_int_equal(d.n, 10000);
	assert_int_equal(d.dim, 784);
	for (size_t i = 0; i < d.n; i++) {
		assert_true(d.y[i] >= 0 && d.y[i] <= 9);
		counts[(int)d.y[i]]++;
	}
	for (int c = 0; c < 10; c++) /* the test set is balanced */
		assert_int_equal(counts[c], 1000);
	for (size_t i = 0; i < d.n * d.dim; i++)
		assert_true(d.x[i] >= 0.0f && d.x[i] <= 1.0f);
	dt_data_fini(&d);
	assert_int_equal(dt_data_load_mnist_dir("/nonexistent", 1, &d), DT_EIO);
	assert_non_null(strstr(dt_errmsg(), "/nonexistent/train-images"));
}

static void
test_csv(void **state)
{
	dt_dataset d;

	(void)state;
	/* Header, CRLF, blank lines, spaces, label last (x, y pairs). */
	write_text(path("lin.csv"), "x,y\r\n1, 7\r\n\r\n2,9\n 3 ,11\n\n");
	assert_int_equal(dt_data_load_csv(path("lin.csv"), -1, &d), DT_OK);
	assert_int_equal(d.n, 3);
	assert_int_equal(d.dim, 1);
	assert_float_equal(d.x[2], 3, 0);
	assert_float_equal(d.y[0], 7, 0);
	assert_float_equal(d.y[2], 11, 0);
	dt_data_fini(&d);
	/* Label first (Kaggle MNIST), no header, gzipped. */
	{
		const char *t = "5,0.5,1e-3,-2\n3,1,2,3\n";

		write_bytes(path("m.csv.gz"), t, strlen(t), 1);
	}
	assert_int_equal(dt_data_load_csv(path("m.csv.gz"), 0, &d), DT_OK);
	assert_int_equal(d.n, 2);
	assert_int_equal(d.dim, 3);
	assert_float_equal(d.y[0], 5, 0);
	assert_float_equal(d.x[1], 1e-3, 1e-9);
	assert_float_equal(d.x[5], 3, 0);
	dt_data_fini(&d);
	/* A middle label column. */
	assert_int_equal(dt_data_load_csv(path("m.csv.gz"), 2, &d), DT_OK);
	assert_float_equal(d.y[0], 1e-3, 1e-9);
	assert_float_equal(d.x[0], 5, 0);
	assert_float_equal(d.x[1], 0.5, 0);
	dt_data_fini(&d);

	write_text(path("bad.csv"), "a,b\n1,2\n3,abc\n");
	assert_int_equal(dt_data_load_csv(path("bad.csv"), -1, &d), DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "line 3 column 2: 'abc'"));
	assert_null(d.x);
	write_text(path("ragged.csv"), "1,2,3\n4,5\n");
	assert_int_equal(dt_data_load_csv(path("ragged.csv"), -1, &d),
	                 DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "line 2: 2 columns, expected 3"));
	write_text(path("one.csv"), "1\n2\n");
	assert_int_equal(dt_data_load_csv(path("one.csv"), -1, &d), DT_EFORMAT);
	write_text(path("empty.csv"), "h1,h2\n\n");
	assert_int_equal(dt_data_load_csv(path("empty.csv"), -1, &d),
	                 DT_EFORMAT);
	assert_non_null(strstr(dt_errmsg(), "no data rows"));
	assert_int_equal(dt_data_load_csv(path("lin.csv"), 5, &d), DT_EINVAL);
	assert_int_equal(dt_data_load_csv(path("missing.csv"), 0, &d), DT_EIO);
	assert_non_null(strstr(dt_errmsg(), "missing.csv"));
}

static void
test_gather(void **state)
{
	dt_dataset d;
	size_t idx[3] = {4, 0, 4};
	float x[3 * 6], y[3];

	(void)state;
	make_dataset(&d, 5, 2, 3);
	assert_int_equal(dt_data_gather(&d, idx, 3, x, y), DT_OK);
	assert_memory_equal(x, d.x + 4 * 6, sizeof(float) * 6);
	assert_memory_equal(x + 6, d.x, sizeof(float) * 6);
	assert_float_equal(y[0], 4, 0);
	assert_float_equal(y[1], 0, 0);
	idx[1] = 5;
	assert_int_equal(dt_data_gather(&d, idx, 3, x, NULL), DT_EINVAL);
	dt_data_fini(&d);
}

/* ---- sampler ---- */

/* Every part of an (n, batch, parts) split has the same number of full
 * batches, floor(n / (batch * parts)), of valid indices. */
static void
check_counts(size_t n, size_t batch, int parts)
{
	size_t want = n / (batch * (size_t)parts);

	for (int r = 0; r < parts; r++) {
		dt_sampler *s;
		const size_t *idx;

		assert_int_equal(
		    dt_sampler_create(n, batch, parts, r, 11, 1, &s), DT_OK);
		assert_int_equal(dt_sampler_num_batches(s), want);
		for (size_t b = 0; b < want; b++) {
			assert_int_equal(dt_sampler_batch(s, b, &idx), DT_OK);
			for (size_t i = 0; i < batch; i++)
				assert_true(idx[i] < n);
		}
		assert_int_equal(dt_sampler_batch(s, want, &idx), DT_EINVAL);
		dt_sampler_destroy(s);
	}
}

static void
test_sampler_equal_counts(void **state)
{
	const size_t ns[] = {60000, 1000, 999, 97, 10, 7};
	const size_t bs[] = {1, 3, 32, 64};
	const int parts[] = {1, 2, 3, 4, 7};

	(void)state;
	for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
		for (size_t b = 0; b < sizeof(bs) / sizeof(bs[0]); b++)
			for (size_t c = 0; c < 5; c++)
				check_counts(ns[a], bs[b], parts[c]);
	/* 60000 samples for 7 workers at batch 4: split by rank ranges
	 * [r*n/7, (r+1)*n/7) the shares are 8571 or 8572 samples, 2142 or
	 * 2143 full batches, and in dist_sync the workers with the extra
	 * batch would wait forever. Here every worker has 2142. */
	check_counts(60000, 4, 7);
}

/* The parts of each global batch, put side by side, are the batch a
 * single process sampling batch * parts sees; and no index repeats within
 * an epoch. */
static void
test_sampler_parts_make_global_batch(void **state)
{
	const size_t n = 1000, B = 16;
	const int P = 3;
	dt_sampler *one, *part[3];
	char *seen = calloc(n, 1);

	(void)state;
	assert_int_equal(dt_sampler_create(n, B * P, 1, 0, 99, 1, &one), DT_OK);
	for (int r = 0; r < P; r++)
		assert_int_equal(dt_sampler_create(n, B, P, r, 99, 1, &part[r]),
		                 DT_OK);
	for (uint64_t epoch = 0; epoch < 3; epoch++) {
		assert_int_equal(dt_sampler_set_epoch(one, epoch), DT_OK);
		for (int r = 0; r < P; r++)
			assert_int_equal(dt_sampler_set_epoch(part[r], epoch),
			                 DT_OK);
		assert_int_equal(dt_sampler_num_batches(one),
		                 dt_sampler_num_batches(part[0]));
		memset(seen, 0, n);
		for (size_t b = 0; b < dt_sampler_num_batches(one); b++) {
			const size_t *g, *p;

			assert_int_equal(dt_sampler_batch(one, b, &g), DT_OK);
			for (int r = 0; r < P; r++) {
				assert_int_equal(
				    dt_sampler_batch(part[r], b, &p), DT_OK);
				assert_memory_equal(p, g + r * B,
				                    sizeof(size_t) * B);
				for (size_t i = 0; i < B; i++) {
					assert_int_equal(seen[p[i]], 0);
					seen[p[i]] = 1;
				}
			}
		}
	}
	for (int r = 0; r < P; r++)
		dt_sampler_destroy(part[r]);
	dt_sampler_destroy(one);
	free(seen);
}

/* Elastic training: 4 parts deal the first 10 global batches, then 3
 * parts deal the rest of the epoch from that position: no sample twice,
 * none left out but the tail under one global batch of 3; the parts stay
 * slices of the permutation. */
static void
test_sampler_reshard(void **state)
{
	const size_t n = 1000, B = 8;
	dt_sampler *s[4];
	char *seen = calloc(n, 1);
	size_t pos = 0, never = 0;

	(void)state;
	for (int r = 0; r < 4; r++)
		assert_int_equal(dt_sampler_create(n, B, 4, r, 5, 1, &s[r]),
		                 DT_OK);
	for (size_t b = 0; b < 10; b++)
		for (int r = 0; r < 4; r++) {
			const size_t *p;

			assert_int_equal(dt_sampler_batch(s[r], b, &p), DT_OK);
			for (size_t i = 0; i < B; i++)
				seen[p[i]]++;
		}
	pos = dt_sampler_position(s[0], 9);
	assert_int_equal(pos, 10 * 4 * B);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(dt_sampler_reshard(s[r], 3, r, pos), DT_OK);
		assert_int_equal(dt_sampler_num_batches(s[r]),
		                 (n - pos) / (3 * B));
	}
	for (size_t b = 0; b < dt_sampler_num_batches(s[0]); b++)
		for (int r = 0; r < 3; r++) {
			const size_t *p;

			assert_int_equal(dt_sampler_batch(s[r], b, &p), DT_OK);
			for (size_t i = 0; i < B; i++)
				seen[p[i]]++;
		}
	for (size_t i = 0; i < n; i++) {
		assert_true(seen[i] <= 1);
		never += seen[i] == 0;
	}
	assert_true(never < 3 * B);
	assert_int_equal(dt_sampler_reshard(s[0], 3, 3, 0), DT_EINVAL);
	assert_int_equal(dt_sampler_reshard(s[0], 3, 0, n + 1), DT_EINVAL);
	/* The next epoch starts at 0 with the parts given last. */
	assert_int_equal(dt_sampler_set_epoch(s[1], 1), DT_OK);
	assert_int_equal(dt_sampler_num_batches(s[1]), n / (3 * B));
	for (int r = 0; r < 4; r++)
		dt_sampler_destroy(s[r]);
	free(seen);
}

static void
test_sampler_epochs(void **state)
{
	const size_t n = 500;
	dt_sampler *a, *b, *c, *plain;
	const size_t *x, *y;
	size_t same = 0;

	(void)state;
	assert_int_equal(dt_sampler_create(n, 10, 2, 0, 5, 1, &a), DT_OK);
	assert_int_equal(dt_sampler_create(n, 10, 2, 0, 5, 1, &b), DT_OK);
	assert_int_equal(dt_sampler_create(n, 10, 2, 0, 6, 1, &c), DT_OK);
	assert_int_equal(dt_sampler_create(n, 10, 2, 1, 5, 0, &plain), DT_OK);
	/* Same (seed, epoch): same batches, whenever it is drawn. */
	assert_int_equal(dt_sampler_set_epoch(a, 4), DT_OK);
	assert_int_equal(dt_sampler_set_epoch(b, 1), DT_OK);
	assert_int_equal(dt_sampler_set_epoch(b, 4), DT_OK);
	assert_int_equal(dt_sampler_batch(a, 3, &x), DT_OK);
	assert_int_equal(dt_sampler_batch(b, 3, &y), DT_OK);
	assert_memory_equal(x, y, sizeof(size_t) * 10);
	/* Another epoch or seed: another order. */
	assert_int_equal(dt_sampler_set_epoch(b, 5), DT_OK);
	assert_int_equal(dt_sampler_batch(b, 3, &y), DT_OK);
	assert_memory_not_equal(x, y, sizeof(size_t) * 10);
	assert_int_equal(dt_sampler_set_epoch(c, 4), DT_OK);
	assert_int_equal(dt_sampler_batch(c, 3, &y), DT_OK);
	assert_memory_not_equal(x, y, sizeof(size_t) * 10);
	/* A shuffle moves most indices. */
	for (size_t bi = 0; bi < dt_sampler_num_batches(a); bi++) {
		assert_int_equal(dt_sampler_batch(a, bi, &x), DT_OK);
		for (size_t i = 0; i < 10; i++)
			same += x[i] == bi * 20 + i;
	}
	assert_true(same < 20);
	/* Without shuffling, part 1 takes the second slice of each global
	 * batch. */
	assert_int_equal(dt_sampler_batch(plain, 2, &x), DT_OK);
	for (size_t i = 0; i < 10; i++)
		assert_int_equal(x[i], 2 * 20 + 10 + i);
	/* The portable PRNG gives this permutation on every machine. */
	assert_int_equal(dt_sampler_set_epoch(a, 0), DT_OK);
	assert_int_equal(dt_sampler_batch(a, 0, &x), DT_OK);
	print_message("sampler seed 5 epoch 0 starts %zu %zu %zu\n", x[0], x[1],
	              x[2]);
	assert_int_equal(x[0], SAMPLER_FIRST0);
	assert_int_equal(x[1], SAMPLER_FIRST1);
	dt_sampler_destroy(a);

	assert_int_equal(dt_sampler_create(0, 10, 1, 0, 1, 1, &a), DT_EINVAL);
	assert_null(a);
	assert_int_equal(dt_sampler_create(10, 10, 2, 2, 1, 1, &a), DT_EINVAL);
	assert_int_equal(dt_sampler_create(10, 0, 1, 0, 1, 1, &a), DT_EINVAL);
	dt_sampler_destroy(b);
	dt_sampler_destroy(c);
	dt_sampler_destroy(plain);
	assert_int_equal(dt_sampler_create(n, 10, 2, 0, 5, 1, &a), DT_OK);
	dt_sampler_destroy(a);
}

/* ---- metrics ---- */

static void
test_metrics(void **state)
{
	dt_metric acc, mae;
	const float out[3 * 4] = {0.1f, 0.9f, 0.0f, 0.0f,  /* 1 */
	                          2.0f, 1.0f, 3.0f, -1.f,  /* 2 */
	                          5.0f, 5.0f, 0.0f, 0.0f}; /* tie: 0 */
	const float lab[3] = {1, 0, 0};
	const float pred[4] = {1, 2, 3, 4}, tgt[4] = {1.5f, 2, 2, 4};

	(void)state;
	assert_int_equal(dt_metric_init(&acc, "accuracy"), DT_OK);
	assert_float_equal(dt_metric_get(&acc), 0, 0);
	assert_int_equal(dt_metric_update(&acc, out, lab, 3, 4), DT_OK);
	assert_float_equal(dt_metric_get(&acc), 2.0 / 3.0, 1e-12);
	dt_metric_add(&acc, 1, 1);
	assert_float_equal(dt_metric_get(&acc), 0.75, 1e-12);
	assert_string_equal(dt_metric_name(&acc), "accuracy");
	dt_metric_reset(&acc);
	assert_float_equal(dt_metric_get(&acc), 0, 0);
	assert_int_equal(dt_metric_init(&mae, "mae"), DT_OK);
	assert_int_equal(dt_metric_update(&mae, pred, tgt, 2, 2), DT_OK);
	assert_float_equal(dt_metric_get(&mae), 1.5 / 4, 1e-12);
	assert_int_equal(dt_metric_init(&mae, "f1"), DT_EINVAL);
}

static void
test_speedometer(void **state)
{
	dt_speedometer sp;
	dt_metric acc;
	int printed, lines = 0;
	char text[1024] = "";
	FILE *f = tmpfile();

	(void)state;
	assert_non_null(f);
	assert_int_equal(dt_speedometer_init(&sp, 64, 2, f), DT_OK);
	assert_int_equal(dt_metric_init(&acc, "accuracy"), DT_OK);
	for (long nb = 0; nb < 5; nb++) {
		dt_metric_add(&acc, 3, 4);
		assert_int_equal(
		    dt_speedometer_update(&sp, 0, nb, &acc, &printed), DT_OK);
		assert_int_equal(printed, nb == 2 || nb == 4);
		if (printed) {
			lines++;
			/* The metric is reset after each line. */
			assert_float_equal(dt_metric_get(&acc), 0, 0);
		}
		usleep(1000);
	}
	assert_int_equal(lines, 2);
	/* A new epoch restarts timing: nothing printed at its batch 0. */
	assert_int_equal(dt_speedometer_update(&sp, 1, 0, &acc, &printed),
	                 DT_OK);
	assert_int_equal(printed, 0);
	rewind(f);
	assert_true(fread(text, 1, sizeof(text) - 1, f) > 0);
	fclose(f);
	{
		int e, a, b;
		double speed, val;

		/* Epoch[0] Batch [0-2] Speed: 2248.71 samples/sec
		 * accuracy=0.750000 */
		assert_int_equal(sscanf(text,
		                        "Epoch[%d] Batch [%d-%d] Speed: %lf "
		                        "samples/sec accuracy=%lf",
		                        &e, &a, &b, &speed, &val),
		                 5);
		assert_int_equal(e, 0);
		assert_int_equal(a, 0);
		assert_int_equal(b, 2);
		/* 2 batches of 64 in a bit over 2 ms. */
		assert_true(speed > 100 && speed < 128000);
		assert_float_equal(val, 0.75, 1e-9);
		assert_non_null(strstr(text, " samples/sec accuracy=0.750000\n"
		                             "Epoch[0] Batch [2-4] Speed: "));
	}
	/* The exact format, with a known speed. */
	assert_int_equal(dt_speedometer_init(&sp, 100, 50, NULL), DT_OK);
	{
		char want[] = "Epoch[3] Batch [0-50] Speed: ";

		dt_metric_add(&acc, 583640, 1000000);
		assert_int_equal(dt_speedometer_update(&sp, 3, 0, &acc, NULL),
		                 DT_OK);
		assert_int_equal(
		    dt_speedometer_update(&sp, 3, 50, &acc, &printed), DT_OK);
		assert_int_equal(printed, 1);
		assert_memory_equal(sp.line, want, strlen(want));
		assert_non_null(
		    strstr(sp.line, " samples/sec accuracy=0.583640"));
		assert_int_equal(sp.line[strlen(sp.line) - 1], '0');
	}
	assert_int_equal(dt_speedometer_init(&sp, 0, 50, NULL), DT_EINVAL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mnist_round_trip),
	    cmocka_unit_test(test_mnist_errors),
	    cmocka_unit_test(test_fashion_mnist),
	    cmocka_unit_test(test_csv),
	    cmocka_unit_test(test_gather),
	    cmocka_unit_test(test_sampler_equal_counts),
	    cmocka_unit_test(test_sampler_parts_make_global_batch),
	    cmocka_unit_test(test_sampler_epochs),
	    cmocka_unit_test(test_sampler_reshard),
	    cmocka_unit_test(test_metrics),
	    cmocka_unit_test(test_speedometer),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
