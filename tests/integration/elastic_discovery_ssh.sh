#!/bin/bash
# elastic_discovery_ssh.sh - dtrain launch --launcher ssh
# --host-discovery-script (docs/elastic.md): the workers of the hosts the
# script adds are started over ssh and join the running elastic job; those
# of a host it drops are stopped, and the job goes on without them. ssh is
# the tests' stand-in (DTRAIN_SSH, as in launch_ssh.sh): it runs the remote
# command on this machine in an environment as empty as a fresh login's,
# so every "host" shares this file system. A host the script names that is
# not in the host file gets no worker, and the launcher says why. A host
# dropped and then listed again gets a worker again, which joins: each
# worker the discovery starts has a secret file of its own (mode 0600 in a
# directory of mode 0700), written over ssh's input and on no command line;
# a host where that write fails counts it as a failed worker, and after 3
# gets no more.
. "$(dirname "$0")/coll_lib.bash"
EX=$BUILD/examples/elastic
S=${DT_TEST_TIME_SCALE:-1}
out=$TMP/out
hosts=$TMP/hosts

cat >"$TMP/fake_ssh" <<'EOS'
#!/bin/bash
# ssh [-o OPT]... [-tt] [-p PORT] HOST COMMAND: run COMMAND here.
while [ $# -gt 0 ]; do
	case $1 in
	-o | -p) shift 2 ;;
	-*) shift ;;
	*) break ;;
	esac
done
host=$1
shift
echo "$host" >>"$FAKE_SSH_LOG"
printf '%s %s\n' "$host" "$*" >>"$FAKE_SSH_LOG.cmds"
# FAKE_SSH_FAIL_HOST: writing a joining worker's secret file there fails
# as a connection that cannot be made does.
case "$*" in
*-w[0-9]*/secret*)
	[ "$host" = "${FAKE_SSH_FAIL_HOST:-}" ] && exit 255
	# (a connection that hangs: named, so that the test can look for it)
	[ "$host" = "${FAKE_SSH_HANG_HOST:-}" ] &&
		exec bash -c 'exec -a "fake-ssh-hang-$0" sleep 300' "$FAKE_SSH_TAG"
	;;
esac
exec env -i PATH="$PATH" FAKE_HOST="$host" sh -c "$*"
EOS
chmod +x "$TMP/fake_ssh"
export DTRAIN_SSH=$TMP/fake_ssh FAKE_SSH_LOG=$TMP/ssh.log FAKE_SSH_TAG=$TAG
export DMLC_NODE_HOST=127.0.0.1 # the scheduler's address; not passed on
mkdir -p "$TMP/work"
cd "$TMP/work" || exit 1
printf 'h1\nh2\nh3\n' >hostfile

wait_line() {
	local end=$((SECONDS + $2 * S))
	until grep -Eq -- "$1" "$out" 2>/dev/null; do
		[ $SECONDS -ge $end ] && return 1
		sleep 0.05
	done
}

printf 'h1\nh2\n' >"$hosts"
timeout $((120 * S)) "$DTRAIN" launch -n 2 -s 0 -H hostfile \
	--env DT_TEST_TAG="$TAG" --min-workers 1 --max-workers 4 \
	--host-discovery-script "cat $hosts" -- \
	"$EX" --samples 512 --steps 160 --count-samples \
	--hold-at 30 --hold-file "$TMP/go1" --hold-at 90 --hold-file "$TMP/go2" \
	--hold-at 120 --hold-file "$TMP/go3" \
	--save "$TMP/w.bin" >"$out" 2>&1 &
job=$!
printf 'h1\nh2\nnowhere:2\nh3\n' >"$hosts.new" && mv "$hosts.new" "$hosts"
wait_line "host h3 has a free slot: started worker 2" 60 ||
	fail "the launcher did not start a worker for the new host"
wait_line "worker 2 is ready to join" 60 ||
	fail "the new host's worker did not get to wait for the members' commit"
: >"$TMP/go1"
wait_line "membership 1 has 3 workers: 1 joined" 60 ||
	fail "the members did not take the new host's worker in"
printf 'h1\nh2\n' >"$hosts.new" && mv "$hosts.new" "$hosts"
wait_line "host h3 is no longer listed: stopping worker 2" 60 ||
	fail "the launcher did not stop the worker of the host that went"
wait_line "worker 2 .*the elastic job goes on without it" 60 ||
	fail "the job did not go on without the stopped worker"
: >"$TMP/go2"
wait_line "membership 2 has 2 workers" 60 ||
	fail "the members did not take the stopped worker's leaving"
# h3 is listed again: its new worker has a secret file again, and joins.
printf 'h1\nh2\nh3\n' >"$hosts.new" && mv "$hosts.new" "$hosts"
wait_line "host h3 has a free slot: started worker 3" 60 ||
	fail "the launcher did not start a worker for the host listed again"
wait_line "worker 3 is ready to join" 60 ||
	fail "the worker of the host listed again did not get to join (its secret?)"
secret_file=$(ls -d "$TMP"/work/.dtrain-*-w3 2>/dev/null | head -n 1)/secret
check "the new worker's secret directory is 0700" \
	test "$(stat -c %a "$(dirname "$secret_file")")" = 700
