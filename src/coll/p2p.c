/*
 * p2p.c - point-to-point messages between two ranks of a communicator
 * (dt_coll_send, dt_coll_recv and their asynchronous forms), the
 * application-level sends of model parallelism: a pipeline stage hands its
 * activations to the next stage and gets their gradients back.
 *
 * Unlike the collectives these involve two ranks only, so they do not go
 * through the sequence-ordered queue of comm.c; they share its lock, its
 * connections (so whichever transport the van uses, TCP or same-host
 * shared memory, carries them), its timeout and its fault reporting.
 *
 * The protocol is eager with an acknowledgement. The sender sends one
 * COLL_P2P frame (seq: the sender's message id, key: the tag, arg0: the
 * count, arg2: the dtype) and waits for COLL_P2P_ACK (seq: that id,
 * arg2: DT_OK or the receiver's error, meta: the receiver's reason). The
 * receiver matches frames against posted receives by (rank, tag), oldest
 * first on both sides, so messages of one tag arrive in the order they
 * were sent (one connection per pair keeps the frames in order), while
 * messages of different tags overtake each other freely. A frame that
 * finds no posted receive is copied into the unexpected queue, capped by
 * DT_COLL_UNEXPECTED_MAX. A mismatched count or dtype fails the receive
 * and, through the acknowledgement, the send, with the same words on both
 * sides. The acknowledgement is what lets the sender report that: it
 * also tells the sender its buffer is free again.
 *
 * Threads: the node's I/O thread matches frames and completes requests
 * (dt__coll_p2p_on_msg, mu held) but never sends; the acknowledgements it
 * owes are queued and sent by whichever of the background thread, a
 * waiting caller or a waiting executor gets there first
 * (dt__coll_p2p_flush). A lost peer fails every request that involves it
 * (dt__coll_p2p_lost, from the node's failure hook); a request that makes
 * no progress for DT_COLL_TIMEOUT fails with a report naming the pair.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/p2p.h"

/* A send awaiting its acknowledgement or a posted receive (mu). */
struct dt__p2p_req {
	dt_lnode link; /* in c->p2p_sends or c->p2p_recvs while pending */
	int is_send;
	int peer;
	int tag;
	dt_dtype dtype;
	size_t count;
	void *buf;   /* receive: where the data goes */
	uint64_t id; /* send: the frame's id */
	int done;
	dt_err err;
	char msg[1024];
};

/* A frame that arrived before its receive was posted (mu). */
typedef struct p2p_unexp {
	dt_lnode link; /* in c->p2p_unexp */
	int peer;
	int tag;
	uint64_t id;
	dt_dtype dtype;
	size_t count;
	void *data;  /* count elements, NULL when count is 0 or dropped */
	int dropped; /* over DT_COLL_UNEXPECTED_MAX */
} p2p_unexp;

/* An acknowledgement owed to a sender (mu). */
typedef struct p2p_ack {
	dt_lnode link; /* in c->p2p_acks */
	int peer;
	int tag;
	uint64_t id;
	dt_err err;
	char msg[512];
} p2p_ack;

static void
describe(char *out, size_t cap, const char *what, int peer, int tag,
         size_t count, dt_dtype dtype)
{
	snprintf(out, cap, "%s rank %d (tag %d, %zu %s)", what, peer, tag,
	         count, dt_dtype_name(dtype));
}

static void
req_done(dt_coll *c, dt__p2p_req *r)
{
	r->done = 1;
	if (dt__list_linked(&r->link))
		dt__list_remove(&r->link);
	dt__coll_wake(c);
	pthread_cond_broadcast(&c->done_cv);
}

static void
req_fail(dt_coll *c, dt__p2p_req *r, dt_err err, const char *reason)
{
	char what[160];

	if (r->done)
		return;
	describe(what, sizeof(what), r->is_send ? "send to" : "recv from",
	         r->peer, r->tag, r->count, r->dtype);
	r->err = err;
	snprintf(r->msg, sizeof(r->msg), "%s: %.700s", what, reason);
	req_done(c, r);
}

/* A request whose deadline passed fails naming the peer that kept it
 * waiting (mu held). */
