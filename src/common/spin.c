/*
 * spin.c - the process's spin budget (DT_SPIN_US) for spin.h.
 */
#include "common/spin.h"

#include "common/util.h"

#define DEFAULT_SPIN_US 200

static atomic_int spin_us = DEFAULT_SPIN_US;

dt_err
dt__spin_configure(void)
{
	long us;
	dt_err err =
	    dt__env_long("DT_SPIN_US", DEFAULT_SPIN_US, 0, 100000, &us);

	if (err == DT_OK)
		atomic_store(&spin_us, (int)us);
	return err;
}

uint64_t
dt__spin_budget_ns(void)
{
	return (uint64_t)atomic_load_explicit(&spin_us, memory_order_relaxed) *
	       1000u;
}
