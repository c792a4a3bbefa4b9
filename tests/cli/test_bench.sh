#!/usr/bin/env bash
# test_bench.sh — `cnn bench` on the CPU writes the records docs/BENCH.md documents (every field, its type,
# images/s = batch / ms), --layers adds one record per step of the eval forward (every conv of the model, with
# its torchvision name and shape string), and bench/report.py renders a hand-written fixture of records into a
# markdown report whose ratios follow from the fixture and SVG plots that parse as XML and have axis labels;
# bench/pytorch_bench.py --jobs (the suite's PyTorch side) writes the documented records, in order, on the CPU.
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FIXTURE=$ROOT/tests/fixtures/bench_fixture.jsonl
ARGS=(--model resnet18 --stem cifar --batch 1,2 --dtypes fp32 --repeat 2 --warmup 1 --device cpu)

# Run a Python check; it prints "PASS|name|detail" or "FAIL|name|detail" lines, turned into pass/fail here.
# A check that dies without a verdict line is a failure named $1.
pycheck() {
    local name=$1; shift
    "$PYTHON" - "$@" >"$TMP/verdicts" 2>"$TMP/pyerr"
    local rc=$? seen=0 kind n detail
    while IFS='|' read -r kind n detail; do
        case $kind in
        PASS) pass "$n" "$detail"; seen=1 ;;
        FAIL) fail "$n" "$detail"; seen=1 ;;
        esac
    done <"$TMP/verdicts"
    if [ $rc -ne 0 ] || [ $seen -eq 0 ]; then fail "$name" "python exited $rc: $(tail -c 600 "$TMP/pyerr" | tr '\n' '|')"; fi
}

# ---- (a) cnn bench records ----------------------------------------------------------------------------
"$CNN" bench "${ARGS[@]}" -o json >"$TMP/bench.json" 2>"$TMP/bench.err" \
    && pass bench.json_runs || fail bench.json_runs "$(head -c 400 "$TMP/bench.err")"
"$CNN" bench "${ARGS[@]}" --layers -o json >"$TMP/layers.json" 2>"$TMP/layers.err" \
    && pass bench.layers_runs || fail bench.layers_runs "$(head -c 400 "$TMP/layers.err")"

pycheck bench.records "$ROOT/docs/BENCH.md" "$TMP/bench.json" "$TMP/layers.json" <<'EOF'
import json, math, re, sys

def verdict(ok, name, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}|{name}|{str(detail)[:300]}")

# The two field tables of docs/BENCH.md: {field: (type, meaning)}
tables, cur = [], None
for line in open(sys.argv[1]):
    if line.startswith("| field |"):
        cur = {}
        tables.append(cur)
    elif cur is not None and line.startswith("| `"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for f in re.findall(r"`([a-z_0-9]+)`", cells[0]):
            cur[f] = (cells[1], cells[2])
    elif not line.startswith("|"):
        cur = None
# the third (per-pass records of a training step) is checked by layers.train_passes below
verdict(len(tables) == 3, "bench.docs_tables", f"{len(tables)} field tables in docs/BENCH.md")
record, layer = tables[0], tables[1] if len(tables) > 1 else {}
TYPES = {"string": lambda v: isinstance(v, str), "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
         "bool": lambda v: isinstance(v, bool),
         "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
verdict(all(t in TYPES for t, _ in list(record.values()) + list(layer.values())), "bench.docs_types",
        sorted({t for t, _ in list(record.values()) + list(layer.values())}))

def conditional(meaning):  # fields only some records carry: "`conv` rows: ...", "`infer` rows of `cnn bench --layers`"
    return re.match(r"`\w+` rows", meaning) is not None

def check_fields(r, table, skip=()):
    bad = []
    for f, (t, meaning) in table.items():
        if f in skip or conditional(meaning):
            continue
        if f not in r:
            bad.append(f"missing {f}")
        elif not TYPES[t](r[f]):
            bad.append(f"{f}={r[f]!r} is not {t}")
    return bad

def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b))

try:
    rows = json.load(open(sys.argv[2]))
    verdict(True, "bench.json_valid")
except Exception as e:
    verdict(False, "bench.json_valid", e)
    sys.exit(0)
