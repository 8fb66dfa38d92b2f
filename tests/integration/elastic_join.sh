#!/usr/bin/env bash
# elastic_join.sh - a worker started by hand with a running elastic job's
# environment (same scheduler address, secret, DTRAIN_ELASTIC=1) asks to
# join it. The members here never commit (idle workers), so nothing is
# taken in; what is checked is the scheduler's side:
#   - the job has DTRAIN_ELASTIC_MAX workers: refused, with a message
#     naming why on the joiner's side and in the scheduler's log;
#   - below it: admitted with a fresh worker id, waiting for the members'
#     next commit; one killed (SIGKILL) right after it was admitted is
#     forgotten and the job goes on; the next gets the next id (ids are
#     not used twice), and is told when the job ends without taking it in.
# Either way the job it asked to join ends 0 with its two workers.
. "$(dirname "$0")/cluster_lib.bash"
IDLE="$DTRAIN_BUILD/tests/progs/idle_worker"

# start_job MAX: a job of 2 idle workers (DTRAIN_ELASTIC_MAX=MAX); PIDS.
start_job() {
	local max=$1 port i
	port=$(free_port)
	job_env "$port" 0 2
	export DTRAIN_ELASTIC=1 DTRAIN_ELASTIC_MAX=$max
	DONE="$T_DIR/done.$max"
	DMLC_ROLE=scheduler spawn "sched.$max" "$IDLE" "$DONE"
	PIDS=("$SPAWNED")
	for i in 0 1; do
		DMLC_ROLE=worker spawn "worker$i.$max" "$IDLE" "$DONE"
		PIDS+=("$SPAWNED")
	done
	for i in 0 1; do
		wait_for_line "$T_DIR/worker$i.$max.log" "idle_worker ready" 60 ||
			fail "max $max: worker $i did not start"
	done
}

# end_job MAX: the job ends 0, its workers alive until then.
end_job() {
	local max=$1 i
	for i in 1 2; do
		t_alive "${PIDS[$i]}" || fail "max $max: worker $((i - 1)) died"
	done
	: >"$DONE"
	for i in "${!PIDS[@]}"; do
		expect_exit "${PIDS[$i]}" 60 0 "max $max: node $i"
	done
}

# At the maximum: refused.
start_job 2
reason="which has 2 workers: DTRAIN_ELASTIC_MAX=2 is reached"
DMLC_ROLE=worker spawn joiner.2 "$IDLE" "$DONE"
expect_exit "$SPAWNED" 60 nonzero "max 2: the joiner"
assert_grep "$T_DIR/joiner.2.log" \
	"job aborted by the scheduler: a worker at .* asks to join the running elastic job.*$reason" \
	"max 2: the joiner"
assert_grep "$T_DIR/sched.2.log" "refusing a node: a worker at .*$reason" \
	"max 2: the scheduler"
end_job 2
log "max 2: the joiner refused ($reason), the job ended 0"

# Below it: admitted; one dies at once, the next waits to the end.
start_job 4
DMLC_ROLE=worker spawn dier.4 "$IDLE" "$T_DIR/never"
dier=$SPAWNED
wait_for_line "$T_DIR/sched.4.log" \
	"joins the running elastic job as worker 2 \(node id 3\)" 60 ||
	fail "max 4: the first joiner was not admitted"
kill -KILL -- "-$dier"
expect_exit "$dier" 60 137 "max 4: the joiner killed"
wait_for_line "$T_DIR/sched.4.log" \
	"worker 2 \(pid [0-9]+ at .*\) went before the members took it in" 60 ||
	fail "max 4: the scheduler did not forget the killed joiner"
DMLC_ROLE=worker spawn joiner.4 "$IDLE" "$T_DIR/done.joiner"
joiner=$SPAWNED
wait_for_line "$T_DIR/joiner.4.log" "idle_worker ready" 60 ||
	fail "max 4: the second joiner did not start"
assert_grep "$T_DIR/sched.4.log" \
	"joins the running elastic job as worker 3 \(node id 4\)" \
	"max 4: the second joiner has the next id"
end_job 4
: >"$T_DIR/done.joiner"
expect_exit "$joiner" 60 nonzero "max 4: the joiner never taken in"
assert_grep "$T_DIR/joiner.4.log" \
	"the elastic job ended before its members took this worker in" \
	"max 4: the joiner never taken in"
log "max 4: a joiner killed at once was forgotten, the next was told the end"
assert_groups_gone
log "ok"
