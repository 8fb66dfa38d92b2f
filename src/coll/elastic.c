/*
 * elastic.c - the user's loop of elastic training (dtrain/elastic.h):
 * registered state, commits, taking a membership change (re-forming the
 * communicator and syncing the state from the new rank 0), and the
 * schedule of changes that replays a run (DTRAIN_ELASTIC_SCHEDULE).
 *
 * The snapshot is one buffer: the commit's step (8 bytes) and then each
 * registered range, each padded to 4 bytes, so the sync is one broadcast
 * of int32 words - an exact copy whatever the ranges hold.
 *
 * Why the new rank 0's commit wins: ranks do not commit at the same
 * instant. When a rank is lost between commits, a survivor may have
 * finished the last step before a commit (all the lost rank's data had
 * reached it) while another failed in it; the first has committed one
 * more time. Taking the new rank 0's commit on every rank makes them
 * agree on one step, and that step is the one logged with the change, so
 * a scheduled replay removes the worker at the same commit.
 *
 * Joining between commits: a worker that asks to join tells the
 * scheduler at once, and only later, from its first dt_elastic_restore,
 * that it is ready (its data loaded). When the members' commit agrees
 * that one has asked but is not ready yet, they watch: at every step
 * until it is ready (dt_elastic_poll) they agree again, by an allreduce
 * of two words, and take it in at the step it is, committing that step
 * first. The change is logged at that step, and a replay's schedule
 * takes the worker in at that step through dt_elastic_poll as well. A
 * job without a joiner on its way pays a flag test per step.
 *
 * Threads: the caller's only (as the communicator's calls).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/exec.h"
#include "coll/state.h"
#include "dtrain/elastic.h"

/* Registered ranges: a model's every tensor and its optimizer's state
 * may be one each. */
#define MAX_RANGES    65536
#define MAX_SCHEDULE  64
#define SCHEDULE_TEXT 4096

typedef struct range {
	char name[32];
	void *p;
	size_t bytes;
} range;

typedef struct sched_item {
	uint64_t step;
	int worker; /* launch rank leaving, or -1 */
	int add;    /* workers joining (+N), or 0 */
} sched_item;

struct dt_elastic {
	dt_coll *c;
	range *r; /* nr of them, room for rcap */
	int nr, rcap;
	uint8_t *snap; /* the last commit: step, then the ranges */
	size_t snap_len;
	int committed;
	int left;
	int joining; /* this worker joined the running job, not synced yet */
	/* A change was taken, going on from commit step changed_at: the
	 * ranks that took it in dt_elastic_restore commit that step again,
	 * those that took it inside their commit do not, so that second
	 * commit must do nothing the others would have to meet. */
	int changed;
	uint64_t changed_at;
	/* The members agreed at their last commit that a worker asked to
	 * join and is not ready yet: they look for it at every step. */
	int watch;
	/* This joiner told the scheduler that it is ready (its restore). */
	int ready_sent;
	uint64_t timeout_ns;
	sched_item sched[MAX_SCHEDULE];
	int nsched;
	dt_elastic_change last;
	/* DT_TEST_SYNC_HOLD (testing): the launch rank held in its first
	 * state sync (-1: none), and whether it was. */
	int hold_rank;
	int held;
};

static size_t
pad4(size_t n)
{
	return (n + 3) & ~(size_t)3;
}

