"""MXNet's KVStore API over dtrain's key-value store (include/dtrain/kv.h).

    import dtrain, numpy as np
    kv = dtrain.kv.create('dist_sync')
    kv.set_optimizer('sgd', learning_rate=0.1, momentum=0.9)
    kv.init(3, np.zeros(10, np.float32))
    kv.push(3, grad)
    kv.pull(3, out=weights)

Values are float32 arrays (float16 ones use the store's multi-precision
calls) given as numpy arrays, any buffer, or CPU tensors; they are read and
written in place. Keys are integers, or strings, which are numbered in the
order they are first initialised (the same on every worker, as init is
collective). A list of keys takes a list of values, as in MXNet; for one
key a list of values is one array per device, summed before the push.
"""
import atexit
import weakref

from dtrain import _dtrain
from dtrain._arrays import numpy_view, view

__all__ = ["create", "KVStore", "RowSparse"]

# MXNet's optimizer keywords and the names dt_kv_set_optimizer reads.
_OPT_KEYS = {
    "learning_rate": "lr", "lr": "lr", "momentum": "momentum", "wd": "wd",
    "rescale_grad": "rescale_grad", "clip_gradient": "clip_gradient",
    "beta1": "beta1", "beta2": "beta2", "epsilon": "epsilon",
}


class RowSparse:
    """Rows of a row-sparse key: row ids (int64/uint64) and their values
    (len(indices) x width float32), MXNet's row_sparse_array((data,
    indices)). Pass it to push, or as `out` of row_sparse_pull."""

    def __init__(self, data, indices):
        self.data = data
        self.indices = indices


def create(name="local"):
    """A KVStore of the given type: local, device, dist_sync, dist_async,
    dist_sync_device, dist_async_device (or dist). In a process started
    with DMLC_ROLE=server or scheduler this serves that role and exits."""
    return KVStore(name)


