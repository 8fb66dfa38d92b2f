/*
 * client_impl.h - the state a worker's side of a dist store shares between
 * its files: the router (client.c), operations and waits (client_op.c),
 * the replay log of recovery (client_replay.c) and each store kind's
 * requests (kv_dense.c, kv_many.c, kv_rows.c). Private to src/kv; the rest
 * of kv reaches the worker through kv_impl.h's dt__kv_client_* calls.
 */
#ifndef DT_KV_CLIENT_IMPL_H
#define DT_KV_CLIENT_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/spin.h"
#include "common/table.h"
#include "kv/kv_impl.h"

typedef struct kv_op {
	dt_kv_req id;
	int cmd;
	dt_key key;
	int remaining;
	dt_err err;
	char msg[512];
	dt_hnode hn; /* in ops, by id */
	dt_lnode ln; /* in op_order */
	/* Observability: the call's start, when its last part was handed to
	 * the transport, the payload bytes sent and answered (c->mu). */
	uint64_t t0, t_sent, out_bytes, in_bytes;
} kv_op;

/* Recovery: a request kept to be sent again to a restarted server. */
typedef struct logent {
	uint64_t seq; /* its first sequence number */
	int cmd;
	dt_key key;
	uint64_t arg0, arg1, arg2;
	uint64_t pidx; /* pushes: which push of this key to this server */
	/* a batched push (KV_PUSH_MANY, KV_PUSHPULL_MANY): pidx of each of
	 * its arg0 keys, which are the first 8 * arg0 bytes of data */
	uint64_t *pidxs;
	uint8_t *meta;
	uint32_t meta_len;
	uint8_t *data; /* a copy of the payload (compressed, if it was) */
	size_t len;    /* bytes */
	int lost;      /* a push whose copy was not kept (DTRAIN_REPLAY_MAX) */
	dt_lnode ln;   /* in its server's log, oldest first */
} logent;

typedef struct sub {
	uint64_t seq;
	int server_id;
	void *dest;
	size_t bytes; /* of the value at dest (fp32, or halves: half_out) */
	unsigned enc; /* the answer's encoding asked for */
	int half_out; /* dest takes the halves as they come (fp16 arrays) */
	kv_op *op;
	/* What was sent, to send it again (recovery). */
	int cmd;
	dt_key key;
	uint64_t arg0, arg1, arg2;
	logent *log;
	/* Recovery: a row pull's ids, to send again (row requests carry
	 * their ids as payload; the others logged keep theirs in log). */
	void *ids;
	size_t ids_len;
	dt_hnode hn; /* in subs, by seq */
} sub;

/* A key, and how many of this worker's pushes of it a server's
 * checkpoint holds (KV_CKPT_DONE). */
typedef struct held_key {
	dt_key key;
	uint64_t pushes;
} held_key;

/* Per server (recovery). */
typedef struct srv {
	dt_list log;    /* (mu) */
	int restarted;  /* (mu) a new process: its requests wait */
	int replay_due; /* (mu) its KV_CKPT_DONE came: replay now */
	size_t nheld;   /* (mu) what that said, sorted by key */
	held_key *held;
} srv;

/* A key's compression residual: what its pushes have not sent yet. */
typedef struct resid {
	dt_key key;
	size_t n;
	float *r;
	dt_hnode hn;
} resid;

/* Pushes of a key to each server so far (recovery). */
typedef struct keycount {
	dt_key key;
	uint64_t *pushes; /* by server rank */
	/* A restarted worker (dt_kv_resume): by server rank, the pushes of
	 * its predecessor the server holds (not sent again); and whether the
	 * key's next pull asks for the value of the round it resumes at. */
	uint64_t *held;
	int pull_at;
	dt_hnode hn;
} keycount;

/* A server's part of a batched call (reused from call to call). */
typedef struct mpart {
	size_t count, nvals, fill, vfill;
	size_t uniform; /* every key's length, unless mixed */
	int mixed;
	uint64_t *keys;
	uint32_t *lens;
	float *vals, *ans;
	uint8_t *enc; /* a row push, compressed */
	size_t keys_cap, lens_cap, vals_cap, ans_cap, enc_cap; /* bytes */
} mpart;

/*
 * A batched call whose keys are k0 + i * d (i < n), cut into key ranges
 * (kv_range.c; kv_impl.h: DT_KV_KEY_RANGE). Key i's server, (k0 + i d)
 * mod S, repeats with period P = S / gcd(d, S): the keys of the server of
 * key j (j < P) are j, j + P, j + 2P ..., a range of step d P.
 */
#define DT_KVC_RANGES_MAX 64 /* servers */
typedef struct kv_ranges {
	size_t period;                      /* P */
	int srv[DT_KVC_RANGES_MAX];         /* the server of keys j + m P */
	size_t off[DT_KVC_RANGES_MAX];      /* per server: its first key's i */
	size_t count[DT_KVC_RANGES_MAX];    /* per server: its keys (0: none) */
	uint64_t rng[DT_KVC_RANGES_MAX][2]; /* per server: first key, step */
} kv_ranges;