/* "step 40: -worker 1; step 90: -worker 2" into e->sched. */
static dt_err
parse_schedule(dt_elastic *e, const char *text)
{
	char buf[SCHEDULE_TEXT], *save = NULL;

	if (strlen(text) >= sizeof(buf))
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_ELASTIC_SCHEDULE is longer than %zu "
		                "bytes",
		                sizeof(buf) - 1);
	snprintf(buf, sizeof(buf), "%s", text);
	for (char *item = strtok_r(buf, ";", &save); item;
	     item = strtok_r(NULL, ";", &save)) {
		unsigned long long step;
		int worker, used = 0;

		while (*item == ' ')
			item++;
		if (*item == '\0')
			continue;
		if (e->nsched == MAX_SCHEDULE)
			return dt__fail(DT_ECONFIG,
			                "DTRAIN_ELASTIC_SCHEDULE: more than %d "
			                "changes",
			                MAX_SCHEDULE);
		if (sscanf(item, "step %llu: +%d %n", &step, &worker, &used) ==
		        2 &&
		    item[used] == '\0' && worker >= 1 &&
		    worker <= e->c->nworkers) {
			e->sched[e->nsched++] = (sched_item){step, -1, worker};
			continue;
		}
		used = 0;
		if (sscanf(item, "step %llu: -worker %d %n", &step, &worker,
		           &used) != 2 ||
		    item[used] != '\0' || worker < 0 ||
		    worker >= e->c->nworkers)
			return dt__fail(
			    DT_ECONFIG,
			    "DTRAIN_ELASTIC_SCHEDULE: \"%s\" is not "
			    "\"step S: -worker R\" with R a worker's "
			    "launch rank (0..%d), nor \"step S: +N\" with N "
			    "workers joining (1..%d)",
			    item, e->c->nworkers - 1, e->c->nworkers);
		e->sched[e->nsched++] = (sched_item){step, worker, 0};
	}
	/* (a removal and a grow at one step are taken in that order:
	 * remove_then_grow) */
	return DT_OK;
}

dt_err
dt_elastic_create(dt_coll *c, dt_elastic **out)
{
	dt_elastic *e;
	const char *text;
	long secs, hold;
	dt_err err;

	if (c == NULL || out == NULL)
		return dt__fail(DT_EINVAL, "elastic_create: no communicator");
	*out = NULL;
	if ((err = dt__env_long("DT_ELASTIC_TIMEOUT", 60, 1, 86400, &secs)))
		return err;
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return dt__fail(DT_ENOMEM, "elastic state");
	e->c = c;
	e->timeout_ns = (uint64_t)secs * 1000000000ull;
	e->last.removed = -1;
	e->joining = c->elastic && dt__node_elastic_joiner(c->node);
	if ((err = dt__env_long("DT_TEST_SYNC_HOLD", -1, -1,
	                        DT_MAX_ROLE_NODES - 1, &hold))) {
		free(e);
		return err;
	}
	e->hold_rank = c->elastic ? (int)hold : -1;
	if ((text = dt__env_str("DTRAIN_ELASTIC_SCHEDULE")) != NULL) {
		if (!c->elastic) {
			free(e);
			return dt__fail(DT_ECONFIG,
			                "DTRAIN_ELASTIC_SCHEDULE needs an "
			                "elastic job (DTRAIN_ELASTIC=1)");
		}
		if ((err = parse_schedule(e, text))) {
			free(e);
			return err;
		}
	}
	*out = e;
	return DT_OK;
}

void
dt_elastic_destroy(dt_elastic *e)
{
	if (e == NULL)
		return;
	free(e->snap);
	free(e->r);
	free(e);
}

dt_err
dt_elastic_register(dt_elastic *e, const char *name, void *p, size_t bytes)
{
	if (e == NULL || (p == NULL && bytes))
		return dt__fail(DT_EINVAL, "elastic_register(%s): no buffer",
		                name ? name : "?");
	if (e->committed)
		return dt__fail(DT_ESTATE,
		                "elastic_register(%s): after the first commit",
		                name ? name : "?");
	if (e->nr == MAX_RANGES)
		return dt__fail(DT_ETOOBIG,
		                "elastic_register(%s): more than %d ranges",
		                name ? name : "?", MAX_RANGES);
	if (e->nr == e->rcap) {
		int cap = e->rcap ? 2 * e->rcap : 16;
		range *r = realloc(e->r, sizeof(*r) * (size_t)cap);

		if (r == NULL)
			return dt__fail(DT_ENOMEM, "elastic_register(%s)",
			                name ? name : "?");
		e->r = r;
		e->rcap = cap;
	}
	snprintf(e->r[e->nr].name, sizeof(e->r[0].name), "%s",
	         name ? name : "");
	e->r[e->nr].p = p;
	e->r[e->nr].bytes = bytes;
	e->nr++;
	e->snap_len += pad4(bytes);
	return DT_OK;
}

