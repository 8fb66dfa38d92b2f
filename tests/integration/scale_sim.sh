#!/usr/bin/env bash
# scale_sim.sh - a job of NODES (2,000) real nodes run by 20 processes of
# the scale simulator (bench/scale_sim.sh, many nodes per process, over
# TCP) against one scheduler:
#   a. every node joins, passes the barriers and leaves;
#   b. what each node received from the scheduler at the join is at
#      most JOIN_BYTES_BOUND, 1 KiB, at any size (the figure is printed);
#   c. no node holds a link beyond its partners: every simulator's
#      sockets are exactly its nodes' listeners, their links to the
#      scheduler, a worker's one link per server and a server's one per
#      worker, and the control tree's links between a node and a parent
#      of its role;
#   d. in a job of STOP_NODES (500) nodes in 20 processes, with
#      PS_HEARTBEAT_INTERVAL=1 and PS_HEARTBEAT_TIMEOUT=5 (scaled), a
#      SIGSTOP of one process makes the scheduler end the job within the
#      heartbeat timeout and 3 s, naming a node of the stopped process,
#      and every other node's barrier fails; the stopped one is let go
#      and ends, and nothing is left running. (Fewer nodes there: on this
#      2-processor machine under load a join of 2,000 nodes took up to
#      6 s, during which a node may hear nothing from the scheduler for
#      longer than a 5 s timeout.)
#   e. the barriers go over the control tree (forced on, arity 16): the
#      scheduler sends and receives at most ROOT_MSGS_BOUND (100) messages
#      per barrier, 2 x the root's children (the 20 processes are 20
#      hosts: 16 host leaders under the scheduler, 32 messages), where the
#      star takes 2 x 2,000. (The job of d goes over the tree too: 500
#      nodes are above DTRAIN_CTRL_TREE_MIN's default of 256.)
#   f. heartbeats go over the tree's edges: from the start-up barrier to
#      its end, the scheduler of a and of d received heartbeats only from
#      its children in the tree, at most HB_PER_KID (2) a second each in
#      a (PS_HEARTBEAT_INTERVAL=1), where the star gets one a second from
#      every node; in d the frozen process's nodes are found by their
#      tree parents, or by the scheduler if one is its child.
#   h. a node's join takes two messages at the scheduler, its ADD_NODE
#      and the one ASSIGN that carries its place in the tree and its
#      parent's address (no TREE, no LOOKUP of the parent): the nodes
#      count the ASSIGN (the ADD_NODE goes before a node has an id to
#      count it by), at most JOIN_MSGS_PER_NODE (1) a node at the root
#      besides the start-up barrier's ROOT_MSGS_BOUND;
#   i. once the start-up barrier has passed, a worker whose tree parent is
#      a node closes its idle connection to the scheduler: after the last
#      barrier the scheduler holds at most ROOT_FDS_BOUND (100)
#      descriptors, its own, its tree children's and the servers'
#      connections, where it held one per node (2,008 at 2,000); and (c)
#      counts those closed links out of the simulators' sockets;
#   g. the end goes over the tree: in a, the scheduler received a
#      WORKER_DONE from each child holding workers (its subtree's count)
#      and sent TERMINATE to each child holding servers, at most 2 x its
#      children and END_MSGS_MARGIN messages, where the star takes one
#      per node; with DTRAIN_STATS=1 or DTRAIN_STATS_JSON in the test's
#      environment, also at most one REPORT per child (each node's
#      counters merged up the tree), none without.
#   j. the parked join (docs/scale.md), forced on a job of PARK_NODES
#      (1,000) nodes with 4 servers in 10 processes, the nodes started 500
#      a second: every node joins, passes the barriers and leaves; the
#      scheduler holds at most PARK_FDS_BOUND (half the nodes) descriptors
#      at once during the join (the joins in flight, at most
#      DTRAIN_JOIN_WINDOW=32 called-back connections, its children and
#      the servers), where it holds one per node without it, and at most
#      ROOT_FDS_BOUND after the barriers; each node gets at most
#      JOIN_BYTES_BOUND from it; the sockets are exactly the nodes'
#      partners'.
. "$(dirname "$0")/cluster_lib.bash"

