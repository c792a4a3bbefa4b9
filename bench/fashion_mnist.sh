#!/usr/bin/env bash
# bench/fashion_mnist.sh — issue 28's accuracy acceptance in one GPU call: README's Fashion-MNIST recipe (ResNet-18,
# CIFAR stem, bf16) with our engine, then its PyTorch twin (bench/fashion_mnist_torch.py: same model, data on the
# GPU, augmentation, schedule and precision), and a summary of both: test top-1 and wall time.
#
#   bash bench/fashion_mnist.sh            # builds first; ends with the two RESULT lines
#
# Environment: DATA (the IDX files; default /usr/share/datasets/fashion-mnist, else data/fashion-mnist in the tree,
# a copy of Debian's dataset-fashion-mnist files), EPOCHS (36), BATCH (512), LR (0.2), WARMUP (468 steps = 4 epochs),
# PAD (2), PYTHON (the Python with torch + torchvision; default: the Makefile's choice), SKIP_TORCH=1,
# FMNIST_OUT (the run directory; default runs/fmnist). The summary also goes to
# bench/results/DATE-MACHINE-fashion-mnist.md (BENCHMARKS.md's "Accuracy on real data" section).
set -u
cd "$(dirname "$0")/.."
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || [ -f "$DATA/train-images-idx3-ubyte" ] || DATA=data/fashion-mnist
EPOCHS=${EPOCHS:-36} BATCH=${BATCH:-512} LR=${LR:-0.2} WARMUP=${WARMUP:-468} PAD=${PAD:-2} OUT=${FMNIST_OUT:-runs/fmnist}
make -j"$(nproc)" >/tmp/fmnist-build.log 2>&1 || { tail -20 /tmp/fmnist-build.log; exit 1; }
if [ -z "${PYTHON:-}" ]; then
    for p in python3 /usr/bin/python3; do "$p" -c 'import torch, torchvision' 2>/dev/null && { PYTHON=$p; break; }; done
fi
PYTHON=${PYTHON:-python3}
echo "== ours: $(git rev-parse --short HEAD 2>/dev/null), data $DATA"
ls /usr/local/cuda/lib64 2>/dev/null | grep -i nvjpeg | head -n 3 | sed 's/^/   nvjpeg present: /'
t0=$(date +%s)
build/cnn train --model resnet18 --stem cifar --data fashion-mnist:"$DATA" --epochs "$EPOCHS" --batch "$BATCH" \
    --lr "$LR" --nesterov --weight-decay 5e-4 --label-smoothing 0.1 --warmup "$WARMUP" --schedule cosine --pad "$PAD" \
    --dtype bf16 --device cuda --out "$OUT" --no-progress
rc=$?
t1=$(date +%s)
ours_top1=$(sed -n 's/.*"eval_top1":\([0-9.]*\).*/\1/p' "$OUT/metrics.jsonl" | tail -n1)
ours_line=$(awk -v a="${ours_top1:-0}" -v s=$((t1 - t0)) -v e="$EPOCHS" -v rc=$rc \
            'BEGIN { printf "RESULT ours  top1 %.2f%% total_s %d epochs %s (exit %d)", 100 * a, s, e, rc }')
torch_line="RESULT torch skipped (SKIP_TORCH=1)"
if [ -z "${SKIP_TORCH:-}" ]; then
    echo "== PyTorch twin ($PYTHON)"
    "$PYTHON" bench/fashion_mnist_torch.py --data "$DATA" --epochs "$EPOCHS" --batch "$BATCH" --lr "$LR" \
        --warmup "$WARMUP" --pad "$PAD" | tee /tmp/fmnist-torch.log
    torch_line=$(grep '^RESULT torch' /tmp/fmnist-torch.log || echo "RESULT torch failed: $(tail -n 3 /tmp/fmnist-torch.log)")
fi
echo
echo "== summary (ResNet-18 CIFAR stem, Fashion-MNIST test set of 10000, bf16, batch $BATCH, $EPOCHS epochs)"
echo "$ours_line   (wall time of the whole cnn train command: compilation, tuning and per-epoch evaluation included)"
echo "$torch_line"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
MACHINE=${MACHINE:-$( [ -n "$gpu" ] && echo "$gpu" | tr ' ' '-' || echo "cpu-$(nproc)c")}
{
    echo "### $MACHINE ($(date -u +%F), commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)})"
    echo
    echo "ResNet-18 (CIFAR stem), Fashion-MNIST's 10000 test images, bf16, batch $BATCH, $EPOCHS epochs, one command:"
    echo "\`bash bench/fashion_mnist.sh\` (ours: README's recipe; PyTorch: bench/fashion_mnist_torch.py, the same recipe)."
    echo
    echo "- $ours_line"
    echo "- $torch_line"
} > "bench/results/$(date -u +%F)-$MACHINE-fashion-mnist.md"
