#!/usr/bin/env python3
"""train_passes.py — training, pass by pass, ours beside cuDNN's, and the whole step beside PyTorch eager's, in one
call on one GPU.

  1. `cnn bench --mode train --layers -o json`: our training step (median of --repeat steps) and every distinct
     convolution's fprop, dgrad and wgrad, each timed alone (apps/bench_passes.c);
  2. the same shapes through cuDNN, each pass alone (F.conv2d; aten.convolution_backward with only the input's or
     only the weight's gradient asked), NHWC, cudnn.benchmark, the same dtype, timed the same way (back to back,
     an event after each run, median);
  3. PyTorch's eager training step (bf16/fp16 autocast, channels_last, SGD momentum, as bench/pytorch_bench.py's
     eager-cl rows), median step time and peak memory; with --compile also torch.compile's (default mode, the
     same step: bench/pytorch_bench.py's compile rows, their code).
Prints a markdown report (per shape: our three times, cuDNN's, and cuDNN's time over ours: above 1 we are faster);
--json writes every number.

  train_passes.py --model resnet50 --batch 256 [--dtype bf16] [--cnn build/cnn] [--repeat 20] [--warmup 5] [--compile]
"""
import argparse, importlib, json, statistics, subprocess, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import pytorch_bench as pb  # noqa: E402


def ours(args):
    cmd = [args.cnn, "bench", "--model", args.model, "--batch", str(args.batch), "--mode", "train", "--layers",
           "--dtype", args.dtype, "--device", "cuda", "--repeat", str(args.repeat), "--warmup", str(args.warmup),
           "-o", "json"] + (["--stem", args.stem] if args.stem else []) + (["--tune", args.tune] if args.tune else [])
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    rows = json.loads(out.stdout)
    step = next(r for r in rows if r["mode"] == "train")
    if not step["ok"]:
        sys.exit(f"cnn bench failed: {step['error']}")
    return step, [r for r in rows if r["mode"] == "conv_pass"], time.perf_counter() - t0


def cudnn_passes(p, dt, args):
    n, c, h, w, k, r, s, st, pad = args.batch, p["c"], p["h"], p["w"], p["k"], p["r"], p["s"], p["stride"], p["pad"]
    cl = torch.channels_last
    x = torch.randn(n, c, h, w, device="cuda", dtype=dt).to(memory_format=cl)
    wt = torch.randn(k, c, r, s, device="cuda", dtype=dt).to(memory_format=cl)
    y = F.conv2d(x, wt, stride=st, padding=pad)
    dy = torch.randn_like(y).to(memory_format=cl)
    bw = torch.ops.aten.convolution_backward

    def fprop():
        return F.conv2d(x, wt, stride=st, padding=pad)

    def dgrad():
        return bw(dy, x, wt, None, [st, st], [pad, pad], [1, 1], False, [0, 0], 1, [True, False, False])

    def wgrad():
        return bw(dy, x, wt, None, [st, st], [pad, pad], [1, 1], False, [0, 0], 1, [False, True, False])

    with torch.no_grad():
        return [statistics.median(pb.time_cuda(f, args.warmup, args.repeat)) for f in (fprop, dgrad, wgrad)]


def eager_step(args, dt):
    torch.backends.cudnn.benchmark = True
    model = pb.build(args.model, 1000 if args.stem != "cifar" else 10, args.stem).cuda().to(memory_format=torch.channels_last)
    hw = 32 if args.stem == "cifar" else 224
    x = torch.randn(args.batch, 3, hw, hw, device="cuda").to(memory_format=torch.channels_last)
    yl = torch.randint(0, 10 if args.stem == "cifar" else 1000, (args.batch,), device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=5e-4)
    model.train()

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=dt):
            loss = F.cross_entropy(model(x), yl)
        loss.backward()
        opt.step()

    torch.cuda.reset_peak_memory_stats()
    ms = statistics.median(pb.time_cuda(step, max(3, args.warmup), args.repeat))
    return ms, torch.cuda.max_memory_allocated() / 2**20