verdict(isinstance(rows, list) and [r.get("batch") for r in rows] == [1, 2], "bench.one_record_per_batch",
        [r.get("batch") for r in rows])
for r in rows:
    b = r.get("batch")
    bad = check_fields(r, record)
    verdict(not bad, f"bench.b{b}.fields_and_types", "; ".join(bad) or f"{len(r)} fields")
    verdict(r.get("ok") is True and r.get("error") == "", f"bench.b{b}.ok", r.get("error"))
    verdict((r.get("impl"), r.get("model"), r.get("input"), r.get("dtype"), r.get("mode"), r.get("backend")) ==
            ("cnn", "resnet18-cifar", "32x32", "fp32", "infer", "cpu"), f"bench.b{b}.identity")
    ms = r.get("ms_median", 0)
    verdict(ms > 0 and r["ms_min"] <= r["ms_p10"] <= ms <= r["ms_p90"] <= r["ms_max"], f"bench.b{b}.times",
            f'{r.get("ms_min")} <= {ms} <= {r.get("ms_max")} ms')
    verdict(ms > 0 and close(r["images_per_s"], b * 1000.0 / ms), f"bench.b{b}.images_per_s",
            f'{r.get("images_per_s")} vs {b} * 1000 / {ms}')
    verdict(ms > 0 and close(r["tflops"], r["gflop_per_batch"] / ms), f"bench.b{b}.tflops")
    # resnet18 (CIFAR stem, 1000 classes): convs and fc, 2 FLOPs per multiply-add
    verdict(close(r["gflop_per_batch"], b * 1.1118592), f"bench.b{b}.gflop_per_batch", r["gflop_per_batch"])
    verdict(r.get("repeat") == 2 and r.get("warmup") == 1, f"bench.b{b}.repeat_warmup")

# --layers: the same records plus one per eval step, each after its configuration's record
try:
    lrows = json.load(open(sys.argv[3]))
    verdict(True, "layers.json_valid")
except Exception as e:
    verdict(False, "layers.json_valid", e)
    sys.exit(0)
mains = [r for r in lrows if r.get("mode") == "infer"]
verdict([r["batch"] for r in mains] == [1, 2], "layers.infer_records", [r.get("batch") for r in mains])
# what a layer record shares with the others (docs/BENCH.md lists them under "Per-layer records")
common = {f: record[f] for f in ("impl", "model", "input", "batch", "dtype", "device", "backend", "ok", "repeat",
                                 "warmup", "version", "commit", "date", "error")}
