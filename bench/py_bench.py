#!/usr/bin/env python3
"""py_bench.py - dtrain from Python against its baselines, measured in one
run: a table, then one JSON object per line (as the other benches print).

  1. allreduce of float32 tensors from PyTorch through dtrain.torch
     (allreduce_, in place) against torch.distributed with the gloo
     backend, 1 rank and the --ranks counts, 4 bytes to --max-mib MiB: the
     time of one call (rank 0's) and the bus bandwidth algbw * 2(n-1)/n.
     Both run in the same processes (gloo is set up beside dtrain), in
     turns: --rounds rounds of a batch of each, and each figure is the
     median batch's, so that a machine whose load changes during the run
     weighs on both alike;
  2. the cost of the binding: up to 64 KiB the same turns also time the
     C call itself, made back to back from C in the same processes
     (Coll._time_allreduce), so Python's cost per call is the difference
     at the same moment; and build/bench/coll_bench's own figures for the
     same sizes, a separate job, for reference;
  3. LeNet training samples/s (examples/python/mnist_torch_hvd.py's model
     and step, per worker) with DistributedOptimizer (fused, the default,
     and unfused) against the same loop on
     torch.nn.parallel.DistributedDataParallel (gloo), and the same step
     with no reduction (the most any way of reducing could reach), in
     turns in one job: --steps turns of one step of each, the median
     step's figure.

    PYTHONPATH=build/python python3 bench/py_bench.py [--ranks 2,4]
        [--max-mib 64] [--steps 301] [--rounds 7] [--no-train]
        [--no-allreduce]

The load average at the start and the end is printed with the table: on
a machine with more runnable processes than cores, a small allreduce
waits for the scheduler (hundreds of microseconds, from C as from Python),
and only ratios taken in the same run mean something.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
BUILD = os.environ.get("DTRAIN_BUILD", os.path.join(SOURCE, "build"))
SMALL = 64 << 10  # up to here the C call is timed beside Python's


def sizes(max_mib):
    s, out = 4096, []
    while s <= max_mib << 20:
        out.append(s)
        s *= 16
    if out[-1] != max_mib << 20:
        out.append(max_mib << 20)
    return out


def iters_for(nbytes):
    return max(3, min(300, (32 << 20) // max(nbytes, 1)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else \
        (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


# ---- the workers (one process per rank) ------------------------------
def time_calls(fn, n, barrier):
    fn()
    fn()
    barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def loop(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - t0


def gloo_beside(hvd):
    """torch.distributed (gloo) in the processes of this dtrain job: rank
    0 picks the port and broadcasts it with dtrain."""
    import torch
    import torch.distributed as dist
    port = torch.tensor([free_port() if hvd.rank() == 0 else 0],
                        dtype=torch.int32)
    hvd.broadcast_(port, 0)
    dist.init_process_group("gloo", rank=hvd.rank(), world_size=hvd.size(),
                            init_method=f"tcp://127.0.0.1:{int(port)}")
    return dist


def worker_allreduce(max_mib, rounds):
    import numpy as np
    import torch
    import dtrain.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    dist = gloo_beside(hvd)
    rank, n, c = hvd.rank(), hvd.size(), hvd._c()
    for nbytes in [4] + sizes(max_mib):
        # zeros: sums that stay finite however many calls
        td, tg = torch.zeros(nbytes // 4), torch.zeros(nbytes // 4)
        arr = np.zeros(nbytes // 4, np.float32)
        impls = {
            "dtrain.torch": lambda k: loop(
                lambda: hvd.allreduce_(td, op=hvd.Sum), k),
            "torch.gloo": lambda k: loop(lambda: dist.all_reduce(tg), k)}
        if nbytes <= SMALL:
            impls["C"] = lambda k: c._time_allreduce(arr, k)
        per = max(1, (2000 if nbytes == 4 else iters_for(nbytes)) // rounds)
        for fn in impls.values():
            fn(2 + per // 10)
        times = {name: [] for name in impls}
        for r in range(rounds):
            names = list(impls) if r % 2 == 0 else list(impls)[::-1]
            for name in names:
                hvd.barrier()
                times[name].append(impls[name](per) / per)
        if rank != 0:
            continue
        for name, ts in times.items():
            dt = median(ts)
            print("RESULT " + json.dumps({
                "impl": name, "op": "allreduce", "bytes": nbytes,
                "ranks": n, "time_us": dt * 1e6, "min_us": min(ts) * 1e6,
                "rounds": rounds, "calls_per_round": per,
                "busbw_gbps": nbytes / dt * 2 * (n - 1) / n / 1e9
                if n > 1 else 0.0}), flush=True)
        if "C" in times:
            d = median([p - q for p, q in zip(times["dtrain.torch"],
                                              times["C"])])
            print("RESULT " + json.dumps({
                "impl": "dtrain.torch", "op": "python_overhead",
                "bytes": nbytes, "ranks": n, "time_us": d * 1e6}),
                flush=True)
    dist.destroy_process_group()


def worker_train(steps):
    """LeNet's step four ways in the same processes, one step of each in
    turn: DistributedOptimizer as it is by default (the gradients in one
    flat buffer, reduced by one call), with fusion_bytes=0 (one
    allreduce per gradient, started from its hook),
    DistributedDataParallel on the gloo group set up beside dtrain, and
    the plain optimizer with no reduction at all (the step's computation
    alone: the bound of any way of reducing). On a
    machine whose load changes from one second to the next, turns of one
    step weigh on the three alike (turns of 20 steps gave ratios that
    moved by 40% from run to run). Each model starts from the same
    weights; a figure is the median step's."""
    import torch
    import torch.nn.functional as F
    import dtrain.torch as hvd
    sys.path.insert(0, os.path.join(SOURCE, "examples", "python"))
    from mnist_torch_hvd import LeNet
    torch.set_num_threads(1)
    hvd.init()
    dist = gloo_beside(hvd)
    rank, n = hvd.rank(), hvd.size()

    def make(impl):
        torch.manual_seed(1)
        model = LeNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        if impl == "torch.local":
            return model, opt  # no reduction: the step's computation alone
        if impl == "torch.ddp.gloo":
            return torch.nn.parallel.DistributedDataParallel(model), opt
        fusion = {} if impl == "dtrain.torch" else {"fusion_bytes": 0}
        opt = hvd.DistributedOptimizer(
            opt, named_parameters=model.named_parameters(), **fusion)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        return model, opt
    impls = {name: make(name) for name in
             ("dtrain.torch", "dtrain.torch.unfused", "torch.ddp.gloo",
              "torch.local")}
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))

    def run(name, k):
        net, opt = impls[name]
        t0 = time.perf_counter()
        for _ in range(k):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
        return time.perf_counter() - t0
    for name in impls:
        run(name, 5)
    times = {name: [] for name in impls}
    for r in range(steps):
        for name in list(impls) if r % 2 == 0 else list(impls)[::-1]:
            hvd.barrier()
            times[name].append(run(name, 1))
    if rank == 0:
        for name, ts in times.items():
            print("RESULT " + json.dumps({
                "impl": name, "op": "lenet_train", "ranks": n, "batch": 64,
                "samples_per_sec": 64 / median(ts),
                "best_samples_per_sec": 64 / min(ts), "steps": steps}),
                flush=True)
    dist.destroy_process_group()


