#!/usr/bin/env python3
"""bench/ab_layers.py -- one table from an A/B of `cnn bench --layers` (tools/gpu_session.sh env_ab): per distinct
conv step (shape, and whether a residual is added), the median over its layers in each arm, their ratio, and
cuDNN's conv alone from the same call (bench/pytorch_bench.py --impl cudnn, JSON lines) where it has the shape.

    python3 bench/ab_layers.py OFF.md ON.md [CUDNN.jsonl]

Prints markdown; ratios > 1 mean the second arm (or ours, against cuDNN) is faster."""
import json
import statistics
import sys


def steps(path):
    """{(shape, residual?): [ms, ...]} of the conv steps in a `cnn bench --layers` markdown table"""
    out = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 9 or cells[5] != "conv":
            continue
        try:
            ms = float(cells[8])
        except ValueError:
            continue
        key = (cells[7], "add" in cells[6].split("+"))
        out.setdefault(key, []).append(ms)
    return out


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    a, b = steps(sys.argv[1]), steps(sys.argv[2])
    cudnn = {}
    if len(sys.argv) == 4:
        for line in open(sys.argv[3]):
            r = json.loads(line)
            if r.get("impl") == "pytorch-cudnn" and "layer" in r:
                cudnn[r["layer"]] = r["ms_median"]
    print("| layer | res | count | off ms | on ms | off/on | cuDNN ms | cuDNN/on |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(set(a) & set(b), key=lambda k: -statistics.median(a[k])):
        ma, mb = statistics.median(a[key]), statistics.median(b[key])
        parts = key[0].split(" + ")
        c = sum(cudnn[p] for p in parts) if all(p in cudnn for p in parts) else None
        print("| %s | %s | %d | %.4f | %.4f | %.3f | %s | %s |" % (
            key[0], "yes" if key[1] else "", len(b[key]), ma, mb, ma / mb, "%.4f" % c if c else "",
            "%.2f" % (c / mb) if c else ""))


if __name__ == "__main__":
    main()
