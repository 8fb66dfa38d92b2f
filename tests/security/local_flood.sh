#!/usr/bin/env bash
# local_flood.sh - strangers on the same host against a server's local
# (shared-memory) listener, an abstract Unix socket any local process can
# reach (docs/security.md, "The same host"): 300 connections without the
# proof of the job key (half a wrong one, half none), and, as root, one of
# another user. The server allocates nothing for them (no memfd, eventfd
# or extra epoll set appears in its descriptors while they come), logs its
# refusals at most once a second with the count left out, and then a real
# worker joins through shared memory and gets exact sums.
. "$(dirname "$0")/../integration/cluster_lib.bash"

command -v python3 >/dev/null || fail "python3 is needed to play the strangers"
KV="$DTRAIN_BUILD/tests/progs/kv_check"
export DTRAIN_JOB_ID=local-flood-$$
[ -n "${DTRAIN_SECRET:-}" ] || export DTRAIN_SECRET="local flood test secret $$"

# the descriptors a shared-memory link costs, in process $1
link_fds() {
	local n=0 f t
	for f in /proc/"$1"/fd/*; do
		t=$(readlink "$f" 2>/dev/null) || continue
		case $t in
		/memfd:* | "anon_inode:[eventfd]" | "anon_inode:[eventpoll]") n=$((n + 1)) ;;
		esac
	done
	echo "$n"
}

port=$(free_port)
job_env "$port" 1 1
DMLC_ROLE=scheduler spawn sched "$KV" sum
sched=$SPAWNED
DMLC_ROLE=server spawn server "$KV" sum
server=$SPAWNED
deadline=$(($(date +%s) + 30))
spid=
name=
while [ -z "$name" ]; do
	[ "$(date +%s)" -lt "$deadline" ] || fail "the server's local socket did not appear"
	[ -n "$spid" ] || spid=$(child_of "$server")
	[ -n "$spid" ] &&
		name=$(grep -o "@dtrain\.$spid\.[0-9a-f]*" /proc/net/unix | head -n 1)
	sleep 0.05
done
name=${name#@}
before=$(link_fds "$spid")
log "server pid $spid listens on @$name ($before epoll/eventfd/memfd descriptors)"

# Another user first (as root), until its refusal is logged: the flood's
# refusals would hold its line back.
if [ "$(id -u)" -eq 0 ]; then
	python3 - "$name" <<'PY' || fail "the other user could not connect"
import os, socket, sys
os.setgid(65534)
os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("\0" + sys.argv[1])
try:
    s.send(b"DTL1" + bytes(32))
    s.recv(1)  # until the server hangs up
except OSError:
    pass  # (refused before our proof was sent or read: a broken pipe, a reset)
PY
	wait_for_line "$T_DIR/server.log" "not this job's user" 20 ||
		fail "the other user's connection was not refused"
	[ "$(link_fds "$spid")" -eq "$before" ] || fail "the other user got descriptors"
	log "another user: refused, nothing allocated"
fi

# The flood, in the background; it holds its connections 2 s.
python3 - "$name" >"$T_DIR/strangers.log" 2>&1 <<'PY' &
import socket, sys, time
name = "\0" + sys.argv[1]
socks = []
for i in range(300):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(name)
    if i % 2 == 0:
        try:
            s.send(b"DTL1" + b"\xff" * 32)
        except OSError:
            pass  # already refused
    socks.append(s)
print("connected 300", flush=True)
time.sleep(2)
PY
strangers=$!
# While they come and wait, no link's descriptors appear on the server.
while kill -0 "$strangers" 2>/dev/null; do
	now=$(link_fds "$spid")
	[ "$now" -eq "$before" ] ||
		fail "the server holds $now epoll/eventfd/memfd descriptors, $before before"
	sleep 0.02
done
wait "$strangers" || fail "the strangers' script failed: $(cat "$T_DIR/strangers.log")"
grep -q "connected 300" "$T_DIR/strangers.log" || fail "the strangers did not connect"
log "300 strangers: nothing allocated"

# A member still gets in, through shared memory.
DMLC_ROLE=worker spawn worker env PS_VERBOSE=1 "$KV" sum
worker=$SPAWNED
expect_exit "$worker" 90 0 "worker"
expect_exit "$server" 30 0 "server"
expect_exit "$sched" 30 0 "scheduler"
assert_grep "$T_DIR/worker.log" "connected to server 0 at .*\(shm\)" "worker over shared memory"

lines=$(grep -c "refusing a local connection" "$T_DIR/server.log")
log "server: $lines refusal lines"
[ "$lines" -ge 1 ] && [ "$lines" -le 5 ] ||
	fail "$lines refusal lines for about 300 refusals in 2-3 s"
assert_grep "$T_DIR/server.log" "more refused in the last second" "the count of refusals left out"
log "ok"
