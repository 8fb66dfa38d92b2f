/*
 * node_impl.h - the node object, private to core/: shared by its
 * services (node.c), the app registry (app.c), the start and stop
 * (lifecycle.c), the member's side (member.c) and the scheduler's
 * (scheduler.c). The layers above see a node only through core.h.
 *
 * Calls point one way: lifecycle.c -> member.c | scheduler.c -> node.c ->
 * app.c; watch.c (heartbeats) and link.c (PS_RESEND) are called from those
 * and hand a lost peer back to lifecycle.c / scheduler.c; config.c and
 * msg.c stand apart.
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

#include "common/util.h"
#include "core/core.h"
#include "core/msg.h"
#include "dtrain/node.h"
#include "net/sock.h"
#include "net/van.h"
#include "obs/obs.h"

/* An attached app instance. */
typedef struct dt__node_app {
	const dt__app_class *cls; /* NULL: free slot */
	dt__app_hooks hooks;
} dt__node_app;

typedef struct dt_sched dt_sched;
typedef struct dt_links dt_links;
typedef struct dt__reach dt__reach;

struct dt_node {
	dt_node_config cfg;
	dt_van *van;
	dt_role role;
	int id;   /* -1 until the table arrives */
	int rank; /* -1 until the table arrives */
	int num_servers;
	int num_workers;
	char host[DT_HOST_MAX];     /* advertised address */
	int port;                   /* listening port */
	char hostid[DT_HOSTID_MAX]; /* this host (dt__host_id) */
	char local[DT_LOCAL_MAX];   /* shared-memory endpoint, "" if none */

	/* By id, 1 + S + W entries; an elastic job's has a row for every
	 * worker up to DTRAIN_ELASTIC_MAX (elastic.c: dt__elastic_slots),
	 * the rows of workers that join filled in (mu) when they do. */
	dt_node_entry *table;
	int ntable;
	uint64_t wait_ns; /* DT_WAIT_TIMEOUT: a worker's wait for peers */
	dt_conn **peers;  /* by id; peers[0] is the scheduler */
	/* By id (atomic): the peer said BYE on its connection, without
	 * PS_RESEND's links: it finished, so that connection's close is its
	 * leaving, not a loss (peer_left, lifecycle.c). */
	uint8_t *said_bye;
	/* Connections to other workers made on demand (reach.c), NULL for
	 * a server; allocated with the table. */
	dt__reach *reach;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	int have_table; /* (mu) */
	/* The directory (directory.c): the job nodes on this host, the
	 * membership epoch when this node was assigned, and (mu) the
	 * LOOKUPs asked and the last answered, by tag. */
	int here;
	uint64_t assign_epoch;
	uint64_t dir_asked;
	uint64_t dir_answered;
	/* (mu) The last answer to a LOOKUP of hosts: its tag, range and
	 * numbers (dt__node_lookup_hosts takes them). */
	uint64_t hosts_tag;
	int hosts_first, hosts_count;
	uint32_t *hosts_v;
	int hosts_busy; /* a LOOKUP of hosts is under way (one at a time) */
	/* (mu) Workers' HELLOs that came before this node's assignment
	 * (a worker that got its own first dials at once): answered once
	 * the assignment is in (member.c). */
	struct dt__early_hello *early;
	int nearly, early_cap;
	int hello_acks;           /* (mu) HELLO_ACKs received */
	uint64_t barrier_done[8]; /* (mu) BARRIER_DONEs per group mask */
	uint64_t barrier_sent[8]; /* (mu) barriers entered per mask */
	/* (mu) the outcome the last BARRIER_DONE per mask carried: the
	 * first error a member brought to it (dt__node_barrier_status). */
	int barrier_err[8];
	char barrier_msg[8][256];
	/* The control tree (tree_barrier.c): the ASSIGN held this node's
	 * place (set before have_table); the place (NULL: barriers go to
	 * the scheduler; set once by the I/O thread, under mu, before
	 * have_table); and (mu) the open round per
	 * group mask: the arrivals counted in this node's subtree, which
	 * children's are in, and the first error among them. On the
	 * scheduler, tree_wait says the job uses a tree (scheduler.c). */
	int tree_wait;
	dt__tree_place *tree;
	uint64_t tree_arrived[8];
	uint8_t tree_in[8][DT_TREE_KIDS_MAX];
	int tree_err[8];
	char tree_msg[8][256];
	/* The end over the tree (tree_end.c, mu): the workers of this
	 * node's subtree that are done (its own stop and its children's
	 * WORKER_DONE counts), which children's came, whether the
	 * subtree's count went to the parent, and whether an ABORT or a
	 * TERMINATE was passed on to the children. */
	int tree_done;
	uint8_t tree_done_kid[DT_TREE_KIDS_MAX];
	int tree_done_sent;
	int tree_abort_fwd, tree_term_fwd;
	/* The end-of-job counters merged over the tree (tree_report.c): the
	 * children's merged reports so far (trep, its own lock) and (mu)
	 * how many children's came. */
	struct dt__trep *trep;
	int tree_reports;
	int terminated;      /* (mu) TERMINATE received */
	int stopping;        /* (mu) dt_node_stop in progress */
	dt_err fatal;        /* (mu) first fatal error, DT_OK if none */
	char fatal_msg[512]; /* (mu) */
	/* (mu) A worker lost a server for good (its apps' calls to it
	 * failed): it must not tell the scheduler it is done, since the
	 * servers' rounds would wait for its pushes forever. */
	char lost_server[64];

