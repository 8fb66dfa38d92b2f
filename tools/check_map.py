#!/usr/bin/env python3
"""check_map.py [SOURCE [DOC]] - docs/HACKING.md (or DOC) names files and functions
("`kv/server.c: payload_dest`", "`van_send.c`", "`dt__node_send`"); check
that every one of them still exists, so the map cannot drift from the code.

- `path.c: name` / `path.h: name`: the file exists (a bare file name must
  match exactly one file under src/, include/, tools/ or tests/, or one of
  several when the name is also found in one of them) and names `name` as
  a whole word.
- a lone `file.c` / `file.h` in backticks: such a file exists.
- a lone `dt_...`/`dt__...` identifier in backticks (with or without "()"):
  some source file names it.
- the module table: one row per module of CMakeLists.txt's DT_MODULES,
  and its "may use" column equal to that module's DT_USES_<module>.
Prints one line per stale reference and exits 1 if there is any.
"""
import os
import re
import sys

ROOTS = ("src", "include", "tools", "tests", "python", "examples", "bench")
SOURCE_EXT = (".c", ".h", ".py", ".sh", ".bash")


def index(src):
    files = {}
    for root in ROOTS:
        for d, _, names in os.walk(os.path.join(src, root)):
            for n in names:
                if n.endswith(SOURCE_EXT):
                    p = os.path.join(d, n)
                    files[os.path.relpath(p, src)] = p
    return files


def read(path, cache={}):
    if path not in cache:
        with open(path, encoding="utf-8", errors="replace") as f:
            cache[path] = f.read()
    return cache[path]


def candidates(files, name):
    """Files whose path ends with name (a bare name or a partial path)."""
    return [p for rel, p in files.items()
            if rel == name or rel.endswith("/" + name)]


def check_modules(src, text):
    """The module table against the modules the build enforces."""
    cm = read(os.path.join(src, "CMakeLists.txt"))
    m = re.search(r"set\(DT_MODULES ([^)]*)\)", cm)
    if not m:
        return ["CMakeLists.txt: no DT_MODULES"]
    uses = {}
    for mod in m.group(1).split():
        u = re.search(r"set\(DT_USES_%s ?([^)]*)\)" % mod, cm)
        uses[mod] = set(u.group(1).replace('"', "").split()) if u else set()
    rows = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        r = re.match(r"\| `src/(\w+)/` \| ([^|]*) \|", line)
        if r:
            rows[r.group(1)] = (lineno, r.group(2).strip())
    bad = []
    for mod, want in uses.items():
        if mod not in rows:
            bad.append(f"module table: no row for src/{mod}/")
            continue
        lineno, col = rows[mod]
        have = {w.strip() for w in col.split(",")} - {"—", ""}
        if have != want:
            bad.append(f"{lineno}: src/{mod}/ may use {sorted(have)} here, "
                       f"{sorted(want)} in CMakeLists.txt")
    return bad


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "."
    doc = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        src, "docs", "HACKING.md")
    files = index(src)
    text = read(doc)
    bad = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for span in re.findall(r"`([^`]+)`", line):
            m = re.fullmatch(r"([\w./-]+\.[ch]): (\w+)(?:\(\))?", span)
            if m:
                fname, func = m.groups()
                cands = candidates(files, fname)
                if not cands:
                    bad.append(f"{lineno}: `{span}`: no file {fname}")
                elif not any(re.search(r"\b%s\b" % re.escape(func), read(p))
                             for p in cands):
                    bad.append(f"{lineno}: `{span}`: {func} is not in "
                               + ", ".join(os.path.relpath(p, src)
                                           for p in cands))
                continue
            m = re.fullmatch(r"([\w./-]+\.[ch])", span)
            if m:
                if not candidates(files, m.group(1)):
                    bad.append(f"{lineno}: `{span}`: no such file")
                continue
            m = re.fullmatch(r"(dt_\w+)(?:\(\))?", span)
            if m:
                pat = re.compile(r"\b%s\b" % re.escape(m.group(1)))
                if not any(pat.search(read(p)) for p in files.values()
                           if p.endswith((".c", ".h"))):
                    bad.append(f"{lineno}: `{span}`: named by no source file")
    bad += check_modules(src, text)
    for b in bad:
        print(f"docs/HACKING.md:{b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
