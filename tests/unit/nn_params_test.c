/*
 * nn_params_test.c - parameter files and `dtrain params diff`.
 *
 * Save and load round trips bit for bit; the layout on disk is the one
 * docs/training.md documents; damaged files (flipped byte, truncation,
 * wrong magic, fields that lie under a valid CRC) are refused with
 * DT_EFORMAT; files of another model with DT_ESIZE, leaving the model
 * untouched. The comparison and the CLI are checked on files that differ
 * by known amounts. The CLI source is compiled into this test, so it runs
 * without the `dtrain` binary.
 */
#include <fcntl.h>
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

#include "cli/params.c"

static char dir[256];

static int
setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/dtrain_nn_params_XXXXXX");
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
	static char buf[8][512];
	static int k;

	k = (k + 1) % 8;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

static unsigned char *
slurp(const char *p, size_t *len)
{
	FILE *f = fopen(p, "rb");
	unsigned char *b;
	long n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	b = malloc((size_t)n + 1);
	assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

static void
spit(const char *p, const void *b, size_t n)
{
	FILE *f = fopen(p, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, n, f), n);
	fclose(f);
}

/* Rewrite the trailing CRC so only the field checks can object. */
static void
fix_crc(unsigned char *b, size_t n)
{
	uLong c = crc32(0L, b, (uInt)(n - 4));

	for (int i = 0; i < 4; i++)
		b[n - 4 + i] = (unsigned char)(c >> (8 * i));
}

static void
test_round_trip_and_layout(void **state)
{
	dt_nn_model *a, *b;
	dt_nn_params *p;
	unsigned char *raw;
	size_t len, want = 8 + 4 + 4 + 4;

	(void)state;
	assert_int_equal(dt_nn_model_create("lenet", 1, &a), DT_OK);
	assert_int_equal(dt_nn_model_create("lenet", 2, &b), DT_OK);
	assert_int_equal(dt_nn_params_save(a, path("a.params")), DT_OK);
	assert_int_equal(dt_nn_params_load(b, path("a.params")), DT_OK);
	assert_memory_equal(dt_nn_model_params(a), dt_nn_model_params(b),
	                    sizeof(float) * dt_nn_model_num_params(a));
	/* No temporary file is left behind. */
	assert_int_equal(access(path("a.params.tmp"), F_OK), -1);

	assert_int_equal(dt_nn_params_read(path("a.params"), &p), DT_OK);
	assert_int_equal(dt_nn_params_num_tensors(p), 8);
	for (int i = 0; i < 8; i++) {
		const dt_nn_tensor *t = dt_nn_params_tensor(p, i);
		const dt_nn_tensor *u = dt_nn_model_tensor(a, i);

		assert_string_equal(t->name, u->name);
		assert_int_equal(t->ndim, u->ndim);
		assert_memory_equal(t->shape, u->shape, sizeof(int) * t->ndim);
		assert_int_equal(t->size, u->size);
		assert_memory_equal(dt_nn_params_data(p) + t->offset,
		                    dt_nn_model_params(a) + u->offset,
		                    sizeof(float) * t->size);
		want += 2 + strlen(t->name) + 4 + 4 * (size_t)t->ndim + 8 +
		        4 * t->size;
	}
	assert_null(dt_nn_params_tensor(p, 8));
	dt_nn_params_free(p);

	/* The documented layout: magic, version 1, count 8, then the first
	 * tensor "conv0_weight" (20, 1, 5, 5), little-endian. */
	raw = slurp(path("a.params"), &len);
	assert_int_equal(len, want);
	assert_memory_equal(raw, "DTPARAMS", 8);
	assert_memory_equal(raw + 8, "\x01\0\0\0\x08\0\0\0", 8);
	assert_memory_equal(raw + 16, "\x0c\0conv0_weight", 14);
	assert_memory_equal(raw + 30, "\x04\0\0\0\x14\0\0\0\x01\0\0\0", 12);
	assert_memory_equal(raw + 42, "\x05\0\0\0\x05\0\0\0", 8);
	assert_memory_equal(raw + 50, "\xf4\x01\0\0\0\0\0\0", 8); /* 500 */
	{
		float f0 = dt_nn_model_params(a)[0];
		uint32_t u;

		memcpy(&u, &f0, 4);
		assert_int_equal(raw[58] | raw[59] << 8 | raw[60] << 16 |
		                     (uint32_t)raw[61] << 24,
		                 u);
	}
	free(raw);
	dt_nn_model_destroy(a);
	dt_nn_model_destroy(b);
}

