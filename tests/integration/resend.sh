#!/usr/bin/env bash
# resend.sh - PS_RESEND=1 (docs/fault-tolerance.md): with 5% of the
# messages dropped on arrival (PS_DROP_MSG=5) and every connection a node
# dialled closed every 0.5 s (DT_RESET_EVERY), and in other runs with
# resets alone every 0.2-0.3 s, jobs under `dtrain launch` complete with
# exactly the result of the undisturbed run:
#   - linreg and a short mnist (lenet) in dist_sync, and mnist with
#     --kvstore horovod (the collectives): parameters bit-identical;
#   - kv_check async (dist_async: every push applied exactly once, counted)
#     and kv_check sum (exact sums, errors answered, in dist_sync; big
#     pushes streamed into the sum, some cut inside and sent again);
# and the faults really happened (messages dropped, resent, reconnections);
# kv_check sum with every 3rd big frame cut inside (DT_CUT_EVERY=3): sums
# exact, and streamed pushes cut were used from where they were cut.
# PS_DROP_MSG without PS_RESEND=1 is refused with the reason.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
set -u
. "$(dirname "$0")/job_lib.bash"
B=${DTRAIN_BUILD:?}
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
FAULTS=(--env PS_RESEND=1 --env PS_RESEND_TIMEOUT=20 --env PS_DROP_MSG=5 --env DT_RESET_EVERY=0.5)
# (every 0.05 s: over shared memory the 5-epoch linreg job takes about
# 0.25 s in all, so resets every 0.2 s may never come)
RESETS=(--env PS_RESEND=1 --env DT_RESET_EVERY=0.05)
# kv_check is short: resets every 0.1 s, in every build. (A server once
# stopped answering handshakes there: its I/O thread waited to write a 6 MB
# answer to a worker that had given that connection up. The thread that
# handles events no longer waits for a peer: docs/cluster.md.)
FAULTS_KV=(--env PS_RESEND=1 --env PS_RESEND_TIMEOUT=20 --env PS_DROP_MSG=5)

run() { # name args...: a launch that must succeed
	local name=$1 rc=0
	shift
	run_job $((280 * ${DT_TEST_TIME_SCALE:-1})) "$tmp/$name.log" 30 "$@" || { rc=$?; fail "$name exited $rc"; }
}
# faults_seen name [resets]: the log of a faulty run shows drops, resends
# and reconnections (with resets: reconnections)
faults_seen() {
	local d r c
	d=$(sed -n 's/.*PS_RESEND: [0-9]* messages resent, \([0-9]*\) dropped.*/\1/p' "$tmp/$1.log" | awk '{s += $1} END {print s + 0}')
	r=$(sed -n 's/.*PS_RESEND: \([0-9]*\) messages resent.*/\1/p' "$tmp/$1.log" | awk '{s += $1} END {print s + 0}')
	c=$(sed -n 's/.* \([0-9]*\) reconnections/\1/p' "$tmp/$1.log" | awk '{s += $1} END {print s + 0}')
	if [ "${2:-}" = resets ]; then
		[ "${c:-0}" -gt 0 ] || fail "$1: no connection was reset and dialled again"
	else
		[ "${d:-0}" -gt 0 ] && [ "${r:-0}" -gt 0 ] && [ "${c:-0}" -gt 0 ] ||
			fail "$1: no message was dropped and resent, or no connection reset (dropped ${d:-0}, resent ${r:-0}, reconnections ${c:-0})"
	fi
	echo "$1: ${d} dropped, ${r} resent, ${c:-0} reconnections"
}

# linreg, dist_sync
last() { grep -o 'w=[^ ]* b=[^ ]*' "$tmp/$1.log" | tail -1; }
LIN=("$B/examples/linreg" --kvstore dist_sync --batch-size 100 --epochs 1)
run lin_ref "$B/dtrain" launch -n 2 -s 2 -- "${LIN[@]}"
run lin_faults "$B/dtrain" launch -n 2 -s 2 "${FAULTS[@]}" -- "${LIN[@]}"
[ -n "$(last lin_ref)" ] && [ "$(last lin_ref)" = "$(last lin_faults)" ] ||
	fail "linreg: '$(last lin_faults)' with faults, '$(last lin_ref)' without"
faults_seen lin_faults
echo "linreg dist_sync, drops and resets: $(last lin_faults), identical"
LIN5=("$B/examples/linreg" --kvstore dist_sync --batch-size 100 --epochs 5)
run lin5_ref "$B/dtrain" launch -n 2 -s 2 -- "${LIN5[@]}"
run lin5_resets "$B/dtrain" launch -n 2 -s 2 "${RESETS[@]}" -- "${LIN5[@]}"
[ -n "$(last lin5_ref)" ] && [ "$(last lin5_ref)" = "$(last lin5_resets)" ] ||
	fail "linreg: '$(last lin5_resets)' with resets, '$(last lin5_ref)' without"
faults_seen lin5_resets resets
echo "linreg dist_sync, resets: $(last lin5_resets), identical"

# kv_check: exactly once, counted
for mode in async sum; do
	run "kv_$mode" "$B/dtrain" launch -n 3 -s 2 "${FAULTS_KV[@]}" --env DT_RESET_EVERY=0.1 --env PS_VERBOSE=1 \
		-- "$B/tests/progs/kv_check" "$mode"
	[ "$(grep -c "kv_check $mode: worker passed" "$tmp/kv_$mode.log")" = 3 ] || fail "kv_check $mode"
	faults_seen "kv_$mode"
