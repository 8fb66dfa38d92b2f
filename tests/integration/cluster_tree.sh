#!/usr/bin/env bash
# cluster_tree.sh - barriers over the control tree (docs/scale.md), forced
# on a small job with DTRAIN_CTRL_TREE_MIN=1 and DTRAIN_CTRL_ARITY=2: 2
# servers and 6 workers on one host make a tree of depth 4 under the
# scheduler (server 0; under it server 1 and worker 0; ...).
#   1. tests/progs/barrier_probe on every node: 3 rounds of barriers over
#      the workers, the servers, both and all, nobody passing one before
#      every member arrived; the scheduler takes each barrier in fewer
#      BARRIER messages than the group has nodes (one: the root has one
#      child), where the star takes one per node. The end goes over the
#      tree too: one WORKER_DONE at the scheduler, from its child with its
#      subtree's count, and TERMINATE to that child only, passed on to
#      server 1.
#   2. The same KV job (kv_check ckpt: dist_sync with sgd, 10 steps) with
#      the star and with the tree: both end 0 with the same values, bit
#      for bit, and the tree's barriers take fewer messages, and its end
#      3 at the scheduler (16 with the star: a WORKER_DONE per worker, a
#      TERMINATE per server, a REPORT per node): over the tree each node
#      sends its parent one end-of-job report merged with its subtree's,
#      of the same size whatever the subtree, and the scheduler's
#      DTRAIN_STATS summary and DTRAIN_STATS_JSON give the star's totals
#      (KV calls, keys, merges and updates; frames and bytes between
#      workers and servers but for the tree's control messages), all 8
#      nodes merged, none missing. And kv_check
#      sum over the tree, whose refusals on rank 0 (an init of another
#      length, another optimizer) every worker must get from a barrier,
#      named after worker 0.
#   2c. The collectives over the tree (coll_check --node --quick, 6
#      workers): the workers under a worker close their idle connections
#      to the scheduler once started, and dial it again for the lookups
#      the collectives make at their start; every check passes, and the
#      scheduler counts the dials.
#   2b. The probe with DTRAIN_STATS=1 where server 1 and worker 3 send no
#      end-of-job report (DT_REPORT_SKIP=1): their parents name them
#      missing (server 0 after a bounded wait), and the scheduler's
#      summary says 3 nodes merged, 5 missing, in the subtrees of server 1
#      and worker 3; every node ends 0.
#   3. An interior worker (worker 1, parent of worker 5) killed with
#      SIGKILL while its child waits in a barrier under it: every other
#      process ends non-zero within 15 s, naming worker 1; the ABORT went
#      down the tree: the scheduler sent it to its child and to worker 1's
#      child only.
#   4. Heartbeats on the tree's edges (PS_HEARTBEAT_INTERVAL=0.2,
#      PS_HEARTBEAT_TIMEOUT=2): worker 5, a leaf three levels under the
#      scheduler's only child, frozen with SIGSTOP while the others wait
#      for it in a barrier. Its parent (worker 1) finds it silent and
#      tells its own parent (TREE_LOST), up to the scheduler, which ends
#      the job: every other process ends non-zero within the timeout and
#      6 s (scaled), naming worker 5 with its pid. The scheduler received
#      heartbeats only from its one child (its end-of-job line), and sent
#      ABORT to that child and to worker 5 alone.
#   5. A frozen interior node (worker 0, parent of workers 3 and 4): its
#      parent tells the scheduler, which sends ABORT to its child and to
#      worker 0's children directly (nothing passes a frozen node):
#      every other process ends non-zero within the timeout and 6 s
#      (scaled), naming worker 0.
#   6. The scheduler's only child (server 0) killed: the scheduler sends
#      the ABORT to its children (server 1 and worker 0), which pass it
#      on; every node ends within 15 s, naming server 0.
#   7. The scheduler frozen with SIGSTOP while every node waits in a
#      barrier: only its child (server 0) watches it; server 0 ends, and
#      each node whose tree parent's connection closed ends after the
#      timeout, a level at a time: every node ends non-zero within 4
#      levels x the timeout and 6 s (scaled), server 0 naming the
#      scheduler, the others their tree parent.
. "$(dirname "$0")/cluster_lib.bash"

LIMIT_S=15
export DTRAIN_CTRL_TREE_MIN=1 DTRAIN_CTRL_ARITY=2

