"""The Python binding against the C library.

Every result is compared with the same call from C bit for bit
(tests/progs/py_ref.c writes what the C calls return, ref_job.py what the
Python calls return), and across ranks; arrays are shown to be used in
place, and every refusal to name its argument.
"""
import os
import re

import numpy as np
import pytest

import dtrain
from conftest import BUILD, launch, py

torch = pytest.importorskip("torch", reason="python3-torch is not installed")


def ref(mode, d, n):
    return [os.path.join(BUILD, "tests", "progs", "py_ref"), mode, str(d),
            str(n)]


def read(d, who, mode, rank):
    with open(os.path.join(d, f"{who}_{mode}.{rank}"), "rb") as f:
        return f.read()


def run_both(tmp_path, n, s, mode, size, py_mode=None):
    for cmd in (ref(mode, tmp_path, size),
                py("ref_job.py", py_mode or mode, tmp_path, size)):
        r = launch(n, s, cmd)
        assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("ranks", [2, 3])
def test_allreduce_bitwise_numpy_and_torch(tmp_path, ranks):
    size = 100003  # odd, and over one chunk of the ring
    run_both(tmp_path, ranks, 0, "coll", size)
    r = launch(ranks, 0, py("ref_job.py", "coll_torch", tmp_path, size))
    assert r.returncode == 0, r.stdout
    c0 = read(tmp_path, "c", "coll", 0)
    assert len(c0) == size * (4 + 4 + 8)
    for rank in range(ranks):
        assert read(tmp_path, "c", "coll", rank) == c0, f"C rank {rank}"
        assert read(tmp_path, "py", "coll", rank) == c0, f"numpy {rank}"
        assert read(tmp_path, "py", "coll_torch", rank) == c0, \
            f"torch rank {rank}"


@pytest.mark.parametrize("servers", [1, 2])
def test_kv_sum_and_server_sgd_bitwise(tmp_path, servers):
    size = 1000
    for mode in ("kv_sum", "kv_sgd"):
        run_both(tmp_path, 2, servers, mode, size)
        steps = 3 if mode == "kv_sgd" else 1
        c0 = read(tmp_path, "c", mode, 0)
        assert len(c0) == 4 * size * steps
        for rank in range(2):
            assert read(tmp_path, "c", mode, rank) == c0
            assert read(tmp_path, "py", mode, rank) == c0, (mode, rank)
    # the sums are the sums: rank 0's data plus rank 1's, rounded once
    from ref_job import gen
    got = np.frombuffer(read(tmp_path, "py", "kv_sum", 0), np.float32)
    assert np.array_equal(got, gen(size, 0) + gen(size, 1))


def test_wrong_length_push_raises_the_c_message():
    kv = dtrain.kv.create("local")
    kv.init(3, np.zeros(4, np.float32))
    with pytest.raises(dtrain.Error) as e:
        kv.push(3, np.ones(5, np.float32))
    assert isinstance(e.value, dtrain.SizeMismatch)
    assert str(e.value) == "push of key 3: length 5 != initialised length 4"
    assert e.value.name == "DT_ESIZE" and e.value.code == 11
    kv.push(3, np.ones(4, np.float32))  # the store still serves
    kv.close()


def test_zero_copy_pull_and_allreduce():
    import dtrain.torch as hvd
    kv = dtrain.kv.create("local")
    kv.init(0, np.arange(6, dtype=np.float32))
    out = torch.zeros(6)
    ptr = out.data_ptr()
    kv.pull(0, out=out)
    assert out.data_ptr() == ptr
    assert out.tolist() == [0, 1, 2, 3, 4, 5]
    # a write through the tensor is what the next push sends
    out.add_(1)
    kv.push(0, out)
    back = np.zeros(6, np.float32)
    kv.pull(0, out=back)
    assert back.tolist() == [1, 2, 3, 4, 5, 6]
    # a memoryview and a bytearray are used in place too
    ba = bytearray(24)
    kv.pull(0, out=ba)
    assert np.frombuffer(ba, np.float32).tolist() == [1, 2, 3, 4, 5, 6]
    kv.close()
    hvd.init()
    t = torch.arange(4, dtype=torch.float32)
    ptr = t.data_ptr()
    assert hvd.allreduce_(t) is t and t.data_ptr() == ptr
    h = hvd.allreduce_async_(t, op=hvd.Sum)
    assert hvd.synchronize(h) is t and t.tolist() == [0, 1, 2, 3]


