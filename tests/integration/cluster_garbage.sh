#!/usr/bin/env bash
# cluster_garbage.sh - a live scheduler survives peers that do not speak
# the protocol. Before the job starts it is sent garbage bytes, a truncated
# header, a header declaring a huge payload, one declaring oversized
# metadata, an ADD_NODE with malformed metadata and a request from a node
# that never joined. Each connection must be dropped with its reason in
# the log while the scheduler stays up; then a `dtrain server` and a
# hello_cluster worker join and the job completes with every exit 0.
. "$(dirname "$0")/cluster_lib.bash"

command -v python3 >/dev/null || fail "python3 is needed to send raw frames"
SECURITY="$(cd "$(dirname "$0")/../security" && pwd)"

port=$(free_port)
job_env "$port" 1 1
export PS_VERBOSE=1
spawn scheduler "$DTRAIN" scheduler
sched_pid=$SPAWNED
wait_for_line "$T_DIR/scheduler.log" "listening on 127\.0\.0\.1:$port" 30 ||
	fail "the scheduler did not start listening"

# send_raw CASE: one connection sending one kind of bad input.
send_raw() {
	PYTHONPATH=$SECURITY python3 - "$port" "$1" <<'PY'
import os, socket, struct, sys, time
import dtpeer
port, case = int(sys.argv[1]), sys.argv[2]

def hdr(cmd, meta_len=0, payload_len=0, flags=0, magic=0x4e525444, ver=8):
    return struct.pack('<IBBHIIQQQQIIQ', magic, ver, cmd, flags, 0, 0, 0, 0,
                       0, 0, 0, meta_len, payload_len)

s = socket.create_connection(("127.0.0.1", port), timeout=10)
# With the job's secret (a buggy node): the frames are what is judged.
dtpeer.handshake(s, os.environ["DTRAIN_SECRET"].encode())
if case == "garbage":
    s.sendall(b"GET / HTTP/1.1\r\nHost: scheduler\r\n\r\n" + bytes(range(256)))
elif case == "truncated":
    s.sendall(hdr(1)[:40])  # part of a header, then hang up
    s.close()
    sys.exit(0)
elif case == "huge_payload":
    s.sendall(hdr(1, payload_len=1 << 62))
elif case == "huge_meta":
    s.sendall(hdr(1, meta_len=0xfffffff0))
elif case == "bad_add_node":
    meta = b"\x02\xff\xff"  # role, then a rank cut short
    s.sendall(hdr(1, meta_len=len(meta), flags=1) + meta)
elif case == "barrier_before_join":
    s.sendall(hdr(5, flags=1))
# The scheduler must hang up on us; wait for it (bounded by the timeout).
try:
    while s.recv(4096):
        pass
except (ConnectionResetError, socket.timeout):
    pass
PY
}

check_case() {
	expect_dropped "$1" "$T_DIR/scheduler.log" "$2" "$sched_pid" send_raw "$1"
}

check_case garbage "dropping connection from 127\.0\.0\.1:[0-9]+: bad frame magic"
check_case truncated "dropping connection from 127\.0\.0\.1:[0-9]+: .*truncated"
check_case huge_payload "dropping connection from 127\.0\.0\.1:[0-9]+: ADD_NODE: payload length 4611686018427387904 exceeds"
check_case huge_meta "dropping connection from 127\.0\.0\.1:[0-9]+: ADD_NODE: metadata length 4294967280 exceeds"
check_case bad_add_node "dropping 127\.0\.0\.1:[0-9]+: malformed ADD_NODE"
check_case barrier_before_join "dropping 127\.0\.0\.1:[0-9]+: bad BARRIER"
grep -q "joined:" "$T_DIR/scheduler.log" && fail "a bad peer was counted as a node"

# Now the real job.
DMLC_ROLE=server spawn server "$DTRAIN" server
server_pid=$SPAWNED
DMLC_ROLE=worker spawn worker "$HELLO"
worker_pid=$SPAWNED
expect_exit "$worker_pid" 60 0 "worker"
expect_exit "$server_pid" 60 0 "server"
expect_exit "$sched_pid" 60 0 "scheduler"
assert_grep "$T_DIR/worker.log" "worker 0 passed the barriers" "worker"
assert_grep "$T_DIR/scheduler.log" "job over: every node has left" "scheduler"
assert_groups_gone
log "ok"
