#!/usr/bin/env bash
# replay_idle.sh - a server killed and restarted while one worker makes no
# KVStore call (it waits in a barrier) and the other needs that worker's
# pushes again: the idle worker sends what the new server lacks at once,
# not at its next call (docs/fault-tolerance.md). tests/progs/replay_idle
# holds worker 0 until the new server is in place, then worker 0 pulls the
# table: that pull waits for rounds only worker 1's replay can end, and
# worker 1 stays in its barrier until worker 0 comes. Before the replay
# went from the worker's I/O thread, this deadlocked until DT_WAIT_TIMEOUT
# (an hour). With messages dropped and sent again (PS_DROP_MSG=5), as in
# sparse_recovery.sh's case that found it. Then the same with worker 1
# ending (dt_kv_destroy) instead: a worker under recovery leaves only once
# every worker is done, since its copies go with it.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
set -u
. "$(dirname "$0")/job_lib.bash"
B=${DTRAIN_BUILD:?}
tmp=$(mktemp -d)
trap 'for p in $(ours); do kill -9 "$p"; done 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

TAG="DT_REPLAY_IDLE_TEST=$tmp"
ours() { tagged_pids "$B/" "$TAG"; }
. "$(dirname "$0")/kill_lib.bash"
scale=${DT_TEST_TIME_SCALE:-1}

# case MODE WAITING: kill server 1 once worker 0 holds and worker 1 shows
# WAITING (in a barrier, or leaving: dt_kv_destroy), then let worker 0
# pull the table. The table is split over both servers (a range of rows
# each).
case_of() {
	local mode=$1 waiting=$2 log=$tmp/$1.log job pid rc w
	rm -rf "$tmp/ck" "$tmp/go"
	MXNET_KVSTORE_BIGARRAY_BOUND=64 REPLAY_IDLE_GO=$tmp/go REPLAY_IDLE_MODE=$mode \
		timeout $((250 * T_SCALE)) "$B/dtrain" launch -n 2 -s 2 --restart 1 --checkpoint-dir "$tmp/ck" \
		--checkpoint-every 10 --env "$TAG" --env PS_RESEND_TIMEOUT=20 --env PS_DROP_MSG=5 \
		-- "$B/tests/progs/replay_idle" >"$log" 2>&1 &
	job=$!
	wait_for "$log" "worker 0: holding after" "$(kill_wait)" || { tail "$log"; fail "$mode: worker 0 never held"; }
	wait_for "$log" "worker 1: $waiting" "$(kill_wait)" || { tail "$log"; fail "$mode: no '$waiting' from worker 1"; }
	pid=$(pid_of server 1) || fail "$mode: no server 1"
	kill -9 "$pid"
	wait_for "$log" "\[server 1\] taking server 1's place" "$(kill_wait)" ||
		{ tail "$log"; fail "$mode: no new server 1"; }
	touch "$tmp/go"
	# A bound on a hang, not a claim of speed (a second or two here).
	wait_for "$log" "worker 0: table exact" $((60 * scale)) || {
		grep -v ' stats at ' "$log" | tail -15
		fail "$mode: worker 0's pull never came back: worker 1 ($waiting) did not send its pushes again"
	}
	wait $job
	rc=$?
	[ "$rc" = 0 ] || { tail -20 "$log"; fail "$mode: the job failed ($rc)"; }
	grep -q "restored checkpoint #[1-9][0-9]*.* 1 row tables" "$log" || fail "$mode: the new server restored no table"
	for w in 0 1; do
		grep -q "\[worker $w\] sending [0-9]* requests again to server 1" "$log" ||
			fail "$mode: worker $w sent nothing again"
	done
	grep -q "worker 0: table exact after 25 rounds" "$log" || fail "$mode: worker 0's table not exact"
	[ "$mode" = leave ] || grep -q "worker 1: table exact after 25 rounds" "$log" ||
		fail "$mode: worker 1's table not exact"
	echo "server 1 killed while worker 1 was $waiting: $(grep -o 'restored checkpoint #[0-9]*' "$log"), both workers sent their pushes again, table exact"
}

case_of barrier "in the barrier"
case_of leave "leaving"
[ -n "$(ours)" ] && fail "processes left behind: $(ours)"
echo "ok"
