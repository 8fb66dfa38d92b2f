/*
 * coll_test.c - the pure parts of the collectives (src/coll/reduce.c and
 * plan.c) and the one-process communicator (api.c with no peers):
 *   - every reduction kernel for every type, with dst aliasing an input,
 *     and the division of an average;
 *   - blocks, chunks, and the ring and chain schedules, checked by
 *     running them: a simulated ring of n in-memory ranks exchanges the
 *     scheduled messages in dependency order and must end with the
 *     allreduce / reduce-scatter / allgather / broadcast result; every
 *     message must match what its receiver expects;
 *   - recursive-doubling partners, tensor-fusion batches, signatures;
 *   - the environment settings and the one-rank API, argument errors
 *     included;
 *   - the checks on a peer's shared area (a sealed memory file of the
 *     announced size, mapped read-only).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "coll/algo.h"
#include "coll/coll_impl.h"
#include "common/quant.h"
#include "net/cma.h"

/* ---- kernels ---- */

static double
get(dt_dtype t, const void *p, size_t i)
{
	switch (t) {
	case DT_FLOAT32:
		return ((const float *)p)[i];
	case DT_FLOAT64:
		return ((const double *)p)[i];
	case DT_INT32:
		return ((const int32_t *)p)[i];
	case DT_FLOAT16: {
		float f;

		dt__dequant_fp16((const uint8_t *)p + 2 * i, &f, 1);
		return f;
	}
	}
	return 0;
}

static void
set(dt_dtype t, void *p, size_t i, double v)
{
	switch (t) {
	case DT_FLOAT32:
		((float *)p)[i] = (float)v;
		break;
	case DT_FLOAT64:
		((double *)p)[i] = v;
		break;
	case DT_INT32:
		((int32_t *)p)[i] = (int32_t)v;
		break;
	case DT_FLOAT16: {
		float f = (float)v;

		dt__quant_fp16(&f, (uint8_t *)p + 2 * i, 1);
		break;
	}
	}
}

static void
test_reduce_kernels(void **state)
{
	const dt_dtype types[] = {DT_FLOAT32, DT_FLOAT64, DT_INT32, DT_FLOAT16};
	const dt_coll_op ops[] = {DT_COLL_SUM, DT_COLL_AVG, DT_COLL_MIN,
	                          DT_COLL_MAX};
	enum { N = 37 }; /* odd: no vector width divides it */
	(void)state;

	for (int ti = 0; ti < 4; ti++) {
		for (int oi = 0; oi < 4; oi++) {
			dt_dtype t = types[ti];
			dt_coll_op op = ops[oi];
			double a[N], b[N];
			char pa[N * 8], pb[N * 8], pd[N * 8];

			for (int i = 0; i < N; i++) {
				a[i] = (i * 7 % 13) - 6;
				b[i] = (i * 5 % 11) - 5;
				set(t, pa, (size_t)i, a[i]);
				set(t, pb, (size_t)i, b[i]);
			}
			/* Separate output, then dst == a, then dst == b. */
			for (int alias = 0; alias < 3; alias++) {
				char ca[N * 8], cb[N * 8], *dst;
				memcpy(ca, pa, sizeof(ca));
				memcpy(cb, pb, sizeof(cb));
				dst = alias == 0 ? pd : alias == 1 ? ca : cb;
				dt__coll_reduce(t, op, dst, ca, cb, N);
				for (int i = 0; i < N; i++) {
					double want =
					    op == DT_COLL_MIN
					        ? (a[i] < b[i] ? a[i] : b[i])
					    : op == DT_COLL_MAX
					        ? (a[i] > b[i] ? a[i] : b[i])
					        : a[i] + b[i];
					assert_true(get(t, dst, (size_t)i) ==
					            want);
				}
			}
		}
	}
}

/*
 * The float kernels give the bits of one scalar x op y per element at
 * every length and alignment, whichever width the processor runs them at
 * (reduce.c builds them for AVX2 and the baseline): values that round,
 * signed zeros, infinities and NaNs, separate output and in place.
 */
static float
bits_val(uint32_t *r)
{
	static const float odd[] = {0.0f, -0.0f, 1.0f / 0.0f, -1.0f / 0.0f};
	uint32_t u;
	float f;

	*r = *r * 1664525u + 1013904223u;
	if ((*r >> 28) == 0)
		return odd[(*r >> 8) & 3];
	/* (finite, any exponent from 2^-30 to 2^33, either sign) */
	u = (*r & 0x807fffffu) | ((97u + ((*r >> 23) & 63u)) << 23);
	memcpy(&f, &u, sizeof(f));
	return f;
}

static void
test_reduce_bits(void **state)
{
	static const size_t lens[] = {1,  3,  7,  8,  9,   15,
	                              16, 17, 31, 64, 257, 1027};
	static const dt_coll_op ops[] = {DT_COLL_SUM, DT_COLL_MIN, DT_COLL_MAX};
	enum { CAP = 1027 + 4 };
	float a[CAP], b[CAP], d[CAP], want[CAP];
	uint32_t r = 12345;
	(void)state;

	for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
		for (size_t off = 0; off < 4; off++) {
			for (int oi = 0; oi < 3; oi++) {
				size_t n = lens[li];
				dt_coll_op op = ops[oi];

				for (size_t i = 0; i < CAP; i++) {
					a[i] = bits_val(&r);
					b[i] = bits_val(&r);
				}
				if (n > 5)
					a[off + 5] = 0.0f / 0.0f;
				for (size_t i = 0; i < n; i++) {
					volatile float x = a[off + i];
					volatile float y = b[off + i];
					want[i] = op == DT_COLL_MIN
					              ? (y < x ? y : x)
					          : op == DT_COLL_MAX
					              ? (y > x ? y : x)
					              : x + y;
				}
				dt__coll_reduce(DT_FLOAT32, op, d + off,
				                a + off, b + off, n);
				assert_memory_equal(d + off, want,
				                    n * sizeof(float));
				/* in place, into the first input */
				dt__coll_reduce(DT_FLOAT32, op, a + off,
				                a + off, b + off, n);
				assert_memory_equal(a + off, want,
				                    n * sizeof(float));
			}
		}
	}
}

