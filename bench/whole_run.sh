#!/usr/bin/env bash
# bench/whole_run.sh — a whole `cnn train` run against its PyTorch twin in one GPU call (ResNet-18, CIFAR stem,
# bf16): our command, then bench/train_twin.py (same model, data on the GPU, augmentation, schedule and precision),
# and a summary of both: test top-1 and wall time. Two sets:
#
#   bash bench/whole_run.sh [fashion-mnist]   README's Fashion-MNIST recipe, 36 epochs (issue 28's accuracy bar)
#   bash bench/whole_run.sh cifar10-synth     issue 27's whole run, 10 epochs of 50,000 images at batch 512, on
#                                             CIFAR-10's format and shapes: bench/make_cifar_synth.py's synthetic
#                                             images (CIFAR-10 cannot be downloaded here), so the times are CIFAR-10's
#                                             and the accuracies are not
#   bash bench/whole_run.sh fashion-mnist-50k issue 27's whole run on a real dataset: 10 epochs of Fashion-MNIST's
#                                             first 50,000 training images at batch 512, tested on its 10,000
#
# Builds first; ends with the two RESULT lines. The twin's every step and evaluation go to RUN_OUT/twin-metrics.jsonl
# beside our metrics.jsonl. One run of these recipes can end up to 3.5 points low on either side (a loss spike at the
# end of the warm-up; perf-log step 110): bench/whole_run_seeds.sh compares the two over several seeds.
#
# Environment: DATA (fashion-mnist: the IDX files, default /usr/share/datasets/fashion-mnist, else data/fashion-mnist
# in the tree; cifar10-synth: the batch files, made there when absent, default /tmp/cifar10-synth), EPOCHS, BATCH
# (512), LR (0.2), WARMUP (steps; for fashion-mnist-50k EPOCHS_50K and WARMUP_50K instead), PAD, SEED (0: both
# sides' weight initialisation, data order and augmentation, each side drawing them with its own generator),
# SKIP_BUILD=1 (no make first), PYTHON (the Python with torch + torchvision; default: the first that has them),
# SKIP_TORCH=1, RUN_OUT (the run directory; default runs/SET). The summary also goes to RESULT_FILE (default
# bench/results/DATE-MACHINE-SET.md, BENCHMARKS.md's sections of that name).
set -u
cd "$(dirname "$0")/.."
SET=${1:-fashion-mnist}
if [ -z "${PYTHON:-}" ]; then
    for p in python3 /usr/bin/python3; do "$p" -c 'import torch, torchvision' 2>/dev/null && { PYTHON=$p; break; }; done
fi
PYTHON=${PYTHON:-python3}
case $SET in
fashion-mnist | fashion-mnist-50k)
    DATA=${DATA:-/usr/share/datasets/fashion-mnist}
    [ -f "$DATA/train-images-idx3-ubyte.gz" ] || [ -f "$DATA/train-images-idx3-ubyte" ] || DATA=data/fashion-mnist
    SOURCE=fashion-mnist:$DATA FORMAT=idx
    EPOCHS=${EPOCHS:-36} WARMUP=${WARMUP:-468} PAD=${PAD:-2}
    WHAT="Fashion-MNIST's 10000 test images"
    HOW="ours: README's recipe"
    if [ "$SET" = fashion-mnist-50k ]; then
        EPOCHS=${EPOCHS_50K:-10} WARMUP=${WARMUP_50K:-97} TRAIN_SIZE=50000
        WHAT="Fashion-MNIST's first 50000 training images, its 10000 test images"
        HOW="ours: README's recipe over $EPOCHS epochs of 50,000 images, $WARMUP steps of warm-up (97: one epoch)"
    fi ;;
cifar10-synth)
    DATA=${DATA:-/tmp/cifar10-synth}
    [ -f "$DATA/test_batch.bin" ] || "$PYTHON" bench/make_cifar_synth.py "$DATA" || exit 1
    SOURCE=cifar10:$DATA FORMAT=cifar10
    EPOCHS=${EPOCHS:-10} WARMUP=${WARMUP:-97} PAD=${PAD:-4}
    WHAT="50000 training and 10000 test images of CIFAR-10's format and shapes, synthetic (bench/make_cifar_synth.py: the times are CIFAR-10's, the accuracies are not)"
    HOW="ours: README's recipe with CIFAR's padding, $EPOCHS epochs, one epoch of warm-up" ;;
