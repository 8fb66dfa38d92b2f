#!/usr/bin/env python3
"""mnist_torch_hvd.py through the parameter servers: the same LeNet on
Fashion-MNIST, with dtrain.torch.DistributedOptimizer(kvstore=...) pushing
each gradient to the servers as soon as backward() has produced it, the
servers running SGD with momentum (MXNet's update_on_kvstore), and the
updated weights pulled straight into the parameters.

    dtrain launch -n 2 -s 2 -- python3 examples/python/mnist_torch_ps.py

The same command serves as scheduler or server when DMLC_ROLE says so.
The servers' SGD is MXNet's (weight += momentum * mom - lr * grad, with
rescale_grad = 1 / workers averaging the workers' mean gradients); the
options are those of mnist_torch_hvd.py.
"""
import torch

import _find_dtrain  # noqa: F401 - the build's package if not installed
import dtrain
import dtrain.torch as hvd
from mnist_torch_hvd import options, train


def main():
    o = options()
    store = None

    def setup():
        nonlocal store
        store = dtrain.kv.create("dist_sync")
        return store.rank, store.num_workers

    def make(model):
        opt = torch.optim.SGD(model.parameters(), lr=o.lr)
        if o.emulate_ranks:
            return opt
        server_sgd = ("sgd", {"learning_rate": o.lr,
                              "momentum": o.momentum,
                              "rescale_grad": 1.0 / store.num_workers})
        return hvd.DistributedOptimizer(
            opt, named_parameters=model.named_parameters(),
            kvstore=store, server_optimizer=server_sgd)

    train(o, setup, make, "dist_sync")
    if store is not None:
        store.close()


if __name__ == "__main__":
    main()