/* Whether keys[0..n) are a progression; if so r is their cut over ns
 * (at most DT_KVC_RANGES_MAX) servers. One pass over the keys. */
int dt__kvc_ranges_plan(kv_ranges *r, const dt_key *keys, size_t n, int ns);
/* The values of the servers' ranges into their parts' vals (each server
 * every P-th value from its first), and the answers in the parts' ans
 * back to the call's order in outs. */
void dt__kvc_ranges_gather(const kv_ranges *r, int ns, const float *vals,
                           size_t n, mpart *mp);
void dt__kvc_ranges_scatter(const kv_ranges *r, int ns, const mpart *mp,
                            size_t n, float *outs);

struct dt_kv_client {
	dt_node *node;
	int sync;
	size_t bound;   /* MXNet's, for row tables */
	dt_kv_map *map; /* where dense keys go (the caller's thread only) */
	dt_kv_part *parts;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	dt_gen done_gen; /* bumped when an op completes (common/spin.h) */
	uint64_t next_seq;
	uint64_t next_op;
	dt_table subs;    /* sub-requests in flight, by seq (mu) */
	dt_table ops;     /* ops not yet waited for, by id (mu) */
	dt_list op_order; /* the same ops, oldest first (mu) */
	/* Recovery (see the top). */
	int recover;
	int nservers;            /* (the node may be gone by destroy) */
	pthread_mutex_t send_mu; /* every send, and a replay whole */
	srv *srv;                /* by server rank */
	dt_table counts;         /* keycount by key (mu) */
	int replay_due;          /* (mu) some srv's is */
	uint64_t kept_bytes;     /* (mu) the logs' copies */
	uint64_t replay_max;     /* DTRAIN_REPLAY_MAX, bytes */
	int over_max;            /* (mu) told that copies were not kept */
	/* A process in a lost worker's place (recovery): it skips the
	 * set-up its predecessor did, and dt_kv_resume says where the
	 * predecessor stopped. */
	int rejoined;
	int resumed;          /* dt_kv_resume ran */
	uint64_t resume_step; /* what it said */
	int resume_over;      /* (mu) no key has held pushes or a pull at
	                         that step left: batched calls are batched */
	/* Compression (the caller's thread only). */
	dt_quant_spec comp;
	unsigned pull_enc; /* DT_QUANT_NONE or DT_QUANT_FP16 */
	dt_table resids;   /* resid by key */
	uint8_t *cbuf;     /* a compressed part being sent */
	size_t cbuf_cap;
	/* Batched calls (the caller's thread only). */
	int batch;        /* sent as KV_*_MANY (dt__kv_client_batches) */
	mpart *mp;        /* by server rank */
	dt_table singles; /* keys of single-key inits (their store's) */
	/* DT_KV_STALL: a wait this long without an answer is reported
	 * (client_stall.c); 0, never. */
	uint64_t stall_ns;
	int stall_asks; /* (mu) KV_STALL questions not answered yet */
};

/* ---- client_op.c ---- */

sub *dt__kvc_take_sub(dt_kv_client *c, uint64_t seq);
sub *dt__kvc_find_sub(dt_kv_client *c, uint64_t seq);
void dt__kvc_op_fail(kv_op *o, dt_err err, const char *msg);
int dt__kvc_sub_done(dt_kv_client *c, sub *s);
/* A request that adds one to a key's pushes (a dense key's or a row
 * table's: each server that holds part of a table gets every push). */
int dt__kvc_push_cmd(int cmd);
int dt__kvc_init_cmd(int cmd);
int dt__kvc_logged_cmd(int cmd);
/* What a push becomes once its value is in the server's checkpoint and
 * only its answer is missing (a pushpull's: the pull), and what a
 * pushpull becomes once its answer came (the push alone). */
int dt__kvc_pull_of(int cmd);
int dt__kvc_push_of(int cmd);
int dt__kvc_server_rank(const dt_kv_client *c, int server_id);
/* The send of sub-request seq of o failed with err (dt_errmsg() says
 * why): o fails, unless on_fail got there first. */
void dt__kvc_send_failed(dt_kv_client *c, kv_op *o, uint64_t seq, dt_err err);
/* Recovery: whether a push's copy of vbytes may be kept (within
 * DTRAIN_REPLAY_MAX: else a record without the data, and a restart that
 * needs it ends the job, named). */
int dt__kvc_keep_copy(dt_kv_client *c, size_t vbytes);
/*
 * Send one sub-request; the sub is registered before the send. val is
 * vbytes of payload: the caller's (stable until the answer) or, when
 * vflags lacks DT_SEND_STABLE, a scratch buffer reused after the call.
 * out (len floats) receives the answer's value, in encoding h->arg2 asks.
 */
