/*
 * algo_fbox.c - the allreduce of 2 ranks of one host through fast boxes:
 * no message, no system call while both ranks run.
 *
 * Each rank's shared area (same_host.c, net/cma.c: a sealed memory file
 * the peer maps read-only) ends with a control page and two boxes of
 * DT_COLL_CMA_FBOX_MAX bytes. For the operation of sequence number q, a
 * rank writes box q & 1: it marks the box's word busy, copies the
 * signature and its input in, and publishes the word (release); it then
 * polls the peer's word for the same box until it says q, and adds the
 * two inputs, rank 0's first as everywhere, into its output. Both ranks
 * compute every element the same way, so both get the same bits.
 *
 * Reuse: I write box q & 1 again at q + 2, after I have seen the peer's
 * box of q + 1, which it publishes only once it has finished reading mine
 * of q. Should that order ever break (an operation that failed on one
 * rank only), the reader sees it: the box's word is read again after the
 * sum, and a change fails the operation (a seqlock), so a torn input is
 * an error, never a silent wrong sum.
 *
 * Waiting: the executor polls for up to DT_SPIN_US (not at all when
 * other processes fill the processors: dt__spin_contended), giving the
 * processor away at every round when the job has more ranks here than
 * processors. Then it sleeps on a futex on the peer's publication count,
 * having said so in its own control page; a publisher that sees the flag
 * wakes it. The flag is written before the box is checked again, and the
 * count is raised before the flag is read (both sequentially
 * consistent), so one of the two sees the other: no lost wake-up. A sleep
 * lasts at most FBOX_SLICE_NS: between sleeps the executor answers stall
 * queries and point-to-point senders, sees a failure the I/O thread
 * found (a dead peer, an abort, a mismatch by message), and gives up
 * after DT_COLL_TIMEOUT without progress, as every collective wait does.
 *
 * Nothing the peer wrote is trusted for sizes: the bytes read are this
 * rank's own count, checked against the box's size when the algorithm
 * was chosen, and the peer's signature must equal this one's (else both
 * ranks fail with DT_EMISMATCH).
 */
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "coll/algo.h"
#include "coll/p2p.h"
#include "common/spin.h"

/* The control page: each word on its own cache line. */
#define FBOX_WORD(s)  ((size_t)(s)*64)       /* box s's sequence word */
#define FBOX_PUB      128                    /* publications (futex word) */
#define FBOX_SLEEP    192                    /* 1: I sleep on the peer's */
#define FBOX_SIG(s)   (256 + (size_t)(s)*64) /* box s's signature */
#define FBOX_SLICE_NS 10000000ull
#define FBOX_BUSY     1u

/* A full fence. ThreadSanitizer does not model fences (GCC refuses them
 * with -fsanitize=thread); there a sequentially consistent
 * read-modify-write of a word of our own stands in for one. */
#if defined(__SANITIZE_THREAD__)
static _Atomic unsigned fence_word;
#define FULL_FENCE() ((void)atomic_fetch_add(&fence_word, 0))
#else
#define FULL_FENCE() atomic_thread_fence(memory_order_seq_cst)
#endif

static _Atomic uint64_t *
word64(uint8_t *ctl, size_t off)
{
	return (_Atomic uint64_t *)(void *)(ctl + off);
}

static const _Atomic uint64_t *
peer64(const uint8_t *ctl, size_t off)
{
	return (const _Atomic uint64_t *)(const void *)(ctl + off);
}

static _Atomic uint32_t *
word32(uint8_t *ctl, size_t off)
{
	return (_Atomic uint32_t *)(void *)(ctl + off);
}

static const _Atomic uint32_t *
peer32(const uint8_t *ctl, size_t off)
{
	return (const _Atomic uint32_t *)(const void *)(ctl + off);
}

/* A box's word for operation seq: (seq + 1) * 2, busy + 1 while being
 * written (never 0: the word of an unused box). */
static uint64_t
box_word(uint64_t seq)
{
	return (seq + 1) << 1;
}

static void
futex_wait(const _Atomic uint32_t *addr, uint32_t seen, uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ull),
	                      (long)(ns % 1000000000ull)};

	/* (not FUTEX_PRIVATE: the word is in memory shared with the peer;
	 * EAGAIN, EINTR and ETIMEDOUT all mean: look again) */
	(void)syscall(SYS_futex, (const void *)addr, FUTEX_WAIT, seen, &ts,
	              NULL, 0);
}

