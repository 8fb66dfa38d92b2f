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

dt_err
dt_node_config_from_env(dt_node_config *cfg, int role_required)
{
	const char *role = dt__env_str("DMLC_ROLE");
	const char *s;
	long v;
	dt_err err;

	if (cfg == NULL)
		return dt__fail(DT_EINVAL, "dt_node_config_from_env: cfg is "
		                           "NULL");

	memset(cfg, 0, sizeof(*cfg));
	cfg->requested_rank = -1;
	cfg->listen_fd = -1;
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
	s = dt__env_str("DMLC_PS_ROOT_URI");
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
	if ((err = dt__env_long("DMLC_NUM_SERVER", 0, 0, 2048, &v)))
		return err;
	cfg->num_servers = (int)v;
	if (dt__env_str("DMLC_NUM_WORKER") == NULL)
		return dt__fail(DT_ECONFIG, "DMLC_NUM_WORKER is not set");
	if ((err = dt__env_long("DMLC_NUM_WORKER", 0, 1, 2048, &v)))
		return err;
	cfg->num_workers = (int)v;
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
	if ((err = dt__env_long("DT_LISTEN_FD", -1, -1, 65535, &v)))
		return err;
	cfg->listen_fd = (int)v;

	/* A rank wish: set by dtrain launch, or by mpirun / srun. */
	const char *rank_var =
	    cfg->role == DT_ROLE_SERVER ? "DMLC_SERVER_ID" : "DMLC_WORKER_ID";
	const char *const sources[] = {rank_var, "OMPI_COMM_WORLD_RANK",
	                               "PMIX_RANK", "SLURM_PROCID"};
	if (cfg->role != DT_ROLE_SCHEDULER) {
		for (size_t i = 0; i < DT_ARRAY_LEN(sources); i++) {
			if (dt__env_str(sources[i]) == NULL)
				continue;
			if ((err = dt__env_long(sources[i], -1, 0, 4095, &v)))
				return err;
			cfg->requested_rank = (int)v;
			break;
		}
	}
	return DT_OK;
}
