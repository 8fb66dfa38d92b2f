#!/bin/bash
# pipeline.sh - pipeline parallelism is exact (tests/progs/pipe_check.c):
# lenet cut into 2, 3 and 4 stages by the cut rule, one rank per stage
# under `dtrain launch -s 0`, 4 micro-batches, GPipe and 1F1B, each
# ready-first (the default) and in the strict order, two adam steps;
# every stage's parameters must equal bit for bit those of one process
# running the same micro-batches in turn, and the stash must hold M
# micro-batches at most under GPipe (1 at the last stage) and S - s under
# 1F1B (exactly that many in the strict order). Then an MLP in 4 stages
# over TCP with sgd, and hybrids of 2 stages
# x 2 and 3 replicas (data parallelism over pipelines). Then the replay of
# bench/pipeline_bench against the theoretical bubble. Then the mnist
# example in 3 and in 4 stages: its stage files, joined by `dtrain params
# join`, equal one process's file bit for bit, and in 4 stages the files
# of a ready-first run and of a strict one are the same bytes; in 3
# stages cut by measured time too. The activation slots allocated follow
# the schedule (the bench's JSON, the example's memory line).
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/coll_lib.bash"
CHECK=$BUILD/tests/progs/pipe_check

for sched in gpipe 1f1b gpipe-strict 1f1b-strict; do
	for n in 2 3 4; do
		out=$TMP/$sched$n
		start=$(now_ms)
		launch "$n" "$out" -- --schedule "$sched" --micro-batches 4
		rc=$?
		ms=$(($(now_ms) - start))
		check "$sched, $n stages: launcher exits 0 (got $rc, ${ms} ms)" \
			test "$rc" = 0
		check "$sched, $n stages: every stage identical to one process" \
			every_rank "$n" "$out" "parameters identical to one process"
		check "$sched, $n stages: every stage reports 0 failed" \
			every_rank "$n" "$out" ": 0 failed"
		check "$sched, $n stages: no FAIL line" \
			test -z "$(grep -F FAIL "$out")"
		grep -F FAIL "$out" | head -5
	done
done

# Hybrid: 2 stages x 2 replicas under both schedules, and 2 x 3 (with
# three replicas the order of the sum matters), each replica on its own
# micro-batches, the replicas of a stage summing their gradients.
for spec in "2 2 gpipe" "2 2 1f1b" "2 3 1f1b"; do
	read -r S R sched <<<"$spec"
	n=$((S * R))
	out=$TMP/hybrid$S$R$sched
	launch "$n" "$out" -- --schedule "$sched" --micro-batches 4 \
		--replicas "$R"
	rc=$?
	check "hybrid $S stages x $R replicas, $sched: launcher exits 0 (got $rc)" \
		test "$rc" = 0
	check "hybrid $S x $R, $sched: every rank identical to one process" \
		every_rank "$n" "$out" "parameters identical to one process"
	check "hybrid $S x $R, $sched: no FAIL line" \
		test -z "$(grep -F FAIL "$out")"
	grep -F FAIL "$out" | head -5
done

out=$TMP/mlp4
DTRAIN_TRANSPORT=tcp launch 4 "$out" -- --model \
	"input:20,dense:16,tanh,dense:12,relu,dense:8,tanh,dense:10,softmax_ce" \
	--schedule 1f1b --micro-batches 6 --micro-batch 3 --steps 3 \
	--optimizer sgd
rc=$?
check "mlp, 4 stages over tcp: launcher exits 0 (got $rc)" test "$rc" = 0
check "mlp, 4 stages: every stage identical to one process" \
	every_rank 4 "$out" "parameters identical to one process"
check "mlp, 4 stages: no FAIL line" test -z "$(grep -F FAIL "$out")"
grep -F FAIL "$out" | head -5

