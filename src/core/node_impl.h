/*
 * node_impl.h - the node object shared by the member side (node.c), the
 * scheduler (scheduler.c) and the layers above (kv, coll), which attach to
 * a node as "apps" that own a range of message commands.
 *
 * Node ids: the scheduler is 0, server rank r is 1 + r, worker rank r is
 * 1 + S + r. Locking: node->mu guards every field below marked (mu);
 * node->cv is signalled on every change of them. Fields set before the node
 * is ready (id, rank, table) are read-only afterwards.
 */
#ifndef DT_CORE_NODE_IMPL_H
#define DT_CORE_NODE_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "dtrain/node.h"
#include "common/util.h"
#include "net/van.h"

#define DT_MAX_NODES 4097
#define DT_HOST_MAX  256

typedef struct dt_node_entry {
	dt_role role;
	int rank;
	int id;
	char host[DT_HOST_MAX];
	int port;
	int pid;
} dt_node_entry;

enum { DT_APP_KV = 0, DT_APP_COLL = 1, DT_APP_COUNT };

/* A layer above the node that owns a range of commands. */
typedef struct dt__node_app {
	void *arg;
	/* A message of the app's range, in the I/O thread. */
	void (*on_msg)(void *arg, dt_node *n, dt_conn *c, dt_msg *m);
	/* Where its payload goes (see van.h); optional. */
	void *(*payload_dest)(void *arg, dt_node *n, dt_conn *c,
	                      const dt_msg_hdr *h, const uint8_t *meta);
	/* A piece of a payload for which payload_dest said DT_VAN_STREAM. */
	void (*payload_chunk)(void *arg, dt_node *n, dt_conn *c,
	                      const dt_msg_hdr *h, const void *data,
	                      uint64_t off, size_t len);
	/* A peer's connection failed (peer id) or the job aborted (-1):
	 * fail what waits on it. Optional; runs in the I/O thread. */
	void (*on_fail)(void *arg, dt_node *n, int peer, dt_err err);
} dt__node_app;

typedef struct dt_sched dt_sched;

struct dt_node {
	dt_node_config cfg;
	dt_van *van;
	dt_role role;
	int id;   /* -1 until the table arrives */
	int rank; /* -1 until the table arrives */
	int num_servers;
	int num_workers;
	char host[DT_HOST_MAX]; /* advertised address */
	int port;               /* listening port */

	dt_node_entry *table; /* by id, 1 + S + W entries */
	int ntable;
	dt_conn **peers; /* by id; peers[0] is the scheduler */

	pthread_mutex_t mu;
	pthread_cond_t cv;
	int have_table;           /* (mu) */
	int hello_acks;           /* (mu) HELLO_ACKs received */
	uint64_t barrier_done[8]; /* (mu) BARRIER_DONEs per group mask */
	uint64_t barrier_sent[8]; /* (mu) barriers entered per mask */
	int terminated;           /* (mu) TERMINATE received */
	int stopping;             /* (mu) dt_node_stop in progress */
	dt_err fatal;             /* (mu) first fatal error, DT_OK if none */
	char fatal_msg[512];      /* (mu) */

	dt__node_app apps[DT_APP_COUNT];
	dt_sched *sched; /* scheduler state, NULL on other roles */
};

/* Attach an app; do this before messages of its range can arrive. */
void dt__node_set_app(dt_node *n, int which, const dt__node_app *app);

/* Send a frame to node id; the header's sender/recver are filled in. */
dt_err dt__node_send(dt_node *n, int id, dt_msg_hdr *h, const void *meta,
                     uint32_t meta_len, const struct iovec *iov, int iovcnt);

static inline int
dt__node_server_id(const dt_node *n, int rank)
{
	return 1 + rank;
}
static inline int
dt__node_worker_id(const dt_node *n, int rank)
{
	return 1 + n->num_servers + rank;
}

/*
 * Wait on n->cv, under n->mu, until done(n, arg) holds; fail with the
 * node's fatal error, or DT_ETIMEDOUT ("timed out waiting for <what>") once
 * deadline_ns (dt__now_ns() clock, 0 = none) passes.
 */
dt_err dt__node_wait(dt_node *n, int (*done)(dt_node *, const void *),
                     const void *arg, uint64_t deadline_ns, const char *what);

/* Record a fatal error (first one wins), fail the apps, wake waiters. */
void dt__node_set_fatal(dt_node *n, dt_err err, const char *fmt, ...)
    DT_PRINTF(3, 4);
/* The fatal error, with its message recorded for dt_errmsg(); DT_OK if none. */
dt_err dt__node_check(dt_node *n);

/* "worker 1", "server 0", "scheduler", or "node 7" before the table. */
const char *dt__node_name(const dt_node *n, int id, char *buf, size_t cap);

/* Scheduler side (scheduler.c). */
/* Allocate the scheduler's state; before the I/O thread starts. */
dt_err dt__sched_create(dt_node *n);
dt_err dt__sched_start(dt_node *n);
dt_err dt__sched_serve(dt_node *n);
void dt__sched_on_msg(dt_node *n, dt_conn *c, dt_msg *m);
void dt__sched_on_close(dt_node *n, dt_conn *c, dt_err why);
void dt__sched_free(dt_node *n);

/* The server role's store (kv/server.c): attached before the node is ready. */
dt_err dt__kv_server_attach(dt_node *n);
void dt__kv_server_detach(dt_node *n);

#endif
