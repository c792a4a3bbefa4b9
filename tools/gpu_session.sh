#!/usr/bin/env bash
# tools/gpu_session.sh -- everything one call to a lent GPU machine should do, in one command, with a summary
# table printed last: build, the GPU op tests, end-to-end checks against PyTorch on the same GPU, cold/warm
# startup, sanitizers and a short benchmark. Each stage has its own time limit so a hang costs one stage only.
#
#   tools/gpu_session.sh [stage...]      stages: build ops ops-conv ops-tc memcheck-tc zoo-bf16 zoo-tf32 sanitize-tc
#                                        sanitize-tf32 e2e layers-r50 tune-full-r50 ops-first sanitize-first
#                                        first-ab ws-ab sanitize-ws ncu-r50 ab sanitize-epi fp32
#                                        sanitize-f32 ncu-fp32
#                                        startup startup-bf16 cli sanitize tune bench bench-bf16 bench-tf32 layers
#                                        check hostvar cudnn-kernels suite train-ab tma coop ws-tests ncu-cmp
#                                        flush-ab pdl-ab pdl3 pair ws-rows swap x192 vgg-x192 clocks
#                                        protocols xo
#                                        (default: build ops e2e startup
#                                        cli sanitize bench). GIT_COMMIT=hash: the
#                                        commit the build records.
#
# Logs go to $OUT (the device tool's return folder; ./gpu-out when unset): session.log (everything),
# summary.txt (the table), logs.tgz (every test log).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
STAGES=${*:-build ops e2e startup cli sanitize bench}
export PYTHON=${PYTHON:-python3} BUILD=${BUILD:-build}
export CNN_CACHE_DIR=${CNN_CACHE_DIR:-/tmp/cnn-cache}
LOGDIR=/tmp/gpu-logs
mkdir -p "$LOGDIR"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
exec > >(tee -a "$OUT/session.log") 2>&1

row() { printf '%-28s %-6s %6s s  %s\n' "$1" "$2" "$3" "$4" | tee -a "$SUMMARY.rows" >/dev/null; }
stage() { # name timeout command...: runs, logs to $LOGDIR/name.log, records PASS/FAIL counts
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS log=$LOGDIR/$name.log
    echo "=== $name (limit ${limit}s): $*"
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
    local rc=$?
    local p f s
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
    grep -E '^(FAIL|SKIP) |^# |passed, ' "$log" | head -n 60
    [ $rc -ne 0 ] && tail -n 25 "$log"
    local verdict=ok
    { [ $rc -ne 0 ] || [ "$f" -gt 0 ]; } && verdict=FAIL
    [ $rc -eq 124 ] && verdict=TIMEOUT
    row "$name" "$verdict" $((SECONDS - t0)) "rc=$rc pass=$p fail=$f skip=$s"
}
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
ab_base() { # unpack and build the A/B base tree (tmp/ab-base.tgz: `git archive BASE`, carried, never committed)
    rm -rf /tmp/ab-base && mkdir -p /tmp/ab-base && tar xzf tmp/ab-base.tgz -C /tmp/ab-base
    stage ab-build-base 240 make -C /tmp/ab-base -j16 BUILD=build GIT_COMMIT=ab-base build/cnn
}
ab_bin() { if [ "$1" = base ]; then echo /tmp/ab-base/build/cnn; else echo "$BUILD/cnn"; fi; } # the arm's binary

echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo none)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
$PYTHON -c 'import torch; print("# torch", torch.__version__, torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1

if has build; then
    stage build 240 make -j16 BUILD="$BUILD" ${GIT_COMMIT:+GIT_COMMIT=$GIT_COMMIT} all
fi
if has suite; then # first after the build: its cold start must be the machine's first compilation (perf-log step 19)
    stage bench-suite 540 bench/run.sh
    tar czf "$OUT/results.tgz" bench/results BENCHMARKS.md 2>/dev/null
fi
if has ops; then
    stage nvrtc-quick 120 env CNN_TEST_QUICK=1 "$BUILD/test_nvrtc"
    stage gpu-ops 300 env CNN_SYNC_DEBUG=1 "$BUILD/gpu_test_ops"
fi
if has ops-conv; then # the forward-convolution groups (every case, every tensor-core config), synchronised
    stage gpu-ops-conv 300 env CNN_SYNC_DEBUG=1 "$BUILD/gpu_test_ops" conv conv_tc linear graph
fi
if has ops-tc; then # the tensor-core forward group alone (every config, every dtype that has one), synchronised
    stage gpu-ops-tc 240 env CNN_SYNC_DEBUG=1 "$BUILD/gpu_test_ops" conv_tc
fi
if has ops-first; then # the first-layer kernels and conv + max-pool, then the groups whose stem cases now reach them
    stage gpu-ops-first 300 env CNN_SYNC_DEBUG=1 "$BUILD/gpu_test_ops" conv_first conv conv_tc
fi
if has sanitize-first; then # the first-layer kernels under memcheck and racecheck (quick cases, bf16)
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck; do
        stage "sanitizer-first-$tool" 150 env CNN_TEST_QUICK=1 CNN_SYNC_DEBUG=1 "$SAN" --tool $tool --error-exitcode 1 \
            --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype bf16 conv_first
    done
