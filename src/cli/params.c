/*
 * params.c - `dtrain params`: look at and compare saved parameter files.
 *
 *   dtrain params diff [--atol X] [--rtol Y] A B
 *       prints "max_abs=<v> max_rel=<v>" and the tensor that differs most.
 *       Exit 0 when the files are comparable (same tensors and shapes),
 *       2 on bad usage, unreadable or corrupt files, or files of different
 *       models. With --atol/--rtol, exit 1 when a difference exceeds them.
 *   dtrain params show FILE
 *       lists the tensors of a file with their shapes and norms.
 *   dtrain params join OUT FILE...
 *       writes one file with the tensors of every FILE, in order: the
 *       stage files of a pipeline run make the whole model's file.
 *
 * The file format and the comparison live in src/nn/params_io.c; this file
 * only parses arguments and prints.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"
#include "dtrain/nn.h"

/* A name or message from a file as one safe line for a terminal: a
 * tensor named "\x1b]0;..." must not reach it raw (common/util.h). */
static const char *
esc(const char *s)
{
	static char buf[4][1100];
	static int next;
	char *b = buf[next++ % 4];

	return dt__escape(s, strlen(s), b, sizeof(buf[0]));
}

static void
usage(FILE *f)
{
	fputs("usage: dtrain params diff [--atol X] [--rtol Y] A B\n"
	      "       dtrain params show FILE\n"
	      "       dtrain params join OUT FILE...\n"
	      "\n"
	      "diff prints max_abs=<v> max_rel=<v> over all elements of two\n"
	      "parameter files of the same model, and the tensor that\n"
	      "differs most. Exit status: 0 comparable, 1 a difference over\n"
	      "--atol/--rtol, 2 bad usage, bad files or different models.\n"
	      "\n"
	      "join writes OUT with the tensors of every FILE in the order\n"
	      "given (a tensor name may appear only once): the stage files\n"
	      "of a pipeline run (mnist --pipeline-stages S --save F writes\n"
	      "F.stage0 ...) joined in stage order make the whole model's\n"
	      "file. Exit status: 0 written, 2 bad usage or bad files.\n",
	      f);
}

static int
parse_tol(const char *flag, const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	if (errno || end == s || *end || !(*out >= 0.0)) {
		fprintf(stderr,
		        "dtrain params: %s needs a number >= 0, not "
		        "'%s'\n",
		        flag, s);
		return -1;
	}
	return 0;
}

static int
cmd_diff(int argc, char **argv)
{
	const char *files[2];
	int nfiles = 0;
	double atol = -1.0, rtol = -1.0;
	dt_nn_params *a = NULL, *b = NULL;
	dt_nn_params_diff d;
	dt_err err;
	int rc = 2;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--atol") == 0 && i + 1 < argc) {
			if (parse_tol("--atol", argv[++i], &atol))
				return 2;
		} else if (strcmp(argv[i], "--rtol") == 0 && i + 1 < argc) {
			if (parse_tol("--rtol", argv[++i], &rtol))
				return 2;
		} else if (argv[i][0] == '-' && argv[i][1] != '\0') {
			fprintf(stderr,
			        "dtrain params diff: unknown option "
			        "'%s'\n",
			        argv[i]);
			usage(stderr);
			return 2;
		} else if (nfiles < 2) {
			files[nfiles++] = argv[i];
		} else {
			nfiles++;
		}
	}
	if (nfiles != 2) {
		fprintf(stderr, "dtrain params diff: need two files, got %d\n",
		        nfiles);
		usage(stderr);
		return 2;
	}
	if ((err = dt_nn_params_read(files[0], &a)) ||
	    (err = dt_nn_params_read(files[1], &b))) {
		fprintf(stderr, "dtrain params diff: %s\n", esc(dt_errmsg()));
		goto out;
	}
	if ((err = dt_nn_params_compare(a, b, &d))) {
		fprintf(stderr,
		        "dtrain params diff: %s and %s are not "
		        "comparable: %s\n",
		        esc(files[0]), esc(files[1]), esc(dt_errmsg()));
		goto out;
	}
	printf("max_abs=%.9g max_rel=%.9g\n", d.max_abs, d.max_rel);
	if (d.max_abs > 0.0) {
		const dt_nn_tensor *t = dt_nn_params_tensor(a, d.worst_tensor);
		char sh[64];

		dt__shape_str(t->shape, t->ndim, sh, sizeof(sh));
		printf("most different: %s (%s) element %zu: %.9g vs %.9g\n",
		       esc(t->name), sh, d.worst_index, (double)d.worst_a,
		       (double)d.worst_b);
	} else {
		printf("identical\n");
	}
	rc = 0;
	if ((atol >= 0.0 && !(d.max_abs <= atol)) ||
	    (rtol >= 0.0 && !(d.max_rel <= rtol))) {
		fprintf(stderr,
		        "dtrain params diff: difference over the "
		        "tolerance (atol %g, rtol %g)\n",
		        atol, rtol);
		rc = 1;
	}
out:
	dt_nn_params_free(a);
	dt_nn_params_free(b);
	return rc;
}

