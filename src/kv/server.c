/*
 * server.c - a parameter server's router: the messages of the KVStore
 * handed to the store kind they are for, the server's shared state (its
 * mode, optimizer, scratch and receive buffers), its start and stop, and
 * the kinds' table.
 *
 * The store kinds are behind one ops table (server.h), each in its own
 * file: dense keys (srv_dense.c), many-key requests (srv_many.c) and row
 * tables (rserver.c). The router loops over them: which kind holds a
 * key, which serves a single-key request, where a payload goes, the mode
 * and optimizer settings, recovery's restarts and replays. Checkpoints
 * (srv_ckpt.c) loop over them the same way; answers are in srv_reply.c.
 *
 * Threads: everything here runs in the node's I/O thread (the checkpoint
 * writer thread of srv_ckpt.c only takes finished snapshots).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/table.h"
#include "kv/kstore.h"
#include "kv/kv_impl.h"
#include "kv/rstore.h"
#include "kv/server.h"

/* ---- kept requests ---- */

int
srv_keep(srv_kept **list, int worker, const dt_msg_hdr *h, const uint8_t *meta,
         const void *payload)
{
	srv_kept *q = calloc(1, sizeof(*q));

	if (q == NULL)
		return -1;
	q->h = *h;
	q->worker = worker;
	if ((meta && h->meta_len && (q->meta = malloc(h->meta_len)) == NULL) ||
	    (payload && h->payload_len &&
	     (q->payload = malloc((size_t)h->payload_len)) == NULL)) {
		srv_kept_free(q);
		return -1;
	}
	if (q->meta)
		memcpy(q->meta, meta, h->meta_len);
	if (q->payload)
		memcpy(q->payload, payload, (size_t)h->payload_len);
	while (*list)
		list = &(*list)->next;
	*list = q;
	return 0;
}

void
srv_kept_free(srv_kept *q)
{
	while (q) {
		srv_kept *next = q->next;

		free(q->meta);
		free(q->payload);
		free(q);
		q = next;
	}
}

/* ---- routing ---- */

/* The kind that takes single-key requests of keys no kind holds. */
static const srv_kind *
adopter(void)
{
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->adopt)
			return *kind;
	return NULL;
}

void
srv_single(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta,
           const float *payload, int streamed)
{
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->single &&
		    (*kind)->single(s, worker, h, meta, payload, streamed))
			return;
	adopter()->adopt(s, worker, h, meta, payload, streamed);
}

/* Recovery, KV_RESUME: the kind of the key says how many of the worker's
 * pushes it holds; a key of no kind goes where requests of unknown keys
 * go (parked on a rejoined server until its init, else refused). */
void
srv_resume(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta)
{
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->resume && (*kind)->resume(s, worker, h, meta))
			return;
	adopter()->adopt(s, worker, h, meta, NULL, 0);
}

/* A worker's replay is over; after every worker's, what still waits for
 * a value that never came is answered with the error it would have had. */
static void
on_replayed(kv_server *s, int worker)
{
	if (!s->rejoined || s->replayed == NULL || s->replayed[worker])
		return;
	s->replayed[worker] = 1;
	if (++s->nreplayed < s->nworkers)
		return;
	s->rejoined = 0;
	DT_LOG(1, "every worker has sent again what server %d lacked", s->rank);
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->replayed)
			(*kind)->replayed(s);
}

/*
 * Recovery: a new process took worker peer's place. What its predecessor
 * asked and is still waiting is answered with sequence number 0 (ignored:
 * the new process numbers its requests from 1 again); its pushes stay
 * counted, and the new process does not send them again (dt_kv_resume).
 */
static void
on_peer_restart(void *arg, dt_node *n, int peer)
{
	kv_server *s = arg;
	int worker = peer - 1 - s->nservers;

	(void)n;
	if (worker < 0 || worker >= s->nworkers)
		return;
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->peer_restart)
			(*kind)->peer_restart(s, worker);
}

