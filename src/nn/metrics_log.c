/*
 * metrics_log.c - the JSON-lines metrics log an example writes with
 * --metrics FILE and `dtrain plot` reads (src/cli/plot.c; the format is
 * in dtrain/nn.h and docs/observability.md). Each line is written whole
 * and flushed, so a reader (or a crash) sees only finished lines.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "common/util.h"
#include "dtrain/nn.h"

struct dt_metrics_log {
	dt__file_tmp file; /* the log's file, placed under its name at open */
	FILE *f;           /* its stream */
	char label[65];
	uint64_t t0;
	int failed;
};

dt_err
dt_metrics_open(const char *path, const char *label, dt_metrics_log **out)
{
	dt_metrics_log *l;
	const char *base;
	dt_err err;

	if (out == NULL || path == NULL)
		return dt__fail(DT_EINVAL, "dt_metrics_open: %s is NULL",
		                out ? "path" : "out");
	*out = NULL;
	if (label && strlen(label) > 64)
		return dt__fail(DT_EINVAL,
		                "metrics log: run label of %zu "
		                "bytes (64 at most)",
		                strlen(label));
	if ((l = dt__calloc(1, sizeof(*l))) == NULL)
		return DT_ENOMEM;
	/* A new file given the log's name at once (a reader may follow
	 * it): a link planted at that name is replaced, not written
	 * through. */
	if ((err = dt__file_create_tmp("metrics log ", path, 0666, &l->file))) {
		free(l);
		return err;
	}
	if ((l->f = dt__file_stream(&l->file)) == NULL ||
	    (err = dt__file_place(&l->file))) {
		err = l->f ? err : DT_ENOMEM;
		dt__file_abort(&l->file);
		free(l);
		return err;
	}
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	snprintf(l->label, sizeof(l->label), "%s", label ? label : base);
	/* (a label goes between quotes: nothing that needs escaping) */
	for (char *p = l->label; *p; p++)
		if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\')
			*p = '_';
	l->t0 = dt__now_ns();
	*out = l;
	return DT_OK;
}

/* A number, or null for NaN (and for infinities, which JSON lacks). */
static void
num(FILE *f, const char *name, double v, int prec)
{
	if (isfinite(v))
		fprintf(f, ",\"%s\":%.*f", name, prec, v);
	else
		fprintf(f, ",\"%s\":null", name);
}

dt_err
dt_metrics_write(dt_metrics_log *l, const dt_metrics_rec *r)
{
	char metric[33];

	if (l == NULL || r == NULL)
		return dt__fail(DT_EINVAL, "dt_metrics_write: %s is NULL",
		                l ? "record" : "log");
	snprintf(metric, sizeof(metric), "%s", r->metric ? r->metric : "");
	for (char *p = metric; *p; p++)
		if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\')
			*p = '_';
	fprintf(l->f, "{\"run\":\"%s\",\"epoch\":%d,\"batch\":%ld", l->label,
	        r->epoch, r->batch);
	num(l->f, "samples_per_sec",
	    r->samples_per_sec >= 0 ? r->samples_per_sec : NAN, 2);
	fprintf(l->f, ",\"metric\":\"%s\"", metric);
	num(l->f, "train", r->train, 6);
	num(l->f, "val", r->val, 6);
	num(l->f, "loss", r->loss, 6);
	num(l->f, "val_loss", r->val_loss, 6);
	num(l->f, "comm_s", r->comm_s, 4);
	num(l->f, "wall_s",
	    r->wall_s >= 0 ? r->wall_s : (double)(dt__now_ns() - l->t0) * 1e-9,
	    4);
	fputs("}\n", l->f);
	if (fflush(l->f) != 0 || ferror(l->f)) {
		l->failed = 1;
		return dt__fail(DT_EIO, "metrics log: write failed: %s",
		                strerror(errno));
	}
	return DT_OK;
}

dt_err
dt_metrics_close(dt_metrics_log *l)
{
	int bad;

	if (l == NULL)
		return DT_OK;
	bad =
	    l->failed | ferror(l->f) | (dt__file_commit(&l->file, 0) != DT_OK);
	free(l);
	return bad ? dt__fail(DT_EIO, "metrics log: a write failed") : DT_OK;
}