	/* Attached apps. Changed under mu; read without it by the I/O
	 * thread: a slot is live once its cls is published (release/acquire,
	 * app.c), and the rules in core.h (attach before the range's
	 * messages, detach after) keep its hooks from changing under a
	 * reader. */
	dt__node_app apps[DT__MAX_APPS];
	unsigned started; /* registry classes started on this node, by bit */
	dt_sched *sched;  /* scheduler state, NULL on other roles */

	/* Heartbeats (watch.c): PS_HEARTBEAT_INTERVAL and _TIMEOUT, the
	 * member's connection to the scheduler (set once, when made), and
	 * the watching thread; DTRAIN_STATS_INTERVAL, its counters' line
	 * with PS_VERBOSE=1. */
	uint64_t hb_interval_ns, hb_timeout_ns, stats_interval_ns;
	dt_conn *root;
	struct dt_watch *watch;

	/* The idle connection to the scheduler over the control tree
	 * (root.c; all under mu): whether it is closed when idle, the
	 * lookups holding it, and a dial under way. */
	int root_park, root_users, root_dialing;
	/* A large job's parked join (member.c; all under mu): 1 once the
	 * scheduler said JOIN_PARK (its ticket kept), 2 once it called back
	 * with that ticket. */
	int join_parked;
	uint8_t join_ticket[DT_JOIN_TICKET];

	/* PS_RESEND (link.c): the settings, and the links once the table is
	 * known (NULL without PS_RESEND=1). */
	int rs_on, rs_drop;
	unsigned rs_cut; /* DT_CUT_EVERY */
	uint64_t rs_timeout_ns, rs_seed, rs_reset_ns, rs_window_ns;
	/* Recovery (DTRAIN_RECOVER, DT_RESTART_TIMEOUT): a lost server or
	 * worker may come back as a new process (scheduler.c, member.c). */
	int recover;
	uint64_t restart_ns;
	int rejoined; /* this process took over a lost node's place */
	uint64_t gen; /* how many processes had its place before (HELLO) */
	dt_links *links;
	/* Elastic training (elastic.c, DTRAIN_ELASTIC=1): the bounds on the
	 * number of workers, and the membership - its epoch and the node
	 * ids of the live workers, ascending (mu). el_ids NULL: epoch 0,
	 * every worker of the table. el_gone: the node the last change
	 * removed. */
	int elastic, el_min, el_max;
	uint64_t el_epoch;
	int *el_ids;
	int el_n;
	int el_gone;
	/* Growing: this process joined the running job (its ASSIGN said
	 * so; set before have_table), and (mu) how many started workers the
	 * scheduler says wait to join at the members' next commit (GROW),
	 * and how many have asked to join, ready or not (GROW arg2). */
	int el_joiner;
	int el_waiting;
	int el_announced;
	/* Below the minimum (elastic.c): how long the scheduler waits for
	 * workers to join when fewer than el_min remain
	 * (DTRAIN_ELASTIC_TIMEOUT), and on a member (mu) until when the
	 * scheduler said it holds the membership back for them (0: it does
	 * not), which stretches the member's wait for its next membership. */
	uint64_t el_timeout_ns;
	uint64_t el_hold_until;
	/* (mu) The membership this worker's program computes in: the last
	 * one it took (dt_elastic_restore), named by its pushes to servers. */
	uint64_t el_taken;

