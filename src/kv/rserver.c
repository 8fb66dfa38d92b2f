/*
 * rserver.c - a parameter server's row_sparse tables (KV_ROW_*): the
 * messages of the row kind, over the tables of rstore.c, and the kind's
 * part in checkpoints and recovery.
 *
 * A table here is a key's table, or the range of its rows this server
 * holds (rstore.h). In dist_sync a round collects one push per worker; a
 * worker's next push that comes while its last one's round is open (a
 * restarted server gets the pushes a checkpoint lacks back to back) waits
 * for the next round, as a dense key's does. Each table counts the pushes
 * of each worker its values hold (applied): a checkpoint keeps them with
 * the values, so that a server restarted from it tells each worker which
 * of its pushes to send again. The same counts tell a worker restarted in
 * a lost one's place which of its predecessor's pushes a table holds
 * (KV_RESUME); its first pull asks for the rows as of the round it
 * resumes at, which the table keeps for one round under recovery in
 * dist_sync (rstore.h: keep_prev).
 *
 * Threads: the node's I/O thread, as the rest of the server (server.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/rstore.h"
#include "kv/server.h"

typedef struct rwait {
	int worker;
	int cmd;
	uint64_t seq;
	unsigned enc;
	size_t count;
	uint8_t *ids; /* a pushpull's rows, to answer with (count u64) */
	struct rwait *next;
} rwait;

typedef struct rtable {
	dt_rstore rs;
	uint64_t *applied; /* by worker rank: its pushes in the values */
	int restored;      /* loaded from a checkpoint: an init keeps them */
	rwait *answers;    /* the open round's pushes */
	srv_kept *later;   /* second pushes of a worker in a round */
	/* Recovery in dist_sync: the store keeps the rows the last round
	 * changed as they were before it (rs.keep_prev), and has since that
	 * round closed here (not on a table loaded from a checkpoint). */
	int prev_ok;
	dt_hnode hn; /* in rtabs */
} rtable;

static rtable *
find_rows(kv_server *s, dt_key key)
{
	dt_hnode *h = dt__table_find(&s->rtabs, key);

	return h ? DT_CONTAINER_OF(h, rtable, hn) : NULL;
}

static void
free_rtable(rtable *t)
{
	while (t->answers) {
		rwait *w = t->answers;

		t->answers = w->next;
		free(w->ids);
		free(w);
	}
	srv_kept_free(t->later);
	free(t->applied);
	dt__rs_fini(&t->rs);
	free(t);
}

/* Handle the requests of list (taken) again, in order. */
static void
run_later(kv_server *s, srv_kept *list)
{
	while (list) {
		srv_kept *q = list;
		dt_msg m = {
		    .hdr = q->h, .meta = q->meta, .payload = q->payload};

		list = q->next;
		q->next = NULL;
		srv_on_rows(s, q->worker, &m);
		srv_kept_free(q);
	}
}

/* Answer a row request with rows ids of t (a pull's, a pushpull's), or
 * with nothing (a push). */
static void
rows_answer(kv_server *s, rtable *t, int worker, int cmd, uint64_t seq,
            unsigned enc, size_t count, const uint8_t *ids)
{
	size_t n = count * t->rs.width;

	if (cmd == DT_CMD_KV_ROW_PUSH) {
		srv_reply(s, worker, cmd, seq, t->rs.key, NULL, 0);
		return;
	}
	/* (its rows are unique, so it is never bigger than the part of the
	 * table held here; said again where the buffer is sized) */
	if (n * sizeof(float) > t->rs.val_bytes) {
		srv_reply_error(s, worker, cmd, seq, t->rs.key, DT_ESIZE,
		                "%s of key %llu: an answer of %zu rows is "
		                "bigger than the %llu rows held here",
		                dt__kv_op_name(cmd),
		                (unsigned long long)t->rs.key, count,
		                (unsigned long long)t->rs.n);
		return;
	}
	if (!dt__buf_reserve((uint8_t **)&s->gath, &s->gath_cap,
	                     DT_MAX(n, 1) * sizeof(float))) {
		srv_reply_error(s, worker, cmd, seq, t->rs.key, DT_ENOMEM,
		                "%s of key %llu: out of memory for the answer "
		                "(%zu rows)",
		                dt__kv_op_name(cmd),
		                (unsigned long long)t->rs.key, count);
		return;
	}
	dt__rs_gather(&t->rs, count, ids, s->gath);
	srv_reply_val(s, worker, cmd, seq, t->rs.key, s->gath, n, enc, 1);
}