fi
if has first-ab; then # the first-layer kernels on (default) and off (CNN_CONV_FIRST=0, the rewritten-operand path), same run
    for arm in on off; do
        env=""; [ $arm = off ] && env="CNN_CONV_FIRST=0"
        stage "first-$arm-whole" 200 bash -c "env $env $BUILD/cnn bench --model resnet50,resnet18,vgg16 --batch 1,64,256 --dtypes bf16 --device cuda --repeat 30 --warmup 5 >$OUT/first-$arm-whole.md"
        stage "first-$arm-layers-r50" 120 bash -c "env $env $BUILD/cnn bench --model resnet50 --batch 256 --dtypes bf16 --layers --device cuda --repeat 20 --warmup 5 >$OUT/first-$arm-layers-r50.md"
        stage "first-$arm-layers-vgg" 120 bash -c "env $env $BUILD/cnn bench --model vgg16 --batch 64 --dtypes bf16 --layers --device cuda --repeat 20 --warmup 5 >$OUT/first-$arm-layers-vgg.md"
        grep -hE '^\| (resnet|vgg)[0-9]+ \| 224x224|\| (conv1|maxpool|features\.0|features\.2) \|' $OUT/first-$arm-*.md
    done
fi
if has ws-ab; then # the warp-specialised rows on (default) and off (CNN_CONV_WS=0), each arm with its own empty cache
    for arm in off on; do
        env="CNN_CACHE_DIR=/tmp/cnn-cache-ws-$arm"; [ $arm = off ] && env="$env CNN_CONV_WS=0"
        rm -rf /tmp/cnn-cache-ws-$arm
        stage "ws-$arm-whole" 240 bash -c "env $env $BUILD/cnn bench --model resnet50,resnet18,vgg16 --batch 1,64,256 --dtypes bf16 --device cuda --repeat 30 --warmup 5 -v >$OUT/ws-$arm-whole.md 2>/tmp/ws-$arm-tune.log"
        stage "ws-$arm-layers-r50" 120 bash -c "env $env $BUILD/cnn bench --model resnet50 --batch 256 --dtypes bf16 --layers --device cuda --repeat 20 --warmup 5 >$OUT/ws-$arm-layers-r50.md"
        grep -h 'tuned fprop_tc' /tmp/ws-$arm-tune.log | sed 's/^/# /' >>"$OUT/ws-$arm-layers-r50.md"
        grep -hE '^\| (resnet|vgg)[0-9]+ \| 224x224' $OUT/ws-$arm-whole.md
    done
    grep -h 'ws/' /tmp/ws-on-tune.log | head -n 40
fi
if has ab; then # this tree against a base tree (tmp/ab-base.tgz: `git archive BASE`, carried, never committed), built
    # side by side; each arm with its own empty kernel cache; the whole forwards twice in the order base, new, base, new
    ab_base
    for arm in base new; do
        bin=$(ab_bin $arm)
        rm -rf /tmp/cnn-cache-ab-$arm
        stage "ab-$arm-layers-r50" 150 bash -c "CNN_CACHE_DIR=/tmp/cnn-cache-ab-$arm $bin bench --model resnet50 --batch 256 --dtypes bf16 --layers --device cuda --repeat 20 --warmup 5 -v >$LOGDIR/ab-$arm-layers-r50.md 2>/tmp/ab-$arm-tune.log"
        grep -h 'tuned fprop_tc' /tmp/ab-$arm-tune.log | sed 's/^/# /' >>"$LOGDIR/ab-$arm-layers-r50.md"
    done
    for rep in 1 2; do
        for arm in base new; do
            bin=$(ab_bin $arm)
            stage "ab-$arm-whole-$rep" 200 bash -c "CNN_CACHE_DIR=/tmp/cnn-cache-ab-$arm $bin bench --model resnet50,resnet18,vgg16 --batch 1,64,256 --dtypes bf16 --device cuda --repeat 30 --warmup 5 >$LOGDIR/ab-$arm-whole-$rep.md 2>>/tmp/ab-$arm-tune.log"
            grep -hE '^\| (resnet|vgg)[0-9]+ \| 224x224' $LOGDIR/ab-$arm-whole-$rep.md | sed "s/^/# $arm $rep /"
        done
    done
fi
if has train-ab; then # dgrad on the forward tensor-core kernels (on) against the generic kernels (off, CNN_CONV_DGRAD_TC=0):
    # one binary, each arm with its own empty kernel cache, training steps of the suite's models
    for arm in off on; do
        v=0; [ $arm = on ] && v=1
        rm -rf /tmp/cnn-cache-train-$arm
        stage "train-$arm" 240 bash -c "export CNN_CONV_DGRAD_TC=$v CNN_CACHE_DIR=/tmp/cnn-cache-train-$arm; $BUILD/cnn bench --model resnet50 --batch 256 --dtypes bf16 --mode train --device cuda --repeat 10 --warmup 3; $BUILD/cnn bench --model resnet18 --stem cifar --batch 512 --dtypes bf16 --mode train --device cuda --repeat 10 --warmup 3; $BUILD/cnn bench --model resnet50 --batch 64 --dtypes fp32 --mode train --device cuda --repeat 5 --warmup 2"
        grep -hE '^\| (resnet|vgg)[0-9]+' "$LOGDIR/train-$arm.log" | sed "s/^/# $arm /"
    done
