#!/usr/bin/env python3
"""bench/layer_protocols.py -- ResNet-50's per-layer ratios against cuDNN's conv alone under several timing
protocols (tools/gpu_session.sh `protocols`): for each protocol, ours from `cnn bench --layers` (markdown) and
cuDNN's from bench/pytorch_bench.py --impl cudnn (JSON lines), both run with the same --layer-rest-ms and
--layer-min-ms. Per distinct conv step (shape, and whether a residual is added): the median over its layers, and
cuDNN / ours (> 1: ours faster); pairs against the sum of their two convs; then how many single shapes are at 1.00
or better in each protocol.

    python3 bench/layer_protocols.py NAME=OURS.md,CUDNN.jsonl [NAME=OURS.md,CUDNN.jsonl ...]"""
import json
import statistics
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0] if "/" in __file__ else ".")
from ab_layers import steps  # noqa: E402


def cudnn_ms(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if r.get("impl") == "pytorch-cudnn" and "layer" in r:
            out[r["layer"]] = r["ms_median"]
    return out


def main():
    if len(sys.argv) < 2 or any("=" not in a or "," not in a for a in sys.argv[1:]):
        sys.exit(__doc__)
    protos = []
    for arg in sys.argv[1:]:
        name, files = arg.split("=", 1)
        ours, theirs = files.split(",", 1)
        protos.append((name, steps(ours), cudnn_ms(theirs)))
    keys = sorted(set().union(*(set(p[1]) for p in protos)), key=lambda k: -statistics.median(protos[0][1].get(k, [0])))
    print("| layer | res | " + " | ".join("%s ours ms | %s cuDNN ms | %s ratio" % (n, n, n) for n, _, _ in protos) + " |")
    print("|---|---|" + "---|---|---|" * len(protos))
    wins = {n: 0 for n, _, _ in protos}
    for key in keys:
        cells = []
        for name, ours, theirs in protos:
            if key not in ours:
                cells += ["", "", ""]
                continue
            mo = statistics.median(ours[key])
            parts = key[0].split(" + ")
            c = sum(theirs[p] for p in parts) if all(p in theirs for p in parts) else None
            ratio = c / mo if c else None
            if ratio is not None and ratio >= 1.0 and " + " not in key[0]:
                wins[name] += 1
            cells += ["%.4f" % mo, "%.4f" % c if c else "", "%.3f" % ratio if ratio else ""]
        print("| %s | %s | %s |" % (key[0], "yes" if key[1] else "", " | ".join(cells)))
    print()
    print("single conv steps at cuDNN's conv alone or better: " +
          ", ".join("%s %d" % (n, wins[n]) for n, _, _ in protos))


if __name__ == "__main__":
    main()
