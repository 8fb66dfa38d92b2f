"""Horovod's DistributedOptimizer for dtrain.torch, in two flavours.

Collective (the default): each parameter's gradient is hooked; once
autograd has accumulated it (after backward_passes_per_step passes) it
joins a bucket, and a full bucket - or the last one, when the last
gradient arrives - starts in the background as one fused group, so
communication overlaps the rest of the backward pass; step() waits for
every reduction, then runs the wrapped optimizer. A model whose gradients
fit in one bucket has them as views of one flat buffer, reduced by one
call in step(). The reductions are queued in the order the gradients
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


# The default bucket of DistributedOptimizer. A model whose gradients fit
# in it (LeNet's are 178 KB) is reduced as one flat buffer; a larger one
# still starts its first buckets during backward(). Measured on LeNet's
# gradients between two ranks of a loaded two-core machine: ten
# allreduces started from the hooks took 317 us a step, one group of ten
# 128 us, one synchronous allreduce of the flat buffer 69 us.
FUSION_BYTES = 1 << 20


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression,
                 backward_passes_per_step, op, kv, server_optimizer,
                 fusion_bytes):
        super(self.__class__, self).__init__(params)
        self._fusion = fusion_bytes if kv is None else 0
        self._bucket, self._bucket_bytes, self._nready = [], 0, 0
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
        self._flat, self._flat_due = None, False
        if kv is not None:
            self._kv_setup(server_optimizer)
        else:
            hvd.init()
            self._flat_setup()
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

    def _flat_setup(self):
        """When every gradient fits in one bucket (of one type, with no
        compression), give the parameters gradients that are views of one
        flat buffer, as DDP's gradient_as_bucket_view does: autograd adds
        into them in place, and synchronize() reduces the whole buffer in
        one synchronous call, made in this thread - no wake-up of the
        library's thread, no copy. A gradient the parameter already has
        is copied into its view once, here."""
        ps = self._params
        if (not ps or self._compression is not self._hvd.Compression.none
                or len({p.dtype for p in ps}) != 1 or
                not all(p.is_cpu for p in ps) or
                sum(p.numel() * p.element_size() for p in ps) >
                self._fusion):
            return
        flat = torch.zeros(sum(p.numel() for p in ps), dtype=ps[0].dtype)
        off = 0
        for p in ps:
            v = flat[off:off + p.numel()].view_as(p)
            if p.grad is not None:
                v.copy_(p.grad)
            p.grad = v
            off += p.numel()
        self._flat = flat
        self._flat_ptrs = [p.grad.data_ptr() for p in ps]

    def _flat_intact(self):
        """True while every gradient is still its view of the flat buffer
        (zero_grad(set_to_none=True), or a gradient the program set,
        replaces it: then the buckets' path is taken, still in place)."""
        return all(p.grad is not None and p.grad.data_ptr() == ptr
                   for p, ptr in zip(self._params, self._flat_ptrs))

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
        add it to the bucket, which goes as one fused group when full or
        when it holds the last of the gradients."""
        self._nready += 1
        if not self._fusion:
            self._handles[p] = self._start(p)
            return
        self._bucket.append(p)
        self._bucket_bytes += p.numel() * p.element_size()
        last = self._nready == len(self._params)
        if last and self._flat is not None and \
                len(self._bucket) == len(self._params):
            # every gradient in one bucket: synchronize() reduces the
            # flat buffer.
            self._bucket, self._bucket_bytes = [], 0
            self._flat_due = True
        elif self._bucket_bytes >= self._fusion or last:
            self._flush()

    def _flush(self):
        """Start the bucket's reductions with one call of the extension,
        which records them as one group (the C library fuses them into
        as few operations as its fusion threshold allows) and releases
        the GIL once; every parameter of the bucket shares its handle."""
        if not self._bucket:
            return
        works, ctxs = [], []
        for p in self._bucket:
            work, ctx = self._compression.compress(self._grad(p))
            works.append(view(work, "grad"))
            ctxs.append(ctx)
        g = self._hvd._c().allreduce_group_async(works, self._op)
        for p, work, ctx in zip(self._bucket, works, ctxs):
            self._handles[p] = g, work, ctx
        self._bucket, self._bucket_bytes = [], 0

    @staticmethod
    def _grad(p):
        if p.grad is None:
            p.grad = torch.zeros_like(p.data)
        return p.grad

    def _start(self, p):
        """Start the reduction of p's gradient; what synchronize waits on."""
        grad = self._grad(p)
        if self._kv is not None:
            raw = self._kv.raw
            g = view(grad, "grad")
            out = view(p.data, "parameter") if self._server_opt else g
            return raw.pushpull_async(self._key[p], g, out), None, None
        work, ctx = self._compression.compress(grad)
        h = self._hvd._c().allreduce_async(view(work, "grad"), None,
                                           self._op)
        return h, work, ctx

    def synchronize(self):
        """Wait for every gradient's reduction (starting those whose hook
        did not fire, in parameter order) and put the results in place."""
        if self._nready < len(self._params):
            for p in self._params:
                if (p not in self._handles and
                        all(q is not p for q in self._bucket)):
                    self._ready(p)
        self._flush()
        self._nready = 0
        if self._flat_due:
            self._flat_due = False
            if self._flat_intact():
                self._hvd._c().allreduce(self._flat, None, self._op)
            else:
                self._bucket = list(self._params)
                self._flush()
        n = self._kv.num_workers if self._kv is not None else 1
        while self._handles:
            p, (h, work, ctx) = self._handles.popitem()
            h.wait()
            if ctx is not None:
                p.grad.copy_(self._compression.decompress(work, ctx))
            elif (self._kv is not None and not self._server_opt and
                  self._op == _dtrain.AVG and n > 1):
                p.grad.div_(n)
        self._delay = dict.fromkeys(self._params, self._passes)

    def step(self, closure=None):
        self.synchronize()
        if self._server_opt:
            return None  # the servers updated the parameters
        return super(self.__class__, self).step(closure)

    def _elastic_reset(self):
        """After a membership change (dtrain.torch.elastic): forget the
        reductions of the step that failed - each is waited for, its
        error dropped - so that the next backward pass starts afresh."""
        while self._handles:
            _, (h, _, _) = self._handles.popitem()
            try:
                h.wait()
            except _dtrain.Error:
                pass
        self._bucket, self._bucket_bytes, self._nready = [], 0, 0
        self._flat_due = False
        self._delay = dict.fromkeys(self._params, self._passes)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("zero_grad() while gradients are being "
                                 "reduced: call step() or synchronize() "
                                 "first")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=_dtrain.AVG,
                         kvstore=None, server_optimizer=None,
                         fusion_bytes=FUSION_BYTES):
    """Wrap optimizer so that step() uses the gradients reduced over the
    workers (see the module's documentation). kvstore: None for the
    collectives, or a KVStore type ('dist_sync') or store to go through the
    servers; server_optimizer: (name, {params}) to update on the servers.
    fusion_bytes > 0 (collectives; 1 MiB by default): ready gradients wait
    in a bucket until it holds that many bytes or the last gradient of the
    pass arrives, then go in one call as one fused group - fewer, larger
    operations for a model of many small tensors, at the cost of starting
    later; 0 starts each gradient's allreduce at once, from its hook."""
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
