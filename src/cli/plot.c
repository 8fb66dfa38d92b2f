/*
 * plot.c - `dtrain plot FILE... -o curves.svg`: the training curves of
 * one or more metrics logs (dtrain/nn.h: dt_metrics_log, one JSON object
 * per line) as an SVG picture, or a PNG through rsvg-convert. Three
 * panels - the metric per epoch (training dashed, validation solid),
 * the metric against wall time, samples/s against wall time - and a
 * legend with each run's last validation value and its time, so that
 * runs of different kvstore types, worker counts or compression settings
 * can be compared at a glance.
 *
 * The reader takes flat JSON objects only (what the log writes) and names
 * the file and line of anything else; it keeps no more than MAX_POINTS
 * lines and MAX_RUNS runs.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/file.h"

#define MAX_RUNS   12
#define MAX_POINTS 1000000
#define MAX_LINE   4096

typedef struct point {
	int epoch;
	long batch;
	double sps, train, val, wall;
} point;

typedef struct run {
	char label[80];
	const char *file; /* the log it came from (argv: lives long enough) */
	char metric[33];
	point *p;
	size_t n, cap;
} run;

static run runs[MAX_RUNS];
static int nruns;
static size_t npoints;

/*
 * s as XML character data or attribute text (the SVG declares UTF-8):
 * markup characters become entities, and what XML 1.0 does not allow at
 * all (control characters, bytes that are not UTF-8) becomes '?', so that
 * a metric or run name from a log can neither add elements (a <script>)
 * nor break the document. Cut to cap - 1 bytes at a character's end;
 * returns out. Every text the SVG takes from a log goes through here.
 */
static const char *
xml_escape(const char *s, char *out, size_t cap)
{
	size_t o = 0;

	while (*s && cap > 0) {
		const unsigned char *u = (const unsigned char *)s;
		char tmp[8];
		size_t in = 1, n;

		if (*s == '<' || *s == '>' || *s == '&' || *s == '\'' ||
		    *s == '"')
			n = (size_t)snprintf(tmp, sizeof(tmp), "&#%d;", *s);
		else if (u[0] < 0x20 || u[0] == 0x7f)
			tmp[0] = '?', n = 1;
		else if (u[0] < 0x80)
			tmp[0] = *s, n = 1;
		else {
			/* A UTF-8 sequence: its lead byte says how long. */
			size_t want = u[0] >= 0xc2 && u[0] <= 0xdf   ? 2
			              : u[0] >= 0xe0 && u[0] <= 0xef ? 3
			              : u[0] >= 0xf0 && u[0] <= 0xf4 ? 4
			                                             : 0;
			size_t k = 1;

			while (k < want && (u[k] & 0xc0) == 0x80)
				k++;
			if (want == 0 || k < want ||
			    (u[0] == 0xe0 && u[1] < 0xa0) ||
			    (u[0] == 0xed && u[1] >= 0xa0) ||
			    (u[0] == 0xf0 && u[1] < 0x90) ||
			    (u[0] == 0xf4 && u[1] >= 0x90))
				tmp[0] = '?', n = 1;
			else
				memcpy(tmp, s, want), n = in = want;
		}
		if (o + n + 1 > cap)
			break;
		memcpy(out + o, tmp, n);
		o += n;
		s += in;
	}
	if (cap > 0)
		out[o] = '\0';
	return out;
}

/* ---- reading ---- */

typedef struct field {
	char key[32];
	int is_str, is_null;
	char str[80];
	double num;
} field;

static int
fail_at(const char *file, long line, const char *fmt, const char *what)
{
	fprintf(stderr, "dtrain plot: %s:%ld: ", file, line);
	fprintf(stderr, fmt, what);
	fputc('\n', stderr);
	return -1;
}

static const char *
skip_ws(const char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
		s++;
	return s;
}

/* A JSON string at s (after its quote) into out; NULL if malformed. */
static const char *
read_str(const char *s, char *out, size_t cap)
{
	size_t n = 0;

	for (; *s && *s != '"'; s++) {
		char c = *s;

		if (c == '\\') {
			s++;
			if (*s == 'u') { /* (kept as '?') */
				for (int i = 0; i < 4; i++)
					if (!isxdigit((unsigned char)*++s))
						return NULL;
				c = '?';
			} else if (strchr("\"\\/bfnrt", *s) && *s) {
				c = *s == 'n' || *s == 't' || *s == 'r' ||
				            *s == 'b' || *s == 'f'
				        ? ' '
				        : *s;
			} else {
				return NULL;
			}
		} else if ((unsigned char)c < 0x20) {
			return NULL;
		}
		if (n + 1 < cap)
			out[n++] = c;
	}
	out[n] = '\0';
	return *s == '"' ? s + 1 : NULL;
}

