/*
 * util.c - the log, clocks, environment parsing and checked allocation
 * declared in util.h.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <sys/mman.h>

#include "common/util.h"

int dt__verbose = 0;
static char log_name[64] = "dtrain";
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int launched = -1; /* DTRAIN_LAUNCHED set? -1: not read yet */

void
dt__log_set_name(const char *name)
{
	pthread_mutex_lock(&log_mu);
	snprintf(log_name, sizeof(log_name), "%s", name);
	pthread_mutex_unlock(&log_mu);
}

const char *
dt__log_name(void)
{
	return log_name;
}

void
dt__log(int level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	(void)level;
	/* Under dtrain launch every line is already prefixed with the role
	 * and rank; don't say it twice. */
	pthread_mutex_lock(&log_mu);
	if (launched < 0)
		launched = getenv("DTRAIN_LAUNCHED") != NULL;
	n = launched ? 0 : snprintf(line, sizeof(line), "[%s] ", log_name);
	pthread_mutex_unlock(&log_mu);
	if (n < 0 || (size_t)n >= sizeof(line))
		n = 0;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* One write per line keeps lines of concurrent threads whole. */
	n = (int)strlen(line);
	if (n > 0 && line[n - 1] != '\n' && (size_t)n < sizeof(line) - 1) {
		line[n++] = '\n';
		line[n] = '\0';
	}
	fputs(line, stderr);
}

uint64_t
dt__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int
dt__log_gate(dt_log_gate *g, uint64_t now, uint64_t *held)
{
	if (g->last_ns != 0 && now - g->last_ns < 1000000000ull) {
		g->held++;
		return 0;
	}
	g->last_ns = now ? now : 1;
	*held = g->held;
	g->held = 0;
	return 1;
}

struct timespec
dt__timespec_at(uint64_t ns)
{
	return (struct timespec){.tv_sec = (time_t)(ns / 1000000000ull),
	                         .tv_nsec = (long)(ns % 1000000000ull)};
}

const char *
dt__printable(const char *s, char *out, size_t cap)
{
	size_t i = 0;

	for (; s[i] && i + 1 < cap; i++) {
		unsigned char ch = (unsigned char)s[i];

		out[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	out[i] = '\0';
	return out;
}

const char *
dt__shape_str(const int *shape, int ndim, char *out, size_t cap)
{
	size_t k = 0;

	if (cap == 0)
		return out;
	out[0] = '\0';
	for (int d = 0; d < ndim && k < cap; d++) {
		int n =
		    snprintf(out + k, cap - k, "%s%d", d ? "x" : "", shape[d]);

		if (n < 0)
			break;
		k += (size_t)n;
	}
	return out;
}

const char *
dt__escape(const char *s, size_t len, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < len && cap > 0; i++) {
		unsigned char ch = (unsigned char)s[i];
		char esc[8];
		size_t n;

		/* Control characters, C1 ones (U+0080-U+009F, bytes c2 80-9f)
		 * included, could move a terminal's cursor or recolour it; so
		 * could a lone byte 80-9f on a terminal that is not in UTF-8
		 * (0x9b is CSI there). */
		if (ch == '\\')
			n = (size_t)snprintf(esc, sizeof(esc), "\\\\");
		else if (ch == '\n')
			n = (size_t)snprintf(esc, sizeof(esc), "\\n");
		else if (ch == '\t')
			n = (size_t)snprintf(esc, sizeof(esc), "\\t");
		else if (ch < 0x20 || ch == 0x7f ||
		         (ch == 0xc2 && i + 1 < len &&
		          (unsigned char)s[i + 1] >= 0x80 &&
		          (unsigned char)s[i + 1] <= 0x9f))
			n = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", ch);
		else if (ch >= 0x80 && ch <= 0x9f &&
		         (i == 0 || (unsigned char)s[i - 1] == 0xc2 ||
		          (unsigned char)s[i - 1] < 0x80))
			n = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", ch);
		else
			esc[0] = (char)ch, esc[1] = '\0', n = 1;
		if (o + n + 1 > cap)
			break;
		memcpy(out + o, esc, n);
		o += n;
	}
	if (cap > 0)
		out[o] = '\0';
	return out;
}

const char *
dt__env_str(const char *name)
{
	const char *v = getenv(name);

	return (v && *v) ? v : NULL;
}

dt_err
dt__parse_long(const char *what, const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	if (s == NULL || *s == '\0')
		return dt__fail(DT_ECONFIG, "%s: empty value", what);
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return dt__fail(DT_ECONFIG, "%s: '%s' is not an integer", what,
		                s);
	if (v < lo || v > hi)
		return dt__fail(DT_ECONFIG,
		                "%s: %ld is out of range [%ld, %ld]", what, v,
		                lo, hi);
	*out = v;
	return DT_OK;
}

dt_err
dt__env_long(const char *name, long def, long lo, long hi, long *out)
{
	const char *v = dt__env_str(name);

	if (v == NULL) {
		*out = def;
		return DT_OK;
	}
	return dt__parse_long(name, v, lo, hi, out);
}

void
dt__cond_init_monotonic(pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

dt_err
dt__env_seconds(const char *name, double def, double lo, double hi,
                uint64_t *out_ns)
{
	const char *v = dt__env_str(name);
	char *end;
	double d;

	if (v == NULL) {
		*out_ns = (uint64_t)(def * 1e9 + 0.5);
		return DT_OK;
	}
	errno = 0;
	d = strtod(v, &end);
	if (end == v || *end != '\0' || errno || !(d >= lo && d <= hi))
		return dt__fail(
		    DT_ECONFIG,
		    "%s: '%s' is not a number of seconds from %g to "
		    "%g",
		    name, v, lo, hi);
	*out_ns = (uint64_t)(d * 1e9 + 0.5);
	return DT_OK;
}

void *
dt__malloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		dt__fail(DT_ENOMEM, "out of memory allocating %zu bytes", n);
	return p;
}

void *
dt__calloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		dt__fail(DT_ENOMEM, "out of memory allocating %zu x %zu bytes",
		         n, size);
	return p;
}

