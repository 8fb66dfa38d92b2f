/*
 * kv_test.c - the KVStore's public calls on a local store: every call with
 * each NULL argument (and an empty array) returns DT_EINVAL with a message
 * naming the argument, never a crash; the same calls with good arguments
 * still work. (The distributed store is tested by the kv_* integration
 * tests through the launcher.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dtrain/kv.h"

#define EINVAL_WITH(call, word)                                                \
	do {                                                                   \
		assert_int_equal((call), DT_EINVAL);                           \
		if (strstr(dt_errmsg(), (word)) == NULL)                       \
			fail_msg("'%s' does not name '%s'", dt_errmsg(),       \
			         (word));                                      \
	} while (0)

static void
test_null_arguments(void **state)
{
	dt_kv *kv = NULL;
	float v[4] = {1, 2, 3, 4}, out[4];
	const float *vals[1] = {v};
	float *outs[1] = {out};
	dt_key keys[1] = {3};
	size_t lens[1] = {4};
	dt_kv_req req;

	(void)state;
	EINVAL_WITH(dt_kv_create("local", NULL), "out is NULL");
	EINVAL_WITH(dt_kv_create(NULL, &kv), "type is NULL");
	assert_null(kv);
	assert_int_equal(dt_kv_destroy(NULL), DT_OK);
	assert_string_equal(dt_kv_type(NULL), "");
	assert_int_equal(dt_kv_rank(NULL), 0);
	assert_int_equal(dt_kv_num_workers(NULL), 1);
	assert_int_equal(dt_kv_is_dist(NULL), 0);

	EINVAL_WITH(dt_kv_set_optimizer(NULL, "sgd", "lr=0.1"), "kv is NULL");
	EINVAL_WITH(dt_kv_init(NULL, 3, v, 4), "kv is NULL");
	EINVAL_WITH(dt_kv_push(NULL, 3, v, 4), "kv is NULL");
	EINVAL_WITH(dt_kv_pull(NULL, 3, out, 4), "kv is NULL");
	EINVAL_WITH(dt_kv_pushpull(NULL, 3, v, out, 4), "kv is NULL");
	EINVAL_WITH(dt_kv_push_devices(NULL, 3, vals, 1, 4), "kv is NULL");
	EINVAL_WITH(dt_kv_push_async(NULL, 3, v, 4, &req), "kv is NULL");
	EINVAL_WITH(dt_kv_pull_async(NULL, 3, out, 4, &req), "kv is NULL");
	EINVAL_WITH(dt_kv_pushpull_async(NULL, 3, v, out, 4, &req),
	            "kv is NULL");
	EINVAL_WITH(dt_kv_wait(NULL, 1), "kv is NULL");
	EINVAL_WITH(dt_kv_wait_all(NULL), "kv is NULL");
	EINVAL_WITH(dt_kv_init_many(NULL, 1, keys, vals, lens), "kv is NULL");
	EINVAL_WITH(dt_kv_push_many(NULL, 1, keys, vals, lens), "kv is NULL");
	EINVAL_WITH(dt_kv_pull_many(NULL, 1, keys, outs, lens), "kv is NULL");
	EINVAL_WITH(dt_kv_pushpull_many(NULL, 1, keys, vals, outs, lens),
	            "kv is NULL");
	EINVAL_WITH(dt_kv_barrier(NULL), "kv is NULL");

	assert_int_equal(dt_kv_create("local", &kv), DT_OK);
	EINVAL_WITH(dt_kv_set_optimizer(kv, NULL, "lr=0.1"), "name is NULL");
	EINVAL_WITH(dt_kv_init(kv, 3, v, 0), "at least one element");
	EINVAL_WITH(dt_kv_init(kv, 3, NULL, 4), "NULL buffer");
	assert_int_equal(dt_kv_init(kv, 3, v, 4), DT_OK);
	EINVAL_WITH(dt_kv_push(kv, 3, NULL, 4), "NULL buffer");
	EINVAL_WITH(dt_kv_pull(kv, 3, NULL, 4), "NULL buffer");
	EINVAL_WITH(dt_kv_pushpull(kv, 3, v, NULL, 4), "NULL buffer");
	EINVAL_WITH(dt_kv_push_devices(kv, 3, NULL, 1, 4), "devices");
	EINVAL_WITH(dt_kv_push_async(kv, 3, v, 4, NULL), "req is NULL");
	EINVAL_WITH(dt_kv_pull_async(kv, 3, out, 4, NULL), "req is NULL");
	EINVAL_WITH(dt_kv_pushpull_async(kv, 3, v, out, 4, NULL),
	            "req is NULL");
	EINVAL_WITH(dt_kv_init_many(kv, 1, NULL, vals, lens), "NULL");
	EINVAL_WITH(dt_kv_init_many(kv, 1, keys, NULL, lens), "NULL");
	EINVAL_WITH(dt_kv_init_many(kv, 1, keys, vals, NULL), "NULL");
	EINVAL_WITH(dt_kv_push_many(kv, 1, NULL, vals, lens), "NULL");
	EINVAL_WITH(dt_kv_push_many(kv, 1, keys, NULL, lens), "NULL");
	EINVAL_WITH(dt_kv_push_many(kv, 1, keys, vals, NULL), "NULL");
	EINVAL_WITH(dt_kv_pull_many(kv, 1, NULL, outs, lens), "NULL");
	EINVAL_WITH(dt_kv_pull_many(kv, 1, keys, NULL, lens), "NULL");
	EINVAL_WITH(dt_kv_pull_many(kv, 1, keys, outs, NULL), "NULL");
	EINVAL_WITH(dt_kv_pushpull_many(kv, 1, NULL, vals, outs, lens), "NULL");
	EINVAL_WITH(dt_kv_pushpull_many(kv, 1, keys, NULL, outs, lens), "NULL");
	EINVAL_WITH(dt_kv_pushpull_many(kv, 1, keys, vals, NULL, lens), "NULL");
	EINVAL_WITH(dt_kv_pushpull_many(kv, 1, keys, vals, outs, NULL), "NULL");

	/* The good calls still work: a local store without an optimizer
	 * keeps the last value pushed. */
	assert_int_equal(dt_kv_push(kv, 3, v, 4), DT_OK);
	assert_int_equal(dt_kv_pull(kv, 3, out, 4), DT_OK);
	assert_memory_equal(out, v, sizeof(v));
	assert_int_equal(dt_kv_push_many(kv, 1, keys, vals, lens), DT_OK);
	assert_int_equal(dt_kv_pull_many(kv, 1, keys, outs, lens), DT_OK);
	assert_int_equal(dt_kv_push_many(kv, 0, NULL, NULL, NULL), DT_OK);
	assert_int_equal(dt_kv_wait_all(kv), DT_OK);
	assert_int_equal(dt_kv_barrier(kv), DT_OK);
	assert_int_equal(dt_kv_destroy(kv), DT_OK);
}

