#!/bin/bash
# resend_bench.sh - what PS_RESEND=1 costs when nothing is lost: kv_bench
# (1 worker, 1 server) plain and with PS_RESEND=1, the runs alternating,
# REPEAT of each (default 5); for 4 KiB and 16 MiB, one key: the median
# p50 round trip and the median throughput, and their ratio to plain
# (docs/fault-tolerance.md).
#
#   bench/resend_bench.sh [BUILD_DIR]      (default: $DTRAIN_BUILD or build)
#
# Prints a table, then the JSON lines (also kept in $OUT).
set -u
BUILD=${1:-${DTRAIN_BUILD:-build}}
REPEAT=${REPEAT:-5}
DTRAIN=$BUILD/dtrain
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dtrain_resend_bench.XXXXXX")}
mkdir -p "$OUT"
for f in "$DTRAIN" "$BUILD/bench/kv_bench"; do
	[ -x "$f" ] || { echo "resend_bench.sh: no $f (build first)" >&2; exit 1; }
done
: >"$OUT/kv.jsonl"
for i in $(seq "$REPEAT"); do
	for m in 0 1; do
		PS_RESEND=$m "$DTRAIN" launch -n 1 -s 1 -- "$BUILD/bench/kv_bench" --json 2>/dev/null |
			sed -n 's/^\[worker 0\] //p' | grep '^{' | sed "s/^{/{\"resend\":$m,/" >>"$OUT/kv.jsonl" ||
			{ echo "resend_bench.sh: kv_bench (PS_RESEND=$m) failed" >&2; exit 1; }
	done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys, collections
out = sys.argv[1]
runs = collections.defaultdict(list)
for ln in open(f"{out}/kv.jsonl"):
    o = json.loads(ln)
    if o["keys"] == 1 and o["bytes"] in (4096, 16 << 20):
        runs[(o["op"], o["bytes"], o["resend"])].append(o)
print("kv_bench, 1 worker and 1 server, one key: median of %d runs each, alternating"
      % len(runs[("push", 4096, 0)]))
print("%-9s %9s %10s %10s %7s %9s %9s %7s" % ("op", "bytes", "p50 us", "resend", "ratio",
                                               "GB/s", "resend", "ratio"))
lines = []
for op in ("push", "pull", "pushpull"):
    for nbytes in (4096, 16 << 20):
        a, b = runs[(op, nbytes, 0)], runs[(op, nbytes, 1)]
        pa = statistics.median(o["p50_us"] for o in a)
        pb = statistics.median(o["p50_us"] for o in b)
        ga = statistics.median(o["gbps"] for o in a)
        gb = statistics.median(o["gbps"] for o in b)
        print("%-9s %9d %10.1f %10.1f %7.2f %9.3f %9.3f %7.2f"
              % (op, nbytes, pa, pb, pb / pa, ga, gb, gb / ga))
        lines.append({"bench": "resend", "op": op, "bytes": nbytes,
                      "p50_us": pa, "resend_p50_us": pb,
                      "latency_ratio": round(pb / pa, 3), "gbps": ga,
                      "resend_gbps": gb, "throughput_ratio": round(gb / ga, 3)})
with open(f"{out}/resend_bench.jsonl", "w") as f:
    for o in lines:
        f.write(json.dumps(o) + "\n")
print()
for o in lines:
    print(json.dumps(o))
PY