fi
if has fp32; then # true fp32 forward (conv2d_tc.cu with FFMA=1): the f32 op groups on the GPU, racecheck on one row, the
    # fp32 zoo against PyTorch float64, then base (tmp/ab-base.tgz) against this tree and PyTorch eager fp32, same run
    stage gpu-ops-f32 240 env CNN_SYNC_DEBUG=1 "$BUILD/gpu_test_ops" --dtype f32 conv_tc conv linear graph
    ab_base
    for arm in base new; do
        bin=$(ab_bin $arm)
        rm -rf /tmp/cnn-cache-ab-$arm
        stage "ab-$arm-fp32" 200 bash -c "CNN_CACHE_DIR=/tmp/cnn-cache-ab-$arm $bin bench --model resnet50,resnet18,vgg16 --batch 1,64,256 --dtypes fp32 --device cuda --repeat 10 --warmup 3 -v >$LOGDIR/ab-$arm-fp32.md 2>/tmp/ab-$arm-fp32.log"
        grep -hE 'tuned fprop_(tc|algo)' /tmp/ab-$arm-fp32.log | sed 's/^/# /' >>"$LOGDIR/ab-$arm-fp32.md"
        grep -hE '^\| (resnet|vgg)[0-9]+ \| 224x224' $LOGDIR/ab-$arm-fp32.md | sed "s/^/# $arm /"
    done
    stage torch-fp32 200 bash -c "for m in resnet50 resnet18 vgg16; do $PYTHON bench/pytorch_bench.py --model \$m --batch 1,64,256 --dtype fp32 --impl eager-fp32 --repeat 10 --warmup 3; done >$LOGDIR/torch-fp32.jsonl"
    $PYTHON -c 'import json,sys; [print("# torch", r["model"], r["batch"], r["impl"], "%.3f ms" % r["ms_median"]) for r in map(json.loads, open(sys.argv[1]))]' $LOGDIR/torch-fp32.jsonl
    stage layers-fp32-new 150 bash -c "CNN_CACHE_DIR=/tmp/cnn-cache-ab-new $BUILD/cnn bench --model vgg16,resnet18 --batch 64 --dtypes fp32 --layers --device cuda --repeat 10 --warmup 3 >$LOGDIR/layers-fp32-new.md"
    stage golden-zoo-f32 240 env CNN_TEST_DEVICE=cuda CNN_TEST_THREADS=16 $PYTHON tests/golden/test_zoo_infer.py
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    stage sanitizer-f32-memcheck 150 env CNN_TEST_QUICK=1 CNN_SYNC_DEBUG=1 "$SAN" --tool memcheck --error-exitcode 1 \
        --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype f32 conv_tc
    stage sanitizer-f32-racecheck 150 env CNN_TEST_QUICK=1 CNN_TEST_TC_CONFIG=tc128x128/ CNN_SYNC_DEBUG=1 "$SAN" \
        --tool racecheck --error-exitcode 1 --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype f32 conv_tc
fi
if has sanitize-f32; then # every FFMA row (quick cases) under memcheck and racecheck
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck; do
        stage "sanitizer-f32-$tool" 240 env CNN_TEST_QUICK=1 CNN_SYNC_DEBUG=1 "$SAN" --tool $tool --error-exitcode 1 \
            --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype f32 conv_tc
    done
fi
# rows_tests TAG FILTER: the conv_tc rows whose names contain FILTER, every case forced (bf16; f16 quick cases)
rows_tests() {
    stage gpu-$1-bf16 240 env CNN_TEST_TC_CONFIG=$2 CNN_SYNC_DEBUG=1 "$BUILD/gpu_test_ops" --dtype bf16 conv_tc
    stage gpu-$1-f16 120 env CNN_TEST_QUICK=1 CNN_TEST_TC_CONFIG=$2 CNN_SYNC_DEBUG=1 "$BUILD/gpu_test_ops" --dtype f16 conv_tc
}
# cudnn_r50 NAME: cuDNN's convs alone per ResNet-50 shape (bf16 b256) into $LOGDIR/NAME.jsonl (logs.tgz), for a per-layer
# comparison within the same call
cudnn_r50() {
    stage $1 120 bash -c "$PYTHON bench/pytorch_bench.py --model resnet50 --batch 256 --dtype bf16 --impl cudnn --repeat 20 --warmup 5 >$LOGDIR/$1.jsonl"
}
# rows_ab TAG FILTER OFFVAR: rows_tests, the same rows under memcheck, racecheck and synccheck (quick); then one
# binary with those rows off (OFFVAR=0) against on, each arm with its own empty cache, ResNet-50 per layer and
# three models whole; cuDNN's convs alone in the same call
rows_ab() {
    local tag=$1 filter=$2 offvar=$3 arm env tool SAN
    rows_tests $tag $filter
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck synccheck; do
        stage "sanitizer-$tag-$tool" 150 env CNN_TEST_QUICK=1 CNN_TEST_TC_CONFIG=$filter CNN_SYNC_DEBUG=1 "$SAN" --tool $tool --error-exitcode 1 \
            --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype bf16 conv_tc
    done
    env_ab $tag $offvar $filter
}
# env_ab TAG OFFVAR [FILTER] (its tables in logs.tgz: the device tool returns only a few files from $OUT): one binary
# with OFFVAR=0 against without, each arm with its own empty cache, ResNet-50
# per layer (every tuned layer's candidates and their times in the log) and three models whole (batches
# AB_BATCHES, default 64,256; AB_OFF_VALUE: OFFVAR's value in the off arm, default 0; AB_ON_ENV: more settings of
# the on arm); cuDNN's convs alone in the same call; then the per-layer times of both arms and
# cuDNN's side by side (bench/ab_layers.py, printed and in logs.tgz as TAG-ab-layers.md)
env_ab() {
    local tag=$1 offvar=$2 filter=${3:-} arm env
    for arm in off on; do
        env="CNN_CACHE_DIR=/tmp/cnn-cache-$tag-$arm"; [ $arm = off ] && env="$env $offvar=${AB_OFF_VALUE:-0}"
        [ $arm = on ] && env="$env ${AB_ON_ENV:-}" # AB_ON_ENV: settings of the on arm other than the default
        rm -rf /tmp/cnn-cache-$tag-$arm
        stage "$tag-$arm-layers-r50" 150 bash -c "env $env $BUILD/cnn bench --model resnet50 --batch 256 --dtypes bf16 --layers --device cuda --repeat 20 --warmup 5 -v >$LOGDIR/$tag-$arm-layers-r50.md 2>/tmp/$tag-$arm-tune.log"
        grep -h 'tuned fprop_tc' /tmp/$tag-$arm-tune.log | sed 's/^/# /' >>"$LOGDIR/$tag-$arm-layers-r50.md"
        stage "$tag-$arm-whole" 200 bash -c "env $env $BUILD/cnn bench --model resnet50,resnet18,vgg16 --batch ${AB_BATCHES:-64,256} --dtypes bf16 --device cuda --repeat 30 --warmup 5 -v >$LOGDIR/$tag-$arm-whole.md 2>>/tmp/$tag-$arm-tune.log"
        grep -hE '^\| (resnet|vgg)[0-9]+ \| 224x224' $LOGDIR/$tag-$arm-whole.md | sed "s/^/# $arm /"
    done
    [ -n "$filter" ] && grep -h 'tuned fprop_tc' /tmp/$tag-on-tune.log | sed 's/ ms (.*//' | grep -c -- "$filter" |
        sed "s|^|# layers whose tuned winner is a $filter row: |"
    cudnn_r50 $tag-cudnn-r50
    $PYTHON bench/ab_layers.py $LOGDIR/$tag-off-layers-r50.md $LOGDIR/$tag-on-layers-r50.md \
        $LOGDIR/$tag-cudnn-r50.jsonl | tee $LOGDIR/$tag-ab-layers.md | sed 's/^/# /'
}
if has tma; then rows_ab tma /t CNN_CONV_TMA; fi     # the TMA rows (conv2d_ws.cu TMA=1)
if has coop; then rows_ab coop /c/ CNN_CONV_COOP; fi # the cooperative rows (COOP=1)
if has swap; then rows_ab swap /x CNN_CONV_SWAP; fi # the transposed-tile rows (SWAP=1)
if has x192; then AB_OFF_VALUE=tc192 rows_ab x192 tc192 CNN_CONV_SKIP; fi # the 192-pixel transposed tile
if has xo; then AB_OFF_VALUE=/o rows_ab xo /o CNN_CONV_SKIP; fi # the transposed tiles storing through TMA (OST=1)
if has vgg-x192; then # VGG-16 bf16 b64 without and with the 192-pixel row, three processes each, interleaved
    for rep in 1 2 3; do
        for arm in off on; do
            env="CNN_CACHE_DIR=/tmp/cnn-cache-vx-$arm"; [ $arm = off ] && env="$env CNN_CONV_SKIP=tc192"
            stage "vgg-x192-$arm-$rep" 150 bash -c "env $env $BUILD/cnn bench --model vgg16 --batch 64 --dtypes bf16 --device cuda --repeat 100 --warmup 10 >$LOGDIR/vgg-x192-$arm-$rep.md 2>/dev/null"
            grep -hE '^\| vgg16 \| 224x224' $LOGDIR/vgg-x192-$arm-$rep.md | sed "s/^/# $arm $rep /"
        done
    done
