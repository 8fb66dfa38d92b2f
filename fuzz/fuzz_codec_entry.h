/*
 * fuzz_codec_entry.h - the one input handler shared by the libFuzzer
 * target (fuzz/fuzz_codec.c) and its CTest replay
 * (tests/unit/fuzz_replay_test.c), so a crash the fuzzer finds is replayed
 * by exactly the code that found it.
 *
 * An input is read as what a peer can send before anyone has
 * authenticated it: the first 64 bytes as a frame header, everything after
 * as a metadata block, which is parsed both as a NODE_TABLE and as an
 * ADD_NODE the way node.c and scheduler.c parse them. Besides "no crash,
 * no overread" (ASan), the handler checks properties and traps when one
 * fails:
 *   - a header that decodes has every length within its limit, and
 *     re-encodes to the very bytes it came from;
 *   - a header that fails to decode leaves a message in dt_errmsg();
 *   - a reader never moves past its end, reads after a failure give 0,
 *     and every string it returns is NUL-terminated within its buffer;
 *   - an ADD_NODE block that parses re-encodes to the bytes consumed.
 * The handler allocates nothing sized by the input.
 */
#ifndef DT_FUZZ_CODEC_ENTRY_H
#define DT_FUZZ_CODEC_ENTRY_H

#include "fuzz_check.h"

#include "core/msg.h"
#include "net/codec.h"

/* Right after a string read: the string is terminated inside its
 * buffer, and empty if the reader has failed (never a cut value). */
static void
fuzz_check_str(const dt_rbuf *r, const char *s, size_t cap)
{
	FUZZ_CHECK(memchr(s, '\0', cap) != NULL);
	if (r->failed)
		FUZZ_CHECK(s[0] == '\0');
	FUZZ_CHECK(r->off <= r->len);
}

static void
fuzz_header(const uint8_t *data, size_t size)
{
	/* Two limits: the default, and a small DT_MAX_MESSAGE. */
	const uint64_t limits[] = {DT_DEFAULT_MAX_PAYLOAD, 4096};
	uint8_t again[DT_HDR_SIZE];

	if (size < DT_HDR_SIZE)
		return;
	for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		dt_msg_hdr h;
		dt_err err;

		dt__clear_error();
		err = dt__hdr_decode(data, limits[i], &h);
		if (err != DT_OK) {
			FUZZ_CHECK(err == DT_EPROTO || err == DT_ETOOBIG);
			FUZZ_CHECK(dt_errmsg()[0] != '\0');
			continue;
		}
		FUZZ_CHECK(h.meta_len <= DT_MAX_META);
		FUZZ_CHECK(h.payload_len <= limits[i]);
		FUZZ_CHECK(h.version == DT_WIRE_VERSION);
		FUZZ_CHECK(h.cmd != 0);
		FUZZ_CHECK(dt__cmd_name(h.cmd) != NULL);
		dt__hdr_encode(&h, again);
		FUZZ_CHECK(memcmp(again, data, DT_HDR_SIZE) == 0);
	}
}

/* NODE_TABLE as node.c's parse_table reads it, without its allocation:
 * the entry count is bounded by what the block can hold. */
static void
fuzz_node_table(const uint8_t *meta, size_t len)
{
	dt_rbuf r;
	dt_node_entry e;
	uint32_t id, ns, nw;
	uint64_t count;

	dt__rbuf_init(&r, meta, len);
	id = dt__rbuf_u32(&r);
	ns = dt__rbuf_u32(&r);
	nw = dt__rbuf_u32(&r);
	count = 1ull + ns + nw; /* 64-bit: no wrap */
	(void)id;
	if (count > DT_MAX_NODES)
		count = DT_MAX_NODES;
	for (uint64_t i = 0; i < count && !r.failed; i++) {
		memset(&e, 0x5a, sizeof(e));
		e.role = (dt_role)dt__rbuf_u8(&r);
		e.rank = (int)dt__rbuf_u32(&r);
		dt__rbuf_str(&r, e.host, sizeof(e.host));
		fuzz_check_str(&r, e.host, sizeof(e.host));
		e.port = (int)dt__rbuf_u32(&r);
		e.pid = (int)dt__rbuf_u32(&r);
		if (r.failed) {
			/* Values read after the failure are zero. */
			FUZZ_CHECK(e.pid == 0);
		}
	}
	FUZZ_CHECK(r.off <= r.len);
	FUZZ_CHECK((dt__rbuf_err(&r, "NODE_TABLE") == DT_OK) == !r.failed);
	if (r.failed) {
		FUZZ_CHECK(dt__rbuf_u32(&r) == 0);
		FUZZ_CHECK(dt__rbuf_bytes(&r, 0) == NULL);
	}
}

/* ADD_NODE as scheduler.c's on_add_node reads it. */
static void
fuzz_add_node(const uint8_t *meta, size_t len)
{
	dt_rbuf r;
	uint8_t role;
	uint32_t want, port, pid, ns, nw;
	char host[DT_HOST_MAX];
	dt_wbuf w;

	memset(host, 0x5a, sizeof(host));
	dt__rbuf_init(&r, meta, len);
	role = dt__rbuf_u8(&r);
	want = dt__rbuf_u32(&r);
	dt__rbuf_str(&r, host, sizeof(host));
	fuzz_check_str(&r, host, sizeof(host));
	port = dt__rbuf_u32(&r);
	pid = dt__rbuf_u32(&r);
	ns = dt__rbuf_u32(&r);
	nw = dt__rbuf_u32(&r);
	FUZZ_CHECK(r.off <= r.len);
	if (r.failed) {
		FUZZ_CHECK(nw == 0);
		FUZZ_CHECK(dt__rbuf_err(&r, "ADD_NODE") == DT_EPROTO);
		return;
	}
	FUZZ_CHECK(dt__rbuf_err(&r, "ADD_NODE") == DT_OK);
	/* What was read writes back to what was consumed (a host with a
	 * NUL inside fails the reader). */
	dt__wbuf_init(&w);
	dt__wbuf_u8(&w, role);
	dt__wbuf_u32(&w, want);
	dt__wbuf_str(&w, host);
	dt__wbuf_u32(&w, port);
	dt__wbuf_u32(&w, pid);
	dt__wbuf_u32(&w, ns);
	dt__wbuf_u32(&w, nw);
	FUZZ_CHECK(dt__wbuf_err(&w) == DT_OK);
	FUZZ_CHECK(w.len == r.off && memcmp(w.data, meta, w.len) == 0);
	dt__wbuf_fini(&w);
}

/* The whole input: a header, then a metadata block. */
static int
dt_fuzz_codec_one(const uint8_t *data, size_t size)
{
	fuzz_header(data, size);
	/* The block after a header, and the whole input as a block too, so
	 * short inputs reach the metadata readers. */
	if (size > DT_HDR_SIZE) {
		fuzz_node_table(data + DT_HDR_SIZE, size - DT_HDR_SIZE);
		fuzz_add_node(data + DT_HDR_SIZE, size - DT_HDR_SIZE);
	}
	fuzz_node_table(data, size);
	fuzz_add_node(data, size);
	return 0;
}

#endif
