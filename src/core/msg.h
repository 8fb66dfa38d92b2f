/*
 * msg.h - the bodies of the cluster's control messages, each encoder
 * beside its decoder (docs/protocol.md describes them byte by byte).
 *
 * Decoders take the metadata block exactly as it arrived, check every
 * field against its limit before anything is sized from it, and name what
 * was wrong in the error (DT_EPROTO). They allocate only what the checked
 * counts allow.
 */
#ifndef DT_CORE_MSG_H
#define DT_CORE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "common/limits.h"
#include "core/core.h"
#include "net/codec.h"

/* The most nodes a job can have (DT_MAX_ROLE_NODES of each role) and the
 * node table's own limit (DT_MAX_TABLE_NODES) are common/limits.h's. */
/* The largest rank a node may ask for. */
#define DT_MAX_RANK_WISH (DT_MAX_ROLE_NODES - 1)
/* A node's place token (DTRAIN_NODE_TOKEN): at most 128 bytes and a NUL. */
#define DT_NODE_TOKEN_MAX 129

/* ADD_NODE: a server or worker asks the scheduler to admit it. */
typedef struct dt__msg_add_node {
	dt_role role;           /* DT_ROLE_SERVER or DT_ROLE_WORKER */
	int want;               /* rank asked for, -1 for none */
	char host[DT_HOST_MAX]; /* address it listens on */
	int port;               /* 1..65535 */
	int pid;                /* for messages naming it */
	int num_servers;        /* the job size it was started with */
	int num_workers;
	char hostid[DT_HOSTID_MAX]; /* its host, "" if unknown */
	char local[DT_LOCAL_MAX];   /* its shared-memory endpoint, or "" */
	/* Its place token, "" if none: what proves that a process taking a
	 * lost node's place is that node's successor (recovery). Sent to the
	 * scheduler only; a NODE_UPDATE carries it empty. */
	char token[DT_NODE_TOKEN_MAX];
} dt__msg_add_node;

dt_err dt__msg_add_node_encode(const dt__msg_add_node *a, dt_wbuf *w);
dt_err dt__msg_add_node_decode(const void *meta, size_t len,
                               dt__msg_add_node *a);

/*
 * NODE_TABLE: the scheduler tells node `id` the whole table, 1 + S + W
 * entries by node id. The decoder allocates the table (*out, the caller
 * frees it) only once S and W are within DT_MAX_ROLE_NODES.
 */
dt_err dt__msg_node_table_encode(int id, int num_servers, int num_workers,
                                 const dt_node_entry *table, dt_wbuf *w);
dt_err dt__msg_node_table_decode(const void *meta, size_t len, int *id,
                                 int *num_servers, int *num_workers,
                                 dt_node_entry **out);

/*
 * MEMBERSHIP (elastic jobs): the node ids of the live workers, ascending,
 * as u32 each; the epoch and the cause ride in the header. The decoder
 * takes at most max_ids ids (the job's worker rows, DTRAIN_ELASTIC_MAX)
 * into ids and refuses
 * an empty list, one out of order or repeated, or an id outside
 * [first_id, first_id + max_ids).
 */
dt_err dt__msg_membership_encode(const int *ids, int n, dt_wbuf *w);
dt_err dt__msg_membership_decode(const void *meta, size_t len, int first_id,
                                 int max_ids, int *ids, int *n);

#endif
