/*
 * link.c - PS_RESEND=1: every message between two nodes of a running job
 * arrives once, in order, whatever the network drops, and a broken
 * connection is dialled again (docs/fault-tolerance.md).
 *
 * A link is the pair of directions between this node and one peer (by node
 * id), and outlives the TCP connections that carry it. Each message on it
 * gets a sequence number (from 1) in a 16-byte block at the front of its
 * metadata (flag DT_F_LINK), with the cumulative acknowledgement of what
 * this side received: every frame carries one, and a bare ACK goes after
 * ACK_DELAY when no frame has carried it. The receiver takes a message only
 * if its number is the next expected one; a duplicate or a message after a
 * gap is dropped (a gap asks the sender to resend at once). So each push is
 * applied exactly once and each reply delivered once.
 *
 * The sender keeps every message until it is acknowledged, and resends the
 * whole unacknowledged queue, in order, when the oldest has waited
 * PS_RESEND_TIMEOUT, when the receiver saw a gap, and on a new connection.
 * Keeping costs a copy of the payload, except for messages the caller
 * declares stable (DT_SEND_STABLE: a KV request's payload, which its caller
 * keeps untouched until the answer, and an answer acknowledges it first):
 * those are kept by reference, and copied only if they must be resent.
 *
 * A lost connection: the side that dialled it (a member to the scheduler,
 * a worker to a server or to a worker of lower rank) dials again, says
 * HELLO and resends; the other side adopts the new connection at that
 * HELLO. Nobody calls the peer lost until DT_RECONNECT_TIMEOUT passes
 * without a connection; a peer that stopped cleanly says BYE first.
 *
 * Fault injection for tests: PS_DROP_MSG=P drops P% of the link frames
 * that come in (random, seeded by DT_DROP_SEED and the node id), and
 * DT_RESET_EVERY=S makes a node close the connections it dialled every S
 * seconds, and DT_CUT_EVERY=N cuts every N-th frame of 1 MiB or more that a
 * node sends inside its payload (the connection then ends).
 *
 * Threads: senders (any thread) number and write under the link's order_mu,
 * so the wire keeps the numbering; the I/O thread judges frames; the link
 * thread sends ACKs, resends, redials and resets. A hook (the thread that
 * handles events) never waits for order_mu, whose holder may be waiting
 * for a peer that is itself waiting for this node to read: it numbers and
 * keeps its message, and the next holder or the link thread writes it
 * (unsent). Lock order: order_mu, then links->mu; the van's locks below
 * both. Nothing waits on the network while holding links->mu.
 *
 * Size: its ideas are the resend log, redialling a lost peer and the
 * restart handshake; they share the per-peer link state and its lock, and
 * are kept together until the link state gets an interface of its own.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/node_impl.h"

#define BLOCK         DT_LINK_BLOCK
#define REDIAL_TRY_MS 200 /* one dial attempt at most */
#define REDIAL_GAP_NS 100000000ull

/* A message kept until acknowledged. */
typedef struct rtx {
	struct rtx *next;
	uint64_t lseq;
	dt_msg_hdr h;
	uint8_t *meta; /* the block, then the message's metadata */
	uint32_t meta_len;
	struct iovec *iov; /* the payload: the caller's pieces, or copy */
	int iovcnt;
	uint8_t *copy;
	size_t bytes;
	int refs;   /* (mu) resends under way */
	int acked;  /* (mu) freed by the last resender */
	int unsent; /* (mu) numbered by a hook while another thread held
	               order_mu: the next holder writes it */
} rtx;

typedef struct plink {
	pthread_mutex_t order_mu; /* numbering and writing, in order */
	uint64_t tx_next;         /* (mu) next sequence number to give */
	uint64_t rx_next;         /* (mu) next expected from the peer */
	uint64_t ack_told;        /* (mu) the last ack sent */
	uint64_t ack_due;         /* (mu) when a bare ACK goes; 0: none */
	int nack;                 /* (mu) a gap was seen: ask for a resend */
	uint64_t nacked;          /* (mu) rx_next when it last asked */
	uint64_t nacked_ns;       /* (mu) and when */
	uint64_t rto;             /* (mu) the resend timeout now: doubled
	                             after a resend that brought no ack, back to
	                             PS_RESEND_TIMEOUT at the next ack */
	uint64_t resent_ns;       /* (mu) the last resend */
	dt_conn *rx_busy;         /* (mu) the connection whose payload of
	                             message rx_next is coming in */
	rtx *head, *tail;         /* (mu) unacknowledged, oldest first */
	size_t queued;            /* (mu) their count */
	size_t unsent;            /* (mu) how many of them are unsent */
	uint64_t sent_ns;         /* (mu) the queue's last (re)send */
	int resend_now;           /* (mu) */
	int down;                 /* (mu) no connection; since down_ns */
	uint64_t down_ns;
	uint64_t redial_ns;       /* (mu) next dial attempt */
	int bye;                  /* (mu) the peer stopped cleanly */
	int gone;                 /* (mu) given up on: the peer is lost */
	int dialer;               /* this side dials the link */
	int ever;                 /* (mu) it has had a connection: a worker's
	                             first one to another is made on demand
	                             (reach.c), the next ones by redialling */
	char host[DT_HOST_MAX];   /* (mu) a restarted peer's address; "": the
	                             node table's */
	int port;                 /* (mu) */
	char local[DT_LOCAL_MAX]; /* (mu) its shared-memory endpoint, if
	                             usable from here (with host) */
	uint64_t gen;             /* (mu) the peer's process: its count of
	                             restarts (recovery) */
} plink;

struct dt_links {
	dt_node *n;
	int count;
	plink *p;
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* CLOCK_MONOTONIC; the link thread's */
	pthread_cond_t drained; /* CLOCK_MONOTONIC; dt__link_finish's */
	int draining;           /* (mu) a dt__link_finish waits */
	int stop;               /* (mu) */
	uint64_t wake_at;       /* (mu) when the thread wakes (UINT64_MAX: when
	                           poked; 0 while it is awake) */
	int dirty;     /* (mu) poked since the thread began its round */
	int busy;      /* (mu) it sleeps at most ACK_DELAY: work is pending */
	int clear;     /* (mu) the node failed: nothing is kept */
	int finishing; /* (mu) dt__link_finish began */
	pthread_t thread;
	int joined;
	uint64_t rng;        /* (mu) PS_DROP_MSG's */
	uint64_t reset_next; /* (thread) */
	uint64_t ack_delay;
	/* Counters for logs and the tests (mu). */
	uint64_t resent, dropped, dups, reconnects, copies;
};