static void
test_reduce_int_wraps(void **state)
{
	int32_t a[2] = {INT32_MAX, INT32_MIN}, b[2] = {1, -1}, d[2];
	(void)state;

	dt__coll_reduce(DT_INT32, DT_COLL_SUM, d, a, b, 2);
	assert_int_equal(d[0], INT32_MIN);
	assert_int_equal(d[1], INT32_MAX);
}

static void
test_scale(void **state)
{
	float f[3] = {3, -3, 1};
	double d[2] = {1, -5};
	int32_t i[4] = {7, -7, 2, -1};
	(void)state;

	dt__coll_scale(DT_FLOAT32, f, 3, 3);
	assert_true(f[0] == 1.0f && f[1] == -1.0f && f[2] == 1.0f / 3.0f);
	dt__coll_scale(DT_FLOAT64, d, 2, 4);
	assert_true(d[0] == 0.25 && d[1] == -1.25);
	dt__coll_scale(DT_INT32, i, 4, 2);
	assert_int_equal(i[0], 3);
	assert_int_equal(i[1], -3); /* toward zero */
	assert_int_equal(i[2], 1);
	assert_int_equal(i[3], 0);
	dt__coll_scale(DT_INT32, i, 4, 1); /* no-op */
	assert_int_equal(i[0], 3);
}

/* float16: each step widens, combines in float32 and rounds once, over
 * blocks (dst aliasing an input included) of any length. */
static void
test_reduce_f16(void **state)
{
	enum { N = 1500 };
	static float x[N], y[N], want[N], got[N];
	static uint8_t a[2 * N], b[2 * N], d[2 * N];
	uint64_t s = 7;

	(void)state;
	for (int i = 0; i < N; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = (float)((double)(s >> 40) / (1 << 20) - 8);
		y[i] = (float)((double)((s >> 20) & 0xfffff) / (1 << 16) - 8);
	}
	dt__quant_fp16(x, a, N);
	dt__quant_fp16(y, b, N);
	dt__dequant_fp16(a, x, N);
	dt__dequant_fp16(b, y, N);
	for (int i = 0; i < N; i++)
		want[i] = x[i] + y[i];
	dt__quant_fp16(want, d, N);
	dt__dequant_fp16(d, want, N);
	dt__coll_reduce(DT_FLOAT16, DT_COLL_SUM, a, a, b, N); /* dst == a */
	dt__dequant_fp16(a, got, N);
	assert_memory_equal(got, want, sizeof(got));
	/* the average: the rounded sum divided in float32, rounded */
	dt__coll_scale(DT_FLOAT16, a, N, 3);
	dt__dequant_fp16(a, got, N);
	for (int i = 0; i < N; i++) {
		float w = want[i] / 3.0f;
		uint8_t h[2];

		dt__quant_fp16(&w, h, 1);
		dt__dequant_fp16(h, &w, 1);
		assert_true(got[i] == w);
	}
}

/*
 * Cross-memory copies aim only at a pid the kernel vouches for: the one
 * SO_PEERCRED gave on the same-host link to the rank, and only when the
 * rank declared that same pid in the node table. A forged declaration
 * (another process of the same user), no credentials (a TCP link: 0) or
 * no declaration turn CMA off (0).
 */
static void
test_cma_pid_vouched(void **state)
{
	(void)state;
	assert_int_equal(dt__coll_cma_pid(4242, 4242), 4242);
	assert_int_equal(dt__coll_cma_pid(4242, 4243), 0); /* forged */
	assert_int_equal(dt__coll_cma_pid(4242, 0), 0);    /* TCP */
	assert_int_equal(dt__coll_cma_pid(0, 0), 0);
	assert_int_equal(dt__coll_cma_pid(-1, -1), 0);
	assert_int_equal(dt__coll_cma_pid(0, 4242), 0);
}

/*
 * A peer's shared area (net/cma.c) is mapped only when its descriptor is
 * a memory file sealed against shrinking, of exactly the announced size;
 * then read-only, showing what its owner wrote. (This process plays the
 * peer: pidfd_getfd on our own pid takes the same path.)
 */
static void
test_cma_area(void **state)
{
	const size_t bytes = 64u << 10;
	int fd, loose = memfd_create("loose", MFD_CLOEXEC);
	void *mine;
	const void *seen;
	(void)state;

	assert_int_equal(dt__cma_area_create(bytes, &fd, &mine), DT_OK);
	memset(mine, 0x5a, bytes);
	assert_int_equal(dt__cma_area_map(getpid(), fd, bytes, &seen), DT_OK);
	assert_memory_equal(seen, mine, bytes);
	((uint8_t *)mine)[bytes - 1] = 7; /* shared, not a copy */
	assert_int_equal(((const uint8_t *)seen)[bytes - 1], 7);
	dt__cma_area_unmap(seen, bytes);
	/* another size than the file's */
	assert_int_equal(dt__cma_area_map(getpid(), fd, bytes / 2, &seen),
	                 DT_EPROTO);
	assert_null(seen);
	assert_non_null(strstr(dt_errmsg(), "not a sealed memory file"));
	/* a file that could shrink under the reader */
	assert_true(loose >= 0);
	assert_int_equal(ftruncate(loose, (off_t)bytes), 0);
	assert_int_equal(dt__cma_area_map(getpid(), loose, bytes, &seen),
	                 DT_EPROTO);
	/* no such descriptor, none at all */
	assert_int_equal(dt__cma_area_map(getpid(), 100000, bytes, &seen),
	                 DT_ESYS);
	assert_int_equal(dt__cma_area_map(getpid(), -1, bytes, &seen),
	                 DT_EPROTO);
	close(loose);
	close(fd);
	dt__cma_area_unmap(mine, bytes);
}

