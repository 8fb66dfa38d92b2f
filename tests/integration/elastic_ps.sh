#!/bin/bash
# elastic_ps.sh - an elastic job with parameter servers (docs/elastic.md,
# "With parameter servers"): examples/elastic --kvstore dist_sync, a
# scheduler, 2 servers and 4 workers started by hand with DTRAIN_ELASTIC=1
# and DTRAIN_ELASTIC_MIN=3 (dtrain launch takes --min-workers without
# servers only):
#   - launch rank 1 leaves at commit step 40 by the schedule, twice: both
#     runs end 0 with 3 workers and the same weights, bit for bit, and no
#     sample of an epoch is trained on twice;
#   - launch rank 1 kills itself (SIGKILL) before step 45: the survivors'
#     round is dropped and answered with the named membership error, they
#     go back to the commit of step 40, and the run logs the schedule that
#     replays it; the replay ends bit-identical to the killed run;
#   - dist_async: a worker killed, the job finishes;
#   - examples/mnist --elastic --kvstore dist_sync (an MLP on
#     Fashion-MNIST, when installed): a scheduled leave twice, and a worker
#     killed from outside once the job has committed step 10, with its
#     replay: each pair of parameter files bit-identical.
. "$(dirname "$0")/cluster_lib.bash"
EX=$DTRAIN_BUILD/examples/elastic
ARGS=(--samples 2048 --steps 200 --commit-every 10 --count-samples)
ROLES=(scheduler server server worker worker worker worker)

# run NAME KVSTORE [EXAMPLE-OPTS...]: the job's 7 processes, logs in
# $T_DIR/NAME.<i>.<role>.log, weights (rank 0's) in $T_DIR/NAME.bin.
# STATUS[i] is each process's exit status. DTRAIN_ELASTIC_SCHEDULE passes
# through from the caller's environment.
# RUN_BG=1: return once started (PIDS), for run_wait NAME.
run() {
	local name=$1 kvs=$2 i
	shift 2
	job_env "$(free_port)" 2 4
	PIDS=()
	for i in "${!ROLES[@]}"; do
		DMLC_ROLE=${ROLES[$i]} DTRAIN_ELASTIC=1 DTRAIN_ELASTIC_MIN=3 \
			spawn "$name.$i.${ROLES[$i]}" "$EX" "${ARGS[@]}" \
			--kvstore "$kvs" --save "$T_DIR/$name.bin" "$@"
		PIDS+=("$SPAWNED")
	done
	[ -n "${RUN_BG:-}" ] && return
	run_wait "$name"
}

run_wait() {
	local i
	STATUS=()
	for i in "${!PIDS[@]}"; do
		wait_exit "${PIDS[$i]}" 120 || fail "$1: process $i did not end"
		STATUS[$i]=$EXIT_STATUS
	done
}

# wait_worker_line NAME PATTERN SECONDS: poll the workers' logs until one
# has a line matching PATTERN (SECONDS scaled).
wait_worker_line() {
	local deadline
	t_now
	deadline=$((T_NOW + $3 * DT_TEST_TIME_SCALE * 1000000000))
	until grep -Eqs -- "$2" "$T_DIR/$1".[3-6].worker.log; do
		t_now
		[ "$T_NOW" -ge "$deadline" ] && return 1
		t_pause 0.05
	done
}

# all_ok NAME [DEAD]: every process exited 0, but DEAD workers (a count)
# that did not.
all_ok() {
	local i bad=0
	for i in "${!STATUS[@]}"; do
		[ "${STATUS[$i]}" = 0 ] && continue
		[ "${ROLES[$i]}" = worker ] && bad=$((bad + 1)) && continue
		fail "$1: ${ROLES[$i]} #$i exited ${STATUS[$i]}"
	done
	[ "$bad" = "${2:-0}" ] ||
		fail "$1: $bad workers failed, expected ${2:-0}"
}

# rank0 NAME: the log of the worker that ended as rank 0 (the one that
# prints the job's last line).
rank0() {
	grep -l "done with [0-9]* workers" "$T_DIR/$1".*.worker.log | head -n 1
}

# samples_ok NAME: rank 0 checked every epoch and found no sample trained
# on twice.
samples_ok() {
	local f
	f=$(rank0 "$1")
	[ -n "$f" ] || fail "$1: no worker ended as rank 0"
	grep -q "samples: epoch 0:" "$f" ||
		fail "$1: no epoch was checked"
	! grep "samples: epoch" "$f" | grep -vq " 0 more than once" ||
		fail "$1: a sample was trained on twice in an epoch"
}

# replay_of NAME: the last schedule rank 0 logged.
replay_of() {
	grep -ho 'DTRAIN_ELASTIC_SCHEDULE="[^"]*"' "$T_DIR/$1".*.log |
		tail -n 1 | sed 's/^DTRAIN_ELASTIC_SCHEDULE="//; s/"$//'
}

