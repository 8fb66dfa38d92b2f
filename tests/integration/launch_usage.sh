#!/bin/bash
# launch_usage.sh - `dtrain launch` refuses bad usage with exit status 2 and
# a message naming the option; a command that cannot be found fails its
# worker with status 127, which stops the job.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"

# usage_case WORD ARGS...: `dtrain launch ARGS` exits 2, stderr names WORD.
usage_case() {
	local word=$1 rc
	shift
	timeout $((20 * T_SCALE)) "$DTRAIN" launch "$@" >"$TMP/out" 2>"$TMP/err"
	rc=$?
	if [ "$rc" = 2 ] && has "$TMP/err" "$word"; then
		pass "launch $* -> 2, names '$word'"
	else
		fail "launch $*: status $rc, stderr: $(cat "$TMP/err")"
	fi
}

printf '# no hosts here\n\n' >"$TMP/empty_hosts"
printf 'h1\n-oProxyCommand=evil\n' >"$TMP/bad_hosts"
printf 'h1\n' >"$TMP/hosts"

usage_case "-n (the number of workers) is required" true
usage_case "-n: 0 is out of range" -n 0 true
usage_case "-n: 'abc' is not an integer" -n abc true
usage_case "--num-workers: 'x' is not an integer" --num-workers=x true
usage_case "-s: -1 is out of range" -n 1 -s -1 true
usage_case "unknown option '--bogus'" -n 1 --bogus true
usage_case "no command given" -n 2
usage_case "no command given" -n 2 --
usage_case "--launcher: unknown launcher 'yarn'" -n 1 --launcher yarn true
usage_case "--launcher ssh needs a host file (-H FILE)" -n 1 --launcher ssh true
usage_case "-H $TMP/missing" -n 1 -H "$TMP/missing" true
usage_case "no hosts" -n 1 -H "$TMP/empty_hosts" true
usage_case "bad host '-oProxyCommand=evil'" -n 1 -H "$TMP/bad_hosts" true
usage_case "--env '=1': empty variable name" -n 1 --env =1 true
usage_case "--env 'A B=1'" -n 1 --env "A B=1" true
usage_case "DMLC_ROLE is set by the launcher" -n 1 --env DMLC_ROLE=server true
usage_case "--env DT_SURELY_UNSET_VAR" -n 1 --env DT_SURELY_UNSET_VAR true
usage_case "--timeout: 0 is out of range" -n 1 --timeout 0 true
usage_case "--timeout needs a value" -n 1 --timeout
usage_case "--grace: 'soon' is not an integer" -n 1 --grace soon true
usage_case "--sync-dst-dir works only with --launcher ssh" \
	-n 1 --sync-dst-dir /tmp/x true
usage_case "--sync-exclude needs --sync-dst-dir" \
	-n 1 -H "$TMP/hosts" --sync-exclude 'build*/' true
usage_case "--sync-exclude: empty pattern" \
	-n 1 -H "$TMP/hosts" --sync-dst-dir /tmp/x --sync-exclude '' true

timeout $((20 * T_SCALE)) "$DTRAIN" launch --help >"$TMP/out" 2>&1
check "--help exits 0 with the synopsis" \
	test $? = 0 -a -n "$(grep -F 'usage: dtrain launch -n W' "$TMP/out")"

# A command that does not exist: the worker's exec fails with 127 and the
# launcher stops the job, naming the worker.
make_fake_dtrain
start=$(now_ms)
timeout $((30 * T_SCALE)) "$DTRAIN" launch -n 2 -s 1 --env DT_TEST_TAG="$TAG" \
	-- "$TMP/no/such/command" >"$TMP/out" 2>"$TMP/err"
rc=$?
check "missing command: launcher exits 1 (got $rc)" test "$rc" = 1
check "missing command: worker reports the exec failure" \
	has "$TMP/err" "cannot run '$TMP/no/such/command': No such file"
check "missing command: launcher names the worker and status 127" \
	grep -qE '^dtrain launch: worker [01] \(pid [0-9]+\) exited with status 127; stopping the job' "$TMP/err"
check "missing command: over quickly" test $(($(now_ms) - start)) -lt 15000
check "missing command: nothing left" wait_gone 5

finish