/*
 * Which allreduces go through the shared areas: every block must end
 * within a half of share_max bytes where the layout puts it - in place
 * with more than 2 ranks, at the half's start with 2 (so twice the size),
 * odd counts included, whose larger block is rounded up - and none
 * without areas.
 */
static int
fits(int size, size_t share_max, size_t nelem, size_t esz)
{
	static dt_coll c;
	coll_op op;

	memset(&op, 0, sizeof(op));
	c.size = size;
	c.share_max = share_max;
	op.nelem = nelem;
	op.esz = esz;
	return dt__coll_share_fits(&c, &op);
}

static void
test_share_fits(void **state)
{
	const size_t m = 4u << 20;
	(void)state;

	assert_false(fits(2, 0, 1024, 4));
	assert_true(fits(2, m, 2 * m / 4, 4)); /* two halves of m */
	assert_false(fits(2, m, 2 * m / 4 + 1, 4));
	assert_true(fits(2, m, 2 * m / 8, 8));
	assert_false(fits(2, m, 2 * m / 8 + 1, 8));
	/* an odd count: 20 bytes, but a block of 3 elements, 12 bytes */
	assert_false(fits(2, 10, 5, 4));
	assert_true(fits(2, 12, 5, 4));
	assert_true(fits(2, 12, 6, 4));
	assert_false(fits(2, 12, 7, 4));
	assert_true(fits(2, m, 1, 4));
	assert_true(fits(2, m, 0, 4));
	/* more ranks: the last block ends at the buffer's end */
	assert_true(fits(3, m, m / 4, 4));
	assert_false(fits(3, m, m / 4 + 1, 4));
	assert_true(fits(4, m, m / 8, 8));
	assert_false(fits(4, m, m / 8 + 1, 8));
	assert_false(fits(4, 0, 1, 4));
}

/*
 * The fast boxes (algo_fbox.c) between two ranks played by two threads,
 * each with a communicator whose box area is a plain buffer the other
 * reads: sums of both inputs (rank 0's first) at sizes up to the box's,
 * in place and not, back to back; a mismatch failing both with both calls
 * named; a rank alone timing out with the stall error.
 */
#define FBOX_TEST_BOX (64u << 10)

typedef struct fbox_rank {
	dt_coll c;
	int ncalls;
	size_t counts[8]; /* element counts by call (both ranks alike, but
	                     for the mismatch test) */
	dt_err err[8];
	int wrong;     /* calls whose result was not x0 + x1 */
	char msg[256]; /* the first error's message */
} fbox_rank;

static float
fbox_val(int rank, size_t i, int call)
{
	return (float)(rank + 1) / 3.0f + (float)i * 0.25f + (float)call;
}

static void *
fbox_main(void *arg)
{
	fbox_rank *fr = arg;
	dt_coll *c = &fr->c;
	size_t max = FBOX_TEST_BOX / sizeof(float);
	float *in = malloc(max * sizeof(float)), *out = malloc(max * 4);

	for (int k = 0; k < fr->ncalls; k++) {
		size_t n = fr->counts[k];
		int inplace = k & 1;
		coll_op op;

		memset(&op, 0, sizeof(op));
		for (size_t i = 0; i < n; i++)
			in[i] = fbox_val(c->rank, i, k);
		if (inplace)
			memcpy(out, in, n * sizeof(float));
		op.seq = op.num = (uint64_t)k + 7;
		op.kind = DT__COLL_ALLREDUCE;
		op.sig = (dt__coll_sig){.kind = DT__COLL_ALLREDUCE,
		                        .dtype = DT_FLOAT32,
		                        .op = DT_COLL_SUM,
		                        .count = n};
		op.nelem = op.count = n;
		op.esz = sizeof(float);
		op.dtype = DT_FLOAT32;
		op.redop = DT_COLL_SUM;
		op.src = inplace ? (uint8_t *)out : (uint8_t *)in;
		op.work = (uint8_t *)out;
		op.progress_ns = dt__now_ns();
		op.waiting_on = -1;
		fr->err[k] = dt__coll_algo_fbox.run(c, &op);
		if (fr->err[k] != DT_OK) {
			if (fr->msg[0] == '\0')
				snprintf(fr->msg, sizeof(fr->msg), "%s",
				         dt_errmsg());
			continue;
		}
		for (size_t i = 0; i < n; i++)
			if (out[i] != fbox_val(0, i, k) + fbox_val(1, i, k)) {
				fr->wrong++;
				break;
			}
	}
	free(in);
	free(out);
	return NULL;
}

/* Run ncalls calls of counts on ranks r[0] (and r[1] if both). */
static void
fbox_run(fbox_rank *r, int both)
{
	static uint8_t *area[2];
	pthread_t t[2];

	for (int k = 0; k < 2; k++) {
		dt_coll *c = &r[k].c;

		area[k] = calloc(1, DT__FBOX_CTL + 2 * FBOX_TEST_BOX);
		assert_non_null(area[k]);
		c->size = 2;
		c->rank = k;
		c->fbox_max = FBOX_TEST_BOX;
		c->cfg.timeout_s = 0.2;
		pthread_mutex_init(&c->mu, NULL);
		dt__list_init(&c->p2p_acks);
	}
	for (int k = 0; k < 2; k++) {
		r[k].c.fbox_mine = area[k];
		r[k].c.fbox_peer = area[1 - k];
	}
	for (int k = 0; k < 1 + both; k++)
		assert_int_equal(pthread_create(&t[k], NULL, fbox_main, &r[k]),
		                 0);
	for (int k = 0; k < 1 + both; k++)
		pthread_join(t[k], NULL);
	for (int k = 0; k < 2; k++) {
		pthread_mutex_destroy(&r[k].c.mu);
		free(area[k]);
	}
}