def test_refusals_name_the_argument():
    import dtrain.torch as hvd
    hvd.init()
    kv = dtrain.kv.create("local")
    kv.init(1, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="argument 'value' is not "
                                         "C-contiguous"):
        kv.push(1, np.zeros(8, np.float32)[::2])
    with pytest.raises(TypeError, match="argument 'value': element type"):
        kv.push(1, np.zeros(4, np.int64))
    ro = np.zeros(4, np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="argument 'out' is read-only"):
        kv.pull(1, out=ro)
    with pytest.raises(TypeError, match="argument 'value': expected a "
                                        "contiguous CPU array"):
        kv.push(1, 5.0)
    with pytest.raises(ValueError, match="argument 'tensor' is not "
                                         "C-contiguous"):
        hvd.allreduce_(torch.zeros(4, 4).t())
    with pytest.raises(TypeError, match="argument 'tensor': element type"):
        hvd.allreduce_(torch.zeros(4, dtype=torch.int64))
    with pytest.raises(TypeError, match="argument 'tensor': a tensor on "
                                        "meta"):
        hvd.allreduce_(torch.zeros(4, device="meta"))
    with pytest.raises(ValueError, match="argument 'output': 3 float32"):
        from dtrain import _dtrain
        hvd._c().allreduce(np.zeros(4, np.float32),
                           np.zeros(3, np.float32))
    kv.close()


def test_every_error_code_has_a_class():
    for name in ("InvalidArgument", "TimedOut", "SizeMismatch",
                 "RanksDisagree", "PeerFailed", "UnknownKey"):
        assert issubclass(getattr(dtrain, name), dtrain.Error)


def _tagged(tag):
    """Processes whose environment holds DT_TEST_TAG=tag."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"DT_TEST_TAG={tag}".encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def test_ctrl_c_stops_a_python_job(tmp_path):
    import signal
    import subprocess
    import time
    from conftest import SCALE

    tag = f"py-ctrl-c-{os.getpid()}"
    mark = tmp_path / "up"
    argv = [os.path.join(BUILD, "dtrain"), "launch", "-n", "2", "-s", "1",
            "--env", f"DT_TEST_TAG={tag}", "--"] + py("hang_job.py", mark)
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        end = time.monotonic() + 60 * SCALE
        while len(list(tmp_path.glob("up.*"))) < 2:
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() < end, "the workers did not start"
            time.sleep(0.05)
        # Ctrl-C at a terminal: SIGINT to the whole foreground group.
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        rc = p.wait(timeout=30 * SCALE)
        took = time.monotonic() - t0
        assert rc == 130, (rc, p.stderr.read())
        assert took < 10 * SCALE, f"took {took:.1f} s"
        end = time.monotonic() + 5 * SCALE
        while _tagged(tag) and time.monotonic() < end:
            time.sleep(0.05)
        assert _tagged(tag) == [], "processes of the job are left"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.parametrize("ranks", [2, 3])
def test_horovod_calls_on_every_rank(ranks):
    r = launch(ranks, 0, py("hvd_ops_job.py"))
    assert r.returncode == 0, r.stdout
    assert r.stdout.count(f"of {ranks}: ok") == ranks, r.stdout


def test_optimizer_starts_allreduces_during_backward():
    """The allreduce of a late layer's gradient has started while
    backward() is still computing an early layer's: the hook on the first
    layer's output sees handles already."""
    import dtrain.torch as hvd
    hvd.init()
    torch.manual_seed(0)
    first, last = torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)
    params = list(first.parameters()) + list(last.parameters())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1),
                                   fusion_bytes=0)
    seen = []
    h = first(torch.randn(4, 8))
    h.register_hook(lambda g: seen.append(len(opt._handles)))
    last(torch.relu(h)).sum().backward()
    assert seen and seen[0] >= 2, seen  # last's weight and bias
    before = [p.detach().clone() for p in params]
    opt.step()
    assert not opt._handles
    assert any(not torch.equal(a, p) for a, p in zip(before, params))


