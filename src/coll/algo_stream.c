/*
 * algo_stream.c - the streams (bandwidth-optimal, above the threshold):
 * the ring allreduce is a reduce-scatter then an allgather over N blocks,
 * each cut into chunks of DT_COLL_CHUNK_BYTES. The executor sends chunk k
 * of step s+1 as soon as the I/O thread has reduced chunk k of step s,
 * which it does straight from the socket buffer into the result
 * (stream_deliver), so sending, receiving and reducing overlap. Allgather
 * chunks are received straight into the output. Large streams start with
 * a READY handshake: no data is sent to a rank before it has posted the
 * operation, so big messages are never buffered. A large broadcast is a
 * pipelined chain whose READYs run from the last rank back to the root, so
 * the root starts only once every rank has agreed on the signature.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/algo.h"

dt_err
dt__coll_ring_prepare(dt_coll *c, coll_op *op, const size_t *offs,
                      const size_t *lens, int rs, int ag, int ready)
{
	size_t ce = dt__coll_chunk_elems(c->cfg.chunk_bytes, op->esz);

	op->algo = DT__ALG_STREAM;
	op->ready_mode = ready;
	return dt__coll_ring_sched(c->rank, c->size, offs, lens, ce, rs, ag,
	                           &op->sc);
}

dt_err
dt__coll_chain_prepare(dt_coll *c, coll_op *op)
{
	size_t ce = dt__coll_chunk_elems(c->cfg.chunk_bytes, op->esz);

	op->algo = DT__ALG_STREAM;
	op->ready_mode = 1;
	op->chain = 1;
	return dt__coll_chain_sched(c->rank, c->size, op->root, op->count, ce,
	                            &op->sc);
}

static dt_err
stream_dest(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h, void **dest,
            int *reduce)
{
	*dest = NULL;
	*reduce = 0;
	const dt__coll_msg *m;

	if (peer != op->sc.from || h->key != op->rx_done ||
	    h->key >= op->sc.nrx) {
		dt__coll_op_fail(
		    op, DT_EPROTO, 1,
		    "%s #%llu: message %llu from rank %d "
		    "out of order (expected message %zu "
		    "from rank %d)",
		    dt__coll_kind_name(op->kind), (unsigned long long)op->num,
		    (unsigned long long)h->key, peer, op->rx_done, op->sc.from);
		return DT_EPROTO;
	}
	m = &op->sc.rx[h->key];
	if (h->arg0 != m->off || h->arg1 != m->n ||
	    h->payload_len != dt__coll_bytes(op, m->n) ||
	    (h->arg2 & DT__CF_CMA)) {
		dt__coll_op_fail(
		    op, DT_EPROTO, 1,
		    "%s #%llu: message %llu from rank %d "
		    "covers [%llu, +%llu), expected "
		    "[%llu, +%llu)",
		    dt__coll_kind_name(op->kind), (unsigned long long)op->num,
		    (unsigned long long)h->key, peer,
		    (unsigned long long)h->arg0, (unsigned long long)h->arg1,
		    (unsigned long long)m->off, (unsigned long long)m->n);
		return DT_EPROTO;
	}
	if (m->n == 0)
		return DT_OK;
	if (m->phase == DT__PH_RS) {
		*reduce = 1; /* from the socket buffer, in deliver */
		return DT_OK;
	}
	*dest = op->work + dt__coll_bytes(op, m->off);
	return DT_OK;
}

static dt_err
stream_deliver(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
               const void *payload)
{
	const dt__coll_msg *m = &op->sc.rx[h->key];
	uint8_t *dst = op->work + dt__coll_bytes(op, m->off);
	const uint8_t *a = op->src + dt__coll_bytes(op, m->off);

	uint64_t t0 = dt__tracing() ? dt__now_ns() : 0;

	(void)peer;
	/* Reduce-scatter: the partial sum from upstream joins our input. */
	dt__coll_reduce(op->dtype, op->redop, dst, a, payload, m->n);
	if (m->final && op->redop == DT_COLL_AVG)
		dt__coll_scale(op->dtype, dst, m->n, c->size);
	if (t0)
		dt__trace_span(DT_EV_COLL_REDUCE, DT_TID_IO, t0, 0,
		               DT_EVF_BYTES | DT_EVF_PEER,
		               dt__coll_bytes(op, m->n),
		               dt__coll_peer_id(c, peer));
	return DT_OK;
}

