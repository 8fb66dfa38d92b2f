"""Elastic training from Python (dtrain.elastic, dtrain.torch.elastic):
jobs of elastic_job.py under `dtrain launch --min-workers 2` that lose a
worker on their schedule or by SIGKILL, or take one in, and end with
weights equal bit for bit to a second run, or to the replay the run
logged; and the binding's refusals, each naming what was wrong."""
import os
import re
import sys

import numpy as np
import pytest

import dtrain
from dtrain import elastic
from conftest import SOURCE, launch, py

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
import dtrain.torch as hvd  # noqa: E402

STEPS = ("--steps", "200")


def job(tmp_path, name, n, schedule="", extra=(), max_workers=None):
    """Run elastic_job.py with n workers; its output and the weights of
    rank 0 (and the files of every rank that ended, by launch rank)."""
    opts = ["--min-workers", "2"]
    if max_workers:
        opts += ["--max-workers", str(max_workers)]
    out = tmp_path / f"{name}.bin"
    r = launch(n, 0, py("elastic_job.py", *STEPS, "--save", out, *extra),
               env={"DTRAIN_ELASTIC_SCHEDULE": schedule}, opts=opts)
    assert r.returncode == 0, r.stdout
    assert "more than once" in r.stdout, r.stdout
    for line in re.findall(r"samples: epoch \d+: .*", r.stdout):
        assert line.endswith(" 0 more than once"), r.stdout
    return out.read_bytes(), r.stdout


def replay_of(text):
    m = re.findall(r'DTRAIN_ELASTIC_SCHEDULE="([^"]*)"', text)
    assert m, text
    return m[-1]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_scheduled_removal_is_reproducible(tmp_path, framework):
    extra = ("--torch",) if framework == "torch" else ()
    sched = "step 40: -worker 1"
    one, out = job(tmp_path, "one", 3, sched, extra)
    assert "[worker 1] left at step 40" in out, out
    assert re.search(r"done: rank 0 of 2, membership 1, resets \[2\], "
                     r"joined 0", out), out
    two, _ = job(tmp_path, "two", 3, sched, extra)
    assert len(one) == 4 * 17 and one == two
    fixed, _ = job(tmp_path, "fixed", 3, "", extra)
    assert fixed != one


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_killed_worker_matches_its_replay(tmp_path, framework):
    extra = ("--torch",) if framework == "torch" else ()
    killed, out = job(tmp_path, "kill", 3, "",
                      extra + ("--die-at", "55", "--die-rank", "2"))
    assert re.search(r"worker 2 \(pid \d+\) killed by signal 9", out), out
    sched = replay_of(out)
    assert re.fullmatch(r"step \d+: -worker 2", sched), sched
    replay, rout = job(tmp_path, "replay", 3, sched, extra)
    assert "killed by signal" not in rout, rout
    assert "[worker 2] left at step" in rout, rout
    assert replay == killed


def test_joiner_takes_the_members_state(tmp_path):
    sched = "step 30: +1"
    grown, out = job(tmp_path, "grow", 2, sched, max_workers=3)
    assert "membership 1 has 3 workers from step 30 (1 worker joined)" in out
    # (every rank, the joiner among them, ends with the same weights: it
    # trained from the members' state, not its own start)
    files = sorted(tmp_path.glob("grow.bin.*"))
    assert len(files) == 3, out
    for f in files:
        assert f.read_bytes() == grown, f
    done = re.findall(r"done: rank (\d) of 3, membership 1, resets \[3\], "
                      r"joined (\d)", out)
    assert sorted(done) == [("0", "0"), ("1", "0"), ("2", "1")], out
    again, _ = job(tmp_path, "again", 2, sched, max_workers=3)
    assert again == grown
    fixed, _ = job(tmp_path, "fixed", 2, "")
    assert fixed != grown


@pytest.fixture
def comm():
    c = dtrain.Coll()  # one rank, outside any job
    yield c
    c.finalize()


