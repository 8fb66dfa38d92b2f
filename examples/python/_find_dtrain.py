"""Lets the examples run from the source tree right after `make`: when the
dtrain package is not installed (nor on PYTHONPATH), use the one the build
made in build/python/ (or $DTRAIN_BUILD/python)."""
import importlib.util
import os
import sys

if importlib.util.find_spec("dtrain") is None:
    _build = os.environ.get("DTRAIN_BUILD") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")
    sys.path.insert(0, os.path.join(os.path.abspath(_build), "python"))
