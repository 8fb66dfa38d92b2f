#!/bin/bash
# pslite_bench.sh - dtrain's KVStore beside ps-lite on this machine, the
# same shapes run alternately (ps-lite, dtrain, ps-lite, ...) REPEAT times
# each, for 1 server x 1 worker and 2 servers x 2 workers:
#
#   keys_1e5   10^5 one-float keys in one call   push, pull, pushpull
#   keys_1e7   10^7 one-float keys in one call   push, pull, pushpull
#   own_1e7    ps-lite's own tests/test_kv_app_benchmark (10^7 one-float
#              keys, one push and one pull, timed once) beside the same
#              dtrain calls
#   1key_4KiB, 1key_64KiB, 1key_1MiB, 1key_16MiB
#              one key of that size              push, pull, pushpull
#   16key_256B, 16key_4KiB, 16key_64KiB, 16key_1MiB
#              16 keys of that size each, one call (4 KiB, 64 KiB,
#              1 MiB and 16 MiB a call: kv_bench's shapes)
#
# dtrain runs build/bench/kv_sparse_bench (many keys; dist_sync, no
# optimizer, and again in dist_async) and build/bench/kv_bench (big keys;
# the servers run sgd lr=1) under `dtrain launch -n W -s S`. ps-lite runs a small driver this
# script writes and compiles against PSLITE_DIR (include/, build/libps.a,
# the system's libzmq and libprotobuf-lite): it times the same calls with
# ps-lite's KVWorker (Push, Pull, PushPull of std::vector), the same
# number of timed calls and warm-ups, and reports rank 0's median. Its
# server answers the many-key shapes as ps-lite's own benchmark does
# (a push is acknowledged, a pull is answered with zeros: the transport
# alone) and adds each push of the big-key shapes into a stored array
# (a pull returns it), as kv_bench's servers do. Differences that remain:
# ps-lite applies every push at once (no round) while dtrain's dist_sync
# answers a push when every worker has pushed that key (dtrain's
# dist_async, the "async" columns, applies and answers each push at
# once, as ps-lite does: the like-for-like figure); ps-lite keeps a
# key whole on one server (range partition: keys are spread as
# kMaxKey/N*i) while dtrain cuts a 1 MiB key over both servers and puts
# small keys on key mod S; dtrain moves bytes through shared memory on
# one host, ps-lite through zmq over TCP (DMLC_LOCAL=1 in the
# environment gives it Unix sockets; the script removes them after each
# job). test_kv_app_benchmark reports each worker's time; the bench
# takes the slowest worker's.
#
#   PSLITE_DIR=/path/to/ps-lite bench/pslite_bench.sh [BUILD_DIR]
#   REPEAT=3  TIMEOUT=300 (seconds one job may take; a ps-lite job that
#   takes longer is run once more)  QUICK=1 (skip 10^7)
#   CELLS=keys_1e5,keys_1e7 (the cells to run; default all)
#   TOPOS=2x2 (servers x workers to run; default 1x1,2x2)
#   ASYNC=0 (skip dtrain's dist_async runs of the many-key cells)
# PSLITE_DIR is a ps-lite checkout built with `make` (build/libps.a and
# tests/test_kv_app_benchmark). Prints the load at start and end, a table
# (medians over the repeats; ratio = ps-lite time / dtrain time, so above
# 1 dtrain is faster), then JSON lines (also in $OUT/pslite_bench.jsonl).
set -u
BUILD=${1:-${DTRAIN_BUILD:-build}}
if [ -z "${PSLITE_DIR:-}" ]; then
	echo "pslite_bench.sh: skipped: set PSLITE_DIR to a built ps-lite" \
		"(github.com/dmlc/ps-lite, make DEPS_PATH=/usr PROTOC=/usr/bin/protoc)" >&2
	exit 0
fi
for f in "$PSLITE_DIR/build/libps.a" "$PSLITE_DIR/include/ps/ps.h" \
	"$PSLITE_DIR/tests/test_kv_app_benchmark" "$BUILD/dtrain" \
	"$BUILD/bench/kv_bench" "$BUILD/bench/kv_sparse_bench"; do
	[ -e "$f" ] || { echo "pslite_bench.sh: no $f (build it first)" >&2; exit 1; }
done
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dtrain_pslite_bench.XXXXXX")}
mkdir -p "$OUT"
CXX=${CXX:-g++}

# The ps-lite side's driver: our own program against ps-lite's public API
# (kept out of the dtrain build, which has no C++). Each shape is
# "keys:len:iters:mode"; mode "sum" stores and adds, "empty" only answers.
cat >"$OUT/pslite_kv.cc" <<'CC'
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>
#include "ps/ps.h"

