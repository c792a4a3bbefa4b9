#!/usr/bin/env bash
# bench/run.sh — the standard benchmark suite, both sides in one run on one machine, then the report.
#
#   bench/run.sh [--quick] [--max-autotune]     (make bench-gpu runs it after building)
#
# Runs `cnn bench` and bench/pytorch_bench.py over the standard suite (docs/BENCH.md), writes
# bench/results/<date>-<gpu>.json (all records), bench/results/<date>-<gpu>.md + plots, and regenerates
# BENCHMARKS.md from that JSON. On a machine without a GPU it runs the CPU section instead. The PyTorch side runs
# as one job list in one process (pytorch_bench.py --jobs), cuDNN's per-layer rows in two more (the report takes
# the faster per shape), then gpu_checks.py re-runs some rows in a fresh process. Each step's duration goes to
# the log and a summary at the end (the suite must stay under 8 minutes; docs/perf-log.md step 27 has its times).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
if [ -z "${PYTHON:-}" ]; then # the first Python with torch (a pip one on the GPU machine, Debian's here), as make's
    for p in python3 /usr/bin/python3; do "$p" -c 'import torch, torchvision' 2>/dev/null && { PYTHON=$p; break; }; done
fi
PYTHON=${PYTHON:-python3}
CNN=$BUILD/cnn
QUICK=0; MAXAT=0
for a in "$@"; do
    case $a in --quick) QUICK=1 ;; --max-autotune) MAXAT=1 ;; *) echo "unknown option $a" >&2; exit 2 ;; esac
done
REPEAT=${REPEAT:-20}; WARMUP=${WARMUP:-5}
[ $QUICK = 1 ] && { REPEAT=5; WARMUP=2; }
date=$(date -u +%Y-%m-%d)
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-' | tr -cd 'A-Za-z0-9_-')
    DEV=cuda
else
    gpu=cpu-$(nproc)c
    DEV=cpu
