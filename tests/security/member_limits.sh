#!/usr/bin/env bash
# member_limits.sh - a member of a live job (it holds the secret: the
# job's only worker, tests/progs/kv_member) asks its server, with
# requests of a few kilobytes, for what used to exhaust or crash it: an
# init whose value is empty, a row table of 2^36 rows and a push of rows
# spread over it, a pull naming one 8 MiB row 256 times, a switch to
# dist_sync under a dist_async key. Each is refused with its fault named,
# the server's resident memory stays within 32 MiB of where it was, the
# server then pushes and pulls as before, and every process exits 0
# (docs/security.md, "What a member may ask of a server").
. "$(dirname "$0")/../integration/cluster_lib.bash"

out=$(timeout 240 "$DTRAIN" launch -n 1 -s 1 -- "$DTRAIN_BUILD/tests/progs/kv_member" 2>&1)
rc=$?
echo "$out" | grep "kv_member"
[ "$rc" = 0 ] || { echo "$out" | tail -20; fail "kv_member exited $rc"; }
echo "$out" | grep -q "every request refused with its fault named, the server stayed small and went on" ||
	fail "kv_member did not finish"
assert_groups_gone
log "ok"
