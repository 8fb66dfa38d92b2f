#!/usr/bin/env python3
"""Horovod's PyTorch MNIST script on dtrain.torch: LeNet on Fashion-MNIST
(Debian's dataset-fashion-mnist), gradients averaged by allreduce.

    dtrain launch -n 2 -s 0 -- python3 examples/python/mnist_torch_hvd.py
    python3 examples/python/mnist_torch_hvd.py          # one process

Each step every rank takes its slice of a global batch of batch-size x
size() images (the same seeded permutation on every rank), and
DistributedOptimizer averages the gradients: LeNet's fit in one bucket,
so they live in one flat buffer that step() reduces in one call. With
--emulate-ranks K one process does what K ranks do - the K
slices' gradients computed one after the other, summed in rank order and
divided by K - which gives the same parameters bit for bit (the test of
the binding checks it). Rank 0 prints Speedometer lines and the
validation accuracy, and with --metrics FILE writes them as JSON lines
for `dtrain plot`.
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

import _find_dtrain  # noqa: F401 - the build's package if not installed
import dtrain.torch as hvd

DATA = "/usr/share/datasets/fashion-mnist"


def load(data, kind, limit=0):
    """Images (n, 1, 28, 28) float32, normalised, and labels (n,) int64
    of an MNIST-format set."""
    pre = "train" if kind == "train" else "t10k"
    with gzip.open(os.path.join(data, f"{pre}-images-idx3-ubyte.gz")) as f:
        img = np.frombuffer(f.read(), np.uint8, offset=16)
    with gzip.open(os.path.join(data, f"{pre}-labels-idx1-ubyte.gz")) as f:
        lab = np.frombuffer(f.read(), np.uint8, offset=8)
    x = torch.from_numpy(img.reshape(-1, 1, 28, 28).astype(np.float32) / 255)
    x = (x - 0.2860) / 0.3530  # Fashion-MNIST's mean and deviation
    y = torch.from_numpy(lab.astype(np.int64))
    return (x[:limit], y[:limit]) if limit else (x, y)


class LeNet(torch.nn.Module):
    """LeNet-5: two 5x5 convolutions with max-pooling, three dense layers."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 6, 5)
        self.conv2 = torch.nn.Conv2d(6, 16, 5)
        self.fc1 = torch.nn.Linear(256, 120)
        self.fc2 = torch.nn.Linear(120, 84)
        self.fc3 = torch.nn.Linear(84, 10)

    def forward(self, x):  # x (B, 1, 28, 28)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (B, 6, 12, 12)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # (B, 16, 4, 4)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


def options(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64,
                    help="images per rank per step")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--limit", type=int, default=0,
                    help="use only the first N training images")
    ap.add_argument("--disp-batches", type=int, default=100)
    ap.add_argument("--compression", choices=["none", "fp16"],
                    default="none")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per process")
    ap.add_argument("--emulate-ranks", type=int, default=0, metavar="K",
                    help="one process computing what K ranks compute")
    ap.add_argument("--save", help="rank 0 saves the parameters (raw "
                    "float32, in state_dict order) to this file")
    ap.add_argument("--metrics", help="rank 0 writes JSON lines here")
    ap.add_argument("--run-label")
    return ap.parse_args(argv)


def validate(model, x, y):
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


class Speedometer:
    """MXNet's Speedometer lines and the metrics log (rank 0 only)."""

    def __init__(self, o, label, active):
        self.o, self.label, self.active = o, label, active
        self.log = open(o.metrics, "w") if o.metrics and active else None
        self.t_start = time.time()
        self.reset_epoch()

    def reset_epoch(self):
        self.t0 = self.tlast = time.time()
        self.last = self.correct = self.n = self.ep_correct = self.ep_n = 0
        self.comm = 0.0

    def batch(self, ep, bi, correct, n):
        self.correct += correct
        self.n += n
        self.ep_correct += correct
        self.ep_n += n
        if not self.active or (bi + 1) % self.o.disp_batches:
            return
        t = time.time()
        speed = self.n / (t - self.tlast)
        acc = self.correct / self.n
        print(f"Epoch[{ep}] Batch [{self.last}-{bi + 1}] Speed: "
              f"{speed:.2f} samples/sec accuracy={acc:.6f}", flush=True)
        self.write(ep, bi + 1, speed, acc, None)
        self.tlast, self.last, self.correct, self.n = t, bi + 1, 0, 0

    def epoch(self, ep, val):
        if not self.active:
            return
        t = time.time() - self.t0
        print(f"Epoch[{ep}] Time cost={t:.3f} (communication "
              f"{self.comm:.3f})", flush=True)
        print(f"Epoch[{ep}] Validation-accuracy={val:.6f}", flush=True)
        self.write(ep, -1, self.ep_n / t, self.ep_correct / self.ep_n, val)

    def write(self, ep, batch, speed, train, val):
        if self.log:
            self.log.write(json.dumps({
                "run": self.label, "epoch": ep, "batch": batch,
                "samples_per_sec": speed, "metric": "accuracy",
                "train": train, "val": val, "loss": None, "val_loss": None,
                "comm_s": self.comm, "wall_s": time.time() - self.t_start})
                + "\n")
            self.log.flush()