SHAPE = re.compile(r"^\d+->\d+ \d+x\d+ \d+x\d+/\d+ p\d+$")
for m in mains:
    b = m["batch"]
    bad = check_fields(m, record)
    for f in ("layer_steps", "layers_ms_sum"):
        if f not in record:
            bad.append(f"{f} not documented")
        elif f not in m or not TYPES[record[f][0]](m[f]):
            bad.append(f"{f} missing or mistyped")
    verdict(not bad, f"layers.b{b}.infer_fields", "; ".join(bad))
    i = lrows.index(m)
    steps = lrows[i + 1:i + 1 + m.get("layer_steps", 0)]
    verdict(len(steps) == m.get("layer_steps") and all(s.get("mode") == "layer" for s in steps)
            and [s.get("step") for s in steps] == list(range(len(steps))), f"layers.b{b}.steps_follow",
            f'{m.get("layer_steps")} steps')
    bad = []
    for s in steps:
        skip = ("tflops", "gflop_per_batch") if s.get("kind") != "conv" and s.get("kind") != "linear" else ("gbps", "gbyte_per_batch")
        bad += [f'{s.get("name")}: {e}' for e in check_fields(s, layer, skip) + check_fields(s, common)]
        if (s.get("model"), s.get("batch"), s.get("dtype"), s.get("impl")) != ("resnet18-cifar", b, "fp32", "cnn"):
            bad.append(f'{s.get("name")}: model/batch/dtype/impl')
        if not s.get("ms_median", 0) > 0:
            bad.append(f'{s.get("name")}: ms_median {s.get("ms_median")}')
    verdict(not bad, f"layers.b{b}.step_fields", "; ".join(bad[:6]) or f"{len(steps)} steps")
    convs = [s for s in steps if s.get("kind") == "conv"]
    names = [s["name"] for s in convs]
    # on the CPU the eval plan fuses each downsampling block's conv2 with its downsample conv (a pair step)
    want = ["conv1"] + [f"layer{l}.{k}.conv{c}" for l in range(1, 5) for k in range(2) for c in (1, 2)
                        if not (l > 1 and k == 0 and c == 2)] + \
           [f"layer{l}.0.conv2+layer{l}.0.downsample.0" for l in range(2, 5)]
    verdict(sorted(names) == sorted(want), f"layers.b{b}.every_conv",
            f"{len(convs)} conv steps (resnet18: 20 convs, three pairs of them fused)")
    verdict(all(s["ms_median"] > 0 for s in convs), f"layers.b{b}.conv_times_positive",
            f'min {min((s["ms_median"] for s in convs), default=0):.4f} ms')
    shapes = {s["name"]: s["layer"] for s in convs}
    pair2 = "layer2.0.conv2+layer2.0.downsample.0"
    verdict(all(all(SHAPE.match(p) for p in v.split(" + ")) for v in shapes.values())
            and shapes.get("conv1") == "3->64 32x32 3x3/1 p1"
            and shapes.get("layer1.0.conv1") == "64->64 32x32 3x3/1 p1"
            and shapes.get(pair2) == "128->128 16x16 3x3/1 p1 + 64->128 32x32 1x1/2 p0"
            and shapes.get("layer4.1.conv2") == "512->512 4x4 3x3/1 p1", f"layers.b{b}.conv_shapes",
            "; ".join(f"{k}: {v}" for k, v in shapes.items() if k in ("conv1", "layer1.0.conv1", pair2)))
    lp = next((s for s in convs if s["name"] == pair2), {})
    flop = 2.0 * b * 128 * 16 * 16 * (128 * 9 + 64) / 1e9
    verdict(close(lp.get("gflop_per_batch", 0), flop) and lp.get("fused") == "pair+bn+add+relu",
            f"layers.b{b}.pair_flops", lp)
    l101 = next((s for s in convs if s["name"] == "layer1.0.conv1"), {})
    flop = 2.0 * b * 64 * 32 * 32 * 64 * 9 / 1e9
    verdict(close(l101.get("gflop_per_batch", 0), flop) and close(l101.get("tflops", 0), flop / l101.get("ms_median", 1))
            and l101.get("fused") == "bn+relu", f"layers.b{b}.conv_flops", l101)
    others = [s for s in steps if s.get("kind") != "conv"]
    verdict([(s["name"], s["kind"]) for s in others] == [("avgpool", "pool"), ("fc", "linear")]
            and "gbps" in others[0] and "tflops" in others[1], f"layers.b{b}.other_steps",
            [(s["name"], s["kind"]) for s in others])
    verdict(close(m.get("layers_ms_sum", 0), sum(s["ms_median"] for s in steps)), f"layers.b{b}.sum",
            f'{m.get("layers_ms_sum")} ms for the steps, {m["ms_median"]} ms whole')
EOF

# markdown and csv carry the same breakdown; --layers is for inference only
"$CNN" bench --model resnet18 --stem cifar --batch 1 --repeat 1 --warmup 0 --device cpu --layers >"$TMP/layers.md" 2>&1 \
    && grep -q '^| model | batch | dtype | step | name | kind | fused | shape | ms (median) |' "$TMP/layers.md" \
    && grep -q '^| resnet18-cifar | 1 | fp32 | 6 | layer2.0.conv2+layer2.0.downsample.0 | conv | pair+bn+add+relu | 128->128 16x16 3x3/1 p1 + 64->128 32x32 1x1/2 p0 |' "$TMP/layers.md" \
    && grep -q '^| resnet18-cifar | 1 | fp32 | | \*\*sum of 19 steps\*\* |' "$TMP/layers.md" \
    && pass layers.markdown || fail layers.markdown "$(head -c 600 "$TMP/layers.md")"
"$CNN" bench --model vgg11_bn --input-size 32 --batch 1 --repeat 1 --warmup 0 --device cpu --layers -o csv >"$TMP/layers.csv" 2>&1 \
    && "$PYTHON" -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
