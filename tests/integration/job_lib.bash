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
	grep -A12 -E 'runtime error|ERROR: (Address|Leak|Thread)Sanitizer' "$log" | head -40
	tail -n "$lines" "$log"
	return $rc
}