static void
expect_bad(const char *p, dt_err code, const char *frag)
{
	dt_nn_params *q = (dt_nn_params *)1;

	assert_int_equal(dt_nn_params_read(p, &q), code);
	assert_null(q);
	if (strstr(dt_errmsg(), frag) == NULL)
		fail_msg("message '%s' lacks '%s'", dt_errmsg(), frag);
}

static void
test_corrupt_files(void **state)
{
	dt_nn_model *m;
	unsigned char *raw, *b;
	size_t len;

	(void)state;
	assert_int_equal(dt_nn_model_create("mlp", 1, &m), DT_OK);
	assert_int_equal(dt_nn_params_save(m, path("m.params")), DT_OK);
	raw = slurp(path("m.params"), &len);
	b = malloc(len);

	/* One flipped bit in the data. */
	memcpy(b, raw, len);
	b[len / 2] ^= 0x10;
	spit(path("flip"), b, len);
	expect_bad(path("flip"), DT_EFORMAT, "CRC mismatch");
	/* Truncated, at several places. */
	spit(path("cut"), raw, len - 1);
	expect_bad(path("cut"), DT_EFORMAT, "CRC");
	spit(path("cut2"), raw, 10);
	expect_bad(path("cut2"), DT_EFORMAT, "truncated");
	spit(path("empty"), raw, 0);
	expect_bad(path("empty"), DT_EFORMAT, "bad magic");
	/* Not a parameter file at all. */
	spit(path("text"), "hello world, this is not it", 27);
	expect_bad(path("text"), DT_EFORMAT, "bad magic");
	expect_bad(path("missing"), DT_EIO, "missing");
	expect_bad(dir, DT_EIO, "not a regular file");

	/* Fields that lie under a valid CRC. */
	memcpy(b, raw, len);
	b[8] = 2; /* version */
	fix_crc(b, len);
	spit(path("v2"), b, len);
	expect_bad(path("v2"), DT_EFORMAT, "version 2");
	memcpy(b, raw, len);
	b[12] = 0xff; /* tensor count 0x...ff */
	b[13] = 0xff;
	b[14] = 0xff;
	fix_crc(b, len);
	spit(path("count"), b, len);
	expect_bad(path("count"), DT_EFORMAT, "tensors");
	memcpy(b, raw, len);
	b[16] = 0; /* name length 0 */
	fix_crc(b, len);
	spit(path("noname"), b, len);
	expect_bad(path("noname"), DT_EFORMAT, "name");
	/* First tensor dense0_weight: 2 + 13 name bytes, ndim at 31, dims
	 * at 35 and 39, count at 43. */
	memcpy(b, raw, len);
	assert_memory_equal(b + 18, "dense0_weight", 13);
	b[35] = 129; /* 128 -> 129 rows: count no longer matches */
	fix_crc(b, len);
	spit(path("shape"), b, len);
	expect_bad(path("shape"), DT_EFORMAT, "does not match its shape");
	memcpy(b, raw, len);
	b[31] = 9; /* ndim 9 */
	fix_crc(b, len);
	spit(path("ndim"), b, len);
	expect_bad(path("ndim"), DT_EFORMAT, "dimension count");
	/* Trailing bytes (with a valid CRC over them). */
	{
		unsigned char *c = malloc(len + 3);

		memcpy(c, raw, len - 4);
		memset(c + len - 4, 0, 3);
		fix_crc(c, len + 3);
		spit(path("trail"), c, len + 3);
		expect_bad(path("trail"), DT_EFORMAT, "unexpected bytes");
		free(c);
	}
	free(raw);
	free(b);
	dt_nn_model_destroy(m);
}

static void
test_load_other_model(void **state)
{
	dt_nn_model *a, *b;
	float first;

	(void)state;
	assert_int_equal(dt_nn_model_create("lenet", 1, &a), DT_OK);
	assert_int_equal(dt_nn_model_create("lenet-tanh", 1, &b), DT_OK);
	assert_int_equal(dt_nn_params_save(a, path("lenet.params")), DT_OK);
	/* Same names and shapes: loads (the activation is not stored). */
	assert_int_equal(dt_nn_params_load(b, path("lenet.params")), DT_OK);
	dt_nn_model_destroy(b);
	assert_int_equal(dt_nn_model_create("mlp", 1, &b), DT_OK);
	first = dt_nn_model_params(b)[0];
	assert_int_equal(dt_nn_params_load(b, path("lenet.params")), DT_ESIZE);
	assert_non_null(strstr(dt_errmsg(), "has 8 tensors"));
	assert_true(dt_nn_model_params(b)[0] == first);
	dt_nn_model_destroy(b);
	assert_int_equal(dt_nn_model_create("input:1x28x28,conv:20:5,"
	                                    "maxpool:2,relu,conv:50:5,"
	                                    "maxpool:2,relu,dense:400,relu,"
	                                    "dense:10,softmax_ce",
	                                    1, &b),
	                 DT_OK);
	assert_int_equal(dt_nn_params_load(b, path("lenet.params")), DT_ESIZE);
	assert_non_null(strstr(dt_errmsg(), "dense0_weight (500x800)"));
	assert_non_null(strstr(dt_errmsg(), "(400x800)"));
	dt_nn_model_destroy(a);
	dt_nn_model_destroy(b);
}