static void
snap_take(dt_elastic *e, uint64_t step)
{
	size_t off = 8;

	memcpy(e->snap, &step, 8);
	for (int i = 0; i < e->nr; i++) {
		memcpy(e->snap + off, e->r[i].p, e->r[i].bytes);
		off += pad4(e->r[i].bytes);
	}
}

static uint64_t
snap_put_back(dt_elastic *e)
{
	size_t off = 8;
	uint64_t step;

	memcpy(&step, e->snap, 8);
	for (int i = 0; i < e->nr; i++) {
		memcpy(e->r[i].p, e->snap + off, e->r[i].bytes);
		off += pad4(e->r[i].bytes);
	}
	return step;
}

/* Launch ranks of the workers in ids[0..n) missing from now[0..m). */
static int
removed_worker(const dt_coll *c, const int *old, int n, const int *now, int m)
{
	for (int i = 0; i < n; i++) {
		int found = 0;

		for (int k = 0; k < m; k++)
			found |= old[i] == now[k];
		if (!found)
			return old[i] - c->base_id;
	}
	return -1;
}

/* How many of now[0..m) are missing from old[0..n): workers taken in. */
static int
added_workers(const int *old, int n, const int *now, int m)
{
	int added = 0;

	for (int k = 0; k < m; k++) {
		int found = 0;

		for (int i = 0; i < n; i++)
			found |= old[i] == now[k];
		added += !found;
	}
	return added;
}

/* Append "step S: -worker R" to the replay for every worker of old that
 * the membership now lacks: two losses taken as one change (both before
 * the sync) both go at that step. */
static void
replay_removals(dt_coll *c, dt_elastic_change *l, const int *old, int n,
                uint64_t step)
{
	for (int i = 0; i < n; i++) {
		size_t len = strlen(l->replay);
		int found = 0;

		pthread_mutex_lock(&c->mu);
		for (int k = 0; k < c->size; k++)
			found |= old[i] == c->ids[k];
		pthread_mutex_unlock(&c->mu);
		if (!found && len + 40 < sizeof(l->replay))
			snprintf(l->replay + len, sizeof(l->replay) - len,
			         "%sstep %llu: -worker %d", len ? "; " : "",
			         (unsigned long long)step, old[i] - c->base_id);
	}
}

/* Record the change just taken, and log the line that replays it. A
 * worker that just joined knows no history to replay: it records only. */
static void
note_change(dt_elastic *e, const int *old, int old_size, uint64_t step)
{
	dt_coll *c = e->c;
	dt_elastic_change *l = &e->last;
	size_t len = strlen(l->replay);
	int gone, added;
	char what[64];

	pthread_mutex_lock(&c->mu);
	gone = removed_worker(c, old, old_size, c->ids, c->size);
	added = added_workers(old, old_size, c->ids, c->size);
	l->epoch = c->epoch;
	l->new_size = c->size;
	pthread_mutex_unlock(&c->mu);
	if (e->joining) {
		l->old_size = 0;
		l->step = step;
		l->removed = -1;
		l->added = 1;
		return;
	}
	l->old_size = old_size;
	l->step = step;
	l->removed = gone;
	l->added = added;
	/* A change may both drop and take in workers (a job below its
	 * minimum takes the loss and the newcomers as one membership): the
	 * replay names both, the removals first, as it replays them. */
	if (gone >= 0)
		replay_removals(c, l, old, old_size, step);
	len = strlen(l->replay);
	if (added > 0 && len + 40 < sizeof(l->replay))
		snprintf(l->replay + len, sizeof(l->replay) - len,
		         "%sstep %llu: +%d", len ? "; " : "",
		         (unsigned long long)step, added);
	if (gone >= 0 && added > 0)
		snprintf(what, sizeof(what), "worker %d left, %d joined", gone,
		         added);
	else if (gone >= 0)
		snprintf(what, sizeof(what), "worker %d left", gone);
	else if (added > 0)
		snprintf(what, sizeof(what), "%d worker%s joined", added,
		         added == 1 ? "" : "s");
	else
		snprintf(what, sizeof(what), "nobody joined");
	if (c->rank == 0)
		dt__log(0,
		        "elastic: membership %llu has %d workers from step "
		        "%llu (%s); replay with DTRAIN_ELASTIC_SCHEDULE=\"%s\"",
		        (unsigned long long)l->epoch, l->new_size,
		        (unsigned long long)step, what, l->replay);
}