def test_register_refuses_what_it_cannot_keep_in_place(comm):
    e = dtrain.Elastic(comm)
    with pytest.raises(ValueError, match="nothing is registered"):
        e.commit(0)
    with pytest.raises(ValueError, match="argument 'buffer' is not "
                                         "C-contiguous"):
        e.register("strided", np.zeros(8, np.float32)[::2])
    ro = np.zeros(4, np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="argument 'buffer' is read-only"):
        e.register("ro", ro)
    with pytest.raises(TypeError, match="argument 'buffer': element type"):
        e.register("i64", np.zeros(4, np.int64))
    with pytest.raises(TypeError, match="argument 'buffer': element type"):
        e.register("i64", torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="argument 'buffer' is not "
                                         "C-contiguous"):
        e.register("t", torch.zeros(4, 4).t())
    with pytest.raises(TypeError, match="argument 'coll'"):
        dtrain.Elastic(object())
    # what it takes: typed arrays, tensors and bytes of any length
    w = np.arange(5, dtype=np.float32)
    t = torch.ones(3, dtype=torch.float64)
    b = bytearray(b"abc")
    for name, buf in (("w", w), ("t", t), ("b", b)):
        e.register(name, buf)
    e.commit(0)
    with pytest.raises(ValueError, match="register\\('late'\\): after the "
                                         "first commit"):
        e.register("late", np.zeros(2, np.float32))
    assert e.poll(1) is False and not e.left and not e.joining
    assert e.last_change()["epoch"] == 0
    e.close()
    with pytest.raises(ValueError, match="closed"):
        e.commit(1)


def test_state_keeps_values_exactly_and_names_its_limits(comm):
    s = elastic.ObjectState(comm, capacity=256, lr=0.1 + 0.2, epoch=3,
                            sampler=elastic.ElasticSampler(10, 2))
    s.sync()  # one rank: its own state
    s.commit()
    s.lr, s.epoch = 1.5, 9
    s.sampler.advance(2)
    s._load()  # (what restore does after the library's copy back)
    assert s.lr == 0.1 + 0.2 and s.epoch == 3
    assert s.sampler.consumed == 0 and s.next_step == 1
    with pytest.raises(ValueError, match="after the state was first"):
        s.register("late", np.zeros(2, np.float32))
    s.close()
    big = elastic.ObjectState(comm, capacity=256, blob="x" * 300)
    with pytest.raises(ValueError, match="over its capacity of 248"):
        big.commit()
    big.close()
    with pytest.raises(TypeError, match="argument 'comm'"):
        elastic.ObjectState(None)


def test_torch_state_needs_the_optimizer_state(comm):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="init_optimizer_state"):
        hvd.elastic.TorchState(model, opt, comm=comm)
    before = [p.detach().clone() for p in model.parameters()]
    hvd.elastic.init_optimizer_state(opt)
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p, b)  # the zero step moved nothing
    st = hvd.elastic.TorchState(model, opt, comm=comm, epoch=0)
    st.commit()
    st.close()


def test_torch_state_of_many_tensors(comm):
    # 60 layers: 120 parameters and 120 momentum buffers, one range each
    # (the C library once kept at most 64).
    model = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(60)])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    hvd.elastic.init_optimizer_state(opt)
    st = hvd.elastic.TorchState(model, opt, comm=comm, epoch=0)
    st.commit()
    st.close()


def test_sampler_deals_an_epoch_once_whatever_the_size():
    s = elastic.ElasticSampler(100, 4, seed=3)
    got = []
    for size in (3, 3, 2, 2, 2, 4, 1, 1, 1):
        got += [int(i) for r in range(size)
                for i in s.indices(r, size)]
        s.advance(size)
    assert len(got) == len(set(got)) == 4 * 19
    assert s.remaining(4) == 1 and s.remaining(1) == 6


def test_elastic_mnist_example_killed_and_replayed(tmp_path):
    """examples/python/elastic_mnist.py as a user runs it: a worker
    killed, the job goes on with the learning rate scaled, and the replay
    of the schedule it logged ends with the same parameters."""
    ex = os.path.join(SOURCE, "examples", "python", "elastic_mnist.py")
    args = ["--limit", "3072", "--epochs", "2"]
    outs = {}
    for name, sched, extra in (("kill", "", ["--die-at", "25",
                                              "--die-rank", "1"]),
                               ("replay", None, [])):
        if sched is None:
            sched = replay_of(outs["kill"])
        r = launch(3, 0, [sys.executable, ex, "--save",
                          str(tmp_path / name)] + args + extra,
                   env={"DTRAIN_ELASTIC_SCHEDULE": sched}, timeout=300,
                   opts=["--min-workers", "2"])
        assert r.returncode == 0, r.stdout
        assert "elastic_mnist: done with 2 workers" in r.stdout, r.stdout
        assert "elastic_mnist: 2 workers, lr 0.0333333" in r.stdout
        assert len(re.findall("Validation-accuracy", r.stdout)) == 2
        outs[name] = r.stdout
    assert "killed by signal 9" in outs["kill"]
    assert "worker 1 left at step" in outs["replay"]
    one = (tmp_path / "kill").read_bytes()
    assert len(one) == 4 * 44426 and one == (tmp_path / "replay").read_bytes()