fi
if has protocols; then # ResNet-50 bf16 b256 per layer, ours and cuDNN's conv alone, under the same timing protocol on
    # both sides, three protocols: as the suite (20 runs after 5, steps back to back), each shape after 100 ms of an
    # idle GPU (--layer-rest-ms), and each shape over at least 300 ms of runs (--layer-min-ms); then the ratios
    cache=/tmp/cnn-cache-proto
    stage proto-tune 200 "$BUILD/cnn" bench --model resnet50 --batch 256 --dtypes bf16 --device cuda --cache-dir $cache --layers --repeat 3 --warmup 1
    args=""
    for p in suite:0:0 rest:100:0 long:0:300; do
        IFS=: read -r name rest min <<<"$p"
        stage "proto-$name-ours" 200 bash -c "$BUILD/cnn bench --model resnet50 --batch 256 --dtypes bf16 --device cuda --cache-dir $cache --layers --repeat 20 --warmup 5 --layer-rest-ms $rest --layer-min-ms $min >$LOGDIR/proto-$name-ours.md"
        stage "proto-$name-cudnn" 200 bash -c "$PYTHON bench/pytorch_bench.py --model resnet50 --batch 256 --dtype bf16 --impl cudnn --repeat 20 --warmup 5 --layer-rest-ms $rest --layer-min-ms $min >$LOGDIR/proto-$name-cudnn.jsonl"
        args="$args $name=$LOGDIR/proto-$name-ours.md,$LOGDIR/proto-$name-cudnn.jsonl"
    done
    $PYTHON bench/layer_protocols.py $args | tee $LOGDIR/protocols.md | sed 's/^/# /'
fi
if has clocks; then # SM clock, power and throttle reasons (nvidia-smi every 20 ms) while our ResNet-50 bf16 b256
    # forward runs step by step (warm cache, 1000 runs of each step) and while cuDNN's convs of it run alone (1000 runs
    # of each shape); then the mean of each phase
    cache=/tmp/cnn-cache-clk
    stage clk-warm 200 "$BUILD/cnn" bench --model resnet50 --batch 256 --dtypes bf16 --device cuda --cache-dir $cache --layers --repeat 3 --warmup 1
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv,noheader,nounits -lms 20 >$LOGDIR/clocks.csv 2>&1 &
    smi=$!
    mark() { echo "$1,$(date -u '+%Y/%m/%d %H:%M:%S.%N')" >>$LOGDIR/clock-marks.csv; }
    : >$LOGDIR/clock-marks.csv
    sleep 2; mark idle-end
    stage clk-ours 200 bash -c "$BUILD/cnn bench --model resnet50 --batch 256 --dtypes bf16 --device cuda --cache-dir $cache --layers --repeat 1000 --warmup 5 >$LOGDIR/clk-ours.md"
    mark ours-end
    stage clk-cudnn 200 bash -c "$PYTHON bench/pytorch_bench.py --model resnet50 --batch 256 --dtype bf16 --impl cudnn --repeat 1000 --warmup 20 >$LOGDIR/clk-cudnn.jsonl"
    mark cudnn-end
    kill $smi
    $PYTHON - "$LOGDIR/clocks.csv" "$LOGDIR/clock-marks.csv" <<'PY' | sed 's/^/# /'