static void
test_fbox(void **state)
{
	static fbox_rank r[2];
	const size_t counts[8] = {
	    1, 1000, FBOX_TEST_BOX / 4, 0, 3, FBOX_TEST_BOX / 4 - 1, 1023, 16};
	(void)state;

	memset(r, 0, sizeof(r));
	for (int k = 0; k < 2; k++) {
		r[k].ncalls = 8;
		memcpy(r[k].counts, counts, sizeof(counts));
	}
	fbox_run(r, 1);
	for (int k = 0; k < 2; k++) {
		for (int i = 0; i < 8; i++)
			assert_int_equal(r[k].err[i], DT_OK);
		assert_int_equal(r[k].wrong, 0);
	}

	/* another count on rank 1: both fail, naming both calls */
	memset(r, 0, sizeof(r));
	for (int k = 0; k < 2; k++) {
		r[k].ncalls = 1;
		r[k].counts[0] = 100 + (size_t)k;
	}
	fbox_run(r, 1);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(r[k].err[0], DT_EMISMATCH);
		assert_non_null(strstr(r[k].msg,
		                       "ranks disagree: rank 0 called "
		                       "allreduce(count=100, float32"));
		assert_non_null(
		    strstr(r[k].msg, "rank 1 called allreduce(count=101"));
	}

	/* rank 0 alone: the stall error after DT_COLL_TIMEOUT (0.2 s) */
	memset(r, 0, sizeof(r));
	r[0].ncalls = 1;
	r[0].counts[0] = 10;
	fbox_run(r, 0);
	assert_int_equal(r[0].err[0], DT_ETIMEDOUT);
	assert_int_equal(r[1].ncalls, 0);
}

static void
test_dtype_names(void **state)
{
	(void)state;
	assert_int_equal(dt_dtype_size(DT_FLOAT32), 4);
	assert_int_equal(dt_dtype_size(DT_FLOAT64), 8);
	assert_int_equal(dt_dtype_size(DT_INT32), 4);
	assert_int_equal(dt_dtype_size((dt_dtype)9), 0);
	assert_string_equal(dt_dtype_name(DT_FLOAT64), "float64");
	assert_string_equal(dt_coll_op_name(DT_COLL_AVG), "average");
	assert_true(dt__coll_dtype_valid(DT_INT32));
	assert_true(dt__coll_dtype_valid(DT_FLOAT16));
	assert_int_equal(dt_dtype_size(DT_FLOAT16), 2);
	assert_string_equal(dt_dtype_name(DT_FLOAT16), "float16");
	assert_false(dt__coll_dtype_valid(4));
	assert_true(dt__coll_op_valid(DT_COLL_MAX));
	assert_false(dt__coll_op_valid(-1));
	assert_false(dt__coll_op_valid(4));
}

/* ---- blocks and chunks ---- */

static void
test_blocks(void **state)
{
	(void)state;
	for (size_t count = 0; count < 70; count++) {
		for (int n = 1; n <= 9; n++) {
			size_t next = 0, lo = SIZE_MAX, hi = 0;
			for (int i = 0; i < n; i++) {
				size_t off, len;
				dt__coll_block(count, n, i, &off, &len);
				assert_int_equal(off, next);
				next = off + len;
				lo = len < lo ? len : lo;
				hi = len > hi ? len : hi;
			}
			assert_int_equal(next, count);
			assert_true(hi - lo <= 1);
		}
	}
}

static void
test_chunks(void **state)
{
	(void)state;
	assert_int_equal(dt__coll_nchunks(0, 10), 0);
	assert_int_equal(dt__coll_nchunks(1, 10), 1);
	assert_int_equal(dt__coll_nchunks(10, 10), 1);
	assert_int_equal(dt__coll_nchunks(11, 10), 2);
	assert_int_equal(dt__coll_chunk_elems(4096, 4), 1024);
	assert_int_equal(dt__coll_chunk_elems(4096, 8), 512);
	assert_int_equal(dt__coll_chunk_elems(3, 8), 1); /* at least one */
}

/*
 * Run schedules on n simulated ranks (int64 elements, sum): each rank's
 * tx entries go, once their dependency is met, to a FIFO of the receiver,
 * which must expect exactly that message next and applies it. Returns
 * the work buffers (n * count), or fails the test.
 */
typedef struct sim_msg {
	uint64_t off, n;
	int64_t *data;
} sim_msg;