/* The bytes a table of n rows of width comes to hold here once every row
 * has been written (dt__rs_plan_bytes), with, under recovery in
 * dist_sync, the copy of the rows of the round before (at most a round
 * of every row). */
static uint64_t
plan_bytes(kv_server *s, uint64_t n, uint64_t width)
{
	uint64_t b = dt__rs_plan_bytes(n, width, s->nworkers, s->sync, &s->opt),
	         extra;

	if (b == UINT64_MAX || !(s->sync && dt__node_recover(s->node)))
		return b;
	/* (plan_bytes checked that n * 32 * width fits) */
	extra = n * (sizeof(uint64_t) + width * sizeof(float));
	return extra > UINT64_MAX - b ? UINT64_MAX : b + extra;
}

/*
 * Refuse (1) a row_sparse table whose part here would take this server's
 * row tables past DTRAIN_MAX_TABLE_BYTES once every row is written. The
 * rows are mapped zero pages, so a big table costs nothing at first; but
 * a push of rows spread over it makes a page for each (4 KiB for a row of
 * 4 bytes), and the limit is what keeps such pushes within memory.
 */
static int
table_too_big(kv_server *s, int worker, const dt_msg_hdr *h, uint64_t n)
{
	uint64_t want = plan_bytes(s, n, DT_MIN(h->arg1, DT_RS_MAX_WIDTH + 1));

	if (want <= s->max_table_bytes &&
	    s->table_bytes <= s->max_table_bytes - want)
		return 0;
	srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
	                "row_sparse init of key %llu: %llu rows of width %llu "
	                "take %llu bytes here, and the tables here already "
	                "%llu: more than DTRAIN_MAX_TABLE_BYTES (%llu)",
	                (unsigned long long)h->key, (unsigned long long)n,
	                (unsigned long long)h->arg1, (unsigned long long)want,
	                (unsigned long long)s->table_bytes,
	                (unsigned long long)s->max_table_bytes);
	return 1;
}

/* A new empty table of key, in rtabs; an error names what did not fit. */
static dt_err
new_table(kv_server *s, dt_key key, uint64_t rows, uint64_t lo, uint64_t n,
          size_t width, rtable **out)
{
	rtable *t = calloc(1, sizeof(*t));
	dt_err err;

	if (t == NULL || (t->applied = calloc((size_t)s->nworkers,
	                                      sizeof(uint64_t))) == NULL) {
		free(t);
		return dt__fail(DT_ENOMEM,
		                "row_sparse init of key %llu: out of memory",
		                (unsigned long long)key);
	}
	if ((err = dt__rs_init(&t->rs, key, rows, lo, n, width, s->nworkers,
	                       s->sync, &s->opt))) {
		free(t->applied);
		free(t);
		return err;
	}
	/* (a restarted worker may need the rows of the round before) */
	t->rs.keep_prev = s->sync && dt__node_recover(s->node);
	dt__table_insert(&s->rtabs, &t->hn, key);
	s->table_bytes += plan_bytes(s, n, width);
	s->ninit++;
	*out = t;
	return DT_OK;
}

static void
drop_table(kv_server *s, rtable *t)
{
	dt__table_remove(&s->rtabs, &t->hn);
	s->table_bytes -= plan_bytes(s, t->rs.n, t->rs.width);
	s->ninit--;
	free_rtable(t);
}

/* An init of a table this server holds already: restored from a
 * checkpoint (the same shape: its values stay), else refused. */
