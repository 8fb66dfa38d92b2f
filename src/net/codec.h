/*
 * codec.h - the wire format: a fixed 64-byte frame header, a small metadata
 * block and a payload, and bounds-checked readers/writers for the metadata.
 *
 * Every frame is   header (64 B) | meta (meta_len B) | payload (payload_len B)
 * with every header field written in little-endian order one by one (never
 * a struct copy). Payload floats are little-endian IEEE-754 binary32, which
 * is the host format on every platform dtrain builds for (checked at
 * compile time in codec.c). The first frame on a connection is a HELLO or
 * ADD_NODE, and every frame carries the protocol version, so a peer of
 * another version is refused at once.
 */
#ifndef DT_NET_CODEC_H
#define DT_NET_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"

#include "dtrain/err.h"
#include "net/proto.h"

#define DT_WIRE_MAGIC   0x4e525444u /* "DTRN" */
#define DT_WIRE_VERSION 8
#define DT_HDR_SIZE     64
#define DT_MAX_META     (1u << 20)
/* Default payload limit; DT_MAX_MESSAGE (bytes) overrides it. */
#define DT_DEFAULT_MAX_PAYLOAD (16ull << 30)

typedef struct dt_msg_hdr {
	uint8_t version;
	uint8_t cmd;
	uint16_t flags;
	uint32_t sender; /* node id */
	uint32_t recver; /* node id */
	uint32_t arg2;
	uint64_t seq; /* request id, echoed in the response */
	uint64_t key;
	uint64_t arg0;
	uint64_t arg1;
	uint32_t meta_len;
	uint64_t payload_len;
} dt_msg_hdr;

void dt__hdr_encode(const dt_msg_hdr *h, uint8_t out[DT_HDR_SIZE]);
/*
 * Decode and validate a header: magic, version, a command that
 * dt__cmd_in_range accepts,
 * meta_len <= DT_MAX_META and payload_len <= max_payload. On failure the
 * message says which field was wrong and its value.
 */
dt_err dt__hdr_decode(const uint8_t in[DT_HDR_SIZE], uint64_t max_payload,
                      dt_msg_hdr *h);

/*
 * A growable writer for metadata blocks. Errors stick: after a failed
 * allocation every put is a no-op and dt__wbuf_err() reports it.
 */
typedef struct dt_wbuf {
	uint8_t *data;
	size_t len;
	size_t cap;
	int failed;
	uint8_t inline_buf[256];
} dt_wbuf;

void dt__wbuf_init(dt_wbuf *w);
void dt__wbuf_fini(dt_wbuf *w);
void dt__wbuf_u8(dt_wbuf *w, uint8_t v);
void dt__wbuf_u32(dt_wbuf *w, uint32_t v);
void dt__wbuf_u64(dt_wbuf *w, uint64_t v);
void dt__wbuf_f64(dt_wbuf *w, double v);
void dt__wbuf_bytes(dt_wbuf *w, const void *p, size_t n);
/* Room for n more bytes at once (one allocation for a known size). */
void dt__wbuf_reserve(dt_wbuf *w, size_t n);
void dt__wbuf_str(dt_wbuf *w, const char *s); /* u32 length + bytes */
dt_err dt__wbuf_err(const dt_wbuf *w);

/*
 * A bounds-checked reader. A read past the end sets an error that sticks;
 * the values read after it are zero. Check dt__rbuf_err() once at the end.
 */
typedef struct dt_rbuf {
	const uint8_t *p;
	size_t len;
	size_t off;
	int failed;
} dt_rbuf;

void dt__rbuf_init(dt_rbuf *r, const void *p, size_t len);
uint8_t dt__rbuf_u8(dt_rbuf *r);
uint32_t dt__rbuf_u32(dt_rbuf *r);
uint64_t dt__rbuf_u64(dt_rbuf *r);
double dt__rbuf_f64(dt_rbuf *r);
/* Copy a string of at most cap-1 bytes, none of them NUL, into out,
 * NUL-terminated; a longer one or one with a NUL inside fails the reader
 * (out is then ""). */
void dt__rbuf_str(dt_rbuf *r, char *out, size_t cap);
const void *dt__rbuf_bytes(dt_rbuf *r, size_t n);
/* DT_OK, or DT_EPROTO naming what (e.g. "ASSIGN") was truncated. */
dt_err dt__rbuf_err(const dt_rbuf *r, const char *what);

#endif
