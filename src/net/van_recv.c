/*
 * van_recv.c - receive framing: the I/O thread (or a polling caller) reads
 * a connection's bytes into its staging buffer, cuts them into header,
 * metadata and payload (codec.h), puts each payload where the owner's
 * payload_dest hook says (its final buffer, the connection's own buffer,
 * nowhere, or in pieces to payload_chunk), and hands each complete frame to
 * on_msg. A big rest of a payload is read straight into place. A bad frame
 * takes its connection down (van_conn_down) with a logged reason.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "net/van_int.h"

/* A pointer value no buffer has: payload_dest returns it to discard. */
char dt__van_discard_tag;
char dt__van_stream_tag;

static void
deliver(dt_van *v, dt_conn *c)
{
	dt_msg m;

	m.hdr = c->h;
	m.meta = c->meta;
	m.payload = c->discard || c->stream ? NULL : c->dest;
	m.payload_external = c->external;
	m.streamed = c->stream;
	if (c->meta)
		c->meta[c->h.meta_len] = '\0';
	atomic_fetch_add(&v->recvd,
	                 DT_HDR_SIZE + c->h.meta_len + c->h.payload_len);
	if (dt__verbose >= 2)
		dt__log(2, "recv %s from node %d seq=%llu key=%llu len=%llu",
		        dt__cmd_name(c->h.cmd), (int)c->h.sender,
		        (unsigned long long)c->h.seq,
		        (unsigned long long)c->h.key,
		        (unsigned long long)c->h.payload_len);
	v->hooks.on_msg(v->hooks.arg, c, &m);
	if (c->rxcap > RXBUF_KEEP) {
		free(c->rxbuf);
		c->rxbuf = NULL;
		c->rxcap = 0;
	}
	c->state = RX_HDR;
	c->got = 0;
	c->dest = NULL;
	c->external = 0;
	c->discard = 0;
	c->stream = 0;
}

/* Header and metadata are in: choose the payload's home. */
static dt_err
begin_payload(dt_van *v, dt_conn *c)
{
	void *dest = NULL;

	c->payload_got = 0;
	c->external = 0;
	c->discard = 0;
	c->stream = 0;
	if (c->h.payload_len == 0) {
		c->dest = NULL;
		return DT_OK;
	}
	if (v->hooks.payload_dest)
		dest = v->hooks.payload_dest(v->hooks.arg, c, &c->h, c->meta);
	if (dest == &dt__van_discard_tag) {
		c->discard = 1;
		c->dest = NULL;
	} else if (dest == &dt__van_stream_tag && v->hooks.payload_chunk &&
	           c->h.payload_len % 4 == 0) {
		c->stream = 1;
		c->dest = NULL;
	} else if (dest == &dt__van_stream_tag) {
		c->dest = NULL; /* cannot stream: buffer it */
		dest = NULL;
	}
	if (c->discard || c->stream) {
		/* nothing to allocate */
	} else if (dest) {
		c->dest = dest;
		c->external = 1;
	} else {
		if (c->rxcap < c->h.payload_len) {
			free(c->rxbuf);
			c->rxcap = 0;
			c->rxbuf = malloc(c->h.payload_len);
			if (c->rxbuf == NULL)
				return dt__fail(
				    DT_ENOMEM,
				    "cannot buffer a payload of "
				    "%llu bytes",
				    (unsigned long long)c->h.payload_len);
			c->rxcap = c->h.payload_len;
		}
		c->dest = c->rxbuf;
	}
	c->state = RX_PAYLOAD;
	return DT_OK;
}

/* Consume staged bytes; returns an error to drop the connection. */
static dt_err
consume(dt_van *v, dt_conn *c)
{
	dt_err err;

	while (c->stage_off < c->stage_len) {
		size_t avail = c->stage_len - c->stage_off;
		const uint8_t *p = c->stage + c->stage_off;
		size_t n;

		switch (c->state) {
		case RX_HDR:
			n = DT_MIN(avail, DT_HDR_SIZE - c->got);
			memcpy(c->hdrbuf + c->got, p, n);
			c->got += n;
			c->stage_off += n;
			if (c->got < DT_HDR_SIZE)
				break;
			err = dt__hdr_decode(c->hdrbuf, v->max_payload, &c->h);
			if (err)
				return err;
			c->got = 0;
			if (c->meta_cap < (size_t)c->h.meta_len + 1) {
				free(c->meta);
				c->meta = malloc((size_t)c->h.meta_len + 1);
				if (c->meta == NULL) {
					c->meta_cap = 0;
					return dt__fail(DT_ENOMEM,
					                "metadata buffer");
				}
				c->meta_cap = (size_t)c->h.meta_len + 1;
			}
			if (c->h.meta_len > 0) {
				c->state = RX_META;
				break;
			}
			if ((err = begin_payload(v, c)) != DT_OK)
				return err;
			if (c->h.payload_len == 0)
				deliver(v, c);
			break;
		case RX_META:
			n = DT_MIN(avail, c->h.meta_len - c->got);
			memcpy(c->meta + c->got, p, n);
			c->got += n;
			c->stage_off += n;
			if (c->got < c->h.meta_len)
				break;
			c->got = 0;
			if ((err = begin_payload(v, c)) != DT_OK)
				return err;
			if (c->h.payload_len == 0)
				deliver(v, c);
			break;
		case RX_PAYLOAD:
			n = (size_t)DT_MIN((uint64_t)avail,
			                   c->h.payload_len - c->payload_got);
			if (c->stream) {
				/* Whole floats only; keep a ragged tail. */
				n &= ~(size_t)3;
				if (n == 0)
					return DT_OK;
				if ((uintptr_t)p & 3) {
					/* Floats at an aligned address: the
					 * frames before may end anywhere.
					 * The rest moves to the front of the
					 * stage (malloc'd, so aligned). */
					memmove(c->stage, p, avail);
					c->stage_len = avail;
					c->stage_off = 0;
					p = c->stage;
				}
				v->hooks.payload_chunk(v->hooks.arg, c, &c->h,
				                       p, c->payload_got, n);
			} else if (!c->discard && n)
				memcpy(c->dest + c->payload_got, p, n);
			c->payload_got += n;
			c->stage_off += n;
			if (c->payload_got == c->h.payload_len)
				deliver(v, c);
			break;
		}
	}
	return DT_OK;
}

