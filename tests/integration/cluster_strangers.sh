#!/usr/bin/env bash
# cluster_strangers.sh - a running job survives a stranger who speaks the
# protocol. With a job up (scheduler, a server, a worker that stays), a
# stranger connects to the server and sends: a HELLO naming node 2^31
# (an id that used to pass the bound check as a negative int and crash
# the node), a HELLO naming the live worker (which used to replace its
# connection), a HELLO naming a server, a TEXT before HELLO carrying a
# forged log line, and KV frames before HELLO (a push of NaNs, an INIT
# declaring 4 GiB), a header a byte at a time, and 40 silent connections.
# Each is dropped with its reason logged, nothing of it reaches the store
# or the log as text, and the job then ends with every exit 0. Then, at a second scheduler, more nodes of one role than the job
# has are refused by role (this used to overflow the scheduler's table).
# The stranger here holds the job's secret (a buggy or hostile insider):
# authentication lets it in, and these checks are what is left to stop it.
# Strangers without the secret are refused earlier (tests/security).
. "$(dirname "$0")/cluster_lib.bash"

command -v python3 >/dev/null || fail "python3 is needed to send raw frames"
IDLE="$DTRAIN_BUILD/tests/progs/idle_worker"
SECURITY="$(cd "$(dirname "$0")/../security" && pwd)"

port=$(free_port)
job_env "$port" 1 1
export PS_VERBOSE=1
# Strangers that never say who they are go after 2 s; 16 at most at once.
export DT_HANDSHAKE_TIMEOUT=2 DT_MAX_PENDING_CONNS=16
spawn scheduler "$DTRAIN" scheduler
sched_pid=$SPAWNED
DMLC_ROLE=server spawn server "$DTRAIN" server
server_pid=$SPAWNED
DMLC_ROLE=worker spawn worker "$IDLE" "$T_DIR/done"
worker_pid=$SPAWNED
wait_for_line "$T_DIR/worker.log" "idle_worker ready" 60 ||
	fail "the job did not start"
sport=$(sed -n 's/.*server listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' \
	"$T_DIR/server.log" | head -1)
[ -n "$sport" ] || fail "the server did not say its port"

# stranger CASE: one connection to the server sending one kind of frame.
stranger() {
	PYTHONPATH=$SECURITY python3 - "$sport" "$1" <<'PY'
import os, socket, struct, sys
import dtpeer
port, case = int(sys.argv[1]), sys.argv[2]

def hdr(cmd, sender=0, meta_len=0, payload_len=0, flags=0, key=0, arg0=0):
    return dtpeer.hdr(cmd, sender=sender, meta_len=meta_len,
                      payload_len=payload_len, flags=flags, key=key, arg0=arg0)

s = socket.create_connection(("127.0.0.1", port), timeout=10)
# An insider: it holds the job's secret, so it gets past the handshake and
# what it sends next is judged as frames (strangers without the secret are
# tests/security's).
if case != "flood":
    dtpeer.handshake(s, os.environ["DTRAIN_SECRET"].encode())
if case == "hello_2_31":
    s.sendall(hdr(3, sender=1 << 31, flags=1))
elif case == "hello_live_worker":
    s.sendall(hdr(3, sender=2, flags=1))   # worker 0 is node 2 here
elif case == "hello_server":
    s.sendall(hdr(3, sender=1, flags=1))   # a server never dials a server
elif case == "text_before_hello":
    text = b"hi\n[server 0] FAKE LINE"
    s.sendall(hdr(11, sender=2, meta_len=len(text)) + text)
elif case == "push_before_hello":
    nans = struct.pack('<4f', *([float('nan')] * 4))
    s.sendall(hdr(35, sender=2, payload_len=len(nans), flags=1, key=0,
                  arg0=4) + nans)
elif case == "slowloris":
    # A header a byte at a time: hung up on once the 2 s are up.
    import time
    end = time.time() + 20
    for b in struct.pack('<I', 0x4e525444) + bytes(60):  # after the handshake
        try:
            s.sendall(bytes([b]))
        except OSError:
            sys.exit(0)
        s.settimeout(0.2)
        try:
            if s.recv(1) == b"":
                sys.exit(0)
        except socket.timeout:
            pass
        except ConnectionResetError:
            sys.exit(0)
        if time.time() > end:
            break
    sys.exit(1)
elif case == "flood":
    # 40 silent connections: past 16 the oldest are closed at once, and
    # all are gone once the 2 s are up.
    import select, time
    socks = [s] + [socket.create_connection(("127.0.0.1", port), timeout=10)
                   for _ in range(39)]
    end = time.time() + 20
    open_ = set(socks)
    while open_ and time.time() < end:
        r, _, _ = select.select(list(open_), [], [], 0.5)
        for x in r:
            try:
                if x.recv(1) == b"":
                    open_.discard(x)
            except ConnectionResetError:
                open_.discard(x)
    sys.exit(0 if not open_ else 1)
elif case == "init_4gib_before_hello":
    s.sendall(hdr(34, sender=2, payload_len=4 << 30, flags=1, arg0=1 << 30))
    try:
        s.sendall(b"\0" * (1 << 20))
    except OSError:
        pass
# The server must hang up on us (bounded by the timeout).
try:
    while s.recv(65536):
        pass
except (ConnectionResetError, socket.timeout):
    sys.exit(1)
PY
}