check "its secret file is 0600" test "$(stat -c %a "$secret_file")" = 600
secret=$(cat "$secret_file")
check "the secret is 64 hex digits" grep -Eq '^[0-9a-f]{64}$' <<<"$secret"
check "the secret was on no ssh command line" \
	test -z "$(grep -F "$secret" "$FAKE_SSH_LOG.cmds")"
: >"$TMP/go3"
wait_line "membership 3 has 3 workers: 1 joined" 60 ||
	fail "the members did not take in the worker of the host listed again"
wait $job
rc=$?
check "the job ends 0 (got $rc)" test "$rc" = 0
check "the new host's worker ran there, over ssh" \
	test "$(grep -c '^h3$' "$FAKE_SSH_LOG")" -ge 1
check "the new worker took the members' state (the sync is logged)" \
	grep -Eq "membership 1 has 3 workers from step [0-9]+ \(1 worker joined\)" "$out"
check "the job ends with 3 workers in membership 3 (h3's new worker too)" \
	grep -q "done with 3 workers at epoch [0-9]*; .*membership 3$" "$out"
check "a host outside the host file gets no worker, and is named" \
	grep -q "host nowhere: .*not in the host file" "$out"
check "...once" test "$(grep -c "host nowhere:" "$out")" = 1
check "no worker was started over ssh for it" \
	test -z "$(grep '^nowhere$' "$FAKE_SSH_LOG")"
check "no sample trained on twice in an epoch" \
	test -z "$(grep "samples: epoch" "$out" | grep -v " 0 more than once")"
check "no secret file left" test -z "$(ls -A "$TMP/work" | grep dtrain-)"

# A host where the joiner's secret file cannot be written: 3 failures,
# then no more tries; the job goes on with its worker.
printf 'h1\nhbad\n' >hostfile2
printf 'h1\nhbad\n' >"$hosts"
: >"$out"
FAKE_SSH_FAIL_HOST=hbad timeout $((120 * S)) "$DTRAIN" launch -n 1 -s 0 \
	-H hostfile2 --env DT_TEST_TAG="$TAG" --min-workers 1 --max-workers 3 \
	--host-discovery-script "cat $hosts" -- "$EX" --samples 256 \
	--steps 60 --hold-at 30 --hold-file "$TMP/go4" >"$out" 2>&1 &
job=$!
wait_line "host hbad: 3 of its workers failed; starting no more workers there" 60 ||
	fail "the host whose secret file cannot be written was not left out"
: >"$TMP/go4"
wait $job
rc=$?
check "a host whose secret write fails: the job ends 0 (got $rc)" test "$rc" = 0
check "...each failure is said by its worker, naming the secret file" \
	test "$(grep -c "^\[worker [1-3]\] dtrain launch: writing its secret file over ssh failed" "$out")" = 3
check "...and then no more tries" test "$(grep -c "hbad" "$out")" = 4
check "...no worker was started there" \
	test -z "$(grep '^hbad ' "$FAKE_SSH_LOG.cmds" | grep dtrain-remote)"
check "...but its secret write was tried 3 times" \
	test "$(grep '^hbad ' "$FAKE_SSH_LOG.cmds" | grep -c -- '-w[0-9]*/secret')" = 3
check "...no secret file left" test -z "$(ls -A "$TMP/work" | grep dtrain-)"

# A host where writing the secret file hangs: the launcher does not wait
# for it (the joining worker's own process does, 20 s at most), so it
# answers a SIGTERM at once, and the hung write goes with the job.
printf 'h1\nhhang\n' >hostfile3
printf 'h1\nhhang\n' >"$hosts"
: >"$out"
FAKE_SSH_HANG_HOST=hhang timeout $((120 * S)) "$DTRAIN" launch -n 1 -s 0 \
	-H hostfile3 --env DT_TEST_TAG="$TAG" --min-workers 1 --max-workers 2 \
	--host-discovery-script "cat $hosts" -- "$EX" --samples 256 \
	--steps 60 --hold-at 30 --hold-file "$TMP/go5" >"$out" 2>&1 &
job=$!
wait_line "host hhang has a free slot: started worker 1" 60 ||
	fail "no worker was started for the host whose secret write hangs"
end=$((SECONDS + 30 * S))
until pgrep -f "fake-ssh-hang-$TAG" >/dev/null; do
	[ $SECONDS -ge $end ] && break
	sleep 0.05
done
check "the secret write on hhang hangs" pgrep -f "fake-ssh-hang-$TAG"
launcher=$(pgrep -P $job -f "launch -n 1" | head -n 1)
t0=$SECONDS
kill -TERM "${launcher:-$job}"
wait $job
check "...the launcher ends on SIGTERM at once, not after the write's 20 s ($((SECONDS - t0)) s)" \
	test $((SECONDS - t0)) -lt 15
check "...saying so" grep -q "got SIGTERM; stopping the job" "$out"
check "...and the hung write is gone with the job" \
	test -z "$(pgrep -f "fake-ssh-hang-$TAG")"

"$DTRAIN" launch -n 2 -s 0 --min-workers 1 --launcher mpi -H hostfile \
	--host-discovery-script true -- "$EX" >"$TMP/refused" 2>&1
check "with mpi: refused, naming what to do" \
	grep -q "host-discovery-script works with the local and ssh launchers" "$TMP/refused"
finish
