#!/usr/bin/env bash
# elastic_join_step.sh - a worker that asks to join while it still loads
# its data is taken in at the step it is ready, between the members'
# commits (docs/elastic.md, "Growing"), without servers and with 2 servers
# in dist_sync:
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
	spawn "$name" "$EX" "${ARGS[@]}" "${KV[@]}" --save "$T_DIR/$TAG.bin" "$@"
}

# servers NAME: the job's servers, if any (their pids into pids).
servers() {
	local i
	for ((i = 0; i < DMLC_NUM_SERVER; i++)); do
		DMLC_ROLE=server start "$1.server$i"
		pids+=("$SPAWNED")
	done
}

# scenario MODE SERVERS [KVSTORE-ARGS...]: the run and its replay.
scenario() {
	local mode=$1 ns=$2 i
	KV=("${@:3}")
	TAG=$mode
	job_env "$(free_port)" "$ns" 2
	export DTRAIN_ELASTIC=1 DTRAIN_ELASTIC_MAX=3
	unset DTRAIN_ELASTIC_SCHEDULE
	local HOLD=(--hold-at 30 --hold-file "$T_DIR/$mode.go30"
		--hold-at 35 --hold-file "$T_DIR/$mode.go35")
	PS_VERBOSE=1 DMLC_ROLE=scheduler start "$mode.sched" "${HOLD[@]}"
	pids=("$SPAWNED")
	servers "$mode"
	for i in 0 1; do
		PS_VERBOSE=1 DMLC_ROLE=worker start "$mode.worker$i" "${HOLD[@]}"
		pids+=("$SPAWNED")
	done
	wait_for_line "$T_DIR/$mode.sched.log" "all [0-9]+ nodes are ready" 60 ||
		fail "$mode: the job of 2 workers did not start"
	DMLC_ROLE=worker start "$mode.joiner" "${HOLD[@]}" \
		--join-after "$T_DIR/$mode.ready"
	pids+=("$SPAWNED")
	# Both members know that it asked (and is not ready) before their
	# commit at 30; both hold before step 35 before it is ready.
	for i in 0 1; do
		wait_for_line "$T_DIR/$mode.worker$i.log" \
			"0 workers wait to join \(1 asked\)" 60 ||
			fail "$mode: member $i did not hear that a worker asked to join"
	done
	: >"$T_DIR/$mode.go30"
	for i in 0 1; do
		wait_for_line "$T_DIR/$mode.worker$i.log" "holding before step 35" 60 ||
			fail "$mode: member $i did not get to step 35"
	done
	assert_grep "$T_DIR/$mode.sched.log" \
		"joins the running elastic job as worker 2" "$mode: the request"
	! grep -q "is ready to join" "$T_DIR/$mode.sched.log" ||
		fail "$mode: the joiner was ready before its --join-after file"
	: >"$T_DIR/$mode.ready"
	for i in 0 1; do
		wait_for_line "$T_DIR/$mode.worker$i.log" " 1 workers wait to join" 60 ||
			fail "$mode: member $i did not hear that the joiner is ready"
	done
	: >"$T_DIR/$mode.go35"
	for i in "${!pids[@]}"; do
		expect_exit "${pids[$i]}" 120 0 "$mode: node $i"
	done
	cat "$T_DIR/$mode".worker*.log "$T_DIR/$mode.joiner.log" >"$T_DIR/$mode.all"
	assert_grep "$T_DIR/$mode.all" \
		'membership 1 has 3 workers from step 35 \(1 worker joined\); replay with DTRAIN_ELASTIC_SCHEDULE="step 35: \+1"' \
		"$mode: the members took the joiner in at step 35"
	assert_grep "$T_DIR/$mode.joiner.log" "rank 2 of 3 from step 35" \
		"$mode: the joiner took the state committed at step 35"
	assert_grep "$T_DIR/$mode.all" \
		"done with 3 workers at epoch [0-9]+; .*membership 1$" \
		"$mode: the job ended with 3 workers"
	grep -q "samples: epoch 0:" "$T_DIR/$mode.all" &&
		! grep "samples: epoch" "$T_DIR/$mode.all" |
		grep -vq " 0 more than once" ||
		fail "$mode: an epoch's samples were not trained on once"
	log "$mode: taken in at step 35, between the commits at 30 and 40"

	TAG=$mode.replay
	job_env "$(free_port)" "$ns" 2
	export DTRAIN_ELASTIC_SCHEDULE="step 35: +1"
	DMLC_ROLE=scheduler start "$mode.replay.sched"
	pids=("$SPAWNED")
	servers "$mode.replay"
	for i in 0 1 2; do
		DMLC_ROLE=worker start "$mode.replay.worker$i"
		pids+=("$SPAWNED")
	done
	for i in "${!pids[@]}"; do
		expect_exit "${pids[$i]}" 120 0 "$mode replay: node $i"
	done
	cat "$T_DIR/$mode".replay.worker*.log >"$T_DIR/$mode.replay.all"
	assert_grep "$T_DIR/$mode.replay.all" "rank 2 of 3 from step 35" \
		"$mode: the replay's third worker joined at step 35"
	cmp -s "$T_DIR/$mode.bin" "$T_DIR/$mode.replay.bin" ||
		fail "$mode: the replay ('step 35: +1') is not bit-identical"
	log "$mode: the replay of 'step 35: +1' is bit-identical"
	unset DTRAIN_ELASTIC_SCHEDULE
}

scenario coll 0
scenario ps 2 --kvstore dist_sync
assert_groups_gone
log "ok"
