#!/usr/bin/env bash
# checkpoint.sh - server checkpoints (docs/fault-tolerance.md), through
# `dtrain launch` with 2 servers and 2 workers:
#   - dt_kv_checkpoint writes each server's file; a job started from them
#     (DTRAIN_CHECKPOINT_LOAD=1) resumes bit for bit: values and the sgd
#     momentum of single keys and of keys of batched calls (the many-key
#     store; kv_check ckpt hashes the weights at each step);
#   - a job started from them under another key placement
#     (DTRAIN_KV_PLACEMENT) or with another server count is refused,
#     naming both;
#   - a corrupt (a byte flipped) and a truncated newest file are named at
#     load, and the previous checkpoint is used; with both files damaged
#     the server fails naming both, and the job ends with nothing left;
#   - `dtrain checkpoint show` says what a good file holds, and names the
#     fault of a damaged one (exit 1);
#   - periodic checkpoints (--checkpoint-every) of a short mnist run leave
#     the trained parameters bit-identical to the run without them;
#   - dt_kv_checkpoint without DTRAIN_CHECKPOINT_DIR, and a directory that
#     cannot be written, are refused with the reason.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
set -u
. "$(dirname "$0")/job_lib.bash"
B=${DTRAIN_BUILD:?}
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export MXNET_KVSTORE_BIGARRAY_BOUND=1000 # key 2 is split over both servers
CK="$tmp/ck"
# Every process of this test's jobs carries TAG in its environment: other
# tests run kv_check beside this one from the same build.
TAG="DT_CHECKPOINT_TEST=$tmp"
ours() { tagged_pids "$B/" "$TAG"; } # this test's processes
L=("$B/dtrain" launch -n 2 -s 2 --checkpoint-dir "$CK" --checkpoint-every 0 --env "$TAG" --env KV_CHECK_MANY=300)

run() { # name args...: a launch that must succeed
	local name=$1 rc=0
	shift
	run_job 200 "$tmp/$name.log" 20 "$@" || { rc=$?; fail "$name exited $rc"; }
}
at() { sed -n "s/.*kv_check ckpt \(checkpoint \)\{0,1\}at step $2: \([0-9a-f]*\)$/\2/p" "$tmp/$1.log" | head -1; }

run save "${L[@]}" -- "$B/tests/progs/kv_check" ckpt 0 9 3,6
s3=$(at save 3) s6=$(at save 6) s9=$(at save 9)
[ -n "$s3" ] && [ -n "$s6" ] && [ -n "$s9" ] || { cat "$tmp/save.log"; fail "no hashes from the first job"; }
for r in 0 1; do
	[ -f "$CK/server-$r.ckpt" ] && [ -f "$CK/server-$r.ckpt.prev" ] || fail "server $r: no checkpoint and previous one"
	"$B/dtrain" checkpoint show "$CK/server-$r.ckpt" >"$tmp/show.out" 2>&1 || { cat "$tmp/show.out"; fail "checkpoint show"; }
	grep -q "server $r of 2, 2 workers, dist_sync, optimizer sgd, checkpoint #2" "$tmp/show.out" ||
		{ cat "$tmp/show.out"; fail "checkpoint show: unexpected summary"; }
	grep -q "0 row tables, 18[78] many-key keys, [0-9]* floats, placement balanced (arrays of 1000 floats and more cut; format version 3)" "$tmp/show.out" ||
		{ cat "$tmp/show.out"; fail "checkpoint show: the many-key keys are not in the file"; }
done
ls -a "$CK" | grep -q tmp && fail "a temporary file was left in $CK"
echo "saved: step 3 $s3, step 6 $s6, step 9 $s9"

