#!/usr/bin/env bash
# door_start.sh - a stranger without the secret holds 300 silent
# connections open to the scheduler before anyone else starts, and 300 to
# each server before the workers start, reopening each one a node closes
# (door.py hold): more than DT_MAX_PENDING_CONNS (256, the default). The
# job (linreg, dist_sync, 2 servers, 2 workers, every link over TCP so the
# servers' listeners are the ones held) still starts and ends with the
# result of an undisturbed run, and the nodes logged that they closed the
# oldest waiting connections (docs/security.md, "Strangers at the door").
. "$(dirname "$0")/../integration/cluster_lib.bash"

SEC_DIR="$(cd "$(dirname "$0")" && pwd)"
command -v python3 >/dev/null || fail "python3 is needed to play the stranger"
export DTRAIN_JOB_ID=door-start-$$ DTRAIN_TRANSPORT=tcp PS_VERBOSE=1
unset DT_MAX_PENDING_CONNS DT_HANDSHAKE_TIMEOUT
LIN=("$DTRAIN_BUILD/examples/linreg" --kvstore dist_sync --batch-size 100 --epochs 5)
result() { grep -o 'w=[^ ]* b=[^ ]*' "$1" | tail -1; }

# The undisturbed run.
port=$(free_port)
job_env "$port" 2 2
spawn ref.launch "$DTRAIN" launch -n 2 -s 2 -- "${LIN[@]}"
expect_exit "$SPAWNED" 60 0 "the undisturbed run"
want=$(result "$T_DIR/ref.launch.log")
[ -n "$want" ] || fail "the undisturbed run printed no result"

HOLDERS=()
hold() { # NAME PORT...: 300 silent connections on each, until the end
	local name=$1
	shift
	PYTHONPATH=$SEC_DIR spawn "$name" python3 -u "$SEC_DIR/door.py" hold 300 "$@"
	HOLDERS+=("$SPAWNED")
	wait_for_line "$T_DIR/$name.log" "^holding" 30 ||
		fail "$name: could not open 300 connections on $*"
}

port=$(free_port)
job_env "$port" 2 2
spawn scheduler "$DTRAIN" scheduler
sched=$SPAWNED
wait_for_line "$T_DIR/scheduler.log" "scheduler listening" 30 || fail "the scheduler did not start"
hold hold.scheduler "$port"
DMLC_ROLE=server spawn server0 "$DTRAIN" server
srv0=$SPAWNED
DMLC_ROLE=server spawn server1 "$DTRAIN" server
srv1=$SPAWNED
for f in server0 server1; do
	wait_for_line "$T_DIR/$f.log" "server listening on 127\.0\.0\.1:[0-9]+" 60 ||
		fail "$f did not start"
done
s0=$(sed -n 's/.*server listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T_DIR/server0.log" | head -1)
s1=$(sed -n 's/.*server listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T_DIR/server1.log" | head -1)
hold hold.servers "$s0" "$s1"
log "300 silent connections held on the scheduler and on each server"

DMLC_ROLE=worker DMLC_WORKER_ID=0 spawn worker0 "${LIN[@]}"
w0=$SPAWNED
DMLC_ROLE=worker DMLC_WORKER_ID=1 spawn worker1 "${LIN[@]}"
w1=$SPAWNED
expect_exit "$w0" 60 0 "worker 0"
expect_exit "$w1" 60 0 "worker 1"
expect_exit "$srv0" 30 0 "server 0"
expect_exit "$srv1" 30 0 "server 1"
expect_exit "$sched" 30 0 "the scheduler"
got=$(result "$T_DIR/worker0.log")
[ "$got" = "$want" ] || fail "result '$got' under the stranger's connections, '$want' without"
log "the job ran to the undisturbed result ($got)"
assert_grep "$T_DIR/scheduler.log" "connections wait for their handshake: closing the oldest" "the scheduler"
reopened=$(grep -o 'reopened [0-9]*' "$T_DIR/hold.scheduler.log" | tail -1 | cut -d' ' -f2)
log "the scheduler closed ${reopened:-0} of the stranger's connections (each was reopened)"
for h in "${HOLDERS[@]}"; do
	kill -TERM -- "-$h" 2>/dev/null
	wait_exit "$h" 10 || fail "a stranger did not stop"
done
assert_groups_gone
log "ok"
