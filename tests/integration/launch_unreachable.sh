#!/bin/bash
# launch_unreachable.sh - a host that does not answer fails the job within
# the ssh connect timeout (DTRAIN_SSH_CONNECT_TIMEOUT, default 10 s), with
# the host named, instead of ssh's own timeout of minutes. Uses the real
# ssh client against an address nothing answers on (10.255.255.1: dropped
# on most networks, unreachable on the rest; both must end as fast).
. "$(dirname "$0")/launch_lib.bash"
if ! command -v ssh >/dev/null; then
	echo "skipped: no ssh client (Debian's openssh-client)"
	exit 0
fi
unset DTRAIN_SSH
cd "$TMP" || exit 1
echo 10.255.255.1 >hosts
t0=$(now_ms)
DTRAIN_SSH_CONNECT_TIMEOUT=2 timeout 60 "$DTRAIN" launch -n 1 -s 1 -H hosts \
	--env DT_TEST_TAG="$TAG" -- true >"$TMP/out" 2>"$TMP/err"
rc=$?
ms=$(($(now_ms) - t0))
cat "$TMP/err" | head -5
check "unreachable host: launcher exits 1 (got $rc)" test "$rc" = 1
check "unreachable host: over within 2 s + 3 s (${ms} ms)" test "$ms" -lt 5000
check "unreachable host: named" grep -q "job failed before it started: writing the secret on 10.255.255.1 exited with status 255" "$TMP/err"
check "unreachable host: nothing left" wait_gone 5
finish
