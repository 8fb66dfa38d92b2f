/*
 * fuzz_codec.c - libFuzzer target for the wire codec: frame headers and
 * the NODE_TABLE / ADD_NODE metadata readers, the first code to touch
 * bytes from a peer. The checks live in fuzz_codec_entry.h, shared with
 * the CTest replay of fuzz/corpus/codec. Build and run: fuzz/README.md.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_codec_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return dt_fuzz_codec_one(data, size);
}
