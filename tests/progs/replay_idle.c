/*
 * replay_idle.c - a restarted server gets its replay from a worker that
 * makes no KVStore call meanwhile (tests/integration/replay_idle.sh). Run
 * one copy per worker, 2 workers, under `dtrain launch --restart 1` with
 * checkpoints (dist_sync).
 *
 * Each worker makes REPLAY_IDLE_STEPS (25) row pushes to a table split
 * over the servers, with sgd at lr 1: a row ends at its init minus every
 * gradient pushed to it, small integers, so the sums are exact in any
 * order. Then worker 1 waits in a barrier, and worker 0 holds until the
 * file REPLAY_IDLE_GO exists: the test kills a server meanwhile and makes
 * the file once the new server has taken its place. Worker 0 then pulls
 * the whole table. The new server needs worker 1's pushes since its
 * checkpoint to end the rounds that pull waits for, and worker 1 sits in
 * the barrier: its replay has to go without a call of its own. Both then
 * check the table exactly. REPLAY_IDLE_MODE=leave: worker 1 ends instead
 * (dt_kv_destroy) and the server is killed meanwhile; its pushes are
 * needed all the same.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/kv.h"

#define KEY   3
#define ROWS  200
#define WIDTH 2

#define OK(call)                                                               \
	do {                                                                   \
		dt_err e_ = (call);                                            \
		if (e_ != DT_OK) {                                             \
			fprintf(stderr,                                        \
			        "replay_idle: %s failed at line %d: %s\n",     \
			        #call, __LINE__, dt_errmsg());                 \
			exit(1);                                               \
		}                                                              \
	} while (0)

/* Whether worker w pushes row r in step k, and with which gradient. */
static int
pushes_row(int w, int k, uint64_t r)
{
	return (r + (uint64_t)k + (uint64_t)w) % 3 != 0;
}

static float
grad(int w, int k, uint64_t r, size_t c)
{
	return (float)((w + 1) * (k + 1) + (int)(r % 5) + (int)c);
}

static float
init_of(uint64_t r, size_t c)
{
	return (float)(1000 + r + c);
}

/* Wait until path exists, polling; 5 minutes at most (the test's own
 * bound is shorter). */
static void
hold_until(const char *path)
{
	for (int i = 0; access(path, F_OK) != 0; i++) {
		if (i == 30000) {
			fprintf(stderr, "replay_idle FAILED: %s never came\n",
			        path);
			exit(1);
		}
		usleep(10000);
	}
}

/* Pull the whole table and compare it with what nw workers' steps
 * pushes make of it; 0 when exact. */
static int
check_table(dt_kv *kv, int rank, int nw, int steps)
{
	static uint64_t ids[ROWS];
	static float got[ROWS * WIDTH];
	int bad = 0;

	for (uint64_t r = 0; r < ROWS; r++)
		ids[r] = r;
	OK(dt_kv_row_sparse_pull(kv, KEY, ROWS, ids, got, WIDTH));
	for (uint64_t r = 0; r < ROWS; r++)
		for (size_t c = 0; c < WIDTH; c++) {
			float want = init_of(r, c);

			for (int w = 0; w < nw; w++)
				for (int k = 0; k < steps; k++)
					if (pushes_row(w, k, r))
						want -= grad(w, k, r, c);
			if (got[r * WIDTH + c] != want && bad++ < 5)
				fprintf(stderr,
				        "replay_idle FAILED: row %llu col %zu: "
				        "%g, expected %g\n",
				        (unsigned long long)r, c,
				        (double)got[r * WIDTH + c],
				        (double)want);
		}
	if (bad == 0)
		printf("replay_idle: worker %d: table exact after %d rounds\n",
		       rank, steps);
	fflush(stdout);
	return bad;
}

int
main(void)
{
	const char *go = getenv("REPLAY_IDLE_GO");
	const char *se = getenv("REPLAY_IDLE_STEPS");
	const char *mode = getenv("REPLAY_IDLE_MODE");
	int steps = se ? atoi(se) : 25, rank, nw, bad;
	int leave = mode && strcmp(mode, "leave") == 0;
	static uint64_t ids[ROWS];
	static float val[ROWS * WIDTH];
	dt_kv *kv;

	if (go == NULL || steps < 1) {
		fprintf(stderr, "replay_idle: set REPLAY_IDLE_GO=FILE\n");
		return 2;
	}
	OK(dt_kv_create("dist_sync", &kv));
	rank = dt_kv_rank(kv);
	nw = dt_kv_num_workers(kv);
	OK(dt_kv_set_optimizer(kv, "sgd", "lr=1"));
	for (uint64_t r = 0; r < ROWS; r++)
		for (size_t c = 0; c < WIDTH; c++)
			val[r * WIDTH + c] = init_of(r, c);
	OK(dt_kv_init_row_sparse(kv, KEY, ROWS, WIDTH, val));
	for (int k = 0; k < steps; k++) {
		size_t n = 0;

		for (uint64_t r = 0; r < ROWS; r++) {
			if (!pushes_row(rank, k, r))
				continue;
			for (size_t c = 0; c < WIDTH; c++)
				val[n * WIDTH + c] = grad(rank, k, r, c);
			ids[n++] = r;
		}
		OK(dt_kv_push_row_sparse(kv, KEY, n, ids, val, WIDTH));
	}
	if (rank == 0) {
		printf("replay_idle: worker 0: holding after %d pushes until "
		       "%s exists\n",
		       steps, go);
		fflush(stdout);
		hold_until(go);
		bad = check_table(kv, rank, nw, steps);
		if (!leave)
			OK(dt_kv_barrier(kv));
	} else if (leave) {
		printf("replay_idle: worker %d: leaving after %d pushes\n",
		       rank, steps);
		fflush(stdout);
		OK(dt_kv_destroy(kv));
		return 0;
	} else {
		printf("replay_idle: worker %d: in the barrier after %d "
		       "pushes\n",
		       rank, steps);
		fflush(stdout);
		OK(dt_kv_barrier(kv));
		bad = check_table(kv, rank, nw, steps);
	}
	if (!leave)
		OK(dt_kv_barrier(kv));
	OK(dt_kv_destroy(kv));
	return bad ? 1 : 0;
}
