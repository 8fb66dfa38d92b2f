#!/usr/bin/env bash
# cluster_launch.sh - `dtrain launch --launcher local`: bootstrap of 1, 2
# and 4 workers with 1 and 2 servers (and none) running hello_cluster, each
# exiting 0 with one "passed the barriers" line per worker rank (also with
# the servers assigned half a second after the workers, whose HELLOs then
# come first); a worker that fails 1 s in ends the whole job within 15 s
# with a non-zero status naming it; SIGTERM to the launcher stops the job. After each job no
# process of it may be left: every process gets DTRAIN_TEST_MARK in its
# environment through --env, and /proc is searched for it.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/cluster_lib.bash"

timeout $((10 * T_SCALE)) "$DTRAIN" launch --help >/dev/null 2>&1 ||
	fail "\`dtrain launch --help\` does not work: the launcher is missing"

MARK="$T_DIR"
LIMIT_S=15

# job_leftovers: processes whose environment carries this test's mark.
job_leftovers() {
	local env pid
	for env in /proc/[0-9]*/environ; do
		pid=${env#/proc/}
		pid=${pid%/environ}
		[ "$pid" = $$ ] && continue
		if tr "\0" "\n" 2>/dev/null <"$env" | grep -qxF "DTRAIN_TEST_MARK=$MARK"; then
			# Zombies have an empty environ; a match is a live one.
			echo "$pid:$(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | cut -c1-60)"
		fi
	done
}

assert_no_leftovers() {
	local what=$1 left deadline=$(($(date +%s) + 5))
	# The launcher has exited; give the kernel a moment to finish the
	# reaping it started, but no more.
	while left=$(job_leftovers) && [ -n "$left" ]; do
		[ "$(date +%s)" -lt "$deadline" ] ||
			fail "$what: processes left behind: $left"
		sleep 0.1
	done
}

launch() {
	local name=$1
	shift
	spawn "$name" "$DTRAIN" launch --env "DTRAIN_TEST_MARK=$MARK" "$@"
}

# ---- bootstrap matrix
for w in 1 2 4; do
	for s in 1 2 0; do
		[ "$s" = 0 ] && [ "$w" != 2 ] && continue # -s 0 once
		name="hello.w$w.s$s"
		launch "$name" -n "$w" -s "$s" --launcher local -- "$HELLO"
		expect_exit "$SPAWNED" 120 0 "launch -n $w -s $s"
		out="$T_DIR/$name.log"
		n=$(grep -c "passed the barriers" "$out")
		[ "$n" -eq "$w" ] || fail "$name: $n 'passed the barriers' lines, expected $w"
		for ((r = 0; r < w; r++)); do
			assert_grep "$out" "^\[worker $r\] worker $r passed the barriers" "$name"
			assert_grep "$out" "^\[worker $r\] worker $r of $w is up \($s servers\)" "$name"
		done
		assert_no_leftovers "$name"
		log "$name: ok"
	done
done

# ---- a server assigned after its workers: their HELLOs come before its
# own assignment, and it answers them once that is in
launch late -n 2 -s 2 --launcher local --env DT_TEST_SERVERS_ASSIGNED_LATE=500 \
	--env PS_VERBOSE=1 -- "$HELLO"
expect_exit "$SPAWNED" 120 0 "launch with the servers assigned late"
n=$(grep -c "passed the barriers" "$T_DIR/late.log")
[ "$n" -eq 2 ] || fail "late: $n 'passed the barriers' lines, expected 2"
assert_no_leftovers late
log "servers assigned 500 ms after the workers: ok"

# ---- a worker that fails 1 s in
cat >"$T_DIR/fail_one.sh" <<SH
#!/usr/bin/env bash
if [ "\${DMLC_WORKER_ID:-0}" = 1 ]; then
	sleep 1
	echo "worker 1 gives up" >&2
	exit 3
fi
exec "$HELLO"
SH
chmod +x "$T_DIR/fail_one.sh"
t0=$(date +%s%N)
launch fail -n 2 -s 1 --launcher local -- "$T_DIR/fail_one.sh"
expect_exit "$SPAWNED" $((LIMIT_S + 5)) nonzero "launch with a failing worker"
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$ms" -le $((LIMIT_S * 1000)) ] || fail "the failed job took $ms ms to end"
assert_grep "$T_DIR/fail.log" "worker 1.*(status|exit|exited).*3" "launch names the failed worker and its status"
assert_no_leftovers fail
log "failing worker: launch exit $EXIT_STATUS after $ms ms, nothing left"

# ---- SIGTERM to the launcher mid-job (workers that never join)
cat >"$T_DIR/stall.sh" <<'SH'
#!/usr/bin/env bash
echo "stalling"
exec sleep 600
SH
chmod +x "$T_DIR/stall.sh"
launch term -n 2 -s 1 --launcher local -- "$T_DIR/stall.sh"
pid=$SPAWNED
wait_for_line "$T_DIR/term.log" "stalling" 30 || fail "the stalled job did not start"
kill -TERM "$(child_of "$pid")"
t0=$(date +%s%N)
expect_exit "$pid" 10 nonzero "launch after SIGTERM"
ms=$((($(date +%s%N) - t0) / 1000000))
assert_no_leftovers term
log "SIGTERM: launch exit $EXIT_STATUS after $ms ms, nothing left"
assert_groups_gone
log "ok"
