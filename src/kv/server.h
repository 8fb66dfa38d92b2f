/*
 * server.h - what a parameter server's files share: the server's state,
 * the answers every store kind sends (srv_reply.c), and the ops table of a
 * store kind.
 *
 * A server holds three kinds of store, each in its own file beside the
 * store it drives: dense keys (srv_dense.c), many-key requests (srv_many.c
 * over kstore.c) and row_sparse tables (rserver.c over rstore.c). The
 * router (server.c) hands each message to the kind it is for, and the
 * checkpoint writer (srv_ckpt.c) snapshots and loads them. Routing,
 * checkpoints, recovery and the checks of which store a key lives in loop
 * over the kinds' ops (srv_kinds) rather than naming them.
 *
 * Threads: all of it runs in the node's I/O thread (the checkpoint writer
 * thread only takes finished snapshots, under ck_mu).
 */
#ifndef DT_KV_SERVER_H
#define DT_KV_SERVER_H

#include <pthread.h>
#include <stdint.h>

#include "common/table.h"
#include "kv/kstore.h"
#include "kv/kv_impl.h"

/* The names the server's files share. A program that compiles the
 * server's sources into itself beside the library's copy (the fuzz
 * harness) defines DT_SRV to give them names of its own. */
#ifndef DT_SRV
#define DT_SRV(name) dt__srv_##name
#endif

/* (the short names the server's files use) */
#define srv_reply_val        DT_SRV(reply_val)
#define srv_reply_enc        DT_SRV(reply_enc)
#define srv_reply            DT_SRV(reply)
#define srv_reply_error      DT_SRV(reply_error)
#define srv_reply_held       DT_SRV(reply_held)
#define srv_resume           DT_SRV(resume)
#define srv_busy_part        DT_SRV(busy_part)
#define srv_busy             DT_SRV(busy)
#define srv_maybe_checkpoint DT_SRV(maybe_checkpoint)
#define srv_kinds            DT_SRV(kinds)
#define srv_dense_kind       DT_SRV(dense_kind)
#define srv_many_kind        DT_SRV(many_kind)
#define srv_rows_kind        DT_SRV(rows_kind)
#define srv_home_of          DT_SRV(home_of)
#define srv_on_many          DT_SRV(on_many)
#define srv_unpark_key       DT_SRV(unpark_key)
#define srv_on_row_init      DT_SRV(on_row_init)
#define srv_on_rows          DT_SRV(on_rows)
#define many_count           DT_SRV(many_count)
#define many_snap_bytes      DT_SRV(many_snap_bytes)
#define many_snapshot        DT_SRV(many_snapshot)
#define many_held            DT_SRV(many_held)
#define many_load            DT_SRV(many_load)
#define many_resume          DT_SRV(many_resume)
#define srv_keep             DT_SRV(keep)
#define srv_kept_free        DT_SRV(kept_free)
#define srv_single           DT_SRV(single)
#define srv_rx_lend          DT_SRV(rx_lend)
#define srv_ckpt_start       DT_SRV(ckpt_start)
#define srv_ckpt_stop        DT_SRV(ckpt_stop)
#define srv_on_checkpoint    DT_SRV(on_checkpoint)
#define srv_rejoin           DT_SRV(rejoin)
#define srv_round_size       DT_SRV(round_size)
#define srv_elastic_start    DT_SRV(elastic_start)
#define srv_elastic_free     DT_SRV(elastic_free)
#define srv_elastic_admit    DT_SRV(elastic_admit)
#define srv_elastic_refuse   DT_SRV(elastic_refuse)
#define srv_on_membership    DT_SRV(on_membership)
#define srv_on_stall         DT_SRV(on_stall)
#define srv_stall_tick       DT_SRV(stall_tick)

typedef struct breq breq;
typedef struct ckpt_job ckpt_job;

/*
 * A request kept to be handled later, with copies of its bytes: one that
 * came before its key's init on a server that took a lost one's place
 * (the workers' replays come in any order), or a worker's second push in
 * a round, which joins the next one. Every kind keeps them the same way.
 */