# The bench's replay: with one micro-batch the stages run one after the
# other whatever the passes cost (bubble (S-1)/S exactly), the ideal 1F1B
# of equal stages has the theoretical bubble (S-1)/(M+S-1), and the
# timeline shows stage 0 of 2 running 1F1B's order with its two waits.
for S in 2 4; do
	out=$TMP/bench$S
	timeout $((120 * T_SCALE)) "$DTRAIN" launch -n "$S" -s 0 --launcher local \
		--env DT_TEST_TAG="$TAG" -- "$BUILD/bench/pipeline_bench" \
		--width 128 --micro-batch 8 --steps 2 --max-micro 4 \
		--timeline 4 >"$out" 2>&1
	rc=$?
	check "bench, $S stages: launcher exits 0 (got $rc)" test "$rc" = 0
	one=$(awk "BEGIN { printf \"%.3f\", ($S - 1) / $S }")
	ideal=$(awk "BEGIN { printf \"%.3f\", ($S - 1) / (4 + $S - 1) }")
	check "bench, $S stages: M = 1 replays to $one under both schedules" \
		test "$(grep -c "M  1:.* $one replay ($one at mean" "$out")" = 2
	check "bench, $S stages: the ideal 1F1B at M = 4 has bubble $ideal" \
		test "$(grep -c "ideal 1F1B bubble $ideal" "$out")" = 2
done
# Activation slots by schedule (the JSON lines): with 2 stages and 4
# micro-batches, 1F1B allocates 2 at stage 0 and GPipe 4, the last stage 1.
for want in 'gpipe.*"M":4,.*"slots":\[4,1\]' '1f1b.*"M":4,.*"slots":\[2,1\]'; do
	check "bench, 2 stages: slots allocated ($want)" \
		grep -q "$want" "$TMP/bench2"
done
order=$(grep -A1 "timeline (ideal" "$TMP/bench2" | grep "stage 0:" |
	tail -1 | grep -o "F[0-9]\|B[0-9]\|idle" | tr '\n' ' ')
check "bench, 2 stages: stage 0's ideal 1F1B order (got: $order)" \
	test "$order" = "F0 F1 idle B0 F2 B1 F3 B2 idle B3 "

# The example: mnist --pipeline-stages with an explicit cut list, each
# stage saving its own parameter file.
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
	out=$TMP/mnist
	timeout $((280 * T_SCALE)) "$DTRAIN" launch -n 3 -s 0 --launcher local \
		--env DT_TEST_TAG="$TAG" -- "$BUILD/examples/mnist" \
		--pipeline-stages 3 --stages 3,7 --micro-batches 4 \
		--schedule gpipe --batch-size 32 --epochs 1 --limit 256 \
		--data "$DATA" --save "$TMP/p" >"$out" 2>&1
	rc=$?
	check "mnist, 3 stages: launcher exits 0 (got $rc)" test "$rc" = 0
	check "mnist, 3 stages: the cut list is followed" \
		grep -q "stage 1 of 3: layers \[3, 7)" "$out"
	check "mnist, 3 stages: the last stage reports the loss" \
		grep -q "epoch 0: train loss" "$out"
	check "mnist, 3 stages: each stage saved its file" \
		test -s "$TMP/p.stage0" -a -s "$TMP/p.stage1" -a -s "$TMP/p.stage2"
	# One process running the same micro-batches (one stage) ends with
	# the same bits as the three stage files joined.
	out=$TMP/mnist1
	timeout $((280 * T_SCALE)) "$BUILD/examples/mnist" --pipeline-stages 1 \
		--micro-batches 4 --schedule gpipe --batch-size 32 --epochs 1 \
		--limit 256 --data "$DATA" --save "$TMP/one" >"$out" 2>&1
	rc=$?
	check "mnist, 1 stage: exits 0 (got $rc)" test "$rc" = 0
	"$DTRAIN" params join "$TMP/joined" "$TMP/p.stage0" "$TMP/p.stage1" \
		"$TMP/p.stage2" >"$TMP/join.out" 2>&1
	rc=$?
	check "params join of the 3 stage files: exits 0 (got $rc)" \
		test "$rc" = 0
	check "mnist, 3 stages joined: bit-identical to one process" \
		cmp -s "$TMP/joined" "$TMP/one.stage0"
	"$DTRAIN" params diff "$TMP/joined" "$TMP/one.stage0" >"$TMP/diff.out" 2>&1
	check "mnist, 3 stages joined: params diff says identical" \
		grep -qx identical "$TMP/diff.out"
	"$DTRAIN" params join "$TMP/twice" "$TMP/p.stage0" "$TMP/p.stage0" \
		>"$TMP/join.out" 2>&1
	rc=$?
	check "params join: a tensor in two files is refused (exit $rc)" \
		test "$rc" = 2
	check "params join: the refusal names the tensor" \
		grep -q "the tensor 'conv0_[a-z]*' is in more than one file" \
		"$TMP/join.out"
	check "params join: nothing written when refused" \
		test ! -e "$TMP/twice"
	# Four stages (lenet's cut rule: layers 0, 3, 7 and 9) under 1F1B,
	# a few batches: the same bits as one process again.
	out=$TMP/mnist4
	timeout $((280 * T_SCALE)) "$DTRAIN" launch -n 4 -s 0 --launcher local \
		--env DT_TEST_TAG="$TAG" -- "$BUILD/examples/mnist" \
		--pipeline-stages 4 --micro-batches 4 --schedule 1f1b \
		--batch-size 32 --epochs 1 --limit 128 --data "$DATA" \
		--save "$TMP/q" >"$out" 2>&1
	rc=$?
	check "mnist, 4 stages: launcher exits 0 (got $rc)" test "$rc" = 0
	check "mnist, 4 stages: the cut rule's stage 2 is layers [7, 9)" \
		grep -q "stage 2 of 4: layers \[7, 9)" "$out"
	check "mnist, 4 stages, 1f1b: stage 0 keeps 4 micro-batches at most" \
		grep -q "stage 0: activation slots allocated 4 .*peak in flight 4 micro-batches" "$out"
	# 1F1B allocates S - s slots (the last stage one), not M.
	for st in "1 3" "2 2" "3 1"; do
		read -r i want <<<"$st"
		check "mnist, 4 stages, 1f1b: stage $i allocates $want slots" \
			grep -q "stage $i: activation slots allocated $want (" "$out"
	done
	# Ready-first may run stage 2's backward passes before a forward
	# (its gradients come back from the light last stage before the
	# heavy stage 1 sends the next activations): 2 at most, maybe 1.
	check "mnist, 4 stages, 1f1b: stage 2 keeps 2 micro-batches at most" \
		grep -q "stage 2: .*peak in flight [12] micro-batches" "$out"
	# The strict order: exactly 1F1B's S - s, and the same bytes.
	out=$TMP/mnist4s
	timeout $((280 * T_SCALE)) "$DTRAIN" launch -n 4 -s 0 --launcher local \
		--env DT_TEST_TAG="$TAG" -- "$BUILD/examples/mnist" \
		--pipeline-stages 4 --micro-batches 4 --schedule 1f1b-strict \
		--batch-size 32 --epochs 1 --limit 128 --data "$DATA" \
		--save "$TMP/qs" >"$out" 2>&1
	rc=$?
	check "mnist, 4 stages, 1f1b-strict: launcher exits 0 (got $rc)" \
		test "$rc" = 0
	check "mnist, 4 stages, 1f1b-strict: stage 2 keeps exactly 2" \
		grep -q "stage 2: .*peak in flight 2 micro-batches" "$out"
	for st in 0 1 2 3; do
		check "mnist, 4 stages: stage $st's file, ready-first = strict" \
			cmp -s "$TMP/q.stage$st" "$TMP/qs.stage$st"
	done
	timeout $((280 * T_SCALE)) "$BUILD/examples/mnist" --pipeline-stages 1 \
		--micro-batches 4 --batch-size 32 --epochs 1 --limit 128 \
		--data "$DATA" --save "$TMP/one4" >"$TMP/mnist41" 2>&1
	rc=$?
	check "mnist, 1 stage, 128 samples: exits 0 (got $rc)" test "$rc" = 0
	"$DTRAIN" params join "$TMP/joined4" "$TMP/q.stage0" "$TMP/q.stage1" \
		"$TMP/q.stage2" "$TMP/q.stage3" >"$TMP/join.out" 2>&1
	rc=$?
	check "params join of the 4 stage files: exits 0 (got $rc)" \
		test "$rc" = 0
	check "mnist, 4 stages joined: bit-identical to one process" \
		cmp -s "$TMP/joined4" "$TMP/one4.stage0"
	# The cut by measured time, 3 stages: every rank times lenet's
	# layers, rank 0 cuts and sends its cut; whatever the cut, the
	# stage files joined are one process's bits (the run of 256 samples
	# above).
	out=$TMP/mnist_measured
	timeout $((280 * T_SCALE)) "$DTRAIN" launch -n 3 -s 0 --launcher local \
		--env DT_TEST_TAG="$TAG" -- "$BUILD/examples/mnist" \
		--pipeline-stages 3 --stages measured --micro-batches 4 \
		--batch-size 32 --epochs 1 --limit 256 --data "$DATA" \
		--save "$TMP/me" >"$out" 2>&1
	rc=$?
	check "mnist, measured cut: launcher exits 0 (got $rc)" test "$rc" = 0
	check "mnist, measured cut: printed once, with each stage's time" \
		test "$(grep -c "measured cut (median over 3 ranks.*stage 2 [0-9.]* ms$" "$out")" = 1
	read -r c1 c2 <<<"$(sed -n 's/.*stages start at layers 0 \([0-9]*\) \([0-9]*\) (of 10).*/\1 \2/p' "$out")"
	check "mnist, measured cut: stage 0 follows rank 0's cut ($c1, $c2)" \
		grep -q "stage 0 of 3: layers \[0, $c1)" "$out"
	check "mnist, measured cut: stage 1 follows rank 0's cut" \
		grep -q "stage 1 of 3: layers \[$c1, $c2)" "$out"
	check "mnist, measured cut: stage 2 follows rank 0's cut" \
		grep -q "stage 2 of 3: layers \[$c2, 10)" "$out"
	"$DTRAIN" params join "$TMP/joinedm" "$TMP/me.stage0" "$TMP/me.stage1" \
		"$TMP/me.stage2" >"$TMP/join.out" 2>&1
	check "mnist, measured cut joined: bit-identical to one process" \
		cmp -s "$TMP/joinedm" "$TMP/one.stage0"
	# Two pipelines of 2 stages on their halves of each global batch.
	out=$TMP/mnist_hybrid
	timeout $((280 * T_SCALE)) "$DTRAIN" launch -n 4 -s 0 --launcher local \
		--env DT_TEST_TAG="$TAG" -- "$BUILD/examples/mnist" \
		--pipeline-stages 2 --micro-batches 4 --batch-size 32 \
		--epochs 1 --limit 512 --data "$DATA" --save "$TMP/h" \
		>"$out" 2>&1
	rc=$?
	check "mnist, 2 stages x 2 replicas: launcher exits 0 (got $rc)" \
		test "$rc" = 0
	check "mnist, 2 x 2: rank 3 is stage 1 of replica 1" \
		grep -q "stage 1 of 2 (replica 1 of 2)" "$out"
	check "mnist, 2 x 2: replica 0's last stage reports the loss" \
		grep -q "epoch 0: train loss .* (replica 0's batches)" "$out"
	check "mnist, 2 x 2: replica 0 saved each stage's file" \
		test -s "$TMP/h.stage0" -a -s "$TMP/h.stage1"
	out=$TMP/mnist_odd
	timeout $((280 * T_SCALE)) "$DTRAIN" launch -n 3 -s 0 --launcher local \
		--env DT_TEST_TAG="$TAG" -- "$BUILD/examples/mnist" \
		--pipeline-stages 2 --limit 64 --data "$DATA" >"$out" 2>&1
	rc=$?
	check "mnist: 3 workers for 2 stages are refused (exit $rc)" \
		test "$rc" != 0
	check "mnist: the refusal names a multiple of the stages" \
		grep -q "needs a multiple of 2 workers" "$out"
	out=$TMP/mnist_bad
	"$BUILD/examples/mnist" --pipeline-stages 2 --micro-batches 5 \
		--batch-size 32 >"$out" 2>&1
	check "mnist: micro-batches not dividing the batch are refused" \
		grep -q "micro-batches dividing --batch-size" "$out"
else
	echo "skipped the mnist part: Fashion-MNIST not installed at $DATA"
fi

finish
