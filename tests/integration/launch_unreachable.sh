#!/bin/bash
# launch_unreachable.sh - a host that does not answer fails the job within
# the ssh connect timeout (DTRAIN_SSH_CONNECT_TIMEOUT, default 10 s), with
# the host named, instead of ssh's own timeout of minutes. Uses the real
# ssh client against an address nothing answers on (10.255.255.1: dropped
# on most networks, unreachable on the rest; both must end as fast).
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
if ! command -v ssh >/dev/null; then
	echo "skipped: no ssh client (Debian's openssh-client)"
	exit 0
fi
unset DTRAIN_SSH
cd "$TMP" || exit 1
echo 10.255.255.1 >hosts
t0=$(now_ms)
DTRAIN_SSH_CONNECT_TIMEOUT=1 timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 1 -s 1 -H hosts \
	--env DT_TEST_TAG="$TAG" -- true >"$TMP/out" 2>"$TMP/err"
rc=$?
ms=$(($(now_ms) - t0))
cat "$TMP/err" | head -5
check "unreachable host: launcher exits 1 (got $rc)" test "$rc" = 1
# 1 s to connect; the bound stays below the 10 s default (a launcher that
# ignored the variable fails it) and leaves room for a loaded machine.
check "unreachable host: over within 9 s (${ms} ms)" test "$ms" -lt 9000
check "unreachable host: named" grep -q "job failed before it started: writing the secret on 10.255.255.1 exited with status 255" "$TMP/err"
check "unreachable host: nothing left" wait_gone 5

# Two hosts: "down" cannot be reached (ssh exits 255 at once), "up" took
# the secret and is still connected when the launcher stops the step. Its
# ssh, killed by the launcher's SIGTERM, exits 255 as well; that must not
# read as "never connected": the secret written on "up" is removed after.
cat >"$TMP/fake_ssh" <<'EOS'
#!/bin/bash
while [ "$1" = -o ] || [ "$1" = -p ]; do shift 2; done
host=$1 cmd=$2
echo "$cmd" >>"$FAKE_DIR/calls.$host"
if [ "$host" = down ]; then
	# (once "up" has its secret and waits, as a slower host would)
	for _ in $(seq 600); do [ -e "$FAKE_DIR/up.waiting" ] && break; sleep 0.05; done
	exit 255
fi
case $cmd in
*"cat >"*)
	cat >/dev/null
	trap 'exit 255' TERM
	: >"$FAKE_DIR/up.waiting"
	sleep 60 &
	wait
	;;
esac
exit 0
EOS
chmod +x "$TMP/fake_ssh"
printf 'up\ndown\n' >hosts2
FAKE_DIR=$TMP DTRAIN_SSH=$TMP/fake_ssh DMLC_NODE_HOST=127.0.0.1 timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 2 -s 0 \
	-H hosts2 --env DT_TEST_TAG="$TAG" -- true >"$TMP/out" 2>"$TMP/err"
rc=$?
check "one host down: launcher exits 1 (got $rc)" test "$rc" = 1
check "one host down: named" grep -q "writing the secret on down exited with status 255" "$TMP/err"
check "one host down: the secret written on the other host is removed" \
	grep -q "rm -rf" "$TMP/calls.up"
check "one host down: nothing is removed where ssh never connected" \
	test "$(grep -c . "$TMP/calls.down")" = 1
check "one host down: nothing left" wait_gone 5
[ "$FAILED" = 0 ] || { cat "$TMP/err"; cat "$TMP"/calls.*; }
finish
