#!/bin/bash
# launch_rank_exec.sh - `dtrain rank-exec`, the wrapper of every rank under
# mpirun and srun, on its own: it exits as its command did (status or
# signal) and reports a failure on stderr in one marked line; it passes
# SIGTERM on to the command's whole group; whatever the command leaves in
# its group (a child that ignores SIGHUP, an orphan) is ended when the
# command exits; and when the wrapper itself is killed with SIGKILL, its
# guard kills the command's group.
. "$(dirname "$0")/launch_lib.bash"
MARK=$(printf '\036dtrain-rank-exit ')
# (the tag goes to the wrapper and what it starts, not to this shell)
RX=(env DT_TEST_TAG="$TAG" "$DTRAIN" rank-exec --)

# Success: status 0, no report.
"${RX[@]}" true 2>"$TMP/err"
rc=$?
check "success: exits 0 (got $rc)" test "$rc" = 0
check "success: no report" test ! -s "$TMP/err"

# A failure: the same status, and the report "1 STATUS" (CLD_EXITED).
"${RX[@]}" sh -c 'echo out; exit 7' >"$TMP/out" 2>"$TMP/err"
rc=$?
check "failure: exits 7 (got $rc)" test "$rc" = 7
check "failure: its output passes" has "$TMP/out" "out"
check "failure: the report" test "$(cat "$TMP/err")" = "${MARK}1 7"

# Killed by a signal: the wrapper ends by the same signal, report "2 9".
("${RX[@]}" sh -c 'kill -9 $$' 2>"$TMP/err") 2>/dev/null
rc=$?
check "signal: ends by SIGKILL (got $rc)" test "$rc" = 137
check "signal: the report" test "$(cat "$TMP/err")" = "${MARK}2 9"

# A command that cannot be run: 127, reported.
"${RX[@]}" /nonexistent/cmd 2>"$TMP/err"
rc=$?
check "missing command: exits 127 (got $rc)" test "$rc" = 127
check "missing command: named" has "$TMP/err" "cannot run '/nonexistent/cmd'"

# Usage.
"$DTRAIN" rank-exec 2>"$TMP/err"
rc=$?
check "no command: exits 2 (got $rc)" test "$rc" = 2

# SIGTERM reaches the command's group; a child that ignores SIGHUP and
# outlives the command is ended with it.
# shellcheck disable=SC2016
"${RX[@]}" bash -c 'trap "" HUP; sleep 300 & echo $! >"$0/child"; sleep 300' "$TMP" 2>"$TMP/err" &
W=$!
wait_file() { local end=$(($(now_ms) + 10000)); until [ -s "$1" ]; do [ "$(now_ms)" -lt "$end" ] || return 1; sleep 0.02; done; }
check "term: the command started" wait_file "$TMP/child"
start=$(now_ms)
kill -TERM "$W"
wait "$W"
rc=$?
check "term: ends by SIGTERM (got $rc)" test "$rc" = 143
check "term: the report" test "$(cat "$TMP/err")" = "${MARK}2 15"
check "term: nothing left" wait_gone 3
echo "term: all gone in $(($(now_ms) - start)) ms"

# The command exits, leaving an orphan in its group: ended too.
# shellcheck disable=SC2016
"${RX[@]}" bash -c '(trap "" TERM HUP; exec sleep 300) & exit 0'
rc=$?
check "leftover: exits 0 (got $rc)" test "$rc" = 0
check "leftover: the orphan is gone" wait_gone 5

# The wrapper killed with SIGKILL: its guard kills the command's group.
rm -f "$TMP/child"
# shellcheck disable=SC2016
"${RX[@]}" bash -c 'sleep 300 & echo $! >"$0/child"; sleep 300' "$TMP" &
W=$!
check "kill -9: the command started" wait_file "$TMP/child"
start=$(now_ms)
kill -KILL "$W"
wait "$W" 2>/dev/null
check "kill -9: the command and its child are gone" wait_gone 3
echo "kill -9: all gone in $(($(now_ms) - start)) ms"

finish