static void
init_again(kv_server *s, int worker, const dt_msg_hdr *h, rtable *t,
           uint64_t lo, uint64_t n)
{
	if (!t->restored) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_EEXIST,
		                "row_sparse init of key %llu: the key was "
		                "already initialised by %s",
		                (unsigned long long)h->key,
		                srv_rows_kind.made_by);
		return;
	}
	if (t->rs.rows != h->arg0 || t->rs.width != h->arg1 || t->rs.lo != lo ||
	    t->rs.n != n) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		                "row_sparse init of key %llu: %llu rows of "
		                "width %llu, but the checkpoint's table has "
		                "%llu of width %zu",
		                (unsigned long long)h->key,
		                (unsigned long long)h->arg0,
		                (unsigned long long)h->arg1,
		                (unsigned long long)t->rs.rows, t->rs.width);
		return;
	}
	srv_reply(s, worker, h->cmd, h->seq, h->key, NULL, 0);
}

/* What waited for key's table (a restarted server's replay), in order. */
static void
rows_unpark(kv_server *s, dt_key key)
{
	srv_kept *take = NULL, **tail = &take, **p = &s->rparked;

	while (*p) {
		srv_kept *q = *p;

		if (q->h.key != key) {
			p = &q->next;
			continue;
		}
		*p = q->next;
		q->next = NULL;
		*tail = q;
		tail = &q->next;
	}
	run_later(s, take);
}

/* Check an init's header and values against the table t just made (1:
 * refused, t dropped). */
static int
init_bad(kv_server *s, int worker, const dt_msg *m, rtable *t)
{
	const dt_msg_hdr *h = &m->hdr;
	int has_value = (h->arg2 & DT_KV_INIT_HAS_VALUE) != 0;

	if (has_value &&
	    (h->payload_len != t->rs.val_bytes || m->payload == NULL)) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		                "row_sparse init of key %llu: %llu bytes of "
		                "values for %llu rows of width %zu",
		                (unsigned long long)h->key,
		                (unsigned long long)h->payload_len,
		                (unsigned long long)t->rs.n, t->rs.width);
	} else if (!has_value && h->payload_len) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		                "row_sparse init of key %llu: values without "
		                "the flag that says so",
		                (unsigned long long)h->key);
	} else {
		if (has_value)
			memcpy(t->rs.val, m->payload, t->rs.val_bytes);
		return 0;
	}
	drop_table(s, t);
	return 1;
}

void
srv_on_row_init(kv_server *s, int worker, const dt_msg *m)
{
	const dt_msg_hdr *h = &m->hdr;
	const srv_kind *home = srv_home_of(s, h->key, &srv_rows_kind);
	uint64_t lo, n;
	rtable *t;
	dt_err err;

	if (home) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_EEXIST,
		                "row_sparse init of key %llu: the key was "
		                "already initialised by %s",
		                (unsigned long long)h->key, home->made_by);
		return;
	}
	if (h->meta_len != 16 || (h->arg2 & ~(uint64_t)DT_KV_INIT_HAS_VALUE)) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_EPROTO,
		                "row_sparse init of key %llu: %u bytes of meta "
		                "(16: the first row here and the count), flags "
		                "%#llx",
		                (unsigned long long)h->key, h->meta_len,
		                (unsigned long long)h->arg2);
		return;
	}
	lo = dt__get_u64(m->meta);
	n = dt__get_u64(m->meta + 8);
	if ((t = find_rows(s, h->key)) != NULL) {
		init_again(s, worker, h, t, lo, n);
		return;
	}
	if (table_too_big(s, worker, h, n))
		return;
	if ((err =
	         new_table(s, h->key, h->arg0, lo, n,
	                   (size_t)DT_MIN(h->arg1, DT_RS_MAX_WIDTH + 1), &t))) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, err, "%s",
		                dt_errmsg());
		return;
	}
	if (init_bad(s, worker, m, t))
		return;
	DT_LOG(1, "row_sparse table %llu: rows [%llu, %llu) of %llu, width %zu",
	       (unsigned long long)h->key, (unsigned long long)lo,
	       (unsigned long long)(lo + n), (unsigned long long)h->arg0,
	       t->rs.width);
	srv_reply(s, worker, h->cmd, h->seq, h->key, NULL, 0);
	if (s->rparked)
		rows_unpark(s, h->key);
}

