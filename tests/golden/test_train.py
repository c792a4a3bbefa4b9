#!/usr/bin/env python3
"""test_train.py — `cnn train` against PyTorch: 20 optimizer steps of a CIFAR-stem ResNet-18 (10 classes, 32x32)
on fixed data, batch 8, no shuffle, no augmentation, constant lr (B12, training half), then the safetensors round
trip of the trained weights.

Cases: SGD (lr 0.01, momentum 0.9, weight decay 5e-4, PyTorch's torch.optim.SGD: L2 added to the gradient of
every parameter) and AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, decoupled weight decay 0.05 on every parameter).
Data: 160 images = 10 random class templates + N(0,1) noise, int64 labels, written as `images`/`labels` to a
safetensors file (`--data tensors:FILE`). Reference on the CPU: PyTorch in float64 (the truth), with PyTorch
float32 as the second opinion; on the GPU: PyTorch float32 on the GPU, with PyTorch float32 on the CPU.
  losses: `OUT/metrics.jsonl` records with "step" 1..20 and "loss" (that step's forward, before its update),
          |ours - PyTorch| <= 1e-4 each;
  weights: `OUT/model.safetensors` holds exactly the state_dict names, shapes and dtypes; every tensor (parameters
          and running statistics) rel-L2 <= max(1e-4, 10 * e_alt), num_batches_tracked == initial + 20 exactly;
  updates: the same on final - initial, rel-L2 <= max(1e-3, 10 * e_alt) (the weights move ~1% in 20 steps, so
          this is the stricter check);
  round trip: the trained file loads into a fresh torchvision model with load_state_dict(strict=True), and its
          eval logits on a new batch (float64) match `cnn infer` with that file: rel-L2 <= 1e-4.
e_alt is how far a second correct implementation lands from the reference (CPU: PyTorch float32 from float64;
GPU: PyTorch on the CPU from cuDNN) and is printed as the noise floor. On the CPU the reference used to be a
float32 run with a second float32 run as the floor, but PyTorch 1.13's float32 CPU kernels differ by machine: on
an AVX2-only CPU their BN running statistics after 20 AdamW steps were 7.7e-4 from float64 while ours were
1.7e-5 (2026-11-23), and its two float32 runs agreed with each other, so the test failed us for being closer to
the truth; against float64 it measures what it means to. Trajectories of ReLU networks amplify rounding differences step by step. To keep that
floor far below the bounds, the initial weights come from tools/models.py:condition_bn (BN biases 2.5 BN weights,
so pre-activations stay away from the ReLU kink; gammas U(0.02, 0.06) at the end of residual branches, so the
pooled features stay small (|f|^2 ~ 50) and lr 0.01 is stable; classifier x0.1). Measured alternatives: with
torchvision's fresh BN two PyTorch float32 runs differ by ~0.1 in loss after 20 SGD steps (ReLU-mask flips); with
end-of-branch gammas U(0.1, 0.3) the SGD loss climbs from 2.3 to 23 and runs differ by 1e-4 at step 19.
"""
import copy
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import T, seeded_input  # noqa: E402

t = T("train")
torch = t.need_torch()
t.need_binary()
import torch.nn as nn  # noqa: E402

import models  # noqa: E402
import st  # noqa: E402

STEPS, BATCH, N = 20, 8, 160
SEED = 303
dev = t.tdev()

CASES = [("sgd", ["--lr", "0.01", "--momentum", "0.9", "--weight-decay", "5e-4"],
          lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, weight_decay=5e-4)),
         ("adamw", ["--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0.05"],
          lambda p: torch.optim.AdamW(p, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05))]
only = [s for s in os.environ.get("CNN_TRAIN", "").split(",") if s]
if only:
    CASES = [c for c in CASES if c[0] in only]

