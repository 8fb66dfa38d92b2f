/*
 * kv_impl.h - what the KVStore's files share: the KV wire commands, the
 * placement rule, and the optimizers that run on servers (and in local
 * stores).
 *
 * Files: kv.c (the public API's router; kv_api.h), kv_local.c (local
 * stores, local aggregation), each store kind's public calls and worker
 * requests (kv_dense.c, kv_many.c, kv_rows.c), the worker's side
 * (client.c the router, client_op.c ops and waits, client_replay.c the
 * replay log; client_impl.h), server.c (a server's router, dense keys,
 * checkpoints), rserver.c and kstore.c (its row tables and many-key
 * store; server.h has the kinds' ops), ckpt.c, placement.c, optim.c.
 */
#ifndef DT_KV_KV_IMPL_H
#define DT_KV_KV_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/quant.h"
#include "common/table.h"
#include "core/core.h"
#include "dtrain/kv.h"
#include "dtrain/nn.h"
#include "obs/obs.h"

/* KV requests (net/proto.h has the commands, docs/protocol.md their
 * bodies) carry key, arg0 = the array's total length n, arg1 = the slice's
 * offset; the payload is the slice. A response echoes seq; DT_F_ERROR
 * responses carry u32 code + message in meta. */

/* "push", "pull", ... for messages naming a KV command. */
static inline const char *
dt__kv_op_name(int cmd)
{
	switch (cmd) {
	case DT_CMD_KV_INIT:
		return "init";
	case DT_CMD_KV_PUSH:
		return "push";
	case DT_CMD_KV_PULL:
		return "pull";
	case DT_CMD_KV_PUSHPULL:
		return "pushpull";
	case DT_CMD_KV_SET_OPT:
		return "set optimizer";
	case DT_CMD_KV_CONFIG:
		return "configure";
	case DT_CMD_KV_CHECKPOINT:
		return "checkpoint";
	case DT_CMD_KV_RESUME:
		return "resume";
	case DT_CMD_KV_INIT_MANY:
		return "batched init";
	case DT_CMD_KV_PUSH_MANY:
		return "batched push";
	case DT_CMD_KV_PULL_MANY:
		return "batched pull";
	case DT_CMD_KV_PUSHPULL_MANY:
		return "batched pushpull";
	case DT_CMD_KV_ROW_INIT:
		return "row_sparse init";
	case DT_CMD_KV_ROW_PUSH:
		return "row_sparse push";
	case DT_CMD_KV_ROW_PULL:
		return "row_sparse_pull";
	case DT_CMD_KV_ROW_PUSHPULL:
		return "row_sparse pushpull";
	}
	return "request";
}

/* KV_INIT's arg2 bit: the message carries the value (rank 0's). */
#define DT_KV_INIT_HAS_VALUE 1u

/*
 * Encodings (docs/protocol.md, docs/compression.md). A push, pull or
 * pushpull request's arg2: bits 0-7 the pushed body's encoding (a
 * dt_quant_kind), bits 8-15 the encoding the answer's value is asked in
 * (DT_QUANT_NONE: fp32, or DT_QUANT_FP16); the other bits are zero. A
 * 2-bit push's meta is its threshold (a float, little-endian); the other
 * data requests have no meta. An answer that carries a value says its
 * encoding in arg2.
 */
#define DT_KV_ENC_PUSH(a) ((unsigned)((a)&0xffu))
/* A pull's arg2 bit 16 (recovery): the value as it was after the round
 * whose number (u64, little-endian) is the meta - what a restarted
 * worker continues from (docs/fault-tolerance.md). */
#define DT_KV_AT_ROUND      (1u << 16)
#define DT_KV_ENC_ANSWER(a) ((unsigned)(((a) >> 8) & 0xffu))
/* A single-key push's (KV_PUSH, KV_PUSHPULL) arg2 bits 16-31 in an elastic
 * job: the epoch of the membership the worker computes in, so that a
 * server never counts a push of an old membership in a round of the new
 * one (srv_elastic.c). Epochs go up to DT_KV_EPOCH_MAX. */