/* Parse one flat object into f[0..*nf); 0 or -1 (why set). */
static int
parse_line(const char *s, field *f, int *nf, const char **why)
{
	*nf = 0;
	s = skip_ws(s);
	if (*s++ != '{')
		return *why = "not a JSON object", -1;
	s = skip_ws(s);
	if (*s == '}')
		return *why = "an empty object", -1;
	for (;;) {
		field *x = &f[*nf < 32 ? *nf : 31];

		memset(x, 0, sizeof(*x));
		s = skip_ws(s);
		if (*s++ != '"' || !(s = read_str(s, x->key, sizeof(x->key))))
			return *why = "a key is not a string", -1;
		s = skip_ws(s);
		if (*s++ != ':')
			return *why = "a key has no ':'", -1;
		s = skip_ws(s);
		if (*s == '"') {
			x->is_str = 1;
			if (!(s = read_str(s + 1, x->str, sizeof(x->str))))
				return *why = "a malformed string", -1;
		} else if (strncmp(s, "null", 4) == 0) {
			x->is_null = 1;
			s += 4;
		} else {
			char *end;

			errno = 0;
			x->num = strtod(s, &end);
			if (end == s || errno || !isfinite(x->num))
				return *why = "a value that is not a string, "
				              "number or null",
				       -1;
			s = end;
		}
		if (*nf < 32)
			(*nf)++;
		s = skip_ws(s);
		if (*s == '}')
			break;
		if (*s++ != ',')
			return *why = "fields not separated by ','", -1;
	}
	s = skip_ws(s + 1);
	if (*s)
		return *why = "text after the object", -1;
	return 0;
}

static const field *
get(const field *f, int nf, const char *key)
{
	for (int i = 0; i < nf; i++)
		if (strcmp(f[i].key, key) == 0)
			return &f[i];
	return NULL;
}

static double
num_or_nan(const field *f, int nf, const char *key)
{
	const field *x = get(f, nf, key);

	return x && !x->is_str && !x->is_null ? x->num : NAN;
}

static run *
find_run(const char *name)
{
	for (int i = 0; i < nruns; i++)
		if (strcmp(runs[i].label, name) == 0)
			return &runs[i];
	return NULL;
}

/*
 * The run of a log line: its label, in its file. Two files whose runs share
 * a label (two runs with the same default label, say) are two runs, not
 * one line: the later one gets " (2)" (" (3)" ...) and a warning says so.
 */
static run *
run_of(const char *label, const char *file)
{
	char name[80], alt[80];
	run *r;

	snprintf(name, sizeof(name), "%s", label[0] ? label : file);
	for (int k = 2; (r = find_run(name)) != NULL; k++) {
		if (strcmp(r->file, file) == 0)
			return r;
		if (k == 2)
			snprintf(alt, sizeof(alt), "%s", name);
		snprintf(name, sizeof(name), "%.60s (%d)", alt, k);
		if (find_run(name) == NULL)
			fprintf(stderr,
			        "dtrain plot: warning: %s and %s both have a "
			        "run labelled '%s'; the one in %s is drawn "
			        "as '%s' (--run-label names a run)\n",
			        r->file, file, alt, file, name);
	}
	if (nruns == MAX_RUNS)
		return NULL;
	snprintf(runs[nruns].label, sizeof(runs[nruns].label), "%s", name);
	runs[nruns].file = file;
	return &runs[nruns++];
}

