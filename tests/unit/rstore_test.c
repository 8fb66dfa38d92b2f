/*
 * rstore_test.c - row-sparse tables (kv/rstore.h), the row request body
 * (kv/kv_msg.c) and the row placement (kv/placement.c): checks that name
 * the bad row and leave the marks clear, gathers, dist_sync rounds as the
 * union of the workers' rows (rows pushed by several workers summed,
 * rows of nobody's push untouched, an empty push counted), lazy adam and
 * sgd with momentum against the formulas written out here (rows not
 * pushed keep their value and state), the decoder's limits, the
 * placement's row ranges against a search, and the rows of the round
 * before kept for a restarted worker.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/util.h"
#include "kv/rstore.h"

static const dt_opt no_opt = {.kind = DT_OPT_NONE};

static uint8_t *
wire_ids(const uint64_t *k, size_t n)
{
	uint8_t *w = malloc(8 * n + 8);

	for (size_t i = 0; i < n; i++)
		dt__put_u64(w + 8 * i, k[i]);
	return w;
}

static void
test_check(void **st)
{
	dt_rstore t;
	uint64_t ok[] = {10, 19, 12}, out[] = {10, 20}, low[] = {9},
	         dup[] = {11, 15, 11};
	uint8_t *w;
	size_t bad;

	(void)st;
	assert_int_equal(dt__rs_init(&t, 5, 100, 10, 10, 3, 1, 0, &no_opt),
	                 DT_OK);
	w = wire_ids(ok, 3);
	assert_int_equal(dt__rs_check(&t, "push", 3, w, 1, &bad), DT_OK);
	free(w);
	w = wire_ids(out, 2);
	assert_int_equal(dt__rs_check(&t, "push", 2, w, 1, &bad), DT_EINVAL);
	assert_int_equal(bad, 1);
	assert_non_null(strstr(dt_errmsg(), "row 20 is out of range"));
	free(w);
	w = wire_ids(low, 1);
	assert_int_equal(dt__rs_check(&t, "pull", 1, w, 0, &bad), DT_EINVAL);
	free(w);
	w = wire_ids(dup, 3);
	assert_int_equal(dt__rs_check(&t, "push", 3, w, 1, &bad), DT_EINVAL);
	assert_int_equal(bad, 2);
	assert_non_null(strstr(dt_errmsg(), "row 11 is listed twice"));
	/* a pull may repeat rows; the marks are clear again */
	assert_int_equal(dt__rs_check(&t, "pull", 3, w, 0, &bad), DT_OK);
	for (size_t i = 0; i < t.n / 64 + 1; i++)
		assert_int_equal(t.mark[i], 0);
	free(w);
	dt__rs_fini(&t);
	/* shapes past the limits */
	assert_int_equal(dt__rs_init(&t, 1, 0, 0, 0, 1, 1, 0, &no_opt),
	                 DT_ESIZE);
	assert_int_equal(dt__rs_init(&t, 1, 10, 5, 6, 1, 1, 0, &no_opt),
	                 DT_ESIZE);
	assert_int_equal(
	    dt__rs_init(&t, 1, 10, 0, 10, DT_RS_MAX_WIDTH + 1, 1, 0, &no_opt),
	    DT_ESIZE);
}

