#!/usr/bin/env bash
# elastic_join.sh - a worker started by hand with a running elastic job's
# environment (same scheduler address, secret, DTRAIN_ELASTIC=1) asks to
# join it. Growing a running job is not done yet, so it is refused with a
# message naming why - DTRAIN_ELASTIC_MAX reached, or not supported yet -
# on its side and in the scheduler's log, and the job it asked to join
# goes on and ends 0 with its two workers.
. "$(dirname "$0")/cluster_lib.bash"
IDLE="$DTRAIN_BUILD/tests/progs/idle_worker"

# job MAX REASON: a job of 2 idle workers (DTRAIN_ELASTIC_MAX=MAX), a third
# started once both are in, whose refusal must match REASON.
job() {
	local max=$1 reason=$2 port done pids=() i
	port=$(free_port)
	job_env "$port" 0 2
	export DTRAIN_ELASTIC=1 DTRAIN_ELASTIC_MAX=$max
	done="$T_DIR/done.$max"
	DMLC_ROLE=scheduler spawn "sched.$max" "$IDLE" "$done"
	pids+=("$SPAWNED")
	for i in 0 1; do
		DMLC_ROLE=worker spawn "worker$i.$max" "$IDLE" "$done"
		pids+=("$SPAWNED")
	done
	for i in 0 1; do
		wait_for_line "$T_DIR/worker$i.$max.log" "idle_worker ready" 60 ||
			fail "max $max: worker $i did not start"
	done
	DMLC_ROLE=worker spawn "joiner.$max" "$IDLE" "$done"
	expect_exit "$SPAWNED" 60 nonzero "max $max: the joiner"
	assert_grep "$T_DIR/joiner.$max.log" \
		"job aborted by the scheduler: a worker at .* asks to join the running elastic job.*$reason" \
		"max $max: the joiner"
	assert_grep "$T_DIR/sched.$max.log" "refusing a node: a worker at .*$reason" \
		"max $max: the scheduler"
	for i in 1 2; do
		t_alive "${pids[$i]}" || fail "max $max: worker $((i - 1)) died"
	done
	: >"$done"
	for i in "${!pids[@]}"; do
		expect_exit "${pids[$i]}" 60 0 "max $max: node $i"
	done
	log "max $max: the joiner refused ($reason), the job ended 0"
}

job 2 "which has 2 workers: DTRAIN_ELASTIC_MAX=2 is reached"
job 4 "\(2 workers, DTRAIN_ELASTIC_MAX=4\): adding workers to a running job is not supported yet"
assert_groups_gone
log "ok"
