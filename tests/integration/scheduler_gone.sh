#!/usr/bin/env bash
# scheduler_gone.sh - a node whose scheduler has gone ends at once, also
# where it would dial a lost connection again (PS_RESEND, DTRAIN_RECOVER;
# docs/fault-tolerance.md): the scheduler listens as long as it lives, so
# a refused dial means its end. A linreg job started by hand (scheduler,
# server, 2 workers) with DT_RECONNECT_TIMEOUT and PS_HEARTBEAT_TIMEOUT at
# 150 s; the scheduler gets SIGTERM (then, in the second job, SIGKILL):
# every other node must exit non-zero within 20 s (times the build's
# DT_TEST_TIME_SCALE, so at most 60 s: still far below the timeouts, which
# would end them anyway), naming the scheduler, and nothing may be left
# running. It takes about 0.2 s (one dial) on an idle machine, and up to
# 11.5 s was seen at a load average of 15.
. "$(dirname "$0")/cluster_lib.bash"

LIMIT_MS=$((20000 * DT_TEST_TIME_SCALE))
LIN=("$DTRAIN_BUILD/examples/linreg" --kvstore dist_sync --epochs 100000)
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# gone_case NAME SIGNAL VAR=VALUE
gone_case() {
	local name=$1 sig=$2 mode=$3 sched p t0 ms pids=()
	port=$(free_port)
	job_env "$port" 1 2
	export DT_RECONNECT_TIMEOUT=150 PS_HEARTBEAT_TIMEOUT=150 "$mode"
	DMLC_ROLE=scheduler spawn "$name.sched" "${LIN[@]}"
	sched=$SPAWNED
	DMLC_ROLE=server spawn "$name.server" "${LIN[@]}"
	pids+=("$SPAWNED")
	for w in 0 1; do
		DMLC_ROLE=worker DMLC_WORKER_ID=$w spawn "$name.worker$w" "${LIN[@]}"
		pids+=("$SPAWNED")
	done
	wait_for_line "$T_DIR/$name.worker0.log" "Epoch\[1\]" 60 ||
		fail "$name: the job did not start training"
	t0=$(now_ms)
	kill "-$sig" "$(child_of "$sched")"
	for p in "${pids[@]}"; do
		expect_exit "$p" 120 nonzero "$name: pid $p"
	done
	ms=$(($(now_ms) - t0))
	[ "$ms" -le "$LIMIT_MS" ] ||
		fail "$name: the nodes ran on $ms ms after the scheduler's SIG$sig (limit $LIMIT_MS)"
	for f in server worker0 worker1; do
		assert_grep "$T_DIR/$name.$f.log" "lost the connection to the scheduler .*the scheduler has gone" "$name: $f"
	done
	unset "${mode%%=*}"
	assert_groups_gone
	log "$name: every node ended $ms ms after the scheduler's SIG$sig"
}

gone_case resend_term TERM PS_RESEND=1
gone_case recover_kill KILL DTRAIN_RECOVER=1