/* (in the order of a checkpoint's sections) */
const srv_kind *const srv_kinds[] = {&srv_dense_kind, &srv_rows_kind,
                                     &srv_many_kind, NULL};

const srv_kind *
srv_home_of(kv_server *s, dt_key key, const srv_kind *self)
{
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if (*kind != self && (*kind)->owns(s, key))
			return *kind;
	return NULL;
}

/*
 * An elastic job's dist_sync rounds are dropped when a worker is lost, and
 * the workers go back to their last commit: a key's value must then hold
 * nothing they cannot restore, so its optimizer runs on the workers
 * (docs/elastic.md). dist_async has no rounds to go back on. 1: refused.
 */
static int
elastic_opt_refused(kv_server *s, int worker, const dt_msg_hdr *h, int sync,
                    dt_opt_kind kind)
{
	if (!s->elastic || !sync || kind == DT_OPT_NONE)
		return 0;
	srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_ENOTSUP,
	                "%s: an optimizer on the servers in an elastic "
	                "dist_sync job (its state could not go back to the "
	                "workers' last commit); run the optimizer on the "
	                "workers, or use dist_async",
	                h->cmd == DT_CMD_KV_CONFIG ? "configure"
	                                           : "set optimizer");
	return 1;
}

/* KV_CONFIG: the store's mode. A kind that holds anything has its mode
 * fixed (its records were made for it), and a kind may refuse a mode its
 * records cannot run in. */
static void
on_config(kv_server *s, int worker, const dt_msg_hdr *h)
{
	int fixed = 0, sync = h->arg0 != 0;

	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		fixed |= ((*kind)->any && (*kind)->any(s) && sync != s->sync) ||
		         ((*kind)->takes_mode && !(*kind)->takes_mode(s, sync));
	if (fixed) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_ESTATE,
		                "configure: keys, batched keys or row_sparse "
		                "tables exist in %s mode",
		                s->sync ? "dist_sync" : "dist_async");
		return;
	}
	if (elastic_opt_refused(s, worker, h, sync, s->opt.kind))
		return;
	s->sync = sync;
	DT_LOG(1, "store mode: %s", s->sync ? "dist_sync" : "dist_async");
	srv_reply(s, worker, h->cmd, h->seq, 0, NULL, 0);
}

/* KV_SET_OPT: once a key has a value, only the parameters may change. */
static void
on_set_opt(kv_server *s, int worker, const dt_msg *m)
{
	const dt_msg_hdr *h = &m->hdr;
	dt_rbuf r;
	dt_opt opt;

	dt__rbuf_init(&r, m->meta, h->meta_len);
	if (dt__opt_decode(&r, &opt)) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_EINVAL,
		                "set optimizer: %s", dt_errmsg());
		return;
	}
	if (s->ninit && opt.kind != s->opt.kind) {
		srv_reply_error(s, worker, h->cmd, h->seq, 0, DT_ESTATE,
		                "set optimizer: keys are already initialised "
		                "with another optimizer; only its parameters "
		                "may change now");
		return;
	}
	if (elastic_opt_refused(s, worker, h, s->sync, opt.kind))
		return;
	s->opt = opt;
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->set_opt)
			(*kind)->set_opt(s, &opt);
	DT_LOG(1, "optimizer %s lr=%g momentum=%g wd=%g rescale_grad=%g",
	       opt.kind == DT_OPT_SGD ? "sgd" : "adam", opt.p.lr,
	       opt.p.momentum, opt.p.wd, opt.p.rescale_grad);
	srv_reply(s, worker, h->cmd, h->seq, 0, NULL, 0);
}

