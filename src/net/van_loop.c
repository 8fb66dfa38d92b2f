/*
 * van_loop.c - the event loop: the I/O thread ("dt-io", started by
 * dt__van_start) that sleeps in epoll_wait and dispatches what comes (new
 * same-host connections, bytes to read, room to send), and the wait
 * (dt__van_wait) by which a caller reads the network itself - polling for
 * a short while, then asleep in epoll_wait in the I/O thread's place -
 * instead of being woken by the I/O thread. Either way, events are
 * handled under the van's dispatch_mu, so hooks never run in two threads
 * at once; the I/O thread stands aside (parks) while callers poll or
 * sleep in its place.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "common/spin.h"
#include "common/util.h"
#include "net/van_int.h"

/* The van whose events this thread handles now (dispatch), if any: its
 * sends never wait long for a peer (see van_send.c). */
_Thread_local dt_van *van_tl_dispatch;

static int dispatch_events(dt_van *v, const struct epoll_event *evs, int n);

/* The mark of an "event" made up for a polled link (dt_conn) that holds
 * bytes (or room): epoll did not report it, so it need not be re-armed. */
#define POLLED_EV EPOLLMSG

/*
 * Add to evs (n of cap used) the polled links with bytes to read
 * (dispatch_mu held): without arming (pending, no system call) while
 * polling; arming them (asking for a doorbell), and for room those that
 * wait for it, before the I/O thread sleeps. Returns the new n.
 */
static int
polled_events(dt_van *v, struct epoll_event *evs, int n, int cap, int arm)
{
	if (atomic_load_explicit(&v->npolled, memory_order_relaxed) == 0)
		return n;
	pthread_mutex_lock(&v->mu);
	for (dt_conn *c = v->conns; c && n < cap; c = c->next) {
		if (!c->polled ||
		    !atomic_load_explicit(&c->open, memory_order_relaxed))
			continue;
		/* Arming a link costs a store and a fence on memory shared
		 * with its writer: with hundreds of same-host peers, walking
		 * them all at every wake-up filled the processors of an idle
		 * job (their heartbeats). Only the links handled since they
		 * were last armed need it (see touched). */
		if (arm && !c->rung && !c->touched &&
		    !atomic_load_explicit(&c->want_out, memory_order_relaxed))
			continue;
		int ready =
		    arm ? c->link.ops->arm(&c->link, c->rung ? 0 : DT_ARM_QUIET)
		        : c->link.ops->pending(&c->link);

		if (arm)
			c->rung = c->touched = 0;

		if (arm && atomic_load(&c->want_out)) {
			pthread_mutex_lock(&c->send_mu);
			ready |= van_arm_room(c);
			pthread_mutex_unlock(&c->send_mu);
		}
		if (ready)
			evs[n++] = (struct epoll_event){
			    .events = EPOLLIN | POLLED_EV, .data.ptr = c};
	}
	pthread_mutex_unlock(&v->mu);
	return n;
}

/*
 * Watch c again after epoll reported it (its one shot is spent): for bytes,
 * and for room while c wants it. Under c's send lock, as want_writable
 * arms it (van_send.c): a thread that does not dispatch (a heartbeat) may
 * ask for room meanwhile, and whichever arms last must see its want_out,
 * or the bytes it queued would wait for an event that never comes.
 */
static void
rearm(dt_van *v, dt_conn *c)
{
	pthread_mutex_lock(&c->send_mu);
	if (c->link.fd >= 0) {
		struct epoll_event ev = {
		    .events =
		        CONN_EVENTS |
		        (!c->polled && atomic_load(&c->want_out) ? EPOLLOUT
		                                                 : 0),
		    .data.ptr = c};

		epoll_ctl(v->epfd, EPOLL_CTL_MOD, c->link.fd, &ev);
	}
	pthread_mutex_unlock(&c->send_mu);
}

static int
dispatch(dt_van *v, const struct epoll_event *evs, int n)
{
	uint64_t t0 = dt__now_ns(), t1;
	int big;

	atomic_store(&v->busy_since, t0);
	dt_van *outer = van_tl_dispatch;

	van_tl_dispatch = v;
	int served = dt__transport_set_serving(1);
	big = dispatch_events(v, evs, n);
	dt__transport_set_serving(served);
	van_tl_dispatch = outer;
	t1 = dt__now_ns();
	if (t1 - t0 > STALL_NS)
		atomic_store(&v->stall_end, t1);
	atomic_store(&v->busy_since, 0);
	return big;
}