static uint64_t
earlier(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Time since t at now; 0 if t is later (set by another thread since now
 * was read). */
static uint64_t
since(uint64_t now, uint64_t t)
{
	return now > t ? now - t : 0;
}

static int
eligible(unsigned cmd)
{
	switch (cmd) {
	case DT_CMD_ADD_NODE:
	case DT_CMD_ASSIGN:
	case DT_CMD_HELLO:
	case DT_CMD_HELLO_ACK:
	case DT_CMD_HEARTBEAT:
	case DT_CMD_ACK:
	case DT_CMD_ABORT:
	case DT_CMD_CLOCK: /* (a round trip timed: never held or resent) */
		return 0;
	default:
		return 1;
	}
}

dt_err
dt__link_config(dt_node *n)
{
	long on, tmo, drop, seed, recover, cut;
	dt_err err;

	if ((err = dt__env_long("PS_RESEND", 0, 0, 1, &on)) ||
	    (err = dt__env_long("PS_RESEND_TIMEOUT", 1000, 1, 3600000, &tmo)) ||
	    (err = dt__env_long("PS_DROP_MSG", 0, 0, 100, &drop)) ||
	    (err = dt__env_long("DT_DROP_SEED", 1, 0, 1L << 62, &seed)) ||
	    (err = dt__env_long("DT_CUT_EVERY", 0, 0, 1000000, &cut)) ||
	    (err = dt__env_seconds("DT_RESET_EVERY", 0, 0, 86400,
	                           &n->rs_reset_ns)) ||
	    (err = dt__env_seconds("DT_RECONNECT_TIMEOUT", 10, 0.1, 86400,
	                           &n->rs_window_ns)) ||
	    (err = dt__env_long("DTRAIN_RECOVER", 0, 0, 1, &recover)) ||
	    (err = dt__env_seconds("DT_RESTART_TIMEOUT", 60, 0.1, 86400,
	                           &n->restart_ns)))
		return err;
	/* Recovery rests on the links: a restarted peer's link starts
	 * again, and what it lost is replayed by the apps. */
	n->recover = (int)recover;
	if (recover)
		on = 1;
	if (!on && (drop || n->rs_reset_ns || cut))
		return dt__fail(DT_ECONFIG,
		                "%s loses messages on purpose; it needs "
		                "PS_RESEND=1 to resend them",
		                drop  ? "PS_DROP_MSG"
		                : cut ? "DT_CUT_EVERY"
		                      : "DT_RESET_EVERY");
	n->rs_on = (int)on;
	n->rs_timeout_ns = (uint64_t)tmo * 1000000ull;
	n->rs_drop = (int)drop;
	n->rs_cut = (unsigned)cut;
	n->rs_seed = (uint64_t)seed;
	return DT_OK;
}

static int
is_dialer(const dt_node *n, int peer)
{
	if (n->role == DT_ROLE_SCHEDULER)
		return 0;
	if (peer == 0)
		return 1;
	return n->role == DT_ROLE_WORKER &&
	       (dt__id_role(n, peer) == DT_ROLE_SERVER || peer < n->id);
}

static void
rtx_free(rtx *e)
{
	free(e->meta);
	free(e->copy);
	free(e->iov);
	free(e);
}

/* Drop what P keeps (mu held). */
static void
queue_clear(dt_links *L, plink *P)
{
	rtx *e = P->head;

	while (e) {
		rtx *next = e->next;

		if (e->refs)
			e->acked = 1;
		else
			rtx_free(e);
		e = next;
	}
	P->head = P->tail = NULL;
	P->queued = 0;
	P->unsent = 0;
	if (L->draining)
		pthread_cond_broadcast(&L->drained);
}

/*
 * Tell the link thread of work due at when (mu held). It is woken for work
 * due now (0), or, when nothing is pending (it sleeps until a timer of its
 * own, or until poked: wake_at), for work due before it would wake. While
 * anything is pending it looks every ACK_DELAY anyway (link_main): a
 * message then costs no wake-up of the thread.
 */
static void
poke(dt_links *L, uint64_t when)
{
	if (when == 0)
		L->dirty = 1;
	if ((when == 0 && L->wake_at) || (!L->busy && when < L->wake_at)) {
		L->wake_at = when;
		pthread_cond_broadcast(&L->cv);
	}
}

static void *link_main(void *arg);

dt_err
dt__link_create(dt_node *n)
{
	dt_links *L;
	int rc;

	if (!n->rs_on || n->links)
		return DT_OK;
	if ((L = dt__calloc(1, sizeof(*L))) == NULL)
		return DT_ENOMEM;
	L->n = n;
	L->count = n->ntable;
	if ((L->p = dt__calloc((size_t)L->count, sizeof(plink))) == NULL) {
		free(L);
		return DT_ENOMEM;
	}
	for (int i = 0; i < L->count; i++) {
		plink *P = &L->p[i];

		pthread_mutex_init(&P->order_mu, NULL);
		P->tx_next = P->rx_next = 1;
		P->rto = n->rs_timeout_ns;
		P->dialer = i != n->id && is_dialer(n, i);
	}
	L->ack_delay = n->rs_timeout_ns / 5;
	if (L->ack_delay > 10000000ull)
		L->ack_delay = 10000000ull;
	L->rng = (n->rs_seed + 1) * 0x9E3779B97F4A7C15ull ^
	         ((uint64_t)(n->id + 1) << 32);
	if (n->rs_reset_ns)
		L->reset_next = dt__now_ns() + n->rs_reset_ns;
	dt__van_set_cut(n->van, n->rs_cut);
	pthread_mutex_init(&L->mu, NULL);
	dt__cond_init_monotonic(&L->cv);
	dt__cond_init_monotonic(&L->drained);
	if ((rc = pthread_create(&L->thread, NULL, link_main, L)) != 0) {
		pthread_mutex_destroy(&L->mu);
		pthread_cond_destroy(&L->cv);
		pthread_cond_destroy(&L->drained);
		free(L->p);
		free(L);
		return dt__fail(DT_ESYS, "starting the PS_RESEND thread: %s",
		                strerror(rc));
	}
	__atomic_store_n(&n->links, L, __ATOMIC_RELEASE);
	DT_LOG(1,
	       "PS_RESEND=1: every message acknowledged, resent after %llu "
	       "ms%s",
	       (unsigned long long)(n->rs_timeout_ns / 1000000),
	       n->rs_drop ? "; PS_DROP_MSG drops some on purpose" : "");
	return DT_OK;
}

void
dt__link_stop(dt_node *n)
{
	dt_links *L = n->links;

	if (L == NULL || L->joined)
		return;
	pthread_mutex_lock(&L->mu);
	L->stop = 1;
	pthread_cond_broadcast(&L->cv);
	pthread_mutex_unlock(&L->mu);
	pthread_join(L->thread, NULL);
	L->joined = 1;
}

void
dt__link_destroy(dt_node *n)
{
	dt_links *L = n->links;

	if (L == NULL)
		return;
	dt__link_stop(n);
	if (L->resent || L->dropped || L->dups || L->reconnects || L->copies)
		dt__log(0,
		        "PS_RESEND: %llu messages resent, %llu dropped on "
		        "purpose, %llu duplicates ignored, %llu reconnections, "
		        "%llu answers copied before their value changed",
		        (unsigned long long)L->resent,
		        (unsigned long long)L->dropped,
		        (unsigned long long)L->dups,
		        (unsigned long long)L->reconnects,
		        (unsigned long long)L->copies);
	for (int i = 0; i < L->count; i++) {
		queue_clear(L, &L->p[i]);
		pthread_mutex_destroy(&L->p[i].order_mu);
	}
	pthread_mutex_destroy(&L->mu);
	pthread_cond_destroy(&L->cv);
	pthread_cond_destroy(&L->drained);
	free(L->p);
	free(L);
	n->links = NULL;
}

int
dt__link_wants(const dt_node *n, unsigned cmd)
{
	return __atomic_load_n(&n->links, __ATOMIC_ACQUIRE) != NULL &&
	       eligible(cmd);
}

/* Why a message to P's peer cannot be taken (mu held), or DT_OK. */
static dt_err
refuse_locked(dt_node *n, plink *P, int id)
{
	char name[64];

	if (!(P->bye || P->gone || n->links->clear))
		return DT_OK;
	return dt__fail(P->bye ? DT_ECLOSED : DT_EPEER,
	                "no connection to %s (%s)",
	                dt__node_name(n, id, name, sizeof(name)),
	                P->bye ? "it has left the job" : "it was lost");
}

/* Number e and keep it at the end of P's queue (mu held). */
static void
number_locked(dt_links *L, plink *P, rtx *e, const dt_msg_hdr *h)
{
	e->lseq = P->tx_next++;
	P->ack_told = P->rx_next - 1;
	dt__put_u64(e->meta, e->lseq);
	dt__put_u64(e->meta + 8, P->ack_told);
	e->h = *h;
	if (P->tail)
		P->tail->next = e;
	else {
		P->head = e;
		P->sent_ns = dt__now_ns();
	}
	P->tail = e;
	P->queued++;
	if (P->head == e)
		poke(L, P->sent_ns + P->rto);
}

/* The unsent messages of P, oldest first, each held (refs) until
 * release_list; they count as sent from here (mu held). NULL with *k = 0
 * when out of memory: the resend timer writes them then. */
static rtx **
take_unsent(plink *P, size_t *k)
{
	rtx **list = malloc(sizeof(*list) * P->unsent);

	*k = 0;
	if (list == NULL)
		return NULL;
	for (rtx *e = P->head; e && *k < P->unsent; e = e->next)
		if (e->unsent) {
			e->unsent = 0;
			e->refs++;
			list[(*k)++] = e;
		}
	P->unsent = 0;
	return list;
}

/* Write list[0..k) to c (order_mu held). */
static dt_err
send_list(dt_links *L, dt_conn *c, rtx **list, size_t k)
{
	dt_err err = DT_OK;

	for (size_t i = 0; i < k && err == DT_OK; i++)
		err = dt__van_send(L->n->van, c, &list[i]->h, list[i]->meta,
		                   list[i]->meta_len, list[i]->iov,
		                   list[i]->iovcnt);
	return err;
}

static void
release_list(dt_links *L, rtx **list, size_t k)
{
	if (list == NULL)
		return;
	pthread_mutex_lock(&L->mu);
	for (size_t i = 0; i < k; i++)
		if (--list[i]->refs == 0 && list[i]->acked)
			rtx_free(list[i]);
	pthread_mutex_unlock(&L->mu);
	free(list);
}

/* Write what hooks numbered while order_mu was taken (the link thread;
 * no lock held). */
static void
send_unsent(dt_links *L, int id)
{
	dt_node *n = L->n;
	plink *P = &L->p[id];
	rtx **list = NULL;
	size_t k = 0;
	dt_conn *c;

	pthread_mutex_lock(&P->order_mu);
	pthread_mutex_lock(&L->mu);
	c = P->down ? NULL : __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE);
	if (P->unsent && c)
		list = take_unsent(P, &k);
	pthread_mutex_unlock(&L->mu);
	(void)send_list(L, c, list, k);
	release_list(L, list, k);
	pthread_mutex_unlock(&P->order_mu);
}

