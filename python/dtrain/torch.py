"""Horovod's API for PyTorch over dtrain's collectives (include/dtrain/coll.h).

    import dtrain.torch as hvd
    hvd.init()
    model = ...
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Tensors are CPU tensors of float32, float16, float64 or int32, reduced in
their own memory (the in-place calls, the optimizer) - never copied behind
the caller's back. Every rank must make the same calls in the same order;
a rank that does not gets dtrain.RanksDisagree naming both calls.
"""
import atexit
import os
import sys

import torch

from dtrain import _dtrain
from dtrain._arrays import numpy_view, view

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank",
    "local_size", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "synchronize", "poll", "broadcast", "broadcast_",
    "broadcast_async_", "allgather", "reducescatter", "barrier",
    "broadcast_parameters", "broadcast_optimizer_state",
    "DistributedOptimizer", "Compression", "Average", "Sum", "Min", "Max",
]

Average = _dtrain.AVG
Sum = _dtrain.SUM
Min = _dtrain.MIN
Max = _dtrain.MAX

_comm = None


def init():
    """Join the job (dtrain launch -s 0, mpirun or srun; alone: one rank).
    A process started as scheduler or server serves and exits here."""
    global _comm
    if _comm is None:
        _comm = _dtrain.Coll()
    return None


def shutdown():
    """Leave the job (collective); called at exit if the program does not."""
    global _comm
    if _comm is not None:
        c, _comm = _comm, None
        c.finalize()


# A program that ends on an uncaught exception must not wait in shutdown's
# last barrier for ranks that wait for it: it exits at once, with status
# 1, and the launcher stops the job and names it.
_failed = False
_excepthook = sys.excepthook


def _note_failure(*args):
    global _failed
    _failed = True
    _excepthook(*args)


def _at_exit():
    if _failed and _comm is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    shutdown()


sys.excepthook = _note_failure
atexit.register(_at_exit)


def is_initialized():
    return _comm is not None


def _c():
    if _comm is None:
        raise ValueError("dtrain.torch.init() has not been called")
    return _comm


def rank():
    return _c().rank


def size():
    return _c().size


def local_rank():
    return _c().local_rank


def local_size():
    return _c().local_size


def barrier():
    _c().barrier()


def _op(average, op):
    if average is None and op is not None:
        return op  # the common case first: a small call is a few us
    if average is not None:
        if op is not None:
            raise ValueError("give average or op, not both")
        return Average if average else Sum
    return Average if op is None else op


class _Handle:
    """An asynchronous call: the C handle, the tensor the result lands in,
    and what synchronize() does after the wait."""

    def __init__(self, h, output, after=None):
        self.h, self.output, self.after = h, output, after


def synchronize(handle):
    """Wait for an asynchronous call and return its output tensor."""
    handle.h.wait()
    if handle.after is not None:
        handle.after()
    return handle.output


def poll(handle):
    """True once the asynchronous call has finished."""
    return bool(handle.h.poll())


# (allreduce_ and allreduce_async_ pass the tensor as it is - view() is
# the identity for tensors - and reach the communicator without _c()'s
# call: on a small allreduce the Python layer's calls are a good part of
# the binding's cost.)
def allreduce_async_(tensor, average=None, name=None, op=None):
    """Start reducing tensor in place over the ranks; returns a handle."""
    h = (_comm or _c()).allreduce_async(tensor, None, _op(average, op))
    return _Handle(h, tensor)


def allreduce_(tensor, average=None, name=None, op=None):
    """Reduce tensor in place (Average by default) and return it."""
    (_comm or _c()).allreduce(tensor, None, _op(average, op))
    return tensor


def allreduce_async(tensor, average=None, name=None, op=None,
                    compression=None):
    """Start reducing a copy of tensor; synchronize() returns the result
    as a new tensor (decompressed to tensor's type)."""
    comp = compression or Compression.none
    work, ctx = comp.compress(tensor)
    if work is tensor:
        work = tensor.detach().clone()
    h = _c().allreduce_async(view(work, "tensor"), None, _op(average, op))
    hd = _Handle(h, work)
    if ctx is not None:
        def after():
            hd.output = comp.decompress(work, ctx)
        hd.after = after
    return hd


def allreduce(tensor, average=None, name=None, op=None, compression=None):
    """The reduction of tensor over the ranks, as a new tensor."""
    return synchronize(allreduce_async(tensor, average, name, op,
                                       compression))