	/* Observability (report.c): frame counters by node id (1 + S + W,
	 * from the start; relaxed atomics), whether this node owns the
	 * process's timeline buffer, its clock's offset to the scheduler's,
	 * the CLOCK answers (mu), and the scheduler's report state. */
	dt__peer_ctr *ctr;
	int tracing, member_counted;
	uint64_t start_ns; /* dt_node_start */
	int64_t clock_off;
	int64_t clock_skew; /* DT_CLOCK_SKEW_MS: a test's other-host clock */
	uint64_t clk_t0, clk_ts, clk_t2; /* (mu) */
	int clk_n;                       /* (mu) */
	struct dt_report *report;
};

/* A node's role and rank follow from its id (dt__msg_place): a member
 * reads them from here rather than from its table, whose rows it writes
 * only when it learns an entry, so that rows of nodes it never hears of
 * cost address space and not memory. */
static inline dt_role
dt__id_role(const dt_node *n, int id)
{
	dt_role role;
	int rank;

	dt__msg_place(id, n->num_servers, &role, &rank);
	return role;
}

static inline int
dt__id_rank(const dt_node *n, int id)
{
	dt_role role;
	int rank;

	dt__msg_place(id, n->num_servers, &role, &rank);
	return rank;
}

/* The attached app owning cmd, or NULL. */
const dt__node_app *dt__node_app_of(const dt_node *n, unsigned cmd);
/* Tell every attached app that peer (or the job, -1) failed. */
void dt__node_fail_apps(dt_node *n, int peer, dt_err err);
/* A worker lost server `peer` for good, or found it gone when sending:
 * remembered (lost_server) so that dt_node_stop does not say the worker
 * is done. Nothing for other roles and peers. */
void dt__node_note_lost_server(dt_node *n, int peer);
/* Start the registered classes meant for this node's role / stop them. */
dt_err dt__apps_start(dt_node *n);
void dt__apps_stop(dt_node *n);
/* Tell the apps that peer restarted (on_peer_restart). */
void dt__node_restart_apps(dt_node *n, int peer);
/* Whether peer's link has no connection now (or was given up on). */
int dt__link_down(dt_node *n, int peer);

/*
 * Wait on n->cv, under n->mu, until done(n, arg) holds; fail with the
 * node's fatal error, or DT_ETIMEDOUT ("timed out waiting for <what>") once
 * deadline_ns (dt__now_ns() clock, 0 = none) passes.
 */
dt_err dt__node_wait(dt_node *n, int (*done)(dt_node *, const void *),
                     const void *arg, uint64_t deadline_ns, const char *what);

/* Log a TEXT message from node peer (which the connection, never the
 * header, names) as one printable line. */
void dt__node_log_text(dt_node *n, int peer, const dt_msg *m);

/* Wait until *flag (an int, or a uint64_t if is64) reaches want. */
dt_err dt__node_wait_count(dt_node *n, const void *flag, int is64,
                           uint64_t want, uint64_t deadline_ns,
                           const char *what);

/*
 * The directory (directory.c; the design is at its top).
 */
/* (member, I/O thread) ASSIGN: the table from the scheduler's reply, and
 * in a job with a control tree the node's place in it (*place, the
 * caller's to free or publish; NULL without one) and its parent's entry
 * (written into the table). */
dt_err dt__dir_on_assign(dt_node *n, const dt_msg *m, dt__tree_place **place);
/* (member, I/O thread) The scheduler's answer to a LOOKUP. */
void dt__dir_on_answer(dt_node *n, dt_conn *c, const dt_msg *m);
/* (member) A pushed address of node id: kept unless one is known. */
void dt__dir_learn(dt_node *n, int id, const char *host, int port, int pid,
                   const char *hostid, const char *local);
/* (scheduler, mu held or the table settled) here[id]: how many seated
 * servers and workers share node id's host, for every id at once. */
