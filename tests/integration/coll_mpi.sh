#!/bin/bash
# coll_mpi.sh - the collectives under OpenMPI: a job started with
# `dtrain launch --launcher mpi` (workers through mpirun, DMLC_* passed
# with -x), and one started by plain mpirun, where rank 0 runs the
# scheduler in a thread and the ranks meet at DTRAIN_COLL_ROOT, which wins
# over the rendezvous file (coll_rdv_mpirun.sh runs mpirun without it).
# Skipped when mpirun is not installed.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/coll_lib.bash"
if ! command -v mpirun >/dev/null; then
	echo "skipped: no mpirun"
	exit 0
fi

out=$TMP/launch_mpi
timeout $((280 * T_SCALE)) "$DTRAIN" launch -n 3 -s 0 --launcher mpi \
	--env DT_TEST_TAG="$TAG" -- "$CHECK" --quick >"$out" 2>&1
rc=$?
check "--launcher mpi, 3 ranks: launcher exits 0 (got $rc)" test "$rc" = 0
check "--launcher mpi: every rank reports 0 failed" \
	every_rank 3 "$out" "checks, 0 failed"
check "--launcher mpi: no FAIL line" test -z "$(grep -F FAIL "$out")"
grep -F FAIL "$out" | head -5

# Plain mpirun: the rendezvous port is picked free by the kernel first.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)))
out=$TMP/mpirun
DT_TEST_TAG=$TAG DTRAIN_COLL_ROOT=127.0.0.1:$port timeout $((280 * T_SCALE)) \
	mpirun --allow-run-as-root --oversubscribe -np 2 \
	-x DT_TEST_TAG -x DTRAIN_COLL_ROOT -x DTRAIN_SECRET "$CHECK" --quick >"$out" 2>&1
rc=$?
check "plain mpirun, 2 ranks, DTRAIN_COLL_ROOT: exits 0 (got $rc)" \
	test "$rc" = 0
for r in 0 1; do
	check "plain mpirun: rank $r reports 0 failed" \
		grep -qF "coll_check rank $r of 2: " "$out"
done
check "plain mpirun: no FAIL line" test -z "$(grep -F FAIL "$out")"

finish