*) echo "whole_run.sh: unknown set '$SET' (fashion-mnist, fashion-mnist-50k or cifar10-synth)" >&2; exit 2 ;;
esac
# CUDA_CACHE_DISABLE=1 changes nothing for us (our kernels are NVRTC cubins, kept in CNN_CACHE_DIR) but makes the
# twin's driver compile PTX again in every process (perf-log step 108: its training loop 26-39 s against 11-17 s): for
# a cold start of both, point CUDA_CACHE_PATH at an empty directory and CNN_CACHE_DIR at another instead
[ -n "${CUDA_CACHE_DISABLE:-}" ] && echo "whole_run.sh: CUDA_CACHE_DISABLE is set: it slows the PyTorch twin, not us;" \
    "for matched cold starts use empty CUDA_CACHE_PATH and CNN_CACHE_DIR directories" >&2
BATCH=${BATCH:-512} LR=${LR:-0.2} SEED=${SEED:-0} OUT=${RUN_OUT:-runs/$SET}
SIZE_ARGS=()
[ -n "${TRAIN_SIZE:-}" ] && SIZE_ARGS=(--train-size "$TRAIN_SIZE")
[ -n "${SKIP_BUILD:-}" ] || make -j"$(nproc)" >/tmp/whole-run-build.log 2>&1 || { tail -20 /tmp/whole-run-build.log; exit 1; }
echo "== ours: $(git rev-parse --short HEAD 2>/dev/null), data $DATA"
ls /usr/local/cuda/lib64 2>/dev/null | grep -i nvjpeg | head -n 3 | sed 's/^/   nvjpeg present: /'
t0=$(date +%s.%N)
build/cnn train --model resnet18 --stem cifar --data "$SOURCE" --epochs "$EPOCHS" --batch "$BATCH" \
    --lr "$LR" --nesterov --weight-decay 5e-4 --label-smoothing 0.1 --warmup "$WARMUP" --schedule cosine --pad "$PAD" \
    --dtype bf16 --device cuda --seed "$SEED" --out "$OUT" --no-progress "${SIZE_ARGS[@]}"
rc=$?
t1=$(date +%s.%N)
ours_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
ours_top1=$(sed -n 's/.*"eval_top1":\([0-9.]*\).*/\1/p' "$OUT/metrics.jsonl" 2>/dev/null | tail -n1)
ours_line=$(awk -v a="${ours_top1:-0}" -v s="$ours_s" -v e="$EPOCHS" -v rc=$rc \
            'BEGIN { printf "RESULT ours  top1 %.2f%% total_s %s epochs %s (exit %d)", 100 * a, s, e, rc }')
torch_line="RESULT torch skipped (SKIP_TORCH=1)"
if [ -z "${SKIP_TORCH:-}" ]; then
    echo "== PyTorch twin ($PYTHON)"
    t2=$(date +%s.%N)
    "$PYTHON" bench/train_twin.py --data "$DATA" --format "$FORMAT" --epochs "$EPOCHS" --batch "$BATCH" --lr "$LR" \
        --warmup "$WARMUP" --pad "$PAD" --seed "$SEED" --metrics "$OUT/twin-metrics.jsonl" "${SIZE_ARGS[@]}" | tee /tmp/whole-run-torch.log
    torch_s=$(awk -v a="$t2" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    torch_line=$(grep '^RESULT torch' /tmp/whole-run-torch.log || echo "RESULT torch failed: $(tail -n 3 /tmp/whole-run-torch.log)")
    # the twin's total_s starts after Python has imported torch; the process's wall time, as ours, is the ratio's
    case $torch_line in "RESULT torch top1"*)
        torch_line="$torch_line, process wall_s $torch_s; ours/torch wall $(awk -v a="$ours_s" -v b="$torch_s" 'BEGIN { printf "%.2f", a / b }')x" ;;
    esac
fi
echo
echo "== summary (ResNet-18 CIFAR stem, $WHAT, bf16, batch $BATCH, $EPOCHS epochs, seed $SEED)"
echo "$ours_line   (wall time of the whole cnn train process: compilation, tuning and per-epoch evaluation included)"
echo "$torch_line"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
MACHINE=${MACHINE:-$( [ -n "$gpu" ] && echo "$gpu" | tr ' ' '-' || echo "cpu-$(nproc)c")}
{
    echo "### $MACHINE ($(date -u +%F), commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)})"
    echo
    echo "ResNet-18 (CIFAR stem), $WHAT, bf16, batch $BATCH, $EPOCHS epochs, one command:"
    echo "\`bash bench/whole_run.sh $SET\` ($HOW; PyTorch: bench/train_twin.py, the same recipe)."
    echo
    echo "- $ours_line"
    echo "- $torch_line"
} > "${RESULT_FILE:-bench/results/$(date -u +%F)-$MACHINE-$SET.md}"
exit $rc  # ours' status: a failed run fails the benchmark