static dt_err keep_copy(rtx *e);

/* Number e and keep it for the holder of order_mu, or the link thread,
 * to write (a hook found order_mu taken). */
static dt_err
keep_unsent(dt_links *L, int id, rtx *e, const dt_msg_hdr *h)
{
	plink *P = &L->p[id];
	dt_err err;

	/* Another thread writes it later, outside mu, while the owner of a
	 * buffer kept by reference may already be changing it (a server's
	 * value, unpinned and updated after this returns): keep a copy. */
	if (keep_copy(e) != DT_OK) {
		rtx_free(e);
		return DT_ENOMEM;
	}
	pthread_mutex_lock(&L->mu);
	if ((err = refuse_locked(L->n, P, id)) == DT_OK) {
		number_locked(L, P, e, h);
		e->unsent = 1;
		P->unsent++;
		poke(L, 0);
	}
	pthread_mutex_unlock(&L->mu);
	if (err)
		rtx_free(e);
	return err;
}

dt_err
dt__link_send(dt_node *n, int id, dt_msg_hdr *h, const void *meta,
              uint32_t meta_len, const struct iovec *iov, int iovcnt,
              int stable)
{
	dt_links *L = n->links;
	plink *P = &L->p[id];
	rtx *e;
	size_t bytes = 0;
	dt_conn *c;
	dt_err err = DT_OK;

	for (int i = 0; i < iovcnt; i++)
		bytes += iov[i].iov_len;
	if (bytes > dt__van_max_payload(n->van))
		return dt__fail(DT_ETOOBIG,
		                "%s of %zu bytes exceeds the message limit "
		                "(DT_MAX_MESSAGE)",
		                dt__cmd_name(h->cmd), bytes);
	if (meta_len > UINT32_MAX - BLOCK)
		return dt__fail(DT_ETOOBIG, "metadata too long");
	if ((e = dt__calloc(1, sizeof(*e))) == NULL ||
	    (e->meta = dt__malloc(BLOCK + (size_t)meta_len)) == NULL)
		goto nomem;
	if (meta_len)
		memcpy(e->meta + BLOCK, meta, meta_len);
	e->meta_len = BLOCK + meta_len;
	e->bytes = bytes;
	if (bytes && stable) {
		if ((e->iov = dt__malloc(sizeof(*iov) * (size_t)iovcnt)) ==
		    NULL)
			goto nomem;
		memcpy(e->iov, iov, sizeof(*iov) * (size_t)iovcnt);
		e->iovcnt = iovcnt;
	} else if (bytes) {
		size_t off = 0;

		if ((e->copy = dt__malloc(bytes)) == NULL ||
		    (e->iov = dt__malloc(sizeof(*e->iov))) == NULL)
			goto nomem;
		for (int i = 0; i < iovcnt; i++) {
			memcpy(e->copy + off, iov[i].iov_base, iov[i].iov_len);
			off += iov[i].iov_len;
		}
		e->iov[0] = (struct iovec){e->copy, bytes};
		e->iovcnt = 1;
	}
	h->sender = (uint32_t)n->id;
	h->recver = (uint32_t)id;
	h->flags |= DT_F_LINK;

	/* The thread that handles events never waits for order_mu: its
	 * holder may be waiting for a peer that reads only once this node
	 * reads (two nodes that write to each other at once). */
	if (!dt__van_dispatching(n->van))
		pthread_mutex_lock(&P->order_mu);
	else if (pthread_mutex_trylock(&P->order_mu) != 0)
		return keep_unsent(L, id, e, h);
	pthread_mutex_lock(&L->mu);
	if ((err = refuse_locked(n, P, id))) {
		pthread_mutex_unlock(&L->mu);
		pthread_mutex_unlock(&P->order_mu);
		rtx_free(e);
		return err;
	}
	/* what hooks numbered before this one goes first */
	size_t k = 0;
	rtx **before = P->unsent ? take_unsent(P, &k) : NULL;

	number_locked(L, P, e, h);
	c = P->down ? NULL : __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE);
	if (c)
		e->refs++; /* its answer may come before sendmsg returns */
	pthread_mutex_unlock(&L->mu);
	/* From the caller's buffers: they are valid for this call. The
	 * message is kept: a failed write is resent on the next connection,
	 * and a peer that never comes back fails the caller's wait. */
	if (c) {
		dt_err first = send_list(L, c, before, k);

		err = first ? first
		            : dt__van_send(n->van, c, &e->h, e->meta,
		                           e->meta_len, iov, iovcnt);
		pthread_mutex_lock(&L->mu);
		if (--e->refs == 0 && e->acked)
			rtx_free(e);
		pthread_mutex_unlock(&L->mu);
	}
	release_list(L, before, k);
	pthread_mutex_unlock(&P->order_mu);
	if (err == DT_ETOOBIG)
		return err;
	return DT_OK;
