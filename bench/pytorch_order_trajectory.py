#!/usr/bin/env python3
"""pytorch_order_trajectory.py — how far PyTorch's own fp32 training trajectory moves when only the order of its
sums changes: the measurement behind issue 29's equivalence bar (perf-log steps 93-94).

usage: /usr/bin/python3 bench/pytorch_order_trajectory.py [STEPS BATCH LR]     (defaults 50 64 0.002)

CIFAR ResNet-18 (3x3 stem, no max-pool), SGD momentum 0.9, weight decay 5e-4, constant rate, on the first
STEPS x BATCH images of Fashion-MNIST (Debian's dataset-fashion-mnist; padded to 32x32, the channel repeated),
channels_last, CPU, 2 threads. Four runs from the same seeded weights over the same batches: fp32; fp32 again (must
be identical: the reruns are deterministic); fp32 with each batch's images in reverse order (the same mean loss and
gradients in exact arithmetic, other rounding); float64. Prints each step's loss and the three differences, then the
first step past 1e-5. About 16 minutes at the defaults on a 2-core machine.
"""
import gzip, sys, time
import numpy as np
import torch, torchvision

torch.set_num_threads(2)
steps, B, lr = (int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) == 4 else (50, 64, 0.002)
d = "/usr/share/datasets/fashion-mnist/"
img = np.frombuffer(gzip.open(d + "train-images-idx3-ubyte.gz").read(), np.uint8, offset=16).reshape(-1, 28, 28)
lab = np.frombuffer(gzip.open(d + "train-labels-idx1-ubyte.gz").read(), np.uint8, offset=8)
x = torch.tensor(img[: steps * B], dtype=torch.float64) / 255.0
x = torch.nn.functional.pad(x, (2, 2, 2, 2)).unsqueeze(1).repeat(1, 3, 1, 1)
x = (x - 0.286) / 0.353
y = torch.tensor(lab[: steps * B], dtype=torch.long)


def model():
    torch.manual_seed(0)
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = torch.nn.Identity()
    return m


def run(dtype, reverse):
    m = model().to(dtype).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    out = []
    for s in range(steps):
        idx = torch.arange(s * B, (s + 1) * B)
        if reverse:
            idx = idx.flip(0)
        xb = x[idx].to(dtype).contiguous(memory_format=torch.channels_last)
        loss = torch.nn.functional.cross_entropy(m(xb), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return np.array(out)


t = time.time()
a, a2, b, c = run(torch.float32, False), run(torch.float32, False), run(torch.float32, True), run(torch.float64, False)
print(f"# PyTorch {torch.__version__} CIFAR ResNet-18 fp32 b{B} lr {lr} Fashion-MNIST, {time.time() - t:.0f} s")
print("step  fp32            rerun-fp32  reversed-batch-fp32  fp64-minus-fp32")
for i in range(steps):
    print(f"{i + 1:4d}  {a[i]:.9f}  {a2[i] - a[i]:+.1e}  {b[i] - a[i]:+.2e}  {c[i] - a[i]:+.2e}")
first = lambda v: next((i + 1 for i in range(steps) if abs(v[i] - a[i]) > 1e-5), None)
print(f"first step past 1e-5: reversed {first(b)}, fp64 {first(c)}; rerun identical: {bool((a2 == a).all())}")
print(f"largest difference: reversed {np.abs(b - a).max():.2e}, fp64 {np.abs(c - a).max():.2e}")
