#!/usr/bin/env bash
# door_abort.sh - a dial stops when the job is aborted: during start-up a
# worker dials its servers; one of them is stopped (SIGSTOP: the kernel
# takes the connection but nobody answers the handshake), the other is
# killed (SIGKILL: refused). The scheduler aborts the job for the lost
# server, and the worker gives up at once, saying why, not at the end of
# DT_CONNECT_TIMEOUT or DT_HANDSHAKE_TIMEOUT (60 s here) (docs/security.md,
# "Strangers at the door").
. "$(dirname "$0")/../integration/cluster_lib.bash"

export DTRAIN_JOB_ID=door-abort-$$ DTRAIN_TRANSPORT=tcp PS_VERBOSE=1
export DT_CONNECT_TIMEOUT=60 DT_HANDSHAKE_TIMEOUT=60
port=$(free_port)
job_env "$port" 2 1
spawn scheduler "$DTRAIN" scheduler
sched=$SPAWNED
DMLC_ROLE=server spawn server0 "$DTRAIN" server
srv0=$SPAWNED
DMLC_ROLE=server spawn server1 "$DTRAIN" server
srv1=$SPAWNED
for f in server0 server1; do
	wait_for_line "$T_DIR/$f.log" "asked the scheduler to add this server" 30 || fail "$f did not start"
done
stopped=$(child_of "$srv0")
kill -STOP "$stopped"
DMLC_ROLE=worker spawn worker "$HELLO"
w=$SPAWNED
wait_for_line "$T_DIR/worker.log" "joined the cluster as worker" 30 || fail "the worker did not join"
# (it dials the servers now: the stopped one does not answer its handshake)
t0=$(date +%s%N)
kill -KILL "$(child_of "$srv1")"
wait_exit "$w" 30 || fail "the worker still dials 30 s after the job was aborted"
took=$((($(date +%s%N) - t0) / 1000000))
[ "$EXIT_STATUS" -ne 0 ] || fail "the worker exited 0 from an aborted job"
assert_grep "$T_DIR/worker.log" "abort" "the worker names the abort"
log "the worker stopped dialling $took ms after the server was killed (status $EXIT_STATUS): $(grep -i abort "$T_DIR/worker.log" | tail -1)"
[ "$took" -lt 20000 ] || fail "the worker took $took ms to stop dialling"
expect_exit "$sched" 30 nonzero "the scheduler"
kill -KILL "$stopped"
kill -CONT "$stopped" 2>/dev/null
wait_exit "$srv0" 10
wait_exit "$srv1" 10
assert_groups_gone
log "ok"