/* The pushed values as floats (*g; NULL for an empty push): fp32 bodies
 * as they are (aligned: after 8-byte ids), others decoded; 0 (answered)
 * if they cannot be. */
static int
push_values(kv_server *s, int worker, const dt_msg_hdr *h, const dt_kv_rows *b,
            const float **g)
{
	const char *op = dt__kv_op_name(h->cmd);
	size_t nv = b->count * b->width;
	dt_err err;

	*g = (const float *)(const void *)b->body;
	if (b->push == DT_QUANT_NONE) {
		if (nv && ((uintptr_t)*g & 3)) { /* (never, from a worker) */
			srv_reply_error(s, worker, h->cmd, h->seq, h->key,
			                DT_EPROTO, "%s: values not aligned",
			                op);
			return 0;
		}
		return 1;
	}
	if (!dt__buf_reserve(&s->dec, &s->dec_cap,
	                     DT_MAX(nv, 1) * sizeof(float))) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
		                "%s of key %llu: out of memory decoding %zu "
		                "values",
		                op, (unsigned long long)h->key, nv);
		return 0;
	}
	if (nv && (err = dt__quant_decode(b->push, b->t, b->body, nv,
	                                  (float *)(void *)s->dec))) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, err,
		                "%s of key %llu: %s", op,
		                (unsigned long long)h->key, dt_errmsg());
		return 0;
	}
	*g = (const float *)(void *)s->dec;
	return 1;
}

/* The end of a dist_sync round: everyone's answer, in arrival order. */
static void
round_closed(kv_server *s, rtable *t)
{
	for (int w = 0; w < s->nworkers; w++)
		t->applied[w]++;
	t->prev_ok = t->rs.keep_prev;
	s->rounds++;
	while (t->answers) {
		rwait *w = t->answers;

		t->answers = w->next;
		rows_answer(s, t, w->worker, w->cmd, w->seq, w->enc, w->count,
		            w->ids);
		free(w->ids);
		free(w);
	}
}

/* dist_sync: a push joins the open round (1: the round closed). */
static int
rows_push_sync(kv_server *s, rtable *t, int worker, const dt_msg_hdr *h,
               const dt_kv_rows *b, const float *g)
{
	rwait *w = calloc(1, sizeof(*w)), **p = &t->answers;
	int closed;
	dt_err err;

	if (w && h->cmd == DT_CMD_KV_ROW_PUSHPULL && b->count &&
	    (w->ids = malloc(b->count * 8)) == NULL) {
		free(w);
		w = NULL;
	}
	if (w == NULL) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
		                "%s of key %llu: out of memory",
		                dt__kv_op_name(h->cmd),
		                (unsigned long long)h->key);
		return 0;
	}
	uint64_t t_merge = dt__now_ns();

	err = dt__rs_push_sync(&t->rs, worker, b->count, b->ids, g, &closed);
	srv_busy(DT_EV_KV_MERGE, t_merge, h->key, 0,
	         dt__node_worker_id(s->node, worker));
	if (err) {
		free(w->ids);
		free(w);
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, err, "%s",
		                dt_errmsg());
		return 0;
	}
	*w = (rwait){worker, h->cmd, h->seq, b->answer, b->count, w->ids, NULL};
	if (w->ids)
		memcpy(w->ids, b->ids, b->count * 8);
	while (*p)
		p = &(*p)->next;
	*p = w;
	if (closed)
		round_closed(s, t);
	return closed;
}

/* dist_sync: whether worker's next request of t waits for the open
 * round's end: it has pushed in it, or a push of its waits already. Only
 * a restarted server's replay sends such requests (a worker waits for a
 * push's answer before its next call of the table): a pull then sees the
 * worker's own pushes, as it did before. */
static int
waits(const rtable *t, int worker)
{
	if (dt__rs_pushed(&t->rs, worker))
		return 1;
	for (const srv_kept *q = t->later; q; q = q->next)
		if (q->worker == worker)
			return 1;
	return 0;
}