static void
req_stalled(dt_coll *c, dt__p2p_req *r)
{
	char why[160];

	snprintf(why, sizeof(why),
	         "stalled for %.0f s: rank %d has not %s it (DT_COLL_TIMEOUT)",
	         c->cfg.timeout_s, r->peer, r->is_send ? "received" : "sent");
	req_fail(c, r, DT_ETIMEDOUT, why);
}

/*
 * Hand a frame's data to a posted receive (mu held): check it, copy it and
 * say in *ack what the sender is to be told. The copy runs under the lock,
 * which a concurrent cancellation of the receive (its timeout) needs to
 * be sure no byte lands after the call has returned.
 */
static void
deliver(dt_coll *c, dt__p2p_req *r, const p2p_unexp *u, const void *data,
        p2p_ack *ack)
{
	ack->peer = r->peer;
	ack->tag = r->tag;
	ack->id = u->id;
	ack->err = DT_OK;
	ack->msg[0] = '\0';
	if (u->dropped) {
		snprintf(
		    ack->msg, sizeof(ack->msg),
		    "send to rank %d (tag %d, %zu %s): rank %d dropped it, "
		    "over the %zu bytes it holds for messages not yet "
		    "received (DT_COLL_UNEXPECTED_MAX)",
		    c->rank, r->tag, u->count, dt_dtype_name(u->dtype), c->rank,
		    c->cfg.unexpected_max);
		ack->err = DT_ENOMEM;
		req_fail(c, r, DT_ENOMEM,
		         "the message was dropped, over the bytes this rank "
		         "holds for messages not yet received "
		         "(DT_COLL_UNEXPECTED_MAX)");
		return;
	}
	if (u->count != r->count || u->dtype != r->dtype) {
		char why[256];

		snprintf(why, sizeof(why),
		         "message of %zu %s from rank %d (tag %d) != receive "
		         "of %zu %s posted by rank %d",
		         u->count, dt_dtype_name(u->dtype), r->peer, r->tag,
		         r->count, dt_dtype_name(r->dtype), c->rank);
		ack->err = DT_EMISMATCH;
		snprintf(ack->msg, sizeof(ack->msg), "send to rank %d: %s",
		         c->rank, why);
		req_fail(c, r, DT_EMISMATCH, why);
		return;
	}
	if (r->count)
		memcpy(r->buf, data, r->count * dt_dtype_size(r->dtype));
	req_done(c, r);
}

static void
ack_queue(dt_coll *c, const p2p_ack *a)
{
	p2p_ack *q = malloc(sizeof(*q));

	if (q == NULL) {
		dt__log(0, "no memory to acknowledge message %llu of rank %d",
		        (unsigned long long)a->id, a->peer);
		return;
	}
	*q = *a;
	dt__list_push_back(&c->p2p_acks, &q->link);
	pthread_cond_signal(&c->bg_cv);
}

static dt_err
ack_send(dt_coll *c, const p2p_ack *a)
{
	dt_msg_hdr h = {.cmd = DT_CMD_COLL_P2P_ACK,
	                .seq = a->id,
	                .key = (uint64_t)a->tag,
	                .arg2 = (uint32_t)a->err};
	uint32_t len = a->err ? (uint32_t)strlen(a->msg) + 1 : 0;

	return dt__coll_send(c, a->peer, &h, a->err ? a->msg : NULL, len, NULL,
	                     0);
}

void
dt__coll_p2p_flush(dt_coll *c)
{
	dt_lnode *l;

	while ((l = dt__list_pop_front(&c->p2p_acks)) != NULL) {
		p2p_ack *a = DT_CONTAINER_OF(l, p2p_ack, link);

		pthread_mutex_unlock(&c->mu);
		/* A sender that is gone needs no answer; its loss is
		 * reported through the failure hook. */
		(void)ack_send(c, a);
		free(a);
		pthread_mutex_lock(&c->mu);
	}
}

int
dt__coll_p2p_pending_acks(const dt_coll *c)
{
	return !dt__list_empty(&c->p2p_acks);
}

/* ---- the I/O thread ---- */

static dt__p2p_req *
find_recv(dt_coll *c, int peer, int tag)
{
	for (dt_lnode *l = dt__list_first(&c->p2p_recvs); l;
	     l = dt__list_next(&c->p2p_recvs, l)) {
		dt__p2p_req *r = DT_CONTAINER_OF(l, dt__p2p_req, link);

		if (r->peer == peer && r->tag == tag)
			return r;
	}
	return NULL;
}