def compile_step(args, dt):
    """torch.compile's training step (default mode) through pytorch_bench.py's own compile rows: (median ms, peak MiB,
    setup s: compilation included)"""
    hw = 32 if args.stem == "cifar" else 224
    classes = 10 if args.stem == "cifar" else 1000
    pargs = argparse.Namespace(h=hw, w=hw, mode="train", warmup=args.warmup, repeat=args.repeat)
    torch.cuda.reset_peak_memory_stats()
    ms, setup, _ = pb.run_gpu(pargs, pb.build(args.model, classes, args.stem), "compile", args.batch, dt, classes)
    peak = torch.cuda.max_memory_allocated() / 2**20
    importlib.import_module("torch._dynamo").reset()
    return statistics.median(ms), peak, setup


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--stem", default="")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--cnn", default="build/cnn")
    ap.add_argument("--tune", default="")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("--compile", action="store_true", help="also torch.compile's training step")
    args = ap.parse_args()
    dt = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    step, passes, ours_s = ours(args)
    theirs = [cudnn_passes(p, dt, args) for p in passes]
    for p, t in zip(passes, theirs):
        if p["dgrad_ms"] == 0:  # the first layer: a training step computes no gradient for the images
            t[1] = 0.0
    eager_ms, eager_mib = eager_step(args, dt)
    comp = compile_step(args, dt) if args.compile else None
    name = args.model + ("-cifar" if args.stem == "cifar" else "")
    print(f"## {name} {args.dtype} batch {args.batch}: training, pass by pass "
          f"({torch.cuda.get_device_name()}, cnn {step['commit']}, torch {torch.__version__})\n")
    print("| conv | count | fprop ms | dgrad ms | wgrad ms | cuDNN fprop | cuDNN dgrad | cuDNN wgrad | "
          "fprop x | dgrad x | wgrad x |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    sums = [[0.0] * 3, [0.0] * 3]
    slow = []
    for p, t in zip(passes, theirs):
        o = [p["fprop_ms"], p["dgrad_ms"], p["wgrad_ms"]]
        x = [t[i] / o[i] if o[i] > 0 else None for i in range(3)]
        for i in range(3):
            sums[0][i] += p["count"] * o[i]
            sums[1][i] += p["count"] * t[i]
            if x[i] is not None and x[i] < 0.5:
                slow.append(f"{p['layer']} {('fprop', 'dgrad', 'wgrad')[i]} {x[i]:.2f}x")
        cell = lambda v, f: "-" if v is None or v == 0 else format(v, f)
        print(f"| {p['layer']} | {p['count']} | {o[0]:.4f} | {cell(o[1], '.4f')} | {o[2]:.4f} | {t[0]:.4f} | "
              f"{cell(t[1], '.4f')} | {t[2]:.4f} | {x[0]:.2f} | {cell(x[1], '.2f')} | {x[2]:.2f} |")
    print(f"| **sum** | | {sums[0][0]:.3f} | {sums[0][1]:.3f} | {sums[0][2]:.3f} | {sums[1][0]:.3f} | {sums[1][1]:.3f} | "
          f"{sums[1][2]:.3f} | {sums[1][0] / sums[0][0]:.2f} | {sums[1][1] / sums[0][1]:.2f} | "
          f"{sums[1][2] / sums[0][2]:.2f} |\n")
    bwd_ours, bwd_cudnn = sums[0][1] + sums[0][2], sums[1][1] + sums[1][2]
    print(f"- backward passes (dgrad + wgrad): ours {bwd_ours:.3f} ms, cuDNN {bwd_cudnn:.3f} ms "
          f"({bwd_cudnn / bwd_ours:.2f}x); passes below 50% of cuDNN's speed: {len(slow)}"
          + (f" ({'; '.join(slow)})" if slow else ""))
    print(f"- training step: ours {step['ms_median']:.3f} ms (peak {step['peak_mib']:.0f} MiB), PyTorch eager "
          f"{eager_ms:.3f} ms (peak {eager_mib:.0f} MiB): {eager_ms / step['ms_median']:.2f}x; of our step, the "
          f"conv passes {sum(sums[0]):.3f} ms, the rest {step['ms_median'] - sum(sums[0]):.3f} ms")
    if comp:
        print(f"- torch.compile's step (default mode, the same recipe): {comp[0]:.3f} ms (peak {comp[1]:.0f} MiB, "
              f"compiled in {comp[2]:.0f} s): ours {comp[0] / step['ms_median']:.2f}x")
    print(f"- our side took {ours_s:.0f} s (compilation and tuning included)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ours_step": step, "ours_passes": passes, "cudnn_passes_ms": theirs,
                       "eager_step_ms": eager_ms, "eager_peak_mib": eager_mib, "torch": torch.__version__,
                       "compile_step_ms": comp[0] if comp else None, "compile_peak_mib": comp[1] if comp else None}, f)


if __name__ == "__main__":
    main()
