#!/usr/bin/env bash
# recovery.sh - a server killed with SIGKILL in the middle of training is
# restarted (`dtrain launch --restart 1`, docs/fault-tolerance.md), loads
# its last checkpoint, rejoins under its rank, and the workers send again
# what the checkpoint does not hold; the job ends as if nothing happened:
#   - mnist (lenet) and linreg in dist_sync: parameters bit-identical to
#     the undisturbed run, killed at a random step (after a random progress
#     line), and linreg killed before any checkpoint (the new server starts
#     empty: everything is sent again; and again with push then pull
#     instead of push-pull); mnist again with 2bit pushes and fp16 pulls;
#   - the same with the processes started by hand and the server started
#     again by hand (as an outside engine would: Kubernetes, Slurm), the
#     new one first, held by the scheduler until the old one's loss;
#   - kv_check async (dist_async): every push applied exactly once;
#   - (batched calls and mnist: recovery_batched.sh);
#   - a worker killed instead (linreg, mnist, kv_check async, and by hand):
#     the new one resumes at the step its predecessor reached (dt_kv_resume),
#     with the same results;
#   - push copies capped (DTRAIN_REPLAY_MAX=0) and a server killed before
#     any checkpoint: the job ends naming the cap;
#   - a second kill with --restart 1 (a server, a worker) and the scheduler
#     killed: the job ends, naming the process, with nothing left running.
. "$(dirname "$0")/recovery_lib.bash"
# Each process's own limit (a guard against a hang, far above a run's
# time), scaled like the suite's: a TSan build at a load of 20 took over
# 100 s for the 200 epochs below.
T100=$((100 * ${DT_TEST_TIME_SCALE:-1}))
T200=$((200 * ${DT_TEST_TIME_SCALE:-1}))

# linreg, dist_sync: killed at a random epoch, and before any checkpoint
LIN=("$B/examples/linreg" --kvstore dist_sync --batch-size 100 --epochs 40)
last() { grep -o 'w=[^ ]* b=[^ ]*' "$tmp/$1.log" | tail -1; }
timeout $T200 "$B/dtrain" launch -n 2 -s 2 -- "${LIN[@]}" >"$tmp/lin_ref.log" 2>&1 || fail "linreg reference run"
e=$((3 + RANDOM % 15))
killed lin server 1 "Epoch\[$e\] Train" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 50 -- "${LIN[@]}"
must_pass lin
grep -q "restored checkpoint #" "$tmp/lin.log" || fail "linreg: no checkpoint restored"
[ "$(last lin)" = "$(last lin_ref)" ] || fail "linreg: '$(last lin)' after the kill, '$(last lin_ref)' without"
echo "linreg, server 1 killed after epoch $e: $(last lin), identical"
rm -rf "$tmp/ck"
killed lin0 server 0 "Epoch\[2\] Train" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 1000000 -- "${LIN[@]}"
must_pass lin0
grep -q "no checkpoint in $tmp/ck yet: starting empty" "$tmp/lin0.log" || fail "linreg: the new server did not start empty"
[ "$(last lin0)" = "$(last lin_ref)" ] || fail "linreg from nothing: '$(last lin0)', '$(last lin_ref)' without"
echo "linreg, server 0 killed before any checkpoint: everything sent again, identical"
rm -rf "$tmp/ck"
# MXNet's push then pull (the pulls issued with the pushes): the replay to
# a new server that starts empty sends every push again back to back, then
# the pulls that were in flight, each of which must see the round of the
# last push before it, not the first.
killed lin_pp server 0 "Epoch\[2\] Train" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 1000000 -- \
	"${LIN[@]}" --push-then-pull
must_pass lin_pp
[ "$(last lin_pp)" = "$(last lin_ref)" ] ||
	fail "linreg, push then pull, server 0 killed: '$(last lin_pp)', '$(last lin_ref)' without"
echo "linreg with push then pull, server 0 killed before any checkpoint: identical"
rm -rf "$tmp/ck"
# Copies capped (DTRAIN_REPLAY_MAX=0: no push is kept) and no checkpoint:
# the restarted server cannot be given what it lost; the job ends, named.
# (More epochs: without copies to keep the job runs 40 in a second, and
# could end before the kill; it ends at the kill's restart anyway.)
killed lin_cap server 0 "Epoch\[2\] Train" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 1000000 \
	--env DTRAIN_REPLAY_MAX=0 -- "${LIN[@]}" --epochs 4000