steps = [r for r in rows if r["mode"] == "layer"]
assert rows[0]["mode"] == "infer" and len(steps) == 20 and all(len(r) == len(rows[0]) and None not in r for r in rows)
assert [r["name"] for r in steps if r["kind"] == "conv"][:2] == ["features.0", "features.4"], steps[:2]
assert all(float(r["ms_median"]) > 0 for r in steps) and abs(sum(float(r["ms_median"]) for r in steps) - float(rows[0]["layers_ms_sum"])) < 1e-3
assert all((r["tflops"] != "") == (r["kind"] in ("conv", "linear")) and (r["gbps"] != "") != (r["tflops"] != "") for r in steps)
' "$TMP/layers.csv" && pass layers.csv_vgg11_bn || fail layers.csv_vgg11_bn "$(head -c 600 "$TMP/layers.csv")"
# --mode train --layers: every distinct conv of the CIFAR ResNet-18 (11 shapes, 20 convs), its three passes timed,
# the records' sums equal to the count-weighted medians
"$CNN" bench --model resnet18 --stem cifar --batch 2 --repeat 2 --warmup 1 --device cpu --mode train --layers -o json \
    >"$TMP/passes.json" 2>"$TMP/passes.err" \
    && "$PYTHON" -c '
import json, re, sys
rows = json.load(open(sys.argv[1]))
doc = open(sys.argv[2]).read().split("## Per-pass records of a training step")[1].split("\n## ")[0]
fields = {}
for line in doc.splitlines():
    if line.startswith("| `"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for f in re.findall(r"`([a-z_0-9]+)`", cells[0]):
            fields[f] = cells[1]
kinds = {"string": str, "int": int, "float": (int, float)}
assert len(fields) == 15, fields
step = [r for r in rows if r["mode"] == "train"]
ps = [r for r in rows if r["mode"] == "conv_pass"]
assert len(step) == 1 and step[0]["ok"] and step[0]["conv_pass_shapes"] == len(ps) == 11, (len(step), len(ps))
assert sum(p["count"] for p in ps) == 20 and ps[0]["layer"] == "3->64 32x32 3x3/1" and ps[0]["count"] == 1
# the stem reads the images: no dgrad in a training step, none timed; every other pass timed
assert ps[0]["dgrad_ms"] == 0 and all(p["dgrad_ms"] > 0 for p in ps[1:]), [p["dgrad_ms"] for p in ps]
for key in ("fprop", "dgrad", "wgrad"):
    assert all(p[key + "_ms"] > 0 for p in ps if key != "dgrad" or p is not ps[0])
    tot = sum(p["count"] * p[key + "_ms"] for p in ps)
    assert abs(tot - step[0][key + "_ms_sum"]) <= 1e-6 * tot, (key, tot, step[0][key + "_ms_sum"])
assert all(p["gflop_per_pass"] > 0 and p["batch"] == 2 for p in ps)
assert all(isinstance(p[f], kinds[t]) for p in ps for f, t in fields.items()), "a record off docs/BENCH.md"
assert all(isinstance(step[0][f], float) for f in ("fprop_ms_sum", "dgrad_ms_sum", "wgrad_ms_sum"))
' "$TMP/passes.json" "$ROOT/docs/BENCH.md" && pass layers.train_passes || fail layers.train_passes "$(head -c 600 "$TMP/passes.json"; cat "$TMP/passes.err")"
# --mode train --deterministic: the step cnn train --deterministic runs, its batch as 8 slices (mode
# train-deterministic), whose sums take a scratch of 8 rows of the widest filter's gradient (ResNet-18's 512x512x3x3:
# 75 MB) that the plain step has not
for det in "" --deterministic; do
    "$CNN" bench --model resnet18 --stem cifar --batch 8 --repeat 2 --warmup 1 --device cpu --mode train $det -o json \
        >"$TMP/det$det.json" 2>"$TMP/det$det.err"
done
"$PYTHON" -c '
import json, sys
plain, det = (json.load(open(f))[0] for f in sys.argv[1:3])
assert plain["ok"] and det["ok"] and plain["mode"] == "train" and det["mode"] == "train-deterministic", (plain, det)
assert det["peak_mib"] - plain["peak_mib"] >= 60, (plain["peak_mib"], det["peak_mib"])
' "$TMP/det.json" "$TMP/det--deterministic.json" && pass bench.train_deterministic \
    || fail bench.train_deterministic "$(head -c 400 "$TMP/det--deterministic.json"; tail -c 300 "$TMP/det--deterministic.err")"
# --layer-rest-ms / --layer-min-ms: each step after the idle pause, timed over at least min-ms of runs (more than
# --repeat), the protocol in every layer record and in the run's infer row
"$CNN" bench --model resnet18 --stem cifar --batch 1 --repeat 2 --warmup 1 --device cpu --layers --layer-rest-ms 3 \
    --layer-min-ms 40 -o json >"$TMP/proto.json" 2>"$TMP/proto.err" \
    && "$PYTHON" -c '
import json, sys
rows = json.load(open(sys.argv[1]))
main = [r for r in rows if r["mode"] == "infer"]
steps = [r for r in rows if r["mode"] == "layer"]
assert len(main) == 1 and (main[0]["layer_rest_ms"], main[0]["layer_min_ms"]) == (3, 40), main
assert len(steps) == 19 and all((s["layer_rest_ms"], s["layer_min_ms"]) == (3, 40) for s in steps)
# runs enough to fill 40 ms by the 3-run estimate of the step, never fewer than --repeat: the rule, exactly,
# whatever the load of the machine made the estimate (a timing compared with a timing fails on a busy machine)
want = lambda e: 20000 if e <= 0 or 40 / e + 1 > 20000 else max(2, int(40 / e + 1))
assert all(s["layer_est_ms"] > 0 and s["repeat"] == want(s["layer_est_ms"]) for s in steps), \
    [(s["name"], s["repeat"], s["layer_est_ms"]) for s in steps]
' "$TMP/proto.json" 2>"$TMP/proto.py.err" && pass layers.protocol_options \
    || fail layers.protocol_options "$(tail -c 400 "$TMP/proto.err") $(tail -c 600 "$TMP/proto.py.err")"
expect layers.protocol_range 2 'layer-min-ms' -- "$CNN" bench --model resnet18 --layers --layer-min-ms -1 --device cpu

# ---- (b) bench/report.py on the fixture --------------------------------------------------------------------
"$PYTHON" "$ROOT/bench/report.py" "$FIXTURE" --out-md "$TMP/report/report.md" --svg-dir "$TMP/report/plots" \
    --title "fixture" >"$TMP/report.out" 2>&1 && pass report.runs || fail report.runs "$(tail -c 600 "$TMP/report.out")"
pycheck report.checks "$FIXTURE" "$TMP/report/report.md" "$TMP/report/plots" <<'EOF'
import json, os, re, statistics, sys
import xml.etree.ElementTree as ET

def verdict(ok, name, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}|{name}|{str(detail)[:300]}")

recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
md = open(sys.argv[2]).read()
lines = md.splitlines()
# the throughput table: every ok cnn infer/train record beside every ok rival of the same model, input, batch,
# mode and dtype, with speed-up = rival ms / ours
ok = [r for r in recs if r["ok"]]
# (a per-layer protocol's own run repeats a whole-forward row: the report keeps it out of this table)
ours = [r for r in ok if r["impl"] == "cnn" and r["mode"] in ("infer", "train") and r.get("cache") != "cold"
        and not r.get("layer_min_ms")]
verdict(not any(l.startswith("| resnet50 | 224x224 | 64 |") and "99.000" in l for l in lines),
        "report.protocol_run_not_a_throughput_row")
pairs = [(o, v) for o in ours for v in ok if v["impl"] != "cnn" and v["mode"] == o["mode"]
         and not v["impl"].startswith("check-")
         and (v["model"], v["input"], v["batch"], v["dtype"]) == (o["model"], o["input"], o["batch"], o["dtype"])]
verdict(len(pairs) >= 10 and any(o["mode"] == "train" for o, _ in pairs), "report.fixture_pairs", f"{len(pairs)} pairs")
head = next((l for l in lines if l.startswith("| model |") and "speed-up" in l), "")
verdict(head != "", "report.ratio_column", head)
missing = []
for o, v in pairs:
    want = f'| {o["model"]} | {o["input"]} | {o["batch"]} | {o["mode"]} | {o["dtype"]} | {o["ms_median"]:.3f} |'
    ratio = f'**{v["ms_median"] / o["ms_median"]:.2f}x**'
    tail = re.compile(re.escape(f"| {ratio}") + r"( [†‡])* \|$")  # a ratio may carry the report's marks
    if not any(l.startswith(want) and f'| {v["impl"]} |' in l and tail.search(l.rstrip()) for l in lines):
        missing.append(f'{o["model"]} b{o["batch"]} {o["dtype"]} {o["mode"]} vs {v["impl"]}: {ratio}')
verdict(not missing, "report.ratio_values", "; ".join(missing) or f"{len(pairs)} ratios")
verdict("out of memory" in md and "pytorch-compile" in md, "report.failed_listed")
# side sections: % of the measured peak, the cold-cache startup row, the independent check of a PyTorch row
r64 = next(o for o in ours if o["model"] == "resnet50" and o["batch"] == 64 and o["dtype"] == "bf16" and o["mode"] == "infer")
want_pct = f'{r64["tflops"]:.1f} ({100 * r64["tflops"] / 785.4:.0f}%)'
verdict(any(l.startswith("| resnet50 | 224x224 | 64 | infer | bf16 |") and want_pct in l for l in lines),
        "report.percent_of_peak", want_pct)
verdict(any(l.startswith("| resnet50 | 64 | bf16 | 6.25 | 2.00 |") for l in lines), "report.cold_start_row")
verdict(any(l.startswith("| resnet50 | 64 | bf16 | pytorch-eager-cl | 17.500 | 17.000 | 1.029 | yes | 25.0 / 24.1 |")
            for l in lines), "report.fresh_process_row")
# every rival row's own second timer (wall_ms): its ratio, the count that agree, and the mark on a row that does not
verdict("| resnet50 | 64 | infer | bf16 | pytorch-eager-cl | 17.500 | 17.200 | 1.017 | yes | 25.0 |" in lines
        and "| resnet50 | 1 | infer | bf16 | pytorch-graph | 0.880 | 0.870 | 1.011 | yes | 31.5 |" in lines
        and "| resnet50 | 1 | infer | bf16 | pytorch-eager-cl | 2.310 | 2.900 | 0.797 | **no** | 40.2 |" in lines
        and "2 of 3 rows within 10%." in lines, "report.timer_check_rows")
b1 = [l for l in lines if l.startswith("| resnet50 | 224x224 | 1 | infer | bf16 |")]
verdict(any("| pytorch-eager-cl |" in l and "‡" in l for l in b1) and not any("| pytorch-graph |" in l and "‡" in l for l in b1)
        and any(l.startswith("‡ ") for l in lines), "report.timer_disagreement_marked", b1)
# per layer: our conv steps per distinct shape (median) against pytorch-cudnn's conv rows of the same shape
# (the default protocol: records of a --layer-min-ms run are their own table, checked below)
proto = lambda r: bool(r.get("layer_rest_ms") or r.get("layer_min_ms"))
mine = {}
for r in ok:
    if r["mode"] == "layer" and r["kind"] == "conv" and not proto(r):
        mine.setdefault((r["model"], r["batch"], r["dtype"], r["layer"]), []).append(r["ms_median"])
cud = {}  # the fastest pytorch-cudnn row of each shape (the suite times cuDNN in two processes)
for r in ok:
    if r["impl"] == "pytorch-cudnn" and r["mode"] == "conv" and not proto(r):
        k = (r["model"], r["batch"], r["dtype"], r["layer"])
        if k not in cud or r["ms_median"] < cud[k]["ms_median"]:
            cud[k] = r
verdict(sum(1 for r in ok if r["impl"] == "pytorch-cudnn") > len(cud), "report.fixture_has_repeated_cudnn_rows")
bad, n = [], 0
for c in cud.values():
    ms = mine.get((c["model"], c["batch"], c["dtype"], c["layer"]))
    if not ms:
        continue
    n += 1
    row = f'| {c["layer"]} | {len(ms)} | {statistics.median(ms):.4f} | {c["ms_median"]:.4f} | **{c["ms_median"] / statistics.median(ms):.2f}x** |'
    if row not in lines:
        bad.append(row)
verdict(n >= 3 and not bad, "report.per_layer_ratios", "; ".join(bad) or f"{n} shapes matched")
# a fused pair "A + B" against the sum of cuDNN's two convs alone (the fastest row of each)
bad, n = [], 0
for (model, batch, dtype, layer), ms in mine.items():
    parts = layer.split(" + ")
    if len(parts) != 2 or any((model, batch, dtype, p) not in cud for p in parts):
        continue
    n += 1
    rival = sum(cud[(model, batch, dtype, p)]["ms_median"] for p in parts)
    row = f'| {layer} | {len(ms)} | {statistics.median(ms):.4f} | {rival:.4f} | **{rival / statistics.median(ms):.2f}x** |'
    if row not in lines:
        bad.append(row)
verdict(n >= 1 and not bad, "report.per_layer_pair_ratio", "; ".join(bad) or f"{n} pairs matched")
# a per-layer protocol (--layer-min-ms 300 on both sides): its own table, heading, count line and whole-forward line
i = next((k for k, l in enumerate(lines) if l.startswith("### resnet50, batch 64, bf16, each shape timed over at least 300 ms")), -1)
sec = lines[i:i + 12] if i >= 0 else []
verdict("| 64->64 56x56 1x1/1 p0 | 1 | 0.0500 | 0.0550 | **1.10x** |" in sec
        and any(l.startswith("Single conv shapes") and l.endswith(": 1 of 1.") for l in sec)
        and any("the whole forward: 99.000 ms" in l for l in sec), "report.per_layer_protocol_table", sec)
d = next((k for k, l in enumerate(lines) if l == "### resnet50, batch 64, bf16"), -1)
e = next((k for k in range(d + 1, len(lines)) if lines[k].startswith("#")), len(lines))
row = [l for l in lines[d:e] if l.startswith("| 64->64 56x56 1x1/1 p0 |")]
verdict(d >= 0 and len(row) == 1 and "| 0.0600 |" in row[0], "report.per_layer_protocols_apart", row)
# plots: every SVG the report links exists, parses as XML and has both axis labels
svg_dir = sys.argv[3]
linked = re.findall(r"!\[[^\]]*\]\(([^)]+\.svg)\)", md)
files = sorted(f for f in os.listdir(svg_dir) if f.endswith(".svg"))
verdict(len(files) >= 1 and sorted(os.path.basename(l) for l in linked) == files, "report.svgs_linked",
        f"{len(files)} SVGs")
NS = "{http://www.w3.org/2000/svg}"
for f in files:
    try:
        root = ET.parse(os.path.join(svg_dir, f)).getroot()
    except ET.ParseError as e:
        verdict(False, f"report.svg.{f}", e)
        continue
    texts = {t.get("class"): (t.text or "").strip() for t in root.iter(NS + "text") if t.get("class")}
    verdict(root.tag == NS + "svg" and texts.get("xlabel") and texts.get("ylabel"), f"report.svg.{f}",
            f'x: {texts.get("xlabel")!r}, y: {texts.get("ylabel")!r}')
lay = os.path.join(svg_dir, "layers_resnet50_b64_bf16.svg")
if os.path.exists(lay):
    root = ET.parse(lay).getroot()
    texts = [(t.text or "") for t in root.iter(NS + "text")]
    ylabel = next((t.text for t in root.iter(NS + "text") if t.get("class") == "ylabel"), "")
    bars = [r for r in root.iter(NS + "rect") if r.find(NS + "title") is not None]
    verdict("ms" in ylabel and "cnn" in texts and "pytorch-cudnn" in texts and len(bars) == 11
            and any("cuDNN" in t for t in texts), "report.layers_plot", f"{len(bars)} bars, y: {ylabel!r}")
else:
    verdict(False, "report.layers_plot", "no layers_resnet50_b64_bf16.svg")
EOF

# ---- (c) cnn tune: one line per batch, exit 0 (nothing to tune on the CPU, said on stderr); bad --batch -> 2
"$CNN" tune --model resnet18 --stem cifar --batch 1,2 --device cpu >"$TMP/tune.out" 2>"$TMP/tune.err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c 'layer shapes tuned' "$TMP/tune.out")" -eq 2 ] && grep -q 'no kernels to compile' "$TMP/tune.err"; then
    pass tune.cpu "$(head -1 "$TMP/tune.out")"