static int
dispatch_events(dt_van *v, const struct epoll_event *evs, int n)
{
	int big = 0;

	if (v->loc.fd >= 0)
		van_accept_resume(v->epfd, &v->loc, &v->accept_paused_until);
	van_sweep_unvouched(v);
	van_sweep_stuck(v);
	for (int i = 0; i < n; i++) {
		void *p = evs[i].data.ptr;

		if (p == NULL) { /* the wake-up (or stop) eventfd */
			uint64_t x;

			if (read(v->evfd, &x, sizeof(x)) < 0) {
				/* nothing was there */
			}
			continue;
		}
		if (p == &v->lis || p == &v->loc) {
			van_accept_all(v, p);
			continue;
		}
		dt_conn *c = p;

		c->touched = 1;
		/* (its doorbells are taken at the next arm: polled_events) */
		if (c->polled && !(evs[i].events & POLLED_EV))
			c->rung = 1;
		/* A polled link's room comes as readable (its arm). */
		if ((evs[i].events & EPOLLOUT ||
		     (c->polled && atomic_load(&c->want_out))) &&
		    atomic_load(&c->open))
			van_conn_writable(v, c);
		if ((evs[i].events & ~(uint32_t)EPOLLOUT) &&
		    atomic_load(&c->open))
			van_conn_readable(v, c);
		if (atomic_load(&c->open)) {
			/* (a polled link's bytes found by polling used no
			 * event) */
			if (!(evs[i].events & POLLED_EV))
				rearm(v, c);
			if (c->state == RX_PAYLOAD &&
			    c->h.payload_len - c->payload_got >= POLL_BIG)
				big = 1;
		}
	}
	return big;
}

/* After this thread handled evs (n of them): if some were more than the
 * eventfd's kick and a caller sleeps in epoll_wait in the I/O thread's
 * place (others than this thread: self counts 1 when it is one), the
 * events may have been that caller's answer, which it would see only at
 * the end of its epoll_wait: kick it. A kick alone never causes one, so
 * two sleepers never wake each other in turn. */
static void
kick_epoll_sleepers(dt_van *v, const struct epoll_event *evs, int n, int self)
{
	int real = 0;

	for (int i = 0; i < n && !real; i++)
		real = evs[i].data.ptr != NULL;
	if (real && atomic_load(&v->epoll_sleepers) > self)
		van_wake_io(v);
}

/* How long the I/O thread stays parked after a poll found its answer: the
 * next wait usually follows at once (a training loop, a benchmark). */
#define LINGER_NS 500000ull

static int
io_should_park(dt_van *v, uint64_t now)
{
	return atomic_load(&v->sleepers) == 0 &&
	       (atomic_load(&v->pollers) > 0 ||
	        now < atomic_load(&v->linger_until));
}

/* The I/O thread stands aside while callers poll (see dt_van). */
static void
io_park(dt_van *v)
{
	pthread_mutex_lock(&v->park_mu);
	v->parked = 1;
	while (!atomic_load(&v->stopping) && io_should_park(v, dt__now_ns())) {
		struct timespec ts = dt__timespec_at(dt__now_ns() + LINGER_NS);

		pthread_cond_timedwait(&v->park_cv, &v->park_mu, &ts);
	}
	v->parked = 0;
	pthread_mutex_unlock(&v->park_mu);
}

static void
io_unpark(dt_van *v)
{
	atomic_store(&v->linger_until, 0);
	pthread_mutex_lock(&v->park_mu);
	if (v->parked)
		pthread_cond_signal(&v->park_cv);
	pthread_mutex_unlock(&v->park_mu);
}

