# launch_lib.bash - helpers for the tests/integration/launch_*.sh tests of
# `dtrain launch`. Sourced, not run (ctest registers only *.sh).
#
# Every process a test starts through the launcher carries DT_TEST_TAG=$TAG
# in its environment (--env), so the tests can prove by scanning /proc that
# nothing of a job is left; the exit trap kills any leftover anyway.

set -u

DTRAIN=${DTRAIN_BUILD:?DTRAIN_BUILD must name the build directory}/dtrain
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dtrain_launch_test.XXXXXX")
# Open MPI's session files go in the test's own directory: the mpiruns of
# tests running side by side would race on the shared one in /tmp.
export OMPI_MCA_orte_tmpdir_base=$TMP/ompi
TAG=dtl_$$_$RANDOM
FAILED=0

tagged_pids() {
	grep -l "DT_TEST_TAG=$TAG" /proc/[0-9]*/environ 2>/dev/null |
		cut -d/ -f3
}

cleanup() {
	local p
	for p in $(tagged_pids); do
		kill -9 "$p" 2>/dev/null
	done
	[ -n "${KEEP:-}" ] || rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	FAILED=1
}

pass() {
	echo "ok: $*"
}

# check DESCRIPTION COMMAND...: pass when the command succeeds.
check() {
	local what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}

# has FILE PATTERN: the file has a line matching the fixed string.
has() {
	grep -qF -- "$2" "$1"
}

hasnt() {
	! grep -qF -- "$2" "$1"
}

now_ms() {
	echo $(($(date +%s%N) / 1000000))
}

# wait_gone SECONDS: wait (polling) until no tagged process is left.
wait_gone() {
	local end=$(($(now_ms) + $1 * 1000))
	while [ -n "$(tagged_pids)" ]; do
		if [ "$(now_ms)" -ge "$end" ]; then
			echo "left over:" >&2
			ps -o pid,pgid,sid,ppid,stat,args \
				-p "$(tagged_pids | paste -sd,)" >&2
			return 1
		fi
		sleep 0.05
	done
}

# A stand-in for the dtrain binary in the scheduler and server roles
# (DTRAIN_EXE), for tests whose workers are shell commands that never join
# a cluster. It exits 0 at once unless FAKE_SCHEDULER_MODE or
# FAKE_SERVER_MODE says otherwise (hang, stubborn: ignores SIGTERM, fail); the
# scheduler first checks that DT_LISTEN_FD is the listening socket on
# DMLC_PS_ROOT_PORT.
make_fake_dtrain() {
	cat >"$TMP/fake_dtrain" <<EOF
#!/bin/bash
# The rank wrapper is the real one.
[ "\$1" = rank-exec ] && exec "$DTRAIN" "\$@"
EOF
	cat >>"$TMP/fake_dtrain" <<'EOF'
role=$1
sockets() {
	local f n=0
	for f in /proc/$$/fd/*; do
		case $(readlink "$f") in socket:*) n=$((n + 1)) ;; esac
	done
	echo $n
}
if [ "$role" = scheduler ]; then
	link=$(readlink "/proc/$$/fd/${DT_LISTEN_FD:-none}")
	inode=${link#socket:[}
	inode=${inode%]}
	port=$(printf '%04X' "$DMLC_PS_ROOT_PORT")
	if awk -v p=":$port" -v i="$inode" \
		'$2 ~ p"$" && $4 == "0A" && $10 == i { f = 1 } END { exit !f }' \
		/proc/net/tcp; then
		echo "scheduler listens on $DMLC_PS_ROOT_URI:$DMLC_PS_ROOT_PORT fd $DT_LISTEN_FD sockets $(sockets)"
	else
		echo "scheduler: DT_LISTEN_FD=${DT_LISTEN_FD:-} is not the listening socket" >&2
		exit 1
	fi
else
	echo "server $DMLC_SERVER_ID role $DMLC_ROLE listen_fd=${DT_LISTEN_FD:-unset} sockets $(sockets)"
	# For tests whose workers must not finish before this line is out.
	: >"$(dirname "$0")/server.$DMLC_SERVER_ID.started"
fi
if [ "$role" = scheduler ]; then
	mode=${FAKE_SCHEDULER_MODE:-}
else
	mode=${FAKE_SERVER_MODE:-}
fi
case $mode in
hang) exec sleep 300 ;;
stubborn) trap '' TERM; sleep 300 & wait; sleep 300 ;;
fail) echo "$role failing" >&2; exit 4 ;;
esac
exit 0
EOF
	chmod +x "$TMP/fake_dtrain"
	export DTRAIN_EXE=$TMP/fake_dtrain
}

finish() {
	if [ "$FAILED" = 0 ]; then
		echo "all passed"
	fi
	exit "$FAILED"
}
