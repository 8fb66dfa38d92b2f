#!/bin/bash
# elastic_ps_join.sh - a worker joins an elastic job with parameter servers
# (docs/elastic.md, "With parameter servers"): examples/elastic --kvstore
# dist_sync, a scheduler, 2 servers and 3 workers (DMLC_NUM_WORKER=3,
# DTRAIN_ELASTIC_MAX=4) started by hand with a fourth worker, which joins
# the running job:
#   - by the schedule "step 40: +1", twice: both runs end 0 with 4
#     workers, every sample once per epoch, the same weights bit for bit;
#   - without a schedule: the fourth worker is started once the job runs
#     (the members hold before step 20 until it is ready), the members
#     take it in at a commit after step 0, and the run logs its replay,
#     which ends bit-identical.
. "$(dirname "$0")/cluster_lib.bash"
EX=$DTRAIN_BUILD/examples/elastic
ARGS=(--samples 2048 --steps 200 --commit-every 10 --count-samples
	--kvstore dist_sync)
ROLES=(scheduler server server worker worker worker worker)

# run NAME [late]: the job's 7 processes, logs in
# $T_DIR/NAME.<i>.<role>.log, weights in $T_DIR/NAME.bin; every process
# must end 0. late: the last worker is started once the job runs, and the
# members hold before step 20 until the scheduler says it is ready.
# DTRAIN_ELASTIC_SCHEDULE passes through from the caller's environment.
run() {
	local name=$1 late=${2:-} i
	local sched_log=$T_DIR/$name.0.scheduler.log hold=()
	job_env "$(free_port)" 2 3
	[ -n "$late" ] && hold=(--hold-at 20 --hold-file "$T_DIR/$name.go")
	local pids=()
	for i in "${!ROLES[@]}"; do
		if [ -n "$late" ] && [ "$i" = $((${#ROLES[@]} - 1)) ]; then
			wait_for_line "$sched_log" "all [0-9]+ nodes are ready" 60 ||
				fail "$name: the job did not start"
		fi
		PS_VERBOSE=$([ "$i" = 0 ] && echo 1 || echo 0) \
			DMLC_ROLE=${ROLES[$i]} DTRAIN_ELASTIC=1 DTRAIN_ELASTIC_MIN=2 \
			DTRAIN_ELASTIC_MAX=4 spawn "$name.$i.${ROLES[$i]}" \
			"$EX" "${ARGS[@]}" --save "$T_DIR/$name.bin" "${hold[@]}"
		pids+=("$SPAWNED")
	done
	if [ -n "$late" ]; then
		wait_for_line "$sched_log" "is ready to join" 60 ||
			fail "$name: the late worker did not get ready"
		: >"$T_DIR/$name.go"
	fi
	for i in "${!pids[@]}"; do
		expect_exit "${pids[$i]}" 120 0 "$name: ${ROLES[$i]} #$i"
	done
	cat "$T_DIR/$name".*.worker.log >"$T_DIR/$name.workers"
	assert_grep "$T_DIR/$name.workers" \
		"done with 4 workers at epoch [0-9]+; .*membership 1$" "$name"
	! grep "samples: epoch" "$T_DIR/$name.workers" |
		grep -vq " 0 more than once" ||
		fail "$name: a sample was trained on twice in an epoch"
	grep -q "samples: epoch 0:" "$T_DIR/$name.workers" ||
		fail "$name: no epoch was checked"
}

DTRAIN_ELASTIC_SCHEDULE="step 40: +1" run sched
assert_grep "$T_DIR/sched.workers" \
	"membership 1 has 4 workers from step 40 \(1 worker joined\)" "sched"
DTRAIN_ELASTIC_SCHEDULE="step 40: +1" run sched2
cmp "$T_DIR/sched.bin" "$T_DIR/sched2.bin" ||
	fail "two runs of one join schedule differ"
log "a scheduled join at step 40, twice: bit-identical"

run free late
sched=$(grep -ho 'DTRAIN_ELASTIC_SCHEDULE="[^"]*"' "$T_DIR/free.workers" |
	tail -n 1 | sed 's/^DTRAIN_ELASTIC_SCHEDULE="//; s/"$//')
grep -Eq '^step [1-9][0-9]*: \+1$' <<<"$sched" ||
	fail "free: the logged replay is '$sched'"
DTRAIN_ELASTIC_SCHEDULE=$sched run replay
cmp "$T_DIR/free.bin" "$T_DIR/replay.bin" ||
	fail "the replay ('$sched') differs from the run it replays"
log "a join when ready ('$sched') and its replay: bit-identical"
assert_groups_gone
log "ok"
