#!/usr/bin/env python3
"""report.py — turn benchmark records (JSON lines from `cnn bench -o jsonl` and bench/pytorch_bench.py) into a
markdown report with ratios and SVG plots. Only the standard library: it runs in CI on a fixture.

usage: report.py RESULTS.json [--out-md FILE] [--svg-dir DIR] [--title T] [--command CMD]
RESULTS.json is either a JSON array or JSON lines; records follow docs/BENCH.md.
"""
import argparse, html, json, math, os, sys
from collections import defaultdict

# ---- SVG ------------------------------------------------------------------------------------------------

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"]


def _esc(s):
    return html.escape(str(s), quote=True)


def _nice_ticks(lo, hi, n=5, log=False):
    if log:
        a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        return [10.0 ** e for e in range(a, b + 1)]
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=mag * 10)
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t <= hi + step * 0.5:
        ticks.append(round(t, 10))
        t += step
    return ticks


def _fmt(v):
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.0f}" if v == int(v) else f"{v:.1f}"
    return f"{v:.2g}"


class Chart:
    """A small SVG chart: axes with labels, ticks, a legend; line or grouped-bar series."""

    def __init__(self, title, xlabel, ylabel, width=720, height=420):
        self.title, self.xlabel, self.ylabel = title, xlabel, ylabel
        self.w, self.h = width, height
        self.ml, self.mr, self.mt, self.mb = 80, 190, 40, 60

    def _frame(self, parts, yticks, ymap):
        pw = self.w - self.ml - self.mr
        parts.append(f'<text x="{self.w / 2 - 60}" y="22" font-size="15" font-weight="bold" text-anchor="middle">'
                     f'{_esc(self.title)}</text>')
        x0, y0 = self.ml, self.h - self.mb
        parts.append(f'<line x1="{x0}" y1="{self.mt}" x2="{x0}" y2="{y0}" stroke="black"/>')
        parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x0 + pw}" y2="{y0}" stroke="black"/>')
        for t in yticks:
            y = ymap(t)
            parts.append(f'<line x1="{x0 - 4}" y1="{y:.1f}" x2="{x0 + pw}" y2="{y:.1f}" stroke="#ddd"/>')
            parts.append(f'<text x="{x0 - 8}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{_fmt(t)}</text>')
        parts.append(f'<text class="xlabel" x="{x0 + pw / 2}" y="{self.h - 15}" font-size="13" text-anchor="middle">'
                     f'{_esc(self.xlabel)}</text>')
        yc = self.mt + (y0 - self.mt) / 2
        parts.append(f'<text class="ylabel" x="18" y="{yc}" font-size="13" text-anchor="middle" '
                     f'transform="rotate(-90 18 {yc})">{_esc(self.ylabel)}</text>')

    def _legend(self, parts, names):
        x = self.w - self.mr + 15
        for i, name in enumerate(names):
            y = self.mt + 10 + 20 * i
            parts.append(f'<rect x="{x}" y="{y - 9}" width="12" height="12" fill="{PALETTE[i % len(PALETTE)]}"/>')
            parts.append(f'<text x="{x + 18}" y="{y + 2}" font-size="12">{_esc(name)}</text>')

    def _svg(self, parts):
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w}" height="{self.h}" '
                f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>' + "".join(parts) + "</svg>\n")

    def lines(self, series, logx=True):
        """series: {name: [(x, y), ...]}"""
        pts = [p for s in series.values() for p in s if p[1] == p[1] and p[1] > 0]
        if not pts:
            return None
        xs = sorted({p[0] for p in pts})
        ymax = max(p[1] for p in pts) * 1.1
        yticks = _nice_ticks(0, ymax)
        ytop = yticks[-1]
        pw, ph = self.w - self.ml - self.mr, self.h - self.mt - self.mb

        def xmap(x):
            if len(xs) == 1:
                return self.ml + pw / 2
            if logx:
                return self.ml + pw * (math.log(x) - math.log(xs[0])) / (math.log(xs[-1]) - math.log(xs[0]))
            return self.ml + pw * (x - xs[0]) / (xs[-1] - xs[0])

        def ymap(y):
            return self.mt + ph * (1 - y / ytop)

        parts = []
        self._frame(parts, yticks, ymap)
        for x in xs:
            parts.append(f'<text x="{xmap(x):.1f}" y="{self.h - self.mb + 16}" font-size="11" text-anchor="middle">'
                         f'{_fmt(x)}</text>')
        for i, (name, s) in enumerate(series.items()):
            s = sorted(p for p in s if p[1] == p[1] and p[1] > 0)
            col = PALETTE[i % len(PALETTE)]
            if len(s) > 1:
                d = " ".join(f"{xmap(x):.1f},{ymap(y):.1f}" for x, y in s)
                parts.append(f'<polyline points="{d}" fill="none" stroke="{col}" stroke-width="2"/>')
            for x, y in s:
                parts.append(f'<circle cx="{xmap(x):.1f}" cy="{ymap(y):.1f}" r="3.5" fill="{col}"/>')
        self._legend(parts, list(series))
        return self._svg(parts)

    def bars(self, groups, names):
        """groups: [(group label, {name: value})], names: series order"""
        vals = [v for _, g in groups for v in g.values() if v == v and v > 0]
        if not vals:
            return None
        yticks = _nice_ticks(0, max(vals) * 1.1)
        ytop = yticks[-1]
        # the first group's label, rotated -30 degrees and anchored at its end, reaches left of its group by about
        # its length x 6 px (font-size 10) x cos 30: widen the left margin so it is not cut off
        gw0 = (self.w - self.ml - self.mr) / max(1, len(groups))
        self.ml = max(self.ml, int(len(str(groups[0][0])) * 6.0 * 0.87 - gw0 / 2) + 8)
        pw, ph = self.w - self.ml - self.mr, self.h - self.mt - self.mb

        def ymap(y):
            return self.mt + ph * (1 - y / ytop)

        parts = []
        self._frame(parts, yticks, ymap)
        gw = pw / max(1, len(groups))
        bw = gw * 0.8 / max(1, len(names))
        for gi, (label, g) in enumerate(groups):
            gx = self.ml + gi * gw + gw * 0.1
            for si, name in enumerate(names):
                v = g.get(name)
                if v is None or not v == v or v <= 0:
                    continue
                y = ymap(v)
                parts.append(f'<rect x="{gx + si * bw:.1f}" y="{y:.1f}" width="{bw * 0.95:.1f}" '
                             f'height="{self.h - self.mb - y:.1f}" fill="{PALETTE[si % len(PALETTE)]}">'
                             f'<title>{_esc(name)} {_esc(label)}: {v:.4g}</title></rect>')
            lx = self.ml + gi * gw + gw / 2
            ly = self.h - self.mb + 14
            parts.append(f'<text x="{lx:.1f}" y="{ly}" font-size="10" text-anchor="end" '
                         f'transform="rotate(-30 {lx:.1f} {ly})">{_esc(label)}</text>')
        self._legend(parts, names)
        return self._svg(parts)