nomem:
	if (e)
		rtx_free(e);
	return DT_ENOMEM;
}

/* A random number in [0, 100) (mu held). */
static int
roll(dt_links *L)
{
	L->rng ^= L->rng << 13;
	L->rng ^= L->rng >> 7;
	L->rng ^= L->rng << 17;
	return (int)((L->rng >> 11) % 100);
}

/* The acknowledgement ack from P's peer (mu held). */
static dt_err
take_ack(dt_links *L, plink *P, uint64_t ack, int peer)
{
	int released = 0;
	char name[64];

	if (ack >= P->tx_next)
		return dt__fail(DT_EPROTO,
		                "%s acknowledges message #%llu, but only %llu "
		                "were sent",
		                dt__node_name(L->n, peer, name, sizeof(name)),
		                (unsigned long long)ack,
		                (unsigned long long)(P->tx_next - 1));
	while (P->head && P->head->lseq <= ack) {
		rtx *e = P->head;

		P->head = e->next;
		P->queued--;
		if (e->refs)
			e->acked = 1;
		else
			rtx_free(e);
		released = 1;
	}
	if (P->head == NULL)
		P->tail = NULL;
	if (released) {
		P->sent_ns = dt__now_ns(); /* the next one's clock */
		P->rto = L->n->rs_timeout_ns;
		if (L->draining && P->head == NULL)
			pthread_cond_broadcast(&L->drained);
	}
	return DT_OK;
}

int
dt__link_judge(dt_node *n, dt_conn *c, dt_msg_hdr *h, const uint8_t **meta,
               int tentative)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);
	int peer = dt__conn_peer(c), verdict;
	uint64_t lseq, ack, now;
	plink *P;

	if (!(h->flags & DT_F_LINK))
		return 1;
	if (L == NULL) {
		dt__fail(DT_EPROTO,
		         "a PS_RESEND frame (%s), but this node "
		         "runs without PS_RESEND=1 (set it on every "
		         "node)",
		         dt__cmd_name(h->cmd));
		return -1;
	}
	if (h->meta_len < BLOCK || peer < 0 || peer >= L->count ||
	    peer == n->id) {
		dt__fail(DT_EPROTO, "a PS_RESEND frame (%s) %s",
		         dt__cmd_name(h->cmd),
		         h->meta_len < BLOCK ? "without its link block"
		                             : "from a node that did not say "
		                               "who it is");
		return -1;
	}
	lseq = dt__get_u64(*meta);
	ack = dt__get_u64(*meta + 8);
	h->meta_len -= BLOCK;
	*meta += BLOCK;
	h->flags &= (uint16_t)~DT_F_LINK;
	P = &L->p[peer];
	now = dt__now_ns();
	pthread_mutex_lock(&L->mu);
	if (n->rs_drop && roll(L) < n->rs_drop) {
		L->dropped++; /* as if the network lost it */
		pthread_mutex_unlock(&L->mu);
		return 0;
	}
	if (take_ack(L, P, ack, peer) != DT_OK) {
		pthread_mutex_unlock(&L->mu);
		return -1;
	}
	if (lseq == 0) { /* a bare ACK; arg2 bit 0 asks for a resend */
		if (h->cmd != DT_CMD_ACK) {
			pthread_mutex_unlock(&L->mu);
			dt__fail(DT_EPROTO, "%s without a sequence number",
			         dt__cmd_name(h->cmd));
			return -1;
		}
		/* (one resend per quarter timeout at most: every message
		 * after a gap asks) */
		if ((h->arg2 & 1) && P->head &&
		    since(now, P->resent_ns) >= P->rto / 4) {
			P->resend_now = 1;
			poke(L, 0);
		}
		pthread_mutex_unlock(&L->mu);
		return 0;
	}
	if (lseq == P->rx_next && P->rx_busy && P->rx_busy != c) {
		/* The same message, still coming in on an older connection:
		 * whichever arrives whole first counts. */
		verdict = 0;
		P->ack_due = now;
	} else if (lseq == P->rx_next && tentative) {
		/* Its payload comes next: the message counts once it is all
		 * in (dt__link_commit), not if the connection breaks first. */
		P->rx_busy = c;
		pthread_mutex_unlock(&L->mu);
		return 1;
	} else if (lseq == P->rx_next) {
		P->rx_next++;
		verdict = 1;
		if (!P->ack_due)
			P->ack_due = now + L->ack_delay;
	} else {
		/* A duplicate (our ack was lost: tell it again) or a message
		 * after a gap (ask for a resend): either way, at once. */
		verdict = 0;
		if (lseq < P->rx_next) {
			L->dups++;
			P->ack_told = 0;
		} else if (P->nacked != P->rx_next ||
		           since(now, P->nacked_ns) >= n->rs_timeout_ns) {
			/* once per gap and timeout: every message after a
			 * gap would ask */
			P->nack = 1;
			P->nacked = P->rx_next;
			P->nacked_ns = now;
		}
		P->ack_due = now;
	}
	poke(L, P->ack_due);
	pthread_mutex_unlock(&L->mu);
	return verdict;
}

