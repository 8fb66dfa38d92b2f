#!/bin/bash
# elastic_discovery.sh - dtrain launch --host-discovery-script with the
# local launcher (docs/elastic.md): the script's listing grows from 2 slots
# to 3, and the launcher starts a third worker that joins the running
# elastic job at the members' next commit; then the listing loses that
# host, and the launcher stops its worker - the job goes on with 2; a
# host whose workers fail 3 times is blacklisted; the job ends 0. Also
# refused: the option without an elastic job, and with another launcher.
. "$(dirname "$0")/coll_lib.bash"
EX=$BUILD/examples/elastic
S=${DT_TEST_TIME_SCALE:-1}
out=$TMP/out
hosts=$TMP/hosts

# wait_line PATTERN SECONDS: poll the launcher's output for PATTERN.
wait_line() {
	local end=$((SECONDS + $2 * S))
	until grep -Eq -- "$1" "$out" 2>/dev/null; do
		[ $SECONDS -ge $end ] && return 1
		sleep 0.05
	done
}

printf 'a:2\n' >"$hosts"
DT_TEST_TAG=$TAG timeout $((120 * S)) "$DTRAIN" launch -n 2 -s 0 \
	--min-workers 1 --max-workers 3 --host-discovery-script "cat $hosts" -- \
	"$EX" --samples 512 --steps 160 --count-samples \
	--hold-at 30 --hold-file "$TMP/go1" --hold-at 90 --hold-file "$TMP/go2" \
	--save "$TMP/w.bin" >"$out" 2>&1 &
job=$!
printf 'a:2\nb:1\n' >"$hosts.new" && mv "$hosts.new" "$hosts"
wait_line "host b has a free slot: started worker 2" 60 ||
	fail "the launcher did not start a worker for the new slot"
wait_line "worker 2 is ready to join" 60 ||
	fail "the third worker did not get to wait for the members' commit"
: >"$TMP/go1"
wait_line "membership 1 has 3 workers: 1 joined" 60 ||
	fail "the members did not take the third worker in"
printf 'a:2\n' >"$hosts.new" && mv "$hosts.new" "$hosts"
wait_line "host b is no longer listed: stopping worker 2" 60 ||
	fail "the launcher did not stop the worker of the host that went"
# A new host whose workers fail (the job gave every worker id up to
# --max-workers once, so each is refused): blacklisted after 3.
printf 'a:2\nc:1\n' >"$hosts.new" && mv "$hosts.new" "$hosts"
wait_line "host c: 3 of its workers failed; starting no more workers there" 60 ||
	fail "the launcher did not blacklist the host whose workers failed"
: >"$TMP/go2"
wait $job
rc=$?
check "the job ends 0 (got $rc)" test "$rc" = 0
check "the third worker took the members' state (the sync is logged)" \
	grep -Eq "membership 1 has 3 workers from step [0-9]+ \(1 worker joined\)" "$out"
check "the launcher went on without the stopped worker" \
	grep -q "worker 2 (pid [0-9]*) .*the elastic job goes on without it" "$out"
check "no worker started on the blacklisted host after it" \
	test "$(grep -c "host c has a free slot" "$out")" = 3
check "the job ends with 2 workers in membership 2" \
	grep -q "done with 2 workers at epoch [0-9]*; .*membership 2$" "$out"
check "no sample trained on twice in an epoch" \
	test -z "$(grep "samples: epoch" "$out" | grep -v " 0 more than once")"

"$DTRAIN" launch -n 2 -s 0 --host-discovery-script true -- "$EX" \
	>"$TMP/refused" 2>&1
check "without an elastic job: refused" \
	grep -q "host-discovery-script: for an elastic job" "$TMP/refused"
"$DTRAIN" launch -n 2 -s 0 --min-workers 1 --launcher mpi \
	--host-discovery-script true -- "$EX" >"$TMP/refused" 2>&1
check "with another launcher: refused" \
	grep -q "works with the local and ssh launchers only" "$TMP/refused"
finish
