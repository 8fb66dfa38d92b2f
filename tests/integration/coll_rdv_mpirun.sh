#!/bin/bash
# coll_rdv_mpirun.sh - plain `mpirun -np 2 examples/allreduce` with no
# dtrain variable set: the ranks find each other (rank 0 publishes the
# scheduler's address and a fresh secret in a private rendezvous file in
# the job's directory), the results are right, and the file is gone at
# the end. A secret the user sets still wins over the file's: two ranks
# given different secrets are refused. Skipped when mpirun is not
# installed.
. "$(dirname "$0")/coll_lib.bash"
if ! command -v mpirun >/dev/null; then
	echo "skipped: no mpirun"
	exit 0
fi
EX=$BUILD/examples/allreduce
JOB=$TMP/job
mkdir -p "$JOB"

# bare CMD...: CMD without any dtrain variable (DT_TEST_TAG, which only
# the tests' cleanup reads, aside).
bare() {
	local unset=() v
	for v in $(compgen -e | grep -E '^(DTRAIN|DMLC|PS|DT)_'); do
		[ "$v" = DT_TEST_TAG ] || unset+=(-u "$v")
	done
	env "${unset[@]}" DT_TEST_TAG="$TAG" "$@"
}

# As root mpirun wants --allow-run-as-root, and on a small machine
# --oversubscribe; neither says anything to dtrain.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)

out=$TMP/plain
(cd "$JOB" && bare timeout 120 "${MPIRUN[@]}" -np 2 "$EX" >"$out" 2>&1)
rc=$?
check "mpirun -np 2 allreduce, no dtrain variable: exits 0 (got $rc)" \
	test "$rc" = 0
for r in 0 1; do
	check "mpirun: rank $r of 2 correct" \
		grep -qE "^rank $r of 2: .* correct" "$out"
done
check "mpirun: the rendezvous file is gone" test -z "$(ls -A "$JOB")"
[ "$rc" = 0 ] || cat "$out" >&2

# The rendezvous directory may be named; the file is made and removed
# there, not in the job's directory.
mkdir -m 700 "$TMP/rdv"
out=$TMP/dir
(cd "$JOB" && bare timeout 120 "${MPIRUN[@]}" -np 2 \
	-x DTRAIN_RENDEZVOUS_DIR="$TMP/rdv" "$EX" --count 1000 >"$out" 2>&1)
rc=$?
check "DTRAIN_RENDEZVOUS_DIR: exits 0 (got $rc)" test "$rc" = 0
check "DTRAIN_RENDEZVOUS_DIR: both ranks correct" \
	test "$(grep -cE '^rank [01] of 2: .* correct' "$out")" = 2
check "DTRAIN_RENDEZVOUS_DIR: nothing left there or in the job's directory" \
	test -z "$(ls -A "$TMP/rdv" "$JOB" | grep -v ':$')"

# Explicit variables win: each rank takes its own DTRAIN_SECRET rather
# than the file's, so two different ones cannot meet.
out=$TMP/secrets
s1=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
s2=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
(cd "$JOB" && bare timeout 120 "${MPIRUN[@]}" \
	-np 1 -x DTRAIN_SECRET="$s1" -x DT_CONNECT_TIMEOUT=10 "$EX" : \
	-np 1 -x DTRAIN_SECRET="$s2" -x DT_CONNECT_TIMEOUT=10 "$EX" \
	>"$out" 2>&1)
rc=$?
check "ranks with different DTRAIN_SECRET fail (got $rc)" test "$rc" != 0
check "different DTRAIN_SECRET: the refusal names the secret" \
	grep -qi "secret" "$out"
# mpirun kills rank 0 as soon as rank 1 fails, before it can remove the
# file: what is left is private to the user.
for f in "$JOB"/.dtrain-rendezvous-*; do
	[ -e "$f" ] || continue
	check "a file left by a killed start is private (mode $(stat -c %a "$f"))" \
		test "$(stat -c %a "$f")" = 600
done

finish