check_case() {
	expect_dropped "$1" "$T_DIR/server.log" "$2" "$server_pid" stranger "$1"
}

check_case hello_2_31 "dropping 127\.0\.0\.1:[0-9]+: unexpected HELLO from node 2147483648"
check_case hello_live_worker "dropping 127\.0\.0\.1:[0-9]+: unexpected HELLO from node 2$"
check_case hello_server "dropping 127\.0\.0\.1:[0-9]+: unexpected HELLO from node 1$"
check_case text_before_hello "dropping 127\.0\.0\.1:[0-9]+: TEXT before HELLO"
check_case push_before_hello "dropping 127\.0\.0\.1:[0-9]+: KV_PUSH before HELLO"
check_case init_4gib_before_hello "dropping 127\.0\.0\.1:[0-9]+: KV_INIT before HELLO"
check_case slowloris "dropping 127\.0\.0\.1:[0-9]+: not introduced within 2\.0 s"
check_case flood "16 connections wait for their handshake: closing the oldest ones, from 127\.0\.0\.1:[0-9]+"
grep -q "FAKE LINE" "$T_DIR/server.log" && fail "a stranger's text reached the log"
# (the spawned pid is timeout(1); the server is its child)
srv=$(pgrep -P "$server_pid" | head -1)
[ -n "$srv" ] || fail "no server process under $server_pid"
rss=$(awk '/VmRSS/ {print $2}' "/proc/$srv/status")
[ "${rss:-0}" -gt 0 ] && [ "$rss" -lt 200000 ] ||
	fail "the server holds ${rss:-?} KiB after the strangers"
log "server RSS after the strangers: ${rss} KiB"

touch "$T_DIR/done"
expect_exit "$worker_pid" 60 0 "worker"
expect_exit "$server_pid" 60 0 "server"
expect_exit "$sched_pid" 60 0 "scheduler"
assert_grep "$T_DIR/scheduler.log" "job over: every node has left" "scheduler"

# More nodes of one role than the job has: the extra one is refused by
# role, and the scheduler neither crashes nor mixes it in.
port2=$(free_port)
job_env "$port2" 1 1
spawn scheduler2 "$DTRAIN" scheduler
sched2_pid=$SPAWNED
wait_for_line "$T_DIR/scheduler2.log" "listening on 127\.0\.0\.1:$port2" 30 ||
	fail "the second scheduler did not start listening"
PYTHONPATH=$SECURITY python3 - "$port2" "$T_DIR/scheduler2.log" <<'PY' || fail "the extra worker was not refused"
import os, socket, struct, sys, time
import dtpeer
port, log = int(sys.argv[1]), sys.argv[2]
secret = os.environ["DTRAIN_SECRET"].encode()

def add_node(role, port_of_node):
    host = b"127.0.0.1"
    meta = (struct.pack('<BI', role, 0xffffffff) + struct.pack('<I', len(host))
            + host + struct.pack('<IIII', port_of_node, 4242, 1, 1))
    return struct.pack('<IBBHIIQQQQIIQ', 0x4e525444, 8, 1, 1, 0, 0, 0, 0, 0,
                       0, 0, len(meta), 0) + meta

first = dtpeer.connect(port, secret)
first.sendall(add_node(2, 50001))
deadline = time.time() + 20  # the first one is in before the extra comes
while "127.0.0.1:50001 (pid 4242) joined" not in open(log).read():
    if time.time() > deadline:
        sys.exit(2)
    time.sleep(0.02)
extra = dtpeer.connect(port, secret)
extra.sendall(add_node(2, 50002))
got = b""
try:
    while True:
        b = extra.recv(65536)
        if not b:
            break
        got += b
except (ConnectionResetError, socket.timeout):
    pass
sys.exit(0 if b"the job is full" in got else 1)
PY
wait_for_line "$T_DIR/scheduler2.log" "refusing a worker at 127\.0\.0\.1:50002: the job is full .*this job has 1 workers" 20 ||
	fail "the scheduler did not log the refusal"
kill -0 "$sched2_pid" 2>/dev/null || fail "the second scheduler died"
kill -TERM -- "-$sched2_pid" 2>/dev/null
wait_exit "$sched2_pid" 30 || fail "the second scheduler did not stop"
assert_groups_gone
log "ok"
