#!/usr/bin/env bash
# heartbeat.sh - a frozen peer is noticed (docs/fault-tolerance.md): with
# PS_HEARTBEAT_INTERVAL=0.2 and PS_HEARTBEAT_TIMEOUT=2,
#   1. SIGSTOP of the scheduler, of a server and of a worker, in a linreg
#      and a short mnist job under `dtrain launch`: the job ends with status
#      1 within timeout + 6 s (a loaded machine's slack: a node that
#      never noticed would wait out far longer limits), every survivor's error names the frozen node
#      ("server 0 (pid N on host H) sent nothing for 2.2 s"), so does the
#      launcher's verdict ("job failed: server 0 frozen (stopped by signal
#      19, ...)"), and nothing is left running, the stopped process included;
#   2. a partition: a server in a network namespace of its own, behind a
#      veth pair, and every packet over the pair dropped by a tc qdisc (the
#      TCP connections stay open; nothing is closed or signalled): the
#      scheduler and the worker name the server, the server names the
#      scheduler, all within timeout + 6 s. Needs root, ip and tc; skipped
#      with the reason otherwise.
. "$(dirname "$0")/cluster_lib.bash"

TIMEOUT_S=2
# (the usual end is within 2 s of the timeout; 6 s, scaled under a
# sanitizer, holds on a loaded machine, and a node that never noticed
# would wait out its own far longer limits)
LIMIT_MS=$(((TIMEOUT_S + 6) * 1000 * DT_TEST_TIME_SCALE))
HB=(--env PS_HEARTBEAT_INTERVAL=0.2 --env "PS_HEARTBEAT_TIMEOUT=$TIMEOUT_S")
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# stop_case NAME ROLE LABEL CMD...: launch 2 servers and 2 workers running
# CMD, SIGSTOP the process LABEL ("server 0") once training has begun.
stop_case() {
	local name=$1 role=$2 label=$3 pid t0 ms who lbl
	shift 3
	spawn "$name" "$DTRAIN" launch -v -n 2 -s 2 "${HB[@]}" -- "$@"
	local lpid=$SPAWNED logf="$T_DIR/$name.log"
	wait_for_line "$logf" "Epoch\[0\]" 120 || fail "$name: the job did not start training"
	pid=$(sed -n "s/.*started $label (pid \([0-9]*\)).*/\1/p" "$logf" | head -n 1)
	[ -n "$pid" ] || fail "$name: no pid for $label"
	t0=$(now_ms)
	kill -STOP "$pid"
	wait_exit "$lpid" 60 || fail "$name: the job did not end"
	ms=$(($(now_ms) - t0))
	[ "$EXIT_STATUS" = 1 ] || fail "$name: launcher exited $EXIT_STATUS, expected 1"
	[ "$ms" -le "$LIMIT_MS" ] || fail "$name: the job ended $ms ms after the SIGSTOP (limit $LIMIT_MS)"
	who="$label \\(pid $pid on host [0-9.]*\\) (has )?sent nothing for [0-9.]* s"
	# The launcher's verdict names the frozen node, not the first of the
	# others that exited because of it.
	grep '^dtrain launch: job failed: ' "$logf" | tail -n 1 |
		grep -q "job failed: $label frozen (stopped by signal" ||
		fail "$name: the launcher does not blame the frozen $label: $(grep '^dtrain launch: job failed' "$logf")"
	# Every survivor names the frozen node in its error (one that the
	# launcher stopped first, once the frozen node was named, has none:
	# on a slow build a survivor may not have noticed yet).
	for lbl in scheduler "server 0" "server 1" "worker 0" "worker 1"; do
		[ "$lbl" = "$label" ] && continue
		grep -Eq "^dtrain launch: $lbl \(pid [0-9]+\) killed by signal 15" "$logf" && continue
		grep -E "^\[$lbl\] " "$logf" | grep -Eq -- "$who" ||
			fail "$name: $lbl does not name the frozen $label"
	done
	# The stopped process was continued and ended too.
	if kill -0 "$pid" 2>/dev/null && [ "$(proc_scan pgrp "$pid" | grep -v ' Z$')" ]; then
		fail "$name: the stopped $label (pid $pid) is still there"
	fi
	assert_groups_gone
	log "$name: $label stopped -> job ended in $ms ms, every survivor named it"
}

