"""An elastic job of the tests (test_elastic.py): a linear model learnt by
SGD with momentum over an allreduce of numpy arrays, kept by
dtrain.elastic's State - the Python form of examples/elastic.c.

    elastic_job.py --steps 200 --save OUT [--die-at S --die-rank R]...
                   [--torch]

Every rank that ends writes its weights to OUT.<launch rank> (rank 0 also
to OUT) and prints "done: rank R of N, membership E, resets [sizes],
joined J"; a worker that leaves on its schedule prints "left at step S".
--die-at S --die-rank R makes launch rank R kill itself (SIGKILL) before
step S. At each epoch's end rank 0 prints how often each sample was
trained on ("samples: epoch E: A once, B never, C more than once").
--torch keeps the weights in a torch tensor and its optimizer
(torch.optim.SGD) in a TorchState instead.
"""
import argparse
import os
import signal
import sys

import numpy as np

import dtrain
from dtrain import elastic

D = 16


def make_data(n, seed):
    rng = np.random.default_rng(seed)
    w = rng.uniform(-3, 3, D).astype(np.float32)
    x = rng.uniform(-1, 1, (n, D)).astype(np.float32)
    y = (x @ w + np.float32(0.5)).astype(np.float32)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--commit-every", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--die-at", type=int, action="append", default=[])
    ap.add_argument("--die-rank", type=int, action="append", default=[])
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--save", required=True)
    a = ap.parse_args()

    comm = dtrain.Coll()
    launch_rank = comm.rank
    x, y = make_data(a.samples, 7)
    sampler = elastic.ElasticSampler(a.samples, a.batch_size, seed=7)
    seen = np.zeros(a.samples, np.int32)
    if a.torch:
        import torch
        import dtrain.torch as hvd
        w = torch.zeros(D + 1)
        opt = torch.optim.SGD([w], lr=a.lr, momentum=0.9)
        hvd.elastic.init_optimizer_state(opt)
        state = hvd.elastic.TorchState(None, opt, comm=comm, sampler=sampler)
        state.register("weights", w)
        wn = w.numpy()
    else:
        wn = np.zeros(D + 1, np.float32)
        mom = np.zeros(D + 1, np.float32)
        state = elastic.ObjectState(comm, sampler=sampler)
        state.register("weights", wn)
        state.register("momentum", mom)
    state.register("seen", seen)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(comm.size)])

    def update(g):
        if a.torch:
            w.grad = torch.from_numpy(g)
            opt.step()
        else:
            mom[:] = np.float32(0.9) * mom + g
            wn[:] -= np.float32(a.lr) * mom

    @elastic.run
    def train(state):
        while state.next_step < a.steps:
            step = state.begin_step(commit_every=a.commit_every)
            if step in a.die_at and \
                    a.die_rank[a.die_at.index(step)] == launch_rank:
                os.kill(os.getpid(), signal.SIGKILL)
            n = comm.size
            s = state.sampler
            idx = s.indices(comm.rank, n)
            if idx is None:
                if comm.rank == 0:
                    print(f"samples: epoch {s.epoch}: "
                          f"{int((seen == 1).sum())} once, "
                          f"{int((seen == 0).sum())} never, "
                          f"{int((seen > 1).sum())} more than once",
                          flush=True)
                seen[:] = 0
                s.set_epoch(s.epoch + 1)
                continue
            xb, yb = x[idx], y[idx]
            err = xb @ wn[:D] + wn[D] - yb
            g = np.empty(D + 1, np.float32)
            g[:D] = err @ xb
            g[D] = err.sum()
            comm.allreduce(g)
            mine = idx.astype(np.int32)
            every = np.zeros(a.batch_size * n, np.int32)
            comm.allgather(mine, every)
            np.add.at(seen, every, 1)
            update(g / np.float32(a.batch_size * n))
            s.advance(n)

    train(state)
    ch = state._elastic.last_change() if state._elastic else {"epoch": 0}
    if state.left:
        print(f"left at step {state.next_step}", flush=True)
    else:
        print(f"done: rank {comm.rank} of {comm.size}, membership "
              f"{ch['epoch']}, resets {resets}, joined {int(state.joined)}",
              flush=True)
        wn.tofile(f"{a.save}.{launch_rank}")
        if comm.rank == 0:
            wn.tofile(a.save)
    state.close()
    comm.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
