#!/usr/bin/env bash
# Seed 000's linear regression: dist_sync with 2 workers at batch 50 learns
# w=5, b=2 and matches one process at batch 100 to 1e-5 relative; the same
# program started five times by hand with DMLC_ROLE (seed 001's recipe);
# the dist_sync run's --metrics log parses.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
set -u
B=${DTRAIN_BUILD:?}
tmp=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

last() { grep -o 'w=[^ ]* b=[^ ]*' "$1" | tail -1; }
timeout $((60 * T_SCALE)) "$B/examples/linreg" --kvstore local --batch-size 100 > "$tmp/local" || fail "local run"
timeout $((120 * T_SCALE)) "$B/dtrain" launch -n 2 -s 2 -- "$B/examples/linreg" --kvstore dist_sync --batch-size 50 \
	--metrics "$tmp/m.jsonl" > "$tmp/dist" 2>&1 || { cat "$tmp/dist"; fail "dist_sync run"; }
grep -q 'Epoch\[0\] Batch \[0-250\] Speed: .* samples/sec mae=' "$tmp/dist" || fail "no Speedometer line"
# its metrics log: 4 progress lines and an end an epoch, the error falling
python3 "$(dirname "$0")/metrics_check.py" "$tmp/m.jsonl" 5 mae "dist_sync 2w" || fail "metrics log"
python3 - "$tmp/m.jsonl" <<'PY' || fail "metrics log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 5 * 5, len(rows)
ends = [r["train"] for r in rows if r["batch"] == -1]
assert ends[-1] < ends[0] / 100, ends
PY
python3 - "$(last "$tmp/local")" "$(last "$tmp/dist")" <<'PY' || fail "parity"
import sys
def parse(s): return {k: float(v) for k, v in (p.split('=') for p in s.split())}
a, b = parse(sys.argv[1]), parse(sys.argv[2])
print("local", a, "dist_sync", b)
assert abs(b['w'] - 5) < 0.01 and abs(b['b'] - 2) < 0.05, "did not learn"
for k in 'wb':
    rel = abs(a[k] - b[k]) / abs(a[k])
    assert rel <= 1e-5, f"{k}: relative difference {rel}"
PY

# Seed 001's manual recipe: one command, five roles.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2
# (by hand, every process needs the job's secret: docs/security.md)
DTRAIN_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n'); export DTRAIN_SECRET
CMD=("$B/examples/linreg" --kvstore dist_sync --batch-size 50)
for role in server server scheduler worker worker; do
  DMLC_ROLE=$role timeout $((120 * T_SCALE)) "${CMD[@]}" > "$tmp/$role.$RANDOM" 2>&1 & pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
pids=()
[ $rc -eq 0 ] || { tail -n 5 "$tmp"/*; fail "manual recipe: a process failed"; }
n=$(cat "$tmp"/worker.* | grep -c '^w=5\.0')
[ "$n" -eq 2 ] || { cat "$tmp"/worker.*; fail "manual recipe: workers did not learn"; }
echo "ok"
