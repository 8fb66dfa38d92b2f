#!/usr/bin/env python3
"""Horovod Elastic's PyTorch MNIST script on dtrain.torch.elastic: LeNet
on Fashion-MNIST that goes on when a worker is lost or joins.

    dtrain launch -n 3 -s 0 --min-workers 2 -- \\
        python3 examples/python/elastic_mnist.py --save p.bin

The model, the optimizer's momentum and the position in the data (the
epoch and the images of it consumed, an ElasticSampler) make up a
TorchState, committed every --commit-every steps. When a worker is lost,
every survivor's allreduce fails with dtrain.MembershipChanged; run() puts
the last commit of the new rank 0 back and calls train() again, which
deals the rest of the epoch to the workers that remain - each image of an
epoch is trained on once. A worker started with the job's environment
(or by --host-discovery-script, or a DTRAIN_ELASTIC_SCHEDULE's "+1")
takes the members' state before its first step. The learning rate
follows the number of workers (--lr is per --base-workers workers), by a
reset callback. Each change is logged with the DTRAIN_ELASTIC_SCHEDULE
that replays it; the replay ends with the same parameters, bit for bit.

--die-at STEP --die-rank R: launch rank R kills itself (SIGKILL) before
that step, to see the job go on.
"""
import argparse
import os
import signal

import torch
import torch.nn.functional as F

import _find_dtrain  # noqa: F401 - the build's package if not installed
import dtrain.torch as hvd
from mnist_torch_hvd import DATA, LeNet, load, save_params, validate


def options():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64,
                    help="images per worker per step")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--base-workers", type=int, default=3,
                    help="the number of workers --lr is for")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--limit", type=int, default=0,
                    help="use only the first N training images")
    ap.add_argument("--commit-every", type=int, default=10)
    ap.add_argument("--die-at", type=int, default=-1)
    ap.add_argument("--die-rank", type=int, default=-1)
    ap.add_argument("--save", help="rank 0 saves the parameters (raw "
                    "float32, in state_dict order) to this file")
    return ap.parse_args()


def main():
    o = options()
    torch.set_num_threads(1)
    hvd.init()
    launch_rank = hvd.rank()
    torch.manual_seed(o.seed)
    model = LeNet()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum),
        named_parameters=model.named_parameters())
    # (the momentum buffers exist before they are registered)
    hvd.elastic.init_optimizer_state(opt)
    x, y = load(o.data, "train", o.limit)
    vx, vy = load(o.data, "test")
    state = hvd.elastic.TorchState(
        model, opt, sampler=hvd.elastic.ElasticSampler(len(x), o.batch_size,
                                                       seed=o.seed))

    def scale_lr():
        for g in opt.param_groups:
            g["lr"] = o.lr * hvd.size() / o.base_workers
        if hvd.rank() == 0:
            print(f"elastic_mnist: {hvd.size()} workers, lr "
                  f"{opt.param_groups[0]['lr']:g}", flush=True)

    scale_lr()
    state.register_reset_callbacks([scale_lr])

    @hvd.elastic.run
    def train(state):
        s = state.sampler
        while s.epoch < o.epochs:
            step = state.begin_step(commit_every=o.commit_every)
            if step == o.die_at and launch_rank == o.die_rank:
                os.kill(os.getpid(), signal.SIGKILL)
            idx = s.indices(hvd.rank(), hvd.size())
            if idx is None:  # the epoch's end
                if hvd.rank() == 0:
                    print(f"Epoch[{s.epoch}] Validation-accuracy="
                          f"{validate(model, vx, vy):.6f}", flush=True)
                s.set_epoch(s.epoch + 1)
                continue
            idx = torch.from_numpy(idx)
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            s.advance(hvd.size())

    train(state)
    if state.left:
        print(f"elastic_mnist: worker {launch_rank} left at step "
              f"{state.next_step}", flush=True)
    elif hvd.rank() == 0:
        print(f"elastic_mnist: done with {hvd.size()} workers", flush=True)
        if o.save:
            save_params(model, o.save)


if __name__ == "__main__":
    main()
