#!/usr/bin/env bash
# bench/training_md.sh — the training rows of BENCHMARKS.md in one GPU call: bench/train_passes.py (our step and each
# conv's three passes beside cuDNN's, PyTorch eager's step in the same process) for ResNet-50 b256, CIFAR ResNet-18
# b512 and VGG-16 b64, bf16, and torch.compile's step for the models in COMPILE, written to
# bench/results/DATE-MACHINE-training.md and printed (about 5 minutes on an H100).
# Environment: MODELS ("resnet50:256 resnet18:512:cifar vgg16:64"), COMPILE ("resnet50": the models whose
# torch.compile step is timed too, a minute of compilation each), REPEAT (20), WARMUP (5), PYTHON (one with torch;
# default python3), COMMIT (the commit to name; default git's HEAD).
set -u
cd "$(dirname "$0")/.."
MODELS=${MODELS:-resnet50:256 resnet18:512:cifar vgg16:64}
COMPILE=${COMPILE-resnet50} # "" for none
comp_note=""
[ -n "$COMPILE" ] && comp_note=" (and torch.compile's for $COMPILE)"
PYTHON=${PYTHON:-python3}
make -j"$(nproc)" >/tmp/training-md-build.log 2>&1 || { tail -20 /tmp/training-md-build.log; exit 1; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
[ -n "$gpu" ] || { echo "training_md.sh: no GPU (nvidia-smi found none)" >&2; exit 2; }
MACHINE=${MACHINE:-$(echo "$gpu" | tr ' ' '-')}
RES=bench/results/$(date -u +%F)-$MACHINE-training.md
tmp=$(mktemp)
{
    echo "### $MACHINE ($(date -u +%F), commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)})"
    echo
    echo "Our training step (\`cnn bench --mode train\`: forward, backward and optimizer, median of ${REPEAT:-20} steps)"
    echo "beside PyTorch eager's (autocast, channels_last, SGD momentum) in the same process, bf16$comp_note; each"
    echo "conv's three passes beside cuDNN's. Regenerate: \`bash bench/training_md.sh\`."
    echo
} >"$tmp"
rc=0
for spec in $MODELS; do
    IFS=: read -r model batch stem <<<"$spec"
    comp=""
    case " $COMPILE " in *" $model "*) [ -z "$stem" ] && comp=--compile ;; esac
    if ! "$PYTHON" bench/train_passes.py --model "$model" --batch "$batch" ${stem:+--stem "$stem"} $comp \
        --repeat "${REPEAT:-20}" --warmup "${WARMUP:-5}" >"$tmp.one" 2>"$tmp.err"; then
        echo "training_md.sh: $model b$batch failed: $(tail -n 3 "$tmp.err")" >&2
        rc=1
        continue
    fi
    sed 's/^## /#### /' "$tmp.one" | grep -v '^- our side took' >>"$tmp"
    echo >>"$tmp"
done
mv "$tmp" "$RES" && rm -f "$tmp.one" "$tmp.err"
cat "$RES"
exit $rc