# ---- records --------------------------------------------------------------------------------------------

def load(path):
    text = open(path).read().strip()
    if not text:
        return []
    if text[0] == "[":
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def key(r):
    return (r["model"], r.get("input", ""), r["batch"], r["mode"])


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _slug(s):
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in str(s))


def _protocol(r):
    """how a per-layer record was timed: (idle ms before each shape, least ms of runs per shape); (0, 0) is the
    default (--repeat runs, shapes back to back)"""
    return (int(r.get("layer_rest_ms") or 0), int(r.get("layer_min_ms") or 0))


def per_layer(ok, records, svg_dir):
    """Markdown sections and SVG names comparing our conv layers with cuDNN's, per (model, batch, dtype).

    Ours: `mode=layer`, `kind=conv` records of `cnn bench --layers`; layers of one shape are summarised by the
    median of their times. Theirs: `mode=conv` records (bench/pytorch_bench.py --impl cudnn), one per shape and
    process; where several processes timed a shape (bench/run.sh runs two, each with its own cudnn.benchmark
    choice), the fastest."""
    ours = [r for r in ok if r["impl"] == "cnn" and r["mode"] == "layer" and r.get("kind") == "conv" and r.get("layer")]
    convs = [r for r in ok if r["mode"] == "conv" and r.get("layer")]
    if not ours and not convs:
        return [], []
    whole = {(r["model"], r["batch"], r["dtype"], _protocol(r)): r for r in ok
             if r["impl"] == "cnn" and r["mode"] == "infer" and r.get("layers_ms_sum")}
    configs = sorted({(r["model"], r["batch"], r["dtype"], _protocol(r)) for r in ours + convs})
    out, svgs = ["## Per layer", "",
                 "Ours: each conv of the eval forward timed alone (`cnn bench --layers`, eager, BN / residual add / "
                 "ReLU fused in, and the max-pool after the ResNet stem where the step's `fused` field says "
                 "`+maxpool`), the median over the layers of one shape. Rival: the same convolution alone "
                 "(`pytorch_bench.py --impl cudnn`, F.conv2d NHWC, cudnn.benchmark), the fastest of its rows for "
                 "that shape: `bench/run.sh` times cuDNN in two processes, each with its own algorithm choice, "
                 "because one choice was now and then several times slower than usual (docs/perf-log.md, step 27). "
                 "A row `A + B` is a fused pair, a ResNet block's last conv and its downsample conv summed in one "
                 "kernel (each with its BN, then the ReLU; neither branch stored): its rival is the sum of the two "
                 "convolutions alone. ratio = rival ms / ours: > 1 means we are faster.", ""], []
    for model, batch, dtype, proto in configs:
        mine = defaultdict(list)
        for r in ours:
            if (r["model"], r["batch"], r["dtype"], _protocol(r)) == (model, batch, dtype, proto):
                mine[r["layer"]].append(r["ms_median"])
        theirs = defaultdict(dict)
        for r in convs:
            if (r["model"], r["batch"], r["dtype"], _protocol(r)) == (model, batch, dtype, proto) and r["impl"] != "cnn":
                best = theirs[r["layer"]].get(r["impl"])
                if best is None or r["ms_median"] < best["ms_median"]:
                    theirs[r["layer"]][r["impl"]] = r
        # a fused pair "A + B" (two convs summed in one kernel, each with its BN, then the ReLU) against the sum of
        # the rival's two convs alone, where it timed both
        for shape in mine:
            parts = shape.split(" + ")
            if len(parts) != 2 or shape in theirs:
                continue
            for impl in set(theirs.get(parts[0], {})) & set(theirs.get(parts[1], {})):
                theirs[shape][impl] = {"ms_median": theirs[parts[0]][impl]["ms_median"] +
                                       theirs[parts[1]][impl]["ms_median"]}
        rivals = sorted({impl for g in theirs.values() for impl in g})
        shapes = sorted(set(mine) | set(theirs), key=lambda l: (-max(mine.get(l, [0])), l))
        head = ["layer", "count", "cnn ms"] + [c for i in rivals for c in (f"{i} ms", "ratio")]
        how = ""
        if proto[0] > 0:
            how += f", each shape after {proto[0]} ms of an idle GPU"
        if proto[1] > 0:
            how += f", each shape timed over at least {proto[1]} ms of runs (both sides: `--layer-min-ms {proto[1]}`)"
        out += [f"### {model}, batch {batch}, {dtype}{how}", "", "| " + " | ".join(head) + " |",
                "|" + "---|" * len(head)]
        groups = []
        for shape in shapes:
            ms = _median(mine[shape]) if shape in mine else None
            count = len(mine[shape]) if shape in mine else next(iter(theirs[shape].values())).get("count", "")
            g = {"cnn": ms} if ms is not None else {}
            cells = [shape, str(count), f"{ms:.4f}" if ms is not None else "–"]
            for impl in rivals:
                v = theirs[shape].get(impl)
                if v is None:
                    cells += ["–", ""]
                    continue
                g[impl] = v["ms_median"]
                cells += [f'{v["ms_median"]:.4f}', f'**{v["ms_median"] / ms:.2f}x**' if ms else ""]
            out.append("| " + " | ".join(cells) + " |")
            groups.append((shape, g))
        for impl in rivals:  # single convs (pairs are not single shapes): ours at the rival's time or better
            singles = [sh for sh in shapes if " + " not in sh and sh in mine and impl in theirs.get(sh, {})]
            if singles:
                wins = sum(1 for sh in singles if theirs[sh][impl]["ms_median"] >= _median(mine[sh]))
                out += ["", f"Single conv shapes (with their fused epilogue) at least as fast as {impl}'s conv "
                        f"alone: {wins} of {len(singles)}."]
        w = whole.get((model, batch, dtype, proto))
        if w:
            out += ["", f'All {w.get("layer_steps", "?")} steps of our forward one at a time: '
                    f'{w["layers_ms_sum"]:.3f} ms in all; the whole forward: {w["ms_median"]:.3f} ms.']
        out.append("")
        names = (["cnn"] if mine else []) + rivals
        chart = Chart(f"per-layer: cnn vs cuDNN, {model} b{batch} {dtype} (lower is better)",
                      "conv layer (C->K HxW RxR/stride pP)", "ms per layer (median)",
                      width=max(720, 300 + 34 * len(groups)), height=560)
        chart.mb = 130
        svg = chart.bars(groups, names)
        if svg:
            suffix = (f"_rest{proto[0]}" if proto[0] else "") + (f"_min{proto[1]}" if proto[1] else "")
            name = f"layers_{_slug(model)}_b{batch}_{_slug(dtype)}{suffix}.svg"
            open(os.path.join(svg_dir, name), "w").write(svg)
            svgs.append(name)
    return out, svgs


