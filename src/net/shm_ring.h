/*
 * shm_ring.h - a one-way byte ring in shared memory between two processes
 * of one host: the data path of the same-host transport (shm.c).
 *
 * The receiver creates the ring (an anonymous memfd: never a name in
 * /dev/shm, so nothing is left behind by any exit) and hands the
 * descriptor to the writer, which maps it too. One writer and one reader;
 * bytes come out in the order they went in.
 *
 * Shared memory is the peer's to scribble on, so it is read like the wire:
 * each side keeps its own position (the writer its head, the reader its
 * tail) and only publishes it; the other side's position is checked
 * before it is used (the writer's head may be at most the capacity ahead
 * of the reader's tail, the reader's tail never behind what it was nor
 * past the head). A check that fails is EPROTO and the ring is done.
 *
 * The doorbell: a reader about to sleep arms the ring (dt__ring_arm) and
 * sleeps only if the ring is still empty; a writer that published bytes
 * asks dt__ring_wake whether the reader armed it, and wakes it (an eventfd:
 * the caller's) only then. While the reader polls, a write costs no system
 * call. The same holds the other way for a writer that waits for room.
 */
#ifndef DT_NET_SHM_RING_H
#define DT_NET_SHM_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "dtrain/err.h"

#define DT_RING_MIN (4u << 10) /* capacity bounds (powers of two) */
#define DT_RING_MAX (256u << 20)

typedef struct dt_ring {
	struct dt_ring_hdr *hdr; /* the shared header */
	uint8_t *data;           /* the shared bytes, cap of them */
	size_t cap, map_len;     /* (this side's; never read from hdr) */
	uint64_t pos;            /* this side's position: the writer's head, the
	                            reader's tail */
	uint64_t seen; /* the other side's position last read (checked) */
	int writer;
	int broken;           /* a check failed: every later call is EPROTO */
	uint64_t seg_seq;     /* writer: its last segment's sequence */
	uint64_t seg_claimed; /* reader: the segment it claimed (seq << 3) */
	/* The happens-before edge of the link the ring belongs to (NULL:
	 * none; set by the owner after create or attach): the writer
	 * releases it once the bytes are copied in and before it publishes
	 * them (head or segment), the reader acquires it before it copies
	 * them out. See dt__ring_write. */
	atomic_uint *order;
} dt_ring;

/* Create a ring of cap bytes (a power of two in [DT_RING_MIN,
 * DT_RING_MAX]) for this process to read: *fd is the descriptor to hand
 * to the writer (close it when handed). */
dt_err dt__ring_create(size_t cap, dt_ring *r, int *fd);
/* Map the ring in fd for writing. cap is what the reader said it made;
 * the descriptor's size and the header must agree with it. fd may be
 * closed afterwards. */
dt_err dt__ring_attach(int fd, size_t cap, dt_ring *r);
void dt__ring_unmap(dt_ring *r);

/* Copy up to the free room of iov into the ring: the bytes written, 0 when
 * full, -1 with errno EPROTO when the reader's position is impossible.
 * Every read of iov's memory happens before what a thread of this process
 * does after it reads the link's other ring (r->order). */
ssize_t dt__ring_write(dt_ring *r, const struct iovec *iov, int iovcnt);
/* Copy up to len bytes out: the bytes read, 0 when empty, -1 with errno
 * EPROTO when the writer's position is impossible. */
ssize_t dt__ring_read(dt_ring *r, void *buf, size_t len);
/* Bytes waiting to be read (reader), or free room (writer); -1 (EPROTO)
 * as above. No system call: for a polling loop. */
ssize_t dt__ring_ready(dt_ring *r);

/* Before sleeping: the reader asks to be woken at the next write, the
 * writer (a full ring) at the next read. Returns 1 if what it waits for
 * is already there (bytes, room: do not sleep), 0 if it may sleep. */
int dt__ring_arm(dt_ring *r);
/* After moving its position (a write, a read): 1 if the other side armed
 * the ring and must be woken now (the arming is used up), 0 if it is
 * polling. */
int dt__ring_wake(dt_ring *r);

/*
 * Remote segments (shm_ring.c): a stretch of the stream that stays in the
 * writer's memory until the reader copies it (one copy instead of two).
 * The writer posts one at its position and waits, sending nothing else,
 * until the reader is done with it or until it takes it back (cancel,
 * possible only before the reader claims it); then it goes on. The reader
 * reads the ring up to the segment's place, claims it there and copies
 * its bytes itself, then says done. One segment at a time.
 */
enum {
	DT_SEG_IDLE = 0,
	DT_SEG_POSTED = 1,
	DT_SEG_CLAIMED = 2,
	DT_SEG_DONE = 3,
	DT_SEG_CANCELLED = 4,
};

/* Writer: post len bytes at addr (in the writer's memory) at its
 * position. Wake the reader afterwards as after a write (dt__ring_wake). */
void dt__ring_seg_post(dt_ring *r, uint64_t addr, uint64_t len);
/* Writer: the state of its last segment (DT_SEG_*), -1 if the shared word
 * is impossible (the ring is then done). */
int dt__ring_seg_state(dt_ring *r);
/* Writer: take the segment back; 1 if done (the reader never claimed it:
 * its bytes must go through the ring), 0 if the reader claimed it. */
int dt__ring_seg_cancel(dt_ring *r);
/* Reader: at a segment posted at its position, claim it: 1 with its
 * address and length (1 to max_len, else the ring is done), 0 if there is
 * none to claim here, -1 (EPROTO) when the ring is done. */
int dt__ring_seg_claim(dt_ring *r, uint64_t max_len, uint64_t *addr,
                       uint64_t *len);
/* Reader: every byte of the claimed segment is copied. */
void dt__ring_seg_done(dt_ring *r);
/* Reader: it can read the writer's memory (probed); the writer posts
 * segments only then. */
void dt__ring_set_remote_ok(dt_ring *r);
int dt__ring_remote_ok(dt_ring *r);

#endif
