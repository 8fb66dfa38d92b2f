#!/bin/bash
# coll_ranks.sh - every collective against a local reference on 1, 2, 3, 4
# and 8 ranks started by `dtrain launch -s 0`: all operations, types and
# reductions, in place and out of place, sizes 0, 1, 3, 1023 and 2^20+5,
# async, grouped and fused calls (tests/progs/coll_check.c). Same-host
# ranks read large messages from each other's memory (CMA) when allowed;
# the TCP path gets the same suite with DT_COLL_CMA=0, and the four
# two-rank CMA variants and the many-rank push run on their own. Then every path for every size:
# the ring with tiny chunks and fusion cut into many small batches,
# recursive doubling, CMA; and a communicator attached to a started node.
. "$(dirname "$0")/coll_lib.bash"

# Under a sanitizer (several times slower) 4 and 8 ranks skip the largest
# size, so that the test stays well within ctest's time limit.
quick_from=99
san=
if grep -qE '^DT_SANITIZE:STRING=.+' "$BUILD/CMakeCache.txt" 2>/dev/null; then
	quick_from=4
	san=--quick
	echo "sanitizer build: 4 and 8 ranks and the variants without the 2^20+5 size"
fi
case ${DT_TEST_SANITIZE:-} in
*thread*)
	# (ThreadSanitizer runs 5-15 times slower: every rank count quick)
	quick_from=1
	echo "ThreadSanitizer: every rank count without the 2^20+5 size"
	;;
esac

for n in 1 2 3 4 8; do
	out=$TMP/ranks$n
	if [ "$n" -ge "$quick_from" ]; then
		launch "$n" "$out" -- --quick
	else
		launch "$n" "$out" --
	fi
	rc=$?
	check "$n ranks: launcher exits 0 (got $rc)" test "$rc" = 0
	check "$n ranks: every rank knows the size" \
		every_rank "$n" "$out" "of $n: "
	check "$n ranks: every rank reports 0 failed" \
		every_rank "$n" "$out" "checks, 0 failed"
	check "$n ranks: no FAIL line" test -z "$(grep -F FAIL "$out")"
	grep -F FAIL "$out" | head -5
done

# Two same-host ranks have five CMA variants (docs/collectives.md):
# through the shared areas (the default, below), push the whole input into
# the peer's slot, push by halves, read the peer's whole input, read by
# blocks; the pushes and reads run here without the areas.
out=$TMP/push
launch 2 "$out" --env DT_COLL_CMA_PUSH_MAX=67108864 \
	--env DT_COLL_CMA_SHARED_MAX=0 --env DT_COLL_CMA_HALF_MIN=0 -- $san
rc=$?
check "2 ranks, whole push for every size: exits 0 (got $rc)" test "$rc" = 0
check "2 ranks, whole push: every rank reports 0 failed" \
	every_rank 2 "$out" "checks, 0 failed"
out=$TMP/halves
launch 2 "$out" --env DT_COLL_CMA_PUSH_MAX=67108864 \
	--env DT_COLL_CMA_SHARED_MAX=0 --env DT_COLL_CMA_THRESHOLD=0 \
	--env DT_COLL_CMA_HALF_MIN=1 -- $san
rc=$?
check "2 ranks, push by halves for every size: exits 0 (got $rc)" \
	test "$rc" = 0
check "2 ranks, push by halves: every rank reports 0 failed" \
	every_rank 2 "$out" "checks, 0 failed"
out=$TMP/nopush
launch 2 "$out" --env DT_COLL_CMA_PUSH_MAX=0 --env DT_COLL_CMA_SHARED_MAX=0 \
	--env DT_COLL_CMA_WHOLE_MAX=1048576 -- $san
rc=$?
check "2 ranks, no push, whole reads up to 1 MiB: exits 0 (got $rc)" \
	test "$rc" = 0
check "2 ranks, no push: every rank reports 0 failed" \
	every_rank 2 "$out" "checks, 0 failed"

# More than two same-host ranks write their inputs into every peer's
# slots (push) up to DT_COLL_CMA_PUSH_MANY_MAX: the suite that way for
# every size that fits at 4 ranks, then sums of fractions (whose rounding
# depends on the order of the additions) at odd sizes on 3 and 4 ranks,
# which must come out the same on every rank and in rank order.
out=$TMP/pushmany
launch 4 "$out" --env DT_COLL_CMA_THRESHOLD=0 \
	--env DT_COLL_CMA_PUSH_MANY_MAX=1048576 -- --quick
rc=$?
check "4 ranks, push for every size up to 1 MiB: exits 0 (got $rc)" \
	test "$rc" = 0
