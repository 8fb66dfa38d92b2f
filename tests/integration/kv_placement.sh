#!/usr/bin/env bash
# kv_placement.sh - where keys live (docs/kvstore.md, "Placement"): LeNet in
# dist_sync with 2 workers and 2 servers under the balanced placement (the
# default) gives no server more than 55% of the bytes the servers receive
# (DTRAIN_STATS_JSON, the numbers of --stats), and parameters bit-identical
# to the same run under MXNet's rule (DTRAIN_KV_PLACEMENT=mxnet, where
# server 0 takes nearly everything); the MLP on 3 servers stays within
# 1/3 + 5%; and a server killed mid-training comes back (--restart) with
# the keys of the balanced map, the job ending with the same parameters.
set -u
. "$(dirname "$0")/job_lib.bash"
B=${DTRAIN_BUILD:?}
. "$(dirname "$0")/blas_env.bash"
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
	echo "skipped: Fashion-MNIST not installed at $DATA (Debian's dataset-fashion-mnist)"
	exit 0
fi
tmp=$(mktemp -d)
TAG="DT_PLACEMENT_TEST=$tmp"
ours() { tagged_pids "$B/" "$TAG"; }
trap 'for p in $(ours); do kill -9 "$p"; done 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
. "$(dirname "$0")/kill_lib.bash"

M=(--kvstore dist_sync --epochs 1 --limit 6144 --seed 7 --disp-batches 16 --optimizer sgd
	--lr 0.05 --momentum 0.9 --batch-size 32 --data "$DATA")
# job NAME SERVERS MODEL [env...]: a job with its stats in NAME.jsonl and
# its parameters in NAME.params
job() {
	local name=$1 s=$2 model=$3
	shift 3
	run_job 200 "$tmp/$name.log" 20 env "$@" DTRAIN_STATS_JSON="$tmp/$name.jsonl" \
		"$B/dtrain" launch -n 2 -s "$s" --stats --env "$TAG" -- \
		"$B/examples/mnist" --model "$model" "${M[@]}" --save "$tmp/$name.params" ||
		fail "$name: the job failed"
}
# share NAME: the busiest server's share of the bytes the servers received
share() {
	python3 - "$tmp/$1.jsonl" <<'PY'
import json, sys
srv = [n for n in map(json.loads, open(sys.argv[1])) if n["role"] == "server"]
got = [sum(p["bytes_recv"] for p in n["peers"]) for n in srv]
print("%.4f %d %s" % (max(got) / sum(got), len(srv), ",".join(map(str, got))))
PY
}
# within NAME LIMIT: the busiest share is at most LIMIT
within() {
	local s
	s=$(share "$1") || fail "$1: no stats"
	python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" \
		"${s%% *}" "$2" || fail "$1: the busiest server takes ${s%% *} of the bytes (limit $2; bytes $s)"
	echo "$1: busiest server ${s%% *} of the bytes (limit $2; servers' bytes: ${s##* })"
}

job lenet_bal 2 lenet
within lenet_bal 0.55
grep -q "busiest server: server" "$tmp/lenet_bal.log" || fail "no --stats report"
job lenet_mx 2 lenet DTRAIN_KV_PLACEMENT=mxnet
s=$(share lenet_mx)
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.95 else 1)" "${s%% *}" ||
	fail "mxnet: server 0 should take nearly every byte (LeNet's big layer is key 4), got $s"
echo "lenet_mx: busiest server ${s%% *} of the bytes under MXNet's rule"
cmp -s "$tmp/lenet_bal.params" "$tmp/lenet_mx.params" ||
	fail "balanced and mxnet placements differ: $("$B/dtrain" params diff "$tmp/lenet_bal.params" "$tmp/lenet_mx.params")"
echo "lenet: balanced and mxnet placements give bit-identical parameters"
job mlp_bal 3 mlp
within mlp_bal 0.3834

# A server killed under the balanced map: the new one loads its checkpoint
# (the parts the map gave it) and takes the workers' replays.
k=$((16 * (1 + RANDOM % 3)))
killed lenet_kill server 1 "Batch \[$((k - 16))-$k\]" "$B/dtrain" launch -n 2 -s 2 --restart 1 \
	--checkpoint-dir "$tmp/ck" --checkpoint-every 10 --env "$TAG" -- \
	"$B/examples/mnist" --model lenet "${M[@]}" --save "$tmp/lenet_kill.params"
must_pass lenet_kill
grep -q "restored checkpoint #" "$tmp/lenet_kill.log" || fail "lenet_kill: no checkpoint restored"
cmp -s "$tmp/lenet_bal.params" "$tmp/lenet_kill.params" ||
	fail "server 1 killed: parameters differ ($("$B/dtrain" params diff "$tmp/lenet_bal.params" "$tmp/lenet_kill.params"))"
echo "lenet, server 1 killed after batch $k under the balanced map: parameters bit-identical"
[ -z "$(ours)" ] || fail "processes left behind: $(ours)"
echo "all passed"