static void
dispatch(void *arg, dt_node *n, dt_conn *c, dt_msg *m)
{
	kv_server *s = arg;
	const dt_msg_hdr *h = &m->hdr;
	int sender = (int)h->sender;
	int worker = sender - 1 - s->nservers;

	if (sender != dt__conn_peer(c) || worker < 0 || worker >= s->nworkers) {
		dt__log(0, "dropping %s: KV request from node %d, not a worker",
		        dt__conn_addr(c), sender);
		dt__node_close(n, c);
		return;
	}
	switch (h->cmd) {
	case DT_CMD_KV_CONFIG:
		on_config(s, worker, h);
		return;
	case DT_CMD_KV_SET_OPT:
		on_set_opt(s, worker, m);
		return;
	case DT_CMD_KV_INIT:
		srv_single(s, worker, h, m->meta, m->payload, 0);
		return;
	case DT_CMD_KV_CHECKPOINT:
		srv_on_checkpoint(s, worker, h);
		return;
	case DT_CMD_KV_REPLAYED:
		on_replayed(s, worker);
		return;
	case DT_CMD_KV_RESUME:
		srv_resume(s, worker, h, m->meta);
		return;
	case DT_CMD_KV_STALL:
		srv_on_stall(s, worker, m);
		return;
	case DT_CMD_KV_INIT_MANY:
	case DT_CMD_KV_PUSH_MANY:
	case DT_CMD_KV_PULL_MANY:
	case DT_CMD_KV_PUSHPULL_MANY:
		if (srv_elastic_refuse(s, worker, h))
			return;
		srv_on_many(s, worker, m);
		/* Between requests: a snapshot holds each batched request
		 * whole or not at all, as far as its rounds are closed. */
		srv_maybe_checkpoint(s);
		return;
	case DT_CMD_KV_ROW_INIT:
		if (srv_elastic_refuse(s, worker, h))
			return;
		srv_on_row_init(s, worker, m);
		return;
	case DT_CMD_KV_ROW_PUSH:
	case DT_CMD_KV_ROW_PULL:
	case DT_CMD_KV_ROW_PUSHPULL:
		if (srv_elastic_refuse(s, worker, h))
			return;
		srv_on_rows(s, worker, m);
		return;
	case DT_CMD_KV_PUSH:
	case DT_CMD_KV_PUSHPULL:
		if (!srv_elastic_admit(s, worker, &m->hdr, m->meta, m->payload))
			return;
		/* fall through */
	case DT_CMD_KV_PULL:
		if (m->streamed && s->streaming)
			s->streaming[worker].on = 0; /* whole: a new one next */
		srv_single(s, worker, h, m->meta, m->payload, m->streamed);
		return;
	default:
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_EPROTO,
		                "unknown KV command %u", h->cmd);
	}
}

/*
 * Scratch (an answer's values, its fp16 form, a decoded push) is kept
 * from request to request up to this size, so steady traffic reuses it;
 * beyond it, it goes back once the request is done: one big answer must
 * not hold its memory for the rest of the job. (An answer's bytes are
 * copied by the send if they cannot go at once.)
 */
#define SCRATCH_KEEP ((size_t)64 << 20)

static void
scratch_trim(uint8_t **buf, size_t *cap)
{
	if (*cap <= SCRATCH_KEEP)
		return;
	free(*buf);
	*buf = NULL;
	*cap = 0;
}

static void
on_msg(void *arg, dt_node *n, dt_conn *c, dt_msg *m)
{
	kv_server *s = arg;

	dispatch(arg, n, c, m);
	srv_stall_tick(s);
	scratch_trim((uint8_t **)&s->gath, &s->gath_cap);
	scratch_trim(&s->kexp, &s->kexp_cap);
	scratch_trim(&s->half, &s->half_cap);
	scratch_trim(&s->dec, &s->dec_cap);
}

/*
 * The buffer of the worker that sent h on c, for a payload of want bytes:
 * kept from request to request, so a big one costs no page faults. One
 * connection at a time receives into it (a frame cut with its connection
 * leaves it held: the next ones go to the connection's own buffer).
 * NULL: the frame gets a buffer of its own.
 */