dt_err dt__dir_host_counts(dt_node *n, int *here);
/* (scheduler, mu held) The same for node id alone: a scan of the table,
 * for one node joining a running job or taking a lost one's place. */
int dt__dir_host_count(dt_node *n, int id);
/* (scheduler) Send node id its ASSIGN, on c (NULL: by node id), here
 * its count of nodes on its host (0: counted now, a scan); arg1
 * and arg2 ride in the header (a joiner of a running elastic job, the
 * count of restarts of the place it takes). */
dt_err dt__dir_send_assign(dt_node *n, dt_conn *c, int id, int here,
                           uint64_t arg1, uint64_t arg2);
/* (scheduler, I/O thread) A member's LOOKUP: answered from the table. */
void dt__dir_sched_on_lookup(dt_node *n, dt_conn *c, const dt_msg *m);
/* (scheduler, mu held) An entry of the table was written: the answers
 * kept for LOOKUPs of hosts are stale. */
void dt__dir_sched_changed(dt_node *n);

/*
 * Connections on demand (reach.c; the design is at its top). A worker
 * dials another worker only when it first sends to it.
 */
/* With the table (a no-op for a server outside a control tree); free. */
dt_err dt__reach_create(dt_node *n);
void dt__reach_free(dt_node *n);
/* Whether the connection to node id is made on demand: a worker's to
 * another worker, a server's to a server next to it in the tree. */
int dt__reach_lazy(const dt_node *n, int id);
/* Make sure node id has a connection (dial it, say HELLO and wait for
 * HELLO_ACK, by DT_CONNECT_TIMEOUT). DT_OK once peers[id] is set; an error
 * naming the peer otherwise. Not from the I/O thread. */
dt_err dt__reach_peer(dt_node *n, int id);
/* (I/O thread) A HELLO from worker id on c, a connection that has not
 * said who it is, whose link has never had a connection: 1 if c becomes
 * id's (answered with HELLO_ACK, named and published), 0 if this
 * node's own dial wins (the caller closes c), -1 if the caller goes its
 * usual way (not a worker's first connection). */
int dt__reach_on_hello(dt_node *n, dt_conn *c, int id);
/* (I/O thread) A HELLO_ACK on c before c said who it is: 1 if it answers a
 * dial of reach.c's (taken), 0 if not. */
int dt__reach_on_ack(dt_node *n, dt_conn *c, const dt_msg *m);
/* (I/O thread) c closed before it said who it is. */
void dt__reach_on_close(dt_node *n, dt_conn *c);
/*
 * Barriers over the control tree (tree_barrier.c; the design is at its
 * top).
 */
/*
 * A member's connection to the scheduler over the control tree (root.c;
 * the design is at its top).
 */
/* (member, its start) Once the start-up barrier passed: close the
 * connection to the scheduler if this node does not need it (a worker
 * whose tree parent is a node), and dial it again when needed from here
 * on. A no-op otherwise. */
void dt__root_park(dt_node *n);
/* (member, its start) A worker called back by the scheduler after a
 * parked join, once its edge to its tree parent is up: tells the
 * scheduler (JOIN_PARK) and, unless it keeps it as dt__root_park would,
 * closes that connection now rather than after the start-up barrier. */
void dt__root_park_joined(dt_node *n);
/* (member, not the I/O thread) Hold the connection to the scheduler for a
 * request and its answer, dialling it if it was closed while idle; each
 * DT_OK is matched by a dt__root_release, which closes it again once no
 * one holds it. An error names the dial that failed. */
dt_err dt__root_hold(dt_node *n);
void dt__root_release(dt_node *n);
/* (member) Dial the scheduler again if its connection was closed while
 * idle, and leave it open (a message that expects no answer). */
dt_err dt__root_reopen(dt_node *n);
/* (scheduler, I/O thread) A HELLO from worker id on c, a connection that
 * has not said who it is: 1 if c becomes id's connection again (a worker
 * that closed its idle one and needs the scheduler), 0 if refused. */
int dt__sched_root_hello(dt_node *n, dt_conn *c, int id);

/* (member, I/O thread) This node's place, from its ASSIGN: published
 * (n->tree owns p from here). */
void dt__tree_set_place(dt_node *n, dt__tree_place *p);
/* (member) In a job with a control tree, make sure the connection to the
 * parent is up (DT_CONNECT_TIMEOUT). */
