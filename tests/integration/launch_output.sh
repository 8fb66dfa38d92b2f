#!/bin/bash
# launch_output.sh - output lines are prefixed with role and rank, stdout
# and stderr stay apart, nothing is lost (volume, long lines, a last line
# without newline, output of a failing worker), and every process gets the
# DMLC_* variables, --env and the launcher's environment.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
make_fake_dtrain
OUT=$TMP/out
ERR=$TMP/err

# Prefixes and separation.
# shellcheck disable=SC2016
timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 3 -s 2 --env DT_TEST_TAG="$TAG" -- sh -c '
	echo "hello from $DMLC_WORKER_ID"
	echo "oops $DMLC_WORKER_ID" >&2
	printf "no newline %s" "$DMLC_WORKER_ID"' >"$OUT" 2>"$ERR"
rc=$?
check "prefixes: launcher exits 0 (got $rc)" test "$rc" = 0
for i in 0 1 2; do
	check "stdout: [worker $i] hello from $i" has "$OUT" "[worker $i] hello from $i"
	check "stderr: [worker $i] oops $i" has "$ERR" "[worker $i] oops $i"
	check "partial last line: [worker $i] no newline $i" \
		has "$OUT" "[worker $i] no newline $i"
done
check "stdout holds no stderr line" hasnt "$OUT" "oops"
check "stderr holds no stdout line" hasnt "$ERR" "hello from"
check "every stdout line is prefixed" \
	test -z "$(grep -vE '^\[(worker [0-2]|server [01]|scheduler)\] ' "$OUT")"
check "[scheduler] prefix" has "$OUT" "[scheduler] scheduler listens on 127.0.0.1:"
check "[server 0] prefix" has "$OUT" "[server 0] server 0 role server"
check "[server 1] prefix" has "$OUT" "[server 1] server 1 role server"

# Volume: 20000 lines per worker on stdout and stderr, all there and in
# order; a 100000-byte line is split, not lost.
# shellcheck disable=SC2016
timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 2 -s 0 --env DT_TEST_TAG="$TAG" -- sh -c '
	seq 1 20000 | sed "s/^/line /"
	seq 1 20000 | sed "s/^/eline /" >&2
	head -c 100000 /dev/zero | tr "\0" x; echo' >"$OUT" 2>"$ERR"
rc=$?
check "volume: launcher exits 0 (got $rc)" test "$rc" = 0
seq 1 20000 | sed "s/^/line /" >"$TMP/want"
seq 1 20000 | sed "s/^/eline /" >"$TMP/ewant"
for i in 0 1; do
	grep -F "[worker $i] line " "$OUT" | sed "s/^\[worker $i\] //" >"$TMP/got"
	check "volume: worker $i stdout complete and in order" \
		cmp -s "$TMP/got" "$TMP/want"
	grep -F "[worker $i] eline " "$ERR" | sed "s/^\[worker $i\] //" >"$TMP/got"
	check "volume: worker $i stderr complete and in order" \
		cmp -s "$TMP/got" "$TMP/ewant"
	xs=$(grep -F "[worker $i] xxx" "$OUT" | sed "s/^\[worker $i\] //" |
		tr -d '\n' | wc -c)
	check "long line: worker $i has all 100000 bytes ($xs)" test "$xs" = 100000
done

# The output of a failing worker, up to its last byte, is not lost.
# shellcheck disable=SC2016
timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 2 -s 0 --env DT_TEST_TAG="$TAG" -- sh -c '
	if [ "$DMLC_WORKER_ID" = 1 ]; then
		seq 1 5000; printf "last words"; exit 3
	fi
	sleep 300' >"$OUT" 2>"$ERR"
rc=$?
check "failing worker: launcher exits 1 (got $rc)" test "$rc" = 1
check "failing worker: all its lines" \
	test "$(grep -c '^\[worker 1\] [0-9]*$' "$OUT")" = 5000
check "failing worker: its last partial line" \
	has "$OUT" "[worker 1] last words"
check "failing worker: nothing left" wait_gone 5

# Variables: DMLC_*, --env (with quotes and spaces), --env NAME from the
# launcher's environment, and the launcher's own environment.
export PARENT_VAR="from the parent"
export FORWARD_ME=forwarded
export DMLC_WORKER_ID=99 DT_LISTEN_FD=77 # the launcher must not pass these on
MSG="it's a \"test\" with \$dollar and spaces"
# shellcheck disable=SC2016
timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 3 -s 2 --env DT_TEST_TAG="$TAG" \
	--env "MSG=$MSG" --env FORWARD_ME --env EMPTY= -- sh -c '
	s=0; for f in /proc/$$/fd/*; do
		case $(readlink "$f") in socket:*) s=$((s + 1)) ;; esac
	done
	echo "role=$DMLC_ROLE id=$DMLC_WORKER_ID sid=${DMLC_SERVER_ID:-unset} uri=$DMLC_PS_ROOT_URI port=$DMLC_PS_ROOT_PORT ns=$DMLC_NUM_SERVER nw=$DMLC_NUM_WORKER launched=$DTRAIN_LAUNCHED fd=${DT_LISTEN_FD:-unset} sockets=$s"
	echo "msg=$MSG"
	echo "parent=$PARENT_VAR forward=$FORWARD_ME empty=[${EMPTY-unset}]"' \
	>"$OUT" 2>"$ERR"
rc=$?
unset DMLC_WORKER_ID DT_LISTEN_FD
check "env: launcher exits 0 (got $rc)" test "$rc" = 0
port=$(sed -n 's/^\[scheduler\] scheduler listens on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$OUT")
check "env: scheduler got its port ($port)" test -n "$port"
check "env: scheduler holds only the listening socket" \
	grep -qE '^\[scheduler\] scheduler listens on .* sockets 1$' "$OUT"
for i in 0 1 2; do
	check "env: worker $i variables" has "$OUT" \
		"[worker $i] role=worker id=$i sid=unset uri=127.0.0.1 port=$port ns=2 nw=3 launched=1 fd=unset sockets=0"
	check "env: worker $i --env with quotes" has "$OUT" "[worker $i] msg=$MSG"
	check "env: worker $i parent env, --env NAME, empty value" has "$OUT" \
		"[worker $i] parent=from the parent forward=forwarded empty=[]"
done
for i in 0 1; do
	check "env: server $i variables, no socket" has "$OUT" \
		"[server $i] server $i role server listen_fd=unset sockets 0"
done

finish
