#!/bin/bash
# coll_errors.sh - the safety net of the collectives under `dtrain launch`:
#   - a rank that passes another count, type, reduction or operation makes
#     every rank fail with DT_EMISMATCH naming both calls, and the
#     communicator stays usable (on 2, 3 and 4 ranks, and on 4 by the
#     same-host push);
#   - a rank that skips an allreduce makes every rank fail with the stall
#     report naming it after DT_COLL_TIMEOUT, then all carry on;
#   - a rank that dies makes every other rank's call fail at once with
#     DT_EPEER instead of hanging.
. "$(dirname "$0")/coll_lib.bash"

for n in 2 3 4; do
	out=$TMP/mismatch$n
	launch "$n" "$out" -- --mismatch
	rc=$?
	check "mismatch on $n ranks: launcher exits 0 (got $rc)" test "$rc" = 0
	for what in "count mismatch (small)" "count mismatch (ring)" \
		"type mismatch" "reduction mismatch" "operation mismatch"; do
		check "mismatch on $n ranks: $what reaches every rank" \
			every_rank "$n" "$out" "$what: DT_EMISMATCH: "
	done
	# Which neighbour of the odd rank notices first varies.
	check "mismatch on $n ranks: message names the honest call" \
		every_rank "$n" "$out" \
		"called allreduce(count=1048576, float32, sum) but rank"
	check "mismatch on $n ranks: message names the odd rank's call" \
		every_rank "$n" "$out" \
		"rank $((n - 1)) called allreduce(count=1048577, float32, sum)"
	check "mismatch on $n ranks: no FAIL line" \
		test -z "$(grep -F FAIL "$out")"
	grep -F FAIL "$out" | head -5
done

# The same on 4 ranks with the small calls going by the same-host push
# (each rank writes into the others' slots before anyone has compared
# signatures): the notices carry the signature, so every rank still fails
# with both calls named and nobody adds what a mismatched call wrote.
out=$TMP/mismatch_push
launch 4 "$out" --env DT_COLL_CMA_THRESHOLD=0 -- --mismatch
rc=$?
check "mismatch by push on 4 ranks: launcher exits 0 (got $rc)" test "$rc" = 0
check "mismatch by push on 4 ranks: the count mismatch reaches every rank" \
	every_rank 4 "$out" "count mismatch (small): DT_EMISMATCH: "
check "mismatch by push on 4 ranks: no FAIL line" \
	test -z "$(grep -F FAIL "$out")"
grep -F FAIL "$out" | head -5

# (3 ranks by recursive doubling, 2 through the fast boxes)
for n in 3 2; do
	out=$TMP/stall$n
	start=$(now_ms)
	launch $n "$out" --env DT_COLL_TIMEOUT=3 -- --stall
	rc=$?
	ms=$(($(now_ms) - start))
	check "stall of $n: launcher exits 0 (got $rc)" test "$rc" = 0
	check "stall of $n: every rank gets the report naming rank $((n - 1))" \
		every_rank $n "$out" \
		"stall report: DT_ETIMEDOUT: allreduce #2 stalled for 3 s: rank $((n - 1)) has not called it"
	check "stall of $n: no FAIL line" test -z "$(grep -F FAIL "$out")"
	check "stall of $n: over within 30 s (${ms} ms)" test "$ms" -lt 30000
	grep -F FAIL "$out" | head -5
done

# (3 ranks by recursive doubling; 2 through the fast boxes, where the
# survivor polls, then sleeps, on a box the dead rank never fills, and 2
# through the shared areas, where it waits for a notice that never comes.)
for v in 3:65536:65536 2:65536:65536 2:0:0; do
	n=${v%%:*}
	thr=${v#*:}
	fbox=${thr#*:}
	thr=${thr%%:*}
	what="dead rank of $n$([ "$n" = 2 ] && { [ "$fbox" = 0 ] &&
		echo " (shared areas)" || echo " (fast boxes)"; })"
	out=$TMP/die$n.$fbox
	start=$(now_ms)
	mkdir -p "$out.sync"
	launch $n "$out" --env DT_COLL_TIMEOUT=60 --env DT_COLL_CMA_THRESHOLD=$thr \
		--env DT_COLL_CMA_FBOX_MAX=$fbox \
		--env COLL_CHECK_SYNC_DIR="$out.sync" -- --die
	rc=$?
	ms=$(($(now_ms) - start))
	check "$what: the job fails (launcher exits $rc)" test "$rc" != 0
	# The launcher stops the whole job as soon as the last rank dies, so a
	# surviving rank may be stopped before it prints: require the error
	# from at least one of them (and, below, that the job ended fast - no
	# hang).
	check "$what: a surviving rank gets DT_EPEER, not a hang" \
		grep -q "dead peer: DT_EPEER" "$out"
	check "$what: over well within DT_COLL_TIMEOUT (${ms} ms)" \
		test "$ms" -lt 30000
	check "$what: no FAIL line" test -z "$(grep -F FAIL "$out")"
done

finish
