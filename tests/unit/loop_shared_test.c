/*
 * loop_shared_test.c - the process's shared loops (net/loop_shared.c):
 * timers run in the order they are due and can be brought forward; a
 * descriptor's readiness and the periodic tick reach their callbacks;
 * removing a source waits for its callback that runs and none runs
 * after; the loop's thread lives exactly while a reference is held.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/util.h"
#include "unit/fds.h"
#include "net/loop_shared.h"

#define WAIT_NS 10000000000ull /* generous: a sanitizer on a busy box */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int
get_int(const int *p)
{
	int v;

	pthread_mutex_lock(&mu);
	v = *p;
	pthread_mutex_unlock(&mu);
	return v;
}

/* Wait up to WAIT_NS for *p >= want. */
static int
wait_int(const int *p, int want)
{
	uint64_t end = dt__now_ns() + WAIT_NS;

	while (get_int(p) < want && dt__now_ns() < end)
		usleep(1000);
	return get_int(p) >= want;
}

/* ---- timers ---- */

typedef struct tmr {
	int id;
	int *order, *n; /* where it writes its id when it runs */
	int runs;
	int in_loop;
} tmr;

static uint64_t
tmr_run(void *arg, uint64_t now)
{
	tmr *t = arg;

	(void)now;
	pthread_mutex_lock(&mu);
	t->order[(*t->n)++] = t->id;
	t->runs++;
	t->in_loop = dt__loop_thread();
	pthread_mutex_unlock(&mu);
	return UINT64_MAX; /* not again until brought forward */
}

static void
test_timers_in_order(void **state)
{
	int order[8] = {0}, n = 0, before = count_threads();
	tmr t[3] = {{.id = 1}, {.id = 2}, {.id = 3}};
	uint64_t ms[3] = {90, 30, 60}, now = dt__now_ns();
	dt_loop_src *s[3];
	dt_loop *l;

	(void)state;
	assert_int_equal(dt__loop_get(DT_LOOP_BEAT, &l), DT_OK);
	assert_int_equal(count_threads(), before + 1);
	for (int i = 0; i < 3; i++) {
		t[i].order = order;
		t[i].n = &n;
		assert_int_equal(dt__loop_add_timer(l, tmr_run, &t[i],
		                                    now + ms[i] * 1000000ull,
		                                    &s[i]),
		                 DT_OK);
	}
	assert_true(wait_int(&n, 3));
	assert_int_equal(order[0], 2);
	assert_int_equal(order[1], 3);
	assert_int_equal(order[2], 1);
	assert_true(t[0].in_loop && t[1].in_loop && t[2].in_loop);
	assert_false(dt__loop_thread()); /* (this thread is none) */
	/* brought forward: a timer due in a minute runs now */
	dt__loop_timer_at(l, s[0], dt__now_ns() + 60000000000ull);
	dt__loop_timer_at(l, s[0], dt__now_ns());
	assert_true(wait_int(&n, 4));
	assert_int_equal(order[3], 1);
	assert_int_equal(get_int(&t[0].runs), 2);
	for (int i = 0; i < 3; i++)
		dt__loop_remove(l, s[i]);
	dt__loop_put(l);
	assert_int_equal(count_threads(), before);
}

/* ---- removal while the callback runs ---- */

typedef struct slow {
	int running, done, runs;
} slow;

static uint64_t
slow_run(void *arg, uint64_t now)
{
	slow *x = arg;

	pthread_mutex_lock(&mu);
	x->running = 1;
	x->runs++;
	pthread_mutex_unlock(&mu);
	usleep(200000); /* the callback's work, while it is removed */
	pthread_mutex_lock(&mu);
	x->done++;
	pthread_mutex_unlock(&mu);
	return now + 1000000ull; /* again in 1 ms, unless removed */
}

static void
test_remove_waits(void **state)
{
	slow x = {0};
	dt_loop_src *s;
	dt_loop *l;

	(void)state;
	assert_int_equal(dt__loop_get(DT_LOOP_BEAT, &l), DT_OK);
	assert_int_equal(dt__loop_add_timer(l, slow_run, &x, dt__now_ns(), &s),
	                 DT_OK);
	assert_true(wait_int(&x.running, 1));
	dt__loop_remove(l, s);
	/* the run under way had ended, and none starts after */
	int runs = get_int(&x.runs);

	assert_int_equal(get_int(&x.done), runs);
	usleep(50000);
	assert_int_equal(get_int(&x.runs), runs);
	dt__loop_put(l);
}

/* ---- a descriptor and the tick ---- */

typedef struct fdsrc {
	int fd;
	int reads, ticks;
} fdsrc;

static void
fd_ready(void *arg)
{
	fdsrc *f = arg;
	uint64_t x;

	if (read(f->fd, &x, sizeof(x)) == sizeof(x)) {
		pthread_mutex_lock(&mu);
		f->reads += (int)x;
		pthread_mutex_unlock(&mu);
	}
}

static void
fd_tick(void *arg)
{
	fdsrc *f = arg;

	pthread_mutex_lock(&mu);
	f->ticks++;
	pthread_mutex_unlock(&mu);
}

static void
test_fd_and_tick(void **state)
{
	fdsrc f = {.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
	uint64_t three = 3;
	dt_loop_src *s;
	dt_loop *l, *l2;

	(void)state;
	assert_true(f.fd >= 0);
	assert_int_equal(dt__loop_get(DT_LOOP_IO, &l), DT_OK);
	/* (a second reference is the same loop) */
	assert_int_equal(dt__loop_get(DT_LOOP_IO, &l2), DT_OK);
	assert_ptr_equal(l, l2);
	dt__loop_put(l2);
	assert_int_equal(dt__loop_add_fd(l, f.fd, fd_ready, fd_tick, &f, &s),
	                 DT_OK);
	assert_int_equal(write(f.fd, &three, sizeof(three)), sizeof(three));
	assert_true(wait_int(&f.reads, 3));
	/* a tick about every 100 ms, with nothing on the descriptor */
	assert_true(wait_int(&f.ticks, 3));
	dt__loop_remove(l, s);
	int ticks = get_int(&f.ticks);

	assert_int_equal(write(f.fd, &three, sizeof(three)), sizeof(three));
	usleep(300000);
	assert_int_equal(get_int(&f.reads), 3);
	assert_int_equal(get_int(&f.ticks), ticks);
	dt__loop_put(l);
	close(f.fd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_timers_in_order),
	    cmocka_unit_test(test_remove_waits),
	    cmocka_unit_test(test_fd_and_tick),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
