#!/bin/bash
# scale_sim.sh - a job of thousands of real nodes on one machine, many
# nodes per process: for each size W+S (or N, workers only) it starts one
# scheduler (`dtrain scheduler`) and ceil(N / PER_PROC) processes of
# build/bench/scale_sim, each running its share of the nodes (the real
# join, barriers, heartbeats and leaving, over TCP), walks them through
# the join, BARRIERS barriers and leaving together, and reports per phase
# the wall time, the scheduler's CPU time, what each node received from
# the scheduler, the nodes' time in the phase (p50, p99) beside a model of
# a real cluster's, and per size the memory, descriptors, threads and
# sockets per node (bench/scale_sim.py says what each column is).
#
#   bench/scale_sim.sh [BUILD_DIR] [W+S | N ...]   (default: 500 1000 2000 4000)
#
# Settings (environment): PER_PROC nodes per process (250), PROCS to
# fix the count of processes instead, BARRIERS (3), HOLD_S seconds the
# nodes are held idle, heartbeats alone, before each barrier (0: the
# root's heartbeats a second are measured over a longer time with more),
# TIMEOUT seconds per phase (300), RTT_US the model's round trip per hop (50 us),
# PS_HEARTBEAT_INTERVAL / PS_HEARTBEAT_TIMEOUT as for any job,
# DTRAIN_CTRL_TREE_MIN / DTRAIN_CTRL_ARITY as for any job (the barriers
# go over the control tree from 256 nodes; a larger minimum keeps the
# star: the column "root msgs" compares them), OUT the
# directory of the logs and scale_sim.jsonl (a new temporary one),
# SIM_IDLE=1 the simulators at SCHED_IDLE (below the scheduler, which
# tens of thousands of their threads would otherwise starve), JOIN_RATE=R
# the job's nodes started R a second (each simulator's one after the
# other; 0, all at once),
# SCHED_PERF=FILE the scheduler profiled by perf record -g into
# FILE.W.S (perf report -i FILE.W.S: where the root's time goes),
# SCHED_STRACE=FILE its system calls from the join to the last barrier (the
# closes of idle connections included) counted by strace -c
# -f into FILE.W.S (strace slows the scheduler: not for the times).
# The bench raises the descriptor limit (ulimit -n) to the hard limit and
# says what it got, with the machine's processors, threads-max, pid_max
# and load. Each node has one thread of the simulator's (its driver), and
# the nodes of a process share the library's three (DT_SHARED_LOOP=1, the
# simulator's default; with DT_SHARED_LOOP=0 a node has 4 threads): when
# the largest size needs more threads than kernel.pid_max allows (with the
# machine's own threads and a margin) and the bench runs as root, it
# raises pid_max for the run and puts the old value back at its end
# (PID_MAX=keep leaves it alone).
set -u
BUILD=${1:-${DTRAIN_BUILD:-build}}
shift || true
SIZES=${*:-500 1000 2000 4000}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dtrain_scale_sim.XXXXXX")}
mkdir -p "$OUT"
for f in "$BUILD/dtrain" "$BUILD/bench/scale_sim"; do
	[ -x "$f" ] || { echo "scale_sim.sh: no $f (build first)" >&2; exit 1; }
done
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "scale_sim.sh: ulimit -n $(ulimit -n) (hard $(ulimit -Hn));" \
	"$(nproc) processors; threads-max $(cat /proc/sys/kernel/threads-max);" \
	"pid_max $(cat /proc/sys/kernel/pid_max); load $(cut -d' ' -f1-3 /proc/loadavg);" \
	"logs in $OUT" >&2
# The threads the largest size needs: 1 a node and 4 a process on the
# shared loops (4 a node without), the machine's, a margin.
most=0
for sz in $SIZES; do
	case $sz in
	*+*) n=$((${sz%%+*} + ${sz#*+})) ;;
	*) n=$sz ;;
	esac
	[ "$n" -gt "$most" ] && most=$n
done
old_pid_max=$(cat /proc/sys/kernel/pid_max)
per_node=1
[ "${DT_SHARED_LOOP:-1}" = 1 ] || per_node=4
want=$(( per_node * most + 4 * (most / ${PER_PROC:-250} + 1) + $(ps -eLf --no-headers | wc -l) + 8192 ))
if [ "${PID_MAX:-raise}" != keep ] && [ "$want" -gt "$old_pid_max" ]; then
	[ "$want" -gt 4194304 ] && want=4194304
	if [ "$(id -u)" = 0 ] && echo "$want" >/proc/sys/kernel/pid_max 2>/dev/null; then
		trap 'echo "$old_pid_max" >/proc/sys/kernel/pid_max' EXIT
		echo "scale_sim.sh: pid_max raised to $want for this run ($old_pid_max after it)" >&2
	else
		echo "scale_sim.sh: $most nodes need about $want threads, above pid_max $old_pid_max (raise it as root)" >&2
	fi
fi
/usr/bin/python3 "$(dirname "$0")/scale_sim.py" "$BUILD" "$OUT" $SIZES
exit $?
