#!/usr/bin/env python3
"""pytorch_cpu.py — the PyTorch CPU baseline for the foundation issue, in float32:
  * ResNet-18 inference, batch 32 at 224x224 (eval mode, torch.no_grad);
  * CIFAR-stem ResNet-18 training step, batch 64 at 32x32 (SGD momentum 0.9, weight decay 5e-4, cross-entropy;
    forward + backward + optimizer step).
torch.set_num_threads(--threads), --warmup untimed runs, then the median of --repeat runs timed with
time.perf_counter. One JSON object per line on stdout:
  {"impl":"pytorch-cpu","model":...,"mode":"infer"|"train","batch":..,"input":"224x224","ms_median":..,
   "ms_min":..,"images_per_s":..,"threads":..,"torch":version,"repeat":..}
Each measurement stops early after --budget seconds (default 50), so a run stays under a minute.

  python3 bench/pytorch_cpu.py --threads 2
"""
import argparse
import json
import platform
import statistics
import sys
import time

import torch
import torch.nn as nn
import torchvision


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build(stem, num_classes):
    torch.manual_seed(0)
    m = torchvision.models.resnet18(weights=None, num_classes=num_classes)
    if stem == "cifar":
        m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        m.maxpool = nn.Identity()
    return m


def measure(fn, warmup, repeat, budget):
    for _ in range(warmup):
        fn()
    times, t_start = [], time.perf_counter()
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - t_start > budget and len(times) >= 3:
            break
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--budget", type=float, default=50.0, help="seconds of timed runs per measurement, at most")
    ap.add_argument("--only", choices=["infer", "train"], default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    base = {"impl": "pytorch-cpu", "threads": a.threads, "torch": torch.__version__, "dtype": "fp32",
            "cpu": cpu_name()}

    if a.only in (None, "infer"):
        m = build("imagenet", 1000).eval()
        x = torch.randn(32, 3, 224, 224, generator=g)

        def infer():
            with torch.no_grad():
                m(x)
        ts = measure(infer, a.warmup, a.repeat, a.budget)
        med = statistics.median(ts)
        print(json.dumps(dict(base, model="resnet18", mode="infer", batch=32, input="224x224",
                              ms_median=round(med * 1e3, 2), ms_min=round(min(ts) * 1e3, 2),
                              images_per_s=round(32 / med, 1), repeat=len(ts))), flush=True)

    if a.only in (None, "train"):
        m = build("cifar", 10).train()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        loss_fn = nn.CrossEntropyLoss()
        x = torch.randn(64, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (64,), generator=g)

        def step():
            opt.zero_grad(set_to_none=True)
            loss_fn(m(x), y).backward()
            opt.step()
        ts = measure(step, a.warmup, a.repeat, a.budget)
        med = statistics.median(ts)
        print(json.dumps(dict(base, model="resnet18-cifar", mode="train", batch=64, input="32x32",
                              ms_median=round(med * 1e3, 2), ms_min=round(min(ts) * 1e3, 2),
                              images_per_s=round(64 / med, 1), repeat=len(ts))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
