"""dtrain for Python: MXNet's KVStore (dtrain.kv) and Horovod's API for
PyTorch (dtrain.torch) over dtrain's C library, without copies.

A process started with DMLC_ROLE=server or DMLC_ROLE=scheduler serves that
role when it imports dtrain and exits with status 0 at the end of the job,
as MXNet does, so the same command can be started for every role.
"""
from dtrain import _dtrain
from dtrain._dtrain import *  # noqa: F401,F403 - Error and its subclasses

_dtrain.serve_role()

from dtrain import kv  # noqa: E402

__all__ = ["kv", "Error"]
