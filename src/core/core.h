/*
 * core.h - what the layers above the core (kv, coll) use of a node.
 *
 * A node (struct dt_node, private to core/) is one process's membership in
 * a cluster: its transport, the node table, barriers, and the fatal error
 * that ends every wait. The layers above it are "apps": each owns one range
 * of commands (net/proto.h) and plugs into the node with hooks, so the core
 * dispatches their messages without naming them:
 *
 *   - An app class (dt__app_class) is registered once per process with
 *     dt__app_register. A class with a start hook is started by the core on
 *     every node of the roles it names, once the node is connected to its
 *     peers and before the start-up barrier (the KV server store does
 *     this); its stop hook runs when the node is freed, after its I/O
 *     thread is gone.
 *   - An app instance is attached to one node with dt__node_attach (the
 *     KV client, a communicator); its hooks then receive that range's
 *     messages in the I/O thread (or a waiting caller's thread; hooks never
 *     run concurrently), and learn of lost peers and of the job's end
 *     through on_fail.
 *
 * Node ids: the scheduler is 0, server rank r is 1 + r, worker rank r is
 * 1 + S + r.
 */
#ifndef DT_CORE_CORE_H
#define DT_CORE_CORE_H

#include <pthread.h>
#include <stdint.h>

#include "common/spin.h"
#include "common/util.h"
#include "dtrain/node.h"
#include "net/van.h"

#define DT_HOST_MAX   256
#define DT_HOSTID_MAX 96 /* "boot id/network namespace" (dt__host_id) */
#define DT_LOCAL_MAX  64 /* a shared-memory endpoint's name */

/* One row of the node table. */
typedef struct dt_node_entry {
	dt_role role;
	int rank;
	int id;
	char host[DT_HOST_MAX];
	int port;
	int pid;
	/* Which host it runs on, and its endpoint for peers on that host
	 * (dt__van_listen_local); either may be "". */
	char hostid[DT_HOSTID_MAX];
	char local[DT_LOCAL_MAX];
	/* 1 once host..local hold the node's address. A member learns only
	 * the addresses it needs at its start from the scheduler (ASSIGN)
	 * and looks up the others when it first needs them
	 * (dt__node_lookup); role, rank and id are always set. */
	int known;
} dt_node_entry;

/* An app's hooks on one node; every one but on_msg is optional. */
typedef struct dt__app_hooks {
	void *arg;
	/* A message of the app's range from a peer that said HELLO. */
	void (*on_msg)(void *arg, dt_node *n, dt_conn *c, dt_msg *m);
	/* Where its payload goes (see net/van.h); NULL: a buffer of the
	 * connection's. */
	void *(*payload_dest)(void *arg, dt_node *n, dt_conn *c,
	                      const dt_msg_hdr *h, const uint8_t *meta);
	/* 1: payload_dest only looks (no state changes), so it may be
	 * asked about a frame that then never arrives whole (PS_RESEND: a
	 * connection cut inside it; the frame comes again). Else, with
	 * PS_RESEND, the payload is buffered and only on_msg sees it. */
	int dest_pure;
	/* PS_RESEND without recovery: the app may stream a payload anyway,
	 * because it knows how much of a frame it used and, when the frame
	 * comes again whole after a cut (the same message: the links take
	 * nothing else from that peer before it), uses only the rest. */
	int stream_resumable;
	/* A piece of a payload for which payload_dest said DT_VAN_STREAM
	 * (whole floats, 4-byte aligned). */
	void (*payload_chunk)(void *arg, dt_node *n, dt_conn *c,
	                      const dt_msg_hdr *h, const void *data,
	                      uint64_t off, size_t len);
	/* A peer's connection failed (peer id) or the job failed (-1, the
	 * reason in dt__node_fatal): fail what waits on it. */
	void (*on_fail)(void *arg, dt_node *n, int peer, dt_err err);
	/* Recovery (DTRAIN_RECOVER): peer is a new process in a lost node's
	 * place, with a new link; what it should have had is to be sent
	 * again. (I/O thread.) */
	void (*on_peer_restart)(void *arg, dt_node *n, int peer);
	/* Elastic jobs: the membership changed to epoch (read it with
	 * dt__node_membership); gone is the node id it removed, lost 1 if
	 * that node was lost, 0 if it left on its schedule or the membership
	 * grew (then gone is 0). (I/O thread.) */
	void (*on_membership)(void *arg, dt_node *n, uint64_t epoch, int gone,
	                      int lost);
} dt__app_hooks;

/* An app class: a command range and, optionally, per-role start/stop. */
typedef struct dt__app_class {
	const char *name; /* "kv" */
	unsigned cmd_first, cmd_last;
	unsigned start_roles; /* DT__ROLE_BIT(...) of nodes to start on */
	dt_err (*start)(dt_node *n);
	void (*stop)(dt_node *n);
} dt__app_class;

