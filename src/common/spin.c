/*
 * spin.c - the process's spin budget (DT_SPIN_US) for spin.h.
 */
#include "common/spin.h"

#include <unistd.h>

#include "common/util.h"

#define DEFAULT_SPIN_US 200

static atomic_int spin_us = DEFAULT_SPIN_US;
static atomic_int spin_set;   /* DT_SPIN_US was given */
static atomic_int spin_yield; /* give the processor away at every round */

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
