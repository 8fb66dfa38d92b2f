/*
 * fuzz_optstate_entry.h - the checks of the optimizer-state file fuzz
 * target (fuzz/fuzz_optstate.c), shared with its CTest replay of
 * fuzz/corpus/optstate. An input is written to a file and loaded
 * (dt_kv_load_optimizer_states, kv/kv_optstate.c) into a local store with
 * SGD and momentum and two keys, of 4 and 2 floats - the store the seeds
 * were saved from. Besides "no crash, no overread", it traps when a load
 * fails without a message or changes the store (what the store saves
 * after it differs from what it saved before), or when a load that
 * succeeds leaves a store whose saved file does not load again.
 */
#ifndef DT_FUZZ_OPTSTATE_ENTRY_H
#define DT_FUZZ_OPTSTATE_ENTRY_H

#include "fuzz_check.h"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dtrain/kv.h"

/* The whole of a (small) file, into buf; its length, or -1. */
static long
fuzz_optstate_slurp(const char *path, uint8_t *buf, size_t cap)
{
	FILE *f = fopen(path, "rb");
	size_t n;

	if (f == NULL)
		return -1;
	n = fread(buf, 1, cap, f);
	fclose(f);
	return (long)n;
}

static int
dt_fuzz_optstate_one(const uint8_t *data, size_t size)
{
	static const float one[4] = {1, 1, 1, 1},
	                   half[4] = {.5f, .5f, .5f, .5f};
	char dir[] = "/tmp/dt_fuzz_optstate.XXXXXX", in[64], out[64];
	uint8_t before[512], after[512];
	long nb, na;
	dt_kv *kv = NULL;
	FILE *f;
	dt_err err;

	FUZZ_CHECK(mkdtemp(dir) != NULL);
	snprintf(in, sizeof(in), "%s/in", dir);
	snprintf(out, sizeof(out), "%s/out", dir);
	FUZZ_CHECK((f = fopen(in, "wb")) != NULL);
	FUZZ_CHECK(size == 0 || fwrite(data, 1, size, f) == size);
	fclose(f);
	FUZZ_CHECK(dt_kv_create("local", &kv) == DT_OK);
	FUZZ_CHECK(dt_kv_set_optimizer(kv, "sgd", "lr=0.1,momentum=0.9") ==
	           DT_OK);
	FUZZ_CHECK(dt_kv_init(kv, 1, one, 4) == DT_OK);
	FUZZ_CHECK(dt_kv_init(kv, 2, one, 2) == DT_OK);
	FUZZ_CHECK(dt_kv_push(kv, 1, half, 4) == DT_OK);
	FUZZ_CHECK(dt_kv_save_optimizer_states(kv, out) == DT_OK);
	nb = fuzz_optstate_slurp(out, before, sizeof(before));
	FUZZ_CHECK(nb > 0);
	dt__clear_error();
	err = dt_kv_load_optimizer_states(kv, in);
	FUZZ_CHECK(dt_kv_save_optimizer_states(kv, out) == DT_OK);
	na = fuzz_optstate_slurp(out, after, sizeof(after));
	if (err != DT_OK) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		FUZZ_CHECK(na == nb && memcmp(before, after, (size_t)nb) == 0);
	} else {
		FUZZ_CHECK(dt_kv_load_optimizer_states(kv, out) == DT_OK);
	}
	FUZZ_CHECK(dt_kv_destroy(kv) == DT_OK);
	unlink(in);
	unlink(out);
	rmdir(dir);
	return 0;
}

#endif