#define DT_KV_EPOCH_SHIFT 16
#define DT_KV_EPOCH_MAX   0xffffu
uint32_t dt__kv_enc(dt_quant_kind push, dt_quant_kind answer);

/* A request's encoding fields (arg2, and meta) for command cmd against a
 * key slice of n values with a body of bytes (pushes): the push kind and
 * the 2-bit threshold, or an error naming what does not fit. */
dt_err dt__kv_push_check(const dt_msg_hdr *h, const uint8_t *meta, size_t n,
                         dt_quant_kind *kind, float *t);
/* The meta of a 2-bit push: its threshold, little-endian. */
void dt__kv_threshold_meta(float t, uint8_t meta[4]);

/*
 * Batched requests (KV_INIT_MANY, KV_PUSH_MANY, KV_PULL_MANY,
 * KV_PUSHPULL_MANY; docs/protocol.md): arg0 is the key count, arg1 every
 * key's length when they are all the same (0: a u32 length per key follows
 * the keys), arg2 the encodings (a pushed body is fp32; the answer fp32 or
 * fp16). The payload: u64 keys[count], [u32 lens[count]], then for init,
 * push and pushpull the keys' values back to back (f32). The answer to a
 * pull or pushpull carries the values in the request's key order.
 *
 * A push, pull or pushpull whose keys are k0, k0 + d, k0 + 2d ... (a
 * worker's keys 0..N-1, or its share of them on one of S servers) may say
 * so instead of listing them: arg2 bit 17 (DT_KV_KEY_RANGE), every key of
 * one length (arg1), and the key list is two u64, k0 and the step d >= 1,
 * with no key past 2^64 - 1. The request then carries 16 bytes of keys
 * instead of 8 per key, and the server resolves it with no pass over a
 * key list when it is a stretch of keys one init added in that order
 * (kstore.h: runs).
 */
#define DT_KV_KEY_RANGE (1u << 17)
/* Fewest keys a worker sends as a range (kstore.c's runs are no shorter:
 * a shorter range gains little and is expanded by the server). */
#define DT_KV_RANGE_MIN 64
/* The step d when keys[0..count) (u64, possibly unaligned) are k0 + i * d
 * for one d >= 1 with no wrap, else 0 (fewer than 2 keys: 0). One pass
 * over the list in blocks, leaving at the first block that differs. */
uint64_t dt__kv_key_step(const uint8_t *keys, size_t count);
/* The i-th u64 of a request's key or row id list (the KVStore's hosts
 * are little-endian, as the wire: one load). */
static inline uint64_t
dt__kv_u64_at(const uint8_t *list, size_t i)
{
	uint64_t v;

	memcpy(&v, list + 8 * i, 8);
	return v;
}

/* The most keys of one request (and of a server's many-key store). */
#define DT_KS_MAX_KEYS ((uint64_t)1 << 30)
/* The longest key of a batched request, in floats. */
#define DT_KS_MAX_LEN ((uint64_t)1 << 30)

/* The lengths of a request's keys: lens[i] (u32, little-endian) or, when
 * lens is NULL, uniform for every key. */
typedef struct dt_ks_lens {
	const uint8_t *lens;
	uint32_t uniform;
} dt_ks_lens;

static inline uint32_t
dt__ks_len_at(const dt_ks_lens *l, size_t i)
{
	uint32_t v;

	if (l->lens == NULL)
		return l->uniform;
	memcpy(&v, l->lens + 4 * i, 4);
	return v;
}

typedef struct dt_kv_many {
	size_t count;
	const uint8_t *keys; /* count u64, little-endian; NULL for a range */
	uint64_t k0, step;   /* a range (DT_KV_KEY_RANGE): k0 + i * step */
	dt_ks_lens lens;
	const uint8_t *vals; /* nvals f32 (init, push, pushpull), or NULL */
	uint64_t nvals;      /* the keys' lengths summed */
	unsigned answer;     /* DT_QUANT_NONE or DT_QUANT_FP16 */
} dt_kv_many;

/* Check a batched request's header and payload against each other and
 * the limits above (every count and length before it is used); the body's
 * parts, or an error naming what is wrong. */