# skip_of NAME: 1 if NAME (server1, worker3, ...) is in SKIP_REPORT: that
# node sends no end-of-job report over the tree (DT_REPORT_SKIP).
skip_of() {
	case " ${SKIP_REPORT:-} " in
	*" $1 "*) echo 1 ;;
	*) echo 0 ;;
	esac
}

# spawn_job TAG: scheduler, servers 0-1 and workers 0-5 of barrier_probe.
spawn_job() {
	local tag=$1 r
	port=$(free_port)
	job_env "$port" 2 6
	export PS_VERBOSE=1
	export PROBE_DIR="$T_DIR/probe.$tag"
	mkdir -p "$PROBE_DIR"
	pids=()
	DMLC_ROLE=scheduler spawn "$tag.scheduler" "$PROBE"
	sched=$SPAWNED
	for r in 0 1; do
		DT_REPORT_SKIP=$(skip_of "server$r") DMLC_ROLE=server \
			DMLC_SERVER_ID=$r spawn "$tag.server$r" "$PROBE"
		pids+=("$SPAWNED")
	done
	for r in 0 1 2 3 4 5; do
		DT_REPORT_SKIP=$(skip_of "worker$r") DMLC_ROLE=worker \
			DMLC_WORKER_ID=$r spawn "$tag.worker$r" "$PROBE"
		pids+=("$SPAWNED")
	done
}

# fewer_messages LOG TAG: every barrier the scheduler logged took fewer
# BARRIER messages than its nodes (at least MIN barriers).
fewer_messages() {
	local logf=$1 tag=$2 min=$3 count
	count=$(grep -cE "over group mask [0-9]: all [0-9]+ nodes arrived in [0-9]+ messages" "$logf")
	[ "$count" -ge "$min" ] || fail "$tag: $count barriers logged, expected $min or more"
	awk '/nodes arrived in/ {
		for (i = 1; i <= NF; i++) {
			if ($i == "all") nodes = $(i + 1)
			if ($i == "in") msgs = $(i + 1)
		}
		if (msgs + 0 >= nodes + 0) { print; bad = 1 }
	} END { exit bad }' "$logf" >"$T_DIR/$tag.too_many" ||
		fail "$tag: a barrier took as many messages as nodes: $(head -1 "$T_DIR/$tag.too_many")"
	log "$tag: $count barriers, each $(grep -oE 'in [0-9]+ messages' "$logf" | sort -u | tr '\n' ' ')"
}

# ---- 1. barrier_probe over the tree
spawn_job probe
expect_exit "$sched" 90 0 "probe: the scheduler"
for i in "${!pids[@]}"; do
	expect_exit "${pids[$i]}" 30 0 "probe: node #$i"
done
out=$(cat "$T_DIR"/probe.server*.log "$T_DIR"/probe.worker*.log)
for who in "server 0" "server 1" "worker 0" "worker 1" "worker 2" \
	"worker 3" "worker 4" "worker 5"; do
	grep -q "^$who passed 3 rounds of barriers" <<<"$out" ||
		fail "probe: $who did not pass its barriers"
done
assert_grep "$T_DIR/probe.scheduler.log" "barriers go over a control tree of arity 2: 1 nodes under the scheduler" "probe: scheduler"
# The shape (tree.c): one host, ids in order, node i under node (i-1)/2.
assert_grep "$T_DIR/probe.server0.log" "control tree: parent the scheduler, 2 children, 2 servers and 6 workers" "probe: server 0"
assert_grep "$T_DIR/probe.server1.log" "control tree: parent server 0, 2 children, 1 servers and 3 workers" "probe: server 1"
assert_grep "$T_DIR/probe.worker1.log" "control tree: parent server 1, 1 children, 0 servers and 2 workers" "probe: worker 1"
assert_grep "$T_DIR/probe.worker5.log" "control tree: parent worker 1, 0 children" "probe: worker 5"
# 1 start-up barrier, and 3 rounds over masks 4, 2, 6 and 7
fewer_messages "$T_DIR/probe.scheduler.log" probe 13
assert_grep "$T_DIR/probe.scheduler.log" "over group mask 6: all 8 nodes arrived in 1 messages" "probe: scheduler"
assert_grep "$T_DIR/probe.scheduler.log" "over group mask 2: all 2 nodes arrived in 1 messages" "probe: scheduler"
# The end over the tree: one WORKER_DONE from the scheduler's child (server
# 0) with the count of its subtree's workers, and TERMINATE to that child
# alone, passed on to server 1 (worker 0 and server 1 brought server 0
# their subtrees' counts).
assert_grep "$T_DIR/probe.scheduler.log" "the 6 workers under server 0 are done \\(6 of 6 workers\\)" "probe: scheduler"
assert_grep "$T_DIR/probe.scheduler.log" "TERMINATE sent over the control tree to 1 nodes" "probe: scheduler"
grep -qE "worker [0-9] is done \([0-9] of 6 workers\)" "$T_DIR/probe.scheduler.log" &&
	fail "probe: a worker's WORKER_DONE reached the scheduler itself"
