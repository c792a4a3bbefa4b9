#!/usr/bin/env bash
# bench/data_pipeline.sh — issue 28's input-pipeline figures in one call, written to
# bench/results/DATE-MACHINE-input-pipeline.md (BENCHMARKS.md's "Input pipeline" section) and printed last:
#   1. decode + resize + crop of ImageNet-sized JPEGs (bench/make_jpegs.py: ~500x375, made from scikit-image's photos)
#      by 1, 2, 4, ... decode threads (`cnn bench --mode data`), the training transform (RandomResizedCrop + flip,
#      DCT-domain shrinking) and the evaluation one (Resize + CenterCrop at full decode): images/s, and images per
#      CPU-second of the process (what one core delivers, whatever else the machine runs);
#   2. (GPU) ResNet-50 bf16 training at batch 256 from that folder (`cnn train`, 4 epochs), JPEGs decoded on the CPU
#      (--decode cpu), on the GPU by nvJPEG (--decode gpu; skipped, and said, where nvJPEG does not load) and by both
#      (--decode mixed: the decode threads take a share of each batch), against
#      the same step on data already on the GPU (`cnn bench --mode train`): img/s of each (epoch 4's line: its steps
#      only; the checkpoint after each epoch is timed apart) and the share of the loop spent on data;
#   3. (GPU) CIFAR-sized uint8 data whole on the GPU (one gather + augment kernel per batch): ResNet-18 (CIFAR stem)
#      bf16 at batch 512, the share of its step time spent on the input pipeline.
# Environment: IMAGES (8192: 32 steps of 256 per epoch), THREADS (decode thread counts, default "1 2 4 8 16"), CPU_ONLY=1 (parts 2 and 3 off),
# MACHINE (file name tag; default the GPU's name, or cpu-<N>c), PHOTOS (source photos: scikit-image's data folder,
# else data/photos in the tree), PYTHON (one with numpy and PIL), WORK (/tmp/cnn-data-bench).
set -u
cd "$(dirname "$0")/.."
IMAGES=${IMAGES:-8192}
THREADS=${THREADS:-1 2 4 8 16}
WORK=${WORK:-/tmp/cnn-data-bench}
PHOTOS=${PHOTOS:-/usr/lib/python3/dist-packages/skimage/data}
[ -d "$PHOTOS" ] || PHOTOS=data/photos
PYTHON=${PYTHON:-python3}
make -j"$(nproc)" >"$WORK.build.log" 2>&1 || { tail -20 "$WORK.build.log"; exit 1; }
gpu=""
[ -z "${CPU_ONLY:-}" ] && gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
MACHINE=${MACHINE:-$( [ -n "$gpu" ] && echo "$gpu" | tr ' ' '-' || echo "cpu-$(nproc)c")}
cpu_name=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
RES=bench/results/$(date -u +%F)-$MACHINE-input-pipeline.md
rm -rf "$WORK" && mkdir -p "$WORK"
"$PYTHON" bench/make_jpegs.py "$WORK/jpegs" --images "$IMAGES" --classes 100 --photos "$PHOTOS" | tee "$WORK/make.txt" || exit 1
load=$(cut -d' ' -f1-3 /proc/loadavg)

echo "== 1. decode + resize + crop (cnn bench --mode data), batches of 256, 224x224 out"
for w in $THREADS; do
    build/cnn bench --mode data --data folder:"$WORK/jpegs" --workers "$w" --batch 256 --repeat 8 --warmup 2 | tee "$WORK/data_$w.txt"
done
if [ -n "$gpu" ]; then
    echo "== 2. ResNet-50 bf16 training, batch 256: data on the GPU (cnn bench) vs the JPEG folder (cnn train)"
    build/cnn bench --model resnet50 --mode train --batch 256 --dtype bf16 --device cuda --repeat 10 --warmup 3 -o csv | tee "$WORK/bench_r50.txt"
    for dec in cpu gpu mixed; do
        build/cnn train --model resnet50 --data folder:"$WORK/jpegs" --batch 256 --epochs 4 --eval-size 0 --dtype bf16 \
            --device cuda --decode $dec --no-progress --out "$WORK/r50_$dec" 2>&1 | tee "$WORK/train_r50_$dec.txt"
    done
    echo "== 3. CIFAR-sized uint8 data whole on the GPU: ResNet-18 (CIFAR stem) bf16, batch 512"
    build/cnn train --model resnet18 --stem cifar --data synthetic --train-size 30720 --epochs 3 --batch 512 --dtype bf16 \
        --device cuda --eval-size 0 --no-progress --out "$WORK/r18" | tee "$WORK/train_r18.txt"