def _pairs(key, value):
    """MXNet's argument forms as (key, value) pairs: one key and one value
    (or a list of per-device values), or lists of both."""
    if isinstance(key, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(key):
            raise ValueError("a list of keys needs a list of as many "
                             "values")
        return list(zip(key, value))
    return [(key, value)]


class KVStore:
    """One dtrain store; see the module's documentation."""

    def __init__(self, name):
        self._kv = _dtrain.KV(name)
        self._names = {}
        self._kind = None  # str or int: the kind of key the store takes
        self._widths = {}
        _open.add(self)

    # -- keys ---------------------------------------------------------
    def _key(self, key, create=False):
        # str keys are numbered 0, 1, ... in init order, so a store takes
        # one kind of key, as MXNet's does: a str and an int could
        # otherwise name the same key.
        kind = str if isinstance(key, str) else int
        if kind is int and (not isinstance(key, int) or
                            isinstance(key, bool) or key < 0):
            raise TypeError(f"argument 'key': {key!r} is not an int >= 0 "
                            "or a str")
        if self._kind is None and create:
            self._kind = kind
        if self._kind is not None and kind is not self._kind:
            raise TypeError(f"argument 'key': {key!r} is {kind.__name__}, "
                            f"but this store's keys are "
                            f"{self._kind.__name__}s (one kind a store)")
        if kind is str:
            if key not in self._names:
                if not create:
                    raise KeyError(f"key '{key}' was not initialised")
                self._names[key] = len(self._names)
            return self._names[key]
        return key

    # -- MXNet's calls ------------------------------------------------
    def init(self, key, value):
        """Initialise keys (collective: rank 0's values win)."""
        for k, v in _pairs(key, value):
            if isinstance(v, (list, tuple)):
                v = v[0]
            self._kv.init(self._key(k, create=True), view(v, "value"))

    def push(self, key, value, priority=0):
        """Push values (gradients); a list for one key is summed first."""
        for k, v in _pairs(key, value):
            k = self._key(k)
            if isinstance(v, RowSparse):
                self._kv.push_row_sparse(k,
                                         numpy_view(v.indices, "indices"),
                                         view(v.data, "value"),
                                         self._widths[k])
            elif isinstance(v, (list, tuple)):
                self._kv.push_devices(k, [view(x, "value") for x in v])
            else:
                self._kv.push(k, view(v, "value"))

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        """Pull values into out (one array, or a list to fill each)."""
        if out is None:
            raise ValueError("argument 'out' is required: pull writes into "
                             "the caller's arrays")
        for k, o in _pairs(key, out):
            k = self._key(k)
            for x in (o if isinstance(o, (list, tuple)) else [o]):
                self._kv.pull(k, view(x, "out"))

    def pushpull(self, key, value, out=None, priority=0):
        """Push value, then pull the result into out (value if None)."""
        outs = out if out is not None else value
        for (k, v), (_, o) in zip(_pairs(key, value), _pairs(key, outs)):
            self._kv.pushpull(self._key(k), view(v, "value"),
                              view(o, "out"))

    def init_row_sparse(self, key, shape, value=None):
        """Initialise a row-sparse table of shape (rows, width); value
        None is zeros that cost no memory until a row is written."""
        rows, width = shape
        k = self._key(key, create=True)
        self._kv.init_row_sparse(k, rows, width,
                                 None if value is None
                                 else view(value, "value"))
        self._widths[k] = width

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        """Pull the rows row_ids of key into out (len(row_ids) x width),
        or into out.data when out is a RowSparse (row_ids defaults to its
        indices)."""
        k = self._key(key)
        if isinstance(out, RowSparse):
            row_ids = out.indices if row_ids is None else row_ids
            out = out.data
        if out is None or row_ids is None:
            raise ValueError("row_sparse_pull needs out and row_ids")
        self._kv.row_sparse_pull(k, numpy_view(row_ids, "row_ids"),
                                 view(out, "out"), self._widths[k])

    def set_optimizer(self, optimizer, **params):
        """Run the optimizer on the servers: set_optimizer('sgd',
        learning_rate=0.1, momentum=0.9, wd=1e-4, rescale_grad=1/B), or
        'adam' with beta1, beta2, epsilon. Values are sent exactly."""
        if not isinstance(optimizer, str):
            raise TypeError("argument 'optimizer': a name ('sgd' or "
                            "'adam') with keyword parameters")
        parts = []
        for name, value in params.items():
            if name not in _OPT_KEYS:
                raise ValueError(f"set_optimizer: unknown parameter "
                                 f"'{name}' (one of {sorted(_OPT_KEYS)})")
            parts.append(f"{_OPT_KEYS[name]}={float(value)!r}")
        self._kv.set_optimizer(optimizer, ",".join(parts))

    def set_gradient_compression(self, compression_params):
        """{'type': '2bit', 'threshold': 0.5}, {'type': 'fp16'}, ... or
        the library's string form ('2bit:0.5')."""
        if isinstance(compression_params, dict):
            spec = ",".join(f"{k}={v}" for k, v in
                            compression_params.items())
        else:
            spec = str(compression_params)
        self._kv.set_gradient_compression(spec)

    def set_pull_precision(self, precision):
        self._kv.set_pull_precision(precision)

    def barrier(self):
        """Wait until every worker has called it."""
        self._kv.barrier()

    _barrier = barrier

    def checkpoint(self):
        """Checkpoint the servers now (every worker calls it)."""
        self._kv.checkpoint()

    def save_optimizer_states(self, fname, dump_optimizer=False):
        """Save the optimizer state of a local or device store (each key's
        momentum or Adam moments and step count) to fname. The values and
        the optimizer's settings are not saved; a dist store's state is on
        its servers (checkpoint() saves it there) and raises
        dtrain.NotSupported."""
        if dump_optimizer:
            raise ValueError("save_optimizer_states: dump_optimizer=True "
                             "is not offered; the optimizer's settings are "
                             "not saved (call set_optimizer again before "
                             "load_optimizer_states)")
        self._kv.save_optimizer_states(fname)

    def load_optimizer_states(self, fname):
        """Load a file of save_optimizer_states into this store, which has
        the same optimizer set and the same keys initialised. The file is
        checked whole first: a bad one raises dtrain.Error and changes
        nothing."""
        self._kv.load_optimizer_states(fname)

    def wait_all(self):
        self._kv.wait_all()

    def close(self):
        """Leave the cluster; the store cannot be used afterwards. A store
        still open when the program ends is closed then, so that the
        job's servers see this worker leave."""
        _open.discard(self)
        self._kv.close()

    @property
    def rank(self):
        return self._kv.rank

    @property
    def num_workers(self):
        return self._kv.num_workers

    @property
    def type(self):
        return self._kv.type

    @property
    def rejoined(self):
        return self._kv.rejoined

    @property
    def raw(self):
        """The extension's KV object: the C calls one to one, including
        the asynchronous ones (push_async, ... returning a Request)."""
        return self._kv


_open = weakref.WeakSet()


@atexit.register
def _close_all():
    for store in list(_open):
        try:
            store.close()
        except _dtrain.Error:
            pass
