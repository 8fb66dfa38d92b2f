/*
 * dtrain/node.h - cluster membership: roles, bootstrap, ranks, barriers.
 *
 * A dtrain job has one scheduler, S servers and W workers (MXNet/ps-lite
 * roles). Each process describes itself with a dt_node_config, usually read
 * from the DMLC_* environment variables, and joins the cluster with
 * dt_node_start(). The scheduler assigns ranks once S + W nodes have joined
 * and sends everyone the node table; from then on nodes can reach each
 * other, pass barriers, and at the end leave in order: when every worker
 * has left, servers and the scheduler finish with status 0.
 *
 * Most programs never call this directly: dt_kv_create() and dt_coll_init()
 * join the cluster themselves. See docs/cluster.md for the protocol.
 */
#ifndef DTRAIN_NODE_H
#define DTRAIN_NODE_H

#include <stdint.h>

#include "dtrain/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_role {
	DT_ROLE_SCHEDULER = 0,
	DT_ROLE_SERVER = 1,
	DT_ROLE_WORKER = 2,
} dt_role;

/* Barrier groups; combine with |. */
#define DT_GROUP_SCHEDULER 1
#define DT_GROUP_SERVERS   2
#define DT_GROUP_WORKERS   4
#define DT_GROUP_ALL       7

typedef struct dt_node_config {
	dt_role role;
	char root_uri[256];  /* scheduler host (DMLC_PS_ROOT_URI) */
	int root_port;       /* scheduler port (DMLC_PS_ROOT_PORT) */
	int num_servers;     /* DMLC_NUM_SERVER */
	int num_workers;     /* DMLC_NUM_WORKER */
	char interface[64];  /* DMLC_INTERFACE, "" for the default */
	char node_host[256]; /* DMLC_NODE_HOST, "" to use the interface */
	int port;            /* DMLC_PORT: port this node listens on, 0 = any */
	int requested_rank;  /* DMLC_WORKER_ID / DMLC_SERVER_ID, -1 = none */
	int verbose;         /* PS_VERBOSE: 0, 1 or 2 */
	int connect_timeout_ms; /* DT_CONNECT_TIMEOUT (s, default 60) */
	int listen_fd;          /* DT_LISTEN_FD: a bound socket to use, or -1 */
	/* What set root_uri and root_port, as errors should name it: ""
	 * for DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT (the default), or a
	 * variable such as "DTRAIN_COLL_ROOT". */
	char root_var[32];
	/* Where a scheduler listens: "" for root_uri. DTRAIN_SCHEDULER_BIND,
	 * or with DMLC_USE_KUBERNETES=1 (MXJob sets it; root_uri is then a
	 * Service's name) DMLC_NODE_HOST (the pod's IP), else "0.0.0.0". */
	char listen_host[256];
} dt_node_config;

typedef struct dt_node dt_node;

/*
 * Fill cfg from the environment. role_required: when 0, a missing DMLC_ROLE
 * means a worker (a program run alone). Fails with DT_ECONFIG and a message
 * naming the variable when a variable is missing or malformed.
 */
dt_err dt_node_config_from_env(dt_node_config *cfg, int role_required);

/* Name of a role: "scheduler", "server" or "worker". */
const char *dt_role_name(dt_role role);

/*
 * Join the cluster described by cfg: register with the scheduler (or, for
 * the scheduler, wait for everyone), receive the node table, connect to the
 * peers. Blocks until the node is ready or the connect timeout passes
 * (DT_ETIMEDOUT naming the scheduler address). On DT_OK *out is owned by
 * the caller and released with dt_node_stop().
 */
dt_err dt_node_start(const dt_node_config *cfg, dt_node **out);

/*
 * Leave the cluster. A worker tells the scheduler it is done; the
 * scheduler and servers return from dt_node_serve() once all workers have.
 * Frees node. Returns the first error the node saw, or DT_OK.
 */
dt_err dt_node_stop(dt_node *node);

/*
 * For the scheduler and servers: serve until the job ends (all workers
 * left, or a fatal error). Returns DT_OK on an orderly end.
 */
dt_err dt_node_serve(dt_node *node);

dt_role dt_node_role(const dt_node *node);
int dt_node_rank(const dt_node *node); /* rank within the role */
int dt_node_num_workers(const dt_node *node);
int dt_node_num_servers(const dt_node *node);

/*
 * Wait until every node of the groups (DT_GROUP_*) has entered the same
 * barrier. The calling node must belong to one of the groups.
 */
dt_err dt_node_barrier(dt_node *node, int groups);

/*
 * MXNet semantics in one call: read the environment; if DMLC_ROLE is
 * scheduler or server, serve that role and exit the process with status 0
 * when the job ends (status 1 after printing the error if serving fails).
 * For a worker (or no DMLC_ROLE) return DT_OK and *out (NULL when no
 * DMLC_PS_ROOT_URI is set: a single-process run).
 */
dt_err dt_node_init_from_env(dt_node **out);

/*
 * Send a small message to another node and print it on arrival (PS_VERBOSE
 * level 1): used by the demo and tests to show nodes talking. dst_role and
 * dst_rank name the receiver.
 */
dt_err dt_node_send_text(dt_node *node, dt_role dst_role, int dst_rank,
                         const char *text);

#ifdef __cplusplus
}
#endif
#endif
