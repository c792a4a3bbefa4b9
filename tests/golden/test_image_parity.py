#!/usr/bin/env python3
"""test_image_parity.py — our picture pipeline against torchvision's PIL pipeline (issue 28's preprocessing parity).

On real photos (scikit-image's data folder, Debian's python3-skimage: JPEG and PNG, RGB, grayscale, palette, RGBA)
and variants made from them with PIL (CMYK JPEG, palette PNG, grayscale JPEG, 16-bit grayscale and RGB PNGs, odd
sizes; tests/cli/mkimages.py photos), `cnn infer --input DIR --save-input X` writes the tensor the model sees, and
torchvision computes Compose([Resize(256), CenterCrop(224), ToTensor(), Normalize(ImageNet mean, std)]) on
Image.open(f).convert('RGB') for the same files:
  * per image and over all, the max and mean absolute difference of the two tensors. Tolerance: max <= 1/255/0.225
    (one uint8 step after normalisation; a different libjpeg-turbo or Pillow build may round one pixel differently)
    and mean <= 1e-4; on Debian's Pillow and libjpeg-turbo every value is identical (the figure is printed);
  * ResNet-50 (torchvision, seeded random weights with random BN statistics, `tools/torch2st.py --arch resnet50
    --seed 7 --randomize-bn`): our top-1 per image equals torchvision's on its own tensor, and the logits agree
    within rel-L2 1e-4.
Also `-o json` and `-o csv` parse and name the same top-1 classes. SKIPs without PyTorch or scikit-image's photos.
"""
import csv
import io
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, T  # noqa: E402

t = T("image_parity")
torch = t.need_torch()
t.need_binary()
import models  # noqa: E402
import st  # noqa: E402

try:
    from PIL import Image
    import torchvision.transforms as TT
except ImportError as e:
    t.skip_all("PIL/torchvision.transforms not importable (%s)" % e)
if not os.path.isdir("/usr/lib/python3/dist-packages/skimage/data"):
    t.skip_all("scikit-image's photos not installed (apt-get install python3-skimage)")

photos = t.path("photos")
subprocess.run([sys.executable, os.path.join(ROOT, "tests", "cli", "mkimages.py"), "photos", photos], check=True)
files = sorted(os.listdir(photos))
weights = t.path("r50.safetensors")
m = models.build("resnet50", num_classes=1000, stem="imagenet", seed=7, randomize_bn_params=True).eval()
st.save_file(m.state_dict(), weights)

r = t.cnn("infer", "--model", "resnet50", "--weights", weights, "--input", photos, "--save-input", t.path("x.safetensors"),
          "--output", t.path("y.safetensors"), "-o", "json", "--batch", "8")
if r.rc != 0:
    t.fail("infer", r.why())
    t.finish()
ours_x = st.load_file(t.path("x.safetensors"))["input"]
ours_y = st.load_file(t.path("y.safetensors"))["logits"]
listed = [os.path.basename(e["file"]) for e in json.loads(r.out)]
t.check("order", listed == files, "%d files in sorted order" % len(files), "engine order %s != %s" % (listed, files))

tf = TT.Compose([TT.Resize(256), TT.CenterCrop(224), TT.ToTensor(),
                 TT.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ref_x = torch.stack([tf(Image.open(os.path.join(photos, f)).convert("RGB")) for f in files])
step = 1.0 / 255 / 0.225
d = (ours_x.double() - ref_x.double()).abs()
for i, f in enumerate(files):
    mode = Image.open(os.path.join(photos, f)).mode
    mx, mean = float(d[i].max()), float(d[i].mean())
    t.check("tensor.%s" % f, mx <= step + 1e-6 and mean <= 1e-4, "(%s) max |d| %.3g mean %.3g" % (mode, mx, mean),
            "(%s) max |d| %.4g (tol %.4g), mean %.4g (tol 1e-4)" % (mode, mx, step, mean))
t.check("tensor.all", float(d.max()) <= step + 1e-6 and float(d.mean()) <= 1e-4,
        "%d images of 3x224x224: max |d| %.3g, mean |d| %.3g (tolerances %.4g, 1e-4)" % (len(files), float(d.max()),
                                                                                  float(d.mean()), step),
        "max |d| %.4g, mean |d| %.4g" % (float(d.max()), float(d.mean())))

with torch.no_grad():
    ref_y = m(ref_x)
t.check_close("resnet50.logits", ours_y, ref_y, 1e-4)
ours_top, ref_top = ours_y.argmax(1).tolist(), ref_y.argmax(1).tolist()
same = sum(a == b for a, b in zip(ours_top, ref_top))
t.check("resnet50.top1", ours_top == ref_top, "%d/%d images: the same top-1 as torchvision" % (same, len(files)),
        "%d/%d agree; ours %s, torchvision %s" % (same, len(files), ours_top, ref_top))
json_top = [e["top"][0]["class"] for e in json.loads(r.out)]
t.check("json.top1", json_top == ours_top, "", "json top-1 %s != logits' %s" % (json_top, ours_top))

r2 = t.cnn("infer", "--model", "resnet50", "--weights", weights, "--input", photos, "-o", "csv", "--batch", "8")
rows = list(csv.DictReader(io.StringIO(r2.out))) if r2.rc == 0 else []
csv_top = [int(x["class"]) for x in rows if x["rank"] == "1"]
t.check("csv.top1", r2.rc == 0 and csv_top == ours_top and len(rows) == 5 * len(files), "%d rows" % len(rows),
        r2.why() if r2.rc else "csv top-1 %s != %s" % (csv_top, ours_top))
t.finish()