int
dt__link_commit(dt_node *n, dt_conn *c)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);
	int peer = dt__conn_peer(c), ok = 0;
	plink *P;

	if (L == NULL || peer < 0 || peer >= L->count)
		return 0;
	P = &L->p[peer];
	pthread_mutex_lock(&L->mu);
	if (P->rx_busy == c) {
		P->rx_busy = NULL;
		P->rx_next++;
		ok = 1;
		if (!P->ack_due)
			P->ack_due = dt__now_ns() + L->ack_delay;
		poke(L, P->ack_due);
	}
	pthread_mutex_unlock(&L->mu);
	return ok;
}

/* Keep a copy of e's payload from now on, if it was kept by reference
 * (mu held, or e not yet shared). */
static dt_err
keep_copy(rtx *e)
{
	uint8_t *cp;
	size_t off = 0;

	if (e->copy || e->bytes == 0)
		return DT_OK;
	if ((cp = malloc(e->bytes)) == NULL)
		return DT_ENOMEM;
	for (int i = 0; i < e->iovcnt; i++) {
		memcpy(cp + off, e->iov[i].iov_base, e->iov[i].iov_len);
		off += e->iov[i].iov_len;
	}
	e->copy = cp;
	e->iov[0] = (struct iovec){cp, e->bytes};
	e->iovcnt = 1;
	return DT_OK;
}

/* Send P's pending acknowledgement (no lock held). */
static void
send_ack(dt_links *L, int id, uint64_t ack, int nack)
{
	dt_node *n = L->n;
	dt_conn *c = __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE);
	uint8_t block[BLOCK];
	dt_msg_hdr h = {.cmd = DT_CMD_ACK, .flags = DT_F_LINK};

	if (c == NULL)
		return;
	h.sender = (uint32_t)n->id;
	h.recver = (uint32_t)id;
	h.arg2 = nack ? 1u : 0u;
	dt__put_u64(block, 0);
	dt__put_u64(block + 8, ack);
	(void)dt__van_send(n->van, c, &h, block, BLOCK, NULL, 0);
}

/* Resend everything P keeps, in order (no lock held). */
static void
resend(dt_links *L, int id)
{
	dt_node *n = L->n;
	plink *P = &L->p[id];
	rtx **list = NULL;
	size_t k = 0;
	dt_conn *c;
	char name[64];

	pthread_mutex_lock(&P->order_mu);
	pthread_mutex_lock(&L->mu);
	c = __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE);
	P->resend_now = 0;
	P->sent_ns = P->resent_ns = dt__now_ns();
	if (c == NULL || P->down || P->head == NULL ||
	    (list = malloc(sizeof(*list) * P->queued)) == NULL) {
		pthread_mutex_unlock(&L->mu);
		pthread_mutex_unlock(&P->order_mu);
		return;
	}
	P->ack_told = P->rx_next - 1;
	P->unsent = 0; /* all of them go now */
	for (rtx *e = P->head; e; e = e->next) {
		e->unsent = 0;
		/* Kept by reference: its owner keeps the buffer until the
		 * answer, which acknowledges it under this lock first (or
		 * until dt__link_unpin), so it is still there. Copy it now. */
		if (keep_copy(e) != DT_OK)
			break;
		dt__put_u64(e->meta + 8, P->ack_told);
		e->refs++;
		list[k++] = e;
	}
	L->resent += k;
	pthread_mutex_unlock(&L->mu);
	DT_LOG(1, "resending %zu messages to %s, from #%llu", k,
	       dt__node_name(n, id, name, sizeof(name)),
	       (unsigned long long)(k ? list[0]->lseq : 0));
	(void)send_list(L, c, list, k);
	release_list(L, list, k);
	pthread_mutex_unlock(&P->order_mu);
}

/* Where to dial peer id again, into host, local and *port: 0 when its
 * address could not be had (dialled again after REDIAL_GAP_NS). */
static int
redial_addr(dt_links *L, int id, char host[DT_HOST_MAX],
            char local[DT_LOCAL_MAX], int *port)
{
	dt_node *n = L->n;
	const dt_node_entry *e = &n->table[id];
	char name[64];

	if (id == 0) {
		snprintf(host, DT_HOST_MAX, "%s", n->cfg.root_uri);
		*port = n->cfg.root_port;
		local[0] = '\0';
		return 1;
	}
	if (dt__link_addr(n, id, host, DT_HOST_MAX, port, local, DT_LOCAL_MAX))
		return 1;
	/* (a worker that dialled this one: its address is asked of the
	 * scheduler the first time, directory.c) */
	if (dt__node_lookup(n, id, 1) != DT_OK) {
		DT_LOG(1, "dialling %s again: %s",
		       dt__node_name(n, id, name, sizeof(name)), dt_errmsg());
		pthread_mutex_lock(&L->mu);
		L->p[id].redial_ns = dt__now_ns() + REDIAL_GAP_NS;
		pthread_mutex_unlock(&L->mu);
		return 0;
	}
	snprintf(host, DT_HOST_MAX, "%s", e->host);
	*port = e->port;
	snprintf(local, DT_LOCAL_MAX, "%s",
	         dt__node_local_of(n, e->hostid, e->local));
	return 1;
}

/* A dial to peer id failed with err: try again later, unless the
 * refusal means the peer has gone for good. */
static void
redial_failed(dt_links *L, int id, dt_err err, const char *name)
{
	plink *P = &L->p[id];
	int gone = 0;

	pthread_mutex_lock(&L->mu);
	P->redial_ns = dt__now_ns() + REDIAL_GAP_NS;
	if (err == DT_ECONNREFUSED && L->finishing) {
		/* This node is leaving and the peer's port is closed: it has
		 * left too (its BYE or our last acknowledgement was cut off).
		 * Nothing to wait for. */
		P->gone = 1;
		queue_clear(L, P);
	} else if (err == DT_ECONNREFUSED && id == 0) {
		/* The scheduler listens as long as it lives, and its place is
		 * never taken again: a closed port means it has gone, and the
		 * job with it. Waiting out DT_RECONNECT_TIMEOUT would only
		 * keep this node running after its job ended. */
		P->gone = gone = 1;
		queue_clear(L, P);
	}
	pthread_mutex_unlock(&L->mu);
	DT_LOG(1, "dialling %s again: %s", name, dt_errmsg());
	if (gone)
		dt__node_peer_lost(L->n, 0,
		                   "its port refuses connections: the "
		                   "scheduler has gone");
}