check "4 ranks, push: every rank reports 0 failed" \
	every_rank 4 "$out" "checks, 0 failed"
grep -F FAIL "$out" | head -5
# (Over TCP there are no same-host reads or writes: the other paths add
# in other orders.)
# (8 ranks too by push.) The same sums by blocks (each rank adds its block
# of everyone's input, in rank order, and writes it into every peer's
# output) at 3 and 4 ranks, and through the shared areas (each rank adds
# its block of everyone's copies in rank order) at 2, 3, 4 and 8 ranks.
# Each entry: ranks:DT_COLL_CMA_PUSH_MANY_MAX:DT_COLL_CMA_SHARED_MAX.
orders="3:1048576:0 4:1048576:0 8:1048576:0 3:0:0 4:0:0 2:0:4194304
	3:0:4194304 4:0:4194304 8:0:4194304"
if [ "${DTRAIN_TRANSPORT:-}" = tcp ]; then
	orders=
	echo "DTRAIN_TRANSPORT=tcp: no same-host paths, so no rank-order check"
fi
for o in $orders; do
	n=${o%%:*}
	push=${o#*:}
	shared=${push#*:}
	push=${push%%:*}
	what="$n ranks, $([ "$push" != 0 ] && echo push ||
		{ [ "$shared" = 0 ] && echo blocks || echo shared areas; })"
	[ "$n" = 2 ] && what="2 ranks, fast boxes and shared areas"
	out=$TMP/order$n.$push.$shared
	launch "$n" "$out" --env DT_COLL_CMA_THRESHOLD=0 \
		--env DT_COLL_CMA_PUSH_MANY_MAX="$push" \
		--env DT_COLL_CMA_SHARED_MAX="$shared" -- --order
	rc=$?
	check "$what, sums in rank order: exits 0 (got $rc)" test "$rc" = 0
	check "$what, sums in rank order: every rank reports 0 failed" \
		every_rank "$n" "$out" "checks, 0 failed"
	check "$what: every rank compared the orders" \
		every_rank "$n" "$out" "told apart from the reverse in"
	# (two addends round alike in either order: x0 + x1 = x1 + x0, so
	# 2 ranks check only that both get the same bits, and the sum)
	[ "$n" = 2 ] ||
		check "$what: the orders were told apart" \
			test -z "$(grep -F 'told apart from the reverse in 0 ' "$out")"
	grep -F FAIL "$out" | head -5
done

# Back-to-back allreduces whose sizes alternate move the blocks' bounds
# in the shared areas: a rank that starts the next one while the others
# still copy its finished block must leave that block alone. The same
# through 2 ranks' fast boxes (made large enough for both sizes): a rank
# that starts the next one while the other still reads its box of this
# one writes the other box.
for v in 2:65536 4:65536 2:4194304; do
	n=${v%%:*}
	fbox=${v#*:}
	out=$TMP/sizes$n.$fbox
	launch $n "$out" --env DT_COLL_CMA_FBOX_MAX=$fbox -- --sizes
	rc=$?
	what="$n ranks, alternating sizes through the $([ "$fbox" = 65536 ] &&
		echo shared areas || echo fast boxes)"
	check "$what: exits 0 (got $rc)" test "$rc" = 0
	check "$what: every rank reports 0 failed" \
		every_rank $n "$out" "checks, 0 failed"
	grep -F FAIL "$out" | head -5
done

out=$TMP/tcp
launch 3 "$out" --env DT_COLL_CMA=0 -- $san
rc=$?
check "3 ranks over TCP only (DT_COLL_CMA=0): exits 0 (got $rc)" test "$rc" = 0
check "TCP only: every rank reports 0 failed" \
	every_rank 3 "$out" "checks, 0 failed"
check "TCP only: no FAIL line" test -z "$(grep -F FAIL "$out")"

out=$TMP/node
launch 3 "$out" -- --quick --node
rc=$?
check "attached to a started node (dt_coll_init_node), 3 ranks: exits 0 (got $rc)" \
	test "$rc" = 0
check "attached: every rank reports 0 failed" \
	every_rank 3 "$out" "checks, 0 failed"

out=$TMP/ring
launch 3 "$out" --env DT_COLL_RING_THRESHOLD=0 --env DT_COLL_CHUNK_BYTES=4096 \
	--env HOROVOD_FUSION_THRESHOLD=4096 --env DT_COLL_CMA=0 -- --quick
rc=$?
check "ring everywhere, 4 KiB chunks, 4 KiB fusion: exits 0 (got $rc)" \
	test "$rc" = 0
check "ring everywhere: no FAIL line" test -z "$(grep -F FAIL "$out")"
grep -F FAIL "$out" | head -5
launch 2 "$out" --env DT_COLL_RING_THRESHOLD=0 --env DT_COLL_CHUNK_BYTES=4096 \
	--env DT_COLL_CMA=0 -- --quick
rc=$?
check "ring everywhere over TCP, 4 KiB chunks: exits 0 (got $rc)" \
	test "$rc" = 0
check "ring everywhere over TCP: no FAIL line" \
	test -z "$(grep -F FAIL "$out")"

out=$TMP/rd
launch 4 "$out" --env DT_COLL_RING_THRESHOLD=1000000000 \
	--env DT_COLL_CMA_THRESHOLD=1000000000 -- --quick
rc=$?
check "recursive doubling everywhere: exits 0 (got $rc)" test "$rc" = 0
check "recursive doubling everywhere: no FAIL line" \
	test -z "$(grep -F FAIL "$out")"

out=$TMP/cma
launch 3 "$out" --env DT_COLL_CMA_THRESHOLD=0 --env DT_COLL_CMA_SHARED_MAX=0 \
	-- --quick
rc=$?
check "same-host reads (CMA) for every size, 3 ranks: exits 0 (got $rc)" \
	test "$rc" = 0
check "CMA everywhere: no FAIL line" test -z "$(grep -F FAIL "$out")"
# The allreduce through the shared areas for every size, the largest
# (2^20+5 elements, 8 MiB of float64) included but under a sanitizer.
out=$TMP/shared
launch 4 "$out" --env DT_COLL_CMA_THRESHOLD=0 --env PS_VERBOSE=1 \
	--env DT_COLL_CMA_SHARED_MAX=16777216 -- $san
rc=$?
check "shared areas for every size, 4 ranks: exits 0 (got $rc)" \
	test "$rc" = 0
check "shared areas, 4 ranks: every rank reports 0 failed" \
	every_rank 4 "$out" "checks, 0 failed"
# (Over TCP the links carry no credentials: no same-host paths at all.)
[ "${DTRAIN_TRANSPORT:-}" = tcp ] ||
	check "shared areas, 4 ranks: every rank uses them" \
		every_rank 4 "$out" ", shared areas"
check "shared areas everywhere: no FAIL line" \
	test -z "$(grep -F FAIL "$out")"
grep -F FAIL "$out" | head -5
# 2 ranks: through the areas for every size (the areas' halves hold one
# block each: 2^20+5 float64 needs halves of 4 MiB + 24 bytes, so with the
# default 4 MiB the largest size goes by the reads, and with 16 MiB
# through the areas).
# 2 ranks without the fast boxes: recursive doubling below the threshold.
launch 2 "$out" --env DT_COLL_CMA_FBOX_MAX=0 -- --quick
rc=$?
check "2 ranks without fast boxes: exits 0 (got $rc)" test "$rc" = 0
check "2 ranks without fast boxes: every rank reports 0 failed" \
	every_rank 2 "$out" "checks, 0 failed"
# The fast boxes for every size that fits 8 MiB boxes (all but 2^20+5
# float64), the rest through the areas or the reads.
launch 2 "$out" --env DT_COLL_CMA_FBOX_MAX=8388608 --env PS_VERBOSE=1 -- $san
rc=$?
check "fast boxes of 8 MiB, 2 ranks: exits 0 (got $rc)" test "$rc" = 0
check "fast boxes of 8 MiB, 2 ranks: every rank reports 0 failed" \
	every_rank 2 "$out" "checks, 0 failed"
[ "${DTRAIN_TRANSPORT:-}" = tcp ] ||
	check "fast boxes, 2 ranks: every rank uses them" \
		every_rank 2 "$out" ", fast boxes"
for shared in 4194304 16777216; do
	launch 2 "$out" --env DT_COLL_CMA_THRESHOLD=0 --env PS_VERBOSE=1 \
		--env DT_COLL_CMA_SHARED_MAX=$shared -- $san
	rc=$?
	check "shared areas of 2 x $shared for every size, 2 ranks: exits 0 (got $rc)" \
		test "$rc" = 0
	check "shared areas of 2 x $shared, 2 ranks: every rank reports 0 failed" \
		every_rank 2 "$out" "checks, 0 failed"
	[ "${DTRAIN_TRANSPORT:-}" = tcp ] ||
		check "shared areas, 2 ranks: every rank uses them" \
			every_rank 2 "$out" ", shared areas"
	check "shared areas, 2 ranks: no FAIL line" \
		test -z "$(grep -F FAIL "$out")"
	grep -F FAIL "$out" | head -5
done

finish
