/*
 * config_test.c - dt_node_config_from_env(): the DMLC_* variables a node
 * reads at start-up (docs/cluster.md), their defaults, and the errors for
 * a variable that is missing or malformed. Each error must be DT_ECONFIG
 * with a message naming the variable, since that message is all a user
 * who mistyped a launch script sees.
 *
 * Every test starts from an environment holding only a complete, valid
 * worker configuration and changes one thing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/limits.h"
#include "common/util.h"
#include "core/core.h"
#include "dtrain/node.h"

/* Every variable the config reads; cleared before each test. */
static const char *const all_vars[] = {
    "DMLC_ROLE",
    "DMLC_PS_ROOT_URI",
    "DMLC_PS_ROOT_PORT",
    "DMLC_NUM_SERVER",
    "DMLC_NUM_WORKER",
    "DMLC_INTERFACE",
    "DMLC_NODE_HOST",
    "DMLC_PORT",
    "PS_VERBOSE",
    "DT_CONNECT_TIMEOUT",
    "DT_LISTEN_FD",
    "DMLC_WORKER_ID",
    "DMLC_SERVER_ID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMIX_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "JOB_COMPLETION_INDEX",
    "MX_CONFIG",
    "DMLC_USE_KUBERNETES",
    "DTRAIN_SCHEDULER_BIND",
};

static int
setup_valid_env(void **state)
{
	(void)state;
	for (size_t i = 0; i < DT_ARRAY_LEN(all_vars); i++)
		unsetenv(all_vars[i]);
	setenv("DMLC_ROLE", "worker", 1);
	setenv("DMLC_PS_ROOT_URI", "127.0.0.1", 1);
	setenv("DMLC_PS_ROOT_PORT", "9092", 1);
	setenv("DMLC_NUM_SERVER", "2", 1);
	setenv("DMLC_NUM_WORKER", "3", 1);
	dt__clear_error();
	return 0;
}

static void
assert_msg_has(const char *word)
{
	if (strstr(dt_errmsg(), word) == NULL)
		fail_msg("error message '%s' does not mention '%s'",
		         dt_errmsg(), word);
}

/* Reading the config fails with DT_ECONFIG naming var (and value). */
static void
expect_bad(int role_required, const char *var, const char *value)
{
	dt_node_config cfg;

	dt__clear_error();
	assert_int_equal(dt_node_config_from_env(&cfg, role_required),
	                 DT_ECONFIG);
	assert_msg_has(var);
	if (value)
		assert_msg_has(value);
}

static void
test_valid_worker(void **state)
{
	dt_node_config cfg;

	(void)state;
	memset(&cfg, 0x5a, sizeof(cfg));
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_int_equal(cfg.role, DT_ROLE_WORKER);
	assert_string_equal(cfg.root_uri, "127.0.0.1");
	assert_int_equal(cfg.root_port, 9092);
	assert_int_equal(cfg.num_servers, 2);
	assert_int_equal(cfg.num_workers, 3);
	/* Defaults (docs/cluster.md). */
	assert_int_equal(cfg.verbose, 0);
	assert_int_equal(cfg.connect_timeout_ms, 60 * 1000);
	assert_int_equal(cfg.port, 0);
	assert_int_equal(cfg.listen_fd, -1);
	assert_int_equal(cfg.requested_rank, -1);
	assert_string_equal(cfg.interface, "");
	assert_string_equal(cfg.node_host, "");
}

