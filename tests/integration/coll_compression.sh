#!/usr/bin/env bash
# Compressed collectives (docs/compression.md):
# - the distributed optimizer's compressed sums and averages
#   (dt_coll_set_compression: fp16, 2bit, 1bit; with a layout of tensors
#   over and under min_size, and without one) equal, bit for bit on every
#   rank, what coll_check computes by running every rank's encoder, for 1
#   to 4 ranks, over sockets and over cross-memory attach; a rank set to
#   another threshold is DT_EMISMATCH and the communicator goes on;
# - mnist --kvstore horovod with 2bit and 1bit ends with the same
#   parameters as the same job through dist_sync servers.
# (float16 allreduce, broadcast, allgather and reduce-scatter are in
# coll_check's main suite, run by coll_ranks.sh.)
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
set -u
B=${DTRAIN_BUILD:?}
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
run() {
	local desc=$1
	shift
	if ! out=$(timeout $((120 * T_SCALE)) "$@" 2>&1); then
		echo "FAIL: $desc"
		echo "$out" | tail -20
		fails=$((fails + 1))
	else
		echo "ok: $desc"
	fi
}
for spec in none fp16 2bit 1bit type=2bit,threshold=0.25,min_size=0; do
	for n in 1 2 3 4; do
		run "$spec, $n ranks" "$B/dtrain" launch -n $n -s 0 -- \
			"$B/tests/progs/coll_check" --compression "$spec"
	done
	run "$spec, 3 ranks over sockets" "$B/dtrain" launch -n 3 -s 0 \
		--env DT_COLL_CMA=0 -- "$B/tests/progs/coll_check" --compression "$spec"
done

if [ -z "${DTRAIN_QUICK:-}" ] && [ "${B%-tsan}" != "$B" ]; then
	DTRAIN_QUICK=1 # ThreadSanitizer runs 5-15 times slower
fi
if [ -n "${DTRAIN_QUICK:-}" ]; then
	echo "training runs skipped: DTRAIN_QUICK (a ThreadSanitizer build)"
elif [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
	echo "skipped the training runs: Fashion-MNIST not installed at $DATA"
else
	M=(--model lenet --epochs 1 --limit 4096 --seed 3 --disp-batches 1000 --data "$DATA")
	for c in 2bit 1bit; do
		# (1bit's two values are computed per part of a key: equal to
		# horovod's where the servers keep each key whole, MXNet's rule;
		# 2bit's are per element, so any placement)
		P=()
		[ "$c" = 1bit ] && P=(--env DTRAIN_KV_PLACEMENT=mxnet)
		run "mnist dist_sync $c" "$B/dtrain" launch -n 2 -s 2 "${P[@]}" \
			-- "$B/examples/mnist" \
			--kvstore dist_sync "${M[@]}" --gradient-compression $c --save "$tmp/ds.params"
		run "mnist horovod $c" "$B/dtrain" launch -n 2 -s 0 -- "$B/examples/mnist" \
			--kvstore horovod "${M[@]}" --gradient-compression $c --save "$tmp/hv.params"
		if cmp -s "$tmp/ds.params" "$tmp/hv.params"; then
			echo "ok: $c: horovod and dist_sync parameters bit-identical"
		else
			echo "FAIL: $c: horovod and dist_sync differ: $("$B/dtrain" params diff "$tmp/ds.params" "$tmp/hv.params" 2>&1 | head -2)"
			fails=$((fails + 1))
		fi
	done
fi
echo "$fails failed"
[ $fails -eq 0 ]
