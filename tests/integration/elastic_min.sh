#!/bin/bash
# elastic_min.sh - an elastic job that falls below --min-workers waits for
# workers to join instead of ending (docs/elastic.md):
#   - 3 workers, --min-workers 3: launch rank 1 is killed (SIGKILL); the
#     scheduler holds the survivors back, the host discovery script's
#     free slot gets a new worker, and the one membership that follows
#     has it: the job ends 0 with 3 workers, each sample once an epoch;
#   - that change is logged with a replay naming both the removal and
#     the newcomer ("step S: -worker 1; step S: +1"); the replay of that
#     schedule alone (no discovery: the launcher starts the newcomer with
#     the job, which takes it in at step S) ends with the same weights,
#     bit for bit, and logs the same schedule; so does that schedule in
#     a job it leaves above the minimum (--min-workers 1: the removal and
#     the newcomer's grow are two memberships at that step);
#   - nobody comes back: with --elastic-timeout 4 (and the workers' own
#     wait for a membership, DT_ELASTIC_TIMEOUT, shorter than it) the job
#     ends with the error naming the minimum on the scheduler and every
#     survivor, within the timeout and a margin, nothing left running.
. "$(dirname "$0")/coll_lib.bash"
. "$(dirname "$0")/elastic_lib.bash"
ARGS=(--steps 400 --commit-every 10 --count-samples)

# Whether no process of this test is running any more.
none_left() {
	! grep -l "DT_TEST_TAG=$TAG" /proc/[0-9]*/environ 2>/dev/null |
		grep -q .
}

# A worker comes back: the listing keeps 3 slots, so the killed worker's
# slot gets a new one.
printf 'a:3\n' >"$TMP/hosts3"
run back "" -n 3 -s 0 --min-workers 3 --max-workers 5 \
	--host-discovery-script "cat $TMP/hosts3" -- --die-at 55 --die-rank 1
check "below the minimum, a worker comes back: the job ends 0 (got $RC)" \
	test "$RC" = 0
check "the launcher waits below the minimum" \
	grep -q "worker 1 (pid [0-9]*) killed by signal 9 (Killed): fewer workers remain than the elastic job's minimum of 3; waiting up to 600 s" "$TMP/back"
check "the scheduler waits for workers to join" \
	grep -q "2 workers remain, fewer than DTRAIN_ELASTIC_MIN=3; waiting up to 600 s" "$TMP/back"
check "the discovery starts a worker in the free slot" \
	grep -q "host a has a free slot: started worker 3" "$TMP/back"
check "one membership takes the loss and the new worker" \
	grep -q "membership 2 has 3 workers: 1 joined; the job has DTRAIN_ELASTIC_MIN=3 again" "$TMP/back"
check "the launcher sees the job back at its minimum" \
	grep -q "the elastic job has 3 workers again" "$TMP/back"
check "the job ends with 3 workers in membership 2" \
	grep -q "done with 3 workers at epoch [0-9]*; .*membership 2$" "$TMP/back"
check "no sample trained on twice in an epoch" samples_ok back
sched=$(replay_of back)
check "the change is logged with its replay, the newcomer too ('$sched')" \
	grep -Eq '^step ([0-9]+): -worker 1; step \1: \+1$' <<<"$sched"

# The replay of that schedule alone: worker 1 leaves at its commit, and
# the worker the launcher started with the job for the "+1" is taken in
# there (the job is below its minimum in between, as in the run).
run replay "$sched" -n 3 -s 0 --min-workers 3 --max-workers 5 --
check "replay: ends 0 (got $RC)" test "$RC" = 0
check "replay: the scheduled newcomer joined at the step" \
	grep -q "membership 2 has 3 workers: 1 joined" "$TMP/replay"
check "replay: it logs the same schedule" \
	test "$(replay_of replay)" = "$sched"
check "replay: no worker was killed" \
	test -z "$(grep "killed by signal" "$TMP/replay")"
check "replay: membership 2 has the new worker" \
	grep -q "done with 3 workers at epoch [0-9]*; .*membership 2$" "$TMP/replay"
check "replay: weights bit-identical to the run that lost a worker" \
	cmp "$TMP/back.bin" "$TMP/replay.bin"
check "replay: samples once" samples_ok replay

# The same schedule in a job that the removal leaves above its minimum:
# two memberships at that step, the removal's and then the newcomer's,
# and the same weights.
run replay_above "$sched" -n 3 -s 0 --min-workers 1 --max-workers 5 --
check "above the minimum: ends 0 (got $RC)" test "$RC" = 0
check "above the minimum: the removal, then the newcomer, at one step" \
	grep -q "membership 2 has 3 workers: 1 joined" "$TMP/replay_above"
check "above the minimum: it logs the same schedule" \
	test "$(replay_of replay_above)" = "$sched"
check "above the minimum: weights bit-identical to the run that lost a worker" \
	cmp "$TMP/back.bin" "$TMP/replay_above.bin"

