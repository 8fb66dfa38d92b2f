#!/usr/bin/env python3
"""Sparse logistic regression through row-sparse keys: MXNet's sparse
linear-classification example on dtrain.kv with numpy.

    dtrain launch -n 2 -s 2 -- python3 examples/python/sparse_logreg.py
    PYTHONPATH=build/python python3 examples/python/sparse_logreg.py

The data are synthetic: each sample has --nnz of --features binary
features, and its label says whether a hidden weight vector scores it
positive. The weights are one row-sparse key of features x 1 on the
servers, with SGD there; each step a worker pulls only the rows its batch
touches (row_sparse_pull), computes their gradients and pushes only those
rows (a RowSparse push). Every worker draws the same data and takes slice
`rank` of each global batch. Prints the accuracy on held-out samples.
"""
import argparse

import numpy as np

import _find_dtrain  # noqa: F401 - the build's package if not installed
import dtrain


def make_data(features, nnz, n, seed):
    rng = np.random.default_rng(seed)
    true_w = rng.standard_normal(features)
    cols = np.stack([rng.choice(features, nnz, replace=False)
                     for _ in range(n)])
    labels = (true_w[cols].sum(1) > 0).astype(np.float64)
    return cols, labels


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kvstore", default="local")
    ap.add_argument("--features", type=int, default=5000)
    ap.add_argument("--nnz", type=int, default=20)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()

    kv = dtrain.kv.create(a.kvstore)
    rank, nw = kv.rank, kv.num_workers
    cols, labels = make_data(a.features, a.nnz, a.samples + 2000, a.seed)
    test_cols, test_labels = cols[a.samples:], labels[a.samples:]
    glob = a.batch_size * nw
    kv.set_optimizer("sgd", learning_rate=a.lr, rescale_grad=1.0 / glob)
    kv.init_row_sparse("w", (a.features, 1))  # zeros
    for ep in range(a.epochs):
        perm = np.random.default_rng(a.seed + ep).permutation(a.samples)
        for bi in range(a.samples // glob):
            idx = perm[bi * glob + rank * a.batch_size:
                       bi * glob + (rank + 1) * a.batch_size]
            rows, inv = np.unique(cols[idx], return_inverse=True)
            rows = rows.astype(np.uint64)
            w = np.empty((len(rows), 1), np.float32)
            kv.row_sparse_pull("w", out=w, row_ids=rows)
            wb = w[inv.reshape(len(idx), a.nnz), 0].astype(np.float64)
            p = 1 / (1 + np.exp(-wb.sum(1)))
            g = np.zeros(len(rows))
            np.add.at(g, inv.reshape(len(idx), a.nnz),
                      (p - labels[idx])[:, None])
            kv.push("w", dtrain.kv.RowSparse(
                g.astype(np.float32).reshape(-1, 1), rows))
        rows, inv = np.unique(test_cols, return_inverse=True)
        w = np.empty((len(rows), 1), np.float32)
        kv.row_sparse_pull("w", out=w, row_ids=rows.astype(np.uint64))
        score = w[inv.reshape(test_cols.shape), 0].sum(1)
        acc = float(((score > 0) == (test_labels > 0)).mean())
        if rank == 0:
            print(f"Epoch[{ep}] Validation-accuracy={acc:.6f}", flush=True)
    kv.close()


if __name__ == "__main__":
    main()