typedef struct srv_kept {
	dt_msg_hdr h;
	int worker;
	uint8_t *meta;
	void *payload; /* malloc'd: aligned for the values */
	struct srv_kept *next;
} srv_kept;

typedef struct kv_server {
	dt_node *node;
	int rank;
	int rejoined;      /* took a lost server's place (recovery), until every
	                      worker's replay is over */
	uint8_t *replayed; /* by worker: its KV_REPLAYED came */
	int nreplayed;
	size_t ninit; /* keys with a value (the optimizer is fixed then) */
	int nservers, nworkers; /* the job's */
	int sync;
	dt_opt opt;     /* kind DT_OPT_NONE: the value is the sum of a round */
	dt_table keys;  /* dense entries by key (srv_dense.c) */
	size_t ndense;  /* dense keys with a value */
	dt_table rtabs; /* row_sparse tables by key (rserver.c) */
	/* Row requests that came before their table's init (recovery). */
	srv_kept *rparked;
	uint8_t *dec; /* a compressed push, decoded (floats) */
	size_t dec_cap;
	uint8_t *half; /* an fp16 answer */
	size_t half_cap;
	/* The many-key store (batched requests; kstore.h), made at the
	 * first batched init; and its scratch: a request's records, an
	 * answer's values, the pending dist_sync pushes. */
	int ks_on;
	dt_kstore ks;
	int ks_restored; /* loaded from a checkpoint: an init keeps the
	                    values of the keys it holds */
	/* Batched requests that came before their keys' init, on a server
	 * that took a lost one's place (recovery), oldest first. */
	srv_kept *mparked;
	int mp_busy;     /* handling them again now (many_unpark) */
	int mp_progress; /* a batched request was answered since */
	uint32_t *idx;
	size_t idx_cap; /* bytes */
	float *gath;
	size_t gath_cap; /* bytes */
	uint8_t *kexp;   /* a key range's keys, listed (srv_many.c) */
	size_t kexp_cap;
	/* DTRAIN_MAX_TABLE_BYTES: the most the row_sparse tables here may
	 * map, all together (dt__rs_plan_bytes), and what they map now. */
	uint64_t max_table_bytes, table_bytes;
	struct rxbuf {
		uint8_t *buf;
		size_t cap;
		const dt_conn *holder; /* receiving a frame into it now */
	} * rx; /* by worker: its batched requests land here */
	breq *breqs;
	size_t nbreqs;
	uint32_t breq_free; /* handle of the first free one, 0: none */
	/* PS_RESEND: by worker, the push streaming in now, and how many of
	 * its bytes are used; a frame cut by a broken connection comes again
	 * whole, and only the rest of it is used then. */
	struct streaming {
		uint64_t seq;
		dt_key key;
		uint64_t used;
		int on;
	} * streaming;
	/* Checkpoints (DTRAIN_CHECKPOINT_*). The I/O thread takes a snapshot
	 * (a copy, in the file's format); a writer thread puts it on disk. */
	char *ck_dir;     /* NULL: no checkpoints */
	char ck_name[64]; /* server-<rank>.ckpt */
	/* The key placement of the job as this server's environment says
	 * (DTRAIN_KV_PLACEMENT, ...): a checkpoint records it, and one made
	 * under another is refused (its slices would not be this job's). */
	char ck_placement[16];
	uint64_t ck_split;
	uint64_t ck_every;     /* rounds (0: not by rounds) */
	uint64_t ck_every_ns;  /* or time (0: not by time) */
	uint64_t rounds;       /* key rounds completed (async: updates) */
	uint64_t ck_rounds_at; /* rounds at the last snapshot */
	uint64_t ck_last_ns;
	uint64_t ck_number; /* the last snapshot's number */
	pthread_t ck_thread;
	int ck_started;
	pthread_mutex_t ck_mu;
	pthread_cond_t ck_cv; /* a job for the writer, or one written */
	ckpt_job *ck_next;    /* (ck_mu) the next to write; a newer one
	                         replaces it */
	uint64_t ck_done;     /* (ck_mu) the last number written */
	dt_err ck_err;        /* (ck_mu) how that write ended */
	char ck_errmsg[256];  /* (ck_mu) */
	int ck_stop;          /* (ck_mu) */
	uint64_t ck_written;  /* (ck_mu) files written */
	uint64_t ck_write_ns; /* (ck_mu) time spent writing them */
	uint64_t ck_snap_ns;  /* snapshots' time in the I/O thread */
	ckpt_job *ck_ok;      /* (ck_mu) the last one written, to be told to
	                         the workers (recovery; buf freed) */
	/* An elastic job (srv_elastic.c): the membership the scheduler
	 * sent - its epoch, the live workers by rank and their count - and
	 * the pushes of a newer membership than that, kept until it comes. */
	int elastic;
	uint64_t epoch;
	uint8_t *member;
	int live;
	srv_kept *early;
	/* DT_KV_STALL (srv_stall.c): a round open this long is logged once
	 * (0: never); the next look at the open rounds. */
	uint64_t stall_ns, stall_next;
} kv_server;

