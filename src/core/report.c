/*
 * report.c - the cluster's side of observability: the clock offsets that
 * line the timeline's tracks up, the end-of-job REPORT that carries each
 * node's timeline events and counters to the scheduler, and the
 * scheduler's use of them (the merged trace file, the --stats table and
 * straggler report).
 *
 * Clock (CLOCK, DTRAIN_TIMELINE only): after joining, a member asks the
 * scheduler for its clock 8 times; a round that took the shortest time
 * bounds the error best, and offset = t_sched - (t_send + t_recv) / 2 of
 * that round is added to the member's timestamps when they are sent.
 * (DT_CLOCK_SKEW_MS moves a member's clock, for the test that this holds
 * across hosts.)
 *
 * REPORT (a member's stop: a worker before WORKER_DONE, a server once
 * TERMINATE came): kind 1 carries up to DT_REPORT_EVENTS timeline records
 * (48 bytes each, obs/trace.c), kind 3 ends them with the count of events
 * the member dropped over its cap, kind 2 carries the counters (obs/
 * stats.c). The scheduler checks each record, caps each node's events at
 * its own DTRAIN_TIMELINE_MAX_EVENTS, and keeps only one counters block per
 * node, taken as that node's (a node cannot speak for another). They come
 * on the member's connection before it leaves, so the scheduler has them
 * all once every node has left; dt__report_sched_finish then prints and
 * closes.
 *
 * Threads: the scheduler's state is guarded by its own lock (events come
 * on the I/O thread, its own barrier spans too, bootstrap on the serving
 * thread).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "core/node_impl.h"
#include "obs/merge.h"
#include "obs/obs.h"

#define DT_REPORT_EVENTS 16384 /* records per REPORT (768 KiB of meta) */
#define CLOCK_ROUNDS     8

enum { REP_EVENTS = 1, REP_STATS = 2, REP_EVENTS_END = 3 };

struct dt_report {
	pthread_mutex_t mu;
	dt__timeline *tl; /* NULL without DTRAIN_TIMELINE */
	int stats_on;     /* DTRAIN_STATS=1: print the table at the end */
	const char *json; /* DTRAIN_STATS_JSON: write every node's there */
	uint64_t t0;      /* the scheduler's clock at its start */
	uint64_t max_events;
	int count;        /* 1 + S + W */
	dt_stats **stats; /* by node id, NULL until its report came */
	uint64_t *events; /* by node id: events written */
	uint64_t dropped; /* over the caps, or malformed */
	int named;        /* tracks named (the table is known) */
	/* A job with a control tree: the merged reports of the
	 * scheduler's children (tree_report.c), and by node id whether
	 * that child's came. */
	dt__merged *merged;
	uint8_t *merged_from;
};

/* ---- member side ---- */

static int live_members; /* (report_mu) */
static pthread_mutex_t report_mu = PTHREAD_MUTEX_INITIALIZER;

dt_err
dt__report_member_begin(dt_node *n)
{
	dt_err err;

	pthread_mutex_lock(&report_mu);
	if (live_members++ == 0)
		dt__obs_reset(); /* a new job in this process: count afresh */
	pthread_mutex_unlock(&report_mu);
	n->member_counted = 1;
	if ((err = dt__trace_begin(n, &n->tracing)))
		return err;
	/* Fault injection for tests: this process's timeline clock runs
	 * that far from the scheduler's, as another host's would. */
	long skew;

	if ((err = dt__env_long("DT_CLOCK_SKEW_MS", 0, -86400000L, 86400000L,
	                        &skew)))
		return err;
	n->clock_skew = (int64_t)skew * 1000000;
	return DT_OK;
}

void
dt__report_member_end(dt_node *n)
{
	if (n->tracing)
		dt__trace_end(n, NULL, NULL);
	n->tracing = 0;
	if (n->member_counted) {
		pthread_mutex_lock(&report_mu);
		live_members--;
		pthread_mutex_unlock(&report_mu);
		n->member_counted = 0;
	}
}