static void
test_sync_union(void **st)
{
	enum { W = 3, N = 40, WD = 2 };
	dt_rstore t;
	float g[N * WD], out[N * WD], want[N * WD];
	uint64_t a[] = {3, 7, 39}, b[] = {7, 0}, c[] = {39, 7, 20};
	int closed;

	(void)st;
	/* rows [10, 50) of a 60-row table */
	assert_int_equal(dt__rs_init(&t, 9, 60, 10, N, WD, W, 1, &no_opt),
	                 DT_OK);
	for (int i = 0; i < N * WD; i++)
		t.val[i] = want[i] = (float)(100 + i);
	for (int round = 0; round < 3; round++) {
		const uint64_t *set[W] = {a, b, c};
		size_t cnt[W] = {3, 2, 3};

		if (round == 1)
			cnt[1] = 0; /* an empty push still counts */
		for (int w = 0; w < W; w++) {
			uint64_t ids[3];
			uint8_t *wi;

			for (size_t i = 0; i < cnt[w]; i++) {
				ids[i] = set[w][i] + 10;
				for (int k = 0; k < WD; k++)
					g[i * WD + k] =
					    (float)((w + 1) * 10 + round + k);
			}
			wi = wire_ids(ids, cnt[w]);
			assert_int_equal(dt__rs_pushed(&t, w), 0);
			assert_int_equal(
			    dt__rs_push_sync(&t, w, cnt[w], wi, g, &closed),
			    DT_OK);
			assert_int_equal(closed, w == W - 1);
			free(wi);
		}
		/* the expected sums, rows of nobody's push untouched */
		float sum[N * WD];
		int hit[N] = {0};

		memset(sum, 0, sizeof(sum));
		for (int w = 0; w < W; w++) {
			size_t n = w == 1 && round == 1 ? 0 : (w == 1 ? 2 : 3);

			for (size_t i = 0; i < n; i++) {
				uint64_t r = set[w][i];

				hit[r] = 1;
				for (int k = 0; k < WD; k++)
					sum[r * WD + k] +=
					    (float)((w + 1) * 10 + round + k);
			}
		}
		for (int r = 0; r < N; r++)
			for (int k = 0; hit[r] && k < WD; k++)
				want[r * WD + k] = sum[r * WD + k];
		uint64_t all[N];
		for (int r = 0; r < N; r++)
			all[r] = (uint64_t)r + 10;
		uint8_t *wa = wire_ids(all, N);
		dt__rs_gather(&t, N, wa, out);
		free(wa);
		assert_memory_equal(out, want, sizeof(out));
		assert_int_equal(t.nround, 0);
	}
	for (int r = 0; r < N; r++)
		assert_int_equal(t.slot[r], 0);
	dt__rs_fini(&t);
}

/* Lazy adam, written out (MXNet's adam_update with the Python
 * optimizer's bias correction), on one row. */
static void
adam_row(const dt_opt *o, uint64_t t, float *w, const float *g, float *m,
         float *v, size_t n)
{
	double c1 = 1.0 - pow(o->p.beta1, (double)t);
	double c2 = 1.0 - pow(o->p.beta2, (double)t);
	float lr = (float)(o->p.lr * sqrt(c2) / c1);
	float b1 = (float)o->p.beta1, b2 = (float)o->p.beta2;

	for (size_t i = 0; i < n; i++) {
		float gr =
		    g[i] * (float)o->p.rescale_grad + w[i] * (float)o->p.wd;

		m[i] = b1 * m[i] + (1.f - b1) * gr;
		v[i] = b2 * v[i] + (1.f - b2) * gr * gr;
		w[i] = w[i] - lr * m[i] / (sqrtf(v[i]) + (float)o->p.epsilon);
	}
}

static void
sgd_row(const dt_opt *o, float *w, const float *g, float *mom, size_t n)
{
	float lr = (float)o->p.lr, wd = (float)o->p.wd;
	float mo = (float)o->p.momentum, rg = (float)o->p.rescale_grad;

	for (size_t i = 0; i < n; i++) {
		mom[i] = mo * mom[i] - lr * wd * w[i] - lr * rg * g[i];
		w[i] = w[i] + mom[i];
	}
}

static void
lazy(const char *name, const char *params, int sync)
{
	enum { N = 50, WD = 4 };
	dt_opt o;
	dt_rstore t;
	float ref[N * WD], m[N * WD] = {0}, v[N * WD] = {0}, g[N * WD],
	                         out[N * WD];
	uint64_t seed = 77, steps = 0;

	assert_int_equal(dt__opt_parse(name, params, &o), DT_OK);
	assert_int_equal(dt__rs_init(&t, 1, N, 0, N, WD, 1, sync, &o), DT_OK);
	for (int i = 0; i < N * WD; i++)
		t.val[i] = ref[i] = 0.01f * (float)(i % 17) - 0.05f;
	for (int step = 0; step < 30; step++) {
		uint64_t ids[N];
		size_t cnt = 0;
		int closed;

		/* a few rows each step, some never */
		for (uint64_t r = 0; r < N; r++) {
			seed = seed * 6364136223846793005ull +
			       1442695040888963407ull;
			if (r % 10 != 9 && (seed >> 60) < 4)
				ids[cnt++] = r;
		}
		for (size_t i = 0; i < cnt * WD; i++)
			g[i] = (float)((int)(i * 7 + (size_t)step) % 11 - 5) /
			       8.0f;
		uint8_t *wi = wire_ids(ids, cnt);
		if (sync) {
			assert_int_equal(
			    dt__rs_push_sync(&t, 0, cnt, wi, g, &closed),
			    DT_OK);
			assert_true(closed);
		} else {
			dt__rs_apply(&t, cnt, wi, g);
		}
		free(wi);
		steps++;
		for (size_t i = 0; i < cnt; i++) {
			size_t r = (size_t)ids[i] * WD;

			if (o.kind == DT_OPT_ADAM)
				adam_row(&o, steps, ref + r, g + i * WD, m + r,
				         v + r, WD);
			else
				sgd_row(&o, ref + r, g + i * WD, m + r, WD);
		}
	}
	uint64_t all[N];
	for (int r = 0; r < N; r++)
		all[r] = (uint64_t)r;
	uint8_t *wa = wire_ids(all, N);
	dt__rs_gather(&t, N, wa, out);
	free(wa);
	assert_memory_equal(out, ref, sizeof(out));
	/* rows never pushed: their first values, and no state */
	for (int r = 9; r < N; r += 10)
		for (int k = 0; k < WD; k++) {
			assert_true(out[r * WD + k] ==
			            0.01f * (float)((r * WD + k) % 17) - 0.05f);
			assert_true(t.state[r * WD + k] == 0.0f);
		}
	dt__rs_fini(&t);
}

