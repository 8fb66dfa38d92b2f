/*
 * van_dial.c - connecting to a peer (dt__van_connect): the link made by a
 * transport that can reach it, retried with a growing, jittered nap while
 * the peer is not up or cuts the handshake, then the connector's side of
 * the handshake (auth.h), after which the link joins the van.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/random.h>
#include <time.h>

#include "common/util.h"
#include "net/seal.h"
#include "net/van_int.h"

/* Read exactly len bytes of a handshake from a new link by deadline (or
 * until dt__van_stop_dials). */
static dt_err
recv_small(dt_van *v, dt_link *l, uint8_t *buf, size_t len, uint64_t deadline)
{
	size_t got = 0;

	while (got < len) {
		if (atomic_load(&v->dial_stop))
			return dt__fail(DT_ESHUTDOWN, "this node is shutting "
			                              "down");
		ssize_t n = l->ops->recv(l, buf + got, len - got);
		uint64_t now;

		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		/* The end of the stream is no proof of a wrong secret: a
		 * peer that is overloaded, or that gave this connection's
		 * place to a newer one, ends it too. dt__van_connect
		 * tries again. */
		if (n == 0)
			return dt__fail(DT_ECLOSED,
			                "closed the connection before "
			                "answering the handshake");
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return dt__fail(DT_ECLOSED,
			                "cut the connection before answering "
			                "the handshake (%s)",
			                strerror(errno));
		if ((now = dt__now_ns()) >= deadline)
			return dt__fail(DT_ETIMEDOUT,
			                "did not answer the handshake in time");
		/* (a second at a time, to see a stop: a poll every 100 ms by
		 * each of the thousands of nodes a simulator runs, all
		 * waiting for a busy scheduler's answer, kept the
		 * processors from the scheduler) */
		struct pollfd pfd = {.fd = l->fd, .events = POLLIN};
		poll(&pfd, 1,
		     (int)DT_MIN((deadline - now) / 1000000 + 1, 1000));
	}
	return DT_OK;
}

/* The connector's side of the handshake (auth.h), before the link joins
 * the van. */
static dt_err
handshake_connect(dt_van *v, dt_link *l, uint64_t until, dt_crypt **tx,
                  dt_crypt **rx)
{
	uint64_t deadline = DT_MIN(dt__now_ns() + v->handshake_ns, until);
	uint8_t hello[DT_AUTH_HELLO_LEN], chal[DT_AUTH_CHALLENGE_LEN];
	uint8_t proof[DT_AUTH_PROOF_LEN];
	dt_auth_hs hs;
	dt_err err;

	dt__auth_hello(v->auth, &hs, hello);
	if ((err = van_send_small(l, hello, sizeof(hello), deadline)) ||
	    (err = recv_small(v, l, chal, sizeof(chal), deadline)) ||
	    (err = dt__auth_on_challenge(v->auth, &hs, chal, proof, tx, rx)))
		return err;
	if ((err = van_send_small(l, proof, sizeof(proof), deadline))) {
		dt__crypt_free(*tx);
		dt__crypt_free(*rx);
		*tx = *rx = NULL;
	}
	return err;
}

/*
 * ---- dialling ----
 *
 * dt__van_connect tries until its deadline: a refused connect (the peer
 * is not up yet), and a connection cut or left unanswered during the
 * handshake (the peer is busy, or a stranger's connections pushed this
 * one out: see "the handshake thread" in van_accept.c), are tried again
 * after a nap that doubles up to DIAL_NAP_MAX with a random part, so that
 * many nodes cut at once do not all come back at once. A peer whose answer
 * does not prove the key is a wrong secret, and no nap changes that: it
 * fails at once.
 * dt__van_stop_dials ends every dial at once; TCP connects are made in
 * slices of DIAL_SLICE_NS for that (a new connect per slice costs what
 * the kernel's own first SYN retransmission would).
 */
#define DIAL_SLICE_NS 1000000000ull
#define DIAL_NAP_MIN  20   /* ms */
#define DIAL_NAP_MAX  1000 /* ms */

static int
dial_stopped(dt_van *v, const char *what, const char *host, int port)
{
	if (!atomic_load(&v->dial_stop))
		return 0;
	dt__fail(DT_ESHUTDOWN,
	         "stopped dialling %s at %s:%d: this node is shutting down",
	         what, host, port);
	return 1;
}

/* Sleep about nap_ms (half of it random), never past deadline; 0 if
 * dialling was stopped meanwhile. */
static int
dial_nap(dt_van *v, int nap_ms, uint64_t deadline)
{
	uint32_t r = 0;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
		r = (uint32_t)dt__now_ns();
	uint64_t ns = (uint64_t)(nap_ms / 2 + r % (uint32_t)(nap_ms / 2 + 1)) *
	              1000000ull;
	uint64_t end = DT_MIN(dt__now_ns() + ns, deadline);

	for (uint64_t now; (now = dt__now_ns()) < end;) {
		uint64_t step = DT_MIN(end - now, 20000000ull);
		struct timespec ts = {0, (long)step};

		if (atomic_load(&v->dial_stop))
			return 0;
		nanosleep(&ts, NULL);
	}
	return !atomic_load(&v->dial_stop);
}

/* Through the first transport before the host one (van_host_tp) that can
 * reach the peer at an endpoint on this host, once each: 1 with *link, 0
 * when none could (the host transport is tried next). */