using namespace ps;

/* A request's cmd carries the shape: floats per key * 2, plus 1 to sum. */
static std::unordered_map<Key, std::vector<float>> store;

static void
handle(const KVMeta &m, const KVPairs<float> &req, KVServer<float> *srv)
{
	size_t len = (size_t)m.cmd / 2, n = req.keys.size();
	bool sum = m.cmd & 1;
	KVPairs<float> res;

	if (m.pull) {
		res.keys = req.keys;
		res.vals.resize(n * len, 0);
	}
	for (size_t i = 0; sum && i < n; i++) {
		std::vector<float> &v = store[req.keys[i]];
		if (v.size() != len)
			v.assign(len, 0);
		if (m.push)
			for (size_t j = 0; j < len; j++)
				v[j] += req.vals[i * len + j];
		if (m.pull)
			memcpy(&res.vals[i * len], v.data(), len * 4);
	}
	srv->Response(m, res);
}

static double
median(std::vector<double> t)
{
	std::sort(t.begin(), t.end());
	return t[t.size() / 2];
}

int
main(int argc, char **argv)
{
	Start(0);
	if (IsServer()) {
		auto server = new KVServer<float>(0);
		server->set_request_handle(handle);
		RegisterExitCallback([server]() { delete server; });
	}
	/* No worker sends before every server has its handler: a request
	 * that came first failed ps-lite's check of it (the server aborted
	 * and the job hung now and then). */
	Postoffice::Get()->Barrier(0, kScheduler + kServerGroup + kWorkerGroup);
	if (IsWorker()) {
		KVWorker<float> kv(0, 0);
		const char *ops[] = {"push", "pull", "pushpull"};
		for (int a = 1; a < argc; a++) {
			size_t n, len;
			int iters;
			char mode[16];
			if (sscanf(argv[a], "%zu:%zu:%d:%15s", &n, &len, &iters,
			           mode) != 4)
				return 2;
			int cmd = (int)len * 2 + (strcmp(mode, "sum") == 0);
			std::vector<Key> keys(n);
			std::vector<float> vals(n * len), out;
			std::vector<int> lens(len > 1 ? n : 0, (int)len);
			for (size_t i = 0; i < n; i++)
				keys[i] = kMaxKey / n * i;
			for (size_t i = 0; i < n * len; i++)
				vals[i] = (float)(i % 7);
			for (int o = 0; o < 3; o++) {
				std::vector<double> t;
				Postoffice::Get()->Barrier(0, kWorkerGroup);
				for (int i = -iters / 10 - 1; i < iters; i++) {
					auto t0 = std::chrono::steady_clock::now();
					out.clear();
					if (o == 0)
						kv.Wait(kv.Push(keys, vals, lens, cmd));
					else if (o == 1)
						kv.Wait(kv.Pull(keys, &out, nullptr, cmd));
					else
						kv.Wait(kv.PushPull(keys, vals, &out,
						                    nullptr, cmd));
					std::chrono::duration<double, std::milli> d =
					    std::chrono::steady_clock::now() - t0;
					if (i >= 0)
						t.push_back(d.count());
				}
				if (MyRank() == 0)
					printf("{\"op\":\"%s\",\"keys\":%zu,\"len\":%zu,"
					       "\"ms\":%.4f}\n",
					       ops[o], n, len, median(t));
				fflush(stdout);
			}
		}
	}
	Finalize(0, true);
	return 0;
}
CC
DRIVER="$OUT/pslite_kv"
if ! "$CXX" -std=c++11 -O2 -pthread -I"$PSLITE_DIR/include" \
	"$OUT/pslite_kv.cc" "$PSLITE_DIR/build/libps.a" -lprotobuf-lite -lzmq \
	-o "$DRIVER" 2>"$OUT/driver_build.log"; then
	echo "pslite_bench.sh: could not build the ps-lite driver:" >&2
	cat "$OUT/driver_build.log" >&2
	exit 1
fi

exec python3 - "$BUILD" "$PSLITE_DIR" "$DRIVER" "$OUT" "${REPEAT:-3}" \
	"${TIMEOUT:-300}" "${QUICK:-0}" "${CELLS:-}" "${TOPOS:-1x1,2x2}" \
	"${ASYNC:-1}" <<'PY'
import json, os, re, signal, socket, stat, statistics, subprocess, sys