def test_small_model_gradients_share_one_flat_buffer():
    """By default a model that fits in one bucket gets gradients that are
    views of one buffer, kept across steps (reduced in one call); a
    parameter whose gradient backward() never computes still steps (its
    zero gradient is reduced with the others), and the result is the
    plain optimizer's, bit for bit, on one rank."""
    import dtrain.torch as hvd
    hvd.init()

    def net():
        torch.manual_seed(3)
        return torch.nn.Linear(6, 3), torch.nn.Linear(3, 1), \
            torch.nn.Parameter(torch.ones(2))
    a, b, unused = net()
    ra, rb, runused = net()
    params = list(a.parameters()) + list(b.parameters()) + [unused]
    ref = list(ra.parameters()) + list(rb.parameters()) + [runused]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1,
                                                   momentum=0.9))
    ropt = torch.optim.SGD(ref, lr=0.1, momentum=0.9)
    flat = opt._flat
    assert flat is not None and flat.numel() == sum(p.numel()
                                                    for p in params)
    ptrs = [p.grad.data_ptr() for p in params]
    x = torch.randn(5, 6)
    for _ in range(3):
        for o, f, g in ((opt, a, b), (ropt, ra, rb)):
            o.zero_grad()
            g(torch.tanh(f(x))).sum().backward()
            o.step()
        assert [p.grad.data_ptr() for p in params] == ptrs
        assert not opt._handles
    for p, q in zip(params, ref):
        assert torch.equal(p, q), (p, q)
    assert unused.grad.eq(0).all() and opt._flat is flat


def test_allreduce_group_async_holds_and_refuses_by_name():
    """One call starts the allreduces of a list of tensors: it holds them
    until the wait, reduces them in their own memory, and refuses what it
    cannot use naming the element."""
    import sys
    import dtrain.torch as hvd
    hvd.init()
    c = hvd._c()
    ts = [torch.arange(4, dtype=torch.float32), torch.ones(3, 2),
          np.arange(3, dtype=np.float64)]
    before = [sys.getrefcount(t) for t in ts]
    ptr = ts[0].data_ptr()
    g = c.allreduce_group_async(ts, hvd.Average)
    assert [sys.getrefcount(t) for t in ts] == [n + 1 for n in before]
    g.wait()
    g.wait()  # a second wait is a no-op
    assert [sys.getrefcount(t) for t in ts] == before
    assert ts[0].data_ptr() == ptr and ts[0].tolist() == [0, 1, 2, 3]
    assert ts[2].tolist() == [0, 1, 2] and g.poll()
    with pytest.raises(ValueError, match="argument 'tensors': 0 tensors"):
        c.allreduce_group_async([])
    with pytest.raises(TypeError, match="argument 'tensors' must be a list"):
        c.allreduce_group_async(5)
    with pytest.raises(TypeError, match="argument 'tensors\\[1\\]': "
                                        "expected a contiguous CPU array"):
        c.allreduce_group_async([ts[0], "x"])
    ro = np.zeros(4, np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="argument 'tensors\\[0\\]' is "
                                         "read-only"):
        c.allreduce_group_async([ro])
    with pytest.raises(ValueError, match="argument 'tensors\\[1\\]' is "
                                         "not C-contiguous"):
        c.allreduce_group_async([torch.zeros(2), torch.zeros(4)[::2]])
    with pytest.raises(ValueError, match="argument 'op': 9"):
        c.allreduce_group_async([torch.zeros(2)], 9)
    # a refused call lets go of what it had taken
    assert [sys.getrefcount(t) for t in ts] == before
    # the library's refusal (a group is already open) comes with its
    # message, and the call holds nothing afterwards either
    c.group_start()
    with pytest.raises(dtrain.WrongState, match="groups do not nest"):
        c.allreduce_group_async(ts)
    c.group_end()
    assert [sys.getrefcount(t) for t in ts] == before