#define DT__ROLE_BIT(role) (1u << (role))
#define DT__MAX_APPS       8

/*
 * Register a class for this process (idempotent; the class must live for
 * the process). Before the nodes it should start on are started.
 */
dt_err dt__app_register(const dt__app_class *cls);

/* Attach an instance of cls to n (DT_EEXIST if one is); do it before
 * messages of its range can arrive. Detach with hooks no longer called
 * once the I/O thread has left them (see dt__node_detach). */
dt_err dt__node_attach(dt_node *n, const dt__app_class *cls,
                       const dt__app_hooks *hooks);
/* Detach cls's instance; messages of its range are dropped from then on.
 * The I/O thread may still be inside a hook when this returns. */
void dt__node_detach(dt_node *n, const dt__app_class *cls);
/* The attached instance's arg, or NULL. */
void *dt__node_app_arg(dt_node *n, const dt__app_class *cls);

/* This node's id (-1 before the table arrives). */
int dt__node_id(const dt_node *n);
/* How long a call may wait for its peers (DT_WAIT_TIMEOUT), in ns. */
uint64_t dt__node_wait_ns(const dt_node *n);
/* DTRAIN_RECOVER=1: a lost peer may come back (on_peer_restart). */
int dt__node_recover(const dt_node *n);
/* DTRAIN_ELASTIC=1: workers may leave the running job (elastic.c). */
int dt__node_elastic(const dt_node *n);
/* DTRAIN_ELASTIC_MIN: the fewest workers the job goes on with. */
int dt__node_elastic_min(const dt_node *n);
/* The membership now: its epoch (0 at the start) and the node ids of the
 * live workers, ascending, into ids (room for cap); returns their count. */
int dt__node_membership(dt_node *n, uint64_t *epoch, int *ids, int cap);
/* Wait until the membership's epoch is above `above` (DT_ETIMEDOUT once
 * deadline_ns passes, naming the epoch awaited; the node's fatal error if
 * the job fails meanwhile). */
dt_err dt__node_wait_membership(dt_node *n, uint64_t above,
                                uint64_t deadline_ns);
/* DTRAIN_ELASTIC_MAX, and the worker ids a communicator must have room
 * for (node ids 1 + S .. 1 + S + slots - 1). */
int dt__node_elastic_max(const dt_node *n);
int dt__node_elastic_slots(const dt_node *n);
/* This process joined the running elastic job: its state comes from the
 * members at the commit that took it in. */
int dt__node_elastic_joiner(const dt_node *n);
/* How many started workers wait to join (the scheduler's last word). */
int dt__node_elastic_waiting(dt_node *n);
/* How many workers have asked to join, ready or still starting (loading
 * their data): the members watch every step for them (coll/elastic.c). */
int dt__node_elastic_announced(dt_node *n);
/* Ask the scheduler to take count waiting workers into the membership,
 * at commit step `step`; exact: wait until count are ready (a schedule's
 * replay), else take those ready (none: the same list, a new epoch). */
dt_err dt__node_elastic_grow(dt_node *n, int count, uint64_t step, int exact);
/* Leave an elastic job that goes on without this worker: the scheduler
 * gives the others a membership without it. The node is stopped as
 * usual afterwards. */
dt_err dt__node_elastic_leave(dt_node *n);
/* The membership epoch this worker's program took last (0 at the start):
 * set by the collectives when the program takes a change, read by the
 * KVStore, whose pushes name it. */
void dt__node_elastic_take(dt_node *n, uint64_t epoch);
uint64_t dt__node_elastic_taken(dt_node *n);

/* This process took the place of a lost node of the job. */
int dt__node_rejoined(const dt_node *n);
/* The table row of node id, or NULL if there is none or its address is
 * not known here yet (dt__node_lookup). */
const dt_node_entry *dt__node_entry(const dt_node *n, int id);
/*
 * Make the entries of nodes first..first+count-1 known here: those not
 * known yet are asked of the scheduler (LOOKUP, in ranges of at most
 * DT_DIR_MAX ids) and this waits for its answers by DT_CONNECT_TIMEOUT.
 * DT_OK when all are known; DT_EPEER naming the first node the scheduler
 * does not know (an elastic job's empty row: the others are known then);
 * DT_ESTATE on the I/O thread, which cannot wait for an answer it would have to
 * read itself; else the wait's error. A no-op on the scheduler, which knows
 * every entry.
 */
dt_err dt__node_lookup(dt_node *n, int first, int count);
/*
 * The hosts of nodes first..first+count-1, without their entries: out[i]
 * is the scheduler's number of node first+i's host (equal numbers for one
 * host, each below the job's count of ids; DT_HOST_UNKNOWN for a node it
 * does not know). Asked of the scheduler (LOOKUP's hosts-only form, a few
 * bytes per host rather than an entry per node), one such lookup at a
 * time per node; waits by DT_CONNECT_TIMEOUT. DT_EINVAL for a range
 * outside the job, DT_ESTATE on the I/O thread or the scheduler.
 */
