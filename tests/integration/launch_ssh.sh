#!/bin/bash
# launch_ssh.sh - the ssh launcher end to end, with a stand-in for ssh
# (DTRAIN_SSH) that runs the remote command here in a clean environment, as
# a remote login would: quoting, variables, working directory, prefixes,
# failure handling, and --sync-dst-dir with a stand-in for rsync.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
make_fake_dtrain
for v in $(compgen -e); do
	case $v in PS_* | MXNET_* | DMLC_* | OMP_* | OPENBLAS_*) unset "$v" ;; esac
done

cat >"$TMP/fake_ssh" <<'EOS'
#!/bin/bash
# ssh [-o OPT]... [-tt] [-p PORT] HOST COMMAND: run COMMAND here, in an
# environment as empty as a fresh login's.
while [ $# -gt 0 ]; do
	case $1 in
	-o | -p) shift 2 ;;
	-*) shift ;;
	*) break ;;
	esac
done
host=$1
shift
case "$*" in
*"umask 077 && mkdir"*) echo "$host key" >>"$FAKE_SSH_LOG" ;;
*"rm -rf"*".dtrain-"*) echo "$host unkey" >>"$FAKE_SSH_LOG" ;;
*) echo "$host" >>"$FAKE_SSH_LOG" ;;
esac
exec env -i PATH="$PATH" FAKE_HOST="$host" sh -c "$*"
EOS
cat >"$TMP/fake_rsync" <<'EOS'
#!/bin/bash
# rsync ... SRC/ HOST:DIR/: copy SRC into DIR here.
echo "$*" >>"$FAKE_RSYNC_LOG"
src=${*: -2:1}
dst=${*: -1}
host=${dst%%:*}
dir=${dst#*:}
if [ "$host" = "${FAKE_RSYNC_FAIL:-}" ]; then
	echo "rsync: connection to $host failed" >&2
	exit 23
fi
# The fake hosts share one file system, so the copies of one launch land in
# one directory: take turns, as the copies to real hosts never collide.
exec 9>>"$FAKE_RSYNC_LOG.lock"
flock 9
mkdir -p "$dir" && cp -a "$src." "$dir"
EOS
chmod +x "$TMP/fake_ssh" "$TMP/fake_rsync"
export DTRAIN_SSH=$TMP/fake_ssh DTRAIN_RSYNC=$TMP/fake_rsync
export FAKE_SSH_LOG=$TMP/ssh.log FAKE_RSYNC_LOG=$TMP/rsync.log
export DMLC_NODE_HOST=127.0.0.1 # the scheduler's address; not passed on
export PS_VERBOSE=0             # passed on to every host
mkdir -p "$TMP/work"
cd "$TMP/work" || exit 1
printf 'h1\nh2\nh3\n' >hosts
OUT=$TMP/out
ERR=$TMP/err

MSG="it's a \"test\" with \$dollar, spaces and a * star"
# shellcheck disable=SC2016
timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 2 -s 1 -H hosts --env DT_TEST_TAG="$TAG" \
	--env "MSG=$MSG" -- sh -c '
	# The job ends when the workers do: let the server print its line first.
	i=0; while [ ! -e "'"$TMP"'/server.0.started" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
	echo "worker $DMLC_WORKER_ID on $FAKE_HOST in $(pwd) uri=$DMLC_PS_ROOT_URI nw=$DMLC_NUM_WORKER ns=$DMLC_NUM_SERVER verbose=${PS_VERBOSE-unset} nodehost=${DMLC_NODE_HOST-unset} launched=$DTRAIN_LAUNCHED"
	echo "msg=$MSG"
	echo "secret file mode $(stat -c %a "$DTRAIN_SECRET_FILE") length $(wc -c <"$DTRAIN_SECRET_FILE") env ${DTRAIN_SECRET:-none}"
	echo "zero=$0"
	echo "to stderr $DMLC_WORKER_ID" >&2' "arg with 'quotes'" >"$OUT" 2>"$ERR"
rc=$?
check "ssh: launcher exits 0 (got $rc)" test "$rc" = 0
check "ssh: server 0 ran on h1" has "$OUT" "[server 0] server 0 role server"
for i in 0 1; do
	h=h$((i + 2))
	check "ssh: worker $i on $h with its variables" has "$OUT" \
		"[worker $i] worker $i on $h in $TMP/work uri=127.0.0.1 nw=2 ns=1 verbose=0 nodehost=unset launched=1"
	check "ssh: worker $i --env survives two shells" has "$OUT" "[worker $i] msg=$MSG"
	check "ssh: worker $i stderr" has "$ERR" "[worker $i] to stderr $i"
	check "ssh: worker $i argument" has "$OUT" "[worker $i] zero=arg with 'quotes'"
done
check "ssh: one connection per process" \
	test "$(grep -v key "$FAKE_SSH_LOG" | sort | paste -sd, -)" = "h1,h2,h3"
# The job's secret: written to a file of mode 600 on each host before the
# job (through ssh's input, on no command line), removed after it.
check "ssh: the secret's file written once per host" \
	test "$(grep ' key' "$FAKE_SSH_LOG" | sort | paste -sd, -)" = "h1 key,h2 key,h3 key"
check "ssh: ...and removed once per host" \
	test "$(grep ' unkey' "$FAKE_SSH_LOG" | sort | paste -sd, -)" = "h1 unkey,h2 unkey,h3 unkey"
for i in 0 1; do
	check "ssh: worker $i reads the secret from its file" has "$OUT" \
		"[worker $i] secret file mode 600 length 65 env none"
done
check "ssh: no secret file left" test -z "$(ls -A "$TMP/work" | grep dtrain-)"

# Another user of a shared working directory plants a link where the
# secret used to go (its name came from DTRAIN_JOB_ID, which may be
# known): the secret now goes to a new directory of a random name, made by
# mkdir, and the link's target is untouched.
echo "the planter's file" >"$TMP/planted"
ln -s "$TMP/planted" "$TMP/work/.dtrain-plantjob.secret"
: >"$FAKE_SSH_LOG"
# shellcheck disable=SC2016
DTRAIN_JOB_ID=plantjob timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 1 -s 0 -H hosts \
	--env DT_TEST_TAG="$TAG" -- sh -c 'echo "secret in $DTRAIN_SECRET_FILE"' \
	>"$OUT" 2>"$ERR"
rc=$?
check "planted link: launcher exits 0 (got $rc)" test "$rc" = 0
check "planted link: its target did not receive the secret" \
	test "$(cat "$TMP/planted")" = "the planter's file"
check "planted link: the secret went to a directory of a random name" \
	grep -qE "secret in $TMP/work/\.dtrain-[0-9a-f]{32}-[0-9]+/secret$" "$OUT"
rm -f "$TMP/work/.dtrain-plantjob.secret"
check "planted link: no secret directory left" test -z "$(ls -A "$TMP/work" | grep dtrain-)"

# A remote worker fails: the job stops, remote processes included.
: >"$FAKE_SSH_LOG"
start=$(now_ms)
# shellcheck disable=SC2016
timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 3 -s 0 -H hosts --env DT_TEST_TAG="$TAG" -- \
	sh -c 'sleep 300 & [ "$DMLC_WORKER_ID" = 2 ] && { sleep 1; exit 5; }; sleep 300' \
	>"$OUT" 2>"$ERR"
rc=$?
ms=$(($(now_ms) - start))
check "ssh failure: launcher exits 1 (got $rc)" test "$rc" = 1
# (45 s: the job's other processes would run for 300 s, so the bound still
# tells a stopped job from one that waits for them, with room for a busy
# machine, where starting the job alone has taken 26 s)
check "ssh failure: over within 45 s (${ms} ms)" test "$ms" -lt 45000
check "ssh failure: message names worker 2" grep -qE \
	'^dtrain launch: worker 2 \(pid [0-9]+\) exited with status 5; stopping the job$' "$ERR"
check "ssh failure: nothing left" wait_gone 5

# --sync-dst-dir: the working directory is copied to every host first, and
# the job runs there.
echo payload >data.txt
DST=$TMP/remote/job
# shellcheck disable=SC2016
timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 2 -s 0 -H hosts --sync-dst-dir "$DST" \
	--env DT_TEST_TAG="$TAG" -- sh -c 'echo "$(pwd): $(cat data.txt)"' \
	>"$OUT" 2>"$ERR"
rc=$?
check "sync: launcher exits 0 (got $rc)" test "$rc" = 0
check "sync: one rsync per host" test "$(wc -l <"$FAKE_RSYNC_LOG")" = 3
check "sync: rsync arguments" has "$FAKE_RSYNC_LOG" \
	"-az --exclude=.git/ -e $TMP/fake_ssh -o StrictHostKeyChecking=no -o BatchMode=yes -o ConnectTimeout=10 --rsync-path=if [ ! -e $DST ]; then mkdir -p $DST && : >$DST/.dtrain-" && has "$FAKE_RSYNC_LOG" "; fi && rsync $TMP/work/ h3:$DST/"
check "sync: worker 0 runs in the copy" has "$OUT" "[worker 0] $DST: payload"
check "sync: worker 1 runs in the copy" has "$OUT" "[worker 1] $DST: payload"

# A failing rsync stops everything before the job starts.
: >"$FAKE_RSYNC_LOG"
FAKE_RSYNC_FAIL=h2 timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 2 -s 0 -H hosts \
	--sync-dst-dir "$DST" --env DT_TEST_TAG="$TAG" -- echo started \
	>"$OUT" 2>"$ERR"
rc=$?
check "sync failure: launcher exits 1 (got $rc)" test "$rc" = 1
check "sync failure: rsync's message" has "$ERR" "[sync h2] rsync: connection to h2 failed"
check "sync failure: names the host" grep -qE \
	'^dtrain launch: sync h2 \(pid [0-9]+\) exited with status 23; stopping the job$' "$ERR"
check "sync failure: no worker started" hasnt "$OUT" "started"

finish
