/*
 * sched_impl.h - the scheduler's state, shared by its files:
 * scheduler.c (admission, ranks, barriers, the end, losses), rejoin.c
 * (recovery: a new process taking a lost node's place) and sched_watch.c
 * (its heartbeats, and a loss reported up the control tree). Private to them;
 * every field of dt_sched is guarded by node->mu.
 */
#ifndef DT_CORE_SCHED_IMPL_H
#define DT_CORE_SCHED_IMPL_H

#include "core/msg.h"
#include "core/node_impl.h"

typedef struct joiner {
	dt_conn *conn;
	dt_role role;
	int want; /* requested rank, -1 for none */
	char host[DT_HOST_MAX];
	int port;
	int pid;
	char hostid[DT_HOSTID_MAX];
	char local[DT_LOCAL_MAX];
	int rank;
	char token[DT_NODE_TOKEN_MAX]; /* its place token, "" if none */
	uint64_t until;                /* held (recovery): refused after this */
	/* The parked join (join_park.c): the ticket its call back carries,
	 * and whether it was parked (its conn is then NULL). */
	uint8_t ticket[DT_JOIN_TICKET];
	int parked;
} joiner;

struct dt_sched {
	int expected;
	joiner *j;
	int nj;
	int nj_servers; /* of them servers (the rest workers) */
	int assigned;
	/* An elastic job past its start-up barrier, the workers held for it
	 * admitted (admit_early): a worker that joins now is seated at once.
	 * Before, it waits with them, so that no member hears of it before
	 * the member has its table. */
	int running;
	int *left; /* by id: worker done, or server closed */
	int workers_done;
	int servers_closed;
	uint64_t root_redials; /* (mu) workers that dialled again (root.c) */
	int ending;            /* TERMINATE sent */
	uint64_t arrived[8];   /* barrier arrivals per group mask */
	uint64_t passed[8];    /* barriers passed per group mask */
	uint64_t first_ns[8];  /* the round's first arrival (the timeline) */
	/* The first error a member brought to the round per mask, handed to
	 * every member with BARRIER_DONE. */
	int round_err[8];
	char round_msg[8][256];
	/* The control tree (tree.c; count 0: none, every node's BARRIER
	 * comes here): the root's children bring their subtrees' arrivals,
	 * and per mask tree_in says which of them did in the open round.
	 * msgs: the BARRIER messages the open round took, per mask. */
	dt__tree tree;
	long tree_min, tree_arity; /* DTRAIN_CTRL_TREE_MIN, _ARITY */
	uint8_t tree_in[8][DT_TREE_ARITY_MAX];
	uint64_t msgs[8];
	/* (mu) By id, the scheduler's children whose WORKER_DONE (their
	 * subtree's count) came (tree_end.c); NULL without a tree. */
	uint8_t *tree_done;
	/* (mu) An abort went down the tree, naming node abort_lost (-1:
	 * none): the scheduler stays until the nodes' connections close. */
	int tree_aborted, abort_lost;
	/* (atomic) The end's messages at the scheduler: the WORKER_DONEs
	 * and REPORTs it received, the TERMINATEs it sent (logged at the
	 * end: with the tree, a few per child rather than per node). */
	uint64_t end_done, end_reports, end_term;
	/* By id, the number of each node's host for LOOKUPs of hosts
	 * (directory.c), made at the first one; dropped (NULL) whenever an
	 * entry is written (dt__sched_seat, a restart). (n->mu) */
	uint32_t *hostno;
	/* Elastic jobs: by mask * (1 + S + W) + id, whether that node is in
	 * the open round, so a worker leaving the membership takes its own
	 * arrival out (elastic.c); NULL otherwise. */
	uint8_t *in_round;
	/* Recovery (DTRAIN_RECOVER): by id, when the node was lost (0: up),
	 * and how many processes have taken its place. */
	uint64_t *down_ns;
	int *restarts;
	/* New processes asking for a place no loss has freed yet: the old
	 * process's connection may close only after its successor asks
	 * (the kernel frees a killed process's sockets late under load).
	 * They wait until a loss is noticed, or DT_RESTART_TIMEOUT. */
	joiner *held;
	int nheld;
	/* By id: the place token each node presented when it first joined
	 * (DTRAIN_NODE_TOKEN, "" if none). Only a process presenting a lost
	 * node's token takes its place: holding the job's secret is not
	 * enough. Never sent to anyone. */
	char (*token)[DT_NODE_TOKEN_MAX];
	int aborting; /* (n->mu) abort_job has begun */
	/* The parked join of a large job (join_park.c): on or off, the most
	 * called-back connections open at once (DTRAIN_JOIN_WINDOW) and the
	 * threads that call back; by id, each parked worker's ticket,
	 * whether its called-back connection is open and counted in the
	 * window (park_held of them), and whether the worker said it closes
	 * that connection (JOIN_PARK): then its close is no loss. The next
	 * id to call back; the parked connections still open (the start
	 * waits for their closes: a worker closes its own once it has read
	 * JOIN_PARK, so it knows its ticket before it is called back). */
	int park, park_pending;
	long park_window, park_dialers;
	uint8_t (*park_ticket)[DT_JOIN_TICKET];
	uint8_t *park_open, *park_idle;
	int park_held, park_next;
	/* Heartbeats received (sched_watch.c), from the end of the start-up
	 * barrier: by sender (hb_n of them; NULL before), all of them, and
	 * when the count began. */
	uint32_t *hb_from;
	int hb_n;
	uint64_t hb_total, hb_since;
	/* Elastic jobs that grow (elastic.c): the workers counted at the
	 * end (the first W and every one the membership took in since), the
	 * next worker id never given, and by id a worker that joined the
	 * running job but is not a member yet: 1 admitted, 2 ready (its
	 * communicator listens). grow_want: workers the members' rank 0
	 * asked for at a commit and not given yet; grow_exact: wait until
	 * that many are ready (a schedule's replay). */
	int workers_total;
	int next_worker;
	uint8_t *joining;
	int grow_want, grow_exact;
	/* Below the minimum (elastic.c): since when fewer than
	 * DTRAIN_ELASTIC_MIN workers are live (0: not below it), and the
	 * last change that took it there (the worker gone, and whether it
	 * was lost), which the membership that ends the wait carries. */
	uint64_t below_since;
	int below_gone, below_lost;
};

