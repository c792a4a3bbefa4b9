#!/usr/bin/env python3
"""bench/heuristic_replay.py -- replay the forward rows' heuristic (src/cuda/conv2d_choose.c) on measured times.

    bench/heuristic_replay.py [bench/results/2026-11-28-H200-conv-candidate-times.txt.gz]

The input holds `cnn bench -v` tuning lines ("cnn: tuned fprop ...: WINNER ..., (N candidates, T ms: row/splits ms,
...)"), each prefixed by its run's name; a run tuned with --tune full timed every row that takes the shape. For
each shape it takes the row the heuristic picks before and after perf-log step 114 (the scores and the TMA rows'
speeds of conv2d_table.c then and now) and adds up the measured times: the untimed choice (--tune none,
--deterministic) against the best candidate's; then, on the full runs, whether --tune fast's candidate list
still holds a winner as fast; then --deterministic's case, CIFAR ResNet-18's b512 shapes run on the pick for a
64-image slice or for the whole batch. perf-log step 114's figures are this script's output. SMs: 132 (an H200).
"""
import collections, gzip, math, re, sys

SM = 132
# conv2d_table.c's forward rows in table order (generic rows first), by the names the tuner logs, and their speeds
# before step 114; the speeds after it differ for the warp-specialised TMA rows only (NEW)
ROWS = """pipelined128x128/w2x4/s3 1.00|pipelined128x64/w2x2/s4 .85|pipelined64x128/w2x2/s4 .85|pipelined64x64/w2x2/s4 .70
pipelined128x128/w2x2/s3 .95|pipelined256x128/w4x2/s2 .90|pipelined128x256/w2x4/s2 .90|pipelined128x128k64/w2x4/s3 1.05
pipelined128x256k64/w2x4/s3 1.02|pipelined128x64k64/w2x2/s4 .88|wgmma128x128/g2/s6 2.00|wgmma128x256/g2/s4 1.95
wgmma128x64/g2/s4 1.80|wgmma64x128/g1/s4 1.70|wgmma256x128/g2/s4 1.90|wgmma128x128/g2/s6/persistent 2.00
wgmma128x256/g2/s4/persistent 1.95|wgmma128x64/g2/s4/persistent 1.80|wgmma64x128/g1/s4/persistent 1.70
wgmma256x128/g2/s4/persistent 1.90|warpspec64x256/s5 1.95|warpspec128x128/s6 1.95|warpspec64x128/s8 1.80
warpspec64x256/s8/filter-resident 1.95|warpspec128x128/s6/filter-resident 1.95|warpspec128x128/s6/tma 1.95
warpspec64x256/s5/tma 1.95|warpspec64x256/s8/filter-resident/tma 1.95|warpspec128x128/s6/filter-resident/tma 1.95
warpspec128x64/s8/tma 1.80|warpspec128x256/s4/cooperative/tma 1.95|warpspec256x128/s4/cooperative/tma 1.95
warpspec128x128/s6/cooperative/tma 1.95|warpspec128x128/s4/tma/residual-smem 1.95|warpspec256x64/s5/tma/transposed 1.80
warpspec256x128/s4/cooperative/tma/transposed 1.95|warpspec192x128/s5/cooperative/tma/transposed 1.95
warpspec192x128/s4/cooperative/tma/transposed/store-tma 1.95|warpspec256x128/s3/cooperative/tma/transposed/store-tma 1.95"""
ORDER, OLD = [], {}
for item in ROWS.replace("\n", "|").split("|"):
    name, speed = item.split()
    ORDER.append(name)
    OLD[name] = float(speed)
IDX = {n: i for i, n in enumerate(ORDER)}
NEW = dict(OLD)
for n in ORDER:  # step 114's fit: 2.2 x (BM * BN / 128^2)^0.05, residual-smem 5 % more (rounded as in the table)
    if n.startswith("warpspec") and "/tma" in n:
        bm, bn = map(int, re.match(r"warpspec(\d+)x(\d+)", n).groups())
        NEW[n] = round(2.2 * (bm * bn / 16384) ** 0.05 * (1.05 if "residual-smem" in n else 1.0), 2)


def tile(n):
    return tuple(map(int, re.match(r"[a-z]+(\d+)x(\d+)", n).groups()))


def later(n):  # scored -1 outside --tune full before step 114; --tune fast adds them by its own rules
    return n.startswith("warpspec") or n.endswith("/persistent")


def score(n, gm, gn, new):
    bm, bn = tile(n)
    tiles = math.ceil(gm / bm) * math.ceil(gn / bn)
    util = gm * gn / (tiles * bm * bn)
    if new and not n.startswith("pipelined"):  # the sm_90 rows fill the GPU in whole waves (fast_score)
        slots = SM * (2 if n.startswith("warpspec") and "cooperative" not in n else 1)
        par = tiles / (math.ceil(tiles / slots) * slots)
    else:
        par = min(1.0, tiles / SM)
    return (NEW if new else OLD)[n] * util * par