def test_an_uncaught_exception_ends_the_job_at_once():
    import time
    t0 = time.monotonic()
    r = launch(2, 0, py("fail_job.py"))
    took = time.monotonic() - t0
    assert r.returncode != 0, r.stdout
    assert "worker 1 exited with status 1" in r.stdout, r.stdout
    assert "rank 1 fails on purpose" in r.stdout, r.stdout
    # well below the collectives' 60 s stall timeout
    assert took < 30, f"took {took:.1f} s"


def test_kv_calls_on_a_local_store():
    """The KVStore's other calls, on a local store (one process, the same
    rules as the servers'): MXNet's compression dictionary, row-sparse
    tables, float16 arrays, per-device lists, string keys, requests."""
    kv = dtrain.kv.create("local")
    assert (kv.rank, kv.num_workers, kv.type) == (0, 1, "local")
    kv.set_gradient_compression({"type": "2bit", "threshold": 0.5,
                                 "min_size": 0})
    kv.init("g", np.zeros(4, np.float32))
    kv.push("g", np.array([1.0, 0.2, -0.7, 0.0], np.float32))
    out = np.empty(4, np.float32)
    kv.pull("g", out=out)
    assert out.tolist() == [0.5, 0.0, -0.5, 0.0]  # +T, 0, -T, 0
    kv.close()

    kv = dtrain.kv.create("local")
    kv.init_row_sparse("emb", (1000, 3))
    rows = np.array([7, 999], np.uint64)
    vals = np.arange(6, dtype=np.float32).reshape(2, 3)
    kv.push("emb", dtrain.kv.RowSparse(vals, rows))
    got = np.empty((3, 3), np.float32)
    kv.row_sparse_pull("emb", out=got,
                       row_ids=np.array([999, 0, 7], np.int64))
    assert got.tolist() == [[3, 4, 5], [0, 0, 0], [0, 1, 2]]
    with pytest.raises(TypeError, match="argument 'row_ids'"):
        kv.row_sparse_pull("emb", out=got,
                           row_ids=np.array([1, 2, 3], np.int32))
    # str keys are numbered in init order ("emb" is 0): an int key in the
    # same store could name the same one, so one kind a store, as MXNet.
    with pytest.raises(TypeError, match="this store's keys are strs"):
        kv.init(0, np.zeros(3, np.float32))
    kv.close()

    kv = dtrain.kv.create("local")
    half = np.array([1.5, -2.0, 0.25], np.float16)
    kv.init(5, half)
    kv.push(5, half * 2)
    back = np.zeros(3, np.float16)
    kv.pull(5, out=back)
    assert back.tolist() == [3.0, -4.0, 0.5]
    d = np.array([1.5, -2.0, 0.25], np.float32)
    kv.init(6, d)
    kv.push(6, [d, d, d])  # three devices, summed
    back = np.zeros(3, np.float32)
    kv.pull(6, out=back)
    assert back.tolist() == [4.5, -6.0, 0.75]
    with pytest.raises(TypeError, match="this store's keys are ints"):
        kv.push("g", d)

    kv.init([10, 11], [np.zeros(2, np.float32), np.zeros(3, np.float32)])
    a, b = np.ones(2, np.float32), np.full(3, 2, np.float32)
    reqs = [kv.raw.pushpull_async(10, a), kv.raw.pushpull_async(11, b)]
    for r in reqs:
        r.wait()
    assert a.tolist() == [1, 1] and b.tolist() == [2, 2, 2]
    with pytest.raises(ValueError, match="not waited on"):
        pending = kv.raw.pull_async(10, a)
        kv.close()
    pending.wait()
    kv.close()
    with pytest.raises(ValueError, match="closed"):
        kv.raw.pull(10, a)