# Resume from the newest files (step 6).
run resume6 "${L[@]}" --env DTRAIN_CHECKPOINT_LOAD=1 -- "$B/tests/progs/kv_check" ckpt 6 9
[ "$(at resume6 6)" = "$s6" ] || fail "resumed at step 6 with $(at resume6 6), saved $s6"
[ "$(at resume6 9)" = "$s9" ] || fail "resumed job ended with $(at resume6 9), the first $s9"
grep -q "restored checkpoint #2 from $CK/server-0.ckpt: .* 188 many-key keys" "$tmp/resume6.log" || fail "no restore logged"
echo "resumed from the newest checkpoints: identical at steps 6 and 9"

# The files record the key placement and the server count: a job started
# from them under another placement, or with another number of servers,
# is refused with both named (its servers' slices would not be the keys'
# slices the workers compute), and ends with nothing left.
if timeout $((100 * T_SCALE)) "${L[@]}" --env DTRAIN_CHECKPOINT_LOAD=1 --env DTRAIN_KV_PLACEMENT=mxnet \
	-- "$B/tests/progs/kv_check" ckpt 6 9 >"$tmp/place.log" 2>&1; then
	fail "a job under another placement started from the checkpoints"
fi
grep -q "\[server 0\] .*$CK/server-0.ckpt was written under key placement balanced (arrays of 1000 floats and more cut over the servers); this job's is mxnet (1000 floats)" "$tmp/place.log" ||
	{ grep server "$tmp/place.log" | tail -3; fail "another placement: not named"; }
if timeout $((100 * T_SCALE)) "$B/dtrain" launch -n 2 -s 3 --checkpoint-dir "$CK" --checkpoint-every 0 --env "$TAG" --env KV_CHECK_MANY=300 \
	--env DTRAIN_CHECKPOINT_LOAD=1 -- "$B/tests/progs/kv_check" ckpt 6 9 >"$tmp/three.log" 2>&1; then
	fail "a job of 3 servers started from the checkpoints of 2"
fi
grep -q "\[server 0\] .*$CK/server-0.ckpt is server 0's of a job of 2 servers and 2 workers; this is server 0 of 3 and 2" "$tmp/three.log" ||
	{ grep server "$tmp/three.log" | tail -3; fail "another server count: not named"; }
[ -z "$(ours)" ] || fail "processes left behind"
echo "another placement (mxnet) and another server count (3): refused, both named"

# Damage the newest files: one byte flipped on server 0, the end cut off
# on server 1. Each is named; the previous ones (step 3) are used.
cp -a "$CK" "$tmp/ck.good"
printf '\x55' | dd of="$CK/server-0.ckpt" bs=1 seek=200 conv=notrunc 2>/dev/null
truncate -s -100 "$CK/server-1.ckpt"
if "$B/dtrain" checkpoint show "$CK/server-0.ckpt" "$CK/server-1.ckpt" >"$tmp/show.out" 2>&1; then
	fail "checkpoint show accepted damaged files"
fi
grep -q "server-0.ckpt: checksum mismatch" "$tmp/show.out" && grep -q "server-1.ckpt: truncated" "$tmp/show.out" ||
	{ cat "$tmp/show.out"; fail "checkpoint show did not name the faults"; }
run resume3 "${L[@]}" --env DTRAIN_CHECKPOINT_LOAD=1 -- "$B/tests/progs/kv_check" ckpt 3 9
grep -q "\[server 0\] $CK/server-0.ckpt: checksum mismatch .*trying the previous checkpoint" "$tmp/resume3.log" ||
	{ grep server "$tmp/resume3.log"; fail "the corrupt file was not named"; }
grep -q "\[server 1\] $CK/server-1.ckpt: truncated .*trying the previous checkpoint" "$tmp/resume3.log" ||
	{ grep server "$tmp/resume3.log"; fail "the truncated file was not named"; }
grep -q "restored checkpoint #1 from $CK/server-1.ckpt.prev" "$tmp/resume3.log" || fail "previous checkpoint not used"
[ "$(at resume3 3)" = "$s3" ] || fail "resumed at step 3 with $(at resume3 3), saved $s3"
[ "$(at resume3 9)" = "$s9" ] || fail "resumed job ended with $(at resume3 9), the first $s9"
echo "corrupt and truncated newest files named; resumed from the previous ones: identical at steps 3 and 9"

