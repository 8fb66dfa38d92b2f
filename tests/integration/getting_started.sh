#!/bin/bash
# getting_started.sh - every command of docs/getting-started.md runs as the
# page says: its ```sh blocks, in order, in one shell, as a reader would
# type them, with HOME a fresh directory and nothing of the build tree on
# PATH. Two things are adapted, and only these: `make install` is what it
# runs after building (`cmake --install` of the tested build), and the
# scheduler's port 9091 of the manual recipe becomes a free port (and in a
# sanitizer build, cc links the sanitizer's runtime). Then the outputs the
# page promises are checked.
. "$(dirname "$0")/cluster_lib.bash"
: "${DTRAIN_SOURCE:?DTRAIN_SOURCE must name the source directory}"
PAGE=$DTRAIN_SOURCE/docs/getting-started.md
port=$(free_port)

mkdir -p "$T_DIR/home" "$T_DIR/work"
{
	echo 'set -eu'
	# (`make install PREFIX=P` without its build step: the build is done)
	echo 'make() {'
	echo '	[ "$1" = install ] || { echo "make $1: not run by this test" >&2; return 1; }'
	echo '	local prefix=/usr/local; case "${2:-}" in PREFIX=*) prefix=${2#PREFIX=};; esac'
	echo "	cmake --install '$DTRAIN_BUILD' --prefix \"\$prefix\" >/dev/null"
	echo '}'
	# (a sanitizer build's library needs its runtime in the program too)
	san=$(sed -n 's/^DT_SANITIZE:STRING=//p' "$DTRAIN_BUILD/CMakeCache.txt")
	[ -z "$san" ] || echo "cc() { command cc -fsanitize=$san \"\$@\"; }"
	awk '/^```sh$/ {on = 1; next} /^```/ {on = 0; next} on' "$PAGE" |
		sed "s/DMLC_PS_ROOT_PORT=9091/DMLC_PS_ROOT_PORT=$port/"
} >"$T_DIR/page.sh"
blocks=$(grep -c '^```sh$' "$PAGE")
[ "$blocks" -ge 6 ] || fail "only $blocks sh blocks in getting-started.md"

cd "$T_DIR/work"
HOME="$T_DIR/home" PATH=/usr/local/bin:/usr/bin:/bin spawn page bash "$T_DIR/page.sh"
cd - >/dev/null
wait_exit "$SPAWNED" 240 || fail "the page's commands did not finish within 240 s"
out=$T_DIR/page.log
[ "$EXIT_STATUS" = 0 ] || fail "the page's commands failed (status $EXIT_STATUS): $(tail -30 "$out")"
log "$blocks sh blocks ran, exit 0"

grep -q '^dtrain 0' "$out" || fail "no dtrain version printed"
grep -q 'usage: dtrain launch' "$out" || fail "no launch --help"
[ "$(grep -c '^\[worker [01]\] w=5\.0' "$out")" -ge 4 ] ||
	fail "the launched linreg jobs did not end with w=5.0... on both workers"
w0=$(tail -n 1 "$T_DIR/work/worker0.log")
w1=$(tail -n 1 "$T_DIR/work/worker1.log")
[[ "$w0" == w=5.0* ]] && [ "$w0" = "$w1" ] ||
	fail "the manual recipe's workers ended with '$w0' and '$w1'"
log "first job and manual recipe: both workers $w0"
[ "$(grep -c 'allreduce, broadcast and average of 100000 floats correct' "$out")" = 2 ] ||
	fail "the allreduce job: not both ranks correct"
grep -q '<svg' "$T_DIR/work/curves.svg" || fail "dtrain plot wrote no SVG"
[ "$(grep -c 'of 2: 2 4$' "$out")" = 2 ] || fail "hello: not both workers printed 2 4"
log "horovod-style job, plot and the pkg-config build as the page says"