static void
keep_or_refuse(kv_server *s, rtable *t, int worker, const dt_msg *m)
{
	if (srv_keep(&t->later, worker, &m->hdr, m->meta, m->payload))
		srv_reply_error(s, worker, m->hdr.cmd, m->hdr.seq, m->hdr.key,
		                DT_ENOMEM, "%s of key %llu: out of memory",
		                dt__kv_op_name(m->hdr.cmd),
		                (unsigned long long)m->hdr.key);
}

/* A push or pushpull of checked rows b to t. */
static void
on_push(kv_server *s, rtable *t, int worker, const dt_msg *m,
        const dt_kv_rows *b)
{
	const dt_msg_hdr *h = &m->hdr;
	const float *g;

	if (s->sync && waits(t, worker)) {
		/* Its next round's: it waits for this one's end. */
		keep_or_refuse(s, t, worker, m);
		return;
	}
	if (!push_values(s, worker, h, b, &g))
		return;
	if (!s->sync) {
		uint64_t t0 = dt__now_ns();

		dt__rs_apply(&t->rs, b->count, b->ids, g);
		srv_busy(DT_EV_KV_UPDATE, t0, h->key, 0,
		         dt__node_worker_id(s->node, worker));
		t->applied[worker]++;
		s->rounds++;
		rows_answer(s, t, worker, h->cmd, h->seq, b->answer, b->count,
		            b->ids);
		srv_maybe_checkpoint(s);
		return;
	}
	if (!rows_push_sync(s, t, worker, h, b, g))
		return;
	srv_maybe_checkpoint(s);
	if (t->later) { /* (each joins the new round, or waits again) */
		srv_kept *list = t->later;

		t->later = NULL;
		run_later(s, list);
	}
}

/* A request for a table that does not exist: on a server that took a
 * lost one's place it waits for the table's init (1), which a worker's
 * replay may bring after another worker's pushes. */
static int
rows_park(kv_server *s, int worker, const dt_msg *m)
{
	if (!s->rejoined)
		return 0;
	if (srv_keep(&s->rparked, worker, &m->hdr, m->meta, m->payload))
		srv_reply_error(s, worker, m->hdr.cmd, m->hdr.seq, m->hdr.key,
		                DT_ENOMEM, "out of memory");
	return 1;
}

/* The table of a row request, or NULL (answered, or parked). */
static rtable *
table_of(kv_server *s, int worker, const dt_msg *m, const dt_kv_rows *b)
{
	const dt_msg_hdr *h = &m->hdr;
	rtable *t = find_rows(s, h->key);
	const srv_kind *home;

	if (t && b->width != t->rs.width) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		                "%s of key %llu: rows of width %zu, but the "
		                "table's are %zu wide",
		                dt__kv_op_name(h->cmd),
		                (unsigned long long)h->key, b->width,
		                t->rs.width);
		return NULL;
	}
	if (t)
		return t;
	if ((home = srv_home_of(s, h->key, &srv_rows_kind)) != NULL) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESTATE,
		                "%s of key %llu: not a row_sparse table: it "
		                "was initialised by %s",
		                dt__kv_op_name(h->cmd),
		                (unsigned long long)h->key, home->made_by);
		return NULL;
	}
	if (rows_park(s, worker, m))
		return NULL;
	srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ENOKEY,
	                "%s of key %llu: unknown key (never initialised with "
	                "dt_kv_init_row_sparse)",
	                dt__kv_op_name(h->cmd), (unsigned long long)h->key);
	return NULL;
}

/*
 * Recovery: rows b as they were after round b->round, for a worker that
 * took a lost one's place and computes that round's step again. In
 * dist_sync the table's rounds wait for this worker, so the table is at
 * that round (its predecessor's push of the next one not here, or here
 * and the round open: the values now) or one past it (the round closed:
 * the rows it changed are kept as they were). dist_async has no rounds
 * to keep: the values now. It is answered at once, even when the
 * predecessor's push waits in the open round.
 */