import sys, datetime as dt
def t(s): return dt.datetime.strptime(s.strip()[:26], "%Y/%m/%d %H:%M:%S.%f")
rows = []
for line in open(sys.argv[1]):
    f = line.split(",")
    try: rows.append((t(f[0]), float(f[1]), float(f[2]), float(f[3]), f[4].strip()))
    except (ValueError, IndexError): pass
marks = [(l.split(",")[0], t(l.split(",")[1][:26])) for l in open(sys.argv[2])]
lo = rows[0][0] if rows else None
for name, hi in marks:
    ph = [r for r in rows if lo <= r[0] < hi and r[2] > 150.0]  # samples with the GPU busy (over 150 W)
    if ph:
        n = len(ph); reasons = {}
        for r in ph: reasons[r[4]] = reasons.get(r[4], 0) + 1
        print("%-10s %4d busy samples: SM clock mean %.0f MHz (min %.0f), power mean %.0f W (max %.0f), temp max %.0f C, reasons %s" % (
            name, n, sum(r[1] for r in ph) / n, min(r[1] for r in ph), sum(r[2] for r in ph) / n, max(r[2] for r in ph),
            max(r[3] for r in ph), sorted(reasons.items(), key=lambda x: -x[1])[:3]))
    else:
        print("%-10s no busy samples" % name)
    lo = hi
PY
    $PYTHON bench/ab_layers.py $LOGDIR/clk-ours.md $LOGDIR/clk-ours.md $LOGDIR/clk-cudnn.jsonl | sed 's/^/# /'
fi
if has flush-ab; then env_ab flush CNN_TUNE_FLUSH; fi # the tuner's timing with L2 flushed (on) or as left (off)
if has pdl-ab; then AB_BATCHES=1,16,64,256 env_ab pdl CNN_PDL; fi # programmatic dependent launch on and off
if has pdl3; then # three arms, interleaved twice: the base tree (tmp/ab-base.tgz) without and with programmatic
    # dependent launch (CNN_PDL=0 / default), and this tree with it; each its own empty cache (the first pass tunes)
    ab_base
    for rep in 1 2; do
        for arm in off base new; do
            bin=$(ab_bin base); env="CNN_CACHE_DIR=/tmp/cnn-cache-p3-$arm"
            [ $arm = off ] && env="$env CNN_PDL=0"
            [ $arm = new ] && bin=$(ab_bin new)
            stage "pdl3-$arm-$rep" 200 bash -c "env $env $bin bench --model resnet50,resnet18,vgg16 --batch 1,16,64,256 --dtypes bf16 --device cuda --repeat 30 --warmup 5 >$LOGDIR/pdl3-$arm-$rep.md 2>/dev/null"
            grep -hE '^\| (resnet|vgg)[0-9]+ \| 224x224' $LOGDIR/pdl3-$arm-$rep.md | sed "s/^/# $arm $rep /"
        done
    done
fi
if has pair; then # two convolutions summed in one kernel (conv2d_fprop_pair): the op group on the GPU (bf16, f16),
    # under memcheck, racecheck and synccheck; then the eval plan without pairs (CNN_CONV_PAIR=0) against with them
    stage gpu-pair-bf16 120 env CNN_SYNC_DEBUG=1 "$BUILD/gpu_test_ops" --dtype bf16 conv_pair
    stage gpu-pair-f16 120 env CNN_SYNC_DEBUG=1 "$BUILD/gpu_test_ops" --dtype f16 conv_pair
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck synccheck; do
        stage "sanitizer-pair-$tool" 150 env CNN_SYNC_DEBUG=1 "$SAN" --tool $tool --error-exitcode 1 --print-limit 20 \
            "$BUILD/gpu_test_ops" --no-fork --dtype bf16 conv_pair
    done
    AB_BATCHES=${AB_BATCHES:-1,64,256} env_ab pair CNN_CONV_PAIR
    grep -h 'tuned fprop_pair' /tmp/pair-on-tune.log | sed 's/^/# /' >>"$LOGDIR/pair-on-layers-r50.md"
fi
if has ws-rows; then rows_tests ws ws/; fi # every warp-specialised row, every case (no cuDNN run)
if has ws-tests; then rows_tests ws ws/; cudnn_r50 cudnn-r50; fi # every warp-specialised row; cuDNN per layer
if has sanitize-ws; then # the warp-specialised rows of the tensor-core group under memcheck, racecheck and synccheck
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck synccheck; do
        stage "sanitizer-ws-$tool" 200 env CNN_TEST_QUICK=1 CNN_TEST_TC_CONFIG=ws/ CNN_SYNC_DEBUG=1 "$SAN" --tool $tool --error-exitcode 1 \
            --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype bf16 conv_tc
    done
fi
if has sanitize-epi; then # the epilogue's shared-memory scratch: racecheck on every tensor-core row (quick, bf16), memcheck
    # on them, racecheck on the mma.sync rows in TF32 (F32 activations through the same scratch)
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in racecheck memcheck; do
        stage "sanitizer-epi-$tool" 240 env CNN_TEST_QUICK=1 CNN_SYNC_DEBUG=1 "$SAN" --tool $tool --error-exitcode 1 \
            --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype bf16 conv_tc
    done
    stage sanitizer-epi-racecheck-tf32 150 env CNN_TEST_QUICK=1 CNN_TEST_TC_CONFIG=tc128x128/ CNN_SYNC_DEBUG=1 "$SAN" \
        --tool racecheck --error-exitcode 1 --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype tf32 conv_tc
