/*
 * van_cork.c - corking (dt__van_cork, dt__van_uncork): between the two, a
 * thread's small frames are held per connection and leave together at the
 * uncork, in one write per connection (van_send.c writes them). The I/O
 * thread corks the answers to the frames of one read.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "net/van_int.h"

/* ---- corking: a thread's small frames leave in one write ---- */

#define CORK_MAX   (64u << 10) /* frames up to this size are held */
#define CORK_CONNS 64

static _Thread_local struct {
	dt_van *v;
	int depth;
	int nconns;
	dt_conn *conns[CORK_CONNS]; /* connections holding this thread's */
} cork;

/* Send what c holds for corked threads. */
static dt_err
flush(dt_van *v, dt_conn *c)
{
	dt_err err = DT_OK;

	pthread_mutex_lock(&c->send_mu);
	if (c->olen > 0 && atomic_load(&c->open) && c->link.fd >= 0 &&
	    !c->shut_after) {
		size_t len;
		uint8_t *b = van_obuf_take(c, &len);
		struct iovec iov = {b, len};

		err = van_send_locked(v, c, &iov, 1, "held frames");
		if (err == DT_OK)
			atomic_fetch_add(&v->sent, len);
		van_obuf_put_back(c, b);
	}
	c->olen = 0;
	pthread_mutex_unlock(&c->send_mu);
	return err;
}

void
dt__van_cork(dt_van *v)
{
	if (cork.depth > 0 && cork.v != v)
		return; /* corked on another van: this one sends at once */
	cork.v = v;
	cork.depth++;
}

dt_err
dt__van_uncork(dt_van *v)
{
	dt_err first = DT_OK;

	if (cork.v != v || cork.depth == 0 || --cork.depth > 0)
		return DT_OK;
	for (int i = 0; i < cork.nconns; i++) {
		dt_err err = flush(v, cork.conns[i]);

		if (err && first == DT_OK)
			first = err;
	}
	cork.nconns = 0;
	cork.v = NULL;
	return first;
}

/* Hold a small frame in c's buffer if this thread is corked (send_mu held):
 * 1 if held. */
int
van_hold_locked(dt_van *v, dt_conn *c, const struct iovec *vec, int n,
                uint64_t total)
{
	if (cork.v != v || cork.depth == 0 || total > CORK_MAX ||
	    c->olen + total > CORK_BUF)
		return 0; /* sent at once, with what is held */
	if (c->ocap < CORK_BUF) {
		uint8_t *b = realloc(c->obuf, CORK_BUF);

		if (b == NULL)
			return 0;
		c->obuf = b;
		c->ocap = CORK_BUF;
	}
	int listed = 0;

	for (int i = 0; i < cork.nconns && !listed; i++)
		listed = cork.conns[i] == c;
	if (!listed && cork.nconns == CORK_CONNS)
		return 0; /* no room to remember c: send at once */
	for (int i = 0; i < n; i++) {
		memcpy(c->obuf + c->olen, vec[i].iov_base, vec[i].iov_len);
		c->olen += vec[i].iov_len;
	}
	if (!listed)
		cork.conns[cork.nconns++] = c;
	return 1;
}