void *
srv_rx_lend(kv_server *s, dt_conn *c, const dt_msg_hdr *h, uint64_t want)
{
	int w = (int)h->sender - 1 - s->nservers;
	struct rxbuf *rb = s->rx && w >= 0 && w < s->nworkers &&
	                           (int)h->sender == dt__conn_peer(c)
	                       ? &s->rx[w]
	                       : NULL;

	if (rb == NULL || (rb->holder && rb->holder != c) ||
	    h->payload_len != want ||
	    !dt__buf_reserve(&rb->buf, &rb->cap, (size_t)want))
		return NULL;
	rb->holder = c;
	return rb->buf;
}

/*
 * Where a payload goes (the node asks before receiving it): an init's
 * value is checked against its array here; every other message goes to
 * the kind it is for, which drops (DT_VAN_DISCARD) a payload of a size
 * wrong for its key without buffering it, or lends a buffer of its own.
 * A single-key push of a key no kind holds lands in a buffer of its own
 * on a rejoined server (it waits there for its key's init: adopt), and is
 * dropped otherwise.
 */
static void *
payload_dest(void *arg, dt_node *n, dt_conn *c, const dt_msg_hdr *h,
             const uint8_t *meta)
{
	kv_server *s = arg;
	void *where;

	(void)n;
	if (h->cmd == DT_CMD_KV_INIT)
		return h->arg0 > UINT64_MAX / sizeof(float) ||
		               h->payload_len > h->arg0 * sizeof(float)
		           ? DT_VAN_DISCARD
		           : NULL;
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->dest && (*kind)->dest(s, c, h, meta, &where))
			return where;
	return s->rejoined && (h->cmd == DT_CMD_KV_PUSH ||
	                       h->cmd == DT_CMD_KV_PUSHPULL)
	           ? NULL
	           : DT_VAN_DISCARD;
}

/*
 * A piece of a streamed push (a kind's dest said DT_VAN_STREAM). PS_RESEND:
 * a frame cut by a broken connection comes again whole, and the pieces
 * used before the cut are skipped; the rest goes to the key's kind.
 */
static void
payload_chunk(void *arg, dt_node *n, dt_conn *c, const dt_msg_hdr *h,
              const void *data, uint64_t off, size_t len)
{
	kv_server *s = arg;
	size_t i0 = (size_t)(off / sizeof(float)), cnt = len / sizeof(float);
	const float *g = data;
	int worker = (int)h->sender - 1 - s->nservers;

	(void)n;
	(void)c;
	if (s->streaming && worker >= 0 && worker < s->nworkers) {
		struct streaming *st = &s->streaming[worker];

		if (!st->on || st->seq != h->seq || st->key != h->key)
			*st = (struct streaming){h->seq, h->key, 0, 1};
		else if (off == 0 && st->used)
			DT_LOG(1,
			       "push of key %llu from worker %d comes again "
			       "after a cut: its first %llu bytes were used",
			       (unsigned long long)h->key, worker,
			       (unsigned long long)st->used);
		if (off + len <= st->used)
			return; /* used before the cut */
		if (off < st->used) {
			size_t skip = (size_t)(st->used - off);

			g += skip / sizeof(float);
			i0 += skip / sizeof(float);
			cnt -= skip / sizeof(float);
		}
		st->used = off + len;
	}
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->chunk && (*kind)->chunk(s, h, g, i0, cnt, off))
			return;
}

/* The writer finishes what it was given; then everything goes. */
static void
server_free(kv_server *s)
{
	srv_ckpt_stop(s);
	srv_elastic_free(s);
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->drop)
			(*kind)->drop(s);
	dt__table_fini(&s->keys);
	dt__table_fini(&s->rtabs);
	free(s->ck_dir);
	free(s->replayed);
	free(s->streaming);
	free(s->dec);
	free(s->half);
	for (int w = 0; s->rx && w < s->nworkers; w++)
		free(s->rx[w].buf);
	free(s->rx);
	free(s->idx);
	free(s->gath);
	free(s->kexp);
	free(s);
}

