#!/usr/bin/env python3
"""Learn f(x) = 5x + 2 from X = 0, 0.001, ..., 99.999 through a KVStore:
MXNet's linear-regression tutorial on dtrain.kv with numpy.

    PYTHONPATH=build/python python3 examples/python/linreg.py
    dtrain launch -n 2 -s 2 -- python3 examples/python/linreg.py \
        --kvstore dist_sync --batch-size 50

w and b are two keys (with two servers each lives on its own server); the
optimizer runs in the store (update_on_kvstore): every step each worker
pushes the summed gradient of its slice of the global batch and pulls the
new weights. Every worker draws the same permutation and takes slice
`rank` of each global batch of batch-size x num_workers samples, so two
workers at batch 50 compute what one process at batch 100 does. The same
command serves as scheduler or server when DMLC_ROLE says so.
"""
import argparse
import json
import time

import numpy as np

import _find_dtrain  # noqa: F401 - the build's package if not installed
import dtrain

N = 100000


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kvstore", default="local")
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--momentum", type=float, default=0.98)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--disp-batches", type=int, default=250)
    ap.add_argument("--metrics", help="rank 0 writes JSON lines here")
    a = ap.parse_args()

    kv = dtrain.kv.create(a.kvstore)
    rank, nw = kv.rank, kv.num_workers
    glob = a.batch_size * nw
    nbatches = N // glob
    x = (np.arange(N) * 0.001).astype(np.float32)
    y = 5.0 * x + 2.0
    # MXNet's rescale_grad = 1 / global batch, the optimizer in the store.
    kv.set_optimizer("sgd", learning_rate=a.lr, momentum=a.momentum,
                     rescale_grad=1.0 / glob)
    w, b = np.zeros(1, np.float32), np.zeros(1, np.float32)
    kv.init(["w", "b"], [w, b])
    kv.pull(["w", "b"], out=[w, b])
    log = open(a.metrics, "w") if a.metrics and rank == 0 else None
    t_start = time.time()
    for ep in range(a.epochs):
        perm = np.random.default_rng(a.seed * 1000003 + ep).permutation(N)
        t0 = tlast = time.time()
        err_sum, seen, last = 0.0, 0, 0
        ep_err, comm = 0.0, 0.0
        for bi in range(nbatches):
            idx = perm[bi * glob + rank * a.batch_size:
                       bi * glob + (rank + 1) * a.batch_size]
            d = (w[0] * x[idx].astype(np.float64) + b[0]) - y[idx]
            gw = np.array([np.dot(d, x[idx])], np.float32)
            gb = np.array([d.sum()], np.float32)
            tc = time.time()
            kv.pushpull(["w", "b"], [gw, gb], out=[w, b])
            comm += time.time() - tc
            err_sum += np.abs(d).sum()
            ep_err += np.abs(d).sum()
            seen += a.batch_size
            if (bi + 1) % a.disp_batches == 0 and rank == 0:
                t = time.time()
                n = (bi + 1 - last) * a.batch_size
                print(f"Epoch[{ep}] Batch [{last}-{bi + 1}] Speed: "
                      f"{n / (t - tlast):.2f} samples/sec "
                      f"mae={err_sum / n:.6f}", flush=True)
                tlast, last, err_sum = t, bi + 1, 0.0
        if rank == 0:
            t = time.time() - t0
            print(f"Epoch[{ep}] Train-mae={ep_err / seen:.6f} "
                  f"Time cost={t:.3f}", flush=True)
            if log:
                log.write(json.dumps({
                    "run": f"{a.kvstore} {nw}w", "epoch": ep, "batch": -1,
                    "samples_per_sec": seen / t, "metric": "mae",
                    "train": ep_err / seen, "val": None, "loss": None,
                    "val_loss": None, "comm_s": comm,
                    "wall_s": time.time() - t_start}) + "\n")
                log.flush()
    print(f"w={w[0]:.9g} b={b[0]:.9g}", flush=True)
    kv.close()


if __name__ == "__main__":
    main()