[ "$(grep -c "TERMINATE sent over\|TERMINATE passed on" "$T_DIR"/probe.*.log | awk -F: '{s += $2} END {print s}')" -eq 3 ] ||
	fail "probe: TERMINATE not sent by the scheduler and passed on by servers 0 and 1 once each"
assert_grep "$T_DIR/probe.server0.log" "the job ends: TERMINATE passed on to 1 tree children" "probe: server 0"
assert_grep "$T_DIR/probe.server0.log" "worker 0: the 3 workers of its subtree are done" "probe: server 0"
assert_grep "$T_DIR/probe.worker1.log" "worker 5: the 1 workers of its subtree are done" "probe: worker 1"
assert_groups_gone
log "probe: ok"

# ---- 2. a KV job, star and tree
# kv_totals LOG: what the scheduler's end-of-job summary (DTRAIN_STATS=1)
# says in totals, a row per node (the star) or merged (the tree): the KV
# calls per kind over the workers, the keys' table whole, the servers'
# merges and updates.
kv_totals() {
	sed -n 's/^\[scheduler\] //p' "$1" | awk '
		/^dtrain stats:/ { on = 1; next }
		!on { next }
		/^straggler report/ { exit }
		/^$/ { sec++; next }
		sec == 1 && /^(KV latency|worker +op|op +calls)/ { next }
		sec == 1 && $1 == "worker" { calls[$3] += $4; next }
		sec == 1 { calls[$1] += $2; next }
		sec == 2 && /^(KV keys|key +pushes)/ { next }
		sec == 2 { print "key", $0; next }
		sec == 3 && /^server +MB/ { next }
		sec == 3 && $1 == "(all)" { m = $3; u = $4; all = 1; next }
		sec == 3 && !all && $1 == "server" { m += $4; u += $5 }
		END {
			for (o in calls) print "calls", o, calls[o]
			print "merges", m + 0; print "updates", u + 0
		}' | sort
}
# same_totals STAR_JSON TREE_JSON: DTRAIN_STATS_JSON of the star (a line
# per node) and of the tree (one merged object) agree: frames and bytes
# between workers and servers (the tree's edges add a few control
# messages and the reports: at most 64 frames and 256 KiB), the keys
# summed over the workers, the KV calls per kind, the merges and updates,
# and every node merged.
same_totals() {
	/usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys

star = [json.loads(line) for line in open(sys.argv[1])]
tree = json.loads(open(sys.argv[2]).readline())
FIELDS = ("msgs_sent", "bytes_sent", "msgs_recv", "bytes_recv")
KEYF = ("pushes", "pulls", "bytes_pushed", "bytes_pulled")


def role(i):
    return "scheduler" if i == 0 else "server" if i <= 2 else "worker"


def bad(msg):
    print(msg)
    sys.exit(1)


tot = {}
for s in star:
    for p in s["peers"]:
        t = tot.setdefault((s["role"], role(p["id"])), [0, 0, 0, 0])
        for i, f in enumerate(FIELDS):
            t[i] += p[f]
seen = []
for a, b in (("worker", "server"), ("server", "worker")):
    for i, limit in ((0, 64), (1, 256 * 1024)):
        st, tr = tot[(a, b)][i], tree["traffic"][a][b][FIELDS[i]]
        if not 0 <= tr - st <= limit:
            bad(f"{a} to {b} {FIELDS[i]}: tree {tr}, star {st}")
        seen.append(f"{a} to {b} {FIELDS[i]} {tr} (star {st})")
if tree["nodes"] != {"scheduler": 1, "server": 2, "worker": 6}:
    bad(f"merged nodes {tree['nodes']}")
if tree["missing_nodes"] != 0 or tree["missing"]:
    bad(f"missing {tree['missing_nodes']} nodes: {tree['missing']}")
keys = {}
for s in star:
    for k in s["keys"] if s["role"] == "worker" else []:
        r = keys.setdefault(k["key"], [0, 0, 0, 0])
        for i, f in enumerate(KEYF):
            r[i] += k[f]
tkeys = {k["key"]: [k[f] for f in KEYF] for k in tree["keys"]}
if not keys or keys != tkeys:
    bad(f"keys: star {keys}, tree {tkeys}")
for op in ("push", "pull", "pushpull"):
    st = sum(s["latency"][op]["count"] for s in star if s["role"] == "worker")
    if st != tree["latency"][op]["count"]:
        bad(f"{op} calls: star {st}, tree {tree['latency'][op]['count']}")
for f in ("merges", "updates"):
    st = sum(s[f] for s in star if s["role"] == "server")
    if st != tree[f] or st == 0:
        bad(f"{f}: star {st}, tree {tree[f]}")
print("; ".join(seen))
PY
}
kv_job() {
	local tag=$1 min=$2
	shift 2
	spawn "$tag" env DTRAIN_CTRL_TREE_MIN="$min" PS_VERBOSE=1 "$DTRAIN" \
		launch -n 6 -s 2 --launcher local -- \
		"$DTRAIN_BUILD/tests/progs/kv_check" "$@"
}
DTRAIN_STATS=1 DTRAIN_STATS_JSON="$T_DIR/kv.star.json" kv_job kv.star 256 ckpt 0 10
star=$SPAWNED
DTRAIN_STATS=1 DTRAIN_STATS_JSON="$T_DIR/kv.tree.json" kv_job kv.tree 1 ckpt 0 10
tree=$SPAWNED
kv_job kv.sum 1 sum
sum=$SPAWNED
expect_exit "$star" 120 0 "kv: the job with the star"
expect_exit "$tree" 120 0 "kv: the job with the tree"
expect_exit "$sum" 120 0 "kv: kv_check sum over the tree"
[ "$(grep -c "kv_check sum: worker passed" "$T_DIR/kv.sum.log")" -eq 6 ] ||
	fail "kv.sum: not every worker passed"