static void
rows_pull_at(kv_server *s, rtable *t, int worker, const dt_msg_hdr *h,
             const dt_kv_rows *b)
{
	uint64_t r = b->round, now = t->applied[worker];
	size_t n = b->count * t->rs.width;

	if (s->sync && r != now && !(r + 1 == now && t->prev_ok)) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ESTATE,
		                "pull of key %llu as of round %llu: the table "
		                "is at round %llu, and only the rows of the "
		                "round before are kept",
		                (unsigned long long)h->key,
		                (unsigned long long)r, (unsigned long long)now);
		return;
	}
	if (!s->sync || r == now) {
		rows_answer(s, t, worker, h->cmd, h->seq, b->answer, b->count,
		            b->ids);
		return;
	}
	/* (rows_answer's bound: a pull's rows are unique and held here) */
	if (!dt__buf_reserve((uint8_t **)&s->gath, &s->gath_cap,
	                     DT_MAX(n, 1) * sizeof(float))) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
		                "pull of key %llu as of round %llu: out of "
		                "memory for the answer (%zu rows)",
		                (unsigned long long)h->key,
		                (unsigned long long)r, b->count);
		return;
	}
	dt__rs_gather_prev(&t->rs, b->count, b->ids, s->gath);
	srv_reply_val(s, worker, h->cmd, h->seq, h->key, s->gath, n, b->answer,
	              1);
}

void
srv_on_rows(kv_server *s, int worker, const dt_msg *m)
{
	const dt_msg_hdr *h = &m->hdr;
	rtable *t;
	dt_kv_rows b;
	size_t bad;
	dt_err err;

	if (m->payload && m->payload == s->rx[worker].buf)
		s->rx[worker].holder = NULL; /* (whole: used before the next) */
	if ((err = dt__kv_rows_decode(h, m->meta, m->payload, &b))) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, err, "%s",
		                dt_errmsg());
		return;
	}
	if ((t = table_of(s, worker, m, &b)) == NULL)
		return;
	/* (a pull's rows are unique too: its answer is then no bigger than
	 * this server's part of the table; workers send each row once) */
	if ((err = dt__rs_check(&t->rs, dt__kv_op_name(h->cmd), b.count, b.ids,
	                        1, &bad))) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, err, "%s",
		                dt_errmsg());
		return;
	}
	if (h->cmd != DT_CMD_KV_ROW_PULL)
		on_push(s, t, worker, m, &b);
	else if (b.at)
		rows_pull_at(s, t, worker, h, &b);
	else if (s->sync && waits(t, worker))
		keep_or_refuse(s, t, worker, m); /* (sees its pushes) */
	else
		rows_answer(s, t, worker, h->cmd, h->seq, b.answer, b.count,
		            b.ids);
}

/* ---- the kind's ops ---- */

static int
rows_owns(kv_server *s, dt_key key)
{
	return dt__table_count(&s->rtabs) && find_rows(s, key) != NULL;
}

static void
rows_set_opt(kv_server *s, const dt_opt *opt)
{
	dt_table_iter it;

	for (dt_hnode *h = dt__table_first(&s->rtabs, &it); h;
	     h = dt__table_next(&it))
		dt__rs_set_opt(&DT_CONTAINER_OF(h, rtable, hn)->rs, opt);
}

static int
rows_any(kv_server *s)
{
	return dt__table_count(&s->rtabs) != 0;
}

static uint64_t
rows_count(kv_server *s)
{
	return dt__table_count(&s->rtabs);
}

static size_t
rows_snap_bytes(kv_server *s)
{
	size_t size = 8;
	dt_table_iter it;

	for (dt_hnode *h = dt__table_first(&s->rtabs, &it); h;
	     h = dt__table_next(&it)) {
		rtable *t = DT_CONTAINER_OF(h, rtable, hn);

		size += 8 * (8 + (size_t)s->nworkers) + t->rs.val_bytes +
		        t->rs.state_bytes;
	}
	return size;
}

/* Between two rounds as far as the values go: a round's pushes so far
 * are in its sums, not in the values, and applied counts only the rounds
 * done; the workers send the rest again. */