def save_params(model, path):
    with open(path, "wb") as f:
        for t in model.state_dict().values():
            f.write(t.detach().contiguous().numpy().tobytes())


def emulated_step(model, opt, xb, yb, k):
    """The step of k ranks in one process: each slice's gradient on its
    own, summed in rank order, divided by k (the allreduce's average)."""
    sums = None
    correct = 0
    for r in range(k):
        opt.zero_grad()
        out = model(xb[r])
        F.cross_entropy(out, yb[r]).backward()
        correct += int((out.argmax(1) == yb[r]).sum())
        g = [p.grad.clone() for p in model.parameters()]
        sums = g if sums is None else [s + x for s, x in zip(sums, g)]
    for p, s in zip(model.parameters(), sums):
        p.grad.copy_(s / k)
    opt.step()
    return correct


def train(o, setup, make_optimizer, kind):
    """The training loop shared by the Horovod and the servers' scripts:
    setup() joins the job and returns (rank, size); make_optimizer(model)
    returns the (distributed) optimizer."""
    torch.set_num_threads(o.threads)
    emulate = o.emulate_ranks
    rank, size = (0, emulate) if emulate else setup()
    torch.manual_seed(o.seed)
    model = LeNet()
    opt = make_optimizer(model)
    if not emulate and kind == "hvd":
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    x, y = load(o.data, "train", o.limit)
    vx, vy = load(o.data, "test") if rank == 0 else (None, None)
    glob = o.batch_size * size
    nb = len(x) // glob
    label = o.run_label or f"{kind} {size}w"
    meter = Speedometer(o, label, rank == 0)
    if rank == 0:
        print(f"mnist_torch: {len(x)} images, {size} rank(s) x batch "
              f"{o.batch_size}, {nb} steps an epoch", flush=True)
    for ep in range(o.epochs):
        perm = torch.from_numpy(np.random.default_rng(
            o.seed * 1000003 + ep).permutation(len(x)))
        meter.reset_epoch()
        for bi in range(nb):
            idx = perm[bi * glob:(bi + 1) * glob].view(size, o.batch_size)
            if emulate:
                c = emulated_step(model, opt, [x[i] for i in idx],
                                  [y[i] for i in idx], emulate)
                meter.batch(ep, bi, c, glob)
                continue
            xb, yb = x[idx[rank]], y[idx[rank]]
            opt.zero_grad()
            out = model(xb)
            F.cross_entropy(out, yb).backward()
            t = time.time()
            opt.step()
            meter.comm += time.time() - t
            meter.batch(ep, bi, int((out.argmax(1) == yb).sum()),
                        o.batch_size)
        meter.epoch(ep, validate(model, vx, vy) if rank == 0 else None)
    if o.save and rank == 0:
        save_params(model, o.save)


def main():
    o = options()

    def make(model):
        opt = torch.optim.SGD(model.parameters(), lr=o.lr,
                              momentum=o.momentum)
        if o.emulate_ranks:
            return opt
        comp = (hvd.Compression.fp16 if o.compression == "fp16"
                else hvd.Compression.none)
        return hvd.DistributedOptimizer(
            opt, named_parameters=model.named_parameters(),
            compression=comp)

    def setup():
        hvd.init()
        return hvd.rank(), hvd.size()

    train(o, setup, make, "hvd")


if __name__ == "__main__":
    main()
