#!/usr/bin/env bash
# The sparse example (examples/sparse_linear.c) learns through row_sparse
# tables: dist_sync and dist_async with 2 workers and 2 servers (the
# table split by row range), and the local store; each run's last test
# accuracy must reach 0.68 (the true weights score 0.79, the majority
# class alone 0.56) and its log-loss fall below 0.62 (0.693 before any
# step; the true weights 0.44). Each run's --metrics log parses and ends
# with the test figures the program printed.
set -u
. "$(dirname "$0")/job_lib.bash"
B=${DTRAIN_BUILD:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
args="--train 100000 --test 10000 --epochs 2 --lr 0.006 --disp-batches 40"
check() {
	local desc=$1 line acc loss
	line=$(grep -o 'Test-log-loss=[0-9.]* Test-accuracy=[0-9.]*' "$tmp/out.log" | tail -1)
	acc=${line##*Test-accuracy=}
	loss=${line#Test-log-loss=}
	loss=${loss%% *}
	if [ -z "$line" ] || ! grep -q "Speed: .* samples/sec accuracy=" "$tmp/out.log"; then
		tail -5 "$tmp/out.log"
		echo "FAIL: $desc: no Speedometer or test line"
		fails=$((fails + 1))
	elif ! awk -v a="$acc" -v l="$loss" 'BEGIN { exit !(a >= 0.68 && l < 0.62) }'; then
		echo "FAIL: $desc: $line (want accuracy >= 0.68, log-loss < 0.62)"
		fails=$((fails + 1))
	elif ! python3 "$(dirname "$0")/metrics_check.py" "$tmp/m.jsonl" 2 accuracy "$desc" val ||
		! python3 - "$tmp/m.jsonl" "$acc" "$loss" <<'PY'; then
import json, sys
end = [json.loads(l) for l in open(sys.argv[1])][-1]
# the log's last line is what the program printed last
# (printed to 4 places, logged to 6)
assert abs(end["val"] - float(sys.argv[2])) <= 6e-5, end
assert abs(end["val_loss"] - float(sys.argv[3])) <= 6e-5, end
PY
		echo "FAIL: $desc: the metrics log"
		fails=$((fails + 1))
	else
		echo "ok: $desc: $line"
	fi
}
export MXNET_KVSTORE_BIGARRAY_BOUND=100000
for kv in dist_sync dist_async; do
	if run_job 300 "$tmp/out.log" 20 "$B/dtrain" launch -n 2 -s 2 -- \
		"$B/examples/sparse_linear" --kvstore $kv $args \
		--metrics "$tmp/m.jsonl" --run-label "$kv w=2 s=2"; then
		check "$kv w=2 s=2"
	else
		echo "FAIL: $kv w=2 s=2"
		fails=$((fails + 1))
	fi
done
if run_job 300 "$tmp/out.log" 20 "$B/examples/sparse_linear" --kvstore local $args \
	--metrics "$tmp/m.jsonl" --run-label local; then
	check "local"
else
	echo "FAIL: local"
	fails=$((fails + 1))
fi
echo "$fails failed"
[ $fails -eq 0 ]
