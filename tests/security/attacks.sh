#!/usr/bin/env bash
# attacks.sh - issue 11's attacks, and more, by a stranger without the
# job's secret against a live training job (scheduler, 2 servers, 2
# workers; Fashion-MNIST, dist_sync), in the clear and encrypted.
#
# The attacker (attack.py, a client written from docs/protocol.md and
# docs/security.md) hits the scheduler and both servers before the workers
# start, and the servers and scheduler again, over and over, while the
# workers train. For every attack: the node hangs up, sends nothing but a
# refusal, stays up; the servers' memory stays bounded; a real node of
# another job or one without authentication is refused with a clear error.
# At the end every process exits 0 and the trained parameters are
# bit-identical to those of an undisturbed run.
# (the attacked job outlives cluster_lib's 120 s per process under ASan)
PROC_TIMEOUT=${PROC_TIMEOUT:-300}
. "$(dirname "$0")/../integration/cluster_lib.bash"

SEC_DIR="$(cd "$(dirname "$0")" && pwd)"
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
	echo "skipped: Fashion-MNIST not installed at $DATA (Debian's dataset-fashion-mnist)"
	exit 0
fi
command -v python3 >/dev/null || fail "python3 is needed to play the attacker"
export DTRAIN_JOB_ID=security-$$
export DT_HANDSHAKE_TIMEOUT=2 DT_MAX_PENDING_CONNS=16
TRAIN=("$DTRAIN_BUILD/examples/mnist" --kvstore dist_sync --model lenet
	--epochs 2 --limit 8192 --seed 7 --optimizer sgd --lr 0.05
	--disp-batches 8 --data "$DATA")
CASES_ALL="hello_2_31 push_nan hello_live_worker init_4gib add_node text_forged garbage wrong_secret wrong_secret_proof other_job replay"

attack() { # PORT CASE[,CASE...] [ARG]
	PYTHONPATH=$SEC_DIR timeout $((120 * DT_TEST_TIME_SCALE)) python3 "$SEC_DIR/attack.py" "$@"
}

# attack_all CASES PORT...: the cases on every port, the ports at once (each
# node has its own pending-connection cap; most of an attack's time is a
# wait for the node's handshake timeout). Fails naming the port.
attack_all() {
	local cases=$1 p i=0
	shift
	local pids=()
	for p in "$@"; do
		attack "$p" "$cases" &
		pids+=($!)
	done
	for p in "$@"; do
		wait "${pids[$i]}" || fail "$RUN: an attack on port $p (of $cases)"
		i=$((i + 1))
	done
}

rss_kib() { # the spawned timeout(1)'s child
	local child
	child=$(pgrep -P "$1" | head -1)
	awk '/VmRSS/ {print $2}' "/proc/${child:-0}/status" 2>/dev/null || echo 0
}

training() { # W0 W1: a worker still runs
	kill -0 "$1" 2>/dev/null || kill -0 "$2" 2>/dev/null
}

alive() { # NAME PID
	kill -0 "$2" 2>/dev/null || fail "$RUN: the $1 died under attack"
}

