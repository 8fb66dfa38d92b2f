"""Rank 1 raises right after init while rank 0 waits in an allreduce for
it: rank 1 must exit at once (not wait at exit in shutdown's barrier), so
that the launcher stops the job and names it."""
import torch

import dtrain.torch as hvd

hvd.init()
if hvd.rank() == 1:
    raise RuntimeError("rank 1 fails on purpose")
hvd.allreduce_(torch.ones(4))
