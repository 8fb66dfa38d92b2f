#!/bin/bash
# launch_slurm.sh - `dtrain launch --launcher slurm` against a real Slurm
# (a private munged + slurmctld + slurmd, engines_lib.bash), the ways Slurm
# users run: inside `salloc`, and as an `sbatch` script. linreg's dist_sync
# result equals the local launcher's; a failing worker is named with its
# rank and status; Ctrl-C and a worker that ignores SIGHUP leave nothing
# (no process, no job step). Skipped, with the reason, where Slurm cannot
# run (not root, not installed).
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
. "$(dirname "$0")/engines_lib.bash"
slurm_setup
B=$DTRAIN_BUILD
OUT=$TMP/out
ERR=$TMP/err

# steps_left: job steps still known to Slurm.
steps_left() {
	squeue -h -s | grep -v '\.extern' || true
}

# The references: the same jobs under the local launcher.
job_references

# 1. Inside an allocation (the issue's hang: the second step waited).
start=$(now_ms)
timeout $((120 * T_SCALE)) salloc --quiet -n 2 "$DTRAIN" launch -n 2 -s 2 --launcher slurm \
	--env DT_TEST_TAG="$TAG" -- "${LINREG[@]}" >"$OUT" 2>"$ERR"
rc=$?
ms=$(($(now_ms) - start))
check "salloc: launcher exits 0 (got $rc, ${ms} ms)" test "$rc" = 0
for i in 0 1; do
	check "salloc: [worker $i] $REF" has "$OUT" "[worker $i] $REF"
done
check "salloc: nothing left" wait_gone 5
check "salloc: no job step left" wait_for 10 test -z "$(steps_left)"
echo "TABLE slurm linreg rc=$rc ms=$ms"

# mnist (make demo's model, one epoch of 2048 images) as on one host.
if [ ${#MNIST[@]} -gt 0 ]; then
	start=$(now_ms)
	timeout $((300 * T_SCALE)) salloc --quiet -n 2 "$DTRAIN" launch -n 2 -s 2 --launcher slurm \
		--env DT_TEST_TAG="$TAG" -- "${MNIST[@]}" >"$OUT" 2>"$ERR"
	rc=$?
	ms=$(($(now_ms) - start))
	check "mnist: exits 0 (got $rc)" test "$rc" = 0
	check "mnist: $REF_MNIST, as under the local launcher" has "$OUT" "$REF_MNIST"
	check "mnist: nothing left" wait_gone 5
	echo "TABLE slurm mnist rc=$rc ms=$ms"
fi

# 2. A batch script, as sbatch users write it.
cat >"$TMP/job.sh" <<EOF
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --output=$TMP/batch.out
cd "$B"
exec "$DTRAIN" launch -n 2 -s 2 --launcher slurm --env DT_TEST_TAG=$TAG -- ${LINREG[*]}
EOF
job=$(sbatch --parsable "$TMP/job.sh")
state() { scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z]*'; }
check "sbatch: job $job ends" wait_for 120 sh -c "scontrol show job $job | grep -qE 'JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT)'"
check "sbatch: $(state) with exit code 0" sh -c "scontrol show job $job | grep -q 'JobState=COMPLETED.*' && scontrol show job $job | grep -q 'ExitCode=0:0'"
for i in 0 1; do
	check "sbatch: [worker $i] $REF" has "$TMP/batch.out" "[worker $i] $REF"
done
check "sbatch: nothing left" wait_gone 5

# 3. A worker fails: named with its rank and status, the job stopped.
timeout $((120 * T_SCALE)) salloc --quiet -n 2 "$DTRAIN" launch -n 2 -s 1 --launcher slurm \
	--env DT_TEST_TAG="$TAG" -- "$TMP/failw" >"$OUT" 2>"$ERR"
rc=$?
end=$(now_ms)
failed=$(($(cat "$TMP/failed_at" 2>/dev/null || echo 0) / 1000000))
ms=$((end - failed))
check "failure: launcher exits 1 (got $rc)" test "$rc" = 1
check "failure: stopped ${ms} ms after the failure (< $STOP_MS)" test "$ms" -lt "$STOP_MS"
check "failure: the rank and its status named" grep -qE \
	'^dtrain launch: worker 1 exited with status 3 \(workers, pid [0-9]+, ' "$ERR"
check "failure: job failed: worker 1 exited with status 3" has "$ERR" \
	"dtrain launch: job failed: worker 1 exited with status 3"
check "failure: nothing left" wait_gone 5
check "failure: no job step left" wait_for 10 test -z "$(steps_left)"
echo "TABLE slurm failing-worker rc=$rc ms=$ms"

# 4 and 5. Ctrl-C (SIGINT to the launcher), with workers that ignore
# SIGHUP and leave a child behind.
for what in plain stubborn; do
	if [ $what = plain ]; then cmd=("${LINREG[@]}" --epochs 100000); else cmd=("$TMP/stubborn"); fi
	timeout $((120 * T_SCALE)) salloc --quiet -n 2 "$DTRAIN" launch -n 2 -s 1 --launcher slurm \
		--env DT_TEST_TAG="$TAG" -- "${cmd[@]}" >"$OUT" 2>"$ERR" &
	S=$!
	wait_for 60 sh -c "grep -q 'Epoch\[1\]' '$OUT'"
	# (timeout, then salloc, then the launcher)
	L=$(pgrep -P "$(pgrep -P "$S" | head -1)" | head -1)
	start=$(now_ms)
	kill -INT "$L"
	wait "$S"
	rc=$?
	check "Ctrl-C ($what): exits 130 (got $rc)" test "$rc" = 130
	check "Ctrl-C ($what): nothing left" wait_gone 5
	ms=$(($(now_ms) - start))
	check "Ctrl-C ($what): all gone ${ms} ms after the signal (< $STOP_MS)" test "$ms" -lt "$STOP_MS"
	check "Ctrl-C ($what): no job step left" wait_for 10 test -z "$(steps_left)"
	echo "TABLE slurm ctrl-c-$what rc=$rc ms=$ms"
done

finish
