/*
 * dtrain/elastic.h - elastic training: a job that keeps training when a
 * worker is taken away (Horovod Elastic's State with
 * commit / restore / sync, in C).
 *
 * A job started with DTRAIN_ELASTIC=1 (dtrain launch --min-workers A) has
 * a membership: an epoch and the sorted list of its live workers, kept by
 * the scheduler. A lost worker (killed, crashed, silent) is taken out of
 * it instead of ending the job, as long as DTRAIN_ELASTIC_MIN workers
 * remain; the communicator's ranks then become positions in the new list.
 * docs/elastic.md describes the model.
 *
 * The program registers the bytes that make up its training state
 * (parameters, optimizer state, the step, the sampler's position) and runs
 * its loop so:
 *
 *     dt_elastic_create(coll, &e);
 *     dt_elastic_register(e, "params", params, bytes); ...
 *     for (step = 0; step < steps;) {
 *             if (step % K == 0) {
 *                     err = dt_elastic_commit(e, step);
 *                     if (dt_elastic_left(e)) break;   (its schedule)
 *                     if (err == DT_EMEMBERSHIP) goto restore;
 *             } else {
 *                     err = dt_elastic_poll(e, step, NULL);
 *                     if (err == DT_EMEMBERSHIP) goto restore;
 *             }
 *             err = one_step(...);     (collectives inside)
 *             if (err == DT_EMEMBERSHIP) {
 *     restore:        dt_elastic_restore(e, &step);  (state as committed)
 *                     continue;        (recompute the data split)
 *             }
 *             step++;
 *     }
 *
 * An operation in flight when a rank is lost fails on every survivor with
 * DT_EMEMBERSHIP ("allreduce #12: rank 3 left (membership 5 -> 6)"), and
 * so does every later one until the program takes the change with
 * dt_elastic_restore (or at a commit). Taking it re-forms the
 * communicator and broadcasts the committed state of the new rank 0 to
 * every rank (the sync), so all ranks go on from the same commit: the step
 * the change takes effect.
 *
 * Growing: a worker started with the running job's environment joins it.
 * Its communicator asks the scheduler at once; its own first
 * dt_elastic_commit returns DT_EMEMBERSHIP, and its dt_elastic_restore
 * says it is ready (so create the communicator first, then load the
 * data: the members learn of the worker meanwhile) and receives the state
 * the members committed at the step that took it in (the same sync), so
 * the loop above serves it unchanged. The members take it in at their
 * next commit, or, if their last commit saw it on its way but not ready,
 * at the first step it is (dt_elastic_poll, which commits that step).
 *
 * Determinism: DTRAIN_ELASTIC_SCHEDULE="step 40: -worker 1; step 90:
 * -worker 2; step 125: +1" applies the same changes at those steps (at a
 * commit, or at dt_elastic_poll between commits)
 * without a loss (the worker named by its launch rank leaves cleanly:
 * dt_elastic_left() says so; +1 takes in one worker started to join).
 * Each change a run takes is logged with the schedule that replays it;
 * the replay ends bit-identical.
 *
 * With parameter servers (DMLC_NUM_SERVER > 0): make the communicator on
 * the KVStore's node (dt_coll_init_node(dt_kv_node(kv), &c)) and use this
 * loop unchanged. The servers get every membership, a dist_sync round
 * waits for the live workers, and a round in flight when a worker is lost
 * is dropped: its pushes fail with DT_EMEMBERSHIP, and the loop goes back
 * to its commit. Each push names the membership taken last; a push of an
 * older one is refused. In dist_sync the optimizer runs on the workers
 * (its state registered here). A worker that joins such a job skips the
 * KVStore's set-up barriers (the members passed them at their start).
 *
 * Thread-safety: one thread per dt_elastic, the one calling the
 * communicator's collectives. Every wait is bounded by DT_ELASTIC_TIMEOUT
 * (seconds, default 60).
 */
#ifndef DTRAIN_ELASTIC_H
#define DTRAIN_ELASTIC_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/coll.h"
#include "dtrain/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_elastic dt_elastic;

/* The last membership change this rank took. */
typedef struct dt_elastic_change {
	uint64_t epoch;   /* the membership's epoch now (0: no change yet) */
	int old_size;     /* ranks before the change */
	int new_size;     /* ranks after it (dt_coll_size) */
	uint64_t step;    /* the commit step the new membership starts at */
	int removed;      /* launch rank of the worker it removed, or -1 */
	int added;        /* workers it took in (a grow), or 0 */
	char replay[512]; /* the DTRAIN_ELASTIC_SCHEDULE that replays every
	                     change so far */
} dt_elastic_change;

/*
 * Start elastic state over communicator c (kept by the caller, and
 * outliving *out). Reads DTRAIN_ELASTIC_SCHEDULE and DT_ELASTIC_TIMEOUT
 * (DT_ECONFIG naming what is wrong). Works on a communicator that is not
 * elastic too (a fixed job): commits are then only copies. On DT_OK *out
 * is the caller's, freed by dt_elastic_destroy().
 */
dt_err dt_elastic_create(dt_coll *c, dt_elastic **out);
void dt_elastic_destroy(dt_elastic *e);

/*
 * Register bytes of training state at p (kept by the caller and valid
 * until dt_elastic_destroy). name is for messages. Every rank registers
 * the same ranges, with the same sizes, in the same order, before the
 * first commit; at most 65,536 of them (DT_ETOOBIG past it).
 */
dt_err dt_elastic_register(dt_elastic *e, const char *name, void *p,
                           size_t bytes);

/*
 * Commit the registered state as of step (a copy in memory). A change
 * the schedule puts at this step is taken here: every rank goes on from
 * this commit in the new membership. Returns DT_OK (then check
 * dt_elastic_left: this worker's schedule removed it and it must stop
 * calling collectives, and finalize the communicator); DT_EMEMBERSHIP
 * when a change nobody scheduled is announced (call dt_elastic_restore,
 * as after a failed collective); or another error: a change that could
 * not be taken, a wait past DT_ELASTIC_TIMEOUT.
 */
dt_err dt_elastic_commit(dt_elastic *e, uint64_t step);

/*
 * Call before each step that does not call dt_elastic_commit (every rank
 * at the same steps). It takes in a worker that asked to join when it is
 * ready, if the members' last commit saw it on its way (one allreduce of
 * two words per step, only then), and a change the schedule puts at this
 * step; either way it commits step first (*committed = 1, if committed is
 * not NULL) and then returns as dt_elastic_commit does. Otherwise it
 * returns DT_OK at once, committing nothing.
 */
dt_err dt_elastic_poll(dt_elastic *e, uint64_t step, int *committed);

/*
 * After DT_EMEMBERSHIP: wait for the scheduler's new membership, take it,
 * and put the state of the last commit (of the new rank 0) back into the
 * registered ranges; *step is that commit's step. Before any commit:
 * DT_ESTATE.
 */
dt_err dt_elastic_restore(dt_elastic *e, uint64_t *step);

/* 1 once this worker left the job on its schedule. */
int dt_elastic_left(const dt_elastic *e);

/* 1 if this worker joined the running job and has not yet taken the
 * members' state (dt_elastic_restore after its first commit): until then
 * its collectives fail with DT_EMEMBERSHIP, so set-up steps that meet the
 * other ranks (a broadcast of initial parameters) are for members only. */
int dt_elastic_joining(const dt_elastic *e);

/* The last change taken (epoch 0 if none). */
void dt_elastic_last_change(const dt_elastic *e, dt_elastic_change *out);

#ifdef __cplusplus
}
#endif
#endif