static int
clock_answered(dt_node *n, const void *arg)
{
	return n->clk_n >= *(const int *)arg;
}

dt_err
dt__report_clock_sync(dt_node *n)
{
	uint64_t best_rtt = UINT64_MAX, t_start = dt__now_ns();
	int64_t best = 0;
	dt_err err;

	if (!n->tracing)
		return DT_OK;
	for (int i = 0; i < CLOCK_ROUNDS; i++) {
		int want;
		uint64_t t0 = dt__now_ns() + (uint64_t)n->clock_skew;
		dt_msg_hdr h = {
		    .cmd = DT_CMD_CLOCK, .flags = DT_F_REQUEST, .arg0 = t0};

		pthread_mutex_lock(&n->mu);
		want = n->clk_n + 1;
		pthread_mutex_unlock(&n->mu);
		if ((err = dt__node_send(n, 0, &h, NULL, 0, NULL, 0)))
			return err;
		err = dt__node_wait(n, clock_answered, &want,
		                    dt__now_ns() + 5000000000ull,
		                    "the scheduler's clock");
		if (err)
			return err;
		pthread_mutex_lock(&n->mu);
		uint64_t s0 = n->clk_t0, ts = n->clk_ts, t2 = n->clk_t2;
		pthread_mutex_unlock(&n->mu);
		if (s0 != t0 || t2 < t0)
			continue; /* (an answer to an earlier round) */
		if (t2 - t0 < best_rtt) {
			best_rtt = t2 - t0;
			best = (int64_t)(ts - (t0 + (t2 - t0) / 2));
		}
	}
	n->clock_off = best;
	DT_LOG(1,
	       "clock offset to the scheduler: %+.3f us (round trip %.3f us)",
	       (double)best / 1e3, (double)best_rtt / 1e3);
	dt__trace_span(DT_EV_CLOCK_SYNC, DT_TID_MAIN, t_start, 0, 0, 0, 0);
	return DT_OK;
}

void
dt__report_on_clock(dt_node *n, dt_conn *c, const dt_msg *m)
{
	if (n->role == DT_ROLE_SCHEDULER) {
		int peer = dt__conn_peer(c); /* > 0: scheduler.c checked */

		if (m->hdr.flags & DT_F_RESPONSE)
			return;
		dt_msg_hdr h = {.cmd = DT_CMD_CLOCK,
		                .flags = DT_F_RESPONSE,
		                .arg0 = m->hdr.arg0,
		                .arg1 = dt__now_ns()};
		dt__node_send(n, peer, &h, NULL, 0, NULL, 0);
		return;
	}
	if (dt__conn_peer(c) != 0 || !(m->hdr.flags & DT_F_RESPONSE))
		return;
	pthread_mutex_lock(&n->mu);
	n->clk_t0 = m->hdr.arg0;
	n->clk_ts = m->hdr.arg1;
	n->clk_t2 = dt__now_ns() + (uint64_t)n->clock_skew;
	n->clk_n++;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
}

typedef struct sender {
	dt_node *n;
	uint8_t *buf;
	size_t k;
	dt_err err;
} sender;

static void
flush_events(sender *s)
{
	if (s->k == 0 || s->err)
		return;
	dt_msg_hdr h = {.cmd = DT_CMD_REPORT,
	                .flags = DT_F_REQUEST,
	                .arg0 = REP_EVENTS,
	                .arg1 = s->k};
	s->err = dt__node_send(s->n, 0, &h, s->buf,
	                       (uint32_t)(s->k * DT_TEV_WIRE), NULL, 0);
	s->k = 0;
}

static void
send_chunk(void *arg, const dt__tev *ev, size_t n)
{
	sender *s = arg;

	for (size_t i = 0; i < n; i++) {
		dt__tev_encode(&ev[i], s->n->clock_off + s->n->clock_skew,
		               s->buf + s->k * DT_TEV_WIRE);
		if (++s->k == DT_REPORT_EVENTS)
			flush_events(s);
	}
}

