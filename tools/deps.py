#!/usr/bin/env python3
"""tools/deps.py -- the file-level dependency graph of a source directory, and its cycles.

    tools/deps.py [--build build] [src/cuda]

An edge a -> b means a.c calls or reads something that b.c defines (from `nm` of the objects under
BUILD/<dir>: a's undefined symbols that b's object defines), or a file includes b (#include "..." lines of the
.c and .h files in <dir>). Prints every edge, then each cycle (a strongly connected component of more than one
file); exit status 1 if there is one.
"""
import argparse, os, re, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
ap.add_argument("dir", nargs="?", default="src/cuda")
a = ap.parse_args()

edges = {}
def add(x, y):
    if x != y: edges.setdefault(x, set()).add(y)

# calls and data: nm over the objects
objs = sorted(f for f in os.listdir(os.path.join(a.build, a.dir)) if f.endswith(".o"))
if not objs: sys.exit(f"deps: no objects in {a.build}/{a.dir} (run make first)")
defined, undef = {}, {}
for o in objs:
    name = o[:-2] + ".c"
    out = subprocess.run(["nm", os.path.join(a.build, a.dir, o)], capture_output=True, text=True, check=True).stdout
    undef[name] = set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == "U": undef[name].add(f[1])
        elif len(f) == 3 and f[1] in "TDBRCGSV": defined.setdefault(f[2], name)
for n, syms in undef.items():
    for s in syms:
        if s in defined: add(n, defined[s])
# includes among the directory's files
files = sorted(f for f in os.listdir(a.dir) if f.endswith((".c", ".h")))
for f in files:
    for line in open(os.path.join(a.dir, f), encoding="utf-8"):
        m = re.match(r'\s*#\s*include\s+"(?:[\w./]*/)?([\w.]+)"', line)
        if m and m.group(1) in files: add(f, m.group(1))

nodes = sorted(set(edges) | {y for ys in edges.values() for y in ys})
for x in nodes:
    if edges.get(x): print(f"{x} -> {' '.join(sorted(edges[x]))}")

# Tarjan's strongly connected components
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in sorted(edges.get(v, ())):
        if w not in index: visit(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(sorted(comp))
for v in nodes:
    if v not in index: visit(v)
for c in sccs: print(f"CYCLE among {len(c)} files: {' '.join(c)}")
print(f"{len(nodes)} files, {sum(len(v) for v in edges.values())} edges, {len(sccs)} cycles")
sys.exit(1 if sccs else 0)