[ "$(cat "$tmp/lin_cap.rc")" != 0 ] || fail "linreg, copies capped: the job did not fail"
grep -q "pushes past it are not kept" "$tmp/lin_cap.log" || fail "linreg, copies capped: no note of the cap"
grep -q "its checkpoint does not hold push #[0-9]* of key [0-9]* from this worker.*DTRAIN_REPLAY_MAX (0 MiB)" "$tmp/lin_cap.log" ||
	{ tail -15 "$tmp/lin_cap.log"; fail "linreg, copies capped: the reason is not named"; }
left && fail "linreg, copies capped: processes left behind: $(ours)"
echo "linreg, copies capped at 0 and server 0 killed: the job ends naming DTRAIN_REPLAY_MAX, nothing left"
rm -rf "$tmp/ck"
# A worker killed at a random epoch: the new one resumes where it stopped.
e=$((3 + RANDOM % 15)) wr=$((RANDOM % 2))
killed lin_w worker $wr "Epoch\[$e\] Train" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 50 -- "${LIN[@]}"
must_pass lin_w
grep -q "\[worker $wr\] linreg: worker $wr took a lost worker's place; resuming at step [1-9]" "$tmp/lin_w.log" ||
	fail "linreg: the new worker did not resume"
[ "$(grep -c 'w=[^ ]* b=' "$tmp/lin_w.log")" = 2 ] || fail "linreg: not every worker ended"
[ "$(grep -o 'w=[^ ]* b=[^ ]*' "$tmp/lin_w.log" | sort -u)" = "$(last lin_ref)" ] ||
	fail "linreg: '$(grep -o 'w=[^ ]* b=[^ ]*' "$tmp/lin_w.log" | sort -u | tr '\n' ' ')' after worker $wr's kill, '$(last lin_ref)' without"
echo "linreg, worker $wr killed after epoch $e: $(grep -o 'resuming at step [0-9]*' "$tmp/lin_w.log"), $(last lin_w), identical"
rm -rf "$tmp/ck"

# No launcher: the processes started by hand, as Kubernetes' restart
# policy or a Slurm requeue would start them, the server started again
# with the same variables after its SIGKILL (its place token included:
# each process has one of its own, DTRAIN_NODE_TOKEN).
tok() { od -An -tx1 -N16 /dev/urandom | tr -d ' \n'; }
# (200 epochs: the new server must ask for its place while the job still
# runs, and 40 epochs take about a second; a loaded machine could end the
# job before the new process had started)
LIN_H=("${LIN[@]}" --epochs 200)
timeout $T200 "$B/dtrain" launch -n 2 -s 1 -- "${LIN_H[@]}" >"$tmp/lin_ref_h.log" 2>&1 || fail "linreg reference run, 200 epochs"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(
	exec 2>/dev/null # (bash's note of the kill)
	export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 \
		DTRAIN_AUTH=none DTRAIN_RECOVER=1 DTRAIN_CHECKPOINT_DIR="$tmp/ck" DTRAIN_CHECKPOINT_EVERY=50 \
		DT_RECOVERY_TEST="$tmp"
	DMLC_ROLE=scheduler timeout $T100 "$B/dtrain" scheduler >"$tmp/h_sched.log" 2>&1 &
	s0=$(tok)
	DMLC_ROLE=server DMLC_SERVER_ID=0 DTRAIN_NODE_TOKEN=$s0 "$B/dtrain" server >"$tmp/h_srv1.log" 2>&1 &
	for w in 0 1; do
		DMLC_ROLE=worker DMLC_WORKER_ID=$w DTRAIN_NODE_TOKEN=$(tok) timeout $T100 "${LIN_H[@]}" >"$tmp/h_w$w.log" 2>&1 &
	done
	wait_for "$tmp/h_w0.log" "Epoch\[3\] Train" || fail "by hand: no progress"
	# (its first checkpoint on disk: a loaded machine may write it late,
	# and a server killed before it rightly starts empty; a new one is
	# renamed in after the last is renamed to .prev, so for a moment only
	# .prev is there: the check is made once)
	ck=0
	for _ in $(seq $(($(kill_wait) * 50))); do
		if [ -f "$tmp/ck/server-0.ckpt" ] || [ -f "$tmp/ck/server-0.ckpt.prev" ]; then
			ck=1
			break
		fi
		sleep 0.02
	done
	[ $ck = 1 ] || fail "by hand: server 0 wrote no checkpoint"
	# The new server asks first (as an engine may, before the old one's
	# end is noticed): it is held until the loss is, then takes the place.
	old=$(pid_of server 0)
	DMLC_ROLE=server DMLC_SERVER_ID=0 DTRAIN_NODE_TOKEN=$s0 timeout $T100 "$B/dtrain" server >"$tmp/h_srv2.log" 2>&1 &
	wait_for "$tmp/h_sched.log" "server 0, which is not lost yet: waiting" ||
		{ tail -n 8 "$tmp/h_sched.log" "$tmp/h_srv2.log"; kill -9 "$old"; fail "by hand: the new server was not held"; }
	kill -9 "$old"
	wait
) || exit 1 # (a failure in it said FAIL already; the EXIT trap ends its processes)
for w in 0 1; do
	[ "$(grep -o 'w=[^ ]* b=[^ ]*' "$tmp/h_w$w.log" | tail -1)" = "$(last lin_ref_h)" ] ||
		{ tail -n 5 "$tmp/h_w$w.log" "$tmp/h_srv2.log" "$tmp/h_sched.log"; fail "by hand: worker $w ended with another result"; }