dt_err dt__kv_many_decode(const dt_msg_hdr *h, const void *payload,
                          dt_kv_many *out);
/* Whether cmd is one of the batched commands, and whether it carries
 * values. */
int dt__kv_many_cmd(int cmd);
int dt__kv_many_has_vals(int cmd);

/*
 * Row-sparse tables (docs/protocol.md, "Row-sparse requests"). A
 * KV_ROW_INIT carries key, arg0 = the table's rows, arg1 = its width,
 * arg2 = DT_KV_INIT_HAS_VALUE or 0 (zeros), and a 16-byte meta: u64 the
 * first row this server holds, u64 how many; its payload is those rows'
 * values (f32) when it has a value. KV_ROW_PUSH, _PULL and _PUSHPULL carry
 * key, arg0 = the row count, arg1 = the width, arg2 the encodings as a
 * push's (a 2-bit body's threshold in meta); the payload is u64 row ids
 * (global), then for a push the rows' values back to back in the push's
 * encoding. An answer carries the asked rows' values in the ids' order.
 */
/* The most rows of a table, and of one request. */
#define DT_RS_MAX_ROWS ((uint64_t)1 << 40)
/* The widest row, in floats. */
#define DT_RS_MAX_WIDTH ((uint64_t)1 << 24)
/* The most floats of one server's part of a table. */
#define DT_RS_MAX_VALS ((uint64_t)1 << 36)

typedef struct dt_kv_rows {
	size_t count;        /* rows */
	size_t width;        /* floats a row */
	const uint8_t *ids;  /* count u64, little-endian */
	const uint8_t *body; /* a push's values, encoded as push says */
	size_t body_len;
	dt_quant_kind push; /* the body's encoding */
	float t;            /* a 2-bit body's threshold */
	unsigned answer;    /* DT_QUANT_NONE or DT_QUANT_FP16 */
	/* A restarted worker's first pull (DT_KV_AT_ROUND, the round in
	 * 8 bytes of meta): the rows' values after that round. */
	int at;
	uint64_t round;
} dt_kv_rows;

int dt__kv_rows_cmd(int cmd);
/* Check a row request's header, meta and payload against each other and
 * the limits above; its parts, or an error naming what is wrong. */
dt_err dt__kv_rows_decode(const dt_msg_hdr *h, const uint8_t *meta,
                          const void *payload, dt_kv_rows *out);
/* The rows [lo, lo + n) of a table that server i of S holds: tables of
 * rows x width >= bound (and at least S rows) are split by row range as
 * dt__kv_place splits arrays, else whole on server key mod S. */
void dt__kv_rows_place(dt_key key, uint64_t rows, size_t width, int S,
                       size_t bound, int i, uint64_t *lo, uint64_t *n);
/* Which server holds row id of such a table. */
int dt__kv_rows_server(dt_key key, uint64_t rows, size_t width, int S,
                       size_t bound, uint64_t id);

/* One server's part of an array. */
typedef struct dt_kv_part {
	int server; /* server rank */
	size_t offset;
	size_t len;
} dt_kv_part;

/*
 * MXNet's placement rule: an array of n < bound elements lives whole on
 * server key mod S; an array of n >= bound is split in S contiguous parts,
 * part i ([i*n/S, (i+1)*n/S)) on server i. Fills parts (room for S
 * entries) and returns how many there are.
 */
int dt__kv_place(dt_key key, size_t n, int num_servers, size_t bound,
                 dt_kv_part *parts);

/*
 * A worker's placement map (placement.c, docs/kvstore.md "Placement"): the
 * policy DTRAIN_KV_PLACEMENT names ("balanced", the default, or "mxnet")
 * and the keys it has placed. Not locked: the caller's thread only, as the
 * rest of a client's sending state.
 */
typedef struct dt_kv_map dt_kv_map;

/* A map over nservers servers that cuts arrays of at least split floats;
 * DT_ECONFIG names an unknown policy. */
dt_err dt__kv_map_create(const char *policy, int nservers, size_t split,
                         dt_kv_map **out);