done
# (big pushes stream into the sum with PS_RESEND too; a frame cut inside
# comes again whole and only its rest is used: how often that happened)
echo "kv_check sum: $(grep -c 'comes again after a cut' "$tmp/kv_sum.log") streamed pushes cut and used from where they were; exact sums"
# The same on purpose: every 3rd frame of 1 MiB or more cut inside its
# payload (DT_CUT_EVERY), pushes and pull answers alike.
run kv_cut "$B/dtrain" launch -n 3 -s 2 --env PS_RESEND=1 --env DT_CUT_EVERY=3 --env PS_VERBOSE=1 \
	-- "$B/tests/progs/kv_check" sum
[ "$(grep -c "kv_check sum: worker passed" "$tmp/kv_cut.log")" = 3 ] || fail "kv_check sum, frames cut"
cuts=$(grep -c 'DT_CUT_EVERY: cutting' "$tmp/kv_cut.log")
resumed=$(grep -c 'comes again after a cut' "$tmp/kv_cut.log")
[ "$cuts" -gt 0 ] && [ "$resumed" -gt 0 ] ||
	fail "kv_check sum: $cuts frames cut, $resumed streamed pushes used from where they were cut"
echo "kv_check sum, every 3rd big frame cut: $cuts cut, $resumed streamed pushes used from the cut on; exact sums"

if [ -z "${DTRAIN_QUICK:-}" ] && [ "${B%-tsan}" != "$B" ]; then
	DTRAIN_QUICK=1 # ThreadSanitizer runs 5-15 times slower
fi
if [ -n "${DTRAIN_QUICK:-}" ]; then
	echo "mnist cases skipped: DTRAIN_QUICK (a ThreadSanitizer build)"
elif [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
	limit=3072
	[ -z "${DT_TEST_SANITIZE:-}" ] || limit=1536 # (a sanitizer build: half)
	M=(--model lenet --epochs 1 --limit $limit --seed 7 --disp-batches 16 --optimizer sgd
		--lr 0.05 --momentum 0.9 --batch-size 32 --data "$DATA")
	for kv in dist_sync horovod; do
		s=2
		[ $kv = horovod ] && s=0
		run "m_${kv}_ref" "$B/dtrain" launch -n 2 -s $s -- "$B/examples/mnist" --kvstore $kv "${M[@]}" --save "$tmp/$kv.ref.params"
		run "m_${kv}_faults" "$B/dtrain" launch -n 2 -s $s "${FAULTS[@]}" -- "$B/examples/mnist" --kvstore $kv "${M[@]}" --save "$tmp/$kv.faults.params"
		cmp -s "$tmp/$kv.ref.params" "$tmp/$kv.faults.params" ||
			fail "mnist $kv: parameters differ ($("$B/dtrain" params diff "$tmp/$kv.ref.params" "$tmp/$kv.faults.params"))"
		faults_seen "m_${kv}_faults"
		echo "mnist $kv, drops and resets: parameters bit-identical"
	done
	# Compressed pushes (sent from a scratch buffer: resending keeps a
	# copy) and fp16 answers (converted into one)
	C=(--gradient-compression type=2bit,threshold=0.5,min_size=0 --pull-precision fp16)
	run m_comp_ref "$B/dtrain" launch -n 2 -s 2 -- "$B/examples/mnist" --kvstore dist_sync "${M[@]}" "${C[@]}" --save "$tmp/comp.ref.params"
	run m_comp_faults "$B/dtrain" launch -n 2 -s 2 "${FAULTS[@]}" -- "$B/examples/mnist" --kvstore dist_sync "${M[@]}" "${C[@]}" --save "$tmp/comp.faults.params"
	cmp -s "$tmp/comp.ref.params" "$tmp/comp.faults.params" ||
		fail "mnist 2bit/fp16: parameters differ ($("$B/dtrain" params diff "$tmp/comp.ref.params" "$tmp/comp.faults.params"))"
	faults_seen m_comp_faults
	echo "mnist dist_sync with 2bit pushes and fp16 pulls, drops and resets: parameters bit-identical"
	run m_resets "$B/dtrain" launch -n 2 -s 2 --env PS_RESEND=1 --env DT_RESET_EVERY=0.3 -- \
		"$B/examples/mnist" --kvstore dist_sync "${M[@]}" --save "$tmp/resets.params"
	cmp -s "$tmp/dist_sync.ref.params" "$tmp/resets.params" ||
		fail "mnist dist_sync with resets: parameters differ"
	faults_seen m_resets resets
	echo "mnist dist_sync, resets: parameters bit-identical"
else
	echo "mnist cases skipped: Fashion-MNIST not installed at $DATA"
fi

# Losing messages on purpose without resending them is refused.
if timeout $((60 * T_SCALE)) "$B/dtrain" launch -n 1 -s 1 --env PS_DROP_MSG=5 -- "${LIN[@]}" >"$tmp/bad.log" 2>&1; then
	fail "PS_DROP_MSG without PS_RESEND was accepted"
fi
grep -q "PS_DROP_MSG loses messages on purpose; it needs PS_RESEND=1" "$tmp/bad.log" ||
	{ tail -5 "$tmp/bad.log"; fail "no reason given for refusing PS_DROP_MSG"; }
echo "ok"