# data and initial weights
g = torch.Generator().manual_seed(SEED)
Y = torch.randint(0, 10, (N,), generator=g)
X = (torch.randn(10, 3, 32, 32, generator=g)[Y] + torch.randn(N, 3, 32, 32, generator=g)).contiguous()
st.save_file({"images": X, "labels": Y}, t.path("data.safetensors"))
m0 = models.build("resnet18", num_classes=10, stem="cifar", seed=SEED, randomize_bn_params=True)
models.condition_bn(m0, SEED, shift=2.5, residual_gamma=(0.02, 0.06), fc_scale=0.1)
init = {k: v.clone() for k, v in m0.state_dict().items()}
st.save_file(init, t.path("init.safetensors"))


def torch_train(make_opt, channels_last=False, threads=2, device=None, dtype=None, steps=STEPS, amp=False):
    """`steps` steps (the data's N / BATCH batches in order, repeated) in float32 (or `dtype`; `amp`: float32 weights
    under bf16 autocast) on `device` (default: the test device); returns (losses, state_dict on the CPU)."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    dev = device or t.tdev()
    dtype = dtype or torch.float32
    m = copy.deepcopy(m0).to(dev, dtype).train()
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
    opt = make_opt(m.parameters())
    losses = []
    for s in range(steps):
        b = s % (N // BATCH)
        x, y = X[b * BATCH:(b + 1) * BATCH].to(dev, dtype), Y[b * BATCH:(b + 1) * BATCH].to(dev)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        opt.zero_grad()
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    torch.set_num_threads(old)
    return losses, {k: v.detach().cpu().contiguous() for k, v in m.state_dict().items()}


for name, flags, make_opt in CASES:
    pre = "train.%s" % name
    t0 = time.time()
    # the reference and the noise floor (a second correct implementation). On the GPU the floor is PyTorch on the
    # CPU (two cuDNN runs share their algorithms, so they differ far less than two implementations do: AdamW's
    # per-element normalisation turns that difference into ~1e-4 on the weights after 20 steps).
    if dev == "cuda":
        ref_losses, ref_w = torch_train(make_opt)
        alt_losses, alt_w = torch_train(make_opt, threads=int(t.threads), device="cpu")
        alt_name = "PyTorch CPU vs GPU"
    else:
        ref_losses, ref_w = torch_train(make_opt, dtype=torch.float64)
        alt_losses, alt_w = torch_train(make_opt)
        alt_name = "PyTorch fp32 vs float64"
    t_torch = time.time() - t0
    out = t.path("run_" + name)
    r = t.cnn("train", "--model", "resnet18", "--stem", "cifar", "--num-classes", 10, "--data",
              "tensors:" + t.path("data.safetensors"), "--batch", BATCH, "--steps", STEPS, "--schedule", "constant",
              "--no-shuffle", "--no-augment", "--weights", t.path("init.safetensors"), "--out", out,
              "--no-progress", "-q", *flags)
    print("# %s: PyTorch %.1f s (2 runs), cnn %.1f s" % (name, t_torch, r.secs), flush=True)
    if r.rc != 0:
        t.fail(pre, r.why())
        continue
    # ---- losses
    recs = {}
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                if line.strip():
                    o = json.loads(line)
                    if "loss" in o and "step" in o:
                        recs[int(o["step"])] = float(o["loss"])
    except (OSError, ValueError) as e:
        t.fail(pre + ".losses", "metrics.jsonl unreadable: %s" % e)
    if recs:
        if sorted(recs) != list(range(1, STEPS + 1)):
            t.fail(pre + ".losses", "metrics.jsonl steps %s, expected 1..%d" % (sorted(recs)[:25], STEPS))
        else:
            d = [abs(recs[s + 1] - ref_losses[s]) for s in range(STEPS)]
            da = max(abs(a - b) for a, b in zip(alt_losses, ref_losses))
            worst = max(range(STEPS), key=lambda s: d[s])
            traj = " ".join("%.4f" % recs[s + 1] for s in range(0, STEPS, 4))
            if max(d) <= 1e-4:
                t.ok(pre + ".losses", "20 steps, max |d| %.1e at step %d <= 1e-4 (%s: %.1e); losses %s ..."
                     % (max(d), worst + 1, alt_name, da, traj))
            else:
                first = next(s for s in range(STEPS) if not d[s] <= 1e-4) + 1
                t.fail(pre + ".losses", "max |d| %.2e at step %d > 1e-4 (%s: %.1e); first step over: %d; "
                       "ours %s; PyTorch %s; %s" % (max(d), worst + 1, alt_name, da, first, ["%.6f" % recs[s + 1] for s in range(STEPS)],
                                                    ["%.6f" % v for v in ref_losses], r.shell()))
    # ---- final weights
    try:
        W = st.load_file(os.path.join(out, "model.safetensors"))
    except Exception as e:  # noqa: BLE001
        t.fail(pre + ".weights", "model.safetensors unreadable: %s" % e)
        continue
    miss, extra = sorted(set(ref_w) - set(W)), sorted(set(W) - set(ref_w))
    wrong = [k for k in W if k in ref_w and (W[k].shape != ref_w[k].shape or W[k].dtype != init[k].dtype)]
    t.check(pre + ".names", not miss and not extra and not wrong, "%d tensors, torchvision names/shapes/dtypes" % len(W),
            "missing %s, unexpected %s, wrong shape/dtype %s" % (miss[:5], extra[:5],
                                                                 [(k, str(W[k].dtype), tuple(W[k].shape)) for k in wrong[:5]]))
    bad, worst, nchk = [], (0.0, "", 0.0, 1.0), 0
    for k, ref in ref_w.items():
        if k not in W or W[k].shape != ref.shape:
            continue
        if k.endswith("num_batches_tracked"):
            want = int(init[k]) + STEPS
            if int(W[k]) != want or W[k].dtype != torch.int64:
                bad.append("%s = %s, expected %d" % (k, W[k].tolist(), want))
            continue
        e = t.rel_l2(W[k], ref)
        ea = t.rel_l2(alt_w[k], ref)
        tol = max(1e-4, 10 * ea)
        nchk += 1
        if not e <= tol:
            bad.append("%s rel-L2 %.2e > %.1e (update rel-L2 %.1e; %s %.1e)"
                       % (k, e, tol, t.rel_l2(W[k].double() - init[k].double(), ref.double() - init[k].double()),
                          alt_name, ea))
        elif e / tol > worst[0] / worst[3]:
            worst = (e, k, ea, tol)
    if bad:
        t.fail(pre + ".weights", "%d tensors off: %s; %s" % (len(bad), "; ".join(bad[:8]), r.shell()))
    else:
        t.ok(pre + ".weights", "%d float tensors + num_batches_tracked; closest to its bound: %s rel-L2 %.2e "
             "(bound %.1e, %s %.1e)" % (nchk, worst[1], worst[0], worst[3], alt_name, worst[2]))
    # the same, on what the 20 steps changed (final - initial): far stricter than on the weights themselves
    bad, worst = [], (0.0, "", 0.0, 1.0)
    for k, ref in ref_w.items():
        if k.endswith("num_batches_tracked") or k not in W or W[k].shape != ref.shape:
            continue
        w0 = init[k].double()
        e = t.rel_l2(W[k].double() - w0, ref.double() - w0)
        ea = t.rel_l2(alt_w[k].double() - w0, ref.double() - w0)
        tol = max(1e-3, 10 * ea)
        if not e <= tol:
            bad.append("%s rel-L2 %.2e > %.1e (%s %.1e)" % (k, e, tol, alt_name, ea))
        elif e / tol > worst[0] / worst[3]:
            worst = (e, k, ea, tol)
    if bad:
        t.fail(pre + ".updates", "%d tensors off: %s; %s" % (len(bad), "; ".join(bad[:8]), r.shell()))
    else:
        t.ok(pre + ".updates", "final - initial, per tensor rel-L2 <= max(1e-3, 10 e_alt); closest to its bound: %s "
             "%.2e (bound %.1e, %s %.1e)" % (worst[1], worst[0], worst[3], alt_name, worst[2]))
    # ---- round trip: model.safetensors -> torchvision (strict) and -> cnn infer
    if miss or extra or wrong:
        continue
    fresh = models.build("resnet18", num_classes=10, stem="cifar", seed=SEED + 1)
    try:
        fresh.load_state_dict(W, strict=True)
    except RuntimeError as e:
        t.fail(pre + ".roundtrip", "load_state_dict(strict=True): %s" % str(e).splitlines()[0])
        continue
    xb = seeded_input(torch, (4, 3, 32, 32), SEED + 2)
    with torch.no_grad():
        ref_logits = fresh.double().to(dev).eval()(xb.to(dev, torch.float64)).cpu()
    st.save_file({"input": xb}, t.path("xb.safetensors"))
    ri = t.cnn("infer", "--model", "resnet18", "--stem", "cifar", "--num-classes", 10, "--weights",
               os.path.join(out, "model.safetensors"), "--input", t.path("xb.safetensors"), "--output", t.path("yb.safetensors"))
    if ri.rc != 0:
        t.fail(pre + ".roundtrip", ri.why())
        continue
    t.check_close(pre + ".roundtrip", st.load_file(t.path("yb.safetensors"))["logits"], ref_logits, 1e-4,
                  " (trained weights: strict load_state_dict ok; eval logits vs cnn infer)")
    t.rm(out, "xb.safetensors", "yb.safetensors")

# ---- bf16 (GPU only: the CPU backend computes in fp32): the SGD case with bf16 activations and weights copies,
# fp32 master weights, for 200 steps (10 passes over the data, in order); each loss within 5e-2 of PyTorch AMP's
# (bf16 autocast, channels_last, the same weights and batches; issue 27's trajectory bound).
BF16_STEPS = 200
if t.device == "cuda" and (not only or "sgd" in only):
    name, flags, make_opt = CASES[0]
    ref_losses, _ = torch_train(make_opt, channels_last=True, steps=BF16_STEPS, amp=True)
    out = t.path("run_bf16")
    r = t.cnn("train", "--model", "resnet18", "--stem", "cifar", "--num-classes", 10, "--data",
              "tensors:" + t.path("data.safetensors"), "--batch", BATCH, "--steps", BF16_STEPS, "--schedule", "constant",
              "--no-shuffle", "--no-augment", "--weights", t.path("init.safetensors"), "--out", out,
              "--no-progress", "-q", "--dtype", "bf16", *flags)
    recs = {}
    if r.rc == 0:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                o = json.loads(line) if line.strip() else {}
                if "loss" in o and "step" in o:
                    recs[int(o["step"])] = float(o["loss"])
    if r.rc != 0:
        t.fail("train.sgd_bf16.losses", r.why())
    elif sorted(recs) != list(range(1, BF16_STEPS + 1)):
        t.fail("train.sgd_bf16.losses", "metrics.jsonl steps %s, expected 1..%d" % (sorted(recs)[:25], BF16_STEPS))
    else:
        d = [abs(recs[s + 1] - ref_losses[s]) for s in range(BF16_STEPS)]
        worst = max(range(BF16_STEPS), key=lambda s: d[s])
        t.check("train.sgd_bf16.losses", max(d) <= 5e-2,
                "%d bf16 steps vs PyTorch AMP bf16: max |d| %.2e at step %d <= 5e-2; losses %s" %
                (BF16_STEPS, max(d), worst + 1, " ".join("%.4f" % recs[s + 1] for s in range(0, BF16_STEPS, 25))),
                "max |d| %.2e at step %d > 5e-2; ours %s; PyTorch %s" %
                (max(d), worst + 1, ["%.4f" % recs[s + 1] for s in range(BF16_STEPS)],
                 ["%.4f" % v for v in ref_losses]))
t.finish()
