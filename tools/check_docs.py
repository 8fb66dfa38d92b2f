#!/usr/bin/env python3
"""check_docs.py BUILD - keep the user docs true to the program.

1. Fences: every ``` block of docs/*.md and README.md is closed, and a
   closing fence has nothing after it (text there turns the rest of the
   page into one code block).
2. Options: the launcher's synopsis and options table (docs/launcher.md)
   and each example's option table name every option its --help has, and
   none it does not.
3. Words: no development bookkeeping in user docs (issue numbers, "the
   SPEC", "seed 001").
Prints each problem as FILE:LINE: what; exits 1 if there is one.
"""
import os
import re
import subprocess
import sys

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
problems = []


def problem(path, line, what):
    problems.append(f"{os.path.relpath(path, SRC)}:{line}: {what}")


def user_docs():
    docs = os.path.join(SRC, "docs")
    names = sorted(n for n in os.listdir(docs) if n.endswith(".md"))
    return [os.path.join(SRC, "README.md")] + [os.path.join(docs, n) for n in names]


def check_fences(path):
    fence = None  # (backticks, line) of the open fence
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            m = re.match(r"^\s*(`{3,}|~{3,})(.*)$", line.rstrip("\n"))
            if not m:
                continue
            ticks, rest = m.group(1), m.group(2)
            if fence is None:
                fence = (ticks, no)
            elif ticks.startswith(fence[0][0]) and len(ticks) >= len(fence[0]):
                if rest.strip():
                    problem(path, no, f"text after a closing fence: {rest.strip()!r}")
                fence = None
    if fence is not None:
        problem(path, fence[1], "code fence never closed")


def help_options(cmd):
    """The options of a --help text, each a set of its spellings
    ({-n, --num-workers}): the option column of each line that starts with
    a dash ("  -n, --num-workers W   number of workers", or two options on
    one line: "  --momentum X --wd X   ...")."""
    out = subprocess.run(cmd + ["--help"], capture_output=True, text=True, timeout=30).stdout
    opts = []
    for line in out.splitlines():
        m = re.match(r"^\s+(-\S.*?)(?:\s{2,}|$)", line)
        if not m:
            continue
        group = set()
        for tok in m.group(1).split():
            name = re.match(r"^(--?[a-zA-Z][a-z0-9-]*)(,?)", tok)
            if not name:
                continue
            group.add(name.group(1))
            if not name.group(2):  # no comma: the next dash starts another
                opts.append(group)
                group = set()
        if group:
            opts.append(group)
    return [o for o in opts if "--help" not in o]


def section(path, start, end):
    """Lines of path from the first matching start regex to the next end one."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if re.search(start, line):
            for j in range(i + 1, len(lines)):
                if re.search(end, lines[j]):
                    return i + 1, "\n".join(lines[i:j])
            return i + 1, "\n".join(lines[i:])
    return None, None


def check_options(what, path, start, end, cmd, foreign=()):
    no, text = section(path, start, end)
    if text is None:
        problem(path, 1, f"{what}: no section matching {start!r}")
        return
    opts = help_options(cmd)
    named = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][a-z0-9-]*)", text))
    for o in opts:
        if not o & named:
            problem(path, no, f"{what}: {'/'.join(sorted(o))} (in --help) is missing")
    known = set().union(*opts) | {"--help", "-h", "--"} | set(foreign)
    for n in sorted(named):
        if n.startswith("--") and n not in known:
            problem(path, no, f"{what}: {n} is not an option of {' '.join(cmd[-2:])}")


def check_words(path):
    bad = re.compile(r"\b[Ii]ssue #?\d+|\bthe SPEC\b|\bSPEC\.md\b|\bseed 0\d\d\b")
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            m = bad.search(line)
            if m:
                problem(path, no, f"development bookkeeping in a user doc: {m.group(0)!r}")


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(SRC, "build")
    dtrain = os.path.join(build, "dtrain")
    ex = os.path.join(build, "examples")
    for path in user_docs():
        check_fences(path)
        if not path.endswith("HACKING.md"):
            check_words(path)
    launcher = os.path.join(SRC, "docs", "launcher.md")
    check_options("launcher synopsis", launcher, r"^```$", r"^```$", [dtrain, "launch"])
    check_options("launcher options", launcher, r"^## Options", r"^## ", [dtrain, "launch"],
                  foreign=["--exclude"])  # (rsync's, named as such)
    training = os.path.join(SRC, "docs", "training.md")
    check_options("mnist options", training, r"^\| option \| default \|", r"^$",
                  [os.path.join(ex, "mnist")])
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
