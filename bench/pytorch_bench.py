#!/usr/bin/env python3
"""pytorch_bench.py — the PyTorch side of every speed comparison, in the same JSON schema as `cnn bench -o jsonl`.

Variants (--impl, comma list):
  eager-fp32     NCHW, float32, TF32 off (true fp32)
  eager-tf32     NCHW, float32 inputs, TF32 on for convs and matmuls
  eager-cl       channels_last, the model in --dtype (bf16/fp16) for inference; autocast for training
  graph          eager-cl captured into a CUDA graph and replayed (inference and training)
  compile        torch.compile(mode="reduce-overhead") with inductor freezing (inference); default mode (training)
  compile-max    torch.compile(mode="max-autotune"): slow to compile, only when asked
  cudnn          every distinct conv shape of the model alone (F.conv2d, NHWC, cudnn.benchmark), one row per shape
  cpu            float32 on the CPU with torch.set_num_threads(--threads)
Timing: after warm-up (and compilation), --repeat runs issued back to back with a CUDA event after each, median
of the per-run gaps (training steps likewise; `cnn bench` syncs after each of its training steps, which reads
the loss); on the CPU a monotonic clock around each run. On the GPU a row shorter than 0.5 s in all gets more
runs (up to 400), and the timed runs come in 4 blocks (8 from 40 runs), each followed by as many runs timed by
torch.utils.benchmark (a host clock, CUDA synchronised at both ends): an independent timer over the same
configuration in the same stretch of time, recorded as `wall_ms`. Each row also
records `host_probe_ms`, a fixed pure-Python loop timed just before it: the host CPU's speed at the time, which
is what launch-bound rows (eager at small batch) follow.
Output: one JSON object per line on stdout (schema: docs/BENCH.md).

  pytorch_bench.py --model M --batch B[,B..] [--dtype D] [--mode M] [--impl I[,I..]] ...   one configuration group
  pytorch_bench.py --jobs FILE [--repeat N --warmup N]    one group per line of FILE ('-': stdin), each line the
                                                          options above; all in this one process (bench/run.sh)
"""
import argparse, datetime, importlib, json, math, shlex, statistics, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


def build(arch, num_classes, stem):
    m = getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)
    if stem == "cifar":
        m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        m.maxpool = nn.Identity()
    return m


def flops_per_image(model, h, w):
    """Forward FLOPs (2 per MAC) of convs and linears, counted with hooks on a 1-image run on the CPU."""
    total = [0]

    def conv_hook(mod, inp, out):
        total[0] += 2 * out.numel() * mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1]

    def lin_hook(mod, inp, out):
        total[0] += 2 * out.numel() * mod.in_features

    hooks = [m.register_forward_hook(conv_hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    hooks += [m.register_forward_hook(lin_hook) for m in model.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, h, w))
    for hk in hooks:
        hk.remove()
    return total[0]


def time_cuda(fn, warmup, repeat):
    """Per-call times of `repeat` calls issued back to back, an event after each (the device never waits for the
    host between calls, as with torch.utils.benchmark and `cnn bench`): call i's time is the gap between the
    events before and after it. Synchronising after every call instead would add the host's launch time of
    each call to eager rows that are launch-bound (docs/perf-log.md, step 12)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(repeat + 1)]
    ev[0].record()
    for i in range(repeat):
        fn()
        ev[i + 1].record()
    ev[-1].synchronize()
    return [ev[i].elapsed_time(ev[i + 1]) for i in range(repeat)]


def time_cuda_checked(fn, warmup, repeat, rounds=4):
    """time_cuda's per-run gaps over `repeat` runs, taken in `rounds` blocks; after each block as many runs timed
    by torch.utils.benchmark (Timer.timeit: a host clock read with CUDA synchronised before it, at both ends of
    the block; per run = block / runs). Both timers see the same host and GPU state, so where the host's speed
    drifts (it did, up to 2x, on the H100 machine: docs/perf-log.md step 26) they drift together and their
    agreement tests the timing itself. Returns (event ms per run, timer ms per run of each block)."""
    import torch.utils.benchmark as tb
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    # the process's own thread count (Timer would otherwise set 1 while it times); timeit(k) runs 2 untimed calls first
    timer = tb.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    per = max(1, -(-repeat // rounds))
    ev, wall, left = [], [], repeat
    while left > 0:
        k = min(per, left)
        ev += time_cuda(fn, 0, k)
        wall.append(timer.timeit(k).median * 1e3)
        left -= k
    return ev, wall


def host_probe_ms():
    """A fixed pure-Python loop (no torch), timed: the host CPU's speed right now (bench/hostvar.py)."""
    t = time.perf_counter()
    acc = 0
    for i in range(300000):
        acc += i * i % 7
    return (time.perf_counter() - t) * 1e3


def time_cpu(fn, warmup, repeat):
    for _ in range(warmup):
        fn()
    ms = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t) * 1e3)
    return ms