/* The epoch of the node's newest membership if it still lists a worker
 * the schedule removes at step, else 0. Each leaver's word reaches the
 * scheduler on its own, so leavers at one commit may come as several
 * memberships in a row. */
static uint64_t
leaver_listed(dt_elastic *e, uint64_t step, int *ids)
{
	dt_coll *c = e->c;
	uint64_t epoch;
	int n = dt__node_membership(c->node, &epoch, ids, c->nworkers);

	for (int s = 0; s < e->nsched; s++)
		for (int i = 0; i < n && i < c->nworkers; i++)
			if (e->sched[s].step == step && !e->sched[s].add &&
			    ids[i] == c->base_id + e->sched[s].worker)
				return epoch;
	return 0;
}

/*
 * DT_TEST_SYNC_HOLD=R: launch rank R, in its first state sync, waits after
 * re-forming and before the broadcast until the communicator has heard of
 * a change after the membership it re-formed over (at most
 * DT_ELASTIC_TIMEOUT). The other ranks wait in the broadcast for it
 * meanwhile, so a test can make the next change (a worker killed) happen
 * while the sync runs, and every rank's sync meets a newer membership.
 * (The node's membership alone is not enough: the node wakes its waiters
 * before it tells the communicator, dt__coll_on_membership.)
 */
static void
sync_hold(dt_elastic *e)
{
	dt_coll *c = e->c;
	uint64_t epoch, until = dt__now_ns() + e->timeout_ns;

	if (e->held || e->hold_rank != dt__node_id(c->node) - c->base_id)
		return;
	e->held = 1;
	pthread_mutex_lock(&c->mu);
	epoch = c->epoch;
	pthread_mutex_unlock(&c->mu);
	dt__log(0,
	        "elastic: launch rank %d (pid %d) holds in the state sync "
	        "over membership %llu until a newer one comes "
	        "(DT_TEST_SYNC_HOLD)",
	        e->hold_rank, (int)getpid(), (unsigned long long)epoch);
	pthread_mutex_lock(&c->mu);
	while (!c->changing && dt__now_ns() < until)
		dt__coll_cv_wait_until(
		    c, DT_MIN(until, dt__now_ns() + 100000000ull));
	pthread_mutex_unlock(&c->mu);
}

/*
 * Take the change: wait for the scheduler's membership, re-form, and
 * broadcast the new rank 0's commit to every rank. Again if another rank
 * is lost meanwhile, or a newer membership drops one of the ranks the
 * broadcast runs over (each time with a deadline). At a scheduled
 * removal (leave_at), the survivors wait for the membership without
 * every leaver of that commit, and so all re-form over the same list.
 */
