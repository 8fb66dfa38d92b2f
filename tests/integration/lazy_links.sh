#!/bin/bash
# lazy_links.sh - connections between workers are made on demand
# (tests/progs/lazy_check.c, kv_check.c), counted from the PS_VERBOSE=1
# logs: the side that accepts a worker's connection logs "worker N
# connected from", once per connection.
#   - a job of 4 workers and 2 servers that uses only the KV store makes
#     no connection between workers, and its sums are exact;
#   - a ring of 8 ranks (point-to-point, no cross-memory copies) makes
#     fewer than the 28 connections of a full mesh, at least its 8;
#   - 6 ranks that all send to all at once (each pair dials from both
#     ends at the same moment, over shared memory, over TCP, with
#     PS_RESEND=1, encrypted) lose nothing: every byte checked, one connection per
#     pair in the end (15);
#   - each of 4 workers (2 servers) sends a text to the next rank, whose
#     address the scheduler's assignment did not give it: the send looks
#     it up (LOOKUP) and dials it, every text arrives, 4 connections;
#   - a worker that has left before anyone dialled it: a send to it fails
#     within DT_CONNECT_TIMEOUT naming it (DTRAIN_RECOVER=1, so that the
#     scheduler waits instead of ending the job), and without recovery the
#     scheduler notices the loss and ends the job naming it.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/coll_lib.bash"
CHECK=$BUILD/tests/progs/lazy_check
KV=$BUILD/tests/progs/kv_check

# count_links FILE: connections accepted between workers.
count_links() {
	grep -cE '^\[worker [0-9]+\] worker [0-9]+ connected from' "$1"
}

out=$TMP/kv
timeout $((280 * T_SCALE)) "$DTRAIN" launch -n 4 -s 2 --launcher local \
	--env DT_TEST_TAG="$TAG" --env PS_VERBOSE=1 -- "$KV" sum >"$out" 2>&1
rc=$?
check "kv: launcher exits 0 (got $rc)" test "$rc" = 0
links=$(count_links "$out")
check "kv: no connection between workers (got $links)" test "$links" = 0
check "kv: no dial on demand" test -z "$(grep -F 'on demand' "$out")"
check "kv: each worker dialled both servers" \
	test "$(grep -cE '^\[server [0-9]+\] worker [0-9]+ connected from' "$out")" = 8

out=$TMP/ring
launch 8 "$out" --env PS_VERBOSE=1 --env DT_COLL_CMA=0 -- ring
rc=$?
check "ring: launcher exits 0 (got $rc)" test "$rc" = 0
check "ring: every rank reports 0 failed" every_rank 8 "$out" "checks, 0 failed"
links=$(count_links "$out")
check "ring: 8 <= connections ($links) < 28 (a full mesh)" \
	test "$links" -ge 8 -a "$links" -lt 28

for env in "" DTRAIN_TRANSPORT=tcp PS_RESEND=1 DTRAIN_ENCRYPT=1; do
	out=$TMP/all$env
	(
		[ -z "$env" ] || export "${env?}"
		launch 6 "$out" --env PS_VERBOSE=1 --env DT_COLL_CMA=0 -- all
	)
	rc=$?
	what="all to all${env:+ ($env)}"
	check "$what: launcher exits 0 (got $rc)" test "$rc" = 0
	check "$what: every rank reports 0 failed" \
		every_rank 6 "$out" "checks, 0 failed"
	links=$(count_links "$out")
	check "$what: one connection per pair (got $links)" test "$links" = 15
	check "$what: no FAIL line" test -z "$(grep -F FAIL "$out")"
	grep -F "lower id" "$out" | head -n 2
done

out=$TMP/first
timeout $((280 * T_SCALE)) "$DTRAIN" launch -n 4 -s 2 --launcher local \
	--env DT_TEST_TAG="$TAG" --env PS_VERBOSE=1 -- "$CHECK" first >"$out" 2>&1
rc=$?
check "first: launcher exits 0 (got $rc)" test "$rc" = 0
check "first: every rank reports 0 failed" every_rank 4 "$out" "checks, 0 failed"
check "first: every text arrived" \
	test "$(grep -cE 'first text from rank [0-3]' "$out")" = 4
check "first: every rank dialled its peer on demand" \
	test "$(grep -cF 'on demand' "$out")" = 4
links=$(count_links "$out")
check "first: one connection per pair of the ring (got $links)" test "$links" = 4

# A communicator's start asks for its ranks' hosts, not their addresses.
out=$TMP/hosts
timeout $((280 * T_SCALE)) "$DTRAIN" launch -n 8 -s 1 --launcher local \
	--env DT_TEST_TAG="$TAG" --env DT_COLL_CMA=0 -- "$CHECK" hosts >"$out" 2>&1
rc=$?
check "hosts: launcher exits 0 (got $rc)" test "$rc" = 0
check "hosts: every rank reports 0 failed" every_rank 8 "$out" "checks, 0 failed"

out=$TMP/gone
mkdir -p "$TMP/gone.d"
start=$(now_ms)
launch 3 "$out" --grace 1 --env DT_CONNECT_TIMEOUT=5 \
	--env DTRAIN_RECOVER=1 --env LAZY_CHECK_DIR="$TMP/gone.d" -- gone
ms=$(($(now_ms) - start))
check "gone: rank 0's send fails naming the worker" \
	grep -qE 'send to a gone rank: DT_[A-Z]+: no connection to worker 2' "$out"
check "gone: no FAIL line" test -z "$(grep -F FAIL "$out")"
grep -F "gone rank" "$out"
check "gone: over in bounded time (${ms} ms)" test "$ms" -lt 120000

out=$TMP/gone_norecover
mkdir -p "$TMP/gone2.d"
launch 3 "$out" --grace 1 --env LAZY_CHECK_DIR="$TMP/gone2.d" -- gone
rc=$?
check "gone, no recovery: the job fails (launcher exits $rc)" test "$rc" != 0
check "gone, no recovery: the scheduler names the lost worker" \
	grep -qE 'scheduler.*worker 2 .*was lost' "$out"

finish
