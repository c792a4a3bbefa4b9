#!/usr/bin/env python3
"""make_jpegs.py — an ImageNet-shaped folder of JPEGs for the input-pipeline benchmarks, made from
scikit-image's photos (Debian's python3-skimage; nothing downloaded): N images of about 500x375 (ImageNet's
typical size; a third of them portrait 375x500), each a random crop of a photo resized to that size with PIL, with
sensor-like noise added (sigma 10; without it the upscaled crops are too smooth and compress to a third of an
ImageNet JPEG's ~110 KB), saved at quality 90 with 4:2:0 chroma subsampling, spread over C class folders.

  python3 bench/make_jpegs.py OUT_DIR [--images N] [--classes C] [--seed S] [--photos DIR]   # OUT_DIR/train/c000/...

--photos: where the source photos are (default scikit-image's data folder; on a machine without it, a copy of
those files). Images are made by a pool of processes, one per CPU.
"""
import argparse
import os
import random

import numpy as np
from PIL import Image

SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "motorcycle_right.png",
          "hubble_deep_field.jpg", "retina.jpg", "color.png", "ihc.png", "horse.png", "camera.png", "brick.png",
          "grass.png", "gravel.png", "coins.png"]

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--images", type=int, default=512)
ap.add_argument("--classes", type=int, default=8)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--photos", default=SKIMAGE)
a = ap.parse_args()
srcs = [Image.open(os.path.join(a.photos, p)).convert("RGB") for p in PHOTOS if os.path.exists(os.path.join(a.photos, p))]
if not srcs:
    raise SystemExit("make_jpegs: no photos in %s (apt-get install python3-skimage, or --photos DIR)" % a.photos)


def make(i):
    rng = random.Random(a.seed * 1000003 + i)
    src = srcs[i % len(srcs)]
    w, h = (500, 375) if i % 3 else (375, 500)
    s = rng.uniform(0.5, 1.0)
    cw, ch = max(16, int(src.width * s)), max(16, int(src.height * s))
    x, y = rng.randint(0, src.width - cw), rng.randint(0, src.height - ch)
    im = src.crop((x, y, x + cw, y + ch)).resize((w, h), Image.BICUBIC)
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    noise = np.random.default_rng(a.seed * 1000003 + i).normal(0, 10, (h, w, 3))
    im = Image.fromarray(np.clip(np.asarray(im, dtype=np.float32) + noise, 0, 255).astype(np.uint8))
    d = os.path.join(a.out, "train", "c%03d" % (i % a.classes))
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, "img%06d.jpg" % i)
    im.save(p, quality=90, subsampling=2)
    return os.path.getsize(p)


import multiprocessing  # noqa: E402

with multiprocessing.Pool() as pool:
    total = sum(pool.map(make, range(a.images), chunksize=16))
print("make_jpegs: %d JPEGs in %s/train (%d classes), %.0f KB on average" % (a.images, a.out, a.classes,
                                                                         total / 1024 / max(1, a.images)))