build, psdir, driver, out = sys.argv[1:5]
repeat, timeout, quick = int(sys.argv[5]), float(sys.argv[6]), sys.argv[7] == "1"
want = set(sys.argv[8].split(",")) if sys.argv[8] else None
topos = [tuple(int(x) for x in t.split("x")) for t in sys.argv[9].split(",")]
with_async = sys.argv[10] == "1"
MIB = 262144  # floats in 1 MiB
# shape name -> (keys, floats per key, timed calls, ps-lite server mode);
# the calls are those kv_sparse_bench and kv_bench make for the shape.
# The big-key cells are kv_bench's shapes: a call of 4 KiB, 64 KiB, 1 MiB
# or 16 MiB in 1 key or in 16, with kv_bench's count of timed calls for
# the size (3000 up to 4 KiB, 300 up to 1 MiB, 40 above).
shapes = {"keys_1e5": (100000, 1, 30, "empty"),
          "keys_1e7": (10000000, 1, 5, "empty"),
          "1key_4KiB": (1, 1024, 3000, "sum"),
          "16key_256B": (16, 64, 3000, "sum"),
          "1key_64KiB": (1, 16384, 300, "sum"),
          "16key_4KiB": (16, 1024, 300, "sum"),
          "1key_1MiB": (1, MIB, 300, "sum"),
          "16key_64KiB": (16, 16384, 300, "sum"),
          "1key_16MiB": (1, 16 * MIB, 40, "sum"),
          "16key_1MiB": (16, MIB, 40, "sum")}
if quick:
    del shapes["keys_1e7"]
known = set(shapes) | {"own_1e7"}
if want is not None and not want <= known:
    sys.exit(f"pslite_bench.sh: CELLS: {','.join(sorted(want - known))} "
             f"is not one of {','.join(sorted(known))}")
cells = [c for c in list(shapes) + ([] if quick else ["own_1e7"])
         if want is None or c in want]
shapes = {c: v for c, v in shapes.items() if c in cells}
res = {}  # (topo, cell, op, side) -> [ms, ...]


def load():
    return open("/proc/loadavg").read().split()[:3]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def ipc_sockets():
    """With DMLC_LOCAL=1 ps-lite's nodes listen on Unix sockets named
    /tmp/<port> and leave them behind: the set of such sockets of ours."""
    found = set()
    for n in os.listdir("/tmp") if os.environ.get("DMLC_LOCAL") else ():
        try:
            st = os.lstat("/tmp/" + n)
        except OSError:
            continue
        if n.isdigit() and stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid():
            found.add(n)
    return found


def run_pslite(s, w, argv):
    """run_pslite_once, again (on a new port) if it did not end in time:
    a ps-lite job here has been seen to hang now and then."""
    try:
        return run_pslite_once(s, w, argv)
    except subprocess.TimeoutExpired:
        print(f"  ps-lite job {os.path.basename(argv[0])} took over "
              f"{timeout:.0f} s; once more", flush=True)
        return run_pslite_once(s, w, argv)


def run_pslite_once(s, w, argv):
    """Scheduler, s servers and w workers of argv, as ps-lite's local.sh
    starts them; returns the workers' output (stdout and stderr)."""
    before = ipc_sockets()
    env = dict(os.environ, DMLC_NUM_SERVER=str(s), DMLC_NUM_WORKER=str(w),
               DMLC_PS_ROOT_URI="127.0.0.1", DMLC_NODE_HOST="127.0.0.1",
               DMLC_PS_ROOT_PORT=str(free_port()))
    procs = []
    try:
        for role, n in (("scheduler", 1), ("server", s), ("worker", w)):
            for _ in range(n):
                procs.append((role, subprocess.Popen(
                    argv, env=dict(env, DMLC_ROLE=role), text=True,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    start_new_session=True)))
        outs = []
        for role, p in procs:
            o, _ = p.communicate(timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"ps-lite {role} exited {p.returncode}: {o[-2000:]}")
            if role == "worker":
                outs.append(o)
        return outs
    finally:
        for _, p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for n in ipc_sockets() - before:
            os.unlink("/tmp/" + n)


def run_dtrain(s, w, prog, args):
    argv = [f"{build}/dtrain", "launch", "-n", str(w), "-s", str(s), "--",
            f"{build}/bench/{prog}", "--json", *args]
    p = subprocess.run(argv, text=True, capture_output=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr[-2000:]}")
    # The launcher prefixes each line with its process ("[worker 0] ").
    return [json.loads(l[l.index("{"):]) for l in p.stdout.splitlines()
            if l.startswith("[worker 0] {")]


def add(topo, cell, op, side, ms):
    res.setdefault((topo, cell, op, side), []).append(ms)


