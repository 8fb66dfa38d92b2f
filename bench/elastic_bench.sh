#!/bin/bash
# elastic_bench.sh - how fast an elastic job (docs/elastic.md) goes on
# after a change of membership, on this machine: for each number of
# workers N, `dtrain launch -n N -s 0 --min-workers N-1` runs
# examples/mnist --elastic (LeNet by default, a commit every K steps);
# half a commit interval after the job has committed step 2K, one worker
# is killed (SIGKILL) and the bench reports
#   detect_s   from the kill to the survivors' first word of it (the
#              launcher's or the scheduler's "was lost" line);
#   resume_s   from the kill to the survivors' first committed step after
#              it (the step they went back to, committed again by the new
#              membership: training goes on from there);
#   redone     the steps trained since the last commit and trained again
#              after the change (at most K);
# then stops the job. A second job of N workers (--max-workers N+1) gets a
# slot more from its --host-discovery-script once it has committed step
# 2K, and the bench reports
#   admit_s    from the launcher's start of the new worker to the members'
#              word that it joined (it asks to join, loads the data, and is
#              taken in at the members' next step or commit);
#   join_s     from its start to the first step committed with it;
#   asked_s    from its start to the scheduler's word that it asks to join;
#   ready_s    from its start to its word that it has loaded the data and
#              set up the model (it is then ready for the members' state);
#   load_s     the training set's load, as the new worker timed it, and
#   load_from  whether it was mapped from the host's data cache or decoded.
# The data cache (docs/training.md) is on unless DTRAIN_DATA_CACHE=0: the
# first job's workers decode Fashion-MNIST and write it, later processes
# map it.
# Both measurements run in two modes (MODES, default both): "coll", the
# workers alone (--kvstore horovod), and "ps", with 2 parameter servers
# (-s 2, --kvstore dist_sync).
# Times are read from the job's output as it comes
# (a line's time is when the bench read it), so they include the
# output's way through the launcher: an upper bound.
#
#   bench/elastic_bench.sh [BUILD_DIR] [N ...]      (default N: 4 8 16)
#   MODEL=lenet K=10 BATCH=32 DATA=/usr/share/datasets/fashion-mnist
#   TIMEOUT=300 (seconds a job may take to reach step 2K)
#   MODES="coll ps"  RUNS="kill join" (which measurements to make)
# Prints a table, then JSON lines (also kept in $OUT/elastic_bench.jsonl).
set -u
BUILD=${1:-${DTRAIN_BUILD:-build}}
shift || true
SIZES=${*:-4 8 16}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dtrain_elastic_bench.XXXXXX")}
DATA=${DATA:-${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}}
mkdir -p "$OUT"
for f in "$BUILD/dtrain" "$BUILD/examples/mnist"; do
	[ -x "$f" ] || { echo "elastic_bench.sh: no $f (build first)" >&2; exit 1; }
done
[ -e "$DATA/train-images-idx3-ubyte.gz" ] || [ -e "$DATA/train-images-idx3-ubyte" ] ||
	{ echo "elastic_bench.sh: no Fashion-MNIST in $DATA (Debian's dataset-fashion-mnist)" >&2; exit 1; }
echo "elastic_bench.sh: $(nproc) processors; load $(cut -d' ' -f1-3 /proc/loadavg);" \
	"model ${MODEL:-lenet}, a commit every ${K:-10} steps, batch ${BATCH:-32};" \
	"data cache: ${DTRAIN_DATA_CACHE-(default)}"
exec /usr/bin/python3 - "$BUILD" "$OUT" "$DATA" "${MODEL:-lenet}" "${K:-10}" \
	"${BATCH:-32}" "${TIMEOUT:-300}" "${MODES:-coll ps}" \
	"${RUNS:-kill join}" $SIZES <<'PY'
import json, os, re, signal, subprocess, sys, threading, time

build, out, data, model = sys.argv[1:5]
k, batch, timeout = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
modes, runs = sys.argv[8].split(), sys.argv[9].split()
sizes = [int(s) for s in sys.argv[10:]]