# ---- the driver ------------------------------------------------------
def results(text):
    return [json.loads(line.split("RESULT ", 1)[1])
            for line in text.splitlines() if "RESULT " in line]


def run_dtrain(n, args):
    cmd = [os.path.join(BUILD, "dtrain"), "launch", "-n", str(n), "-s", "0",
           "--", sys.executable, os.path.abspath(__file__)] + args
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=600)
    if r.returncode:
        sys.exit(f"py_bench: {' '.join(cmd)} failed:\n{r.stdout}")
    return r.stdout


def coll_bench(n):
    """build/bench/coll_bench's allreduce, 4 bytes to 64 KiB, in a job of
    its own (a reference: its moment is not the Python turns')."""
    cmd = [os.path.join(BUILD, "dtrain"), "launch", "-n", str(n), "-s", "0",
           "--", os.path.join(BUILD, "bench", "coll_bench"), "--json",
           "--min-bytes", "4", "--max-bytes", str(SMALL), "--iters", "2000"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True,
                         timeout=600).stdout
    rows = []
    for line in out.splitlines():
        if '"impl":"dtrain"' in line:
            r = json.loads(line[line.index("{"):])
            if r["bytes"] in (4, 4096, SMALL):
                r["impl"] = "coll_bench"
                rows.append(r)
    if not rows:
        sys.exit("py_bench: coll_bench printed no result:\n" + out)
    return rows


