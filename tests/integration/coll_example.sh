#!/bin/bash
# coll_example.sh - examples/allreduce.c, Horovod's hello world, run the
# ways docs/collectives.md gives: one process, `dtrain launch -s 0` with 2
# and 4 ranks, and (when OpenMPI is installed) plain mpirun with
# DTRAIN_COLL_ROOT and the secret passed by name. Every rank must print
# its "correct" line and the job exit 0.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/coll_lib.bash"
EX=$BUILD/examples/allreduce

out=$TMP/one
timeout $((60 * T_SCALE)) "$EX" --count 1000 >"$out" 2>&1
rc=$?
check "one process: exits 0 (got $rc)" test "$rc" = 0
check "one process: correct" grep -q "rank 0 of 1: .* correct" "$out"

for n in 2 4; do
	out=$TMP/launch$n
	timeout $((120 * T_SCALE)) "$DTRAIN" launch -n $n -s 0 --env DT_TEST_TAG="$TAG" -- \
		"$EX" --count 300007 >"$out" 2>&1
	rc=$?
	check "dtrain launch -n $n -s 0: exits 0 (got $rc)" test "$rc" = 0
	check "dtrain launch -n $n: every rank correct" \
		test "$(grep -c "of $n: allreduce, broadcast and average of 300007 floats correct" "$out")" = $n
done

# A rank that cannot reach rank 0's rendezvous names the variable that
# set it (it used to blame DMLC_PS_ROOT_URI/PORT, which nobody set).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
out=$TMP/unreachable
DT_CONNECT_TIMEOUT=1 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 \
	DTRAIN_COLL_ROOT=127.0.0.1:$port timeout $((60 * T_SCALE)) "$EX" --count 10 >"$out" 2>&1
rc=$?
check "unreachable DTRAIN_COLL_ROOT: fails (got $rc)" test "$rc" = 1
check "unreachable DTRAIN_COLL_ROOT: named in the error" \
	grep -q "rank 0's rendezvous at 127.0.0.1:$port unreachable .*(DTRAIN_COLL_ROOT=127.0.0.1:$port; raise DT_CONNECT_TIMEOUT" "$out"
check "unreachable DTRAIN_COLL_ROOT: DMLC_PS_ROOT_* not blamed" \
	test -z "$(grep DMLC_PS_ROOT "$out")"

if command -v mpirun >/dev/null; then
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	out=$TMP/mpirun
	DT_TEST_TAG=$TAG DTRAIN_COLL_ROOT=127.0.0.1:$port timeout $((120 * T_SCALE)) \
		mpirun --allow-run-as-root --oversubscribe -np 2 \
		-x DT_TEST_TAG -x DTRAIN_COLL_ROOT -x DTRAIN_SECRET "$EX" --count 1000 >"$out" 2>&1
	rc=$?
	check "plain mpirun -np 2: exits 0 (got $rc)" test "$rc" = 0
	check "plain mpirun: every rank correct" \
		test "$(grep -c "of 2: allreduce, broadcast and average of 1000 floats correct" "$out")" = 2
else
	echo "skipped the mpirun recipe: no mpirun"
fi
finish