dt_err dt__tree_join(dt_node *n);
/* Whether node id is this node's parent or child in the tree. */
int dt__tree_edge(const dt_node *n, int id);
/* (member) This node's arrival at a barrier over mask, with its outcome
 * (mine, msg: dt__node_barrier_status). */
dt_err dt__tree_arrive(dt_node *n, int mask, dt_err mine, const char *msg);
/* (member, I/O thread) A child's aggregated BARRIER. */
void dt__tree_on_barrier(dt_node *n, dt_conn *c, const dt_msg *m);
/* (member, I/O thread) BARRIER_DONE: 1 if from the tree parent (then
 * forwarded to the children whose subtree is in its group), 0 if not. */
int dt__tree_on_done(dt_node *n, dt_conn *c, const dt_msg *m);
/* Child id's place among this node's tree children, -1 if not one. */
int dt__tree_child(const dt_node *n, int id);
/* Tell the tree parent (TREE_LOST) that child lost was lost: reason
 * DT_TREE_LOST_SILENT after silent_ns, or DT_TREE_LOST_CLOSED. From any
 * thread but the I/O thread's wait; an error if it could not be sent. */
dt_err dt__tree_report_lost(dt_node *n, int lost, int reason,
                            uint64_t silent_ns);
/* (member, I/O thread) TREE_LOST from a child: passed on to the parent. */
void dt__tree_on_lost(dt_node *n, dt_conn *c, const dt_msg *m);
/*
 * The end of a job over the control tree (tree_end.c; the design is at
 * its top).
 */
/* (member, I/O thread) ABORT from the scheduler or the tree parent:
 * passed on to the children, once, before the node fails with its text.
 * 0 if it came from neither (ignored). */
int dt__tree_on_abort(dt_node *n, dt_conn *c, const dt_msg *m);
/* (member, I/O thread) TERMINATE from the scheduler or the tree parent:
 * passed on to the children whose subtree holds servers; 0 if from
 * neither (ignored). The caller sets terminated. */
int dt__tree_on_terminate(dt_node *n, dt_conn *c);
/* (member, I/O thread) A child's WORKER_DONE: its subtree's workers are
 * all done. */
void dt__tree_on_worker_done(dt_node *n, dt_conn *c, const dt_msg *m);
/* (worker, its stop) This worker is done: once every worker of its
 * subtree is, one WORKER_DONE with their count goes to the parent. Waits
 * for that (DT_WAIT_TIMEOUT); DT_OK at once without a tree. */
dt_err dt__tree_leave(dt_node *n);
/* Whether child id said its subtree's workers are done. */
int dt__tree_child_done(dt_node *n, int id);

/*
 * The end-of-job counters merged up the control tree (tree_report.c; the
 * design is at its top), with DTRAIN_STATS or DTRAIN_STATS_JSON.
 */
/* Whether the end-of-job counters are asked for (DTRAIN_STATS=1 or
 * DTRAIN_STATS_JSON). */
int dt__report_stats_on(void);
/* REPORT's kind (arg0) of a merged report: report.c has kinds 1 to 3. */
#define DT_REPORT_MERGED 4
/* (member, I/O thread) A child's merged REPORT (kind 4). */
void dt__tree_on_report(dt_node *n, dt_conn *c, const dt_msg *m);
/* (member) This node's counters and its children's merged reports (a
 * child without one named missing) in one REPORT to the tree parent. A
 * server first waits for its children's (a bounded wait). */
dt_err dt__tree_report_send(dt_node *n);
/* (member, its free) The children's reports kept. */
void dt__tree_report_free(dt_node *n);
/* (scheduler) Whether the job has a control tree; whether peer is a child
 * of the scheduler in it; name missing in m the scheduler's children
 * whose from[id] is 0 (from: count entries by node id). */
struct dt__merged;
int dt__sched_tree_job(dt_node *n);
int dt__sched_tree_root_child(dt_node *n, int peer);
void dt__sched_tree_missing(dt_node *n, struct dt__merged *m,
                            const uint8_t *from, int count);

/* With PS_RESEND: whether peer's link has never had a connection (it is
 * then made on demand; afterwards the links redial it), and where a
 * restarted peer is (0: the table's address). */