fi
if has memcheck-tc; then # memcheck alone on the tensor-core group (quick cases, bf16: the wgmma rows included)
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    stage sanitizer-tc-memcheck 150 env CNN_TEST_QUICK=1 CNN_SYNC_DEBUG=1 "$SAN" --tool memcheck --error-exitcode 1 \
        --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype bf16 conv_tc
fi
if has zoo-bf16; then # every zoo model through the tensor-core kernels: bf16 logits vs PyTorch float64, top-1
    stage golden-zoo-bf16 300 env CNN_TEST_DEVICE=cuda CNN_TEST_THREADS=16 CNN_ZOO_DTYPE=bf16 $PYTHON tests/golden/test_zoo_infer.py
fi
if has zoo-tf32; then # every zoo model with fp32 tensors and TF32 forward convolutions, vs PyTorch's TF32 error
    stage golden-zoo-tf32 300 env CNN_TEST_DEVICE=cuda CNN_TEST_THREADS=16 CNN_ZOO_DTYPE=tf32 $PYTHON tests/golden/test_zoo_infer.py
fi
if has sanitize-tc; then # the tensor-core groups under memcheck and racecheck (quick cases, bf16)
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck; do
        stage "sanitizer-tc-$tool" 240 env CNN_TEST_QUICK=1 CNN_SYNC_DEBUG=1 "$SAN" --tool $tool --error-exitcode 1 \
            --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype bf16 conv_tc conv
    done
fi
if has sanitize-tf32; then # the TF32 tensor-core forward under memcheck and racecheck (quick cases)
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck; do
        stage "sanitizer-tf32-$tool" 240 env CNN_TEST_QUICK=1 CNN_SYNC_DEBUG=1 "$SAN" --tool $tool --error-exitcode 1 \
            --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype tf32 conv_tc
    done
fi
if has bench-tf32; then # TF32 on both sides (ours: fp32 tensors, TF32 forward convs; PyTorch: eager with TF32 allowed)
    stage bench-ours-tf32 240 "$BUILD/cnn" bench --model resnet50,resnet18,vgg16 --batch 1,64,256 --dtypes fp32,tf32 --device cuda --repeat 20 --warmup 5
    stage bench-torch-tf32 240 $PYTHON bench/pytorch_bench.py --model resnet50 --batch 1,64,256 --dtype bf16 --mode infer --impl eager-fp32,eager-tf32,eager-cl --repeat 20 --warmup 5
fi
if has startup; then
    $PYTHON -c 'import sys; sys.path.insert(0, "tools"); import st, torch; g = torch.Generator().manual_seed(1); st.save_file({"input": torch.randn(8, 3, 224, 224, generator=g)}, "/tmp/x224.safetensors")'
    cold=/tmp/cnn-cache-cold; rm -rf "$cold"
    stage startup-cold 120 "$BUILD/cnn" infer --model resnet50 --input /tmp/x224.safetensors --output /tmp/y1.safetensors --device cuda --cache-dir "$cold" -v
    stage startup-warm 60 "$BUILD/cnn" infer --model resnet50 --input /tmp/x224.safetensors --output /tmp/y2.safetensors --device cuda --cache-dir "$cold" -v
    stage startup-warm2 60 "$BUILD/cnn" infer --model resnet50 --input /tmp/x224.safetensors --output /tmp/y2.safetensors --device cuda --cache-dir "$cold"
    stage infer-cpu-vs-gpu 120 $PYTHON -c '
import sys, subprocess; sys.path.insert(0, "tools"); import st, torch
subprocess.run(["'"$BUILD"'/cnn", "infer", "--model", "resnet50", "--input", "/tmp/x224.safetensors", "--output", "/tmp/yc.safetensors", "--device", "cpu", "--threads", "16"], check=True)
a = st.load_file("/tmp/y2.safetensors")["logits"].double(); b = st.load_file("/tmp/yc.safetensors")["logits"].double()
e = float((a - b).norm() / b.norm()); print(("PASS" if e <= 1e-4 else "FAIL"), "resnet50 fp32 logits gpu vs cpu rel-L2 %.2e" % e)'
fi
if has startup-bf16; then # issue 5's start-up targets: ResNet-50 bf16, --tune fast, empty cache then warm (whole process)
    $PYTHON -c 'import sys; sys.path.insert(0, "tools"); import st, torch; g = torch.Generator().manual_seed(1); st.save_file({"input": torch.randn(8, 3, 224, 224, generator=g)}, "/tmp/x224.safetensors")'
    cold=/tmp/cnn-cache-cold-bf16; rm -rf "$cold"
    for run in cold warm warm2; do
        stage "startup-bf16-$run" 120 bash -c "s=\$EPOCHREALTIME; $BUILD/cnn infer --model resnet50 --dtype bf16 --input /tmp/x224.safetensors --output /tmp/yb.safetensors --device cuda --cache-dir $cold -v && awk -v s=\$s -v e=\$EPOCHREALTIME 'BEGIN { printf \"# $run: whole process %.2f s\\n\", e - s }'"
    done
fi
if has e2e; then
    export CNN_TEST_DEVICE=cuda CNN_TEST_THREADS=16
    stage golden-zoo 240 $PYTHON tests/golden/test_zoo_infer.py
    stage golden-grad 120 $PYTHON tests/golden/test_grad.py
    stage golden-train 150 $PYTHON tests/golden/test_train.py
    unset CNN_TEST_DEVICE CNN_TEST_THREADS