fewer_messages "$T_DIR/kv.sum.log" kv.sum 20
for tag in kv.star kv.tree; do
	[ "$(grep -c "kv_check ckpt: worker passed" "$T_DIR/$tag.log")" -eq 6 ] ||
		fail "$tag: not every worker passed"
	grep -E "kv_check ckpt at step [0-9]+: " "$T_DIR/$tag.log" |
		sed 's/.*kv_check/kv_check/' >"$T_DIR/$tag.values"
done
[ "$(wc -l <"$T_DIR/kv.star.values")" -eq 2 ] || fail "kv: no values from the star's job"
cmp -s "$T_DIR/kv.star.values" "$T_DIR/kv.tree.values" ||
	fail "kv: the tree's values differ: $(cat "$T_DIR/kv.tree.values") vs $(cat "$T_DIR/kv.star.values")"
assert_grep "$T_DIR/kv.tree.log" "barriers go over a control tree" "kv.tree"
grep -q "control tree" "$T_DIR/kv.star.log" && fail "kv.star: a tree below DTRAIN_CTRL_TREE_MIN"
assert_grep "$T_DIR/kv.star.log" "over group mask 4: all 6 nodes arrived in 6 messages" "kv.star"
fewer_messages "$T_DIR/kv.tree.log" kv.tree 2
# The end-of-job counters: with the star every node's report reaches the
# scheduler, a row per node; over the tree each node sends its parent one
# report merged with its subtree's, and the scheduler gets one from its
# child: the same totals (KV calls, keys, merges, updates; frames and
# bytes between workers and servers but for the tree's control messages),
# all 8 nodes merged.
kv_totals "$T_DIR/kv.star.log" >"$T_DIR/kv.star.totals"
kv_totals "$T_DIR/kv.tree.log" >"$T_DIR/kv.tree.totals"
grep -q "^calls pushpull 120$" "$T_DIR/kv.star.totals" ||
	fail "kv.star: no summary with 120 pushpulls over the workers: $(head -3 "$T_DIR/kv.star.totals")"
cmp -s "$T_DIR/kv.star.totals" "$T_DIR/kv.tree.totals" ||
	fail "kv: the tree's totals differ from the star's: $(diff "$T_DIR/kv.star.totals" "$T_DIR/kv.tree.totals" | head -5)"
