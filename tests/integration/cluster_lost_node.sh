#!/usr/bin/env bash
# cluster_lost_node.sh - a node killed mid-job ends the job everywhere,
# within 15 s, with errors naming the lost node: never a hang.
#
# The job: `dtrain scheduler`, one `dtrain server`, and two workers running
# tests/progs/barrier_probe. To hold the job mid-flight without sleeping,
# worker 1's first barrier mark ($PROBE_DIR/m4.r0.worker1) is a FIFO: the
# worker joins, passes the start-up barrier, then blocks opening the FIFO
# while worker 0 waits for it in the workers' barrier.
#   1. kill -9 worker 1: scheduler, server and worker 0 exit non-zero
#      naming worker 1.
#   2. kill -9 the server: scheduler and worker 0 exit non-zero naming
#      server 0; worker 1, released from the FIFO afterwards (a worker busy
#      computing), fails at its next call naming server 0 too.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/cluster_lib.bash"

LIMIT_S=15

# start_job: scheduler, server, worker 0 and worker 1 (held at the FIFO).
start_job() {
	local tag=$1
	port=$(free_port)
	job_env "$port" 1 2
	export PS_VERBOSE=1
	export PROBE_DIR="$T_DIR/probe.$tag"
	mkdir -p "$PROBE_DIR"
	mkfifo "$PROBE_DIR/m4.r0.worker1"
	spawn "$tag.scheduler" "$DTRAIN" scheduler
	sched=$SPAWNED
	spawn "$tag.server" "$DTRAIN" server
	server=$SPAWNED
	DMLC_ROLE=worker DMLC_WORKER_ID=0 spawn "$tag.worker0" "$PROBE"
	w0=$SPAWNED
	DMLC_ROLE=worker DMLC_WORKER_ID=1 spawn "$tag.worker1" "$PROBE"
	w1=$SPAWNED
	# Mid-job: everyone passed the start-up barrier, worker 0 is waiting
	# in the workers' barrier, worker 1 is stuck on the FIFO.
	wait_for_line "$T_DIR/$tag.scheduler.log" "all 4 nodes are ready" 60 ||
		fail "$tag: the job did not start"
	local deadline=$(($(date +%s) + 30))
	until [ -e "$PROBE_DIR/m4.r0.worker0" ]; do
		[ "$(date +%s)" -lt "$deadline" ] || fail "$tag: worker 0 did not reach its barrier"
		sleep 0.05
	done
	kill -0 "$w0" && kill -0 "$w1" && kill -0 "$server" && kill -0 "$sched" ||
		fail "$tag: a node ended before the kill"
}

# within_limit PID WHAT PATTERN: PID exits non-zero by the deadline and its
# log matches PATTERN.
within_limit() {
	local pid=$1 what=$2 pattern=$3 left
	left=$(((deadline_ns - $(date +%s%N)) / 1000000000))
	[ "$left" -ge 1 ] || left=1
	expect_exit "$pid" "$left" nonzero "$what"
	assert_grep "$T_DIR/$what.log" "$pattern" "$what names the lost node"
	log "$what: exit $EXIT_STATUS at $((($(date +%s%N) - kill_ns) / 1000000)) ms"
}

# ---- 1. a worker dies
start_job lostw
victim=$(child_of "$w1")
[ -n "$victim" ] || fail "cannot find worker 1's process"
log "kill -9 worker 1 (pid $victim)"
kill -KILL "$victim"
kill_ns=$(date +%s%N)
deadline_ns=$((kill_ns + LIMIT_S * 1000000000))
within_limit "$sched" lostw.scheduler "worker 1 .*was lost"
within_limit "$server" lostw.server "worker 1 .*was lost"
within_limit "$w0" lostw.worker0 "worker 1 .*was lost"
wait "$w1" 2>/dev/null
assert_groups_gone

# ---- 2. the server dies
start_job losts
victim=$(child_of "$server")
[ -n "$victim" ] || fail "cannot find the server's process"
log "kill -9 server 0 (pid $victim)"
kill -KILL "$victim"
kill_ns=$(date +%s%N)
deadline_ns=$((kill_ns + LIMIT_S * 1000000000))
within_limit "$sched" losts.scheduler "server 0 .*was lost"
within_limit "$w0" losts.worker0 "server 0 .*was lost"
# Worker 1 comes back from its "computation" and must fail, not hang.
timeout $((10 * T_SCALE)) cat "$PROBE_DIR/m4.r0.worker1" >/dev/null ||
	fail "could not release worker 1"
kill_ns=$(date +%s%N)
deadline_ns=$((kill_ns + LIMIT_S * 1000000000))
within_limit "$w1" losts.worker1 "server 0 .*was lost|scheduler"
wait "$server" 2>/dev/null
assert_groups_gone
log "ok"
