/*
 * seal.c - the encrypted-record layer (seal.h): a transport whose links
 * each wrap a link of another transport. sendv seals the caller's bytes
 * into records (up to TX_RECS per call) and writes them to the inner
 * link; what the inner link does not take at once stays here and leaves
 * first at the next sendv, wait_writable or flush (sendv of no bytes), so
 * a caller that may not wait hands its bytes over and asks `unsent` what
 * is still to go. recv reads records from the inner link and opens them,
 * straight into the caller's buffer when it takes a whole record. The
 * descriptor epoll watches, and for a link whose bytes come without waking
 * it the pending and arm ops, are the inner link's.
 *
 * Threads: as any transport's (transport.h): recv in one thread at a time,
 * sendv, wait_writable, unsent and the room arm in one (the sender's).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/util.h"
#include "net/seal.h"

#define TX_RECS    16 /* sealed records per write at most */
#define TX_CAP     ((size_t)TX_RECS * DT_REC_WIRE)
#define RX_RAW_CAP (2 * DT_REC_WIRE)

typedef struct seal_link {
	dt_link inner;
	/* Sending (the sender's thread): sealed records, of which
	 * [out_off, out_len) have not gone yet, and a record's plaintext
	 * gathered from several pieces. */
	dt_crypt *tx;
	uint8_t *txbuf;
	size_t out_off, out_len;
	uint8_t *txplain;
	/* Receiving (the reader's thread): records as read, and an opened
	 * record the caller has not taken yet. */
	dt_crypt *rx;
	uint8_t *rxraw;
	size_t raw_off, raw_len;
	uint8_t *rxplain;
	size_t plain_off, plain_len;
} seal_link;

/* Write what was sealed and has not gone: 0 when all is out, else -1 with
 * errno (EAGAIN: the inner link has no room now). */
static int
flush_out(seal_link *s)
{
	while (s->out_off < s->out_len) {
		struct iovec iov = {s->txbuf + s->out_off,
		                    s->out_len - s->out_off};
		ssize_t w = s->inner.ops->sendv(&s->inner, &iov, 1);

		if (w > 0) {
			s->out_off += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w == 0)
			errno = EAGAIN;
		return -1;
	}
	s->out_off = s->out_len = 0;
	return 0;
}

/* Seal up to TX_RECS records of iov into txbuf: each record takes
 * DT_REC_MAX bytes (straight from the caller's piece when one holds that
 * many), the last of the call what is left. Returns the plaintext taken. */
static size_t
seal_records(seal_link *s, const struct iovec *iov, int iovcnt)
{
	size_t took = 0, off = 0;
	int i = 0;

	while (s->out_len + DT_REC_WIRE <= TX_CAP) {
		while (i < iovcnt && off == iov[i].iov_len) {
			i++;
			off = 0;
		}
		if (i == iovcnt)
			break;
		const uint8_t *p = (const uint8_t *)iov[i].iov_base + off;

		if (iov[i].iov_len - off >= DT_REC_MAX) {
			s->out_len += dt__crypt_seal(s->tx, p, DT_REC_MAX,
			                             s->txbuf + s->out_len);
			off += DT_REC_MAX;
			took += DT_REC_MAX;
			continue;
		}
		size_t g = 0;

		while (g < DT_REC_MAX && i < iovcnt) {
			size_t n = DT_MIN(iov[i].iov_len - off, DT_REC_MAX - g);

			memcpy(s->txplain + g,
			       (const uint8_t *)iov[i].iov_base + off, n);
			g += n;
			off += n;
			if (off == iov[i].iov_len) {
				i++;
				off = 0;
			}
		}
		s->out_len +=
		    dt__crypt_seal(s->tx, s->txplain, g, s->txbuf + s->out_len);
		took += g;
	}
	return took;
}

/* The bytes taken are sealed and this layer's to send: a short inner write
 * leaves the rest in txbuf (unsent), never a record half-told. */
