"""models.py — the torchvision models of the cnn.c zoo, built reproducibly from a seed (for tools/torch2st.py and the
golden tests in tests/golden/).

    import models
    m = models.build("resnet50", num_classes=1000, stem="imagenet", seed=0, randomize_bn=True)

build() seeds the global torch RNG with `seed`, constructs `torchvision.models.<arch>(weights=None,
num_classes=N)` (never pretrained weights), applies the CIFAR stem when asked (ResNets only:
conv1 = Conv2d(3, 64, 3, 1, 1, bias=False), maxpool = Identity; parameter names unchanged), and with
randomize_bn gives every BatchNorm random affine parameters and running statistics, so that eval-mode BN
folding is really exercised (fresh torchvision BN is the identity: weight 1, bias 0, mean 0, var 1).
Running statistics are drawn around the true batch statistics of a fixed random input (a float64 calibration pass), so
activations stay O(1) through 150 layers and the logits are well conditioned; then perturbed so they are not
exactly the batch statistics.
"""
import torch
import torch.nn as nn
import torchvision

ARCHS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
         "vgg11", "vgg13", "vgg16", "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn"]


def apply_cifar_stem(m):
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    # the same init torchvision gives conv1
    nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    return m


def randomize_bn(m, seed, calib_shape=(2, 3, 64, 64)):
    """Random BN weight/bias/running stats (running_var > 0) and num_batches_tracked, from `seed`."""
    bns = [x for x in m.modules() if isinstance(x, nn.BatchNorm2d)]
    if not bns:
        return m
    g = torch.Generator().manual_seed(seed * 7919 + 17)
    with torch.no_grad():
        for bn in bns:
            c = bn.num_features
            bn.weight.copy_(torch.rand(c, generator=g) + 0.5)             # U(0.5, 1.5)
            bn.bias.copy_(0.2 * torch.randn(c, generator=g))               # N(0, 0.2^2)
        # calibration: running stats := batch statistics of a fixed random input, layer by layer
        saved = [(bn.momentum, bn.training) for bn in bns]
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average: one batch -> exactly its statistics
        # in float64 on one thread, so the statistics do not depend on the thread count or the BLAS
        was_training, threads = m.training, torch.get_num_threads()
        torch.set_num_threads(1)
        m.double().train()
        x = torch.randn(*calib_shape, generator=g)
        m(x.double())
        m.float().train(was_training)
        torch.set_num_threads(threads)
        for bn, (mom, _) in zip(bns, saved):
            bn.momentum = mom
            c = bn.num_features
            sd = bn.running_var.clamp_min(1e-3).sqrt()
            bn.running_mean.add_(0.2 * sd * torch.randn(c, generator=g))   # shift by up to ~0.2 sd
            bn.running_var.mul_(torch.rand(c, generator=g) * 1.5 + 0.5)    # scale by U(0.5, 2.0)
            bn.num_batches_tracked.fill_(int(torch.randint(1, 100000, (1,), generator=g)))
    return m


def build(arch, num_classes=1000, stem="imagenet", seed=0, randomize_bn_params=False, calib_hw=None):
    """A torchvision model from `seed`; see the module docstring. calib_hw: (H, W) of the BN calibration input
    (default 64x64, 32x32 for the CIFAR stem)."""
    if arch not in ARCHS:
        raise ValueError("unknown arch %r (one of %s)" % (arch, " ".join(ARCHS)))
    if stem not in ("imagenet", "cifar"):
        raise ValueError("stem must be imagenet or cifar")
    if stem == "cifar" and not arch.startswith("resnet"):
        raise ValueError("--stem cifar is for ResNets only")
    torch.manual_seed(seed)
    m = getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)
    if stem == "cifar":
        apply_cifar_stem(m)
    if randomize_bn_params:
        hw = calib_hw or ((32, 32) if stem == "cifar" else (64, 64))
        randomize_bn(m, seed, (2, 3) + tuple(hw))
    return m.eval()


def set_dropout(m, p):
    """Set every nn.Dropout's probability (VGG classifier) to p."""
    for x in m.modules():
        if isinstance(x, nn.Dropout):
            x.p = p
    return m


def condition_bn(m, seed, shift=2.5, residual_gamma=(0.1, 0.3), fc_scale=0.1):
    """Make training-mode gradients well conditioned, for tests that compare gradients or training trajectories.

    A ReLU's derivative jumps at 0: when a pre-activation lies within rounding error of 0, two correct float32
    implementations can disagree on its mask and their gradients then differ by 1e-3..1e-2 (measured: PyTorch fp32
    vs fp64 on ResNet-50, batch 2 at 64x64, median 1e-2), and 20 SGD steps of ResNet-18 by 0.1 in loss. So:
    every BN bias := shift * weight (+ 0.1 * weight noise), which keeps BN+ReLU outputs about `shift` standard
    deviations away from 0; the BN that ends each residual branch (bn2 of BasicBlock, bn3 of Bottleneck,
    downsample.1) gets weight U(residual_gamma) so the residual stream does not grow with depth; the last
    classifier layer's weight is scaled by fc_scale so the softmax starts unsaturated. Eval-mode running
    statistics are untouched."""
    g = torch.Generator().manual_seed(seed * 104729 + 3)
    with torch.no_grad():
        for name, bn in m.named_modules():
            if not isinstance(bn, nn.BatchNorm2d):
                continue
            c = bn.num_features
            ends_branch = (name.endswith(".bn3") or name.endswith("downsample.1")
                           or (name.endswith(".bn2") and isinstance(m, torchvision.models.ResNet)
                               and isinstance(m.layer1[0], torchvision.models.resnet.BasicBlock)))
            if ends_branch and residual_gamma:
                lo, hi = residual_gamma
                bn.weight.copy_(lo + (hi - lo) * torch.rand(c, generator=g))
            bn.bias.copy_(bn.weight * (shift + 0.1 * torch.randn(c, generator=g)))
        last = m.fc if isinstance(m, torchvision.models.ResNet) else m.classifier[-1]
        last.weight.mul_(fc_scale)
    return m