# Scheduled, twice.
DTRAIN_ELASTIC_SCHEDULE="step 40: -worker 1" run sched dist_sync
all_ok sched
cat "$T_DIR"/sched.*.worker.log >"$T_DIR/sched.workers"
assert_grep "$T_DIR/sched.workers" "rank 1 left at step 40" "sched"
assert_grep "$T_DIR/sched.workers" \
	"done with 3 workers at epoch [0-9]+; .*membership 1$" "sched"
samples_ok sched
log "a scheduled leave at step 40: ok"
DTRAIN_ELASTIC_SCHEDULE="step 40: -worker 1" run sched2 dist_sync
all_ok sched2
cmp "$T_DIR/sched.bin" "$T_DIR/sched2.bin" ||
	fail "two runs of one schedule differ"
log "its second run: bit-identical"

# A worker killed between two commits, and the replay of its log.
run kill dist_sync --die-at 45 --die-rank 1
all_ok kill 1
cat "$T_DIR"/kill.*.worker.log >"$T_DIR/kill.survivors"
assert_grep "$T_DIR/kill.survivors" \
	"done with 3 workers at epoch [0-9]+; .*membership 1$" "kill"
assert_grep "$T_DIR/kill.survivors" \
	"push(pull)? of key [01]: its round was dropped: membership 0 -> 1 \(worker 1 was lost\)|membership 0 is over" \
	"kill: the survivors' pushes fail naming the change"
assert_grep "$T_DIR/kill.survivors" "rank [0-2] of 3 from step 40$" \
	"kill: the survivors go back to the commit of step 40"
samples_ok kill
sched=$(replay_of kill)
[ "$sched" = "step 40: -worker 1" ] ||
	fail "kill: the logged replay is '$sched', not 'step 40: -worker 1'"
log "a worker killed before step 45: ok, replay '$sched'"
DTRAIN_ELASTIC_SCHEDULE=$sched run replay dist_sync
all_ok replay
cmp "$T_DIR/kill.bin" "$T_DIR/replay.bin" ||
	fail "the replay differs from the killed run"
cmp "$T_DIR/kill.bin" "$T_DIR/sched.bin" ||
	fail "the replay differs from the scheduled run"
log "its replay: bit-identical"

# dist_async: a worker killed, the others finish.
run async dist_async --die-at 45 --die-rank 2
all_ok async 1
cat "$T_DIR"/async.*.worker.log >"$T_DIR/async.workers"
assert_grep "$T_DIR/async.workers" \
	"done with 3 workers at epoch [0-9]+; .*membership 1$" "async"
log "dist_async with a worker killed: ok"

DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] &&
	[ ! -e "$DATA/train-images-idx3-ubyte" ]; then
	log "mnist skipped: Fashion-MNIST not installed at $DATA"
	assert_groups_gone
	log "ok"
	exit 0
fi
EX=$DTRAIN_BUILD/examples/mnist
ARGS=(--optimizer sgd --lr 0.05 --elastic --model mlp --limit 3000
	--epochs 3 --batch-size 32 --commit-every 5 --data "$DATA")
DTRAIN_ELASTIC_SCHEDULE="step 10: -worker 1" run msched dist_sync
all_ok msched
DTRAIN_ELASTIC_SCHEDULE="step 10: -worker 1" run msched2 dist_sync
all_ok msched2
cmp "$T_DIR/msched.bin" "$T_DIR/msched2.bin" ||
	fail "mnist: two runs of one schedule differ"
log "mnist: a scheduled leave, twice: bit-identical"

# A worker killed from outside: the first worker that is not rank 0 (rank
# 0 prints the commits), once the job has committed step 10.
RUN_BG=1 run mkill dist_sync
wait_worker_line mkill "committed step 10$" 120 ||
	fail "mnist: the job did not commit step 10"
victim=
for i in 3 4 5 6; do
	grep -q "committed step" "$T_DIR/mkill.$i.worker.log" && continue
	victim=${PIDS[$i]}
	break
done
[ -n "$victim" ] || fail "mnist: no worker to kill"
kill -9 -- "-$victim" # (its process group: timeout and the worker)
run_wait mkill
all_ok mkill 1
sched=$(replay_of mkill)
grep -Eq '^step [0-9]+: -worker [0-3]$' <<<"$sched" ||
	fail "mnist: the logged replay is '$sched'"
DTRAIN_ELASTIC_SCHEDULE=$sched run mreplay dist_sync
all_ok mreplay
cmp "$T_DIR/mkill.bin" "$T_DIR/mreplay.bin" ||
	fail "mnist: the replay ('$sched') differs from the killed run"
log "mnist: a worker killed, its replay ('$sched'): bit-identical"
assert_groups_gone
log "ok"
