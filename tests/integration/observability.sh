#!/usr/bin/env bash
# Observability end to end (docs/observability.md):
#  - a 2-worker 2-server job (obs_stats.c) whose workers find their own
#    counters exact; every pair of nodes agrees on the bytes and frames
#    between them (DTRAIN_STATS_JSON); the --stats table and straggler
#    report name the slowest worker and the busiest server; its timeline
#    is valid, nests per track and per operation, and lines up although
#    the members' clocks are 3 s off (DT_CLOCK_SKEW_MS);
#  - PS_VERBOSE=1 counters lines from every node of a linreg job;
#  - the mnist example with dist_sync: forward, backward, communication
#    wait, KV phases and server merge/update/reply on the timeline; its
#    metrics log parses;
#  - a 3-rank horovod job: collectives by phase (negotiate, ring steps,
#    reduce);
#  - dtrain plot: a PNG that is not blank, valid SVG, and clear errors
#    naming the file and line for empty and malformed logs.
set -u
. "$(dirname "$0")/job_lib.bash"
B=${DTRAIN_BUILD:?}
S=${DTRAIN_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}
CHECK="$S/tests/integration/trace_check.py"
DATA=${DTRAIN_DATA:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. Counters and the report, a timeline across skewed clocks.
if ! PS_HEARTBEAT_INTERVAL=3600 PS_HEARTBEAT_TIMEOUT=0 DTRAIN_STATS_JSON="$tmp/stats.jsonl" \
	run_job 120 "$tmp/out.log" 30 "$B/dtrain" launch -n 2 -s 2 --stats \
	--timeline "$tmp/t1.json" --env DT_CLOCK_SKEW_MS=3000 -- "$B/tests/progs/obs_stats"; then
	fail "the counters job"
elif [ "$(grep -c 'obs_stats: worker .*: ok' "$tmp/out.log")" != 2 ]; then
	grep "obs_stats" "$tmp/out.log"
	fail "a worker's counters are not what it did"
else
	echo "ok: $(grep -m1 -o 'obs_stats: worker 0.*' "$tmp/out.log")"
	for want in "straggler report" "slowest worker: worker" "busiest server: server" \
		"KV latency" "timeline written to"; do
		grep -q "$want" "$tmp/out.log" || fail "no '$want' in the --stats output"
	done
	python3 - "$tmp/stats.jsonl" <<'PY' || fail "the nodes disagree on their traffic"
import json, sys
nodes = {n["node"]: n for n in map(json.loads, open(sys.argv[1]))}
assert sorted(nodes) == [0, 1, 2, 3, 4], sorted(nodes)
pairs = 0
for a in nodes.values():
    for p in a["peers"]:
        b = nodes[p["id"]]
        if b is a:
            continue
        q = b["peers"][a["node"]]
        if b["node"] == 0:   # the report itself reaches the scheduler last
            assert q["bytes_recv"] > p["bytes_sent"], (a["name"], p, q)
            continue
        assert (p["bytes_sent"], p["msgs_sent"]) == (q["bytes_recv"], q["msgs_recv"]), \
            (a["name"], b["name"], p, q)
        pairs += 1
w = nodes[3]
k7 = [k for k in w["keys"] if k["key"] == 7][0]
assert k7["bytes_pushed"] == 25 * 4000 and k7["pushes"] == 25, k7
print("ok: %d pairs of nodes agree exactly on the bytes and frames between them" % pairs)
PY
	python3 "$CHECK" "$tmp/t1.json" 5 "push,pull,pushpull,queued,on the wire + server,merge,reply,bootstrap,barrier,clock sync,step,communication wait,wait" \
		|| fail "the counters job's timeline"
fi

# 1b. PS_VERBOSE=1: each node's counters in one line every
# DTRAIN_STATS_INTERVAL, heartbeats off (the watch thread runs for it
# alone); none without PS_VERBOSE (the job above).
grep -q "stats at" "$tmp/out.log" && fail "a counters line without PS_VERBOSE"
if ! PS_VERBOSE=1 DTRAIN_STATS_INTERVAL=0.1 PS_HEARTBEAT_INTERVAL=0 PS_HEARTBEAT_TIMEOUT=0 \
	run_job 300 "$tmp/out.log" 30 "$B/dtrain" launch -n 2 -s 2 -- \
	"$B/examples/linreg" --kvstore dist_sync --batch-size 50 --epochs 10; then
	fail "the PS_VERBOSE job"
else
	python3 - "$tmp/out.log" <<'PY' || fail "the PS_VERBOSE counters lines"
import re, sys
lines = {}
for l in open(sys.argv[1]):
    m = re.match(r"\[(scheduler|server \d|worker \d)\] stats at ([0-9.]+) s: sent ([0-9.]+) MB "
                 r"in (\d+) frames \([0-9.]+ [kMG]B/s\), received", l)
    if m:
        lines.setdefault(m.group(1), []).append((float(m.group(2)), int(m.group(4)), l))
nodes = ["scheduler", "server 0", "server 1", "worker 0", "worker 1"]
assert sorted(lines) == nodes, sorted(lines)
for node, ls in lines.items():
    assert [t for t, _, _ in ls] == sorted(t for t, _, _ in ls), node
    assert [f for _, f, _ in ls] == sorted(f for _, f, _ in ls), node
    last = ls[-1][2]
    if node.startswith("worker"):
        assert re.search(r"; pushpull \d+, p50 [0-9.]+ [nmu]s, p99", last), last
        assert re.search(r"; steps \d+, p50 .*communication [0-9.]+%", last), last
    if node.startswith("server"):
        assert re.search(r"; merges \d+ \(.* each\), updates \d+", last), last
print("ok: PS_VERBOSE counters: %s lines; %s" % (
    {k: len(v) for k, v in lines.items()}, lines["worker 0"][-1][2].strip()))
PY
fi

# 2. The trainer: mnist with dist_sync, its timeline and metrics log.
if [ -d "$DATA" ]; then
	if ! run_job 300 "$tmp/out.log" 20 "$B/dtrain" launch -n 2 -s 2 --timeline "$tmp/t2.json" -- \
		"$B/examples/mnist" --kvstore dist_sync --epochs 2 --limit 2560 --disp-batches 5 \
		--data "$DATA" --metrics "$tmp/m.jsonl" --run-label "dist_sync 2w"; then
		fail "mnist with a timeline"
	else
		python3 "$CHECK" "$tmp/t2.json" 5 "forward,backward,step,communication wait,pushpull,queued,merge,optimizer update,reply" \
			|| fail "mnist's timeline"
		python3 "$(dirname "$0")/metrics_check.py" "$tmp/m.jsonl" 2 accuracy "dist_sync 2w" val \
			|| fail "mnist's metrics log"
		python3 - "$tmp/m.jsonl" <<'PY' || fail "mnist's metrics log"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ends = [r for r in rows if r["batch"] == -1]
assert all(0.3 < r["val"] <= 1 for r in ends), ends
print("ok: metrics log: %d lines, validation %s" % (len(rows), [r["val"] for r in ends]))
PY
	fi
else
	echo "skip: mnist's timeline (no data at $DATA; make deps installs it)"
fi

# 3. Collectives: a 3-rank horovod job, the ring (CMA off) so steps show.
if ! run_job 300 "$tmp/out.log" 20 "$B/dtrain" launch -n 3 -s 0 --timeline "$tmp/t3.json" \
	--env DT_COLL_CMA=0 -- "$B/examples/allreduce" ; then
	fail "the horovod job"
else
	python3 "$CHECK" "$tmp/t3.json" 4 "allreduce,ring step,reduce,negotiate,barrier" \
		|| fail "the horovod job's timeline"
fi

# 4. dtrain plot.
if [ -s "$tmp/m.jsonl" ]; then
	printf '%s\n' '{"run":"other","epoch":0,"batch":-1,"samples_per_sec":900,"metric":"accuracy","train":0.5,"val":0.6,"wall_s":2}' \
		'{"run":"other","epoch":1,"batch":-1,"samples_per_sec":950,"metric":"accuracy","train":0.7,"val":0.72,"wall_s":4}' >"$tmp/m2.jsonl"
	if ! "$B/dtrain" plot "$tmp/m.jsonl" "$tmp/m2.jsonl" -o "$tmp/c.svg" >"$tmp/plot.log" 2>&1; then
		cat "$tmp/plot.log"; fail "dtrain plot to SVG"
	else
		python3 -c "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); \
assert r.tag.endswith('svg') and sum(1 for e in r.iter() if e.tag.endswith('polyline')) >= 6; \
assert 'other' in open(sys.argv[1]).read(); print('ok: plot SVG parses, with both runs')" "$tmp/c.svg" \
			|| fail "the plot's SVG"
	fi
	if ! command -v rsvg-convert >/dev/null && [ "$(id -u)" = 0 ]; then
		apt-get install -y -qq --no-install-recommends librsvg2-bin >/dev/null 2>&1 || true
	fi
	if command -v rsvg-convert >/dev/null; then
		if ! "$B/dtrain" plot "$tmp/m.jsonl" "$tmp/m2.jsonl" -o "$tmp/c.png" >"$tmp/plot.log" 2>&1; then
			cat "$tmp/plot.log"; fail "dtrain plot to PNG"
		else
			python3 - "$tmp/c.png" <<'PY' || fail "the plot's PNG is blank"
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat, ihdr = 8, b"", None
while pos < len(b):
    n, t = struct.unpack(">I4s", b[pos:pos + 8])
    if t == b"IHDR":
        ihdr = struct.unpack(">IIBBBBB", b[pos + 8:pos + 21])
    if t == b"IDAT":
        idat += b[pos + 8:pos + 8 + n]
    pos += 12 + n
w, h, depth, ctype = ihdr[:4]
assert depth == 8 and ctype in (2, 6), ihdr
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, colours, dark = bytearray(stride), set(), 0
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        c = prev[i - bpp] if i >= bpp else 0
        p = a + prev[i] - c
        pa, pb, pc = abs(p - a), abs(p - prev[i]), abs(p - c)
        pr = a if pa <= pb and pa <= pc else prev[i] if pb <= pc else c
        line[i] = (line[i] + (0, a, prev[i], (a + prev[i]) // 2, pr)[f]) & 255
    for x in range(0, stride, bpp * 4):
        px = bytes(line[x:x + 3])
        colours.add(px)
        dark += sum(px) < 384
    prev = line
assert len(colours) > 20 and dark > 500, (len(colours), dark)
print("ok: plot PNG %dx%d, %d colours, %d dark pixels sampled" % (w, h, len(colours), dark))
PY
		fi
	else
		echo "skip: the PNG (no rsvg-convert, and not root to install librsvg2-bin)"
	fi
fi
: >"$tmp/empty.jsonl"
out=$("$B/dtrain" plot "$tmp/empty.jsonl" -o "$tmp/x.svg" 2>&1) && fail "an empty log was plotted"
echo "$out" | grep -q "empty.jsonl: no metrics lines" && echo "ok: empty log: $out" \
	|| fail "empty log: '$out'"
printf '%s\n' '{"run":"a","epoch":0,"batch":5,"train":0.5}' '{"run":"a","epoch":0,"batch":' >"$tmp/bad.jsonl"
out=$("$B/dtrain" plot "$tmp/bad.jsonl" -o "$tmp/x.svg" 2>&1) && fail "a malformed log was plotted"
echo "$out" | grep -q "bad.jsonl:2: " && echo "ok: malformed log: $out" || fail "malformed log: '$out'"
printf '%s\n' '{"run":"a","batch":5}' >"$tmp/noepoch.jsonl"
out=$("$B/dtrain" plot "$tmp/noepoch.jsonl" -o "$tmp/x.svg" 2>&1) && fail "a line without epoch was plotted"
echo "$out" | grep -q 'noepoch.jsonl:1: no "epoch"' && echo "ok: no epoch: $out" || fail "no epoch: '$out'"
[ -e "$tmp/x.svg" ] && fail "a failed plot left $tmp/x.svg"

[ $fails = 0 ] && echo "observability: all passed" || echo "observability: $fails failed"
exit $((fails > 0))
