#!/bin/bash
# launch_hosts.sh - `dtrain launch` over a two-host cluster: two network
# namespaces on a private bridge, each with its own sshd (generated keys, a
# high port), driven by the ssh back-end and by OpenMPI's mpirun through the
# same host file. For each engine: linreg's and mnist's dist_sync results
# equal one host's (placement does not change them), a failing worker is
# named with its rank and status, Ctrl-C and workers that ignore SIGHUP
# leave nothing, an unreachable host fails within the connect timeout;
# --sync-dst-dir copies to both hosts and removes what it copied when one
# copy fails. Every case prints a TABLE line (engine, case, exit status,
# milliseconds to a stopped job). Skipped where namespaces cannot be made.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
. "$(dirname "$0")/engines_lib.bash"
need_root "a two-host cluster of network namespaces"
need_cmds mpirun rsync
ssh_setup
PRIVATE_DIR=$TMP/remote # each host's own
hosts_setup 2 || skip "the namespace hosts could not be set up"
B=$DTRAIN_BUILD
OUT=$TMP/out
ERR=$TMP/err
printf '%s:%s\n%s:%s\n' "${HOSTS[0]}" "$SSH_PORT" "${HOSTS[1]}" "$SSH_PORT" >"$TMP/hosts"
# OpenMPI's daemons and ranks talk over the bridge only.
export OMPI_MCA_oob_tcp_if_include=${NET}0/24 OMPI_MCA_btl_tcp_if_include=${NET}0/24
# OpenBLAS picks its kernel by OPENBLAS_CORETYPE where set, and the kernel
# decides the bits of every product: force one (where the CPU has it), so
# that a launcher that did not pass it on to the other hosts would change
# the results there.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx2 /proc/cpuinfo; then
	export OPENBLAS_CORETYPE=Haswell
fi
on_host() { "$DTRAIN_SSH" -p "$SSH_PORT" "$@"; }

# run_job NAME ENGINE ARGS...: the launcher with the tag, exit status in rc.
run_job() {
	local name=$1 engine=$2
	shift 2
	timeout $((300 * T_SCALE)) "$DTRAIN" launch --launcher "$engine" -H "$TMP/hosts" \
		--env DT_TEST_TAG="$TAG" "$@" >"$OUT" 2>"$ERR"
	rc=$?
	[ "$rc" = 0 ] || { echo "--- $name: rc $rc" >&2; tail -5 "$ERR" >&2; }
}

job_references

