/*
 * van.c - a node's connections and the van that holds them: how a
 * connection is made into one the I/O thread watches (van_conn_new,
 * van_conn_add), taken down (van_conn_down) and freed, and the van's own
 * life (create, listen on this host, start, destroy) and accessors. The
 * van's other concerns have a file each, sharing the structs of
 * van_int.h: accepting and the handshake thread (van_accept.c), dialling
 * (van_dial.c), the I/O thread and the polling wait (van_loop.c), receive
 * framing (van_recv.c), the send queue (van_send.c) and corking
 * (van_cork.c). Encrypted records are a layer over a link (seal.c), not
 * the van's.
 *
 * Threads: the I/O thread (van_loop.c, "dt-io") owns every connection's
 * receive state and runs the owner's hooks. The handshake thread
 * (van_accept.c, "dt-hs") owns the TCP listener and each accepted
 * connection until it has authenticated, so strangers' connections and
 * handshakes never cost the I/O thread a moment; it hands a finished
 * connection to the I/O thread. Senders are any threads; each
 * connection's send side is serialised by its send_mu (van_send.c). The
 * connection list is guarded by van->mu. When a connection goes down the
 * I/O thread shuts it down, then closes its link under send_mu (senders
 * re-check `open` under that lock before each write, so none writes to a
 * recycled descriptor) and frees its buffers; the small dt_conn itself
 * lives until the van is destroyed, so a sender still holding it never
 * touches freed memory. With DT_SHARED_LOOP the van starts neither thread:
 * the process's shared loops (loop_shared.c) play their parts for every
 * van of the process, and the van's destruction takes it out of them
 * (waiting for a round of it under way) before anything is freed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/spin.h"
#include "common/util.h"
#include "net/van_int.h"
/* A connection over link; with its receive buffer when staged (one still in
 * the handshake gets it when it is handed over: a stranger costs little). */
dt_conn *
van_conn_new(dt_van *v, const dt_link *link, int staged)
{
	dt_conn *c = dt__calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->stage = staged ? dt__malloc(STAGE_MIN) : NULL;
	c->stage_cap = staged ? STAGE_MIN : 0;
	if (staged && c->stage == NULL) {
		free(c);
		return NULL;
	}
	c->van = v;
	c->link = *link;
	c->polled = link->ops->pending != NULL;
	c->rung = 1;
	c->touched = 1;
	c->peer_pid = link->ops->peer_pid ? link->ops->peer_pid(link) : 0;
	atomic_store(&c->peer, -1);
	atomic_store(&c->vouched, 1);
	c->born_ns = dt__now_ns();
	atomic_store(&c->heard_ns, c->born_ns);
	atomic_store(&c->open, 1);
	pthread_mutex_init(&c->send_mu, NULL);
	dt__cond_init_monotonic(&c->idle_cv);
	snprintf(c->addr, sizeof(c->addr), "?");
	return c;
}

/* 1 at most once a second per *last (dispatch_mu held): log lines about
 * what a stranger can repeat at will. */
int
van_once_a_second(uint64_t *last, uint64_t now)
{
	if (now - *last < 1000000000ull)
		return 0;
	*last = now;
	return 1;
}

void
van_conn_free(dt_conn *c)
{
	if (c->link.fd >= 0)
		c->link.ops->close(&c->link);
	pthread_mutex_destroy(&c->send_mu);
	pthread_cond_destroy(&c->idle_cv);
	free(c->pq.buf);
	free(c->stage);
	free(c->meta);
	free(c->rxbuf);
	free(c->obuf);
	free(c);
}

/* Have the I/O thread go round its loop (and look at the polled links again)
 * at once; at a stop, leave epoll_wait. */
void
van_wake_io(dt_van *v)
{
	uint64_t one = 1;

	if (write(v->evfd, &one, sizeof(one)) < 0) {
		/* the eventfd cannot be full */
	}
}

int
dt__van_open_conns(dt_van *v, dt_conn **out, int cap)
{
	int k = 0;

	pthread_mutex_lock(&v->mu);
	for (dt_conn *c = v->conns; c; c = c->next) {
		if (!atomic_load_explicit(&c->open, memory_order_relaxed))
			continue;
		if (k < cap)
			out[k] = c;
		k++;
	}
	pthread_mutex_unlock(&v->mu);
	return k;
}