void *
van_io_main(void *arg)
{
	dt_van *v = arg;
	struct epoll_event evs[64];

	/* This thread serves every peer, also when it arms links before it
	 * sleeps (an encrypted link may write what it holds then): it never
	 * waits for one peer to copy a remote segment (transport.h). */
	(void)dt__transport_set_serving(1);
	while (!atomic_load(&v->stopping)) {
		int n;

		if (io_should_park(v, dt__now_ns())) {
			io_park(v);
			continue;
		}
		uint64_t until = atomic_load(&v->accept_paused_until), now;
		int tmo = -1;

		if (until && (now = dt__now_ns()) < until)
			tmo = (int)((until - now) / 1000000) + 1;
		else if (until)
			tmo = 0;
		if (atomic_load(&v->unvouched) > 0 && (tmo < 0 || tmo > 100))
			tmo = 100; /* van_sweep_unvouched's rounds */
		if (atomic_load(&v->queued_conns) > 0 &&
		    (tmo < 0 || tmo > (int)(SWEEP_NS / 1000000)))
			tmo = (int)(SWEEP_NS / 1000000); /* van_sweep_stuck's */
		/* Polled links: ask for their doorbells, or do not
		 * sleep if bytes came meanwhile. */
		int nr = 0;

		if (atomic_load_explicit(&v->npolled, memory_order_relaxed)) {
			pthread_mutex_lock(&v->dispatch_mu);
			nr = polled_events(v, evs + 32, 0, 32, 1);
			pthread_mutex_unlock(&v->dispatch_mu);
		}

		n = epoll_wait(v->epfd, evs, 32, nr ? 0 : tmo);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			dt__log(0, "epoll_wait: %s", strerror(errno));
			break;
		}
		if (nr)
			memmove(evs + n, evs + 32, (size_t)nr * sizeof(*evs));
		n += nr;
		pthread_mutex_lock(&v->dispatch_mu);
		(void)dispatch(v, evs, n);
		pthread_mutex_unlock(&v->dispatch_mu);
		kick_epoll_sleepers(v, evs, n, 0);
	}
	return NULL;
}

/*
 * ---- the shared loops (DT_SHARED_LOOP) ----
 *
 * A van in shared mode starts no thread: its epoll set is a source of the
 * process's shared I/O loop (loop_shared.c), which calls io_round when
 * the set holds an event, and its handshake set one of the shared
 * handshake loop (van_accept.c: van_hs_round). A round is one pass of
 * van_io_main's loop that never sleeps: the events there are now (at most
 * 32, so one busy node does not hold the others up; the set stays
 * readable for the next round), dispatched under dispatch_mu as any. The
 * loop's thread is the van's I/O thread for that while: its sends queue
 * what a peer does not take (van_send.c), and callers of dt__van_wait
 * sleep on their condition variable, since there is no I/O thread to park
 * (DT_SPIN_US and DT_WAIT_DIRECT do not apply).
 */
static void
io_round(void *arg)
{
	dt_van *v = arg;
	struct epoll_event evs[64];
	int n, nr = 0;

	pthread_mutex_lock(&v->dispatch_mu);
	n = epoll_wait(v->epfd, evs, 32, 0);
	if (n < 0)
		n = 0;
	if (atomic_load_explicit(&v->npolled, memory_order_relaxed))
		n = polled_events(v, evs, n, 64, 0);
	if (n > 0)
		(void)dispatch(v, evs, n);
	/* As the I/O thread before it sleeps: ask the polled links for their
	 * doorbells; if bytes came meanwhile, come round again. */
	if (atomic_load_explicit(&v->npolled, memory_order_relaxed))
		nr = polled_events(v, evs, 0, 32, 1);
	pthread_mutex_unlock(&v->dispatch_mu);
	if (nr)
		van_wake_io(v);
}

/* The shared loop's periodic call: the sweeps and a listener's pause, as
 * the I/O thread's timeouts would, while there is any to do. */
static void
io_tick(void *arg)
{
	dt_van *v = arg;

	if (atomic_load(&v->unvouched) == 0 &&
	    atomic_load(&v->queued_conns) == 0 &&
	    atomic_load(&v->accept_paused_until) == 0)
		return;
	pthread_mutex_lock(&v->dispatch_mu);
	(void)dispatch(v, NULL, 0);
	pthread_mutex_unlock(&v->dispatch_mu);
}

dt_err
van_shared_start(dt_van *v)
{
	dt_err err;

	if ((err = dt__loop_get(DT_LOOP_IO, &v->io_loop)) ||
	    (err = dt__loop_add_fd(v->io_loop, v->epfd, io_round, io_tick, v,
	                           &v->io_src)))
		goto fail;
	if ((err = dt__loop_get(DT_LOOP_HS, &v->hs_loop)) ||
	    (err = dt__loop_add_fd(v->hs_loop, v->hs_epfd, van_hs_round,
	                           van_hs_tick, v, &v->hs_src)))
		goto fail;
	return DT_OK;
fail:
	van_shared_stop(v);
	return err;
}

/* Take the van out of the shared loops: once this returns, no round of
 * it runs or will run (the van is being destroyed). */
