"""A dist_sync worker asks to save its optimizer state: the store refuses
(the state is on the servers) and says so; prints the message."""
import sys

import numpy as np

import dtrain

kv = dtrain.kv.create("dist_sync")
kv.set_optimizer("sgd", learning_rate=0.1, momentum=0.9)
kv.init(0, np.zeros(4, np.float32))
try:
    kv.save_optimizer_states(sys.argv[1])
except dtrain.NotSupported as e:
    print(f"optstate: refused: {e}", flush=True)
else:
    sys.exit("optstate: a dist_sync store saved its optimizer states")
kv.close()
