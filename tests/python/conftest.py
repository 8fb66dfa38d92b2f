"""Shared fixtures of the Python binding's tests: where the build is, and
launching a job through `dtrain launch` with a deadline."""
import os
import subprocess
import sys

import pytest

BUILD = os.environ.get("DTRAIN_BUILD", "")
SOURCE = os.environ.get("DTRAIN_SOURCE",
                        os.path.dirname(os.path.dirname(
                            os.path.dirname(os.path.abspath(__file__)))))
HERE = os.path.dirname(os.path.abspath(__file__))
# Time limits are multiplied under a sanitizer or a slow machine.
SCALE = float(os.environ.get("DT_TEST_TIME_SCALE", "1"))


def launch(n, s, cmd, timeout=120, env=None, opts=()):
    """Run cmd as every process of a local job of n workers and s
    servers (and the launcher's options opts); returns the
    CompletedProcess (output in .stdout)."""
    e = dict(os.environ)
    e.update(env or {})
    argv = [os.path.join(BUILD, "dtrain"), "launch", "-n", str(n), "-s",
            str(s)] + list(opts) + ["--"] + cmd
    return subprocess.run(argv, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True,
                          timeout=timeout * SCALE, env=e)


def py(script, *args):
    """The command line of a Python script of this directory."""
    return [sys.executable, os.path.join(HERE, script)] + [str(a)
                                                          for a in args]


@pytest.fixture(autouse=True)
def _need_build():
    if not BUILD or not os.path.exists(os.path.join(BUILD, "dtrain")):
        pytest.fail("DTRAIN_BUILD must name a build directory with dtrain")