int dt__link_fresh(dt_node *n, int peer);
int dt__link_addr(dt_node *n, int peer, char *host, size_t hcap, int *port,
                  char *local, size_t lcap);
/* The first connection of peer's link is up (reach.c). */
void dt__link_note_conn(dt_node *n, int peer);

/* Member side (member.c): join the cluster; a control message. */
dt_err dt__member_start(dt_node *n);
void dt__member_on_msg(dt_node *n, dt_conn *c, dt_msg *m);
/* A connection closed before it was named: a HELLO it brought early is
 * forgotten. */
void dt__member_forget_hello(dt_node *n, dt_conn *c);

/* Heartbeats (watch.c): read PS_HEARTBEAT_*; start the thread that sends
 * them and judges the peers' silence (after the van started); stop it
 * (before the van is destroyed). */
dt_err dt__watch_config(uint64_t *interval_ns, uint64_t *timeout_ns);
/* DTRAIN_STATS_INTERVAL (seconds, default 10; 0: no counters' line). */
dt_err dt__watch_stats_config(uint64_t *interval_ns);
dt_err dt__watch_start(dt_node *n);
void dt__watch_stop(dt_node *n);
/* Free it (after the van: the I/O thread reads it, dt__watch_root_silent). */
void dt__watch_free(dt_node *n);
/* 1 with why = "scheduler (pid 4242 on host h) has sent nothing for 3.1 s"
 * when a member's scheduler has missed two heartbeats: the likelier cause
 * of a peer's loss than the peer. */
int dt__watch_root_silent(dt_node *n, char *why, size_t cap);
/* "server 1 (pid 4242 on host h2)", from the table (or, before it, the
 * address of c, which may be NULL then). */
void dt__watch_describe(dt_node *n, int id, dt_conn *c, char *out, size_t cap);
/* A peer's connection closed while the scheduler is heard: tell the apps
 * a moment later (the heartbeat thread), unless the scheduler's abort has
 * come by then with the cause. 0: no heartbeat thread, tell them now. */
int dt__watch_defer_loss(dt_node *n, int peer);
/* (member) The tree parent's connection closed without BYE while the job
 * runs: unless the scheduler's ABORT or TERMINATE comes within
 * PS_HEARTBEAT_TIMEOUT, the node ends naming it (a frozen scheduler's
 * news, down the tree). A no-op for another peer. */
void dt__watch_parent_gone(dt_node *n, int peer);

/* PS_RESEND (link.c; the whole design is at its top). */
dt_err dt__link_config(dt_node *n);
/* Once the table is known; a no-op without PS_RESEND=1. */
dt_err dt__link_create(dt_node *n);
/* Stop the link thread (before the van goes); free (after). */
void dt__link_stop(dt_node *n);
void dt__link_destroy(dt_node *n);
/* 1 if a frame of cmd goes through the links. */
int dt__link_wants(const dt_node *n, unsigned cmd);
/* Number, keep and send a message to node id. stable: the payload stays
 * untouched until an answer to it comes (kept by reference). */
dt_err dt__link_send(dt_node *n, int id, dt_msg_hdr *h, const void *meta,
                     uint32_t meta_len, const struct iovec *iov, int iovcnt,
                     int stable);
/* Judge a frame from c: 1 deliver (the link block is taken off *h and
 * *meta), 0 drop it (a duplicate, a gap, an ACK, PS_DROP_MSG), -1 a
 * protocol error (dt_errmsg). Frames without DT_F_LINK: 1. tentative: its
 * payload is still to come; it counts only at dt__link_commit. */
int dt__link_judge(dt_node *n, dt_conn *c, dt_msg_hdr *h, const uint8_t **meta,
                   int tentative);
/* The payload of the frame c's judge let through tentatively is all in:
 * 1 if it counts (deliver it), 0 if it came whole on another connection
 * first. */
int dt__link_commit(dt_node *n, dt_conn *c);
/* c to peer closed: 1 if the links handle it (a reconnection is awaited,
 * or c was an old connection already replaced), 0 for the usual way. */
int dt__link_on_close(dt_node *n, dt_conn *c, int peer);
/* A HELLO from peer on c: adopt c as its connection (1), or 0 if the links
 * do not apply (the caller goes the usual way). */