/* Dial P's peer again (no lock held). */
static void
redial(dt_links *L, int id)
{
	dt_node *n = L->n;
	plink *P = &L->p[id];
	char host[DT_HOST_MAX], local[DT_LOCAL_MAX];
	int port;
	char name[64];
	dt_conn *c;
	dt_err err;

	if (!redial_addr(L, id, host, local, &port))
		return;
	dt__node_name(n, id, name, sizeof(name));
	err =
	    dt__van_connect(n->van, host, port, local, REDIAL_TRY_MS, name, &c);
	if (err) {
		redial_failed(L, id, err, name);
		return;
	}
	dt__conn_set_peer(c, id);
	if (id == 0)
		__atomic_store_n(&n->root, c, __ATOMIC_RELEASE);
	__atomic_store_n(&n->peers[id], c, __ATOMIC_RELEASE);
	dt_msg_hdr h = {
	    .cmd = DT_CMD_HELLO, .flags = DT_F_REQUEST, .arg0 = n->gen};

	h.sender = (uint32_t)n->id;
	h.recver = (uint32_t)id;
	if (dt__van_send(n->van, c, &h, NULL, 0, NULL, 0) != DT_OK) {
		pthread_mutex_lock(&L->mu);
		P->redial_ns = dt__now_ns() + REDIAL_GAP_NS;
		pthread_mutex_unlock(&L->mu);
		return; /* its close comes through on_close */
	}
	pthread_mutex_lock(&L->mu);
	if (__atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) != c ||
	    !dt__conn_is_open(c)) {
		/* It closed already (the peer's first resend on it can be
		 * cut, DT_CUT_EVERY): the link stays down, as on_close left
		 * it or will. Marking it up now would leave it up with no
		 * connection, never dialled again, and whoever waits on it
		 * waiting for good. */
		__atomic_compare_exchange_n(&n->peers[id], &(dt_conn *){c},
		                            NULL, 0, __ATOMIC_ACQ_REL,
		                            __ATOMIC_ACQUIRE);
		if (id == 0)
			__atomic_compare_exchange_n(&n->root, &(dt_conn *){c},
			                            NULL, 0, __ATOMIC_ACQ_REL,
			                            __ATOMIC_ACQUIRE);
		P->redial_ns = dt__now_ns();
		pthread_mutex_unlock(&L->mu);
		return;
	}
	P->down = 0;
	P->ever = 1;
	P->resend_now = P->head != NULL;
	P->ack_due = dt__now_ns(); /* tell what we have */
	P->ack_told = 0;
	P->rto = n->rs_timeout_ns;
	P->nacked = 0;
	L->reconnects++;
	pthread_mutex_unlock(&L->mu);
	DT_LOG(1, "reconnected to %s at %s:%d", name, host, port);
}

/* Close the connections this node dialled (DT_RESET_EVERY). */
static void
reset_dialled(dt_links *L)
{
	dt_node *n = L->n;

	for (int id = 0; id < L->count; id++) {
		dt_conn *c;
		int bye;

		/* Not while this node leaves: with only its BYE
		 * unacknowledged, a closed connection means that the peer
		 * has gone (dt__link_on_close), and a reset of ours would
		 * pass for that. */
		pthread_mutex_lock(&L->mu);
		bye = L->p[id].bye || L->finishing;
		pthread_mutex_unlock(&L->mu);
		if (!L->p[id].dialer || bye ||
		    (c = __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE)) ==
		        NULL)
			continue;
		DT_LOG(1, "DT_RESET_EVERY: closing the connection to node %d",
		       id);
		dt__van_close(n->van, c);
	}
}

/* A peer gone cleanly: only its BYE (or a copy of it) is acknowledged.
 * Called and returns with L->mu held; lets go of it to send. */
static void
visit_bye(dt_links *L, plink *P, int id)
{
	if (P->ack_due && !P->down) {
		uint64_t ack = P->rx_next - 1;

		P->ack_due = 0;
		P->ack_told = ack;
		pthread_mutex_unlock(&L->mu);
		send_ack(L, id, ack, 0);
		pthread_mutex_lock(&L->mu);
	}
}

/* A peer whose connection is down: lost for good once the window is
 * over, else redialled when due. Returns whether it is still down (or
 * gone), so nothing else is due for it now. L->mu held, as above. */
static int
visit_down(dt_links *L, plink *P, int id, uint64_t now, uint64_t *next)
{
	dt_node *n = L->n;
	/* With recovery, a server or worker may come back as a new process:
	 * the scheduler says when it is lost for good. */
	uint64_t window = n->recover && id != 0 && n->role != DT_ROLE_SCHEDULER
	                      ? n->rs_window_ns + n->restart_ns
	                      : n->rs_window_ns;

	if (since(now, P->down_ns) >= window) {
		char why[96];

		P->gone = 1;
		queue_clear(L, P);
		pthread_mutex_unlock(&L->mu);
		snprintf(why, sizeof(why),
		         "no connection again within "
		         "DT_RECONNECT_TIMEOUT=%.3g s",
		         (double)n->rs_window_ns * 1e-9);
		dt__node_peer_lost(n, id, why);
		pthread_mutex_lock(&L->mu);
		return 1;
	}
	*next = earlier(*next, P->down_ns + window);
	if (P->dialer && now >= P->redial_ns) {
		pthread_mutex_unlock(&L->mu);
		redial(L, id);
		pthread_mutex_lock(&L->mu);
	}
	if (P->down && P->dialer)
		*next = earlier(*next, P->redial_ns);
	return P->down;
}

/* A connected peer: what was queued while it was down, the ack due, the
 * resend due. Returns whether work is pending for it. L->mu held, as
 * above. */
static int
visit_up(dt_links *L, plink *P, int id, uint64_t now, uint64_t *next)
{
	dt_node *n = L->n;

	if (P->unsent) {
		pthread_mutex_unlock(&L->mu);
		send_unsent(L, id);
		pthread_mutex_lock(&L->mu);
	}
	if (P->ack_due && now >= P->ack_due) {
		uint64_t ack = P->rx_next - 1;
		int nack = P->nack;

		P->ack_due = 0;
		P->nack = 0;
		if (ack != P->ack_told || nack) {
			P->ack_told = ack;
			pthread_mutex_unlock(&L->mu);
			send_ack(L, id, ack, nack);
			pthread_mutex_lock(&L->mu);
		}
	} else if (P->ack_due) {
		*next = earlier(*next, P->ack_due);
	}
	if (P->head && (P->resend_now || since(now, P->sent_ns) >= P->rto)) {
		/* Back off while resends bring no ack: a loaded peer is not
		 * made busier. */
		if (!P->resend_now && P->rto < 8 * n->rs_timeout_ns)
			P->rto *= 2;
		pthread_mutex_unlock(&L->mu);
		resend(L, id);
		pthread_mutex_lock(&L->mu);
	}
	if (P->head)
		*next =
		    earlier(*next, P->resend_now ? now : P->sent_ns + P->rto);
	/* Pending work: look again within ACK_DELAY (poke wakes only an
	 * idle thread). */
	if (P->head || P->rx_next - 1 != P->ack_told) {
		*next = earlier(*next, now + L->ack_delay);
		return 1;
	}
	return 0;
}

