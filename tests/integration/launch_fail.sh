#!/bin/bash
# launch_fail.sh - a failing process stops the whole job quickly, the
# launcher names it, and no process of the job is left afterwards; servers
# that ignore SIGTERM are killed; --grace and --timeout bound the job.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
make_fake_dtrain

# run_job NAME ARGS...: run `dtrain launch ARGS` (stdout to
# $TMP/NAME.out, stderr to $TMP/NAME.err); sets rc and ms.
run_job() {
	local name=$1 start
	shift
	start=$(now_ms)
	timeout $((60 * T_SCALE)) "$DTRAIN" launch --env DT_TEST_TAG="$TAG" "$@" \
		>"$TMP/$name.out" 2>"$TMP/$name.err"
	rc=$?
	ms=$(($(now_ms) - start))
}

# Worker 1 exits 3 one second in; the others (and their children) sleep.
# shellcheck disable=SC2016
WORKER='sleep 300 & if [ "$DMLC_WORKER_ID" = 1 ]; then sleep 1; exit 3; fi; sleep 300'
FAKE_SERVER_MODE=hang run_job fail3 -n 3 -s 2 -- sh -c "$WORKER"
err=$TMP/fail3.err
check "worker exits 3: launcher exits 1 (got $rc)" test "$rc" = 1
# (45 s: the job's other processes would run for 300 s, so the bound still
# tells a stopped job from one that waits for them, with room for a busy
# machine, where starting the job alone has taken 26 s)
check "worker exits 3: over within 45 s (${ms} ms)" test "$ms" -lt 45000
check "worker exits 3: message names worker 1" \
	grep -qE '^dtrain launch: worker 1 \(pid [0-9]+\) exited with status 3; stopping the job$' "$err"
check "worker exits 3: summary line" \
	has "$err" "dtrain launch: job failed: worker 1 exited with status 3"
check "worker exits 3: only the culprit is reported" \
	test "$(grep -c 'stopping the job' "$err")" = 1
check "worker exits 3: nothing left" wait_gone 5

# A worker killed by a signal.
# shellcheck disable=SC2016
run_job sig -n 2 -s 0 -- sh -c '[ "$DMLC_WORKER_ID" = 0 ] && kill -9 $$; sleep 300'
check "worker killed: launcher exits 1 (got $rc)" test "$rc" = 1
check "worker killed: message says killed by signal 9" \
	grep -qE '^dtrain launch: worker 0 \(pid [0-9]+\) killed by signal 9 \(Killed\); stopping the job$' "$TMP/sig.err"
check "worker killed: nothing left" wait_gone 5

# Servers that ignore SIGTERM: SIGKILL follows 3 s later, and the job is
# still over within 45 s of starting.
FAKE_SERVER_MODE=stubborn run_job stubborn -n 2 -s 2 -- sh -c "$WORKER"
check "stubborn servers: launcher exits 1 (got $rc)" test "$rc" = 1
check "stubborn servers: over within 45 s (${ms} ms)" test "$ms" -lt 45000
check "stubborn servers: SIGKILL announced" \
	grep -qE 'server [01] \(pid [0-9]+\).* still running 3 s after SIGTERM; killing' "$TMP/stubborn.err"
check "stubborn servers: nothing left" wait_gone 5

# The scheduler fails.
FAKE_SCHEDULER_MODE=fail run_job sched -n 2 -s 1 -- sleep 300
check "scheduler fails: launcher exits 1 (got $rc)" test "$rc" = 1
check "scheduler fails: its stderr is shown" \
	has "$TMP/sched.err" "[scheduler] scheduler failing"
check "scheduler fails: message names it" \
	grep -qE '^dtrain launch: scheduler \(pid [0-9]+\) exited with status 4; stopping the job$' "$TMP/sched.err"
check "scheduler fails: nothing left" wait_gone 5

# The scheduler still waits after the workers ended (they never joined):
# the message says why that happens.
FAKE_SCHEDULER_MODE=hang run_job nojoin -n 1 -s 0 --grace 1 -- true
check "scheduler waits: launcher exits 1 (got $rc)" test "$rc" = 1
check "scheduler waits: the message says a worker may not have joined" \
	grep -qE '^dtrain launch: all workers finished, but scheduler \(pid [0-9]+\) did not exit within 1 s \(--grace\); stopping the job \(a worker program that exits without joining the job, one that does not use dtrain, leaves the scheduler waiting for it\)$' "$TMP/nojoin.err"

# Workers succeed but the servers never finish: stopped after --grace.
FAKE_SERVER_MODE=hang run_job grace -n 2 -s 2 --grace 1 -- true
check "servers hang: launcher exits 1 (got $rc)" test "$rc" = 1
check "servers hang: over soon after the grace period (${ms} ms)" \
	test "$ms" -lt 10000
check "servers hang: message names them" \
	grep -qE '^dtrain launch: all workers finished, but server 0 \(pid [0-9]+\), server 1 \(pid [0-9]+\) did not exit within 1 s \(--grace\); stopping the job$' "$TMP/grace.err"
check "servers hang: nothing left" wait_gone 5

# Servers that finish after the workers, within the grace period: success.
run_job graceok -n 2 -s 2 -- true
check "servers finish: launcher exits 0 (got $rc)" test "$rc" = 0

# --timeout: the whole job is stopped, status 124.
run_job timeout -n 2 -s 1 --timeout 2 -- sleep 300
check "--timeout: launcher exits 124 (got $rc)" test "$rc" = 124
check "--timeout: over soon after (${ms} ms)" \
	test "$ms" -ge 1900 -a "$ms" -lt 10000
check "--timeout: message" \
	has "$TMP/timeout.err" "dtrain launch: the job did not finish within --timeout 2 s; stopping it"
check "--timeout: nothing left" wait_gone 5

# Starting a process fails (no file descriptors left for its pipes): the
# processes already started are stopped and the launcher says why.
(
	ulimit -n 30
	run_job spawn -n 20 -s 0 -- sleep 300
	exit "$rc"
)
rc=$?
check "spawn fails: launcher exits 1 (got $rc)" test "$rc" = 1
check "spawn fails: message" grep -qE \
	'^dtrain launch: starting worker [0-9]+: pipe: Too many open files; stopping the job$' "$TMP/spawn.err"
check "spawn fails: nothing left" wait_gone 5

finish
