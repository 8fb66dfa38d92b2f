/*
 * loop_shared.c - the process's shared event loops (loop_shared.h): one
 * thread per kind (the vans' events, their handshakes, the heartbeats)
 * serving every node of the process that asked for them
 * (DT_SHARED_LOOP=1), in place of each node's own threads.
 *
 * A loop's thread sleeps in epoll_wait on its set, which holds each
 * source's descriptor (a van's own epoll set: level-triggered, it stays
 * readable while it holds an event) and an eventfd to wake it, for as
 * long as the earliest timer of its heap allows (and 100 ms while any
 * source has periodic work). Then it runs, one at a time, the ready
 * sources' callbacks, the due timers and, every 100 ms, the periodic
 * work: a round. The timers are a binary heap ordered by due time, so
 * 10,000 heartbeats a second cost a heap operation each, not a walk of
 * every node; the periodic work walks the sources with a tick, which
 * each checks with a few atomic loads (a van's sweeps run only while it
 * has connections to sweep).
 *
 * Sources and their removal: lu guards the loop's state. The thread runs
 * a callback with lu released, having marked the source current (cur);
 * dt__loop_remove marks it dead (it never runs again), takes its
 * descriptor out of the set, and waits while it is current. Its memory
 * is freed by the thread itself at the end of a later round: a round
 * whose epoll_wait began before the removal may still hold its pointer,
 * one that began after cannot (rounds are numbered under lu).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "net/loop_shared.h"
#include "net/transport.h"

#define TICK_NS  100000000ull /* the periodic work's period */
#define STALL_NS 100000000ull /* a round this long is a stall */
#define EVS      64

struct dt_loop_src {
	int fd; /* -1: a timer */
	void (*ready)(void *arg);
	void (*tick)(void *arg);
	uint64_t (*run)(void *arg, uint64_t now);
	void *arg;
	uint64_t due;      /* (lu) a timer's next run */
	uint64_t rerun_at; /* (lu) asked for while it ran (timer_at) */
	int heap_at;       /* (lu) its index in the heap, -1 if out */
	int dead;          /* (lu) removed: never runs again */
	uint64_t dead_round;
	dt_loop_src *next, *prev; /* (lu) the fd sources with a tick */
	dt_loop_src *grave;       /* (lu) removed, to free */
};

struct dt_loop {
	int kind;
	int refs; /* (reg.mu) */
	pthread_t thread;
	int epfd, evfd;
	pthread_mutex_t lu;
	pthread_cond_t cv; /* a current source's callback returned */
	int stop;          /* (lu) */
	uint64_t round;    /* (lu) rounds begun */
	dt_loop_src *cur;  /* (lu) whose callback runs now */
	dt_loop_src *ticks;
	dt_loop_src *graves;
	dt_loop_src **heap; /* (lu) timers, earliest first */
	int nheap, heap_cap;
	uint64_t next_tick;
	atomic_uint_fast64_t busy_since, stall_end;
};

static const char *const loop_names[DT_LOOP_KINDS] = {
    "dt-io-shared", "dt-hs-shared", "dt-hb-shared"};

/* The process's loops (one per kind while anyone holds it). */
static struct {
	pthread_mutex_t mu;
	dt_loop *loops[DT_LOOP_KINDS];
} reg = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The loop whose thread this is (NULL: none). */
static _Thread_local dt_loop *tl_loop;

int
dt__loop_thread(void)
{
	return tl_loop != NULL;
}

dt_err
dt__loop_configure(int *on)
{
	long v = 0;
	dt_err err = dt__env_long("DT_SHARED_LOOP", 0, 0, 1, &v);

	*on = (int)v;
	return err;
}

/* ---- the timers' heap (lu held) ---- */

static void
heap_set(dt_loop *l, int i, dt_loop_src *s)
{
	l->heap[i] = s;
	s->heap_at = i;
}

