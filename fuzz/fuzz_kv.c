/*
 * fuzz_kv.c - libFuzzer target; the checks live in fuzz_kv_entry.h,
 * shared with the CTest replay of fuzz/corpus/kv. Build and run:
 * fuzz/README.md.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_kv_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return dt_fuzz_kv_one(data, size);
}