dt_err
dt__report_member_send(dt_node *n)
{
	dt_err err = DT_OK;

	/* Over a control tree the counters are merged up it instead
	 * (tree_report.c): a worker's ride with its WORKER_DONE, a
	 * server's go from here. */
	if (__atomic_load_n(&n->tree, __ATOMIC_ACQUIRE)) {
		if (n->role == DT_ROLE_SERVER && dt__tree_report_send(n))
			dt__log(0, "the end-of-job report was not sent: %s",
			        dt_errmsg());
	} else if (dt__report_stats_on()) {
		dt_stats s;
		uint8_t *p;
		size_t len;

		if ((err = dt_node_stats(n, &s)))
			return err;
		err = dt__stats_encode(&s, &p, &len);
		dt_stats_fini(&s);
		if (err)
			return err;
		dt_msg_hdr h = {.cmd = DT_CMD_REPORT,
		                .flags = DT_F_REQUEST,
		                .arg0 = REP_STATS};
		err = dt__node_send(n, 0, &h, p, (uint32_t)len, NULL, 0);
		free(p);
		if (err)
			return err;
	}
	if (n->tracing) {
		sender s = {.n = n,
		            .buf = malloc(DT_REPORT_EVENTS * DT_TEV_WIRE)};
		uint64_t lost;

		if (s.buf == NULL)
			return dt__fail(DT_ENOMEM, "timeline report");
		lost = dt__trace_end(n, send_chunk, &s);
		n->tracing = 0;
		flush_events(&s);
		free(s.buf);
		if (s.err)
			return s.err;
		dt_msg_hdr h = {.cmd = DT_CMD_REPORT,
		                .flags = DT_F_REQUEST,
		                .arg0 = REP_EVENTS_END,
		                .arg1 = lost};
		err = dt__node_send(n, 0, &h, NULL, 0, NULL, 0);
	}
	return err;
}

dt_err
dt_node_stats(dt_node *n, dt_stats *out)
{
	if (n == NULL || out == NULL)
		return dt__fail(DT_EINVAL, "dt_node_stats: %s is NULL",
		                n ? "out" : "node");
	memset(out, 0, sizeof(*out));
	dt__obs_snapshot(out);
	out->wall_ns = dt__now_ns() - n->start_ns;
	out->role = (int)n->role;
	/* (the node table may arrive meanwhile: its fields under n->mu) */
	pthread_mutex_lock(&n->mu);
	out->id = n->id;
	out->rank = n->rank;
	/* (an elastic job's rows for the workers that may join too) */
	int count = 1 + n->num_servers + dt__elastic_slots(n);
	pthread_mutex_unlock(&n->mu);
	out->peers = calloc((size_t)count, sizeof(*out->peers));
	if (out->peers == NULL) {
		dt_stats_fini(out);
		return dt__fail(DT_ENOMEM, "dt_node_stats");
	}
	out->npeers = count;
	for (int i = 0; i < count; i++) {
		const dt__peer_ctr *c = &n->ctr[i];

		out->peers[i] = (dt_peer_stats){
		    i, __atomic_load_n(&c->msgs_sent, __ATOMIC_RELAXED),
		    __atomic_load_n(&c->bytes_sent, __ATOMIC_RELAXED),
		    __atomic_load_n(&c->msgs_recv, __ATOMIC_RELAXED),
		    __atomic_load_n(&c->bytes_recv, __ATOMIC_RELAXED)};
	}
	return DT_OK;
}

/* ---- scheduler side ---- */

