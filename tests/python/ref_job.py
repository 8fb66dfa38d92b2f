"""The Python side of the bit-for-bit tests: the calls of
tests/progs/py_ref.c through dtrain.kv and dtrain.torch, on the same data,
each rank's results written raw to DIR/py_<mode>.<rank>.

    ref_job.py coll|coll_torch|kv_sum|kv_sgd DIR N

coll goes through numpy arrays and the extension's Coll, coll_torch through
torch tensors and dtrain.torch (allreduce_ in place, then allreduce).
"""
import sys

import numpy as np

import dtrain


def gen(n, seed):
    """float32 data of ±[0.125, 0.25): the bits of py_ref.c's gen()."""
    i = np.arange(n, dtype=np.uint64)
    u = (i * 2654435761 + seed * 0x9E3779B9 + 12345) & 0xFFFFFFFF
    u ^= u >> 16
    u = (u * 0x45D9F3B) & 0xFFFFFFFF
    u ^= u >> 16
    bits = 0x3E000000 | (u >> 9) | ((u & 1) << 31)
    return bits.astype(np.uint32).view(np.float32)


def save(d, mode, rank, arr):
    with open(f"{d}/py_{mode}.{rank}", "ab") as f:
        f.write(memoryview(arr).cast("B"))


def coll(d, n):
    from dtrain import _dtrain
    c = _dtrain.Coll()
    a = gen(n, c.rank)
    r = np.empty(n, np.float32)
    c.allreduce(a, r, _dtrain.SUM)
    save(d, "coll", c.rank, r)
    c.allreduce(a, r, _dtrain.AVG)
    save(d, "coll", c.rank, r)
    x = a.astype(np.float64) * 1.1
    c.allreduce(x, None, _dtrain.SUM)  # in place
    save(d, "coll", c.rank, x)
    c.finalize()


def coll_torch(d, n):
    import torch
    import dtrain.torch as hvd
    hvd.init()
    a = torch.from_numpy(gen(n, hvd.rank()))
    t = a.clone()
    ptr = t.data_ptr()
    hvd.allreduce_(t, op=hvd.Sum)
    assert t.data_ptr() == ptr
    save(d, "coll_torch", hvd.rank(), t.numpy())
    save(d, "coll_torch", hvd.rank(), hvd.allreduce(a).numpy())
    x = a.double() * 1.1
    save(d, "coll_torch", hvd.rank(), hvd.allreduce(x, op=hvd.Sum).numpy())
    hvd.shutdown()


def kv(d, mode, n):
    sgd = mode == "kv_sgd"
    store = dtrain.kv.create("dist_sync")
    if sgd:
        store.set_optimizer("sgd", learning_rate=0.1, momentum=0.9,
                            wd=0.0001, rescale_grad=0.5)
    key = 1 if sgd else 0
    store.init(key, gen(n, 7) if sgd else np.zeros(n, np.float32))
    out = np.empty(n, np.float32)
    for step in range(3 if sgd else 1):
        store.pushpull(key, gen(n, store.rank + 10 * step), out=out)
        save(d, mode, store.rank, out)
    store.close()


if __name__ == "__main__":
    mode, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "coll":
        coll(d, n)
    elif mode == "coll_torch":
        coll_torch(d, n)
    else:
        kv(d, mode, n)
