"""dtrain.torch's calls on every rank of a job, each checked against what
this rank computes for itself (every rank's data is a function of its
rank): allgather with ranks of different lengths, reducescatter,
broadcast_ of a type the reductions do not take, broadcast_parameters,
allreduce_group_async against one allreduce per tensor, and
DistributedOptimizer with backward_passes_per_step=2 (gradients in one
flat buffer, the default; started one by one; fused in buckets; and with
zero_grad(set_to_none=True)) against the same training
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


def check_group(r, n):
    """One call for a list of tensors of several types and sizes (odd,
    and over one chunk of the ring) gives, bit for bit and in their own
    memory, what one allreduce per tensor gives."""
    c = hvd._c()
    g = torch.Generator().manual_seed(7 + r)
    ts = [torch.randn(100003, generator=g), torch.randn(3, generator=g),
          torch.randn(17, generator=g).double(),
          torch.arange(5, dtype=torch.int32) * (r + 1),
          torch.randn(9, generator=g)]
    ptrs = [t.data_ptr() for t in ts]
    for op in (hvd.Average, hvd.Sum):
        got = [t.clone() for t in ts]
        ref = [t.clone() for t in ts]
        for t in ref:
            c.allreduce(t, None, op)
        c.allreduce_group_async(got, op).wait()
        for a, b in zip(got, ref):
            assert a.dtype == b.dtype and torch.equal(a, b), (op, a, b)
    group = c.allreduce_group_async(ts, hvd.Sum)
    group.wait()
    assert [t.data_ptr() for t in ts] == ptrs
    assert torch.equal(ts[3], torch.arange(5, dtype=torch.int32) *
                       (n * (n + 1) // 2)), ts[3]
    assert group.poll()


def train(m, opt, ranks_data, steps, set_to_none=False):
    for _ in range(steps):
        opt.zero_grad(set_to_none=set_to_none)
        for x, y in ranks_data:
            torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()


def check_optimizer(r, n, set_to_none=False, **fusion):
    m = model(seed=r)  # different on every rank until the broadcast
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    ref = model(seed=0)
    for a, b in zip(m.state_dict().values(), ref.state_dict().values()):
        assert torch.equal(a, b)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(m.parameters(), lr=0.1),
        named_parameters=m.named_parameters(), backward_passes_per_step=2,
        **fusion)
    x, y = data(r)
    train(m, opt, [(x[:4], y[:4]), (x[4:], y[4:])], 3, set_to_none)
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
    check_group(r, n)
    check_optimizer(r, n)  # the default: one flat gradient buffer
    check_optimizer(r, n, set_to_none=True)  # views dropped: one group
    check_optimizer(r, n, fusion_bytes=0)  # one allreduce per gradient
    check_optimizer(r, n, fusion_bytes=64)  # buckets of 64 bytes
    check_fp16(r)
    print(f"hvd_ops rank {r} of {n}: ok", flush=True)
    hvd.shutdown()