static int
read_file(const char *path)
{
	FILE *fp = stdin;
	char line[MAX_LINE + 2];
	long ln = 0, used = 0;
	field f[32];
	int nf;

	/* (a FIFO given as a log would block the open: refused by name) */
	if (strcmp(path, "-") != 0 &&
	    dt__file_fopen_regular(DT_EIO, "metrics log ", path, &fp)) {
		fprintf(stderr, "dtrain plot: %s\n", dt_errmsg());
		return -1;
	}
	while (fgets(line, sizeof(line), fp)) {
		const char *why;
		const field *x;
		size_t len = strlen(line);
		run *r;

		ln++;
		if (len > MAX_LINE && line[len - 1] != '\n') {
			fail_at(path, ln, "a line longer than %s bytes",
			        "4096");
			goto bad;
		}
		if (skip_ws(line)[0] == '\0')
			continue;
		if (parse_line(line, f, &nf, &why)) {
			fail_at(path, ln, "%s", why);
			goto bad;
		}
		if (!(x = get(f, nf, "epoch")) || x->is_str || x->is_null ||
		    x->num < 0 || x->num > 1e6 || x->num != floor(x->num)) {
			fail_at(path, ln, "%s",
			        "no \"epoch\" (a whole number "
			        "from 0)");
			goto bad;
		}
		if (!(x = get(f, nf, "batch")) || x->is_str || x->is_null) {
			fail_at(path, ln, "%s",
			        "no \"batch\" (a number; -1 "
			        "ends an epoch)");
			goto bad;
		}
		const field *lab = get(f, nf, "run");
		if (!(r = run_of(lab && lab->is_str ? lab->str : "", path))) {
			fail_at(path, ln, "more than %s runs", "12");
			goto bad;
		}
		if (npoints >= MAX_POINTS) {
			fail_at(path, ln, "more than %s lines in all",
			        "1000000");
			goto bad;
		}
		if (r->n == r->cap) {
			size_t cap = r->cap ? 2 * r->cap : 64;
			point *p = realloc(r->p, cap * sizeof(*p));

			if (p == NULL) {
				fail_at(path, ln, "%s", "out of memory");
				goto bad;
			}
			r->p = p;
			r->cap = cap;
		}
		const field *m = get(f, nf, "metric");
		if (m && m->is_str && !r->metric[0])
			snprintf(r->metric, sizeof(r->metric), "%.32s", m->str);
		r->p[r->n++] = (point){(int)num_or_nan(f, nf, "epoch"),
		                       (long)num_or_nan(f, nf, "batch"),
		                       num_or_nan(f, nf, "samples_per_sec"),
		                       num_or_nan(f, nf, "train"),
		                       num_or_nan(f, nf, "val"),
		                       num_or_nan(f, nf, "wall_s")};
		npoints++;
		used++;
	}
	if (ferror(fp)) {
		fprintf(stderr, "dtrain plot: %s: read error\n", path);
		goto bad;
	}
	if (fp != stdin)
		fclose(fp);
	if (used == 0) {
		fprintf(stderr,
		        "dtrain plot: %s: no metrics lines (it is empty; an "
		        "example writes them with --metrics FILE)\n",
		        path);
		return -1;
	}
	return 0;
bad:
	if (fp != stdin)
		fclose(fp);
	return -1;
}

/* ---- drawing ---- */

static const char *const colour[MAX_RUNS] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8"};

typedef struct panel {
	double x, y, w, h;     /* plot area, px */
	double x0, x1, y0, y1; /* data range */
	const char *title, *xlab, *ylab;
	int whole_x; /* ticks at whole numbers only (epochs) */
} panel;

