#!/bin/bash
# launch_blame.sh - the launcher names the first failure, not its echo: a
# worker of a real job (scheduler, a server, two workers) is killed with
# SIGKILL; the scheduler then exits 1 as it loses the worker, often before
# the launcher has looked. Ten times over, the message must name worker 1
# killed by signal 9, never the scheduler (it used to, in 4 runs of 10).
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
IDLE="$DTRAIN_BUILD/tests/progs/idle_worker"

for i in 1 2 3 4 5 6 7 8 9 10; do
	OUT=$TMP/out.$i
	ERR=$TMP/err.$i
	# Worker 1 is killed by a helper once the launcher has printed that
	# it joined; worker 0 stays until the job is stopped.
	# shellcheck disable=SC2016
	timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 2 -s 1 --env DT_TEST_TAG="$TAG" -- sh -c '
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

# Two workers that both exit 1, worker 1 first and worker 0 because of it
# (as when the scheduler aborts the job for worker 1's loss), noticed by
# the launcher in one look (it is stopped meanwhile, as a busy machine
# would delay it): the scheduler's "aborting the job: worker 1 (pid N ..."
# names the cause, not the plan order. The scheduler here is a stand-in
# that says so once worker 1 is gone.
cat >"$TMP/sched" <<'EOF2'
#!/bin/bash
[ "$1" = rank-exec ] && exec "$REAL_DTRAIN" "$@"
gone() { [ ! -e "/proc/$1" ] || grep -q '^State:.*Z' "/proc/$1/status"; }
for _ in $(seq 600); do [ -s "$MARK/w1" ] && break; sleep 0.05; done
w1=$(cat "$MARK/w1")
for _ in $(seq 600); do gone "$w1" && break; sleep 0.05; done
echo "aborting the job: worker 1 (pid $w1 at 127.0.0.1:1) was lost before the job ended (connection closed)" >&2
exit 1
EOF2
chmod +x "$TMP/sched"
rm -rf "$TMP/mark"
mkdir "$TMP/mark"
# shellcheck disable=SC2016
REAL_DTRAIN=$DTRAIN DTRAIN_EXE=$TMP/sched MARK=$TMP/mark timeout $((60 * T_SCALE)) \
	"$DTRAIN" launch -n 2 -s 0 --env DT_TEST_TAG="$TAG" -- sh -c '
	echo $$ >"$MARK/w$DMLC_WORKER_ID.tmp" && mv "$MARK/w$DMLC_WORKER_ID.tmp" "$MARK/w$DMLC_WORKER_ID"
	for _ in $(seq 600); do [ -e "$MARK/go" ] && break; sleep 0.05; done
	if [ "$DMLC_WORKER_ID" = 0 ]; then
		w1=$(cat "$MARK/w1")
		for _ in $(seq 600); do grep -q "^State:.*Z" "/proc/$w1/status" 2>/dev/null && break; sleep 0.05; done
	fi
	exit 1' >"$TMP/out.stopped" 2>"$TMP/err.stopped" &
L=$!
end=$(($(now_ms) + 30000))
until [ -s "$TMP/mark/w0" ] && [ -s "$TMP/mark/w1" ] || [ "$(now_ms)" -ge "$end" ]; do
	sleep 0.05
done
launcher=$(pgrep -P "$L" -x dtrain | head -n 1)
[ -n "$launcher" ] || launcher=$L
kill -STOP "$launcher"
: >"$TMP/mark/go"
# Both workers and the stand-in scheduler end while the launcher is stopped.
end=$(($(now_ms) + 30000))
zombie() { grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
until { zombie "$(cat "$TMP/mark/w0")" && zombie "$(cat "$TMP/mark/w1")" &&
	! pgrep -f "$TMP/sched" | grep -qv "^$$\$"; } || [ "$(now_ms)" -ge "$end" ]; do
	sleep 0.05
done
kill -CONT "$launcher"
wait "$L"
rc=$?
check "workers failing together: launcher exits 1 (got $rc)" test "$rc" = 1
check "workers failing together: the scheduler's lost worker is named" \
	grep -qE '^dtrain launch: job failed: worker 1 exited with status 1' \
	"$TMP/err.stopped"
[ "$FAILED" = 0 ] || cat "$TMP/err.stopped"
check "workers failing together: nothing left" wait_gone 5
finish
