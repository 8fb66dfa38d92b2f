#!/usr/bin/env bash
# join_park.sh - the parked join of a large job (docs/scale.md), forced on
# a small one with DTRAIN_JOIN_PARK_MIN=1 (and the control tree with
# DTRAIN_CTRL_TREE_MIN=1, DTRAIN_CTRL_ARITY=2): 2 servers and 6 workers of
# tests/progs/barrier_probe on one host.
#   1. Every worker's join is parked (the scheduler answers its ADD_NODE
#      with JOIN_PARK, the worker closes its connection) and called back
#      with its assignment once all joined; the servers join as before.
#      Every node passes 3 rounds of barriers and ends 0; a worker under
#      another node closes the called-back connection as soon as its edge
#      to its tree parent is up, before the start-up barrier.
#   2. A parked worker killed (SIGKILL) before the last node joins: the
#      scheduler names it (its pid) when its call back is refused, within
#      DT_CONNECT_TIMEOUT (2 s) and LIMIT_S, and every other process ends
#      non-zero naming it too: the workers called back before got the
#      ABORT on their connections, the others are called back with it.
#   3. A parked worker frozen (SIGSTOP): its call back gets no answer; the
#      scheduler names it within DT_CONNECT_TIMEOUT and LIMIT_S, and every
#      other process ends non-zero; the frozen one is let go and ends
#      once its wait for a call back, twice DT_JOIN_TIMEOUT, is over.
#   4. A job whose last worker never comes (DT_JOIN_TIMEOUT=3): the
#      parked workers are called back with the scheduler's ABORT, which
#      says how many joined, and end within LIMIT_S of the timeout.
. "$(dirname "$0")/cluster_lib.bash"

LIMIT_S=15
export DTRAIN_CTRL_TREE_MIN=1 DTRAIN_CTRL_ARITY=2 DTRAIN_JOIN_PARK_MIN=1
export DT_CONNECT_TIMEOUT=2 PS_VERBOSE=1

# spawn_job TAG [WORKERS]: the scheduler, servers 0-1 and workers 0 to
# WORKERS-1 (6) of a job of 6 workers.
spawn_job() {
	local tag=$1 nw=${2:-6} r
	port=$(free_port)
	job_env "$port" 2 6
	export PROBE_DIR="$T_DIR/probe.$tag"
	mkdir -p "$PROBE_DIR"
	pids=()
	DMLC_ROLE=scheduler spawn "$tag.scheduler" "$PROBE"
	sched=$SPAWNED
	for r in 0 1; do
		DMLC_ROLE=server DMLC_SERVER_ID=$r spawn "$tag.server$r" "$PROBE"
		pids+=("$SPAWNED")
	done
	for ((r = 0; r < nw; r++)); do
		spawn_worker "$tag" "$r"
	done
}

# spawn_worker TAG RANK
spawn_worker() {
	DMLC_ROLE=worker DMLC_WORKER_ID=$2 spawn "$1.worker$2" "$PROBE"
	pids+=("$SPAWNED")
}

# parked TAG RANK: wait until worker RANK's join is parked.
parked() {
	wait_for_line "$T_DIR/$1.worker$2.log" "the scheduler parked this node's join" 20 ||
		fail "$1: worker $2's join was not parked"
}

# ---- 1. a whole job with parked joins
spawn_job probe
expect_exit "$sched" 90 0 "probe: the scheduler"
for i in "${!pids[@]}"; do
	expect_exit "${pids[$i]}" 30 0 "probe: node #$i"
done
assert_grep "$T_DIR/probe.scheduler.log" "8 servers and workers: the workers' joins are parked" "probe: scheduler"
assert_grep "$T_DIR/probe.scheduler.log" "called back 6 parked workers with their assignments in [0-9.]+ s" "probe: scheduler"
for r in 0 1 2 3 4 5; do
	f="$T_DIR/probe.worker$r.log"
	assert_grep "$f" "^worker $r passed 3 rounds of barriers" "probe: worker $r"
	assert_grep "$f" "the scheduler parked this node's join" "probe: worker $r"
	assert_grep "$f" "the scheduler called back from" "probe: worker $r"
