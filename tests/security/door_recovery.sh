#!/usr/bin/env bash
# door_recovery.sh - recovery with a stranger at the door: while a job
# started by `dtrain launch --restart 1` trains (linreg, dist_sync, 2
# servers, 2 workers, every link over TCP), a stranger without the secret
# holds 300 silent connections open to the scheduler and to each server
# (door.py hold; more than DT_MAX_PENDING_CONNS, 256), then server 1 is
# killed with SIGKILL. The launcher starts a new one, which must get
# through the scheduler's door and rejoin: the job exits 0 with the result
# of an undisturbed run (docs/security.md, "Strangers at the door").
. "$(dirname "$0")/../integration/cluster_lib.bash"

SEC_DIR="$(cd "$(dirname "$0")" && pwd)"
command -v python3 >/dev/null || fail "python3 is needed to play the stranger"
export DTRAIN_TRANSPORT=tcp
unset DT_MAX_PENDING_CONNS DT_HANDSHAKE_TIMEOUT
TAG="DT_DOOR_TEST=$T_DIR" # every process of this test's jobs carries it
LIN=("$DTRAIN_BUILD/examples/linreg" --kvstore dist_sync --batch-size 100 --epochs 60)
result() { grep -o 'w=[^ ]* b=[^ ]*' "$1" | tail -1; }

# server_pid ID: the server process of this test's job with that id
server_pid() {
	local p env
	for p in $(pgrep -f "$DTRAIN"); do
		env=$(tr '\0' '\n' 2>/dev/null <"/proc/$p/environ") || continue
		grep -qx "$TAG" <<<"$env" && grep -qx "DMLC_ROLE=server" <<<"$env" &&
			grep -qx "DMLC_SERVER_ID=$1" <<<"$env" || continue
		grep -q timeout "/proc/$p/comm" 2>/dev/null && continue
		echo "$p"
		return 0
	done
	return 1
}

spawn ref "$DTRAIN" launch -n 2 -s 2 -- "${LIN[@]}"
expect_exit "$SPAWNED" 60 0 "the undisturbed run"
want=$(result "$T_DIR/ref.log")
[ -n "$want" ] || fail "the undisturbed run printed no result"

spawn job "$DTRAIN" launch -v -n 2 -s 2 --restart 1 --checkpoint-dir "$T_DIR/ck" \
	--checkpoint-every 50 --env "$TAG" --env PS_VERBOSE=1 -- "${LIN[@]}"
job=$SPAWNED
wait_for_line "$T_DIR/job.log" "scheduler address 127\.0\.0\.1:[0-9]+" 30 || fail "no scheduler address"
port=$(sed -n 's/.*scheduler address 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T_DIR/job.log" | head -1)
wait_for_line "$T_DIR/job.log" "server 1.*server listening on 127\.0\.0\.1:[0-9]+" 30 || fail "server 1 did not start"
ports=$(sed -n 's/.*server listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T_DIR/job.log" | sort -u | tr '\n' ' ')
# shellcheck disable=SC2086 # (the ports are words)
PYTHONPATH=$SEC_DIR spawn hold python3 -u "$SEC_DIR/door.py" hold 300 "$port" $ports
holder=$SPAWNED
wait_for_line "$T_DIR/hold.log" "^holding" 30 || fail "the stranger could not open its connections"
log "300 silent connections held on the scheduler ($port) and the servers ($ports)"
wait_for_line "$T_DIR/job.log" "Epoch\[5\] Train" 60 || fail "no training progress"
pid=$(server_pid 1) || fail "no server 1 found"
kill -9 "$pid"
log "server 1 (pid $pid) killed"
expect_exit "$job" 120 0 "the job under the stranger's connections"
assert_grep "$T_DIR/job.log" "starting a new one in its place" "the launcher"
assert_grep "$T_DIR/job.log" "is back: pid" "the scheduler"
got=$(result "$T_DIR/job.log")
[ "$got" = "$want" ] || fail "result '$got' after the kill, '$want' without"
log "server 1 came back through the stranger's connections; result identical ($got)"
log "the nodes closed $(grep -o 'reopened [0-9]*' "$T_DIR/hold.log" | tail -1 | cut -d' ' -f2) of the stranger's connections (each was reopened)"
kill -TERM -- "-$holder" 2>/dev/null
wait_exit "$holder" 10 || fail "the stranger did not stop"
assert_groups_gone
log "ok"