dt_err
dt__report_sched_open(dt_node *n)
{
	struct dt_report *r;
	const char *path = dt__env_str("DTRAIN_TIMELINE");
	long on, max;
	dt_err err;

	if ((err = dt__env_long("DTRAIN_STATS", 0, 0, 1, &on)) ||
	    (err = dt__env_long("DTRAIN_TIMELINE_MAX_EVENTS", 1L << 21, 1,
	                        1L << 30, &max)))
		return err;
	if (!on && !path && !dt__env_str("DTRAIN_STATS_JSON"))
		return DT_OK;
	if ((r = dt__calloc(1, sizeof(*r))) == NULL)
		return DT_ENOMEM;
	r->stats_on = (int)on;
	r->json = dt__env_str("DTRAIN_STATS_JSON");
	r->t0 = dt__now_ns();
	r->max_events = (uint64_t)max;
	/* Rows for every node id the job may give: an elastic job's workers
	 * that join report too. */
	r->count = 1 + n->num_servers + dt__elastic_slots(n);
	r->stats = dt__calloc((size_t)r->count, sizeof(*r->stats));
	r->events = dt__calloc((size_t)r->count, sizeof(*r->events));
	err = !r->stats || !r->events ? DT_ENOMEM : DT_OK;
	if (err == DT_OK && path)
		err = dt__timeline_open(path, r->t0, &r->tl);
	if (err) {
		free(r->stats);
		free(r->events);
		free(r);
		return err;
	}
	pthread_mutex_init(&r->mu, NULL);
	dt__timeline_node(r->tl, 0, "scheduler", 0);
	n->report = r;
	return DT_OK;
}

void
dt__report_sched_event(dt_node *n, int kind, int tid, uint64_t t0, uint64_t key)
{
	struct dt_report *r = n->report;

	if (r == NULL || r->tl == NULL)
		return;
	uint64_t now = dt__now_ns();
	dt__tev e = {.ts = t0,
	             .dur = now - t0,
	             .key = key,
	             .kind = (uint16_t)kind,
	             .tid = (uint8_t)tid,
	             .flags = key ? DT_EVF_KEY : 0};
	pthread_mutex_lock(&r->mu);
	dt__timeline_event(r->tl, 0, &e);
	pthread_mutex_unlock(&r->mu);
}

void
dt__report_sched_names(dt_node *n)
{
	struct dt_report *r = n->report;
	char name[64];

	if (r == NULL || r->tl == NULL)
		return;
	pthread_mutex_lock(&r->mu);
	for (int id = 1; id < r->count && id < n->ntable; id++)
		dt__timeline_node(r->tl, id,
		                  dt__node_name(n, id, name, sizeof(name)),
		                  dt__id_role(n, id) == DT_ROLE_WORKER
		                      ? 1000 + dt__id_rank(n, id)
		                      : id);
	r->named = 1;
	pthread_mutex_unlock(&r->mu);
}

static void
refuse(dt_node *n, dt_conn *c, const char *why)
{
	dt__log(0, "dropping %s: malformed REPORT: %s", dt__conn_addr(c), why);
	dt__van_close(n->van, c);
}

/* A child's merged report over the control tree: one per child of the
 * scheduler, merged as it comes (a block of bounded size). */
static void
on_merged(dt_node *n, struct dt_report *r, dt_conn *c, int peer,
          const dt_msg *m)
{
	dt__merged *in;
	int again;

	if (!dt__sched_tree_root_child(n, peer)) {
		refuse(n, c, "a merged report from a node not a tree child");
		return;
	}
	if ((in = malloc(sizeof(*in))) == NULL)
		return;
	if (dt__merged_decode(m->meta, m->hdr.meta_len, in)) {
		dt__err_kept why;

		dt__err_keep(&why, DT_EPROTO);
		free(in);
		refuse(n, c, why.msg);
		return;
	}
	pthread_mutex_lock(&r->mu);
	if (r->merged_from == NULL)
		r->merged_from = dt__calloc((size_t)r->count, 1);
	again = r->merged_from == NULL || r->merged_from[peer];
	if (!again && r->merged == NULL) {
		r->merged = in;
		in = NULL;
	} else if (!again) {
		dt__merged_merge(r->merged, in);
	}
	if (!again)
		r->merged_from[peer] = 1;
	pthread_mutex_unlock(&r->mu);
	free(in);
	if (again)
		refuse(n, c, "a second merged report");
}

