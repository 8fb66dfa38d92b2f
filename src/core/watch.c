/*
 * watch.c - heartbeats: every node and the scheduler watch each other, so a
 * peer that froze (SIGSTOP, a dead host whose connection stays open, a
 * partition) is noticed, named and ends the job instead of hanging it.
 *
 * One thread per node (with DT_SHARED_LOOP, a timer on the process's
 * shared heartbeat loop instead: the same pass, watch_step, for every node
 * of the process on one thread, net/loop_shared.h). Every
 * PS_HEARTBEAT_INTERVAL it sends a HEARTBEAT
 * (a bare header) on each of the node's connections to the job - a member
 * to the scheduler and to its peers, the scheduler to every node - unless a
 * send is already under way there, which speaks for it (dt__van_beat never
 * waits). Any bytes count as a sign of life (dt__conn_silent_ns, which also
 * forgives the silence of a peer while this node itself did not read).
 *
 * Over the control tree (docs/scale.md) the beats follow its edges: the
 * scheduler beats and judges only its children (sched_watch.c), and a
 * member that is not one of them neither beats the scheduler nor takes
 * its silence for death; it beats its parent, its children and the peers
 * it holds links to, as with the star.
 *
 * A peer silent for PS_HEARTBEAT_TIMEOUT is dead:
 *   - the scheduler aborts the job, naming it ("server 1 (pid 4242 on host
 *     h2) sent nothing for 10.0 s"), so every survivor's error names it;
 *   - a member whose tree child went silent tells its parent (TREE_LOST,
 *     passed up to the scheduler, which aborts the job the same way);
 *   - a member whose scheduler went silent fails with the same kind of
 *     message;
 *   - a member whose peer went silent (a partition the scheduler does not
 *     see, or a child whose report got nowhere) waits a little longer
 *     first (peer_grace), so that where the scheduler sees the same
 *     silence, its ABORT is what everyone reports.
 *
 * With PS_VERBOSE=1 the same thread logs the node's counters in one line
 * every DTRAIN_STATS_INTERVAL (docs/observability.md); it runs for that
 * alone when heartbeats are off.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/node_impl.h"
#include "net/loop_shared.h"
#include "dtrain/obs.h"
#include "obs/obs.h"

struct dt_watch {
	dt_node *n;
	uint64_t interval_ns; /* 0: send none */
	uint64_t timeout_ns;  /* 0: judge none */
	uint64_t tick_ns;
	dt_conn **cs; /* (watch thread) a round's connections, */
	int *ids;     /* ...and their peers' node ids */
	int ncs;      /* room in both */
	int cap;      /* the job's node ids (the scheduler watches them all) */
	/* (watch thread) by place among the tree children: its loss was
	 * told to the parent (TREE_LOST) */
	uint8_t told[DT_TREE_KIDS_MAX];
	/* (mu) when the tree parent's connection closed without BYE (0:
	 * it did not), for orphaned() */
	uint64_t parent_gone;
	uint64_t next_beat, next_stats; /* (watch thread) */
	pthread_t thread;
	/* DT_SHARED_LOOP (the van is on the shared loops): no thread, but a
	 * timer on the process's shared heartbeat loop, which runs watch_step
	 * for every node of the process (loop_shared.h) */
	dt_loop *loop;
	dt_loop_src *timer;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC */
	int stop;          /* (mu) */
	int joined;        /* the thread is gone (dt__watch_stop) */
	/* (mu) peers whose connection closed, and when their loss is told
	 * (a few at a time: a list, not an array by node id) */
	struct lost {
		int id;
		uint64_t at;
	} * lost;
	int nlost, lost_cap;
	uint64_t stats_ns;   /* the counters' line every stats_ns (0: none) */
	dt__stats_mark mark; /* (watch thread) where the last line ended */
};