int dt__link_adopt(dt_node *n, dt_conn *c, int peer);
/* Recovery: whether gen (a HELLO's or NODE_UPDATE's count of restarts)
 * names a process newer than the one peer's link knows; it is then the
 * known one. The caller starts the link again (dt__link_restart_peer). */
int dt__link_newer_gen(dt_node *n, int peer, uint64_t gen);
/* A restarted peer's address, once its link has started again (local:
 * its shared-memory endpoint if this node may use it, else ""). */
void dt__link_set_addr(dt_node *n, int peer, const char *host, int port,
                       const char *local);
/* [p, p + bytes) is about to change: what is kept by reference there is
 * copied first (core.h: dt__node_before_write). */
void dt__link_unpin(dt_node *n, const void *p, size_t bytes);
/* The peer said BYE: it stopped cleanly; its close is expected. */
void dt__link_bye_from(dt_node *n, int peer);
/* peer came back as a new process (on c, or at host:port to dial): its
 * link starts again from nothing; what was kept for the old one is
 * dropped (the apps replay what matters). 0 without links. */
int dt__link_restart_peer(dt_node *n, int peer, dt_conn *c, const char *host,
                          int port, const char *local);

/* This host's id: the kernel's boot id and this process's network
 * namespace (DT_HOST_ID overrides it, for tests); "" if unknown. Two
 * processes with the same id can share memory and reach each other's
 * abstract Unix sockets. */
void dt__host_id(char *out, size_t cap);
/* The endpoint to dial a peer of (hostid, local) through shared memory:
 * local when the peer runs on this node's host, else "". */
const char *dt__node_local_of(const dt_node *n, const char *hostid,
                              const char *local);
/* Whether peer's link is over (its BYE came, or it was lost), or there
 * are no links: 1. */
int dt__link_ended(dt_node *n, int peer);
/* The node failed: keep nothing more (before failing the apps' waits). */
void dt__link_clear(dt_node *n);
/* A clean stop: wait (until deadline_ns) for what this node sent to be
 * acknowledged, then say BYE to every peer it talked to and wait for those
 * to be acknowledged too. */
void dt__link_finish(dt_node *n, uint64_t deadline_ns);

/* A peer is lost for good (why: "connection closed", ...): what a closed
 * connection means without PS_RESEND (lifecycle.c, scheduler.c). */
void dt__node_peer_lost(dt_node *n, int peer, const char *why);
void dt__sched_peer_lost(dt_node *n, int peer, const char *why);

/* Scheduler side (scheduler.c; its heartbeats in sched_watch.c). */
/* (n->mu held) What the scheduler's heartbeats go to, their node ids in
 * ids: once ranks are assigned (*judge = 1), every node with the star,
 * its children over the control tree (NULL for a node that has left);
 * before, the joiners' connections (*judge = 0, ids 0). The count. */
int dt__sched_watch_list(dt_node *n, dt_conn **out, int *ids, int cap,
                         int *judge);
/* Count the heartbeats received by sender from the end of the start-up
 * barrier on (start: its caller; note: the I/O thread), and log how many
 * came, a second and from whom, at the end (log). */
void dt__sched_hb_start(dt_node *n);
void dt__sched_hb_note(dt_node *n, int peer);
void dt__sched_hb_log(dt_node *n);
/* (I/O thread) TREE_LOST from a child of the scheduler: end the job,
 * naming the lost node (refused, closing c, unless the node hangs under
 * that child). */
void dt__sched_on_tree_lost(dt_node *n, dt_conn *c, const dt_msg *m);
/* (n->mu held) The connections of the processes held for a lost node's
 * place (recovery): they get heartbeats but are not judged by them, since
 * DT_RESTART_TIMEOUT bounds their wait. Returns the count. */
int dt__sched_held_list(dt_node *n, dt_conn **out, int cap);
/* Abort the job, telling every node why (reason names the culprit);
 * _lost names the node that was lost (its children get the ABORT over
 * the control tree too: tree_end.c), -1 if none. */
void dt__sched_abort(dt_node *n, const char *reason);
void dt__sched_abort_lost(dt_node *n, const char *reason, int lost);
/* Over the control tree, once the start-up barrier passed (tree_end.c):
 * the ABORT to the scheduler's children, and to the lost node and its
 * children (lost -1: none); 0 without a tree, when the caller sends it
 * to every node. */