static void
on_data(dt_coll *c, int peer, const dt_msg *m)
{
	const dt_msg_hdr *h = &m->hdr;
	size_t esz = dt_dtype_size((dt_dtype)h->arg2);
	p2p_unexp u = {.peer = peer, .id = h->seq};
	dt__p2p_req *r;
	p2p_unexp *q;

	/* Every field is the peer's word: check it before use. */
	if (!dt__coll_dtype_valid((int)h->arg2) || h->key > (uint64_t)INT_MAX ||
	    h->arg0 > SIZE_MAX / esz || h->payload_len != h->arg0 * esz) {
		dt__log(0,
		        "dropping a point-to-point message from rank %d: tag "
		        "%llu, dtype %u, count %llu and %llu payload bytes "
		        "do not agree",
		        peer, (unsigned long long)h->key, h->arg2,
		        (unsigned long long)h->arg0,
		        (unsigned long long)h->payload_len);
		return;
	}
	u.tag = (int)h->key;
	u.dtype = (dt_dtype)h->arg2;
	u.count = (size_t)h->arg0;
	/* dt__coll_p2p_dest refused to take the bytes (over the cap). */
	u.dropped = h->payload_len && m->payload == NULL;
	if ((r = find_recv(c, peer, u.tag)) != NULL) {
		p2p_ack a;

		deliver(c, r, &u, m->payload, &a);
		ack_queue(c, &a);
		return;
	}
	q = calloc(1, sizeof(*q));
	if (q == NULL) {
		dt__log(0, "no memory for a message of rank %d", peer);
		return;
	}
	*q = u;
	if (q->dropped ||
	    c->p2p_bytes + h->payload_len > c->cfg.unexpected_max) {
		q->dropped = 1;
	} else if (h->payload_len) {
		if ((q->data = malloc(h->payload_len)) == NULL) {
			q->dropped = 1;
		} else {
			memcpy(q->data, m->payload, h->payload_len);
			c->p2p_bytes += h->payload_len;
		}
	}
	dt__list_push_back(&c->p2p_unexp, &q->link);
}

