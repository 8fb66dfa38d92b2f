/*
 * shm_ring.c - a one-way byte ring in shared memory (shm_ring.h).
 *
 * Layout of the memfd: a page of header, then cap bytes of data. The
 * header's fields each have a cache line, so that the writer's head and
 * the reader's tail do not share one:
 *   line 0: magic, version, cap (the creator's, checked by the writer);
 *   line 1: head, bytes ever written (the writer publishes);
 *   line 2: tail, bytes ever read (the reader publishes);
 *   line 3: armed, the reader's request for a doorbell when bytes come;
 *   line 4: room_armed, the writer's request for one when room comes;
 *   line 5: seg, the state of the writer's remote segment (below);
 *   line 6: where the segment goes in the stream, its address and length;
 *   line 7: remote_ok, the reader's word that it can read the writer's
 *           memory.
 * A remote segment is a stretch of the stream that is not in the ring:
 * the writer posts the place of its bytes in its own memory, the reader
 * copies them straight into its buffer (cross-memory attach, net/cma.c)
 * when its position reaches the segment, and says when it is done; the
 * writer may take the segment back as long as the reader has not claimed
 * it. seg holds (sequence << 3) | state, so that a state of an earlier
 * segment is never taken for the current one's.
 * Positions are 64-bit counts that never wrap; a byte's place in data is
 * its position modulo cap. The memfd is sealed against shrinking before
 * it is handed over, so no side can make the other's mapping fault.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "net/shm_ring.h"

#define RING_MAGIC   0x676e6952747464ull /* "dtdRing" */
#define RING_VERSION 1u
#define HDR_BYTES    4096u
#define LINE         64

struct dt_ring_hdr {
	uint64_t magic;
	uint32_t version, pad;
	uint64_t cap;
	_Alignas(LINE) _Atomic uint64_t head;
	_Alignas(LINE) _Atomic uint64_t tail;
	_Alignas(LINE) _Atomic uint32_t armed;
	_Alignas(LINE) _Atomic uint32_t room_armed;
	_Alignas(LINE) _Atomic uint64_t seg;
	_Alignas(LINE) _Atomic uint64_t seg_at;
	_Atomic uint64_t seg_addr, seg_len;
	_Alignas(LINE) _Atomic uint32_t remote_ok;
};

#define SEG_STATE(v) ((int)((v)&7u))
#define SEG_SEQ(v)   ((v) >> 3)

_Static_assert(sizeof(struct dt_ring_hdr) <= HDR_BYTES, "ring header");

static int
cap_ok(size_t cap)
{
	return cap >= DT_RING_MIN && cap <= DT_RING_MAX &&
	       (cap & (cap - 1)) == 0;
}

static dt_err
map(int fd, size_t cap, int writer, dt_ring *r)
{
	size_t len = HDR_BYTES + cap;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return dt__fail(DT_ESYS,
		                "mapping a shared-memory ring of %zu "
		                "bytes: %s",
		                cap, strerror(errno));
	memset(r, 0, sizeof(*r));
	r->hdr = p;
	r->data = (uint8_t *)p + HDR_BYTES;
	r->cap = cap;
	r->map_len = len;
	r->writer = writer;
	return DT_OK;
}

dt_err
dt__ring_create(size_t cap, dt_ring *r, int *fd_out)
{
	int fd;
	dt_err err;

	if (!cap_ok(cap))
		return dt__fail(DT_EINVAL,
		                "shared-memory ring of %zu bytes: the size "
		                "must be a power of two from %u to %u",
		                cap, DT_RING_MIN, DT_RING_MAX);
	fd = memfd_create("dtrain-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return dt__fail(DT_ESYS, "memfd_create: %s", strerror(errno));
	if (ftruncate(fd, (off_t)(HDR_BYTES + cap)) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
	        0) {
		err = dt__fail(DT_ESYS, "sizing a shared-memory ring: %s",
		               strerror(errno));
		close(fd);
		return err;
	}
	if ((err = map(fd, cap, 0, r))) {
		close(fd);
		return err;
	}
	r->hdr->magic = RING_MAGIC;
	r->hdr->version = RING_VERSION;
	r->hdr->cap = cap;
	*fd_out = fd;
	return DT_OK;
}

dt_err
dt__ring_attach(int fd, size_t cap, dt_ring *r)
{
	struct stat st;
	int seals;
	dt_err err;

	if (!cap_ok(cap))
		return dt__fail(DT_EPROTO,
		                "shared-memory ring: a size of %zu bytes was "
		                "announced",
		                cap);
	if (fstat(fd, &st) != 0)
		return dt__fail(DT_ESYS, "shared-memory ring: %s",
		                strerror(errno));
	seals = fcntl(fd, F_GET_SEALS);
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != HDR_BYTES + cap ||
	    seals < 0 || !(seals & F_SEAL_SHRINK))
		return dt__fail(DT_EPROTO,
		                "shared-memory ring: the descriptor is not a "
		                "sealed segment of %zu bytes",
		                (size_t)HDR_BYTES + cap);
	if ((err = map(fd, cap, 1, r)))
		return err;
	if (r->hdr->magic != RING_MAGIC || r->hdr->version != RING_VERSION ||
	    r->hdr->cap != cap ||
	    atomic_load_explicit(&r->hdr->head, memory_order_relaxed) != 0 ||
	    atomic_load_explicit(&r->hdr->tail, memory_order_relaxed) != 0) {
		dt__ring_unmap(r);
		return dt__fail(DT_EPROTO, "shared-memory ring: its header "
		                           "is not a new ring's");
	}
	return DT_OK;
}