assert_grep "$T_DIR/kv.tree.log" "dtrain stats: 2 server\\(s\\), 6 worker\\(s\\), merged over the control tree" "kv.tree"
assert_grep "$T_DIR/kv.tree.log" "merged: the reports of 8 nodes and the scheduler's; missing: none" "kv.tree"
assert_grep "$T_DIR/kv.tree.log" "end-of-job reports merged over the control tree: 1 from its children, for 8 nodes \\(0 missing\\)" "kv.tree"
grep -q "merged over the control tree" "$T_DIR/kv.star.log" && fail "kv.star: a merged summary without a tree"
traffic=$(same_totals "$T_DIR/kv.star.json" "$T_DIR/kv.tree.json") ||
	fail "kv: the tree's DTRAIN_STATS_JSON totals differ from the star's: $traffic"
log "kv: the tree's merged totals are the star's: $traffic"
# Each node's merged report is one block of the same size, whatever its
# subtree (server 0's holds all 8 nodes).
[ "$(grep -ohE "end-of-job report of [0-9]+ nodes \(0 missing\) sent to the tree parent: [0-9]+ bytes" "$T_DIR/kv.tree.log" | awk '{print $NF " " $(NF-1)}' | sort -u | wc -l)" -eq 1 ] ||
	fail "kv.tree: the merged reports differ in size: $(grep -oh "sent to the tree parent: [0-9]* bytes" "$T_DIR/kv.tree.log" | sort | uniq -c)"
[ "$(grep -c "end-of-job report of .* sent to the tree parent" "$T_DIR/kv.tree.log")" -eq 8 ] ||
	fail "kv.tree: not every node sent its parent a merged report"
assert_grep "$T_DIR/kv.tree.log" "\\[server 0\\] end-of-job report of 8 nodes \\(0 missing\\) sent to the tree parent" "kv.tree"
# The end at the scheduler: a WORKER_DONE per worker and a TERMINATE per
# server with the star, and each node's REPORT; over the tree, one of
# each, from and to its child.
assert_grep "$T_DIR/kv.star.log" "the end took 16 messages at the scheduler: 6 WORKER_DONE and 8 REPORT received, 2 TERMINATE sent" "kv.star"
assert_grep "$T_DIR/kv.tree.log" "the end took 3 messages at the scheduler: 1 WORKER_DONE and 1 REPORT received, 1 TERMINATE sent" "kv.tree"
log "kv: the same values with the star and the tree: $(tr '\n' ' ' <"$T_DIR/kv.tree.values")"

# ---- 2c. the collectives over the tree, their lookups dialling the
# scheduler again
spawn coll.tree env DTRAIN_CTRL_TREE_MIN=1 PS_VERBOSE=1 "$DTRAIN" \
	launch -n 6 -s 0 --launcher local -- \
	"$DTRAIN_BUILD/tests/progs/coll_check" --node --quick
expect_exit "$SPAWNED" 120 0 "coll: coll_check over the tree"
closed=$(grep -c "closed the idle connection to the scheduler" "$T_DIR/coll.tree.log")
[ "$closed" -ge 1 ] || fail "coll: no worker closed its idle connection to the scheduler"
redials=$(grep -oE "workers dialled the scheduler again [0-9]+ times" "$T_DIR/coll.tree.log" | grep -oE "[0-9]+")
[ -n "$redials" ] && [ "$redials" -ge 1 ] ||
	fail "coll: the scheduler counted no worker dialling it again"
log "coll: every check passed over the tree; $closed workers closed their idle connections to the scheduler, which they dialled again $redials times"

# ---- 2b. end-of-job reports that never come (DT_REPORT_SKIP=1): server 1
# (its subtree: itself, workers 1, 2 and 5) and worker 3 (a leaf under
# worker 0) send none. Worker 0 names worker 3 missing at once (its
# WORKER_DONE came without one); server 0 waits a bounded time for server
# 1's and names it; the scheduler's summary merges the other 3 nodes,
# names both, and every node ends 0.
export DTRAIN_STATS=1
SKIP_REPORT="server1 worker3" spawn_job miss
unset DTRAIN_STATS
expect_exit "$sched" 90 0 "miss: the scheduler"
for i in "${!pids[@]}"; do
	expect_exit "${pids[$i]}" 60 0 "miss: node #$i"
done
assert_grep "$T_DIR/miss.scheduler.log" "merged: the reports of 3 nodes and the scheduler's; missing: 5 nodes, in the subtrees of server 1, worker 3$" "miss: scheduler"
assert_grep "$T_DIR/miss.scheduler.log" "end-of-job reports merged over the control tree: 1 from its children, for 3 nodes \\(5 missing\\)" "miss: scheduler"
assert_grep "$T_DIR/miss.worker0.log" "end-of-job report of 2 nodes \\(1 missing\\) sent to the tree parent" "miss: worker 0"
assert_grep "$T_DIR/miss.server0.log" "timed out waiting for the tree children's end-of-job reports" "miss: server 0"
assert_grep "$T_DIR/miss.server0.log" "end-of-job report of 3 nodes \\(5 missing\\) sent to the tree parent" "miss: server 0"
assert_grep "$T_DIR/miss.server1.log" "DT_REPORT_SKIP=1: no end-of-job report" "miss: server 1"
assert_groups_gone
log "miss: the scheduler's summary names the 5 nodes whose reports never came (server 1's subtree and worker 3)"