NODES=${SCALE_SIM_NODES:-2000}
PARK_NODES=${SCALE_SIM_PARK_NODES:-1000}
PARK_FDS_BOUND=$((PARK_NODES / 2))
STOP_NODES=${SCALE_SIM_STOP_NODES:-500}
SERVERS=4
PROCS=20
# (b) Each node gets a small assignment from the scheduler, not the job's
# node table: 100 bytes, and for a worker one entry per server it dials
# (at most about 110 bytes each with same-host endpoints), its place in
# the control tree (in the ASSIGN: 17 bytes, 12 per child, at most 32
# children at arity 16, and its parent's entry when it is not a server),
# then the start-up barrier's release. The bound is 1 KiB a
# node whatever the job's size (510 bytes measured at 2,000 nodes with 4
# servers and the tree, 643 when the place came in a TREE of its own,
# 471 without the tree; the whole table took 163,374 bytes a node
# there).
JOIN_BYTES_BOUND=1024
# (h) The join's messages at the scheduler per node that the nodes count:
# 1, the ASSIGN (2,032 measured at 2,000 nodes with the start-up barrier's
# 32; 4 a node when the place came in a TREE and a node whose parent is
# not a server looked its address up).
JOIN_MSGS_PER_NODE=1
# (i) The scheduler's descriptors after the last barrier: about 8 of its
# own (its listener, epoll sets and event descriptors, its log), 16
# children and 4 servers.
ROOT_FDS_BOUND=100
# (e) The tree (arity 16) over 20 hosts: 16 leaders under the scheduler,
# the other 4 under the first leader: 32 messages a barrier at the root.
ROOT_MSGS_BOUND=100
# (g) The end's messages at the scheduler beyond 2 x its children (none
# expected), and a REPORT per child with DTRAIN_STATS or DTRAIN_STATS_JSON
# (each node's counters merged up the tree: 4 REPORTs of 21,216 bytes at
# the root, measured at 296+4 nodes in 4 processes), none without.
END_MSGS_MARGIN=4
REPORTS_PER_KID=0
if [ "${DTRAIN_STATS:-0}" = 1 ] || [ -n "${DTRAIN_STATS_JSON:-}" ]; then
	REPORTS_PER_KID=1
fi
# (f) Heartbeats a second at the scheduler, per child of it in the tree.
HB_PER_KID=2
HB_INTERVAL=1
HB_TIMEOUT=$((5 * DT_TEST_TIME_SCALE))
# A run takes 15 to 20 s here at a load of 100 to 600, but once in a few
# at loads of hundreds it took minutes (the scheduler and 16,000 threads
# share two processors with every other job): each phase gets
# PHASE_LIMIT_S and each run RUN_LIMIT_S (CTest gives the test 600 s).
PHASE_LIMIT_S=$((120 * DT_TEST_TIME_SCALE))
RUN_LIMIT_S=$((270 * DT_TEST_TIME_SCALE))
STOP_LIMIT_S=$((HB_TIMEOUT + 3 * DT_TEST_TIME_SCALE))
. "$(dirname "$0")/scale_lib.bash"

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
log "$NODES nodes ($SERVERS servers) in $PROCS processes; ulimit -n $(ulimit -n); load $(cut -d' ' -f1-3 /proc/loadavg)"

# a, b, c: a whole job. While the scheduler sends out the tables, O(N)
# bytes each, a node whose copy has not come hears nothing from it: on
# this 2-processor machine under a load of hundreds a join of 2,000 nodes
# took more than the default 10 s of PS_HEARTBEAT_TIMEOUT. This part is
# not about heartbeats (d is): as long as a phase may take.
run_sim job "$NODES" "$PROCS" PS_HEARTBEAT_TIMEOUT=$PHASE_LIMIT_S \
	DTRAIN_CTRL_TREE_MIN=1 DTRAIN_CTRL_ARITY=16
[ "$RUN_STATUS" = 0 ] || fail "the job failed (status $RUN_STATUS): $(grep -m1 error "$T_DIR/job.log")"
for ph in join barrier1 barrier2 leave; do
	ok=$(field "$JSONL" "$ph" ok)
	[ "$ok" = "$NODES" ] || fail "$ph: $ok of $NODES nodes through it"
done
[ "$(field "$JSONL" all passed_all)" = True ] || fail "not every node passed every phase"
join_b=$(field "$JSONL" join rx_bytes_per_node)
log "(a) every node joined, passed 2 barriers and left in $RUN_MS ms; join $(field "$JSONL" join wall_s) s, barrier p99 $(field "$JSONL" barrier1 p99_ms) ms"
/usr/bin/python3 -c "import sys; sys.exit(not float('$join_b') <= $JOIN_BYTES_BOUND)" ||
	fail "(b) each node received $join_b bytes from the scheduler at the join; bound $JOIN_BYTES_BOUND"
log "(b) each node received $join_b bytes from the scheduler at the join (bound $JOIN_BYTES_BOUND)"
join_m=$(field "$JSONL" join root_msgs)
[ "$join_m" -le $((JOIN_MSGS_PER_NODE * NODES + ROOT_MSGS_BOUND)) ] ||
	fail "(h) the join took $join_m messages at the scheduler; bound $JOIN_MSGS_PER_NODE a node and $ROOT_MSGS_BOUND"