static void *
link_main(void *arg)
{
	dt_links *L = arg;
	dt_node *n = L->n;

	pthread_mutex_lock(&L->mu);
	while (!L->stop) {
		uint64_t now, next = UINT64_MAX;
		int busy = 0; /* it looks again within ACK_DELAY anyway */

		L->dirty = 0;
		for (int id = 0; id < L->count && !L->stop; id++) {
			plink *P = &L->p[id];

			now = dt__now_ns();
			if (id == n->id || P->gone || L->clear)
				continue;
			if (P->bye) {
				visit_bye(L, P, id);
				continue;
			}
			if (P->down && visit_down(L, P, id, now, &next))
				continue;
			busy |= visit_up(L, P, id, now, &next);
		}
		if (L->stop)
			break;
		now = dt__now_ns();
		if (n->rs_reset_ns) {
			if (now >= L->reset_next) {
				L->reset_next = now + n->rs_reset_ns;
				pthread_mutex_unlock(&L->mu);
				reset_dialled(L);
				pthread_mutex_lock(&L->mu);
			}
			next = earlier(next, L->reset_next);
		}
		now = dt__now_ns();
		/* Poked while it looked at others (it lets go of mu to send):
		 * look again soon, in case a peer already seen changed. */
		if (L->dirty)
			next = earlier(next, now + 1000000ull);
		L->wake_at = next;
		L->busy = busy;
		if (next == UINT64_MAX) {
			pthread_cond_wait(&L->cv, &L->mu);
		} else if (next > now) {
			struct timespec ts = dt__timespec_at(next);

			pthread_cond_timedwait(&L->cv, &L->mu, &ts);
		}
		L->wake_at = 0; /* awake: it will look anyway */
	}
	pthread_mutex_unlock(&L->mu);
	return NULL;
}

int
dt__link_on_close(dt_node *n, dt_conn *c, int peer)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);
	plink *P;
	char name[64];

	if (L == NULL || peer < 0 || peer >= L->count || peer == n->id)
		return 0;
	P = &L->p[peer];
	pthread_mutex_lock(&L->mu);
	if (P->rx_busy == c)
		P->rx_busy = NULL; /* cut short: it will come again */
	pthread_mutex_unlock(&L->mu);
	if (!__atomic_compare_exchange_n(&n->peers[peer], &(dt_conn *){c}, NULL,
	                                 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return 1; /* an old connection, already replaced */
	if (peer == 0)
		__atomic_compare_exchange_n(&n->root, &(dt_conn *){c}, NULL, 0,
		                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	pthread_mutex_lock(&L->mu);
	if (P->bye || P->gone || L->clear ||
	    (L->finishing &&
	     (P->head == NULL ||
	      (P->head == P->tail && P->head->h.cmd == DT_CMD_BYE)))) {
		/* (this node is leaving with nothing but its BYE
		 * unacknowledged, and the peer closed: it left too) */
		queue_clear(L, P);
		pthread_mutex_unlock(&L->mu);
		return 0; /* the usual end */
	}
	P->down = 1;
	P->down_ns = P->redial_ns = dt__now_ns();
	poke(L, 0);
	pthread_mutex_unlock(&L->mu);
	DT_LOG(1, "connection to %s lost; %s",
	       dt__node_name(n, peer, name, sizeof(name)),
	       P->dialer ? "dialling it again"
	                 : "waiting for it to dial again");
	return 1;
}

int
dt__link_adopt(dt_node *n, dt_conn *c, int peer)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);
	dt_conn *old;
	plink *P;
	char name[64];

	if (L == NULL || peer <= 0 || peer >= L->count || peer == n->id ||
	    L->p[peer].dialer)
		return 0;
	P = &L->p[peer];
	pthread_mutex_lock(&L->mu);
	if (P->gone || P->bye) {
		pthread_mutex_unlock(&L->mu);
		return 0;
	}
	pthread_mutex_unlock(&L->mu);
	dt__conn_set_peer(c, peer);
	old = __atomic_exchange_n(&n->peers[peer], c, __ATOMIC_ACQ_REL);
	if (old && old != c)
		dt__van_close(n->van, old); /* its close is then stale */
	pthread_mutex_lock(&L->mu);
	int again = P->down || (old && old != c);

	P->down = 0;
	P->ever = 1;
	if (again) {
		P->resend_now = P->head != NULL;
		P->ack_due = dt__now_ns();
		P->ack_told = 0;
		P->rto = n->rs_timeout_ns;
		P->nacked = 0;
		L->reconnects++;
		poke(L, 0);
	}
	pthread_mutex_unlock(&L->mu);
	if (again)
		DT_LOG(1, "%s connected again from %s",
		       dt__node_name(n, peer, name, sizeof(name)),
		       dt__conn_addr(c));
	return 1;
}

void
dt__link_unpin(dt_node *n, const void *p, size_t bytes)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);
	const uint8_t *lo = p, *hi = lo + bytes;

	if (L == NULL || bytes == 0)
		return;
	pthread_mutex_lock(&L->mu);
	for (int i = 0; i < L->count; i++)
		for (rtx *e = L->p[i].head; e; e = e->next) {
			int hit = 0;

			if (e->copy || e->bytes == 0)
				continue;
			for (int k = 0; k < e->iovcnt && !hit; k++) {
				const uint8_t *b = e->iov[k].iov_base;

				hit = b < hi && lo < b + e->iov[k].iov_len;
			}
			if (hit && keep_copy(e) == DT_OK)
				L->copies++;
		}
	pthread_mutex_unlock(&L->mu);
}

void
dt__link_bye_from(dt_node *n, int peer)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);

	if (L == NULL || peer < 0 || peer >= L->count)
		return;
	pthread_mutex_lock(&L->mu);
	L->p[peer].bye = 1;
	queue_clear(L, &L->p[peer]);
	/* Acknowledge it at once: the peer waits for that before it goes. */
	L->p[peer].ack_due = dt__now_ns();
	poke(L, 0);
	pthread_mutex_unlock(&L->mu);
}