/* Release barrier mask's round if every member has arrived (mu not
 * held): after a worker leaves an elastic job, the round may be whole. */
void dt__sched_barrier_recheck(dt_node *n, int mask);
/* (I/O thread) A node's BARRIER, or a tree child's count (sched_barrier.c). */
void dt__sched_on_barrier(dt_node *n, dt_conn *c, dt_msg *m);

/* Tell the process on c why it is refused or why the job ends (ABORT). */
void dt__sched_send_abort(dt_node *n, dt_conn *c, const char *reason);

/* rejoin.c. A process asking to join the running job (recovery): given
 * the place of the lost node whose place token it presents, held until
 * that node's loss is noticed, or refused (ABORT, then closed). */
void dt__sched_rejoin(dt_node *n, dt_conn *c, const joiner *j);
/* (n->mu held) node id's table row, token and connection from j */
void dt__sched_seat(dt_node *n, const joiner *j, dt_conn *c, int id,
                    dt_role role, int rank);
/* A loss was noticed: the held processes whose place is free take it. */
void dt__sched_retry_held(dt_node *n);
/* Refuse the held processes whose DT_RESTART_TIMEOUT is over. */
void dt__sched_refuse_overdue(dt_node *n);
/* (mu held) Whether a held process's wait is over. */
int dt__sched_held_overdue(dt_node *n);

/* elastic.c. A worker asks to join an elastic job that is running (mu
 * not held): given the lowest worker id never used, its table, and every
 * member its address (NODE_UPDATE); it waits for the members' next commit
 * to take it in. Refused (ABORT, then closed) when the job has
 * DTRAIN_ELASTIC_MAX workers, or every id up to it was used. */
void dt__elastic_sched_join(dt_node *n, dt_conn *c, const joiner *j);
/* (mu not held) Whether worker peer joined and waits to be taken in. */
int dt__elastic_sched_joining(dt_node *n, int peer);
/* A joining worker's BARRIER: it is ready; a member's GROW: take the
 * ready ones in (elastic.c). */
void dt__elastic_sched_ready(dt_node *n, int peer);
void dt__elastic_sched_grow(dt_node *n, int peer, const dt_msg *m);
/* The job ends: refuse the workers still waiting to join. */
void dt__elastic_sched_end(dt_node *n);
/* (mu held) Whether the job has been below DTRAIN_ELASTIC_MIN for
 * DTRAIN_ELASTIC_TIMEOUT; then dt__elastic_sched_check_min (mu not held)
 * ends it, naming the minimum and the time waited. */
int dt__elastic_sched_below_over(dt_node *n);
void dt__elastic_sched_check_min(dt_node *n);

/* join_park.c: the parked join (docs/scale.md). The settings, read when
 * the scheduler is made; whether worker j is parked (mu held: its
 * ticket made, its conn in j forgotten), then JOIN_PARK sent on c and
 * c left for the worker to close (mu not held); the assignments,
 * called back to the parked workers by a few threads, at most the
 * window's connections open at once (the others' on their own
 * connections first); a worker's JOIN_PARK (its tree edge is up); and a
 * closed connection's part in the window: 1 if its close is no loss. */
dt_err dt__sched_park_setup(dt_node *n);
int dt__sched_park_locked(dt_node *n, joiner *j, dt_conn *c);
void dt__sched_park_tell(dt_node *n, dt_conn *c, const joiner *j);
dt_err dt__sched_park_assign(dt_node *n, const int *here, int count);
void dt__sched_park_on_msg(dt_node *n, dt_conn *c, const dt_msg *m);
int dt__sched_park_closed(dt_node *n, int peer);
/* (I/O thread) A connection that is no member's closed: 1 if it was a
 * parked join's (then counted; the start may begin). */
int dt__sched_park_conn_closed(dt_node *n, dt_conn *c);
/* The job is aborted before every node joined: the parked workers are
 * called back with the ABORT (mu not held). */
void dt__sched_park_abort_joiners(dt_node *n, const char *reason);
/* (mu held) Whether worker id said it closes its connection (JOIN_PARK
 * with arg0 1) before the start-up barrier: it may dial again. */
int dt__sched_park_idle_locked(dt_node *n, int id);

#endif
