#!/bin/bash
# checkpoint_bench.sh - what server checkpoints cost a training job:
# train_dist_bench (LeNet, 431k parameters = 1.7 MB, Adam on the server:
# 5.2 MB of values and state per file; 2 workers, 1 server) plain and with
# a checkpoint every 100 steps (DTRAIN_CHECKPOINT_DIR on a temporary
# directory, DTRAIN_CHECKPOINT_EVERY=100), the runs alternating, REPEAT of
# each (default 5), STEPS steps a run (default 400): the median samples/s
# and the ratio (docs/fault-tolerance.md).
#
#   bench/checkpoint_bench.sh [BUILD_DIR]  (default: $DTRAIN_BUILD or build)
#
# Prints a table, then the JSON line (also kept in $OUT).
set -u
BUILD=${1:-${DTRAIN_BUILD:-build}}
REPEAT=${REPEAT:-5}
STEPS=${STEPS:-400}
DTRAIN=$BUILD/dtrain
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dtrain_ckpt_bench.XXXXXX")}
mkdir -p "$OUT"
for f in "$DTRAIN" "$BUILD/bench/train_dist_bench"; do
	[ -x "$f" ] || { echo "checkpoint_bench.sh: no $f (build first)" >&2; exit 1; }
done
ck=$(mktemp -d "${TMPDIR:-/tmp}/dtrain_ckpt_dir.XXXXXX")
trap 'rm -rf "$ck"' EXIT
: >"$OUT/train.jsonl"
for i in $(seq "$REPEAT"); do
	for m in 0 1; do
		args=()
		[ "$m" = 1 ] && args=(--checkpoint-dir "$ck" --checkpoint-every 100)
		"$DTRAIN" launch -n 2 -s 1 "${args[@]}" -- "$BUILD/bench/train_dist_bench" --json --steps "$STEPS" \
			>"$OUT/run.log" 2>&1 || { tail "$OUT/run.log" >&2; echo "checkpoint_bench.sh: run failed" >&2; exit 1; }
		w=$(sed -n 's/.* \([0-9]*\) checkpoints written.*/\1/p' "$OUT/run.log" | head -1)
		w=${w:-0}
		ms=$(sed -n 's/.*checkpoints written (\([0-9.]*\) ms each.*/\1/p' "$OUT/run.log" | head -1)
		sed -n 's/^\[worker 0\] //p' "$OUT/run.log" | grep '^{' |
			sed "s/^{/{\"ckpt\":$m,\"files\":$w,\"write_ms\":${ms:-0},/" >>"$OUT/train.jsonl"
	done
done
python3 - "$OUT" "$STEPS" <<'PY'
import json, statistics, sys
out, steps = sys.argv[1], int(sys.argv[2])
runs = {0: [], 1: []}
for ln in open(f"{out}/train.jsonl"):
    o = json.loads(ln)
    runs[o["ckpt"]].append(o)
a = statistics.median(o["samples_per_s"] for o in runs[0])
b = statistics.median(o["samples_per_s"] for o in runs[1])
files = statistics.median(o["files"] for o in runs[1])
wms = statistics.median(o["write_ms"] for o in runs[1])
print("train_dist_bench lenet, 2 workers, 1 server, %d steps: median of %d runs each, alternating"
      % (steps, len(runs[0])))
print("%-28s %12s %7s" % ("", "samples/s", "ratio"))
print("%-28s %12.1f %7s" % ("plain", a, "1.00"))
print("%-28s %12.1f %7.3f" % ("checkpoint every 100 steps", b, b / a))
print("(%d files a run, %.1f ms to write each, in the writer thread)" % (files, wms))
line = {"bench": "checkpoint", "model": "lenet", "steps": steps, "every": 100,
        "samples_per_s": a, "ckpt_samples_per_s": b, "ratio": round(b / a, 4),
        "files": files, "write_ms": wms}
with open(f"{out}/checkpoint_bench.jsonl", "w") as f:
    f.write(json.dumps(line) + "\n")
print()
print(json.dumps(line))
PY
