#!/usr/bin/env python3
"""cudnn_kernels.py — which kernels cuDNN runs for each distinct conv shape of a model (the rival of issue 5's
per-layer comparison), read with torch.profiler, so our kernel designs can be set against the ones that win.

For every distinct Conv2d of the model (pytorch_bench.conv_shapes, as --impl cudnn finds them), F.conv2d on
random NHWC data with cudnn.benchmark on (TF32 off for fp32), warmed up, then 20 profiled calls. Prints one JSON
line per shape: {"layer", "count", "kernels": [{"name", "calls", "us_per_call"}...]} with every device kernel the
profiler saw, names cut to 200 characters (cuDNN's names carry the tile shape, the warpgroup layout and whether
it is an xmma/TMA kernel).

usage: cudnn_kernels.py [--ncu] [MODEL [BATCH [DTYPE]]]     (default resnet50 256 bf16)

--ncu: no torch.profiler; after the warm-up, one call per shape between cudaProfilerStart and cudaProfilerStop,
for `ncu --profile-from-start off` to measure cuDNN's kernels with the counters it reads on ours (the layer
order is printed on stderr, one line per shape, so the report's launches can be matched to shapes).
"""
import json, os, sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_bench import build, conv_shapes  # noqa: E402  (the same models and shapes as the benchmark rows)


def main():
    args = [a for a in sys.argv[1:] if a != "--ncu"]
    ncu = len(args) != len(sys.argv) - 1
    model, batch, dtype = (args + ["resnet50", "256", "bf16"][len(args):])[:3]
    batch = int(batch)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    from torch.profiler import ProfilerActivity, profile
    for (c, k, h, w, r, s, p), count in conv_shapes(build(model, 1000, "imagenet"), 224, 224).items():
        x = torch.randn(batch, c, h, w, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
        wt = torch.randn(k, c, r, r, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
        with torch.no_grad():
            for _ in range(10):
                F.conv2d(x, wt, stride=s, padding=p)
            torch.cuda.synchronize()
            if ncu:
                print(f"ncu: {c}->{k} {h}x{w} {r}x{r}/{s} p{p}", file=sys.stderr, flush=True)
                torch.cuda.cudart().cudaProfilerStart()
                F.conv2d(x, wt, stride=s, padding=p)
                torch.cuda.synchronize()
                torch.cuda.cudart().cudaProfilerStop()
                del x, wt
                torch.cuda.empty_cache()
                continue
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    F.conv2d(x, wt, stride=s, padding=p)
                torch.cuda.synchronize()
        kern = {}
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                e = kern.setdefault(ev.name[:200], [0, 0.0])
                e[0] += 1
                e[1] += ev.time_range.elapsed_us()  # a device event's own span
        ks = [{"name": n, "calls": v[0], "us_per_call": v[1] / 20} for n, v in sorted(kern.items(), key=lambda t: -t[1][1])]
        print(json.dumps({"layer": f"{c}->{k} {h}x{w} {r}x{r}/{s} p{p}", "count": count, "batch": batch,
                          "dtype": dtype, "kernels": ks}), flush=True)
        del x, wt
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