/*
 * Tell the transport how much of a payload is still to come whenever
 * reading stops (TCP then wakes the reader less often: tcp.c), so what it
 * knows is never more than the truth, and 0 between frames.
 */
static void
fit_lowat(dt_conn *c)
{
	if (c->link.ops->expect)
		c->link.ops->expect(&c->link,
		                    c->state == RX_PAYLOAD
		                        ? c->h.payload_len - c->payload_got
		                        : 0);
}

/*
 * A read filled the staging buffer: more is waiting, so take it in bigger
 * bites from now on (up to STAGE_CAP). A connection that only ever carries
 * small frames (a heartbeat, a barrier) keeps STAGE_MIN: with thousands of
 * peers, what a node holds per link stays small. Out of memory, the buffer
 * just stays as it is.
 */
static void
grow_stage(dt_conn *c)
{
	size_t cap = c->stage_cap * 2;
	uint8_t *p;

	if (c->stage_cap >= STAGE_CAP)
		return;
	if ((p = realloc(c->stage, DT_MIN(cap, (size_t)STAGE_CAP))) == NULL)
		return;
	c->stage = p;
	c->stage_cap = DT_MIN(cap, (size_t)STAGE_CAP);
}

/* Read until the kernel has nothing more (or the connection is down). */
static void
read_all(dt_van *v, dt_conn *c)
{
	for (;;) {
		ssize_t n;

		if (c->auth != AUTH_DONE) {
			/* (a same-host link: TCP ones come authenticated) */
			dt_err err;
			int r = van_handshake_read(v, c, &err);

			if (r == HS_FAIL)
				van_conn_down(v, c, err, dt_errmsg());
			if (r == HS_FAIL || r == HS_WAIT)
				return;
			continue;
		}
		if (c->stage_off == c->stage_len) {
			c->stage_off = c->stage_len = 0;
		} else if (c->stage_off > 0 && c->stage_len == c->stage_cap) {
			/* A ragged tail left by a stream: move it to the front.
			 */
			memmove(c->stage, c->stage + c->stage_off,
			        c->stage_len - c->stage_off);
			c->stage_len -= c->stage_off;
			c->stage_off = 0;
		}
		if (c->state == RX_PAYLOAD && !c->discard && !c->stream &&
		    c->stage_off == c->stage_len &&
		    c->h.payload_len - c->payload_got >= DIRECT_MIN) {
			/* Big rest of a payload: read it straight into place.
			 */
			size_t want =
			    (size_t)(c->h.payload_len - c->payload_got);

			n = c->link.ops->recv(&c->link,
			                      c->dest + c->payload_got, want);
			if (n > 0) {
				c->payload_got += (uint64_t)n;
				if (c->payload_got == c->h.payload_len)
					deliver(v, c);
				if ((size_t)n < want)
					return; /* drained; epoll says when more
					           comes */
				continue;
			}
		} else {
			size_t want = c->stage_cap - c->stage_len;

			n = c->link.ops->recv(&c->link, c->stage + c->stage_len,
			                      want);
			if (n > 0) {
				dt_err err;

				c->stage_len += (size_t)n;
				/* The answers to the requests of one read leave
				 * together (corking). */
				dt__van_cork(v);
				err = consume(v, c);
				(void)dt__van_uncork(v);
				if (err) {
					van_conn_down(v, c, err, dt_errmsg());
					return;
				}
				if (!atomic_load(&c->open) || (size_t)n < want)
					return;
				grow_stage(c);
				continue;
			}
		}
		if (n == 0) {
			if (c->state != RX_HDR || c->got != 0)
				van_conn_down(
				    v, c, DT_EPROTO,
				    "connection closed in the middle of "
				    "a frame (truncated message)");
			else {
				c->eof = 1;
				van_conn_down(v, c, DT_ECLOSED,
				              "closed by peer");
			}
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		if (errno == EBADMSG) {
			char why[256];

			snprintf(why, sizeof(why), "%s", dt_errmsg());
			van_conn_down(v, c, DT_EAUTH, why);
			return;
		}
		van_conn_down(v, c, DT_ECLOSED, strerror(errno));
		return;
	}
}

/* The connection is readable. */
void
van_conn_readable(dt_van *v, dt_conn *c)
{
	atomic_store(&c->heard_ns, dt__now_ns());
	read_all(v, c);
	if (atomic_load(&c->open))
		fit_lowat(c);
}
