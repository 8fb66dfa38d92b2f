/*
 * fuzz_optstate.c - libFuzzer target; the checks live in
 * fuzz_optstate_entry.h, shared with the CTest replay of
 * fuzz/corpus/optstate. Build and run: fuzz/README.md.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_optstate_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return dt_fuzz_optstate_one(data, size);
}