/* keep_prev (recovery in dist_sync): after a round, the rows it changed
 * are gathered as they were before it and the others as they are; the
 * next round keeps its own rows and forgets the older ones; a table of
 * one worker keeps the rows of each push. */
static void
test_keep_prev(void **st)
{
	dt_rstore t;
	const uint64_t r13[] = {11, 13}, r3[] = {13}, r5[] = {15},
	               r135[] = {11, 13, 15};
	float one[2] = {1, 1}, out[3];
	uint8_t *w13 = wire_ids(r13, 2), *w3 = wire_ids(r3, 1),
	        *w5 = wire_ids(r5, 1), *w135 = wire_ids(r135, 3);
	int closed;

	(void)st;
	/* rows [10, 20) of a 20-row table, 2 workers */
	assert_int_equal(dt__rs_init(&t, 4, 20, 10, 10, 1, 2, 1, &no_opt),
	                 DT_OK);
	t.keep_prev = 1;
	t.val[1] = 7;
	assert_int_equal(dt__rs_push_sync(&t, 0, 2, w13, one, &closed), DT_OK);
	assert_false(closed);
	assert_int_equal(dt__rs_push_sync(&t, 1, 1, w3, one, &closed), DT_OK);
	assert_true(closed); /* rows 11, 13 = 1, 2 */
	dt__rs_gather_prev(&t, 3, w135, out);
	assert_true(out[0] == 7 && out[1] == 0 && out[2] == 0);
	dt__rs_gather(&t, 3, w135, out);
	assert_true(out[0] == 1 && out[1] == 2 && out[2] == 0);
	assert_int_equal(dt__rs_push_sync(&t, 0, 1, w5, one, &closed), DT_OK);
	assert_int_equal(dt__rs_push_sync(&t, 1, 1, w5, one, &closed), DT_OK);
	assert_true(closed); /* row 15 = 2; the copy is of row 15 only */
	dt__rs_gather_prev(&t, 3, w135, out);
	assert_true(out[0] == 1 && out[1] == 2 && out[2] == 0);
	dt__rs_fini(&t);
	assert_int_equal(dt__rs_init(&t, 4, 20, 10, 10, 1, 1, 1, &no_opt),
	                 DT_OK);
	t.keep_prev = 1;
	assert_int_equal(dt__rs_push_sync(&t, 0, 2, w13, one, &closed), DT_OK);
	assert_true(closed);
	dt__rs_gather_prev(&t, 3, w135, out);
	assert_true(out[0] == 0 && out[1] == 0 && out[2] == 0);
	dt__rs_gather(&t, 3, w135, out);
	assert_true(out[0] == 1 && out[1] == 1 && out[2] == 0);
	dt__rs_fini(&t);
	free(w13);
	free(w3);
	free(w5);
	free(w135);
}

static void
test_lazy_adam(void **st)
{
	(void)st;
	lazy("adam", "lr=0.01,wd=0.001", 0);
	lazy("adam", "lr=0.05,beta1=0.8,rescale_grad=0.5", 1);
}

static void
test_lazy_sgd(void **st)
{
	(void)st;
	lazy("sgd", "lr=0.1,momentum=0.9,wd=0.01", 0);
}