void
dt__report_on_msg(dt_node *n, dt_conn *c, const dt_msg *m)
{
	struct dt_report *r = n->report;
	int peer = dt__conn_peer(c);
	const uint8_t *p = m->meta;
	size_t len = m->hdr.meta_len;

	/* (scheduler.c hands over only a joined node's: peer > 0) */
	if (r == NULL || peer >= r->count)
		return; /* nothing asked for here: read away */
	switch (m->hdr.arg0) {
	case REP_EVENTS: {
		if (len % DT_TEV_WIRE || len / DT_TEV_WIRE != m->hdr.arg1 ||
		    m->hdr.arg1 > DT_REPORT_EVENTS) {
			refuse(n, c, "event block of bad length");
			return;
		}
		pthread_mutex_lock(&r->mu);
		for (size_t i = 0; i < len / DT_TEV_WIRE; i++) {
			dt__tev e;

			if (dt__tev_decode(p + i * DT_TEV_WIRE, &e) ||
			    r->events[peer] >= r->max_events || !r->tl) {
				r->dropped++;
				continue;
			}
			dt__timeline_event(r->tl, peer, &e);
			r->events[peer]++;
		}
		pthread_mutex_unlock(&r->mu);
		return;
	}
	case REP_EVENTS_END:
		if (len != 0) {
			refuse(n, c, "end of events with a body");
			return;
		}
		pthread_mutex_lock(&r->mu);
		r->dropped +=
		    m->hdr.arg1 > (1ull << 40) ? (1ull << 40) : m->hdr.arg1;
		pthread_mutex_unlock(&r->mu);
		return;
	case REP_STATS: {
		dt_stats *s = dt__calloc(1, sizeof(*s));

		if (s == NULL)
			return;
		if (dt__stats_decode(p, len, s)) {
			dt__err_kept why;

			dt__err_keep(&why, DT_EPROTO);
			free(s);
			refuse(n, c, why.msg);
			return;
		}
		s->id = peer; /* a node speaks for itself only */
		s->role = (int)dt__id_role(n, peer);
		s->rank = dt__id_rank(n, peer);
		pthread_mutex_lock(&r->mu);
		if (r->stats[peer]) {
			dt_stats_fini(r->stats[peer]);
			free(r->stats[peer]);
		}
		r->stats[peer] = s;
		pthread_mutex_unlock(&r->mu);
		return;
	}
	case DT_REPORT_MERGED:
		on_merged(n, r, c, peer, m);
		return;
	default:
		refuse(n, c, "unknown kind");
	}
}
/* DTRAIN_STATS_JSON: a new file of a random name beside the path, created
 * exclusively (never through a planted link), renamed over it when
 * whole. */
static FILE *
json_begin(struct dt_report *r, dt__file_tmp *t)
{
	FILE *f;

	if (dt__file_create_tmp("DTRAIN_STATS_JSON: ", r->json, 0666, t)) {
		dt__log(0, "%s", dt_errmsg());
		return NULL;
	}
	if ((f = dt__file_stream(t)) == NULL) {
		dt__file_abort(t);
		dt__log(0, "DTRAIN_STATS_JSON: cannot write %s", r->json);
	}
	return f;
}

static void
json_end(dt__file_tmp *t)
{
	if (dt__file_commit(t, 0) != DT_OK)
		dt__log(0, "%s", dt_errmsg());
}

static void
write_json(struct dt_report *r, const char *const *names, int shown)
{
	dt__file_tmp t;
	FILE *f = json_begin(r, &t);

	if (f == NULL)
		return;
	dt__stats_json(f, r->stats, names, shown);
	json_end(&t);
}

/* The rows to show: the job's first nodes, and the workers that joined
 * an elastic job up to the last that reported (the ids never given
 * are left out). */
static int
shown_rows(const dt_node *n, const struct dt_report *r)
{
	int shown = r->count;

	while (shown > 1 + n->num_servers + n->num_workers &&
	       r->stats[shown - 1] == NULL)
		shown--;
	return shown;
}

static int
node_name_role(void *arg, int id)
{
	return (int)dt__id_role(arg, id);
}

typedef struct name_ctx {
	dt_node *n;
	char buf[64];
} name_ctx;

static const char *
node_name_of(void *arg, int id)
{
	name_ctx *x = arg;

	return dt__node_name(x->n, id, x->buf, sizeof(x->buf));
}