def load():
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def table(rows, loads, cores):
    ar = {(r["impl"], r["ranks"], r["bytes"]): r for r in rows
          if r["op"] == "allreduce"}
    over = {(r["ranks"], r["bytes"]): r["time_us"] for r in rows
            if r["op"] == "python_overhead"}
    print(f"# {cores} cores; load average (1/5/15 min) {loads[0]} at the "
          f"start, {loads[1]} at the end")
    print("# allreduce, float32, in place: time of one call (us) in the "
          "median round and in the best, bus bandwidth (GB/s, median)")
    print(f"{'ranks':>5} {'bytes':>10} {'dtrain us':>10} {'gloo us':>10} "
          f"{'best':>8} {'best':>8} {'dtrain GB/s':>12} {'gloo GB/s':>10} "
          f"{'gloo/dtrain':>11} {'best':>6}")
    for (impl, n, b), r in sorted(ar.items(), key=lambda k: k[0][1:]):
        g = ar.get(("torch.gloo", n, b))
        if impl != "dtrain.torch" or b == 4 or n == 1 or not g:
            continue
        print(f"{n:>5} {b:>10} {r['time_us']:>10.1f} "
              f"{g['time_us']:>10.1f} {r['min_us']:>8.1f} "
              f"{g['min_us']:>8.1f} {r['busbw_gbps']:>12.3f} "
              f"{g['busbw_gbps']:>10.3f} "
              f"{g['time_us'] / r['time_us']:>11.2f} "
              f"{g['min_us'] / r['min_us']:>6.1f}")
    print("# small allreduces, us: one call from Python (dtrain.torch) and "
          "the same call from C in the same processes, in the median round "
          "and in the best; Python's cost (the median of the rounds' "
          "differences, and the difference of the best rounds); coll_bench "
          "(a job of its own, mean)")
    print(f"{'ranks':>5} {'bytes':>10} {'Python':>8} {'C':>8} {'best Py':>8} "
          f"{'best C':>8} {'Py-C':>8} {'best Py-C':>9} {'coll_bench':>10}")
    for (n, b), d in sorted(over.items()):
        p, c = ar[("dtrain.torch", n, b)], ar[("C", n, b)]
        cb = ar.get(("coll_bench", n, b))
        cbs = f"{cb['time_us']:>10.2f}" if cb else f"{'-':>10}"
        print(f"{n:>5} {b:>10} {p['time_us']:>8.2f} {c['time_us']:>8.2f} "
              f"{p['min_us']:>8.2f} {c['min_us']:>8.2f} {d:>8.2f} "
              f"{p['min_us'] - c['min_us']:>9.2f} {cbs}")
    tr = {(r["impl"], r["ranks"]): r for r in rows
          if r["op"] == "lenet_train"}
    if tr:
        print("# LeNet training, samples/s per worker (batch 64), median "
              "step (best step): DistributedOptimizer fused (the "
              "default), unfused (fusion_bytes=0), DDP gloo, and the same "
              "step with no reduction, in turns in the same processes")
    for n in sorted({k[1] for k in tr}):
        f, u, d, loc = (tr.get((i, n)) for i in (
            "dtrain.torch", "dtrain.torch.unfused", "torch.ddp.gloo",
            "torch.local"))
        if f and u and d:
            print(f"  {n} ranks: fused {f['samples_per_sec']:.0f} "
                  f"({f['best_samples_per_sec']:.0f})  unfused "
                  f"{u['samples_per_sec']:.0f} "
                  f"({u['best_samples_per_sec']:.0f})  DDP "
                  f"{d['samples_per_sec']:.0f} "
                  f"({d['best_samples_per_sec']:.0f})  fused/DDP "
                  f"x{f['samples_per_sec'] / d['samples_per_sec']:.2f} "
                  f"unfused/DDP "
                  f"x{u['samples_per_sec'] / d['samples_per_sec']:.2f}")
        if f and d and loc:
            # (no reduction at all: the most any reduction could give)
            print(f"    without any reduction {loc['samples_per_sec']:.0f} "
                  f"({loc['best_samples_per_sec']:.0f}): fused reaches "
                  f"{f['samples_per_sec'] / loc['samples_per_sec']:.2f} of "
                  f"it; the most any way of reducing could give over DDP "
                  f"is x{loc['samples_per_sec'] / d['samples_per_sec']:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--max-mib", type=int, default=64)
    ap.add_argument("--steps", type=int, default=301)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-train", action="store_true",
                    help="allreduce only, no LeNet training")
    ap.add_argument("--no-allreduce", action="store_true",
                    help="LeNet training only")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        impl, what = a.worker.split(":")
        if what == "allreduce":
            worker_allreduce(a.max_mib, max(1, a.rounds))
        else:
            worker_train(a.steps)
        return
    rows, loads = [], [load()]
    for n in [1] + [int(r) for r in a.ranks.split(",")]:
        if not a.no_allreduce:
            rows += results(run_dtrain(n, ["--worker", "dtrain:allreduce",
                                           "--max-mib", str(a.max_mib),
                                           "--rounds", str(a.rounds)]))
            rows += coll_bench(n)
        if n > 1 and not a.no_train:
            rows += results(run_dtrain(n, ["--worker", "dtrain:train",
                                           "--steps", str(a.steps)]))
    loads.append(load())
    table(rows, loads, os.cpu_count())
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