static void
futex_wake(_Atomic uint32_t *addr)
{
	(void)syscall(SYS_futex, (void *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL,
	              0);
}

dt_err
dt__coll_fbox_prepare(dt_coll *c, coll_op *op)
{
	(void)c;
	op->algo = DT__ALG_FBOX;
	return DT_OK;
}

/* My input and signature (encoded) into box s, published; the peer woken
 * if it said it sleeps. */
static void
fbox_publish(dt_coll *c, coll_op *op, int s,
             const uint8_t sig[DT__COLL_SIG_LEN])
{
	uint8_t *ctl = c->fbox_mine;
	uint64_t w = box_word(op->seq);

	atomic_store_explicit(word64(ctl, FBOX_WORD(s)), w | FBOX_BUSY,
	                      memory_order_relaxed);
	FULL_FENCE();
	memcpy(ctl + FBOX_SIG(s), sig, DT__COLL_SIG_LEN);
	if (op->nelem)
		memcpy(c->fbox_mine + DT__FBOX_CTL + (size_t)s * c->fbox_max,
		       op->src, op->nelem * op->esz);
	atomic_store_explicit(word64(ctl, FBOX_WORD(s)), w,
	                      memory_order_release);
	atomic_fetch_add(word32(ctl, FBOX_PUB), 1);
	if (atomic_load(peer32(c->fbox_peer, FBOX_SLEEP)))
		futex_wake(word32(ctl, FBOX_PUB));
}

static int
peer_ready(const dt_coll *c, int s, uint64_t w)
{
	return atomic_load_explicit(peer64(c->fbox_peer, FBOX_WORD(s)),
	                            memory_order_acquire) == w;
}

/* Poll for the peer's box s of this operation within the spin budget. */
static int
fbox_spin(const dt_coll *c, int s, uint64_t w)
{
	uint64_t end;
	unsigned mask;

	/* (the peer often published first: no clock read then) */
	if (peer_ready(c, s, w))
		return 1;
	if (dt__spin_budget_ns() == 0 || dt__spin_contended(dt__now_ns()))
		return peer_ready(c, s, w);
	mask = dt__spin_yields() ? 0 : 63;
	end = dt__now_ns() + dt__spin_budget_ns();
	for (unsigned i = 1;; i++) {
		if (peer_ready(c, s, w))
			return 1;
		if ((i & 15) == 0 && dt__now_ns() >= end)
			return 0;
		if ((i & mask) == 0)
			sched_yield();
	}
}

/* Sleep until the peer's box s says w, a failure, or DT_COLL_TIMEOUT
 * without progress (mu not held). */
static dt_err
fbox_sleep(dt_coll *c, coll_op *op, int s, uint64_t w)
{
	_Atomic uint32_t *flag = word32(c->fbox_mine, FBOX_SLEEP);
	const _Atomic uint32_t *pub = peer32(c->fbox_peer, FBOX_PUB);
	dt_err err = DT_OK;

	for (;;) {
		uint32_t seen = atomic_load(pub);

		atomic_store(flag, 1);
		if (peer_ready(c, s, w))
			break;
		futex_wait(pub, seen, FBOX_SLICE_NS);
		atomic_store(flag, 0);
		if (peer_ready(c, s, w))
			break;
		pthread_mutex_lock(&c->mu);
		if (op->err) {
			err = dt__fail(op->err, "%s", op->msg);
		} else if (dt__now_ns() >=
		           op->progress_ns + dt__coll_timeout_ns(c)) {
			op->waiting_on = 1 - c->rank;
			err = DT_ETIMEDOUT;
		} else {
			if (c->nqueries)
				dt__coll_answer_queries(c);
			/* (as every collective wait: the point-to-point
			 * senders this rank owes an answer) */
			if (dt__coll_p2p_pending_acks(c))
				dt__coll_p2p_flush(c);
		}
		pthread_mutex_unlock(&c->mu);
		if (err)
			break;
	}
	atomic_store(flag, 0);
	return err;
}

static dt_err
run_fbox(dt_coll *c, coll_op *op)
{
	int s = (int)(op->seq & 1), peer = 1 - c->rank;
	uint64_t w = box_word(op->seq);
	const uint8_t *theirs =
	    c->fbox_peer + DT__FBOX_CTL + (size_t)s * c->fbox_max;
	uint8_t mine[DT__COLL_SIG_LEN];
	dt__coll_sig sig;
	dt_err err;

	dt__coll_sig_encode(&op->sig, mine);
	fbox_publish(c, op, s, mine);
	if (!fbox_spin(c, s, w) && (err = fbox_sleep(c, op, s, w)))
		return err;
	/* (the encoding is one-to-one: equal bytes, equal signatures; the
	 * peer's are decoded only to name a mismatch) */
	if (memcmp(c->fbox_peer + FBOX_SIG(s), mine, sizeof(mine)) != 0) {
		(void)dt__coll_sig_decode(c->fbox_peer + FBOX_SIG(s),
		                          DT__COLL_SIG_LEN, &sig);
		pthread_mutex_lock(&c->mu);
		dt__coll_mismatch(c, op, peer, &sig);
		err = dt__fail(op->err, "%s", op->msg);
		pthread_mutex_unlock(&c->mu);
		return err;
	}
	if (peer < c->rank)
		dt__coll_reduce(op->dtype, op->redop, op->work, theirs, op->src,
		                op->nelem);
	else
		dt__coll_reduce(op->dtype, op->redop, op->work, op->src, theirs,
		                op->nelem);
	FULL_FENCE();
	if (!peer_ready(c, s, w))
		return dt__fail(DT_EPROTO,
		                "allreduce #%llu: rank %d wrote its fast box "
		                "again while it was read",
		                (unsigned long long)op->num, peer);
	if (op->redop == DT_COLL_AVG)
		dt__coll_scale(op->dtype, op->work, op->nelem, 2);
	return DT_OK;
}

const dt__coll_algo dt__coll_algo_fbox = {
    .name = "fast boxes",
    .run = run_fbox,
};