static void
stream_done(dt_coll *c, coll_op *op, int peer, const dt_msg_hdr *h,
            uint64_t remote)
{
	(void)c;
	(void)peer;
	(void)h;
	(void)remote;
	op->rx_done++;
}

static int
stream_needs(dt_coll *c, const coll_op *op, int peer)
{
	(void)c;
	if (peer == op->sc.from && op->rx_done < op->sc.nrx)
		return 1;
	/* The next rank may finish (and leave) before we do. */
	if (peer == op->sc.to &&
	    (op->tx_sent < op->sc.ntx || (op->ready_mode && !op->ready_to)))
		return 1;
	return 0;
}

static int
pred_rx(coll_op *op, void *arg)
{
	return op->rx_done >= (size_t)(uintptr_t)arg;
}

static int
pred_ready(coll_op *op, void *arg)
{
	(void)arg;
	return op->ready_to;
}

static dt_err
run_stream(dt_coll *c, coll_op *op)
{
	const dt__coll_sched *s = &op->sc;
	dt_err err = DT_OK;
	int tracing = dt__tracing(), step = -1;
	uint64_t t_step = 0, step_bytes = 0;

	pthread_mutex_lock(&c->mu);
	if (op->ready_mode) {
		uint64_t t0 = dt__now_ns();

		if (op->chain && s->to >= 0 &&
		    (err = dt__coll_wait(c, op, pred_ready, NULL, s->to)))
			goto out;
		if (s->from >= 0) {
			pthread_mutex_unlock(&c->mu);
			err = dt__coll_send_ready(c, op, s->from);
			pthread_mutex_lock(&c->mu);
			if (err)
				goto out;
		}
		if (!op->chain && s->to >= 0 &&
		    (err = dt__coll_wait(c, op, pred_ready, NULL, s->to)))
			goto out;
		dt__trace_span(DT_EV_COLL_NEGOTIATE, DT_TID_COLL, t0, 0, 0, 0,
		               -1);
	}
	for (size_t i = 0; i < s->ntx; i++) {
		const dt__coll_msg *m = &s->tx[i];
		const uint8_t *base = m->from_src ? op->src : op->work;

		if (tracing && m->step != step) {
			uint64_t now = dt__now_ns();

			if (step >= 0)
				dt__trace_range(DT_EV_COLL_STEP, DT_TID_COLL,
				                t_step, now, (uint64_t)step,
				                DT_EVF_KEY | DT_EVF_BYTES,
				                step_bytes, -1);
			step = m->step;
			t_step = now;
			step_bytes = 0;
		}
		step_bytes += dt__coll_bytes(op, m->n);

		if (m->dep >= 0 &&
		    (err = dt__coll_wait(c, op, pred_rx,
		                         (void *)(uintptr_t)(m->dep + 1),
		                         s->from)))
			goto out;
		/* Counted as sent before it is written: the peer may
		 * take it, finish and leave before this thread holds mu
		 * again, and its leaving must not find it still needed
		 * (needs). A failed send fails the operation anyway. */
		op->tx_sent = i + 1;
		pthread_mutex_unlock(&c->mu);
		err = dt__coll_send_data(c, op, s->to, i, m->off, m->n, 0,
		                         base + dt__coll_bytes(op, m->off),
		                         dt__coll_bytes(op, m->n));
		pthread_mutex_lock(&c->mu);
		if (err)
			goto out;
	}
	err = dt__coll_wait(c, op, pred_rx, (void *)(uintptr_t)s->nrx, s->from);
	if (step >= 0 && err == DT_OK)
		dt__trace_span(DT_EV_COLL_STEP, DT_TID_COLL, t_step,
		               (uint64_t)step, DT_EVF_KEY | DT_EVF_BYTES,
		               step_bytes, -1);
out:
	pthread_mutex_unlock(&c->mu);
	return err;
}

const dt__coll_algo dt__coll_algo_stream = {
    .name = "ring / chain",
    .run = run_stream,
    .release = dt__coll_release_sched,
    .needs = stream_needs,
    .dest = stream_dest,
    .deliver = stream_deliver,
    .done = stream_done,
};