done
grep -q "restored checkpoint #" "$tmp/h_srv2.log" || fail "by hand: the new server restored nothing"
grep -q "server 0 is back" "$tmp/h_sched.log" || fail "by hand: the held server did not take the place"
echo "linreg, processes started by hand, a new server 0 started, held, then the old one killed: identical"
rm -rf "$tmp/ck"
# The same with worker 1 killed and started again by hand.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(
	exec 2>/dev/null
	export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 \
		DTRAIN_AUTH=none DTRAIN_RECOVER=1 DT_RECOVERY_TEST="$tmp"
	DMLC_ROLE=scheduler timeout $T100 "$B/dtrain" scheduler >"$tmp/hw_sched.log" 2>&1 &
	DMLC_ROLE=server DMLC_SERVER_ID=0 DTRAIN_NODE_TOKEN=$(tok) timeout $T100 "$B/dtrain" server >"$tmp/hw_srv.log" 2>&1 &
	w1=$(tok)
	DMLC_ROLE=worker DMLC_WORKER_ID=0 DTRAIN_NODE_TOKEN=$(tok) timeout $T100 "${LIN[@]}" >"$tmp/hw_w0.log" 2>&1 &
	# (worker 1 without timeout(1), so that its pid is at hand: 40 epochs
	# take well under a second on an idle machine, and a kill that first
	# searched /proc for the worker could come after the job had ended;
	# the EXIT trap still kills it)
	DMLC_ROLE=worker DMLC_WORKER_ID=1 DTRAIN_NODE_TOKEN=$w1 "${LIN[@]}" >"$tmp/hw_w1.log" 2>&1 &
	w1pid=$!
	for i in $(seq 3000); do
		grep -q "Epoch\[3\] Train" "$tmp/hw_w0.log" 2>/dev/null && break
		sleep 0.01
	done
	kill -9 "$w1pid" || fail "by hand, worker: worker 1 had ended before it could be killed (the run is too short for this machine)"
	DMLC_ROLE=worker DMLC_WORKER_ID=1 DTRAIN_NODE_TOKEN=$w1 timeout $T100 "${LIN[@]}" >"$tmp/hw_w1b.log" 2>&1 &
	wait
) || exit 1
for f in hw_w0 hw_w1b; do
	[ "$(grep -o 'w=[^ ]* b=[^ ]*' "$tmp/$f.log" | tail -1)" = "$(last lin_ref)" ] ||
		{ tail -n 5 "$tmp/$f.log" "$tmp/hw_srv.log" "$tmp/hw_sched.log"; fail "by hand: $f ended with another result"; }
done
grep -q "resuming at step [1-9]" "$tmp/hw_w1b.log" || fail "by hand: the new worker 1 did not resume"
echo "linreg, processes started by hand, worker 1 killed and started again: identical"

# dist_async: every push applied once (kv_check counts them). A checkpoint
# that is due while the writer is still busy replaces the one not yet
# begun, so its number may be skipped: wait for the 3rd or any later one,
# and for worker 0 to hold halfway through its pushes (KV_CHECK_HOLD): on
# a busy machine the checkpoint's line can come once every push is made,
# and a worker that is done sends nothing again.
AT_LEAST_3='\([3-9]\|[1-9][0-9][0-9]*\)'
AT_LEAST_2='\([2-9]\|[1-9][0-9][0-9]*\)'
KV_CHECK_HOLD=$tmp/go MXNET_KVSTORE_BIGARRAY_BOUND=1000 KV_CHECK_PUSHES=40000 \
	killed_held async server 0 "\[server 0\] checkpoint #$AT_LEAST_3:" "$tmp/go" \
	"$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 2000 --env PS_VERBOSE=1 -- "$B/tests/progs/kv_check" async