/* ---- answers and busy time (srv_reply.c) ---- */

/* An answer; with a value (len floats), in encoding enc (what the request
 * asked for: fp32, or fp16 converted here). val is the store's value
 * (stable: before it changes, the store has PS_RESEND keep a copy of what
 * it still holds of it, dt__node_before_write), or scratch (scratch = 1:
 * copied if kept). */
void srv_reply_val(kv_server *s, int worker, int cmd, uint64_t seq, dt_key key,
                   const float *val, size_t len, unsigned enc, int scratch);
/* The same, val being the store's value. */
void srv_reply_enc(kv_server *s, int worker, int cmd, uint64_t seq, dt_key key,
                   const float *val, size_t len, unsigned enc);
/* The same in fp32. */
void srv_reply(kv_server *s, int worker, int cmd, uint64_t seq, dt_key key,
               const float *val, size_t len);
/* An error answer whose message says what was wrong. */
void srv_reply_error(kv_server *s, int worker, int cmd, uint64_t seq,
                     dt_key key, dt_err code, const char *fmt, ...)
    DT_PRINTF(7, 8);
/* Recovery: the answer to KV_RESUME h, the pushes of its key (or slice)
 * from worker that the store holds: applied, in the open round, or
 * waiting for the next. */
void srv_reply_held(kv_server *s, int worker, const dt_msg_hdr *h,
                    uint64_t have);
/* Server time on key since t0: merging a push (peer: the worker's node
 * id) or updating the value (peer -1), for the counters and timeline;
 * count: the updates it stands for. */
void srv_busy_part(int kind, uint64_t t0, dt_key key, uint64_t bytes, int peer,
                   int count);
void srv_busy(int kind, uint64_t t0, dt_key key, uint64_t bytes, int peer);

/* ---- kept requests, routing and receive buffers (server.c) ---- */

/* A copy of the request (h, its meta and payload as they came; either
 * may be NULL) at the end of *list: 0, or -1 when out of memory (nothing
 * kept then). */
int srv_keep(srv_kept **list, int worker, const dt_msg_hdr *h,
             const uint8_t *meta, const void *payload);
/* Free q and every request after it. */
void srv_kept_free(srv_kept *q);

/* A single-key request (KV_INIT, _PUSH, _PULL, _PUSHPULL) handed to the
 * kind that holds its key, or to the one that makes keys of single-key
 * inits when none does (its adopt). streamed: payload_chunk already
 * applied its payload. */
void srv_single(kv_server *s, int worker, const dt_msg_hdr *h,
                const uint8_t *meta, const float *payload, int streamed);

/* KV_RESUME handed to the kind that holds its key (or to adopt, as
 * srv_single does). */
void srv_resume(kv_server *s, int worker, const dt_msg_hdr *h,
                const uint8_t *meta);

/* The receive buffer of the worker that sent h on c, for a payload of
 * want bytes, kept from request to request (NULL: the frame gets a
 * buffer of its own). */
void *srv_rx_lend(kv_server *s, dt_conn *c, const dt_msg_hdr *h, uint64_t want);

/* ---- checkpoints (srv_ckpt.c) ---- */

