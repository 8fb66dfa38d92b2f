/*
 * config.c - a node's configuration from MXNet's DMLC_* variables (and the
 * rank that mpirun or srun gave the process): every variable checked,
 * every error naming the variable.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/env_table.h"
#include "common/limits.h"
#include "core/node_impl.h"

const char *
dt_role_name(dt_role role)
{
	switch (role) {
	case DT_ROLE_SCHEDULER:
		return "scheduler";
	case DT_ROLE_SERVER:
		return "server";
	case DT_ROLE_WORKER:
		return "worker";
	}
	return "?";
}

/* The span of a JSON string value of key in [p, end), or NULL: a plain
 * scan, enough for the flat "task" object MXJob writes. */
static const char *
json_field(const char *p, const char *end, const char *key)
{
	size_t kl = strlen(key);

	for (; p + kl + 2 < end; p++) {
		if (p[0] != '"' || strncmp(p + 1, key, kl) != 0 ||
		    p[kl + 1] != '"')
			continue;
		const char *q = p + kl + 2;

		while (q < end && *q == ' ')
			q++;
		if (q == end || *q != ':')
			continue; /* a value, not a key */
		for (q++; q < end && *q == ' '; q++)
			;
		return q < end ? q : NULL;
	}
	return NULL;
}

/*
 * MX_CONFIG (Kubeflow's MXJob): {"cluster": ..., "labels": ...,
 * "task": {"type": "server", "index": 1}}. The index, when the type is this
 * role; a malformed value is a named error.
 */
static dt_err
mx_config_index(const char *s, dt_role role, int *rank)
{
	size_t len = strnlen(s, 65536);
	const char *end = s + len, *task, *type, *index, *close;
	char want[16];
	long v;
	char *stop;

	if ((task = json_field(s, end, "task")) == NULL || *task != '{')
		return DT_OK; /* no task: nothing to learn */
	close = memchr(task, '}', (size_t)(end - task));
	if (close == NULL)
		return dt__fail(DT_ECONFIG,
		                "MX_CONFIG: \"task\" is not closed");
	type = json_field(task, close, "type");
	index = json_field(task, close, "index");
	snprintf(want, sizeof(want), "\"%s\"", dt_role_name(role));
	if (type == NULL || index == NULL)
		return dt__fail(DT_ECONFIG,
		                "MX_CONFIG: \"task\" has no \"type\" or no "
		                "\"index\"");
	if ((size_t)(close - type) < strlen(want) ||
	    strncmp(type, want, strlen(want)) != 0)
		return dt__fail(DT_ECONFIG,
		                "MX_CONFIG: the task's type is not %s, but "
		                "DMLC_ROLE is",
		                want);
	v = strtol(index, &stop, 10);
	if (stop == index || stop > close || v < 0 || v >= DT_MAX_ROLE_NODES)
		return dt__fail(DT_ECONFIG,
		                "MX_CONFIG: the task's index is not a rank "
		                "(0 to %d)",
		                DT_MAX_ROLE_NODES - 1);
	*rank = (int)v;
	return DT_OK;
}

/*
 * The variables that give a process its rank (and, where the launcher says
 * it, the job's size), in the order they are believed: OpenMPI's mpirun,
 * MPICH's and Slurm's PMI, Slurm's srun, then the two that carry no size,
 * PMIx's rank and Kubernetes' Indexed Jobs. The one list the node's rank wish
 * and the collectives' rendezvous read, so that both agree on a rank.
 */
static const struct {
	const char *rank, *size, *size_alt;
} launcher_vars[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", NULL},
    {"PMI_RANK", "PMI_SIZE", NULL},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS"},
    {"PMIX_RANK", NULL, NULL},
    {"JOB_COMPLETION_INDEX", NULL, NULL},
};

