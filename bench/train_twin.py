#!/usr/bin/env python3
"""train_twin.py — the PyTorch twin of a `cnn train` run on small images, for the whole-run comparisons:
README's Fashion-MNIST recipe (the IDX files) and the CIFAR-10 whole run on
CIFAR-10's binary batch files (both run by bench/whole_run.sh). The same model (torchvision ResNet-18 with the CIFAR
stem: conv1 3x3/1, no max-pool; tools/models.py), the same data (whole on the GPU as uint8; one channel repeated
into three), the same augmentation (zero pad P, random crop, horizontal flip, one gather per batch on the GPU), the
same normalisation as `cnn train` (src/core/data.c's per-dataset mean and std), optimizer (SGD, momentum 0.9,
Nesterov, weight decay on every parameter), label smoothing, per-step schedule (linear warm-up, then cosine to 0,
as `cnn train --schedule cosine --warmup W`), full batches only, bf16 autocast with channels_last, and a test-set
evaluation after every epoch. Prints one line per epoch and a final `RESULT torch ...` line with the test top-1
and the wall time of the training loop and of the whole process.

  python3 bench/train_twin.py --data DIR [--format idx|cifar10] [--epochs 36] [--batch 512] [--lr 0.2]
                              [--warmup 468] [--pad 2] [--label-smoothing 0.1] [--weight-decay 5e-4] [--seed 0]
                              [--compile] [--metrics PATH]

--metrics writes every step's loss and lr and each epoch's evaluation as JSON lines in the form of cnn's
metrics.jsonl (the steps' losses stay on the GPU until the end: no synchronisation per step).
"""
import argparse
import contextlib
import gzip
import math
import os
import sys
import time

T_START = time.time()
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import models  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--data", required=True)
ap.add_argument("--format", choices=["idx", "cifar10"], default="idx",
                help="idx: MNIST-format files (Fashion-MNIST); cifar10: data_batch_1..5.bin and test_batch.bin")
ap.add_argument("--epochs", type=int, default=36)
ap.add_argument("--batch", type=int, default=512)
ap.add_argument("--lr", type=float, default=0.2)
ap.add_argument("--warmup", type=int, default=468)
ap.add_argument("--pad", type=int, default=2)
ap.add_argument("--label-smoothing", type=float, default=0.1)
ap.add_argument("--weight-decay", type=float, default=5e-4)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--compile", action="store_true", help="torch.compile the model (slower start)")
ap.add_argument("--device", default="cuda")
ap.add_argument("--metrics", help="write per-step losses and per-epoch evaluations here (JSON lines)")
ap.add_argument("--train-size", type=int, default=0, help="use the first N training and test images (a smoke test)")
a = ap.parse_args()


def idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            raw = (gzip.open if p.endswith(".gz") else open)(p, "rb").read()
            nd = raw[3]
            dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
            return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)
    raise SystemExit("train_twin: %s(.gz) not found" % path)


def cifar10(paths):  # CIFAR-10's binary records: a label byte, then 3 x 32 x 32 bytes (planes R, G, B)
    raw = np.concatenate([np.fromfile(p, np.uint8).reshape(-1, 3073) for p in paths])
    return raw[:, 1:].reshape(-1, 3, 32, 32), raw[:, 0].astype(np.int64)


def load():  # (images N x C x H x W uint8, labels) of the training and the test split, and the normalisation
    if a.format == "idx":
        x = [idx(os.path.join(a.data, f + "-images-idx3-ubyte"))[:, None] for f in ("train", "t10k")]
        y = [idx(os.path.join(a.data, f + "-labels-idx1-ubyte")).astype(np.int64) for f in ("train", "t10k")]
        return x[0], y[0], x[1], y[1], [0.2860], [0.3530]
    xtr, ytr = cifar10([os.path.join(a.data, "data_batch_%d.bin" % i) for i in range(1, 6)])
    xte, yte = cifar10([os.path.join(a.data, "test_batch.bin")])
    return xtr, ytr, xte, yte, [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]


dev = torch.device(a.device)
torch.manual_seed(a.seed)
torch.backends.cudnn.benchmark = True
xtr, ytr, xte, yte, MEAN, STD = load()
xtr, ytr, xte, yte = (torch.from_numpy(np.ascontiguousarray(t)).to(dev) for t in (xtr, ytr, xte, yte))
if a.train_size:
    xtr, ytr, xte, yte = xtr[:a.train_size], ytr[:a.train_size], xte[:a.train_size], yte[:a.train_size]
