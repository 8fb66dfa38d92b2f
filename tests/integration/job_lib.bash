# job_lib.bash - sourced by integration tests that run whole jobs.
#
# run_job SECONDS LOG TAIL CMD...: run CMD (a job) with its output in LOG;
# on failure print what tells why - a sanitizer's report first, then the
# last TAIL lines - and return the real exit status.
run_job() {
	local secs=$1 log=$2 lines=$3 rc=0
	shift 3
	timeout "$secs" "$@" >"$log" 2>&1 || rc=$?
	[ $rc = 0 ] && return 0
	# (a sanitizer's report first, whole enough to name both sides of a
	# race: TSan's begins with WARNING)
	grep -A45 -E 'runtime error|ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer' "$log" | head -60
	# (the periodic stats lines left out: a job that hung prints nothing
	# else for minutes, and what came before the hang is what tells why)
	grep -v ' stats at [0-9.]* s: ' "$log" | tail -n "$lines"
	return $rc
}

# tagged_pids PATTERN VAR=VALUE: the pids of processes whose command line
# matches PATTERN (pgrep -f) and whose environment holds VAR=VALUE - how a
# test finds its own processes when other tests run the same programs
# beside it.
tagged_pids() {
	local p
	for p in $(pgrep -f "$1"); do
		tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "$2" && echo "$p"
	done
}