for engine in ssh mpi; do
	# Results do not depend on where the ranks run.
	start=$(now_ms)
	run_job linreg $engine -n 2 -s 2 -- "${LINREG[@]}"
	ms=$(($(now_ms) - start))
	check "$engine linreg: exits 0 (got $rc)" test "$rc" = 0
	for i in 0 1; do
		check "$engine linreg: [worker $i] $REF" has "$OUT" "[worker $i] $REF"
	done
	check "$engine linreg: nothing left" wait_gone 5
	echo "TABLE $engine linreg rc=$rc ms=$ms"
	if [ ${#MNIST[@]} -gt 0 ]; then
		start=$(now_ms)
		run_job mnist $engine -n 2 -s 2 -- "${MNIST[@]}"
		ms=$(($(now_ms) - start))
		check "$engine mnist: exits 0 (got $rc)" test "$rc" = 0
		check "$engine mnist: $REF_MNIST, as on one host" has "$OUT" "$REF_MNIST"
		check "$engine mnist: nothing left" wait_gone 5
		echo "TABLE $engine mnist rc=$rc ms=$ms"
	fi

	# A worker fails: named, and the job stopped (in about 2 s; STOP_MS).
	rm -f "$TMP/failed_at"
	run_job failure $engine -n 2 -s 2 -- "$TMP/failw"
	failed=$(($(cat "$TMP/failed_at" 2>/dev/null || echo 0) / 1000000))
	wait_gone 5
	ms=$(($(now_ms) - failed))
	check "$engine failure: exits 1 (got $rc)" test "$rc" = 1
	check "$engine failure: worker 1 exited with status 3, named" has "$ERR" \
		"dtrain launch: job failed: worker 1 exited with status 3"
	check "$engine failure: all gone ${ms} ms after the failure (< $STOP_MS)" test "$ms" -lt "$STOP_MS"
	check "$engine failure: nothing left" wait_gone 1
	echo "TABLE $engine failing-worker rc=$rc ms=$ms"

	# Ctrl-C, with plain workers and with workers that ignore SIGHUP.
	for what in plain stubborn; do
		if [ $what = plain ]; then cmd=("${LINREG[@]}" --epochs 100000); else cmd=("$TMP/stubborn"); fi
		timeout $((120 * T_SCALE)) "$DTRAIN" launch --launcher $engine -H "$TMP/hosts" -n 2 -s 2 \
			--env DT_TEST_TAG="$TAG" -- "${cmd[@]}" >"$OUT" 2>"$ERR" &
		L=$!
		wait_for 60 sh -c "grep -q 'Epoch\[1\]' '$OUT'"
		start=$(now_ms)
		kill -INT "$(pgrep -P "$L" -x dtrain | head -1)" 2>/dev/null || kill -INT "$L"
		wait "$L"
		rc=$?
		wait_gone 10
		ms=$(($(now_ms) - start))
		check "$engine Ctrl-C ($what): exits 130 (got $rc)" test "$rc" = 130
		check "$engine Ctrl-C ($what): all gone ${ms} ms after the signal (< $STOP_MS)" test "$ms" -lt "$STOP_MS"
		check "$engine Ctrl-C ($what): nothing left" wait_gone 1
		echo "TABLE $engine ctrl-c-$what rc=$rc ms=$ms"
	done

	# A silent host (an address nobody answers) fails within the
	# connect timeout, naming it: 1 s here, and the bound (9 s) stays
	# below the 10 s default, so a launcher that ignored the variable
	# fails the check; the rest of the margin is for a loaded machine
	# (it took 1.3 s quiet, and 4.3 s with a 2 s timeout at load 16).
	printf '%s:%s\n%s250:%s\n' "${HOSTS[0]}" "$SSH_PORT" "$NET" "$SSH_PORT" >"$TMP/hosts_bad"
	start=$(now_ms)
	DTRAIN_SSH_CONNECT_TIMEOUT=1 timeout $((120 * T_SCALE)) "$DTRAIN" launch --launcher $engine \
		-H "$TMP/hosts_bad" -n 2 -s 2 --env DT_TEST_TAG="$TAG" -- "${LINREG[@]}" >"$OUT" 2>"$ERR"
	rc=$?
	wait_gone 10
	ms=$(($(now_ms) - start))
	check "$engine unreachable: exits 1 (got $rc)" test "$rc" = 1
	check "$engine unreachable: over in ${ms} ms (1 s timeout, < 9 s)" test "$ms" -lt 9000
	check "$engine unreachable: the host named" grep -q "${NET}250" "$ERR"
	check "$engine unreachable: nothing left" wait_gone 1
	echo "TABLE $engine unreachable rc=$rc ms=$ms"
done

# --sync-dst-dir with real rsync to hosts with their own disks: a copy on
# each, and the job runs in it.
mkdir -p "$TMP/work"
echo payload >"$TMP/work/data.txt"
DST=$TMP/remote/job
cd "$TMP/work" || exit 1
# shellcheck disable=SC2016
run_job sync ssh -n 2 -s 0 --no-scheduler --sync-dst-dir "$DST" -- sh -c 'echo "$(hostname -I): $(pwd): $(cat data.txt)"'
check "sync: exits 0 (got $rc)" test "$rc" = 0
for i in 0 1; do
	check "sync: worker $i runs in its host's copy" grep -q "^\[worker $i\] ${HOSTS[$i]} *: $DST: payload" "$OUT"
	check "sync: ${HOSTS[$i]} has the copy, and no mark left" \
		test "$(on_host "${HOSTS[$i]}" "ls -A $DST")" = data.txt
done
check "sync: not here (the hosts' own disks)" test ! -e "$DST"

# One copy fails (the directory cannot be made on the second host): the
# copy made on the first host is removed again; a directory that was
# there before keeps its files.
on_host "${HOSTS[1]}" "mkdir -p $TMP/remote && : >$TMP/remote/sub"
run_job sync-failure ssh -n 2 -s 0 --no-scheduler --sync-dst-dir "$TMP/remote/sub/job" -- true
check "sync failure: exits 1 (got $rc)" test "$rc" = 1
check "sync failure: names the failed copy" grep -qE "^dtrain launch: sync ${HOSTS[1]} \(pid [0-9]+\) exited with status [0-9]+; stopping the job" "$ERR"
check "sync failure: the first host's new copy removed" \
	test "$(on_host "${HOSTS[0]}" "ls -d $TMP/remote/sub/job 2>&1 >/dev/null | wc -l; ls $TMP/remote/sub 2>/dev/null")" = 1
on_host "${HOSTS[0]}" "mkdir -p $TMP/remote/old && echo keep >$TMP/remote/old/mine.txt"
on_host "${HOSTS[1]}" "rm -rf $TMP/remote/old && : >$TMP/remote/old"
run_job sync-failure-old ssh -n 2 -s 0 --no-scheduler --sync-dst-dir "$TMP/remote/old" -- true
check "sync failure: exits 1 (got $rc)" test "$rc" = 1
# (Whether this host's copy got as far as data.txt before the other
# host's failure stopped it is a matter of timing; what was there stays.)
check "sync failure: a directory that was there keeps its files" \
	test "$(on_host "${HOSTS[0]}" "cat $TMP/remote/old/mine.txt")" = keep
check "sync failure: nothing left" wait_gone 5
cd / || exit 1

finish
