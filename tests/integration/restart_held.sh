#!/usr/bin/env bash
# restart_held.sh - a new process that asks for a lost node's place before
# the loss is noticed is held up to DT_RESTART_TIMEOUT, not only up to
# PS_HEARTBEAT_TIMEOUT (docs/fault-tolerance.md): the scheduler beats it
# while it waits. A linreg job started by hand (scheduler, server 0, one
# worker; DTRAIN_RECOVER=1, PS_HEARTBEAT_TIMEOUT=3, DT_RESTART_TIMEOUT=16):
#   1. a second server 0 (the same place token) asks while server 0 lives:
#      it is still waiting 4 heartbeat timeouts later, and is refused
#      naming DT_RESTART_TIMEOUT after 16 s (not sooner);
#   2. a third one asks, waits past the heartbeat timeout too, then server
#      0 is killed: it takes the place and the worker trains on with it.
. "$(dirname "$0")/cluster_lib.bash"

# A heartbeat timeout of 1 s expired under a load of 15 (the server took
# the scheduler for gone), so 3 s, and a restart timeout over 4 of them.
HB_S=3
RESTART_S=16
LIN=("$DTRAIN_BUILD/examples/linreg" --kvstore dist_sync --epochs 100000)
now_ms() { echo $(($(date +%s%N) / 1000000)); }
tok() { od -An -tx1 -N16 /dev/urandom | tr -d ' \n'; }

port=$(free_port)
job_env "$port" 1 1
export DTRAIN_RECOVER=1 PS_HEARTBEAT_INTERVAL=0.5 PS_HEARTBEAT_TIMEOUT=$HB_S \
	DT_RESTART_TIMEOUT=$RESTART_S DTRAIN_CHECKPOINT_DIR="$T_DIR/ck" DTRAIN_CHECKPOINT_EVERY=50
S0=$(tok)
DMLC_ROLE=scheduler spawn sched "$DTRAIN" scheduler
DMLC_ROLE=server DMLC_SERVER_ID=0 DTRAIN_NODE_TOKEN=$S0 spawn srv "$DTRAIN" server
srv=$SPAWNED
DMLC_ROLE=worker DMLC_WORKER_ID=0 DTRAIN_NODE_TOKEN=$(tok) spawn worker "${LIN[@]}"
worker=$SPAWNED
wait_for_line "$T_DIR/worker.log" "Epoch\[1\]" 60 || fail "the job did not start training"

# 1. Held, then refused at DT_RESTART_TIMEOUT.
t0=$(now_ms)
DMLC_ROLE=server DMLC_SERVER_ID=0 DTRAIN_NODE_TOKEN=$S0 spawn held1 "$DTRAIN" server
held1=$SPAWNED
wait_for_line "$T_DIR/sched.log" "waiting up to DT_RESTART_TIMEOUT" 30 ||
	fail "the second server 0 was not held"
while [ $(($(now_ms) - t0)) -lt $((4 * HB_S * 1000)) ]; do
	kill -0 "$held1" 2>/dev/null ||
		fail "the held server ended $(($(now_ms) - t0)) ms after it asked, within 4 x PS_HEARTBEAT_TIMEOUT: $(tail -n 2 "$T_DIR/held1.log")"
	sleep 0.1
done
wait_exit "$held1" 60 || fail "the held server was not refused within 60 s"
ms=$(($(now_ms) - t0))
[ "$EXIT_STATUS" != 0 ] || fail "the held server exited 0"
assert_grep "$T_DIR/held1.log" "no server of it was lost within DT_RESTART_TIMEOUT=$RESTART_S s" "held server"
grep -q "sent nothing" "$T_DIR/held1.log" && fail "the held server took the scheduler for dead"
[ "$ms" -ge $((RESTART_S * 1000 - 500)) ] || fail "the held server was refused after $ms ms, before DT_RESTART_TIMEOUT"
kill -0 "$srv" 2>/dev/null && kill -0 "$worker" 2>/dev/null || fail "the job was disturbed"
log "held past PS_HEARTBEAT_TIMEOUT=$HB_S s; refused at DT_RESTART_TIMEOUT after $ms ms"

# 2. Held past the heartbeat timeout, then admitted at the loss.
t0=$(now_ms)
DMLC_ROLE=server DMLC_SERVER_ID=0 DTRAIN_NODE_TOKEN=$S0 spawn held2 "$DTRAIN" server
held2=$SPAWNED
# (the scheduler's second "waiting" line is this one's)
until [ "$(grep -c "waiting up to DT_RESTART_TIMEOUT" "$T_DIR/sched.log")" -ge 2 ]; do
	[ $(($(now_ms) - t0)) -lt 30000 ] || fail "the third server 0 was not held"
	sleep 0.05
done
while [ $(($(now_ms) - t0)) -lt $((2 * HB_S * 1000)) ]; do sleep 0.1; done
kill -0 "$held2" 2>/dev/null || fail "the held server ended before the loss: $(tail -n 2 "$T_DIR/held2.log")"
kill -KILL -- "-$srv" # (the server, and the timeout(1) in front of it)
pid=$(child_of "$held2")
wait_for_line "$T_DIR/sched.log" "server 0 is back: pid $pid " 30 ||
	fail "the held server (pid $pid) did not take the lost server's place"
n=$(grep -c "Epoch\[" "$T_DIR/worker.log")
deadline=$(($(now_ms) + 30000))
until [ "$(grep -c "Epoch\[" "$T_DIR/worker.log")" -ge $((n + 3)) ]; do
	[ "$(now_ms)" -lt "$deadline" ] || fail "the worker did not train on with the new server"
	kill -0 "$worker" 2>/dev/null || fail "the worker ended: $(tail -n 2 "$T_DIR/worker.log")"
	sleep 0.1
done
log "held $(($(now_ms) - t0)) ms, past PS_HEARTBEAT_TIMEOUT; server 0 back as pid $pid, training goes on"
