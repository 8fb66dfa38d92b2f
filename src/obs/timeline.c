/*
 * timeline.c - the merged trace file: Chrome's trace event format (JSON),
 * which Perfetto and chrome://tracing load. The scheduler opens it at its
 * start, writes its own events as they happen and every node's as their
 * REPORTs arrive, and renames it into place at the end, so a reader never
 * sees half a file under the final name.
 *
 * One Chrome "process" per node (pid = node id, named "worker 1" ...), one
 * "thread" per track of that node (DT_TID_*). Spans on a track are complete
 * events ("X"); a KV call's phases, which overlap other calls, are
 * nestable async events ("b"/"e") grouped by the call's id. Times are
 * microseconds from the scheduler's start, on its clock: members shift
 * theirs by the offset estimated at bootstrap (core/report.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "common/util.h"
#include "obs/obs.h"

struct dt__timeline {
	dt__file_tmp file; /* the new file, renamed to its path when whole */
	FILE *f;           /* its stream */
	uint64_t t0;
	uint64_t events;
};

static const char *const tid_name[DT_TID_OTHER] = {"main", "io", "coll"};

static void
tl_free(dt__timeline *t)
{
	free(t);
}

/* s as a JSON string's body: printable, quotes and backslashes replaced
 * by c; returns out. */
static const char *
json_safe(const char *s, char *out, size_t cap, char c)
{
	dt__printable(s, out, cap);
	for (char *p = out; *p; p++)
		if (*p == '"' || *p == '\\')
			*p = c;
	return out;
}

dt_err
dt__timeline_open(const char *path, uint64_t t0_ns, dt__timeline **out)
{
	dt__timeline *t = dt__calloc(1, sizeof(*t));
	dt_err err;

	*out = NULL;
	if (t == NULL)
		return DT_ENOMEM;
	/* A new file of a random name beside path, created exclusively
	 * (never through a planted link), renamed over path at the end. */
	if ((err = dt__file_create_tmp("DTRAIN_TIMELINE: ", path, 0666,
	                               &t->file))) {
		tl_free(t);
		return err;
	}
	if ((t->f = dt__file_stream(&t->file)) == NULL) {
		dt__file_abort(&t->file);
		tl_free(t);
		return DT_ENOMEM;
	}
	t->t0 = t0_ns;
	fprintf(t->f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
	fprintf(t->f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,"
	              "\"tid\":0,\"args\":{\"name\":\"scheduler\"}}");
	*out = t;
	return DT_OK;
}

void
dt__timeline_node(dt__timeline *t, int node, const char *name, int sort)
{
	char safe[64];

	if (t == NULL)
		return;
	/* (names are the scheduler's own: "worker 3") */
	json_safe(name, safe, sizeof(safe), '_');
	fprintf(t->f,
	        ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
	        "\"tid\":0,\"args\":{\"name\":\"%s\"}}",
	        node, safe);
	fprintf(t->f,
	        ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
	        "\"tid\":0,\"args\":{\"sort_index\":%d}}",
	        node, sort);
	for (int i = 0; i < DT_TID_COUNT; i++) {
		char tn[16];

		if (i < DT_TID_OTHER)
			snprintf(tn, sizeof(tn), "%s", tid_name[i]);
		else
			snprintf(tn, sizeof(tn), "thread %d",
			         i - DT_TID_OTHER + 1);
		fprintf(t->f,
		        ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,"
		        "\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
		        node, i, tn);
	}
}

/* Microseconds from the trace's start (negative if before it). */
static double
us(const dt__timeline *t, uint64_t ns)
{
	return ((double)(int64_t)(ns - t->t0)) / 1e3;
}

static void
args(FILE *f, const dt__tev *e)
{
	int first = 1;

	fputs(",\"args\":{", f);
	if (e->flags & DT_EVF_KEY) {
		fprintf(f, "\"key\":%" PRIu64, e->key);
		first = 0;
	}
	if (e->flags & DT_EVF_BYTES) {
		fprintf(f, "%s\"bytes\":%" PRIu64, first ? "" : ",", e->bytes);
		first = 0;
	}
	if (e->flags & DT_EVF_PEER)
		fprintf(f, "%s\"peer\":%d", first ? "" : ",", (int)e->peer);
	fputc('}', f);
}

void
dt__timeline_event(dt__timeline *t, int node, const dt__tev *e)
{
	const char *name, *cat;

	if (t == NULL || e->kind >= DT_EV_COUNT || e->tid >= DT_TID_COUNT)
		return;
	name = dt__ev_name[e->kind];
	cat = dt__ev_cat[e->kind];
	if (e->flags & DT_EVF_ASYNC) {
		fprintf(t->f,
		        ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"b\","
		        "\"id\":\"0x%" PRIx64 "\",\"ts\":%.3f,\"pid\":%d,"
		        "\"tid\":%d",
		        name, cat, e->id, us(t, e->ts), node, e->tid);
		args(t->f, e);
		fprintf(t->f,
		        "},\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"e\","
		        "\"id\":\"0x%" PRIx64 "\",\"ts\":%.3f,\"pid\":%d,"
		        "\"tid\":%d}",
		        name, cat, e->id, us(t, e->ts + e->dur), node, e->tid);
	} else {
		fprintf(t->f,
		        ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\","
		        "\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d",
		        name, cat, us(t, e->ts), (double)e->dur / 1e3, node,
		        e->tid);
		args(t->f, e);
		fputc('}', t->f);
	}
	t->events++;
}

dt_err
dt__timeline_close(dt__timeline *t, const char *note)
{
	dt_err err = DT_OK;
	char safe[512];

	if (t == NULL)
		return DT_OK;
	json_safe(note ? note : "", safe, sizeof(safe), '\'');
	fprintf(t->f,
	        "\n],\"otherData\":{\"producer\":\"dtrain\","
	        "\"events\":%" PRIu64 ",\"note\":\"%s\"}}\n",
	        t->events, safe);
	err = dt__file_commit(&t->file, 0);
	tl_free(t);
	return err;
}