/* dt__calloc_sparse: a block of SPARSE_MIN bytes or more is mapped
 * anonymous and private, so the kernel hands out zero pages as they are
 * first written (calloc may clear a reused block, touching every page of
 * it: glibc raises its mapping threshold after a large block is freed);
 * a smaller one comes from the heap, cleared. A header of SPARSE_HDR bytes says
 * which, and the mapping's length. */
#define SPARSE_MIN ((size_t)64 << 10)
#define SPARSE_HDR ((size_t)64)

void *
dt__calloc_sparse(size_t n, size_t size)
{
	size_t bytes, *h;

	if (size != 0 && n > (SIZE_MAX - SPARSE_HDR) / size) {
		dt__fail(DT_ENOMEM, "%zu x %zu bytes is too large", n, size);
		return NULL;
	}
	bytes = SPARSE_HDR + n * size;
	if (bytes < SPARSE_MIN) {
		if ((h = aligned_alloc(SPARSE_HDR, (bytes + SPARSE_HDR - 1) /
		                                       SPARSE_HDR *
		                                       SPARSE_HDR)) == NULL) {
			dt__fail(DT_ENOMEM,
			         "out of memory allocating %zu bytes", bytes);
			return NULL;
		}
		memset(h, 0, bytes);
		h[0] = 0; /* from the heap */
	} else {
		h = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (h == MAP_FAILED) {
			dt__fail(DT_ENOMEM, "mapping %zu bytes: %s", bytes,
			         strerror(errno));
			return NULL;
		}
		h[0] = bytes;
	}
	return (char *)h + SPARSE_HDR;
}

void
dt__free_sparse(void *p)
{
	size_t *h;

	if (p == NULL)
		return;
	h = (size_t *)(void *)((char *)p - SPARSE_HDR);
	if (h[0] == 0)
		free(h);
	else
		munmap(h, h[0]);
}

void *
dt__aligned_alloc(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, 64, n ? n : 64) != 0) {
		dt__fail(DT_ENOMEM, "out of memory allocating %zu bytes", n);
		return NULL;
	}
	return p;
}

uint8_t *
dt__buf_reserve(uint8_t **buf, size_t *cap, size_t need)
{
	if (need <= *cap && *buf)
		return *buf;
	free(*buf);
	*cap = 0;
	*buf = dt__aligned_alloc(need ? need : 1);
	if (*buf == NULL)
		return NULL;
	*cap = need;
	return *buf;
}

int
dt__cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double
dt__median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), dt__cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
