# cluster_lib.bash - helpers shared by the multi-process tests in this
# directory (sourced, not run: CTest registers only *.sh).
#
# Every process a test starts goes through `spawn`, which runs it under
# `timeout` in a process group of its own and records the group, so the
# EXIT trap set here can kill whatever is still running however the test
# ends. Waits poll with a deadline; nothing sleeps a fixed time to let
# something happen.

set -u

: "${DTRAIN_BUILD:?DTRAIN_BUILD must name the build directory}"
DTRAIN="$DTRAIN_BUILD/dtrain"
# Nodes started by hand need the job's secret (dtrain launch makes its own).
DTRAIN_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export DTRAIN_SECRET
HELLO="$DTRAIN_BUILD/examples/hello_cluster"
PROBE="$DTRAIN_BUILD/tests/progs/barrier_probe"
# Every deadline below (a process's life, a wait for a line or an exit) is
# a bound on a hang, not a claim about speed: it is multiplied by
# DT_TEST_TIME_SCALE, which CTest passes (3 in a sanitizer build, several
# times slower), so that a slow machine or build does not fail the test.
DT_TEST_TIME_SCALE=${DT_TEST_TIME_SCALE:-1}
PROC_TIMEOUT=$((${PROC_TIMEOUT:-120} * DT_TEST_TIME_SCALE)) # per process, seconds

T_NAME=$(basename "$0" .sh)
T_DIR=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-$T_NAME.XXXXXX")
T_GROUPS=() # process groups started by spawn
declare -A T_START # spawned pid -> its start time (/proc/PID/stat)
T_FAILED=0