static dt_err
take_change(dt_elastic *e, const uint64_t *leave_at, uint64_t *step)
{
	dt_coll *c = e->c;
	int *old = malloc(sizeof(int) * (size_t)c->nworkers), old_size;
	int *now = malloc(sizeof(int) * (size_t)c->nworkers);
	uint64_t seen = 0;
	dt_err err;

	if (old == NULL || now == NULL) {
		free(old);
		free(now);
		return dt__fail(DT_ENOMEM, "elastic: membership");
	}
	pthread_mutex_lock(&c->mu);
	old_size = c->size;
	memcpy(old, c->ids, sizeof(int) * (size_t)old_size);
	c->syncing = 1;
	pthread_mutex_unlock(&c->mu);
	for (;;) {
		int changed;
		uint64_t epoch;

		pthread_mutex_lock(&c->mu);
		epoch = c->epoch;
		pthread_mutex_unlock(&c->mu);
		if ((err = dt__node_wait_membership(
		         c->node, DT_MAX(epoch, seen),
		         dt__now_ns() + e->timeout_ns))) {
			err = dt__fail(err, "elastic: %s (DT_ELASTIC_TIMEOUT)",
			               dt_errmsg());
			break;
		}
		if (leave_at && (seen = leaver_listed(e, *leave_at, now)))
			continue; /* another leaver's membership follows */
		if ((err = dt__coll_reform(c, &changed)))
			break;
		sync_hold(e);
		err =
		    dt_coll_broadcast(c, e->snap, e->snap_len / 4, DT_INT32, 0);
		if (err == DT_EMEMBERSHIP) {
			/* Lost another, or a newer membership drops a rank of
			 * this one (reform.c): the next membership. */
			DT_LOG(1,
			       "elastic: the state sync failed (%s); taking "
			       "the newer membership",
			       dt_errmsg());
			continue;
		}
		if (err)
			break;
		*step = snap_put_back(e);
		note_change(e, old, old_size, *step);
		/* (a job with servers: its pushes name this membership now) */
		dt__node_elastic_take(c->node, e->last.epoch);
		e->joining = 0;
		e->watch = 0; /* (every rank: the next commit decides) */
		e->changed = 1;
		e->changed_at = *step;
		break;
	}
	pthread_mutex_lock(&c->mu);
	c->syncing = 0;
	pthread_mutex_unlock(&c->mu);
	free(old);
	free(now);
	return err;
}

/* Whether the schedule changes the membership at step; *me: it removes
 * this worker; *add: the workers it takes in. */
static int
scheduled(const dt_elastic *e, uint64_t step, int *me, int *add)
{
	int any = 0;
	int rank = dt__node_id(e->c->node) - e->c->base_id;

	*me = 0;
	*add = 0;
	for (int i = 0; i < e->nsched; i++)
		if (e->sched[i].step == step) {
			any = 1;
			*me |= e->sched[i].worker == rank;
			*add += e->sched[i].add;
		}
	return any;
}

/* A grow at this commit: rank 0 asks the scheduler for add workers (or,
 * exact, for that many, waiting until they are ready) and every rank
 * takes the membership that comes back. */
static dt_err
grow_here(dt_elastic *e, uint64_t step, int add, int exact)
{
	dt_coll *c = e->c;
	uint64_t at;
	int rank;
	dt_err err;

	pthread_mutex_lock(&c->mu);
	rank = c->rank;
	pthread_mutex_unlock(&c->mu);
	if (rank == 0 &&
	    (err = dt__node_elastic_grow(c->node, add, step, exact)))
		return err;
	return take_change(e, NULL, &at);
}

/* A scheduled removal and grow at one commit (the replay of a change that
 * dropped a worker and took newcomers in): the survivors take the removal
 * first, then ask for the newcomers that membership does not have yet. A
 * job the removal takes below its minimum gets them in the same
 * membership, as the run it replays did; otherwise they come in a second
 * one at the same step. Either way the ranks go on from this commit with
 * the same workers. */