static void
test_decode(void **st)
{
	dt_msg_hdr h = {
	    .cmd = DT_CMD_KV_ROW_PUSH, .key = 4, .arg0 = 2, .arg1 = 3};
	uint8_t body[16 + 24] = {0}, meta[4];
	dt_kv_rows b;

	(void)st;
	h.payload_len = sizeof(body);
	assert_int_equal(dt__kv_rows_decode(&h, NULL, body, &b), DT_OK);
	assert_int_equal(b.count, 2);
	assert_int_equal(b.width, 3);
	assert_ptr_equal(b.body, body + 16);
	h.payload_len = sizeof(body) - 4; /* short */
	assert_int_equal(dt__kv_rows_decode(&h, NULL, body, &b), DT_ESIZE);
	h.payload_len = sizeof(body);
	h.arg1 = 0; /* no width */
	assert_int_equal(dt__kv_rows_decode(&h, NULL, body, &b), DT_ESIZE);
	h.arg1 = DT_RS_MAX_WIDTH + 1;
	assert_int_equal(dt__kv_rows_decode(&h, NULL, body, &b), DT_ESIZE);
	h.arg1 = 3;
	h.arg0 = DT_RS_MAX_ROWS + 1; /* (before any multiplication) */
	assert_int_equal(dt__kv_rows_decode(&h, NULL, body, &b), DT_ESIZE);
	h.arg0 = (uint64_t)1 << 39;
	h.arg1 = (uint64_t)1 << 24; /* count x width past the cap */
	assert_int_equal(dt__kv_rows_decode(&h, NULL, body, &b), DT_ESIZE);
	h.arg0 = 2;
	h.arg1 = 3;
	h.arg2 = dt__kv_enc(DT_QUANT_2BIT, DT_QUANT_NONE); /* no threshold */
	assert_int_equal(dt__kv_rows_decode(&h, NULL, body, &b), DT_EPROTO);
	float t = -1.0f;
	memcpy(meta, &t, 4);
	h.meta_len = 4;
	assert_int_equal(dt__kv_rows_decode(&h, meta, body, &b), DT_EPROTO);
	t = 0.5f;
	memcpy(meta, &t, 4);
	h.payload_len = 16 + dt__quant_size(DT_QUANT_2BIT, 6);
	assert_int_equal(dt__kv_rows_decode(&h, meta, body, &b), DT_OK);
	assert_true(b.t == 0.5f);
	h.meta_len = 0;
	h.cmd = DT_CMD_KV_ROW_PULL; /* a pull with a push encoding */
	h.payload_len = 16;
	assert_int_equal(dt__kv_rows_decode(&h, NULL, body, &b), DT_EPROTO);
	h.arg2 = dt__kv_enc(DT_QUANT_NONE, DT_QUANT_FP16);
	assert_int_equal(dt__kv_rows_decode(&h, NULL, body, &b), DT_OK);
	assert_int_equal(b.answer, DT_QUANT_FP16);
	h.arg2 = 1u << 16;
	assert_int_equal(dt__kv_rows_decode(&h, NULL, body, &b), DT_EPROTO);
}

static void
test_place(void **st)
{
	(void)st;
	for (int S = 1; S <= 5; S++)
		for (uint64_t rows = 1; rows < 40; rows += 3)
			for (size_t width = 1; width <= 9; width += 4) {
				uint64_t next = 0, lo, n;
				int holders = 0;

				for (int i = 0; i < S; i++) {
					dt__kv_rows_place(11, rows, width, S,
					                  64, i, &lo, &n);
					if (n == 0)
						continue;
					holders++;
					assert_int_equal(lo, next);
					for (uint64_t r = lo; r < lo + n; r++)
						assert_int_equal(
						    dt__kv_rows_server(11, rows,
						                       width, S,
						                       64, r),
						    i);
					next = lo + n;
				}
				assert_int_equal(next, rows);
				assert_int_equal(holders,
				                 rows * width >= 64 &&
				                         rows >= (uint64_t)S
				                     ? S
				                     : 1);
			}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_check),     cmocka_unit_test(test_sync_union),
	    cmocka_unit_test(test_lazy_adam), cmocka_unit_test(test_lazy_sgd),
	    cmocka_unit_test(test_decode),    cmocka_unit_test(test_place),
	    cmocka_unit_test(test_keep_prev),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