# expect_nodes LIMIT TAG I...: the nodes pids[I] each end non-zero within
# LIMIT seconds.
expect_nodes() {
	local limit=$1 tag=$2 i
	shift 2
	for i in "$@"; do
		expect_exit "${pids[$i]}" "$limit" nonzero "$tag: node #$i"
	done
}

# ---- 3. an interior worker killed
# Worker 1's first workers' barrier mark is a FIFO: it passes the
# start-up barrier and blocks opening it, while worker 5, its child,
# waits in the workers' barrier under it.
mkdir -p "$T_DIR/probe.lost"
mkfifo "$T_DIR/probe.lost/m4.r0.worker1"
PS_HEARTBEAT_INTERVAL=0.2 PS_HEARTBEAT_TIMEOUT=2 spawn_job lost
wait_for_line "$T_DIR/lost.scheduler.log" "all 9 nodes are ready" 60 ||
	fail "lost: the job did not start"
t_now
deadline=$((T_NOW + 30 * DT_TEST_TIME_SCALE * 1000000000))
until [ -e "$PROBE_DIR/m4.r0.worker5" ]; do
	t_now
	[ "$T_NOW" -lt "$deadline" ] || fail "lost: worker 5 did not reach its barrier"
	t_pause 0.05
done
assert_grep "$T_DIR/lost.worker5.log" "control tree: parent worker 1" "lost: worker 5"
victim=$(child_of "${pids[3]}")
[ -n "$victim" ] || fail "lost: cannot find worker 1's process"
log "lost: kill -9 worker 1 (pid $victim), the parent of worker 5"
kill -KILL "$victim"
kill_ns=$(date +%s%N)
expect_exit "$sched" "$LIMIT_S" nonzero "lost: the scheduler"
assert_grep "$T_DIR/lost.scheduler.log" "worker 1 .*was lost" "lost: the scheduler names worker 1"
expect_nodes "$LIMIT_S" lost 0 1 2 4 5 6 7
for who in server0 server1 worker0 worker2 worker3 worker4; do
	assert_grep "$T_DIR/lost.$who.log" "worker 1 .*was lost" "lost: $who names worker 1"
done
# The ABORT went down the tree: from the scheduler to its child, no other:
# the lost node's child (worker 5, whose parent is gone) closed its idle
# connection to the scheduler after the start, and ends once its
# parent's connection has been closed for PS_HEARTBEAT_TIMEOUT, naming
# it.
assert_grep "$T_DIR/lost.worker5.log" "lost the connection to its tree parent, worker 1, and heard nothing from the scheduler" "lost: worker 5 names worker 1"
assert_grep "$T_DIR/lost.scheduler.log" "ABORT sent over the control tree to 1 nodes: 1 of its 1 children, and 0 of the lost worker 1 and its 1 children" "lost: the scheduler's ABORTs"
log "lost: every node ended non-zero naming worker 1, $((($(date +%s%N) - kill_ns) / 1000000)) ms after the kill"
wait "${pids[3]}" 2>/dev/null
assert_groups_gone
log "lost: ok"

