#!/bin/bash
# elastic_min_two.sh - two membership changes in one round of an elastic
# job (docs/elastic.md): two workers are killed at the same step.
#   - 4 workers, --min-workers 2: the survivors take both losses as one
#     change (or two in a row), and the run logs a replay with both
#     removals at that step; the replay, twice, is bit-identical: both
#     workers leave at one commit, which gives two memberships, and no
#     survivor waits in a sync over the first for the second leaver;
#   - 4 workers, --min-workers 3: the second loss takes the job below its
#     minimum; the discovery's free slot brings a worker back, the job
#     ends 0 with 3 workers, and its replay (both workers leave at that
#     commit, the discovery refills the slot) is bit-identical, twice.
. "$(dirname "$0")/coll_lib.bash"
. "$(dirname "$0")/elastic_lib.bash"
ARGS=(--steps 400 --commit-every 10 --count-samples)
DIE=(--die-at 55 --die-rank 1 --die-at 55 --die-rank 3)

# both_at SCHEDULE: it removes workers 1 and 3 at one step (in either
# order: one change, or two in a row).
both_at() {
	grep -Eq '^step ([0-9]+): -worker 1; step \1: -worker 3$' <<<"$1" ||
		grep -Eq '^step ([0-9]+): -worker 3; step \1: -worker 1$' <<<"$1"
}

# Two losses at one step, above the minimum.
run two "" -n 4 -s 0 --min-workers 2 -- "${DIE[@]}"
check "two killed at one step: ends 0 (got $RC)" test "$RC" = 0
check "two killed at one step: 2 workers at the end" \
	grep -q "done with 2 workers at epoch [0-9]*; .*membership 2$" "$TMP/two"
check "two killed at one step: samples once" samples_ok two
sched=$(replay_of two)
check "both removals are in the replay ('$sched')" both_at "$sched"
for k in 1 2; do
	run two_replay$k "$sched" -n 4 -s 0 --min-workers 2 --
	check "two leave at one commit, replay $k: ends 0 (got $RC)" \
		test "$RC" = 0
	check "two leave at one commit, replay $k: no wait timed out" \
		test -z "$(grep -Ei "timed out|TIMEOUT" "$TMP/two_replay$k")"
	check "two leave at one commit, replay $k: 2 workers at the end" \
		grep -q "done with 2 workers at epoch" "$TMP/two_replay$k"
	check "two leave at one commit, replay $k is bit-identical" \
		cmp "$TMP/two.bin" "$TMP/two_replay$k.bin"
done

# The same with parameter servers (2, dist_sync): one or two memberships,
# the rounds of each dropped, and the replay bit-identical.
run two_ps "" -n 4 -s 2 --min-workers 2 -- --kvstore dist_sync "${DIE[@]}"
check "servers: two killed at one step: ends 0 (got $RC)" test "$RC" = 0
check "servers: two killed at one step: 2 workers at the end" \
	grep -q "done with 2 workers at epoch [0-9]*; .*membership 2$" "$TMP/two_ps"
check "servers: two killed at one step: samples once" samples_ok two_ps
sched=$(replay_of two_ps)
check "servers: both removals are in the replay ('$sched')" both_at "$sched"
run two_ps_replay "$sched" -n 4 -s 2 --min-workers 2 -- --kvstore dist_sync
check "servers: the replay ends 0 (got $RC)" test "$RC" = 0
check "servers: the replay is bit-identical" \
	cmp "$TMP/two_ps.bin" "$TMP/two_ps_replay.bin"

# Two losses at one step, the second below the minimum; one comes back.
printf 'a:3\n' >"$TMP/hosts3"
DISC=(-n 4 -s 0 --min-workers 3 --max-workers 6
	--host-discovery-script "cat $TMP/hosts3")
run below "" "${DISC[@]}" -- "${DIE[@]}"
check "below the minimum after two losses: ends 0 (got $RC)" test "$RC" = 0
check "the scheduler waited below the minimum" \
	grep -q "fewer than DTRAIN_ELASTIC_MIN=3; waiting up to" "$TMP/below"
check "a worker came back: 3 workers at the end" \
	grep -q "done with 3 workers at epoch [0-9]*; .*membership 3$" "$TMP/below"
check "samples once" samples_ok below
sched=$(replay_of below)
check "both removals and the newcomer are in its replay ('$sched')" \
	both_at "${sched%; step [0-9]*: +1}"
check "...the newcomer at that step" \
	grep -Eq '^step ([0-9]+): .*; step \1: \+1$' <<<"$sched"
for k in 1 2; do
	run below_replay$k "$sched" "${DISC[@]}" --
	check "replay $k ends 0 (got $RC)" test "$RC" = 0
	check "replay $k: no worker was killed" \
		test -z "$(grep "killed by signal" "$TMP/below_replay$k")"
	check "replay $k is bit-identical" \
		cmp "$TMP/below.bin" "$TMP/below_replay$k.bin"
done
finish