# run_job NAME ATTACK: a whole job; with ATTACK=1 under attack. The
# parameters go to $T_DIR/NAME.params.
run_job() {
	RUN=$1
	local attacked=$2 port s0 s1 sched srv0 srv1 w0 w1 rounds=0
	port=$(free_port)
	job_env "$port" 2 2
	export PS_VERBOSE=1
	spawn "$RUN.scheduler" "$DTRAIN" scheduler
	sched=$SPAWNED
	DMLC_ROLE=server spawn "$RUN.server0" "$DTRAIN" server
	srv0=$SPAWNED
	DMLC_ROLE=server spawn "$RUN.server1" "$DTRAIN" server
	srv1=$SPAWNED
	for f in server0 server1; do
		wait_for_line "$T_DIR/$RUN.$f.log" "server listening on 127\.0\.0\.1:[0-9]+" 60 ||
			fail "$RUN: $f did not start"
	done
	s0=$(sed -n 's/.*server listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T_DIR/$RUN.server0.log" | head -1)
	s1=$(sed -n 's/.*server listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T_DIR/$RUN.server1.log" | head -1)

	if [ "$attacked" = 1 ]; then
		local before after c target
		before=$(rss_kib "$srv0")
		attack_all "${CASES_ALL// /,}" "$port" "$s0" "$s1"
		# (the flood of silent connections after the others: it fills
		# the scheduler's pending cap, which would end them early)
		attack "$s0" slowloris &
		local slow=$!
		attack "$port" flood 40 || fail "$RUN: flood"
		wait "$slow" || fail "$RUN: slowloris"
		alive scheduler "$sched"
		alive "server 0" "$srv0"
		alive "server 1" "$srv1"
		after=$(rss_kib "$srv0")
		log "$RUN: server 0 RSS ${before} KiB before the attacks, ${after} KiB after"
		[ "$after" -gt 0 ] && [ "$((after - before))" -lt 32768 ] ||
			fail "$RUN: server 0 grew from $before to $after KiB"
		# Real nodes that do not hold this job's key are refused.
		DTRAIN_SECRET=not-the-jobs-secret-at-all DMLC_ROLE=server \
			spawn "$RUN.other_secret" "$DTRAIN" server
		local other=$SPAWNED
		DTRAIN_AUTH=none DMLC_ROLE=worker spawn "$RUN.no_auth" "$DTRAIN_BUILD/examples/hello_cluster"
		local noauth=$SPAWNED
		wait_exit "$other" 60 || fail "$RUN: the node with another secret hangs"
		[ "$EXIT_STATUS" != 0 ] || fail "$RUN: a node with another secret joined"
		assert_grep "$T_DIR/$RUN.other_secret.log" "authentication failed" "node with another secret"
		wait_exit "$noauth" 60 || fail "$RUN: the node without authentication hangs"
		[ "$EXIT_STATUS" != 0 ] || fail "$RUN: a node without authentication joined"
		log "$RUN: nodes of another secret and without authentication refused"
	fi

	DMLC_ROLE=worker DMLC_WORKER_ID=0 spawn "$RUN.worker0" "${TRAIN[@]}" --save "$T_DIR/$RUN.params"
	w0=$SPAWNED
	DMLC_ROLE=worker DMLC_WORKER_ID=1 spawn "$RUN.worker1" "${TRAIN[@]}"
	w1=$SPAWNED
	if [ "$attacked" = 1 ]; then
		# Attacks while the workers train, until they are done.
		# (As the job ends the nodes go, a moment before the workers'
		# processes do: an attack that finds nobody listening (status
		# 3) is no failure; a node that crashed shows in the exit
		# statuses checked below.)
		local target rc
		local during=push_nan,hello_live_worker,text_forged,init_4gib,add_node
		while training "$w0" "$w1"; do
			for target in "$s0" "$s1" "$port"; do
				training "$w0" "$w1" || break 2
				attack "$target" "$during"
				rc=$?
				[ "$rc" = 0 ] || [ "$rc" = 3 ] ||
					fail "$RUN: $during on port $target while training (status $rc)"
			done
			rounds=$((rounds + 1))
		done
		log "$RUN: $rounds rounds of attacks while the workers trained"
		[ "$rounds" -ge 1 ] || fail "$RUN: the workers were done before a round of attacks"
	fi
	expect_exit "$w0" 240 0 "$RUN worker 0"
	expect_exit "$w1" 240 0 "$RUN worker 1"
	expect_exit "$srv0" 60 0 "$RUN server 0"
	expect_exit "$srv1" 60 0 "$RUN server 1"
	expect_exit "$sched" 60 0 "$RUN scheduler"
	if [ "$attacked" = 1 ]; then
		grep -q "FAKE LINE" "$T_DIR/$RUN".*.log && fail "$RUN: a stranger's text reached a log"
		assert_grep "$T_DIR/$RUN.server0.log" "refusing a connection from 127\.0\.0\.1" "$RUN server 0"
		grep -Eq "joined: .*50001" "$T_DIR/$RUN.scheduler.log" && fail "$RUN: the stranger's ADD_NODE joined"
	fi
	[ -s "$T_DIR/$RUN.params" ] || fail "$RUN: no parameters saved"
}

same_params() { # NAME
	local out
	out=$("$DTRAIN" params diff "$T_DIR/reference.params" "$T_DIR/$1.params") ||
		fail "$1: parameters differ from the undisturbed run: $out"
	echo "$out" | grep -q "^identical$" ||
		fail "$1: parameters not bit-identical to the undisturbed run: $out"
	log "$1: parameters bit-identical to the undisturbed run"
}

unset DTRAIN_ENCRYPT
run_job reference 0
run_job attacked 1
same_params attacked
export DTRAIN_ENCRYPT=1
run_job encrypted 1
same_params encrypted
assert_groups_gone
log "ok"