def report(records, svg_dir, title, command):
    ok = [r for r in records if r.get("ok", True) and r.get("ms_median", 0) == r.get("ms_median", 0)]
    failed = [r for r in records if not r.get("ok", True)]
    # side records: the measured matmul peak, independent re-measurements (check-*), the cold-cache start
    peaks = {r["dtype"]: r["tflops"] for r in ok if r["mode"] == "peak" and r.get("tflops")}
    checks = [r for r in ok if r["impl"].startswith("check-")]
    cold = [r for r in ok if r.get("cache") == "cold"]
    ok = [r for r in ok if r["mode"] != "peak" and not r["impl"].startswith("check-") and r.get("cache") != "cold"]
    # a per-layer timing protocol's own run (`--layer-min-ms`): its whole-forward row repeats the main one, so it
    # stays out of the tables of whole forwards and serves the per-layer section only
    layer_runs = ok
    ok = [r for r in ok if not (r["mode"] == "infer" and _protocol(r) != (0, 0))]
    ours = [r for r in ok if r["impl"] == "cnn" and r["mode"] in ("infer", "train")]
    rivals = [r for r in ok if r["impl"] != "cnn" and r["mode"] in ("infer", "train")]
    out = [f"# {title}", ""]
    devices = sorted({r.get("device", "?") for r in records})
    dates = sorted({r.get("date", "?") for r in records})
    versions = sorted({f'{r["impl"]} {r.get("version", "")}'.strip() for r in records if r.get("version")})
    out += [f"- device: {', '.join(devices)}", f"- measured: {dates[0]} .. {dates[-1]}" if dates else "",
            f"- versions: {', '.join(versions)}"]
    commits = sorted({r["commit"] for r in records if r.get("commit")})
    if commits:
        out.append(f"- cnn commit: {', '.join(commits)}")
    if command:
        out.append(f"- regenerate: `{command}`")
    out.append("")
    # main table: ours beside each rival with the ratio of times (rival ms / our ms: > 1 means we are faster)
    if peaks:
        out += ["Measured matrix peak of this GPU (cuBLAS 8192^3 matmul, `bench/gpu_checks.py peak`): " +
                ", ".join(f"{d} {v:.0f} TFLOP/s" for d, v in sorted(peaks.items())) +
                "; `% peak` = our achieved TFLOP/s over the peak of our precision (tf32 rows: the fp32 peak is not "
                "a bound, so none is shown).", ""]

    def pct(r):
        p = peaks.get(r["dtype"])
        return f'{r.get("tflops", 0):.1f} ({100 * r.get("tflops", 0) / p:.0f}%)' if p else f'{r.get("tflops", 0):.1f}'
    out += ["## Throughput", "",
            "| model | input | batch | mode | ours: dtype | ours ms | images/s | TFLOP/s (% peak) | rival | rival dtype | rival ms | speed-up |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    # rival rows whose re-run in a fresh process (check-* records) differs by more than 10% (†), and rows whose
    # own independent timer (wall_ms, interleaved with the events in the same process) disagrees by more (‡)
    unsettled = {("pytorch-" + c["impl"][len("check-"):], key(c), c["dtype"]) for c in checks
                 if not 0.9 <= c.get("ratio", 0) <= 1.1}
    timed = [r for r in rivals if r.get("wall_ms", 0) > 0]
    mistimed = {(r["impl"], key(r), r["dtype"]) for r in timed if not 0.9 <= r["ms_median"] / r["wall_ms"] <= 1.1}
    by_key = defaultdict(list)
    for r in rivals:
        by_key[key(r)].append(r)
    for r in sorted(ours, key=lambda r: (r["model"], r["mode"], r["batch"], r["dtype"])):
        same = [v for v in by_key.get(key(r), []) if v["dtype"] == r["dtype"] or
                (r["dtype"] == "fp32" and v["dtype"] == "fp32")]
        if not same:
            out.append(f'| {r["model"]} | {r["input"]} | {r["batch"]} | {r["mode"]} | {r["dtype"]} | '
                       f'{r["ms_median"]:.3f} | {r["images_per_s"]:.0f} | {pct(r)} | – | | | |')
        for v in same:
            vk = (v["impl"], key(v), v["dtype"])
            mark = (" †" if vk in unsettled else "") + (" ‡" if vk in mistimed else "")
            out.append(f'| {r["model"]} | {r["input"]} | {r["batch"]} | {r["mode"]} | {r["dtype"]} | '
                       f'{r["ms_median"]:.3f} | {r["images_per_s"]:.0f} | {pct(r)} | {v["impl"]} | {v["dtype"]} | '
                       f'{v["ms_median"]:.3f}{mark} | **{v["ms_median"] / r["ms_median"]:.2f}x**{mark} |')
    out.append("")
    out.append("speed-up = rival's median ms / ours, same model, batch, mode and precision, same run.")
    if unsettled:
        out.append("† the re-run of this PyTorch row in a fresh process (below) differs from it by more than 10%, so "
                   "this ratio is not a settled number. (On the H100 machine that happened to host-bound rows: eager "
                   "PyTorch at small batch, limited by the CPU's launch rate, which followed the host CPU's speed: "
                   "see the host probe columns.)")
    if mistimed:
        out.append("‡ this PyTorch row's two timers (CUDA events, and torch.utils.benchmark interleaved with them in "
                   "the same process) differ by more than 10%: the measurement itself is in doubt.")
    out.append("")
    if cold:
        out += ["## Startup: compilation and tuning", "",
                "| model | batch | dtype | setup s, empty kernel cache | setup s, warm cache |", "|---|---|---|---|---|"]
        for c in cold:
            warm = [r for r in ours if key(r) == key(c) and r["dtype"] == c["dtype"]]
            out.append(f'| {c["model"]} | {c["batch"]} | {c["dtype"]} | {c.get("setup_s", 0):.2f} | '
                       f'{warm[0].get("setup_s", 0):.2f} |' if warm else
                       f'| {c["model"]} | {c["batch"]} | {c["dtype"]} | {c.get("setup_s", 0):.2f} | – |')
        out += ["", "setup = model build, kernel compilation (NVRTC) or cache loads, autotuning, graph capture and the "
                "warm-up runs before timing.", ""]

    def probe(r, k="host_probe_ms"):
        return f'{r[k]:.1f}' if r.get(k) else "–"
    if timed:
        out += ["## Independent timer on every PyTorch row", "",
                "| model | batch | mode | dtype | rival | events ms | torch.utils.benchmark ms | ratio | within 10% | host probe ms |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(timed, key=lambda r: (r["model"], r["mode"], r["impl"], r["batch"])):
            ratio = r["ms_median"] / r["wall_ms"]
            out.append(f'| {r["model"]} | {r["batch"]} | {r["mode"]} | {r["dtype"]} | {r["impl"]} | '
                       f'{r["ms_median"]:.3f} | {r["wall_ms"]:.3f} | {ratio:.3f} | '
                       f'{"yes" if 0.9 <= ratio <= 1.1 else "**no**"} | {probe(r)} |')
        agree = sum(1 for r in timed if 0.9 <= r["ms_median"] / r["wall_ms"] <= 1.1)
        out += ["", f"{agree} of {len(timed)} rows within 10%.", "",
                "Each PyTorch row is timed twice in `bench/pytorch_bench.py`, in the same process over the same "
                "stretch of time: its runs in 4 or 8 blocks with a CUDA event after each run (the published `events ms`, "
                "median per run), each block followed by as many runs timed by `torch.utils.benchmark.Timer.timeit` "
                "(a host clock, CUDA synchronised at both ends; median over the blocks); ratio = events / "
                "torch.utils.benchmark. host probe = a fixed pure-Python loop timed just before the row: the host "
                "CPU's speed at the time (larger is slower), which launch-bound rows follow.", ""]
    if checks:
        out += ["## Re-run in a fresh process", "",
                "| model | batch | dtype | rival | pytorch_bench.py ms | re-run ms | ratio | within 10% | host probe ms: row / re-run |",
                "|---|---|---|---|---|---|---|---|---|"]
        for c in checks:
            ratio = c.get("ratio", 0)
            out.append(f'| {c["model"]} | {c["batch"]} | {c["dtype"]} | pytorch-{c["impl"][len("check-"):]} | '
                       f'{c.get("ref_ms", 0):.3f} | {c["ms_median"]:.3f} | {ratio:.3f} | '
                       f'{"yes" if 0.9 <= ratio <= 1.1 else "**no**"} | {probe(c, "ref_host_probe_ms")} / {probe(c)} |')
        timers = sorted({c.get("timer", "triton.testing.do_bench (median)") for c in checks})
        agree = sum(1 for c in checks if 0.9 <= c.get("ratio", 0) <= 1.1)
        out += ["", f"{agree} of {len(checks)} rows within 10%.", "",
                "The same configuration rebuilt in another process after the suite (`bench/gpu_checks.py check`) and "
                "timed by " + ", ".join(f"`{t}`" for t in timers) + "; ratio = pytorch_bench.py ms / re-run ms. "
                "This checks that a row can be reproduced: GPU-bound rows can, launch-bound ones only as far as the "
                "host CPU's speed (host probe) is the same.", ""]
    svgs = []
    os.makedirs(svg_dir, exist_ok=True)
    # plot 1: throughput vs batch for each (model, mode, dtype)
    combos = sorted({(r["model"], r["mode"], r["dtype"]) for r in ok if r["mode"] in ("infer", "train")})
    for model, mode, dtype in combos:
        series = defaultdict(list)
        for r in ok:
            if r["model"] == model and r["mode"] == mode and (r["dtype"] == dtype):
                series[r["impl"]].append((r["batch"], r["images_per_s"]))
        if sum(len(s) for s in series.values()) < 2:
            continue
        svg = Chart(f"{model} {mode} {dtype}: throughput", "batch size (images)", "images / s").lines(dict(series))
        if svg:
            name = f"throughput_{model}_{mode}_{dtype}.svg"
            open(os.path.join(svg_dir, name), "w").write(svg)
            svgs.append(name)
    # plot 2: latency at batch 1
    b1 = [r for r in ok if r["batch"] == 1 and r["mode"] == "infer"]
    if b1:
        impls = sorted({r["impl"] for r in b1})
        groups = defaultdict(dict)
        for r in b1:
            groups[f'{r["model"]} {r["dtype"]}'][r["impl"]] = r["ms_median"]
        svg = Chart("latency at batch 1 (lower is better)", "model, precision", "ms per image").bars(
            sorted(groups.items()), impls)
        if svg:
            open(os.path.join(svg_dir, "latency_b1.svg"), "w").write(svg)
            svgs.append("latency_b1.svg")
    # plot 3: per layer, ours (mode=layer, one record per conv of the model) against cuDNN alone (mode=conv,
    # one record per distinct shape), matched on the `layer` shape string
    sections, layer_svgs = per_layer(layer_runs, records, svg_dir)
    out += sections
    svgs += layer_svgs
    # plot 4: training images/s
    tr = [r for r in ok if r["mode"] == "train"]
    if tr:
        impls = sorted({r["impl"] for r in tr})
        groups = defaultdict(dict)
        for r in tr:
            groups[f'{r["model"]} b{r["batch"]} {r["dtype"]}'][r["impl"]] = r["images_per_s"]
        svg = Chart("training step throughput (higher is better)", "model, batch, precision", "images / s").bars(
            sorted(groups.items()), impls)
        if svg:
            open(os.path.join(svg_dir, "training.svg"), "w").write(svg)
            svgs.append("training.svg")
    if svgs:
        out += ["## Plots", ""] + [f"![{s}]({os.path.basename(svg_dir)}/{s})" for s in svgs] + [""]
    if failed:
        out += ["## Configurations that failed", ""]
        out += [f'- {r["impl"]} {r["model"]} b{r["batch"]} {r["dtype"]} {r["mode"]}: {r.get("error", "")}' for r in failed]
        out.append("")
    return "\n".join(line for line in out if line is not None) + "\n", svgs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--out-md", default=None)
    ap.add_argument("--svg-dir", default=None)
    ap.add_argument("--title", default="Benchmarks")
    ap.add_argument("--command", default="")
    a = ap.parse_args()
    recs = load(a.results)
    svg_dir = a.svg_dir or os.path.join(os.path.dirname(a.out_md or a.results) or ".", "plots")
    md, _ = report(recs, svg_dir, a.title, a.command)
    if a.out_md:
        open(a.out_md, "w").write(md)
    else:
        sys.stdout.write(md)


if __name__ == "__main__":
    main()
