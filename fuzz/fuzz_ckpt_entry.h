/*
 * fuzz_ckpt_entry.h - the checks of the server checkpoint fuzz target
 * (fuzz/fuzz_ckpt.c), shared with its CTest replay of fuzz/corpus/ckpt.
 * An input is a checkpoint's body (kv/ckpt.c: header and every store
 * kind's section, the many-key store's included); its trailer (length,
 * CRC-32, end mark) is made here, so that what is explored is the reading
 * of the records, not the checksum that guards them. The body is read as
 * `dtrain checkpoint show` reads a file (dt__ckpt_summary). Besides "no
 * crash, no overread, no allocation the file's size does not justify",
 * it traps when a read fails without a message naming the file.
 */
#ifndef DT_FUZZ_CKPT_ENTRY_H
#define DT_FUZZ_CKPT_ENTRY_H

#include "fuzz_check.h"
#include <stdlib.h>
#include <string.h>

#include "kv/kv_impl.h"

static int
dt_fuzz_ckpt_one(const uint8_t *data, size_t size)
{
	uint8_t *buf = malloc(size + DT_CKPT_TRAILER);
	char summary[512];
	size_t len;
	dt_err err;

	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	len = dt__ckpt_seal(buf, size);
	err = dt__ckpt_summary("f.ckpt", buf, len, summary, sizeof(summary));
	FUZZ_CHECK(
	    err == DT_OK ||
	    (err != DT_ENOMEM ? strstr(dt_errmsg(), "f.ckpt") != NULL : 1));
	free(buf);
	return 0;
}

#endif
