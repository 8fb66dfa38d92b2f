#!/usr/bin/env bash
# impostor.sh - a member that holds the job's secret cannot take a lost
# node's place (docs/security.md, "Taking a lost node's place"):
#   1. a linreg job (dist_sync, 2 servers, 2 workers) runs under
#      `dtrain launch --restart 1`;
#   2. while server 0 lives, two impostors (impostor.py, with the job's
#      secret and id) ask the scheduler for server 0's place: one without a
#      place token, one with a guessed one;
#   3. server 0 is killed (SIGKILL) and the launcher starts it again.
# Both impostors must be refused with an ABORT naming the place token, the
# scheduler must say "server 0 is back" with the pid of the process the
# launcher started, and the job must end with status 0 and the parameters
# of an undisturbed run, bit for bit.
# (each run takes 6 s here alone, ten times that on a busy machine, and
# under ASan on a machine loaded 10 times over both runs together took
# 800 s: the limits below are bounds on a hang, scaled in a sanitizer build)
PROC_TIMEOUT=500
. "$(dirname "$0")/../integration/cluster_lib.bash"

SEC_DIR="$(cd "$(dirname "$0")" && pwd)"
command -v python3 >/dev/null || fail "python3 is needed to play the impostor"
# The launcher passes its own secret and job id on; the impostors hold them.
export DTRAIN_JOB_ID=impostor-$$
# The job must still be training when the impostors have asked and server 0
# is killed, a few seconds after epoch 1: 600 epochs take about 60 s; a
# sanitizer build runs 3-5 times slower, so a third is as long.
epochs=600
[ -z "${DT_TEST_SANITIZE:-}" ] || epochs=200
LIN=("$DTRAIN_BUILD/examples/linreg" --kvstore dist_sync --batch-size 100
	--epochs $epochs)
last() { grep -o 'w=[^ ]* b=[^ ]*' "$T_DIR/$1.log" | tail -n 1; }

# The undisturbed run beside the attacked one, not before it: both spend
# most of their time waiting on round trips, and the results of dist_sync
# do not depend on timing.
spawn ref "$DTRAIN" launch -n 2 -s 2 -- "${LIN[@]}"
ref=$SPAWNED

spawn job "$DTRAIN" launch -v -n 2 -s 2 --restart 1 \
	--checkpoint-dir "$T_DIR/ck" --checkpoint-every 500 -- "${LIN[@]}"
job=$SPAWNED
wait_for_line "$T_DIR/job.log" "Epoch\[1\]" 60 || fail "the job did not start training"
port=$(sed -n 's/.*scheduler address [^ ]*:\([0-9][0-9]*\)$/\1/p' "$T_DIR/job.log" | head -n 1)
old=$(sed -n 's/.*started server 0 (pid \([0-9]*\)).*/\1/p' "$T_DIR/job.log" | head -n 1)
[ -n "$port" ] && [ -n "$old" ] || fail "no scheduler port or server 0 pid in the launcher's log"

guess=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
PYTHONPATH=$SEC_DIR spawn imp_none python3 "$SEC_DIR/impostor.py" "$port" -
imp_none=$SPAWNED
PYTHONPATH=$SEC_DIR spawn imp_guess python3 "$SEC_DIR/impostor.py" "$port" "$guess"
imp_guess=$SPAWNED
wait_for_line "$T_DIR/imp_none.log" "^asked" 30 || fail "impostor without a token: no ADD_NODE sent"
wait_for_line "$T_DIR/imp_guess.log" "^asked" 30 || fail "impostor with a guessed token: no ADD_NODE sent"
kill -0 "$old" 2>/dev/null || fail "server 0 ended before the kill (the job is too short)"
kill -KILL "$old"
log "impostors asked for server 0's place; server 0 (pid $old) killed"

wait_exit "$job" 500
[ "$EXIT_STATUS" = 0 ] || fail "the job failed ($EXIT_STATUS)"
wait_exit "$ref" 500
[ "$EXIT_STATUS" = 0 ] || fail "the undisturbed run failed ($EXIT_STATUS)"
[ -n "$(last ref)" ] || fail "the undisturbed run printed no parameters"
for imp in imp_none imp_guess; do
	eval "pid=\$$imp"
	wait_exit "$pid" 60
	[ "$EXIT_STATUS" = 0 ] || fail "$imp was not refused: $(cat "$T_DIR/$imp.log")"
	grep -q "^refused: .*place token (DTRAIN_NODE_TOKEN)" "$T_DIR/$imp.log" ||
		fail "$imp: the refusal does not name the place token: $(cat "$T_DIR/$imp.log")"
done
new=$(sed -n 's/.*started server 0 (pid \([0-9]*\)).*/\1/p' "$T_DIR/job.log" | sed -n 2p)
[ -n "$new" ] || fail "the launcher did not start server 0 again"
grep -q "^\[scheduler\] server 0 is back: pid $new " "$T_DIR/job.log" ||
	fail "the scheduler did not admit the restarted server 0 (pid $new): $(grep 'is back' "$T_DIR/job.log")"
[ "$(grep -c 'is back' "$T_DIR/job.log")" = 1 ] || fail "more than one process took a place"
[ "$(last job)" = "$(last ref)" ] ||
	fail "parameters '$(last job)' after the restart, '$(last ref)' undisturbed"
assert_groups_gone
log "both impostors refused; server 0 back as pid $new; $(last job), bit-identical"