def row(args, impl, model_name, batch, dtype, mode, ms, gflop, setup_s, device, peak, extra=None, error=""):
    ms_sorted = sorted(ms) if ms else [float("nan")]
    med = statistics.median(ms_sorted)
    n = len(ms_sorted)
    r = {
        "impl": "pytorch-" + impl, "model": model_name, "input": f"{args.h}x{args.w}", "batch": batch, "dtype": dtype,
        "mode": mode, "device": device, "backend": "cuda" if impl != "cpu" else "cpu", "ok": not error,
        "ms_median": med, "ms_min": ms_sorted[0], "ms_p10": ms_sorted[(n - 1) // 10],
        "ms_p90": ms_sorted[(n - 1) - (n - 1) // 10], "ms_max": ms_sorted[-1],
        "images_per_s": batch / (med / 1e3) if med == med and med > 0 else 0.0,
        "tflops": gflop / med if med == med and med > 0 else 0.0, "gflop_per_batch": gflop,
        "peak_mib": peak / 2**20, "setup_s": setup_s, "repeat": args.repeat, "warmup": args.warmup,
        "version": torch.__version__, "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "tf32": impl == "eager-tf32", "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "error": error,
    }
    if extra:
        r.update(extra)
    print(json.dumps(r), flush=True)


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--stem", default="imagenet", choices=["imagenet", "cifar"])
    ap.add_argument("--num-classes", type=int, default=None)
    ap.add_argument("--batch", default="32", help="comma list")
    ap.add_argument("--input-size", default=None)
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"], help="for eager-cl/graph/compile")
    ap.add_argument("--mode", default="infer", choices=["infer", "train"])
    ap.add_argument("--impl", default="eager-fp32,eager-cl,graph")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layer-rest-ms", type=int, default=0,
                    help="cudnn rows: after a shape's algorithm search, the GPU idle MS ms, then --warmup runs "
                         "(cnn bench --layer-rest-ms)")
    ap.add_argument("--layer-min-ms", type=int, default=0,
                    help="cudnn rows: time each shape over at least MS ms of runs, up to 20000 (cnn bench --layer-min-ms)")
    ap.add_argument("--jobs", default=None, help="file of option lines, one configuration group each ('-': stdin)")
    return ap


def main():
    ap = parser()
    args = ap.parse_args()
    if args.jobs is None:
        if not args.model:
            ap.error("--model (or --jobs) is required")
        run_group(args)
        return 0
    lines = (sys.stdin if args.jobs == "-" else open(args.jobs)).read().splitlines()
    groups = []
    for n, line in enumerate(lines, 1):  # parse every line first: a typo fails before anything runs
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        g = ap.parse_args(shlex.split(line), namespace=argparse.Namespace(
            repeat=args.repeat, warmup=args.warmup, threads=args.threads, layer_rest_ms=args.layer_rest_ms,
            layer_min_ms=args.layer_min_ms))
        if not g.model or g.jobs:
            ap.error(f"{args.jobs}:{n}: a job line needs --model and no --jobs")
        groups.append(g)
    for g in groups:
        run_group(g)
    return 0


def run_group(args):
    """Every (batch, impl) of one configuration group, one record each."""
    size = args.input_size or ("32" if args.stem == "cifar" else "224")
    args.h, args.w = (int(v) for v in size.split("x")) if "x" in size else (int(size), int(size))
    classes = args.num_classes or (10 if args.stem == "cifar" else 1000)
    model_name = args.model + ("-cifar" if args.stem == "cifar" else "")
    torch.manual_seed(0)
    base = build(args.model, classes, args.stem)
    gflop_img = flops_per_image(base, args.h, args.w) / 1e9
    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if cuda else "cpu"
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    for batch in (int(b) for b in args.batch.split(",")):
        for impl in args.impl.split(","):
            gflop = gflop_img * batch * (3 if args.mode == "train" else 1)
            t0 = time.perf_counter()
            try:
                if impl == "cpu":
                    torch.set_num_threads(args.threads)
                    probe = host_probe_ms()
                    ms = run_cpu(args, base, batch, classes)
                    row(args, impl, model_name, batch, "fp32", args.mode, ms, gflop, time.perf_counter() - t0,
                        "cpu", 0, {"threads": args.threads, "host_probe_ms": probe})
                    continue
                if impl == "cudnn":
                    run_cudnn(args, base, batch, dt, model_name, device)
                    continue
                torch.cuda.reset_peak_memory_stats()
                ms, setup, extra = run_gpu(args, base, impl, batch, dt, classes)
                dname = {"eager-fp32": "fp32", "eager-tf32": "tf32"}.get(impl, args.dtype)
                row(args, impl, model_name, batch, dname, args.mode, ms, gflop, setup, device,
                    torch.cuda.max_memory_allocated(), extra)
            except Exception as e:  # a failed configuration is a row with its error, not a crash
                row(args, impl, model_name, batch, args.dtype, args.mode, [], gflop, time.perf_counter() - t0, device,
                    0, error=f"{type(e).__name__}: {e}"[:300])
            finally:
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
                if impl.startswith("compile"):  # drop compiled graphs and their CUDA-graph pools before the next row
                    importlib.import_module("torch._dynamo").reset()
                if cuda:
                    torch.cuda.empty_cache()


def run_cpu(args, base, batch, classes):
    import copy
    model = copy.deepcopy(base)
    x = torch.randn(batch, 3, args.h, args.w)
    if args.mode == "infer":
        model.eval()
        with torch.no_grad():
            return time_cpu(lambda: model(x), args.warmup, args.repeat)
    y = torch.randint(0, classes, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=5e-4)
    model.train()

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return time_cpu(step, args.warmup, args.repeat)


def run_gpu(args, base, impl, batch, dt, classes):
    import copy
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = impl == "eager-tf32"
    torch.backends.cudnn.allow_tf32 = impl == "eager-tf32"
    model = copy.deepcopy(base).cuda()
    fp32 = impl in ("eager-fp32", "eager-tf32")
    cl = not fp32
    if cl:
        model = model.to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, args.h, args.w, device="cuda")
    if cl:
        x = x.to(memory_format=torch.channels_last)
    t0 = time.perf_counter()
    if args.mode == "infer":
        model.eval()
        if not fp32:
            model = model.to(dt)
            x = x.to(dt)
        fn = None
        if impl.startswith("compile"):
            import torch._inductor.config as icfg
            icfg.freezing = True
            cm = torch.compile(model, mode="max-autotune" if impl == "compile-max" else "reduce-overhead")

            def fn():
                with torch.no_grad():
                    return cm(x)
            for _ in range(3):
                fn()
        elif impl == "graph":
            with torch.no_grad():
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        model(x)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    model(x)
            fn = g.replay
        else:
            def fn():
                with torch.no_grad():
                    return model(x)
        return timed(fn, args, t0)
    # training step
    y = torch.randint(0, classes, (batch,), device="cuda")
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=5e-4)
    amp = not fp32 and dt != torch.float32
    step_model = torch.compile(model) if impl.startswith("compile") else model

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=dt, enabled=amp):
            loss = F.cross_entropy(step_model(x), y)
        loss.backward()
        opt.step()

    if impl == "graph":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        fn = g.replay
    else:
        fn = step
        for _ in range(3):
            fn()
    return timed(fn, args, t0)


