#!/bin/bash
# pipeline.sh - pipeline parallelism is exact (tests/progs/pipe_check.c):
# lenet cut into 2 and 3 stages by the cut rule, one rank per stage under
# `dtrain launch -s 0`, 4 micro-batches, GPipe and 1F1B, two adam steps;
# every stage's parameters must equal bit for bit those of one process
# running the same micro-batches in turn, and the stash must hold M
# micro-batch inputs at most under GPipe and S - s under 1F1B. Then an MLP
# in 4 stages over TCP with sgd.
. "$(dirname "$0")/coll_lib.bash"
CHECK=$BUILD/tests/progs/pipe_check

for sched in gpipe 1f1b; do
	for n in 2 3; do
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

finish
