#!/usr/bin/env bash
# kv_stall.sh - the KVStore's stall report: in a dist_sync job of 2 workers
# and 1 server, worker 1 is stopped (SIGSTOP) while training; with
# DT_KV_STALL=2 worker 0's waiting call logs what it waits for (the call,
# its key, the server and the request) and the server's answer names the
# round and the missing worker 1; the server logs the open round too.
# Then worker 1 goes on (SIGCONT) and the job ends as a run without the
# stop does, bit for bit: the report changed nothing.
set -u
B=${DTRAIN_BUILD:?}
tmp=$(mktemp -d)
scale=${DT_TEST_TIME_SCALE:-1}
cleanup() {
	[ -n "${wpid:-}" ] && kill -CONT "$wpid" 2>/dev/null
	[ -n "${lpid:-}" ] && kill -TERM "$lpid" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -40 "$tmp/err" "$tmp/out" 2>/dev/null; exit 1; }
last() { grep -o 'w=[^ ]* b=[^ ]*' "$1" | tail -1; }
# (heartbeats may go unanswered while worker 1 is stopped)
ENV=(--env PS_HEARTBEAT_TIMEOUT=600)
ARGS=(--kvstore dist_sync --batch-size 50 --epochs 40)

# The run without a stop (and without reports: DT_KV_STALL=0).
timeout $((180 * scale)) "$B/dtrain" launch -n 2 -s 1 "${ENV[@]}" \
	--env DT_KV_STALL=0 -- "$B/examples/linreg" "${ARGS[@]}" \
	>"$tmp/ref" 2>&1 || { cat "$tmp/ref"; fail "the run without a stop"; }
grep -q "stall:" "$tmp/ref" && fail "a report with DT_KV_STALL=0"
ref=$(last "$tmp/ref")
[ -n "$ref" ] || fail "no result in the run without a stop"

timeout $((180 * scale)) "$B/dtrain" launch -v -n 2 -s 1 "${ENV[@]}" \
	--env DT_KV_STALL=2 -- "$B/examples/linreg" "${ARGS[@]}" \
	>"$tmp/out" 2>"$tmp/err" &
lpid=$!
# Worker 1's pid, once the job trains.
for _ in $(seq $((1200 * scale))); do
	wpid=$(sed -n 's/.*started worker 1 (pid \([0-9]*\)).*/\1/p' "$tmp/err" | head -1)
	[ -n "$wpid" ] && grep -q "Epoch\[0\]" "$tmp/out" "$tmp/err" && break
	kill -0 "$lpid" 2>/dev/null || fail "the job ended before it could be stopped"
	sleep 0.05
done
[ -n "$wpid" ] || fail "the job did not start"
grep -q "Epoch\[39\]" "$tmp/out" "$tmp/err" && fail "the job ended before the stop"
kill -STOP "$wpid"
t0=$(date +%s%N)
# Worker 0's report and the server's answer, within 20 s (times the scale).
found=
for _ in $(seq $((400 * scale))); do
	if grep -q "stall: .* of key [0-9]* waits for server 0 ([^)]*:[0-9]*): request [0-9]" "$tmp/err" &&
		grep -q "stall: server 0 says: request [0-9]* (.* of key [0-9]*): .*it waits for worker 1" "$tmp/err"; then
		found=1
		break
	fi
	kill -0 "$lpid" 2>/dev/null || fail "the job ended while worker 1 was stopped"
	sleep 0.05
done
ms=$((($(date +%s%N) - t0) / 1000000))
[ -n "$found" ] || fail "no stall report naming the call, key, server and worker 1 after $ms ms"
grep -q "stall: .* #[0-9]* of key [0-9]* has had no answer for [0-9]* s; it waits for 1 server" "$tmp/err" ||
	fail "the report does not name the call"
# The server's own line: the open round lacks worker 1.
for _ in $(seq $((200 * scale))); do
	grep -q "stall: round [0-9]* of key [0-9]* has the pushes of worker 0; it waits for worker 1, open for" "$tmp/err" && break
	sleep 0.05
done
grep -q "stall: round [0-9]* of key [0-9]* has the pushes of worker 0; it waits for worker 1, open for" "$tmp/err" ||
	fail "the server did not log its open round"
grep "stall:" "$tmp/err" | head -8
kill -CONT "$wpid"
wait "$lpid"
rc=$?
lpid=
[ "$rc" = 0 ] || fail "the job exited $rc after worker 1 went on"
got=$(last "$tmp/out")
[ -n "$got" ] || got=$(last "$tmp/err")
[ "$got" = "$ref" ] || fail "the result changed: '$got', without the stop '$ref'"
echo "ok: report after $ms ms; the job ended as without the stop ($got)"