dt_err
dt__watch_config(uint64_t *interval_ns, uint64_t *timeout_ns)
{
	dt_err err;

	if ((err = dt__env_seconds("PS_HEARTBEAT_INTERVAL", 1.0, 0, 3600,
	                           interval_ns)) ||
	    (err = dt__env_seconds("PS_HEARTBEAT_TIMEOUT", 10.0, 0, 86400,
	                           timeout_ns)))
		return err;
	if (*timeout_ns && (*interval_ns == 0 || *interval_ns >= *timeout_ns))
		return dt__fail(
		    DT_ECONFIG,
		    "PS_HEARTBEAT_INTERVAL=%.3g s must be more than 0 "
		    "and less than PS_HEARTBEAT_TIMEOUT=%.3g s (0 "
		    "turns the timeout off)",
		    (double)*interval_ns * 1e-9, (double)*timeout_ns * 1e-9);
	return DT_OK;
}

dt_err
dt__watch_stats_config(uint64_t *interval_ns)
{
	return dt__env_seconds("DTRAIN_STATS_INTERVAL", 10.0, 0, 86400,
	                       interval_ns);
}

/* Log the node's counters in one line (watch thread, no lock held). */
static void
log_stats(struct dt_watch *w)
{
	dt_stats s;
	char line[1024];

	if (dt_node_stats(w->n, &s) != DT_OK)
		return;
	dt__stats_line(line, sizeof(line), &s, &w->mark);
	dt_stats_fini(&s);
	DT_LOG(1, "%s", line);
}

/* The extra silence a member allows a peer other than the scheduler. */
static uint64_t
peer_grace(const struct dt_watch *w)
{
	uint64_t g = 2 * w->interval_ns, half = w->timeout_ns / 2;

	return g > half ? g : half;
}

void
dt__watch_describe(dt_node *n, int id, dt_conn *c, char *out, size_t cap)
{
	char name[64];
	const dt_node_entry *e = dt__node_entry(n, id);

	dt__node_name(n, id, name, sizeof(name));
	if (e && e->pid > 0)
		snprintf(out, cap, "%s (pid %d on host %s)", name, e->pid,
		         e->host);
	else
		snprintf(out, cap, "%s (at %s)", name,
		         c ? dt__conn_addr(c) : "?");
}

/* Room for k connections in w->cs and w->ids; 0 without memory. */
static int
room_for(struct dt_watch *w, int k)
{
	dt_conn **cs;
	int *ids;

	if (k <= w->ncs)
		return 1;
	k += 16;
	if ((cs = realloc(w->cs, sizeof(*cs) * (size_t)k)) == NULL)
		return 0;
	w->cs = cs;
	if ((ids = realloc(w->ids, sizeof(*ids) * (size_t)k)) == NULL)
		return 0;
	w->ids = ids;
	w->ncs = k;
	return 1;
}

/* Whether this member watches the scheduler: not over the control tree
 * unless the scheduler is its parent (before its place came, it does). */
static int
watches_root(const dt_node *n)
{
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);

	return p == NULL || p->parent == 0;
}

/*
 * A member's watched connections: the scheduler's (id 0, unless the
 * control tree says otherwise) and the one of each peer that is that
 * peer's now, found among the van's open connections: the work is what
 * the node holds, not the job's size. The count (w->cs and w->ids).
 */
static int
member_targets(struct dt_watch *w, int *self)
{
	dt_node *n = w->n;
	int k, m = 0;

	while ((k = dt__van_open_conns(n->van, w->cs, w->ncs)) > w->ncs)
		if (!room_for(w, k)) {
			k = w->ncs;
			break;
		}
	int root = watches_root(n);

	pthread_mutex_lock(&n->mu);
	*self = n->id;
	for (int i = 0; i < k; i++) {
		dt_conn *c = w->cs[i];
		int id = c == __atomic_load_n(&n->root, __ATOMIC_ACQUIRE)
		             ? 0
		             : dt__conn_peer(c);

		if (id > 0 &&
		    (!n->have_table || id >= n->ntable ||
		     __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) != c))
			continue;
		if (id < 0 || (id == 0 && !root))
			continue;
		w->cs[m] = c;
		w->ids[m++] = id;
	}
	pthread_mutex_unlock(&n->mu);
	return m;
}

