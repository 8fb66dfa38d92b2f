#!/bin/bash
# python_srun.sh - a Python training script under plain `srun -n 2` on a
# private Slurm (engines_lib.bash), with no dtrain variable set:
# examples/python/mnist_torch_hvd.py (dtrain.torch's DistributedOptimizer)
# meets through the rendezvous file in the job's directory, as the C
# programs do, and trains the same parameters, to the bit, and the same
# validation accuracy as the same command under `dtrain launch -n 2 -s 0`.
# The file is gone after, and no step or process is left. Skipped, with
# the reason, where Slurm cannot run, where /usr/bin/python3 has no torch,
# without Fashion-MNIST, and in a sanitizer build (the interpreter is not
# instrumented; python_binding runs the binding's calls there).
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
. "$(dirname "$0")/engines_lib.bash"
: "${DTRAIN_SOURCE:?DTRAIN_SOURCE must name the source directory}"
PY=/usr/bin/python3
DATA=${DTRAIN_DATA:-/usr/share/datasets/fashion-mnist}
[ -z "$SANITIZED" ] || skip "a sanitizer build: the interpreter is not instrumented"
[ -d "$DTRAIN_BUILD/python/dtrain" ] || skip "the Python binding is not built (no python3-dev)"
"$PY" -c 'import torch, numpy' 2>/dev/null || skip "$PY has no torch or numpy (python3-torch)"
[ -d "$DATA" ] || skip "no Fashion-MNIST at $DATA (dataset-fashion-mnist)"
slurm_setup
EX=("$PY" "$DTRAIN_SOURCE/examples/python/mnist_torch_hvd.py" --data "$DATA"
	--limit 2048 --epochs 1 --disp-batches 1000)
# The package the build made, as a user without `make install` finds it.
export PYTHONPATH=$DTRAIN_BUILD/python
JOB=$TMP/job
mkdir -p "$JOB"
chmod 700 "$JOB"

timeout $((600 * T_SCALE)) "$DTRAIN" launch -n 2 -s 0 --env "DT_TEST_TAG=$TAG" -- "${EX[@]}" \
	--save "$TMP/launch.params" >"$TMP/ref" 2>&1
rc=$?
check "dtrain launch -n 2 -s 0 mnist_torch_hvd.py: exits 0 (got $rc)" test "$rc" = 0
[ "$rc" = 0 ] || cat "$TMP/ref" >&2

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
(cd "$JOB" && bare timeout $((600 * T_SCALE)) srun --quiet -n 2 \
	"${EX[@]}" --save "$TMP/srun.params" >"$TMP/out" 2>"$TMP/err")
rc=$?
ms=$(($(now_ms) - start))
check "srun -n 2 mnist_torch_hvd.py, no dtrain variable: exits 0 (got $rc, ${ms} ms)" \
	test "$rc" = 0
[ "$rc" = 0 ] || cat "$TMP/out" "$TMP/err" >&2
check "srun: 2 ranks trained" grep -q "2 rank(s)" "$TMP/out"
check "srun: the parameters equal the launcher's, bit for bit" \
	cmp -s "$TMP/launch.params" "$TMP/srun.params"
check "srun: the parameters are a LeNet's (not empty)" \
	test "$(stat -c %s "$TMP/srun.params" 2>/dev/null || echo 0)" -gt 100000
want=$(grep -o 'Validation-accuracy=.*' "$TMP/ref")
check "srun: the same validation accuracy ($want)" \
	test -n "$want" -a "$want" = "$(grep -o 'Validation-accuracy=.*' "$TMP/out")"
check "srun: the rendezvous file is gone" test -z "$(ls -A "$JOB")"
check "srun: nothing left" wait_gone 5
check "srun: no job step left" wait_for 10 test -z "$(squeue -h -s | grep -v '\.extern')"

finish
