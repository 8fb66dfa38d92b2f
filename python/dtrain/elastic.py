"""Horovod Elastic's API over dtrain's elastic state (dtrain/elastic.h),
without a framework: State, ObjectState, run() and ElasticSampler.

    import dtrain
    from dtrain import elastic

    comm = dtrain.Coll()
    w = numpy.zeros(17, numpy.float32)        # updated in place
    state = elastic.ObjectState(comm, sampler=elastic.ElasticSampler(n, 8))
    state.register("w", w)

    @elastic.run
    def train(state):
        while state.next_step < steps:
            state.begin_step(commit_every=10)  # commit or check for changes
            idx = state.sampler.indices(comm.rank, comm.size)
            ...                                # collectives on comm
            state.sampler.advance(comm.size)

    train(state)

A job started with `dtrain launch --min-workers A` goes on when a worker
is lost: every survivor's collective raises dtrain.MembershipChanged, run()
puts the state of the last commit back (restore(): the new membership, and
the state of its rank 0) and calls the function again. A change taken at a
commit - a worker that joins, or a change of DTRAIN_ELASTIC_SCHEDULE -
raises HostsUpdatedInterrupt from commit() or check_host_updates() on
every rank: the state just committed is the current one, and run() calls
the function again without restoring. Either way the reset callbacks run
first. A worker that joins takes the members' state in sync(), which run()
calls before the first call; a worker that leaves on its schedule returns
from run() (state.left is then True).

What is registered is copied by the C library from and into the arrays'
own memory, so an array must keep its memory: update it in place
(w -= lr * g, tensor.add_(...)), never rebind it to a new array.
"""
import functools
import pickle
import struct

import numpy as np

from dtrain import _dtrain

MembershipChanged = _dtrain.MembershipChanged

__all__ = ["State", "ObjectState", "ElasticSampler", "run",
           "HostsUpdatedInterrupt", "MembershipChanged"]

# The default room for the plain Python values of a state, pickled: the
# counters and sampler positions of a training loop take under 1 KiB.
OBJECT_CAPACITY = 1 << 16
_LEN = struct.Struct("<Q")


class HostsUpdatedInterrupt(Exception):
    """The membership changed at this commit (a worker joined or left on
    the schedule); the committed state is the current one. run() runs the
    reset callbacks and calls the training function again."""


class _WorkerLeft(Exception):
    """This worker left the job on its schedule (run() returns)."""


