#!/usr/bin/env bash
# elastic_grow.sh - workers join a running elastic job (docs/elastic.md,
# "Growing"):
#   - 2 workers train (DTRAIN_ELASTIC_MAX=4); a third is started by hand
#     with the job's environment and taken in at the members' next commit
#     (membership 1, 3 workers), then a fourth (membership 2); the newcomers
#     get the committed state from rank 0, every epoch's samples are
#     trained on once, and the job ends 0 with 4 workers;
#   - a fifth is refused by name: DTRAIN_ELASTIC_MAX=4 is reached;
#   - the replay line the run logged ("step S: +1; step T: +1"), given as
#     DTRAIN_ELASTIC_SCHEDULE to a new job whose four workers all start at
#     once, ends with the same weights bit for bit; a job without the
#     change ends with others;
#   - a worker killed right after it was admitted is forgotten, and the
#     job it asked to join ends 0 with its workers (also with 2 servers,
#     dist_sync).
. "$(dirname "$0")/cluster_lib.bash"
EX=$DTRAIN_BUILD/examples/elastic
ARGS=(--samples 512 --steps 160 --commit-every 10 --count-samples)

# start NAME [ARGS...]: a node of the job (DMLC_ROLE set by the caller).
start() {
	local name=$1
	shift
	spawn "$name" "$EX" "${ARGS[@]}" --save "$T_DIR/$TAG.bin" "$@"
}

# samples_ok LOG: every epoch's check line says "0 more than once".
samples_ok() {
	grep -q "samples: epoch 0:" "$1" &&
		! grep "samples: epoch" "$1" | grep -vq " 0 more than once"
}

# The grown run: held at steps 30 and 90 until the test lets it go, once
# the worker started for it waits to join, and at 120 while a fifth asks.
TAG=grow
job_env "$(free_port)" 0 2
export DTRAIN_ELASTIC=1 DTRAIN_ELASTIC_MAX=4 DTRAIN_STATS=1
unset DTRAIN_ELASTIC_SCHEDULE
HOLD=(--hold-at 30 --hold-file "$T_DIR/go1" --hold-at 90 --hold-file "$T_DIR/go2"
	--hold-at 120 --hold-file "$T_DIR/go3")
PS_VERBOSE=1 DMLC_ROLE=scheduler start sched "${HOLD[@]}"
pids=("$SPAWNED")
for i in 0 1; do
	DMLC_ROLE=worker start "worker$i" "${HOLD[@]}"
	pids+=("$SPAWNED")
done
# (the job runs: the scheduler says so, verbosely)
wait_for_line "$T_DIR/sched.log" "all 3 nodes are ready" 60 ||
	fail "the job of 2 workers did not start"
DMLC_ROLE=worker start joiner2 "${HOLD[@]}"
pids+=("$SPAWNED")
wait_for_line "$T_DIR/sched.log" "worker 2 is ready to join" 60 ||
	fail "the third worker did not get to wait for the members' commit"
: >"$T_DIR/go1"
wait_for_line "$T_DIR/sched.log" "membership 1 has 3 workers: 1 joined" 60 ||
	fail "the members did not take the third worker in"
DMLC_ROLE=worker start joiner3 "${HOLD[@]}"
pids+=("$SPAWNED")
wait_for_line "$T_DIR/sched.log" "worker 3 is ready to join" 60 ||
	fail "the fourth worker did not get to wait for the members' commit"
: >"$T_DIR/go2"
wait_for_line "$T_DIR/sched.log" "membership 2 has 4 workers: 1 joined" 60 ||
	fail "the members did not take the fourth worker in"
# Above the maximum: refused by name, the job goes on.
DMLC_ROLE=worker start joiner4
expect_exit "$SPAWNED" 60 nonzero "the fifth worker"
assert_grep "$T_DIR/joiner4.log" \
	"asks to join the running elastic job, which has 4 workers: DTRAIN_ELASTIC_MAX=4 is reached" \
	"the fifth worker"
: >"$T_DIR/go3"
for i in "${!pids[@]}"; do
	expect_exit "${pids[$i]}" 120 0 "grown job: node $i"
done
out=$(cat "$T_DIR"/worker*.log)
grep -q "done with 4 workers at epoch [0-9]*; .*membership 2$" <<<"$out" ||
	fail "the grown job did not end with 4 workers in membership 2"
for i in 0 1; do
	samples_ok "$T_DIR/worker$i.log" && rank0=$T_DIR/worker$i.log
done
[ -n "${rank0:-}" ] || fail "an epoch's samples were not trained on once"
for j in 2 3; do
	assert_grep "$T_DIR/joiner$j.log" "rank $j of [34] from step [0-9]+" \
		"joiner $j took the members' state"