log "(h) the join took $join_m messages at the scheduler for $NODES nodes (bound $JOIN_MSGS_PER_NODE a node and $ROOT_MSGS_BOUND)"
socks=$(field "$JSONL" all sockets)
want=$(field "$JSONL" all sockets_expected)
extra=$(field "$JSONL" all sockets_extra_max)
[ "$socks" = "$want" ] && [ "$extra" = 0 ] ||
	fail "(c) the simulators hold $socks sockets, their nodes' partners explain $want (most extra in one: $extra)"
log "(c) $socks sockets in the simulators, exactly the nodes' partners' links and listeners"
root_fds=$(field "$JSONL" all root_fds)
[ "$root_fds" != None ] && [ "$root_fds" -le "$ROOT_FDS_BOUND" ] ||
	fail "(i) the scheduler holds $root_fds descriptors after the last barrier; bound $ROOT_FDS_BOUND"
log "(i) the scheduler holds $root_fds descriptors after the last barrier ($(field "$JSONL" all root_fds_join) once every node joined; bound $ROOT_FDS_BOUND)"
[ "$(field "$JSONL" all tree_root_kids)" != None ] || fail "(e) no control tree"
for ph in barrier1 barrier2; do
	root=$(field "$JSONL" "$ph" root_msgs)
	[ "$root" -le "$ROOT_MSGS_BOUND" ] && [ "$root" -ge 2 ] ||
		fail "(e) $ph: $root messages at the scheduler; bound $ROOT_MSGS_BOUND"
done
log "(e) a barrier took $(field "$JSONL" barrier1 root_msgs) messages at the scheduler (bound $ROOT_MSGS_BOUND): a tree of depth $(field "$JSONL" all tree_depth), $(field "$JSONL" all tree_root_kids) nodes under the scheduler"
# hb_on_edges TAG JSONL INTERVAL: (f) the scheduler's heartbeats came from
# its tree children only, at most HB_PER_KID a second each.
hb_on_edges() {
	local tag=$1 jsonl=$2 interval=$3 kids nodes rate
	kids=$(field "$jsonl" all tree_root_kids)
	nodes=$(field "$jsonl" all root_hb_nodes)
	rate=$(field "$jsonl" all root_hb_s)
	[ "$nodes" != None ] || fail "(f) $tag: the scheduler did not say how many heartbeats it received"
	[ "$nodes" -le "$kids" ] && [ "$(field "$jsonl" all root_hb_kids)" = "$nodes" ] ||
		fail "(f) $tag: the scheduler received heartbeats from $nodes nodes, $(field "$jsonl" all root_hb_kids) of them among its $kids children"
	/usr/bin/python3 -c "import sys; sys.exit(not float('$rate') <= $HB_PER_KID * $kids / $interval)" ||
		fail "(f) $tag: $rate heartbeats a second at the scheduler; bound $HB_PER_KID x $kids children / $interval s"
	log "(f) $tag: the scheduler received $(field "$jsonl" all root_hb) heartbeats in $(field "$jsonl" all root_hb_span_s) s, $rate a second, from $nodes nodes, all of them among its $kids children (bound $HB_PER_KID x $kids a second)"
}
hb_on_edges a "$JSONL" 1
# (g) The end goes over the tree: the scheduler's WORKER_DONEs come from its
# children (with their subtrees' counts) and its TERMINATEs go to them,
# at most 2 x its children and END_MSGS_MARGIN, where the star takes one
# per worker and one per server.
kids=$(field "$JSONL" all tree_root_kids)
end_msgs=$(field "$JSONL" all root_end_msgs)
[ "$end_msgs" != None ] || fail "(g) the scheduler did not say what its end took"
end_reports=$(field "$JSONL" all root_end_reports)
[ "$end_msgs" -ge 1 ] && [ "$end_msgs" -le $(((2 + REPORTS_PER_KID) * kids + END_MSGS_MARGIN)) ] ||
	fail "(g) the end took $end_msgs messages at the scheduler; bound $((2 + REPORTS_PER_KID)) x $kids children + $END_MSGS_MARGIN"
[ "$end_reports" -le $((REPORTS_PER_KID * kids)) ] ||
	fail "(g) the scheduler received $end_reports REPORTs at the end; bound $REPORTS_PER_KID x $kids children"
log "(g) the end took $end_msgs messages at the scheduler ($(field "$JSONL" all root_end_done) WORKER_DONE, $end_reports REPORT, $(field "$JSONL" all root_end_term) TERMINATE; bound $((2 + REPORTS_PER_KID)) x $kids children + $END_MSGS_MARGIN), where the star takes $NODES"
assert_pids_gone "$JSONL"

