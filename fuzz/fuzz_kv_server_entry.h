/*
 * fuzz_kv_server_entry.h - the checks of the KV server fuzz target
 * (fuzz/fuzz_kv_server.c), shared with its CTest replay of
 * fuzz/corpus/kv_server. An input is a run of frames that a job's members
 * send one parameter server; each goes through the server's real message
 * handling (src/kv/server.c, with the node played in memory by
 * kv_server_harness.h), from a fresh server in dist_sync with 2 workers
 * and DTRAIN_MAX_TABLE_BYTES at 64 MiB. A frame is
 *
 *   [u8 command - 32 (mod 32)][u8 worker (mod 2)][u32 arg2][u64 key]
 *   [u64 arg0][u64 arg1][u16 meta length][u32 payload length]
 *   meta, payload (both cut to what the input still holds)
 *
 * so every KV command, the real ones and the unknown, can be sent by
 * either worker. Besides "no crash, no out-of-bounds access, no undefined
 * behaviour", it traps when an error answer has no message or an unknown
 * code, when a key holds no floats or lies outside its declared array
 * (or lacks the merge buffer of the dist_sync mode the server is in),
 * when the row tables map more than the limit, or when a scratch buffer
 * bigger than the server keeps outlives its request.
 */
#ifndef DT_FUZZ_KV_SERVER_ENTRY_H
#define DT_FUZZ_KV_SERVER_ENTRY_H

#include "fuzz_check.h"
#include "kv_server_harness.h"

#define FUZZ_KVS_FRAME 36 /* the frame's fixed part */

static uint64_t
fuzz_kvs_le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* What must hold after every frame. */
static void
fuzz_kvs_check(kv_server *s, const dt_msg_hdr *h, uint64_t answers)
{
	entry *e = dense_find(s, h->key);

	if (h_ans.count > answers && (h_ans.last.flags & DT_F_ERROR)) {
		FUZZ_CHECK(h_ans.code > DT_OK &&
		           (int)h_ans.code < DT__ERR_COUNT);
		FUZZ_CHECK(h_ans.msg[0] != '\0');
	}
	if (e && e->initialised)
		FUZZ_CHECK(e->len >= 1 && e->offset < e->n &&
		           e->len <= e->n - e->offset &&
		           (!s->sync || e->merge != NULL));
	FUZZ_CHECK(s->table_bytes <= s->max_table_bytes);
	FUZZ_CHECK(s->gath_cap <= SCRATCH_KEEP && s->half_cap <= SCRATCH_KEEP &&
	           s->dec_cap <= SCRATCH_KEEP);
}

static int
dt_fuzz_kv_server_one(const uint8_t *data, size_t size)
{
	kv_server *s;
	uint64_t seq = 0;

	setenv("DTRAIN_MAX_TABLE_BYTES", "67108864", 1);
	FUZZ_CHECK((s = h_start()) != NULL);
	while (size >= FUZZ_KVS_FRAME) {
		dt_msg_hdr h = {.version = DT_WIRE_VERSION};
		const uint8_t *meta = data + FUZZ_KVS_FRAME;
		size_t ml = (size_t)fuzz_kvs_le(data + 30, 2), pl;
		int w = data[1] % H_WORKERS;
		uint64_t answers = h_ans.count;

		h.cmd = (uint8_t)(DT_CMD_KV_FIRST + data[0] % 32);
		h.arg2 = (uint32_t)fuzz_kvs_le(data + 2, 4);
		h.key = fuzz_kvs_le(data + 6, 8);
		h.arg0 = fuzz_kvs_le(data + 14, 8);
		h.arg1 = fuzz_kvs_le(data + 22, 8);
		pl = (size_t)fuzz_kvs_le(data + 32, 4);
		size -= FUZZ_KVS_FRAME;
		ml = DT_MIN(ml, size);
		pl = DT_MIN(pl, size - ml);
		h.meta_len = (uint32_t)ml;
		h.payload_len = pl;
		h.seq = ++seq;
		h_frame(w, &h, meta, meta + ml);
		fuzz_kvs_check(s, &h, answers);
		data = meta + ml + pl;
		size -= ml + pl;
	}
	h_stop();
	return 0;
}

#endif