static void
heap_up(dt_loop *l, int i)
{
	dt_loop_src *s = l->heap[i];

	while (i > 0 && l->heap[(i - 1) / 2]->due > s->due) {
		heap_set(l, i, l->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(l, i, s);
}

static void
heap_down(dt_loop *l, int i)
{
	dt_loop_src *s = l->heap[i];

	for (;;) {
		int k = 2 * i + 1;

		if (k >= l->nheap)
			break;
		if (k + 1 < l->nheap && l->heap[k + 1]->due < l->heap[k]->due)
			k++;
		if (l->heap[k]->due >= s->due)
			break;
		heap_set(l, i, l->heap[k]);
		i = k;
	}
	heap_set(l, i, s);
}

static dt_err
heap_push(dt_loop *l, dt_loop_src *s)
{
	if (l->nheap == l->heap_cap) {
		int cap = l->heap_cap ? 2 * l->heap_cap : 64;
		dt_loop_src **h = realloc(l->heap, sizeof(*h) * (size_t)cap);

		if (h == NULL)
			return dt__fail(DT_ENOMEM, "the shared loop's timers");
		l->heap = h;
		l->heap_cap = cap;
	}
	heap_set(l, l->nheap++, s);
	heap_up(l, l->nheap - 1);
	return DT_OK;
}

static void
heap_remove(dt_loop *l, dt_loop_src *s)
{
	int i = s->heap_at;
	dt_loop_src *last;

	if (i < 0)
		return;
	s->heap_at = -1;
	last = l->heap[--l->nheap];
	if (i == l->nheap)
		return;
	heap_set(l, i, last);
	heap_up(l, i);
	heap_down(l, last->heap_at);
}

/* ---- the thread ---- */

static void
wake(dt_loop *l)
{
	uint64_t one = 1;

	if (write(l->evfd, &one, sizeof(one)) < 0) {
		/* the eventfd cannot be full */
	}
}

/* Run one callback of s with lu released (lu held on entry and return). */
static uint64_t
run_src(dt_loop *l, dt_loop_src *s, int what, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	l->cur = s;
	pthread_mutex_unlock(&l->lu);
	if (what == 0)
		s->ready(s->arg);
	else if (what == 1)
		s->tick(s->arg);
	else
		next = s->run(s->arg, now);
	pthread_mutex_lock(&l->lu);
	l->cur = NULL;
	pthread_cond_broadcast(&l->cv);
	return next;
}

/* The timers that are due (lu held). */
static void
run_timers(dt_loop *l)
{
	uint64_t now = dt__now_ns();

	while (l->nheap > 0 && l->heap[0]->due <= now) {
		dt_loop_src *s = l->heap[0];
		uint64_t next;

		heap_remove(l, s);
		s->rerun_at = UINT64_MAX;
		next = run_src(l, s, 2, now);
		if (s->dead)
			continue;
		s->due = next < s->rerun_at ? next : s->rerun_at;
		if (s->due != UINT64_MAX && heap_push(l, s) != DT_OK)
			s->due = UINT64_MAX; /* (never: it was in the heap) */
	}
}

/* The periodic work (lu held): every source with a tick. A source removed
 * meanwhile is not freed before the round ends, so the walk may go on
 * from it; one added meanwhile waits for the next. */
static void
run_ticks(dt_loop *l)
{
	for (dt_loop_src *s = l->ticks; s; s = s->next)
		if (!s->dead)
			(void)run_src(l, s, 1, 0);
}

/* Free the sources removed before this round began (lu held). */
static void
bury(dt_loop *l)
{
	dt_loop_src **p = &l->graves;

	while (*p) {
		dt_loop_src *s = *p;

		if (s->dead_round < l->round) {
			*p = s->grave;
			free(s);
		} else {
			p = &s->grave;
		}
	}
}

/* How long the thread may sleep (lu held): ms for epoll_wait. */
static int
sleep_ms(dt_loop *l, uint64_t now)
{
	uint64_t until = l->ticks ? l->next_tick : UINT64_MAX;

	if (l->nheap > 0 && l->heap[0]->due < until)
		until = l->heap[0]->due;
	if (until == UINT64_MAX)
		return -1;
	if (until <= now)
		return 0;
	return (int)((until - now + 999999) / 1000000);
}

static void
round_of(dt_loop *l, const struct epoll_event *evs, int n)
{
	uint64_t t0 = dt__now_ns(), t1;

	atomic_store(&l->busy_since, t0);
	for (int i = 0; i < n; i++) {
		dt_loop_src *s = evs[i].data.ptr;

		if (s == NULL) {
			uint64_t x;

			if (read(l->evfd, &x, sizeof(x)) < 0) {
				/* nothing was there */
			}
			continue;
		}
		if (!s->dead)
			(void)run_src(l, s, 0, 0);
	}
	run_timers(l);
	if (l->ticks && dt__now_ns() >= l->next_tick) {
		l->next_tick = dt__now_ns() + TICK_NS;
		run_ticks(l);
	}
	bury(l);
	t1 = dt__now_ns();
	if (t1 - t0 > STALL_NS)
		atomic_store(&l->stall_end, t1);
	atomic_store(&l->busy_since, 0);
}

static void *
loop_main(void *arg)
{
	dt_loop *l = arg;
	struct epoll_event evs[EVS];

	tl_loop = l;
	/* (it serves every peer: it never waits for one to copy a remote
	 * segment, transport.h) */
	(void)dt__transport_set_serving(1);
	if (l->kind == DT_LOOP_HS &&
	    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid),
	                getpriority(PRIO_PROCESS, 0) + 10) < 0) {
		/* not allowed: it runs at the process's priority (as a
		 * van's own handshake thread, van_accept.c) */
	}
	pthread_mutex_lock(&l->lu);
	while (!l->stop) {
		int tmo = sleep_ms(l, dt__now_ns()), n;

		l->round++;
		pthread_mutex_unlock(&l->lu);
		n = epoll_wait(l->epfd, evs, EVS, tmo);
		pthread_mutex_lock(&l->lu);
		if (n < 0 && errno != EINTR) {
			dt__log(0, "epoll_wait (%s): %s", loop_names[l->kind],
			        strerror(errno));
			break;
		}
		round_of(l, evs, n < 0 ? 0 : n);
	}
	pthread_mutex_unlock(&l->lu);
	return NULL;
}