static int
dial_endpoint(dt_van *v, const dt_peer_addr *peer, uint64_t deadline,
              const char *what, dt_link *link)
{
	for (int i = 0; v->tps[i] && v->tps[i + 1]; i++) {
		const dt_transport_ops *tp = v->tps[i];
		uint8_t token[DT_LINK_TOKEN_LEN];

		if (tp->endpoint_connect == NULL || peer->local == NULL ||
		    (tp->can_reach && !tp->can_reach(peer)))
			continue;
		dt__auth_local_token(v->auth, peer->local, token);
		if (tp->endpoint_connect(peer->local, token, deadline, what,
		                         link) == DT_OK)
			return 1;
		DT_LOG(1, "%s: %s refused (%s); trying the next transport",
		       what, tp->name, dt_errmsg());
	}
	return 0;
}

/* The link to the peer: at its endpoint on this host when a transport can
 * reach it there, else through the host transport, retried in slices
 * until deadline (see "dialling"). */
static dt_err
dial_link(dt_van *v, const dt_peer_addr *peer, uint64_t deadline,
          const char *what, dt_link *link)
{
	const dt_transport_ops *tp = van_host_tp(v);
	const char *host = peer->host;
	int port = peer->port;
	uint64_t t0 = dt__now_ns();
	dt_err err;

	if (dial_endpoint(v, peer, deadline, what, link))
		return DT_OK;
	if (tp->can_reach && !tp->can_reach(peer))
		return dt__fail(DT_EINVAL,
		                "%s at %s:%d: no transport can reach it", what,
		                host ? host : "(no host)", port);
	for (;;) {
		if (dial_stopped(v, what, host, port))
			return DT_ESHUTDOWN;
		uint64_t slice = DT_MIN(deadline, dt__now_ns() + DIAL_SLICE_NS);

		err = tp->connect(host, port, slice, what, link);
		/* (a name that does not resolve yet is tried again until the
		 * deadline too: the transport says so at the slice's end) */
		if (err == DT_ECONFIG && slice < deadline &&
		    dt__now_ns() >= slice)
			continue;
		if (err == DT_OK ||
		    (err != DT_ECONNREFUSED && err != DT_ETIMEDOUT))
			return err;
		if (dt__now_ns() >= deadline)
			break;
	}
	/* The last slice's reason (after its ": "), for the whole wait. */
	const char *why = strrchr(dt_errmsg(), ':');
	char last[128];

	snprintf(last, sizeof(last), "%s", why ? why + 2 : dt_errmsg());
	return dt__fail(err, "%s at %s:%d unreachable after %.1f s: %s", what,
	                host, port, (double)(dt__now_ns() - t0) / 1e9, last);
}

/* A link that passed the handshake joins the van: encrypted, the records
 * are a layer over it (seal.c). Its address names a transport other than
 * the host one ("127.0.0.1:4000 (name)", the transport's name). The link is the
 * van's. */
static dt_err
dial_join(dt_van *v, dt_link *link, dt_crypt *tx, dt_crypt *rx,
          const char *host, int port, const char *what, dt_conn **out)
{
	const dt_transport_ops *via = link->ops;
	dt_conn *c;
	dt_err err;

	if (tx != NULL && (err = dt__seal_wrap(link, tx, rx))) {
		dt__crypt_free(tx);
		dt__crypt_free(rx);
		link->ops->close(link);
		return err;
	}
	c = van_conn_new(v, link, 1);
	if (c == NULL) {
		link->ops->close(link);
		return DT_ENOMEM;
	}
	snprintf(c->addr, sizeof(c->addr), "%s:%d%s%s%s", host, port,
	         via != van_host_tp(v) ? " (" : "",
	         via != van_host_tp(v) ? via->name : "",
	         via != van_host_tp(v) ? ")" : "");
	if (van_conn_add(v, c) != DT_OK)
		return DT_ESYS;
	DT_LOG(2, "connected to %s at %s", what, c->addr);
	*out = c;
	return DT_OK;
}

dt_err
dt__van_connect(dt_van *v, const char *host, int port, const char *local,
                int timeout_ms, const char *what, dt_conn **out)
{
	uint64_t t0 = dt__now_ns();
	uint64_t deadline = t0 + (uint64_t)timeout_ms * 1000000ull;
	dt_peer_addr peer = {host, port, local};
	dt_link link;
	dt_crypt *tx = NULL, *rx = NULL;
	int cut = 0, nap = DIAL_NAP_MIN;
	char why[512];
	dt_err err;

	for (;;) {
		if ((err = dial_link(v, &peer, deadline, what, &link)))
			return err;
		if (v->auth == NULL ||
		    (err = handshake_connect(v, &link, deadline, &tx, &rx)) ==
		        DT_OK)
			break;
		snprintf(why, sizeof(why), "%s", dt_errmsg());
		link.ops->close(&link);
		if (err == DT_ESHUTDOWN) {
			dial_stopped(v, what, host, port);
			return err;
		}
		if (err == DT_EAUTH) /* the answer did not prove the key */
			return dt__fail(err,
			                "authentication failed: %s at %s:%d: "
			                "%s",
			                what, host, port, why);
		cut++;
		DT_LOG(1, "%s at %s:%d: %s; trying again", what, host, port,
		       why);
		if (dt__now_ns() >= deadline || !dial_nap(v, nap, deadline) ||
		    dt__now_ns() >= deadline) {
			if (dial_stopped(v, what, host, port))
				return DT_ESHUTDOWN;
			return dt__fail(
			    err,
			    "%s at %s:%d: %s (%d times in %.1f s): it may be "
			    "overloaded by connections that do not "
			    "authenticate, or not hold this job's secret",
			    what, host, port, why, cut,
			    (double)(dt__now_ns() - t0) / 1e9);
		}
		nap = DT_MIN(nap * 2, DIAL_NAP_MAX);
	}
	return dial_join(v, &link, tx, rx, host, port, what, out);
}

void
dt__van_stop_dials(dt_van *v)
{
	atomic_store(&v->dial_stop, 1);
}