def _raw(tensor, arg):
    """A byte view of any CPU tensor, for calls that only move data."""
    a = numpy_view(tensor, arg).reshape(-1)
    if a.dtype.name in ("float32", "float16", "float64", "int32"):
        return a
    if a.nbytes % 4:
        raise TypeError(f"argument '{arg}': {tensor.dtype} of {a.nbytes} "
                        "bytes (a broadcast of another type moves whole "
                        "4-byte words)")
    return a.view("uint8")


def broadcast_async_(tensor, root_rank, name=None):
    h = _c().broadcast_async(_raw(tensor, "tensor"), root_rank)
    return _Handle(h, tensor)


def broadcast_(tensor, root_rank, name=None):
    """Copy root_rank's tensor into every rank's tensor, in place."""
    _c().broadcast(_raw(tensor, "tensor"), root_rank)
    return tensor


def broadcast(tensor, root_rank, name=None):
    """root_rank's tensor, as a new tensor on every rank."""
    return broadcast_(tensor.detach().clone(), root_rank)


def allgather(tensor, name=None):
    """The ranks' tensors concatenated along the first dimension (which
    may differ between ranks)."""
    c = _c()
    t = tensor.reshape(1) if tensor.dim() == 0 else tensor
    rows = torch.tensor([t.shape[0]], dtype=torch.int32)
    all_rows = torch.zeros(c.size, dtype=torch.int32)
    c.allgather(view(rows, "tensor"), view(all_rows, "tensor"))
    per_row = t[0].numel() if t.shape[0] else _numel(t.shape[1:])
    out = torch.empty((int(all_rows.sum()),) + tuple(t.shape[1:]),
                      dtype=t.dtype)
    c.allgather(view(t, "tensor"), view(out, "out"),
                [int(r) * per_row for r in all_rows])
    return out


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def reducescatter(tensor, name=None, op=Average):
    """Reduce tensor over the ranks and return this rank's block of the
    first dimension (which must divide evenly by size())."""
    c = _c()
    if tensor.dim() == 0 or tensor.shape[0] % c.size:
        raise ValueError(f"argument 'tensor': first dimension "
                         f"{tuple(tensor.shape)[:1]} does not divide into "
                         f"{c.size} equal blocks")
    out = torch.empty((tensor.shape[0] // c.size,) + tuple(tensor.shape[1:]),
                      dtype=tensor.dtype)
    c.reduce_scatter(view(tensor, "tensor"), view(out, "out"), op)
    return out


def broadcast_parameters(params, root_rank):
    """Copy root_rank's parameters to every rank in place: a state_dict(),
    named_parameters() or a list of (name, tensor), in name order."""
    if isinstance(params, dict):
        params = sorted(params.items())
    else:
        params = list(params)
    handles = [broadcast_async_(p.data if isinstance(p, torch.nn.Parameter)
                                else p, root_rank)
               for _, p in params]
    for h in handles:
        synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank):
    """Copy root_rank's optimizer state (its tensors and the numbers of its
    param_groups, the learning rate among them) to every rank. The ranks'
    states must have the same layout: a rank that differs fails with
    dtrain.RanksDisagree."""
    for group in optimizer.param_groups:
        keys = sorted(k for k, v in group.items()
                      if isinstance(v, (int, float)) and
                      not isinstance(v, bool))
        vals = torch.tensor([float(group[k]) for k in keys],
                            dtype=torch.float64)
        broadcast_(vals, root_rank)
        for k, v in zip(keys, vals.tolist()):
            group[k] = type(group[k])(v)
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            for k in sorted(state):
                v = state[k]
                if torch.is_tensor(v):
                    broadcast_(v, root_rank)
                elif isinstance(v, (int, float)):
                    t = torch.tensor([float(v)], dtype=torch.float64)
                    state[k] = type(v)(broadcast_(t, root_rank).item())


class Compression:
    """Horovod's gradient compression of the allreduces: none, or fp16
    (halves on the wire; the C library sums in float32 at each step)."""

    class none:
        @staticmethod
        def compress(tensor):
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor

    class fp16:
        @staticmethod
        def compress(tensor):
            if tensor.dtype in (torch.float32, torch.float64):
                return tensor.to(torch.float16), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else tensor.to(ctx)


from dtrain._torch_opt import DistributedOptimizer  # noqa: E402
from dtrain import _torch_elastic as elastic  # noqa: E402,F401
