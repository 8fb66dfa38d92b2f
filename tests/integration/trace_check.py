#!/usr/bin/env python3
"""Check a dtrain timeline (Chrome trace JSON): it parses; every node has a
named track; the spans of each track nest (any two are nested or apart,
never half-overlapping), and so do each asynchronous operation's phases;
the expected event names are there; and the tracks line up in time (each
member's bootstrap ends with the scheduler's, whatever its clock).

usage: trace_check.py FILE NODES NAME[,NAME...]
"""
import json
import sys
from collections import defaultdict

EPS = 0.002  # us: timestamps are printed to the nanosecond


def laminar(spans, what):
    """spans: (start, end, name); any two nested or disjoint."""
    spans = sorted(spans, key=lambda s: (s[0], -s[1]))
    stack = []
    for s in spans:
        while stack and stack[-1][1] <= s[0] + EPS:
            stack.pop()
        if stack and s[1] > stack[-1][1] + EPS:
            raise SystemExit("%s: %s [%.3f, %.3f] half-overlaps %s [%.3f, %.3f]"
                             % (what, s[2], s[0], s[1], stack[-1][2],
                                stack[-1][0], stack[-1][1]))
        stack.append(s)


def main():
    path, nodes, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    try:
        doc = json.load(open(path))
    except ValueError as e:
        raise SystemExit("%s: not JSON: %s" % (path, e))
    ev = doc["traceEvents"]
    named = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    missing = set(range(nodes)) - named
    if missing:
        raise SystemExit("nodes without a named track: %s" % sorted(missing))
    tracks = defaultdict(list)
    asyncs = defaultdict(list)
    opened = {}
    seen = set()
    boot = {}
    for e in ev:
        ph = e["ph"]
        if ph == "M":
            continue
        if e["pid"] not in range(nodes):
            raise SystemExit("event of unknown node %r" % e["pid"])
        seen.add(e["name"])
        if ph == "X":
            if e["dur"] < 0:
                raise SystemExit("negative duration: %r" % e)
            span = (e["ts"], e["ts"] + e["dur"], e["name"])
            tracks[(e["pid"], e["tid"])].append(span)
            if e["name"] == "bootstrap":
                boot[e["pid"]] = span[1]
        elif ph == "b":
            k = (e["pid"], e["id"], e["name"])
            if k in opened:
                raise SystemExit("async %r begun twice" % (k,))
            opened[k] = e["ts"]
        elif ph == "e":
            k = (e["pid"], e["id"], e["name"])
            if k not in opened:
                raise SystemExit("async end without a begin: %r" % (k,))
            t0 = opened.pop(k)
            if e["ts"] + EPS < t0:
                raise SystemExit("async %r ends before it begins" % (k,))
            asyncs[(e["pid"], e["id"])].append((t0, e["ts"], e["name"]))
        else:
            raise SystemExit("unexpected phase %r" % ph)
    if opened:
        raise SystemExit("%d async spans never end, e.g. %r"
                         % (len(opened), next(iter(opened))))
    for k, spans in tracks.items():
        laminar(spans, "track %r" % (k,))
    for k, spans in asyncs.items():
        laminar(spans, "operation %r" % (k,))
        top = max(spans, key=lambda s: s[1] - s[0])
        for s in spans:
            if s[0] + EPS < top[0] or s[1] > top[1] + EPS:
                raise SystemExit("operation %r: %s outside %s" % (k, s[2], top[2]))
    absent = [n for n in names if n not in seen]
    if absent:
        raise SystemExit("no %s events (have: %s)" % (", ".join(absent),
                                                      ", ".join(sorted(seen))))
    if 0 in boot:
        for pid, end in boot.items():
            if abs(end - boot[0]) > 500e3:
                raise SystemExit("node %d's bootstrap ends %.1f ms from the "
                                 "scheduler's: its clock was not aligned"
                                 % (pid, (end - boot[0]) / 1e3))
    print("trace ok: %d events, %d tracks, %d operations, names: %s"
          % (len(ev), len(tracks), len(asyncs), ", ".join(sorted(seen))))


main()
