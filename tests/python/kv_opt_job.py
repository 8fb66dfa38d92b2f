"""DistributedOptimizer through the servers (kvstore=...), on every
worker of a 2-worker job: each gradient pushed and the sum pulled back
into it, halved (op Average), then the local SGD step - checked against
the same training computed here for both workers, bit for bit; then with
SGD on the servers (server_optimizer): checked against the servers' float
operations done here, bit for bit. Exits non-zero on failure.

(The two modes need not agree with each other: torch's SGD step may fuse
its multiply and add - it does where OpenBLAS runs its AVX-512 or AVX2
kernels - while the servers round the product first.)"""
import hashlib
import sys

import torch

import dtrain
import dtrain.torch as hvd
from hvd_ops_job import data, model, train


def reference(n, steps, on_servers=False):
    ref = model(seed=0)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(steps):
        grads = []
        for q in range(n):
            ref.zero_grad()
            xq, yq = data(q)
            torch.nn.functional.mse_loss(ref(xq), yq).backward()
            grads.append([p.grad.clone() for p in ref.parameters()])
        for i, p in enumerate(ref.parameters()):
            total = grads[0][i] + grads[1][i]
            if on_servers:
                # the servers' sgd: w - (lr * rescale_grad) * sum,
                # the product rounded before the subtraction
                with torch.no_grad():
                    p.sub_(torch.mul(total, 0.1 * 0.5))
            else:
                p.grad.copy_(total / n)
        if not on_servers:
            ropt.step()
    return ref


if __name__ == "__main__":
    server_sgd = sys.argv[1:] == ["server_sgd"]
    kv = dtrain.kv.create("dist_sync")
    r, n = kv.rank, kv.num_workers
    assert n == 2
    m = model(seed=r)  # init: rank 0's values win on every worker
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(m.parameters(), lr=0.1),
        named_parameters=m.named_parameters(), kvstore=kv,
        server_optimizer=("sgd", {"learning_rate": 0.1, "rescale_grad": 0.5})
        if server_sgd else None)
    x, y = data(r)
    train(m, opt, [(x, y)], 3)
    for a, b in zip(m.parameters(),
                    reference(n, 3, on_servers=server_sgd).parameters()):
        assert torch.equal(a, b), (a, b)
    flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    print(f"kv_opt rank {r}: ok {digest}", flush=True)
    kv.close()
