#!/usr/bin/env bash
# elastic_join_step.sh - a worker that asks to join while it still loads
# its data is taken in at the step it is ready, between the members'
# commits (docs/elastic.md, "Growing"):
#   - 2 workers train (a commit every 10 steps, DTRAIN_ELASTIC_MAX=3); a
#     third asks to join before step 30's commit and is ready only once the
#     members hold before step 35 (--join-after): their commit at 30 sees it
#     on its way, they look for it at every step (dt_elastic_poll) and take
#     it in at step 35, not at their next commit (40); it gets the state
#     committed at 35, every epoch's samples are trained on once, and the
#     job ends 0 with 3 workers;
#   - the logged replay ("step 35: +1"), given as DTRAIN_ELASTIC_SCHEDULE
#     to a job whose 3 workers start at once, ends bit-identical.
. "$(dirname "$0")/cluster_lib.bash"
EX=$DTRAIN_BUILD/examples/elastic
ARGS=(--samples 512 --steps 160 --commit-every 10 --count-samples)

# start NAME [ARGS...]: a node of the job (DMLC_ROLE set by the caller).
start() {
	local name=$1
	shift
	spawn "$name" "$EX" "${ARGS[@]}" --save "$T_DIR/$TAG.bin" "$@"
}

TAG=join
job_env "$(free_port)" 0 2
export DTRAIN_ELASTIC=1 DTRAIN_ELASTIC_MAX=3
unset DTRAIN_ELASTIC_SCHEDULE
HOLD=(--hold-at 30 --hold-file "$T_DIR/go30" --hold-at 35 --hold-file "$T_DIR/go35")
PS_VERBOSE=1 DMLC_ROLE=scheduler start sched "${HOLD[@]}"
pids=("$SPAWNED")
for i in 0 1; do
	PS_VERBOSE=1 DMLC_ROLE=worker start "worker$i" "${HOLD[@]}"
	pids+=("$SPAWNED")
done
wait_for_line "$T_DIR/sched.log" "all 3 nodes are ready" 60 ||
	fail "the job of 2 workers did not start"
DMLC_ROLE=worker start joiner "${HOLD[@]}" --join-after "$T_DIR/ready"
pids+=("$SPAWNED")
# Both members know that it asked (and is not ready) before their commit
# at 30; both hold before step 35 before it is ready.
for i in 0 1; do
	wait_for_line "$T_DIR/worker$i.log" "0 workers wait to join \(1 asked\)" 60 ||
		fail "member $i did not hear that a worker asked to join"
done
: >"$T_DIR/go30"
for i in 0 1; do
	wait_for_line "$T_DIR/worker$i.log" "holding before step 35" 60 ||
		fail "member $i did not get to step 35"
done
assert_grep "$T_DIR/sched.log" "joins the running elastic job as worker 2" \
	"the joiner's request"
! grep -q "is ready to join" "$T_DIR/sched.log" ||
	fail "the joiner was ready before its --join-after file"
: >"$T_DIR/ready"
for i in 0 1; do
	wait_for_line "$T_DIR/worker$i.log" " 1 workers wait to join" 60 ||
		fail "member $i did not hear that the joiner is ready"
done
: >"$T_DIR/go35"
for i in "${!pids[@]}"; do
	expect_exit "${pids[$i]}" 120 0 "join: node $i"
done
cat "$T_DIR"/worker*.log "$T_DIR/joiner.log" >"$T_DIR/join.all"
assert_grep "$T_DIR/join.all" \
	'membership 1 has 3 workers from step 35 \(1 worker joined\); replay with DTRAIN_ELASTIC_SCHEDULE="step 35: \+1"' \
	"the members took the joiner in at step 35"
assert_grep "$T_DIR/joiner.log" "rank 2 of 3 from step 35" \
	"the joiner took the state committed at step 35"
assert_grep "$T_DIR/join.all" "done with 3 workers at epoch [0-9]+; .*membership 1$" \
	"the job ended with 3 workers"
grep -q "samples: epoch 0:" "$T_DIR/join.all" &&
	! grep "samples: epoch" "$T_DIR/join.all" | grep -vq " 0 more than once" ||
	fail "an epoch's samples were not trained on once"
log "taken in at step 35, between the commits at 30 and 40"

TAG=replay
job_env "$(free_port)" 0 2
export DTRAIN_ELASTIC_SCHEDULE="step 35: +1"
DMLC_ROLE=scheduler start sched.replay
pids=("$SPAWNED")
for i in 0 1 2; do
	DMLC_ROLE=worker start "worker$i.replay"
	pids+=("$SPAWNED")
done
for i in "${!pids[@]}"; do
	expect_exit "${pids[$i]}" 120 0 "replay: node $i"
done
cat "$T_DIR"/worker*.replay.log >"$T_DIR/replay.all"
assert_grep "$T_DIR/replay.all" "rank 2 of 3 from step 35" \
	"the replay's third worker joined at step 35"
cmp -s "$T_DIR/join.bin" "$T_DIR/replay.bin" ||
	fail "the replay ('step 35: +1') is not bit-identical to the run"
log "the replay of 'step 35: +1' is bit-identical"
assert_groups_gone
log "ok"