static dt_err
remove_then_grow(dt_elastic *e, uint64_t step, int add)
{
	uint64_t at;
	dt_err err = take_change(e, &step, &at);

	if (err || e->last.added == add)
		return err;
	if (e->last.added > add)
		return dt__fail(DT_EMEMBERSHIP,
		                "step %llu: the schedule takes in %d workers "
		                "here, but the membership took in %d",
		                (unsigned long long)step, add, e->last.added);
	return grow_here(e, step, add - e->last.added, 1);
}

/* Whether the schedule removes a worker at step. */
static int
removes_at(const dt_elastic *e, uint64_t step)
{
	for (int i = 0; i < e->nsched; i++)
		if (e->sched[i].step == step && e->sched[i].worker >= 0)
			return 1;
	return 0;
}

/* Without a schedule: whether any rank has heard of workers ready to
 * join, agreed by every rank here (an allreduce of the most any heard
 * of), so that all take them in at the same step; and whether one has
 * asked to join but is not ready yet, so that all watch for it at every
 * step (e->watch). Only while the job is below DTRAIN_ELASTIC_MAX. */
static dt_err
waiting_here(dt_elastic *e, int *add)
{
	dt_coll *c = e->c;
	int32_t heard[2];
	int size, room;
	dt_err err;

	*add = 0;
	e->watch = 0;
	pthread_mutex_lock(&c->mu);
	size = c->size;
	pthread_mutex_unlock(&c->mu);
	room = dt__node_elastic_max(c->node) - size;
	if (room <= 0)
		return DT_OK;
	heard[0] = dt__node_elastic_waiting(c->node);
	heard[1] = dt__node_elastic_announced(c->node);
	if ((err =
	         dt_coll_allreduce(c, heard, heard, 2, DT_INT32, DT_COLL_MAX)))
		return err;
	*add = heard[0] < room ? (int)heard[0] : room;
	e->watch = heard[0] == 0 && heard[1] > 0;
	return DT_OK;
}

/* DT_EMEMBERSHIP if a change nobody scheduled is on its way. */
static dt_err
change_pending(dt_elastic *e, const char *where, uint64_t step)
{
	char msg[256];

	pthread_mutex_lock(&e->c->mu);
	if (!e->c->changing) {
		pthread_mutex_unlock(&e->c->mu);
		return DT_OK;
	}
	snprintf(msg, sizeof(msg), "%s", e->c->change_msg);
	pthread_mutex_unlock(&e->c->mu);
	return dt__fail(DT_EMEMBERSHIP, "%s at step %llu: %s", where,
	                (unsigned long long)step, msg);
}

dt_err
dt_elastic_commit(dt_elastic *e, uint64_t step)
{
	int me = 0, due, add = 0, again;
	uint64_t at;
	dt_err err;

	if (e == NULL)
		return dt__fail(DT_EINVAL, "elastic_commit: no state");
	if (e->left)
		return dt__fail(DT_ESTATE, "elastic_commit: this worker left "
		                           "the job");
	if (e->snap == NULL) {
		e->snap = malloc(8 + e->snap_len);
		if (e->snap == NULL)
			return dt__fail(DT_ENOMEM,
			                "elastic snapshot of %zu "
			                "bytes",
			                e->snap_len);
		e->snap_len += 8;
	}
	snap_take(e, step);
	e->committed = 1;
	again = e->changed && e->changed_at == step;
	e->changed = 0;
	if (!e->c->elastic)
		return DT_OK;
	if (e->joining) /* (its state comes from the members: restore) */
		return dt__fail(DT_EMEMBERSHIP,
		                "commit at step %llu: this worker joined the "
		                "running job and takes the members' state",
		                (unsigned long long)step);
	/* (the step a change was taken at: its schedule is done, and the
	 * others agree on nothing more there) */
	due = again ? 0 : scheduled(e, step, &me, &add);
	if (me) {
		/* Leave cleanly: no operation of ours is in flight, and the
		 * others take the membership without us at this commit. */
		pthread_mutex_lock(&e->c->mu);
		e->c->left = 1;
		pthread_mutex_unlock(&e->c->mu);
		e->left = 1;
		DT_LOG(1, "elastic: leaving the job at step %llu (schedule)",
		       (unsigned long long)step);
		return dt__node_elastic_leave(e->c->node);
	}
	if (due && add && removes_at(e, step))
		return remove_then_grow(e, step, add);
	if (due && add) /* every member is at this commit */
		return grow_here(e, step, add, 1);
	if (due) /* every survivor is at this commit: it is the step */
		return take_change(e, &step, &at);
	/* A change nobody scheduled: the ranks may be at different
	 * commits, and dt_elastic_restore says which one they all go on
	 * from. */
	if ((err = change_pending(e, "commit", step)))
		return err;
	/* Workers waiting to join, when no schedule decides the steps. */
	if (e->nsched == 0 && !again) {
		if ((err = waiting_here(e, &add)))
			return err;
		if (add > 0)
			return grow_here(e, step, add, 0);
	}
	return DT_OK;
}