/* Register c with the van's list and epoll. */
dt_err
van_conn_add(dt_van *v, dt_conn *c)
{
	struct epoll_event ev = {.events = CONN_EVENTS, .data.ptr = c};

	pthread_mutex_lock(&v->mu);
	c->prev = NULL;
	c->next = v->conns;
	if (v->conns)
		v->conns->prev = c;
	v->conns = c;
	c->live = 1;
	pthread_mutex_unlock(&v->mu);
	if (c->polled)
		atomic_fetch_add(&v->npolled, 1);
	if (epoll_ctl(v->epfd, EPOLL_CTL_ADD, c->link.fd, &ev) < 0) {
		atomic_store(&c->open, 0);
		return dt__fail(DT_ESYS, "epoll_ctl: %s", strerror(errno));
	}
	if (c->polled) /* the I/O thread may sleep already, without having
	                armed this link (its handshake used the arming up) */
		van_wake_io(v);
	return DT_OK;
}

void
van_unvouched_add(dt_van *v, dt_conn *c)
{
	atomic_store(&c->vouched, 0);
	atomic_fetch_add(&v->unvouched, 1);
	pthread_mutex_lock(&v->mu);
	c->uv_next = NULL;
	c->uv_prev = v->uv_tail;
	if (v->uv_tail)
		v->uv_tail->uv_next = c;
	else
		v->uv_head = c;
	v->uv_tail = c;
	c->uv_in = 1;
	pthread_mutex_unlock(&v->mu);
}

/* c is introduced, or gone: out of the guard's count and list. */
static void
unvouched_drop(dt_van *v, dt_conn *c)
{
	if (atomic_exchange(&c->vouched, 1) != 0)
		return;
	atomic_fetch_sub(&v->unvouched, 1);
	pthread_mutex_lock(&v->mu);
	if (c->uv_in) {
		if (c->uv_prev)
			c->uv_prev->uv_next = c->uv_next;
		else
			v->uv_head = c->uv_next;
		if (c->uv_next)
			c->uv_next->uv_prev = c->uv_prev;
		else
			v->uv_tail = c->uv_prev;
		c->uv_prev = c->uv_next = NULL;
		c->uv_in = 0;
	}
	pthread_mutex_unlock(&v->mu);
}

/* c is down: from the live connections to those kept until the van's
 * end. */
static void
conn_retire(dt_van *v, dt_conn *c)
{
	pthread_mutex_lock(&v->mu);
	if (c->live) {
		if (c->prev)
			c->prev->next = c->next;
		else
			v->conns = c->next;
		if (c->next)
			c->next->prev = c->prev;
		c->prev = NULL;
		c->next = v->gone;
		v->gone = c;
		c->live = 0;
	}
	pthread_mutex_unlock(&v->mu);
}

/* In the I/O thread: stop reading c and tell the owner. */
void
van_conn_down(dt_van *v, dt_conn *c, dt_err why, const char *reason)
{
	atomic_store(&c->open, 0);
	unvouched_drop(v, c);
	conn_retire(v, c);
	if (c->polled)
		atomic_fetch_sub(&v->npolled, 1);
	/* A peer that closed (the end of a join: a node's idle connection,
	 * thousands at the scheduler) costs one close(): the event that told
	 * it disarmed c, so epoll has nothing more to report, and the close
	 * takes it out of epoll and sends the FIN. Otherwise c may still be
	 * armed, and the shutdown also ends the connection should another
	 * descriptor of it exist. */
	int quiet = c->eof && !c->polled;

	if (!quiet) {
		epoll_ctl(v->epfd, EPOLL_CTL_DEL, c->link.fd, NULL);
		c->link.ops->shutdown(&c->link);
	}
	/*
	 * Give the descriptor and the receive buffers back now, so a peer
	 * that connects and misbehaves again and again cannot exhaust them.
	 * Under send_mu: a sender re-checks `open` under that lock before
	 * every write, so it never writes to a recycled descriptor; a busy
	 * writer (one that writes without the lock) closes it when it is
	 * done (after the shutdown it wakes at once).
	 */
	pthread_mutex_lock(&c->send_mu);
	van_unwant_writable(v, c);
	if (c->busy) {
		if (quiet)
			c->link.ops->shutdown(&c->link);
		c->close_deferred = 1; /* its writer closes when it is done */
	} else {
		van_link_release(c);
	}
	pthread_mutex_unlock(&c->send_mu);
	free(c->stage);
	free(c->meta);
	free(c->rxbuf);
	c->stage = NULL;
	c->stage_cap = 0;
	c->meta = NULL;
	c->rxbuf = NULL;
	c->meta_cap = c->rxcap = 0;
	if (c->auth != AUTH_DONE) {
		/* A stranger can fail the handshake at will: say so once a
		 * second at most. */
		if (van_once_a_second(&v->auth_logged_ns, dt__now_ns()))
			dt__log(0,
			        "refusing a connection from %s (and maybe "
			        "others since): %s",
			        c->addr, reason);
	} else if (why != DT_ECLOSED)
		dt__log(0, "dropping connection from %s: %s", c->addr, reason);
	else
		DT_LOG(1, "connection %s closed", c->addr);
	if (v->hooks.on_close)
		v->hooks.on_close(v->hooks.arg, c, why);
}

