/*
 * fuzz_kv_entry.h - the checks of the KV-body fuzz target
 * (fuzz/fuzz_kv.c), shared with its CTest replay of fuzz/corpus/kv. An
 * input is given to the decoders of kv/kv_msg.c: an error answer (what a
 * worker reads from a server) and KV_SET_OPT's optimizer (what a server
 * reads from worker 0). Besides "no crash, no overread", it traps when a
 * decoder fails without a message, when a decoded error code is outside
 * the table of codes or its message is not terminated, when a decoded
 * optimizer has a parameter outside what the server accepts, or when a
 * decoded value does not encode back to a block that decodes the same.
 */
#ifndef DT_FUZZ_KV_ENTRY_H
#define DT_FUZZ_KV_ENTRY_H

#include "fuzz_check.h"
#include <math.h>

#include "kv/kv_impl.h"

static void
fuzz_kv_error(const uint8_t *data, size_t size)
{
	char msg[512], again[512];
	dt_err code, code2;
	dt_wbuf w;

	memset(msg, 0x5a, sizeof(msg));
	dt__clear_error();
	if (dt__kv_error_decode(data, size, &code, msg, sizeof(msg))) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		return;
	}
	FUZZ_CHECK(code > DT_OK && (int)code < DT__ERR_COUNT);
	FUZZ_CHECK(memchr(msg, '\0', sizeof(msg)) != NULL);
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__kv_error_encode(code, msg, &w) == DT_OK);
	FUZZ_CHECK(dt__kv_error_decode(w.data, w.len, &code2, again,
	                               sizeof(again)) == DT_OK);
	FUZZ_CHECK(code2 == code && strcmp(msg, again) == 0);
	dt__wbuf_fini(&w);
}

static void
fuzz_kv_opt(const uint8_t *data, size_t size)
{
	dt_opt o, o2;
	dt_rbuf r;
	dt_wbuf w;

	dt__rbuf_init(&r, data, size);
	dt__clear_error();
	if (dt__opt_decode(&r, &o)) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		return;
	}
	FUZZ_CHECK(o.kind == DT_OPT_SGD || o.kind == DT_OPT_ADAM);
	FUZZ_CHECK(isfinite(o.p.lr) && o.p.momentum >= 0 && o.p.momentum < 1);
	dt__wbuf_init(&w);
	dt__opt_encode(&o, &w);
	FUZZ_CHECK(dt__wbuf_err(&w) == DT_OK);
	dt__rbuf_init(&r, w.data, w.len);
	FUZZ_CHECK(dt__opt_decode(&r, &o2) == DT_OK);
	FUZZ_CHECK(memcmp(&o.p, &o2.p, sizeof(o.p)) == 0 && o.kind == o2.kind);
	dt__wbuf_fini(&w);
}

static int
dt_fuzz_kv_one(const uint8_t *data, size_t size)
{
	fuzz_kv_error(data, size);
	fuzz_kv_opt(data, size);
	return 0;
}

#endif