static void
simulate(int n, dt__coll_sched *sc, int64_t **work, int64_t **src,
         int scale_avg)
{
	sim_msg **q = calloc((size_t)n, sizeof(*q));
	size_t *qlen = calloc((size_t)n, sizeof(size_t));
	size_t *qhead = calloc((size_t)n, sizeof(size_t));
	size_t *sent = calloc((size_t)n, sizeof(size_t));
	size_t *rx = calloc((size_t)n, sizeof(size_t));
	int progress = 1;

	for (int r = 0; r < n; r++)
		q[r] = calloc(sc[(r + n - 1) % n].ntx + sc[r].nrx + 1,
		              sizeof(sim_msg));
	while (progress) {
		progress = 0;
		for (int r = 0; r < n; r++) {
			/* Send what may be sent. */
			while (sent[r] < sc[r].ntx) {
				dt__coll_msg *m = &sc[r].tx[sent[r]];
				if (m->dep >= 0 && rx[r] <= (size_t)m->dep)
					break;
				int to = sc[r].to;
				const int64_t *base =
				    m->from_src ? src[r] : work[r];
				sim_msg *sm = &q[to][qlen[to]++];
				sm->off = m->off;
				sm->n = m->n;
				sm->data = malloc((m->n + 1) * 8);
				memcpy(sm->data, base + m->off, m->n * 8);
				sent[r]++;
				progress = 1;
			}
			/* Receive what arrived. */
			while (qhead[r] < qlen[r]) {
				sim_msg *sm = &q[r][qhead[r]++];
				dt__coll_msg *m = &sc[r].rx[rx[r]];
				assert_true(rx[r] < sc[r].nrx);
				assert_int_equal(sm->off, m->off);
				assert_int_equal(sm->n, m->n);
				for (uint64_t i = 0; i < m->n; i++) {
					int64_t *d = &work[r][m->off + i];
					if (m->phase == DT__PH_RS)
						*d = src[r][m->off + i] +
						     sm->data[i];
					else
						*d = sm->data[i];
					if (m->phase == DT__PH_RS && m->final &&
					    scale_avg)
						*d /= n;
				}
				free(sm->data);
				rx[r]++;
				progress = 1;
			}
		}
	}
	for (int r = 0; r < n; r++) {
		assert_int_equal(sent[r], sc[r].ntx);
		assert_int_equal(rx[r], sc[r].nrx);
		free(q[r]);
	}
	free(q);
	free(qlen);
	free(qhead);
	free(sent);
	free(rx);
}

static void
test_ring_allreduce_sim(void **state)
{
	const size_t counts[] = {8, 9, 17, 100, 1001};
	const size_t chunks[] = {1, 3, 64, 1000000};
	(void)state;

	for (int n = 2; n <= 9; n++) {
		for (size_t ci = 0; ci < DT_ARRAY_LEN(counts); ci++) {
			for (size_t hi = 0; hi < DT_ARRAY_LEN(chunks); hi++) {
				size_t count = counts[ci], ce = chunks[hi];
				size_t offs[16], lens[16];
				dt__coll_sched sc[16];
				int64_t *work[16], *src[16];

				if (count < (size_t)n)
					continue;
				for (int b = 0; b < n; b++)
					dt__coll_block(count, n, b, &offs[b],
					               &lens[b]);
				for (int r = 0; r < n; r++) {
					assert_int_equal(dt__coll_ring_sched(
					                     r, n, offs, lens,
					                     ce, 1, 1, &sc[r]),
					                 DT_OK);
					work[r] = calloc(count, 8);
					src[r] = calloc(count, 8);
					for (size_t i = 0; i < count; i++)
						src[r][i] =
						    (int64_t)(r * 1000 + i);
				}
				simulate(n, sc, work, src, 0);
				for (int r = 0; r < n; r++) {
					for (size_t i = 0; i < count; i++)
						assert_int_equal(
						    work[r][i],
						    (int64_t)(1000 * n *
						                  (n - 1) / 2 +
						              n * i));
					dt__coll_sched_free(&sc[r]);
					free(work[r]);
					free(src[r]);
				}
			}
		}
	}
}

static void
test_ring_reduce_scatter_and_allgather_sim(void **state)
{
	(void)state;
	for (int n = 2; n <= 7; n++) {
		size_t per = 5, count = per * (size_t)n, offs[8], lens[8];
		dt__coll_sched sc[8];
		int64_t *work[8], *src[8];

		/* Reduce-scatter: rank r ends with block r reduced. */
		for (int b = 0; b < n; b++) {
			offs[b] = (size_t)b * per;
			lens[b] = per;
		}
		for (int r = 0; r < n; r++) {
			assert_int_equal(dt__coll_ring_sched(r, n, offs, lens,
			                                     2, 1, 0, &sc[r]),
			                 DT_OK);
			work[r] = calloc(count, 8);
			src[r] = calloc(count, 8);
			for (size_t i = 0; i < count; i++)
				src[r][i] = (int64_t)(r + 1) * 10 + (int64_t)i;
		}
		simulate(n, sc, work, src, 1); /* average */
		for (int r = 0; r < n; r++) {
			for (size_t i = offs[r]; i < offs[r] + per; i++)
				assert_int_equal(
				    work[r][i],
				    (10 * n * (n + 1) / 2 + n * (int64_t)i) /
				        n);
			dt__coll_sched_free(&sc[r]);
		}

		/* Allgather with uneven (and empty) blocks. */
		size_t total = 0;
		for (int b = 0; b < n; b++) {
			offs[b] = total;
			lens[b] = (size_t)(b % 3); /* 0, 1, 2, 0, ... */
			total += lens[b];
		}
		for (int r = 0; r < n; r++) {
			assert_int_equal(dt__coll_ring_sched(r, n, offs, lens,
			                                     1, 0, 1, &sc[r]),
			                 DT_OK);
			/* Every step sends something, even for an empty
			 * block: every rank hears from its neighbour. */
			assert_true(sc[r].ntx >= (size_t)(n - 1));
			memset(work[r], 0, count * 8);
			for (size_t i = 0; i < lens[r]; i++)
				work[r][offs[r] + i] = 100 * r + (int64_t)i;
		}
		simulate(n, sc, work, work, 0);
		for (int r = 0; r < n; r++) {
			for (int b = 0; b < n; b++)
				for (size_t i = 0; i < lens[b]; i++)
					assert_int_equal(work[r][offs[b] + i],
					                 100 * b + (int64_t)i);
			dt__coll_sched_free(&sc[r]);
			free(work[r]);
			free(src[r]);
		}
	}
}

