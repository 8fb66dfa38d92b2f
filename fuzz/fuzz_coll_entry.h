/*
 * fuzz_coll_entry.h - the checks of the collective-metadata fuzz target
 * (fuzz/fuzz_coll.c), shared with its CTest replay of fuzz/corpus/coll.
 * An input is read as the metadata of each collective command and given
 * to dt__coll_meta_decode (coll/coll_msg.c), the first code to read what
 * another rank sends; a decoded signature is then described as the
 * mismatch reports describe it, from values no one has checked. It traps
 * when DATA or READY decode without a whole signature, when a block that
 * decodes does not encode back to its first bytes, or when a description
 * is empty or unterminated.
 */
#ifndef DT_FUZZ_COLL_ENTRY_H
#define DT_FUZZ_COLL_ENTRY_H

#include "fuzz_check.h"

#include "coll/state.h"

static int
dt_fuzz_coll_one(const uint8_t *data, size_t size)
{
	for (unsigned cmd = DT_CMD_COLL_DATA; cmd <= DT_CMD_COLL_FIN; cmd++) {
		dt__coll_meta md;
		uint8_t again[DT__COLL_META_CMA];
		char text[256];
		uint32_t len;

		dt__clear_error();
		if (dt__coll_meta_decode(data, size, cmd, &md)) {
			FUZZ_CHECK(size < DT__COLL_SIG_LEN);
			FUZZ_CHECK(dt_errmsg()[0] != '\0');
			continue;
		}
		if (cmd != DT_CMD_COLL_DATA && cmd != DT_CMD_COLL_READY) {
			FUZZ_CHECK(!md.has_sig && !md.has_remote);
			continue;
		}
		FUZZ_CHECK(md.has_sig && size >= DT__COLL_SIG_LEN);
		FUZZ_CHECK(md.has_remote == (cmd == DT_CMD_COLL_DATA &&
		                             size >= DT__COLL_META_CMA));
		len = dt__coll_meta_encode(&md.sig, md.has_remote, md.remote,
		                           again);
		FUZZ_CHECK(len <= size && memcmp(again, data, len) == 0);
		memset(text, 0x5a, sizeof(text));
		dt__coll_sig_describe(&md.sig, text, sizeof(text));
		FUZZ_CHECK(memchr(text, '\0', sizeof(text)) && text[0]);
	}
	return 0;
}

#endif
