#!/bin/bash
# coll_rdv_srun.sh - plain `srun -n 2 examples/allreduce` on a private
# Slurm (engines_lib.bash) with no dtrain variable set: the ranks meet
# through the rendezvous file in the job's directory (named after the
# job and step), the results are right, the file is gone and no step is
# left; with `--mpi=pmix` (when Slurm has the plugin) the ranks meet over
# PMIx and no file is made. Skipped, with the reason, where Slurm cannot
# run.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
. "$(dirname "$0")/engines_lib.bash"
slurm_setup
EX=$DTRAIN_BUILD/examples/allreduce
JOB=$TMP/job
mkdir -p "$JOB"
chmod 700 "$JOB"

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

start=$(now_ms)
(cd "$JOB" && bare timeout $((120 * T_SCALE)) srun --quiet -n 2 "$EX" >"$TMP/out" 2>"$TMP/err")
rc=$?
ms=$(($(now_ms) - start))
check "srun -n 2 allreduce, no dtrain variable: exits 0 (got $rc, ${ms} ms)" \
	test "$rc" = 0
for r in 0 1; do
	check "srun: rank $r of 2 correct" \
		grep -qE "^rank $r of 2: .* correct" "$TMP/out"
done
check "srun: the rendezvous file is gone" test -z "$(ls -A "$JOB")"
check "srun: nothing left" wait_gone 5
check "srun: no job step left" wait_for 10 test -z "$(squeue -h -s | grep -v '\.extern')"
[ "$rc" = 0 ] || cat "$TMP/out" "$TMP/err" >&2

# With Slurm's PMIx plugin the card goes through PMIx instead: no file.
if srun --mpi=list 2>&1 | grep -qw pmix; then
	(cd "$JOB" && bare timeout $((120 * T_SCALE)) env PS_VERBOSE=1 srun --quiet --mpi=pmix \
		-n 2 "$EX" >"$TMP/out" 2>"$TMP/err")
	rc=$?
	check "srun --mpi=pmix -n 2: exits 0 (got $rc)" test "$rc" = 0
	check "srun --mpi=pmix: both ranks correct" \
		test "$(grep -cE '^rank [01] of 2: .* correct' "$TMP/out")" = 2
	check "srun --mpi=pmix: both ranks met by PMIx" \
		test "$(grep -c 'met at .*, by PMIx' "$TMP/err")" = 2
	check "srun --mpi=pmix: no file" test -z "$(ls -A "$JOB")"
	check "srun --mpi=pmix: nothing left" wait_gone 5
	[ "$rc" = 0 ] || cat "$TMP/out" "$TMP/err" >&2
else
	echo "skipped srun --mpi=pmix: this Slurm has no PMIx plugin"
fi

finish