MIN_TIMED_S = 0.5  # a short GPU row runs at least this long under the events (and as long again under the 2nd timer)


def timed(fn, args, t0):
    """(event ms per run, setup s = t0 to the end of the warm-up, extra record fields) of a GPU row. A row whose
    --repeat runs would take less than MIN_TIMED_S gets more runs (at most 400; the second timer's blocks go from 4
    to 8 at 40 runs): launch-bound rows swing between runs with the host CPU's speed (4.3 / 9.8 ms p10 / p90
    within 20 runs, docs/perf-log.md step 27), and 20 runs of 5 ms would time a tenth of a second of that."""
    for _ in range(args.warmup):
        fn()
    torch.cuda.synchronize()
    setup = time.perf_counter() - t0
    t = time.perf_counter()
    fn()
    fn()
    torch.cuda.synchronize()
    per = max((time.perf_counter() - t) / 2, 1e-6)
    runs = max(args.repeat, min(400, math.ceil(MIN_TIMED_S / per)))
    probe = host_probe_ms()
    ms, wall = time_cuda_checked(fn, 0, runs, 4 if runs < 40 else 8)
    return ms, setup, {"repeat": runs, "wall_ms": statistics.median(wall), "wall_blocks": len(wall),
                       "host_probe_ms": probe}