# ---- 4. a frozen leaf, found by its tree parent
# Worker 5's first workers' barrier mark is a FIFO: it passes the start-up
# barrier and blocks opening it (its heartbeats go on), while the others
# wait for it in the workers' barrier. Then it is frozen.
HB_TIMEOUT_S=2
STOP_LIMIT_S=$((HB_TIMEOUT_S + 6))
# start_held NAME: the job NAME with short heartbeats, once it started
# and worker 4 is in its barrier (worker 5 held by its fifo, made here).
start_held() {
	mkdir -p "$T_DIR/probe.$1"
	mkfifo "$T_DIR/probe.$1/m4.r0.worker5"
	PS_HEARTBEAT_INTERVAL=0.2 PS_HEARTBEAT_TIMEOUT=$HB_TIMEOUT_S spawn_job "$1"
	wait_for_line "$T_DIR/$1.scheduler.log" "all 9 nodes are ready" 60 ||
		fail "$1: the job did not start"
	t_now
	local deadline=$((T_NOW + 30 * DT_TEST_TIME_SCALE * 1000000000))
	until [ -e "$PROBE_DIR/m4.r0.worker4" ]; do
		t_now
		[ "$T_NOW" -lt "$deadline" ] ||
			fail "$1: worker 4 did not reach its barrier"
		t_pause 0.05
	done
}
start_held frozen
victim=$(child_of "${pids[7]}")
[ -n "$victim" ] || fail "frozen: cannot find worker 5's process"
log "frozen: kill -STOP worker 5 (pid $victim), a leaf under worker 1"
kill -STOP "$victim"
stop_ns=$(date +%s%N)
expect_exit "$sched" "$STOP_LIMIT_S" nonzero "frozen: the scheduler"
expect_nodes "$STOP_LIMIT_S" frozen 0 1 2 3 4 5 6
ms=$((($(date +%s%N) - stop_ns) / 1000000))
who="worker 5 \\(pid $victim on host [^)]*\\) sent nothing for [0-9.]+ s"
# (worker 1 names it by its address: a member knows the pid and host of
# the nodes it was told about, not of a child that dialled it)
assert_grep "$T_DIR/frozen.worker1.log" "worker 5 \\(.*\\) sent nothing for [0-9.]+ s \\(PS_HEARTBEAT_TIMEOUT=2 s\\): told the tree parent" "frozen: worker 1 reports its child"
assert_grep "$T_DIR/frozen.scheduler.log" "$who .*seen by its tree parent, worker 1" "frozen: the scheduler names worker 5"
for who_ in server0 server1 worker0 worker1 worker2 worker3 worker4; do
	assert_grep "$T_DIR/frozen.$who_.log" "$who" "frozen: $who_ names worker 5"
done
# The ABORT: to the scheduler's child alone (the frozen leaf, a worker
# under a worker, closed its idle connection to the scheduler).
assert_grep "$T_DIR/frozen.scheduler.log" "ABORT sent over the control tree to 1 nodes: 1 of its 1 children, and 0 of the lost worker 5 and its 0 children" "frozen: the scheduler's ABORTs"
# Its heartbeats came from its one child in the tree, server 0, alone.
assert_grep "$T_DIR/frozen.scheduler.log" "heartbeats received since the start: [1-9][0-9]* from 1 nodes \\(1 of its 1 tree children\\)" "frozen: the scheduler's heartbeats"
log "frozen: every node ended non-zero naming worker 5, $ms ms after the SIGSTOP (timeout ${HB_TIMEOUT_S} s); the scheduler's $(grep -o 'heartbeats received since the start: .*' "$T_DIR/frozen.scheduler.log")"
kill -KILL "$victim"
kill -CONT "$victim" 2>/dev/null
wait "${pids[7]}" 2>/dev/null
assert_groups_gone
log "frozen: ok"

# ---- 5. a frozen interior node
# Worker 0 (parent of workers 3 and 4) frozen while the workers wait for
# worker 5 (held by its fifo) in a barrier. Its parent, server 0, finds it
# silent and tells the scheduler, whose ABORT goes to its child and, since
# nothing passes through a frozen node, to worker 0 and its children
# directly: every node below it ends within the timeout and 6 s (scaled)
# like the others, naming worker 0.
start_held interior
victim=$(child_of "${pids[2]}")
[ -n "$victim" ] || fail "interior: cannot find worker 0's process"
log "interior: kill -STOP worker 0 (pid $victim), the parent of workers 3 and 4"
kill -STOP "$victim"
stop_ns=$(date +%s%N)
expect_exit "$sched" "$STOP_LIMIT_S" nonzero "interior: the scheduler"
expect_nodes "$STOP_LIMIT_S" interior 0 1 3 4 5 6
ms=$((($(date +%s%N) - stop_ns) / 1000000))
who="worker 0 \\(pid $victim on host [^)]*\\) sent nothing for [0-9.]+ s"
assert_grep "$T_DIR/interior.scheduler.log" "$who .*seen by its tree parent, server 0" "interior: the scheduler names worker 0"
# (worker 0 and its children, workers under a node, closed their idle
# connections to the scheduler: the ABORT reaches none of them, and the
# children find their silent parent themselves)
assert_grep "$T_DIR/interior.scheduler.log" "ABORT sent over the control tree to 1 nodes: 1 of its 1 children, and 0 of the lost worker 0 and its 2 children" "interior: the scheduler's ABORTs"
for who_ in server0 server1 worker1 worker2 worker3 worker4 worker5; do
	assert_grep "$T_DIR/interior.$who_.log" "$who" "interior: $who_ names worker 0"
