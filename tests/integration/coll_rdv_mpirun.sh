#!/bin/bash
# coll_rdv_mpirun.sh - plain `mpirun -np 2 examples/allreduce` with no
# dtrain variable set: the ranks find each other (rank 0 publishes the
# scheduler's address and a fresh secret over mpirun's PMIx server, or in
# a private rendezvous file in the job's directory), the results are
# right, and no file is left at the end. A secret the user sets still wins
# over the card's: two ranks given different secrets are refused. Skipped
# when mpirun is not installed.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/coll_lib.bash"
if ! command -v mpirun >/dev/null; then
	echo "skipped: no mpirun"
	exit 0
fi
EX=$BUILD/examples/allreduce
JOB=$TMP/job
mkdir -p "$JOB"

# In a sanitizer build: libpmix's own leftovers are not dtrain's.
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=${DTRAIN_SOURCE:-$(dirname "$0")/../..}/tests/lsan_pmix.supp"

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
(cd "$JOB" && bare timeout $((120 * T_SCALE)) "${MPIRUN[@]}" -np 2 "$EX" >"$out" 2>&1)
rc=$?
check "mpirun -np 2 allreduce, no dtrain variable: exits 0 (got $rc)" \
	test "$rc" = 0
for r in 0 1; do
	check "mpirun: rank $r of 2 correct" \
		grep -qE "^rank $r of 2: .* correct" "$out"
done
check "mpirun: the rendezvous file is gone" test -z "$(ls -A "$JOB")"
[ "$rc" = 0 ] || cat "$out" >&2

# Which way the card went (PS_VERBOSE=1 says): PMIx, mpirun's own, when
# dtrain was built with its header.
if pkg-config --exists pmix 2>/dev/null; then
	out=$TMP/pmix
	(cd "$JOB" && bare timeout $((120 * T_SCALE)) "${MPIRUN[@]}" -np 2 -x PS_VERBOSE=1 \
		"$EX" --count 1000 >"$out" 2>&1)
	rc=$?
	check "mpirun, PS_VERBOSE=1: exits 0 (got $rc)" test "$rc" = 0
	check "mpirun: both ranks met by PMIx" \
		test "$(grep -c 'met at .*, by PMIx' "$out")" = 2
	check "mpirun by PMIx: no file" test -z "$(ls -A "$JOB")"
fi

# The rendezvous file under mpirun too (DTRAIN_RENDEZVOUS=file), in a
# named directory: made and removed there, not in the job's directory.
mkdir -m 700 "$TMP/rdv"
out=$TMP/dir
(cd "$JOB" && bare timeout $((120 * T_SCALE)) "${MPIRUN[@]}" -np 2 -x PS_VERBOSE=1 \
	-x DTRAIN_RENDEZVOUS=file -x DTRAIN_RENDEZVOUS_DIR="$TMP/rdv" \
	"$EX" --count 1000 >"$out" 2>&1)
rc=$?
check "DTRAIN_RENDEZVOUS=file: exits 0 (got $rc)" test "$rc" = 0
check "DTRAIN_RENDEZVOUS=file: both ranks correct" \
	test "$(grep -cE '^rank [01] of 2: .* correct' "$out")" = 2
check "DTRAIN_RENDEZVOUS=file: both ranks met by the file" \
	test "$(grep -c 'met at .*, by rendezvous file' "$out")" = 2
check "DTRAIN_RENDEZVOUS_DIR: nothing left there or in the job's directory" \
	test -z "$(ls -A "$TMP/rdv" "$JOB" | grep -v ':$')"

# An unknown way is refused by name.
out=$TMP/bad
(cd "$JOB" && bare timeout $((120 * T_SCALE)) "${MPIRUN[@]}" -np 2 \
	-x DTRAIN_RENDEZVOUS=carrier-pigeon "$EX" --count 10 >"$out" 2>&1)
rc=$?
check "DTRAIN_RENDEZVOUS=carrier-pigeon fails (got $rc)" test "$rc" != 0
check "DTRAIN_RENDEZVOUS=carrier-pigeon: named, with the choices" \
	grep -q "DTRAIN_RENDEZVOUS=carrier-pigeon: expected auto" "$out"

# Explicit variables win: each rank takes its own DTRAIN_SECRET rather
# than the file's, so two different ones cannot meet.
out=$TMP/secrets
s1=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
s2=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
(cd "$JOB" && bare timeout $((120 * T_SCALE)) "${MPIRUN[@]}" \
	-np 1 -x DTRAIN_SECRET="$s1" -x DT_CONNECT_TIMEOUT=10 "$EX" : \
	-np 1 -x DTRAIN_SECRET="$s2" -x DT_CONNECT_TIMEOUT=10 "$EX" \
	>"$out" 2>&1)
rc=$?
check "ranks with different DTRAIN_SECRET fail (got $rc)" test "$rc" != 0
check "different DTRAIN_SECRET: the refusal names the secret" \
	grep -qi "secret" "$out"
# (Should the file have carried the card, mpirun kills rank 0 as soon as
# rank 1 fails, before it can remove it: what is left is private.)
for f in "$JOB"/.dtrain-rendezvous-*; do
	[ -e "$f" ] || continue
	check "a file left by a killed start is private (mode $(stat -c %a "$f"))" \
		test "$(stat -c %a "$f")" = 600
done

finish