fi
if has cli; then
    stage cli-resume-cuda 180 env CNN_TEST_DEVICE=cuda BUILD="$BUILD" bash tests/cli/test_resume.sh
fi
if has sanitize; then
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck; do
        stage "sanitizer-$tool" 240 env CNN_TEST_QUICK=1 CNN_SYNC_DEBUG=1 "$SAN" --tool $tool --error-exitcode 1 \
            --print-limit 20 "$BUILD/gpu_test_ops" --no-fork convert pointwise dropout bn scale_shift pool conv conv_tc linear xent prep optim graph
    done
fi
if has tune; then
    for lvl in none fast full; do
        stage "tune-$lvl" 120 "$BUILD/cnn" bench --model resnet50,vgg16 --batch 1,64,256 --dtypes bf16 --device cuda --repeat 20 --warmup 5 --tune $lvl --cache-dir /tmp/cnn-cache-$lvl
    done
    stage tune-warm 60 "$BUILD/cnn" infer --model resnet50 --input /tmp/x224.safetensors --output /tmp/y3.safetensors --device cuda --dtype bf16 --cache-dir /tmp/cnn-cache-fast -v
fi
if has bench; then
    stage bench-ours 240 "$BUILD/cnn" bench --model resnet50,resnet18,vgg16 --batch 1,64,256 --dtypes fp32,bf16 --device cuda --repeat 20 --warmup 5
    stage bench-ours-train 120 "$BUILD/cnn" bench --model resnet18 --stem cifar --batch 512 --dtypes bf16 --mode train --device cuda --repeat 10 --warmup 3
    stage bench-torch 240 $PYTHON bench/pytorch_bench.py --model resnet50 --batch 1,64,256 --dtype bf16 --mode infer --impl eager-cl,graph --repeat 20 --warmup 5
fi
if has bench-bf16; then # ours only, bf16, the issue-5 configurations (tune fast, the default)
    stage bench-ours-bf16 240 "$BUILD/cnn" bench --model resnet50,resnet18,vgg16 --batch 1,64,256 --dtypes bf16 --device cuda --repeat 30 --warmup 5
fi
if has layers; then # per-layer: ours (tune fast, fused epilogues) and cuDNN's conv alone, same run
    stage layers-ours 180 "$BUILD/cnn" bench --model resnet50 --batch 256 --dtypes bf16 --layers --device cuda --repeat 20 --warmup 5 -o jsonl
    stage layers-vgg 120 "$BUILD/cnn" bench --model vgg16 --batch 64 --dtypes bf16 --layers --device cuda --repeat 20 --warmup 5
    stage layers-cudnn 180 $PYTHON bench/pytorch_bench.py --model resnet50 --batch 256 --dtype bf16 --mode infer --impl cudnn --repeat 20 --warmup 5
fi
if has layers-r50; then # ours per layer, ResNet-50 bf16 b256, then the whole forward with every choice logged
    stage layers-r50 120 "$BUILD/cnn" bench --model resnet50 --batch 256 --dtypes bf16 --layers --device cuda --repeat 20 --warmup 5 -v
fi
if has tune-full-r50; then # the whole search (persistent rows included) on ResNet-50 bf16 b256: which configs win
    stage tune-full-r50 150 "$BUILD/cnn" bench --model resnet50 --batch 256 --dtypes bf16 --device cuda --repeat 20 --warmup 5 --tune full --cache-dir /tmp/cnn-cache-full -v
fi
if has ncu-r50; then # ncu on one ResNet-50 bf16 b256 forward (warm cache, so no tuning launches): per conv kernel its
    # throughputs, warp stall reasons, pipe use and issue rate (details page, CSV); then the per-instruction stall
    # samples (SASS) of the first ws and wgmma launches; and the tensor-pipe metric names this ncu knows
    cache=/tmp/cnn-cache-ncu
    bargs="bench --model resnet50 --batch 256 --dtypes bf16 --device cuda --cache-dir $cache"
    stage ncu-warm 150 "$BUILD/cnn" $bargs --repeat 3 --warmup 1 -v
    stage ncu-r50 300 ncu --kernel-name regex:conv2d --launch-count 64 --section SpeedOfLight --section WarpStateStats \
        --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats --section Occupancy \
        --csv --page details "$BUILD/cnn" $bargs --repeat 1 --warmup 0
    for k in ws wg; do
        stage "ncu-src-$k" 150 ncu --kernel-name conv2d_fprop_$k --launch-count 2 --section SourceCounters \
            --section WarpStateStats -f -o /tmp/ncu-src-$k "$BUILD/cnn" $bargs --repeat 1 --warmup 0
        ncu -i /tmp/ncu-src-$k.ncu-rep --page source --csv --print-source sass >"$LOGDIR/ncu-src-$k.csv" 2>&1
    done
    ncu --query-metrics --chip gh100 2>&1 | grep -i -E 'tensor|gmma|hmma' >"$LOGDIR/ncu-metrics.txt"
    cp "$LOGDIR/ncu-warm.log" "$LOGDIR/ncu-r50.log" "$OUT/" 2>/dev/null