class State:
    """Training state kept across membership changes.

    comm is the communicator (a dtrain Coll) whose collectives the
    training makes. Keyword arguments are plain Python values kept as
    attributes (state.epoch = 3) and restored bit for bit: they are
    pickled, at each commit, into a buffer of `capacity` bytes (ValueError
    beyond). A value with state_dict() and load_state_dict() (an
    ElasticSampler) is restored in place through them. register() adds
    arrays (numpy arrays, CPU tensors, bytearrays) kept in their own
    memory. Every rank must make the same state, in the same order.
    """

    def __init__(self, comm, capacity=OBJECT_CAPACITY, **kwargs):
        if not isinstance(comm, _dtrain.Coll):
            raise TypeError(f"argument 'comm': expected a dtrain Coll, got "
                            f"{type(comm).__name__}")
        if capacity < _LEN.size + 64:
            raise ValueError(f"argument 'capacity': {capacity} bytes is "
                             "too small for the pickled values")
        for k in kwargs:
            if k.startswith("_") or hasattr(type(self), k) or k in (
                    "comm", "left", "joined", "model", "optimizer"):
                raise ValueError(f"argument '{k}': the name of one of "
                                 "the state's own attributes")
        self._names = list(kwargs)
        self.comm = comm
        self._arrays = []
        self._elastic = None
        self._callbacks = []
        self._next = 0
        self._used = 0
        self._objbuf = bytearray(capacity)
        self.left = False  # this worker left the job on its schedule
        self.joined = False  # it joined the running job (sync)
        for k, v in kwargs.items():
            setattr(self, k, v)

    # -- what is kept --------------------------------------------------
    def register(self, name, buffer):
        """Keep array `buffer` (writable, C-contiguous, of float32,
        float16, float64 or int32, or bytes) in the state, in place.
        Before the first commit."""
        if self._elastic is not None:
            raise ValueError(f"register('{name}'): after the state was "
                             "first committed or synced")
        self._arrays.append((name, buffer))
        return buffer

    def _open(self):
        """The C state, created with every array registered once."""
        if self._elastic is None:
            e = _dtrain.Elastic(self.comm)
            try:
                for name, buf in self._arrays:
                    e.register(name, buf)
                e.register("objects", self._objbuf)
            except BaseException:
                e.close()
                raise
            self._elastic = e
            self._epoch = e.last_change()["epoch"]
        return self._elastic

    def _save(self):
        """Pickle the plain values into the object buffer."""
        vals = {}
        for k in self._names:
            v = getattr(self, k)
            if hasattr(v, "state_dict") and hasattr(v, "load_state_dict"):
                v = ("state_dict", v.state_dict())
            else:
                v = ("value", v)
            vals[k] = v
        data = pickle.dumps(vals, protocol=4)
        room = len(self._objbuf) - _LEN.size
        if len(data) > room:
            raise ValueError(f"the state's values pickle to {len(data)} "
                             f"bytes, over its capacity of {room} (give "
                             "State a larger capacity=)")
        end = _LEN.size + len(data)
        self._objbuf[:_LEN.size] = _LEN.pack(len(data))
        self._objbuf[_LEN.size:end] = data
        if self._used > end:  # same bytes on every rank, whatever ran before
            self._objbuf[end:self._used] = bytes(self._used - end)
        self._used = end

    def _load(self):
        (n,) = _LEN.unpack_from(self._objbuf, 0)
        if n > len(self._objbuf) - _LEN.size:
            raise ValueError(f"the restored state says {n} bytes of "
                             f"values, over its capacity")
        vals = pickle.loads(bytes(self._objbuf[_LEN.size:_LEN.size + n]))
        for k, (kind, v) in vals.items():
            cur = getattr(self, k, None)
            if kind == "state_dict" and hasattr(cur, "load_state_dict"):
                cur.load_state_dict(v)
            else:
                setattr(self, k, v)
        self._used = _LEN.size + n

    # -- Horovod's calls -------------------------------------------------
    @property
    def next_step(self):
        """The step the next commit() or check_host_updates() is for:
        the count of those calls, as of the last commit after a
        restore. DTRAIN_ELASTIC_SCHEDULE's `step S` counts them."""
        return self._next

    def register_reset_callbacks(self, callbacks):
        """Functions called with no argument after each membership
        change, before the training function is called again (to scale
        the learning rate with the number of workers, for example)."""
        self._callbacks.extend(callbacks)

    def on_reset(self):
        for cb in self._callbacks:
            cb()

    def commit(self):
        """Commit the state as of next_step (a copy in memory) and count
        the step. Raises HostsUpdatedInterrupt when a change was taken
        here, MembershipChanged when one nobody scheduled is announced."""
        self._boundary(False)

    def check_host_updates(self):
        """Before a step that does not commit (every rank at the same
        steps): takes in a worker that is ready to join, or a change
        scheduled here, by committing this step (HostsUpdatedInterrupt);
        otherwise returns at once."""
        self._boundary(True)

    def begin_step(self, commit_every=1):
        """commit() every commit_every steps, check_host_updates() at the
        others; returns the step about to run."""
        s = self._next
        self._boundary(s % commit_every != 0)
        return s

    def _boundary(self, poll):
        e = self._open()
        s = self._next
        self._save()
        try:
            committed = e.poll(s) if poll else (e.commit(s) or True)
        finally:
            if e.left:
                self.left = True
        if self.left:
            raise _WorkerLeft()
        epoch = e.last_change()["epoch"]
        if committed and epoch != self._epoch:
            # every rank takes the change at this commit: go on from it
            self._epoch = epoch
            raise HostsUpdatedInterrupt(
                f"membership {epoch} from step {s}")
        self._next = s + 1

    def restore(self):
        """After MembershipChanged: take the new membership and put the
        last commit (of the new rank 0) back; returns its step."""
        e = self._open()
        s = e.restore()
        self._load()
        self._next = s
        self._epoch = e.last_change()["epoch"]
        return s

    def sync(self):
        """Make every rank's state rank 0's: a worker that joins the
        running job takes the members' last commit; the members broadcast
        theirs (Horovod's start). True if this worker joined."""
        e = self._open()
        if e.joining:
            try:
                e.commit(self._next)
            except MembershipChanged:
                pass
            self.restore()
            self.joined = True
            return True
        self._save()
        for _, buf in self._arrays:
            _broadcast(self.comm, buf)
        _broadcast(self.comm, self._objbuf)
        self._load()
        return False

    def close(self):
        """Let go of the C state and the arrays (the state is unusable)."""
        if self._elastic is not None:
            self._elastic.close()