fi

{
    echo "### $MACHINE ($(date -u +%F), commit $commit)"
    echo
    echo "- CPU: $cpu_name, $(nproc) CPUs; load average at the start $load (on a shared machine images/s follow the load; images per CPU-second, what one core delivers, much less)"
    echo "- images: $(tail -n1 "$WORK/make.txt" | sed 's/^make_jpegs: //'); 224x224 out, batches of 256"
    echo "- regenerate: \`$( [ -n "${CPU_ONLY:-}" ] && echo "CPU_ONLY=1 ")THREADS=\"$THREADS\" bash bench/data_pipeline.sh\`"
    echo
    echo "| decode threads | train transform images/s | per CPU-second | eval transform images/s | per CPU-second |"
    echo "|---|---|---|---|---|"
    for w in $THREADS; do
        awk -v w="$w" '/train RandomResizedCrop/ { t = $5; tc = $7 } /eval  Resize/ { e = $6; ec = $8 }
            END { printf "| %s | %s | %s | %s | %s |\n", w, t, tc, e, ec }' "$WORK/data_$w.txt"
    done
    if [ -n "$gpu" ]; then
        syn=$(awk -F, 'NR > 1 && /resnet50/ { for (i = 1; i <= NF; i++) if (h[i] == "images_per_s") print $i } NR == 1 { for (i = 1; i <= NF; i++) h[i] = $i }' "$WORK/bench_r50.txt" | head -n1)
        jpg_cpu=$(grep '^epoch 4' "$WORK/train_r50_cpu.txt" | sed -n 's/.*  \([0-9]*\) img\/s  data \([0-9.]*\)%.*/\1 \2/p')
        jpg_gpu=$(grep '^epoch 4' "$WORK/train_r50_gpu.txt" | sed -n 's/.*  \([0-9]*\) img\/s  data \([0-9.]*\)%.*/\1 \2/p')
        jpg_mixed=$(grep '^epoch 4' "$WORK/train_r50_mixed.txt" | sed -n 's/.*  \([0-9]*\) img\/s  data \([0-9.]*\)%.*/\1 \2/p')
        ckpt=$(grep '^epoch 4' "$WORK/train_r50_cpu.txt" | sed -n 's/.*checkpoint \([0-9.]*\) s.*/\1/p')
        r18=$(grep '^epoch 3' "$WORK/train_r18.txt" | sed -n 's/.*  \([0-9]*\) img\/s  data \([0-9.]*\)%.*/\1 \2/p')
        echo
        echo "| training | images/s | data share of the loop | ratio to data on the GPU |"
        echo "|---|---|---|---|"
        echo "| ResNet-50 bf16 b256, data on the GPU (\`cnn bench --mode train\`) | ${syn:-?} | - | 1 |"
        echo "$jpg_cpu $syn" | awk '{ printf "| ResNet-50 bf16 b256 from the JPEG folder, epoch 4, CPU decode (`--decode cpu`) | %s | %s%% | %.3f |\n", $1, $2, ($3 > 0 ? $1 / $3 : 0) }'
        if [ -n "$jpg_gpu" ]; then
            echo "$jpg_gpu $syn" | awk '{ printf "| ResNet-50 bf16 b256 from the JPEG folder, epoch 4, GPU decode (`--decode gpu`, nvJPEG) | %s | %s%% | %.3f |\n", $1, $2, ($3 > 0 ? $1 / $3 : 0) }'
        else
            echo "| ResNet-50 bf16 b256 from the JPEG folder, GPU decode (\`--decode gpu\`) | not run: $(tail -n1 "$WORK/train_r50_gpu.txt" | tail -c 200 | tr '|' '/') | - | - |"
        fi
        if [ -n "$jpg_mixed" ]; then
            echo "$jpg_mixed $syn" | awk '{ printf "| ResNet-50 bf16 b256 from the JPEG folder, epoch 4, GPU and CPU decode (`--decode mixed`, nvJPEG + the decode threads) | %s | %s%% | %.3f |\n", $1, $2, ($3 > 0 ? $1 / $3 : 0) }'
        fi
        echo "$r18" | awk '{ printf "| ResNet-18 CIFAR bf16 b512, uint8 data on the GPU, epoch 3 | %s | %s%% | - |\n", $1, $2 }'
        echo
        echo "Epoch lines count their steps only; the ResNet-50 checkpoint written after each epoch took ${ckpt:-?} s (not in the figures above)."
    fi
} >"$RES"
echo
echo "== summary ($RES)"
cat "$RES"