dt_err
dt_elastic_poll(dt_elastic *e, uint64_t step, int *committed)
{
	int me, add;
	dt_err err;

	if (committed)
		*committed = 0;
	if (e == NULL)
		return dt__fail(DT_EINVAL, "elastic_poll: no state");
	/* (nothing to watch, nothing scheduled: the usual step) */
	if (!e->c->elastic || (!e->watch && e->nsched == 0))
		return DT_OK;
	if (e->left || e->joining || !e->committed)
		return dt__fail(DT_ESTATE, "elastic_poll at step %llu: %s",
		                (unsigned long long)step,
		                e->left      ? "this worker left the job"
		                : e->joining ? "this worker joins the running "
		                               "job and restores first"
		                             : "nothing committed yet");
	/* (the step a change was taken at: done there) */
	if (e->changed && e->changed_at == step)
		return DT_OK;
	if (e->nsched) {
		/* A replay: a change logged between commits is taken here,
		 * as a commit would take it. */
		if (!scheduled(e, step, &me, &add))
			return DT_OK;
		if (committed)
			*committed = 1;
		return dt_elastic_commit(e, step);
	}
	if ((err = change_pending(e, "elastic_poll", step)) ||
	    (err = waiting_here(e, &add)))
		return err;
	if (add == 0)
		return DT_OK;
	/* Commit this step first: the state the joiner gets, and the one
	 * every rank goes back to after a later loss, is a committed one. */
	snap_take(e, step);
	e->changed = 0;
	if (committed)
		*committed = 1;
	return grow_here(e, step, add, 0);
}

dt_err
dt_elastic_restore(dt_elastic *e, uint64_t *step)
{
	dt_err err;

	if (e == NULL || step == NULL)
		return dt__fail(DT_EINVAL, "elastic_restore: no state");
	if (!e->committed)
		return dt__fail(DT_ESTATE,
		                "elastic_restore: nothing committed yet");
	if (!e->c->elastic)
		return dt__fail(DT_ESTATE,
		                "elastic_restore: the job is not elastic "
		                "(DTRAIN_ELASTIC=1)");
	/* A worker joining the running job is ready to be taken in only
	 * now: its program has loaded what it needs and waits for the
	 * members' state. Its first barrier over the workers says so to the
	 * scheduler, and ends once a membership takes it in. */
	if (e->joining && !e->ready_sent) {
		e->ready_sent = 1;
		if ((err = dt_node_barrier(e->c->node, DT_GROUP_WORKERS)))
			return err;
	}
	return take_change(e, NULL, step);
}

int
dt_elastic_joining(const dt_elastic *e)
{
	return e ? e->joining : 0;
}

int
dt_elastic_left(const dt_elastic *e)
{
	return e ? e->left : 0;
}

void
dt_elastic_last_change(const dt_elastic *e, dt_elastic_change *out)
{
	if (e && out)
		*out = e->last;
}
