#!/usr/bin/env python3
"""py_bench.py - dtrain from Python against its baselines, measured in one
run: a table, then one JSON object per line (as the other benches print).

  1. allreduce of float32 tensors from PyTorch through dtrain.torch
     (allreduce_, in place) against torch.distributed with the gloo
     backend, 2 and 4 ranks, 4 KiB to 64 MiB: mean time of one call (rank
     0's) and the bus bandwidth algbw * 2(n-1)/n;
  2. the per-call cost of a 4-byte allreduce from Python against the same
     call from C (build/bench/coll_bench), on 1 rank (the binding's own
     overhead) and 2 ranks;
  3. LeNet training samples/s (examples/python/mnist_torch_hvd.py's model
     and step, per worker) with DistributedOptimizer against the same loop
     on torch.nn.parallel.DistributedDataParallel (gloo).

    PYTHONPATH=build/python python3 bench/py_bench.py [--ranks 2,4]
        [--max-mib 64] [--steps 60]

Run it on an otherwise idle machine: the ranks share its cores.
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


# ---- the workers (one process per rank) ------------------------------
def time_calls(fn, n, barrier):
    fn()
    fn()
    barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def worker_allreduce(impl, max_mib):
    import torch
    torch.set_num_threads(1)
    if impl == "dtrain":
        import dtrain.torch as hvd
        hvd.init()
        rank, n, barrier = hvd.rank(), hvd.size(), hvd.barrier

        def call(t):
            hvd.allreduce_(t, op=hvd.Sum)
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, n, barrier = dist.get_rank(), dist.get_world_size(), \
            dist.barrier

        def call(t):
            dist.all_reduce(t)
    rows = []
    for nbytes in [4] + sizes(max_mib):
        t = torch.ones(nbytes // 4)
        it = 2000 if nbytes == 4 else iters_for(nbytes)
        dt = time_calls(lambda: call(t), it, barrier)
        rows.append({"impl": "dtrain.torch" if impl == "dtrain" else
                     "torch.gloo", "op": "allreduce", "bytes": nbytes,
                     "ranks": n, "time_us": dt * 1e6,
                     "busbw_gbps": nbytes / dt * 2 * (n - 1) / n / 1e9
                     if n > 1 else 0.0})
    if rank == 0:
        for r in rows:
            print("RESULT " + json.dumps(r), flush=True)


def worker_train(impl, steps):
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(SOURCE, "examples", "python"))
    from mnist_torch_hvd import LeNet
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = LeNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if impl == "dtrain":
        import dtrain.torch as hvd
        hvd.init()
        rank, n, barrier = hvd.rank(), hvd.size(), hvd.barrier
        opt = hvd.DistributedOptimizer(
            opt, named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        net = model
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, n, barrier = dist.get_rank(), dist.get_world_size(), \
            dist.barrier
        net = torch.nn.parallel.DistributedDataParallel(model)
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))

    def step():
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    for _ in range(5):
        step()
    dt = time_calls(step, steps, barrier)
    if rank == 0:
        print("RESULT " + json.dumps({
            "impl": "dtrain.torch" if impl == "dtrain" else "torch.ddp.gloo",
            "op": "lenet_train", "ranks": n, "batch": 64,
            "samples_per_sec": 64 / dt}), flush=True)


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


def run_gloo(n, args):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for rank in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   RANK=str(rank), WORLD_SIZE=str(n))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)] + args, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit("py_bench: a gloo rank failed:\n" + "\n".join(outs))
    return outs[0]


def c_overhead(n):
    cmd = [os.path.join(BUILD, "dtrain"), "launch", "-n", str(n), "-s", "0",
           "--", os.path.join(BUILD, "bench", "coll_bench"), "--json",
           "--min-bytes", "4", "--max-bytes", "4", "--iters", "2000"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True,
                         timeout=600).stdout
    for line in out.splitlines():
        if '"impl":"dtrain"' in line:
            r = json.loads(line[line.index("{"):])
            r["impl"] = "C"
            return r
    sys.exit("py_bench: coll_bench printed no result:\n" + out)


def table(rows):
    ar = {(r["impl"], r["ranks"], r["bytes"]): r for r in rows
          if r["op"] == "allreduce"}
    print("# allreduce, float32, in place: time of one call (us) and bus "
          "bandwidth (GB/s)")
    print(f"{'ranks':>5} {'bytes':>10} {'dtrain us':>10} {'gloo us':>10} "
          f"{'dtrain GB/s':>12} {'gloo GB/s':>10} {'busbw x':>8}")
    for (impl, n, b), r in sorted(ar.items(), key=lambda k: k[0][1:]):
        if impl != "dtrain.torch" or b == 4 or n == 1:
            continue
        g = ar.get(("torch.gloo", n, b))
        if g:
            print(f"{n:>5} {b:>10} {r['time_us']:>10.1f} "
                  f"{g['time_us']:>10.1f} {r['busbw_gbps']:>12.3f} "
                  f"{g['busbw_gbps']:>10.3f} "
                  f"{g['time_us'] / r['time_us']:>8.2f}")
    print("# 4-byte allreduce: one call from Python and from C (us)")
    for n in sorted({k[1] for k in ar}):
        p, c = ar.get(("dtrain.torch", n, 4)), ar.get(("C", n, 4))
        if p and c:
            print(f"  {n} rank(s): Python {p['time_us']:.2f}  C "
                  f"{c['time_us']:.2f}  overhead "
                  f"{p['time_us'] - c['time_us']:.2f}")
    tr = {(r["impl"], r["ranks"]): r for r in rows
          if r["op"] == "lenet_train"}
    print("# LeNet training, samples/s per worker (batch 64)")
    for (impl, n), r in sorted(tr.items(), key=lambda k: k[0][1]):
        if impl == "dtrain.torch" and ("torch.ddp.gloo", n) in tr:
            d = tr[("torch.ddp.gloo", n)]["samples_per_sec"]
            print(f"  {n} ranks: dtrain {r['samples_per_sec']:.0f}  DDP "
                  f"gloo {d:.0f}  x{r['samples_per_sec'] / d:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--max-mib", type=int, default=64)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        impl, what = a.worker.split(":")
        if what == "allreduce":
            worker_allreduce(impl, a.max_mib)
        else:
            worker_train(impl, a.steps)
        return
    rows = []
    for n in [1] + [int(r) for r in a.ranks.split(",")]:
        mib = ["--max-mib", str(a.max_mib)]
        rows += results(run_dtrain(n, ["--worker", "dtrain:allreduce"]
                                   + mib))
        if n <= 2:
            rows.append(c_overhead(n))
        if n > 1:
            rows += results(run_gloo(n, ["--worker", "gloo:allreduce"]
                                     + mib))
            steps = ["--steps", str(a.steps)]
            rows += results(run_dtrain(n, ["--worker", "dtrain:train"]
                                       + steps))
            rows += results(run_gloo(n, ["--worker", "gloo:train"] + steps))
    table(rows)
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
