#!/usr/bin/env bash
# door_flood.sh - a flood of handshakes during training: a stranger with
# a wrong secret makes about 1,000 handshakes a second (door.py flood:
# HELLO, CHALLENGE, a PROOF that does not check out), spread over the
# scheduler's and the servers' ports, while the workers train (linreg,
# dist_sync, 2 servers, 2 workers, the default transport: shared memory
# between the nodes of this host). The handshakes are the handshake
# thread's, not the I/O thread's, and a refused connection leaves nothing
# behind for the I/O thread to look through, so training keeps its pace
# (before, it ran at about 0.4 of it here, falling as the flood went on).
# The samples a second of the flooded run are compared with an undisturbed
# run's, made just before in this test, and must be at least half of them
# (about 0.7 is typical alone; the ratio measured is printed). CTest runs
# it alone (RUN_SERIAL), but a machine busy with other work can still hold
# every pair below that for a minute or more, so up to 6 pairs of runs are
# made until one passes
# (ROUNDS=n makes n pairs). The stranger runs at nice 19: it stands for a
# machine elsewhere, whose processor is not the job's.
#
# As a measurement (not run by CTest): JOB_CPUS=0 STRANGER_CPUS=1 pins the
# job's processes and the stranger to different processors (taskset), so
# that the stranger's own work does not compete with the job's; CONTROL=1
# adds to every round a third run with the same flood aimed at a dummy
# acceptor (door.py dummy, on the stranger's processors) instead of the
# job: what the flood costs a job beside it that does none of its
# handshakes. STRANGER_QUOTA=P holds the stranger to P% of one processor
# (a control group) instead, the job keeping every processor. Rounds
# alternate undisturbed, flooded and control runs, and every ratio is
# printed:
#   ROUNDS=5 CONTROL=1 STRANGER_QUOTA=40 bash door_flood.sh
# (a run takes 5 s here alone, and over 110 s on a machine loaded 10 times
# over: the processes' limit is wider than cluster_lib's 120 s)
PROC_TIMEOUT=${PROC_TIMEOUT:-300}
. "$(dirname "$0")/../integration/cluster_lib.bash"

SEC_DIR="$(cd "$(dirname "$0")" && pwd)"
command -v python3 >/dev/null || fail "python3 is needed to play the stranger"
export DTRAIN_JOB_ID=door-flood-$$ PS_VERBOSE=1
unset DT_MAX_PENDING_CONNS DT_HANDSHAKE_TIMEOUT
RATE=${RATE:-1000}
LIN=("$DTRAIN_BUILD/examples/linreg" --kvstore dist_sync --batch-size 100 --epochs 300)

# seconds LOG: the training time worker 0 reports (its epochs' time costs)
seconds() {
	grep -o 'Time cost=[0-9.]*' "$1" | cut -d= -f2 | awk '{s += $1} END {printf "%.3f", s}'
}

# The prefixes of the job's commands and of the stranger's (pinned where
# asked).
JOB=()
[ -n "${JOB_CPUS:-}" ] && JOB=(taskset -c "$JOB_CPUS")
STRANGER=(nice -n 19)
[ -n "${STRANGER_CPUS:-}" ] && STRANGER=(taskset -c "$STRANGER_CPUS" nice -n 19)
# STRANGER_QUOTA=P: the stranger in a control group of its own allowed P%
# of one processor (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us; root).
if [ -n "${STRANGER_QUOTA:-}" ]; then
	CG=
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		CG=/sys/fs/cgroup/dtrain-flood-$$
		mkdir "$CG" && echo "$((STRANGER_QUOTA * 1000)) 100000" >"$CG/cpu.max"
	elif [ -d /sys/fs/cgroup/cpu ]; then
		CG=/sys/fs/cgroup/cpu/dtrain-flood-$$
		mkdir "$CG" && echo 100000 >"$CG/cpu.cfs_period_us" &&
			echo "$((STRANGER_QUOTA * 1000))" >"$CG/cpu.cfs_quota_us"
	fi || fail "STRANGER_QUOTA: cannot make a control group (root and cgroup cpu needed)"
	trap 'cleanup; rmdir "$CG"' EXIT
	STRANGER=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" "${STRANGER[@]}")
fi