else
    fail tune.cpu "exit $rc: $(cat "$TMP/tune.out" "$TMP/tune.err" | head -c 400)"
fi
"$CNN" tune --model resnet18 --stem cifar --batch 2 --mode train --device cpu >"$TMP/tune3.out" 2>"$TMP/tune3.err" \
    && grep -q 'batch 2 fp32 train: 0 layer shapes tuned' "$TMP/tune3.out" && pass tune.train_cpu "$(cat "$TMP/tune3.out")" \
    || fail tune.train_cpu "$(cat "$TMP/tune3.out" "$TMP/tune3.err" | head -c 400)"
"$CNN" tune --model resnet18 --batch 1,x --device cpu >/dev/null 2>"$TMP/tune2.err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/tune2.err")" -eq 1 ] && pass tune.bad_batch "$(cat "$TMP/tune2.err")" \
    || fail tune.bad_batch "exit $rc: $(head -c 300 "$TMP/tune2.err")"

# ---- (d) bench/pytorch_bench.py --jobs (bench/run.sh's PyTorch side, one process): every line's records, in
# order, in the documented schema with the host probe; a bad line fails before anything runs
if "$PYTHON" -c 'import torch, torchvision' 2>/dev/null; then
    printf '%s\n' '# two groups, run in order' '--model resnet18 --stem cifar --batch 1,2 --impl cpu' '' \
        '--model vgg11 --input-size 32 --batch 1 --impl cpu --repeat 1' |
        "$PYTHON" "$ROOT/bench/pytorch_bench.py" --jobs - --repeat 2 --warmup 1 >"$TMP/torch.jsonl" 2>"$TMP/torch.err" \
        && pass torchbench.jobs_runs || fail torchbench.jobs_runs "$(tail -c 400 "$TMP/torch.err")"
    pycheck torchbench.records "$ROOT/docs/BENCH.md" "$TMP/torch.jsonl" <<'PYEOF'