/* At the server's start: DTRAIN_CHECKPOINT_DIR and the rest; the last
 * checkpoint loaded (DTRAIN_CHECKPOINT_LOAD, or a rejoined server); the
 * writer thread started. */
dt_err srv_ckpt_start(kv_server *s);
/* The writer finishes what it was given, then stops. */
void srv_ckpt_stop(kv_server *s);
/* After a round (or an async update): a checkpoint if one is due. */
void srv_maybe_checkpoint(kv_server *s);
/* KV_CHECKPOINT: a snapshot now, answered once it is on disk. */
void srv_on_checkpoint(kv_server *s, int worker, const dt_msg_hdr *h);
/* Recovery: this server took a lost one's place; each worker hears what
 * the store holds of its pushes and sends the rest again. */
dt_err srv_rejoin(kv_server *s);

/* ---- store kinds ---- */

/*
 * A store kind's server side. owns and made_by let the router and the
 * kinds find which store holds a key without naming each other. The
 * checkpoint ops are NULL for a kind whose store is not in checkpoints.
 */
typedef struct srv_kind {
	/* How a key of this kind was made, for errors ("a row_sparse init
	 * (dt_kv_init_row_sparse)"), and what its records are called in the
	 * log ("row tables"). */
	const char *made_by;
	const char *noun;
	int (*owns)(kv_server *s, dt_key key);
	/* A single-key request (KV_INIT, _PUSH, _PULL, _PUSHPULL; payload:
	 * its values, decoded or not; streamed: already applied by chunk)
	 * for a key this kind holds, when the kind serves those (NULL: it
	 * does not): served, 1; 0: not its key. */
	int (*single)(kv_server *s, int worker, const dt_msg_hdr *h,
	              const uint8_t *meta, const float *payload, int streamed);
	/* The same for a key no kind holds (one kind has it: the one whose
	 * keys single-key inits make): made, parked or refused. */
	void (*adopt)(kv_server *s, int worker, const dt_msg_hdr *h,
	              const uint8_t *meta, const float *payload, int streamed);
	/* Recovery, KV_RESUME for a key of this kind (NULL: the kind keeps
	 * nothing for a restarted worker): served, 1; 0: not its key. */
	int (*resume)(kv_server *s, int worker, const dt_msg_hdr *h,
	              const uint8_t *meta);
	/* Where the payload of h goes, for a message of this kind
	 * (payload_dest's answers: a buffer, NULL, DT_VAN_DISCARD or
	 * DT_VAN_STREAM): 1 and *where set; 0: not its message. */
	int (*dest)(kv_server *s, dt_conn *c, const dt_msg_hdr *h,
	            const uint8_t *meta, void **where);
	/* A piece of a payload that dest streams (cnt floats g from float
	 * i0 of its key; off: the piece's byte offset): 1, applied; 0: not
	 * its key. */
	int (*chunk)(kv_server *s, const dt_msg_hdr *h, const float *g,
	             size_t i0, size_t cnt, uint64_t off);
	/* The optimizer's parameters change (not its kind). */
	void (*set_opt)(kv_server *s, const dt_opt *opt);
	/* Whether it has anything (the mode may not change then). */
	int (*any)(kv_server *s);
	/* Whether its records can run in dist_sync (sync 1) or dist_async
	 * now (NULL: either). */
	int (*takes_mode)(kv_server *s, int sync);
	/* Checkpoints: how many records the kind's section holds (and the
	 * workers hear of: each its key and the pushes of each worker in
	 * it), their bytes at most, the section written (u64 count, then the
	 * records), and read back into an empty store. */
	uint64_t (*count)(kv_server *s);
	size_t (*snap_bytes)(kv_server *s);
	void (*snapshot)(kv_server *s, dt_wbuf *w);
	/* Fill count() keys and, for each, nworkers applied counts. */
	void (*held)(kv_server *s, dt_key *keys, uint64_t *applied);
	dt_err (*load)(kv_server *s, const char *path, dt_rbuf *r,
	               const dt_ckpt_head *h);
	/* Recovery: a new process took worker's place (what waits for its
	 * predecessor is answered with sequence number 0); and every
	 * worker's replay is over (what still waits is answered). */
	void (*peer_restart)(kv_server *s, int worker);
	void (*replayed)(kv_server *s);
	/* Free every record (a failed load; the server's stop). */
	void (*drop)(kv_server *s);
	/* An elastic job's membership changed (why: how, for the answers):
	 * every open dist_sync round is dropped, its waiting requests
	 * answered DT_EMEMBERSHIP (NULL: the kind is refused in elastic
	 * jobs). */
	void (*discard)(kv_server *s, const char *why);
	/* The stall report (NULL: the kind says nothing more than "not
	 * held"). describe: what the kind holds of worker's request a, one
	 * phrase into buf: 1; 0, not its request. stalled: log, once each,
	 * the rounds open since before now - s->stall_ns. */
	int (*describe)(kv_server *s, int worker, const dt_kv_stall_ask *a,
	                char *buf, size_t cap);
	void (*stalled)(kv_server *s, uint64_t now);
} srv_kind;

