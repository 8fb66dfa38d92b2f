#!/usr/bin/env bash
# leave_order.sh - at the end of a job, a worker that finished and left is
# not taken for a lost one by the nodes still there, even while the
# scheduler is slow to speak (a big job's scheduler answering hundreds of
# barriers and farewells one by one); a worker killed at the same point
# still ends the job, named.
#
# The job: `dtrain scheduler`, one `dtrain server` and two workers running
# tests/progs/leave_hold (a barrier over the workers, then each leaves when
# the test creates its file), heartbeats every 0.2 s, judged after 60 s.
#   1. After the barrier the scheduler is stopped (SIGSTOP) for more than
#      two heartbeats; worker 0 leaves meanwhile, and worker 1 and the
#      server see its connections close. The scheduler goes on (SIGCONT),
#      worker 1 leaves: every process exits 0, and nobody logs a loss.
#   2. The same, but worker 0 is killed (SIGKILL) instead of leaving: the
#      job ends with the scheduler, the server and worker 1 exiting
#      non-zero, each naming a lost peer and one of them at least worker
#      0 (a survivor that ended on worker 0's loss may be the other's first
#      news; the scheduler names whichever lost connection it handles
#      first).
# Run once over each transport: same-host shared memory, then TCP.
. "$(dirname "$0")/cluster_lib.bash"

PROG="$DTRAIN_BUILD/tests/progs/leave_hold"
[ -x "$PROG" ] || fail "no $PROG (build first)"

# start_job TAG: the four processes, past the workers' barrier.
start_job() {
	local tag=$1 port
	port=$(free_port)
	job_env "$port" 1 2
	export PS_VERBOSE=1 PS_HEARTBEAT_INTERVAL=0.2 PS_HEARTBEAT_TIMEOUT=60
	export LEAVE_DIR="$T_DIR/$tag"
	mkdir -p "$LEAVE_DIR"
	spawn "$tag.scheduler" "$DTRAIN" scheduler
	sched=$SPAWNED
	spawn "$tag.server" "$DTRAIN" server
	server=$SPAWNED
	DMLC_ROLE=worker DMLC_WORKER_ID=0 spawn "$tag.worker0" "$PROG"
	w0=$SPAWNED
	DMLC_ROLE=worker DMLC_WORKER_ID=1 spawn "$tag.worker1" "$PROG"
	w1=$SPAWNED
	wait_for_line "$T_DIR/$tag.worker0.log" "^passed 0" 60 &&
		wait_for_line "$T_DIR/$tag.worker1.log" "^passed 1" 60 ||
		fail "$tag: the workers did not pass their barrier"
	sched_pid=$(child_of "$sched")
	w0_pid=$(child_of "$w0")
	[ -n "$sched_pid" ] && [ -n "$w0_pid" ] || fail "$tag: no scheduler or worker 0 process"
}

# worker0_gone TAG HOW: stop the scheduler, end worker 0 (HOW: leave or
# kill), wait until worker 1 and the server have seen its connection
# close, then let the scheduler go on.
worker0_gone() {
	local tag=$1 how=$2
	kill -STOP "$sched_pid"
	# The scheduler's silence must exceed two heartbeats (0.4 s) when
	# the close is seen: worker 0 goes after 1 s of it.
	t_pause 1
	if [ "$how" = leave ]; then
		touch "$LEAVE_DIR/go0"
		expect_exit "$w0" 30 0 "$tag: worker 0"
	else
		kill -KILL "$w0_pid"
		wait "$w0" 2>/dev/null
	fi
	wait_for_line "$T_DIR/$tag.worker1.log" "connection to worker 0 closed" 30 &&
		wait_for_line "$T_DIR/$tag.server.log" "connection to worker 0 closed" 30 ||
		{ kill -CONT "$sched_pid"; fail "$tag: worker 1 or the server did not see worker 0's connection close"; }
	kill -CONT "$sched_pid"
}

for transport in shm tcp; do
	export DTRAIN_TRANSPORT=$transport
	# ---- 1. worker 0 leaves first, while the scheduler is silent
	tag=leave_$transport
	start_job "$tag"
	worker0_gone "$tag" leave
	touch "$LEAVE_DIR/go1"
	expect_exit "$w1" 30 0 "$tag: worker 1"
	expect_exit "$server" 30 0 "$tag: the server"
	expect_exit "$sched" 30 0 "$tag: the scheduler"
	assert_grep "$T_DIR/$tag.worker0.log" "^left 0" "$tag: worker 0"
	assert_grep "$T_DIR/$tag.worker1.log" "^left 1" "$tag: worker 1"
	for f in "$T_DIR/$tag".*.log; do
		! grep -Eq "lost|failed" "$f" ||
			fail "$tag: $(basename "$f") reports a loss: $(grep -E 'lost|failed' "$f" | head -n 1)"
	done
	assert_groups_gone
	log "$tag: worker 0 left while the scheduler was stopped; all exited 0"

	# ---- 2. worker 0 is killed at the same point: still a loss
	tag=kill_$transport
	start_job "$tag"
	worker0_gone "$tag" kill
	touch "$LEAVE_DIR/go1"
	expect_exit "$sched" 30 nonzero "$tag: the scheduler"
	expect_exit "$server" 30 nonzero "$tag: the server"
	expect_exit "$w1" 30 nonzero "$tag: worker 1"
	# Each survivor names a lost peer; the first to see a close saw
	# worker 0's (nothing else had happened), and ended, so the other
	# may see that survivor's close before worker 0's and name it.
	named=0
	for what in server worker1; do
		assert_grep "$T_DIR/$tag.$what.log" \
			"lost the connection to (worker [01]|server 0)|(worker [01]|server 0) \(pid [0-9]+ .*was lost" \
			"$tag: the $what names a lost peer"
		grep -Eq "lost the connection to worker 0|worker 0 \(pid [0-9]+ .*was lost" \
			"$T_DIR/$tag.$what.log" && named=$((named + 1))
	done
	[ "$named" -ge 1 ] || fail "$tag: neither the server nor worker 1 names worker 0"

	# The scheduler, let go, finds worker 0's connection closed and, as
	# often, the server's and worker 1's (they ended on worker 0's loss):
	# it names the first it handles.
	assert_grep "$T_DIR/$tag.scheduler.log" \
		"aborting the job: (worker [01]|server 0) \(pid [0-9]+ .*was lost" \
		"$tag: the scheduler names a lost node"
	assert_groups_gone
	log "$tag: worker 0 killed while the scheduler was stopped; the job failed naming it"
done