dt_err
dt__launcher_rank(int *rank, int *size, const char **var)
{
	long r, s = 0;
	dt_err err;

	*rank = -1;
	*size = 0;
	*var = NULL;
	for (size_t i = 0; i < DT_ARRAY_LEN(launcher_vars); i++) {
		const char *sv = launcher_vars[i].size;

		if (dt__env_str(launcher_vars[i].rank) == NULL)
			continue;
		if (sv && dt__env_str(sv) == NULL)
			sv = launcher_vars[i].size_alt;
		if (sv && dt__env_str(sv) &&
		    (err = dt__env_long(sv, 1, 1, DT_MAX_ROLE_NODES, &s)))
			return err;
		if ((err = dt__env_long(launcher_vars[i].rank, 0, 0,
		                        s > 0 ? s - 1 : DT_MAX_ROLE_NODES - 1,
		                        &r)))
			return err;
		*rank = (int)r;
		*size = (int)s;
		*var = launcher_vars[i].rank;
		return DT_OK;
	}
	return DT_OK;
}

dt_err
dt__node_config_local(dt_node_config *cfg)
{
	const char *s;
	long v;
	dt_err err;

	s = dt__env_str("DMLC_INTERFACE");
	if (s && strlen(s) >= sizeof(cfg->interface))
		return dt__fail(DT_ECONFIG, "DMLC_INTERFACE is too long");
	if (s)
		strcpy(cfg->interface, s);
	s = dt__env_str("DMLC_NODE_HOST");
	if (s && strlen(s) >= sizeof(cfg->node_host))
		return dt__fail(DT_ECONFIG, "DMLC_NODE_HOST is too long");
	if (s)
		strcpy(cfg->node_host, s);
	if ((err = dt__env_long("DMLC_PORT", 0, 0, 65535, &v)))
		return err;
	cfg->port = (int)v;
	if ((err = dt__env_long("PS_VERBOSE", 0, 0, 2, &v)))
		return err;
	cfg->verbose = (int)v;
	if ((err = dt__env_long("DT_CONNECT_TIMEOUT", 60, 1, 86400, &v)))
		return err;
	cfg->connect_timeout_ms = (int)v * 1000;
	return DT_OK;
}

/* DMLC_ROLE (a worker when unset and not required). */
static dt_err
config_role(dt_node_config *cfg, int role_required)
{
	const char *role = dt__env_str("DMLC_ROLE");

	if (role == NULL) {
		if (role_required)
			return dt__fail(DT_ECONFIG,
			                "DMLC_ROLE is not set (scheduler, "
			                "server or worker)");
		cfg->role = DT_ROLE_WORKER;
	} else if (strcmp(role, "scheduler") == 0) {
		cfg->role = DT_ROLE_SCHEDULER;
	} else if (strcmp(role, "server") == 0) {
		cfg->role = DT_ROLE_SERVER;
	} else if (strcmp(role, "worker") == 0) {
		cfg->role = DT_ROLE_WORKER;
	} else {
		return dt__fail(DT_ECONFIG,
		                "DMLC_ROLE='%s': expected scheduler, server "
		                "or worker",
		                role);
	}
	return DT_OK;
}

/* The scheduler's address and the job's size: DMLC_PS_ROOT_URI/PORT,
 * DMLC_NUM_SERVER/WORKER. */