/* ---- the stall report (srv_stall.c) ---- */

/* KV_STALL from worker: what this server holds of the requests it names,
 * answered in one line (and logged here). */
void srv_on_stall(kv_server *s, int worker, const dt_msg *m);
/* After each message: at most once a second, the rounds open longer than
 * DT_KV_STALL are logged (one clock read otherwise). */
void srv_stall_tick(kv_server *s);

/* ---- elastic jobs (srv_elastic.c) ---- */

/* The pushes a dist_sync round waits for: the live workers of the
 * membership in an elastic job, every worker otherwise. */
int srv_round_size(const kv_server *s);
/* At the server's start: whether the job is elastic, and its first
 * membership (every worker). */
dt_err srv_elastic_start(kv_server *s);
void srv_elastic_free(kv_server *s);
/* A single-key push h (its arg2 carries the membership epoch, taken off
 * here) from worker: 1, go on with it; 0, answered or kept here (a push
 * of an old membership or from a worker outside it is refused by name;
 * one of a membership still to come waits for it). */
int srv_elastic_admit(kv_server *s, int worker, dt_msg_hdr *h,
                      const uint8_t *meta, const void *payload);
/* 1 (answered) when an elastic job's server refuses request h: the
 * batched and row_sparse kinds have no elastic rounds. */
int srv_elastic_refuse(kv_server *s, int worker, const dt_msg_hdr *h);
/* The node's on_membership hook (I/O thread). */
void srv_on_membership(void *arg, dt_node *n, uint64_t epoch, int gone,
                       int lost);

/* The kinds, in the order of a checkpoint's sections; NULL-terminated. */
extern const srv_kind *const srv_kinds[];
extern const srv_kind srv_dense_kind, srv_many_kind, srv_rows_kind;

/* The kind that holds key, other than self (NULL: none). */
const srv_kind *srv_home_of(kv_server *s, dt_key key, const srv_kind *self);

/* Recovery: key has a home now (another kind's init): the single-key
 * requests parked for it before any kind held it (adopt) are handled
 * again (srv_dense.c). */
void srv_unpark_key(kv_server *s, dt_key key);

/* The many-key kind's batched requests (KV_*_MANY; srv_many.c). */
void srv_on_many(kv_server *s, int worker, const dt_msg *m);
/* Its checkpoint section and a restarted worker's KV_RESUME
 * (srv_many_ckpt.c; server.h: srv_kind). */
uint64_t many_count(kv_server *s);
size_t many_snap_bytes(kv_server *s);
void many_snapshot(kv_server *s, dt_wbuf *w);
void many_held(kv_server *s, dt_key *keys, uint64_t *applied);
dt_err many_load(kv_server *s, const char *path, dt_rbuf *r,
                 const dt_ckpt_head *h);
int many_resume(kv_server *s, int worker, const dt_msg_hdr *h,
                const uint8_t *meta);

/* The row_sparse kind's messages (rserver.c). */
void srv_on_row_init(kv_server *s, int worker, const dt_msg *m);
void srv_on_rows(kv_server *s, int worker, const dt_msg *m);

#endif