static void
rows_snapshot(kv_server *s, dt_wbuf *w)
{
	dt_table_iter it;

	dt__wbuf_u64(w, dt__table_count(&s->rtabs));
	for (dt_hnode *h = dt__table_first(&s->rtabs, &it); h;
	     h = dt__table_next(&it)) {
		rtable *t = DT_CONTAINER_OF(h, rtable, hn);
		dt_ckpt_table c = {.key = t->rs.key,
		                   .rows = t->rs.rows,
		                   .lo = t->rs.lo,
		                   .n = t->rs.n,
		                   .width = t->rs.width,
		                   .steps = t->rs.steps,
		                   .applied = t->applied,
		                   .state_len =
		                       t->rs.state_bytes / sizeof(float),
		                   .val = t->rs.val,
		                   .state = t->rs.state};

		dt__ckpt_table(w, &c, (uint32_t)s->nworkers);
	}
}

static void
rows_held(kv_server *s, dt_key *keys, uint64_t *applied)
{
	dt_table_iter it;
	size_t k = 0;

	for (dt_hnode *h = dt__table_first(&s->rtabs, &it); h;
	     h = dt__table_next(&it), k++) {
		rtable *t = DT_CONTAINER_OF(h, rtable, hn);

		keys[k] = t->rs.key;
		memcpy(applied + k * (size_t)s->nworkers, t->applied,
		       sizeof(uint64_t) * (size_t)s->nworkers);
	}
}

/* One table of a checkpoint into the store (rec: checked by ckpt.c). */
static dt_err
load_table(kv_server *s, const char *path, const dt_ckpt_table *c)
{
	rtable *t;
	dt_err err;

	if (find_rows(s, c->key) || srv_home_of(s, c->key, &srv_rows_kind))
		return dt__fail(DT_EFORMAT, "%s: key %llu twice", path,
		                (unsigned long long)c->key);
	if ((err = new_table(s, c->key, c->rows, c->lo, c->n, (size_t)c->width,
	                     &t))) {
		char msg[256];

		snprintf(msg, sizeof(msg), "%s", dt_errmsg());
		return dt__fail(err, "%s: %s", path, msg);
	}
	if (c->state_len * sizeof(float) != t->rs.state_bytes) {
		drop_table(s, t);
		return dt__fail(DT_EFORMAT,
		                "%s: row table %llu has %llu optimizer state "
		                "floats, its optimizer needs %zu",
		                path, (unsigned long long)c->key,
		                (unsigned long long)c->state_len,
		                t->rs.state_bytes / sizeof(float));
	}
	memcpy(t->rs.val, c->val, t->rs.val_bytes);
	if (t->rs.state_bytes)
		memcpy(t->rs.state, c->state, t->rs.state_bytes);
	memcpy(t->applied, c->applied, sizeof(uint64_t) * (size_t)s->nworkers);
	t->rs.steps = c->steps;
	t->restored = 1;
	return DT_OK;
}

static dt_err
rows_load(kv_server *s, const char *path, dt_rbuf *r, const dt_ckpt_head *h)
{
	uint64_t count;
	dt_ckpt_table c = {0};
	dt_err err;

	if ((err = dt__ckpt_count(path, r, h, "row tables", &count)))
		return err;
	if ((c.applied = calloc(h->nworkers, sizeof(uint64_t))) == NULL)
		return dt__fail(DT_ENOMEM, "%s: out of memory", path);
	for (uint64_t i = 0; i < count && err == DT_OK; i++)
		if ((err = dt__ckpt_next_table(path, r, h, &c)) == DT_OK)
			err = load_table(s, path, &c);
	free(c.applied);
	return err;
}

/*
 * Recovery, KV_RESUME of a table (the part this server holds: arg0 its
 * rows, arg1 the first here, arg2 its width): how many pushes of worker
 * the table holds - applied, in the open round, or waiting for the next.
 */
