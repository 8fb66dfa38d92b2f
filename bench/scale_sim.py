"""scale_sim.py - the driver of bench/scale_sim.sh (run it through that
script, which sets the descriptor limit first).

For each size W+S it starts one real scheduler (`dtrain scheduler`, port
0) and P processes of build/bench/scale_sim, each running M real nodes
(P = ceil((W+S) / PER_PROC)), each process's nodes listening on a
loopback address of its own (127.0.0.2, .3, ...). It walks them through
the phases together, one "go" line per phase on their input: join (up to
the start-up barrier over every node), BARRIERS barriers, and leaving.
Between phases, with every node held, it reads the scheduler's CPU time
(the sum of its threads' /proc/<pid>/task/*/schedstat; its rusage once
it has exited) and the simulators' memory, threads, descriptors and
sockets (/proc), and prints per phase:

  wall_s      the first node entering the phase to the last one out;
  spread_s    the first node entering to the last one entering;
  sched_cpu_s the scheduler's CPU time in the phase;
  busy        the share of the machine's processor time that was not
              idle during the phase (every process's, /proc/stat, 10 ms
              ticks): near 1, the machine was full and the wall time
              measures this box, not the protocol;
  rx_b/node, rx_m/node, tx_m/node
              bytes and frames each node received from the scheduler,
              and frames it sent it (the nodes' own counters, heartbeats
              not counted);
  sched_cs    the scheduler's context switches in the phase, over its
              threads (voluntary and not: a thread that slept and was
              woken, or was put off the processor);
  sched_threads
              the same two per thread of the scheduler, by name (its
              main thread "dtrain" sends the assignments; "dt-hs" accepts
              and answers the handshakes; "dt-io" reads and closes), in
              the JSON line, and for the join under the table;
  root_msgs   the messages the scheduler sent and received in the phase,
              all nodes together (the same counters): a barrier's 2N
              with the star, 2 x (the root's children) over the control
              tree;
  p50_ms, p99_ms
              each node's time in the phase, across nodes;
  model_s     spread + depth x (RTT_US + k x c): with the star, depth 1
              and k = N, c the scheduler's CPU per node in the phase (so
              k x c is its CPU time); over the control tree (from
              DTRAIN_CTRL_TREE_MIN nodes, 256), the tree's depth and its
              most children of one node (the same rule as the scheduler's,
              src/core/tree.c, from the ids the nodes report and their
              processes' addresses as hosts), c the scheduler's CPU per
              message it handled: what the phase would take on a cluster
              of one node per host.

and per size the memory (RSS growth since the processes started, before
any node), descriptors and threads per node (every thread of the
simulators, the nodes' driver threads included), sims cpu: the
simulators' processor time from their start to the last barrier's end,
lib thr: the most
threads the library added to one simulator (its threads once its nodes
joined, less those it had before: 3 per node, or 3 in all on the shared
loops, DT_SHARED_LOOP=1, the simulator's default), and the sockets against
those the nodes' partners explain (each node: its listener and its
connection to the scheduler; a worker: one per server; a server: one per
worker; over the control tree, one for each link between a node and its
parent of the same role), and root hb/s: the heartbeats the scheduler
received a second from the end of the start-up barrier to its own end
(the last line of its log about them): one a PS_HEARTBEAT_INTERVAL from
every node with the star, from its children alone over the control tree;
and the messages of the end at the scheduler (its line at the end): a
WORKER_DONE from every worker and a TERMINATE to every server with the
star, over the tree one WORKER_DONE from each child holding workers and
a TERMINATE to each child holding servers.
Tables on standard output, then JSON lines (also in
$OUT/scale_sim.jsonl).

STOP_ONE=1 (the test's mode): after the join, SIGSTOP the last
simulator, release the first barrier to the others, and time how long
the scheduler takes to end the job; then SIGCONT it, close its input,
and check that every process ends.
"""
import json
import math
import re
import os
import secrets
import selectors
import signal
import subprocess
import sys
import threading
import time

build, out = sys.argv[1], sys.argv[2]
sizes = [tuple(int(x) for x in s.split("+")) if "+" in s else (int(s), 0)
         for s in sys.argv[3:]]
