#!/usr/bin/env bash
# bench/data_pipeline.sh — issue 28's input-pipeline figures on a GPU machine in one call (BENCHMARKS.md):
#   1. decode + resize + crop images/s of ImageNet-sized JPEGs (bench/make_jpegs.py: ~500x375) with 1, 2, 4, 8 and
#      16 decode threads, training (RandomResizedCrop + flip) and evaluation (Resize + CenterCrop) transforms;
#   2. ResNet-50 bf16 training at batch 256 from that JPEG folder against `cnn bench --mode train` (the same step on
#      data already on the GPU): the ratio, and the share of the step spent on data;
#   3. CIFAR-sized data (the built-in uint8 set, whole on the GPU, one gather + augment kernel per batch): the share
#      of ResNet-18's step time spent on the input pipeline.
# Ends with a summary. Environment: IMAGES (4096), PHOTOS (source photos: scikit-image's data folder, else
# data/photos in the tree), PYTHON (one with numpy and PIL), WORK (/tmp/cnn-data-bench).
set -u
cd "$(dirname "$0")/.."
IMAGES=${IMAGES:-4096}
WORK=${WORK:-/tmp/cnn-data-bench}
PHOTOS=${PHOTOS:-/usr/lib/python3/dist-packages/skimage/data}
[ -d "$PHOTOS" ] || PHOTOS=data/photos
PYTHON=${PYTHON:-python3}
make -j"$(nproc)" >"$WORK.build.log" 2>&1 || { tail -20 "$WORK.build.log"; exit 1; }
echo "== machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), commit $(git rev-parse --short HEAD 2>/dev/null)"
echo "   nvJPEG in /usr/local/cuda/lib64: $(ls /usr/local/cuda/lib64 2>/dev/null | grep -i nvjpeg | tr '\n' ' ')"
rm -rf "$WORK" && mkdir -p "$WORK"
"$PYTHON" bench/make_jpegs.py "$WORK/jpegs" --images "$IMAGES" --classes 100 --photos "$PHOTOS" || exit 1

echo "== 1. decode + resize + crop (cnn bench --mode data), batches of 256, 224x224 out"
for w in 1 2 4 8 16; do
    build/cnn bench --mode data --data folder:"$WORK/jpegs" --workers $w --batch 256 --repeat 8 --warmup 2 | tee "$WORK/data_$w.txt"
done

echo "== 2. ResNet-50 bf16 training, batch 256: data on the GPU (cnn bench) vs the JPEG folder (cnn train)"
build/cnn bench --model resnet50 --mode train --batch 256 --dtype bf16 --device cuda --repeat 10 --warmup 3 -o md | tee "$WORK/bench_r50.txt"
build/cnn train --model resnet50 --data folder:"$WORK/jpegs" --batch 256 --epochs 4 --eval-size 0 --dtype bf16 \
    --device cuda --no-progress --out "$WORK/r50" | tee "$WORK/train_r50.txt"

echo "== 3. CIFAR-sized uint8 data whole on the GPU: ResNet-18 (CIFAR stem) bf16, batch 512"
build/cnn train --model resnet18 --stem cifar --data synthetic --train-size 30720 --epochs 3 --batch 512 --dtype bf16 \
    --device cuda --eval-size 0 --no-progress --out "$WORK/r18" | tee "$WORK/train_r18.txt"

echo
echo "== summary"
for w in 1 2 4 8 16; do
    awk -v w=$w '/train RandomResizedCrop/ { t = $5 } /eval  Resize/ { e = $6 }
        END { printf "   decode threads %2d: train transform %8.0f images/s, eval transform %8.0f images/s\n", w, t, e }' "$WORK/data_$w.txt"
done
echo "   ResNet-50 bf16 b256: cnn bench --mode train row: $(grep -m1 resnet50 "$WORK/bench_r50.txt")"
echo "   ResNet-50 bf16 b256 from JPEGs, per epoch (the first includes compilation): "
grep '^epoch' "$WORK/train_r50.txt" | sed 's/^/      /'
echo "   ResNet-18 CIFAR bf16 b512 on uint8 data on the GPU, per epoch:"
grep '^epoch' "$WORK/train_r18.txt" | sed 's/^/      /'
echo "   (ratio = the last JPEG epoch's img/s over bench's img/s; data % = time the training loop spent preparing or"
echo "    waiting for batches)"