int
dt__link_restart_peer(dt_node *n, int peer, dt_conn *c, const char *host,
                      int port, const char *local)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);
	dt_conn *old;
	plink *P;

	if (L == NULL || peer <= 0 || peer >= L->count || peer == n->id)
		return 0;
	P = &L->p[peer];
	if (c)
		dt__conn_set_peer(c, peer);
	old = __atomic_exchange_n(&n->peers[peer], c, __ATOMIC_ACQ_REL);
	if (old && old != c) {
		/* Whatever the old process still had on the way is not
		 * taken: its connection names nobody from here on. */
		dt__conn_set_peer(old, -1);
		dt__van_close(n->van, old);
	}
	pthread_mutex_lock(&P->order_mu);
	pthread_mutex_lock(&L->mu);
	/* (a peer this node never talked to, as a server to another server:
	 * only its address changes) */
	int talked = c || old || P->down || P->tx_next > 1 || P->rx_next > 1;

	queue_clear(L, P); /* the apps replay what the new one needs */
	P->tx_next = 1;
	P->rx_next = 1;
	P->ack_told = 0;
	P->ack_due = 0;
	P->nack = 0;
	P->nacked = 0;
	P->rx_busy = NULL;
	P->rto = n->rs_timeout_ns;
	P->resend_now = 0;
	P->bye = P->gone = 0;
	if (host) {
		snprintf(P->host, sizeof(P->host), "%s", host);
		P->port = port;
		snprintf(P->local, sizeof(P->local), "%s", local ? local : "");
	}
	P->down = c == NULL && talked;
	P->ever = c != NULL || P->down;
	P->down_ns = P->redial_ns = dt__now_ns();
	L->reconnects += talked;
	poke(L, 0);
	pthread_mutex_unlock(&L->mu);
	pthread_mutex_unlock(&P->order_mu);
	return 1;
}

int
dt__link_newer_gen(dt_node *n, int peer, uint64_t gen)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);
	int newer;

	if (L == NULL || peer <= 0 || peer >= L->count || peer == n->id)
		return 0;
	pthread_mutex_lock(&L->mu);
	newer = gen > L->p[peer].gen;
	if (newer)
		L->p[peer].gen = gen;
	pthread_mutex_unlock(&L->mu);
	return newer;
}

void
dt__link_set_addr(dt_node *n, int peer, const char *host, int port,
                  const char *local)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);

	if (L == NULL || peer <= 0 || peer >= L->count || peer == n->id)
		return;
	pthread_mutex_lock(&L->mu);
	snprintf(L->p[peer].host, sizeof(L->p[peer].host), "%s", host);
	L->p[peer].port = port;
	snprintf(L->p[peer].local, sizeof(L->p[peer].local), "%s", local);
	pthread_mutex_unlock(&L->mu);
}

int
dt__link_addr(dt_node *n, int peer, char *host, size_t hcap, int *port,
              char *local, size_t lcap)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);
	int known;

	if (L == NULL || peer <= 0 || peer >= L->count)
		return 0;
	pthread_mutex_lock(&L->mu);
	known = L->p[peer].host[0] != '\0';
	if (known) {
		snprintf(host, hcap, "%s", L->p[peer].host);
		*port = L->p[peer].port;
		snprintf(local, lcap, "%s", L->p[peer].local);
	}
	pthread_mutex_unlock(&L->mu);
	return known;
}

int
dt__link_fresh(dt_node *n, int peer)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);
	int fresh;

	if (L == NULL || peer < 0 || peer >= L->count)
		return 1;
	pthread_mutex_lock(&L->mu);
	fresh = !L->p[peer].ever && !L->p[peer].down && !L->p[peer].gone &&
	        !L->p[peer].bye && !L->clear;
	pthread_mutex_unlock(&L->mu);
	return fresh;
}

void
dt__link_note_conn(dt_node *n, int peer)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);

	if (L == NULL || peer < 0 || peer >= L->count)
		return;
	pthread_mutex_lock(&L->mu);
	L->p[peer].ever = 1;
	pthread_mutex_unlock(&L->mu);
}

int
dt__link_down(dt_node *n, int peer)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);
	int down;

	if (L == NULL || peer < 0 || peer >= L->count)
		return 0;
	pthread_mutex_lock(&L->mu);
	down = L->p[peer].down || L->p[peer].gone;
	pthread_mutex_unlock(&L->mu);
	return down;
}

int
dt__link_ended(dt_node *n, int peer)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);
	int ended;

	if (L == NULL || peer < 0 || peer >= L->count)
		return 1;
	pthread_mutex_lock(&L->mu);
	ended = L->p[peer].bye || L->p[peer].gone || L->clear;
	pthread_mutex_unlock(&L->mu);
	return ended;
}

void
dt__link_clear(dt_node *n)
{
	dt_links *L = __atomic_load_n(&n->links, __ATOMIC_ACQUIRE);

	if (L == NULL)
		return;
	pthread_mutex_lock(&L->mu);
	L->clear = 1;
	for (int i = 0; i < L->count; i++)
		queue_clear(L, &L->p[i]);
	pthread_mutex_unlock(&L->mu);
}

/* Wait until every live link has its messages acknowledged, or the
 * deadline. */
static void
drain(dt_links *L, uint64_t deadline_ns)
{
	pthread_mutex_lock(&L->mu);
	L->draining++;
	for (;;) {
		int busy = 0;

		for (int i = 0; i < L->count && !busy; i++)
			busy = L->p[i].head && !L->p[i].gone && !L->p[i].bye;
		if (!busy || L->clear || dt__now_ns() >= deadline_ns)
			break;
		struct timespec ts = dt__timespec_at(
		    earlier(deadline_ns, dt__now_ns() + 50000000ull));

		pthread_cond_timedwait(&L->drained, &L->mu, &ts);
	}
	L->draining--;
	pthread_mutex_unlock(&L->mu);
}

void
dt__link_finish(dt_node *n, uint64_t deadline_ns)
{
	dt_links *L = n->links;

	if (L == NULL)
		return;
	pthread_mutex_lock(&L->mu);
	L->finishing = 1;
	pthread_mutex_unlock(&L->mu);
	drain(L, deadline_ns);
	/* BYE is a message of the link like any other: numbered after all
	 * this node sent, acknowledged, resent through a broken connection.
	 * So a peer hears it (and stops waiting for this node to dial again)
	 * unless the deadline passes first. Said to every peer this node
	 * has talked to. */
	for (int id = 0; id < L->count; id++) {
		plink *P = &L->p[id];
		dt_msg_hdr h = {.cmd = DT_CMD_BYE};
		int say;

		pthread_mutex_lock(&L->mu);
		say = id != n->id && !P->bye && !P->gone && !L->clear &&
		      (P->down || P->tx_next > 1 || P->rx_next > 1 ||
		       __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE));
		pthread_mutex_unlock(&L->mu);
		if (say)
			(void)dt__link_send(n, id, &h, NULL, 0, NULL, 0, 0);
	}
	drain(L, deadline_ns);
	/* A peer that said BYE waits for its acknowledgement: it goes now,
	 * not when the link thread would send it. */
	for (int id = 0; id < L->count; id++) {
		plink *P = &L->p[id];
		uint64_t ack = 0;

		pthread_mutex_lock(&L->mu);
		if (P->bye && !P->down && P->rx_next - 1 != P->ack_told) {
			ack = P->ack_told = P->rx_next - 1;
			P->ack_due = 0;
		}
		pthread_mutex_unlock(&L->mu);
		if (ack)
			send_ack(L, id, ack, 0);
	}
	pthread_mutex_lock(&L->mu);
	for (int i = 0; i < L->count; i++)
		L->p[i].bye = 1; /* no more redialling */
	pthread_mutex_unlock(&L->mu);
}
