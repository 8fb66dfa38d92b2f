#!/bin/bash
# launch_mpi.sh - `dtrain launch --launcher mpi` with OpenMPI's mpirun on
# this machine: one mpirun per role, lines relabelled from mpirun's
# --tag-output to "[worker R] ", failures and signals stop everything,
# ranks included (mpirun puts each rank in a process group of its own).
# Skipped when mpirun is not installed.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
if ! command -v mpirun >/dev/null; then
	echo "skipped: no mpirun"
	exit 0
fi
make_fake_dtrain
OUT=$TMP/out
ERR=$TMP/err

# shellcheck disable=SC2016
timeout $((120 * T_SCALE)) "$DTRAIN" launch --launcher mpi -n 2 -s 1 \
	--env DT_TEST_TAG="$TAG" -- sh -c '
	echo "rank $OMPI_COMM_WORLD_RANK role $DMLC_ROLE id=${DMLC_WORKER_ID-none} nw=$DMLC_NUM_WORKER ns=$DMLC_NUM_SERVER launched=$DTRAIN_LAUNCHED"
	echo "err $OMPI_COMM_WORLD_RANK" >&2' >"$OUT" 2>"$ERR"
rc=$?
check "mpi: launcher exits 0 (got $rc)" test "$rc" = 0
for i in 0 1; do
	check "mpi: [worker $i] line" has "$OUT" \
		"[worker $i] rank $i role worker id=none nw=2 ns=1 launched=1"
	check "mpi: [worker $i] stderr line" has "$ERR" "[worker $i] err $i"
done
check "mpi: [server 0] line" has "$OUT" "[server 0] server  role server"
check "mpi: [scheduler] line" has "$OUT" "[scheduler] scheduler listens on"
check "mpi: no raw mpirun tags" test -z "$(grep -F '<stdout>' "$OUT")"
[ "$FAILED" = 0 ] || { echo "--- stdout"; cat "$OUT"; echo "--- stderr"; cat "$ERR"; }

# Open MPI's per-user session directory ("ompi.HOST.UID" in TMPDIR) is
# created and removed by every mpirun, and two starting together race on
# it. The launcher gives each role's mpirun a directory of its own: with
# that name taken by a file, where a plain mpirun fails, the job runs, and
# the launcher's directory is gone at the end.
POISON=$TMP/tmpdir
mkdir "$POISON"
: >"$POISON/ompi.$(hostname).$(id -u)"
# shellcheck disable=SC2016
env -u OMPI_MCA_orte_tmpdir_base TMPDIR="$POISON" timeout $((120 * T_SCALE)) "$DTRAIN" launch --launcher mpi -n 2 -s 1 \
	--env DT_TEST_TAG="$TAG" -- sh -c 'echo "rank $OMPI_COMM_WORLD_RANK"' \
	>"$OUT" 2>"$ERR"
rc=$?
check "mpi session dirs: launcher exits 0 (got $rc)" test "$rc" = 0
check "mpi session dirs: [worker 1] line" has "$OUT" "[worker 1] rank 1"
check "mpi session dirs: [server 0] line" has "$OUT" "[server 0] server"
check "mpi session dirs: nothing left in TMPDIR" \
	test "$(ls -A "$POISON")" = "ompi.$(hostname).$(id -u)"
[ "$FAILED" = 0 ] || { echo "--- stdout"; cat "$OUT"; echo "--- stderr"; cat "$ERR"; }

# One rank fails: mpirun exits non-zero, the launcher stops the job.
start=$(now_ms)
# shellcheck disable=SC2016
timeout $((120 * T_SCALE)) "$DTRAIN" launch --launcher mpi -n 3 -s 1 \
	--env DT_TEST_TAG="$TAG" -- sh -c '
	sleep 300 & [ "$OMPI_COMM_WORLD_RANK" = 1 ] && { sleep 1; exit 3; }
	sleep 300' >"$OUT" 2>"$ERR"
rc=$?
ms=$(($(now_ms) - start))
check "mpi failure: launcher exits 1 (got $rc)" test "$rc" = 1
# (45 s: the job's other processes would run for 300 s, so the bound still
# tells a stopped job from one that waits for them, with room for a busy
# machine, where starting the job alone has taken 26 s)
check "mpi failure: over within 45 s (${ms} ms)" test "$ms" -lt 45000
check "mpi failure: message names the rank and its status" grep -qE \
	'^dtrain launch: worker 1 exited with status 3 \(workers, pid [0-9]+, exited with status [0-9]+\); stopping the job$' "$ERR"
check "mpi failure: the job's reason names the rank" grep -qx \
	'dtrain launch: job failed: worker 1 exited with status 3' "$ERR"
check "mpi failure: the wrapper's report is not shown" \
	test -z "$(grep -a "$(printf '\036')" "$OUT" "$ERR")"
check "mpi failure: nothing left" wait_gone 5

# SIGTERM to the launcher while the ranks run.
rm -f "$TMP"/up.*
# shellcheck disable=SC2016
timeout $((120 * T_SCALE)) "$DTRAIN" launch --launcher mpi -n 2 -s 1 \
	--env DT_TEST_TAG="$TAG" --env MARK="$TMP/up" -- sh -c '
	sleep 300 & touch "$MARK.$OMPI_COMM_WORLD_RANK"; sleep 300' \
	>"$OUT" 2>"$ERR" &
T=$!
end=$(($(now_ms) + 30000))
while [ "$(ls "$TMP"/up.* 2>/dev/null | wc -l)" != 2 ] &&
	[ "$(now_ms)" -lt "$end" ]; do
	sleep 0.05
done
kill -TERM "$(pgrep -P "$T" | head -1)"
wait "$T"
rc=$?
check "mpi SIGTERM: launcher exits 143 (got $rc)" test "$rc" = 143
check "mpi SIGTERM: nothing left" wait_gone 10

finish