done
sched=$(grep -ho 'DTRAIN_ELASTIC_SCHEDULE="[^"]*"' "$T_DIR"/worker*.log |
	tail -n 1 | sed 's/^DTRAIN_ELASTIC_SCHEDULE="//; s/"$//')
grep -Eq '^step [0-9]+: \+1; step [0-9]+: \+1$' <<<"$sched" ||
	fail "the grow's replay line is '$sched'"
# (the scheduler's --stats report has the workers that joined: rows for
# every node id the job may give)
for j in 2 3; do
	grep -Eq "^(\[scheduler\] )?worker $j +[0-9]+ " "$T_DIR/sched.log" ||
		fail "the scheduler's stats have no row for worker $j, which joined"
done
log "grown from 2 to 4 workers, samples once, replay '$sched'"

# run TAG: a job of 2 workers and 2 more started with it (joining once it
# runs), DTRAIN_ELASTIC_SCHEDULE as exported.
run() {
	local i p=()
	TAG=$1
	job_env "$(free_port)" 0 2
	DMLC_ROLE=scheduler start "sched.$TAG"
	p+=("$SPAWNED")
	for i in 0 1 2 3; do
		DMLC_ROLE=worker start "worker$i.$TAG"
		p+=("$SPAWNED")
	done
	for i in "${!p[@]}"; do
		expect_exit "${p[$i]}" 120 0 "$TAG: node $i"
	done
}
export DTRAIN_ELASTIC_SCHEDULE="$sched"
run replay
cmp -s "$T_DIR/grow.bin" "$T_DIR/replay.bin" ||
	fail "the replay ('$sched') is not bit-identical to the grown run"
cat "$T_DIR"/worker*.replay.log | grep -q "done with 4 workers .*membership 2$" ||
	fail "the replay did not end with 4 workers"
log "the replay is bit-identical"
unset DTRAIN_ELASTIC_SCHEDULE
export DTRAIN_ELASTIC_MAX=2
job_env "$(free_port)" 0 2
TAG=fixed
DMLC_ROLE=scheduler start sched.fixed
p=("$SPAWNED")
for i in 0 1; do
	DMLC_ROLE=worker start "worker$i.fixed"
	p+=("$SPAWNED")
done
for i in "${!p[@]}"; do
	expect_exit "${p[$i]}" 120 0 "fixed: node $i"
done
! cmp -s "$T_DIR/grow.bin" "$T_DIR/fixed.bin" ||
	fail "a job that never grew ended with the grown job's weights"

# A worker that joins and dies at once: forgotten, the job goes on and
# ends 0 with its 2 workers; without servers, and with 2 (dist_sync).
# dier TAG SERVERS [EXAMPLE-OPTS...]
dier() {
	local tag=$1 nserv=$2 i
	shift 2
	TAG=$tag
	job_env "$(free_port)" "$nserv" 2
	export DTRAIN_ELASTIC_MAX=3
	# (held before their first commit, so that nothing takes it in first)
	HOLD=(--hold-at 0 --hold-file "$T_DIR/go.$tag")
	PS_VERBOSE=1 DMLC_ROLE=scheduler start "sched.$tag" "${HOLD[@]}" "$@"
	p=("$SPAWNED")
	for ((i = 0; i < nserv; i++)); do
		DMLC_ROLE=server start "server$i.$tag" "$@"
		p+=("$SPAWNED")
	done
	for i in 0 1; do
		DMLC_ROLE=worker start "worker$i.$tag" "${HOLD[@]}" "$@"
		p+=("$SPAWNED")
	done
	wait_for_line "$T_DIR/sched.$tag.log" "all $((3 + nserv)) nodes are ready" 60 ||
		fail "$tag: the job did not start"
	DMLC_ROLE=worker start "joiner.$tag" "$@"
	local j=$SPAWNED
	wait_for_line "$T_DIR/sched.$tag.log" "joins the running elastic job as worker 2" 60 ||
		fail "$tag: the joiner was not admitted"
	kill -KILL -- "-$j"
	expect_exit "$j" 60 137 "$tag: the joiner killed"
	wait_for_line "$T_DIR/sched.$tag.log" "worker 2 .* went before the members took it in" 60 ||
		fail "$tag: the scheduler did not forget the joiner"
	: >"$T_DIR/go.$tag"
	for i in "${!p[@]}"; do
		expect_exit "${p[$i]}" 120 0 "$tag: node $i"
	done
	cat "$T_DIR"/worker*."$tag".log | grep -q "done with 2 workers .*membership 0$" ||
		fail "$tag: the job did not end with its 2 workers"
	log "$tag: a joiner killed at once is forgotten; the job ends 0 with 2 workers"
}
dier dier 0
dier dier_ps 2 --kvstore dist_sync
assert_groups_gone
log "ok"