/* The connections this node watches (w->cs, their ids in w->ids); the
 * count. *judge = 0 while the scheduler has not assigned ranks: it then
 * beats the joiners (who watch it) but judges nobody. */
static int
targets(struct dt_watch *w, int *judge, int *self)
{
	dt_node *n = w->n;
	int k;

	*judge = 1;
	if (n->role != DT_ROLE_SCHEDULER)
		return member_targets(w, self);
	pthread_mutex_lock(&n->mu);
	*self = n->id;
	k = dt__sched_watch_list(n, w->cs, w->ids, w->ncs, judge);
	pthread_mutex_unlock(&n->mu);
	return k;
}

/* Whether the node still cares: not failed, not on its way out. */
static int
watching(dt_node *n)
{
	int on;

	pthread_mutex_lock(&n->mu);
	on = n->fatal == DT_OK && !n->terminated && !n->stopping;
	pthread_mutex_unlock(&n->mu);
	return on;
}

/* A tree child silent for PS_HEARTBEAT_TIMEOUT: tell the parent, once
 * (the scheduler's ABORT follows). */
static void
tell_parent(struct dt_watch *w, int id, dt_conn *c, uint64_t silent)
{
	dt_node *n = w->n;
	int kid = n->role == DT_ROLE_SCHEDULER ? -1 : dt__tree_child(n, id);
	char who[DT_HOST_MAX + 96];

	if (kid < 0 || w->told[kid] || silent <= w->timeout_ns)
		return;
	w->told[kid] = 1;
	dt__watch_describe(n, id, c, who, sizeof(who));
	if (dt__tree_report_lost(n, id, DT_TREE_LOST_SILENT, silent)) {
		dt__log(0,
		        "%s sent nothing for %.1f s; cannot tell the tree "
		        "parent: %s",
		        who, (double)silent * 1e-9, dt_errmsg());
		return;
	}
	dt__log(0,
	        "%s sent nothing for %.1f s (PS_HEARTBEAT_TIMEOUT=%.3g s): "
	        "told the tree parent",
	        who, (double)silent * 1e-9, (double)w->timeout_ns * 1e-9);
}

static void
judge(struct dt_watch *w, int id, dt_conn *c, uint64_t now)
{
	dt_node *n = w->n;
	uint64_t silent = dt__conn_silent_ns(c, now), limit = w->timeout_ns;
	char who[DT_HOST_MAX + 96], reason[DT_HOST_MAX + 256];

	if (n->role != DT_ROLE_SCHEDULER && id != 0)
		limit += peer_grace(w);
	if (silent <= w->timeout_ns || !dt__conn_is_open(c) || !watching(n))
		return;
	/* (a child's loss goes up the tree; if the scheduler's ABORT does
	 * not come within the grace, this node ends as for any peer) */
	tell_parent(w, id, c, silent);
	if (silent <= limit)
		return;
	dt__watch_describe(n, id, c, who, sizeof(who));
	snprintf(reason, sizeof(reason),
	         "%s sent nothing for %.1f s (PS_HEARTBEAT_TIMEOUT=%.3g s)",
	         who, (double)silent * 1e-9, (double)w->timeout_ns * 1e-9);
	dt__log(0, "%s", reason);
	if (n->role == DT_ROLE_SCHEDULER)
		dt__sched_abort_lost(n, reason, id);
	else
		dt__node_set_fatal(n, DT_EPEER, "%s", reason);
	dt__van_close(n->van, c);
}