done
# (workers 3 and 4 would find their silent parent themselves a second
# later, PS_HEARTBEAT_TIMEOUT and the grace: which came first is logged)
aborted=$(grep -l "job aborted by the scheduler: worker 0" "$T_DIR"/interior.worker[34].log | wc -l)
log "interior: every node ended non-zero naming worker 0, $ms ms after the SIGSTOP (timeout ${HB_TIMEOUT_S} s); $aborted of its 2 children by the scheduler's ABORT"
kill -KILL "$victim" "$(child_of "${pids[7]}")"
kill -CONT "$victim" 2>/dev/null
wait "${pids[2]}" "${pids[7]}" 2>/dev/null
assert_groups_gone
log "interior: ok"

# ---- 6. the scheduler's child killed
# Server 0, the scheduler's only child, killed with SIGKILL while the
# others wait in a barrier: no child of the scheduler is left to pass the
# ABORT on, so it goes to server 0's children (server 1 and worker 0),
# which pass it on: every node ends within 15 s, naming server 0.
start_held rootkid
victim=$(child_of "${pids[0]}")
[ -n "$victim" ] || fail "rootkid: cannot find server 0's process"
log "rootkid: kill -9 server 0 (pid $victim), the scheduler's child"
kill -KILL "$victim"
kill_ns=$(date +%s%N)
expect_exit "$sched" "$LIMIT_S" nonzero "rootkid: the scheduler"
expect_nodes "$LIMIT_S" rootkid 1 2 3 4 5 6
# (to server 1, which passes it on; worker 0, a worker under a node,
# closed its idle connection to the scheduler, and ends once server 0's
# connection has been closed for PS_HEARTBEAT_TIMEOUT, naming it; its
# children then name it)
assert_grep "$T_DIR/rootkid.scheduler.log" "ABORT sent over the control tree to 1 nodes: 0 of its 1 children, and 1 of the lost server 0 and its 2 children" "rootkid: the scheduler's ABORTs"
for who in server1 worker1 worker2 worker5; do
	assert_grep "$T_DIR/rootkid.$who.log" "job aborted by the scheduler: server 0 .*was lost" "rootkid: $who names server 0"
done
assert_grep "$T_DIR/rootkid.worker0.log" "lost the connection to its tree parent, server 0, and heard nothing from the scheduler" "rootkid: worker 0 names server 0"
for who in worker3 worker4; do
	assert_grep "$T_DIR/rootkid.$who.log" "lost the connection to its tree parent, worker 0, and heard nothing from the scheduler" "rootkid: $who names worker 0"
done
log "rootkid: every node ended non-zero naming server 0, $((($(date +%s%N) - kill_ns) / 1000000)) ms after the kill"
kill -KILL "$(child_of "${pids[7]}")" 2>/dev/null
wait "${pids[0]}" "${pids[7]}" 2>/dev/null
assert_groups_gone
log "rootkid: ok"

# ---- 7. a frozen scheduler
start_held nosched
frozen=$(child_of "$sched")
[ -n "$frozen" ] || fail "nosched: cannot find the scheduler's process"
log "nosched: kill -STOP the scheduler (pid $frozen)"
kill -STOP "$frozen"
stop_ns=$(date +%s%N)
expect_nodes "$((4 * HB_TIMEOUT_S + 6))" nosched 0 1 2 3 4 5 6
ms=$((($(date +%s%N) - stop_ns) / 1000000))
assert_grep "$T_DIR/nosched.server0.log" "scheduler \\(pid $frozen on host [^)]*\\) sent nothing for" "nosched: server 0 names the scheduler"
for pair in server1:"server 0" worker0:"server 0" worker1:"server 1" \
	worker2:"server 1" worker3:"worker 0" worker4:"worker 0"; do
	assert_grep "$T_DIR/nosched.${pair%%:*}.log" "lost the connection to its tree parent, ${pair#*:}, and heard nothing from the scheduler" "nosched: ${pair%%:*} names its parent"
done
log "nosched: every node ended non-zero, the last $ms ms after the SIGSTOP (timeout ${HB_TIMEOUT_S} s)"
kill -KILL "$frozen" "$(child_of "${pids[7]}")"
kill -CONT "$frozen" 2>/dev/null
wait "$sched" "${pids[7]}" 2>/dev/null
assert_groups_gone
log "ok"