/* Write lenet seed 1 with changes: element 123 of dense0_weight set to
 * 1.0 in A and 1.5 in B, and a tiny change elsewhere. */
static void
write_pair(const char *pa, const char *pb)
{
	dt_nn_model *m;
	float *buf;
	size_t n;
	const dt_nn_tensor *t;

	assert_int_equal(dt_nn_model_create("lenet", 1, &m), DT_OK);
	n = dt_nn_model_num_params(m);
	t = dt_nn_model_tensor(m, 4);
	assert_string_equal(t->name, "dense0_weight");
	buf = malloc(sizeof(float) * n);
	memcpy(buf, dt_nn_model_params(m), sizeof(float) * n);
	buf[t->offset + 123] = 1.0f;
	assert_int_equal(
	    dt_nn_params_write(pa, dt_nn_model_tensor(m, 0), 8, buf), DT_OK);
	buf[t->offset + 123] = 1.5f;
	buf[7] += 1e-3f;
	assert_int_equal(
	    dt_nn_params_write(pb, dt_nn_model_tensor(m, 0), 8, buf), DT_OK);
	free(buf);
	dt_nn_model_destroy(m);
}

static void
test_compare(void **state)
{
	dt_nn_params *a, *b, *c;
	dt_nn_params_diff d;
	dt_nn_model *m;

	(void)state;
	write_pair(path("A"), path("B"));
	assert_int_equal(dt_nn_params_read(path("A"), &a), DT_OK);
	assert_int_equal(dt_nn_params_read(path("B"), &b), DT_OK);
	assert_int_equal(dt_nn_params_compare(a, a, &d), DT_OK);
	assert_float_equal(d.max_abs, 0, 0);
	assert_float_equal(d.max_rel, 0, 0);
	assert_int_equal(dt_nn_params_compare(a, b, &d), DT_OK);
	assert_float_equal(d.max_abs, 0.5, 0);
	assert_float_equal(d.max_rel, 0.5 / 1.5, 1e-12);
	assert_int_equal(d.worst_tensor, 4);
	assert_int_equal(d.worst_index, 123);
	assert_float_equal(d.worst_a, 1.0, 0);
	assert_float_equal(d.worst_b, 1.5, 0);
	/* Another model is not comparable. */
	assert_int_equal(dt_nn_model_create("mlp", 1, &m), DT_OK);
	assert_int_equal(dt_nn_params_save(m, path("mlp.params")), DT_OK);
	assert_int_equal(dt_nn_params_read(path("mlp.params"), &c), DT_OK);
	assert_int_equal(dt_nn_params_compare(a, c, &d), DT_ESIZE);
	dt_nn_params_free(c);
	/* A NaN against a number is an infinite difference. */
	dt_nn_model_params(m)[3] = NAN;
	assert_int_equal(dt_nn_params_save(m, path("mlp-nan.params")), DT_OK);
	assert_int_equal(dt_nn_params_read(path("mlp.params"), &c), DT_OK);
	{
		dt_nn_params *e;

		assert_int_equal(dt_nn_params_read(path("mlp-nan.params"), &e),
		                 DT_OK);
		assert_int_equal(dt_nn_params_compare(c, e, &d), DT_OK);
		assert_true(isinf(d.max_abs));
		assert_int_equal(d.worst_index, 3);
		assert_int_equal(dt_nn_params_compare(e, e, &d), DT_OK);
		assert_float_equal(d.max_abs, 0, 0);
		dt_nn_params_free(e);
	}
	dt_nn_params_free(c);
	dt_nn_model_destroy(m);
	dt_nn_params_free(a);
	dt_nn_params_free(b);
}