def test_distributed_optimizer_through_the_servers():
    # Each mode is checked bit for bit against its own reference inside
    # the job (kv_opt_job.py says why the two modes may differ).
    for mode in ([], ["server_sgd"]):
        r = launch(2, 1, py("kv_opt_job.py", *mode))
        assert r.returncode == 0, r.stdout
        got = re.findall(r"kv_opt rank \d: ok (\w+)", r.stdout)
        assert len(got) == 2 and got[0] == got[1], r.stdout


def test_horovod_calls_under_plain_mpirun(tmp_path):
    import shutil
    import socket
    import subprocess
    from conftest import SCALE
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    # (Open MPI's session files in the test's own directory: other
    # tests' mpiruns beside this one would race on the shared one)
    env = dict(os.environ, DTRAIN_COLL_ROOT=f"127.0.0.1:{port}",
               DTRAIN_SECRET=os.urandom(32).hex(),
               OMPI_MCA_orte_tmpdir_base=str(tmp_path / "ompi"))
    r = subprocess.run(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
         "-x", "DTRAIN_COLL_ROOT", "-x", "DTRAIN_SECRET", "-x",
         "PYTHONPATH"] + py("hvd_ops_job.py"), env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=120 * SCALE)
    assert r.returncode == 0, r.stdout
    assert r.stdout.count("of 2: ok") == 2, r.stdout


# ---- optimizer states (save_optimizer_states / load_optimizer_states) ----

OPTIMIZERS = [("sgd", dict(learning_rate=0.1, momentum=0.9, wd=1e-4)),
              ("adam", dict(learning_rate=0.01, beta1=0.9, beta2=0.999,
                            epsilon=1e-8))]
SHAPES = {0: 1000, 5: 7}


def _grads(step):
    rng = np.random.default_rng(100 + step)
    return {k: rng.standard_normal(n).astype(np.float32)
            for k, n in SHAPES.items()}


def _store(name, params, values=None):
    kv = dtrain.kv.create("local")
    kv.set_optimizer(name, **params)
    for k, n in SHAPES.items():
        kv.init(k, values[k] if values else
                np.linspace(-1, 1, n, dtype=np.float32))
    return kv


def _train(kv, steps):
    for s in steps:
        for k, g in _grads(s).items():
            kv.push(k, g)


def _values(kv):
    out = {k: np.empty(n, np.float32) for k, n in SHAPES.items()}
    for k, o in out.items():
        kv.pull(k, out=o)
    return out


@pytest.mark.parametrize("name,params", OPTIMIZERS)
def test_optimizer_states_round_trip_bitwise(tmp_path, name, params):
    """Steps 0-2 in one store, its state saved; steps 3-4 there and in a
    second store made from the values at step 3 and the saved state: the
    same bits. Without the state the second store ends elsewhere."""
    f = str(tmp_path / "opt.states")
    a = _store(name, params)
    _train(a, range(3))
    a.save_optimizer_states(f)
    at3 = _values(a)
    _train(a, range(3, 5))
    want = _values(a)
    b = _store(name, params, at3)
    b.load_optimizer_states(f)
    _train(b, range(3, 5))
    got = _values(b)
    for k in SHAPES:
        assert got[k].tobytes() == want[k].tobytes(), k
    cold = _store(name, params, at3)
    _train(cold, range(3, 5))
    assert _values(cold)[0].tobytes() != want[0].tobytes()
    # saving again what was loaded gives the same file, byte for byte
    # (the keys are written in the store's order, the same for the same
    # keys initialised in the same order)
    c = _store(name, params, at3)
    c.load_optimizer_states(f)
    c.save_optimizer_states(str(tmp_path / "again"))
    assert (tmp_path / "again").read_bytes() == (tmp_path /
                                                 "opt.states").read_bytes()
    for kv in (a, b, c, cold):
        kv.close()