/* DTRAIN_STATS_JSON of a tree job: one object, the merged counters. */
static void
write_merged_json(struct dt_report *r, const dt__merged *m, name_ctx *x)
{
	dt__file_tmp t;
	FILE *f = json_begin(r, &t);

	if (f == NULL)
		return;
	dt__merged_json(f, m, node_name_of, x);
	json_end(&t);
}

/* A job with a control tree: the children's merged reports, the
 * scheduler's own traffic, and its children that never reported named
 * missing; totals and the straggler rows, not a row per node. */
static void
finish_merged(dt_node *n, struct dt_report *r)
{
	dt__merged *m = malloc(sizeof(*m));
	name_ctx x = {.n = n};
	dt_stats own;
	int kids = 0;

	if (m == NULL) {
		dt__log(0, "out of memory for the end-of-job report");
		return;
	}
	dt__merged_init(m);
	if (r->merged)
		dt__merged_merge(m, r->merged);
	if (dt_node_stats(n, &own) == DT_OK) {
		dt__merged_add_node(m, &own, NULL, NULL, node_name_role, n);
		dt_stats_fini(&own);
	}
	if (r->merged_from == NULL)
		r->merged_from = dt__calloc((size_t)r->count, 1);
	if (r->merged_from) {
		dt__sched_tree_missing(n, m, r->merged_from, r->count);
		for (int i = 0; i < r->count; i++)
			kids += r->merged_from[i];
	}
	DT_LOG(1,
	       "end-of-job reports merged over the control tree: %d from "
	       "its children, for %u nodes (%u missing)",
	       kids, m->nodes[1] + m->nodes[2], m->missing_nodes);
	if (r->stats_on)
		dt__merged_report(stderr, m, node_name_of, &x);
	fflush(stderr);
	if (r->json)
		write_merged_json(r, m, &x);
	free(m);
}

void
dt__report_sched_finish(dt_node *n, const char *outcome)
{
	struct dt_report *r = n->report;

	if (r == NULL)
		return;
	n->report = NULL;
	if ((r->stats_on || r->json) && dt__sched_tree_job(n)) {
		finish_merged(n, r);
	} else if (r->stats_on || r->json) {
		dt_stats *own = dt__calloc(1, sizeof(*own));
		const char **names =
		    dt__calloc((size_t)r->count, sizeof(char *));
		char(*buf)[64] = dt__calloc((size_t)r->count, 64);

		if (own && dt_node_stats(n, own) == DT_OK) {
			r->stats[0] = own;
			own = NULL;
		}
		free(own);
		if (names && buf) {
			int shown = shown_rows(n, r);

			for (int i = 0; i < r->count; i++)
				names[i] = dt__node_name(n, i, buf[i], 64);
			/* (stderr: the launcher's output stays the job's) */
			if (r->stats_on)
				dt__stats_report(stderr, r->stats, names,
				                 shown);
			fflush(stderr);
			if (r->json)
				write_json(r, names, shown);
		}
		free(names);
		free(buf);
	}
	if (r->tl) {
		char note[400];
		uint64_t total = 0;

		for (int i = 0; i < r->count; i++)
			total += r->events[i];
		snprintf(note, sizeof(note),
		         "%s; %llu events from the nodes, "
		         "%llu dropped",
		         outcome ? outcome : "job over",
		         (unsigned long long)total,
		         (unsigned long long)r->dropped);
		if (dt__timeline_close(r->tl, note))
			dt__log(0, "%s", dt_errmsg());
		else
			dt__log(0, "timeline written to %s (%llu events)",
			        dt__env_str("DTRAIN_TIMELINE"),
			        (unsigned long long)total);
	}
	for (int i = 0; i < r->count; i++)
		if (r->stats[i]) {
			dt_stats_fini(r->stats[i]);
			free(r->stats[i]);
		}
	free(r->stats);
	free(r->events);
	free(r->merged);
	free(r->merged_from);
	pthread_mutex_destroy(&r->mu);
	free(r);
}