N, C, H, W = xtr.shape
MEAN = torch.tensor(MEAN, device=dev).view(1, C, 1, 1)
STD = torch.tensor(STD, device=dev).view(1, C, 1, 1)
model = models.build("resnet18", num_classes=10, stem="cifar", seed=a.seed).to(dev).to(memory_format=torch.channels_last)
model.train()  # build() returns the model in eval mode: without this the first epoch trained on BN's running statistics
net = torch.compile(model) if a.compile else model
decay = a.weight_decay
opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, nesterov=True, weight_decay=decay)
spe = N // a.batch
total = a.epochs * spe


def lr_at(s):  # 1-based step, as cnn_lr_at (src/core/train.c)
    if a.warmup > 0 and s <= a.warmup:
        return a.lr * s / a.warmup
    span = total - a.warmup
    if span <= 1:
        return a.lr
    return 0.5 * a.lr * (1 + math.cos(math.pi * (s - 1 - a.warmup) / (span - 1)))


def prep(x):  # uint8 (B, C, H, W) -> normalised (B, 3, H, W) channels_last
    x = (x.float() / 255 - MEAN) / STD
    return x.expand(-1, 3, -1, -1).contiguous(memory_format=torch.channels_last)


def augment(x, g):
    B = x.shape[0]
    p = a.pad
    xp = F.pad(x, (p, p, p, p))
    oy = torch.randint(0, 2 * p + 1, (B,), device=dev, generator=g)
    ox = torch.randint(0, 2 * p + 1, (B,), device=dev, generator=g)
    flip = torch.rand(B, device=dev, generator=g) < 0.5
    ar = torch.arange(H, device=dev)
    iy = oy[:, None] + ar
    ix = ox[:, None] + torch.arange(W, device=dev)
    ix = torch.where(flip[:, None], ix.flip(1), ix)
    # the advanced indices (B, H, W) first, the sliced channels last: (B, H, W, C) -> (B, C, H, W)
    return xp[torch.arange(B, device=dev)[:, None, None], :, iy[:, :, None], ix[:, None, :]].permute(0, 3, 1, 2)


def amp():
    return torch.autocast("cuda", dtype=torch.bfloat16) if dev.type == "cuda" else contextlib.nullcontext()


def evaluate():  # (top-1, mean cross-entropy without smoothing, as cnn's eval loss)
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad(), amp():
        for s in range(0, xte.shape[0], 1000):
            logits = net(prep(xte[s:s + 1000])).float()
            correct += (logits.argmax(1) == yte[s:s + 1000]).sum().item()
            loss_sum += F.cross_entropy(logits, yte[s:s + 1000], reduction="sum").item()
    model.train()
    return correct / xte.shape[0], loss_sum / xte.shape[0]


g = torch.Generator(device=dev)
g.manual_seed(a.seed)
crit = torch.nn.CrossEntropyLoss(label_smoothing=a.label_smoothing)
if dev.type == "cuda":
    torch.cuda.synchronize()
t0 = time.time()
step = 0
acc = 0.0
step_losses, evals = [], []
for epoch in range(a.epochs):
    perm = torch.randperm(N, device=dev, generator=g)
    te = time.time()
    for b in range(spe):
        step += 1
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        i = perm[b * a.batch:(b + 1) * a.batch]
        x = prep(augment(xtr[i], g))
        with amp():
            loss = crit(net(x), ytr[i])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if a.metrics:
            step_losses.append(loss.detach().float())
    acc, eval_loss = evaluate()
    evals.append((step, epoch + 1, eval_loss, acc))
    print("torch epoch %d  loss %.4f  eval loss %.4f  test top1 %.2f%%  %.1f s" % (
          epoch + 1, loss.item(), eval_loss, 100 * acc, time.time() - te),
          flush=True)
if dev.type == "cuda":
    torch.cuda.synchronize()
train_s = time.time() - t0
if a.metrics:
    import json
    os.makedirs(os.path.dirname(os.path.abspath(a.metrics)), exist_ok=True)
    with open(a.metrics, "w") as f:
        losses = torch.stack(step_losses).cpu().tolist() if step_losses else []
        ev = {s: (e, l, t) for s, e, l, t in evals}
        for i, v in enumerate(losses):
            f.write(json.dumps({"step": i + 1, "epoch": i // spe + 1, "loss": v, "lr": lr_at(i + 1)}) + "\n")
            if i + 1 in ev:
                e, l, t = ev[i + 1]
                f.write(json.dumps({"step": i + 1, "epoch": e, "eval_loss": l, "eval_top1": t}) + "\n")
print("RESULT torch top1 %.2f%% train_s %.1f total_s %.1f epochs %d (torch %s, %s)" % (
    100 * acc, train_s, time.time() - T_START, a.epochs, torch.__version__,
    torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"), flush=True)