void
dt__ring_unmap(dt_ring *r)
{
	if (r->hdr)
		munmap(r->hdr, r->map_len);
	r->hdr = NULL;
	r->data = NULL;
}

static ssize_t
broken(dt_ring *r)
{
	r->broken = 1;
	errno = EPROTO;
	return -1;
}

/* The other side's position, checked: the reader's tail moves forward and
 * never past the head; the writer's head moves forward and never more than
 * cap past the tail. -1 when impossible. */
static int
peer_pos(dt_ring *r, uint64_t *out)
{
	uint64_t p;

	if (r->broken)
		return -1;
	if (r->writer) {
		p = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
		if (p < r->seen || p > r->pos)
			return -1;
	} else {
		p = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
		if (p < r->seen || p - r->pos > r->cap)
			return -1;
	}
	r->seen = p;
	*out = p;
	return 0;
}

/*
 * Reader: the writer's head, checked, in *head, and a segment it posted,
 * checked like a position: 1 with its place in *at, 0 when none is posted,
 * -1 when a position is impossible (the segment's behind this reader, or
 * ahead of the bytes written). The segment is looked at before the head:
 * the writer publishes its head before it posts a segment there, and
 * writes nothing after one until it is done or taken back, so a head read
 * later is never behind the segment, and bytes read up to it (when the
 * post is not seen yet) are never past it. *seg (if not NULL): the state
 * word the answer is about.
 */
static int
reader_view(dt_ring *r, uint64_t *head, uint64_t *at, uint64_t *seg)
{
	uint64_t v = atomic_load_explicit(&r->hdr->seg, memory_order_acquire);
	int posted = SEG_STATE(v) == DT_SEG_POSTED;

	if (seg)
		*seg = v;
	if (posted)
		*at =
		    atomic_load_explicit(&r->hdr->seg_at, memory_order_relaxed);
	if (peer_pos(r, head) != 0)
		return -1;
	if (!posted)
		return 0;
	return *at < r->pos || *at > *head ? -1 : 1;
}

ssize_t
dt__ring_ready(dt_ring *r)
{
	uint64_t p, at;
	int rc;

	if (r->writer) {
		if (peer_pos(r, &p) != 0)
			return broken(r);
		return (ssize_t)(r->cap - (r->pos - p));
	}
	if ((rc = reader_view(r, &p, &at, NULL)) < 0)
		return broken(r);
	if (rc == 1)
		p = at;
	/* A segment here is something to read too. */
	return p == r->pos ? rc : (ssize_t)(p - r->pos);
}

ssize_t
dt__ring_write(dt_ring *r, const struct iovec *iov, int iovcnt)
{
	uint64_t tail;
	size_t room, done = 0;

	if (!r->writer || peer_pos(r, &tail) != 0)
		return broken(r);
	room = r->cap - (size_t)(r->pos - tail);
	for (int i = 0; i < iovcnt && done < room; i++) {
		const uint8_t *src = iov[i].iov_base;
		size_t n =
		    iov[i].iov_len < room - done ? iov[i].iov_len : room - done;

		while (n > 0) {
			size_t at = (size_t)(r->pos + done) & (r->cap - 1);
			size_t k = r->cap - at < n ? r->cap - at : n;

			memcpy(r->data + at, src, k);
			src += k;
			n -= k;
			done += k;
		}
	}
	if (done) {
		/*
		 * The link's edge is released here, after the copy and before
		 * the bytes are published, and not before the copy: the answer
		 * to these bytes may come back into the very memory they were
		 * copied from (a pushpull in place), and it can only come
		 * after the peer saw the head. Only the peer, in another
		 * process, orders the two; the edge makes this process's
		 * reader (which acquires it before copying the answer out)
		 * ordered after the copy too, as a socket's send and receive
		 * are.
		 */
		if (r->order)
			atomic_fetch_add_explicit(r->order, 1,
			                          memory_order_release);
		r->pos += done;
		atomic_store_explicit(&r->hdr->head, r->pos,
		                      memory_order_release);
	}
	return (ssize_t)done;
}

ssize_t
dt__ring_read(dt_ring *r, void *buf, size_t len)
{
	uint64_t head;
	size_t n, done = 0;
	uint8_t *dst = buf;
	uint64_t seg_at;
	int rc;

	/* Not past a posted segment: its bytes come from elsewhere. */
	if (r->writer || (rc = reader_view(r, &head, &seg_at, NULL)) < 0)
		return broken(r);
	if (rc == 1)
		head = seg_at;
	n = (size_t)(head - r->pos) < len ? (size_t)(head - r->pos) : len;
	if (n && r->order) /* (before the copy: it may land in place) */
		(void)atomic_load_explicit(r->order, memory_order_acquire);
	while (done < n) {
		size_t at = (size_t)(r->pos + done) & (r->cap - 1);
		size_t k = r->cap - at < n - done ? r->cap - at : n - done;

		memcpy(dst + done, r->data + at, k);
		done += k;
	}
	if (done) {
		r->pos += done;
		atomic_store_explicit(&r->hdr->tail, r->pos,
		                      memory_order_release);
	}
	return (ssize_t)done;
}