fi
if has ncu-cmp; then # ours and cuDNN's kernels under the same ncu counters, ResNet-50 bf16 b256: every conv launch of
    # one forward of ours (warm cache; the -v run before it logs each layer's tuned row), then cuDNN's kernel for
    # each distinct shape (bench/cudnn_kernels.py --ncu: one call per shape, printed in order); raw pages as CSV;
    # then the per-instruction stall samples of our 256->256 14x14 3x3 launch (layer3.1.conv2, the forward's 30th).
    # NCU_OPTS: more ncu options (e.g. --clock-control none --cache-control none: boost clocks, warm L2); NCU_SECS:
    # the sections instead of SpeedOfLight, ComputeWorkloadAnalysis, WarpStateStats; NCU_SRC=0: no stall samples
    cache=/tmp/cnn-cache-ncu
    bargs="bench --model resnet50 --batch 256 --dtypes bf16 --device cuda --cache-dir $cache"
    secs="${NCU_SECS:---section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats} --csv --page raw ${NCU_OPTS:-}"
    stage ncu-warm 150 "$BUILD/cnn" $bargs --repeat 3 --warmup 1 -v
    stage ncu-ours 300 bash -c "ncu --kernel-name regex:conv2d_fprop --launch-count 53 $secs $BUILD/cnn $bargs --repeat 1 --warmup 0 >$OUT/ncu-ours.csv"
    stage ncu-cudnn 240 bash -c "ncu --profile-from-start off $secs $PYTHON bench/cudnn_kernels.py --ncu resnet50 256 bf16 >$OUT/ncu-cudnn.csv"
    if [ "${NCU_SRC:-1}" = 1 ]; then
        stage ncu-src-3x3 150 ncu --kernel-name regex:conv2d_fprop --launch-skip 29 --launch-count 1 --section SourceCounters \
            --section WarpStateStats ${NCU_OPTS:-} -f -o /tmp/ncu-src-3x3 "$BUILD/cnn" $bargs --repeat 1 --warmup 0
        ncu -i /tmp/ncu-src-3x3.ncu-rep --page source --csv --print-source sass >"$OUT/ncu-src-3x3.csv" 2>&1
    fi
    cp "$LOGDIR/ncu-warm.log" "$LOGDIR/ncu-cudnn.log" "$OUT/" 2>/dev/null
fi
if has ncu-fp32; then # true fp32 (FFMA rows): ours per layer against cuDNN fp32 per layer (TF32 off), VGG-16 and
    # ResNet-18 at b64; then ncu on the VGG-16 forward's FFMA launches (warm cache) and SASS stall samples of one
    cache=/tmp/cnn-cache-ncu32
    for m in vgg16 resnet18; do
        stage "layers-fp32-$m" 150 bash -c "$BUILD/cnn bench --model $m --batch 64 --dtypes fp32 --layers --device cuda --cache-dir $cache --repeat 10 --warmup 3 >$LOGDIR/layers-fp32-$m.md"
        stage "cudnn-fp32-$m" 150 bash -c "$PYTHON bench/pytorch_bench.py --model $m --batch 64 --dtype fp32 --impl cudnn --repeat 10 --warmup 3 >$LOGDIR/cudnn-fp32-$m.jsonl"
        grep -E '^\| [0-9]+->' $LOGDIR/layers-fp32-$m.md | sed "s/^/# ours $m /"
        $PYTHON -c 'import json,sys; [print("# cudnn", r["layer"], "%.4f ms %.1f TFLOP/s" % (r["ms_median"], r["tflops"])) for r in map(json.loads, open(sys.argv[1]))]' $LOGDIR/cudnn-fp32-$m.jsonl
    done
    bargs="bench --model vgg16 --batch 64 --dtypes fp32 --device cuda --cache-dir $cache"
    stage ncu-fp32 200 ncu --kernel-name conv2d_fprop_tc --launch-count 13 --section SpeedOfLight --section WarpStateStats \
        --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats --section Occupancy \
        --csv --page details "$BUILD/cnn" $bargs --repeat 1 --warmup 0
    stage ncu-src-ffma 150 ncu --kernel-name conv2d_fprop_tc --launch-skip 3 --launch-count 1 --section SourceCounters \
        --section WarpStateStats -f -o /tmp/ncu-src-ffma "$BUILD/cnn" $bargs --repeat 1 --warmup 0
    ncu -i /tmp/ncu-src-ffma.ncu-rep --page source --csv --print-source sass >"$LOGDIR/ncu-src-ffma.csv" 2>&1
fi
if has check; then # the independent timer on the PyTorch rows of the committed results (another machine, same GPU type)
    stage check-timer 240 $PYTHON bench/gpu_checks.py check "$(ls bench/results/*H100*.json | head -n 1)"
fi
if has hostvar; then # issue 4: where host-bound eager rows' spread comes from (bench/hostvar.py: fresh, forked, in-process)
    stage hostvar-r50-fp32 200 bash -c "$PYTHON bench/hostvar.py eager-fp32 resnet50 1 | sed 's/^/# /'"
    stage hostvar-r18-cl 150 bash -c "$PYTHON bench/hostvar.py eager-cl resnet18 1 | sed 's/^/# /'"
fi
if has cudnn-kernels; then # issue 5: which kernels cuDNN runs per ResNet-50 conv shape (bf16 b256), read by torch.profiler
    stage cudnn-kernels 150 bash -c "$PYTHON bench/cudnn_kernels.py resnet50 256 bf16 >$OUT/cudnn-kernels.jsonl"
    $PYTHON -c 'import json,sys; [print("# %-26s %s %.1f us" % (r["layer"], r["kernels"][0]["name"][:110], r["kernels"][0]["us_per_call"])) for r in map(json.loads, open(sys.argv[1])) if r["kernels"]]' $OUT/cudnn-kernels.jsonl
fi

tar czf "$OUT/logs.tgz" -C "$LOGDIR" . 2>/dev/null
{ echo; echo "stage                        result  time     details"; cat "$SUMMARY.rows"; } >"$SUMMARY"
rm -f "$SUMMARY.rows"
cat "$SUMMARY"