/* A "nice" step near span / 5: 1, 2 or 5 times a power of ten. */
static double
nice_step(double span)
{
	double raw = span / 5, p = pow(10, floor(log10(raw))), m = raw / p;

	return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void
nice_range(double *lo, double *hi, int from_zero)
{
	if (!(*hi > *lo)) {
		*hi = *lo + 1;
		if (*lo > 0)
			*lo = *lo * 0.9, *hi = *hi * 1.1 - 0.1;
	}
	if (from_zero && *lo > 0)
		*lo = 0;
	double st = nice_step(*hi - *lo);
	*lo = floor(*lo / st) * st;
	*hi = ceil(*hi / st) * st;
}

static double
px(const panel *p, double x)
{
	return p->x + (x - p->x0) / (p->x1 - p->x0) * p->w;
}

static double
py(const panel *p, double y)
{
	return p->y + p->h - (y - p->y0) / (p->y1 - p->y0) * p->h;
}

/* A tick's label: v, with k, M or G from 10^4 up so that it stays
 * narrow (step: the ticks' spacing; 0 near zero). */
static const char *
tick(char *buf, size_t len, double v, double step)
{
	static const struct {
		double scale;
		const char *unit;
	} si[] = {{1e9, "G"}, {1e6, "M"}, {1e3, "k"}};

	if (fabs(v) < step / 1e6)
		v = 0;
	for (size_t i = 0; i < sizeof(si) / sizeof(si[0]); i++)
		if (fabs(v) >= 10 * si[i].scale ||
		    (fabs(v) >= si[i].scale && step >= si[i].scale)) {
			snprintf(buf, len, "%g%s", v / si[i].scale, si[i].unit);
			return buf;
		}
	snprintf(buf, len, "%g", v);
	return buf;
}

static void
axes(FILE *f, const panel *p)
{
	char lab[32], title[256], xlab[256], ylab[256];
	double sx = nice_step(p->x1 - p->x0), sy = nice_step(p->y1 - p->y0);

	if (p->whole_x && sx < 1)
		sx = 1;

	fprintf(f,
	        "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' "
	        "fill='white' stroke='#444'/>\n",
	        p->x, p->y, p->w, p->h);
	for (double v = p->x0; v <= p->x1 + sx / 2; v += sx) {
		double X = px(p, v);
		fprintf(f,
		        "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' "
		        "stroke='#ddd'/><text x='%.1f' y='%.1f' "
		        "text-anchor='middle'>%s</text>\n",
		        X, p->y, X, p->y + p->h, X, p->y + p->h + 16,
		        tick(lab, sizeof(lab), v, sx));
	}
	for (double v = p->y0; v <= p->y1 + sy / 2; v += sy) {
		double Y = py(p, v);
		fprintf(f,
		        "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' "
		        "stroke='#ddd'/><text x='%.1f' y='%.1f' "
		        "text-anchor='end'>%s</text>\n",
		        p->x, Y, p->x + p->w, Y, p->x - 6, Y + 4,
		        tick(lab, sizeof(lab), v, sy));
	}
	fprintf(f,
	        "<text x='%.1f' y='%.1f' text-anchor='middle' "
	        "font-size='15' font-weight='bold'>%s</text>\n"
	        "<text x='%.1f' y='%.1f' text-anchor='middle'>%s</text>\n"
	        "<text transform='translate(%.1f,%.1f) rotate(-90)' "
	        "text-anchor='middle'>%s</text>\n",
	        p->x + p->w / 2, p->y - 10,
	        xml_escape(p->title, title, sizeof(title)), p->x + p->w / 2,
	        p->y + p->h + 36, xml_escape(p->xlab, xlab, sizeof(xlab)),
	        p->x - 48, p->y + p->h / 2,
	        xml_escape(p->ylab, ylab, sizeof(ylab)));
}

/* A polyline through run r's points that have x and y (which: 0 metric
 * per epoch train, 1 per epoch val, 2 train vs time, 3 val vs time,
 * 4 samples/s vs time). */
static int
coords(const point *q, int which, double *x, double *y)
{
	switch (which) {
	case 0:
		*x = q->epoch + 1, *y = q->train;
		return q->batch < 0;
	case 1:
		*x = q->epoch + 1, *y = q->val;
		return q->batch < 0;
	case 2:
		*x = q->wall, *y = q->train;
		return q->batch >= 0;
	case 3:
		*x = q->wall, *y = q->val;
		return q->batch < 0;
	default:
		*x = q->wall, *y = q->sps;
		return q->batch >= 0;
	}
}

static void
curve(FILE *f, const panel *p, const run *r, int which, const char *col,
      int dashed)
{
	int started = 0, count = 0;
	double x, y;

	for (size_t i = 0; i < r->n; i++) {
		if (!coords(&r->p[i], which, &x, &y) || !isfinite(x) ||
		    !isfinite(y))
			continue;
		if (!started)
			fprintf(f,
			        "<polyline fill='none' stroke='%s' "
			        "stroke-width='2'%s points='",
			        col, dashed ? " stroke-dasharray='6,4'" : "");
		fprintf(f, "%s%.1f,%.1f", started ? " " : "", px(p, x),
		        py(p, y));
		started = 1;
		count++;
	}
	if (started)
		fputs("'/>\n", f);
	/* Dots where the points are few (epochs). */
	for (size_t i = 0; i < r->n && count <= 60; i++)
		if (coords(&r->p[i], which, &x, &y) && isfinite(x) &&
		    isfinite(y))
			fprintf(
			    f,
			    "<circle cx='%.1f' cy='%.1f' r='3.5' fill='%s'/>\n",
			    px(p, x), py(p, y), col);
}

static void
range_of(int which0, int which1, double *x0, double *x1, double *y0, double *y1)
{
	double x, y;

	*x0 = *y0 = INFINITY;
	*x1 = *y1 = -INFINITY;
	for (int k = 0; k < nruns; k++)
		for (size_t i = 0; i < runs[k].n; i++)
			for (int w = which0; w <= which1; w++)
				if (coords(&runs[k].p[i], w, &x, &y) &&
				    isfinite(x) && isfinite(y)) {
					*x0 = fmin(*x0, x), *x1 = fmax(*x1, x);
					*y0 = fmin(*y0, y), *y1 = fmax(*y1, y);
				}
	if (!isfinite(*x0))
		*x0 = 0, *x1 = 1, *y0 = 0, *y1 = 1;
}

static int
write_svg(FILE *f)
{
	const char *metric = runs[0].metric[0] ? runs[0].metric : "metric";
	panel P[3] = {
	    {80, 50, 460, 270, 0, 0, 0, 0, "per epoch", "epoch", metric, 1},
	    {660, 50, 460, 270, 0, 0, 0, 0, "against time", "wall time (s)",
	     metric, 0},
	    {80, 420, 460, 270, 0, 0, 0, 0, "throughput", "wall time (s)",
	     "samples/s (one worker)", 0},
	};

	range_of(0, 1, &P[0].x0, &P[0].x1, &P[0].y0, &P[0].y1);
	P[0].x0 = fmin(P[0].x0, 1) - 1;
	range_of(2, 3, &P[1].x0, &P[1].x1, &P[1].y0, &P[1].y1);
	range_of(4, 4, &P[2].x0, &P[2].x1, &P[2].y0, &P[2].y1);
	nice_range(&P[0].x0, &P[0].x1, 1);
	nice_range(&P[0].y0, &P[0].y1, 0);
	nice_range(&P[1].x0, &P[1].x1, 1);
	nice_range(&P[1].y0, &P[1].y1, 0);
	nice_range(&P[2].x0, &P[2].x1, 1);
	nice_range(&P[2].y0, &P[2].y1, 1);
	fprintf(f,
	        "<?xml version='1.0' encoding='UTF-8'?>\n"
	        "<svg xmlns='http://www.w3.org/2000/svg' width='1180' "
	        "height='760' viewBox='0 0 1180 760' font-family='DejaVu Sans,"
	        "Arial,sans-serif' font-size='12'>\n"
	        "<rect width='1180' height='760' fill='#fafafa'/>\n");
	for (int i = 0; i < 3; i++)
		axes(f, &P[i]);
	for (int k = 0; k < nruns; k++) {
		curve(f, &P[0], &runs[k], 0, colour[k], 1);
		curve(f, &P[0], &runs[k], 1, colour[k], 0);
		curve(f, &P[1], &runs[k], 2, colour[k], 1);
		curve(f, &P[1], &runs[k], 3, colour[k], 0);
		curve(f, &P[2], &runs[k], 4, colour[k], 0);
	}
	/* The legend: each run, its last validation value and time. */
	double lx = 660, ly = 430;
	fprintf(f,
	        "<text x='%.0f' y='%.0f' font-size='15' font-weight='bold'>"
	        "runs</text>\n"
	        "<line x1='%.0f' y1='%.0f' x2='%.0f' y2='%.0f' stroke='#444' "
	        "stroke-width='2' stroke-dasharray='6,4'/><text x='%.0f' "
	        "y='%.0f'>training</text>\n"
	        "<line x1='%.0f' y1='%.0f' x2='%.0f' y2='%.0f' stroke='#444' "
	        "stroke-width='2'/><text x='%.0f' y='%.0f'>validation</text>\n",
	        lx, ly - 10, lx + 60, ly - 14, lx + 90, ly - 14, lx + 96,
	        ly - 10, lx + 180, ly - 14, lx + 210, ly - 14, lx + 216,
	        ly - 10);
	for (int k = 0; k < nruns; k++) {
		double last_val = NAN, last_t = NAN;
		char lab[160];

		for (size_t i = 0; i < runs[k].n; i++) {
			if (isfinite(runs[k].p[i].val))
				last_val = runs[k].p[i].val;
			if (isfinite(runs[k].p[i].wall))
				last_t = runs[k].p[i].wall;
		}
		xml_escape(runs[k].label, lab, sizeof(lab));
		double y = ly + 24 + 22 * k;
		fprintf(f,
		        "<rect x='%.0f' y='%.0f' width='18' height='10' "
		        "fill='%s'/><text x='%.0f' y='%.0f'>%s</text>",
		        lx, y - 9, colour[k], lx + 26, y, lab);
		if (isfinite(last_val))
			fprintf(f,
			        "<text x='%.0f' y='%.0f'>validation %.4f "
			        "after %.1f s</text>",
			        lx + 250, y, last_val, last_t);
		fputc('\n', f);
	}
	fputs("</svg>\n", f);
	return ferror(f) ? -1 : 0;
}

/* The SVG in svg (a stream at its start) drawn as a PNG into out_fd by
 * rsvg-convert, through its standard input and output: it never opens a
 * path, so it cannot be led through a link. */
static int
to_png(FILE *svg, int out_fd, const char *png)
{
	const char *tool =
	    getenv("DTRAIN_RSVG") ? getenv("DTRAIN_RSVG") : "rsvg-convert";
	pid_t pid;
	int st;

	fflush(NULL);
	if ((pid = fork()) < 0) {
		perror("dtrain plot: fork");
		return -1;
	}
	if (pid == 0) {
		if (dup2(fileno(svg), 0) < 0 || dup2(out_fd, 1) < 0)
			_exit(126);
		execlp(tool, tool, "-f", "png", (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 127) {
		fprintf(stderr,
		        "dtrain plot: cannot run %s to make a PNG (install "
		        "librsvg2-bin, or write .svg)\n",
		        tool);
		return -1;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "dtrain plot: %s failed making %s\n", tool,
		        png);
		return -1;
	}
	return 0;
}

/* The picture into out (a PNG when png): a new file of a random name
 * beside it, created exclusively and renamed over it when whole, so a
 * link planted at out is replaced, never written through. */
static int
write_out(const char *out, int png)
{
	dt__file_tmp t;
	FILE *f, *svg = NULL;
	int bad;

	if (dt__file_create_tmp("", out, 0666, &t)) {
		fprintf(stderr, "dtrain plot: %s\n", dt_errmsg());
		return -1;
	}
	/* A PNG is drawn from the SVG in an unnamed temporary file. */
	f = png ? (svg = tmpfile()) : dt__file_stream(&t);
	bad = f == NULL || write_svg(f) != 0 || fflush(f) != 0;
	if (!bad && png) {
		rewind(svg);
		if (to_png(svg, t.fd, out) != 0) {
			fclose(svg);
			dt__file_abort(&t);
			return -1;
		}
	}
	if (svg)
		fclose(svg);
	if (bad || dt__file_commit(&t, 0) != DT_OK) {
		if (bad)
			dt__file_abort(&t);
		fprintf(stderr, "dtrain plot: writing %s failed\n", out);
		return -1;
	}
	return 0;
}

static void
plot_usage(FILE *f)
{
	fputs("usage: dtrain plot FILE... -o OUT.svg|OUT.png\n"
	      "  Draw the training curves of metrics logs (an example's\n"
	      "  --metrics FILE): the metric per epoch and against wall\n"
	      "  time, and samples/s, several runs overlaid. A .png goes\n"
	      "  through rsvg-convert (librsvg2-bin). docs/observability.md\n",
	      f);
}

int
dt__cli_plot(int argc, char **argv)
{
	const char *out = NULL;
	int nfiles = 0, rc = 1;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-h") == 0 ||
		    strcmp(argv[i], "--help") == 0) {
			plot_usage(stdout);
			return 0;
		}
		if (strcmp(argv[i], "-o") == 0 ||
		    strcmp(argv[i], "--output") == 0) {
			if (++i == argc) {
				fprintf(stderr,
				        "dtrain plot: -o needs a file\n");
				return 2;
			}
			out = argv[i];
		}
	}
	if (out == NULL) {
		plot_usage(stderr);
		return 2;
	}
	size_t ol = strlen(out);
	int png = ol > 4 && strcmp(out + ol - 4, ".png") == 0;
	if (!png && !(ol > 4 && strcmp(out + ol - 4, ".svg") == 0)) {
		fprintf(stderr, "dtrain plot: %s: the output is .svg or .png\n",
		        out);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-o") == 0 ||
		    strcmp(argv[i], "--output") == 0) {
			i++;
			continue;
		}
		if (read_file(argv[i]))
			goto done;
		nfiles++;
	}
	if (nfiles == 0) {
		plot_usage(stderr);
		rc = 2;
		goto done;
	}
	if (write_out(out, png) != 0)
		goto done;
	printf("dtrain plot: %d run(s), %zu points -> %s\n", nruns, npoints,
	       out);
	rc = 0;
done:
	for (int k = 0; k < nruns; k++)
		free(runs[k].p);
	return rc;
}