# run NAME FLOOD: one job; FLOOD=1: under the flood, FLOOD=control: beside
# the same flood aimed at a dummy acceptor. Sets SECS.
run() {
	local name=$1 flood=$2 port sched srv0 srv1 w0 w1 s0 s1 flooder= dummy=
	port=$(free_port)
	job_env "$port" 2 2
	spawn "$name.scheduler" "${JOB[@]}" "$DTRAIN" scheduler
	sched=$SPAWNED
	DMLC_ROLE=server spawn "$name.server0" "${JOB[@]}" "$DTRAIN" server
	srv0=$SPAWNED
	DMLC_ROLE=server spawn "$name.server1" "${JOB[@]}" "$DTRAIN" server
	srv1=$SPAWNED
	for f in server0 server1; do
		wait_for_line "$T_DIR/$name.$f.log" "server listening on 127\.0\.0\.1:[0-9]+" 60 ||
			fail "$name: $f did not start"
	done
	s0=$(sed -n 's/.*server listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T_DIR/$name.server0.log" | head -1)
	s1=$(sed -n 's/.*server listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T_DIR/$name.server1.log" | head -1)
	if [ "$flood" = control ]; then
		PYTHONPATH=$SEC_DIR spawn "$name.dummy" "${STRANGER[@]}" python3 -u "$SEC_DIR/door.py" dummy 3
		wait_for_line "$T_DIR/$name.dummy.log" "^listening on" 30 ||
			fail "$name: the dummy acceptor did not start"
		dummy=$SPAWNED
		read -r port s0 s1 < <(sed -n 's/^listening on //p' "$T_DIR/$name.dummy.log")
	fi
	if [ "$flood" != 0 ]; then
		PYTHONPATH=$SEC_DIR spawn "$name.flood" "${STRANGER[@]}" python3 -u "$SEC_DIR/door.py" flood "$RATE" "$port" "$s0" "$s1"
		flooder=$SPAWNED
		wait_for_line "$T_DIR/$name.flood.log" "^[1-9][0-9]* handshakes answered" 30 ||
			fail "$name: the flood does not get answers"
	fi
	DMLC_ROLE=worker DMLC_WORKER_ID=0 spawn "$name.worker0" "${JOB[@]}" "${LIN[@]}"
	w0=$SPAWNED
	DMLC_ROLE=worker DMLC_WORKER_ID=1 spawn "$name.worker1" "${JOB[@]}" "${LIN[@]}"
	w1=$SPAWNED
	expect_exit "$w0" 280 0 "$name worker 0"
	expect_exit "$w1" 280 0 "$name worker 1"
	expect_exit "$srv0" 30 0 "$name server 0"
	expect_exit "$srv1" 30 0 "$name server 1"
	expect_exit "$sched" 30 0 "$name scheduler"
	SECS=$(seconds "$T_DIR/$name.worker0.log")
	if [ -n "$flooder" ]; then
		kill -TERM -- "-$flooder" 2>/dev/null
		wait_exit "$flooder" 10 || fail "the flood did not stop"
		log "$name: the flood: $(grep 'handshakes answered' "$T_DIR/$name.flood.log" | tail -1)"
	fi
	if [ -n "$dummy" ]; then
		kill -TERM -- "-$dummy" 2>/dev/null
		wait_exit "$dummy" 10 || fail "the dummy acceptor did not stop"
	fi
}

# Pairs of runs until one reaches the bound (at most 3), or ROUNDS pairs:
# a machine busy with other work slows one run or the other at random.
best=
r=0
while [ "$r" -lt "${ROUNDS:-6}" ]; do
	r=$((r + 1))
	run "quiet$r" 0
	quiet=$SECS
	run "flood$r" 1
	flooded=$SECS
	# (samples a second: the same samples in both, so the ratio of times)
	ratio=$(awk -v q="$quiet" -v f="$flooded" 'BEGIN {printf "%.3f", q / f}')
	log "round $r: training took ${quiet} s undisturbed, ${flooded} s under ${RATE} handshakes/s: samples/s ratio $ratio"
	if [ -n "${CONTROL:-}" ]; then
		run "control$r" control
		log "round $r: ${SECS} s beside the flood aimed at a dummy acceptor: samples/s ratio $(awk -v q="$quiet" -v f="$SECS" 'BEGIN {printf "%.3f", q / f}')"
	fi
	if [ -z "$best" ] || awk -v a="$ratio" -v b="$best" 'BEGIN {exit !(a > b)}'; then
		best=$ratio
	fi
	[ -z "${ROUNDS:-}" ] && awk -v r="$best" 'BEGIN {exit !(r >= 0.5)}' && break
done
awk -v r="$best" 'BEGIN {exit !(r >= 0.5)}' ||
	fail "under the flood training ran at $best of its undisturbed pace at best (at least 0.5 expected)"
assert_groups_gone
log "ok (samples/s ratio $best)"
