#!/usr/bin/env python3
"""Check a metrics log (--metrics FILE of the examples).

usage: metrics_check.py FILE EPOCHS METRIC RUN [val]

Every line has exactly the documented fields; the epoch-end lines
(batch -1) are epochs 0..EPOCHS-1 in order, name METRIC and RUN; progress
lines have a batch > 0 and samples/s > 0; wall time never goes back; with
"val", every epoch end has a validation value and the others none.
"""
import json
import math
import sys

FIELDS = {"run", "epoch", "batch", "samples_per_sec", "metric", "train", "val",
          "loss", "val_loss", "comm_s", "wall_s"}


def main():
    path, epochs, metric, run = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    want_val = len(sys.argv) > 5 and sys.argv[5] == "val"
    rows = [json.loads(line) for line in open(path)]
    assert rows, "empty log"
    for i, r in enumerate(rows, 1):
        assert set(r) == FIELDS, "line %d: fields %s" % (i, sorted(r))
        assert r["metric"] == metric and r["run"] == run, "line %d: %s" % (i, r)
        assert isinstance(r["train"], float) and math.isfinite(r["train"]), r
        assert r["comm_s"] >= 0 and r["wall_s"] >= 0, r
        if r["batch"] != -1:
            assert r["batch"] > 0 and r["samples_per_sec"] > 0, r
            assert r["val"] is None and r["val_loss"] is None, r
    ends = [r for r in rows if r["batch"] == -1]
    assert [r["epoch"] for r in ends] == list(range(epochs)), ends
    if want_val:
        assert all(r["val"] is not None for r in ends), ends
    walls = [r["wall_s"] for r in rows]
    assert walls == sorted(walls), "wall time goes back"
    assert len(rows) > len(ends), "no progress lines"
    print("ok: %s: %d lines, %s per epoch: %s" % (
        path.rsplit("/", 1)[-1], len(rows), "val" if want_val else "train",
        [r["val"] if want_val else r["train"] for r in ends]))


if __name__ == "__main__":
    try:
        main()
    except (AssertionError, ValueError, KeyError) as e:
        print("FAIL: metrics log: %s" % e)
        sys.exit(1)
