#!/bin/bash
# coll_hier.sh - the hierarchical allreduce on one machine whose ranks
# claim hosts of their own (DT_HOST_ID, by worker rank: a wrapper sets it
# before the checker starts), so that every build, sanitizers included,
# runs it without network namespaces (coll_hier_hosts.sh runs it over real
# namespace hosts). With DTRAIN_COLL_HIER=on and 4 KiB chunks, for 2 hosts
# x 2 ranks, 2 x 3 and 3 x 2: every type and reduction, in place and not,
# sizes around the chunk and block boundaries; every rank the same bits,
# fractions summed in the documented hierarchical order, integers exact
# (tests/progs/coll_hier_check.c). The same integers and every min and max
# flat give the same bits. The whole coll_check suite (groups, fusion,
# asynchronous calls, fp16 compression) with the hierarchy at every size,
# and at its default (auto) choice; a mismatched call fails on every rank,
# a dead rank fails the others at once; an unknown DTRAIN_COLL_HIER is
# refused naming it; nothing is left behind.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
. "$(dirname "$0")/hier_lib.bash"
B=$DTRAIN_BUILD
HCHECK=$B/tests/progs/coll_hier_check
CHECK=$B/tests/progs/coll_check
quick=
case $B in *-asan | *-tsan) quick=--quick ;; esac
grep -qE '^DT_SANITIZE:STRING=.+' "$B/CMakeCache.txt" 2>/dev/null && quick=--quick
[ -n "$quick" ] && echo "sanitizer build: without the 2^20+5 size"

# HIER_L ranks per claimed host, by worker rank (the launcher's ranks of
# one host are consecutive too).
cat >"$TMP/fakehost" <<'SH'
#!/bin/sh
DT_HOST_ID=coll-hier-host$((DMLC_WORKER_ID / HIER_L))
export DT_HOST_ID
exec "$@"
SH
chmod +x "$TMP/fakehost"

# job N L OUT [--env K=V...] -- PROG ARGS...: N ranks, L per host.
job() {
	local n=$1 l=$2 out=$3
	shift 3
	local envs=()
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do
		envs+=("$1")
		shift
	done
	shift
	timeout $((280 * T_SCALE)) "$DTRAIN" launch -n "$n" -s 0 --launcher local \
		--env DT_TEST_TAG="$TAG" --env HIER_L="$l" --env DT_COLL_TIMEOUT=60 \
		"${envs[@]}" -- "$TMP/fakehost" "$@" >"$out" 2>&1
}

for layout in 2x2 2x3 3x2; do
	h=${layout%x*} l=${layout#*x} n=$((${layout%x*} * ${layout#*x}))
	q=$quick
	[ "$layout" = 2x2 ] || q=--quick
	out=$TMP/hier$layout
	start=$(now_ms)
	job "$n" "$l" "$out" --env DTRAIN_COLL_HIER=on \
		--env DT_COLL_CHUNK_BYTES=4096 -- "$HCHECK" --expect hier $q
	rc=$?
	echo "$layout hierarchical: $(($(now_ms) - start)) ms"
	check "$layout hierarchical: exits 0 (got $rc)" test "$rc" = 0
	check "$layout: every rank sees $h hosts x $l ranks" \
		every_rank "$n" "$out" "$h hosts x $l ranks"
	check "$layout hierarchical: every rank reports 0 failed" \
		every_rank "$n" "$out" "checks, 0 failed"
	grep -F FAIL "$out" | head -5
done

# Flat, the same 2 x 2 job: order-independent results are the same bits.
out=$TMP/flat2x2
job 4 2 "$out" --env DTRAIN_COLL_HIER=off --env DT_COLL_CHUNK_BYTES=4096 \
	-- "$HCHECK" --expect flat $quick
rc=$?
check "2x2 flat: exits 0 (got $rc)" test "$rc" = 0
check "2x2 flat: every rank reports 0 failed" \
	every_rank 4 "$out" "checks, 0 failed"
digests "$TMP/hier2x2" >"$TMP/d_hier"
digests "$out" >"$TMP/d_flat"
check "2x2: integer sums and every min and max are the flat ones ($(wc -l <"$TMP/d_hier") calls)" \
	test -s "$TMP/d_hier" -a "$(wc -l <"$TMP/d_hier")" = "$(wc -l <"$TMP/d_flat")"
check "2x2: hierarchical digests equal the flat ones" cmp -s "$TMP/d_hier" "$TMP/d_flat"

# Every collective of coll_check with the hierarchy at every size (its
# groups, fusion, asynchronous calls and compressed sums included), then
# with the default choice (the hierarchy above the ring threshold).
# (auto's full suite: its 2^20+5 elements are above the ring threshold.)
for mode in on auto; do
	out=$TMP/check_$mode
	a=--quick
	[ "$mode" = auto ] && a=$quick
	job 4 2 "$out" --env DTRAIN_COLL_HIER=$mode -- "$CHECK" $a
	rc=$?
	check "coll_check, DTRAIN_COLL_HIER=$mode, 2x2: exits 0 (got $rc)" test "$rc" = 0
	check "coll_check, DTRAIN_COLL_HIER=$mode: every rank reports 0 failed" \
		every_rank 4 "$out" "checks, 0 failed"
done
out=$TMP/check_fp16
job 4 2 "$out" --env DTRAIN_COLL_HIER=on -- "$CHECK" --compression fp16
rc=$?
check "coll_check --compression fp16, hierarchical: exits 0 (got $rc)" test "$rc" = 0

# A mismatched call fails on every rank, naming both calls, through the
# hierarchy too (every rank's result depends on every other rank).
out=$TMP/mismatch
job 4 2 "$out" --env DTRAIN_COLL_HIER=on -- "$CHECK" --mismatch
rc=$?
check "mismatch, hierarchical 2x2: exits 0 (got $rc)" test "$rc" = 0
for what in "count mismatch (small)" "count mismatch (ring)" "type mismatch" \
	"reduction mismatch"; do
	check "mismatch, hierarchical: $what reaches every rank" \
		every_rank 4 "$out" "$what: DT_EMISMATCH: "
done
check "mismatch, hierarchical: no FAIL line" test -z "$(grep -F FAIL "$out")"

# A rank that dies fails the others' hierarchical allreduce at once.
mkdir -p "$TMP/die.sync"
out=$TMP/die
start=$(now_ms)
job 4 2 "$out" --env DTRAIN_COLL_HIER=on --env COLL_CHECK_SYNC_DIR="$TMP/die.sync" \
	-- "$CHECK" --die
rc=$?
ms=$(($(now_ms) - start))
check "dead rank, hierarchical: the job fails (launcher exits $rc)" test "$rc" != 0
check "dead rank, hierarchical: a surviving rank gets DT_EPEER" \
	grep -q "dead peer: DT_EPEER" "$out"
check "dead rank, hierarchical: over well within DT_COLL_TIMEOUT (${ms} ms)" \
	test "$ms" -lt 30000

# An unknown value is refused, naming the variable.
out=$TMP/bad
job 2 1 "$out" --env DTRAIN_COLL_HIER=sometimes -- "$CHECK" --quick
rc=$?
check "DTRAIN_COLL_HIER=sometimes: fails (got $rc)" test "$rc" != 0
check "DTRAIN_COLL_HIER=sometimes: named" has "$out" "DTRAIN_COLL_HIER=sometimes: expected auto, on or off"

check "nothing left" wait_gone 10
finish