static int
cmd_show(int argc, char **argv)
{
	dt_nn_params *p = NULL;
	size_t total = 0;

	if (argc != 2) {
		usage(stderr);
		return 2;
	}
	if (dt_nn_params_read(argv[1], &p)) {
		fprintf(stderr, "dtrain params show: %s\n", esc(dt_errmsg()));
		return 2;
	}
	for (int i = 0; i < dt_nn_params_num_tensors(p); i++)
		total += dt_nn_params_tensor(p, i)->size;
	printf("%s: %d tensors, %zu floats\n", esc(argv[1]),
	       dt_nn_params_num_tensors(p), total);
	for (int i = 0; i < dt_nn_params_num_tensors(p); i++) {
		const dt_nn_tensor *t = dt_nn_params_tensor(p, i);
		const float *x = dt_nn_params_data(p) + t->offset;
		double ss = 0.0;
		char sh[64];

		for (size_t j = 0; j < t->size; j++)
			ss += (double)x[j] * x[j];
		dt__shape_str(t->shape, t->ndim, sh, sizeof(sh));
		printf("  %-24s %-16s %10zu  l2=%.6g\n", esc(t->name), sh,
		       t->size, sqrt(ss));
	}
	dt_nn_params_free(p);
	return 0;
}

static int
cmp_name(const void *a, const void *b)
{
	return strcmp((*(const dt_nn_tensor *const *)a)->name,
	              (*(const dt_nn_tensor *const *)b)->name);
}

/* The first name two tensors of t[0..n) share in *dup (NULL: none);
 * -1 when out of memory. */
static int
shared_name(const dt_nn_tensor *t, size_t n, const char **dup)
{
	const dt_nn_tensor **by = calloc(n ? n : 1, sizeof(*by));

	*dup = NULL;
	if (by == NULL)
		return -1;
	for (size_t i = 0; i < n; i++)
		by[i] = &t[i];
	qsort(by, n, sizeof(*by), cmp_name);
	for (size_t i = 1; i < n && !*dup; i++)
		if (strcmp(by[i - 1]->name, by[i]->name) == 0)
			*dup = by[i]->name;
	free(by);
	return 0;
}

/* The tensors of in[0..nin) one after the other, copied into *buf. */
static int
join_tensors(dt_nn_params **in, int nin, dt_nn_tensor **out, size_t *nout,
             float **buf)
{
	size_t nt = 0, total = 0, k = 0, off = 0;

	for (int f = 0; f < nin; f++) {
		nt += (size_t)dt_nn_params_num_tensors(in[f]);
		for (int i = 0; i < dt_nn_params_num_tensors(in[f]); i++)
			total += dt_nn_params_tensor(in[f], i)->size;
	}
	/* (each file is within the format's bounds; together they must be
	 * too: at most 65,536 tensors and 2^36 bytes) */
	if (nt > 65536 || total > ((size_t)1 << 34)) {
		fprintf(stderr,
		        "dtrain params join: %zu tensors of %zu floats in "
		        "all, over the format's bounds (65536 tensors, 2^34 "
		        "floats)\n",
		        nt, total);
		return 2;
	}
	*out = calloc(nt, sizeof(**out));
	*buf = malloc((total ? total : 1) * sizeof(float));
	if (*out == NULL || *buf == NULL) {
		fprintf(stderr, "dtrain params join: out of memory\n");
		return 2;
	}
	for (int f = 0; f < nin; f++)
		for (int i = 0; i < dt_nn_params_num_tensors(in[f]); i++) {
			const dt_nn_tensor *t = dt_nn_params_tensor(in[f], i);

			(*out)[k] = *t;
			(*out)[k].offset = off;
			memcpy(*buf + off, dt_nn_params_data(in[f]) + t->offset,
			       t->size * sizeof(float));
			off += t->size;
			k++;
		}
	*nout = nt;
	return 0;
}

static int
cmd_join(int argc, char **argv)
{
	int nin = argc - 2, rc = 2;
	dt_nn_params **in;
	dt_nn_tensor *t = NULL;
	float *buf = NULL;
	size_t nt = 0;
	const char *dup;

	if (argc < 3 || argv[1][0] == '-') {
		usage(stderr);
		return 2;
	}
	if ((in = calloc((size_t)nin, sizeof(*in))) == NULL) {
		fprintf(stderr, "dtrain params join: out of memory\n");
		return 2;
	}
	for (int f = 0; f < nin; f++)
		if (dt_nn_params_read(argv[2 + f], &in[f])) {
			fprintf(stderr, "dtrain params join: %s\n",
			        esc(dt_errmsg()));
			goto out;
		}
	if (join_tensors(in, nin, &t, &nt, &buf))
		goto out;
	if (shared_name(t, nt, &dup)) {
		fprintf(stderr, "dtrain params join: out of memory\n");
		goto out;
	}
	if (dup != NULL) {
		fprintf(stderr,
		        "dtrain params join: the tensor '%s' is in more "
		        "than one file (the files are not the stages of one "
		        "model)\n",
		        esc(dup));
		goto out;
	}
	if (dt_nn_params_write(argv[1], t, (int)nt, buf)) {
		fprintf(stderr, "dtrain params join: %s\n", esc(dt_errmsg()));
		goto out;
	}
	printf("%s: %zu tensors from %d files\n", esc(argv[1]), nt, nin);
	rc = 0;
out:
	for (int f = 0; f < nin; f++)
		dt_nn_params_free(in[f]);
	free(in);
	free(t);
	free(buf);
	return rc;
}

int
dt__cli_params(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "diff") == 0)
		return cmd_diff(argc - 1, argv + 1);
	if (strcmp(argv[1], "show") == 0)
		return cmd_show(argc - 1, argv + 1);
	if (strcmp(argv[1], "join") == 0)
		return cmd_join(argc - 1, argv + 1);
	fprintf(stderr, "dtrain params: unknown subcommand '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