#define DT_HOST_UNKNOWN UINT32_MAX
dt_err dt__node_lookup_hosts(dt_node *n, int first, int count, uint32_t *out);
int dt__node_server_id(const dt_node *n, int rank);
int dt__node_worker_id(const dt_node *n, int rank);
/* "worker 1", "server 0", "scheduler", or "node 7" before the table. */
const char *dt__node_name(const dt_node *n, int id, char *buf, size_t cap);

/* Send a frame to node id; the header's sender/recver are filled in. */
dt_err dt__node_send(dt_node *n, int id, dt_msg_hdr *h, const void *meta,
                     uint32_t meta_len, const struct iovec *iov, int iovcnt);
/* The same; DT_SEND_STABLE promises that the payload stays untouched
 * until an answer to this message arrives (PS_RESEND then keeps it by
 * reference instead of copying it). */
#define DT_SEND_STABLE 0x1u
dt_err dt__node_send_ex(dt_node *n, int id, dt_msg_hdr *h, const void *meta,
                        uint32_t meta_len, const struct iovec *iov, int iovcnt,
                        unsigned flags);
/* A buffer sent with DT_SEND_STABLE is about to change: call this first
 * (PS_RESEND then keeps a copy of what it still holds of it). A store's
 * answers are sent from its values this way. Cheap without PS_RESEND. */
void dt__node_before_write(dt_node *n, const void *p, size_t bytes);

/* The pid of node id's process as the kernel vouches for it (the
 * connection's dt__conn_peer_pid), or 0: no connection, or one whose
 * transport cannot tell (TCP). */
int dt__node_peer_pid(dt_node *n, int id);

/* Drop a connection (a peer that broke the protocol). */
void dt__node_close(dt_node *n, dt_conn *c);
/* Drop the connection to node id, if there is one. */
void dt__node_close_peer(dt_node *n, int id);
/* Hold this thread's small frames and send them together (net/van.h). */
void dt__node_cork(dt_node *n);
dt_err dt__node_uncork(dt_node *n);
/* Wait for state behind g to move, reading the network meanwhile (see
 * dt__van_wait). n may be NULL: a plain condition wait. */
void dt__node_wait_gen(dt_node *n, dt_gen *g, pthread_mutex_t *mu,
                       pthread_cond_t *cv, uint64_t until_ns);

/* Record a fatal error (first one wins), fail the apps, wake waiters. */
void dt__node_set_fatal(dt_node *n, dt_err err, const char *fmt, ...)
    DT_PRINTF(3, 4);
/* The fatal error, with its message recorded for dt_errmsg(); DT_OK if none. */
dt_err dt__node_check(dt_node *n);
/* The fatal error and its message (copied into msg), DT_OK if none. */
dt_err dt__node_fatal(dt_node *n, char *msg, size_t cap);

/*
 * The rank a launcher gave this process (mpirun, srun, a Kubernetes
 * Indexed Job), from the one list of their variables (config.c): *rank and
 * *size (0 when that launcher says no size), and *var, the variable the
 * rank came from (NULL, with *rank -1, when no launcher set one). A value
 * that is not a number, or a rank not below the size, is a DT_ECONFIG
 * naming the variable.
 */
dt_err dt__launcher_rank(int *rank, int *size, const char **var);
/* The variables that say how this node reaches and is reached, whatever
 * its role: DMLC_INTERFACE, DMLC_NODE_HOST, DMLC_PORT, PS_VERBOSE and
 * DT_CONNECT_TIMEOUT, each checked, into cfg. */
dt_err dt__node_config_local(dt_node_config *cfg);

/*
 * The MXNet start-up rule, without its exit: start the node that the
 * DMLC_* variables describe. A worker's node comes back in *out. A
 * scheduler or server serves its role until the job ends and is stopped;
 * *served is then 1 and the result is how serving ended (the caller, a
 * public entry point, exits: see dt__exit_served). No DMLC_ROLE and no
 * DMLC_PS_ROOT_URI: a single process, *out = NULL.
 */
dt_err dt__node_join_env(dt_node **out, int *served);
/* End a process that served its role: exit status 0, or 1 with err's
 * message on stderr. */
_Noreturn void dt__exit_served(dt_err err);

/*
 * A barrier that also tells the outcome of a step each member took before
 * it (mine, with msg when not DT_OK): every member gets DT_OK when all
 * brought DT_OK, else the first error brought, named after its node
 * ("worker 0: set_optimizer: ..."). So a refusal one worker met reaches
 * every worker as an error, and none waits for a step that never comes.
 */
dt_err dt__node_barrier_status(dt_node *n, int groups, dt_err mine,
                               const char *msg);

#endif
