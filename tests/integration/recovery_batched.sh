#!/usr/bin/env bash
# recovery_batched.sh - recovery (docs/fault-tolerance.md) of batched calls
# and of mnist, the half of recovery.sh's cases that train longest (two
# tests, so that CTest can run them side by side):
#   - batched calls, batched under recovery in dist_sync (the many-key
#     store), kv_check ckpt: values bit-identical after a server kill at a
#     random step, before any checkpoint, with messages dropped
#     (PS_RESEND=1 PS_DROP_MSG=5), and after a worker kill (the new one
#     resumes the many-key store's keys);
#   - mnist (single-key pushes on keys of a batched init) in dist_sync:
#     parameters bit-identical after a server kill, again with
#     DTRAIN_RECOVER_BATCHED=0 (key by key) with a checkpoint and before
#     any, after a worker kill, and with 2bit pushes and fp16 pulls.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/recovery_lib.bash"

# Batched calls, batched under recovery in dist_sync (the many-key
# store): kv_check ckpt with 3000
# one-float keys in a run and 750 keys of 3 floats, all pushpulled in two
# batched calls a step; the values' hash at the end is the undisturbed
# run's, with a server killed at a random step, before any checkpoint
# (everything sent again: the init, then each worker's pushes back to
# back, which the new server takes round by round), and with messages
# dropped and sent again; and with a worker killed at a random step
# instead (the new one resumes at the step its predecessor reached, its
# batched calls key by key until every held push and the pull as of that
# step are done).
export MXNET_KVSTORE_BIGARRAY_BOUND=1000
MK=("$B/tests/progs/kv_check" ckpt 0 1000)
ME=(--env KV_CHECK_MANY=3000 --env KV_CHECK_PROGRESS=1)
hash_end() { grep -o "kv_check ckpt at step 1000: [0-9a-f]*" "$tmp/$1.log"; }
timeout $((200 * T_SCALE)) "$B/dtrain" launch -n 2 -s 2 "${ME[@]}" -- "${MK[@]}" >"$tmp/many_ref.log" 2>&1 || fail "batched reference run"
[ -n "$(hash_end many_ref)" ] || fail "batched reference run: no hash"
st=$((20 + RANDOM % 100)) srv=$((RANDOM % 2))
killed many server $srv "kv_check ckpt step $st done" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 10 \
	"${ME[@]}" -- "${MK[@]}"
must_pass many
grep -q "\[server $srv\] restored checkpoint #[0-9]* from .* 18[78][0-9] many-key keys" "$tmp/many.log" ||
	fail "batched: no many-key store restored"
[ "$(hash_end many)" = "$(hash_end many_ref)" ] || fail "batched: '$(hash_end many)' after the kill, '$(hash_end many_ref)' without"
echo "batched calls, server $srv killed after step $st: $(grep -o 'restored checkpoint #[0-9]*' "$tmp/many.log"), values identical"
rm -rf "$tmp/ck"
killed many0 server 0 "kv_check ckpt step 40 done" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 1000000 \
	"${ME[@]}" -- "${MK[@]}"
must_pass many0
grep -q "no checkpoint in $tmp/ck yet: starting empty" "$tmp/many0.log" || fail "batched: the new server did not start empty"
[ "$(hash_end many0)" = "$(hash_end many_ref)" ] || fail "batched from nothing: '$(hash_end many0)', '$(hash_end many_ref)' without"
echo "batched calls, server 0 killed before any checkpoint: everything sent again, values identical"
rm -rf "$tmp/ck"
killed many_resend server 1 "kv_check ckpt step 50 done" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 10 \
	--env PS_RESEND=1 --env PS_RESEND_TIMEOUT=20 --env PS_DROP_MSG=5 "${ME[@]}" -- "${MK[@]}"
must_pass many_resend
[ "$(hash_end many_resend)" = "$(hash_end many_ref)" ] || fail "batched with PS_DROP_MSG: '$(hash_end many_resend)', '$(hash_end many_ref)' without"
echo "batched calls with PS_RESEND=1 PS_DROP_MSG=5, server 1 killed: values identical"
rm -rf "$tmp/ck"
st=$((20 + RANDOM % 100)) wr=$((RANDOM % 2))
killed many_w worker $wr "kv_check ckpt step $st done" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 10 \
	"${ME[@]}" -- "${MK[@]}"
must_pass many_w
grep -q "kv_check ckpt: resuming at step [1-9]" "$tmp/many_w.log" || fail "batched: the new worker did not resume"
[ "$(hash_end many_w)" = "$(hash_end many_ref)" ] || fail "batched, worker $wr killed: '$(hash_end many_w)', '$(hash_end many_ref)' without"
echo "batched calls, worker $wr killed after step $st: $(grep -o 'resuming at step [0-9]*' "$tmp/many_w.log"), values identical"
rm -rf "$tmp/ck"
unset MXNET_KVSTORE_BIGARRAY_BOUND

