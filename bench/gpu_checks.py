#!/usr/bin/env python3
"""gpu_checks.py — two measurements that keep the benchmark report honest, as records in the docs/BENCH.md schema.

  peak   the GPU's measured matrix peak: an 8192^3 matrix product through torch.matmul (cuBLAS), bf16 and true fp32
         (TF32 off), CUDA events, median of 20 after warm-up, random data (never zeros). Records: impl
         "pytorch-matmul", mode "peak", tflops. The report divides achieved TFLOP/s by these.
  check  an independent re-measurement of PyTorch rows of a results file: the same model, batch and precision,
         rebuilt here and timed by torch.utils.benchmark.Timer.blocked_autorange (a wall clock around blocks of
         back-to-back calls, synchronised, median per call over the blocks) instead of pytorch_bench.py's CUDA
         events around each call. Records: impl "check-<impl>", mode as checked, "ref_ms" (the row checked),
         "ratio" = ref_ms / ms_median, "timer"; within 10% when 0.9 <= ratio <= 1.1.
         Not triton's do_bench: it clears the L2 before every call, which is another configuration (the rows run
         with a warm L2). Known disagreement: on launch-bound rows (eager at small batch) pytorch_bench.py's
         synchronisation after every call costs PyTorch up to 40% against back-to-back calls, so those rows fail
         the 10% check (docs/perf-log.md, step 12).

usage: gpu_checks.py peak
       gpu_checks.py check RESULTS.json
"""
import datetime, json, statistics, sys

import torch

from pytorch_bench import build  # the same model construction as the rows being checked


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


def check(path):
    import torch.utils.benchmark as tb
    recs = json.load(open(path))
    todo = [r for r in recs if r.get("ok") and r.get("impl") in ("pytorch-eager-cl", "pytorch-eager-fp32")
            and r.get("mode") == "infer" and r.get("batch", 0) >= 16]
    dev = torch.cuda.get_device_name()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for r in todo[:6]:
        arch = r["model"].replace("-cifar", "")
        cifar = r["model"].endswith("-cifar")
        h, w = (int(v) for v in r["input"].split("x"))
        m = build(arch, 10 if cifar else 1000, "cifar" if cifar else "imagenet")
        x = torch.randn(r["batch"], 3, h, w, device="cuda")
        if r["impl"] == "pytorch-eager-cl":
            dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[r["dtype"]]
            m = m.cuda().to(dt).to(memory_format=torch.channels_last).eval()
            x = x.to(dt).contiguous(memory_format=torch.channels_last)
        else:
            m = m.cuda().eval()
        with torch.no_grad():
            for _ in range(20):  # warm-up: cuDNN's algorithm search, allocator
                m(x)
            torch.cuda.synchronize()
            meas = tb.Timer(stmt="m(x)", globals={"m": m, "x": x}).blocked_autorange(min_run_time=3.0)
        ms = meas.median * 1e3
        print(json.dumps({"impl": "check-" + r["impl"][len("pytorch-"):], "model": r["model"], "input": r["input"],
                          "batch": r["batch"], "dtype": r["dtype"], "mode": r["mode"], "device": dev,
                          "backend": "cuda", "ok": True, "ms_median": ms, "ref_ms": r["ms_median"],
                          "ratio": r["ms_median"] / ms, "timer": "torch.utils.benchmark blocked_autorange (median)",
                          "blocks": len(meas.times),
                          "version": torch.__version__, "date": now(), "error": ""}), flush=True)
        del m, x
        torch.cuda.empty_cache()


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "peak":
        peak()
    elif len(sys.argv) >= 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    else:
        sys.exit(__doc__)