static void
test_chain_sim(void **state)
{
	(void)state;
	for (int n = 2; n <= 6; n++) {
		for (int root = 0; root < n; root++) {
			size_t count = 23;
			dt__coll_sched sc[8];
			int64_t *work[8];

			for (int r = 0; r < n; r++) {
				assert_int_equal(
				    dt__coll_chain_sched(r, n, root, count, 4,
				                         &sc[r]),
				    DT_OK);
				work[r] = calloc(count, 8);
				for (size_t i = 0; i < count; i++)
					work[r][i] =
					    r == root ? (int64_t)i * 3 : -1;
				/* Only the tail sends nothing, only the root
				 * receives nothing. */
				assert_int_equal(sc[r].from < 0, r == root);
				assert_int_equal(sc[r].to < 0,
				                 r == (root + n - 1) % n);
			}
			simulate(n, sc, work, work, 0);
			for (int r = 0; r < n; r++) {
				for (size_t i = 0; i < count; i++)
					assert_int_equal(work[r][i],
					                 (int64_t)i * 3);
				dt__coll_sched_free(&sc[r]);
				free(work[r]);
			}
		}
	}
}

static void
test_rd_plan(void **state)
{
	(void)state;
	for (int n = 1; n <= 17; n++) {
		int p2 = 1, rounds = 0;
		while (p2 * 2 <= n) {
			p2 *= 2;
			rounds++;
		}
		for (int r = 0; r < n; r++) {
			dt__coll_rd rd;
			dt__coll_rd_plan(r, n, &rd);
			assert_int_equal(rd.p2, p2);
			assert_int_equal(rd.rounds, rounds);
			if (r >= p2) {
				assert_int_equal(rd.extra_of, r - p2);
				assert_int_equal(rd.extra, -1);
			} else {
				assert_int_equal(rd.extra_of, -1);
				assert_int_equal(rd.extra,
				                 r + p2 < n ? r + p2 : -1);
				/* Round partners are core ranks. */
				for (int k = 0; k < rounds; k++)
					assert_true((r ^ (1 << k)) < p2);
			}
		}
	}
}

static void
test_fusion_plan(void **state)
{
	size_t first[16];
	(void)state;

	/* All small: one batch. */
	size_t a[] = {1, 2, 3, 4};
	assert_int_equal(dt__coll_fusion_plan(a, 4, 4, 1024, first), 1);
	assert_int_equal(first[0], 0);
	/* Threshold 16 bytes = 4 floats: {1,2} {3} {4}. */
	assert_int_equal(dt__coll_fusion_plan(a, 4, 4, 16, first), 3);
	assert_int_equal(first[0], 0);
	assert_int_equal(first[1], 2);
	assert_int_equal(first[2], 3);
	/* A big tensor travels alone, and so does what follows it. */
	size_t b[] = {1, 100, 1, 1};
	assert_int_equal(dt__coll_fusion_plan(b, 4, 4, 16, first), 3);
	assert_int_equal(first[1], 1);
	assert_int_equal(first[2], 2);
	/* Threshold 0: every tensor alone. */
	size_t c[] = {1, 1, 0, 1};
	assert_int_equal(dt__coll_fusion_plan(c, 4, 4, 0, first), 4);
	/* Exactly at the threshold still fits. */
	size_t d[] = {2, 2, 2};
	assert_int_equal(dt__coll_fusion_plan(d, 3, 4, 16, first), 2);
	assert_int_equal(first[1], 2);
	assert_int_equal(dt__coll_fusion_plan(NULL, 0, 4, 16, first), 0);
}

/* ---- signatures ---- */

static void
test_sig(void **state)
{
	dt__coll_sig s = {.kind = DT__COLL_ALLREDUCE,
	                  .dtype = DT_FLOAT64,
	                  .op = DT_COLL_MAX,
	                  .ntensors = 3,
	                  .root = 70000,
	                  .count = (1ull << 40) + 5,
	                  .hash = 0x0123456789abcdefull},
	             t;
	uint8_t buf[DT__COLL_SIG_LEN];
	char text[200];
	size_t c1[] = {1, 2}, c2[] = {2, 1};
	(void)state;

	dt__coll_sig_encode(&s, buf);
	assert_int_equal(dt__coll_sig_decode(buf, sizeof(buf), &t), DT_OK);
	assert_true(dt__coll_sig_equal(&s, &t));
	assert_int_equal(t.root, 70000);
	assert_int_equal(dt__coll_sig_decode(buf, sizeof(buf) - 1, &t),
	                 DT_EPROTO);
	t.count++;
	assert_false(dt__coll_sig_equal(&s, &t));

	dt__coll_sig_describe(&s, text, sizeof(text));
	assert_string_equal(text, "allreduce(group of 3 tensors, "
	                          "count=1099511627781, float64, max)");
	s = (dt__coll_sig){.kind = DT__COLL_BROADCAST,
	                   .dtype = DT_INT32,
	                   .root = 2,
	                   .count = 7};
	dt__coll_sig_describe(&s, text, sizeof(text));
	assert_string_equal(text, "broadcast(count=7, int32, root=2)");
	s.kind = DT__COLL_BARRIER;
	dt__coll_sig_describe(&s, text, sizeof(text));
	assert_string_equal(text, "barrier()");
	s = (dt__coll_sig){.kind = DT__COLL_REDUCE_SCATTER,
	                   .dtype = DT_FLOAT32,
	                   .op = DT_COLL_AVG,
	                   .count = 4};
	dt__coll_sig_describe(&s, text, sizeof(text));
	assert_string_equal(text, "reduce_scatter(count=4 per rank, float32, "
	                          "average)");

	assert_true(dt__coll_hash_counts(c1, 2) != dt__coll_hash_counts(c2, 2));
	assert_true(dt__coll_hash_counts(c1, 2) == dt__coll_hash_counts(c1, 2));
	assert_string_equal(dt__coll_kind_name(DT__COLL_ALLGATHERV),
	                    "allgatherv");
}

/* ---- settings ---- */

