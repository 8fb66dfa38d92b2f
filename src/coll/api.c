/*
 * api.c - the public calls of dtrain/coll.h: creating a communicator from
 * the environment (dtrain launch, mpirun, srun, or one process), the
 * operation queue with its background thread, synchronous, asynchronous
 * and grouped calls with tensor fusion. The operations themselves run in
 * comm.c and algo.c; the distributed-optimizer helpers are dist_opt.c's.
 *
 * The background thread ("dt-coll") runs queued operations in order and
 * answers stall queries while the program is elsewhere. A synchronous call
 * made while nothing is queued runs in the calling thread, which saves two
 * thread hand-offs on the latency of small operations, on an operation
 * record the communicator keeps (run_sync: no allocation per call).
 *
 * Size: its ideas are the public calls with the operation queue they are
 * made of, and the communicator's set-up (the background thread). The
 * rendezvous under mpirun and srun is rendezvous.c's, what ranks of one
 * host set up for each other same_host.c's, point-to-point p2p.c's, the
 * distributed optimizer dist_opt.c's. The set-up stays here because it starts
 * and stops the queue's background thread (bg_main) and frees queued
 * operations, which are this file's own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "coll/algo.h"
#include "coll/comm.h"
#include "coll/exec.h"
#include "coll/p2p.h"
#include "coll/rdv.h"
#include "net/sock.h"

/* ---- operations ---- */

static void
op_free(coll_op *op)
{
	if (op == NULL)
		return;
	free(op->counts);
	free(op->tensors);
	free(op->handles);
	free(op);
}

/* A zeroed op made an operation of this kind on these buffers. */
static coll_op *
op_fill(coll_op *op, int kind, dt_dtype dtype, dt_coll_op redop, int root,
        const void *send, void *recv, size_t count)
{
	op->kind = kind;
	op->dtype = dtype;
	op->redop = redop;
	op->root = root;
	op->esz = dt_dtype_size(dtype);
	op->send = send == recv ? NULL : send;
	op->recv = recv;
	op->count = count;
	op->sig.kind = (uint8_t)kind;
	op->sig.dtype = (uint8_t)dtype;
	op->sig.op = (uint8_t)redop;
	op->sig.root = (uint32_t)root;
	op->sig.count = count;
	op->waiting_on = -1;
	op->sc.to = op->sc.from = -1;
	return op;
}

static coll_op *
op_new(int kind, dt_dtype dtype, dt_coll_op redop, int root, const void *send,
       void *recv, size_t count)
{
	coll_op *op = dt__calloc(1, sizeof(*op));

	if (op == NULL)
		return NULL;
	return op_fill(op, kind, dtype, redop, root, send, recv, count);
}

static dt_err
op_add_handle(coll_op *op, dt_coll_handle *h)
{
	dt_coll_handle **a =
	    realloc(op->handles, sizeof(*a) * (size_t)(op->nhandles + 1));

	if (a == NULL)
		return dt__fail(DT_ENOMEM, "handle list");
	a[op->nhandles++] = h;
	op->handles = a;
	return DT_OK;
}

/* Give op its sequence number and run or queue it (takes op). */
static void
submit(dt_coll *c, coll_op *op, int sync)
{
	pthread_mutex_lock(&c->mu);
	op->seq = ++c->next_seq;
	op->num = op->seq - c->seq_base;
	if (sync && !c->exec_busy && dt__list_empty(&c->queue)) {
		c->exec_busy = 1;
		pthread_mutex_unlock(&c->mu);
		dt__coll_execute(c, op, 0);
		op_free(op);
		pthread_mutex_lock(&c->mu);
		c->exec_busy = 0;
		/* Queued behind us meanwhile (from another thread): the
		 * background thread takes over. */
		if (!dt__list_empty(&c->queue))
			pthread_cond_signal(&c->bg_cv);
		pthread_mutex_unlock(&c->mu);
		return;
	}
	dt__list_push_back(&c->queue, &op->qlink);
	pthread_cond_signal(&c->bg_cv);
	pthread_mutex_unlock(&c->mu);
}

static dt_err
handle_result(dt_coll_handle *h)
{
	if (h->err)
		return dt__fail(h->err, "%s", h->msg);
	return DT_OK;
}

