/*
 * spin.c - the process's spin budget (DT_SPIN_US) for spin.h.
 */
#include "common/spin.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/util.h"

#define DEFAULT_SPIN_US 200
#define LOAD_EVERY_NS   50000000ull /* how often the machine's load is read */

static atomic_int spin_us = DEFAULT_SPIN_US;
static atomic_int spin_set;      /* DT_SPIN_US was given */
static atomic_int spin_yield;    /* give the processor away at every round */
static atomic_int busy_ours = 1; /* this job's busy processes on this host */
static atomic_int oversub;       /* ... more than its processors */
static _Atomic uint64_t load_read_ns; /* when the load was last read */
static atomic_int contended;          /* others fill the processors */

dt_err
dt__spin_configure(void)
{
	long us;
	dt_err err =
	    dt__env_long("DT_SPIN_US", DEFAULT_SPIN_US, 0, 100000, &us);

	if (err == DT_OK) {
		atomic_store(&spin_us, (int)us);
		atomic_store(&spin_set, dt__env_str("DT_SPIN_US") != NULL);
	}
	return err;
}

int
dt__spin_fit(int busy_here)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (busy_here > 0)
		atomic_store(&busy_ours, busy_here);
	atomic_store(&oversub, cpus >= 1 && busy_here > cpus);
	if (atomic_load(&spin_set) || cpus < 1 || busy_here <= cpus)
		return 0;
	/* More busy processes than processors: a waiter that spins in
	 * place would hold the processor that the one it waits for needs,
	 * and one that sleeps pays a wake-up for every message. So it polls
	 * and gives the processor away at every round: whoever is runnable
	 * goes first, and the waiter sees its answer the next time it is
	 * scheduled, without a wake-up. */
	atomic_store(&spin_yield, 1);
	return 1;
}

int
dt__spin_oversubscribed(void)
{
	return atomic_load_explicit(&oversub, memory_order_relaxed);
}

uint64_t
dt__spin_budget_ns(void)
{
	return (uint64_t)atomic_load_explicit(&spin_us, memory_order_relaxed) *
	       1000u;
}

int
dt__spin_yields(void)
{
	return atomic_load_explicit(&spin_yield, memory_order_relaxed);
}

long
dt__loadavg_runnable(const char *text)
{
	const char *p = text;
	char *end;
	long r;

	for (int field = 0; field < 3; field++) {
		while (*p && *p != ' ')
			p++;
		while (*p == ' ')
			p++;
	}
	if (*p < '0' || *p > '9')
		return -1;
	r = strtol(p, &end, 10);
	return *end != '/' || r < 0 ? -1 : r;
}

int
dt__spin_judge(long runnable, long ours, long cpus)
{
	/* Others than this job's busy processes could fill every processor
	 * by themselves: a waiter that polled would take a processor from
	 * them or from the peer it waits for, and be scheduled after them;
	 * one that sleeps is woken ahead of them when its answer comes. */
	return cpus > 0 && runnable >= 0 && runnable - ours >= cpus;
}

/* The kernel's count of runnable threads now; -1 when unknown. */
static long
runnable_now(void)
{
	char buf[128];
	ssize_t n;
	int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return dt__loadavg_runnable(buf);
}

int
dt__spin_contended(uint64_t now_ns)
{
	uint64_t last =
	    atomic_load_explicit(&load_read_ns, memory_order_relaxed);

	if (atomic_load_explicit(&spin_set, memory_order_relaxed))
		return 0;
	if (now_ns - last < LOAD_EVERY_NS ||
	    !atomic_compare_exchange_strong(&load_read_ns, &last, now_ns))
		return atomic_load_explicit(&contended, memory_order_relaxed);
	atomic_store(&contended,
	             dt__spin_judge(runnable_now(), atomic_load(&busy_ours),
	                            sysconf(_SC_NPROCESSORS_ONLN)));
	return atomic_load_explicit(&contended, memory_order_relaxed);
}