/*
 * A node whose tree parent's connection closed while the job runs, and
 * to which neither the scheduler's ABORT nor its TERMINATE came within
 * PS_HEARTBEAT_TIMEOUT, ends naming that parent. It does not watch the
 * scheduler over the tree: if the scheduler froze, its children found it
 * and ended, and the news goes down the tree this way, a level per
 * timeout, instead of leaving the nodes under them waiting.
 */
static void
orphaned(struct dt_watch *w, uint64_t now)
{
	dt_node *n = w->n;
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);
	uint64_t gone;
	char name[64];

	pthread_mutex_lock(&w->mu);
	gone = w->parent_gone;
	pthread_mutex_unlock(&w->mu);
	if (gone == 0 || p == NULL || w->timeout_ns == 0 || now <= gone ||
	    now - gone <= w->timeout_ns || !watching(n))
		return;
	dt__node_name(n, p->parent, name, sizeof(name));
	dt__node_set_fatal(n, DT_EPEER,
	                   "lost the connection to its tree parent, %s, and "
	                   "heard nothing from the scheduler in the %.1f s "
	                   "since (PS_HEARTBEAT_TIMEOUT=%.3g s)",
	                   name, (double)(now - gone) * 1e-9,
	                   (double)w->timeout_ns * 1e-9);
}

void
dt__watch_parent_gone(dt_node *n, int peer)
{
	struct dt_watch *w = n->watch;
	const dt__tree_place *p = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE);

	if (w == NULL || p == NULL || p->parent != peer || peer <= 0)
		return;
	pthread_mutex_lock(&w->mu);
	if (w->parent_gone == 0)
		w->parent_gone = dt__now_ns();
	pthread_mutex_unlock(&w->mu);
}

/* The scheduler beats the processes it holds for a lost node's place too:
 * each waits for its assignment up to DT_RESTART_TIMEOUT, and would take
 * a silent scheduler for a dead one after PS_HEARTBEAT_TIMEOUT. */
static void
beat_held(struct dt_watch *w)
{
	dt_node *n = w->n;
	dt_msg_hdr h = {.cmd = DT_CMD_HEARTBEAT};
	int k, sent;

	pthread_mutex_lock(&n->mu);
	k = dt__sched_held_list(n, w->cs, w->ncs);
	pthread_mutex_unlock(&n->mu);
	for (int i = 0; i < k; i++)
		if (w->cs[i] && dt__conn_is_open(w->cs[i]))
			(void)dt__van_beat(n->van, w->cs[i], &h, &sent);
}

static void
round_of(struct dt_watch *w, int beat)
{
	dt_node *n = w->n;
	uint64_t now = dt__now_ns();
	int judging, self, k = targets(w, &judging, &self);

	for (int i = 0; i < k; i++) {
		dt_conn *c = w->cs[i];
		int sent;

		if (c == NULL || !dt__conn_is_open(c))
			continue;
		if (beat) {
			dt_msg_hdr h = {.cmd = DT_CMD_HEARTBEAT};

			h.sender = (uint32_t)(self < 0 ? 0 : self);
			h.recver = (uint32_t)(judging ? w->ids[i] : 0);
			(void)dt__van_beat(n->van, c, &h, &sent);
		}
		if (judging && w->timeout_ns)
			judge(w, w->ids[i], c, now);
	}
	if (beat && n->role == DT_ROLE_SCHEDULER)
		beat_held(w);
	if (n->role != DT_ROLE_SCHEDULER)
		orphaned(w, now);
}

int
dt__watch_root_silent(dt_node *n, char *why, size_t cap)
{
	struct dt_watch *w = n->watch;
	dt_conn *c = __atomic_load_n(&n->root, __ATOMIC_ACQUIRE);
	char who[DT_HOST_MAX + 96];
	uint64_t silent;

	/* (over the control tree, a scheduler that is not the parent sends
	 * no heartbeats here: its silence says nothing) */
	if (w == NULL || c == NULL || w->interval_ns == 0 || !watches_root(n))
		return 0;
	silent = dt__conn_silent_ns(c, dt__now_ns());
	if (silent <= 2 * w->interval_ns)
		return 0;
	dt__watch_describe(n, 0, c, who, sizeof(who));
	snprintf(why, cap, "%s has sent nothing for %.1f s", who,
	         (double)silent * 1e-9);
	return 1;
}