# Both files of server 0 damaged: a clear error, the job ends.
printf '\x55' | dd of="$CK/server-0.ckpt.prev" bs=1 seek=300 conv=notrunc 2>/dev/null
if timeout $((100 * T_SCALE)) "${L[@]}" --env DTRAIN_CHECKPOINT_LOAD=1 -- "$B/tests/progs/kv_check" ckpt 3 9 >"$tmp/bad.log" 2>&1; then
	fail "a job started from damaged checkpoints only"
fi
grep -q "\[server 0\] dtrain server: no usable checkpoint: $CK/server-0.ckpt: checksum mismatch.*; $CK/server-0.ckpt.prev: checksum mismatch" "$tmp/bad.log" ||
	{ tail "$tmp/bad.log"; fail "no error naming both damaged files"; }
[ -z "$(ours)" ] || fail "processes left behind"
echo "both files damaged: the server names both and the job ends"

# Refusals.
if timeout $((100 * T_SCALE)) "$B/dtrain" launch -n 2 -s 2 -- "$B/tests/progs/kv_check" ckpt 0 2 1 >"$tmp/nodir.log" 2>&1; then
	fail "dt_kv_checkpoint without DTRAIN_CHECKPOINT_DIR succeeded"
fi
grep -q "checkpoint: server [01] has no DTRAIN_CHECKPOINT_DIR" "$tmp/nodir.log" || { tail "$tmp/nodir.log"; fail "no reason without a directory"; }
touch "$tmp/file"
if timeout $((100 * T_SCALE)) "$B/dtrain" launch -n 1 -s 1 --checkpoint-dir "$tmp/file" -- "$B/tests/progs/kv_check" ckpt 0 1 >"$tmp/notdir.log" 2>&1; then
	fail "a checkpoint directory that is a file was accepted"
fi
grep -q "DTRAIN_CHECKPOINT_DIR $tmp/file: not a writable directory" "$tmp/notdir.log" || { tail "$tmp/notdir.log"; fail "no reason for a bad directory"; }
echo "refused: no directory, a file as directory"

# Periodic checkpoints change nothing in the result.
if [ -z "${DTRAIN_QUICK:-}" ] && [ "${B%-tsan}" != "$B" ]; then
	DTRAIN_QUICK=1 # ThreadSanitizer runs 5-15 times slower
fi
if [ -n "${DTRAIN_QUICK:-}" ]; then
	echo "mnist case skipped: DTRAIN_QUICK (a ThreadSanitizer build)"
elif [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
	unset MXNET_KVSTORE_BIGARRAY_BOUND
	M=(--kvstore dist_sync --model lenet --epochs 1 --limit 2048 --seed 7 --optimizer sgd
		--lr 0.05 --momentum 0.9 --batch-size 32 --data "$DATA")
	run m_ref "$B/dtrain" launch -n 2 -s 2 -- "$B/examples/mnist" "${M[@]}" --save "$tmp/ref.params"
	run m_ck "$B/dtrain" launch -n 2 -s 2 --checkpoint-dir "$tmp/mck" --checkpoint-every 8 --env PS_VERBOSE=1 \
		-- "$B/examples/mnist" "${M[@]}" --save "$tmp/ck.params"
	cmp -s "$tmp/ref.params" "$tmp/ck.params" || fail "mnist: checkpoints changed the parameters"
	n=$(grep -c "checkpoint #[0-9]*: [0-9]* bytes" "$tmp/m_ck.log")
	[ "$n" -ge 4 ] || fail "mnist: only $n checkpoints written"
	"$B/dtrain" checkpoint show "$tmp/mck/server-0.ckpt" "$tmp/mck/server-1.ckpt" || fail "mnist checkpoints unreadable"
	echo "mnist with a checkpoint every 8 steps ($n files written): parameters bit-identical"
else
	echo "mnist case skipped: Fashion-MNIST not installed at $DATA"
fi
echo "ok"
