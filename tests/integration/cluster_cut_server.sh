#!/usr/bin/env bash
# cluster_cut_server.sh - a worker whose connection to a server is cut
# (the server still running) must not tell the scheduler it is done: under
# dist_sync the servers would then wait forever for its pushes, and the
# other worker with them. The job ends instead, everywhere, naming the
# worker.
#
# The job is started by hand (no launcher to stop it when a worker fails):
# `dtrain scheduler`, two `dtrain server`s and two linreg workers over TCP.
# Mid-training the kernel ends worker 1's connection to server 0 (`ss -K`,
# root and a kernel with socket destroy needed: skipped otherwise).
. "$(dirname "$0")/cluster_lib.bash"

LIMIT_S=30

if [ "$(id -u)" != 0 ] || ! command -v ss >/dev/null; then
	echo "skipped: needs root and ss (iproute2) to cut a connection"
	exit 0
fi
# Can this kernel destroy a socket? (CONFIG_INET_DIAG_DESTROY)
if ! python3 - <<'EOF'
import socket, subprocess, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
p = s.getsockname()[1]
c = socket.create_connection(("127.0.0.1", p)); a, _ = s.accept()
subprocess.run(["ss", "-K", "dst", f"127.0.0.1:{p}"], capture_output=True)
try:
    c.send(b"x"); c.recv(1)
except OSError:
    sys.exit(0)
sys.exit(1)
EOF
then
	echo "skipped: this kernel cannot destroy a socket (ss -K)"
	exit 0
fi

port=$(free_port)
job_env "$port" 2 2
export PS_VERBOSE=1 DTRAIN_TRANSPORT=tcp
# (its epoch lines reach the file a buffer at a time, about a dozen epochs:
# no stdbuf, whose preloaded library a sanitizer build refuses)
LIN=("$DTRAIN_BUILD/examples/linreg" --kvstore dist_sync --batch-size 100
	--epochs 100000)
spawn scheduler "$DTRAIN" scheduler
sched=$SPAWNED
DMLC_SERVER_ID=0 spawn server0 "$DTRAIN" server
s0=$SPAWNED
DMLC_SERVER_ID=1 spawn server1 "$DTRAIN" server
s1=$SPAWNED
DMLC_ROLE=worker DMLC_WORKER_ID=0 spawn worker0 "${LIN[@]}"
w0=$SPAWNED
DMLC_ROLE=worker DMLC_WORKER_ID=1 spawn worker1 "${LIN[@]}"
w1=$SPAWNED
# (rank 0 prints the epochs)
wait_for_line "$T_DIR/worker0.log" "Epoch\[1\]" 60 ||
	fail "the job did not start training"
addr=$(sed -n 's/.*connected to server 0 at \(127\.0\.0\.1:[0-9]*\).*/\1/p' \
	"$T_DIR/worker1.log" | head -n 1)
[ -n "$addr" ] || fail "no TCP address of server 0 in worker 1's log"
w1pid=$(child_of "$w1")
# Worker 1's end of its connection to server 0 (its local port).
sport=$(ss -tnpH state established dst "$addr" |
	awk -v pid="pid=$w1pid," 'index($0, pid) { split($3, a, ":"); print a[2]; exit }')
[ -n "$sport" ] || fail "no connection of worker 1 (pid $w1pid) to $addr"
kill_ns=$(date +%s%N)
ss -K dst "$addr" src "127.0.0.1:$sport" >/dev/null 2>&1
log "cut worker 1's connection 127.0.0.1:$sport -> server 0 at $addr"

for p in w1 w0 s0 s1 sched; do
	case $p in
	w1) pid=$w1 what=worker1 ;;
	w0) pid=$w0 what=worker0 ;;
	s0) pid=$s0 what=server0 ;;
	s1) pid=$s1 what=server1 ;;
	sched) pid=$sched what=scheduler ;;
	esac
	left=$((LIMIT_S - ($(date +%s%N) - kill_ns) / 1000000000))
	[ "$left" -ge 1 ] || left=1
	expect_exit "$pid" "$left" nonzero "$what"
	log "$what: exit $EXIT_STATUS at $((($(date +%s%N) - kill_ns) / 1000000)) ms"
done
assert_grep "$T_DIR/worker1.log" "stops after losing server 0: not telling the scheduler it is done" \
	"worker 1 says why it leaves without a word"
assert_grep "$T_DIR/scheduler.log" "worker 1" "the scheduler names worker 1"
grep -q "worker 1 is done" "$T_DIR/scheduler.log" &&
	fail "the scheduler counted worker 1 as done"
assert_groups_gone
log "worker 1 cut from server 0: the job ended everywhere within $LIMIT_S s"