must_pass async
[ "$(grep -c "kv_check async: worker passed" "$tmp/async.log")" = 2 ] || { tail "$tmp/async.log"; fail "dist_async: a push lost or applied twice"; }
grep -q "\[server 0\] every worker has sent again what server 0 lacked" "$tmp/async.log" ||
	fail "dist_async: the new server did not hear the end of every replay"
echo "kv_check async (dist_async), server 0 killed: every push applied exactly once"
rm -rf "$tmp/ck"
MXNET_KVSTORE_BIGARRAY_BOUND=1000 KV_CHECK_PUSHES=40000 \
	killed async_w worker 1 "\[server 0\] checkpoint #$AT_LEAST_2:" \
	"$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 2000 --env PS_VERBOSE=1 -- "$B/tests/progs/kv_check" async
must_pass async_w
[ "$(grep -c "kv_check async: worker passed" "$tmp/async_w.log")" = 2 ] || { tail "$tmp/async_w.log"; fail "dist_async, worker killed: a push lost or applied twice"; }
grep -q "kv_check async: resuming at push [1-9]" "$tmp/async_w.log" || fail "dist_async: the new worker did not resume"
echo "kv_check async (dist_async), worker 1 killed: $(grep -o 'resuming at push [0-9]*' "$tmp/async_w.log"); every push applied exactly once"
rm -rf "$tmp/ck"

# What is not recovered ends the job, naming the process.
LONG=("$B/examples/linreg" --kvstore dist_sync --batch-size 100 --epochs 400)
timeout $T200 "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 50 -- "${LONG[@]}" >"$tmp/twice.log" 2>&1 &
job=$!
wait_for "$tmp/twice.log" "Epoch\[2\] Train" || fail "twice: no progress"
kill -9 "$(pid_of server 0)"
wait_for "$tmp/twice.log" "is back: pid" || fail "twice: no restart"
wait_for "$tmp/twice.log" "sending [0-9]* requests again" || fail "twice: no replay"
kill -9 "$(pid_of server 0)"
wait $job && fail "a second kill with --restart 1 did not end the job"
grep -q "dtrain launch: server 0 (pid [0-9]*) killed by signal 9 (Killed); stopping the job" "$tmp/twice.log" ||
	{ tail "$tmp/twice.log"; fail "twice: the second kill was not named"; }
echo "server 0 killed twice with --restart 1: the job ends naming it"
rm -rf "$tmp/ck"
timeout $T200 "$B/dtrain" launch -n 2 -s 2 "${R[@]}" --checkpoint-every 50 -- "${LONG[@]}" >"$tmp/twice_w.log" 2>&1 &
job=$!
wait_for "$tmp/twice_w.log" "Epoch\[2\] Train" || fail "twice, worker: no progress"
kill -9 "$(pid_of worker 1)"
wait_for "$tmp/twice_w.log" "resuming at step" || fail "twice, worker: no restart"
kill -9 "$(pid_of worker 1)"
wait $job && fail "a worker killed twice with --restart 1 did not end the job"
grep -q "dtrain launch: worker 1 (pid [0-9]*) killed by signal 9 (Killed); stopping the job" "$tmp/twice_w.log" ||
	{ tail "$tmp/twice_w.log"; fail "twice, worker: the second kill was not named"; }
echo "worker 1 killed twice with --restart 1: the job ends naming it"
rm -rf "$tmp/ck"
killed dead_scheduler scheduler 1 "Epoch\[2\] Train" "$B/dtrain" launch -n 2 -s 2 "${R[@]}" -- "${LONG[@]}"
[ "$(cat "$tmp/dead_scheduler.rc")" != 0 ] || fail "scheduler killed: the job went on"
grep -q "dtrain launch: scheduler (pid [0-9]*) killed by signal 9" "$tmp/dead_scheduler.log" ||
	{ tail "$tmp/dead_scheduler.log"; fail "scheduler killed: not named"; }
echo "scheduler killed with --restart 1: the job ends naming it"
rm -rf "$tmp/ck"
left && fail "processes left behind"
echo "ok"