dt_err
dt__van_create(const dt_van_hooks *hooks, dt_van **out)
{
	dt_van *v;
	long maxmsg, tmo, hs;
	int shared;
	dt_auth *auth = NULL;
	dt_err err;

	err = dt__env_long("DT_MAX_MESSAGE", (long)DT_DEFAULT_MAX_PAYLOAD, 1024,
	                   (long)(1ull << 40) * 1, &maxmsg);
	if (err)
		return err;
	err = dt__env_long("DT_SEND_TIMEOUT", 120, 1, 86400, &tmo);
	if (err)
		return err;
	if ((err = dt__env_long("DT_HANDSHAKE_TIMEOUT", 10, 1, 86400, &hs)))
		return err;
	if ((err = dt__spin_configure()))
		return err;
	if ((err = dt__van_wait_configure()))
		return err;
	if ((err = dt__loop_configure(&shared)))
		return err;
	if ((err = dt__auth_from_env(&auth)))
		return err;
	v = dt__calloc(1, sizeof(*v));
	if (v == NULL) {
		dt__auth_free(auth);
		return DT_ENOMEM;
	}
	if ((err = dt__transport_choose(v->tps))) {
		dt__auth_free(auth);
		free(v);
		return err;
	}
	v->auth = auth;
	v->shared = shared;
	v->handshake_ns = (uint64_t)hs * 1000000000ull;
	v->hooks = *hooks;
	v->lis.fd = -1;
	v->loc.fd = -1;
	v->max_payload = (uint64_t)maxmsg;
	v->send_timeout_ms = (int)tmo * 1000;
	pthread_mutex_init(&v->mu, NULL);
	pthread_mutex_init(&v->dispatch_mu, NULL);
	pthread_mutex_init(&v->park_mu, NULL);
	dt__cond_init_monotonic(&v->park_cv);
	v->epfd = epoll_create1(EPOLL_CLOEXEC);
	v->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	v->hs_epfd = epoll_create1(EPOLL_CLOEXEC);
	v->hs_evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (v->epfd < 0 || v->evfd < 0 || v->hs_epfd < 0 || v->hs_evfd < 0) {
		err = dt__fail(DT_ESYS, "epoll/eventfd: %s", strerror(errno));
		goto fail;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	if (epoll_ctl(v->epfd, EPOLL_CTL_ADD, v->evfd, &ev) < 0 ||
	    epoll_ctl(v->hs_epfd, EPOLL_CTL_ADD, v->hs_evfd, &ev) < 0) {
		err = dt__fail(DT_ESYS, "epoll_ctl: %s", strerror(errno));
		goto fail;
	}
	*out = v;
	return DT_OK;
fail:
	if (v->epfd >= 0)
		close(v->epfd);
	if (v->evfd >= 0)
		close(v->evfd);
	if (v->hs_epfd >= 0)
		close(v->hs_epfd);
	if (v->hs_evfd >= 0)
		close(v->hs_evfd);
	dt__auth_free(v->auth);
	free(v);
	return err;
}

void
dt__van_destroy(dt_van *v)
{
	dt_conn *c, *next;

	if (v == NULL)
		return;
	atomic_store(&v->stopping, 1);
	pthread_mutex_lock(&v->park_mu);
	pthread_cond_signal(&v->park_cv);
	pthread_mutex_unlock(&v->park_mu);
	van_shared_stop(v); /* (shared: no round of it runs from here on) */
	van_hs_stop(v);
	if (v->started) {
		van_wake_io(v);
		pthread_join(v->thread, NULL);
	}
	for (c = v->conns; c; c = next) {
		next = c->next;
		van_conn_free(c);
	}
	for (c = v->gone; c; c = next) {
		next = c->next;
		van_conn_free(c);
	}
	if (v->lis.fd >= 0)
		v->lis.ops->close(&v->lis);
	if (v->loc.fd >= 0)
		v->loc.ops->close(&v->loc);
	close(v->epfd);
	close(v->evfd);
	close(v->hs_epfd);
	close(v->hs_evfd);
	pthread_mutex_destroy(&v->mu);
	pthread_mutex_destroy(&v->dispatch_mu);
	pthread_mutex_destroy(&v->park_mu);
	pthread_cond_destroy(&v->park_cv);
	dt__auth_free(v->auth);
	free(v);
}

dt_err
dt__van_listen_local(dt_van *v, char *name, size_t cap)
{
	const dt_transport_ops *tp = NULL;
	uint8_t token[DT_LINK_TOKEN_LEN];
	char mine[64];
	dt_err err;

	*name = '\0';
	/* The first transport that listens at an endpoint on this host. */
	for (int i = 0; v->tps[i] && tp == NULL; i++)
		if (v->tps[i]->endpoint_listen)
			tp = v->tps[i];
	if (tp == NULL)
		return DT_OK;
	if ((err = tp->endpoint_new(mine, sizeof(mine))))
		return err;
	dt__auth_local_token(v->auth, mine, token);
	if ((err = tp->endpoint_listen(mine, token, &v->loc)))
		return err;
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &v->loc};
	if (epoll_ctl(v->epfd, EPOLL_CTL_ADD, v->loc.fd, &ev) < 0)
		return dt__fail(DT_ESYS, "epoll_ctl: %s", strerror(errno));
	van_size_queues(v);
	snprintf(name, cap, "%s", mine);
	return DT_OK;
}