int dt__sched_tree_abort(dt_node *n, const char *reason, int lost);
/* (I/O thread) WORKER_DONE from a child of the scheduler: its subtree's
 * count; 1 if taken over the tree, 0 without one. */
int dt__sched_tree_done(dt_node *n, dt_conn *c, const dt_msg *m);
/* TERMINATE to the scheduler's children whose subtree holds servers; 0
 * without a tree (the caller sends it to every server). */
int dt__sched_tree_terminate(dt_node *n);
/* Whether a closed connection of node peer is left to its tree parent to
 * report (TREE_LOST): a node not a child of the scheduler once the job
 * runs over a tree. */
int dt__sched_tree_quiet(dt_node *n, int peer);
/* After an abort over the tree, before the scheduler goes: wait until
 * every node but the lost one closed its connection (they close once
 * the ABORT reached them), for up to PS_HEARTBEAT_TIMEOUT (10 s without
 * heartbeats). A node that saw the scheduler go first would end naming
 * the scheduler, not the cause. */
void dt__sched_tree_linger(dt_node *n);
/* Allocate the scheduler's state; before the I/O thread starts. */
dt_err dt__sched_create(dt_node *n);
dt_err dt__sched_start(dt_node *n);
dt_err dt__sched_serve(dt_node *n);
void dt__sched_on_msg(dt_node *n, dt_conn *c, dt_msg *m);
void dt__sched_on_close(dt_node *n, dt_conn *c, dt_err why);
void dt__sched_free(dt_node *n);

/* Elastic training (elastic.c; the design is at its top). */
/* Read DTRAIN_ELASTIC, _MIN and _MAX; refuse a job with servers. */
dt_err dt__elastic_config(dt_node *n);
/* (mu held) The live workers now: el_n, or every worker. */
int dt__elastic_live(dt_node *n);
/* The worker ids an elastic job's tables hold room for: DTRAIN_ELASTIC_MAX
 * (workers that join later take the ids after the first W), else W. Every
 * array by node id is 1 + S + this long. */
int dt__elastic_slots(const dt_node *n);
/* Whether worker id is in the membership this node knows (mu not held);
 * 1 outside an elastic job. */
int dt__elastic_member(dt_node *n, int id);
/* Scheduler: worker peer was lost (lost = 1) or left on schedule: 1 if
 * the elastic membership took it (the job goes on or was aborted for
 * falling under the minimum), 0 if this is no elastic job's worker. */
int dt__elastic_sched_remove(dt_node *n, int peer, const char *why, int lost);
/* Member: a MEMBERSHIP from the scheduler. */
void dt__elastic_member_on_msg(dt_node *n, dt_conn *c, const dt_msg *m);
/* Member: a GROW from the scheduler (how many workers wait to join), or
 * a NODE_UPDATE naming a worker that joins (its address). */
void dt__elastic_member_on_grow(dt_node *n, dt_conn *c, const dt_msg *m);
void dt__elastic_member_on_update(dt_node *n, dt_conn *c, const dt_msg *m);
/* A worker that joined a running job, not yet in the membership: its
 * barrier over the workers says it is ready (its communicator listens)
 * and waits until a membership takes it in. */
dt_err dt__elastic_joiner_ready(dt_node *n);
void dt__elastic_free(dt_node *n);

/* Observability (report.c; the design is at its top). */
dt_err dt__report_member_begin(dt_node *n);
void dt__report_member_end(dt_node *n);
dt_err dt__report_clock_sync(dt_node *n);
void dt__report_on_clock(dt_node *n, dt_conn *c, const dt_msg *m);
dt_err dt__report_member_send(dt_node *n);
dt_err dt__report_sched_open(dt_node *n);
void dt__report_sched_names(dt_node *n);
/* A span of the scheduler's own, on its track tid (DT_TID_*). */
void dt__report_sched_event(dt_node *n, int kind, int tid, uint64_t t0,
                            uint64_t key);
/* A REPORT (or, below, a CLOCK request) on the scheduler, from c, a joined
 * node's connection (the caller checked); CLOCK answers on a member. */
void dt__report_on_msg(dt_node *n, dt_conn *c, const dt_msg *m);
void dt__report_sched_finish(dt_node *n, const char *outcome);

#endif
