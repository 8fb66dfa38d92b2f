#!/usr/bin/env bash
# kv_wait_timeout.sh - no wait without a deadline: a server that stops
# answering (SIGSTOP: its connections stay open, so nothing looks lost)
# ends the worker's KV call with DT_ETIMEDOUT after DT_WAIT_TIMEOUT, with
# a message naming the call, instead of a hang; the launcher then stops
# the job and names the cause: the stopped server, not the worker that
# gave up on it.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
set -u
B=${DTRAIN_BUILD:?}
tmp=$(mktemp -d)
cleanup() {
	[ -n "${spid:-}" ] && kill -CONT "$spid" 2>/dev/null
	[ -n "${lpid:-}" ] && kill -TERM "$lpid" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out" "$tmp/err" 2>/dev/null | tail -30; exit 1; }

timeout $((120 * T_SCALE)) "$B/dtrain" launch -v -n 1 -s 1 --env DT_WAIT_TIMEOUT=2 -- \
	"$B/examples/linreg" --kvstore dist_sync --epochs 100000 >"$tmp/out" 2>"$tmp/err" &
lpid=$!
# The server's pid, once the worker trains.
for _ in $(seq 600); do
	spid=$(sed -n 's/.*started server 0 (pid \([0-9]*\)).*/\1/p' "$tmp/err" | head -1)
	[ -n "$spid" ] && grep -q "Epoch\[0\]" "$tmp/out" && break
	sleep 0.05
done
[ -n "$spid" ] || fail "the job did not start"
t0=$(date +%s%N)
kill -STOP "$spid"
wait "$lpid"
rc=$?
lpid=
ms=$((($(date +%s%N) - t0) / 1000000))
kill -CONT "$spid" 2>/dev/null
[ "$rc" = 1 ] || fail "launcher exited $rc, expected 1"
grep -q "no answer from the servers within DT_WAIT_TIMEOUT=2 s" "$tmp/out" "$tmp/err" ||
	fail "no timeout message"
grep -q "job failed: server 0 frozen" "$tmp/err" ||
	fail "the frozen server was not named as the cause"
[ "$ms" -lt 20000 ] || fail "took $ms ms"
echo "ok: a stopped server ends the worker's call after DT_WAIT_TIMEOUT ($ms ms in all)"