static ssize_t
seal_sendv(dt_link *l, const struct iovec *iov, int iovcnt)
{
	seal_link *s = l->priv;
	size_t took;

	if (flush_out(s) < 0)
		return -1;
	if (iovcnt == 0)
		return 0;
	took = seal_records(s, iov, iovcnt);
	if (flush_out(s) < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
		return -1;
	return (ssize_t)took;
}

static size_t
seal_unsent(const dt_link *l)
{
	const seal_link *s = l->priv;

	return s->out_len - s->out_off;
}

static int
seal_wait_writable(dt_link *l, int timeout_ms)
{
	seal_link *s = l->priv;
	uint64_t end = dt__now_ns() + (uint64_t)timeout_ms * 1000000ull;

	for (;;) {
		uint64_t now = dt__now_ns();
		int left = now < end ? (int)((end - now) / 1000000) : 0;

		if (flush_out(s) == 0)
			return s->inner.ops->wait_writable(&s->inner, left);
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return 1; /* the next sendv tells the error */
		if (!s->inner.ops->wait_writable(&s->inner, left) || left == 0)
			return 0;
	}
}

/* Open the whole record at the front of rxraw into buf + *done when it
 * takes it all, else into rxplain. 0, or -1 with errno EBADMSG. */
static int
open_record(seal_link *s, uint8_t *buf, size_t len, size_t *done, int *more)
{
	size_t have = s->raw_len - s->raw_off;
	const uint8_t *rec = s->rxraw + s->raw_off;
	size_t pl, whole;

	*more = 0;
	if (have < DT_REC_HDR)
		return 0;
	pl = dt__crypt_rec_len(rec);
	if (pl == 0) {
		dt__fail(DT_EAUTH, "bad record length %u",
		         (unsigned)dt__get_u32(rec));
		errno = EBADMSG;
		return -1;
	}
	whole = DT_REC_HDR + pl + DT_REC_TAG;
	if (have < whole)
		return 0;
	int direct = len - *done >= pl;
	uint8_t *dst = direct ? buf + *done : s->rxplain;

	if (dt__crypt_open(s->rx, rec, whole, dst)) {
		errno = EBADMSG;
		return -1;
	}
	s->raw_off += whole;
	if (direct) {
		*done += pl;
	} else {
		s->plain_off = 0;
		s->plain_len = pl;
	}
	*more = 1;
	return 0;
}

/*
 * Opened records into buf, with read(2)'s results: a short count only once
 * the inner link has nothing more now, so a reader's "drained" logic
 * holds. A record that does not open sets errno EBADMSG (the reason in
 * dt_errmsg).
 */
static ssize_t
seal_recv(dt_link *l, void *out, size_t len)
{
	seal_link *s = l->priv;
	uint8_t *buf = out;
	size_t done = 0;

	for (;;) {
		int more;

		if (s->plain_off < s->plain_len) {
			size_t n =
			    DT_MIN(len - done, s->plain_len - s->plain_off);

			memcpy(buf + done, s->rxplain + s->plain_off, n);
			s->plain_off += n;
			done += n;
		}
		if (done == len)
			return (ssize_t)done;
		if (open_record(s, buf, len, &done, &more) < 0)
			return -1;
		if (more)
			continue;
		size_t have = s->raw_len - s->raw_off;

		if (have == 0) {
			s->raw_off = s->raw_len = 0;
		} else if (RX_RAW_CAP - s->raw_len < DT_REC_WIRE) {
			memmove(s->rxraw, s->rxraw + s->raw_off, have);
			s->raw_len = have;
			s->raw_off = 0;
		}
		ssize_t n = s->inner.ops->recv(&s->inner, s->rxraw + s->raw_len,
		                               RX_RAW_CAP - s->raw_len);
		if (n > 0) {
			s->raw_len += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		/* Bytes in hand go first; the end or the error comes again
		 * on the next call. */
		if (done > 0)
			return (ssize_t)done;
		if (n == 0 && s->raw_len > s->raw_off) {
			dt__fail(DT_EAUTH, "the stream ends inside a record");
			errno = EBADMSG;
			return -1;
		}
		return n;
	}
}

static void
seal_expect(dt_link *l, uint64_t rest)
{
	seal_link *s = l->priv;

	if (s->inner.ops->expect)
		s->inner.ops->expect(&s->inner, rest);
}

/* Any number of times, also after close (a no-op then: the van shuts a
 * link down and closes it under the same send lock). */
static void
seal_shutdown(dt_link *l)
{
	seal_link *s = l->priv;

	if (s != NULL)
		s->inner.ops->shutdown(&s->inner);
}

static void
seal_free(seal_link *s)
{
	free(s->txbuf);
	free(s->txplain);
	free(s->rxraw);
	free(s->rxplain);
	free(s);
}

static void
seal_close(dt_link *l)
{
	seal_link *s = l->priv;

	if (s == NULL)
		return;
	s->inner.ops->close(&s->inner);
	dt__crypt_free(s->tx);
	dt__crypt_free(s->rx);
	seal_free(s);
	l->priv = NULL;
	l->fd = -1;
}

/*
 * Whether this layer holds bytes to read: opened ones the caller has not
 * taken, or a whole record (one with a bad length too: the next recv
 * reports it). recv stops short only when none is held, but a reader that
 * stopped for another reason must not sleep on a descriptor that will not
 * wake it for bytes that are here already.
 */
static int
rx_held(const seal_link *s)
{
	size_t have = s->raw_len - s->raw_off, pl;

	if (s->plain_off < s->plain_len)
		return 1;
	if (have < DT_REC_HDR)
		return 0;
	pl = dt__crypt_rec_len(s->rxraw + s->raw_off);
	return pl == 0 || have >= DT_REC_HDR + pl + DT_REC_TAG;
}

static int
seal_pending(dt_link *l)
{
	seal_link *s = l->priv;

	return rx_held(s) || s->inner.ops->pending(&s->inner);
}

/* Room to send (room 1) counts only once what was sealed has gone: with
 * records still here, the inner link is armed until they leave (a few
 * rounds at most; then the caller looks again). Bytes to read (room 0)
 * count those held here too. */
static int
seal_arm(dt_link *l, int room)
{
	seal_link *s = l->priv;

	if (!(room & DT_ARM_ROOM))
		return s->inner.ops->arm(&s->inner, room) || rx_held(s);
	for (int i = 0; i < 8; i++) {
		if (flush_out(s) == 0)
			return s->inner.ops->arm(&s->inner, 1);
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return 1; /* the next sendv tells the error */
		if (!s->inner.ops->arm(&s->inner, 1))
			return 0;
	}
	return 1;
}

static int
seal_peer_pid(const dt_link *l)
{
	const seal_link *s = l->priv;

	return s->inner.ops->peer_pid ? s->inner.ops->peer_pid(&s->inner) : 0;
}

/* Links are made by wrapping (dt__seal_wrap), never by listening or
 * connecting; an inner link whose bytes come without waking its descriptor
 * gets the table with pending and arm. */
#define SEAL_OPS                                                               \
	.name = "sealed", .recv = seal_recv, .sendv = seal_sendv,              \
	.wait_writable = seal_wait_writable, .expect = seal_expect,            \
	.shutdown = seal_shutdown, .close = seal_close,                        \
	.peer_pid = seal_peer_pid, .unsent = seal_unsent

static const dt_transport_ops seal_stream_ops = {SEAL_OPS};
static const dt_transport_ops seal_polled_ops = {
    SEAL_OPS, .pending = seal_pending, .arm = seal_arm};

dt_err
dt__seal_wrap(dt_link *l, dt_crypt *tx, dt_crypt *rx)
{
	seal_link *s = dt__calloc(1, sizeof(*s));

	if (s == NULL)
		return DT_ENOMEM;
	s->txbuf = malloc(TX_CAP);
	s->txplain = malloc(DT_REC_MAX);
	s->rxraw = malloc(RX_RAW_CAP);
	s->rxplain = malloc(DT_REC_MAX);
	if (s->txbuf == NULL || s->txplain == NULL || s->rxraw == NULL ||
	    s->rxplain == NULL) {
		seal_free(s);
		return dt__fail(DT_ENOMEM, "out of memory for encryption");
	}
	s->inner = *l;
	s->tx = tx;
	s->rx = rx;
	l->ops = l->ops->pending ? &seal_polled_ops : &seal_stream_ops;
	l->priv = s;
	/* (l->fd stays the inner link's: what epoll watches) */
	return DT_OK;
}