import json, math, sys
def verdict(ok, name, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}|{name}|{str(detail)[:300]}")
rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
got = [(r["model"], r["batch"], r["repeat"]) for r in rows]
verdict(got == [("resnet18-cifar", 1, 2), ("resnet18-cifar", 2, 2), ("vgg11", 1, 1)], "torchbench.order_and_options", got)
need = ("impl", "model", "input", "batch", "dtype", "mode", "device", "backend", "ok", "ms_median", "ms_min", "ms_max",
        "images_per_s", "gflop_per_batch", "tflops", "setup_s", "repeat", "warmup", "version", "date", "error",
        "host_probe_ms")
docs = open(sys.argv[1]).read()
bad = [f"{r['model']} b{r['batch']}: {f}" for r in rows for f in need if f not in r or f"`{f}`" not in docs]
verdict(not bad, "torchbench.fields", "; ".join(bad) or f"{len(need)} fields in {len(rows)} records")
verdict(all(r["ok"] and r["impl"] == "pytorch-cpu" and r["ms_median"] > 0 and math.isfinite(r["host_probe_ms"])
            and r["host_probe_ms"] > 0 for r in rows), "torchbench.values", [(r["ms_median"], r["host_probe_ms"]) for r in rows])
PYEOF
    printf '%s\n' '--model resnet18 --stem cifar --batch 1 --impl cpu' '--model resnet18 --bacth 2' |
        "$PYTHON" "$ROOT/bench/pytorch_bench.py" --jobs - >"$TMP/torch2.jsonl" 2>"$TMP/torch2.err"
    rc=$?
    [ $rc -eq 2 ] && [ ! -s "$TMP/torch2.jsonl" ] && grep -q 'unrecognized arguments: --bacth' "$TMP/torch2.err" \
        && pass torchbench.bad_job_line "exit 2, nothing run" || fail torchbench.bad_job_line "exit $rc: $(tail -c 300 "$TMP/torch2.err")"
else
    skip torchbench.jobs "PyTorch + torchvision not importable by $PYTHON"
fi
finish
