#!/usr/bin/env python3
"""gpu_checks.py — two measurements that keep the benchmark report honest, as records in the docs/BENCH.md schema.

  peak   the GPU's measured matrix peak: an 8192^3 matrix product through torch.matmul (cuBLAS), bf16 and true fp32
         (TF32 off), CUDA events, median of 20 after warm-up, random data (never zeros). Records: impl
         "pytorch-matmul", mode "peak", tflops. The report divides achieved TFLOP/s by these.
  check  a re-measurement of PyTorch rows of a results file in a fresh process, later: the same model, batch and
         precision, rebuilt here and timed by torch.utils.benchmark.Timer.blocked_autorange (a wall clock around
         blocks of back-to-back calls, synchronised at block ends, median per call over the blocks) instead of
         pytorch_bench.py's CUDA events between back-to-back calls. Rows: inference, eager fp32 / tf32 /
         channels_last and CUDA graph, every batch, at most 10 taken in turn from each kind. Records: impl
         "check-<impl>", mode as checked, "ref_ms" (the row checked), "ratio" = ref_ms / ms_median, "timer",
         "host_probe_ms" (pytorch_bench.host_probe_ms just before timing) and "ref_host_probe_ms" (the row's);
         within 10% when 0.9 <= ratio <= 1.1.
         This is the reproducibility check; the timer check of every row is pytorch_bench.py's own `wall_ms`
         (an independent timer interleaved with the events in the same process). Host-bound rows (eager at
         batch 1-16) follow the host CPU's speed, which drifted up to 2x on the H100 machine within a process
         and between processes (docs/perf-log.md, steps 15-17 and 26): the host probes show it. Not triton's
         do_bench: it clears the L2 before every call, another configuration (the rows run with a warm L2).

  time   one configuration alone, no reference (by hand, for repeatability runs; bench/hostvar.py does more).

usage: gpu_checks.py peak
       gpu_checks.py check RESULTS.json
       gpu_checks.py time IMPL MODEL BATCH DTYPE [SIZE]     (IMPL: eager-fp32, eager-tf32, eager-cl, graph)
"""
import datetime, json, statistics, sys

import torch

from pytorch_bench import build, host_probe_ms  # the same model construction as the rows being checked


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def peak():
    dev = torch.cuda.get_device_name()
    n = 8192
    for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        torch.backends.cuda.matmul.allow_tf32 = False
        a = torch.randn(n, n, device="cuda", dtype=dt)
        b = torch.randn(n, n, device="cuda", dtype=dt)
        for _ in range(5):
            a @ b
        ms = []
        for _ in range(20):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            a @ b
            e1.record()
            e1.synchronize()
            ms.append(e0.elapsed_time(e1))
        med = statistics.median(ms)
        print(json.dumps({"impl": "pytorch-matmul", "model": "matmul-8192", "input": "8192x8192", "batch": 1,
                          "dtype": name, "mode": "peak", "device": dev, "backend": "cuda", "ok": True,
                          "ms_median": med, "ms_min": min(ms), "ms_max": max(ms), "tflops": 2 * n ** 3 / med / 1e9,
                          "repeat": 20, "warmup": 5, "version": torch.__version__, "date": now(), "error": ""}),
              flush=True)
        del a, b
        torch.cuda.empty_cache()


def measure(r):
    """ms per call (median over blocks) and block count of one PyTorch row r, timed by torch.utils.benchmark."""
    import torch.utils.benchmark as tb
    impl = r["impl"][len("pytorch-"):]
    arch = r["model"].replace("-cifar", "")
    cifar = r["model"].endswith("-cifar")
    h, w = (int(v) for v in r["input"].split("x"))
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = impl == "eager-tf32"
    torch.manual_seed(0)
    m = build(arch, 10 if cifar else 1000, "cifar" if cifar else "imagenet")
    x = torch.randn(r["batch"], 3, h, w, device="cuda")
    if impl in ("eager-cl", "graph"):
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[r["dtype"]]
        m = m.cuda().to(dt).to(memory_format=torch.channels_last).eval()
        x = x.to(dt).contiguous(memory_format=torch.channels_last)
    else:
        m = m.cuda().eval()
    with torch.no_grad():
        for _ in range(10):  # warm-up: cuDNN's algorithm search, allocator
            m(x)
        torch.cuda.synchronize()
        if impl == "graph":  # captured as pytorch_bench.py captures it: a side-stream run, then the capture
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                m(x)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                m(x)
            stmt, glb = "g.replay()", {"g": g}
        else:
            stmt, glb = "m(x)", {"m": m, "x": x}
        probe = host_probe_ms()
        meas = tb.Timer(stmt=stmt, globals=glb, num_threads=torch.get_num_threads()).blocked_autorange(min_run_time=0.6)
    del m, x
    torch.cuda.empty_cache()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    return meas.median * 1e3, len(meas.times), probe


def record(r, ms, blocks, probe, ref):
    rec = {"impl": "check-" + r["impl"][len("pytorch-"):], "model": r["model"], "input": r["input"],
           "batch": r["batch"], "dtype": r["dtype"], "mode": r["mode"], "device": torch.cuda.get_device_name(),
           "backend": "cuda", "ok": True, "ms_median": ms,
           "timer": "torch.utils.benchmark blocked_autorange (median)", "blocks": blocks, "host_probe_ms": probe,
           "version": torch.__version__, "date": now(), "error": ""}
    if ref is not None:
        rec["ref_ms"], rec["ratio"] = ref["ms_median"], ref["ms_median"] / ms
        if "host_probe_ms" in ref:
            rec["ref_host_probe_ms"] = ref["host_probe_ms"]
    return rec


def check(path):
    recs = json.load(open(path))
    kinds = ("pytorch-eager-fp32", "pytorch-eager-tf32", "pytorch-eager-cl", "pytorch-graph")
    per = [[r for r in recs if r.get("ok") and r.get("impl") == k and r.get("mode") == "infer"] for k in kinds]
    todo = []
    while len(todo) < 10 and any(per):  # in turn from each kind, so every kind is checked
        for lst in per:
            if lst and len(todo) < 10:
                todo.append(lst.pop(0))
    for r in todo:
        ms, blocks, probe = measure(r)
        print(json.dumps(record(r, ms, blocks, probe, r)), flush=True)


def time_one(impl, model, batch, dtype, size):
    """one row, no reference (repeatability runs by hand)"""
    r = {"impl": "pytorch-" + impl, "model": model, "input": "%dx%d" % (size, size), "batch": batch,
         "dtype": dtype, "mode": "infer"}
    ms, blocks, probe = measure(r)
    print(json.dumps(record(r, ms, blocks, probe, None)), flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "peak":
        peak()
    elif len(sys.argv) >= 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    elif len(sys.argv) >= 6 and sys.argv[1] == "time":
        time_one(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6]) if len(sys.argv) > 6 else 224)
    else:
        sys.exit(__doc__)