/* The flag this side arms: the reader's for bytes, the writer's for room;
 * and the flag it answers: the other one. */
static _Atomic uint32_t *
my_flag(dt_ring *r)
{
	return r->writer ? &r->hdr->room_armed : &r->hdr->armed;
}

static _Atomic uint32_t *
their_flag(dt_ring *r)
{
	return r->writer ? &r->hdr->armed : &r->hdr->room_armed;
}

int
dt__ring_arm(dt_ring *r)
{
	/* Store the request, then look (seq_cst both): a peer that moved
	 * its position before this look is seen here, one after it sees the
	 * request in dt__ring_wake. */
	atomic_store_explicit(my_flag(r), 1, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	/* Bytes (or a segment), room, or a broken ring (-1: the call that
	 * follows reports it). */
	return dt__ring_ready(r) != 0;
}

int
dt__ring_wake(dt_ring *r)
{
	_Atomic uint32_t *f = their_flag(r);

	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(f, memory_order_relaxed) == 0)
		return 0;
	return atomic_exchange_explicit(f, 0, memory_order_acq_rel) != 0;
}

/* ---- remote segments ---- */

void
dt__ring_seg_post(dt_ring *r, uint64_t addr, uint64_t len)
{
	r->seg_seq++;
	if (r->order) /* (as a write's bytes: dt__ring_write) */
		atomic_fetch_add_explicit(r->order, 1, memory_order_release);
	atomic_store_explicit(&r->hdr->seg_at, r->pos, memory_order_relaxed);
	atomic_store_explicit(&r->hdr->seg_addr, addr, memory_order_relaxed);
	atomic_store_explicit(&r->hdr->seg_len, len, memory_order_relaxed);
	/* seq_cst: ordered before the look at the reader's doorbell request
	 * in dt__ring_wake, as a position is. */
	atomic_store_explicit(&r->hdr->seg, r->seg_seq << 3 | DT_SEG_POSTED,
	                      memory_order_seq_cst);
}

int
dt__ring_seg_state(dt_ring *r)
{
	uint64_t v = atomic_load_explicit(&r->hdr->seg, memory_order_acquire);

	if (r->broken || SEG_SEQ(v) != r->seg_seq ||
	    SEG_STATE(v) < DT_SEG_POSTED || SEG_STATE(v) > DT_SEG_CANCELLED) {
		r->broken = 1;
		return -1;
	}
	return SEG_STATE(v);
}

int
dt__ring_seg_cancel(dt_ring *r)
{
	uint64_t want = r->seg_seq << 3 | DT_SEG_POSTED;

	return atomic_compare_exchange_strong_explicit(
	    &r->hdr->seg, &want, r->seg_seq << 3 | DT_SEG_CANCELLED,
	    memory_order_acq_rel, memory_order_acquire);
}

int
dt__ring_seg_claim(dt_ring *r, uint64_t max_len, uint64_t *addr, uint64_t *len)
{
	uint64_t head, at, v;
	int rc;

	if (r->writer || (rc = reader_view(r, &head, &at, &v)) < 0)
		return (int)broken(r);
	if (rc == 0 || at != r->pos)
		return 0;
	/* Read after v: if they are a later segment's, the writer has taken
	 * v's back and posted again, and the exchange below fails. */
	uint64_t a =
	    atomic_load_explicit(&r->hdr->seg_addr, memory_order_relaxed);
	uint64_t n =
	    atomic_load_explicit(&r->hdr->seg_len, memory_order_relaxed);

	if (n == 0 || n > max_len)
		return (int)broken(r);
	if (!atomic_compare_exchange_strong_explicit(
	        &r->hdr->seg, &v, (v & ~(uint64_t)7) | DT_SEG_CLAIMED,
	        memory_order_acq_rel, memory_order_acquire))
		return 0; /* taken back: its bytes come through the ring */
	r->seg_claimed = v & ~(uint64_t)7;
	if (r->order) /* (before the caller copies the segment) */
		(void)atomic_load_explicit(r->order, memory_order_acquire);
	*addr = a;
	*len = n;
	return 1;
}

void
dt__ring_seg_done(dt_ring *r)
{
	atomic_store_explicit(&r->hdr->seg, r->seg_claimed | DT_SEG_DONE,
	                      memory_order_release);
}

void
dt__ring_set_remote_ok(dt_ring *r)
{
	atomic_store_explicit(&r->hdr->remote_ok, 1, memory_order_release);
}

int
dt__ring_remote_ok(dt_ring *r)
{
	return atomic_load_explicit(&r->hdr->remote_ok, memory_order_acquire) ==
	       1;
}