# Waiting without starting processes. bash keeps the exit status of a
# background process it has reaped until a new child of its own gets the
# same pid; on a busy machine the pids wrap (32768) within minutes, and a
# poll that forks `sleep` and `date` 40 times a second would in the end
# take that pid ("wait: pid N is not a child of this shell"). So the polls
# below use builtins only: the time from EPOCHREALTIME, the pause from
# `read -t` on a FIFO nobody writes to.
mkfifo "$T_DIR/.pause"
exec {T_PAUSE_FD}<>"$T_DIR/.pause"
# (no $(...) either: a command substitution is a child too, so these set
# variables: T_NOW, T_ST)
t_now() { # T_NOW: nanoseconds
	local t=${EPOCHREALTIME/[.,]/}
	T_NOW=$((10#$t * 1000))
}
t_pause() { # SECONDS (fractions allowed)
	read -r -t "$1" -u "$T_PAUSE_FD" _ || true
}
# t_start PID: T_ST, the start time of PID (clock ticks since boot), or "".
t_start() {
	local line f
	T_ST=
	{ read -r line <"/proc/$1/stat"; } 2>/dev/null || return 0
	line=${line##*) }
	read -r -a f <<<"$line"
	T_ST=${f[19]}
}
# t_alive PID: PID is still the process spawn started (not a new one that
# got its pid after it ended).
t_alive() {
	kill -0 "$1" 2>/dev/null || return 1
	[ -z "${T_START[$1]:-}" ] && return 0
	t_start "$1"
	[ "$T_ST" = "${T_START[$1]}" ]
}

cleanup() {
	local g
	for g in "${T_GROUPS[@]}"; do
		kill -TERM -- "-$g" 2>/dev/null
	done
	for g in "${T_GROUPS[@]}"; do
		# Give TERM a moment, then make sure.
		local i
		for i in 1 2 3 4 5 6 7 8 9 10; do
			kill -0 -- "-$g" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL -- "-$g" 2>/dev/null
	done
	wait 2>/dev/null
	if [ "$T_FAILED" -ne 0 ] && [ -z "${KEEP_LOGS:-}" ]; then
		dump_logs
	fi
	rm -rf "$T_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

dump_logs() {
	local f
	for f in "$T_DIR"/*.log; do
		[ -e "$f" ] || continue
		echo "----- $(basename "$f") -----"
		tail -n 60 "$f"
	done
}

log() { printf '[%s] %s\n' "$T_NAME" "$*"; }

fail() {
	T_FAILED=1
	printf '[%s] FAIL: %s\n' "$T_NAME" "$*" >&2
	exit 1
}

# spawn NAME CMD [ARGS...]: start CMD in the background under timeout, in
# a process group of its own, with stdout and stderr in $T_DIR/NAME.log.
# Sets SPAWNED to the pid (= process group id). `VAR=x spawn ...` passes
# VAR to that process only (bash exports a function call's assignments).
spawn() {
	local name=$1
	shift
	setsid timeout -k 5 "$PROC_TIMEOUT" "$@" >"$T_DIR/$name.log" 2>&1 &
	SPAWNED=$!
	T_GROUPS+=("$SPAWNED")
	t_start "$SPAWNED"
	T_START[$SPAWNED]=$T_ST
}

# wait_exit PID SECONDS: wait for a spawned process to end within SECONDS
# (scaled);
# sets EXIT_STATUS (124 when timeout(1) killed it, 255 when we gave up).
wait_exit() {
	local pid=$1 secs=$2 deadline
	t_now
	deadline=$((T_NOW + secs * DT_TEST_TIME_SCALE * 1000000000))
	while t_alive "$pid"; do
		t_now
		if [ "$T_NOW" -ge "$deadline" ]; then
			EXIT_STATUS=255
			return 1
		fi
		t_pause 0.05
	done
	wait "$pid"
	EXIT_STATUS=$?
	return 0
}

# wait_for_line FILE PATTERN SECONDS: poll until FILE has a line matching
# the extended regular expression PATTERN (SECONDS scaled).
wait_for_line() {
	local file=$1 pattern=$2 secs=$3 deadline
	t_now
	deadline=$((T_NOW + secs * DT_TEST_TIME_SCALE * 1000000000))
	while ! grep -Eq -- "$pattern" "$file" 2>/dev/null; do
		t_now
		[ "$T_NOW" -ge "$deadline" ] && return 1
		t_pause 0.05
	done
	return 0
}

# expect_dropped WHAT LOG PATTERN PID CMD...: CMD plays a bad peer and must
# be hung up on (exit 0); then LOG must get a line matching PATTERN (the
# reason) and PID, the node it talked to, must still be running.
expect_dropped() {
	local what=$1 logf=$2 pattern=$3 pid=$4
	shift 4
	"$@" || fail "$what: the node did not hang up"
	wait_for_line "$logf" "$pattern" 20 ||
		fail "$what: the node did not log the reason ('$pattern')"
	kill -0 "$pid" 2>/dev/null || fail "$what: the node died"
	log "$what: dropped, logged, node alive"
}

# free_port: print a TCP port nobody listens on (the OS picks it).
free_port() {
	if command -v python3 >/dev/null 2>&1; then
		python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
		return
	fi
	# No python: try random high ports until one refuses connections.
	local p
	while :; do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

# job_env PORT SERVERS WORKERS: export the DMLC_* variables of a local job.
job_env() {
	export DMLC_PS_ROOT_URI=127.0.0.1
	export DMLC_PS_ROOT_PORT=$1
	export DMLC_NUM_SERVER=$2
	export DMLC_NUM_WORKER=$3
	unset DMLC_ROLE DMLC_WORKER_ID DMLC_SERVER_ID DMLC_INTERFACE \
		DMLC_NODE_HOST DMLC_PORT DT_LISTEN_FD OMPI_COMM_WORLD_RANK \
		PMIX_RANK SLURM_PROCID
}

# expect_exit PID SECONDS STATUS WHAT: the process ends within SECONDS with
# STATUS ("0", or "nonzero").
expect_exit() {
	local pid=$1 secs=$2 want=$3 what=$4
	wait_exit "$pid" "$secs" || fail "$what did not exit within $((secs * DT_TEST_TIME_SCALE)) s"
	if [ "$want" = nonzero ]; then
		[ "$EXIT_STATUS" -ne 0 ] ||
			fail "$what exited 0; expected a failure"
		[ "$EXIT_STATUS" -ne 124 ] && [ "$EXIT_STATUS" -ne 137 ] ||
			fail "$what was killed by timeout (status $EXIT_STATUS)"
	else
		[ "$EXIT_STATUS" -eq "$want" ] ||
			fail "$what exited $EXIT_STATUS; expected $want"
	fi
}

# assert_grep FILE PATTERN WHAT: FILE has a line matching PATTERN.
assert_grep() {
	grep -Eq -- "$2" "$1" || fail "$3: no line matching '$2' in $(basename "$1")"
}

# proc_scan FIELD VALUE: print "pid state" of every process whose
# /proc/PID/stat FIELD (ppid or pgrp) is VALUE.
proc_scan() {
	local field=$1 value=$2 stat line f
	# (read, a builtin: a cat per process took over 10 s on a loaded
	# machine running a thousand processes)
	for stat in /proc/[0-9]*/stat; do
		{ read -r line <"$stat"; } 2>/dev/null || continue
		# "pid (comm) state ppid pgrp ...": comm may hold spaces.
		read -r -a f <<<"${line##*) }"
		if { [ "$field" = ppid ] && [ "${f[1]}" = "$value" ]; } ||
			{ [ "$field" = pgrp ] && [ "${f[2]}" = "$value" ]; }; then
			echo "${line%% *} ${f[0]}"
		fi
	done
}

# assert_groups_gone: every process group spawned so far has ended. A
# zombie does not count: one whose parent was killed may wait for a slow
# init to reap it.
assert_groups_gone() {
	local g left
	for g in "${T_GROUPS[@]}"; do
		kill -0 -- "-$g" 2>/dev/null || continue
		left=$(proc_scan pgrp "$g" | grep -v ' Z$')
		[ -z "$left" ] || fail "process group $g is still running: $(tr '\n' ' ' <<<"$left")"
	done
}

# child_of PID: the pid of PID's child (the program timeout runs).
child_of() {
	proc_scan ppid "$1" | head -n 1 | cut -d' ' -f1
}