def _forge(records, kind=1, version=1, count=None):
    """An optimizer state file with a valid trailer: records of (key, n,
    steps, state floats), and a count of them (len(records) if None)."""
    import struct
    import zlib
    count = len(records) if count is None else count
    body = b"DTRAINOS" + struct.pack("<IIQ", version, kind, count)
    for key, n, steps, state in records:
        st = np.asarray(state, np.float32)
        body += struct.pack("<QQQQ", key, n, steps, st.size) + st.tobytes()
    return body + struct.pack("<QI", len(body), zlib.crc32(body)) + \
        b"DTCKEND\0"


def test_optimizer_state_files_are_checked_whole(tmp_path):
    """Every damaged or foreign file is refused with the reason, and the
    store is left as it was: its next steps are those of a store that
    never saw the file."""
    sgd = dict(learning_rate=0.1, momentum=0.9)
    f = tmp_path / "s"
    kv = dtrain.kv.create("local")
    kv.set_optimizer("sgd", **sgd)
    kv.init([1, 2], [np.ones(4, np.float32), np.ones(2, np.float32)])
    _ = [kv.push(1, np.full(4, 0.5, np.float32)) for _ in range(2)]
    kv.save_optimizer_states(str(f))
    good = f.read_bytes()
    # 8 magic + 16 head, 2 keys x (32 + state), 20 trailer
    assert len(good) == 24 + 2 * 32 + 4 * 6 + 20

    def refused(data, cls, match):
        f.write_bytes(data)
        with pytest.raises(cls, match=match):
            kv.load_optimizer_states(str(f))

    refused(b"PK\3\4" + good[4:], dtrain.BadFormat, "not a dtrain "
            "optimizer state file")
    refused(good[:-1], dtrain.BadFormat, "damaged or truncated")
    flipped = bytearray(good)
    flipped[40] ^= 1
    refused(bytes(flipped), dtrain.BadFormat, "damaged or truncated")
    refused(good + bytes(64), dtrain.BadFormat,
            f"{len(good) + 64} bytes, more than this store's state can "
            f"take \\({len(good)}\\)")
    refused(_forge([(1, 4, 2, [0] * 4)], version=2), dtrain.BadFormat,
            "format version 2; this dtrain reads version 1")
    refused(_forge([(1, 4, 2, [0] * 8)], kind=2), dtrain.WrongState,
            "saved from adam, this store runs sgd")
    refused(_forge([(9, 4, 2, [0] * 4)]), dtrain.UnknownKey,
            "key 9 is not initialised in this store")
    refused(_forge([(2, 4, 2, [0] * 4)]), dtrain.SizeMismatch,
            "key 2 has length 4 and 4 state floats; the store's has 2 "
            "and 2")
    refused(_forge([(2, 2, 2, [7] * 2), (2, 2, 2, [7] * 2)]),
            dtrain.BadFormat, "key 2 listed twice")
    refused(_forge([(2, 2, 2, [7] * 2)], count=3), dtrain.BadFormat,
            "3 keys, more than the store's 2")
    # a count that promises a record the bytes do not hold
    refused(_forge([(1, 4, 2, [7] * 4)], count=2), dtrain.BadFormat,
            "truncated record")
    refused(_forge([(1, 4, 2, [7] * 4)], count=0), dtrain.BadFormat,
            "48 bytes after the last record")
    # none of it changed the store: it goes on as its twin does
    twin = dtrain.kv.create("local")
    twin.set_optimizer("sgd", **sgd)
    twin.init([1, 2], [np.ones(4, np.float32), np.ones(2, np.float32)])
    _ = [twin.push(1, np.full(4, 0.5, np.float32)) for _ in range(2)]
    for store in (kv, twin):
        store.push(1, np.full(4, 0.25, np.float32))
    a, b = np.empty(4, np.float32), np.empty(4, np.float32)
    kv.pull(1, out=a)
    twin.pull(1, out=b)
    assert a.tobytes() == b.tobytes()
    # a forged file that is right is taken: key 2 omitted starts afresh
    f.write_bytes(_forge([(1, 4, 5, [0.5] * 4)]))
    kv.load_optimizer_states(str(f))
    kv.save_optimizer_states(str(f))
    assert f.read_bytes() in (_forge([(1, 4, 5, [0.5] * 4),
                                      (2, 2, 0, [0] * 2)]),
                              _forge([(2, 2, 0, [0] * 2),
                                      (1, 4, 5, [0.5] * 4)]))
    with pytest.raises(ValueError, match="dump_optimizer=True"):
        kv.save_optimizer_states(str(f), dump_optimizer=True)
    with pytest.raises(dtrain.IOFailure, match="optimizer states "):
        kv.load_optimizer_states(str(tmp_path / "missing"))
    kv.close()
    twin.close()
    plain = dtrain.kv.create("local")
    with pytest.raises(dtrain.WrongState, match="has no optimizer"):
        plain.save_optimizer_states(str(f))
    plain.close()