done
for r in 0 1; do
	grep -q "parked this node's join" "$T_DIR/probe.server$r.log" &&
		fail "probe: server $r's join was parked"
	assert_grep "$T_DIR/probe.server$r.log" "^server $r passed 3 rounds of barriers" "probe: server $r"
done
# (worker 5 hangs under worker 1: it closes the scheduler's connection
# once its edge is up, before the start-up barrier passed)
f="$T_DIR/probe.worker5.log"
assert_grep "$f" "control tree: parent worker 1" "probe: worker 5"
first_close=$(grep -n "closed the idle connection to the scheduler" "$f" | head -1 | cut -d: -f1)
started=$(grep -n "passed barrier #1 over group mask 7" "$f" | head -1 | cut -d: -f1)
[ -n "$first_close" ] && [ -n "$started" ] && [ "$first_close" -lt "$started" ] ||
	fail "probe: worker 5 did not close the scheduler's connection before the start-up barrier (lines $first_close, $started)"
assert_groups_gone
log "probe: every worker parked and called back; worker 5 closed its connection to the scheduler before the start-up barrier"

# ---- 2. a parked worker killed before the last node joins
spawn_job killed 5
parked killed 3
victim=$(child_of "${pids[5]}")
[ -n "$victim" ] || fail "killed: no pid for worker 3"
kill -KILL "$victim"
t_now
t_kill=$T_NOW
spawn_worker killed 5
expect_exit "$sched" "$LIMIT_S" nonzero "killed: the scheduler"
t_now
log "killed: the scheduler ended $(((T_NOW - t_kill) / 1000000)) ms after the kill"
assert_grep "$T_DIR/killed.scheduler.log" "worker 3 \\(pid $victim at [^)]*\\) was lost before the job started: its join was parked" "killed: scheduler"
for i in "${!pids[@]}"; do
	[ "$i" = 5 ] && continue
	expect_exit "${pids[$i]}" "$LIMIT_S" nonzero "killed: node #$i"
done
for f in "$T_DIR"/killed.server*.log "$T_DIR"/killed.worker[01245].log; do
	assert_grep "$f" "worker 3 \\(pid $victim" "killed: $(basename "$f")"
done
wait_exit "${pids[5]}" "$LIMIT_S" || fail "killed: worker 3's timeout did not end"
assert_groups_gone
log "killed: the scheduler and every other node named worker 3 (pid $victim)"

# ---- 3. a parked worker frozen (a join timeout of 4 s, scaled: once let
# go, the frozen worker gives up its wait for a call back after twice
# that)
DT_JOIN_TIMEOUT=$((4 * DT_TEST_TIME_SCALE)) spawn_job frozen 5
parked frozen 2
victim=$(child_of "${pids[4]}")
[ -n "$victim" ] || fail "frozen: no pid for worker 2"
kill -STOP "$victim"
spawn_worker frozen 5
expect_exit "$sched" "$LIMIT_S" nonzero "frozen: the scheduler"
assert_grep "$T_DIR/frozen.scheduler.log" "worker 2 \\(pid $victim at [^)]*\\) was lost before the job started" "frozen: scheduler"
for i in "${!pids[@]}"; do
	[ "$i" = 4 ] && continue
	expect_exit "${pids[$i]}" "$LIMIT_S" nonzero "frozen: node #$i"
done
kill -CONT "$victim"
expect_exit "${pids[4]}" "$LIMIT_S" nonzero "frozen: worker 2, let go"
assert_grep "$T_DIR/frozen.worker2.log" "did not call back with its assignment within 2 x DT_JOIN_TIMEOUT" "frozen: worker 2"
assert_groups_gone
log "frozen: the scheduler named worker 2 (pid $victim); every node ended"

# ---- 4. the last worker never comes
DT_JOIN_TIMEOUT=3 spawn_job late 5
for r in 0 1 2 3 4; do
	parked late "$r"
done
expect_exit "$sched" "$LIMIT_S" nonzero "late: the scheduler"
for i in "${!pids[@]}"; do
	expect_exit "${pids[$i]}" "$LIMIT_S" nonzero "late: node #$i"
done
for r in 0 1 2 3 4; do
	assert_grep "$T_DIR/late.worker$r.log" "only 2 of 2 servers and 5 of 6 workers joined within 3 s" "late: worker $r"
done
assert_groups_gone
log "late: every parked worker was called back with the abort"

log "done"
