#!/usr/bin/env python3
"""ddp_bench.py — PyTorch DistributedDataParallel's training step, the baseline of `cnn bench --mode train --gpus N`.

Run under torchrun, one process per GPU (NCCL):

  torchrun --standalone --nproc_per_node N bench/ddp_bench.py --model resnet50 --batch 256 --dtype bf16

Same model (torchvision's, with the CIFAR stem on --stem cifar), the same per-GPU batch of random images and labels,
SGD with momentum 0.9 and weight decay 5e-4 (cnn bench's step), channels_last, bf16/fp16 under autocast (fp32:
TF32 off). Each step ends with its loss on the host (`loss.item()`), as cnn bench's does. After --warmup steps,
--repeat steps are timed one by one (CUDA synchronised at both ends); rank 0 prints one JSON line in the schema of
`cnn bench -o jsonl` (docs/BENCH.md) with impl "pytorch-ddp", the per-GPU batch in "batch", "gpus", and
images_per_s over all GPUs.
"""
import argparse, datetime, json, os, statistics, sys, time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_bench import build  # noqa: E402  (the same torchvision model and CIFAR stem as the other baselines)


def nccl_version():
    v = torch.cuda.nccl.version()  # an int (2.x: 21805) or a tuple, by torch version
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--stem", default="imagenet", choices=["imagenet", "cifar"])
    ap.add_argument("--input-size", type=int, default=0, help="default 224 (imagenet stem) or 32 (cifar stem)")
    ap.add_argument("--num-classes", type=int, default=0, help="default 1000 (imagenet stem) or 10 (cifar stem)")
    ap.add_argument("--batch", type=int, default=256, help="images per GPU")
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    a = ap.parse_args()
    size = a.input_size or (32 if a.stem == "cifar" else 224)
    classes = a.num_classes or (10 if a.stem == "cifar" else 1000)

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    torch.manual_seed(0)
    model = build(a.model, classes, a.stem).cuda().to(memory_format=torch.channels_last)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank], bucket_cap_mb=a.bucket_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator(device="cuda").manual_seed(7 + rank)
    x = torch.rand(a.batch, 3, size, size, device="cuda", generator=g).mul_(2).sub_(1)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.arange(a.batch, device="cuda") % classes
    loss_fn = nn.CrossEntropyLoss()
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.dtype)
    scaler = torch.cuda.amp.GradScaler(enabled=a.dtype == "fp16")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            loss = loss_fn(ddp(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    t0 = time.time()
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    setup_s = time.time() - t0
    ms = []
    for _ in range(a.repeat):
        dist.barrier()
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t) * 1e3)
    # the step time of the group: the slowest rank's, per step
    tm = torch.tensor(ms, device="cuda")
    dist.all_reduce(tm, op=dist.ReduceOp.MAX)
    ms = tm.tolist()
    if rank == 0:
        med = statistics.median(ms)
        print(json.dumps({
            "impl": "pytorch-ddp", "model": a.model + ("-cifar" if a.stem == "cifar" else ""),
            "input": f"{size}x{size}", "batch": a.batch, "gpus": world, "dtype": a.dtype, "mode": "train",
            "device": torch.cuda.get_device_name(), "backend": "cuda", "ok": True,
            "ms_median": med, "ms_min": min(ms), "ms_max": max(ms),
            "images_per_s": a.batch * world / (med / 1e3), "setup_s": setup_s,
            "repeat": a.repeat, "warmup": a.warmup, "torch": torch.__version__,
            "nccl": nccl_version(),
            "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
