#!/bin/bash
# coll_p2p.sh - point-to-point messages (dt_coll_send / dt_coll_recv) on 2
# and 3 ranks started by `dtrain launch -s 0` (tests/progs/p2p_check.c):
# every dtype at sizes from 0 to 16 MiB, order per tag, many tags in
# flight, probing and waiting for the first of two receives, over
# same-host shared memory (the default) and over TCP
# (DTRAIN_TRANSPORT=tcp); then a count and a dtype mismatch (DT_EMISMATCH
# on both ranks), a message over DT_COLL_UNEXPECTED_MAX, a stall
# (DT_ETIMEDOUT naming the pair, through dt_coll_wait_any too) and a dead
# peer (an error well within DT_COLL_TIMEOUT, not a hang, from a receive,
# a send and a probe).
. "$(dirname "$0")/coll_lib.bash"
CHECK=$BUILD/tests/progs/p2p_check

for transport in shm tcp; do
	for n in 2 3; do
		out=$TMP/$transport$n
		if [ $transport = tcp ]; then
			DTRAIN_TRANSPORT=tcp launch "$n" "$out" --
		else
			launch "$n" "$out" --
		fi
		rc=$?
		check "$transport, $n ranks: launcher exits 0 (got $rc)" \
			test "$rc" = 0
		check "$transport, $n ranks: every rank reports 0 failed" \
			every_rank "$n" "$out" "checks, 0 failed"
		check "$transport, $n ranks: no FAIL line" \
			test -z "$(grep -F FAIL "$out")"
		grep -F FAIL "$out" | head -5
	done
done

out=$TMP/mismatch
launch 2 "$out" -- --mismatch
rc=$?
check "mismatch: launcher exits 0 (got $rc)" test "$rc" = 0
for what in "count mismatch" "type mismatch"; do
	check "mismatch: $what reaches both ranks" \
		every_rank 2 "$out" "$what: DT_EMISMATCH: "
done
check "mismatch: no FAIL line" test -z "$(grep -F FAIL "$out")"
grep -F FAIL "$out" | head -5

out=$TMP/cap
launch 2 "$out" --env DT_COLL_UNEXPECTED_MAX=1048576 -- --cap
rc=$?
check "cap: launcher exits 0 (got $rc)" test "$rc" = 0
check "cap: a message over DT_COLL_UNEXPECTED_MAX fails on both ranks" \
	every_rank 2 "$out" "over the cap: DT_ENOMEM: "
check "cap: no FAIL line" test -z "$(grep -F FAIL "$out")"
grep -F FAIL "$out" | head -5

out=$TMP/stall
start=$(now_ms)
launch 2 "$out" --env DT_COLL_TIMEOUT=2 -- --stall
rc=$?
ms=$(($(now_ms) - start))
check "stall: launcher exits 0 (got $rc)" test "$rc" = 0
check "stall: the sender names the receiver" \
	grep -q "send never received: DT_ETIMEDOUT: send to rank 1" "$out"
check "stall: the receiver names the sender" \
	grep -q "recv never sent: DT_ETIMEDOUT: recv from rank 0" "$out"
check "stall: wait_any ends with the deadline, naming the sender" \
	every_rank 2 "$out" "wait_any never sent: DT_ETIMEDOUT: recv from rank "
check "stall: over in bounded time (${ms} ms)" test "$ms" -lt 60000
check "stall: no FAIL line" test -z "$(grep -F FAIL "$out")"
grep -F FAIL "$out" | head -5

out=$TMP/die
start=$(now_ms)
mkdir -p "$TMP/die.sync"
launch 3 "$out" --env DT_COLL_TIMEOUT=60 \
	--env COLL_CHECK_SYNC_DIR="$TMP/die.sync" -- --die
rc=$?
ms=$(($(now_ms) - start))
check "dead rank: the job fails (launcher exits $rc)" test "$rc" != 0
# The launcher stops the job as soon as a rank dies, so rank 0 may be
# stopped before it prints; what must not happen is a hang or a success.
check "dead rank: over well within DT_COLL_TIMEOUT (${ms} ms)" \
	test "$ms" -lt 30000
check "dead rank: no FAIL line" test -z "$(grep -F FAIL "$out")"
grep -F "dead peer" "$out"

finish