env_int = lambda k, d: int(os.environ.get(k, d))
PER_PROC = env_int("PER_PROC", 250)
PROCS = env_int("PROCS", 0)
BARRIERS = env_int("BARRIERS", 3)
TIMEOUT = float(os.environ.get("TIMEOUT", 300))
RTT_US = float(os.environ.get("RTT_US", 50))
STOP_ONE = env_int("STOP_ONE", 0)
# seconds every node is held idle before each barrier (heartbeats only)
HOLD_S = float(os.environ.get("HOLD_S", 0))
SIM_IDLE = env_int("SIM_IDLE", 0)
JOIN_RATE = float(os.environ.get("JOIN_RATE", 0))
TREE_MIN = env_int("DTRAIN_CTRL_TREE_MIN", 256)
ARITY = env_int("DTRAIN_CTRL_ARITY", 16)
TICK = os.sysconf("SC_CLK_TCK")


def task_cpu_ns(pid, ticks=False):
    """pid's CPU time (ns): the sum of its live threads' schedstat, or
    /proc/<pid>/stat's ticks when none is left or `ticks` (the clock of
    its rusage once it has exited)."""
    tot = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                    tot += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        ticks_ns = (int(st[11]) + int(st[12])) * 1000000000 // TICK
    except OSError:
        return None
    # (the threads' own clocks while any live: the ticks are 10 ms
    # coarse; the ticks once they have ended)
    return tot if tot and not ticks else ticks_ns


def task_switches(pid):
    """pid's context switches so far, voluntary and not, over its live
    threads (None once it has exited)."""
    tot = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/status") as f:
                    for ln in f:
                        if "ctxt_switches:" in ln:
                            tot += int(ln.split()[-1])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        return None
    return tot


def task_threads(pid):
    """pid's live threads by name: {name: [CPU ns, context switches]}, the
    threads of one name summed (the scheduler's: dtrain, its main thread
    that sends the assignments, dt-io and dt-hs)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                cpu = int(f.read().split()[0])
            cs = 0
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for ln in f:
                    if "ctxt_switches:" in ln:
                        cs += int(ln.split()[-1])
        except (OSError, ValueError, IndexError):
            continue
        o = out.setdefault(name, [0, 0])
        o[0] += cpu
        o[1] += cs
    return out


def task_fds(pid):
    """pid's open descriptors (None once it has exited)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