static void
test_cfg_env(void **state)
{
	dt__coll_cfg cfg;
	(void)state;

	unsetenv("DT_COLL_RING_THRESHOLD");
	unsetenv("HOROVOD_FUSION_THRESHOLD");
	unsetenv("DT_COLL_TIMEOUT");
	assert_int_equal(dt__coll_cfg_from_env(&cfg), DT_OK);
	assert_int_equal(cfg.fusion_bytes, 64u << 20);
	assert_true(cfg.timeout_s == 60.0);
	assert_true(cfg.ring_threshold > 0);
	setenv("HOROVOD_FUSION_THRESHOLD", "1024", 1);
	setenv("DT_COLL_TIMEOUT", "5", 1);
	assert_int_equal(dt__coll_cfg_from_env(&cfg), DT_OK);
	assert_int_equal(cfg.fusion_bytes, 1024);
	assert_true(cfg.timeout_s == 5.0);
	setenv("DT_COLL_TIMEOUT", "soon", 1);
	assert_int_equal(dt__coll_cfg_from_env(&cfg), DT_ECONFIG);
	assert_non_null(strstr(dt_errmsg(), "DT_COLL_TIMEOUT"));
	unsetenv("DT_COLL_TIMEOUT");
	unsetenv("HOROVOD_FUSION_THRESHOLD");
	unsetenv("DT_COLL_CMA_SHARED_MAX");
	assert_int_equal(dt__coll_cfg_from_env(&cfg), DT_OK);
	assert_int_equal(cfg.cma_shared_max, 4u << 20);
	setenv("DT_COLL_CMA_SHARED_MAX", "0", 1);
	assert_int_equal(dt__coll_cfg_from_env(&cfg), DT_OK);
	assert_int_equal(cfg.cma_shared_max, 0);
	setenv("DT_COLL_CMA_SHARED_MAX", "-1", 1);
	assert_int_equal(dt__coll_cfg_from_env(&cfg), DT_ECONFIG);
	assert_non_null(strstr(dt_errmsg(), "DT_COLL_CMA_SHARED_MAX"));
	unsetenv("DT_COLL_CMA_SHARED_MAX");
}

/* ---- the one-process communicator ---- */

/* A communicator of this process alone (no launcher, mpirun or srun in
 * the environment). */
static dt_coll *
one_process(void)
{
	dt_coll *c = NULL;

	unsetenv("DMLC_PS_ROOT_URI");
	unsetenv("DMLC_ROLE");
	unsetenv("OMPI_COMM_WORLD_SIZE");
	unsetenv("SLURM_PROCID");
	assert_int_equal(dt_coll_init(&c), DT_OK);
	return c;
}

static void
test_single_process(void **state)
{
	dt_coll *c;
	float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
	float t1[3] = {1, 2, 3}, t2[2] = {4, 5};
	size_t counts[1] = {5};
	dt_coll_handle *h, *h2;
	(void)state;

	c = one_process();
	assert_int_equal(dt_coll_rank(c), 0);
	assert_int_equal(dt_coll_size(c), 1);
	assert_int_equal(dt_coll_local_rank(c), 0);
	assert_int_equal(dt_coll_local_size(c), 1);

	assert_int_equal(dt_coll_allreduce(c, a, b, 5, DT_FLOAT32, DT_COLL_AVG),
	                 DT_OK);
	assert_memory_equal(a, b, sizeof(a));
	memset(b, 0, sizeof(b));
	assert_int_equal(dt_coll_allgatherv(c, a, b, counts, DT_FLOAT32),
	                 DT_OK);
	assert_memory_equal(a, b, sizeof(a));
	assert_int_equal(dt_coll_broadcast(c, a, 5, DT_FLOAT32, 0), DT_OK);
	assert_int_equal(dt_coll_barrier(c), DT_OK);
	assert_int_equal(
	    dt_coll_reduce_scatter(c, a, b, 5, DT_FLOAT32, DT_COLL_SUM), DT_OK);

	/* Async, and a group fused into one operation. */
	assert_int_equal(
	    dt_coll_allreduce_async(c, NULL, a, 5, DT_FLOAT32, DT_COLL_SUM, &h),
	    DT_OK);
	assert_int_equal(dt_coll_wait(h), DT_OK);
	assert_int_equal(dt_coll_group_start(c), DT_OK);
	assert_int_equal(dt_coll_group_start(c), DT_ESTATE);
	assert_int_equal(dt_coll_allreduce_async(c, NULL, t1, 3, DT_FLOAT32,
	                                         DT_COLL_SUM, &h),
	                 DT_OK);
	assert_int_equal(dt_coll_allreduce_async(c, NULL, t2, 2, DT_FLOAT32,
	                                         DT_COLL_SUM, &h2),
	                 DT_OK);
	assert_int_equal(dt_coll_group_end(c), DT_OK);
	assert_int_equal(dt_coll_wait(h2), DT_OK);
	assert_int_equal(dt_coll_wait(h), DT_OK);
	assert_true(t1[2] == 3 && t2[1] == 5);
	assert_int_equal(dt_coll_group_end(c), DT_ESTATE);

	/* Argument errors are local and name the call. */
	assert_int_equal(
	    dt_coll_allreduce(c, a, b, 5, (dt_dtype)7, DT_COLL_SUM), DT_EINVAL);
	assert_non_null(strstr(dt_errmsg(), "allreduce: unknown data type"));
	assert_int_equal(
	    dt_coll_allreduce(c, a, NULL, 5, DT_FLOAT32, DT_COLL_SUM),
	    DT_EINVAL);
	assert_int_equal(
	    dt_coll_allreduce(c, a, b, 5, DT_FLOAT32, (dt_coll_op)9),
	    DT_EINVAL);
	assert_int_equal(dt_coll_broadcast(c, a, 5, DT_FLOAT32, 1), DT_EINVAL);
	assert_non_null(strstr(dt_errmsg(), "root 1"));
	assert_int_equal(
	    dt_coll_reduce_scatter(c, a, a, 5, DT_FLOAT32, DT_COLL_SUM),
	    DT_EINVAL);
	assert_int_equal(dt_coll_wait(NULL), DT_EINVAL);

	assert_int_equal(dt_coll_dist_opt_broadcast(c, a, 5), DT_OK);
	assert_int_equal(dt_coll_dist_opt_average(c, a, 5), DT_OK);
	assert_int_equal(dt_coll_finalize(c), DT_OK);
	assert_int_equal(dt_coll_finalize(NULL), DT_OK);
}