/* The same from DTRAIN_KV_PLACEMENT, DTRAIN_KV_SPLIT_BYTES and
 * MXNET_KVSTORE_BIGARRAY_BOUND (which, when set, is the split bound). */
dt_err dt__kv_map_from_env(int nservers, dt_kv_map **out);
void dt__kv_map_destroy(dt_kv_map *m);
/*
 * The parts of key (n floats) into parts (room for S), their count in
 * *nparts. place = 1 (an init): a key not placed yet is placed now and
 * remembered. A key the map holds gets its parts (DT_ESIZE, naming op, for
 * another length); a key it does not hold gets MXNet's rule at the split
 * bound (where the many-key store keeps its keys).
 */
dt_err dt__kv_map_parts(dt_kv_map *m, const char *op, dt_key key, size_t n,
                        int place, dt_kv_part *parts, int *nparts);
/* Arrays shorter than this many floats are never cut. */
size_t dt__kv_map_split(const dt_kv_map *m);
const char *dt__kv_map_policy(const dt_kv_map *m);
/* The floats placed on server so far (keys the map remembers). */
uint64_t dt__kv_map_load(const dt_kv_map *m, int server);

/* Optimizers (optim.c). */
typedef enum dt_opt_kind {
	DT_OPT_NONE = 0,
	DT_OPT_SGD,
	DT_OPT_ADAM
} dt_opt_kind;

typedef struct dt_opt {
	dt_opt_kind kind;
	dt_nn_optim_param p; /* the trainer's parameters and defaults */
} dt_opt;

/* Parse name and "k=v,k=v" into opt; names every bad key or value. */
dt_err dt__opt_parse(const char *name, const char *params, dt_opt *opt);
/* Message bodies (kv_msg.c). KV_SET_OPT: an optimizer as data (no code
 * crosses the wire); the decoder checks every parameter's range. */
void dt__opt_encode(const dt_opt *opt, dt_wbuf *w);
dt_err dt__opt_decode(dt_rbuf *r, dt_opt *opt);
/* A DT_F_ERROR answer: the error code and its message. */
dt_err dt__kv_error_encode(dt_err code, const char *msg, dt_wbuf *w);
dt_err dt__kv_error_decode(const void *meta, size_t len, dt_err *code,
                           char *msg, size_t cap);
/*
 * KV_STALL: a worker whose call has waited DT_KV_STALL seconds asks a
 * server what it holds of the requests it still owes (at most
 * DT_KV_STALL_ASKS of them, each its sequence number, command and key);
 * the answer is one line of printable text of at most DT_KV_STALL_TEXT
 * bytes. The decoders refuse a count over the limit, a command outside the
 * KV range, a short or long body and any byte that is not printable.
 */
#define DT_KV_STALL_ASKS 8
#define DT_KV_STALL_TEXT 1024
typedef struct dt_kv_stall_ask {
	uint64_t seq;
	uint32_t cmd;
	dt_key key;
} dt_kv_stall_ask;
/* DT_KV_STALL in nanoseconds (0: no stall reports; client_stall.c). */
dt_err dt__kv_stall_env(uint64_t *ns);
dt_err dt__kv_stall_query_encode(const dt_kv_stall_ask *a, size_t n,
                                 dt_wbuf *w);
dt_err dt__kv_stall_query_decode(const void *meta, size_t len,
                                 dt_kv_stall_ask *a, size_t *n);
dt_err dt__kv_stall_reply_encode(const char *text, dt_wbuf *w);
/* text: DT_KV_STALL_TEXT bytes. */
dt_err dt__kv_stall_reply_decode(const void *meta, size_t len, char *text);
/* Per-array optimizer state: floats needed (0, n or 2n). */
size_t dt__opt_state_len(const dt_opt *opt, size_t n);
/*
 * One update of w (n floats) with gradient g: state has
 * dt__opt_state_len() floats (zero at first), t is the 1-based step count.
 */
void dt__opt_apply(const dt_opt *opt, float *w, const float *g, float *state,
                   size_t n, uint64_t t);

