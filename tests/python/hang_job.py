"""A job that stays busy until it is stopped: every worker writes
MARK.<rank> once its store is up, then rank 0 waits in Python (a sleep
loop) and the others wait inside the C library (a pushpull whose round
never completes, the GIL released). Used by the Ctrl-C test."""
import os
import sys
import time

import numpy as np

import dtrain

kv = dtrain.kv.create("dist_sync")
kv.init(0, np.zeros(4, np.float32))
open(f"{sys.argv[1]}.{kv.rank}", "w").close()
if kv.rank == 0:
    while True:
        time.sleep(0.1)
kv.pushpull(0, np.ones(4, np.float32))
os._exit(3)  # not reached: the round waits for rank 0