void
van_shared_stop(dt_van *v)
{
	if (v->hs_src)
		dt__loop_remove(v->hs_loop, v->hs_src);
	if (v->io_src)
		dt__loop_remove(v->io_loop, v->io_src);
	dt__loop_put(v->hs_loop);
	dt__loop_put(v->io_loop);
	v->hs_src = v->io_src = NULL;
	v->hs_loop = NULL;
	__atomic_store_n(&v->io_loop, NULL, __ATOMIC_RELEASE);
}

/* Handle whatever has arrived, in this thread, unless another thread is at
 * it; never blocks. Returns 1 if it read part of a big payload that is
 * still coming in (dispatch). */
static int
poll_once(dt_van *v)
{
	struct epoll_event evs[64];
	char saved[512];
	int n, big = 0;

	if (pthread_mutex_trylock(&v->dispatch_mu) != 0)
		return 0;
	/* Polled links are looked at directly; epoll (sockets, a
	 * link's end) every 16th round while there are any. */
	n = atomic_load_explicit(&v->npolled, memory_order_relaxed) > 0 &&
	            (++v->poll_tick & 15) != 0
	        ? 0
	        : epoll_wait(v->epfd, evs, 32, 0);
	n = polled_events(v, evs, n < 0 ? 0 : n, 64, 0);
	if (n > 0) {
		/* The hooks may record errors; they are not this caller's. */
		snprintf(saved, sizeof(saved), "%s", dt_errmsg());
		big = dispatch(v, evs, n);
		dt__errmsg_set(saved);
	}
	pthread_mutex_unlock(&v->dispatch_mu);
	return big;
}

/* Poll until *g moves from seen (1) or the spin budget is spent (0).
 * The caller counts itself in v->pollers meanwhile. */
static int
spin_poll(dt_van *v, dt_gen *g, uint64_t seen)
{
	uint64_t now = dt__now_ns(), end = now + dt__spin_budget_ns();
	int yield_mask = dt__spin_yields() ? 0 : 63;

	for (unsigned i = 1;; i++) {
		int big = poll_once(v);

		if (dt__gen_get(g) != seen)
			return 1;
		/* Bytes of a big payload came in: keep reading it here while
		 * it flows (a pull's answer), as the I/O thread would. */
		if (big)
			end = dt__now_ns() + dt__spin_budget_ns();
		if ((now = dt__now_ns()) >= end)
			return 0;
		/* Let a thread that wants this CPU run. */
		if ((i & (unsigned)yield_mask) == 0)
			sched_yield();
	}
}

/*
 * How long a caller sleeps in epoll_wait in the I/O thread's place
 * (epoll_sleep) before it hands the network back and sleeps on its
 * condition variable, and the longest single epoll_wait meanwhile.
 * Whatever wakes the caller without a message (a peer declared dead by
 * the heartbeat thread, another thread's broadcast) is seen at the end of
 * one epoll_wait at the latest; and a caller that waits long (a slow peer)
 * wakes only this many times before it sleeps for good.
 */
#define EPOLL_SLEEP_NS 20000000ull
#define EPOLL_STEP_MS  1

static atomic_int wait_direct = -1; /* DT_WAIT_DIRECT; -1: unset */

dt_err
dt__van_wait_configure(void)
{
	long on = -1;
	dt_err err = DT_OK;

	if (dt__env_str("DT_WAIT_DIRECT") != NULL)
		err = dt__env_long("DT_WAIT_DIRECT", 1, 0, 1, &on);
	if (err == DT_OK)
		atomic_store(&wait_direct, (int)on);
	return err;
}

/*
 * Whether a caller that would sleep does so in epoll_wait (epoll_sleep).
 * Without DT_WAIT_DIRECT, only when this job has more busy processes on
 * the host than processors: there each wake-up may wait for a time slice,
 * and the I/O thread's hop costs one; where processors are free, the I/O
 * thread receives on one of them while the caller still works on
 * another, and that overlap was measured to win (a 2-rank 4 KiB
 * allreduce on 2 processors: a median of 11.5 us per call through the
 * I/O thread, 22-47 us sleeping in epoll_wait; 4 ranks: 126 us and 95 us).
 */
static int
wait_direct_now(void)
{
	int d = atomic_load_explicit(&wait_direct, memory_order_relaxed);

	return d < 0 ? dt__spin_oversubscribed() : d;
}

/* One epoll_wait in the I/O thread's place, and the dispatch of what it
 * found (the caller counts itself in v->pollers). */