/* The same on elements [off, off + n) of an array of total elements; g
 * holds those n gradients. Lets a server update while a push streams in. */
void dt__opt_apply_range(const dt_opt *opt, float *w, const float *g,
                         float *state, size_t total, size_t off, size_t n,
                         uint64_t t);

/* Sum helpers. */
void dt__kv_add(float *restrict dst, const float *restrict src, size_t n);

/* The KVStore's app class (server.c): the KV command range, and the
 * server role's store started on every server node. */
extern const dt__app_class dt__kv_app;
/* Register it for this process (before a server node starts). */
dt_err dt__kv_register(void);

/* The worker side of dist stores (client*.c, kv_dense.c, kv_many.c,
 * kv_rows.c). */
typedef struct dt_kv_client dt_kv_client;
/* bound: MXNet's (row tables and device sums); map: where dense keys
 * go, which the client owns on DT_OK (on error the caller still does). */
dt_err dt__kv_client_create(dt_node *node, int sync, size_t bound,
                            dt_kv_map *map, dt_kv_client **out);
/* Free c; only after its node is stopped (no I/O thread can call in). */
void dt__kv_client_destroy(dt_kv_client *c);
dt_err dt__kv_client_set_optimizer(dt_kv_client *c, const dt_opt *opt);
/* Rank 0 tells the servers the mode; all workers then pass a barrier. */
dt_err dt__kv_client_configure(dt_kv_client *c);
/* Every worker passes a barrier carrying err (its outcome of a collective
 * step): DT_OK if all succeeded, else the first error, on every worker. */
dt_err dt__kv_client_agree(dt_kv_client *c, dt_err err);
/* The same for the set-up (configure, optimizer, init), which a process
 * in a lost worker's place skips: the others agreed long ago. */
dt_err dt__kv_client_agree_setup(dt_kv_client *c, dt_err err);
int dt__kv_client_rejoined(const dt_kv_client *c);
/* A restarted worker: where its predecessor stopped (dt_kv_resume).
 * rtabs[i] is key i's row_sparse table (its parts are asked by rows), or
 * NULL for a dense or batched key. */
struct dt_kv_rtab;
dt_err dt__kv_client_resume(dt_kv_client *c, size_t nkeys, const dt_key *keys,
                            const size_t *lens,
                            const struct dt_kv_rtab *const *rtabs,
                            uint64_t *step);
/* Start an op; *req names it for dt__kv_client_wait. out may be NULL
 * (push) and val may be NULL (pull). */
dt_err dt__kv_client_start(dt_kv_client *c, int cmd, dt_key key,
                           const float *val, float *out, size_t n,
                           dt_kv_req *req);
/* The same on IEEE half arrays (half = 1: val and out hold n halves;
 * pushes go as fp16 bodies, answers come as halves into out). An INIT's
 * val is fp32 still. */
dt_err dt__kv_client_start_ex(dt_kv_client *c, int cmd, dt_key key,
                              const void *val, void *out, size_t n, int half,
                              dt_kv_req *req);
dt_err dt__kv_client_wait(dt_kv_client *c, dt_kv_req req);
/* A batched call's arrays (kv_many.c): keys, lengths (NULL: one float per
 * key), and the values either back to back (vals, outs: ps-lite's form)
 * or one pointer per key (pvals, pouts: dt_kv_*_many). */
typedef struct dt_kv_batch {
	size_t nkeys;
	const dt_key *keys;
	const size_t *lens;
	const float *vals;
	float *outs;
	const float *const *pvals;
	float *const *pouts;
} dt_kv_batch;

/* Whether batched calls go as KV_*_MANY requests: with DTRAIN_RECOVER only
 * in dist_sync (a restarted server's many-key store says how many pushes
 * of a key it holds as its rounds, which only dist_sync has), unless
 * DTRAIN_RECOVER_BATCHED=0 sends them key by key. */
int dt__kv_client_batches(const dt_kv_client *c);
/* A restarted worker after dt_kv_resume: whether one of keys[0..n) still
 * has a push its predecessor made (not sent again) or a pull as of the
 * step it resumed at to come; such a batched call goes key by key, where
 * the single-key requests do both. */
