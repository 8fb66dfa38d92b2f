# coll_lib.bash - helpers for the tests/integration/coll_*.sh tests of the
# collectives. Sourced, not run (ctest registers only *.sh).
#
# Every job is started through `dtrain launch` with DT_TEST_TAG=$TAG in its
# environment, so the exit trap can find and kill anything left over.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer

set -u

BUILD=${DTRAIN_BUILD:?DTRAIN_BUILD must name the build directory}
DTRAIN=$BUILD/dtrain
# Nodes started by hand need the job's secret (dtrain launch makes its own).
DTRAIN_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export DTRAIN_SECRET
CHECK=$BUILD/tests/progs/coll_check
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dtrain_coll_test.XXXXXX")
# Open MPI's session files go in the test's own directory: the mpiruns of
# tests running side by side would race on the shared one in /tmp.
export OMPI_MCA_orte_tmpdir_base=$TMP/ompi
TAG=dtc_$$_$RANDOM
FAILED=0
PASSED=0

cleanup() {
	local p
	for p in $(grep -l "DT_TEST_TAG=$TAG" /proc/[0-9]*/environ 2>/dev/null |
		cut -d/ -f3); do
		kill -9 "$p" 2>/dev/null
	done
	rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	FAILED=$((FAILED + 1))
}

pass() {
	echo "ok: $*"
	PASSED=$((PASSED + 1))
}

# check DESCRIPTION COMMAND...: pass when the command succeeds.
check() {
	local what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}

now_ms() {
	date +%s%3N
}

# launch N OUT [--env K=V ...] -- ARGS...: run coll_check on N workers and
# no servers; output (both streams) in OUT; returns the launcher's status.
launch() {
	local n=$1 out=$2
	shift 2
	local envs=()
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do
		envs+=("$1")
		shift
	done
	shift
	timeout $((280 * T_SCALE)) "$DTRAIN" launch -n "$n" -s 0 --launcher local \
		--env DT_TEST_TAG="$TAG" "${envs[@]}" -- "$CHECK" "$@" \
		>"$out" 2>&1
}

# every_rank N FILE PATTERN: each of workers 0..N-1 printed a line with
# the fixed string.
every_rank() {
	local n=$1 file=$2 pat=$3 r
	for ((r = 0; r < n; r++)); do
		grep -F -- "[worker $r] " "$file" | grep -qF -- "$pat" || {
			echo "worker $r has no line with '$pat'" >&2
			return 1
		}
	done
}

finish() {
	echo "$PASSED passed, $FAILED failed"
	[ "$FAILED" = 0 ]
}