static dt_err
config_job(dt_node_config *cfg)
{
	const char *s = dt__env_str("DMLC_PS_ROOT_URI");
	long v;
	dt_err err;

	if (s == NULL)
		return dt__fail(DT_ECONFIG,
		                "DMLC_PS_ROOT_URI is not set (the scheduler's "
		                "address)");
	if (strlen(s) >= sizeof(cfg->root_uri))
		return dt__fail(DT_ECONFIG, "DMLC_PS_ROOT_URI is too long");
	strcpy(cfg->root_uri, s);
	if (dt__env_str("DMLC_PS_ROOT_PORT") == NULL)
		return dt__fail(DT_ECONFIG, "DMLC_PS_ROOT_PORT is not set (the "
		                            "scheduler's port)");
	if ((err = dt__env_long("DMLC_PS_ROOT_PORT", 0, 0, 65535, &v)))
		return err;
	cfg->root_port = (int)v;
	if (v == 0 && cfg->role != DT_ROLE_SCHEDULER)
		return dt__fail(
		    DT_ECONFIG,
		    "DMLC_PS_ROOT_PORT=0: a %s needs the scheduler's "
		    "port (a scheduler started with 0 prints the one "
		    "it chose)",
		    dt_role_name(cfg->role));
	if (dt__env_str("DMLC_NUM_SERVER") == NULL)
		return dt__fail(DT_ECONFIG, "DMLC_NUM_SERVER is not set");
	if ((err =
	         dt__env_long("DMLC_NUM_SERVER", 0, 0, DT_MAX_ROLE_NODES, &v)))
		return err;
	cfg->num_servers = (int)v;
	if (dt__env_str("DMLC_NUM_WORKER") == NULL)
		return dt__fail(DT_ECONFIG, "DMLC_NUM_WORKER is not set");
	if ((err =
	         dt__env_long("DMLC_NUM_WORKER", 0, 1, DT_MAX_ROLE_NODES, &v)))
		return err;
	cfg->num_workers = (int)v;
	return dt__job_size_check(cfg->num_servers, cfg->num_workers,
	                          "DMLC_NUM_SERVER", "DMLC_NUM_WORKER");
}

/* A rank wish: set by dtrain launch, by mpirun / srun, or by Kubeflow's
 * MXJob. */
static dt_err
config_rank(dt_node_config *cfg)
{
	const char *rank_var =
	    cfg->role == DT_ROLE_SERVER ? "DMLC_SERVER_ID" : "DMLC_WORKER_ID";
	const char *s;
	long v;
	dt_err err;

	if (dt__env_str(rank_var) != NULL) {
		if ((err = dt__env_long(rank_var, -1, 0, DT_MAX_ROLE_NODES - 1,
		                        &v)))
			return err;
		cfg->requested_rank = (int)v;
	} else {
		int size;
		const char *var;

		if ((err =
		         dt__launcher_rank(&cfg->requested_rank, &size, &var)))
			return err;
	}
	/* Kubeflow's MXJob: the replica's index is in MX_CONFIG's "task" (it
	 * sets DMLC_WORKER_ID for workers only). */
	if (cfg->requested_rank < 0 && (s = dt__env_str("MX_CONFIG")) != NULL &&
	    (err = mx_config_index(s, cfg->role, &cfg->requested_rank)))
		return err;
	return DT_OK;
}

dt_err
dt_node_config_from_env(dt_node_config *cfg, int role_required)
{
	const char *s;
	long v;
	dt_err err;

	if (cfg == NULL)
		return dt__fail(DT_EINVAL, "dt_node_config_from_env: cfg is "
		                           "NULL");

	memset(cfg, 0, sizeof(*cfg));
	cfg->requested_rank = -1;
	cfg->listen_fd = -1;
	if ((err = config_role(cfg, role_required)))
		return err;
	/* (under dtrain launch, the launcher has said it for the job) */
	if (getenv("DTRAIN_LAUNCHED") == NULL)
		dt__env_warn_unknown(dt_role_name(cfg->role));
	if ((err = config_job(cfg)) || (err = dt__node_config_local(cfg)))
		return err;
	if ((err = dt__env_long("DT_LISTEN_FD", -1, -1, 65535, &v)))
		return err;
	cfg->listen_fd = (int)v;
	if ((err = dt__env_long("DMLC_USE_KUBERNETES", 0, 0, 1, &v)))
		return err;
	s = dt__env_str("DTRAIN_SCHEDULER_BIND");
	if (s == NULL && v)
		s = cfg->node_host[0] ? cfg->node_host : "0.0.0.0";
	if (s && strlen(s) >= sizeof(cfg->listen_host))
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_SCHEDULER_BIND is too long");
	if (s)
		strcpy(cfg->listen_host, s);
	if (cfg->role != DT_ROLE_SCHEDULER)
		return config_rank(cfg);
	return DT_OK;
}
