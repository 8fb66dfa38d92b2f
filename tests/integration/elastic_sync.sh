#!/bin/bash
# elastic_sync.sh - a newer membership comes while the survivors of a
# change sync the state (docs/elastic.md): 4 workers, --min-workers 2;
# launch rank 1 kills itself at step 55, and while the survivors broadcast
# the new rank 0's commit over membership 1, launch rank 3 is killed too
# (DT_TEST_SYNC_HOLD=2 holds launch rank 2 in that sync until membership 2
# exists, so the others wait in the broadcast for it when the kill lands):
#   - the sync over membership 1 fails, and the survivors re-form over
#     membership 2 and sync again: the job ends 0 with 2 workers in
#     membership 2, both going on from the same step, and no sample of an
#     epoch is trained on twice;
#   - the run logs both removals at one step, and that replay, in which
#     both workers leave at that commit, is bit-identical to the run;
#   - nothing of the job is left running.
. "$(dirname "$0")/coll_lib.bash"
. "$(dirname "$0")/elastic_lib.bash"
ARGS=(--steps 400 --commit-every 10 --count-samples)

# The run, in the background: the test kills launch rank 3 once launch
# rank 2 holds in the sync.
DTRAIN_ELASTIC_SCHEDULE="" DT_TEST_SYNC_HOLD=2 PS_VERBOSE=1 DT_TEST_TAG=$TAG \
	timeout $((120 * S)) "$DTRAIN" launch -n 4 -s 0 --min-workers 2 -- \
	"$EX" "${ARGS[@]}" --save "$TMP/held.bin" --die-at 55 --die-rank 1 \
	>"$TMP/held" 2>&1 &
job=$!
deadline=$(($(now_ms) + 90000 * S))
until grep -q "launch rank 2 (pid [0-9]*) holds in the state sync over membership 1 " \
	"$TMP/held"; do
	if [ "$(now_ms)" -ge "$deadline" ] || ! kill -0 "$job" 2>/dev/null; then
		break
	fi
	sleep 0.05
done
check "launch rank 2 holds in the sync over membership 1" \
	grep -q "launch rank 2 (pid [0-9]*) holds in the state sync over membership 1 " "$TMP/held"
# (the scheduler names every worker's pid, verbosely)
victim=$(grep -o "assigned rank 3 to the worker at [^ ]* (pid [0-9]*" "$TMP/held" |
	grep -o "[0-9]*$")
check "launch rank 3's pid is known ('$victim')" test -n "$victim"
[ -n "$victim" ] && kill -9 "$victim"
wait "$job"
RC=$?
check "a loss during the sync: the job ends 0 (got $RC)" test "$RC" = 0
check "the held rank's sync over membership 1 fails and it takes the newer" \
	grep -q "^\[worker 2\] elastic: the state sync failed (.*membership 1 -> 2.*); taking the newer membership" "$TMP/held"
check "the job ends with 2 workers in membership 2" \
	grep -q "done with 2 workers at epoch [0-9]*; .*membership 2$" "$TMP/held"
froms=$(grep -o "elastic: rank [01] of 2 from step [0-9]*" "$TMP/held" | sort -u)
check "both survivors go on in membership 2 from one step ('$(echo $froms)')" \
	test "$(wc -l <<<"$froms")" = 2 -a \
	"$(grep -o "step [0-9]*$" <<<"$froms" | sort -u | wc -l)" = 1
check "samples once" samples_ok held
sched=$(replay_of held)
check "both removals are at one step of the replay ('$sched')" \
	grep -Eq '^step ([0-9]+): -worker 1; step \1: -worker 3$' <<<"$sched"
check "no process of the job is left" \
	test -z "$(grep -l "DT_TEST_TAG=$TAG" /proc/[0-9]*/environ 2>/dev/null)"

run replay "$sched" -n 4 -s 0 --min-workers 2 --
check "replay: ends 0 (got $RC)" test "$RC" = 0
check "replay: no worker was killed" \
	test -z "$(grep "killed by signal" "$TMP/replay")"
check "replay: 2 workers at the end" \
	grep -q "done with 2 workers at epoch [0-9]*; .*membership 2$" "$TMP/replay"
check "replay: bit-identical to the run" cmp "$TMP/held.bin" "$TMP/replay.bin"
finish
