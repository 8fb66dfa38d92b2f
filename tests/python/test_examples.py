"""The Python examples (examples/python/) as a user runs them: under the
launcher and, for linreg.py, MXNet's manual recipe of five processes
started by hand with the same command."""
import os
import re
import socket
import subprocess
import sys

import pytest

from conftest import BUILD, SCALE, SOURCE, launch

EX = os.path.join(SOURCE, "examples", "python")
torch = pytest.importorskip("torch", reason="python3-torch is not installed")


def ex(script, *args):
    return [sys.executable, os.path.join(EX, script)] + [str(a) for a in
                                                         args]


def last_wb(text):
    m = re.findall(r"w=(\S+) b=(\S+)", text)
    assert m, text
    return float(m[-1][0]), float(m[-1][1])


def test_linreg_dist_sync_learns_and_matches_one_process():
    r = launch(2, 2, ex("linreg.py", "--kvstore", "dist_sync",
                        "--batch-size", "50"))
    assert r.returncode == 0, r.stdout
    assert re.search(r"Epoch\[0\] Batch \[0-250\] Speed: .* samples/sec "
                     r"mae=", r.stdout), r.stdout
    w, b = last_wb(r.stdout)
    one = subprocess.run(ex("linreg.py", "--batch-size", "100"),
                         stdout=subprocess.PIPE, text=True,
                         timeout=120 * SCALE)
    w1, b1 = last_wb(one.stdout)
    assert abs(w - 5) < 0.01 and abs(b - 2) < 0.05, (w, b)
    assert abs(w - w1) <= 1e-5 * abs(w1) and abs(b - b1) <= 1e-5 * abs(b1)


def test_linreg_manual_recipe_five_processes():
    """MXNet's recipe: the same `python3 linreg.py` for every role."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1",
               DMLC_PS_ROOT_PORT=str(port), DMLC_NUM_SERVER="2",
               DMLC_NUM_WORKER="2", DTRAIN_SECRET=os.urandom(32).hex())
    cmd = ex("linreg.py", "--kvstore", "dist_sync", "--batch-size", "50",
             "--epochs", "2")
    procs = []
    try:
        for role in ("server", "server", "scheduler", "worker", "worker"):
            procs.append((role, subprocess.Popen(
                cmd, env=dict(env, DMLC_ROLE=role),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True)))
        outs = [(role, p.communicate(timeout=120 * SCALE)[0], p.returncode)
                for role, p in procs]
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for role, out, rc in outs:
        assert rc == 0, (role, out)
    workers = [out for role, out, _ in outs if role == "worker"]
    for out in workers:
        w, b = last_wb(out)
        assert abs(w - 5) < 0.01, out


def mnist(tmp_path, name, ranks, *args):
    out = tmp_path / name
    cmd = ex("mnist_torch_hvd.py", "--save", out, *args)
    if ranks:
        r = launch(ranks, 0, cmd, timeout=600)
    else:
        r = subprocess.run(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           timeout=600 * SCALE)
    assert r.returncode == 0, r.stdout
    return out.read_bytes(), r.stdout


def test_mnist_hvd_two_ranks_bit_identical_to_one_process(tmp_path):
    """Two ranks average their slices' gradients by allreduce. One process
    with --emulate-ranks 2 computes slice 0's gradient, then slice 1's,
    adds them in that order and halves the sum: the same float operations
    (a+b is the same either way, and halving is exact), so the trained
    parameters must be equal to the bit."""
    args = ("--limit", "3072", "--epochs", "2")
    two, _ = mnist(tmp_path, "two.bin", 2, *args)
    one, _ = mnist(tmp_path, "one.bin", 0, *args, "--emulate-ranks", "2")
    assert len(two) == 4 * 44426  # LeNet-5's parameters, float32
    assert two == one


def test_mnist_hvd_reaches_085_in_two_epochs(tmp_path):
    metrics = tmp_path / "m.jsonl"
    _, out = mnist(tmp_path, "p.bin", 2, "--metrics", metrics)
    acc = [float(a) for a in re.findall(r"Validation-accuracy=(\S+)", out)]
    assert len(acc) == 2 and acc[-1] >= 0.85, out
    check = os.path.join(SOURCE, "tests", "integration", "metrics_check.py")
    r = subprocess.run([sys.executable, check, str(metrics), "2",
                        "accuracy", "hvd 2w", "val"])
    assert r.returncode == 0


def test_mnist_through_servers(tmp_path):
    r = launch(2, 2, ex("mnist_torch_ps.py", "--limit", "4096", "--epochs",
                        "1"), timeout=300)
    assert r.returncode == 0, r.stdout
    acc = re.findall(r"Validation-accuracy=(\S+)", r.stdout)
    assert acc and float(acc[-1]) > 0.3, r.stdout


def test_sparse_logreg_row_sparse(tmp_path):
    r = launch(2, 2, ex("sparse_logreg.py", "--kvstore", "dist_sync"))
    assert r.returncode == 0, r.stdout
    acc = [float(a) for a in re.findall(r"Validation-accuracy=(\S+)",
                                        r.stdout)]
    assert len(acc) == 3 and acc[-1] > 0.7 and acc[-1] > acc[0], r.stdout