def test_optimizer_states_of_a_dist_store_are_on_its_servers(tmp_path):
    r = launch(1, 1, py("optstate_job.py", tmp_path / "s"))
    assert r.returncode == 0, r.stdout
    assert "optstate: refused: save optimizer states: a dist_sync " \
        "store's optimizer state is on its servers" in r.stdout, r.stdout
    assert not (tmp_path / "s").exists()


def test_time_allreduce_times_the_c_call():
    """The benchmark's helper makes the call from C: it returns seconds,
    and the array is reduced in place as by allreduce (one rank: kept)."""
    import dtrain.torch as hvd
    hvd.init()
    a = np.arange(4, dtype=np.float32)
    sec = hvd._c()._time_allreduce(a, 100)
    assert isinstance(sec, float) and 0 < sec < 10
    assert a.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="argument 'iters': 0"):
        hvd._c()._time_allreduce(a, 0)
    with pytest.raises(ValueError, match="argument 'tensor' is read-only"):
        ro = np.zeros(4, np.float32)
        ro.setflags(write=False)
        hvd._c()._time_allreduce(ro, 1)


def test_tensors_are_used_in_their_own_memory():
    """A tensor is read through its accessors, not copied: a slice is
    written at its offset in its base, a parameter that requires grad is
    written in place, an asynchronous call holds a reference to its
    tensor until the wait, and what cannot be used is refused by name."""
    import sys
    import dtrain.torch as hvd
    hvd.init()
    kv = dtrain.kv.create("local")
    kv.init(0, torch.arange(4, dtype=torch.float32))
    base = torch.zeros(8)
    kv.pull(0, out=base[2:6])
    assert base.tolist() == [0, 0, 0, 1, 2, 3, 0, 0]
    p = torch.nn.Parameter(torch.zeros(4))
    kv.pull(0, out=p)
    assert p.tolist() == [0, 1, 2, 3] and p.requires_grad
    t = torch.zeros(4)
    before = sys.getrefcount(t)
    req = kv.raw.pull_async(0, t)
    assert sys.getrefcount(t) == before + 1
    req.wait()
    assert sys.getrefcount(t) == before and t.tolist() == [0, 1, 2, 3]
    half = torch.tensor([1.5, -2.0], dtype=torch.float16)
    kv.init(1, half)
    kv.push(1, half * 2)
    kv.pull(1, out=half)
    assert half.tolist() == [3.0, -4.0]
    with pytest.raises(TypeError, match="argument 'value': element type "
                                        "'torch.bfloat16' is not supported"):
        kv.push(0, torch.zeros(4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="argument 'out' is not "
                                         "C-contiguous"):
        kv.pull(0, out=torch.zeros(8)[::2])
    assert hvd.allreduce_(torch.zeros(0)).numel() == 0
    kv.close()
