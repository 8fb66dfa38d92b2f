#!/usr/bin/env bash
# scale_shared_loop.sh - the scale simulator's nodes on the shared loops
# (DT_SHARED_LOOP=1, the simulator's default: the nodes of a process share
# one I/O, one handshake and one heartbeat thread of the library):
#   a. jobs of SMALL (100) and BIG (400) nodes, each in 2 processes of the
#      simulator, join, pass 2 barriers and end (every node through every
#      phase, the scheduler's exit 0);
#   b. in both, the threads the library added to a simulator process (its
#      threads once its nodes joined, /proc/<pid>/status, less those it
#      had before any node started: its main thread and one driver thread
#      per node) are at most LIB_THREADS_BOUND (4: the three loops, and
#      one to spare), whatever its count of nodes: 50 or 200 here, where
#      each node had 3 of its own before (150 and 600);
#   c. a job of STOP_NODES (216) nodes in STOP_PROCS (18) processes over
#      the control tree (forced on, arity 16: 16 host leaders under the
#      scheduler, the other two under a leader), with
#      PS_HEARTBEAT_TIMEOUT=5 (scaled): a SIGSTOP of one process makes the
#      scheduler end the job within the timeout and 3 s, naming a node of
#      the stopped process, and every other node's barrier fails: the
#      heartbeats of the nodes on the shared loops still flow, and the
#      silence of the stopped ones is still judged in time. Nothing is
#      left running.
. "$(dirname "$0")/cluster_lib.bash"

SMALL=100
BIG=400
SERVERS=4
PROCS=2
LIB_THREADS_BOUND=4
STOP_NODES=216
STOP_PROCS=18
HB_TIMEOUT=$((5 * DT_TEST_TIME_SCALE))
STOP_LIMIT_S=$((HB_TIMEOUT + 3 * DT_TEST_TIME_SCALE))
PHASE_LIMIT_S=$((60 * DT_TEST_TIME_SCALE))
RUN_LIMIT_S=$((80 * DT_TEST_TIME_SCALE))
. "$(dirname "$0")/scale_lib.bash"

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
unset DT_SHARED_LOOP # (the simulator's default: on)
log "load $(cut -d' ' -f1-3 /proc/loadavg)"

# a, b
for n in $SMALL $BIG; do
	run_sim "job$n" "$n" "$PROCS" PS_HEARTBEAT_TIMEOUT=$PHASE_LIMIT_S
	[ "$RUN_STATUS" = 0 ] || fail "(a) the job of $n nodes failed (status $RUN_STATUS): $(grep -m1 error "$T_DIR/job$n.log")"
	for ph in join barrier1 barrier2 leave; do
		ok=$(field "$JSONL" "$ph" ok)
		[ "$ok" = "$n" ] || fail "(a) $ph: $ok of $n nodes through it"
	done
	[ "$(field "$JSONL" all passed_all)" = True ] || fail "(a) not every node of $n passed every phase"
	[ "$(field "$JSONL" all sched_exit)" = 0 ] || fail "(a) the scheduler of $n nodes exited $(field "$JSONL" all sched_exit)"
	lib=$(field "$JSONL" all lib_threads_proc_max)
	most=$(field "$JSONL" all threads_proc_max)
	[ "$lib" != None ] || fail "(b) no count of the library's threads"
	[ "$lib" -ge 1 ] && [ "$lib" -le "$LIB_THREADS_BOUND" ] ||
		fail "(b) the library added $lib threads to a process of $((n / PROCS)) nodes; bound $LIB_THREADS_BOUND"
	log "(a, b) $n nodes in $PROCS processes: joined in $(field "$JSONL" join wall_s) s, 2 barriers, left; the library added $lib threads to a process of $((n / PROCS)) nodes (bound $LIB_THREADS_BOUND), $most threads in it with its driver threads"
	assert_pids_gone "$JSONL"
done

# c
run_sim stop "$STOP_NODES" "$STOP_PROCS" STOP_ONE=1 PS_HEARTBEAT_INTERVAL=1 \
	PS_HEARTBEAT_TIMEOUT=$HB_TIMEOUT DTRAIN_CTRL_TREE_MIN=1 \
	DTRAIN_CTRL_ARITY=16
ok=$(field "$JSONL" join ok)
[ "$ok" = "$STOP_NODES" ] || fail "(c) $ok of $STOP_NODES nodes joined: $(field "$JSONL" join error)"
lib=$(field "$JSONL" all lib_threads_proc_max)
[ "$lib" -le "$LIB_THREADS_BOUND" ] || fail "(c) the library added $lib threads to a process; bound $LIB_THREADS_BOUND"
named_s=$(field "$JSONL" all named_after_s)
end_s=$(field "$JSONL" all end_after_s)
spid=$(field "$JSONL" all stopped_pid)
[ "$end_s" != None ] ||
	fail "(c) the scheduler did not end the job after the SIGSTOP; it said: $(field "$JSONL" all sched_log_tail)"
[ "$(field "$JSONL" all sched_exit)" != 0 ] || fail "(c) the scheduler exited 0"
[ "$named_s" != None ] || fail "(c) the scheduler exited without naming a lost node"
/usr/bin/python3 -c "import sys; sys.exit(not float('$named_s') <= $STOP_LIMIT_S)" ||
	fail "(c) the scheduler ended the job $named_s s after the SIGSTOP; limit $STOP_LIMIT_S s"
named=$(field "$JSONL" all named)
grep -q "(pid $spid " <<<"$named" ||
	fail "(c) the scheduler did not name a node of the stopped process $spid: $named"
others=$(field "$JSONL" all others)
[ "$(field "$JSONL" all others_failed)" = "$others" ] ||
	fail "(c) $(field "$JSONL" all others_failed) of the $others other nodes saw the job end"
exits=$(field "$JSONL" all sim_exits)
grep -q running <<<"$exits" && fail "(c) a simulator did not end: $exits"
assert_pids_gone "$JSONL"
log "(c) $(field "$JSONL" all stopped_nodes) of $STOP_NODES nodes stopped: the scheduler ended the job after $named_s s (timeout $HB_TIMEOUT s), naming $(grep -o "[a-z]* [0-9]* (pid $spid [^)]*)" <<<"$named" | head -n 1); all $others others failed"
assert_groups_gone
log "done; nothing left running"
