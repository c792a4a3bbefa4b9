#!/usr/bin/env python3
"""make_cifar_synth.py — a synthetic stand-in for CIFAR-10 in its binary format, for timing a whole `cnn train` run
where CIFAR-10 itself cannot be downloaded (bench/whole_run.sh cifar10-synth): data_batch_1..5.bin (50,000 images) and
test_batch.bin (10,000), each record a label byte and 3 x 32 x 32 bytes (planes R, G, B), as the real files.

The images follow the idea of the engine's built-in `synthetic` set (src/core/data.c), not its exact pixels: ten
classes told apart by the orientation of a coloured grating, with phase, frequency, contrast, brightness, a colour
cast and pixel noise drawn per image. They time the run exactly as CIFAR-10 would (same shapes, same reader, same
steps); their accuracy says nothing about CIFAR-10's.

  python3 bench/make_cifar_synth.py OUT_DIR [--seed 0]
"""
import argparse
import os

import numpy as np

PALETTE = np.array([[1.0, 0.3, 0.3], [0.3, 1.0, 0.3], [0.3, 0.3, 1.0], [1.0, 1.0, 0.3], [1.0, 0.3, 1.0],
                    [0.3, 1.0, 1.0], [1.0, 0.6, 0.2], [0.6, 0.2, 1.0], [0.2, 0.6, 0.6], [0.8, 0.8, 0.8]])
RECORDS = 10000  # per file, as CIFAR-10's (the engine's reader takes whole files only)


def batch(rng):
    """RECORDS records of CIFAR-10's binary format, as one (RECORDS, 3073) uint8 array"""
    n = RECORDS
    label = rng.integers(0, 10, n)
    theta = label * np.pi / 10 + (rng.random(n) - 0.5) * np.pi / 30
    freq = 2.0 + 2.5 * rng.random(n)
    phase = 2 * np.pi * rng.random(n)
    amp = 45.0 + 45.0 * rng.random(n)
    bright = 100.0 + 60.0 * rng.random(n)
    cast = np.where(rng.random(n) < 0.6, label, rng.integers(0, 10, n))  # 60 % the class's colour
    y, x = np.mgrid[0:32, 0:32]
    g = np.sin(2 * np.pi * freq[:, None, None] * (x * np.cos(theta)[:, None, None] + y * np.sin(theta)[:, None, None])
               / 32 + phase[:, None, None])
    v = (bright[:, None, None, None] + amp[:, None, None, None] * g[:, None] * PALETTE[label][:, :, None, None]
         + 25.0 * (PALETTE[cast] - 0.6)[:, :, None, None] + 18.0 * (2 * rng.random((n, 3, 32, 32)) - 1))
    rec = np.empty((n, 3073), np.uint8)
    rec[:, 0] = label
    rec[:, 1:] = np.clip(np.rint(v), 0, 255).astype(np.uint8).reshape(n, 3072)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    for name in ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]:
        path = os.path.join(a.out, name)
        batch(rng).tofile(path + ".tmp")
        os.replace(path + ".tmp", path)
    print("make_cifar_synth: 50000 training and 10000 test images in %s" % a.out)


if __name__ == "__main__":
    main()