# mnist, dist_sync
if [ -z "${DTRAIN_QUICK:-}" ] && [ "${B%-tsan}" != "$B" ]; then
	DTRAIN_QUICK=1 # ThreadSanitizer runs 5-15 times slower
fi
if [ -n "${DTRAIN_QUICK:-}" ]; then
	echo "mnist case skipped: DTRAIN_QUICK (a ThreadSanitizer build)"
elif [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
	# (under a sanitizer half as long: 48 batches a worker, the kill
	# after batch 16 or 32)
	limit=6144 kills=3
	[ -z "${DT_TEST_SANITIZE:-}" ] || limit=3072 kills=2
	M=(--kvstore dist_sync --model lenet --epochs 1 --limit $limit --seed 7 --disp-batches 16 --optimizer sgd
		--lr 0.05 --momentum 0.9 --batch-size 32 --data "$DATA")
	timeout $((200 * T_SCALE)) "$B/dtrain" launch -n 2 -s 2 -- "$B/examples/mnist" "${M[@]}" --save "$tmp/ref.params" \
		>"$tmp/m_ref.log" 2>&1 || fail "mnist reference run"
	k=$((16 * (1 + RANDOM % kills)))
	killed mnist server 0 "Batch \[$((k - 16))-$k\]" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 10 \
		-- "$B/examples/mnist" "${M[@]}" --save "$tmp/killed.params"
	must_pass mnist
	grep -q "sending [0-9]* requests again to server 0" "$tmp/mnist.log" || fail "mnist: nothing sent again"
	cmp -s "$tmp/ref.params" "$tmp/killed.params" ||
		fail "mnist: parameters differ ($("$B/dtrain" params diff "$tmp/ref.params" "$tmp/killed.params"))"
	echo "mnist, server 0 killed after batch $k: parameters bit-identical"
	rm -rf "$tmp/ck"
	# The same with its batched init sent key by key
	# (DTRAIN_RECOVER_BATCHED=0: its layers' keys in the dense store; by
	# default they are in the many-key store, pushed by single-key calls
	# during backward), killed with a checkpoint and before any.
	for ev in 10 1000000; do
		killed mnist_b$ev server 0 "Batch \[$((k - 16))-$k\]" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" \
			--checkpoint-every $ev --env DTRAIN_RECOVER_BATCHED=0 -- "$B/examples/mnist" "${M[@]}" --save "$tmp/b$ev.params"
		must_pass mnist_b$ev
		cmp -s "$tmp/ref.params" "$tmp/b$ev.params" ||
			fail "mnist, batched init key by key: parameters differ ($("$B/dtrain" params diff "$tmp/ref.params" "$tmp/b$ev.params"))"
		rm -rf "$tmp/ck"
	done
	echo "mnist with DTRAIN_RECOVER_BATCHED=0 (keys in the dense store), server 0 killed after batch $k, with a checkpoint and before any: parameters bit-identical"
	wr=$((RANDOM % 2))
	killed mnist_w worker $wr "Batch \[$((k - 16))-$k\]" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 10 \
		-- "$B/examples/mnist" "${M[@]}" --save "$tmp/wkilled.params"
	must_pass mnist_w
	grep -q "mnist: worker $wr took a lost worker's place; resuming at step [1-9]" "$tmp/mnist_w.log" ||
		fail "mnist: the new worker did not resume"
	cmp -s "$tmp/ref.params" "$tmp/wkilled.params" ||
		fail "mnist, worker killed: parameters differ ($("$B/dtrain" params diff "$tmp/ref.params" "$tmp/wkilled.params"))"
	echo "mnist, worker $wr killed after batch $k: $(grep -o 'resuming at step [0-9]*' "$tmp/mnist_w.log"), parameters bit-identical"
	rm -rf "$tmp/ck"
	# The same with compressed pushes and fp16 pulls: the workers send
	# again the compressed bodies they kept (their residuals moved on
	# once, as in the undisturbed run).
	C=(--gradient-compression type=2bit,threshold=0.5,min_size=0 --pull-precision fp16)
	timeout $((200 * T_SCALE)) "$B/dtrain" launch -n 2 -s 2 -- "$B/examples/mnist" "${M[@]}" "${C[@]}" \
		--save "$tmp/cref.params" >"$tmp/mc_ref.log" 2>&1 || fail "compressed mnist reference run"
	killed mnist_comp server 1 "Batch \[$((k - 16))-$k\]" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" \
		--checkpoint-every 10 -- "$B/examples/mnist" "${M[@]}" "${C[@]}" --save "$tmp/ckilled.params"
	must_pass mnist_comp
	cmp -s "$tmp/cref.params" "$tmp/ckilled.params" ||
		fail "compressed mnist: parameters differ ($("$B/dtrain" params diff "$tmp/cref.params" "$tmp/ckilled.params"))"
	echo "mnist with 2bit pushes and fp16 pulls, server 1 killed after batch $k: parameters bit-identical"
	rm -rf "$tmp/ck"
else
	echo "mnist case skipped: Fashion-MNIST not installed at $DATA"
fi
left && fail "processes left behind"

left && fail "processes left behind"
echo "ok"