int dt__kv_client_resuming(dt_kv_client *c, size_t n, const dt_key *keys);
/* One batched call of cmd (DT_CMD_KV_INIT, _PUSH, _PULL or _PUSHPULL):
 * the keys the many-key store takes (shorter than the big-array bound, and
 * than compression's min_size when pushes are compressed) go as one
 * request per server, the rest key by key; returns once every part is
 * answered. An init's values are rank 0's: other workers send no batched
 * init (the caller's barrier follows). */
dt_err dt__kv_client_many(dt_kv_client *c, int cmd, const dt_kv_batch *b);
/* Where key (n floats, initialised) lives: its parts as the worker's map
 * has them (a local store: one part). For tests that compute what the
 * servers hold. */
dt_err dt__kv_parts_of(dt_kv *kv, dt_key key, size_t n, dt_kv_part *parts,
                       int *nparts);
dt_err dt__kv_client_parts(dt_kv_client *c, dt_key key, size_t n,
                           dt_kv_part *parts, int *nparts);
/* A batched init's keys that the map cuts placed now, in key order: each
 * worker may list them in its own order, and where a cut key goes depends
 * on the keys cut before it. */
dt_err dt__kv_client_place_init(dt_kv_client *c, const dt_kv_batch *b);
/* A key listed twice in keys (n of them) is an error naming it (op: the
 * call's name); a sorted copy. */
dt_err dt__kv_no_duplicates(const char *op, size_t n, const dt_key *keys);
/* A value listed twice among v[0..n) (sorting a copy): 1 and *dup, 0 if
 * none, -1 if out of memory. */
int dt__kv_find_duplicate(size_t n, const uint64_t *v, uint64_t *dup);
/* key was initialised by a single-key call: batched calls send it key by
 * key, to the store that holds it. (Every worker makes the same inits.
 * Should the note not fit in memory, the server names the mix-up.) */
void dt__kv_client_note_single(dt_kv_client *c, dt_key key);
/*
 * A row_sparse table as a worker knows it (kv.c keeps them by key): its
 * shape, a bitmap to find a row listed twice in a push, compression's
 * residual (rows x width, mapped: rows never pushed cost nothing), and -
 * in a local store - the table itself.
 */
typedef struct dt_kv_rtab {
	dt_key key;
	uint64_t rows;
	size_t width;
	uint64_t *mark; /* rows bits, zero between calls */
	float *resid;   /* NULL until the first compressed push */
	size_t resid_bytes;
	struct dt_rstore *local;
	dt_hnode hn;
} dt_kv_rtab;

/* Rank 0 puts table t on its servers (by row range when it is split),
 * with rows x width values val (NULL: zeros); others send nothing (the
 * caller's barrier follows). */
dt_err dt__kv_client_row_init(dt_kv_client *c, const dt_kv_rtab *t,
                              const float *val);
/* One row call (DT_CMD_KV_ROW_PUSH, _PULL, _PUSHPULL) of count rows ids
 * (checked: in range, and unique for pushes) on t: vals holds the pushed
 * rows back to back, outs receives the asked ones. A push goes to every
 * server that holds part of t (each counts it in its round, empty or
 * not); a pull to those that hold an asked row. Returns once all answer. */
dt_err dt__kv_client_rows(dt_kv_client *c, dt_kv_rtab *t, int cmd, size_t count,
                          const uint64_t *ids, const float *vals, float *outs);
/* Zeroed memory of n bytes whose pages are made when first written
 * (rstore.c); freed with dt__unmap_zero(p, n). */
void *dt__map_zero(size_t n);
void dt__unmap_zero(void *p, size_t n);

/* Pushes compressed as comp says from now on (residuals per key). */
void dt__kv_client_set_compression(dt_kv_client *c, const dt_quant_spec *comp);
/* Pulls' answers in fp16 (on) or fp32. */
void dt__kv_client_set_pull_fp16(dt_kv_client *c, int on);
dt_err dt__kv_client_wait_all(dt_kv_client *c);
/* dt_kv_checkpoint: after every pending request and every worker. */
dt_err dt__kv_client_checkpoint(dt_kv_client *c);