# The launcher plans the schedule's newcomer (no rank asked for), and
# refuses a schedule that takes in more than --max-workers leaves room for.
DTRAIN_ELASTIC_SCHEDULE=$sched "$DTRAIN" launch --dry-run -n 3 -s 0 \
	--min-workers 3 --max-workers 5 -- "$EX" >"$TMP/plan" 2>&1
check "the plan has the scheduled newcomer as worker 3, without a rank" \
	grep -Eq "^worker 3 on localhost: env DMLC_ROLE=worker DMLC_PS_ROOT_URI=" "$TMP/plan"
check "...and no worker 4" test -z "$(grep "^worker 4 " "$TMP/plan")"
DTRAIN_ELASTIC_SCHEDULE="step 50: +1; step 90: +2" "$DTRAIN" launch -n 3 \
	-s 0 --min-workers 3 --max-workers 5 -- "$EX" >"$TMP/toomany" 2>&1
check "a schedule beyond --max-workers: usage error (got $?)" test $? = 2
check "...naming the bound" \
	grep -q "DTRAIN_ELASTIC_SCHEDULE takes in more workers than -n 3 leaves room for under --max-workers 5" "$TMP/toomany"

# The same with parameter servers (2, dist_sync): the servers' rounds wait
# below the minimum too, and the job comes back with the new worker; its
# replay is bit-identical.
run back_ps "" -n 3 -s 2 --min-workers 3 --max-workers 5 \
	--host-discovery-script "cat $TMP/hosts3" -- --kvstore dist_sync --die-at 55 --die-rank 1
check "servers: below the minimum, a worker comes back: ends 0 (got $RC)" \
	test "$RC" = 0
check "servers: one membership takes the loss and the new worker" \
	grep -q "membership 2 has 3 workers: 1 joined; the job has DTRAIN_ELASTIC_MIN=3 again" "$TMP/back_ps"
check "servers: the survivors' round was dropped, naming the loss" \
	grep -q "its round was dropped: membership 0 -> 2 (worker 1 was lost)" "$TMP/back_ps"
check "servers: the job ends with 3 workers in membership 2" \
	grep -q "done with 3 workers at epoch [0-9]*; .*membership 2$" "$TMP/back_ps"
check "servers: no sample trained on twice in an epoch" samples_ok back_ps
sched=$(replay_of back_ps)
check "servers: the replay names the removal and the newcomer ('$sched')" \
	grep -Eq '^step ([0-9]+): -worker 1; step \1: \+1$' <<<"$sched"
run replay_ps "$sched" -n 3 -s 2 --min-workers 3 --max-workers 5 -- \
	--kvstore dist_sync
check "servers: replay ('$sched') ends 0 (got $RC)" test "$RC" = 0
check "servers: replay: the job ends with 3 workers in membership 2" \
	grep -q "done with 3 workers at epoch [0-9]*; .*membership 2$" "$TMP/replay_ps"
check "servers: replay bit-identical to the run that lost a worker" \
	cmp "$TMP/back_ps.bin" "$TMP/replay_ps.bin"

# An elastic job with servers made by hand (DTRAIN_ELASTIC=1, no
# --min-workers): the launcher goes on after a worker's loss too.
DTRAIN_ELASTIC=1 run byhand_ps "" -n 3 -s 2 -- --kvstore dist_sync \
	--die-at 55 --die-rank 1
check "servers, DTRAIN_ELASTIC=1 by hand: ends 0 (got $RC)" test "$RC" = 0
check "servers, DTRAIN_ELASTIC=1 by hand: the launcher goes on" \
	grep -q "worker 1 (pid [0-9]*) killed by signal 9 (Killed); the elastic job goes on without it" "$TMP/byhand_ps"
check "servers, DTRAIN_ELASTIC=1 by hand: 2 workers at the end" \
	grep -q "done with 2 workers at epoch [0-9]*; .*membership 1$" "$TMP/byhand_ps"

# Nobody comes back.
t0=$(now_ms)
run alone "" -n 3 -s 0 --min-workers 3 --elastic-timeout 4 \
	--env DT_ELASTIC_TIMEOUT=1 -- --die-at 55 --die-rank 1
t1=$(now_ms)
check "nobody comes back: the job fails (got $RC)" test "$RC" != 0
check "nobody comes back: it ends within the timeout and a margin ($((t1 - t0)) ms)" \
	test $((t1 - t0)) -lt $((40000 * S))
why="2 workers live, fewer than DTRAIN_ELASTIC_MIN=3 for 4 s"
check "the scheduler names the minimum" \
	grep -q "\[scheduler\] .*$why" "$TMP/alone"
for r in 0 2; do
	check "worker $r names the minimum" \
		grep -q "\[worker $r\] .*$why" "$TMP/alone"
done
check "the launcher names the minimum as the cause" \
	grep -q "^dtrain launch: job failed: fewer workers than --min-workers 3 for 4 s$" "$TMP/alone"
check "the workers waited past their own DT_ELASTIC_TIMEOUT" \
	test -z "$(grep "timed out waiting for membership" "$TMP/alone")"
check "nothing is left running" none_left
finish