/* Run `dtrain params ...`, capturing stdout and stderr. */
static int
run_cli(char *out, size_t outlen, char *err, size_t errlen, int argc, ...)
{
	char *argv[16];
	va_list ap;
	int o = dup(1), e = dup(2), fo, fe, rc;
	ssize_t n;

	va_start(ap, argc);
	for (int i = 0; i < argc; i++)
		argv[i] = va_arg(ap, char *);
	va_end(ap);
	argv[argc] = NULL;
	fflush(stdout);
	fflush(stderr);
	fo = open(path("cli.out"), O_RDWR | O_CREAT | O_TRUNC, 0600);
	fe = open(path("cli.err"), O_RDWR | O_CREAT | O_TRUNC, 0600);
	dup2(fo, 1);
	dup2(fe, 2);
	rc = dt__cli_params(argc, argv);
	fflush(stdout);
	fflush(stderr);
	dup2(o, 1);
	dup2(e, 2);
	close(o);
	close(e);
	lseek(fo, 0, SEEK_SET);
	n = read(fo, out, outlen - 1);
	out[n > 0 ? n : 0] = '\0';
	lseek(fe, 0, SEEK_SET);
	n = read(fe, err, errlen - 1);
	err[n > 0 ? n : 0] = '\0';
	close(fo);
	close(fe);
	return rc;
}

static void
test_cli_diff(void **state)
{
	char out[4096], err[4096], a[512], b[512], m[512];
	dt_nn_model *mlp;

	(void)state;
	snprintf(a, sizeof(a), "%s", path("cA"));
	snprintf(b, sizeof(b), "%s", path("cB"));
	snprintf(m, sizeof(m), "%s", path("cM"));
	write_pair(a, b);
	assert_int_equal(dt_nn_model_create("mlp", 1, &mlp), DT_OK);
	assert_int_equal(dt_nn_params_save(mlp, m), DT_OK);
	dt_nn_model_destroy(mlp);

	assert_int_equal(run_cli(out, sizeof(out), err, sizeof(err), 4,
	                         "params", "diff", a, a),
	                 0);
	assert_string_equal(out, "max_abs=0 max_rel=0\nidentical\n");
	assert_int_equal(run_cli(out, sizeof(out), err, sizeof(err), 4,
	                         "params", "diff", a, b),
	                 0);
	assert_non_null(strstr(out, "max_abs=0.5 max_rel=0.333333333\n"));
	assert_non_null(strstr(out, "most different: dense0_weight (500x800) "
	                            "element 123: 1 vs 1.5\n"));
	/* Tolerances turn a difference into exit status 1. */
	assert_int_equal(run_cli(out, sizeof(out), err, sizeof(err), 6,
	                         "params", "diff", "--atol", "0.1", a, b),
	                 1);
	assert_non_null(strstr(err, "over the tolerance"));
	assert_int_equal(run_cli(out, sizeof(out), err, sizeof(err), 6,
	                         "params", "diff", "--atol", "0.5", a, b),
	                 0);
	/* Different models, bad files, bad usage: 2 with a message. */
	assert_int_equal(run_cli(out, sizeof(out), err, sizeof(err), 4,
	                         "params", "diff", a, m),
	                 2);
	assert_non_null(strstr(err, "not comparable"));
	assert_int_equal(run_cli(out, sizeof(out), err, sizeof(err), 4,
	                         "params", "diff", a, "/nonexistent/p"),
	                 2);
	assert_non_null(strstr(err, "/nonexistent/p: cannot open"));
	assert_int_equal(
	    run_cli(out, sizeof(out), err, sizeof(err), 3, "params", "diff", a),
	    2);
	assert_non_null(strstr(err, "usage"));
	assert_int_equal(run_cli(out, sizeof(out), err, sizeof(err), 6,
	                         "params", "diff", "--atol", "x", a, b),
	                 2);
	assert_int_equal(
	    run_cli(out, sizeof(out), err, sizeof(err), 2, "params", "frob"),
	    2);
	assert_int_equal(
	    run_cli(out, sizeof(out), err, sizeof(err), 1, "params"), 2);
	/* show lists the tensors. */
	assert_int_equal(
	    run_cli(out, sizeof(out), err, sizeof(err), 3, "params", "show", m),
	    0);
	assert_non_null(strstr(out, "6 tensors, 109386 floats"));
	assert_non_null(strstr(out, "dense0_weight"));
	assert_non_null(strstr(out, "128x784"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip_and_layout),
	    cmocka_unit_test(test_corrupt_files),
	    cmocka_unit_test(test_load_other_model),
	    cmocka_unit_test(test_compare),
	    cmocka_unit_test(test_cli_diff),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
