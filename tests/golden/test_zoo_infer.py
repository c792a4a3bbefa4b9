#!/usr/bin/env python3
"""test_zoo_infer.py — `cnn infer` against PyTorch for every zoo model (B12, inference half).

For each model: torchvision weights from a seed with random BN parameters and running statistics
(tools/models.py: `torch2st.py --arch A --seed S --randomize-bn`), a seeded N(0,1) input, eval-mode logits from
`cnn infer` compared with PyTorch's:
  * ResNet-18/34/50/101/152, VGG-11/13/16/19 and _bn: 2x3x64x64, ImageNet stem, 1000 classes;
  * ResNet-18 and ResNet-50 with the CIFAR stem: 3x3x32x32, 10 classes;
  * batch 1 with H != W: ResNet-18 1x3x64x96 and VGG-11_bn 1x3x64x96 (adaptive pooling 2x3 -> 7x7);
  * ResNet-18 with F16 and BF16 weight files (the reference uses the same rounded weights).
Reference: the PyTorch model in float64 fed the same float32 weights and input. Pass: rel-L2(ours, ref) <=
max(1e-4, 10 * e32), where e32 is PyTorch's own float32 rel-L2 against that reference (printed; above 1e-5 only
for the deepest ResNets, where 100+ layers of float32 rounding reach ~1e-4 by themselves), and identical top-1 for
every image whose reference top-1/top-2 gap exceeds twice our largest logit error (a near tie is reported, not
judged). VGG weight files are ~0.5 GB: one model at a time, deleted right after.
Env: see common.py; CNN_TEST_KEEP=1 keeps the temp dir; CNN_ZOO=resnet18,vgg11 runs a subset; CNN_ZOO_DTYPE=bf16
(or f16) runs `cnn infer --dtype bf16` (the tensor-core kernels on a GPU): the same float64 reference and top-1
rule, and rel-L2 <= max(1e-2 (f16: 2e-3), 2 * e_amp), where e_amp is PyTorch's own error in that precision
(autocast on the same device: convs and linears in bf16, BN in float32, which is what our folded epilogue does).
Random-BN ResNets amplify rounding: a fixed 1e-2 holds for VGG and ResNet-18 but not at depth 50+, where
PyTorch's bf16 is itself 0.1-0.4 from float64. CNN_ZOO_DTYPE=tf32 runs `cnn infer --dtype tf32` (float32
activations, forward convolutions in TF32 on the tensor cores) against the same reference with rel-L2 <=
max(1e-3, 2 * e_tf32), e_tf32 being PyTorch's float32 model with cuDNN's and cuBLAS's TF32 allowed.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import T, seeded_input  # noqa: E402

t = T("zoo_infer")
torch = t.need_torch()
t.need_binary()
import models  # noqa: E402
import st  # noqa: E402

RESNETS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
VGGS = ["vgg11", "vgg13", "vgg16", "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn"]

# (case name, arch, stem, classes, weight dtype, [input shapes])
CASES = [(a, a, "imagenet", 1000, None, [(2, 3, 64, 64)]) for a in RESNETS]
CASES[0] = ("resnet18", "resnet18", "imagenet", 1000, None, [(2, 3, 64, 64), (1, 3, 64, 96)])
CASES += [(a, a, "imagenet", 1000, None, [(2, 3, 64, 64)] + ([(1, 3, 64, 96)] if a == "vgg11_bn" else []))
          for a in VGGS]
CASES += [("resnet18_cifar", "resnet18", "cifar", 10, None, [(3, 3, 32, 32)]),
          ("resnet50_cifar", "resnet50", "cifar", 10, None, [(3, 3, 32, 32)]),
          ("resnet18_f16", "resnet18", "imagenet", 1000, torch.float16, [(2, 3, 64, 64)]),
          ("resnet18_bf16", "resnet18", "imagenet", 1000, torch.bfloat16, [(2, 3, 64, 64)])]
CASES = [(100 + i,) + c for i, c in enumerate(CASES)]  # seeds fixed by position in the full list
only = [s for s in os.environ.get("CNN_ZOO", "").split(",") if s]
if only:
    CASES = [c for c in CASES if c[1] in only or c[2] in only]
if os.environ.get("CNN_TEST_KEEP"):
    import atexit
    atexit.unregister(__import__("shutil").rmtree)
    print("# keeping %s" % t.tmp)

dev = t.tdev()
cdt = os.environ.get("CNN_ZOO_DTYPE", "")  # cnn infer's compute dtype: "" = fp32
if cdt not in ("", "bf16", "f16", "tf32"):
    sys.exit("CNN_ZOO_DTYPE must be bf16, f16 or tf32")
if cdt and dev != "cuda":
    t.skip_all("CNN_ZOO_DTYPE=%s needs CNN_TEST_DEVICE=cuda: the CPU backend computes in float32" % cdt)
timings = []
for seed, name, arch, stem, classes, wdtype, shapes in CASES:
    t0 = time.time()
    m = models.build(arch, num_classes=classes, stem=stem, seed=seed, randomize_bn_params=True)
    sd = m.state_dict()
    if wdtype is not None:  # the file holds rounded weights; so does the reference
        with torch.no_grad():
            for v in sd.values():
                if v.is_floating_point():
                    v.copy_(v.to(wdtype).float())
        st.save_file({k: (v.to(wdtype) if v.is_floating_point() else v) for k, v in sd.items()}, t.path("w.safetensors"))
    else:
        st.save_file(sd, t.path("w.safetensors"))
    recipe = "weights: tools/torch2st.py --arch %s --stem %s --num-classes %d --seed %d --randomize-bn%s" % (
        arch, stem, classes, seed, {None: "", torch.float16: " --dtype f16", torch.bfloat16: " --dtype bf16"}[wdtype])
    xs = [seeded_input(torch, s, seed * 10 + i) for i, s in enumerate(shapes)]
    with torch.no_grad():
        m = m.to(dev).eval()
        y32 = [m(x.to(dev)).cpu() for x in xs]
        if cdt == "tf32":  # PyTorch's TF32: float32 tensors, convs and matmuls on TF32 tensor cores
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
            ylp = [m(x.to(dev)).cpu() for x in xs]
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        elif cdt:
            with torch.autocast(device_type=dev, dtype={"bf16": torch.bfloat16, "f16": torch.float16}[cdt]):
                ylp = [m(x.to(dev)).float().cpu() for x in xs]
        m = m.double()
        y64 = [m(x.to(dev, torch.float64)).cpu() for x in xs]
    del m, sd
    t_torch = time.time() - t0
    t_ours = 0.0
    for i, (x, r32, ref) in enumerate(zip(xs, y32, y64)):
        e_amp = t.rel_l2(ylp[i], ref) if cdt else 0.0
        n, _, h, w = x.shape
        cname = "infer.%s.%dx%dx%d%s" % (name, n, h, w, "." + cdt if cdt else "")
        st.save_file({"input": x}, t.path("x.safetensors"))
        t.rm("y.safetensors")
        r = t.cnn("infer", "--model", arch, "--stem", stem, "--num-classes", classes, "--weights",
                  t.path("w.safetensors"), "--input", t.path("x.safetensors"), "--output", t.path("y.safetensors"),
                  *(["--dtype", cdt] if cdt else []))
        t_ours += r.secs
        if r.rc != 0:
            t.fail(cname, r.why() + " [" + recipe + "; input seed %d]" % (seed * 10 + i))
            continue
        try:
            out = st.load_file(t.path("y.safetensors"))
        except Exception as e:  # noqa: BLE001
            t.fail(cname, "output unreadable: %s" % e)
            continue
        if set(out) != {"logits"} or out["logits"].dtype != torch.float32:
            t.fail(cname, "output holds %s, expected one float32 'logits'" %
                   {k: (str(v.dtype), tuple(v.shape)) for k, v in out.items()})
            continue
        y = out["logits"]
        e32 = t.rel_l2(r32, ref)
        tol = max({"bf16": 1e-2, "f16": 2e-3, "tf32": 1e-3}[cdt], 2 * e_amp) if cdt else max(1e-4, 10 * e32)
        e = t.check_close(cname + ".logits", y, ref, tol,
                          " (PyTorch fp32 %.1e;%s vs PyTorch fp32 %.1e; %.1f s)" %
                          (e32, " PyTorch %s %.1e;" % (cdt if cdt == "tf32" else cdt + " autocast", e_amp) if cdt else "",
                           t.rel_l2(y, r32), r.secs))
        if e > tol:
            print("#   reproduce: %s; input = tests/golden/common.seeded_input(shape=%s, seed=%d); %s"
                  % (recipe, tuple(x.shape), seed * 10 + i, r.shell()), flush=True)
        if tuple(y.shape) != tuple(ref.shape) or not bool(torch.isfinite(y).all()):
            t.fail(cname + ".top1", "no usable logits")
            continue
        err = (y.double() - ref).abs().max(dim=1).values
        top2 = ref.topk(2, dim=1)
        gap = top2.values[:, 0] - top2.values[:, 1]
        judged = gap > 2 * err
        same = y.argmax(dim=1) == ref.argmax(dim=1)
        bad = (judged & ~same).nonzero().flatten().tolist()
        ties = int((~judged).sum())
        t.check(cname + ".top1", not bad, "%d/%d identical%s" % (int(judged.sum()), n, ", %d near ties" % ties if ties else ""),
                "images %s: ours %s, PyTorch %s" % (bad, y.argmax(dim=1)[bad].tolist(), ref.argmax(dim=1)[bad].tolist()))
    t.rm("w.safetensors", "x.safetensors", "y.safetensors")
    timings.append((name, t_torch, t_ours))
    print("# %s: PyTorch %.1f s (build, fp32, fp64), cnn %.1f s" % (name, t_torch, t_ours), flush=True)
print("# total: PyTorch %.1f s, cnn %.1f s" % (sum(x[1] for x in timings), sum(x[2] for x in timings)))
t.finish()
