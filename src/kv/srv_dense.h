/*
 * srv_dense.h - what the dense store kind's two files share: a key's
 * entry (srv_dense.c serves its requests and rounds; srv_dense_ckpt.c
 * writes and reads its checkpoint section). Private to them.
 *
 * Threads: the node's I/O thread only, as the rest of the server.
 */
#ifndef DT_KV_SRV_DENSE_H
#define DT_KV_SRV_DENSE_H

#include "kv/server.h"

#define dense_find       DT_SRV(dense_find)
#define dense_insert     DT_SRV(dense_insert)
#define dense_alloc      DT_SRV(dense_alloc)
#define dense_free_entry DT_SRV(dense_free_entry)
#define dense_count      DT_SRV(dense_count)
#define dense_snap_bytes DT_SRV(dense_snap_bytes)
#define dense_snapshot   DT_SRV(dense_snapshot)
#define dense_held       DT_SRV(dense_held)
#define dense_load       DT_SRV(dense_load)
#define dense_drop       DT_SRV(dense_drop)

/* A request answered later: a push or pull at its round's end, or an
 * init waiting for rank 0's value. */
typedef struct waiter {
	int worker; /* rank */
	int cmd;
	uint64_t seq;
	uint64_t n, offset; /* what an INIT asked for */
	unsigned enc;       /* a pull's or pushpull's answer encoding */
	struct waiter *next;
} waiter;

/* A worker's second push in a round, decoded, for the next round. */
typedef struct deferred {
	int worker;
	int cmd;
	uint64_t seq;
	unsigned enc;   /* the answer's encoding */
	float *data;    /* the push, decoded (NULL: a held pull) */
	uint64_t ahead; /* a held pull: its worker's held pushes before it */
	struct deferred *next;
} deferred;

/* A key (or this server's slice of a big one). */
typedef struct entry {
	dt_key key;
	uint64_t n;      /* the whole array's length */
	uint64_t offset; /* of this server's slice */
	size_t len;      /* of the slice */
	int initialised;
	float *val;
	float *merge;
	float *state;
	float *prev; /* recovery, dist_sync: the value before the last round
	                (a restarted worker recomputes that round) */
	float *hold; /* elastic dist_sync: each worker's push of the round
	                (len floats by worker rank), summed in rank order */
	uint64_t steps;
	uint64_t *applied; /* by worker rank: its pushes in val (checkpoints) */
	int restored;      /* loaded from a checkpoint: an INIT keeps val */
	int npushed;
	uint8_t *pushed;      /* by worker rank, this round */
	waiter *answers;      /* answered at the end of the round */
	waiter *inits;        /* INITs waiting for rank 0's value */
	deferred *later;      /* second pushes in a round, oldest first */
	deferred *later_last; /* its last (NULL when later is) */
	uint32_t *nheld;      /* by worker rank: its pushes in later */
	deferred *pulls;      /* pulls behind pushes in later, oldest first */
	srv_kept *parked;     /* before its INIT, oldest first (recovery) */
	/* The stall report: when the open round took its first push, and
	 * whether its stall was logged. */
	uint64_t t_open;
	int stall_told;
	dt_hnode hn; /* in keys */
} entry;

/* The entry of key (NULL: none); a new one, without a value yet (NULL: no
 * memory); its value's buffers for len floats at offset of an array of n
 * (-1: no memory; dense_free_entry frees what was made); and the entry
 * freed with everything that waits in it. */
entry *dense_find(kv_server *s, dt_key key);
entry *dense_insert(kv_server *s, dt_key key);
int dense_alloc(kv_server *s, entry *e, uint64_t n, uint64_t offset,
                size_t len);
void dense_free_entry(entry *e);

/* The kind's checkpoint section and records (server.h: srv_kind). */
uint64_t dense_count(kv_server *s);
size_t dense_snap_bytes(kv_server *s);
void dense_snapshot(kv_server *s, dt_wbuf *w);
void dense_held(kv_server *s, dt_key *keys, uint64_t *applied);
dt_err dense_load(kv_server *s, const char *path, dt_rbuf *r,
                  const dt_ckpt_head *h);
void dense_drop(kv_server *s);

/* The kind's part of the stall report (srv_dense_stall.c; srv_kind). */
#define dense_describe DT_SRV(dense_describe)
#define dense_stalled  DT_SRV(dense_stalled)
int dense_describe(kv_server *s, int worker, const dt_kv_stall_ask *a,
                   char *buf, size_t cap);
void dense_stalled(kv_server *s, uint64_t now);

#endif