def _broadcast(comm, buf):
    """Broadcast any registered array from rank 0, bytes included."""
    a = np.frombuffer(buf, np.uint8) if isinstance(buf, bytearray) else buf
    if isinstance(a, np.ndarray) and a.dtype.itemsize == 1:
        if a.nbytes % 4 == 0:
            comm.broadcast(a.view(np.float32), 0)
        else:
            pad = np.zeros((a.nbytes + 3) // 4 * 4, np.uint8)
            pad[:a.nbytes] = a
            comm.broadcast(pad.view(np.float32), 0)
            a[:] = pad[:a.nbytes]
        return
    comm.broadcast(buf, 0)


class ObjectState(State):
    """State of plain Python values only (Horovod's ObjectState):
    ObjectState(comm, epoch=0, batch=0)."""


def run(func):
    """Decorate the training function func(state, ...): run() calls it
    (after state.sync()) until it returns, and returns its value; on a
    membership change it restores the state where needed, runs the reset
    callbacks and calls it again. A worker that leaves on its schedule
    returns None."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        try:
            reset = state.sync()  # (a joiner's membership is new)
        except _WorkerLeft:
            return None
        while True:
            if reset:
                state.on_reset()
            try:
                return func(state, *args, **kwargs)
            except MembershipChanged:
                state.restore()
            except HostsUpdatedInterrupt:
                pass
            except _WorkerLeft:
                return None
            reset = True
    return wrapper


class ElasticSampler:
    """The order of an epoch's samples, dealt to the workers of the
    membership at each step from what the job has consumed of the epoch -
    the rule of dt_sampler_reshard(): the next global batch is the
    batch_size x size indices of the permutation from position
    `consumed`, rank r taking the slice r. Each sample of an epoch is
    therefore trained on once whatever the number of workers at each
    step, except a tail under one global batch. The permutation of epoch
    e is numpy's (default_rng([seed, e])), the same on every worker. Keep
    the sampler in the state (its position is restored with it)."""

    def __init__(self, n, batch_size, seed=0, shuffle=True):
        if n < 1 or batch_size < 1:
            raise ValueError(f"ElasticSampler: n={n} and batch_size="
                             f"{batch_size} must be at least 1")
        self.n, self.batch_size = int(n), int(batch_size)
        self.seed, self.shuffle = int(seed), bool(shuffle)
        self.epoch, self.consumed = 0, 0
        self._perm, self._perm_epoch = None, None

    def state_dict(self):
        return {"epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, d):
        self.epoch, self.consumed = int(d["epoch"]), int(d["consumed"])

    def set_epoch(self, epoch):
        """Start epoch `epoch` at its first sample."""
        self.epoch, self.consumed = int(epoch), 0

    def remaining(self, size):
        """Full global batches left in the epoch for `size` workers."""
        return (self.n - self.consumed) // (self.batch_size * size)

    def indices(self, rank, size):
        """Rank's indices of the next global batch (an int64 array), or
        None when fewer than one global batch remain."""
        if self.remaining(size) == 0:
            return None
        if self._perm_epoch != self.epoch:
            if self.shuffle:
                rng = np.random.default_rng([self.seed, self.epoch])
                self._perm = rng.permutation(self.n)
            else:
                self._perm = np.arange(self.n)
            self._perm_epoch = self.epoch
        start = self.consumed + rank * self.batch_size
        return self._perm[start:start + self.batch_size]

    def advance(self, size):
        """The global batch of `size` workers is done."""
        self.consumed += self.batch_size * size
