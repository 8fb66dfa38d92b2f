# kill_lib.bash - killing one process of a running job, for the recovery
# tests. The caller defines $tmp (its directory), ours (this test's
# processes: tagged_pids from job_lib.bash) and fail, and may set
# KILL_JOB_LIMIT (seconds a killed job may run, 200 by default, times
# DT_TEST_TIME_SCALE).

# pid_of ROLE RANK: the process of that role and rank in this test's job
# (RANK is ignored for the scheduler)
pid_of() {
	local p
	for p in $(ours); do
		tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "DMLC_ROLE=$1" || continue
		[ "$1" = scheduler ] || tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" |
			grep -qx "DMLC_$(echo "$1" | tr a-z A-Z)_ID=$2" || continue
		grep -q timeout "/proc/$p/comm" 2>/dev/null && continue
		echo "$p"
		return 0
	done
	return 1
}

# wait_for LOG PATTERN [SECONDS]: until the log shows PATTERN (by default
# 30 s times DT_TEST_TIME_SCALE). Looked at every 20 ms: a small job's
# whole run can take under a second on an idle machine, and a kill must
# land before the job ends.
wait_for() {
	local i n=$((${3:-$((30 * ${DT_TEST_TIME_SCALE:-1}))} * 50))
	for i in $(seq "$n"); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.02
	done
	return 1
}

# The seconds a kill waits for its moment: KILL_WAIT (30 by default) times
# the build's DT_TEST_TIME_SCALE (a bound on a hang, not a claim of speed).
kill_wait() { echo $((${KILL_WAIT:-30} * ${DT_TEST_TIME_SCALE:-1})); }

# find_pid ROLE RANK JOB: pid_of, looked for until it is found (every
# 20 ms, up to kill_wait) while the job (pid JOB) runs.
find_pid() {
	local i p n=$(($(kill_wait) * 50))
	for i in $(seq "$n"); do
		p=$(pid_of "$1" "$2") && { echo "$p"; return 0; }
		kill -0 "$3" 2>/dev/null || return 1
		sleep 0.02
	done
	return 1
}

# killed NAME ROLE RANK PATTERN launch-args...: start the job, SIGKILL the
# process once the log shows PATTERN; the launcher's status in $tmp/NAME.rc.
# A job that ended before the kill could land (this script kept from the
# processors for the rest of the job, on a busy machine) tested nothing:
# it runs again, up to 3 times, its checkpoints ($tmp/ck) removed.
killed() {
	local name=$1 role=$2 rank=$3 pat=$4 pid try job rc
	shift 4
	for try in 1 2 3; do
		timeout "$((${KILL_JOB_LIMIT:-200} * ${DT_TEST_TIME_SCALE:-1}))" "$@" >"$tmp/$name.log" 2>&1 &
		job=$!
		# The process is found first (a look at every process's
		# environment, slow on a busy machine), so that once PATTERN
		# shows only the kill is left to do.
		pid=$(find_pid "$role" "$rank" "$job") || pid=
		wait_for "$tmp/$name.log" "$pat" "$(kill_wait)" || { kill $job; fail "$name: '$pat' never came"; }
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid"
			wait $job
			rc=$?
			# The process may have finished its work and exited
			# between pid_of and the kill (a zombie takes no
			# signal): the job then ends well and the launcher never
			# saw a death, so it tested nothing.
			if [ "$rc" = 0 ] && ! grep -q "(pid $pid) killed by signal 9" "$tmp/$name.log"; then
				echo "$name: $role $rank (pid $pid) had ended before the kill landed (run $try); once more"
				rm -rf "$tmp/ck"
				continue
			fi
			# ...or had finished its work and told the scheduler so,
			# and was killed on its way out: its successor is then
			# rightly refused (there is no place left to take), which
			# tests nothing of a restart either.
			if [ "$rc" != 0 ] && grep -q "refusing a node: the job is running and $role $rank, whose place .* has left" "$tmp/$name.log"; then
				echo "$name: $role $rank (pid $pid) had finished its work before the kill landed (run $try); once more"
				rm -rf "$tmp/ck"
				continue
			fi
			echo "$name: killed $role $rank (pid $pid) after '$pat'"
			echo "$rc" >"$tmp/$name.rc"
			return 0
		fi
		if [ -z "$pid" ] && kill -0 $job 2>/dev/null; then
			kill $job
			fail "$name: no $role $rank"
		fi
		wait $job
		echo "$name: the job ended before $role $rank could be killed (run $try); once more"
		rm -rf "$tmp/ck"
	done
	fail "$name: the job or the process ended before the kill 3 times"
}

# must_pass NAME: the job ended well, after a restart that rejoined
must_pass() {
	[ "$(cat "$tmp/$1.rc")" = 0 ] || { tail -25 "$tmp/$1.log"; fail "$1: the job failed"; }
	grep -q "starting a new one in its place" "$tmp/$1.log" || fail "$1: no restart"
	grep -q "is back: pid" "$tmp/$1.log" || fail "$1: the new process did not rejoin"
}

# killed_held NAME ROLE RANK PATTERN GO launch-args...: as killed, for a
# job whose program holds halfway until the file GO exists (kv_check's
# KV_CHECK_HOLD, kv_rows' KV_ROWS_HOLD, set by the caller to GO): the kill
# waits for the hold ("holding after") and for PATTERN, then GO is made.
# On a busy machine a PATTERN such as a checkpoint's line can come once
# the job's work is all done, and a kill then would test nothing.
killed_held() {
	local name=$1 role=$2 rank=$3 pat=$4 go=$5 pid
	shift 5
	timeout "$((${KILL_JOB_LIMIT:-200} * ${DT_TEST_TIME_SCALE:-1}))" "$@" >"$tmp/$name.log" 2>&1 &
	local job=$!
	wait_for "$tmp/$name.log" "holding after" "$(kill_wait)" &&
		wait_for "$tmp/$name.log" "$pat" "$(kill_wait)" ||
		{ kill $job; fail "$name: no hold, or '$pat' never came"; }
	pid=$(pid_of "$role" "$rank") || { kill $job; fail "$name: no $role $rank"; }
	kill -9 "$pid"
	touch "$go"
	echo "$name: killed $role $rank (pid $pid) after '$pat', while the job held"
	wait $job
	echo $? >"$tmp/$name.rc"
}