/* The losses whose time has come (mu held; let go while telling); when
 * the next one is due. */
static uint64_t
tell_losses(struct dt_watch *w, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (int i = 0; i < w->nlost;) {
		int id = w->lost[i].id;

		if (w->lost[i].at > now) {
			next = w->lost[i].at < next ? w->lost[i].at : next;
			i++;
			continue;
		}
		w->lost[i] = w->lost[--w->nlost];
		pthread_mutex_unlock(&w->mu);
		/* (the scheduler's abort, if one came meanwhile, has failed
		 * everything already, with its reason) */
		if (dt__node_check(w->n) == DT_OK)
			dt__node_fail_apps(w->n, id, DT_EPEER);
		pthread_mutex_lock(&w->mu);
		/* (the list may have changed meanwhile: look again) */
		i = 0;
		next = UINT64_MAX;
	}
	return next;
}

/* The beats and judgements of one pass of the heartbeat work, and the
 * counters' line when due (no lock held); returns when it began. */
static uint64_t
watch_beats(struct dt_watch *w)
{
	uint64_t now = dt__now_ns();
	int beat = w->interval_ns && now >= w->next_beat;

	if (beat)
		w->next_beat = now + w->interval_ns;
	round_of(w, beat);
	if (w->stats_ns && now >= w->next_stats) {
		w->next_stats = now + w->stats_ns;
		log_stats(w);
	}
	return now;
}

/* The rest of the pass (mu held): the losses whose time has come. When
 * the next pass is due, for a pass that began at now. */
static uint64_t
watch_losses(struct dt_watch *w, uint64_t now)
{
	uint64_t wake = tell_losses(w, dt__now_ns());

	if (wake > now + w->tick_ns)
		wake = now + w->tick_ns;
	if (w->stats_ns && wake > w->next_stats)
		wake = w->next_stats;
	return wake;
}