def pick(rows, gm, gn, new):  # the best score, the first in table order of equals (fast_pick)
    rows = sorted(rows, key=IDX.get)
    if not new:
        rows = [n for n in rows if not later(n)]
    return max(rows, key=lambda n: (round(score(n, gm, gn, new), 9), -IDX[n]))


def fast_list(rows, gm, gn, new):  # fast_candidates under --tune fast
    rows = sorted(rows, key=IDX.get)
    plain = sorted((n for n in rows if not later(n)), key=lambda n: -score(n, gm, gn, new))  # stable: table order
    out = [pick(rows, gm, gn, new)] if new else []
    out += plain[:4]
    out += [n for n in plain[4:] if tile(n)[0] * tile(n)[1] <= 64 * 128][:1]
    for n in list(out):
        twin = n + "/persistent"
        if n.startswith("wgmma") and twin in rows and math.ceil(gm / tile(n)[0]) * math.ceil(gn / tile(n)[1]) > SM:
            out.append(twin)
    for n in rows:
        if n.startswith("warpspec"):
            bm, bn = tile(n)
            if math.ceil(gm / bm) * math.ceil(gn / bn) >= (1 if "cooperative" in n else 2) * SM:
                out.append(n)
    return set(out)


def gemm(key):  # the forward GEMM's M (pixels) and N (output channels) of a tuning key
    d = dict(re.findall(r"\b([nchwkrs])(\d+)\b", key))
    n, h, w, k, r, s = (int(d[x]) for x in "nhwkrs")
    sh, sw = map(int, re.search(r"st(\d+)x(\d+)", key).groups())
    ph, pw = map(int, re.search(r"pad(\d+)x(\d+)", key).groups())
    return n * ((h + 2 * ph - r) // sh + 1) * ((w + 2 * pw - s) // sw + 1), k


path = sys.argv[1] if len(sys.argv) > 1 else "bench/results/2026-11-28-H200-conv-candidate-times.txt.gz"
shapes = []  # (run, key, {row: ms} of the unsplit candidates)
for line in (gzip.open if path.endswith(".gz") else open)(path, "rt"):
    m = re.match(r"(\S+) cnn: tuned (?:fprop|dgrad_phase) (.*?): \S+ splits \d+, [\d.]+ ms \(\d+ candidates, \d+ ms: (.*)\)$",
                 line.strip())
    if m:
        times = {}
        for item in m.group(3).split(", "):
            cand, ms = item.rsplit(" ", 1)
            row, splits = cand.rsplit("/", 1)
            if splits == "1":
                times[row] = float(ms)
        shapes.append((m.group(1), m.group(2), times))

print(f"{len(shapes)} shapes; the untimed choice's times summed, ms:")
tot = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
for run, key, t in shapes:
    gm, gn = gemm(key)
    for i, v in enumerate((t[pick(t, gm, gn, False)], t[pick(t, gm, gn, True)], min(t.values()))):
        tot[run][i] += v
        tot["all"][i] += v
for run, (old, new, best) in sorted(tot.items(), key=lambda kv: kv[0] == "all"):
    print(f"  {run:16s} before step 114 {old:7.3f}  after {new:7.3f}  the best candidate {best:7.3f}")

full = [(run, key, t) for run, key, t in shapes if run.endswith("-full")]
old_sum = new_sum = 0.0
worse = []
for run, key, t in full:
    gm, gn = gemm(key)
    o = min(t[n] for n in fast_list(t, gm, gn, False) if n in t)
    n_ = min(t[n] for n in fast_list(t, gm, gn, True) if n in t)
    old_sum, new_sum = old_sum + o, new_sum + n_
    if n_ > o * 1.0001:
        worse.append(key)
print(f"--tune fast's best candidate on the {len(full)} shapes timed under --tune full: {old_sum:.3f} ms before, "
      f"{new_sum:.3f} after; slower on {len(worse)} shapes {worse}")

s512 = [(key, t) for run, key, t in shapes if run == "r18c-b512-full"]
sums = [0.0, 0.0, 0.0, 0.0]
for key, t in s512:
    gm, gn = gemm(key)
    for i, v in enumerate((t[pick(t, gm // 8, gn, False)], t[pick(t, gm // 8, gn, True)], t[pick(t, gm, gn, True)],
                           min(t.values()))):
        sums[i] += v
print(f"--deterministic, CIFAR ResNet-18 b512 ({len(s512)} shapes) on the pick for a 64-image slice: {sums[0]:.3f} ms "
      f"before step 114, {sums[1]:.3f} after; on the pick for the whole batch {sums[2]:.3f}; the best {sums[3]:.3f}")