dt_err
dt__van_start(dt_van *v)
{
	if (v->shared)
		return van_shared_start(v); /* no thread of its own */
	if (pthread_create(&v->thread, NULL, van_io_main, v) != 0)
		return dt__fail(DT_ESYS, "cannot start the I/O thread");
	pthread_setname_np(v->thread, "dt-io");
	v->started = 1;
	if (pthread_create(&v->hs_thread, NULL, van_hs_main, v) != 0)
		return dt__fail(DT_ESYS, "cannot start the handshake thread");
	pthread_setname_np(v->hs_thread, "dt-hs");
	v->hs_started = 1;
	return DT_OK;
}

uint64_t
dt__conn_silent_ns(const dt_conn *c, uint64_t now)
{
	const dt_van *v = c->van;
	uint64_t busy = atomic_load(&v->busy_since);
	uint64_t heard = atomic_load(&c->heard_ns);
	uint64_t stall = atomic_load(&v->stall_end);

	if (busy && now > busy && now - busy > STALL_NS)
		return 0; /* this node is not reading: it cannot tell */
	if (stall > heard)
		heard = stall;
	/* (on a shared loop, the loop's stalls are this node's too: it
	 * reads only when the loop comes round to it) */
	dt_loop *l = __atomic_load_n(&v->io_loop, __ATOMIC_ACQUIRE);

	if (l) {
		dt__loop_stalls(l, &busy, &stall);
		if (busy && now > busy && now - busy > STALL_NS)
			return 0;
		if (stall > heard)
			heard = stall;
	}
	return now > heard ? now - heard : 0;
}

void
dt__conn_set_peer(dt_conn *c, int peer)
{
	atomic_store(&c->peer, peer);
	if (peer >= 0)
		dt__conn_vouch(c);
}

void
dt__conn_vouch(dt_conn *c)
{
	unvouched_drop(c->van, c);
}

int
dt__conn_vouched(const dt_conn *c)
{
	return atomic_load(&c->vouched);
}

void
dt__van_guard(dt_van *v, uint64_t vouch_ns, int max_unvouched)
{
	v->vouch_ns = vouch_ns;
	v->max_unvouched = max_unvouched;
	van_size_queues(v);
}

void
van_size_queues(dt_van *v)
{
	dt_link *lis[2] = {&v->lis, &v->loc};

	/* As many may wait in a listener's queue as may wait for their
	 * handshake: a job's joins come all at once. */
	for (int i = 0; i < 2 && v->max_unvouched > 0; i++)
		if (lis[i]->fd >= 0 && lis[i]->ops && lis[i]->ops->set_queue)
			lis[i]->ops->set_queue(lis[i], v->max_unvouched);
}

void
dt__conn_set_note(dt_conn *c, uint64_t note)
{
	c->note = note;
}

uint64_t
dt__conn_note(const dt_conn *c)
{
	return c->note;
}

int
dt__conn_peer(const dt_conn *c)
{
	return atomic_load(&c->peer);
}

const char *
dt__conn_addr(const dt_conn *c)
{
	return c->addr;
}

int
dt__conn_peer_pid(const dt_conn *c)
{
	return c->peer_pid;
}

int
dt__conn_is_open(const dt_conn *c)
{
	return atomic_load(&c->open);
}

int
dt__van_dispatching(const dt_van *v)
{
	return v != NULL && (van_tl_dispatch == v || dt__loop_thread());
}

int
dt__van_shared(const dt_van *v)
{
	return v != NULL && v->shared;
}

uint64_t
dt__van_max_payload(const dt_van *v)
{
	return v->max_payload;
}

void
dt__van_counters(dt_van *v, uint64_t *sent, uint64_t *recvd)
{
	*sent = atomic_load(&v->sent);
	*recvd = atomic_load(&v->recvd);
}