/*
 * DTRAIN_MAX_TABLE_BYTES, at the server's start: the most bytes its
 * row_sparse tables may map together (values, optimizer state, round
 * slots). By default half the machine's memory: a table is refused when
 * the rows it asks for could not all be held, rather than after pushes
 * have made the machine run out.
 */
static dt_err
limits_config(kv_server *s)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	long def = pages > 0 && psize > 0 ? pages / 2 * psize : 1L << 32;
	long v;
	dt_err err;

	if ((err =
	         dt__env_long("DTRAIN_MAX_TABLE_BYTES", def, 1, 1L << 62, &v)))
		return err;
	s->max_table_bytes = (uint64_t)v;
	return DT_OK;
}

/* The class's start hook: a server node's store. */
static dt_err
server_start(dt_node *n)
{
	kv_server *s = dt__calloc(1, sizeof(*s));
	dt__app_hooks app = {0};
	dt_err err;

	if (s == NULL)
		return DT_ENOMEM;
	s->node = n;
	s->rank = dt_node_rank(n);
	s->rejoined = dt__node_rejoined(n) && dt__node_recover(n);
	s->nservers = dt_node_num_servers(n);
	/* (an elastic job's tables: a row for every worker it may grow to,
	 * DTRAIN_ELASTIC_MAX) */
	s->nworkers = dt__node_elastic(n) ? dt__node_elastic_slots(n)
	                                  : dt_node_num_workers(n);
	if (s->rejoined &&
	    (s->replayed = calloc((size_t)s->nworkers, 1)) == NULL) {
		free(s);
		return DT_ENOMEM;
	}
	s->sync = 1;
	dt__table_init(&s->keys);
	dt__table_init(&s->rtabs);
	if ((s->streaming = calloc((size_t)DT_MAX(s->nworkers, 1),
	                           sizeof(*s->streaming))) == NULL ||
	    (s->rx = calloc((size_t)DT_MAX(s->nworkers, 1), sizeof(*s->rx))) ==
	        NULL) {
		free(s->rx);
		free(s->replayed);
		free(s->streaming);
		free(s);
		return DT_ENOMEM;
	}
	if ((err = limits_config(s)) ||
	    (err = dt__kv_stall_env(&s->stall_ns)) ||
	    (err = srv_elastic_start(s)) || (err = srv_ckpt_start(s))) {
		server_free(s);
		return err;
	}
	app.arg = s;
	app.on_msg = on_msg;
	app.payload_dest = payload_dest;
	app.dest_pure = 1; /* it only chooses where a payload goes */
	app.payload_chunk = payload_chunk;
	app.on_peer_restart = on_peer_restart;
	app.on_membership = srv_on_membership;
	app.stream_resumable = 1; /* (payload_chunk skips what it used) */
	if ((err = dt__node_attach(n, &dt__kv_app, &app))) {
		server_free(s);
		return err;
	}
	if (s->rejoined)
		err = srv_rejoin(s);
	return err;
}

/* The class's stop hook, once the node's I/O thread is gone. */
static void
server_stop(dt_node *n)
{
	kv_server *s = dt__node_app_arg(n, &dt__kv_app);

	dt__node_detach(n, &dt__kv_app);
	if (s == NULL)
		return;
	server_free(s);
}

const dt__app_class dt__kv_app = {
    .name = "KVStore",
    .cmd_first = DT_CMD_KV_FIRST,
    .cmd_last = DT_CMD_KV_LAST,
    .start_roles = DT__ROLE_BIT(DT_ROLE_SERVER),
    .start = server_start,
    .stop = server_stop,
};

dt_err
dt__kv_register(void)
{
	return dt__app_register(&dt__kv_app);
}
