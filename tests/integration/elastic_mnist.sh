#!/bin/bash
# elastic_mnist.sh - examples/mnist --elastic (docs/elastic.md): 3 workers
# of an MLP on Fashion-MNIST, one killed from outside (SIGKILL) once the
# job has committed a few steps. The job ends 0 with 2 workers, and the
# replay its log gives (DTRAIN_ELASTIC_SCHEDULE) ends with the same
# parameters, bit for bit, without a kill.
. "$(dirname "$0")/coll_lib.bash"
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
	echo "skipped: Fashion-MNIST not installed at $DATA (Debian's dataset-fashion-mnist)"
	exit 0
fi
S=${DT_TEST_TIME_SCALE:-1}
EX=$BUILD/examples/mnist
ARGS=(--kvstore horovod --optimizer sgd --lr 0.05 --elastic --model mlp
	--limit 3000 --epochs 4 --batch-size 32 --commit-every 10 --data "$DATA")

# wait_line FILE PATTERN SECONDS: poll FILE for PATTERN until the deadline.
wait_line() {
	local end=$((SECONDS + $3 * S))
	until grep -Eq -- "$2" "$1" 2>/dev/null; do
		[ $SECONDS -ge $end ] && return 1
		sleep 0.05
	done
}

out=$TMP/kill
DT_TEST_TAG=$TAG timeout $((300 * S)) "$DTRAIN" launch -v -n 3 -s 0 \
	--min-workers 2 -- "$EX" "${ARGS[@]}" --save "$TMP/kill.params" \
	>"$out" 2>&1 &
job=$!
if wait_line "$out" "committed step 20$" 120; then
	pid=$(sed -n 's/.*started worker 1 (pid \([0-9]*\)).*/\1/p' "$out" | head -n 1)
	check "worker 1's pid is known" test -n "$pid"
	[ -n "$pid" ] && kill -9 "$pid"
else
	fail "the job did not commit step 20 in time"
fi
wait $job
rc=$?
check "a worker killed: the job ends 0 (got $rc)" test "$rc" = 0
check "the launcher goes on" grep -q "the elastic job goes on without it" "$out"
check "the survivors name the change" \
	grep -q "rank [0-9] left (membership 0 -> 1)" "$out"
sched=$(grep -o 'DTRAIN_ELASTIC_SCHEDULE="[^"]*"' "$out" | tail -n 1 |
	sed 's/^DTRAIN_ELASTIC_SCHEDULE="//; s/"$//')
check "the change is logged with its replay ('$sched')" \
	grep -Eq '^step [0-9]+: -worker [0-2]$' <<<"$sched"

out=$TMP/replay
DTRAIN_ELASTIC_SCHEDULE=$sched DT_TEST_TAG=$TAG timeout $((300 * S)) \
	"$DTRAIN" launch -n 3 -s 0 --min-workers 2 -- "$EX" "${ARGS[@]}" \
	--save "$TMP/replay.params" >"$out" 2>&1
rc=$?
check "replay: ends 0 (got $rc)" test "$rc" = 0
check "replay: nothing killed" test -z "$(grep "killed by signal" "$out")"
check "replay: parameters bit-identical to the killed run" \
	cmp "$TMP/kill.params" "$TMP/replay.params"
finish
