"""dtrain.torch's calls on every rank of a job, each checked against what
this rank computes for itself (every rank's data is a function of its
rank): allgather with ranks of different lengths, reducescatter,
broadcast_ of a type the reductions do not take, broadcast_parameters,
and DistributedOptimizer with backward_passes_per_step=2 (gradients
started one by one, and fused in buckets) against the same training
computed here for all ranks - equal to the bit on 2 ranks - and
with fp16 compression (equal on every rank). Exits non-zero on failure."""
import torch

import dtrain.torch as hvd


def data(r):
    g = torch.Generator().manual_seed(100 + r)
    return torch.randn(8, 5, generator=g), torch.randn(8, 1, generator=g)


def model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 1))


def same_on_all_ranks(t):
    got = hvd.allgather(t.reshape(1, -1))
    assert all(torch.equal(got[0], got[i]) for i in range(len(got))), got


def check_collectives(r, n):
    mine = torch.full((r + 1, 2), float(r))
    got = hvd.allgather(mine)
    want = torch.cat([torch.full((i + 1, 2), float(i)) for i in range(n)])
    assert torch.equal(got, want), got
    rs = hvd.reducescatter(torch.ones(n * 3, 2) * (r + 1), op=hvd.Sum)
    assert torch.equal(rs, torch.full((3, 2), n * (n + 1) / 2)), rs
    b = torch.arange(5, dtype=torch.int64) * (r + 1)
    hvd.broadcast_(b, root_rank=n - 1)
    assert torch.equal(b, torch.arange(5, dtype=torch.int64) * n), b


def train(m, opt, ranks_data, steps):
    for _ in range(steps):
        opt.zero_grad()
        for x, y in ranks_data:
            torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()


def check_optimizer(r, n, fusion_bytes=0):
    m = model(seed=r)  # different on every rank until the broadcast
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    ref = model(seed=0)
    for a, b in zip(m.state_dict().values(), ref.state_dict().values()):
        assert torch.equal(a, b)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(m.parameters(), lr=0.1),
        named_parameters=m.named_parameters(), backward_passes_per_step=2,
        fusion_bytes=fusion_bytes)
    x, y = data(r)
    train(m, opt, [(x[:4], y[:4]), (x[4:], y[4:])], 3)
    # Here: the same, every rank's two passes summed, then averaged over
    # the ranks in rank order, as the allreduce does.
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        grads = []
        for q in range(n):
            ref.zero_grad()
            xq, yq = data(q)
            for sl in (slice(0, 4), slice(4, 8)):
                torch.nn.functional.mse_loss(ref(xq[sl]), yq[sl]).backward()
            grads.append([p.grad.clone() for p in ref.parameters()])
        for i, p in enumerate(ref.parameters()):
            s = grads[0][i]
            for q in range(1, n):
                s = s + grads[q][i]
            p.grad.copy_(s / n)
        ropt.step()
    for a, b in zip(m.parameters(), ref.parameters()):
        same_on_all_ranks(a.detach())
        if n == 2:
            assert torch.equal(a, b), (a, b)
        else:
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a, b)


def check_fp16(r):
    m = model(seed=0)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(m.parameters(), lr=0.1),
        named_parameters=m.named_parameters(),
        compression=hvd.Compression.fp16)
    x, y = data(r)
    train(m, opt, [(x, y)], 2)
    for p in m.parameters():
        same_on_all_ranks(p.detach())


if __name__ == "__main__":
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    # (every rank of the tests' jobs runs on this host)
    assert (hvd.local_rank(), hvd.local_size()) == (r, n)
    check_collectives(r, n)
    check_optimizer(r, n)
    check_optimizer(r, n, fusion_bytes=64)  # one group of all four tensors
    check_fp16(r)
    print(f"hvd_ops rank {r} of {n}: ok", flush=True)
    hvd.shutdown()