static void *
watch_main(void *arg)
{
	struct dt_watch *w = arg;

	pthread_mutex_lock(&w->mu);
	while (!w->stop) {
		pthread_mutex_unlock(&w->mu);
		uint64_t now = watch_beats(w);

		pthread_mutex_lock(&w->mu);
		/* (mu held from here into the wait: a loss deferred after
		 * this look wakes the thread) */
		uint64_t wake = watch_losses(w, now);

		if (w->stop)
			break;
		struct timespec ts = dt__timespec_at(wake);

		pthread_cond_timedwait(&w->cv, &w->mu, &ts);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* The shared heartbeat loop's timer (DT_SHARED_LOOP): the same pass. A
 * loss deferred once the losses were looked at brings the timer forward
 * (dt__watch_defer_loss: dt__loop_timer_at, which the loop keeps for
 * a timer that runs). */
static uint64_t
watch_timer(void *arg, uint64_t unused)
{
	struct dt_watch *w = arg;
	uint64_t now = watch_beats(w), wake;

	(void)unused;
	pthread_mutex_lock(&w->mu);
	wake = watch_losses(w, now);
	pthread_mutex_unlock(&w->mu);
	return wake;
}

int
dt__watch_defer_loss(dt_node *n, int peer)
{
	struct dt_watch *w = n->watch;
	uint64_t grace;

	if (w == NULL || w->interval_ns == 0 || peer <= 0 || peer >= w->cap)
		return 0;
	/* Two heartbeats, at most half a second: the scheduler's abort
	 * (which names the cause) comes within a heartbeat when it has one. */
	grace = 2 * w->interval_ns;
	if (grace > 500000000ull)
		grace = 500000000ull;
	pthread_mutex_lock(&w->mu);
	if (w->stop) {
		pthread_mutex_unlock(&w->mu);
		return 0;
	}
	int known = 0;

	for (int i = 0; i < w->nlost && !known; i++)
		known = w->lost[i].id == peer;
	if (!known && w->nlost == w->lost_cap) {
		int cap = w->lost_cap ? 2 * w->lost_cap : 8;
		struct lost *l = realloc(w->lost, sizeof(*l) * (size_t)cap);

		if (l == NULL) {
			pthread_mutex_unlock(&w->mu);
			return 0; /* (told at once instead) */
		}
		w->lost = l;
		w->lost_cap = cap;
	}
	uint64_t at = dt__now_ns() + grace;

	if (!known)
		w->lost[w->nlost++] = (struct lost){.id = peer, .at = at};
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	if (w->timer)
		dt__loop_timer_at(w->loop, w->timer, at);
	return 1;
}

dt_err
dt__watch_start(dt_node *n)
{
	struct dt_watch *w;
	uint64_t stats_ns = dt__verbose >= 1 ? n->stats_interval_ns : 0;

	if (n->watch ||
	    (n->hb_interval_ns == 0 && n->hb_timeout_ns == 0 && stats_ns == 0))
		return DT_OK;
	if ((w = dt__calloc(1, sizeof(*w))) == NULL)
		return DT_ENOMEM;
	w->n = n;
	w->cap = 1 + n->num_servers + dt__elastic_slots(n);
	/* (the scheduler watches every node; a member what it holds, grown
	 * as needed) */
	if (!room_for(w, n->role == DT_ROLE_SCHEDULER ? w->cap : 16)) {
		free(w->cs);
		free(w->ids);
		free(w);
		return DT_ENOMEM;
	}
	w->interval_ns = n->hb_interval_ns;
	w->timeout_ns = n->hb_timeout_ns;
	w->stats_ns = stats_ns;
	w->tick_ns = w->interval_ns;
	if (w->timeout_ns && w->timeout_ns / 4 < w->tick_ns)
		w->tick_ns = w->timeout_ns / 4;
	if (w->tick_ns == 0 || w->tick_ns > 1000000000ull)
		w->tick_ns = 1000000000ull;
	if (w->tick_ns < 10000000ull)
		w->tick_ns = 10000000ull;
	w->next_stats = dt__now_ns() + w->stats_ns;
	pthread_mutex_init(&w->mu, NULL);
	dt__cond_init_monotonic(&w->cv);
	dt_err err = DT_OK;

	if (dt__van_shared(n->van)) {
		if ((err = dt__loop_get(DT_LOOP_BEAT, &w->loop)) == DT_OK &&
		    (err = dt__loop_add_timer(w->loop, watch_timer, w,
		                              dt__now_ns(), &w->timer))) {
			dt__loop_put(w->loop);
			w->loop = NULL;
		}
	} else {
		int rc = pthread_create(&w->thread, NULL, watch_main, w);

		if (rc != 0)
			err = dt__fail(DT_ESYS,
			               "starting the heartbeat thread: %s",
			               strerror(rc));
	}
	if (err) {
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cv);
		free(w->cs);
		free(w->ids);
		free(w->lost);
		free(w);
		return err;
	}
	n->watch = w;
	return DT_OK;
}

void
dt__watch_stop(dt_node *n)
{
	struct dt_watch *w = n->watch;

	if (w == NULL || w->joined)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	if (w->loop) {
		/* (once removed, no pass of it runs or will run) */
		dt__loop_remove(w->loop, w->timer);
		dt__loop_put(w->loop);
		w->loop = NULL;
		w->timer = NULL;
	} else {
		pthread_join(w->thread, NULL);
	}
	w->joined = 1;
}

void
dt__watch_free(dt_node *n)
{
	struct dt_watch *w = n->watch;

	if (w == NULL)
		return;
	dt__watch_stop(n);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w->cs);
	free(w->ids);
	free(w->lost);
	free(w);
	n->watch = NULL;
}
