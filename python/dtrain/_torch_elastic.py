"""dtrain.torch.elastic: Horovod Elastic's API for PyTorch (TorchState,
run) over dtrain.elastic, on the communicator of dtrain.torch.init().

    import dtrain.torch as hvd
    hvd.init()
    model, opt = ..., hvd.DistributedOptimizer(...)
    hvd.elastic.init_optimizer_state(opt)    # before TorchState
    state = hvd.elastic.TorchState(model, opt, epoch=0,
                                   sampler=hvd.elastic.ElasticSampler(n, b))

    @hvd.elastic.run
    def train(state):
        ...

TorchState keeps the model's parameters and buffers and the optimizer's
state tensors in their own memory (each registered once, at the start),
and the keyword arguments as plain values. The optimizer's state must
exist when the TorchState is made - torch creates it lazily, at the first
step - so that every rank, joiners included, registers the same tensors:
init_optimizer_state(optimizer) makes it by one step with zero gradients
that leaves the parameters as they are (for SGD with momentum, Adam,
RMSprop, Adagrad and the like; weight decay is turned off for it). The
tensors are updated in place by the optimizer and the model; a program
that gives a parameter new storage (param.data = ...) breaks the state.
"""
import torch

from dtrain import elastic as _el
from dtrain._arrays import numpy_view

ElasticSampler = _el.ElasticSampler
HostsUpdatedInterrupt = _el.HostsUpdatedInterrupt
MembershipChanged = _el.MembershipChanged
ObjectState = _el.ObjectState
run = _el.run

__all__ = ["TorchState", "ObjectState", "ElasticSampler", "run",
           "init_optimizer_state", "HostsUpdatedInterrupt",
           "MembershipChanged"]

# The element types the C library takes as they are; any other tensor is
# kept as its bytes.
_TYPED = (torch.float32, torch.float64, torch.float16, torch.int32)


def init_optimizer_state(optimizer):
    """Create optimizer's lazy state (momentum buffers, Adam's moments) by
    one step with zero gradients, leaving the parameters unchanged; a
    no-op for a state that exists."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if all(p in optimizer.state and optimizer.state[p] for p in params):
        return
    saved = []
    for g in optimizer.param_groups:
        saved.append((g, g.get("weight_decay", None)))
        if "weight_decay" in g:
            g["weight_decay"] = 0
    grads = [p.grad for p in params]
    before = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
    # (a DistributedOptimizer's own step would reduce the zeros over the
    # ranks: a joiner cannot yet, so the wrapped optimizer's step runs)
    cls = type(optimizer)
    if hasattr(optimizer, "synchronize") and hasattr(optimizer, "_handles"):
        cls = cls.__bases__[0]
    with torch.no_grad():
        cls.step(optimizer)
        for p, b in zip(params, before):
            p.copy_(b)
        # (a step count starts again at 0, as in a fresh optimizer)
        for p in params:
            st = optimizer.state.get(p, {})
            if torch.is_tensor(st.get("step")):
                st["step"].zero_()
            elif isinstance(st.get("step"), int):
                st["step"] = 0
    for p, gr in zip(params, grads):
        p.grad = gr
    for g, wd in saved:
        if wd is not None:
            g["weight_decay"] = wd


def _tensor_buffer(t, name):
    """What registers tensor t: itself, or a byte view of its memory."""
    if not t.is_contiguous():
        raise ValueError(f"TorchState: tensor '{name}' is not contiguous "
                         "(the state is kept in the tensor's own memory)")
    if t.dtype in _TYPED:
        return t.detach()
    return numpy_view(t.detach(), name).reshape(-1).view("uint8")


class TorchState(_el.State):
    """Horovod's TorchState: the model, the optimizer and plain values
    (epoch=0, batch=0, sampler=ElasticSampler(...)), restored together.
    comm defaults to dtrain.torch's communicator (hvd.init() first)."""

    def __init__(self, model=None, optimizer=None, comm=None, **kwargs):
        from dtrain import torch as hvd
        super().__init__(comm if comm is not None else hvd._c(), **kwargs)
        self.model, self.optimizer = model, optimizer
        if model is not None:
            for name, t in model.state_dict(keep_vars=True).items():
                self.register("model." + name, _tensor_buffer(t, name))
        if optimizer is not None:
            self._register_optimizer(optimizer)

    def on_reset(self):
        """After a change: a DistributedOptimizer forgets the reductions
        of the step that failed; then the reset callbacks run."""
        reset = getattr(self.optimizer, "_elastic_reset", None)
        if reset is not None:
            reset()
        super().on_reset()

    def _register_optimizer(self, optimizer):
        params = [p for g in optimizer.param_groups for p in g["params"]]
        if any(p.requires_grad and not optimizer.state.get(p)
               for p in params):
            raise ValueError("TorchState: the optimizer has no state yet "
                             "(call dtrain.torch.elastic."
                             "init_optimizer_state(optimizer) first, so "
                             "that every rank registers the same tensors)")
        for i, p in enumerate(params):
            st = optimizer.state.get(p, {})
            for k in sorted(st):
                v = st[k]
                if not torch.is_tensor(v):
                    raise ValueError(f"TorchState: optimizer state "
                                     f"'{k}' of parameter {i} is a "
                                     f"{type(v).__name__}, not a tensor")
                self.register(f"optimizer.{i}.{k}",
                              _tensor_buffer(v, f"optimizer.{i}.{k}"))
