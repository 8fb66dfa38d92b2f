#!/usr/bin/env bash
# cluster_manual.sh - seed 001's "Manually Launching Jobs": one command
# started five times with different DMLC_ROLE (2 servers, the scheduler,
# 2 workers), here examples/hello_cluster. Every process must exit 0;
# with PS_VERBOSE=1 the scheduler shows rank assignment and barriers.
# Then the same by hand with tests/progs/barrier_probe for 2 servers and
# 3 workers, which checks that nobody passes a barrier early.
. "$(dirname "$0")/cluster_lib.bash"

# ---- hello_cluster, the seed's recipe
port=$(free_port)
job_env "$port" 2 2
export PS_VERBOSE=1
log "hello_cluster: 2 servers, scheduler, 2 workers on port $port"
pids=()
for role in server server scheduler worker worker; do
	n=${#pids[@]}
	DMLC_ROLE=$role spawn "hello.$n.$role" "$HELLO"
	pids+=("$SPAWNED")
done
for i in "${!pids[@]}"; do
	expect_exit "${pids[$i]}" 90 0 "hello_cluster #$i"
done
sched="$T_DIR/hello.2.scheduler.log"
# Rank assignment: 2 servers and 2 workers, each rank once.
for r in 0 1; do
	assert_grep "$sched" "assigned rank $r to the server at 127\.0\.0\.1:" "scheduler"
	assert_grep "$sched" "assigned rank $r to the worker at 127\.0\.0\.1:" "scheduler"
done
[ "$(grep -c 'assigned rank' "$sched")" -eq 4 ] || fail "expected 4 rank assignments"
assert_grep "$sched" "barrier #1 over group mask 7: all 4 nodes arrived" "scheduler"
assert_grep "$sched" "barrier #2 over group mask 4: all 2 nodes arrived" "scheduler"
assert_grep "$sched" "job over: every node has left" "scheduler"
workers=$(cat "$T_DIR"/hello.3.worker.log "$T_DIR"/hello.4.worker.log)
for r in 0 1; do
	grep -q "worker $r passed the barriers" <<<"$workers" ||
		fail "no worker $r passed the barriers"
	grep -q "\[worker $r\] passed barrier #1 over group mask 7" <<<"$workers" ||
		fail "worker $r: no PS_VERBOSE barrier line"
done
# The workers said hello to every server.
servers=$(cat "$T_DIR"/hello.0.server.log "$T_DIR"/hello.1.server.log)
[ "$(grep -c 'message from worker .: hello from worker' <<<"$servers")" -eq 4 ] ||
	fail "the servers did not get 4 hellos"
assert_groups_gone
log "hello_cluster: ok"

# ---- barrier_probe, 2 servers x 3 workers
port=$(free_port)
job_env "$port" 2 3
export PROBE_DIR="$T_DIR/probe"
mkdir -p "$PROBE_DIR"
log "barrier_probe: 2 servers x 3 workers on port $port"
pids=()
for role in scheduler server server worker worker worker; do
	n=${#pids[@]}
	DMLC_ROLE=$role spawn "probe.$n.$role" "$PROBE"
	pids+=("$SPAWNED")
done
for i in "${!pids[@]}"; do
	expect_exit "${pids[$i]}" 90 0 "barrier_probe #$i"
done
probe_out=$(cat "$T_DIR"/probe.*.log)
for who in "server 0" "server 1" "worker 0" "worker 1" "worker 2"; do
	grep -q "^$who passed 3 rounds of barriers" <<<"$probe_out" ||
		fail "$who did not pass its barriers"
done
assert_grep "$T_DIR/probe.0.scheduler.log" "over group mask 6: all 5 nodes arrived" "scheduler"
assert_grep "$T_DIR/probe.0.scheduler.log" "over group mask 2: all 2 nodes arrived" "scheduler"
assert_grep "$T_DIR/probe.0.scheduler.log" "over group mask 4: all 3 nodes arrived" "scheduler"
assert_groups_gone
log "barrier_probe: ok"
