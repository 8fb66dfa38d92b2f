/*
 * fuzz_check.h - what every fuzz target's checks share: FUZZ_CHECK traps
 * (a crash libFuzzer keeps, a failure the CTest replay reports) when a
 * property of the code under test does not hold.
 */
#ifndef DT_FUZZ_CHECK_H
#define DT_FUZZ_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/util.h"

#define FUZZ_CHECK(cond)                                                       \
	do {                                                                   \
		if (!(cond))                                                   \
			__builtin_trap();                                      \
	} while (0)

#endif