/* Gradient compression's settings, and its rule in a local store: what
 * 2bit does not send waits in the residual; fp16 pulls are rounded. */
static void
test_compression(void **state)
{
	static const char *bad[] = {"3bit",
	                            "2bit:0",
	                            "2bit:-1",
	                            "2bit:nan",
	                            "2bit:x",
	                            "fp16:0.5",
	                            "none:1",
	                            "type=2bit,threshold=inf",
	                            "type=2bit,color=red",
	                            "threshold=0.5",
	                            "type=1bit,min_size=-3",
	                            "type=1bit,min_size=",
	                            "",
	                            "2bit:1e40"};
	dt_kv *kv;
	float v[4] = {0.3f, -0.3f, 0.7f, 0.0f}, out[4];
	float big[70000];

	(void)state;
	assert_int_equal(dt_kv_create("local", &kv), DT_OK);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		assert_int_equal(dt_kv_set_gradient_compression(kv, bad[i]),
		                 DT_EINVAL);
		if (bad[i][0] && strstr(dt_errmsg(), bad[i]) == NULL)
			fail_msg("'%s' does not name '%s'", dt_errmsg(),
			         bad[i]);
	}
	EINVAL_WITH(dt_kv_set_gradient_compression(kv, NULL), "NULL");
	EINVAL_WITH(dt_kv_set_pull_precision(kv, "bf16"), "bf16");
	assert_int_equal(dt_kv_set_gradient_compression(
	                     kv, "type=2bit,threshold=0.5,min_size=4"),
	                 DT_OK);
	assert_int_equal(dt_kv_init(kv, 1, v, 4), DT_OK);
	assert_int_equal(dt_kv_set_gradient_compression(kv, "fp16"), DT_ESTATE);
	/* No optimizer: a push sets the value to what was sent. */
	assert_int_equal(dt_kv_pushpull(kv, 1, v, out, 4), DT_OK);
	assert_true(out[0] == 0.0f && out[1] == 0.0f && out[2] == 0.5f &&
	            out[3] == 0.0f);
	assert_int_equal(dt_kv_pushpull(kv, 1, v, out, 4), DT_OK);
	/* residuals 0.3, -0.3, 0.2: now 0.6, -0.6, 0.9 */
	assert_true(out[0] == 0.5f && out[1] == -0.5f && out[2] == 0.5f &&
	            out[3] == 0.0f);
	/* A key under min_size goes as it is. */
	assert_int_equal(dt_kv_init(kv, 2, v, 3), DT_OK);
	assert_int_equal(dt_kv_pushpull(kv, 2, v, out, 3), DT_OK);
	assert_memory_equal(out, v, 3 * sizeof(float));
	/* fp16 pulls: each value a half's (0.3 is not one). */
	assert_int_equal(dt_kv_set_pull_precision(kv, "fp16"), DT_OK);
	assert_int_equal(dt_kv_pull(kv, 2, out, 3), DT_OK);
	assert_true(out[0] == 0.300048828125f && out[1] == -0.300048828125f);
	assert_int_equal(dt_kv_set_pull_precision(kv, "fp32"), DT_OK);
	assert_int_equal(dt_kv_pull(kv, 2, out, 3), DT_OK);
	assert_true(out[0] == 0.3f);
	assert_int_equal(dt_kv_destroy(kv), DT_OK);

	/* The default min_size (65536 values): a big array is compressed,
	 * MXNet's dictionary form too. */
	assert_int_equal(dt_kv_create("local", &kv), DT_OK);
	assert_int_equal(
	    dt_kv_set_gradient_compression(kv, "type=2bit,threshold=0.25"),
	    DT_OK);
	for (size_t i = 0; i < 70000; i++)
		big[i] = i % 2 ? 0.3f : -0.1f;
	assert_int_equal(dt_kv_init(kv, 1, big, 70000), DT_OK);
	assert_int_equal(dt_kv_push(kv, 1, big, 70000), DT_OK);
	assert_int_equal(dt_kv_pull(kv, 1, big, 70000), DT_OK);
	assert_true(big[0] == 0.0f && big[1] == 0.25f && big[69999] == 0.25f);
	assert_int_equal(dt_kv_destroy(kv), DT_OK);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_null_arguments),
	    cmocka_unit_test(test_compression),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
