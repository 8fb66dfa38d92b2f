/*
 * util_test.c - small helpers of common/util.h: an error and its message
 * kept across cleanup that fails in turn, and a tensor's shape as text
 * (exact, empty, and cut to the buffer without overrunning it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/spin.h"
#include "common/util.h"

/* Cleanup that fails, as dt_node_stop can while a failure is reported. */
static void
failing_cleanup(void)
{
	(void)dt__fail(DT_ESYS, "cleanup: close failed");
}

static void
test_err_keep(void **state)
{
	dt__err_kept k;
	char longmsg[DT__ERRMSG_MAX + 100];

	(void)state;
	dt__fail(DT_ECONFIG, "DMLC_NUM_WORKER='x': not a number");
	dt__err_keep(&k, DT_ECONFIG);
	assert_string_equal(k.msg, "DMLC_NUM_WORKER='x': not a number");
	failing_cleanup();
	assert_string_equal(dt_errmsg(), "cleanup: close failed");
	assert_int_equal(dt__err_restore(&k), DT_ECONFIG);
	assert_string_equal(dt_errmsg(), "DMLC_NUM_WORKER='x': not a number");

	/* DT_OK kept: a refusal that is an answer leaves the message as it
	 * was. */
	dt__err_keep(&k, DT_OK);
	failing_cleanup();
	assert_int_equal(dt__err_restore(&k), DT_OK);
	assert_string_equal(dt_errmsg(), "DMLC_NUM_WORKER='x': not a number");

	/* The longest message survives whole (cut as dt__fail cuts it). */
	memset(longmsg, 'm', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	dt__fail(DT_EPROTO, "%s", longmsg);
	dt__err_keep(&k, DT_EPROTO);
	failing_cleanup();
	dt__err_restore(&k);
	assert_int_equal(strlen(dt_errmsg()), DT__ERRMSG_MAX - 1);
}

static void
test_shape_str(void **state)
{
	const int shape[] = {64, 3, 3, 3};
	char buf[32], small[6];

	(void)state;
	assert_string_equal(dt__shape_str(shape, 4, buf, sizeof(buf)),
	                    "64x3x3x3");
	assert_string_equal(dt__shape_str(shape, 1, buf, sizeof(buf)), "64");
	assert_string_equal(dt__shape_str(shape, 0, buf, sizeof(buf)), "");
	/* Cut to the buffer, terminated. */
	memset(small, 'z', sizeof(small));
	dt__shape_str(shape, 4, small, sizeof(small));
	assert_string_equal(small, "64x3x");
	/* No room at all: nothing written. */
	dt__shape_str(shape, 4, small, 0);
	assert_int_equal(small[0], '6');
}

/* The waiters' contention rule reads /proc/loadavg's runnable count. */
static void
test_spin_contention(void **state)
{
	(void)state;
	assert_int_equal(dt__loadavg_runnable("0.52 0.58 0.59 3/418 12345\n"),
	                 3);
	assert_int_equal(dt__loadavg_runnable("20.1 9.0 4.2 25/196 5867"), 25);
	assert_int_equal(dt__loadavg_runnable("0.52 0.58 0.59 x/418 1"), -1);
	assert_int_equal(dt__loadavg_runnable("0.52 0.58 0.59 3 1"), -1);
	assert_int_equal(dt__loadavg_runnable("0.52 0.58"), -1);
	assert_int_equal(dt__loadavg_runnable(""), -1);
	assert_int_equal(dt__loadavg_runnable("1 2 3 -4/5 6"), -1);
	/* Two ranks polling on two processors: not contended. */
	assert_int_equal(dt__spin_judge(2, 2, 2), 0);
	/* One other busy thread beside them: still room for it. */
	assert_int_equal(dt__spin_judge(3, 2, 2), 0);
	/* Others enough to fill both processors: contended. */
	assert_int_equal(dt__spin_judge(4, 2, 2), 1);
	assert_int_equal(dt__spin_judge(22, 2, 2), 1);
	/* This job's own four ranks on two processors are not others. */
	assert_int_equal(dt__spin_judge(5, 4, 2), 0);
	/* Unknowns never stop the spin. */
	assert_int_equal(dt__spin_judge(-1, 1, 2), 0);
	assert_int_equal(dt__spin_judge(40, 1, -1), 0);
}

/* Waiters sleep in the I/O thread's place by default only when the job
 * has more busy processes on the host than processors. */
static void
test_spin_oversubscribed(void **state)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	(void)state;
	assert_true(cpus >= 1);
	assert_int_equal(dt__spin_fit(1), 0);
	assert_int_equal(dt__spin_oversubscribed(), 0);
	assert_int_equal(dt__spin_fit((int)cpus), 0);
	assert_int_equal(dt__spin_oversubscribed(), 0);
	(void)dt__spin_fit((int)cpus + 1);
	assert_int_equal(dt__spin_oversubscribed(), 1);
	(void)dt__spin_fit(1);
	assert_int_equal(dt__spin_oversubscribed(), 0);
}

/* dt__calloc_sparse: zeroed, aligned, writable and freed, small (from
 * the heap) and large (mapped); a large block's untouched pages cost no
 * memory (the process's resident size grows by less than a tenth of it);
 * an overflowing size is refused. */
static long
rss_kib(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long pages = 0, res = 0;

	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &res) != 2)
			res = 0;
		fclose(f);
	}
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void
test_calloc_sparse(void **state)
{
	(void)state;
	size_t sizes[] = {1, 100, 4096, 65536, 1 << 20};

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		unsigned char *p = dt__calloc_sparse(sizes[k], 3);

		assert_non_null(p);
		assert_int_equal((uintptr_t)p % 64, 0);
		for (size_t i = 0; i < sizes[k] * 3; i += 997)
			assert_int_equal(p[i], 0);
		p[0] = 1;
		p[sizes[k] * 3 - 1] = 2;
		dt__free_sparse(p);
	}
	dt__free_sparse(NULL);
	long before = rss_kib();
	size_t big = (size_t)256 << 20;
	char *q = dt__calloc_sparse(big, 1);

	assert_non_null(q);
	q[0] = 1;
	q[big / 2] = 1;
	q[big - 1] = 1;
	assert_true(rss_kib() - before < (long)(big / 1024 / 10));
	dt__free_sparse(q);
	assert_null(dt__calloc_sparse(SIZE_MAX / 2, 4));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_err_keep),
	    cmocka_unit_test(test_calloc_sparse),
	    cmocka_unit_test(test_shape_str),
	    cmocka_unit_test(test_spin_contention),
	    cmocka_unit_test(test_spin_oversubscribed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