def pslite_round(topo):
    s, w = topo
    args = [f"{n}:{l}:{i}:{m}" for n, l, i, m in shapes.values()]
    o = "\n".join(run_pslite(s, w, [driver, *args])) if args else ""
    names = {(n, l): c for c, (n, l, _, _) in shapes.items()}
    for line in o.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            add(topo, names[(j["keys"], j["len"])], j["op"], "pslite", j["ms"])
    if "own_1e7" not in cells:
        return
    outs = run_pslite(s, w, [f"{psdir}/tests/test_kv_app_benchmark"])
    for op in ("Push", "Pull"):
        t = [float(m) for o in outs for m in
             re.findall(op + r" average time cost: ([0-9.]+)ms", o)]
        if len(t) != w:
            raise RuntimeError(f"test_kv_app_benchmark: {len(t)} {op} times of {w}")
        add(topo, "own_1e7", op.lower(), "pslite", max(t))


def dtrain_many(topo, side, args):
    """kv_sparse_bench's sizes of the many-key cells chosen."""
    sizes = [n for c, (n, l, _, _) in shapes.items() if l == 1]
    if "own_1e7" in cells:
        sizes.append(10000000)
    if not sizes:
        return
    for j in run_dtrain(*topo, "kv_sparse_bench",
                        ["--keys-only", "--min", str(min(sizes)), "--max",
                         str(max(sizes)), *args]):
        n = j.get("keys")
        for c, (k, l, _, _) in shapes.items():
            if l == 1 and n == k and "op" in j:
                add(topo, c, j["op"], side, j["ms"])
        if "own_1e7" in cells and n == 10000000 and j.get("op") in ("push", "pull"):
            add(topo, "own_1e7", j["op"], side, j["ms"])


def dtrain_round(topo):
    s, w = topo
    dtrain_many(topo, "dtrain", [])
    if with_async:
        dtrain_many(topo, "async", ["--async"])
    for c, (n, l, _, _) in shapes.items():
        if l == 1:
            continue
        for j in run_dtrain(s, w, "kv_bench", ["--only", f"{n * l * 4}:{n}"]):
            if j.get("bytes") == n * l * 4 and j.get("keys") == n:
                add(topo, c, j["op"], "dtrain", j["p50_us"] / 1e3)


print(f"pslite_bench.sh: {os.cpu_count()} processors; load at start "
      f"{' '.join(load())}; {repeat} runs each side, alternating", flush=True)
for r in range(repeat):
    for topo in topos:
        for side, fn in (("pslite", pslite_round), ("dtrain", dtrain_round)):
            try:
                fn(topo)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                sys.exit(f"pslite_bench.sh: {side} with {topo[0]} servers "
                         f"and {topo[1]} workers failed: {e}")
            print(f"  run {r + 1}/{repeat} {topo[0]}s{topo[1]}w {side} done "
                  f"(load {load()[0]})", flush=True)
print(f"load at end {' '.join(load())}\n")
print("dtrain: dist_sync (a push answered when every worker pushed); async: "
      "dtrain's dist_async (each push applied and answered at once, as "
      "ps-lite does)")
print(f"{'servers x workers':<18} {'cell':<11} {'op':<9} {'ps-lite ms':>11} "
      f"{'dtrain ms':>10} {'ratio':>6} {'async ms':>9} {'ratio':>6}")
lines = []
for topo in topos:
    for c in cells:
        for op in ("push", "pull", "pushpull"):
            p = res.get((topo, c, op, "pslite"))
            d = res.get((topo, c, op, "dtrain"))
            if not p or not d:
                continue
            pm, dm = statistics.median(p), statistics.median(d)
            a = res.get((topo, c, op, "async"))
            am = statistics.median(a) if a else None
            tail = f" {am:>9.3f} {pm / am:>6.2f}" if a else ""
            print(f"{f'{topo[0]} x {topo[1]}':<18} {c:<11} {op:<9} "
                  f"{pm:>11.3f} {dm:>10.3f} {pm / dm:>6.2f}{tail}")
            j = {"bench": "pslite", "servers": topo[0], "workers": topo[1],
                 "cell": c, "op": op, "pslite_ms": round(pm, 4),
                 "dtrain_ms": round(dm, 4), "ratio": round(pm / dm, 3),
                 "pslite_runs": [round(x, 4) for x in p],
                 "dtrain_runs": [round(x, 4) for x in d]}
            if a:
                j.update({"async_ms": round(am, 4),
                          "async_ratio": round(pm / am, 3),
                          "async_runs": [round(x, 4) for x in a]})
            lines.append(json.dumps(j))
print()
with open(f"{out}/pslite_bench.jsonl", "w") as f:
    for l in lines:
        print(l)
        f.write(l + "\n")
PY