/* ---- a loop's life ---- */

static void
loop_free(dt_loop *l)
{
	while (l->graves) {
		dt_loop_src *s = l->graves;

		l->graves = s->grave;
		free(s);
	}
	if (l->epfd >= 0)
		close(l->epfd);
	if (l->evfd >= 0)
		close(l->evfd);
	pthread_mutex_destroy(&l->lu);
	pthread_cond_destroy(&l->cv);
	free(l->heap);
	free(l);
}

static dt_err
loop_new(int kind, dt_loop **out)
{
	dt_loop *l = dt__calloc(1, sizeof(*l));
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	int rc;

	if (l == NULL)
		return DT_ENOMEM;
	l->kind = kind;
	pthread_mutex_init(&l->lu, NULL);
	pthread_cond_init(&l->cv, NULL);
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	l->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->epfd < 0 || l->evfd < 0 ||
	    epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->evfd, &ev) < 0) {
		dt_err err = dt__fail(DT_ESYS, "the shared loop %s: %s",
		                      loop_names[kind], strerror(errno));

		loop_free(l);
		return err;
	}
	if ((rc = pthread_create(&l->thread, NULL, loop_main, l)) != 0) {
		loop_free(l);
		return dt__fail(DT_ESYS, "starting the shared loop %s: %s",
		                loop_names[kind], strerror(rc));
	}
	pthread_setname_np(l->thread, loop_names[kind]);
	*out = l;
	return DT_OK;
}

dt_err
dt__loop_get(int kind, dt_loop **out)
{
	dt_err err = DT_OK;

	if (kind < 0 || kind >= DT_LOOP_KINDS)
		return dt__fail(DT_EINVAL, "no shared loop of kind %d", kind);
	pthread_mutex_lock(&reg.mu);
	if (reg.loops[kind] == NULL)
		err = loop_new(kind, &reg.loops[kind]);
	if (err == DT_OK) {
		reg.loops[kind]->refs++;
		*out = reg.loops[kind];
	}
	pthread_mutex_unlock(&reg.mu);
	return err;
}

