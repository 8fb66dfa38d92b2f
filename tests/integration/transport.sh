#!/usr/bin/env bash
# transport.sh - how peers reach each other (docs/cluster.md, "The
# transport"): processes of one host through shared memory, chosen by the
# host id each node gives at bootstrap, others through TCP, and TCP for all
# with DTRAIN_TRANSPORT=tcp. A job with one worker on each (the other
# claims another host with DT_HOST_ID) gets exact sums. A server killed
# with SIGKILL in the middle of a shared-memory job is noticed at once, as
# a closed TCP connection is, and leaves nothing behind: no process, no
# file in /dev/shm.
. "$(dirname "$0")/cluster_lib.bash"

KV="$DTRAIN_BUILD/tests/progs/kv_check"
export PS_VERBOSE=1
shm_files() { find /dev/shm -maxdepth 1 -mindepth 1 2>/dev/null | sort; }
shm_before=$(shm_files)

# ---- one worker on this host, one "on another": both see exact sums
port=$(free_port)
job_env "$port" 1 2
log "mixed: a shared-memory worker and a TCP worker on port $port"
pids=()
DMLC_ROLE=scheduler spawn mixed.sched "$KV" sum
pids+=("$SPAWNED")
DMLC_ROLE=server spawn mixed.server "$KV" sum
pids+=("$SPAWNED")
DMLC_ROLE=worker DMLC_WORKER_ID=0 spawn mixed.w0 "$KV" sum
pids+=("$SPAWNED")
DMLC_ROLE=worker DMLC_WORKER_ID=1 DT_HOST_ID=another-host spawn mixed.w1 \
	"$KV" sum
pids+=("$SPAWNED")
for i in "${!pids[@]}"; do
	expect_exit "${pids[$i]}" 90 0 "mixed job process #$i"
done
assert_grep "$T_DIR/mixed.w0.log" "connected to server 0 at 127\.0\.0\.1:[0-9]+ \(shm\)$" \
	"worker 0 (same host)"
assert_grep "$T_DIR/mixed.w1.log" "connected to server 0 at 127\.0\.0\.1:[0-9]+$" \
	"worker 1 (another host id)"
assert_grep "$T_DIR/mixed.server.log" "worker 0 connected from local pid [0-9]+" "server"
assert_grep "$T_DIR/mixed.server.log" "worker 1 connected from 127\.0\.0\.1:" "server"
log "mixed: ok"

# ---- DTRAIN_TRANSPORT=tcp: TCP for every peer
port=$(free_port)
job_env "$port" 1 2
export DTRAIN_TRANSPORT=tcp
pids=()
for role in scheduler server worker worker; do
	n=${#pids[@]}
	DMLC_ROLE=$role spawn "tcp.$n.$role" "$KV" sum
	pids+=("$SPAWNED")
done
for i in "${!pids[@]}"; do
	expect_exit "${pids[$i]}" 90 0 "tcp job process #$i"
done
unset DTRAIN_TRANSPORT
if grep -q "(shm)\|from local pid" "$T_DIR"/tcp.*.log; then
	fail "DTRAIN_TRANSPORT=tcp: a peer used shared memory"
fi
[ "$(cat "$T_DIR"/tcp.*.worker.log | grep -c "connected to server 0 at 127\.0\.0\.1:[0-9]*$")" -eq 2 ] ||
	fail "DTRAIN_TRANSPORT=tcp: the workers did not connect over TCP"
log "forced TCP: ok"

# ---- a server killed in the middle of a shared-memory job
port=$(free_port)
job_env "$port" 1 1
export KV_CHECK_PUSHES=100000000
log "SIGKILL: the server of a busy dist_async job on port $port"
DMLC_ROLE=scheduler spawn kill.sched "$KV" async
sched=$SPAWNED
DMLC_ROLE=server spawn kill.server "$KV" async
server=$SPAWNED
DMLC_ROLE=worker spawn kill.worker "$KV" async
worker=$SPAWNED
unset KV_CHECK_PUSHES
wait_for_line "$T_DIR/kill.worker.log" "connected to server 0 at .*\(shm\)" 60 ||
	fail "the worker did not reach the server through shared memory"
wait_for_line "$T_DIR/kill.server.log" "server 0 is ready" 60 ||
	fail "the server did not get ready"
kill -KILL "$(child_of "$server")"
t0=$(date +%s%N)
expect_exit "$worker" 30 nonzero "the worker after its server's SIGKILL"
dt_ms=$((($(date +%s%N) - t0) / 1000000))
assert_grep "$T_DIR/kill.worker.log" "server 0" "the worker's error names the server"
log "the worker ended $dt_ms ms after the kill: $(grep -i 'server 0' "$T_DIR/kill.worker.log" | tail -n 1 | tail -c 200)"
expect_exit "$sched" 60 nonzero "the scheduler after the server's SIGKILL"
wait_exit "$server" 10 || fail "the killed server's group did not end"
assert_groups_gone
[ "$(shm_files)" = "$shm_before" ] ||
	fail "/dev/shm changed: $(diff <(echo "$shm_before") <(shm_files) | tr '\n' ' ')"
log "SIGKILL: ok (nothing left in /dev/shm, no process left)"
