/*
 * fuzz_ckpt.c - libFuzzer target; the checks live in fuzz_ckpt_entry.h,
 * shared with the CTest replay of fuzz/corpus/ckpt. Build and run:
 * fuzz/README.md.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_ckpt_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return dt_fuzz_ckpt_one(data, size);
}
