/*
 * fuzz_kv_server.c - libFuzzer target: members' frames at a parameter
 * server's real message handling; the checks live in
 * fuzz_kv_server_entry.h, shared with the CTest replay of
 * fuzz/corpus/kv_server. Build and run: fuzz/README.md.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_kv_server_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return dt_fuzz_kv_server_one(data, size);
}
