/*
 * spin.h - waiting for another thread without paying for a sleep and a
 * wake-up when the wait is short.
 *
 * A thread that waits for a reply (a KV push, a collective's next message)
 * would normally sleep on a condition variable that the I/O thread signals.
 * On a small message the futex wake-ups and reschedules cost as much as the
 * network round trip itself. So the waiter first spends up to DT_SPIN_US
 * microseconds reading the network itself and watching a generation
 * counter, which the signalling side bumps whenever it changes the state
 * the waiter looks at (under its mutex, before the broadcast); only then
 * does it sleep. The waiting loop is dt__van_wait (net/van.h).
 *
 * A spin that finds nothing costs at most the budget of CPU time.
 */
#ifndef DT_COMMON_SPIN_H
#define DT_COMMON_SPIN_H

#include <stdatomic.h>
#include <stdint.h>

#include "dtrain/err.h"

typedef atomic_uint_fast64_t dt_gen;

static inline uint64_t
dt__gen_get(dt_gen *g)
{
	return atomic_load_explicit(g, memory_order_acquire);
}

static inline void
dt__gen_bump(dt_gen *g)
{
	atomic_fetch_add_explicit(g, 1, memory_order_release);
}

/* Read DT_SPIN_US (default 200, 0 = never spin) into the process's budget. */
dt_err dt__spin_configure(void);

/*
 * Without DT_SPIN_US, make the spin yield the processor at every round
 * (dt__spin_yields) if busy_here (this job's servers and workers on this
 * machine) exceeds the online processors. 1 if it did.
 */
int dt__spin_fit(int busy_here);

/* 1: a spinning waiter calls sched_yield at every round (oversubscribed);
 * 0: only now and then. */
int dt__spin_yields(void);

/* 1 when the last dt__spin_fit found more busy processes of this job on
 * this host than processors (whether or not DT_SPIN_US is set). */
int dt__spin_oversubscribed(void);

/*
 * Without DT_SPIN_US in the environment: 1 when other processes than this
 * job's busy ones on this host are runnable enough to fill every processor
 * (the kernel's count of runnable threads, read at most every 50 ms), so
 * a waiter should sleep at once rather than poll; 0 otherwise.
 */
int dt__spin_contended(uint64_t now_ns);

/* (for tests) The runnable threads in /proc/loadavg's text ("0.52 0.58
 * 0.59 3/418 12345": 3), -1 when the text is not of that form; and the
 * rule: contended when runnable - ours >= cpus (unknowns: not). */
long dt__loadavg_runnable(const char *text);
int dt__spin_judge(long runnable, long ours, long cpus);

/* The spin budget in nanoseconds (0: never spin). */
uint64_t dt__spin_budget_ns(void);

/* One pause of a spin loop. */
static inline void
dt__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#endif