static void
test_roles(void **state)
{
	dt_node_config cfg;

	(void)state;
	setenv("DMLC_ROLE", "scheduler", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_int_equal(cfg.role, DT_ROLE_SCHEDULER);
	setenv("DMLC_ROLE", "server", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_int_equal(cfg.role, DT_ROLE_SERVER);
	/* A job of workers only (collectives) has no servers. */
	setenv("DMLC_NUM_SERVER", "0", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_int_equal(cfg.num_servers, 0);
	/* Without DMLC_ROLE a program run alone is a worker... */
	unsetenv("DMLC_ROLE");
	assert_int_equal(dt_node_config_from_env(&cfg, 0), DT_OK);
	assert_int_equal(cfg.role, DT_ROLE_WORKER);
	/* ...and an empty value counts as unset. */
	setenv("DMLC_ROLE", "", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 0), DT_OK);
	assert_int_equal(cfg.role, DT_ROLE_WORKER);
	expect_bad(1, "DMLC_ROLE", NULL);
}

static void
test_missing_required(void **state)
{
	const char *const required[] = {"DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
	                                "DMLC_NUM_SERVER", "DMLC_NUM_WORKER"};

	(void)state;
	unsetenv("DMLC_ROLE");
	expect_bad(1, "DMLC_ROLE", NULL);
	for (size_t i = 0; i < DT_ARRAY_LEN(required); i++) {
		setup_valid_env(NULL);
		unsetenv(required[i]);
		expect_bad(1, required[i], NULL);
		expect_bad(0, required[i], NULL);
		/* Set but empty is as good as missing. */
		setenv(required[i], "", 1);
		expect_bad(1, required[i], NULL);
	}
	/* The scheduler needs them too. */
	setup_valid_env(NULL);
	setenv("DMLC_ROLE", "scheduler", 1);
	unsetenv("DMLC_NUM_WORKER");
	expect_bad(1, "DMLC_NUM_WORKER", NULL);
}

static void
test_malformed(void **state)
{
	static const struct {
		const char *var, *value;
	} cases[] = {
	    {"DMLC_ROLE", "boss"},
	    {"DMLC_ROLE", "Worker"},
	    {"DMLC_PS_ROOT_PORT", "abc"},
	    {"DMLC_PS_ROOT_PORT", "70000"},
	    {"DMLC_PS_ROOT_PORT", "-1"},
	    {"DMLC_PS_ROOT_PORT", "90 92"},
	    {"DMLC_PS_ROOT_PORT", "9092x"},
	    {"DMLC_PS_ROOT_PORT", "99999999999999999999999"},
	    {"DMLC_NUM_WORKER", "0"},
	    {"DMLC_NUM_WORKER", "-2"},
	    {"DMLC_NUM_WORKER", "two"},
	    {"DMLC_NUM_WORKER", "1000001"},
	    {"DMLC_NUM_SERVER", "-1"},
	    {"DMLC_NUM_SERVER", "1.5"},
	    {"PS_VERBOSE", "5"},
	    {"PS_VERBOSE", "-1"},
	    {"PS_VERBOSE", "yes"},
	    {"DT_CONNECT_TIMEOUT", "0"},
	    {"DT_CONNECT_TIMEOUT", "soon"},
	    {"DMLC_PORT", "65536"},
	    {"DT_LISTEN_FD", "x"},
	    {"DMLC_WORKER_ID", "abc"},
	    {"DMLC_WORKER_ID", "-3"},
	    {"OMPI_COMM_WORLD_RANK", "first"},
	};

	(void)state;
	for (size_t i = 0; i < DT_ARRAY_LEN(cases); i++) {
		setup_valid_env(NULL);
		setenv(cases[i].var, cases[i].value, 1);
		/* The message names the variable and quotes the value. */
		expect_bad(1, cases[i].var, cases[i].value);
	}
}

static void
test_too_long(void **state)
{
	char longv[600];

	(void)state;
	memset(longv, 'h', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = '\0';
	setenv("DMLC_PS_ROOT_URI", longv, 1);
	expect_bad(1, "DMLC_PS_ROOT_URI", NULL);
	setup_valid_env(NULL);
	setenv("DMLC_NODE_HOST", longv, 1);
	expect_bad(1, "DMLC_NODE_HOST", NULL);
	setup_valid_env(NULL);
	setenv("DMLC_INTERFACE", longv, 1);
	expect_bad(1, "DMLC_INTERFACE", NULL);
}

static void
test_optional_values(void **state)
{
	dt_node_config cfg;

	(void)state;
	setenv("PS_VERBOSE", "2", 1);
	setenv("DT_CONNECT_TIMEOUT", "3", 1);
	setenv("DMLC_INTERFACE", "eth0", 1);
	setenv("DMLC_NODE_HOST", "10.0.0.7", 1);
	setenv("DMLC_PORT", "9100", 1);
	setenv("DMLC_PS_ROOT_PORT", "65535", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_int_equal(cfg.verbose, 2);
	assert_int_equal(cfg.connect_timeout_ms, 3000);
	assert_string_equal(cfg.interface, "eth0");
	assert_string_equal(cfg.node_host, "10.0.0.7");
	assert_int_equal(cfg.port, 9100);
	assert_int_equal(cfg.root_port, 65535);
	/* Empty values take the defaults. */
	setenv("PS_VERBOSE", "", 1);
	setenv("DT_CONNECT_TIMEOUT", "", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_int_equal(cfg.verbose, 0);
	assert_int_equal(cfg.connect_timeout_ms, 60 * 1000);
}

static int
rank_of(void)
{
	dt_node_config cfg;

	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	return cfg.requested_rank;
}

static void
test_rank_requests(void **state)
{
	(void)state;
	/* A worker reads DMLC_WORKER_ID, not DMLC_SERVER_ID. */
	setenv("DMLC_SERVER_ID", "1", 1);
	assert_int_equal(rank_of(), -1);
	setenv("DMLC_WORKER_ID", "2", 1);
	assert_int_equal(rank_of(), 2);
	setenv("DMLC_WORKER_ID", "0", 1);
	assert_int_equal(rank_of(), 0);

	/* A server reads DMLC_SERVER_ID, not DMLC_WORKER_ID. */
	setenv("DMLC_ROLE", "server", 1);
	assert_int_equal(rank_of(), 1);
	unsetenv("DMLC_SERVER_ID");
	assert_int_equal(rank_of(), -1);

	/* mpirun's rank, when the role's own variable is not set. */
	setup_valid_env(NULL);
	setenv("OMPI_COMM_WORLD_RANK", "1", 1);
	assert_int_equal(rank_of(), 1);
	setenv("DMLC_WORKER_ID", "2", 1); /* the explicit one wins */
	assert_int_equal(rank_of(), 2);
	unsetenv("DMLC_WORKER_ID");
	unsetenv("OMPI_COMM_WORLD_RANK");
	setenv("PMIX_RANK", "2", 1);
	assert_int_equal(rank_of(), 2);
	unsetenv("PMIX_RANK");
	setenv("SLURM_PROCID", "1", 1);
	assert_int_equal(rank_of(), 1);

	/* The scheduler has no rank to ask for. */
	setenv("DMLC_ROLE", "scheduler", 1);
	setenv("DMLC_WORKER_ID", "1", 1);
	setenv("OMPI_COMM_WORLD_RANK", "1", 1);
	assert_int_equal(rank_of(), -1);
}

/* dt__launcher_rank: rank, size and the variable they came from. */
static void
expect_launcher(int rank, int size, const char *var)
{
	int r, n;
	const char *v;

	assert_int_equal(dt__launcher_rank(&r, &n, &v), DT_OK);
	assert_int_equal(r, rank);
	assert_int_equal(n, size);
	if (var)
		assert_string_equal(v, var);
	else
		assert_null(v);
}

/* The one list of launcher variables: the node's rank wish and the
 * collectives' rendezvous read the same rank from the same variable. */
static void
test_launcher_ranks(void **state)
{
	int r, n;
	const char *v;

	(void)state;
	expect_launcher(-1, 0, NULL);
	setenv("JOB_COMPLETION_INDEX", "3", 1); /* a rank, no size */
	expect_launcher(3, 0, "JOB_COMPLETION_INDEX");
	setenv("PMIX_RANK", "2", 1); /* believed before Kubernetes' */
	expect_launcher(2, 0, "PMIX_RANK");
	setenv("SLURM_PROCID", "1", 1);
	setenv("SLURM_NPROCS", "4", 1); /* Slurm's older name of the size */
	expect_launcher(1, 4, "SLURM_PROCID");
	setenv("SLURM_NTASKS", "2", 1);
	expect_launcher(1, 2, "SLURM_PROCID");
	setenv("PMI_RANK", "0", 1);
	setenv("PMI_SIZE", "3", 1);
	expect_launcher(0, 3, "PMI_RANK");
	setenv("OMPI_COMM_WORLD_RANK", "1", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
	expect_launcher(1, 2, "OMPI_COMM_WORLD_RANK");
	assert_int_equal(rank_of(), 1); /* the node's wish is the same */

	/* A rank not below the size, or a size that is no number. */
	setenv("OMPI_COMM_WORLD_RANK", "2", 1);
	assert_int_equal(dt__launcher_rank(&r, &n, &v), DT_ECONFIG);
	assert_msg_has("OMPI_COMM_WORLD_RANK");
	setenv("OMPI_COMM_WORLD_RANK", "0", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "two", 1);
	assert_int_equal(dt__launcher_rank(&r, &n, &v), DT_ECONFIG);
	assert_msg_has("OMPI_COMM_WORLD_SIZE");
}

/* Kubernetes: an Indexed Job's JOB_COMPLETION_INDEX and an MXJob's
 * MX_CONFIG give the rank; DMLC_USE_KUBERNETES makes the scheduler listen
 * on the pod's address (or all), not on the Service's name. */
static void
test_kubernetes(void **state)
{
	dt_node_config cfg;

	(void)state;
	setenv("JOB_COMPLETION_INDEX", "1", 1);
	assert_int_equal(rank_of(), 1);
	setenv("DMLC_WORKER_ID", "2", 1); /* the explicit one wins */
	assert_int_equal(rank_of(), 2);
	unsetenv("DMLC_WORKER_ID");
	setenv("JOB_COMPLETION_INDEX", "x", 1);
	expect_bad(1, "JOB_COMPLETION_INDEX", "x");
	unsetenv("JOB_COMPLETION_INDEX");

	/* MXJob: servers get no DMLC_SERVER_ID, only MX_CONFIG. */
	setenv("DMLC_ROLE", "server", 1);
	setenv("MX_CONFIG",
	       "{\"cluster\":{\"server\":[{\"url\":\"task\",\"port\":9091}]},"
	       "\"labels\":{\"server\":\"\"},"
	       "\"task\":{\"type\":\"server\",\"index\":1}}",
	       1);
	assert_int_equal(rank_of(), 1);
	setenv("MX_CONFIG", "{\"task\": {\"index\": 3, \"type\": \"server\"}}",
	       1);
	assert_int_equal(rank_of(), 3);
	setenv("MX_CONFIG", "{\"task\":{\"type\":\"worker\",\"index\":1}}", 1);
	expect_bad(1, "MX_CONFIG", "server");
	setenv("MX_CONFIG", "{\"task\":{\"type\":\"server\",\"index\":-1}}", 1);
	expect_bad(1, "MX_CONFIG", "index");
	setenv("MX_CONFIG", "{\"task\":{\"type\":\"server\"", 1);
	expect_bad(1, "MX_CONFIG", "task");
	setenv("MX_CONFIG", "{\"cluster\":{}}", 1); /* no task: no rank */
	assert_int_equal(rank_of(), -1);
	unsetenv("MX_CONFIG");

	setenv("DMLC_ROLE", "scheduler", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_string_equal(cfg.listen_host, "");
	setenv("DMLC_USE_KUBERNETES", "1", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_string_equal(cfg.listen_host, "0.0.0.0");
	setenv("DMLC_NODE_HOST", "10.1.2.3", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_string_equal(cfg.listen_host, "10.1.2.3");
	setenv("DTRAIN_SCHEDULER_BIND", "10.9.9.9", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_string_equal(cfg.listen_host, "10.9.9.9");
	setenv("DMLC_USE_KUBERNETES", "2", 1);
	expect_bad(1, "DMLC_USE_KUBERNETES", "2");
}

/* One bound for every layer (common/limits.h): jobs past the old 2,048
 * per role are taken, ranks too, and past the 8,192 nodes a table sent to
 * every node once allowed; past the bound of a role, the bound is
 * named. */
static void
test_job_size_bounds(void **state)
{
	dt_node_config cfg;
	char num[32];

	(void)state;
	setenv("DMLC_NUM_WORKER", "6000", 1);
	setenv("DMLC_NUM_SERVER", "2100", 1);
	setenv("DMLC_WORKER_ID", "5999", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_int_equal(cfg.num_workers, 6000);
	assert_int_equal(cfg.num_servers, 2100);
	assert_int_equal(cfg.requested_rank, 5999);
	unsetenv("DMLC_WORKER_ID");

	setenv("DMLC_NUM_WORKER", "9000", 1);
	setenv("DMLC_NUM_SERVER", "0", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	assert_int_equal(cfg.num_workers, 9000);
	setenv("DMLC_NUM_WORKER", "1000000", 1);
	setenv("DMLC_NUM_SERVER", "1000000", 1);
	assert_int_equal(dt_node_config_from_env(&cfg, 1), DT_OK);
	setenv("DMLC_NUM_SERVER", "0", 1);

	snprintf(num, sizeof(num), "%d", DT_MAX_ROLE_NODES + 1);
	setenv("DMLC_NUM_WORKER", num, 1);
	expect_bad(1, "DMLC_NUM_WORKER", num);
	snprintf(num, sizeof(num), "%d", DT_MAX_ROLE_NODES);
	assert_msg_has(num);
}

int
main(void)
{
#define T(f) cmocka_unit_test_setup(f, setup_valid_env)
	const struct CMUnitTest tests[] = {
	    T(test_valid_worker),     T(test_roles),
	    T(test_missing_required), T(test_malformed),
	    T(test_too_long),         T(test_optional_values),
	    T(test_rank_requests),    T(test_kubernetes),
	    T(test_launcher_ranks),   T(test_job_size_bounds),
	};
#undef T

	return cmocka_run_group_tests(tests, NULL, NULL);
}
