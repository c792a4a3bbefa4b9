#!/usr/bin/env python3
"""torch2st.py — write a torchvision model's state_dict as safetensors, for `cnn --weights`.

  python3 tools/torch2st.py --arch resnet50 [--num-classes N] [--stem cifar] [--seed S] [--randomize-bn] OUT
      builds torchvision.models.<arch>(weights=None, num_classes=N) from seed S (never pretrained weights; the
      CIFAR stem is conv1 = Conv2d(3, 64, 3, 1, 1, bias=False) and no max-pool, names unchanged) and writes
      its state_dict. --randomize-bn gives every BatchNorm random weight/bias/running_mean/running_var (var > 0)
      and num_batches_tracked, so eval-mode BN folding is really exercised (tools/models.py says how).
  python3 tools/torch2st.py --state-dict model.pt OUT
      converts a saved state_dict (torch.load with weights_only=True: no pickled code is run). A checkpoint dict
      holding the state_dict under "state_dict" or "model" is accepted; a "module." prefix on every key (DDP) is
      removed.
  --dtype f32|f16|bf16 converts the floating-point tensors (default: keep them as they are; I64
  num_batches_tracked stays I64). The metadata records the tool, torch/torchvision versions and the recipe.

The same models are available to Python code: `sys.path.insert(0, "tools"); import models; models.build(...)`.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import models  # noqa: E402
import st  # noqa: E402

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def load_state_dict(path):
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:
        sys.exit("torch2st: this torch (%s) has no torch.load(weights_only=True); refusing to unpickle %s"
                 % (torch.__version__, path))
    except Exception as e:  # noqa: BLE001 - report any load failure as one line
        sys.exit("torch2st: %s: cannot load as a weights-only state_dict: %s" % (path, str(e).splitlines()[0]))
    if isinstance(obj, dict):
        for k in ("state_dict", "model"):
            if k in obj and isinstance(obj[k], dict):
                obj = obj[k]
                break
    if not isinstance(obj, dict) or not obj:
        sys.exit("torch2st: %s: not a state_dict (a dict of tensors)" % path)
    bad = [k for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if bad:
        sys.exit("torch2st: %s: %d entries are not tensors (e.g. %r)" % (path, len(bad), bad[0]))
    if all(k.startswith("module.") for k in obj):
        print("torch2st: removing the 'module.' prefix of every key", file=sys.stderr)
        obj = {k[len("module."):]: v for k, v in obj.items()}
    return obj


def convert(sd, dtype):
    out = {}
    for k, v in sd.items():
        v = v.detach().cpu()
        if dtype is not None and v.is_floating_point():
            v = v.to(dtype)
        out[k] = v.contiguous()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--arch", choices=models.ARCHS, help="build this torchvision model from --seed")
    src.add_argument("--state-dict", metavar="PT", help="convert this saved state_dict (.pt/.pth)")
    ap.add_argument("--num-classes", type=int, default=None, help="classifier width (default 1000; 10 with --stem cifar)")
    ap.add_argument("--stem", choices=["imagenet", "cifar"], default="imagenet", help="ResNet stem")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed before building (default 0)")
    ap.add_argument("--randomize-bn", action="store_true", help="random BN parameters and running statistics")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="convert floating tensors")
    ap.add_argument("out", help="output .safetensors")
    a = ap.parse_args(argv)

    meta = {"tool": "tools/torch2st.py", "torch": torch.__version__}
    if a.arch:
        import torchvision
        n = a.num_classes if a.num_classes is not None else (10 if a.stem == "cifar" else 1000)
        if n < 1:
            ap.error("--num-classes must be >= 1")
        try:
            m = models.build(a.arch, num_classes=n, stem=a.stem, seed=a.seed, randomize_bn_params=a.randomize_bn)
        except ValueError as e:
            ap.error(str(e))
        sd = m.state_dict()
        meta.update({"torchvision": torchvision.__version__, "arch": a.arch, "num_classes": str(n), "stem": a.stem,
                     "seed": str(a.seed), "randomize_bn": str(int(a.randomize_bn))})
    else:
        if a.num_classes is not None or a.stem != "imagenet" or a.randomize_bn:
            ap.error("--num-classes/--stem/--randomize-bn go with --arch, not --state-dict")
        sd = load_state_dict(a.state_dict)
        meta["source"] = os.path.basename(a.state_dict)
    sd = convert(sd, DTYPES.get(a.dtype))
    tmp = a.out + ".tmp"
    st.save_file(sd, tmp, metadata=meta)
    os.replace(tmp, a.out)
    nparam = sum(v.numel() for k, v in sd.items() if not k.endswith("num_batches_tracked"))
    print("torch2st: wrote %s: %d tensors, %d values" % (a.out, len(sd), nparam), file=sys.stderr)


if __name__ == "__main__":
    main()
