#!/bin/bash
# coll_wait.sh - the two ways a waiting collective wakes give the same
# results: with DT_WAIT_DIRECT=1 the executor sleeps in the network's
# event loop itself and handles the message it waits for, with 0 the I/O
# thread receives it and wakes the executor. DT_SPIN_US=0 makes every wait
# go that way at once (no polling first). On 2, 3, 4 and 8 ranks, both
# ways: the collectives suite against its local reference
# (tests/progs/coll_check.c, --quick), and sums of fractions by the
# same-host paths, which must come out exactly in rank order - the same
# bits whichever way the ranks woke.
. "$(dirname "$0")/coll_lib.bash"

for n in 2 3 4 8; do
	for direct in 1 0; do
		what="$n ranks, DT_WAIT_DIRECT=$direct"
		out=$TMP/suite$n.$direct
		launch "$n" "$out" --env DT_SPIN_US=0 \
			--env DT_WAIT_DIRECT="$direct" -- --quick
		rc=$?
		check "$what: exits 0 (got $rc)" test "$rc" = 0
		check "$what: every rank reports 0 failed" \
			every_rank "$n" "$out" "checks, 0 failed"
		check "$what: no FAIL line" test -z "$(grep -F FAIL "$out")"
		grep -F FAIL "$out" | head -5

		out=$TMP/order$n.$direct
		launch "$n" "$out" --env DT_SPIN_US=0 \
			--env DT_WAIT_DIRECT="$direct" \
			--env DT_COLL_CMA_THRESHOLD=0 -- --order
		rc=$?
		check "$what, sums in rank order: exits 0 (got $rc)" \
			test "$rc" = 0
		check "$what, sums in rank order: every rank reports 0 failed" \
			every_rank "$n" "$out" "checks, 0 failed"
		grep -F FAIL "$out" | head -5
	done
done

finish
