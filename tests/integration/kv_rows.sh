#!/usr/bin/env bash
# Row-sparse tables end to end through the launcher (kv_rows.c): exact
# sums for 1, 2 and 4 workers x 1, 2 and 3 servers (tables split by row
# range and whole, rows at the edges of each server's range, rows pushed
# by several workers, empty pushes, push and pushpull); dist_async (rank 0
# progresses alone, every push applied once); lazy adam on the servers
# equal bit for bit to one process; 2bit compression's residual per row;
# every refusal named with nothing changed; tables kept in server
# checkpoints; and the local store.
set -u
. "$(dirname "$0")/job_lib.bash"
B=${DTRAIN_BUILD:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check_out() {
	local desc=$1
	if grep -q "kv_rows FAILED" "$tmp/out.log"; then
		grep "kv_rows FAILED" "$tmp/out.log" | head -5
		echo "FAIL: $desc"
		fails=$((fails + 1))
	else
		echo "ok: $desc: $(grep -m1 -o 'kv_rows [a-z]*: .*' "$tmp/out.log")"
	fi
}
run() {
	local desc=$1
	shift
	if ! run_job 120 "$tmp/out.log" 20 "$@"; then
		echo "FAIL: $desc"
		fails=$((fails + 1))
	else
		check_out "$desc"
	fi
}
export MXNET_KVSTORE_BIGARRAY_BOUND=64
for w in 1 2 4; do
	for s in 1 2 3; do
		run "sum w=$w s=$s" "$B/dtrain" launch -n $w -s $s -- "$B/tests/progs/kv_rows" sum
	done
done
run "async w=3 s=2" "$B/dtrain" launch -n 3 -s 2 -- "$B/tests/progs/kv_rows" async
run "async w=2 s=1" "$B/dtrain" launch -n 2 -s 1 -- "$B/tests/progs/kv_rows" async
run "adam w=3 s=2" "$B/dtrain" launch -n 3 -s 2 -- "$B/tests/progs/kv_rows" adam dist_sync
run "adam w=1 s=1" "$B/dtrain" launch -n 1 -s 1 -- "$B/tests/progs/kv_rows" adam dist_sync
run "2bit w=2 s=3" "$B/dtrain" launch -n 2 -s 3 -- "$B/tests/progs/kv_rows" comp
run "errors w=2 s=2" "$B/dtrain" launch -n 2 -s 2 -- "$B/tests/progs/kv_rows" errors
# fp16 answers: the sums are small integers, exact in half precision
DTRAIN_TEST_PULL_FP16=1 run "sum, fp16 answers w=2 s=2" "$B/dtrain" launch -n 2 -s 2 -- "$B/tests/progs/kv_rows" sum
# A server with checkpoints keeps its tables in them (the file's summary
# counts them).
if ! run_job 120 "$tmp/out.log" 20 "$B/dtrain" launch -n 1 -s 1 \
	--checkpoint-dir "$tmp/ck" --checkpoint-every 1 -- "$B/tests/progs/kv_rows" sum; then
	tail -5 "$tmp/out.log"
	echo "FAIL: tables with checkpoints"
	fails=$((fails + 1))
elif "$B/dtrain" checkpoint show "$tmp/ck/server-0.ckpt" 2>&1 | grep -q ", 2 row tables,"; then
	echo "ok: tables with checkpoints: $("$B/dtrain" checkpoint show "$tmp/ck/server-0.ckpt" 2>&1 | head -1)"
else
	"$B/dtrain" checkpoint show "$tmp/ck/server-0.ckpt"
	echo "FAIL: tables with checkpoints: not in the file"
	fails=$((fails + 1))
fi
unset MXNET_KVSTORE_BIGARRAY_BOUND
for m in sum adam errors; do
	if "$B/tests/progs/kv_rows" $m local > "$tmp/out.log" 2>&1; then
		check_out "$m local"
	else
		cat "$tmp/out.log" | tail -5
		echo "FAIL: $m local"
		fails=$((fails + 1))
	fi
done
echo "$fails failed"
[ $fails -eq 0 ]