static void
epoll_step(dt_van *v, int tmo_ms)
{
	struct epoll_event evs[64];
	char saved[512];
	int n, nr = 0;

	/* As the I/O thread does before it sleeps: ask the polled links for
	 * their doorbells, or do not sleep if bytes came meanwhile. */
	if (atomic_load_explicit(&v->npolled, memory_order_relaxed)) {
		pthread_mutex_lock(&v->dispatch_mu);
		nr = polled_events(v, evs + 32, 0, 32, 1);
		pthread_mutex_unlock(&v->dispatch_mu);
	}
	n = epoll_wait(v->epfd, evs, 32, nr ? 0 : tmo_ms);
	if (n < 0)
		n = 0; /* (EINTR: the caller's loop goes round) */
	if (nr)
		memmove(evs + n, evs + 32, (size_t)nr * sizeof(*evs));
	n += nr;
	if (n == 0)
		return;
	pthread_mutex_lock(&v->dispatch_mu);
	/* The hooks may record errors; they are not this caller's. */
	snprintf(saved, sizeof(saved), "%s", dt_errmsg());
	(void)dispatch(v, evs, n);
	dt__errmsg_set(saved);
	pthread_mutex_unlock(&v->dispatch_mu);
	kick_epoll_sleepers(v, evs, n, 1);
}

/*
 * Sleep in epoll_wait as the I/O thread would, and handle what comes in
 * this thread, until *g moves from seen (1) or until_ns or EPOLL_SLEEP_NS
 * has passed (0). A message for this caller then costs one wake-up (the
 * sender's doorbell wakes the caller itself) instead of two (the I/O
 * thread, which then wakes the caller): on a machine with more threads
 * than processors each wake-up may wait for a time slice. The I/O thread
 * stays parked meanwhile (the caller counts in v->pollers); if it was
 * already in epoll_wait and takes an event, the caller sees the result
 * at the end of its step.
 */
static int
epoll_sleep(dt_van *v, dt_gen *g, uint64_t seen, uint64_t until_ns)
{
	uint64_t now = dt__now_ns(), end = now + EPOLL_SLEEP_NS;
	int found = 0;

	if (until_ns && until_ns < end)
		end = until_ns;
	atomic_fetch_add(&v->epoll_sleepers, 1);
	while (now < end && !atomic_load(&v->stopping)) {
		uint64_t ms = (end - now + 999999) / 1000000;

		epoll_step(v, (int)DT_MIN(ms, (uint64_t)EPOLL_STEP_MS));
		if ((found = dt__gen_get(g) != seen))
			break;
		now = dt__now_ns();
	}
	atomic_fetch_sub(&v->epoll_sleepers, 1);
	if (found)
		return 1;
	/* The van's stop wakes the I/O thread through the eventfd, which
	 * this thread may have read instead: wake it again. */
	if (atomic_load(&v->stopping))
		van_wake_io(v);
	return 0;
}

void
dt__van_wait(dt_van *v, dt_gen *g, pthread_mutex_t *mu, pthread_cond_t *cv,
             uint64_t until_ns)
{
	uint64_t seen = dt__gen_get(g);
	int slept = 0;

	if (v && v->started && !atomic_load(&v->stopping)) {
		int spin = dt__spin_budget_ns() > 0 &&
		           !dt__spin_contended(dt__now_ns());
		int direct = wait_direct_now();
		int found = 0;

		if (spin || direct) {
			pthread_mutex_unlock(mu);
			atomic_fetch_add(&v->pollers, 1);
			found = spin && spin_poll(v, g, seen);
			if (!found && direct)
				found = epoll_sleep(v, g, seen, until_ns);
			if (found)
				atomic_store(&v->linger_until,
				             dt__now_ns() + LINGER_NS);
			else /* (before pollers drops) */
				atomic_fetch_add(&v->sleepers, 1);
			atomic_fetch_sub(&v->pollers, 1);
			if (!found)
				io_unpark(v);
			pthread_mutex_lock(mu);
			if (found)
				return;
			slept = 1; /* counted in v->sleepers */
		}
	}
	if (dt__gen_get(g) == seen) {
		if (until_ns == 0) {
			pthread_cond_wait(cv, mu);
		} else if (until_ns > dt__now_ns()) {
			struct timespec ts = dt__timespec_at(until_ns);

			pthread_cond_timedwait(cv, mu, &ts);
		}
	}
	if (slept)
		atomic_fetch_sub(&v->sleepers, 1);
}
