#!/usr/bin/env bash
# The trainer's correctness: with the same --seed and --limit 2048, one
# epoch of dist_sync with 2 workers at batch 32 gives the parameters of
# --kvstore local at batch 64 (dtrain params diff max_abs <= 1e-4); so do
# --devices 2, dist_sync_device, --kvstore horovod (allreduce), and dist_sync
# with --no-overlap (the push after backward instead of per layer in it).
# Horovod's allreduce of gradient buckets during backward gives the same bits
# as after it (--no-overlap), with 2 and with 3 workers.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
set -u
B=${DTRAIN_BUILD:?}
. "$(dirname "$0")/blas_env.bash"
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  echo "skipped: Fashion-MNIST not installed at $DATA (Debian's dataset-fashion-mnist)"
  exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
# SGD: Adam turns rounding-level differences of near-zero gradients into
# whole steps of size lr (m/sqrt(v)), so parity is checked with SGD.
common=(--model lenet --epochs 1 --limit 2048 --seed 7 --disp-batches 16 --optimizer sgd --lr 0.05 --momentum 0.9 --data "$DATA")
check() { # name file
  local out
  out=$("$B/dtrain" params diff "$tmp/local.params" "$2") || { echo "FAIL: $1: params diff failed: $out"; fails=$((fails+1)); return; }
  echo "$1: $out"
  python3 -c "import sys; v=float(sys.argv[1].split('max_abs=')[1].split()[0]); sys.exit(0 if v <= 1e-4 else 1)" "$out" \
    || { echo "FAIL: $1: max_abs above 1e-4"; fails=$((fails+1)); }
}
run() { # name args...
  local name=$1; shift
  if ! timeout $((240 * T_SCALE)) "$@" > "$tmp/$name.log" 2>&1; then
    echo "FAIL: $name"; tail -20 "$tmp/$name.log"; fails=$((fails+1)); return 1
  fi
}
run local "$B/examples/mnist" --kvstore local --batch-size 64 "${common[@]}" --save "$tmp/local.params" || exit 1
grep -q 'Epoch\[0\] Validation-accuracy=' "$tmp/local.log" || { echo "FAIL: no validation line"; fails=$((fails+1)); }
grep -q 'Epoch\[0\] Batch \[0-16\] Speed: .* samples/sec accuracy=' "$tmp/local.log" || { echo "FAIL: no Speedometer line"; fails=$((fails+1)); }

run dist_sync "$B/dtrain" launch -n 2 -s 2 -- "$B/examples/mnist" --kvstore dist_sync --batch-size 32 "${common[@]}" --save "$tmp/dist.params" && check dist_sync "$tmp/dist.params"
run dist_sync_no_overlap "$B/dtrain" launch -n 2 -s 2 -- "$B/examples/mnist" --kvstore dist_sync --no-overlap --batch-size 32 "${common[@]}" --save "$tmp/distno.params" && check "dist_sync --no-overlap" "$tmp/distno.params"
run devices "$B/examples/mnist" --kvstore device --devices 2 --batch-size 64 "${common[@]}" --save "$tmp/dev.params" && check "device x2" "$tmp/dev.params"
run dist_sync_device "$B/dtrain" launch -n 2 -s 1 -- "$B/examples/mnist" --kvstore dist_sync_device --devices 2 --batch-size 32 "${common[@]}" --save "$tmp/distdev.params" && check "dist_sync_device x2" "$tmp/distdev.params"
run horovod "$B/dtrain" launch -n 2 -s 0 -- "$B/examples/mnist" --kvstore horovod --batch-size 32 "${common[@]}" --save "$tmp/hvd.params" && check horovod "$tmp/hvd.params"
same() { # name file1 file2: the same bits
  if cmp -s "$2" "$3"; then echo "$1: bit-identical"; else echo "FAIL: $1: the parameters differ"; fails=$((fails+1)); fi
}
run horovod_no_overlap "$B/dtrain" launch -n 2 -s 0 -- "$B/examples/mnist" --kvstore horovod --no-overlap --batch-size 32 "${common[@]}" --save "$tmp/hvdno.params" \
  && same "horovod overlap = --no-overlap, 2 workers" "$tmp/hvd.params" "$tmp/hvdno.params"
grep -q 'allreduce during backward' "$tmp/horovod.log" || { echo "FAIL: horovod did not say it overlaps"; fails=$((fails+1)); }
run horovod3 "$B/dtrain" launch -n 3 -s 0 -- "$B/examples/mnist" --kvstore horovod --batch-size 32 "${common[@]}" --save "$tmp/hvd3.params" \
  && run horovod3_no_overlap "$B/dtrain" launch -n 3 -s 0 -- "$B/examples/mnist" --kvstore horovod --no-overlap --batch-size 32 "${common[@]}" --save "$tmp/hvd3no.params" \
  && same "horovod overlap = --no-overlap, 3 workers" "$tmp/hvd3.params" "$tmp/hvd3no.params"
echo "$fails failed"
[ $fails -eq 0 ]
