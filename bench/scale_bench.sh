#!/bin/bash
# scale_bench.sh - how a job of many real processes boots on this machine:
# for each size W+S, `dtrain launch --launcher local -n W -s S` runs
# build/bench/scale_join (join, hold, one barrier, leave) and the bench
# reports
#   boot_s     launch to the moment every worker has passed the start-up
#              barrier over all nodes (the last "up" line's wall clock);
#   sched_cpu_s the scheduler process's CPU time up to then;
#   sched_b_node the bytes the scheduler sent up to then on its TCP
#              connections (each socket's bytes_sent, from `ss -tie`: the
#              handshake's 72 bytes, every frame, heartbeats and barriers
#              included), divided by the count of servers and workers;
#   conns      connections between the job's processes, counted once
#              all are up (TCP and same-host sockets whose both ends are
#              in the job, listeners left out);
#   fd_max     the most descriptors one process holds then, and fd_sched
#              the scheduler's;
#   total_s    launch to the launcher's exit, and the job's exit status.
#
#   bench/scale_bench.sh [BUILD_DIR] [W+S ...]
#       (default sizes: 64+8 128+32 256+16 1024+32)
#
# Each job gets TIMEOUT seconds (default 240) to boot, and as long again
# to leave once counted, before it is stopped and reported as failed with
# its first error line (census_s: how long the count took). The bench raises the soft
# and hard descriptor limits (ulimit -n) to NOFILE (default 1048576, the
# kernel's fs.nr_open here; it needs the privilege to raise a hard limit,
# else it keeps the hard limit there is) and says what it set.
# Prints a table, then JSON lines (also kept in $OUT/scale_bench.jsonl).
set -u
BUILD=${1:-${DTRAIN_BUILD:-build}}
shift || true
SIZES=${*:-64+8 128+32 256+16 1024+32}
TIMEOUT=${TIMEOUT:-240}
NOFILE=${NOFILE:-$(cat /proc/sys/fs/nr_open 2>/dev/null || echo 65536)}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dtrain_scale_bench.XXXXXX")}
mkdir -p "$OUT"
for f in "$BUILD/dtrain" "$BUILD/bench/scale_join"; do
	[ -x "$f" ] || { echo "scale_bench.sh: no $f (build first)" >&2; exit 1; }
done
ulimit -Hn "$NOFILE" 2>/dev/null || true
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "scale_bench.sh: ulimit -n $(ulimit -n) (hard $(ulimit -Hn));" \
	"$(nproc) processors; load $(cut -d' ' -f1-3 /proc/loadavg)"
exec python3 - "$BUILD" "$OUT" "$TIMEOUT" $SIZES <<'PY'
import json, os, re, signal, subprocess, sys, time

build, out, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
sizes = [tuple(int(x) for x in s.split("+")) for s in sys.argv[4:]]
tick = os.sysconf("SC_CLK_TCK")