/* Server checkpoints (ckpt.c; the format in docs/fault-tolerance.md). */
typedef struct dt_ckpt_head {
	uint32_t version; /* of a file read (1 to 3) */
	uint32_t rank, nservers, nworkers;
	int sync;
	dt_opt opt;      /* kind DT_OPT_NONE: none */
	uint64_t number; /* 1, 2, ... in this job */
	uint64_t rounds; /* the server's completed rounds (or updates) */
	/* The key placement the job ran under (version 3 on; "" in an older
	 * file): the policy's name and the split bound in floats (arrays at
	 * least this long are cut over the servers). */
	char placement[16];
	uint64_t split;
	uint64_t nkeys; /* the dense keys' section's count */
} dt_ckpt_head;

typedef struct dt_ckpt_key {
	dt_key key;
	uint64_t n, offset, len, steps;
	uint64_t *applied; /* per worker rank: its pushes in the value */
	uint64_t state_len;
	const void *val, *state; /* len and state_len floats (unaligned in a
	                            file being read) */
} dt_ckpt_key;

/* The header, up to the round count: each store kind's section (its u64
 * count, then its records) follows, in the order of the format. */
void dt__ckpt_begin(dt_wbuf *w, const dt_ckpt_head *h);
void dt__ckpt_key(dt_wbuf *w, const dt_ckpt_key *k, uint32_t nworkers);
/* Append the trailer (length, CRC-32, end mark) to the body of buf, which
 * has room for it; the file's length. (The writer thread does it: the
 * checksum costs nothing to the I/O thread.) */
#define DT_CKPT_TRAILER (8 + 4 + 8)
size_t dt__ckpt_seal(uint8_t *buf, size_t body);
/* dir/name atomically: temporary file, fsync, the old one to name.prev,
 * rename, fsync of dir. */
dt_err dt__ckpt_write(const char *dir, const char *name, const void *buf,
                      size_t len);
/* The whole file into *buf (malloc'd). */
dt_err dt__ckpt_read(const char *path, uint8_t **buf, size_t *len);
/* Read a whole checkpoint file's bytes (buf, len: as dt__ckpt_read gives
 * them) as hostile bytes, every section checked to its end; a one-line
 * summary into summary (cap bytes; 0: none). dt_kv_checkpoint_inspect and
 * the checkpoint fuzz target call it. */
dt_err dt__ckpt_summary(const char *path, const uint8_t *buf, size_t len,
                        char *summary, size_t cap);
/* Check the end mark, length and checksum of buf, then read the header;
 * r is left at the first key. Every error names path and the fault. */
dt_err dt__ckpt_open(const char *path, const uint8_t *buf, size_t len,
                     dt_rbuf *r, dt_ckpt_head *h);
/* The next key (k->applied has room for h->nworkers), bounds-checked. */
dt_err dt__ckpt_next_key(const char *path, dt_rbuf *r, const dt_ckpt_head *h,
                         dt_ckpt_key *k);

/* A row_sparse table's part in a checkpoint (the rows [lo, lo + n)). */
typedef struct dt_ckpt_table {
	dt_key key;
	uint64_t rows, lo, n, width, steps;
	uint64_t *applied; /* per worker rank: its pushes in the values */
	uint64_t state_len;
	const void *val, *state; /* n * width and state_len floats */
} dt_ckpt_table;

void dt__ckpt_table(dt_wbuf *w, const dt_ckpt_table *t, uint32_t nworkers);
/* The count that opens a later section (what: its records, for errors),
 * checked against the bytes left; 0 in a version 1 file, which has none. */
dt_err dt__ckpt_count(const char *path, dt_rbuf *r, const dt_ckpt_head *h,
                      const char *what, uint64_t *count);
/* The next row table (t->applied has room for h->nworkers), bounds-checked
 * against the file and the row tables' limits. */
dt_err dt__ckpt_next_table(const char *path, dt_rbuf *r, const dt_ckpt_head *h,
                           dt_ckpt_table *t);

#endif