# j: the parked join.
run_sim park "$PARK_NODES" 10 PS_HEARTBEAT_TIMEOUT=$PHASE_LIMIT_S \
	DTRAIN_CTRL_TREE_MIN=1 DTRAIN_JOIN_PARK_MIN=1 DTRAIN_JOIN_WINDOW=32 \
	JOIN_RATE=500
[ "$RUN_STATUS" = 0 ] || fail "(j) the parked job failed (status $RUN_STATUS): $(grep -m1 error "$T_DIR/park.log")"
for ph in join barrier1 barrier2 leave; do
	ok=$(field "$JSONL" "$ph" ok)
	[ "$ok" = "$PARK_NODES" ] || fail "(j) $ph: $ok of $PARK_NODES nodes through it"
done
grep -q "the workers' joins are parked" "$T_DIR/park/sched.$((PARK_NODES - SERVERS)).$SERVERS.err" ||
	fail "(j) the scheduler did not park the joins"
peak=$(field "$JSONL" all root_fds_peak)
after=$(field "$JSONL" all root_fds)
[ "$peak" != None ] && [ "$peak" -le "$PARK_FDS_BOUND" ] ||
	fail "(j) the scheduler held $peak descriptors at once during the parked join; bound $PARK_FDS_BOUND"
[ "$after" -le "$ROOT_FDS_BOUND" ] ||
	fail "(j) the scheduler holds $after descriptors after the barriers; bound $ROOT_FDS_BOUND"
join_b=$(field "$JSONL" join rx_bytes_per_node)
/usr/bin/python3 -c "import sys; sys.exit(not float('$join_b') <= $JOIN_BYTES_BOUND)" ||
	fail "(j) each node received $join_b bytes from the scheduler at the parked join; bound $JOIN_BYTES_BOUND"
[ "$(field "$JSONL" all sockets)" = "$(field "$JSONL" all sockets_expected)" ] ||
	fail "(j) the simulators hold $(field "$JSONL" all sockets) sockets, their nodes' partners explain $(field "$JSONL" all sockets_expected)"
assert_pids_gone "$JSONL"
log "(j) parked join of $PARK_NODES nodes: the scheduler held at most $peak descriptors at once (bound $PARK_FDS_BOUND), $after after the barriers; $join_b bytes a node from it"

# d: one process of 20 stopped.
run_sim stop "$STOP_NODES" "$PROCS" STOP_ONE=1 PS_HEARTBEAT_INTERVAL=$HB_INTERVAL \
	PS_HEARTBEAT_TIMEOUT=$HB_TIMEOUT
ok=$(field "$JSONL" join ok)
[ "$ok" = "$STOP_NODES" ] || fail "(d) $ok of $STOP_NODES nodes joined: $(field "$JSONL" join error)"
socks=$(field "$JSONL" all sockets)
[ "$socks" = "$(field "$JSONL" all sockets_expected)" ] ||
	fail "(d) after the join the simulators hold $socks sockets, their nodes' partners explain $(field "$JSONL" all sockets_expected)"
named_s=$(field "$JSONL" all named_after_s)
end_s=$(field "$JSONL" all end_after_s)
spid=$(field "$JSONL" all stopped_pid)
[ "$end_s" != None ] ||
	fail "(d) the scheduler did not end the job after the SIGSTOP; it said: $(field "$JSONL" all sched_log_tail); its threads wait in $(field "$JSONL" all sched_wchan)"
[ "$(field "$JSONL" all sched_exit)" != 0 ] || fail "(d) the scheduler exited 0"
[ "$named_s" != None ] || fail "(d) the scheduler exited without naming a lost node"
/usr/bin/python3 -c "import sys; sys.exit(not float('$named_s') <= $STOP_LIMIT_S)" ||
	fail "(d) the scheduler ended the job $named_s s after the SIGSTOP; limit $STOP_LIMIT_S s"
named=$(field "$JSONL" all named)
grep -q "(pid $spid " <<<"$named" ||
	fail "(d) the scheduler did not name a node of the stopped process $spid: $named"
others=$(field "$JSONL" all others)
[ "$(field "$JSONL" all others_failed)" = "$others" ] ||
	fail "(d) $(field "$JSONL" all others_failed) of the $others other nodes saw the job end"
exits=$(field "$JSONL" all sim_exits)
grep -q running <<<"$exits" && fail "(d) a simulator did not end: $exits"
assert_pids_gone "$JSONL"
hb_on_edges d "$JSONL" "$HB_INTERVAL"
log "(d) $(field "$JSONL" all stopped_nodes) of $STOP_NODES nodes stopped: the scheduler ended the job after $named_s s and exited after $end_s s (timeout $HB_TIMEOUT s), naming $(grep -o "[a-z]* [0-9]* (pid $spid [^)]*)" <<<"$named" | head -n 1)"
assert_groups_gone
log "done in $RUN_MS ms for (d); nothing left running"