static dt_err
wait_handle(dt_coll *c, dt_coll_handle *h)
{
	pthread_mutex_lock(&c->mu);
	while (!h->done)
		pthread_cond_wait(&c->done_cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	return handle_result(h);
}

/* Run op and wait (sync) or hand back a handle (h != NULL). */
static dt_err
start(dt_coll *c, coll_op *op, dt_coll_handle **hp)
{
	dt_coll_handle local = {.c = c};
	dt_coll_handle *h = &local;
	dt_err err;

	if (op == NULL)
		return DT_ENOMEM;
	if (hp) {
		*hp = NULL;
		if ((h = dt__calloc(1, sizeof(*h))) == NULL) {
			op_free(op);
			return DT_ENOMEM;
		}
		h->c = c;
	}
	if ((err = op_add_handle(op, h))) {
		op_free(op);
		if (hp)
			free(h);
		return err;
	}
	if (hp) {
		*hp = h;
		submit(c, op, 0);
		return DT_OK;
	}
	submit(c, op, 1);
	return wait_handle(c, h);
}

/*
 * A synchronous call: run in the calling thread when no other operation
 * runs or waits, on the communicator's own op (no allocation, no second
 * look at the handle under the lock: this thread completed it); queued
 * for the background thread otherwise, as start() does.
 */
static dt_err
run_sync(dt_coll *c, int kind, dt_dtype dtype, dt_coll_op redop, int root,
         const void *send, void *recv, size_t count)
{
	dt_coll_handle h; /* (its text is written on failure only) */
	dt_coll_handle *hp = &h;
	coll_op *op = c->inline_op;

	pthread_mutex_lock(&c->mu);
	if (op == NULL || c->exec_busy || !dt__list_empty(&c->queue)) {
		pthread_mutex_unlock(&c->mu);
		return start(
		    c, op_new(kind, dtype, redop, root, send, recv, count),
		    NULL);
	}
	c->exec_busy = 1;
	memset(op, 0, offsetof(coll_op, msg));
	op->msg[0] = '\0';
	op->seq = ++c->next_seq;
	op->num = op->seq - c->seq_base;
	pthread_mutex_unlock(&c->mu);
	op_fill(op, kind, dtype, redop, root, send, recv, count);
	h.c = c;
	h.p2p = NULL;
	h.done = 0;
	h.err = DT_OK;
	op->handles = &hp;
	op->nhandles = 1;
	/* (exec_busy cleared with the op's end, what was queued behind it
	 * meanwhile handed to the background thread) */
	dt__coll_execute(c, op, 1);
	return handle_result(&h);
}

static void *
bg_main(void *arg)
{
	dt_coll *c = arg;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		if (c->nqueries && c->node) {
			dt__coll_answer_queries(c);
			continue;
		}
		if (dt__coll_p2p_pending_acks(c)) {
			dt__coll_p2p_flush(c);
			continue;
		}
		if (!dt__list_empty(&c->queue) && !c->exec_busy) {
			coll_op *op = DT_CONTAINER_OF(
			    dt__list_pop_front(&c->queue), coll_op, qlink);

			c->exec_busy = 1;
			pthread_mutex_unlock(&c->mu);
			dt__coll_execute(c, op, 0);
			op_free(op);
			pthread_mutex_lock(&c->mu);
			c->exec_busy = 0;
			pthread_cond_broadcast(&c->done_cv);
			continue;
		}
		if (c->stop)
			break;
		pthread_cond_wait(&c->bg_cv, &c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* ---- argument checks (local errors, no operation number used) ---- */

static dt_err
check_common(const dt_coll *c, const char *what, dt_dtype dtype)
{
	if (c == NULL)
		return dt__fail(DT_EINVAL, "%s: no communicator", what);
	if (!dt__coll_dtype_valid(dtype))
		return dt__fail(DT_EINVAL, "%s: unknown data type %d", what,
		                (int)dtype);
	return DT_OK;
}

static dt_err
check_op(const char *what, dt_coll_op op)
{
	if (!dt__coll_op_valid(op))
		return dt__fail(DT_EINVAL, "%s: unknown reduction %d", what,
		                (int)op);
	return DT_OK;
}

static dt_err
check_buf(const char *what, const char *name, const void *p, size_t count)
{
	if (p == NULL && count > 0)
		return dt__fail(DT_EINVAL, "%s: %s is NULL for %zu elements",
		                what, name, count);
	return DT_OK;
}

/* ---- the public calls ---- */

static dt_err
allreduce(dt_coll *c, const void *send, void *recv, size_t count,
          dt_dtype dtype, dt_coll_op op, dt_coll_handle **h)
{
	dt_err err;

	if ((err = check_common(c, "allreduce", dtype)) ||
	    (err = check_op("allreduce", op)) ||
	    (err = check_buf("allreduce", "recv", recv, count)))
		return err;
	if (c->in_group && h) {
		/* Recorded; queued (and fused) by dt_coll_group_end. */
		coll_pending *p;
		if (c->npend == c->pend_cap) {
			size_t cap = c->pend_cap ? c->pend_cap * 2 : 16;
			p = realloc(c->pend, cap * sizeof(*p));
			if (p == NULL)
				return dt__fail(DT_ENOMEM, "group list");
			c->pend = p;
			c->pend_cap = cap;
		}
		*h = dt__calloc(1, sizeof(**h));
		if (*h == NULL)
			return DT_ENOMEM;
		(*h)->c = c;
		c->pend[c->npend++] = (coll_pending){.kind = DT__COLL_ALLREDUCE,
		                                     .send = send,
		                                     .recv = recv,
		                                     .count = count,
		                                     .dtype = dtype,
		                                     .op = op,
		                                     .h = *h};
		return DT_OK;
	}
	if (h == NULL)
		return run_sync(c, DT__COLL_ALLREDUCE, dtype, op, 0, send, recv,
		                count);
	return start(
	    c, op_new(DT__COLL_ALLREDUCE, dtype, op, 0, send, recv, count), h);
}

dt_err
dt_coll_allreduce(dt_coll *c, const void *send, void *recv, size_t count,
                  dt_dtype dtype, dt_coll_op op)
{
	return allreduce(c, send, recv, count, dtype, op, NULL);
}

dt_err
dt_coll_allreduce_async(dt_coll *c, const void *send, void *recv, size_t count,
                        dt_dtype dtype, dt_coll_op op, dt_coll_handle **h)
{
	if (h == NULL)
		return dt__fail(DT_EINVAL, "allreduce_async: no handle");
	return allreduce(c, send, recv, count, dtype, op, h);
}

/* Queue an operation now, or record it in the open group. */
static dt_err
start_or_record(dt_coll *c, coll_op *op, dt_coll_handle **h)
{
	if (op == NULL)
		return DT_ENOMEM;
	if (c->in_group && h) {
		coll_pending *p;
		if (c->npend == c->pend_cap) {
			size_t cap = c->pend_cap ? c->pend_cap * 2 : 16;
			p = realloc(c->pend, cap * sizeof(*p));
			if (p == NULL) {
				op_free(op);
				return dt__fail(DT_ENOMEM, "group list");
			}
			c->pend = p;
			c->pend_cap = cap;
		}
		*h = dt__calloc(1, sizeof(**h));
		if (*h == NULL) {
			op_free(op);
			return DT_ENOMEM;
		}
		(*h)->c = c;
		/* Keep the prepared op; group_end queues it in order. */
		c->pend[c->npend++] =
		    (coll_pending){.kind = 0, .prepared = op, .h = *h};
		return DT_OK;
	}
	return start(c, op, h);
}

static dt_err
broadcast(dt_coll *c, void *buf, size_t count, dt_dtype dtype, int root,
          dt_coll_handle **h)
{
	dt_err err;

	if ((err = check_common(c, "broadcast", dtype)) ||
	    (err = check_buf("broadcast", "buf", buf, count)))
		return err;
	if (root < 0 || root >= c->size)
		return dt__fail(DT_EINVAL,
		                "broadcast: root %d is not a rank "
		                "of %d",
		                root, c->size);
	if (h == NULL)
		return run_sync(c, DT__COLL_BROADCAST, dtype, DT_COLL_SUM, root,
		                buf, buf, count);
	return start_or_record(c,
	                       op_new(DT__COLL_BROADCAST, dtype, DT_COLL_SUM,
	                              root, buf, buf, count),
	                       h);
}

dt_err
dt_coll_broadcast(dt_coll *c, void *buf, size_t count, dt_dtype dtype, int root)
{
	return broadcast(c, buf, count, dtype, root, NULL);
}

dt_err
dt_coll_broadcast_async(dt_coll *c, void *buf, size_t count, dt_dtype dtype,
                        int root, dt_coll_handle **h)
{
	if (h == NULL)
		return dt__fail(DT_EINVAL, "broadcast_async: no handle");
	return broadcast(c, buf, count, dtype, root, h);
}

static dt_err
allgatherv(dt_coll *c, const void *send, void *recv, const size_t *counts,
           dt_dtype dtype, dt_coll_handle **h)
{
	size_t total = 0;
	coll_op *op;
	dt_err err;

	if ((err = check_common(c, "allgatherv", dtype)))
		return err;
	if (counts == NULL)
		return dt__fail(DT_EINVAL, "allgatherv: counts is NULL");
	for (int r = 0; r < c->size; r++)
		total += counts[r];
	if ((err = check_buf("allgatherv", "recv", recv, total)))
		return err;
	op = op_new(DT__COLL_ALLGATHERV, dtype, DT_COLL_SUM, 0, send, recv,
	            total);
	if (op == NULL)
		return DT_ENOMEM;
	op->counts = malloc(sizeof(size_t) * (size_t)c->size);
	if (op->counts == NULL) {
		op_free(op);
		return dt__fail(DT_ENOMEM, "allgatherv counts");
	}
	memcpy(op->counts, counts, sizeof(size_t) * (size_t)c->size);
	op->sig.hash = dt__coll_hash_counts(counts, (size_t)c->size);
	return start_or_record(c, op, h);
}

dt_err
dt_coll_allgatherv(dt_coll *c, const void *send, void *recv,
                   const size_t *counts, dt_dtype dtype)
{
	return allgatherv(c, send, recv, counts, dtype, NULL);
}

dt_err
dt_coll_allgatherv_async(dt_coll *c, const void *send, void *recv,
                         const size_t *counts, dt_dtype dtype,
                         dt_coll_handle **h)
{
	if (h == NULL)
		return dt__fail(DT_EINVAL, "allgatherv_async: no handle");
	return allgatherv(c, send, recv, counts, dtype, h);
}

dt_err
dt_coll_allgather(dt_coll *c, const void *send, void *recv, size_t count,
                  dt_dtype dtype)
{
	size_t *counts;
	dt_err err;

	if (c == NULL)
		return dt__fail(DT_EINVAL, "allgather: no communicator");
	counts = malloc(sizeof(size_t) * (size_t)c->size);
	if (counts == NULL)
		return dt__fail(DT_ENOMEM, "allgather counts");
	for (int r = 0; r < c->size; r++)
		counts[r] = count;
	err = allgatherv(c, send, recv, counts, dtype, NULL);
	free(counts);
	return err;
}

static dt_err
reduce_scatter(dt_coll *c, const void *send, void *recv, size_t count,
               dt_dtype dtype, dt_coll_op op, dt_coll_handle **h)
{
	dt_err err;

	if ((err = check_common(c, "reduce_scatter", dtype)) ||
	    (err = check_op("reduce_scatter", op)) ||
	    (err = check_buf("reduce_scatter", "recv", recv, count)))
		return err;
	if (send == recv && count > 0)
		return dt__fail(DT_EINVAL,
		                "reduce_scatter: send == recv; pass "
		                "DT_COLL_IN_PLACE as send for in place");
	if (h == NULL)
		return run_sync(c, DT__COLL_REDUCE_SCATTER, dtype, op, 0, send,
		                recv, count);
	return start_or_record(
	    c, op_new(DT__COLL_REDUCE_SCATTER, dtype, op, 0, send, recv, count),
	    h);
}

dt_err
dt_coll_reduce_scatter(dt_coll *c, const void *send, void *recv, size_t count,
                       dt_dtype dtype, dt_coll_op op)
{
	return reduce_scatter(c, send, recv, count, dtype, op, NULL);
}

dt_err
dt_coll_reduce_scatter_async(dt_coll *c, const void *send, void *recv,
                             size_t count, dt_dtype dtype, dt_coll_op op,
                             dt_coll_handle **h)
{
	if (h == NULL)
		return dt__fail(DT_EINVAL, "reduce_scatter_async: no handle");
	return reduce_scatter(c, send, recv, count, dtype, op, h);
}

dt_err
dt_coll_barrier(dt_coll *c)
{
	if (c == NULL)
		return dt__fail(DT_EINVAL, "barrier: no communicator");
	return run_sync(c, DT__COLL_BARRIER, DT_FLOAT32, DT_COLL_SUM, 0, NULL,
	                NULL, 0);
}

dt_err
dt_coll_wait(dt_coll_handle *h)
{
	dt_err err;

	if (h == NULL)
		return dt__fail(DT_EINVAL, "wait: no handle");
	if (h->p2p) {
		err = dt__coll_p2p_wait(h->c, h->p2p);
		free(h);
		return err;
	}
	if (h->c->in_group) {
		/* Waiting inside a group would wait forever: close it. */
		if ((err = dt_coll_group_end(h->c)))
			return err;
	}
	err = wait_handle(h->c, h);
	free(h);
	return err;
}

dt_err
dt_coll_test(dt_coll_handle *h, int *done)
{
	if (h == NULL || done == NULL)
		return dt__fail(DT_EINVAL, "test: no handle");
	if (h->p2p) {
		*done = dt__coll_p2p_done(h->c, h->p2p);
		return DT_OK;
	}
	pthread_mutex_lock(&h->c->mu);
	*done = h->done;
	pthread_mutex_unlock(&h->c->mu);
	return DT_OK;
}

/* ---- groups and fusion ---- */

dt_err
dt_coll_group_start(dt_coll *c)
{
	if (c == NULL)
		return dt__fail(DT_EINVAL, "group_start: no communicator");
	if (c->in_group)
		return dt__fail(DT_ESTATE, "group_start: a group is already "
		                           "open (groups do not nest)");
	c->in_group = 1;
	c->npend = 0;
	return DT_OK;
}

/* Queue one fused batch of pending allreduces [i, j). */
static dt_err
queue_batch(dt_coll *c, const coll_pending *p, size_t n)
{
	size_t total = 0;
	coll_op *op;
	size_t *counts;

	if (n == 1) {
		op = op_new(DT__COLL_ALLREDUCE, p[0].dtype, p[0].op, 0,
		            p[0].send, p[0].recv, p[0].count);
		if (op == NULL)
			return DT_ENOMEM;
		if (op_add_handle(op, p[0].h)) {
			op_free(op);
			return DT_ENOMEM;
		}
		submit(c, op, 0);
		return DT_OK;
	}
	counts = malloc(n * sizeof(size_t));
	op = op_new(DT__COLL_ALLREDUCE, p[0].dtype, p[0].op, 0, NULL, NULL, 0);
	if (counts == NULL || op == NULL ||
	    (op->tensors = calloc(n, sizeof(dt_coll_tensor))) == NULL) {
		free(counts);
		op_free(op);
		return dt__fail(DT_ENOMEM, "fused group of %zu tensors", n);
	}
	for (size_t i = 0; i < n; i++) {
		op->tensors[i] = (dt_coll_tensor){
		    .send = p[i].send == p[i].recv ? NULL : p[i].send,
		    .recv = p[i].recv,
		    .count = p[i].count};
		counts[i] = p[i].count;
		total += p[i].count;
		if (op_add_handle(op, p[i].h)) {
			free(counts);
			op_free(op);
			return DT_ENOMEM;
		}
	}
	op->ntensors = (int)n;
	op->count = total;
	op->sig.count = total;
	op->sig.ntensors = (uint8_t)(n > 255 ? 255 : n);
	op->sig.hash = dt__coll_hash_counts(counts, n);
	free(counts);
	submit(c, op, 0);
	return DT_OK;
}

/* Fail a recorded call that could not be queued. */
static void
fail_pending(dt_coll *c, coll_pending *p, dt_err err)
{
	pthread_mutex_lock(&c->mu);
	p->h->err = err;
	snprintf(p->h->msg, sizeof(p->h->msg), "%s", dt_errmsg());
	p->h->done = 1;
	pthread_mutex_unlock(&c->mu);
	if (p->prepared)
		op_free(p->prepared);
}

dt_err
dt_coll_group_end(dt_coll *c)
{
	size_t i = 0, *first = NULL, *counts = NULL;
	dt_err first_err = DT_OK;

	if (c == NULL)
		return dt__fail(DT_EINVAL, "group_end: no communicator");
	if (!c->in_group)
		return dt__fail(DT_ESTATE, "group_end without group_start");
	c->in_group = 0;
	first = malloc((c->npend + 1) * sizeof(size_t));
	counts = malloc((c->npend + 1) * sizeof(size_t));
	while (i < c->npend) {
		coll_pending *p = &c->pend[i];
		size_t j = i + 1;
		dt_err err = DT_OK;

		if (p->prepared) {
			coll_op *op = p->prepared;
			if ((err = op_add_handle(op, p->h)))
				fail_pending(c, p, err);
			else
				submit(c, op, 0);
			i++;
			if (err && !first_err)
				first_err = err;
			continue;
		}
		/* A run of allreduces of the same type and reduction. */
		while (j < c->npend && c->pend[j].kind == DT__COLL_ALLREDUCE &&
		       c->pend[j].dtype == p->dtype && c->pend[j].op == p->op)
			j++;
		if (first == NULL || counts == NULL) {
			for (size_t k = i; k < j; k++)
				if ((err = queue_batch(c, &c->pend[k], 1)))
					fail_pending(c, &c->pend[k], err);
		} else {
			size_t nb, run = j - i;
			for (size_t k = 0; k < run; k++)
				counts[k] = c->pend[i + k].count;
			nb = dt__coll_fusion_plan(counts, run,
			                          dt_dtype_size(p->dtype),
			                          c->cfg.fusion_bytes, first);
			for (size_t b = 0; b < nb; b++) {
				size_t lo = first[b];
				size_t hi = b + 1 < nb ? first[b + 1] : run;
				err = queue_batch(c, &c->pend[i + lo], hi - lo);
				if (err)
					for (size_t k = lo; k < hi; k++)
						fail_pending(c, &c->pend[i + k],
						             err);
				if (err && !first_err)
					first_err = err;
			}
		}
		i = j;
	}
	free(first);
	free(counts);
	c->npend = 0;
	return first_err;
}

dt_err
dt_coll_allreduce_group(dt_coll *c, const dt_coll_tensor *t, int n,
                        dt_dtype dtype, dt_coll_op op)
{
	dt_coll_handle **hs;
	dt_err err, first = DT_OK;
	int started = 0;

	if (c == NULL || n < 0 || (n > 0 && t == NULL))
		return dt__fail(DT_EINVAL, "allreduce_group: bad arguments");
	if (c->in_group)
		return dt__fail(DT_ESTATE, "allreduce_group inside an open "
		                           "group");
	if (n == 0)
		return DT_OK;
	hs = calloc((size_t)n, sizeof(*hs));
	if (hs == NULL)
		return dt__fail(DT_ENOMEM, "group of %d tensors", n);
	if ((err = dt_coll_group_start(c))) {
		free(hs);
		return err;
	}
	for (int i = 0; i < n; i++) {
		err = dt_coll_allreduce_async(c, t[i].send, t[i].recv,
		                              t[i].count, dtype, op, &hs[i]);
		if (err) {
			first = err;
			break;
		}
		started++;
	}
	err = dt_coll_group_end(c);
	if (err && !first)
		first = err;
	for (int i = 0; i < started; i++) {
		err = dt_coll_wait(hs[i]);
		if (err && !first)
			first = err;
	}
	free(hs);
	return first;
}

/* ---- creation ---- */

int
dt_coll_rank(const dt_coll *c)
{
	return c ? c->rank : -1;
}

dt_err
dt_coll_stats(dt_coll *c, dt_stats *out)
{
	if (c == NULL || out == NULL)
		return dt__fail(DT_EINVAL, "dt_coll_stats: %s is NULL",
		                c ? "out" : "communicator");
	if (c->node)
		return dt_node_stats(c->node, out);
	dt__obs_stats_local(out);
	return DT_OK;
}

int
dt_coll_size(const dt_coll *c)
{
	return c ? c->size : 0;
}

int
dt_coll_local_rank(const dt_coll *c)
{
	return c ? c->local_rank : -1;
}

int
dt_coll_local_size(const dt_coll *c)
{
	return c ? c->local_size : 0;
}

static void
comm_free(dt_coll *c)
{
	for (dt_lnode *l; (l = dt__list_pop_front(&c->early));) {
		coll_early *e = DT_CONTAINER_OF(l, coll_early, link);

		free(e->text);
		free(e->payload);
		free(e);
	}
	free(c->dead);
	free(c->ext);
	free(c->ids);
	free(c->hier_map);
	free(c->rank_of);
	dt__coll_same_host_free(c);
	free(c->stall_reply);
	free(c->pend);
	free(c->fusion);
	free(c->scratch);
	free(c->slotbuf);
	free(c->dopt_res);
	free(c->dopt_buf);
	free(c->dopt_layout);
	free(c->inline_op);
	dt__coll_p2p_free(c);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	pthread_cond_destroy(&c->bg_cv);
	pthread_cond_destroy(&c->done_cv);
	free(c);
}

static dt_err
comm_new(dt_coll **out)
{
	dt_coll *c;
	dt_err err;

	*out = NULL;
	if ((c = dt__calloc(1, sizeof(*c))) == NULL)
		return DT_ENOMEM;
	if ((c->inline_op = dt__calloc(1, sizeof(*c->inline_op))) == NULL) {
		free(c);
		return DT_ENOMEM;
	}
	if ((err = dt__coll_cfg_from_env(&c->cfg))) {
		free(c->inline_op);
		free(c);
		return err;
	}
	pthread_mutex_init(&c->mu, NULL);
	dt__cond_init_monotonic(&c->cv);
	pthread_cond_init(&c->bg_cv, NULL);
	pthread_cond_init(&c->done_cv, NULL);
	dt__list_init(&c->queue);
	dt__list_init(&c->early);
	dt__list_init(&c->p2p_sends);
	dt__list_init(&c->p2p_recvs);
	dt__list_init(&c->p2p_unexp);
	dt__list_init(&c->p2p_acks);
	c->rank = 0;
	c->size = 1;
	c->local_rank = 0;
	c->local_size = 1;
	*out = c;
	return DT_OK;
}

static dt_err
start_bg(dt_coll *c)
{
	if (pthread_create(&c->bg, NULL, bg_main, c) != 0)
		return dt__fail(DT_ESYS, "cannot start the collectives thread");
	pthread_setname_np(c->bg, "dt-coll");
	c->bg_started = 1;
	return DT_OK;
}

static void
stop_bg(dt_coll *c)
{
	if (!c->bg_started)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_cond_broadcast(&c->bg_cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->bg, NULL);
	c->bg_started = 0;
}

/* Attach c to its node, start the thread, and meet every other rank. */
static dt_err
comm_start(dt_coll *c)
{
	dt_err err;

	if (c->node && (err = dt__coll_attach(c)))
		return err;
	if ((err = start_bg(c)))
		return err;
	/* Nobody sends a collective message before everyone listens. (A
	 * worker joining a running elastic job listens now, and says it is
	 * ready later, from its first dt_elastic_restore: coll/elastic.c.) */
	if (c->node && !(c->elastic && dt__node_elastic_joiner(c->node)) &&
	    (err = dt_node_barrier(c->node, DT_GROUP_WORKERS)))
		return err;
	/* An elastic communicator's ranks change; the same-host reads'
	 * slots and pids by rank are not re-made: its data goes over the
	 * node's links (same-host shared memory included). */
	if (c->node && c->size > 1 && c->local_size == c->size && !c->elastic) {
		if ((err = dt__coll_same_host_start(c)))
			return err;
		pthread_mutex_lock(&c->mu);
		c->seq_base = c->next_seq;
		pthread_mutex_unlock(&c->mu);
	}
	DT_LOG(1, "collectives: rank %d of %d (local %d of %d)%s%s%s", c->rank,
	       c->size, c->local_rank, c->local_size,
	       c->cma ? ", same-host reads (CMA)" : "",
	       c->share_max ? ", shared areas" : "",
	       c->fbox_max ? ", fast boxes" : "");
	return DT_OK;
}

dt_err
dt_coll_init_node(dt_node *node, dt_coll **out)
{
	dt_coll *c;
	dt_err err;

	if (out == NULL || node == NULL)
		return dt__fail(DT_EINVAL, "coll_init_node: no node");
	*out = NULL;
	if ((err = comm_new(&c)))
		return err;
	c->node = node;
	if ((err = comm_start(c))) {
		dt__err_kept k;

		dt__err_keep(&k, err);
		stop_bg(c);
		if (dt__node_app_arg(node, &dt__coll_app) == c)
			dt__node_detach(node, &dt__coll_app);
		comm_free(c);
		return dt__err_restore(&k);
	}
	*out = c;
	return DT_OK;
}

dt_err
dt_coll_init(dt_coll **out)
{
	dt_coll *c;
	dt_err err;

	if (out == NULL)
		return dt__fail(DT_EINVAL, "coll_init: no output");
	*out = NULL;
	if ((err = comm_new(&c)))
		return err;
	if (dt__env_str("DMLC_PS_ROOT_URI") || dt__env_str("DMLC_ROLE")) {
		int served;

		err = dt__node_join_env(&c->node, &served);
		/* dtrain launch: a scheduler or server serves here, then ends
		 * (MXNet). */
		if (served)
			dt__exit_served(err);
		if (err)
			goto fail;
		c->own_node = c->node != NULL;
	} else if ((err = dt__coll_rdv_join(c))) {
		goto fail;
	}
	if ((err = comm_start(c)))
		goto fail;
	*out = c;
	return DT_OK;
fail : {
	dt__err_kept k;

	dt__err_keep(&k, err);
	stop_bg(c);
	if (c->node)
		dt_node_stop(c->node);
	dt__coll_rdv_end(c);
	comm_free(c);
	return dt__err_restore(&k);
}
}

dt_err
dt_coll_finalize(dt_coll *c)
{
	dt_err err = DT_OK, e;
	int broken;

	if (c == NULL)
		return DT_OK;
	if (c->in_group)
		err = dt_coll_group_end(c);
	/* Let queued operations finish (their handles stay valid). */
	pthread_mutex_lock(&c->mu);
	while (!dt__list_empty(&c->queue) || c->exec_busy)
		pthread_cond_wait(&c->done_cv, &c->mu);
	/* (a rank that left an elastic job, or one whose membership
	 * changed untaken, meets nobody either) */
	broken = c->broken != DT_OK || c->left || c->changing;
	pthread_mutex_unlock(&c->mu);
	/* Leave together: nobody closes its connections while a peer still
	 * finishes an operation with it. */
	if (!broken && c->size > 1 && (e = dt_coll_barrier(c)) && !err)
		err = e;
	stop_bg(c);
	if (c->node) {
		if (c->own_node) {
			dt__err_kept k;

			dt__err_keep(&k, err);
			e = dt_node_stop(c->node);
			if (e && !err)
				err = e;
			else if (err)
				dt__err_restore(&k);
		} else {
			dt__node_detach(c->node, &dt__coll_app);
			/*
			 * The node's I/O thread may still be inside one of our
			 * hooks. It handles messages one at a time, so once it
			 * has handled this barrier's BARRIER_DONE it has left
			 * them for good. (A broken communicator skips this: a
			 * lost peer would never arrive.)
			 */
			if (!broken && c->size > 1 &&
			    (e = dt_node_barrier(c->node, DT_GROUP_WORKERS)) &&
			    !err)
				err = e;
		}
	}
	if ((e = dt__coll_rdv_end(c)) && !err)
		err = e;
	comm_free(c);
	return err;
}
