"""Horovod's DistributedOptimizer for dtrain.torch, in two flavours.

Collective (the default): each parameter's gradient is hooked, and its
allreduce starts in the background as soon as autograd has accumulated it
(after backward_passes_per_step passes), so communication overlaps the rest
of the backward pass; step() waits for every reduction, then runs the
wrapped optimizer. The reductions are queued in the order the gradients
become ready, which is the same on every rank for the same model.

Parameter server (kvstore='dist_sync' or 'dist_async'): each ready gradient
is pushed to the servers and the aggregate pulled back into it in place
(divided by the number of workers for op=Average) before the local step;
with server_optimizer=('sgd', {...}) the servers run the optimizer and the
pull brings the updated weights straight into the parameters instead.
"""
import torch

from dtrain import _dtrain
from dtrain._arrays import view


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression,
                 backward_passes_per_step, op, kv, server_optimizer,
                 fusion_bytes):
        super(self.__class__, self).__init__(params)
        self._fusion = fusion_bytes if kv is None else 0
        self._bucket, self._bucket_bytes = [], 0
        from dtrain import torch as hvd
        self._hvd = hvd
        self._compression = compression or hvd.Compression.none
        self._passes = backward_passes_per_step
        self._op = op
        self._kv = kv
        self._server_opt = server_optimizer is not None
        self._params = [p for g in self.param_groups for p in g["params"]
                        if p.requires_grad]
        if named_parameters is not None:
            names = {id(p) for _, p in named_parameters}
            missing = [i for i, p in enumerate(self._params)
                       if id(p) not in names]
            if missing:
                raise ValueError(f"named_parameters lacks parameters "
                                 f"{missing} of the optimizer")
        self._key = {p: i for i, p in enumerate(self._params)}
        self._handles = {}
        self._delay = {p: self._passes for p in self._params}
        self._grad_accs = []
        if kv is not None:
            self._kv_setup(server_optimizer)
        else:
            hvd.init()
        self._register_hooks()

    def _kv_setup(self, server_optimizer):
        if server_optimizer is not None:
            name, params = server_optimizer
            self._kv.set_optimizer(name, **params)
        # init is collective and rank 0's value wins: the workers start
        # from the same weights.
        for p in self._params:
            self._kv.init(self._key[p], view(p.data, "parameter"))
            self._kv.pull(self._key[p], out=view(p.data, "parameter"))

    def _register_hooks(self):
        for p in self._params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(p))
            self._grad_accs.append(acc)

    def _make_hook(self, p):
        def hook(*ignore):
            if self._delay[p] <= 0:
                raise AssertionError(
                    "a gradient was computed more than "
                    "backward_passes_per_step times before step(); call "
                    "step() or synchronize() in between")
            self._delay[p] -= 1
            if self._delay[p] == 0:
                self._ready(p)
        return hook

    def _ready(self, p):
        """p's gradient is final: start its reduction, or with fusion
        add it to the bucket, which goes as one fused group when full."""
        if not self._fusion:
            self._handles[p] = self._start(p)
            return
        self._bucket.append(p)
        self._bucket_bytes += p.numel() * p.element_size()
        if self._bucket_bytes >= self._fusion:
            self._flush()

    def _flush(self):
        """Start the bucket's reductions as one group: the C library fuses
        consecutive allreduces of a group into one operation."""
        if not self._bucket:
            return
        c = self._hvd._c()
        c.group_start()
        try:
            for p in self._bucket:
                self._handles[p] = self._start(p)
        finally:
            c.group_end()
        self._bucket, self._bucket_bytes = [], 0

    def _start(self, p):
        """Start the reduction of p's gradient; what synchronize waits on."""
        if p.grad is None:
            p.grad = torch.zeros_like(p.data)
        if self._kv is not None:
            raw = self._kv.raw
            g = view(p.grad, "grad")
            out = view(p.data, "parameter") if self._server_opt else g
            return raw.pushpull_async(self._key[p], g, out), None, None
        work, ctx = self._compression.compress(p.grad)
        h = self._hvd._c().allreduce_async(view(work, "grad"), None,
                                           self._op)
        return h, work, ctx

    def synchronize(self):
        """Wait for every gradient's reduction (starting those whose hook
        did not fire, in parameter order) and put the results in place."""
        for p in self._params:
            if p not in self._handles and p not in self._bucket:
                self._ready(p)
        self._flush()
        n = self._kv.num_workers if self._kv is not None else 1
        for p in self._params:
            h, work, ctx = self._handles.pop(p)
            h.wait()
            if ctx is not None:
                p.grad.copy_(self._compression.decompress(work, ctx))
            elif (self._kv is not None and not self._server_opt and
                  self._op == _dtrain.AVG and n > 1):
                p.grad.div_(n)
            self._delay[p] = self._passes

    def step(self, closure=None):
        self.synchronize()
        if self._server_opt:
            return None  # the servers updated the parameters
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("zero_grad() while gradients are being "
                                 "reduced: call step() or synchronize() "
                                 "first")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=_dtrain.AVG,
                         kvstore=None, server_optimizer=None,
                         fusion_bytes=0):
    """Wrap optimizer so that step() uses the gradients reduced over the
    workers (see the module's documentation). kvstore: None for the
    collectives, or a KVStore type ('dist_sync') or store to go through the
    servers; server_optimizer: (name, {params}) to update on the servers.
    fusion_bytes > 0 (collectives): ready gradients wait in a bucket until
    it holds that many bytes (or step()), then go as one fused group - fewer,
    larger operations for a model of many small tensors, at the cost of
    starting later; 0 starts each gradient's allreduce at once."""
    if backward_passes_per_step < 1:
        raise ValueError("argument 'backward_passes_per_step' must be >= 1")
    kv = kvstore
    if isinstance(kvstore, str):
        from dtrain import kv as dkv
        kv = dkv.create(kvstore)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression,
               backward_passes_per_step, op, kv, server_optimizer,
               fusion_bytes)