LINREG=("$DTRAIN_BUILD/examples/linreg" --kvstore dist_sync --epochs 100000)
stop_case linreg_scheduler scheduler scheduler "${LINREG[@]}"
stop_case linreg_server server "server 0" "${LINREG[@]}"
stop_case linreg_worker worker "worker 1" "${LINREG[@]}"
if [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
	MNIST=("$DTRAIN_BUILD/examples/mnist" --kvstore dist_sync --model mlp
		--epochs 50 --limit 4096 --batch-size 32 --disp-batches 4 --data "$DATA")
	stop_case mnist_scheduler scheduler scheduler "${MNIST[@]}"
	stop_case mnist_server server "server 1" "${MNIST[@]}"
	stop_case mnist_worker worker "worker 0" "${MNIST[@]}"
else
	log "mnist cases skipped: Fashion-MNIST not installed at $DATA"
fi

# ---- the partition
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
	log "partition case skipped: needs root, ip and tc (iproute2)"
	exit 0
fi
NS=dthb$$
VA=dthb$$a
VB=dthb$$b
NET=10.213.$(($$ % 250 + 1))
netns_cleanup() {
	ip netns del "$NS" 2>/dev/null
	ip link del "$VA" 2>/dev/null
}
trap 'cleanup; netns_cleanup' EXIT
ip netns add "$NS" && ip link add "$VA" type veth peer name "$VB" &&
	ip link set "$VB" netns "$NS" &&
	ip addr add "$NET.1/24" dev "$VA" && ip link set "$VA" up &&
	ip -n "$NS" addr add "$NET.2/24" dev "$VB" && ip -n "$NS" link set "$VB" up &&
	ip -n "$NS" link set lo up || {
	log "partition case skipped: cannot make a network namespace here"
	exit 0
}
# Drop every packet: a token bucket whose burst (1 byte) no packet fits.
DROP=(root tbf rate 8bit burst 1 limit 1)
if ! tc qdisc add dev "$VA" "${DROP[@]}" 2>"$T_DIR/tc.err"; then
	log "partition case skipped: tc cannot drop packets here ($(cat "$T_DIR/tc.err"))"
	exit 0
fi
tc qdisc del dev "$VA" root

port=$(free_port)
job_env "$port" 1 1
export DMLC_PS_ROOT_URI=$NET.1 PS_HEARTBEAT_INTERVAL=0.2 PS_HEARTBEAT_TIMEOUT=$TIMEOUT_S
DMLC_ROLE=scheduler DMLC_NODE_HOST=$NET.1 spawn part.scheduler "${LINREG[@]}"
sched=$SPAWNED
DMLC_ROLE=server spawn part.server ip netns exec "$NS" env DMLC_NODE_HOST="$NET.2" "${LINREG[@]}"
server=$SPAWNED
DMLC_ROLE=worker DMLC_NODE_HOST=$NET.1 spawn part.worker "${LINREG[@]}"
worker=$SPAWNED
wait_for_line "$T_DIR/part.worker.log" "Epoch\[0\]" 120 || fail "partition: the job did not start training"
spid=$(child_of "$server")
t0=$(now_ms)
tc qdisc add dev "$VA" "${DROP[@]}" && ip netns exec "$NS" tc qdisc add dev "$VB" "${DROP[@]}" ||
	fail "partition: tc failed"
for p in "$sched" "$server" "$worker"; do
	expect_exit "$p" 60 nonzero "partition: pid $p"
done
ms=$(($(now_ms) - t0))
[ "$ms" -le "$LIMIT_MS" ] || fail "partition: the nodes ended $ms ms after the drop (limit $LIMIT_MS)"
assert_grep "$T_DIR/part.scheduler.log" "server 0 \(pid [0-9]+ on host $NET\.2\) sent nothing for" scheduler
assert_grep "$T_DIR/part.worker.log" "server 0 \(pid [0-9]+ on host $NET\.2\) sent nothing for" worker
assert_grep "$T_DIR/part.server.log" "scheduler \(pid [0-9]+ on host $NET\.1\) (has )?sent nothing for" server
assert_groups_gone
log "partition: every node ended within $ms ms, naming the other side (server pid ${spid:-?})"