def conv_shapes(model, h, w):
    """{(C, K, H, W, R, stride, pad): how many Conv2d layers of the model have it}, from a 1-image CPU forward."""
    shapes = {}

    def hook(mod, inp, out):
        key = (mod.in_channels, mod.out_channels, inp[0].shape[2], inp[0].shape[3], mod.kernel_size[0],
               mod.stride[0], mod.padding[0])
        shapes[key] = shapes.get(key, 0) + 1

    hooks = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, h, w))
    for hk in hooks:
        hk.remove()
    return shapes


LAYER_MAX_RUNS = 20000  # as cnn bench --layer-min-ms


def time_conv_shape(fn, args):
    """Per-run times of one conv shape, by the rules `cnn bench --layers` times our steps with (apps/cmd_bench.c):
    by default --warmup runs (the first one is cudnn.benchmark's search) then --repeat timed ones. --layer-rest-ms:
    the search first, then the GPU idle that long, then --warmup runs, so every shape starts from an idle GPU.
    --layer-min-ms: at least that long of timed runs (from the median of 3 timed first), at the clocks a sustained
    load settles at."""
    if args.layer_rest_ms <= 0 and args.layer_min_ms <= 0:
        return time_cuda(fn, args.warmup, args.repeat)
    warmup = args.warmup
    if args.layer_rest_ms > 0:
        fn()  # cudnn.benchmark's search for this shape, before the pause
        torch.cuda.synchronize()
        time.sleep(args.layer_rest_ms / 1e3)
    runs = args.repeat
    if args.layer_min_ms > 0:
        per = statistics.median(time_cuda(fn, warmup, 3))
        warmup = 0
        want = args.layer_min_ms / per + 1.0 if per > 0 else LAYER_MAX_RUNS
        runs = int(min(LAYER_MAX_RUNS, max(args.repeat, want)))
    return time_cuda(fn, warmup, runs)


def run_cudnn(args, base, batch, dt, model_name, device):
    """One row per distinct conv shape: F.conv2d alone, NHWC, cudnn.benchmark; fp32 is true fp32 (TF32 off, which
    is not PyTorch's default for cuDNN convolutions)."""
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    for (c, k, h, w, r, s, p), count in conv_shapes(base, args.h, args.w).items():
        x = torch.randn(batch, c, h, w, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
        wt = torch.randn(k, c, r, r, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
        with torch.no_grad():
            ms = time_conv_shape(lambda: F.conv2d(x, wt, stride=s, padding=p), args)
        pq = ((h + 2 * p - r) // s + 1) * ((w + 2 * p - r) // s + 1)
        gflop = 2.0 * batch * pq * k * c * r * r / 1e9
        row(args, "cudnn", model_name, batch, args.dtype, "conv", ms, gflop, 0.0, device, 0,
            dict({"layer": f"{c}->{k} {h}x{w} {r}x{r}/{s} p{p}", "count": count, "repeat": len(ms)},
                 **({"layer_rest_ms": args.layer_rest_ms, "layer_min_ms": args.layer_min_ms}
                    if args.layer_rest_ms > 0 or args.layer_min_ms > 0 else {})))


if __name__ == "__main__":
    sys.exit(main())
