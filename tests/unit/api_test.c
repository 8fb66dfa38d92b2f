/*
 * api_test.c - the public calls of dtrain/node.h and dtrain/coll.h with
 * each NULL argument, and invalid ones, written from the headers only:
 * every call returns DT_EINVAL with a message (no crash); the getters
 * answer -1 (ranks) or 0 (sizes) for a NULL handle, and the calls that
 * free take NULL as free(3) does. (dtrain/kv.h's are kv_test's.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtrain/coll.h"
#include "dtrain/node.h"

#define EINVAL_CALL(call)                                                      \
	do {                                                                   \
		dt_err e_ = (call);                                            \
		if (e_ != DT_EINVAL)                                           \
			fail_msg("%s returned %s (%s), not DT_EINVAL", #call,  \
			         dt_errname(e_), dt_errmsg());                 \
		if (dt_errmsg()[0] == '\0')                                    \
			fail_msg("%s: DT_EINVAL without a message", #call);    \
	} while (0)

static void
test_node_nulls(void **state)
{
	dt_node_config cfg;
	dt_node *n = NULL;

	(void)state;
	EINVAL_CALL(dt_node_config_from_env(NULL, 0));
	EINVAL_CALL(dt_node_start(NULL, &n));
	memset(&cfg, 0, sizeof(cfg));
	EINVAL_CALL(dt_node_start(&cfg, NULL));
	EINVAL_CALL(dt_node_serve(NULL));
	EINVAL_CALL(dt_node_barrier(NULL, DT_GROUP_ALL));
	EINVAL_CALL(dt_node_init_from_env(NULL));
	EINVAL_CALL(dt_node_send_text(NULL, DT_ROLE_WORKER, 0, "x"));
	assert_int_equal(dt_node_stop(NULL), DT_OK); /* like free(NULL) */
	assert_int_equal(dt_node_rank(NULL), -1);
	assert_int_equal(dt_node_num_workers(NULL), -1);
	assert_int_equal(dt_node_num_servers(NULL), -1);
	assert_string_equal(dt_role_name((dt_role)99), "?");
}

static void
test_coll_nulls(void **state)
{
	dt_coll *c = NULL;
	dt_coll_handle *h = NULL;
	float x[4] = {1, 2, 3, 4}, y[4];
	size_t counts[1] = {4};
	dt_coll_tensor t = {x, y, 4};
	int done;

	(void)state;
	EINVAL_CALL(dt_coll_init(NULL));
	EINVAL_CALL(dt_coll_init_node(NULL, &c));
	EINVAL_CALL(dt_coll_allreduce(NULL, x, y, 4, DT_FLOAT32, DT_COLL_SUM));
	EINVAL_CALL(dt_coll_broadcast(NULL, x, 4, DT_FLOAT32, 0));
	EINVAL_CALL(dt_coll_allgatherv(NULL, x, y, counts, DT_FLOAT32));
	EINVAL_CALL(dt_coll_allgather(NULL, x, y, 4, DT_FLOAT32));
	EINVAL_CALL(
	    dt_coll_reduce_scatter(NULL, x, y, 4, DT_FLOAT32, DT_COLL_SUM));
	EINVAL_CALL(dt_coll_barrier(NULL));
	EINVAL_CALL(dt_coll_wait(NULL));
	EINVAL_CALL(dt_coll_test(NULL, &done));
	EINVAL_CALL(dt_coll_group_start(NULL));
	EINVAL_CALL(dt_coll_group_end(NULL));
	EINVAL_CALL(
	    dt_coll_allreduce_group(NULL, &t, 1, DT_FLOAT32, DT_COLL_SUM));
	EINVAL_CALL(dt_coll_dist_opt_broadcast(NULL, x, 4));
	EINVAL_CALL(dt_coll_dist_opt_average(NULL, x, 4));
	assert_int_equal(dt_coll_finalize(NULL), DT_OK); /* like free(NULL) */
	assert_int_equal(dt_coll_rank(NULL), -1);
	assert_int_equal(dt_coll_size(NULL), 0);
	assert_int_equal(dt_coll_local_rank(NULL), -1);
	assert_int_equal(dt_coll_local_size(NULL), 0);

	/* A communicator of one process: NULL buffers and handles. */
	unsetenv("DMLC_PS_ROOT_URI");
	unsetenv("DMLC_ROLE");
	unsetenv("OMPI_COMM_WORLD_SIZE");
	unsetenv("SLURM_PROCID");
	unsetenv("PMI_RANK");
	assert_int_equal(dt_coll_init(&c), DT_OK);
	EINVAL_CALL(dt_coll_allreduce(c, x, NULL, 4, DT_FLOAT32, DT_COLL_SUM));
	EINVAL_CALL(dt_coll_allreduce(c, x, y, 4, (dt_dtype)99, DT_COLL_SUM));
	EINVAL_CALL(dt_coll_allreduce(c, x, y, 4, DT_FLOAT32, (dt_coll_op)99));
	EINVAL_CALL(
	    dt_coll_allreduce_async(c, x, y, 4, DT_FLOAT32, DT_COLL_SUM, NULL));
	EINVAL_CALL(dt_coll_broadcast(c, NULL, 4, DT_FLOAT32, 0));
	EINVAL_CALL(dt_coll_broadcast(c, x, 4, DT_FLOAT32, 5));
	EINVAL_CALL(dt_coll_broadcast_async(c, x, 4, DT_FLOAT32, 0, NULL));
	EINVAL_CALL(dt_coll_allgatherv(c, x, y, NULL, DT_FLOAT32));
	EINVAL_CALL(dt_coll_allgatherv(c, x, NULL, counts, DT_FLOAT32));
	EINVAL_CALL(
	    dt_coll_allgatherv_async(c, x, y, counts, DT_FLOAT32, NULL));
	EINVAL_CALL(dt_coll_allgather(c, x, NULL, 4, DT_FLOAT32));
	EINVAL_CALL(
	    dt_coll_reduce_scatter(c, x, NULL, 4, DT_FLOAT32, DT_COLL_SUM));
	EINVAL_CALL(dt_coll_reduce_scatter_async(c, x, y, 4, DT_FLOAT32,
	                                         DT_COLL_SUM, NULL));
	EINVAL_CALL(
	    dt_coll_allreduce_group(c, NULL, 1, DT_FLOAT32, DT_COLL_SUM));
	EINVAL_CALL(
	    dt_coll_allreduce_group(c, &t, -1, DT_FLOAT32, DT_COLL_SUM));
	EINVAL_CALL(dt_coll_dist_opt_broadcast(c, NULL, 4));
	EINVAL_CALL(dt_coll_dist_opt_average(c, NULL, 4));
	assert_int_equal(
	    dt_coll_allreduce_async(c, x, y, 4, DT_FLOAT32, DT_COLL_SUM, &h),
	    DT_OK);
	EINVAL_CALL(dt_coll_test(h, NULL));
	assert_int_equal(dt_coll_wait(h), DT_OK);
	assert_true(y[3] == 4.0f);
	assert_int_equal(dt_coll_finalize(c), DT_OK);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_node_nulls),
	    cmocka_unit_test(test_coll_nulls),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