void dt__kvc_send_part(dt_kv_client *c, kv_op *o, int server, dt_msg_hdr *h,
                       const void *meta, uint32_t meta_len, const void *val,
                       size_t vbytes, unsigned vflags, void *out, size_t len,
                       int half_out);
/* A new op of parts sub-requests, *req its id; NULL: no memory. */
kv_op *dt__kvc_new_op(dt_kv_client *c, int cmd, dt_key key, int parts,
                      dt_kv_req *req);

/* ---- client_replay.c ---- */

/* A copy of a request about to be sent (no lock held), its payload the
 * iovcnt pieces of iov (none: not kept); NULL: no memory. */
logent *dt__kvc_log_new(const dt_msg_hdr *h, const void *meta,
                        uint32_t meta_len, const struct iovec *iov, int iovcnt);
/* The next push number of key to server rank r (mu held); -1: memory. */
int64_t dt__kvc_next_push(dt_kv_client *c, dt_key key, int r);
/* KV_CKPT_DONE from server id sid (I/O thread). */
void dt__kvc_on_ckpt_done(dt_kv_client *c, int sid, const dt_msg *m);
/* A logged request the server refused changed nothing there: it is not
 * kept, and a refused push is not counted (mu held). */
void dt__kvc_unlog_refused(dt_kv_client *c, sub *s);
void dt__kvc_on_peer_restart(void *arg, dt_node *n, int peer);
/* Send server rank r's replay (send_mu held, mu not). */
void dt__kvc_replay(dt_kv_client *c, int r);
/* Any replay due, before anything else is sent (send_mu held). */
void dt__kvc_run_replays(dt_kv_client *c);
/* Let go of send_mu, then send any replay that came due meanwhile (the
 * I/O thread sends one itself only when send_mu is free). */
void dt__kvc_send_unlock(dt_kv_client *c);
/* The push counts of key (mu held); NULL: none yet. */
keycount *dt__kvc_find_count(dt_kv_client *c, dt_key key);
/* Whether this push of key to server r is one the server holds from the
 * predecessor (then it is counted as made). */
int dt__kvc_held_push(dt_kv_client *c, dt_key key, int r);
/* A restarted worker's pull (pull = 1) or pushpull of key: whether it is
 * the key's first since dt_kv_resume and a pull, which then asks for the
 * value after the round it resumed at (dist_sync; a pushpull only ends
 * the wait for it). */
int dt__kvc_take_pull_at(dt_kv_client *c, dt_key key, int pull);
/* One part of o is done without a request (a push the server holds from
 * the predecessor). */
void dt__kvc_part_done(dt_kv_client *c, kv_op *o);
/* A log entry not on any list yet. */
void dt__kvc_logent_drop(logent *e);
/* A batched push (KV_PUSH_MANY, KV_PUSHPULL_MANY). */
int dt__kvc_many_push_cmd(int cmd);
/* Recovery: the push number of each key of batched push le to server r
 * (mu held); 0, or -1 when out of memory. */
int dt__kvc_many_pidx(dt_kv_client *c, logent *le, int r);
/* Recovery, for a row or batched request: a log entry (*le) of one that
 * changes the store, or a copy of a pull's ids or keys (*ids: its whole
 * payload); 0 when out of memory. A batched push whose copy is not kept
 * (DTRAIN_REPLAY_MAX) still keeps its keys and lengths. */
int dt__kvc_log_part(dt_kv_client *c, const dt_msg_hdr *h, const void *meta,
                     uint32_t meta_len, const struct iovec *iov, int iovcnt,
                     logent **le, void **ids);

/* ---- client_stall.c ---- */

/* Log what o waits for, waited_ns without an answer, and ask the servers
 * that owe it what they hold of it (c->mu not held; o is the caller's). */
void dt__kvc_stall_report(dt_kv_client *c, kv_op *o, uint64_t waited_ns);
/* A server's KV_STALL answer (I/O thread): logged. */
void dt__kvc_on_stall_reply(dt_kv_client *c, dt_conn *conn, const dt_msg *m);

/* ---- client.c ---- */

/* The connection to server peer was lost (its sub-requests fail), or the
 * node failed (peer < 0: every sub-request fails). */
void dt__kvc_on_fail(void *arg, dt_node *n, int peer, dt_err err);

/* ---- kv_dense.c ---- */

/* The residual of key (n floats, zeros at first), or NULL: no memory. */
float *dt__kvc_residual(dt_kv_client *c, dt_key key, size_t n);

/* ---- kv_many.c ---- */

/* Register and send one server's part of a batched or row request (no
 * lock held); its answer's values (nvals floats) land in out. */
void dt__kvc_send_many_part(dt_kv_client *c, kv_op *o, int server,
                            dt_msg_hdr *h, const void *meta, uint32_t meta_len,
                            const struct iovec *iov, int iovcnt, float *out,
                            size_t nvals);

#endif