fi
mkdir -p bench/results
out=bench/results/$date-$gpu.json
tmp=$(mktemp)
log=bench/results/$date-$gpu.log
: >"$log"
steps=$(mktemp)
timed() { # name command...: runs it, logs its start and duration (the suite must stay under 8 minutes on a GPU)
    local name=$1 s=$SECONDS rc; shift
    echo "# [$((SECONDS - t0)) s] $name" >>"$log"
    "$@"
    rc=$?
    echo "$((SECONDS - s)) s  $name" >>"$steps"
    return $rc
}
ours() { # model stem batches dtype mode [extra]
    local stem=$2
    timed "cnn $*" "$CNN" bench --model "$1" --stem "$stem" --batch "$3" --dtype "$4" --mode "$5" --device $DEV \
        --repeat "$REPEAT" --warmup "$WARMUP" -o jsonl ${6:-} 2>>"$log" >>"$tmp" || echo "cnn bench $* failed (see $log)" >&2
}
jobs=$(mktemp)
theirs() { # model stem batches dtype mode impls [extra]: one line of the PyTorch side's job list, run by theirs_run
    echo "--model $1 --stem $2 --batch $3 --dtype $4 --mode $5 --impl $6 ${7:-}" >>"$jobs"
}
theirs_run() { # the job list in one process (one import of torch, one CUDA context, instead of one per line)
    timed "pytorch_bench.py: $(wc -l <"$jobs") job lines" "$PYTHON" bench/pytorch_bench.py --jobs "$jobs" \
        --repeat "$REPEAT" --warmup "$WARMUP" 2>>"$log" >>"$tmp" || echo "pytorch_bench.py --jobs failed (see $log)" >&2
    : >"$jobs"
}
t0=$SECONDS
if [ $DEV = cuda ]; then
    compile=compile; [ $MAXAT = 1 ] && compile=compile,compile-max
    # the GPU's measured matrix peak (cuBLAS bf16 and true fp32), for "% of peak" in the report
    timed peak "$PYTHON" bench/gpu_checks.py peak 2>>"$log" >>"$tmp" || echo "gpu_checks.py peak failed (see $log)" >&2
    # cold start: an empty kernel cache, so setup_s is compilation (+ tuning, graph capture) from nothing; -v puts
    # each compilation and tuning (with its time) into the log
    cold=$(mktemp -d)
    timed cold-start "$CNN" bench --model resnet50 --batch 256 --dtype bf16 --device cuda --repeat 5 --warmup 2 \
        --cache-dir "$cold" -v -o jsonl 2>>"$log" >"$cold.jsonl" || echo "cold-start bench failed" >&2
    sed 's/^{/{"cache":"cold",/' "$cold.jsonl" >>"$tmp"
    rm -f "$cold.jsonl"
    rm -rf "$cold"
    # inference, fp32 (true fp32 on both sides), tf32 (fp32 tensors, convolutions in TF32 on both sides) and bf16
    for dt in fp32 tf32 bf16; do
        ours resnet50 imagenet 1,16,64,256 $dt infer "$( [ $dt = bf16 ] && echo --layers)"
        ours resnet18 imagenet 1,64 $dt infer
        ours vgg16 imagenet 64 $dt infer
        [ $dt = tf32 ] || ours resnet18 cifar 1,10000 $dt infer
    done
    # per layer again, each step timed over at least 300 ms of runs (cuDNN's convs below by the same rule): both
    # sides at the clocks a sustained load settles at (docs/perf-log.md step 50)
    ours resnet50 imagenet 256 bf16 infer "--layers --layer-min-ms 300"
    theirs resnet50 imagenet 1,16,64,256 fp32 infer eager-fp32,eager-tf32
    theirs resnet50 imagenet 1,16,64,256 bf16 infer eager-cl,graph
    theirs resnet50 imagenet 1,256 bf16 infer $compile
    theirs resnet18 imagenet 1,64 fp32 infer eager-fp32,eager-tf32
    theirs resnet18 imagenet 1,64 bf16 infer eager-cl,graph
    theirs resnet18 imagenet 64 bf16 infer $compile
    theirs vgg16 imagenet 64 fp32 infer eager-fp32,eager-tf32
    theirs vgg16 imagenet 64 bf16 infer eager-cl,graph
    theirs resnet18 cifar 1,10000 fp32 infer eager-fp32
    theirs resnet18 cifar 1,10000 bf16 infer eager-cl,graph
    # training steps: bf16 against eager (autocast, channels_last) and its CUDA graph; true fp32 (TF32 off on both
    # sides) at b64. torch.compile's step and each conv's fprop/dgrad/wgrad beside cuDNN's are bench/training_md.sh's
    # (a device call of their own: with them the suite ran past one call's 10 minutes, perf-log step 86's notes)
    ours resnet50 imagenet 256 bf16 train
    ours resnet18 cifar 512 bf16 train
    ours vgg16 imagenet 64 bf16 train
    ours resnet50 imagenet 64 fp32 train
    theirs resnet50 imagenet 256 bf16 train eager-cl
    theirs resnet18 cifar 512 bf16 train eager-cl,graph
    theirs vgg16 imagenet 64 bf16 train eager-cl
    theirs resnet50 imagenet 64 fp32 train eager-fp32
    theirs_run
    # per-layer: cuDNN alone on every distinct ResNet-50 conv shape at batch 256, in two fresh processes (each its
    # own cudnn.benchmark choice; the report takes the faster: one choice was now and then 2-7x slower)
    for pass in 1 2; do
        theirs resnet50 imagenet 256 bf16 infer cudnn
        theirs_run
    done
    for pass in 1 2; do
        theirs resnet50 imagenet 256 bf16 infer cudnn "--layer-min-ms 300"
        theirs_run
    done
else
    ours resnet18 imagenet 32 fp32 infer
    ours resnet18 cifar 64 fp32 train
    ours resnet50 imagenet 8 fp32 infer
    theirs resnet18 imagenet 32 fp32 infer cpu
    theirs resnet18 cifar 64 fp32 train cpu
    theirs resnet50 imagenet 8 fp32 infer cpu
    theirs_run
fi
"$PYTHON" -c 'import json,sys; rows=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]; json.dump(rows, open(sys.argv[2],"w"), indent=1)' "$tmp" "$out"
rm -f "$tmp"
if [ $DEV = cuda ]; then # an independent re-measurement of PyTorch rows (torch.utils.benchmark), appended to the results
    timed check "$PYTHON" bench/gpu_checks.py check "$out" 2>>"$log" >"$out.check" || echo "gpu_checks.py check failed" >&2
    "$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1])); r += [json.loads(l) for l in open(sys.argv[2]) if l.strip()]; json.dump(r, open(sys.argv[1],"w"), indent=1)' "$out" "$out.check"
    rm -f "$out.check"
fi
cmd="bench/run.sh$( [ $QUICK = 1 ] && echo ' --quick')"
"$PYTHON" bench/report.py "$out" --out-md "${out%.json}.md" --svg-dir "bench/results/plots-$date-$gpu" \
    --title "cnn.c vs PyTorch on $gpu ($date)" --command "$cmd"
"$PYTHON" bench/make_benchmarks_md.py bench/results >BENCHMARKS.md
{ echo "# step times (s), longest first:"; sort -rn "$steps" | sed 's/^/#   /'; } | tee -a "$log"
rm -f "$steps" "$jobs"
echo "suite took $((SECONDS - t0)) s; records in $out, report ${out%.json}.md, BENCHMARKS.md regenerated" | tee -a "$log"
