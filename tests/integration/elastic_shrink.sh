#!/bin/bash
# elastic_shrink.sh - an elastic job in the collectives mode
# (docs/elastic.md) loses a worker and goes on, reproducibly:
#   - 4 workers, --min-workers 2: launch rank 2 kills itself (SIGKILL)
#     between two commits; the launcher keeps the job going, every
#     survivor's allreduce fails with the named membership error, the job
#     ends 0 with 3 workers, and no sample of an epoch is trained on twice;
#   - the replay line that run logged, given as DTRAIN_ELASTIC_SCHEDULE,
#     ends with the same weights, bit for bit, without killing anything
#     (the worker leaves cleanly at that commit); so does a second replay;
#   - two losses in one run (ranks 1 and 3 at different steps), replayed;
#   - node barriers over the workers go on past a lost worker;
#   - under the minimum the job ends with a message naming it.
# (An elastic job with servers is elastic_ps.sh's.)
. "$(dirname "$0")/coll_lib.bash"
. "$(dirname "$0")/elastic_lib.bash"
ARGS=(--steps 400 --commit-every 10 --count-samples)

# One loss.
run kill "" -n 4 -s 0 --min-workers 2 -- --die-at 55 --die-rank 2
check "one worker killed: the job ends 0 (got $RC)" test "$RC" = 0
check "the launcher goes on" \
	grep -q "worker 2 (pid [0-9]*) killed by signal 9.*the elastic job goes on" "$TMP/kill"
check "the survivors' allreduce fails naming the change" \
	grep -q "allreduce #[0-9]*: rank 2 left (membership 0 -> 1)" "$TMP/kill"
check "the job ends with 3 workers in membership 1" \
	grep -q "done with 3 workers at epoch [0-9]*; .*membership 1$" "$TMP/kill"
check "no sample trained on twice in an epoch" samples_ok kill
sched=$(replay_of kill)
check "the change is logged with its replay ('$sched')" \
	grep -Eq '^step [0-9]+: -worker 2$' <<<"$sched"

run replay "$sched" -n 4 -s 0 --min-workers 2 --
check "replay: ends 0 (got $RC)" test "$RC" = 0
check "replay: the worker leaves at its commit" \
	grep -q "rank 2 left at step" "$TMP/replay"
check "replay: no worker was killed" \
	test -z "$(grep "killed by signal" "$TMP/replay")"
check "replay: weights bit-identical to the killed run" \
	cmp "$TMP/kill.bin" "$TMP/replay.bin"
check "replay: samples once" samples_ok replay
run replay2 "$sched" -n 4 -s 0 --min-workers 2 --
check "a second replay: bit-identical again" \
	cmp "$TMP/replay.bin" "$TMP/replay2.bin"
run fixed "" -n 4 -s 0 --
check "a run with no change ends 0 (got $RC)" test "$RC" = 0
check "... and differs from the shrunk one" \
	test -n "$(cmp "$TMP/fixed.bin" "$TMP/kill.bin" 2>&1)"

# Two losses, the second in the 3-worker membership.
run kill2 "" -n 4 -s 0 --min-workers 2 -- --die-at 33 --die-rank 1 \
	--die-at 127 --die-rank 3
check "two workers killed: ends 0 (got $RC)" test "$RC" = 0
check "two workers killed: membership 2 of 2 workers" \
	grep -q "done with 2 workers at epoch [0-9]*; .*membership 2$" "$TMP/kill2"
check "two workers killed: samples once" samples_ok kill2
sched=$(replay_of kill2)
check "both changes are in the replay ('$sched')" \
	grep -Eq '^step [0-9]+: -worker 1; step [0-9]+: -worker 3$' <<<"$sched"
run replay3 "$sched" -n 4 -s 0 --min-workers 2 --
check "its replay ('$sched') is bit-identical" \
	cmp "$TMP/kill2.bin" "$TMP/replay3.bin"

# Node barriers over the workers: worker 1 dies instead of entering round
# 3, which the others entered with the count of 3; they pass it once it is
# taken out, and the later rounds with 2.
out=$TMP/barrier
DT_TEST_TAG=$TAG timeout $((60 * S)) "$DTRAIN" launch -n 3 -s 0 \
	--min-workers 2 -- "$BUILD/tests/progs/elastic_barrier" 6 1 3 \
	>"$out" 2>&1
rc=$?
check "barriers: a worker lost at one, the job ends 0 (got $rc)" test "$rc" = 0
check "barriers: both survivors pass every round" \
	test "$(grep -cE "rank [02] passed 5$" "$out")" = 2

# Under the minimum.
run below "" -n 2 -s 0 --min-workers 2 --elastic-timeout 2 -- --die-at 20 \
	--die-rank 1
check "under the minimum: the job fails (got $RC)" test "$RC" != 0
check "under the minimum: named" \
	grep -q "worker 1 .*killed by signal 9.*: fewer workers remain than the elastic job's minimum of 2" "$TMP/below"

finish