static void
on_ack(dt_coll *c, int peer, const dt_msg *m)
{
	const dt_msg_hdr *h = &m->hdr;

	for (dt_lnode *l = dt__list_first(&c->p2p_sends); l;
	     l = dt__list_next(&c->p2p_sends, l)) {
		dt__p2p_req *r = DT_CONTAINER_OF(l, dt__p2p_req, link);
		char reason[512];

		if (r->peer != peer || r->id != h->seq)
			continue;
		if (h->arg2 == DT_OK) {
			req_done(c, r);
			return;
		}
		/* The receiver's reason, printable and bounded. */
		snprintf(reason, sizeof(reason), "%.*s",
		         (int)DT_MIN(h->meta_len, sizeof(reason) - 1),
		         m->meta ? (const char *)m->meta : "");
		for (char *p = reason; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				*p = '?';
		r->err = h->arg2 == DT_EMISMATCH || h->arg2 == DT_ENOMEM
		             ? (dt_err)h->arg2
		             : DT_EPEER;
		snprintf(r->msg, sizeof(r->msg), "%s",
		         reason[0] ? reason : "refused by the receiver");
		req_done(c, r);
		return;
	}
	/* An answer to a send that timed out: nobody waits for it. */
}

void *
dt__coll_p2p_dest(dt_coll *c, int peer, const dt_msg_hdr *h)
{
	/*
	 * The van buffers the payload before on_msg sees it, so the size a
	 * peer announces is checked here, before anything is allocated: no
	 * message over DT_COLL_UNEXPECTED_MAX, and none that would take the
	 * unreceived messages over it unless a receive is waiting for it.
	 */
	if (h->payload_len > c->cfg.unexpected_max)
		return DT_VAN_DISCARD;
	if (h->key <= (uint64_t)INT_MAX && find_recv(c, peer, (int)h->key))
		return NULL;
	if (c->p2p_bytes + h->payload_len > c->cfg.unexpected_max)
		return DT_VAN_DISCARD;
	return NULL;
}

void
dt__coll_p2p_on_msg(dt_coll *c, int peer, const dt_msg *m)
{
	if (m->hdr.cmd == DT_CMD_COLL_P2P)
		on_data(c, peer, m);
	else
		on_ack(c, peer, m);
}

static void
fail_list(dt_coll *c, dt_list *list, int peer, dt_err err, const char *why)
{
	dt_lnode *l, *next;

	for (l = dt__list_first(list); l; l = next) {
		dt__p2p_req *r = DT_CONTAINER_OF(l, dt__p2p_req, link);

		next = dt__list_next(list, l);
		if (peer < 0 || r->peer == peer)
			req_fail(c, r, err, why);
	}
}

void
dt__coll_p2p_lost(dt_coll *c, int peer, dt_err err, const char *why)
{
	fail_list(c, &c->p2p_sends, peer, err, why);
	fail_list(c, &c->p2p_recvs, peer, err, why);
}

void
dt__coll_p2p_free(dt_coll *c)
{
	dt_lnode *l;

	while ((l = dt__list_pop_front(&c->p2p_unexp)) != NULL) {
		p2p_unexp *u = DT_CONTAINER_OF(l, p2p_unexp, link);

		free(u->data);
		free(u);
	}
	while ((l = dt__list_pop_front(&c->p2p_acks)) != NULL)
		free(DT_CONTAINER_OF(l, p2p_ack, link));
	/* Pending requests belong to their handles. */
	while ((l = dt__list_pop_front(&c->p2p_sends)) != NULL)
		;
	while ((l = dt__list_pop_front(&c->p2p_recvs)) != NULL)
		;
}

/* ---- the callers ---- */

static dt_err
check(const dt_coll *c, const char *what, const void *buf, size_t count,
      dt_dtype dtype, int peer, int tag)
{
	if (c == NULL)
		return dt__fail(DT_EINVAL, "%s: no communicator", what);
	if (!dt__coll_dtype_valid(dtype))
		return dt__fail(DT_EINVAL, "%s: unknown data type %d", what,
		                (int)dtype);
	if (peer < 0 || peer >= c->size || peer == c->rank || !c->node)
		return dt__fail(DT_EINVAL,
		                "%s: rank %d is not another rank of this "
		                "communicator (rank %d of %d)",
		                what, peer, c->rank, c->size);
	if (tag < 0)
		return dt__fail(DT_EINVAL, "%s: tag %d is negative", what, tag);
	if (count && buf == NULL)
		return dt__fail(DT_EINVAL, "%s: no buffer for %zu elements",
		                what, count);
	if (count > SIZE_MAX / dt_dtype_size(dtype))
		return dt__fail(DT_EINVAL, "%s: %zu elements overflow", what,
		                count);
	return DT_OK;
}

static dt__p2p_req *
req_new(int is_send, void *buf, size_t count, dt_dtype dtype, int peer, int tag)
{
	dt__p2p_req *r = dt__calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->is_send = is_send;
	r->buf = buf;
	r->count = count;
	r->dtype = dtype;
	r->peer = peer;
	r->tag = tag;
	return r;
}

/* Queue r and send its frame; on error r is the caller's, unlinked. */
static dt_err
post_send(dt_coll *c, dt__p2p_req *r, const void *buf)
{
	dt_msg_hdr h = {.cmd = DT_CMD_COLL_P2P,
	                .key = (uint64_t)r->tag,
	                .arg0 = r->count,
	                .arg2 = (uint32_t)r->dtype};
	dt_err err;

	pthread_mutex_lock(&c->mu);
	if (c->broken) {
		err = dt__fail(c->broken, "send to rank %d (tag %d): %s",
		               r->peer, r->tag, c->broken_msg);
		pthread_mutex_unlock(&c->mu);
		return err;
	}
	r->id = ++c->p2p_next;
	h.seq = r->id;
	dt__list_push_back(&c->p2p_sends, &r->link);
	pthread_mutex_unlock(&c->mu);
	err = dt__coll_send(c, r->peer, &h, NULL, 0, buf,
	                    r->count * dt_dtype_size(r->dtype));
	if (err) {
		pthread_mutex_lock(&c->mu);
		if (dt__list_linked(&r->link))
			dt__list_remove(&r->link);
		pthread_mutex_unlock(&c->mu);
	}
	return err;
}

/* Match r against the unexpected queue, else post it (mu held). Returns 1
 * with *ack filled when the caller is to send an acknowledgement. */
static int
post_recv_locked(dt_coll *c, dt__p2p_req *r, p2p_ack *ack)
{
	for (dt_lnode *l = dt__list_first(&c->p2p_unexp); l;
	     l = dt__list_next(&c->p2p_unexp, l)) {
		p2p_unexp *u = DT_CONTAINER_OF(l, p2p_unexp, link);

		if (u->peer != r->peer || u->tag != r->tag)
			continue;
		dt__list_remove(l);
		if (u->data)
			c->p2p_bytes -= u->count * dt_dtype_size(u->dtype);
		deliver(c, r, u, u->data, ack);
		free(u->data);
		free(u);
		return 1;
	}
	if (c->broken) {
		req_fail(c, r, c->broken, c->broken_msg);
		return 0;
	}
	dt__list_push_back(&c->p2p_recvs, &r->link);
	return 0;
}

static dt_err
post_recv(dt_coll *c, dt__p2p_req *r)
{
	p2p_ack ack;
	int owe;

	pthread_mutex_lock(&c->mu);
	owe = post_recv_locked(c, r, &ack);
	pthread_mutex_unlock(&c->mu);
	if (owe)
		(void)ack_send(c, &ack);
	return DT_OK;
}

dt_err
dt__coll_p2p_wait(dt_coll *c, dt__p2p_req *r)
{
	uint64_t deadline = dt__now_ns() + dt__coll_timeout_ns(c);
	dt_err err;

	pthread_mutex_lock(&c->mu);
	while (!r->done) {
		uint64_t now = dt__now_ns();

		if (dt__coll_p2p_pending_acks(c)) {
			dt__coll_p2p_flush(c);
			continue;
		}
		if (now >= deadline) {
			req_stalled(c, r);
			break;
		}
		dt__coll_cv_wait_until(c,
		                       DT_MIN(deadline, now + 1000000000ull));
	}
	pthread_mutex_unlock(&c->mu);
	err = r->err ? dt__fail(r->err, "%s", r->msg) : DT_OK;
	free(r);
	return err;
}

int
dt__coll_p2p_done(dt_coll *c, const dt__p2p_req *r)
{
	int done;

	pthread_mutex_lock(&c->mu);
	done = r->done;
	pthread_mutex_unlock(&c->mu);
	return done;
}

static dt_err
start(dt_coll *c, dt__p2p_req *r, const void *sendbuf, dt_coll_handle **hp)
{
	dt_coll_handle *h = NULL;
	dt_err err;

	if (hp) {
		*hp = NULL;
		if ((h = dt__calloc(1, sizeof(*h))) == NULL) {
			free(r);
			return DT_ENOMEM;
		}
		h->c = c;
		h->p2p = r;
	}
	err = r->is_send ? post_send(c, r, sendbuf) : post_recv(c, r);
	if (err) {
		free(r);
		free(h);
		return err;
	}
	if (hp) {
		*hp = h;
		return DT_OK;
	}
	return dt__coll_p2p_wait(c, r);
}

static dt_err
p2p(dt_coll *c, int is_send, const void *sbuf, void *rbuf, size_t count,
    dt_dtype dtype, int peer, int tag, dt_coll_handle **h)
{
	const char *what = is_send ? "send" : "recv";
	dt__p2p_req *r;
	dt_err err;

	if (h)
		*h = NULL;
	if ((err = check(c, what, is_send ? sbuf : rbuf, count, dtype, peer,
	                 tag)))
		return err;
	if (c->in_group)
		return dt__fail(DT_ESTATE,
		                "%s: point-to-point calls do not go in a group",
		                what);
	if ((r = req_new(is_send, rbuf, count, dtype, peer, tag)) == NULL)
		return DT_ENOMEM;
	return start(c, r, sbuf, h);
}

dt_err
dt_coll_send(dt_coll *c, const void *buf, size_t count, dt_dtype dtype,
             int peer, int tag)
{
	return p2p(c, 1, buf, NULL, count, dtype, peer, tag, NULL);
}

dt_err
dt_coll_recv(dt_coll *c, void *buf, size_t count, dt_dtype dtype, int peer,
             int tag)
{
	return p2p(c, 0, NULL, buf, count, dtype, peer, tag, NULL);
}

dt_err
dt_coll_send_async(dt_coll *c, const void *buf, size_t count, dt_dtype dtype,
                   int peer, int tag, dt_coll_handle **h)
{
	if (h == NULL)
		return dt__fail(DT_EINVAL, "send_async: no handle");
	return p2p(c, 1, buf, NULL, count, dtype, peer, tag, h);
}

dt_err
dt_coll_recv_async(dt_coll *c, void *buf, size_t count, dt_dtype dtype,
                   int peer, int tag, dt_coll_handle **h)
{
	if (h == NULL)
		return dt__fail(DT_EINVAL, "recv_async: no handle");
	return p2p(c, 0, NULL, buf, count, dtype, peer, tag, h);
}

/* ---- probing and waiting for the first of several ---- */

dt_err
dt_coll_probe(dt_coll *c, int peer, int tag, int *ready)
{
	dt_err err = DT_OK;

	if (ready == NULL)
		return dt__fail(DT_EINVAL, "probe: no result pointer");
	*ready = 0;
	if ((err = check(c, "probe", NULL, 0, DT_FLOAT32, peer, tag)))
		return err;
	pthread_mutex_lock(&c->mu);
	for (dt_lnode *l = dt__list_first(&c->p2p_unexp); l;
	     l = dt__list_next(&c->p2p_unexp, l)) {
		const p2p_unexp *u = DT_CONTAINER_OF(l, p2p_unexp, link);

		if (u->peer == peer && u->tag == tag) {
			*ready = 1;
			break;
		}
	}
	/* A message that has arrived is received even from a peer lost
	 * since; otherwise the loss is the answer, so that a program
	 * polling for a message of a dead rank is told rather than left
	 * polling. */
	if (!*ready && c->broken)
		err = dt__fail(c->broken, "probe of rank %d (tag %d): %s", peer,
		               tag, c->broken_msg);
	pthread_mutex_unlock(&c->mu);
	return err;
}

/* The index of the first completed request among h[0..n) (mu held), or
 * -1 when none has completed. */
static int
first_done(dt_coll_handle *const *h, int n)
{
	for (int i = 0; i < n; i++)
		if (h[i] && h[i]->p2p->done)
			return i;
	return -1;
}

/* Every handle is a point-to-point request of one communicator, and at
 * least one is given; *c is that communicator. */
static dt_err
check_any(dt_coll_handle *const *h, int n, const int *index, dt_coll **c)
{
	*c = NULL;
	if (h == NULL || index == NULL || n < 1)
		return dt__fail(DT_EINVAL, "wait_any: no handles (n = %d)", n);
	for (int i = 0; i < n; i++) {
		if (h[i] == NULL)
			continue;
		if (h[i]->p2p == NULL)
			return dt__fail(DT_EINVAL,
			                "wait_any: handle %d is a collective, "
			                "not a send or receive",
			                i);
		if (*c && h[i]->c != *c)
			return dt__fail(
			    DT_EINVAL,
			    "wait_any: handle %d belongs to another "
			    "communicator than the handles before it",
			    i);
		*c = h[i]->c;
	}
	if (*c == NULL)
		return dt__fail(DT_EINVAL, "wait_any: all %d handles are NULL",
		                n);
	return DT_OK;
}

/*
 * The same wait as dt__coll_p2p_wait's, for the first of several
 * requests: the acknowledgements this rank owes go out while it waits
 * (its peer may be waiting for one), and at the deadline every request
 * still pending fails with DT_ETIMEDOUT, which completes them all.
 */
dt_err
dt_coll_wait_any(dt_coll_handle *const *h, int n, int *index)
{
	dt_coll *c;
	uint64_t deadline;
	dt_err err;
	int i;

	if ((err = check_any(h, n, index, &c)))
		return err;
	deadline = dt__now_ns() + dt__coll_timeout_ns(c);
	pthread_mutex_lock(&c->mu);
	while ((i = first_done(h, n)) < 0) {
		uint64_t now = dt__now_ns();

		if (dt__coll_p2p_pending_acks(c)) {
			dt__coll_p2p_flush(c);
			continue;
		}
		if (now >= deadline) {
			for (int j = 0; j < n; j++)
				if (h[j] && h[j]->p2p)
					req_stalled(c, h[j]->p2p);
			continue;
		}
		dt__coll_cv_wait_until(c,
		                       DT_MIN(deadline, now + 1000000000ull));
	}
	pthread_mutex_unlock(&c->mu);
	*index = i;
	return DT_OK;
}
