#!/bin/bash
# launch_cluster.sh - `dtrain launch` with the real scheduler and servers
# (`dtrain scheduler`, `dtrain server`) and examples/hello_cluster as the
# workers: the job forms (the scheduler uses the socket the launcher made),
# ends with status 0, and leaves nothing. Skipped if the example is not
# built.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
EX=$DTRAIN_BUILD/examples/hello_cluster
if [ ! -x "$EX" ]; then
	echo "skipped: $EX not built"
	exit 0
fi
OUT=$TMP/out
ERR=$TMP/err

# run_cluster NAME W S [LAUNCHER]
run_cluster() {
	local name=$1 w=$2 s=$3 launcher=${4:-local} rc
	timeout $((120 * T_SCALE)) "$DTRAIN" launch --launcher "$launcher" -n "$w" -s "$s" \
		--timeout 100 --env DT_TEST_TAG="$TAG" -- "$EX" >"$OUT" 2>"$ERR"
	rc=$?
	check "$name: launcher exits 0 (got $rc)" test "$rc" = 0
	for ((i = 0; i < w; i++)); do
		check "$name: worker $i reports with its prefix" \
			grep -q "^\[worker $i\] " "$OUT"
	done
	check "$name: nothing left" wait_gone 5
	if [ "$rc" != 0 ]; then
		sed 's/^/    /' "$OUT" "$ERR" >&2
	fi
}

run_cluster "2 workers, 2 servers" 2 2
run_cluster "3 workers, 1 server" 3 1
run_cluster "2 workers, no server" 2 0
if command -v mpirun >/dev/null; then
	run_cluster "mpi: 2 workers, 1 server" 2 1 mpi
fi

# A worker that never joins: the scheduler waits, the worker's failure
# stops the job, and the real scheduler and servers go with it.
start=$(now_ms)
timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 2 -s 1 --env DT_TEST_TAG="$TAG" -- \
	sh -c '[ "$DMLC_WORKER_ID" = 1 ] && exit 7; exec "$0"' "$EX" \
	>"$OUT" 2>"$ERR"
rc=$?
ms=$(($(now_ms) - start))
check "failing worker: launcher exits 1 (got $rc)" test "$rc" = 1
# (45 s: the job's other processes would run for 300 s, so the bound still
# tells a stopped job from one that waits for them, with room for a busy
# machine, where starting the job alone has taken 26 s)
check "failing worker: over within 45 s (${ms} ms)" test "$ms" -lt 45000
check "failing worker: named" grep -qE \
	'^dtrain launch: worker 1 \(pid [0-9]+\) exited with status 7; stopping the job$' "$ERR"
check "failing worker: nothing left" wait_gone 5

finish
