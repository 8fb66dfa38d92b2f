#!/bin/bash
# launch_signal.sh - SIGTERM, SIGINT or SIGHUP to the launcher stops the
# whole job (exit 128+N); a launcher killed with SIGKILL leaves nothing
# behind either, grandchildren included (PDEATHSIG and the guard process).
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
make_fake_dtrain

# Each worker starts a grandchild and writes a marker when it is up.
# shellcheck disable=SC2016
WORKER='sleep 300 & touch "$MARK.$DMLC_WORKER_ID"; sleep 301; wait'
export MARK=$TMP/up

# start_job: start a 3-worker job in the background; sets L to the pid of
# the launcher itself (timeout's child) once every worker is up.
start_job() {
	rm -f "$MARK".*
	timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 3 -s 2 --env DT_TEST_TAG="$TAG" \
		--env MARK="$MARK" -- sh -c "$WORKER" \
		>"$TMP/out" 2>"$TMP/err" &
	T=$!
	local end=$(($(now_ms) + 20000))
	while [ "$(ls "$MARK".* 2>/dev/null | wc -l)" != 3 ]; do
		[ "$(now_ms)" -lt "$end" ] || break
		sleep 0.05
	done
	L=$(pgrep -P "$T" | head -1)
}

for sig in TERM INT HUP; do
	start_job
	check "SIG$sig: job is up ($(tagged_pids | wc -l) processes)" \
		test "$(tagged_pids | wc -l)" -ge 8
	start=$(now_ms)
	kill -"$sig" "$L"
	wait "$T"
	rc=$?
	ms=$(($(now_ms) - start))
	want=$((128 + $(kill -l "$sig")))
	check "SIG$sig: launcher exits $want (got $rc)" test "$rc" = "$want"
	check "SIG$sig: over quickly (${ms} ms)" test "$ms" -lt 10000
	check "SIG$sig: message" \
		has "$TMP/err" "dtrain launch: got SIG$sig; stopping the job"
	check "SIG$sig: nothing left" wait_gone 5
done

# SIGKILL: the launcher cannot clean up; its children die with it and the
# guard kills the rest of their sessions.
start_job
kill -KILL "$L"
wait "$T"
rc=$?
check "SIGKILL: launcher died by SIGKILL (got $rc)" test "$rc" = 137
check "SIGKILL: nothing left, grandchildren included" wait_gone 5

finish
