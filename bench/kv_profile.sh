#!/bin/bash
# kv_profile.sh - where a KVStore call's time goes, in the server and in
# the worker of a job of 1 server and 1 worker on this host: perf record
# wraps each of the two processes, and the report keeps only the samples
# of the timed calls (the benchmarks' --starts give their window on the
# monotonic clock, which perf record -k CLOCK_MONOTONIC also uses).
#
#   bench/kv_profile.sh [BUILD_DIR]
#   SHAPES=keys_1e7,1key_1MiB,16key_1MiB (the default; keys_1e5 too)
#   TOP=8 (functions listed per process)  OUT=DIR (perf.data files kept)
#   GRAPH=1 (also record call chains, --call-graph dwarf)
#
#   keys_1e7    kv_sparse_bench: a push of 10^7 one-float keys, dist_sync,
#               no optimizer (ITERS_1E7, default 20 calls)
#   keys_1e5    the same with 10^5 keys (ITERS_1E5, default 2000 calls)
#   1key_1MiB   kv_bench: a push of one key of 1 MiB, the server running
#               sgd lr=1 (ITERS_1MIB, default 3000 calls)
#   16key_1MiB  kv_bench: a push of 16 keys of 1 MiB in one call
#               (ITERS_16MIB, default 300 calls)
#
# For each shape and process it prints the functions with the most
# samples in the window (self time: perf report --no-children --sort
# symbol) and the processor time per call (the samples' cpu-clock time in
# the window over the calls made in it), and the call's median time.
# Needs perf, and leave to profile the processes (root, or
# kernel.perf_event_paranoid at most 1 for the kernel's part).
set -u
BUILD=${1:-${DTRAIN_BUILD:-build}}
here=$(cd "$(dirname "$0")" && pwd)
command -v perf >/dev/null || { echo "kv_profile.sh: no perf" >&2; exit 1; }
for f in "$BUILD/dtrain" "$BUILD/bench/kv_bench" "$BUILD/bench/kv_sparse_bench"; do
	[ -x "$f" ] || { echo "kv_profile.sh: no $f (build it first)" >&2; exit 1; }
done
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dtrain_kv_profile.XXXXXX")}
mkdir -p "$OUT"
SHAPES=${SHAPES:-keys_1e7,1key_1MiB,16key_1MiB}
TOP=${TOP:-8}
GRAPH=${GRAPH:-0}

# The wrapper every process of the job runs: the launcher starts the
# scheduler and the server as "$DTRAIN_EXE scheduler|server" and the
# worker as the command. The server and the worker run under perf record.
cat >"$OUT/wrap.sh" <<'SH'
#!/bin/bash
case "${DMLC_ROLE:-}" in
scheduler) exec "$KVPROF_DTRAIN" "$@" ;;
server) set -- "$KVPROF_DTRAIN" "$@" ;;
esac
g=()
[ "$KVPROF_GRAPH" = 1 ] && g=(--call-graph dwarf,16384)
exec perf record -q -k CLOCK_MONOTONIC -F "${KVPROF_FREQ:-1000}" \
	"${g[@]}" -o "$KVPROF_OUT.$DMLC_ROLE.data" -- "$@"
SH
chmod +x "$OUT/wrap.sh"

run_shape() { # name, bench, args...
	local name=$1 bench=$2
	shift 2
	echo "== $name ($bench $*)"
	KVPROF_OUT="$OUT/$name" KVPROF_GRAPH=$GRAPH \
		KVPROF_DTRAIN=$(realpath "$BUILD/dtrain") DTRAIN_EXE="$OUT/wrap.sh" \
		"$BUILD/dtrain" launch -n 1 -s 1 -- \
		"$OUT/wrap.sh" "$BUILD/bench/$bench" --json --starts "$@" \
		>"$OUT/$name.out" 2>&1 ||
		{ echo "kv_profile.sh: $name failed:" >&2; tail -20 "$OUT/$name.out" >&2; return 1; }
	python3 - "$OUT" "$name" "$TOP" <<'PY'
import json, re, subprocess, sys
out, name, top = sys.argv[1], sys.argv[2], int(sys.argv[3])
js = [json.loads(l[l.index("{"):]) for l in open(f"{out}/{name}.out")
      if l.startswith("[worker 0] {")]
win = [j for j in js if "window" in j or "starts" in j]
res = [j for j in js if j.get("op") == "push"]
if not win or not res:
    sys.exit(f"kv_profile.sh: {name}: no timed window in the output")
w, r = win[0], res[0]
if "window" in w:
    start, end, ms = w["start_s"], w["end_s"], r["p50_us"] / 1e3
    calls = w["calls"]
else:  # kv_sparse_bench: each call's start; the last one lasts the median
    ms = r["ms"]
    start, end = w["us"][0] / 1e6, w["us"][-1] / 1e6 + ms / 1e3
    calls = len(w["us"])
print(f"median {ms:.3f} ms a call; window {end - start:.3f} s")
for role in ("server", "worker"):
    rep = subprocess.run(
        ["perf", "report", "-i", f"{out}/{name}.{role}.data", "--stdio",
         "--no-children", "--sort", "symbol", "--percent-limit", "0.5",
         "--time", f"{start:.6f},{end:.6f}", "-g", "none"],
        capture_output=True, text=True).stdout
    m = re.search(r"Event count \(approx\.\): (\d+)", rep)
    cpu_ms = int(m.group(1)) / 1e6 if m else 0.0
    print(f"  {role}: {cpu_ms:.1f} ms of processor time in the window, "
          f"{cpu_ms / calls:.3f} ms a call ({calls} calls)")
    k = 0
    for line in rep.splitlines():
        f = re.match(r"\s+([0-9.]+)%\s+\[([.k])\]\s+(.*\S)", line)
        if f and k < top:
            k += 1
            print(f"    {float(f.group(1)):5.1f}%  {f.group(3)}"
                  f"{' (kernel)' if f.group(2) == 'k' else ''}")
PY
}

echo "kv_profile.sh: load $(cut -d' ' -f1-3 /proc/loadavg); perf data in $OUT"
for s in ${SHAPES//,/ }; do
	case $s in
	keys_1e7) run_shape keys_1e7 kv_sparse_bench --keys-only --min 10000000 \
		--max 10000000 --ops push --iters "${ITERS_1E7:-20}" ;;
	keys_1e5) run_shape keys_1e5 kv_sparse_bench --keys-only --min 100000 \
		--max 100000 --ops push --iters "${ITERS_1E5:-2000}" ;;
	1key_1MiB) run_shape 1key_1MiB kv_bench --only 1048576:1 --ops push \
		--iters "${ITERS_1MIB:-3000}" ;;
	16key_1MiB) run_shape 16key_1MiB kv_bench --only 16777216:16 --ops push \
		--iters "${ITERS_16MIB:-300}" ;;
	*) echo "kv_profile.sh: SHAPES: $s is not keys_1e7, keys_1e5, 1key_1MiB or 16key_1MiB" >&2
		exit 2 ;;
	esac || exit 1
done
