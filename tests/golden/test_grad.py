#!/usr/bin/env python3
"""test_grad.py — `cnn grad` against PyTorch: one training-mode forward (batch statistics) and backward with
cross-entropy, input 2x3x64x64, int64 labels (B12, gradient half).

Cases: resnet18, resnet18 with label smoothing 0.1, resnet50, vgg11_bn and vgg11 (--dropout 0; every nn.Dropout
p=0; vgg11 has no BN: its convs apply their ReLU in the epilogue of a training step and take the mask from it).
G must hold exactly `loss` (float32, shape []) and every name of named_parameters() with its shape, float32.
Reference: the PyTorch model in float64 fed the same float32 weights and input.
  loss: |ours - ref| <= 1e-5 * |ref| (relative);
  each gradient: rel-L2(ours, ref) <= max(1e-4, 10 * e32), e32 = PyTorch float32's own rel-L2 for that tensor;
  a gradient that is 0 in exact arithmetic (a conv bias followed by training-mode BN: VGG _bn) has no relative
  error: there ||ours|| <= 1e-4 * ||ref gradient of the BN bias that follows||.
Why the e32 floor: ReLU masks and cancellations. A pre-activation within rounding error of 0 can get another
mask in another correct float32 implementation, and in a training-mode bottleneck the bias gradients of BN layers
feeding a 1x1 conv + BN are sums that cancel to ~1e-3 of their terms. With torchvision's fresh BN (bias 0) PyTorch
float32 itself is 1e-2 away from float64 on ResNet-50 gradients. So the ResNet-50 case uses
tools/models.py:condition_bn (BN biases 3.5 BN weights, keeping pre-activations away from 0), which brings PyTorch
float32 to <= 1e-5 on most tensors, and the e32 floor covers the remaining cancellation-bound bias gradients.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import T, seeded_input  # noqa: E402

t = T("grad")
torch = t.need_torch()
t.need_binary()
import torch.nn as nn  # noqa: E402

import models  # noqa: E402
import st  # noqa: E402

# name, arch, seed, condition_bn shift (None: plain random BN), label smoothing, extra engine args
CASES = [("resnet18", "resnet18", 201, None, 0.0, []),
         ("resnet18_ls0.1", "resnet18", 201, None, 0.1, ["--label-smoothing", "0.1"]),
         ("resnet50", "resnet50", 203, 3.5, 0.0, []),
         ("vgg11_bn", "vgg11_bn", 204, None, 0.0, ["--dropout", "0"]),
         ("vgg11", "vgg11", 205, None, 0.0, ["--dropout", "0"])]
only = [s for s in os.environ.get("CNN_GRAD", "").split(",") if s]
if only:
    CASES = [c for c in CASES if c[0] in only]
dev = t.tdev()


def reference(m, x, y, smoothing, dtype):
    m = m.to(dev, dtype).train()
    m.zero_grad()
    loss = nn.CrossEntropyLoss(label_smoothing=smoothing)(m(x.to(dev, dtype)), y.to(dev))
    loss.backward()
    return float(loss), {n: p.grad.detach().cpu().double() for n, p in m.named_parameters()}


for name, arch, seed, shift, smoothing, extra in CASES:
    t0 = time.time()
    m = models.build(arch, num_classes=1000, seed=seed, randomize_bn_params=True)
    if shift is not None:
        models.condition_bn(m, seed, shift=shift)
    models.set_dropout(m, 0.0)
    st.save_file(m.state_dict(), t.path("w.safetensors"))
    shapes = {n: tuple(p.shape) for n, p in m.named_parameters()}
    x = seeded_input(torch, (2, 3, 64, 64), seed)
    y = torch.randint(0, 1000, (2,), generator=torch.Generator().manual_seed(seed + 1))
    st.save_file({"input": x}, t.path("x.safetensors"))
    st.save_file({"labels": y}, t.path("l.safetensors"))
    l32, g32 = reference(m, x, y, smoothing, torch.float32)
    l64, g64 = reference(m, x, y, smoothing, torch.float64)  # the same module, converted: same float32 values
    del m
    t_torch = time.time() - t0
    t.rm("g.safetensors")
    r = t.cnn("grad", "--model", arch, "--num-classes", 1000, "--weights", t.path("w.safetensors"),
              "--input", t.path("x.safetensors"), "--labels", t.path("l.safetensors"),
              "--output", t.path("g.safetensors"), "--seed", seed, *extra)
    print("# %s: PyTorch %.1f s (fp32 + fp64), cnn %.1f s" % (name, t_torch, r.secs), flush=True)
    pre = "grad." + name
    if r.rc != 0:
        t.fail(pre, r.why())
        continue
    try:
        G = st.load_file(t.path("g.safetensors"))
    except Exception as e:  # noqa: BLE001
        t.fail(pre, "output unreadable: %s" % e)
        continue
    # names, shapes, dtypes
    want = set(shapes) | {"loss"}
    missing, extra_names = sorted(want - set(G)), sorted(set(G) - want)
    wrong = [n for n in G if n in want and (G[n].dtype != torch.float32 or tuple(G[n].shape)
                                           != (shapes[n] if n != "loss" else ()))]
    t.check(pre + ".names", not missing and not extra_names and not wrong,
            "%d gradients + loss, torchvision names and shapes, float32" % len(shapes),
            "missing %s, unexpected %s, wrong shape/dtype %s" % (missing[:5], extra_names[:5],
                                                                 [(n, str(G[n].dtype), tuple(G[n].shape)) for n in wrong[:5]]))
    if "loss" in G and G["loss"].numel() == 1:
        lo = float(G["loss"].reshape(-1)[0])
        d = abs(lo - l64) / abs(l64)
        t.check(pre + ".loss", d <= 1e-5, "%.7f vs %.7f: rel %.1e <= 1e-5 (PyTorch fp32 %.1e)" % (lo, l64, d, abs(l32 - l64) / abs(l64)),
                "%.7f vs PyTorch %.7f: rel %.2e > 1e-5 (PyTorch fp32 %.7f); %s" % (lo, l64, d, l32, r.shell()))
    # every gradient
    bad, worst, nchk = [], (0.0, "", 0.0, 0.0), 0
    scale = max(float(v.norm()) for v in g64.values())
    for n in shapes:
        if n not in G or tuple(G[n].shape) != shapes[n]:
            continue
        ours, ref = G[n].double(), g64[n]
        if float(ref.norm()) <= 1e-9 * scale:  # structurally zero (bias before training-mode BN)
            parts = n.rsplit(".", 2)
            partner = "%s.%d.bias" % (parts[0], int(parts[1]) + 1) if len(parts) == 3 and parts[1].isdigit() else None
            den = float(g64[partner].norm()) if partner in g64 else scale
            e = float(ours.norm()) / den
            e32 = float(g32[n].norm()) / den
            ok = e <= 1e-4  # NaN compares False
            kind = "||ours||/||%s|| %.1e (PyTorch fp32 %.1e)" % (partner or "max", e, e32)
        else:
            e = t.rel_l2(ours, ref)
            e32 = t.rel_l2(g32[n], ref)
            tol = max(1e-4, 10 * e32)
            ok = e <= tol
            kind = "rel-L2 %.2e > tol %.1e (PyTorch fp32 %.1e)" % (e, tol, e32)
            if e / tol > worst[0] / max(worst[3], 1e-300) or not worst[1]:
                worst = (e, n, e32, tol)
        nchk += 1
        if not ok:
            bad.append("%s %s" % (n, kind))
    if bad:
        t.fail(pre + ".grads", "%d/%d tensors off: %s; %s" % (len(bad), nchk, "; ".join(bad[:8]), r.shell()))
    else:
        t.ok(pre + ".grads", "%d tensors; closest to its bound: %s rel-L2 %.2e (bound %.1e, PyTorch fp32 %.1e)"
             % (nchk, worst[1], worst[0], worst[3], worst[2]))
    t.rm("w.safetensors", "x.safetensors", "l.safetensors", "g.safetensors")
t.finish()