class Job:
    """A launch whose output lines are kept with the time each was read."""

    def __init__(self, n, mode, log, extra=()):
        ps = mode == "ps"
        args = [f"{build}/dtrain", "launch", "-v", "-n", str(n),
                "-s", "2" if ps else "0",
                "--min-workers", str(n - 1), *extra, "--",
                f"{build}/examples/mnist",
                "--kvstore", "dist_sync" if ps else "horovod",
                "--optimizer", "sgd", "--lr", "0.05", "--elastic",
                "--model", model, "--batch-size", str(batch),
                "--commit-every", str(k), "--epochs", "1000",
                "--data", data]
        self.lines = []
        self.cv = threading.Condition()
        self.log = open(log, "w")
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            t = time.monotonic()
            self.log.write(f"{t:.6f} {line}")
            with self.cv:
                self.lines.append((t, line.rstrip("\n")))
                self.cv.notify_all()
        with self.cv:
            self.lines.append((time.monotonic(), None))
            self.cv.notify_all()

    def wait_for(self, pattern, after=0.0, deadline=60.0):
        """The first line read after `after` matching pattern: (time, match)."""
        rx = re.compile(pattern)
        end = time.monotonic() + deadline
        i = 0
        with self.cv:
            while True:
                while i < len(self.lines):
                    t, line = self.lines[i]
                    i += 1
                    if line is None:
                        return None, None
                    m = rx.search(line)
                    if t >= after and m:
                        return t, m
                left = end - time.monotonic()
                if left <= 0:
                    return None, None
                self.cv.wait(left)

    def stop(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        # (the reader writes the log until the job's output ends)
        self.reader.join(60)
        self.log.close()


def join_run(n, mode, row):
    """A worker added by the discovery script: from its start (the
    launcher's line) to the members' word that it joined, and to the
    first committed step after it."""
    hosts = f"{out}/hosts_{n}"
    with open(hosts, "w") as f:
        f.write(f"a:{n}\n")
    job = Job(n, mode, f"{out}/grow_{mode}_{n}.log",
              ("--max-workers", str(n + 1),
               "--host-discovery-script", f"cat {hosts}"))
    try:
        t, _ = job.wait_for(rf"committed step {2 * k}$", deadline=timeout)
        if t is None:
            row["join_error"] = f"step {2 * k} was not committed"
            return
        with open(hosts + ".new", "w") as f:
            f.write(f"a:{n}\nb:1\n")
        os.rename(hosts + ".new", hosts)
        ts, _ = job.wait_for(r"host b has a free slot: started", deadline=60)
        tj, _ = job.wait_for(rf"membership \d+ has {n + 1} workers",
                             after=ts or 0, deadline=120)
        if ts is None or tj is None:
            row["join_error"] = "the new worker was not taken in"
            return
        ta, _ = job.wait_for(r"joins the running elastic job", after=ts,
                             deadline=1)
        tl, ml = job.wait_for(r"mnist: joining the running job: the "
                              r"training set loaded in ([0-9.]+) s \(([a-z]+)",
                              after=ts, deadline=1)
        if ta is not None:
            row["join_asked_s"] = round(ta - ts, 4)
        if tl is not None:
            row["join_ready_s"] = round(tl - ts, 4)
            row["join_load_s"] = float(ml.group(1))
            row["join_load_from"] = ("cache" if ml.group(2) == "mapped"
                                     else ml.group(2))
        tc, _ = job.wait_for(r"mnist: committed step \d+$", after=tj,
                             deadline=120)
        row["join_admitted_s"] = round(tj - ts, 4)
        if tc is not None:
            row["join_s"] = round(tc - ts, 4)
    finally:
        job.stop()


def kill_run(n, mode, row):
    """A worker killed half a commit interval after step 2K's commit."""
    job = Job(n, mode, f"{out}/shrink_{mode}_{n}.log")
    try:
        t1, _ = job.wait_for(rf"committed step {k}$", deadline=timeout)
        t2, _ = job.wait_for(rf"committed step {2 * k}$", deadline=timeout)
        if t1 is None or t2 is None:
            row["error"] = f"step {2 * k} was not committed in {timeout:g} s"
            raise RuntimeError
        # The kill comes half a commit interval after step 2K's commit
        # (as measured between the first two), as a loss would on average.
        time.sleep((t2 - t1) / 2)
        t, m = job.wait_for(r"started worker 1 \(pid (\d+)\)", deadline=1)
        if t is None:
            row["error"] = "worker 1's pid is not in the launcher's output"
            raise RuntimeError
        t_kill = time.monotonic()
        os.kill(int(m.group(1)), signal.SIGKILL)
        td, _ = job.wait_for(r"was lost|goes on without it", after=t_kill,
                             deadline=60)
        tr, mr = job.wait_for(r"mnist: committed step (\d+)$", after=t_kill,
                              deadline=120)
        ts, ms = job.wait_for(r"mnist: back to the commit of step \d+: "
                              r"(\d+) steps to train again", after=t_kill,
                              deadline=1)
        if td is None or tr is None:
            row["error"] = "the survivors did not go on within 120 s"
            raise RuntimeError
        row["detect_s"] = round(td - t_kill, 4)
        row["resume_s"] = round(tr - t_kill, 4)
        row["resumed_at_step"] = int(mr.group(1))
        if ms is not None:
            row["redone"] = int(ms.group(1))
    except RuntimeError:
        pass
    finally:
        job.stop()


rows = []
for mode in modes:
    for n in sizes:
        row = {"bench": "elastic", "mode": mode, "workers": n,
               "model": model, "commit_every": k, "batch": batch}
        if "kill" in runs:
            kill_run(n, mode, row)
        if "join" in runs:
            join_run(n, mode, row)
        rows.append(row)

def cell(r, name, fmt="{:.3f}"):
    return fmt.format(r[name]) if name in r else "-"


print(f"{'mode':>4} {'workers':>7} {'detect_s':>9} {'resume_s':>9} {'at_step':>8} "
      f"{'redone':>7} {'admit_s':>8} {'join_s':>7} {'asked_s':>8} "
      f"{'ready_s':>8} {'load_s':>7} {'load_from':>9}")
for r in rows:
    if "error" in r:
        print(f"{r['mode']:>4} {r['workers']:>7} failed: {r['error']}")
    else:
        print(f"{r['mode']:>4} {r['workers']:>7} {cell(r, 'detect_s'):>9} "
              f"{cell(r, 'resume_s'):>9} {cell(r, 'resumed_at_step', '{}'):>8} "
              f"{cell(r, 'redone', '{}'):>7} {cell(r, 'join_admitted_s'):>8} "
              f"{cell(r, 'join_s'):>7} {cell(r, 'join_asked_s'):>8} "
              f"{cell(r, 'join_ready_s'):>8} {cell(r, 'join_load_s'):>7} "
              f"{cell(r, 'join_load_from', '{}'):>9}")
    if "join_error" in r:
        print(f"{r['mode']:>4} {r['workers']:>7} join failed: {r['join_error']}")
with open(f"{out}/elastic_bench.jsonl", "w") as f:
    for r in rows:
        line = json.dumps(r)
        print(line)
        f.write(line + "\n")
print(f"(logs in {out})")
PY
