/*
 * util.h - small internal helpers every module uses: error reporting, the
 * PS_VERBOSE log, clocks, environment parsing and checked allocation.
 * Private to the library (not installed).
 */
#ifndef DT_COMMON_UTIL_H
#define DT_COMMON_UTIL_H

#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "dtrain/err.h"

/* How many error codes there are (they run from 0 without gaps). */
#define DT__ERR_COUNT_(name, value, text) +1
enum { DT__ERR_COUNT = 0 DT_ERR_TABLE(DT__ERR_COUNT_) };

/* An error code a peer sent: itself when it names one of the table's
 * failures, else `other` (0 is no failure, and stays 0 when other is). */
static inline dt_err
dt__err_from_wire(uint64_t code, dt_err other)
{
	return code > 0 && code < (uint64_t)DT__ERR_COUNT ? (dt_err)code
	                                                  : other;
}

#if defined(__GNUC__)
#define DT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DT_PRINTF(a, b)
#endif

#define DT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define DT_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define DT_MAX(a, b)    ((a) > (b) ? (a) : (b))

/* Record a detailed message for dt_errmsg() and return err. */
dt_err dt__fail(dt_err err, const char *fmt, ...) DT_PRINTF(2, 3);
void dt__clear_error(void);
/* Put back a message saved from dt_errmsg(). */
void dt__errmsg_set(const char *msg);

/*
 * An error and its message, kept while cleanup that may fail in turn (and
 * so overwrite dt_errmsg()) runs:
 *
 *   dt__err_kept k;
 *   dt__err_keep(&k, err);
 *   ... cleanup ...
 *   return dt__err_restore(&k);
 *
 * k.msg may also be read while it is kept (a reason to pass on).
 */
#define DT__ERRMSG_MAX 512
typedef struct dt__err_kept {
	dt_err err;
	char msg[DT__ERRMSG_MAX];
} dt__err_kept;
/* Keep err and the calling thread's message in k. */
void dt__err_keep(dt__err_kept *k, dt_err err);
/* Make k's message the calling thread's again; returns k's error. */
dt_err dt__err_restore(const dt__err_kept *k);

/*
 * The log. Level 0 is always printed (errors and warnings), 1 is PS_VERBOSE=1
 * (connections, ranks, barriers), 2 is PS_VERBOSE=2 (every message). Lines go
 * to stderr with the node's name ("[worker 1] ...").
 */
extern int dt__verbose;
void dt__log_set_name(const char *name);
const char *dt__log_name(void);
void dt__log(int level, const char *fmt, ...) DT_PRINTF(2, 3);
#define DT_LOG(level, ...)                                                     \
	do {                                                                   \
		if ((level) <= dt__verbose)                                    \
			dt__log((level), __VA_ARGS__);                         \
	} while (0)

/*
 * A log line that a peer can make repeat (refused connections): at most one
 * a second, saying how many were left out since. Not locked: one thread
 * (or one lock) per gate. Zero-initialised storage is a gate that opens.
 */
typedef struct dt_log_gate {
	uint64_t last_ns; /* when a line last went out (0: never) */
	uint64_t held;    /* lines left out since */
} dt_log_gate;
/* 1 if a line may go out now, with *held the lines left out before it
 * (the count then starts again); 0 if this one is left out (counted). */
int dt__log_gate(dt_log_gate *g, uint64_t now, uint64_t *held);

/* s as one printable line for a log (control characters, newlines
 * included, become '?'), cut to cap - 1 bytes; returns out. */
const char *dt__printable(const char *s, char *out, size_t cap);

/* The len bytes of s (a name from a file or a peer) as one line to show a
 * user: backslash, control characters (C1 ones too, U+0080-U+009F, and a
 * byte 80-9f after an ASCII one) and DEL escaped C-style (\n, \t, \\,
 * \x1b), other bytes as they are; cut, at an escape's boundary, to
 * cap - 1 bytes. Returns out. */
const char *dt__escape(const char *s, size_t len, char *out, size_t cap);

/* A tensor's shape as "64x3x3x3" (ndim dimensions, "" for none), cut to
 * fit cap bytes; returns out. */