class FdPeak:
    """The most descriptors pid held while it runs: sampled every 50 ms
    on a thread of its own (a join's peak, which the readings between the
    phases miss)."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            k = task_fds(self.pid)
            if k is None:
                return
            self.peak = max(self.peak, k)
            self.stop.wait(0.05)

    def done(self):
        self.stop.set()
        self.t.join()
        return self.peak


def thread_wchans(pid):
    """Where each thread of pid sleeps in the kernel, with a count."""
    seen = {}
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/wchan") as f:
                    w = f.read().strip() or "running"
            except OSError:
                continue
            seen[w] = seen.get(w, 0) + 1
    except OSError:
        pass
    return seen


def proc_sample(pid):
    """RSS (KiB), threads, descriptors, sockets and CPU time (s, user and
    system: /proc/<pid>/stat's ticks) of pid."""
    o = {"rss_kib": 0, "threads": 0, "fds": 0, "sockets": 0, "cpu_s": 0.0}
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        o["cpu_s"] = (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
        with open(f"/proc/{pid}/status") as f:
            for ln in f:
                if ln.startswith("VmRSS:"):
                    o["rss_kib"] = int(ln.split()[1])
                elif ln.startswith("Threads:"):
                    o["threads"] = int(ln.split()[1])
        for fd in os.listdir(f"/proc/{pid}/fd"):
            o["fds"] += 1
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    o["sockets"] += 1
            except OSError:
                pass
    except OSError:
        pass
    return o


def tree_shape(owner, hosts, ns, n):
    """The control tree the scheduler builds (src/core/tree.c), from each
    node id's process (owner[id]) and its address (hosts[process]): the
    nodes of a host under its lowest id, ARITY-ary; the hosts' leaders
    ARITY-ary under the root. A parent's id is always below its child's.
    Returns its depth, the most children of a node, the root's children,
    and per process the sockets its links to parents or children of the
    same role add (a worker's to a server, and back, exist anyway), less
    the links to the scheduler that its workers under another node close
    once the start-up barrier passed (src/core/root.c)."""
    k = ARITY
    parent = [-1] * (n + 1)
    order = sorted((hosts[owner[i]], i) for i in range(1, n + 1))
    leaders = []
    a = 0
    while a < len(order):
        b = a
        while b < len(order) and order[b][0] == order[a][0]:
            b += 1
        run = [x[1] for x in order[a:b]]
        leaders.append(run[0])
        for i in range(1, len(run)):
            parent[run[i]] = run[(i - 1) // k]
        a = b
    leaders.sort()
    for p, i in enumerate(leaders):
        parent[i] = 0 if p < k else leaders[p // k - 1]
    depth, kids = [0] * (n + 1), [0] * (n + 1)
    extra = {}
    for i in range(1, n + 1):
        p = parent[i]
        depth[i] = depth[p] + 1
        kids[p] += 1
        if p > 0 and (i <= ns) == (p <= ns):
            for proc in (owner[i], owner[p]):
                extra[proc] = extra.get(proc, 0) + 1
        if p > 0 and i > ns:
            extra[owner[i]] = extra.get(owner[i], 0) - 1
    return {"depth": max(depth), "k_max": max(kids), "root_kids": kids[0],
            "extra": extra}


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Sim:
    def __init__(self, idx, w, s, env, nsim=1):
        self.idx, self.w, self.s = idx, w, s
        self.host = f"127.0.0.{2 + idx % 250}"
        self.err = open(os.path.join(out, f"sim.{idx}.err"), "w")
        # SIM_IDLE=1: the simulators run at SCHED_IDLE, below the
        # scheduler (a process of its own machine in a real job), which
        # tens of thousands of their threads would otherwise starve
        idle = ["chrt", "--idle", "0"] if SIM_IDLE else []
        # JOIN_RATE=R: the job's nodes start R a second in all (each
        # simulator's one after the other, nsim / R s apart), not all
        # at once
        gap = ["--start-gap-us", str(int(nsim * 1e6 / JOIN_RATE))] \
            if JOIN_RATE > 0 else []
        self.p = subprocess.Popen(
            idle + [f"{build}/bench/scale_sim", "--workers", str(w),
                    "--servers", str(s), "--barriers", str(BARRIERS),
                    "--host", self.host] + gap,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
            env=env)
        os.set_blocking(self.p.stdout.fileno(), False)
        self.buf, self.lines = "", []

    def feed(self):
        try:
            chunk = os.read(self.p.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return
        if not chunk:
            self.eof = True
            return
        self.buf += chunk.decode(errors="replace")
        *done, self.buf = self.buf.split("\n")
        for ln in done:
            try:
                self.lines.append(json.loads(ln))
            except ValueError:
                pass

    def go(self):
        try:
            self.p.stdin.write(b"go\n")
            self.p.stdin.flush()
        except OSError:
            pass

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass


def collect(sims, want, deadline):
    """Wait until each sim has `want` JSON lines, or the deadline."""
    sel = selectors.DefaultSelector()
    for s in sims:
        s.eof = False
        sel.register(s.p.stdout, selectors.EVENT_READ, s)
    try:
        while time.time() < deadline:
            if all(len(s.lines) >= want or s.eof for s in sims):
                return True
            for key, _ in sel.select(0.2):
                key.data.feed()
        return all(len(s.lines) >= want for s in sims)
    finally:
        sel.close()


def quantile(xs, q):
    if not xs:
        return None
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


class Sched:
    def __init__(self, env, w, s):
        self.errpath = os.path.join(out, f"sched.{w}.{s}.err")
        self.err = open(self.errpath, "w")
        self.p = subprocess.Popen(
            [f"{build}/dtrain", "scheduler", "--uri", "127.0.0.1", "--port",
             "0", "--num-servers", str(s), "--num-workers", str(w)],
            stdin=subprocess.DEVNULL, stdout=self.err, stderr=self.err,
            env=env)
        self.rusage_ns, self.status = None, None
        self.w, self.s = w, s
        # SCHED_PERF=FILE: the scheduler's processor time profiled
        # (perf record -g, attached before any node starts; it ends with
        # the scheduler): where the root's serial work goes
        self.perf = None
        if os.environ.get("SCHED_PERF"):
            self.perf = subprocess.Popen(
                ["perf", "record", "-q", "-g", "-F", os.environ.get("SCHED_PERF_HZ", "4000"), "-o",
                 f"{os.environ['SCHED_PERF']}.{w}.{s}", "-p",
                 str(self.p.pid)], stdin=subprocess.DEVNULL,
                stdout=self.err, stderr=self.err)
            time.sleep(1)  # (perf attaches)

    def strace_start(self):
        """SCHED_STRACE=FILE: the scheduler's system calls counted by
        strace -c -f from the join to the end of the last barrier, which
        holds the closes of the idle connections (into FILE.W.S; strace
        slows it, so the run's times are not to be compared with
        others')."""
        path = os.environ.get("SCHED_STRACE")
        if not path:
            return None
        st = subprocess.Popen(
            ["strace", "-c", "-f", "-o", f"{path}.{self.w}.{self.s}", "-p",
             str(self.p.pid)], stdin=subprocess.DEVNULL,
            stdout=self.err, stderr=self.err)
        time.sleep(1)  # (strace attaches)
        return st

    def strace_stop(self, st):
        if st is None:
            return
        st.send_signal(signal.SIGINT)
        try:
            st.wait(timeout=30)
        except subprocess.TimeoutExpired:
            st.kill()
            st.wait()

    def port(self, deadline):
        while time.time() < deadline:
            with open(self.errpath) as f:
                for ln in f:
                    if "listening on port" in ln:
                        return int(ln.split("listening on port")[1].split(
                            ";")[0])
            if self.reap():
                return None
            time.sleep(0.05)
        return None

    def reap(self):
        """Whether it has exited (then its CPU time comes from rusage)."""
        if self.status is not None:
            return True
        try:
            pid, st, ru = os.wait4(self.p.pid, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False
        self.status = os.waitstatus_to_exitcode(st)
        self.p.returncode = self.status
        self.rusage_ns = int((ru.ru_utime + ru.ru_stime) * 1e9)
        if self.perf is not None:  # (it writes its file and ends)
            try:
                self.perf.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.perf.kill()
                self.perf.wait()
        return True

    def cpu_ns(self, ticks=False):
        if not self.reap():
            c = task_cpu_ns(self.p.pid, ticks)
            if c is not None:
                return c
            self.reap()
        return self.rusage_ns

    def park_cpu_ns(self, deadline):
        """The processor time of the threads that called parked workers
        back (src/core/join_park.c logs it once they are done; they have
        ended, so no per-thread clock holds it any more): 0 if the joins
        were not parked."""
        pat = re.compile(r"called back \d+ parked workers with their "
                         r"assignments in [0-9.]+ s \(the callers' "
                         r"processor time ([0-9.]+) s\)")
        parked = False
        while True:
            for ln in self.log_tail():
                m = pat.search(ln)
                if m:
                    return int(float(m.group(1)) * 1e9)
                parked = parked or "joins are parked" in ln
            if not parked or time.time() > deadline:
                return 0
            time.sleep(0.1)

    def log_tail(self):
        with open(self.errpath) as f:
            return [ln.rstrip() for ln in f if ln.strip()]

    def heartbeats(self):
        """The heartbeats it received from the start-up barrier to its
        end, from its last line about them (src/core/sched_watch.c):
        root_hb (all), root_hb_nodes (senders), root_hb_kids (of those,
        its tree children; the star: every node), root_hb_s (a second)."""
        pat = re.compile(r"heartbeats received since the start: (\d+) from "
                         r"(\d+) nodes \((?:(\d+) of its \d+ tree children|"
                         r"the star: every node)\) in ([0-9.]+) s, "
                         r"([0-9.]+) a second")
        o = {}
        for ln in self.log_tail():
            m = pat.search(ln)
            if m:
                o = {"root_hb": int(m.group(1)),
                     "root_hb_nodes": int(m.group(2)),
                     "root_hb_kids": int(m.group(3) or m.group(2)),
                     "root_hb_span_s": float(m.group(4)),
                     "root_hb_s": float(m.group(5))}
        return o

    def end_msgs(self):
        """The messages of the end at the scheduler, from its line at the
        end (src/core/scheduler.c): root_end_msgs (all), and of them
        root_end_done (WORKER_DONEs received: one per worker with the star,
        one per child holding workers over the tree), root_end_reports
        (REPORTs received) and root_end_term (TERMINATEs sent)."""
        pat = re.compile(r"the end took (\d+) messages at the scheduler: "
                         r"(\d+) WORKER_DONE and (\d+) REPORT received, "
                         r"(\d+) TERMINATE sent")
        o = {}
        for ln in self.log_tail():
            m = pat.search(ln)
            if m:
                o = {"root_end_msgs": int(m.group(1)),
                     "root_end_done": int(m.group(2)),
                     "root_end_reports": int(m.group(3)),
                     "root_end_term": int(m.group(4))}
        return o


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
                os.kill(p.pid, signal.SIGTERM)
            except OSError:
                pass
    end = time.time() + 10
    for p in procs:
        try:
            p.wait(max(0.1, end - time.time()))
        except subprocess.TimeoutExpired:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()


def phase_row(w, s, nsim, name, lines, cpu_ns, busy, shape):
    n = w + s
    ok = [x for x in lines if x.get("ok")]
    lat = sorted(v for x in lines for v in x["lat_us"])
    o = {"bench": "scale_sim", "workers": w, "servers": s, "nodes": n,
         "procs": nsim, "phase": name,
         "ok": sum(x["ok"] for x in lines),
         "failed": sum(x["failed"] for x in lines) + (n - sum(
             x["nodes"] for x in lines))}
    if ok:
        in_min = min(x["in_min"] for x in ok)
        in_max = max(x["in_max"] for x in ok)
        out_max = max(x["out_max"] for x in ok)
        o["wall_s"] = round((out_max - in_min) / 1e9, 4)
        o["spread_s"] = round((in_max - in_min) / 1e9, 4)
    o["sched_cpu_s"] = round(cpu_ns / 1e9, 4) if cpu_ns is not None else None
    o["busy"] = round(busy, 2) if busy is not None else None
    for k, col in (("rx_root_bytes", "rx_bytes_per_node"),
                   ("rx_root_msgs", "rx_msgs_per_node"),
                   ("tx_root_msgs", "tx_msgs_per_node")):
        o[col] = round(sum(x[k] for x in lines) / n, 1)
    o["root_msgs"] = sum(x["rx_root_msgs"] + x["tx_root_msgs"]
                         for x in lines)
    o["p50_ms"] = round(quantile(lat, 0.5) / 1e3, 3) if lat else None
    o["p99_ms"] = round(quantile(lat, 0.99) / 1e3, 3) if lat else None
    if o.get("spread_s") is not None and cpu_ns is not None and not shape:
        c = cpu_ns / 1e9 / n
        o["model_c_us"] = round(c * 1e6, 2)
        o["model_s"] = round(o["spread_s"] + 1 * (RTT_US * 1e-6 + n * c), 4)
    elif o.get("spread_s") is not None and cpu_ns is not None:
        c = cpu_ns / 1e9 / max(1, o["root_msgs"])
        o["model_c_us"] = round(c * 1e6, 2)
        o["model_s"] = round(o["spread_s"] + shape["depth"] * (
            RTT_US * 1e-6 + shape["k_max"] * c), 4)
    errs = [x["error"] for x in lines if x.get("error")]
    if errs:
        o["error"] = errs[0][:300]
    o["load"] = load()
    return o


def sample_sims(sims):
    tot = {"rss_kib": 0, "threads": 0, "fds": 0, "sockets": 0, "cpu_s": 0.0}
    for sm in sims:
        o = proc_sample(sm.p.pid)
        for k in tot:
            tot[k] += o[k]
        sm.sample = o
    return tot


def machine_jiffies():
    """The machine's idle (and iowait) ticks, and all its ticks."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[3] + v[4], sum(v[:8])


def expected_sockets(sm, w, s):
    """A node's listener and its link to the scheduler; a worker's link
    to every server; a server's link from every worker. (Over the control
    tree, tree_shape's extra adds the tree's links and takes off the
    links to the scheduler its workers close.)"""
    m = sm.w + sm.s
    return 2 * m + sm.w * s + sm.s * w


def run(w, s):
    n = w + s
    nsim = PROCS or max(1, math.ceil(n / PER_PROC))
    nsim = min(nsim, n)
    env = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1",
               DMLC_NUM_WORKER=str(w), DMLC_NUM_SERVER=str(s),
               DTRAIN_SECRET=secrets.token_hex(32))
    env.setdefault("DTRAIN_TRANSPORT", "tcp")
    env.pop("DMLC_ROLE", None)
    # (the scheduler's log says at its end how many heartbeats it
    # received: PS_VERBOSE=1 for it alone)
    senv = dict(env, PS_VERBOSE=env.get("PS_VERBOSE") or "1")
    t0 = time.time()
    summary = {"bench": "scale_sim", "workers": w, "servers": s,
               "nodes": n, "procs": nsim, "phase": "all",
               "load_start": load()}
    rows = []
    shape = None
    sched = Sched(senv, w, s)
    procs = [sched.p]
    sims = []
    try:
        port = sched.port(time.time() + 30)
        if port is None:
            summary["error"] = "the scheduler did not listen: " + " / ".join(
                sched.log_tail()[-3:])
            return rows, summary
        env["DMLC_PS_ROOT_PORT"] = str(port)
        for i in range(nsim):
            sw = w // nsim + (i < w % nsim)
            ss = s // nsim + (i < s % nsim)
            sims.append(Sim(i, sw, ss, env, nsim))
            procs.append(sims[-1].p)
        if not collect(sims, 1, time.time() + TIMEOUT):
            summary["error"] = "the simulators did not start"
            return rows, summary
        base = sample_sims(sims)
        summary["rss_kib_base"] = base["rss_kib"]
        # (each process's threads before any node started: its main
        # thread and its nodes' driver threads; what the library adds
        # to them is counted after the join)
        for sm in sims:
            sm.base_threads = sm.sample["threads"]
        phases = ["join"] + [f"barrier{i + 1}" for i in range(BARRIERS)] + [
            "leave"]
        trace = None
        for k, name in enumerate(phases):
            stop_now = STOP_ONE and k == 1
            live = sims[:-1] if stop_now else sims
            if stop_now:
                summary.update(stop_one(sched, sims, w, s))
                live = []  # the job is over; nothing to release
                break
            # (leaving ends the scheduler: its CPU time then comes from
            # its rusage, whose clock is that of /proc/<pid>/stat)
            if HOLD_S > 0 and name.startswith("barrier"):
                time.sleep(HOLD_S)
            c0 = sched.cpu_ns(ticks=name == "leave")
            s0 = task_switches(sched.p.pid)
            th0 = task_threads(sched.p.pid)
            m0 = machine_jiffies()
            peak = None
            if name == "join":
                trace = sched.strace_start()
                peak = FdPeak(sched.p.pid)
            for sm in live:
                sm.go()
            done = collect(live, 2 + k, time.time() + TIMEOUT)
            if peak is not None:
                # (the scheduler's most descriptors at once in the join)
                summary["root_fds_peak"] = peak.done()
            if name == phases[-2]:
                # (the join's closes of idle connections come after the
                # start-up barrier: counted up to the last barrier)
                sched.strace_stop(trace)
                trace = None
            m1 = machine_jiffies()
            sched.reap()
            c1 = sched.cpu_ns(ticks=name == "leave")
            s1 = task_switches(sched.p.pid)
            th1 = task_threads(sched.p.pid)
            lines = [sm.lines[1 + k] for sm in live if len(sm.lines) > 1 + k]
            cpu = c1 - c0 if c0 is not None and c1 is not None else None
            park_ns = 0
            if name == "join" and cpu is not None:
                # (the threads that called parked workers back have
                # ended: their time, from the scheduler's log)
                park_ns = sched.park_cpu_ns(time.time() + 10)
                cpu += park_ns
            busy = None
            if m1[1] > m0[1]:
                busy = 1 - (m1[0] - m0[0]) / (m1[1] - m0[1])
            if name == "join" and n >= TREE_MIN and len(lines) == nsim:
                owner = {i: j for j, x in enumerate(lines)
                         for i in x.get("ids", [])}
                if len(owner) == n:
                    shape = tree_shape(owner, [sm.host for sm in live], s,
                                       n)
                    summary.update({"tree_depth": shape["depth"],
                                    "tree_k_max": shape["k_max"],
                                    "tree_root_kids": shape["root_kids"]})
            # (the tree's model for its barriers; the join and the
            # leaving are the scheduler's work with every node)
            row = phase_row(w, s, nsim, name, lines, cpu, busy,
                            shape if name.startswith("barrier") else None)
            row["sched_cs"] = s1 - s0 if s0 is not None and s1 is not None \
                and s1 >= s0 else None
            # (per thread of the scheduler: CPU s and context switches)
            row["sched_threads"] = {
                t: [round((v[0] - th0[t][0]) / 1e9, 4), v[1] - th0[t][1]]
                for t, v in sorted(th1.items()) if t in th0}
            if park_ns:
                row["sched_threads"]["dt-park"] = [round(park_ns / 1e9, 4),
                                                   None]
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if name in ("join", phases[-2]):
                # (the scheduler's descriptors once every node joined,
                # and after the last barrier: its listener, its own and
                # one connection per node it still holds)
                summary["root_fds_join" if name == "join" else
                        "root_fds"] = task_fds(sched.p.pid)
                # (every node up and idle, before anyone leaves)
                tot = sample_sims(sims)
                summary["rss_kib_per_node"] = round(
                    (tot["rss_kib"] - base["rss_kib"]) / n, 1)
                summary["fds_per_node"] = round(tot["fds"] / n, 2)
                summary["threads_per_node"] = round(tot["threads"] / n, 2)
                # (the simulators' CPU time from their start: after
                # the last barrier, the join's, the barriers' and the
                # idle nodes' heartbeats meanwhile, HOLD_S)
                summary["sims_cpu_s"] = round(tot["cpu_s"], 2)
                summary["threads_proc_max"] = max(
                    sm.sample["threads"] for sm in sims)
                summary["lib_threads_proc_max"] = max(
                    sm.sample["threads"] - sm.base_threads for sm in sims)
                summary["sockets"] = tot["sockets"]
                tree = shape["extra"] if shape else {}
                summary["sockets_expected"] = sum(
                    expected_sockets(sm, w, s) + tree.get(sm.idx, 0)
                    for sm in sims)
                summary["sockets_extra_max"] = max(
                    sm.sample["sockets"] - expected_sockets(sm, w, s) -
                    tree.get(sm.idx, 0) for sm in sims)
            if not done or row["failed"]:
                summary["error"] = row.get("error") or (
                    f"{name}: not every simulator reported within "
                    f"{TIMEOUT:.0f} s")
                break
        for sm in sims:
            sm.close()
        end = time.time() + TIMEOUT
        while time.time() < end and not (
                sched.reap() and all(sm.p.poll() is not None for sm in sims)):
            time.sleep(0.05)
        summary["sched_exit"] = sched.status
        summary.update(sched.heartbeats())
        summary.update(sched.end_msgs())
        summary["pids"] = [p.pid for p in procs]
        summary["sim_exits"] = sorted(set(
            sm.p.returncode if sm.p.returncode is not None else "running"
            for sm in sims), key=str)
        summary["sched_cpu_total_s"] = (
            round(sched.rusage_ns / 1e9, 3) if sched.rusage_ns else None)
    finally:
        kill_all(procs)
        sched.reap()
        summary["total_s"] = round(time.time() - t0, 2)
        summary["load_end"] = load()
        summary["passed_all"] = all(
            r["failed"] == 0 for r in rows) and len(rows) == BARRIERS + 2
    return rows, summary


def stop_one(sched, sims, w, s):
    """SIGSTOP the last simulator; the others enter the first barrier;
    how long until the scheduler ends the job, and what it names."""
    stopped = sims[-1]
    os.kill(stopped.p.pid, signal.SIGSTOP)
    t0 = time.time()
    for sm in sims[:-1]:
        sm.go()
    # (when it names a lost node: it aborts the job then; when it exits)
    named_at = None
    while time.time() < t0 + TIMEOUT and not sched.reap():
        if named_at is None and any("aborting the job" in ln
                                    for ln in sched.log_tail()):
            named_at = time.time()
        time.sleep(0.02)
    if named_at is None and any("aborting the job" in ln
                                for ln in sched.log_tail()):
        named_at = time.time()  # (it named and exited between two looks)
    o = {"stopped_pid": stopped.p.pid,
         "stopped_nodes": stopped.w + stopped.s,
         "named_after_s": round(named_at - t0, 2) if named_at else None,
         "end_after_s": round(time.time() - t0, 2) if sched.reap() else None,
         "sched_exit": sched.status}
    tail = sched.log_tail()
    named = [ln for ln in tail if "sent nothing" in ln]
    o["named"] = named[:3]
    if o["end_after_s"] is None:
        # (what it said, and where its threads wait)
        o["sched_log_tail"] = tail[-5:]
        o["sched_wchan"] = thread_wchans(sched.p.pid)
    # (their lines: ready, join, barrier1)
    collect(sims[:-1], 3, time.time() + TIMEOUT)
    o["others_failed"] = sum(sm.lines[2]["failed"] for sm in sims[:-1]
                             if len(sm.lines) > 2)
    o["others"] = sum(sm.w + sm.s for sm in sims[:-1])
    os.kill(stopped.p.pid, signal.SIGCONT)
    return o


def fmt(o, k, f):
    v = o.get(k)
    return (f % v) if v is not None else "-"


def main():
    allrows, sums = [], []
    with open(os.path.join(out, "scale_sim.jsonl"), "w") as jf:
        for w, s in sizes:
            rows, summary = run(w, s)
            for o in rows + [summary]:
                jf.write(json.dumps(o) + "\n")
            jf.flush()
            print(json.dumps(summary), file=sys.stderr, flush=True)
            allrows += rows
            sums.append(summary)
    print("%6s %4s %4s %-9s %8s %8s %9s %8s %5s %9s %7s %7s %9s %8s %8s %8s "
          "%s" % (
              "W", "S", "P", "phase", "wall s", "spread s", "sched cpu",
              "sched cs", "busy", "rx B/node", "rx msg", "tx msg",
              "root msgs", "p50 ms", "p99 ms", "model s", "failed"))
    for o in allrows:
        print("%6d %4d %4d %-9s %8s %8s %9s %8s %5s %9s %7s %7s %9s %8s %8s "
              "%8s %d"
              % (o["workers"], o["servers"], o["procs"], o["phase"],
                 fmt(o, "wall_s", "%.3f"), fmt(o, "spread_s", "%.3f"),
                 fmt(o, "sched_cpu_s", "%.3f"), fmt(o, "sched_cs", "%d"),
                 fmt(o, "busy", "%.2f"),
                 fmt(o, "rx_bytes_per_node", "%.0f"),
                 fmt(o, "rx_msgs_per_node", "%.1f"),
                 fmt(o, "tx_msgs_per_node", "%.1f"),
                 fmt(o, "root_msgs", "%d"), fmt(o, "p50_ms", "%.2f"),
                 fmt(o, "p99_ms", "%.2f"), fmt(o, "model_s", "%.3f"),
                 o["failed"]))
    for o in allrows:
        if o["phase"] == "join" and o.get("sched_threads"):
            print("       %d+%d join, the scheduler's threads (cpu s / "
                  "context switches): %s" % (
                      o["workers"], o["servers"], ", ".join(
                          "%s %.3f / %s" % (t, v[0], "-" if v[1] is None
                                            else "%d" % v[1])
                          for t, v in o["sched_threads"].items())))
    print()
    print("%6s %4s %4s %9s %8s %9s %8s %8s %8s %8s %9s %8s %7s %s" % (
        "W", "S", "P", "RSS KiB/n", "fds/n", "threads/n", "lib thr",
        "sims cpu", "sockets", "expected", "root hb/s", "total s", "sched",
        "load (start / end)"))
    for o in sums:
        print("%6d %4d %4d %9s %8s %9s %8s %8s %8s %8s %9s %8s %7s %s / %s" % (
            o["workers"], o["servers"], o["procs"],
            fmt(o, "rss_kib_per_node", "%.1f"), fmt(o, "fds_per_node", "%.2f"),
            fmt(o, "threads_per_node", "%.2f"),
            fmt(o, "lib_threads_proc_max", "%d"),
            fmt(o, "sims_cpu_s", "%.2f"), fmt(o, "sockets", "%d"),
            fmt(o, "sockets_expected", "%d"), fmt(o, "root_hb_s", "%.1f"),
            fmt(o, "total_s", "%.1f"), o.get("sched_exit"), o["load_start"],
            o["load_end"]))
        if o.get("root_hb") is not None:
            print("       the scheduler received %d heartbeats from %d nodes "
                  "(%d of them its tree children, or every node with the "
                  "star) in %.1f s" % (
                      o["root_hb"], o["root_hb_nodes"], o["root_hb_kids"],
                      o["root_hb_span_s"]))
        if o.get("root_end_msgs") is not None:
            print("       the end took %d messages at the scheduler: %d "
                  "WORKER_DONE and %d REPORT received, %d TERMINATE sent" % (
                      o["root_end_msgs"], o["root_end_done"],
                      o["root_end_reports"], o["root_end_term"]))
        if o.get("root_fds_join") is not None:
            print("       the scheduler held %s descriptors once every node "
                  "joined (at most %s during the join), %s after the last "
                  "barrier" % (
                      o["root_fds_join"], fmt(o, "root_fds_peak", "%d"),
                      fmt(o, "root_fds", "%d")))
        if o.get("tree_depth"):
            print("       control tree: depth %d, %d under the scheduler, "
                  "at most %d children of a node" % (
                      o["tree_depth"], o["tree_root_kids"], o["tree_k_max"]))
        if o.get("error"):
            print("       %s" % o["error"])
    print()
    for o in allrows + sums:
        print(json.dumps(o))
    return 0 if all(o.get("passed_all") and not o.get("error")
                    for o in sums) or STOP_ONE else 1


sys.exit(main())