/*
 * Synchronous calls from several threads at once: one runs in its own
 * thread on the communicator's op, used again from call to call; a call
 * made while another runs is queued for the background thread on an op
 * of its own. Every result is right, and the counters hold every call as
 * soon as it has returned.
 */
#define SYNC_THREADS 3
#define SYNC_CALLS   200

typedef struct sync_arg {
	dt_coll *c;
	int id, bad;
} sync_arg;

static void *
sync_main(void *p)
{
	sync_arg *a = p;
	float in[37], out[37];

	for (int k = 0; k < SYNC_CALLS; k++) {
		for (int i = 0; i < 37; i++)
			in[i] = (float)(a->id * 1000 + k + i);
		memset(out, 0, sizeof(out));
		if (dt_coll_allreduce(a->c, in, out, 37, DT_FLOAT32,
		                      DT_COLL_SUM) != DT_OK ||
		    memcmp(in, out, sizeof(in)) != 0)
			a->bad++;
	}
	return NULL;
}

static uint64_t
coll_ops_now(dt_coll *c)
{
	dt_stats s;
	uint64_t n;

	memset(&s, 0, sizeof(s));
	assert_int_equal(dt_coll_stats(c, &s), DT_OK);
	n = s.coll_ops;
	dt_stats_fini(&s);
	return n;
}

static void
test_sync_calls_threads(void **state)
{
	dt_coll *c;
	sync_arg a[SYNC_THREADS];
	pthread_t t[SYNC_THREADS];
	dt_coll_handle *h;
	float x[4] = {1, 2, 3, 4}, y[4];
	uint64_t ops0;
	(void)state;

	c = one_process();
	ops0 = coll_ops_now(c);
	/* (one counted as soon as the call returns) */
	assert_int_equal(dt_coll_allreduce(c, x, y, 4, DT_FLOAT32, DT_COLL_SUM),
	                 DT_OK);
	assert_int_equal(coll_ops_now(c), ops0 + 1);
	/* (a refused call is no operation, and leaves the next one clean) */
	assert_int_equal(
	    dt_coll_allreduce(c, x, NULL, 4, DT_FLOAT32, DT_COLL_SUM),
	    DT_EINVAL);
	assert_int_equal(coll_ops_now(c), ops0 + 1);
	/* (an asynchronous call queued while the synchronous ones run) */
	assert_int_equal(
	    dt_coll_allreduce_async(c, NULL, x, 4, DT_FLOAT32, DT_COLL_SUM, &h),
	    DT_OK);
	for (int i = 0; i < SYNC_THREADS; i++) {
		a[i] = (sync_arg){.c = c, .id = i};
		assert_int_equal(pthread_create(&t[i], NULL, sync_main, &a[i]),
		                 0);
	}
	for (int i = 0; i < SYNC_THREADS; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(a[i].bad, 0);
	}
	assert_int_equal(dt_coll_wait(h), DT_OK);
	assert_true(x[0] == 1 && x[3] == 4);
	assert_int_equal(coll_ops_now(c),
	                 ops0 + 2 + (uint64_t)SYNC_THREADS * SYNC_CALLS);
	assert_int_equal(dt_coll_finalize(c), DT_OK);
}

static void
test_mpi_env_without_root(void **state)
{
	dt_coll *c = NULL;
	(void)state;

	setenv("OMPI_COMM_WORLD_RANK", "1", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
	unsetenv("DTRAIN_COLL_ROOT");
	assert_int_equal(dt_coll_init(&c), DT_ECONFIG);
	assert_null(c);
	assert_non_null(strstr(dt_errmsg(), "DTRAIN_COLL_ROOT=host:port"));
	setenv("DTRAIN_COLL_ROOT", "nocolon", 1);
	assert_int_equal(dt_coll_init(&c), DT_ECONFIG);
	unsetenv("DTRAIN_COLL_ROOT");
	setenv("OMPI_COMM_WORLD_RANK", "4", 1); /* out of range */
	assert_int_equal(dt_coll_init(&c), DT_ECONFIG);
	unsetenv("OMPI_COMM_WORLD_RANK");
	unsetenv("OMPI_COMM_WORLD_SIZE");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reduce_kernels),
	    cmocka_unit_test(test_reduce_int_wraps),
	    cmocka_unit_test(test_reduce_bits),
	    cmocka_unit_test(test_scale),
	    cmocka_unit_test(test_reduce_f16),
	    cmocka_unit_test(test_dtype_names),
	    cmocka_unit_test(test_cma_pid_vouched),
	    cmocka_unit_test(test_cma_area),
	    cmocka_unit_test(test_share_fits),
	    cmocka_unit_test(test_fbox),
	    cmocka_unit_test(test_blocks),
	    cmocka_unit_test(test_chunks),
	    cmocka_unit_test(test_ring_allreduce_sim),
	    cmocka_unit_test(test_ring_reduce_scatter_and_allgather_sim),
	    cmocka_unit_test(test_chain_sim),
	    cmocka_unit_test(test_rd_plan),
	    cmocka_unit_test(test_fusion_plan),
	    cmocka_unit_test(test_sig),
	    cmocka_unit_test(test_cfg_env),
	    cmocka_unit_test(test_single_process),
	    cmocka_unit_test(test_sync_calls_threads),
	    cmocka_unit_test(test_mpi_env_without_root),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