const char *dt__shape_str(const int *shape, int ndim, char *out, size_t cap);

/* Initialise cv on CLOCK_MONOTONIC, dt__now_ns's clock (for deadlines from
 * dt__timespec_at). */
void dt__cond_init_monotonic(pthread_cond_t *cv);
/* Monotonic clock (CLOCK_MONOTONIC). */
/* qsort's comparison of two doubles, ascending. */
int dt__cmp_double(const void *a, const void *b);

/* Whether n bytes at a and b are the same, in a time that does not depend
 * on where they differ (secrets: tokens, tickets). */
static inline int
dt__same_bytes(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;
	unsigned char diff = 0;

	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(x[i] ^ y[i]);
	return diff == 0;
}
/* The median of v[0, n), n >= 1 (sorts v; the mean of the two middle
 * values when n is even). */
double dt__median(double *v, int n);
uint64_t dt__now_ns(void);
/* The instant ns of that clock as a timespec, for pthread_cond_timedwait on
 * a condition variable set to CLOCK_MONOTONIC. */
struct timespec dt__timespec_at(uint64_t ns);
static inline double
dt__now_s(void)
{
	return (double)dt__now_ns() * 1e-9;
}

/*
 * Environment: read an integer variable. An unset or empty variable gives
 * def; a value that is not an integer within [lo, hi] fails with DT_ECONFIG
 * and a message naming the variable.
 */
dt_err dt__env_long(const char *name, long def, long lo, long hi, long *out);
/* A duration in seconds (decimals allowed: "0.5"), in ns; unset or empty
 * gives def; outside [lo, hi] or not a number fails with DT_ECONFIG. */
dt_err dt__env_seconds(const char *name, double def, double lo, double hi,
                       uint64_t *out_ns);
/* The variable's value, or NULL if unset or empty. */
const char *dt__env_str(const char *name);
/* Parse an integer in [lo, hi] from s; what names the setting in errors. */
dt_err dt__parse_long(const char *what, const char *s, long lo, long hi,
                      long *out);

/* Checked allocation that reports DT_ENOMEM through dt__fail. */
void *dt__malloc(size_t n);
void *dt__calloc(size_t n, size_t size);
void *dt__aligned_alloc(size_t n); /* 64-byte aligned, free with free() */
/* Zeroed n x size bytes whose pages cost no memory until they are
 * written: for tables with a row per node of the job, most of whose rows
 * a node never writes. 64-byte aligned; free with dt__free_sparse. */
void *dt__calloc_sparse(size_t n, size_t size);
void dt__free_sparse(void *p);
/* A grow-only buffer (*buf, *cap bytes, 64-byte aligned): at least need
 * bytes; what it held is not kept when it grows. NULL (and an empty
 * buffer) when memory runs out. */
uint8_t *dt__buf_reserve(uint8_t **buf, size_t *cap, size_t need);

/*
 * key mod d without a division (d >= 1): with m = ceil(2^128 / d), the
 * fraction key / d is (m * key mod 2^128) / 2^128, and the remainder is
 * that fraction times d, rounded down - the high 64 bits of a 192-bit
 * product, made of two 64 x 64 products. Exact for every 64-bit key
 * (Lemire, Kaser and Kurz, "Faster remainder by direct computation").
 * (A batched call places millions of keys; a 64-bit div costs ~40
 * cycles, this 3 multiplications.)
 */
typedef struct dt_fastmod {
	unsigned __int128 m;
	uint64_t d;
} dt_fastmod;

static inline dt_fastmod
dt__fastmod_of(uint64_t d)
{
	dt_fastmod f = {~(unsigned __int128)0 / d + 1, d};

	return f;
}

static inline uint64_t
dt__fastmod(const dt_fastmod *f, uint64_t key)
{
	unsigned __int128 frac = f->m * key;
	unsigned __int128 lo = (unsigned __int128)(uint64_t)frac * f->d;
	unsigned __int128 hi = (unsigned __int128)(uint64_t)(frac >> 64) * f->d;

	return f->d == 1 ? 0 : (uint64_t)((hi + (lo >> 64)) >> 64);
}

#endif
