#!/usr/bin/env bash
# sparse_recovery.sh - row_sparse tables survive a lost server: a server
# killed with SIGKILL in the middle of training is restarted (`dtrain
# launch --restart 1`, docs/fault-tolerance.md), loads its last checkpoint
# (its part of the table, with each worker's pushes in it), and the workers
# send again what the checkpoint does not hold:
#   - sparse_linear in dist_sync: the table saved at the end (--save) is
#     bit-identical to the undisturbed run's, with a server killed after a
#     random progress line, killed before any checkpoint (the new server
#     starts empty: the table's init and every push come again), and with
#     messages dropped and sent again (PS_RESEND=1 PS_DROP_MSG=5);
#   - sparse_linear in dist_sync with a worker killed instead: the new
#     worker resumes at the step its predecessor reached, and the table is
#     bit-identical again;
#   - kv_rows async (dist_async): every row push applied exactly once.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
set -u
. "$(dirname "$0")/job_lib.bash"
B=${DTRAIN_BUILD:?}
tmp=$(mktemp -d)
trap 'for p in $(ours); do kill -9 "$p"; done 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Every process of this test's jobs carries TAG in its environment: other
# tests run beside this one from the same build.
TAG="DT_SPARSE_RECOVERY_TEST=$tmp"
ours() { tagged_pids "$B/" "$TAG"; }
KILL_JOB_LIMIT=250 KILL_WAIT=60
. "$(dirname "$0")/kill_lib.bash"
# same NAME: its table file equals the undisturbed run's, bit for bit
same() {
	cmp -s "$tmp/ref.params" "$tmp/$1.params" ||
		fail "$1: tables differ ($("$B/dtrain" params diff "$tmp/ref.params" "$tmp/$1.params" 2>&1 | head -3))"
}
left() { [ -n "$(ours)" ]; }

R=(--restart 1 --checkpoint-dir "$tmp/ck" --env "$TAG")
S=("$B/examples/sparse_linear" --kvstore dist_sync --train 40000 --test 2000 --epochs 2 --disp-batches 10)

timeout $((250 * T_SCALE)) "$B/dtrain" launch -n 2 -s 2 --env "$TAG" -- "${S[@]}" --save "$tmp/ref.params" \
	>"$tmp/ref.log" 2>&1 || { tail "$tmp/ref.log"; fail "sparse_linear reference run"; }

# A server killed after a random progress line, checkpoints every 10 rounds.
# (Not at the first line, batch 10: the first checkpoint is written then,
# on a thread of its own, and a kill that beats it leaves the new server
# nothing to restore; the case below kills a server before any.)
b=$((10 * (2 + RANDOM % 2)))
srv=$((RANDOM % 2))
killed sync server $srv "Epoch\[0\] Batch \[$((b - 10))-$b\]" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" \
	--checkpoint-every 10 -- "${S[@]}" --save "$tmp/sync.params"
must_pass sync
grep -q "restored checkpoint #[0-9]*.* 1 row tables" "$tmp/sync.log" || fail "sync: no table restored"
grep -q "sending [0-9]* requests again to server $srv" "$tmp/sync.log" || fail "sync: nothing sent again"
same sync
echo "sparse_linear dist_sync, server $srv killed after batch $b: $(grep -o 'restored checkpoint #[0-9]*' "$tmp/sync.log"), table bit-identical"
rm -rf "$tmp/ck"

# Killed before any checkpoint: the new server starts empty, and the
# table's init (rank 0's) and every push come again.
killed empty server 0 "Epoch\[0\] Batch \[0-10\]" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" \
	--checkpoint-every 1000000 -- "${S[@]}" --save "$tmp/empty.params"
must_pass empty
grep -q "no checkpoint in $tmp/ck yet: starting empty" "$tmp/empty.log" || fail "empty: the new server did not start empty"
same empty
echo "sparse_linear dist_sync, server 0 killed before any checkpoint: everything sent again, table bit-identical"
rm -rf "$tmp/ck"

# The same with messages dropped and sent again.
killed resend server 1 "Epoch\[0\] Batch \[10-20\]" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" \
	--checkpoint-every 10 --env PS_RESEND=1 --env PS_RESEND_TIMEOUT=20 --env PS_DROP_MSG=5 \
	-- "${S[@]}" --save "$tmp/resend.params"
must_pass resend
same resend
echo "sparse_linear dist_sync with PS_RESEND=1 PS_DROP_MSG=5, server 1 killed: table bit-identical"
rm -rf "$tmp/ck"

# A worker killed instead: the new process resumes the table where its
# predecessor stopped (the pushes the servers hold are not sent again, its
# first pull gets the rows as of the step it resumes at).
wr=$((RANDOM % 2))
e=$((RANDOM % 2))
b=$((10 * (1 + RANDOM % 2)))
killed worker worker $wr "Epoch\[$e\] Batch \[$((b - 10))-$b\]" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" \
	--checkpoint-every 10 -- "${S[@]}" --save "$tmp/worker.params"
must_pass worker
grep -q "\[worker $wr\] sparse_linear: worker $wr took a lost worker's place; resuming at step [1-9]" "$tmp/worker.log" ||
	fail "worker: the new worker did not resume"
same worker
echo "sparse_linear dist_sync, worker $wr killed after epoch $e's batch $b: $(grep -o 'resuming at step [0-9]*' "$tmp/worker.log"), table bit-identical"
rm -rf "$tmp/ck"

# dist_async: every push applied once (kv_rows counts them). The kill comes
# after the 3rd checkpoint or any later one (one due while the writer is
# busy replaces the one not yet begun, so a number may be skipped), while
# worker 0 holds halfway through its pushes (KV_ROWS_HOLD): on a busy
# machine the checkpoint's line can come after every push was made, and a
# worker that is done sends nothing again.
KV_ROWS_HOLD=$tmp/go MXNET_KVSTORE_BIGARRAY_BOUND=64 KV_ROWS_PUSHES=3000 \
	killed_held async server 0 "\[server 0\] checkpoint #\([3-9]\|[1-9][0-9][0-9]*\):" "$tmp/go" \
	"$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 200 --env PS_VERBOSE=1 -- "$B/tests/progs/kv_rows" async
must_pass async
[ "$(grep -c "kv_rows async: 3000 pushes from each of 2 workers" "$tmp/async.log")" = 2 ] ||
	{ grep "kv_rows FAILED" "$tmp/async.log" | head -3; tail -5 "$tmp/async.log"; fail "dist_async: a push lost or applied twice"; }
grep -q "\[server 0\] every worker has sent again what server 0 lacked" "$tmp/async.log" ||
	fail "dist_async: the new server did not hear the end of every replay"
echo "kv_rows async (dist_async), server 0 killed after its 3rd checkpoint: every row push applied exactly once"
rm -rf "$tmp/ck"
left && fail "processes left behind: $(ours)"
echo "ok"
