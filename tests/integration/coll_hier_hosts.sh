#!/bin/bash
# coll_hier_hosts.sh - the hierarchical allreduce across real hosts: two
# or three network namespaces on a private bridge, each with its own sshd,
# the ranks placed by the ssh launcher (a host's ranks are consecutive).
# For 2 hosts x 2 ranks, 2 x 3 and 3 x 2 the checker
# (tests/progs/coll_hier_check.c) runs every type and reduction, in place
# and not, around the chunk and block boundaries, with the hierarchy at
# every size: every rank the same bits, fractions summed in the documented
# hierarchical order, integers exact. 2 x 2 again flat: the integer sums
# and every min and max are the same bits. Then coll_check's suite with
# the default (auto) choice. Skipped where namespaces cannot be made;
# removes everything it made.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
. "$(dirname "$0")/engines_lib.bash"
. "$(dirname "$0")/hier_lib.bash"
need_root "hosts of network namespaces"
ssh_setup
hosts_setup 3 || skip "the namespace hosts could not be set up"
B=$DTRAIN_BUILD
HCHECK=$B/tests/progs/coll_hier_check
quick=
[ -n "$SANITIZED" ] && quick=--quick

# hostfile H L: the first H hosts, L slots each.
hostfile() {
	local i f=$TMP/hosts$1x$2
	for ((i = 0; i < $1; i++)); do
		echo "${HOSTS[$i]}:$SSH_PORT slots=$2"
	done >"$f"
	echo "$f"
}

# job H L OUT [--env K=V...] -- PROG ARGS...
job() {
	local h=$1 l=$2 out=$3
	shift 3
	local envs=()
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do
		envs+=("$1")
		shift
	done
	shift
	timeout $((280 * T_SCALE)) "$DTRAIN" launch -n $((h * l)) -s 0 --launcher ssh \
		-H "$(hostfile "$h" "$l")" --env DT_TEST_TAG="$TAG" \
		"${envs[@]}" -- "$@" >"$out" 2>&1
}

for layout in 2x2 2x3 3x2; do
	h=${layout%x*} l=${layout#*x} n=$((${layout%x*} * ${layout#*x}))
	q=$quick
	[ "$layout" = 2x2 ] || q=--quick
	out=$TMP/hier$layout
	start=$(now_ms)
	job "$h" "$l" "$out" --env DTRAIN_COLL_HIER=on \
		--env DT_COLL_CHUNK_BYTES=4096 -- "$HCHECK" --expect hier $q
	rc=$?
	echo "$layout hosts, hierarchical: $(($(now_ms) - start)) ms"
	check "$layout hosts, hierarchical: exits 0 (got $rc)" test "$rc" = 0
	check "$layout: every rank sees $h hosts x $l ranks" \
		every_rank "$n" "$out" "$h hosts x $l ranks"
	check "$layout hosts, hierarchical: every rank reports 0 failed" \
		every_rank "$n" "$out" "checks, 0 failed"
	grep -F FAIL "$out" | head -5
	[ "$rc" = 0 ] || tail -5 "$out"
done

out=$TMP/flat2x2
job 2 2 "$out" --env DTRAIN_COLL_HIER=off --env DT_COLL_CHUNK_BYTES=4096 \
	-- "$HCHECK" --expect flat $quick
rc=$?
check "2x2 hosts, flat: exits 0 (got $rc)" test "$rc" = 0
digests "$TMP/hier2x2" >"$TMP/d_hier"
digests "$out" >"$TMP/d_flat"
check "2x2 hosts: integer sums and every min and max are the flat ones ($(wc -l <"$TMP/d_hier") calls)" \
	test -s "$TMP/d_hier" -a "$(wc -l <"$TMP/d_hier")" = "$(wc -l <"$TMP/d_flat")"
check "2x2 hosts: hierarchical digests equal the flat ones" cmp -s "$TMP/d_hier" "$TMP/d_flat"

out=$TMP/check_auto
job 2 2 "$out" -- "$B/tests/progs/coll_check" $quick
rc=$?
check "coll_check on 2x2 hosts, default choice: exits 0 (got $rc)" test "$rc" = 0
check "coll_check on 2x2 hosts: every rank reports 0 failed" \
	every_rank 4 "$out" "checks, 0 failed"

check "nothing left" wait_gone 10
finish