def children(pid):
    """Every descendant of pid, through /proc/<pid>/task/*/children."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    for c in f.read().split():
                        seen.append(int(c))
                        todo.append(int(c))
        except OSError:
            pass
    return seen


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        st = f.read().rsplit(")", 1)[1].split()
    return (int(st[11]) + int(st[12])) / tick


def tcp_sent(inodes):
    """The bytes sent so far on the TCP sockets of these inodes (ss -tie:
    a socket's line names its inode, the next one its counters)."""
    try:
        text = subprocess.run(["ss", "-tinHe"], capture_output=True,
                              text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    total, ino = 0, None
    for ln in text.split("\n"):
        if not ln.startswith((" ", "\t")):
            m = re.search(r"\bino:(\d+)", ln)
            ino = int(m.group(1)) if m else None
            continue
        m = re.search(r"\bbytes_sent:(\d+)", ln)
        if m and ino in inodes:
            total += int(m.group(1))
    return total


def sockets_of(pid):
    """The socket inodes pid holds, and its count of descriptors."""
    socks, nfd = set(), 0
    d = f"/proc/{pid}/fd"
    try:
        names = os.listdir(d)
    except OSError:
        return socks, 0
    for fd in names:
        nfd += 1
        try:
            t = os.readlink(f"{d}/{fd}")
        except OSError:
            continue
        if t.startswith("socket:["):
            socks.add(int(t[8:-1]))
    return socks, nfd


def listeners():
    """Inodes of listening sockets (TCP state 0A, Unix flag __SO_ACCEPTCON)."""
    ino = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/net/{name}") as f:
                next(f)
                for ln in f:
                    p = ln.split()
                    if p[3] == "0A":
                        ino.add(int(p[9]))
        except OSError:
            pass
    try:
        with open("/proc/net/unix") as f:
            next(f)
            for ln in f:
                p = ln.split()
                if int(p[3], 16) & 0x10000:
                    ino.add(int(p[6]))
    except OSError:
        pass
    return ino


def is_scheduler(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"DMLC_ROLE=scheduler" in f.read().split(b"\0")
    except OSError:
        return False


def census(launcher):
    """Connections inside the job, descriptors per process, and the
    scheduler's CPU time so far."""
    pids = [launcher] + children(launcher)
    owner, fd_max, fd_sched, cpu, wrote = {}, 0, 0, None, None
    # (the scheduler's figures first: the count of the others may take
    # long, and heartbeats go on meanwhile)
    for p in pids:
        if p != launcher and is_scheduler(p):
            cpu, wrote = cpu_s(p), tcp_sent(sockets_of(p)[0])
    for p in pids:
        s, n = sockets_of(p)
        fd_max = max(fd_max, n)
        if p != launcher and is_scheduler(p):
            fd_sched = n
        for i in s:
            owner.setdefault(i, set()).add(p)
    lis = listeners()
    ends = sum(1 for i in owner if i not in lis)
    # A connection between two processes of the job is two socket inodes
    # here, one in each; a socket passed to both ends counts once.
    return {"conns": ends // 2, "fd_max": fd_max, "fd_sched": fd_sched,
            "sched_cpu_s": cpu, "sched_sent": wrote, "procs": len(pids)}


def run(w, s):
    hold = os.path.join(out, f"go.{w}.{s}")
    if os.path.exists(hold):
        os.unlink(hold)
    env = dict(os.environ, SCALE_HOLD_FILE=hold)
    log = open(os.path.join(out, f"job.{w}.{s}.log"), "w+")
    t0 = time.time()
    p = subprocess.Popen([f"{build}/dtrain", "launch", "--launcher",
                          "local", "-n", str(w), "-s", str(s), "--",
                          f"{build}/bench/scale_join"],
                         stdout=subprocess.PIPE, stderr=log, env=env,
                         start_new_session=True,
                         preexec_fn=lambda: os.setpriority(
                             os.PRIO_PROCESS, 0, prio))
    up, last, res = 0, None, {}
    os.set_blocking(p.stdout.fileno(), False)
    buf = ""
    # TIMEOUT to boot, and as long again to leave once counted.
    end = t0 + timeout
    while time.time() < end:
        try:
            chunk = os.read(p.stdout.fileno(), 1 << 16)
        except BlockingIOError:
            chunk = b""
        if chunk:
            buf += chunk.decode(errors="replace")
            *lines, buf = buf.split("\n")
            for ln in lines:
                f = ln.split()
                # "[worker 3] up 3 <ns>"
                if len(f) >= 5 and f[2] == "up":
                    up += 1
                    last = max(last or 0, int(f[4]) / 1e9)
            if up == w and not res:
                res = census(p.pid)
                if res.get("sched_sent") is not None:
                    res["sched_b_node"] = res["sched_sent"] // (w + s)
                res["census_s"] = round(time.time() - t0 - (last - t0), 1)
                open(hold, "w").close()
                end = time.time() + timeout
        if not chunk and p.poll() is not None:
            break
        time.sleep(0.05)
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        rc = "timeout"
    else:
        rc = p.returncode
    total = time.time() - t0
    if os.path.exists(hold):
        os.unlink(hold)
    log.seek(0)
    lines = [ln.strip() for ln in log if ln.strip()]
    err = next((ln for ln in lines if "error" in ln.lower()
                or "timed out" in ln or "cannot" in ln),
               lines[0] if lines else "")
    log.close()
    o = {"bench": "scale", "workers": w, "servers": s, "up": up,
         "boot_s": round(last - t0, 2) if up == w else None,
         "total_s": round(total, 2), "exit": rc}
    o.update(res)
    if rc != 0:
        o["error"] = err[:300]
    return o


# The count runs while the job is up, and an idle job of hundreds of
# processes may fill every processor: the bench asks for a higher
# priority (as root) so that its count is not starved.
# (the job itself runs at the priority the bench was started with)
prio = os.getpriority(os.PRIO_PROCESS, 0)
try:
    os.setpriority(os.PRIO_PROCESS, 0, -10)
except OSError:
    pass
rows = []
with open(os.path.join(out, "scale_bench.jsonl"), "w") as jf:
    for w, s in sizes:
        o = run(w, s)
        rows.append(o)
        jf.write(json.dumps(o) + "\n")
        jf.flush()
        print(json.dumps(o), file=sys.stderr, flush=True)
print("%6s %5s %8s %9s %12s %8s %7s %8s %8s %s" % ("W", "S", "boot s",
      "sched cpu", "sched B/node", "conns", "fd max", "fd sched", "total s",
      "exit"))
for o in rows:
    f = lambda k, fmt: (fmt % o[k]) if o.get(k) is not None else "-"
    print("%6d %5d %8s %9s %12s %8s %7s %8s %8s %s" % (
        o["workers"], o["servers"], f("boot_s", "%.2f"),
        f("sched_cpu_s", "%.2f"), f("sched_b_node", "%d"), f("conns", "%d"),
        f("fd_max", "%d"),
        f("fd_sched", "%d"), f("total_s", "%.1f"), o["exit"]))
    if o.get("error"):
        print("       %s" % o["error"])
print()
for o in rows:
    print(json.dumps(o))
PY