void
dt__loop_put(dt_loop *l)
{
	if (l == NULL)
		return;
	pthread_mutex_lock(&reg.mu);
	if (--l->refs > 0) {
		pthread_mutex_unlock(&reg.mu);
		return;
	}
	reg.loops[l->kind] = NULL;
	/* (under reg.mu: a get meanwhile starts a new loop after this one
	 * is gone; the thread never takes reg.mu) */
	pthread_mutex_lock(&l->lu);
	l->stop = 1;
	pthread_mutex_unlock(&l->lu);
	wake(l);
	pthread_join(l->thread, NULL);
	pthread_mutex_unlock(&reg.mu);
	loop_free(l);
}

/* ---- sources ---- */

static dt_loop_src *
src_new(void *arg)
{
	dt_loop_src *s = dt__calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->fd = -1;
	s->arg = arg;
	s->heap_at = -1;
	s->due = s->rerun_at = UINT64_MAX;
	return s;
}

dt_err
dt__loop_add_fd(dt_loop *l, int fd, void (*ready)(void *arg),
                void (*tick)(void *arg), void *arg, dt_loop_src **out)
{
	dt_loop_src *s = src_new(arg);

	if (s == NULL)
		return DT_ENOMEM;
	s->fd = fd;
	s->ready = ready;
	s->tick = tick;
	pthread_mutex_lock(&l->lu);
	if (tick) {
		s->next = l->ticks;
		if (l->ticks)
			l->ticks->prev = s;
		l->ticks = s;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		dt_err err = dt__fail(DT_ESYS, "the shared loop %s: %s",
		                      loop_names[l->kind], strerror(errno));

		pthread_mutex_unlock(&l->lu);
		dt__loop_remove(l, s);
		return err;
	}
	pthread_mutex_unlock(&l->lu);
	if (tick)
		wake(l); /* (it may sleep without a tick to wait for) */
	*out = s;
	return DT_OK;
}

dt_err
dt__loop_add_timer(dt_loop *l, uint64_t (*run)(void *arg, uint64_t now),
                   void *arg, uint64_t at, dt_loop_src **out)
{
	dt_loop_src *s = src_new(arg);
	dt_err err;

	if (s == NULL)
		return DT_ENOMEM;
	s->run = run;
	s->due = at;
	pthread_mutex_lock(&l->lu);
	err = heap_push(l, s);
	pthread_mutex_unlock(&l->lu);
	if (err) {
		free(s);
		return err;
	}
	wake(l);
	*out = s;
	return DT_OK;
}

void
dt__loop_timer_at(dt_loop *l, dt_loop_src *s, uint64_t at)
{
	int sooner = 0;

	pthread_mutex_lock(&l->lu);
	if (s->dead) {
		/* nothing */
	} else if (s->heap_at >= 0) {
		if (at < s->due) {
			s->due = at;
			heap_up(l, s->heap_at);
			sooner = s->heap_at == 0;
		}
	} else if (l->cur == s) { /* it runs: again by then */
		if (at < s->rerun_at)
			s->rerun_at = at;
	} else {
		s->due = at;
		sooner = heap_push(l, s) == DT_OK;
	}
	pthread_mutex_unlock(&l->lu);
	if (sooner && tl_loop != l) /* (its own thread looks at the heap) */
		wake(l);
}

void
dt__loop_remove(dt_loop *l, dt_loop_src *s)
{
	pthread_mutex_lock(&l->lu);
	s->dead = 1;
	s->dead_round = l->round;
	if (s->fd >= 0)
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, s->fd, NULL);
	if (s->tick) {
		if (s->prev)
			s->prev->next = s->next;
		else if (l->ticks == s)
			l->ticks = s->next;
		if (s->next)
			s->next->prev = s->prev;
		/* (s->next stays: a walk of the ticks may stand on s) */
	}
	heap_remove(l, s);
	s->grave = l->graves;
	l->graves = s;
	/* (the loop's own thread is what runs s: it returns to the loop) */
	while (l->cur == s && tl_loop != l)
		pthread_cond_wait(&l->cv, &l->lu);
	pthread_mutex_unlock(&l->lu);
}

void
dt__loop_stalls(dt_loop *l, uint64_t *busy_since, uint64_t *stall_end)
{
	*busy_since = atomic_load(&l->busy_since);
	*stall_end = atomic_load(&l->stall_end);
}