static int
rows_resume(kv_server *s, int worker, const dt_msg_hdr *h, const uint8_t *meta)
{
	rtable *t = find_rows(s, h->key);
	uint64_t have;

	(void)meta;
	if (t == NULL)
		return 0;
	if (h->arg0 != t->rs.rows || h->arg1 != t->rs.lo ||
	    h->arg2 != t->rs.width) {
		srv_reply_error(
		    s, worker, h->cmd, h->seq, h->key, DT_ESIZE,
		    "resume of key %llu: a table of %llu rows of "
		    "width %llu from row %llu, but this server "
		    "holds %llu rows of width %zu from row %llu",
		    (unsigned long long)h->key, (unsigned long long)h->arg0,
		    (unsigned long long)h->arg2, (unsigned long long)h->arg1,
		    (unsigned long long)t->rs.rows, t->rs.width,
		    (unsigned long long)t->rs.lo);
		return 1;
	}
	have = t->applied[worker] + (s->sync && dt__rs_pushed(&t->rs, worker));
	for (const srv_kept *q = t->later; q; q = q->next)
		have += q->worker == worker && q->h.cmd != DT_CMD_KV_ROW_PULL;
	srv_reply_held(s, worker, h, have);
	return 1;
}

static void
rows_peer_restart(kv_server *s, int worker)
{
	dt_table_iter it;

	for (dt_hnode *h = dt__table_first(&s->rtabs, &it); h;
	     h = dt__table_next(&it)) {
		rtable *t = DT_CONTAINER_OF(h, rtable, hn);

		for (rwait *w = t->answers; w; w = w->next)
			if (w->worker == worker)
				w->seq = 0;
		for (srv_kept *q = t->later; q; q = q->next)
			if (q->worker == worker)
				q->h.seq = 0;
	}
	for (srv_kept *q = s->rparked; q; q = q->next)
		if (q->worker == worker)
			q->h.seq = 0;
}

/* Every replay is over: what still waits for a table that never came is
 * answered (unknown key). */
static void
rows_replayed(kv_server *s)
{
	srv_kept *list = s->rparked;

	s->rparked = NULL;
	run_later(s, list);
}

static void
rows_drop(kv_server *s)
{
	dt_table_iter it;
	dt_hnode *h;

	while ((h = dt__table_first(&s->rtabs, &it)) != NULL)
		drop_table(s, DT_CONTAINER_OF(h, rtable, hn));
	srv_kept_free(s->rparked);
	s->rparked = NULL;
}

/* Where a row request's payload goes: a table's init takes its rows'
 * values (or none) whole; a row request of fp32 values whose size matches
 * its header lands in its worker's buffer (srv_on_rows checks it whole). */
static int
rows_dest(kv_server *s, dt_conn *c, const dt_msg_hdr *h, const uint8_t *meta,
          void **where)
{
	if (h->cmd == DT_CMD_KV_ROW_INIT) {
		uint64_t rows = h->meta_len == 16 ? dt__get_u64(meta + 8) : 0;

		*where =
		    h->arg1 <= DT_RS_MAX_WIDTH && rows <= DT_RS_MAX_ROWS &&
		            rows * h->arg1 <= DT_RS_MAX_VALS &&
		            h->payload_len == rows * h->arg1 * sizeof(float)
		        ? NULL
		        : DT_VAN_DISCARD;
		return 1;
	}
	if (!dt__kv_rows_cmd(h->cmd))
		return 0;
	*where = h->arg1 == 0 || h->arg1 > DT_RS_MAX_WIDTH ||
	                 h->arg0 > DT_RS_MAX_ROWS || DT_KV_ENC_PUSH(h->arg2) ||
	                 h->arg0 * h->arg1 > DT_RS_MAX_VALS
	             ? NULL
	             : srv_rx_lend(s, c, h,
	                           h->arg0 * 8 + (h->cmd != DT_CMD_KV_ROW_PULL
	                                              ? h->arg0 * h->arg1 * 4
	                                              : 0));
	return 1;
}

const srv_kind srv_rows_kind = {
    .made_by = "a row_sparse init (dt_kv_init_row_sparse)",
    .noun = "row tables",
    .dest = rows_dest,
    .owns = rows_owns,
    .set_opt = rows_set_opt,
    .any = rows_any,
    .count = rows_count,
    .snap_bytes = rows_snap_bytes,
    .snapshot = rows_snapshot,
    .held = rows_held,
    .load = rows_load,
    .resume = rows_resume,
    .peer_restart = rows_peer_restart,
    .replayed = rows_replayed,
    .drop = rows_drop,
};
