#!/bin/bash
# launch_blame.sh - the launcher names the first failure, not its echo: a
# worker of a real job (scheduler, a server, two workers) is killed with
# SIGKILL; the scheduler then exits 1 as it loses the worker, often before
# the launcher has looked. Ten times over, the message must name worker 1
# killed by signal 9, never the scheduler (it used to, in 4 runs of 10).
. "$(dirname "$0")/launch_lib.bash"
IDLE="$DTRAIN_BUILD/tests/progs/idle_worker"

for i in 1 2 3 4 5 6 7 8 9 10; do
	OUT=$TMP/out.$i
	ERR=$TMP/err.$i
	# Worker 1 is killed by a helper once the launcher has printed that
	# it joined; worker 0 stays until the job is stopped.
	# shellcheck disable=SC2016
	timeout 60 "$DTRAIN" launch -n 2 -s 1 --env DT_TEST_TAG="$TAG" -- sh -c '
		if [ "$DMLC_WORKER_ID" = 1 ]; then
			( n=0; until grep -q "^\[worker 1\] idle_worker ready" "$1"; do
				sleep 0.02; n=$((n + 1)); [ $n -lt 1500 ] || exit 1; done
			  kill -9 $$ ) &
		fi
		exec "$2" "$3"' sh "$OUT" "$IDLE" "$TMP/never" >"$OUT" 2>"$ERR"
	rc=$?
	check "run $i: launcher exits 1 (got $rc)" test "$rc" = 1
	check "run $i: the job failed because worker 1 was killed" \
		grep -qE '^dtrain launch: job failed: worker 1 killed by signal 9' "$ERR"
	check "run $i: nothing left" wait_gone 5
done
finish
