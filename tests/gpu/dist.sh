#!/usr/bin/env bash
# tests/gpu/dist.sh — multi-GPU data parallel on a machine with 2+ GPUs and NCCL (issue 29's acceptance):
#
#   tests/gpu/dist.sh STAGE...      stages, each under 10 minutes:
#     build         make (incremental) and the machine's GPUs, NCCL and torchrun
#     scaling-r50   ResNet-50 bf16, batch 256 per GPU, 1 vs 2 (and 4, where the machine has them) GPUs: cnn bench
#                   --gpus N and PyTorch DDP (torchrun); and cnn with --allreduce bf16 on the most GPUs
#     scaling-r18   CIFAR ResNet-18 bf16, batch 512 per GPU, likewise
#     equiv-a       fp32 --deterministic: VGG-11 (no BatchNorm, no dropout) and CIFAR ResNet-18 with --sync-bn,
#                   2 GPUs x 32 (and 4 x 16) against 1 GPU x 64: every step's loss of 50 within 1e-5 and
#                   model.safetensors bitwise equal; then equiv-acc (EQUIV_SKIP_ACC=1: not)
#     equiv-acc     CIFAR ResNet-18 2 epochs of Fashion-MNIST (where at hand; else synthetic) with BatchNorm per GPU,
#                   1 GPU x 512 vs 2 GPUs x 256: final top-1 within 0.5 points
#     equiv-b       a torchrun-started and a file://-initialised run complete; a checkpoint of 2 GPUs resumes on 1
#     faults-a      trials 1-6, faults-b trials 7-12: trials 1-10 kill -9 one rank mid-run (rank 1, then rank 0,
#                   alternating): the survivor exits non-zero naming the peer within --dist-timeout + 10 s, the
#                   checkpoint loads and the run resumes to its end; trials 11-12 stall a rank (SIGSTOP): the
#                   heartbeat ends the survivor within the timeout + 10 s
#     all           every stage above, in order (about 25 minutes: for one session, not for one command)
#
# The scaling stages also write their tables to $LOGDIR/multi-gpu.md, for bench/results/DATE-MACHINE-multi-gpu.md.
# Every step's output goes to $LOGDIR/<stage>-<step>.log; each stage appends PASS/FAIL/INFO lines to
# $LOGDIR/summary.txt and prints the summary last. LOGDIR defaults to $OUT/dist (the device tool's output folder)
# or dist-logs. NVLink multicast stays off (NCCL_NVLS_ENABLE=0). Exit status: 1 if any check failed.
set -u
[ $# -ge 1 ] || { sed -n '2,/^set -u$/p' "$0" | sed '$d'; exit 2; }
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
BUILD=${BUILD:-build}
CNN=$BUILD/cnn
LOGDIR=${LOGDIR:-${OUT:-dist-logs}/dist}
mkdir -p "$LOGDIR"
SUM=$LOGDIR/summary.txt
FAILED=0
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for p in python3 /usr/bin/python3; do
        if $p -c 'import torch, torchvision; assert torch.cuda.is_available()' 2>/dev/null; then PY=$p; break; fi
    done
fi

say() { echo "$*" | tee -a "$SUM"; }
pass() { say "PASS $*"; }
fail() { say "FAIL $*"; FAILED=1; }
# step STAGE-NAME LIMIT_S CMD...: the command's output to its log, a time limit, the status in $RC
step() {
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >"$LOGDIR/$name.log" 2>&1
    RC=$?
    echo "  [$name: exit $RC after $((SECONDS - t0)) s; log $LOGDIR/$name.log]" | tee -a "$SUM"
}
TORCHRUN=("${PY:-python3}" -m torch.distributed.run --standalone)
# the images/s of the JSON line in a log (cnn bench -o jsonl or ddp_bench.py), or empty
ips() { "${PY:-python3}" - "$1" <<'PY' 2>/dev/null
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{") and '"images_per_s"' in line:
        r = json.loads(line)
        if r.get("ok", True): print("%.1f" % r["images_per_s"])
PY
}

stage_build() {
    say "== build ($(date -u +%FT%TZ))"
    step build-make 590 make -j"$(nproc)" BUILD="$BUILD" "$CNN"
    [ $RC -eq 0 ] && pass "build" || fail "build: make failed"
    nvidia-smi -L >"$LOGDIR/build-gpus.log" 2>&1
    local n
    n=$(grep -c '^GPU' "$LOGDIR/build-gpus.log")
    [ "$n" -ge 2 ] && pass "gpus: $n" || fail "gpus: $n (2 needed)"
    ls /usr/local/cuda/lib64/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so* 2>/dev/null | head -3 >"$LOGDIR/build-nccl.log"
    say "INFO nccl: $(tr '\n' ' ' <"$LOGDIR/build-nccl.log") torch python: ${PY:-none}"
    [ -n "$PY" ] || fail "no Python with torch + CUDA: DDP rows and the torchrun check will not run"
}

# the machine's GPU count
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
ratio() { "${PY:-python3}" -c "print('%.2fx' % ($2 / $1))" 2>/dev/null; }

# scaling NAME MODEL_ARGS BATCH MIN2 MIN4 DDP_ARGS: ours and DDP's images/s on 1, 2 and (where there are 4 GPUs)
# 4 GPUs; ours' speedups >= MIN2 and MIN4; ours with bf16 gradient sums on the most GPUs
scaling() {
    local name=$1 margs=$2 batch=$3 min2=$4 min4=$5 ddpargs=$6
    say "== scaling $name ($(date -u +%FT%TZ))"
    local counts="1 2" g top
    [ "$NGPU" -ge 4 ] && counts="1 2 4"
    declare -A C D
    for g in $counts; do
        step "$name-cnn$g" 280 "$CNN" bench --mode train $margs --dtype bf16 --batch "$batch" --gpus "$g" --repeat 20 --warmup 5 -o jsonl
        C[$g]=$(ips "$LOGDIR/$name-cnn$g.log")
        top=$g
    done
    step "$name-cnn${top}-bf16sums" 280 "$CNN" bench --mode train $margs --dtype bf16 --batch "$batch" --gpus "$top" --allreduce bf16 --repeat 20 --warmup 5 -o jsonl
    local cb
    cb=$(ips "$LOGDIR/$name-cnn${top}-bf16sums.log")
    if [ -n "$PY" ]; then
        for g in $counts; do
            step "$name-ddp$g" 200 "${TORCHRUN[@]}" --nproc_per_node "$g" bench/ddp_bench.py $ddpargs --batch "$batch" --dtype bf16
            D[$g]=$(ips "$LOGDIR/$name-ddp$g.log")
        done
    fi
    local hdr="| $name b$batch/GPU bf16 |" sep="|---|" row_c="| cnn |" row_d="| pytorch DDP |"
    for g in $counts; do
        hdr="$hdr $g GPU img/s |"; sep="$sep---|"
        row_c="$row_c ${C[$g]:-error} |"; row_d="$row_d ${D[$g]:-n/a} |"
    done
    for g in $counts; do
        [ "$g" = 1 ] && continue
        hdr="$hdr ${g}x speedup |"; sep="$sep---|"
        row_c="$row_c $(ratio "${C[1]:-0}" "${C[$g]:-0}") |"; row_d="$row_d $(ratio "${D[1]:-0}" "${D[$g]:-0}") |"
    done
    say "$hdr"; say "$sep"; say "$row_c"; say "$row_d"
    say "INFO $name cnn on $top GPUs with --allreduce bf16: ${cb:-error} img/s (fp32 sums: ${C[$top]:-error})"
    # the tables again for bench/results/DATE-MACHINE-multi-gpu.md (BENCHMARKS.md's section)
    printf '%s\n' "$hdr" "$sep" "$row_c" "$row_d" "" "$name on $top GPUs with \`--allreduce bf16\`: ${cb:-error} img/s (fp32 sums: ${C[$top]:-error})." "" >>"$LOGDIR/multi-gpu.md"
    for g in $counts; do
        [ "$g" = 1 ] && continue
        local min=$min2
        [ "$g" = 4 ] && min=$min4
        if [ -n "${C[1]:-}" ] && [ -n "${C[$g]:-}" ] && "${PY:-python3}" -c "import sys; sys.exit(0 if ${C[$g]} / ${C[1]} >= $min else 1)"; then
            pass "$name scaling on $g GPUs >= ${min}x"
        else
            fail "$name scaling: 1 GPU ${C[1]:-error}, $g GPUs ${C[$g]:-error} img/s (need >= ${min}x)"
        fi
    done
}

# loss_match A B N TOL STRICT: the per-step losses of two metrics.jsonl files over N steps; exit 0 when the first
# STRICT steps are within TOL. Beyond the first steps fp32 rounding (the order of the sums differs between 1 and N
# GPUs) grows step by step through ReLU and max-pool decisions: the CPU oracle, where the sums' order is the only
# difference, grows alike (docs/perf-log.md step 66); so the line also gives the first step past TOL and the
# largest difference over all N.
loss_match() {
    "${PY:-python3}" - "$1" "$2" "$3" "$4" "$5" <<'PY'
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b, n, tol, strict = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
steps = [s for s in range(1, n + 1) if s in a and s in b]
d = {s: abs(a[s] - b[s]) for s in steps}
over = [s for s in steps if d[s] > tol]
head = max((d[s] for s in steps if s <= strict), default=float("inf"))
print("steps 1-%d: max |loss difference| %.2g; over %d steps: max %.2g, first step past %g: %s (step 1: %.7f vs %.7f)"
      % (strict, head, len(steps), max(d.values(), default=float("inf")), tol, over[0] if over else "none",
         a.get(1, float("nan")), b.get(1, float("nan"))))
sys.exit(0 if len(steps) == n and head <= tol else 1)
PY
}
last_top1() { sed -n 's/.*top1 *\([0-9.]*\)%.*/\1/p' "$1" | tail -1; }

stage_equiv() {
    say "== equiv-a ($(date -u +%FT%TZ))"
    local R=$LOGDIR/runs
    rm -rf "$R"; mkdir -p "$R"
    local V="--model vgg11 --input-size 32 --num-classes 10 --dropout 0 --data synthetic --train-size 6400 --steps 50
             --lr 0.002 --dtype fp32 --deterministic --eval-size 0 --no-progress --no-augment"
    step equiv-vgg1 280 "$CNN" train $V --batch 64 --gpus 1 --out "$R/vgg1"
    local g
    for g in 2 4; do
        [ "$NGPU" -ge $g ] || continue
        step equiv-vgg$g 280 "$CNN" train $V --batch-global 64 --gpus $g --out "$R/vgg$g"
        if loss_match "$R/vgg1/metrics.jsonl" "$R/vgg$g/metrics.jsonl" 50 1e-5 50 >"$LOGDIR/equiv-vgg$g-compare.log" 2>&1; then
            pass "equiv vgg11 fp32 ${g}x$((64 / g)) vs 1x64: $(cat "$LOGDIR/equiv-vgg$g-compare.log")"
        else
            fail "equiv vgg11 fp32 ${g}x$((64 / g)) vs 1x64: $(cat "$LOGDIR/equiv-vgg$g-compare.log")"
        fi
        cmp -s "$R/vgg1/model.safetensors" "$R/vgg$g/model.safetensors" &&
            pass "equiv vgg11 ${g}x$((64 / g)): model.safetensors bitwise equal" ||
            fail "equiv vgg11 ${g}x$((64 / g)): model.safetensors differs from 1x64's"
    done
    # BatchNorm over the whole global batch: the same steps as one GPU's; without --sync-bn, not even the first
    local B="--model resnet18 --stem cifar --num-classes 10 --data synthetic --train-size 6400 --steps 50
             --lr 0.002 --dtype fp32 --deterministic --eval-size 0 --no-progress --no-augment"
    step equiv-syncbn1 280 "$CNN" train $B --batch 64 --gpus 1 --out "$R/sbn1"
    step equiv-localbn2 280 "$CNN" train $B --batch-global 64 --gpus 2 --out "$R/lbn2"
    if ! loss_match "$R/sbn1/metrics.jsonl" "$R/lbn2/metrics.jsonl" 50 1e-4 1 >"$LOGDIR/equiv-localbn2-compare.log" 2>&1; then
        pass "per-GPU BatchNorm differs from 1 GPU at once (the check can fail): $(cat "$LOGDIR/equiv-localbn2-compare.log")"
    else
        fail "per-GPU BatchNorm matched 1 GPU: the --sync-bn check below proves nothing: $(cat "$LOGDIR/equiv-localbn2-compare.log")"
    fi
    for g in 2 4; do
        [ "$NGPU" -ge $g ] || continue
        step equiv-syncbn$g 280 "$CNN" train $B --batch-global 64 --gpus $g --sync-bn --out "$R/sbn$g"
        # every step and the model bit for bit: --deterministic sums the batch by slices in one tree, which the
        # ranks' sums continue (src/core/shards.h)
        if loss_match "$R/sbn1/metrics.jsonl" "$R/sbn$g/metrics.jsonl" 50 1e-5 50 >"$LOGDIR/equiv-syncbn$g-compare.log" 2>&1; then
            pass "equiv resnet18 --sync-bn fp32 ${g}x$((64 / g)) vs 1x64: $(cat "$LOGDIR/equiv-syncbn$g-compare.log")"
        else
            fail "equiv resnet18 --sync-bn fp32 ${g}x$((64 / g)) vs 1x64: $(cat "$LOGDIR/equiv-syncbn$g-compare.log")"
        fi
        if cmp -s "$R/sbn1/model.safetensors" "$R/sbn$g/model.safetensors"; then
            pass "equiv resnet18 --sync-bn fp32 ${g}x$((64 / g)) vs 1x64: model.safetensors bitwise equal"
        else
            fail "equiv resnet18 ${g}x$((64 / g)): model.safetensors differs from 1x64's"
        fi
    done
    [ -n "${EQUIV_SKIP_ACC:-}" ] || stage_equiv_acc
}

# BatchNorm per GPU (DDP's default): 1 vs 2 GPUs at the same global batch end within 0.5 points of top-1, on
# Fashion-MNIST where it is at hand (data/fashion-mnist or Debian's package), else on the synthetic set
stage_equiv_acc() {
    say "== equiv-acc ($(date -u +%FT%TZ))"
    local R=$LOGDIR/runs-acc d data="--data synthetic --train-size 16384 --eval-size 4096"
    rm -rf "$R"; mkdir -p "$R"
    for d in /usr/share/datasets/fashion-mnist data/fashion-mnist; do
        [ -f "$d/train-images-idx3-ubyte.gz" ] && data="--data fashion-mnist:$d"
    done
    local C="--model resnet18 --stem cifar --num-classes 10 $data --epochs 2 --lr 0.2 --warmup 50 --dtype bf16
             --no-progress"
    step equiv-r18-1 280 "$CNN" train $C --batch 512 --gpus 1 --out "$R/r18-1"
    step equiv-r18-2 280 "$CNN" train $C --batch-global 512 --gpus 2 --out "$R/r18-2"
    local a b
    a=$(last_top1 "$LOGDIR/equiv-r18-1.log"); b=$(last_top1 "$LOGDIR/equiv-r18-2.log")
    if [ -n "$a" ] && [ -n "$b" ] && "${PY:-python3}" -c "import sys; sys.exit(0 if abs($a - $b) <= 0.5 else 1)"; then
        pass "equiv resnet18 ${data#--data } top-1: 1 GPU $a%, 2 GPUs $b%"
    else
        fail "equiv resnet18 ${data#--data } top-1: 1 GPU ${a:-error}%, 2 GPUs ${b:-error}% (within 0.5 points needed)"
    fi
}

stage_equiv_runs() {
    say "== equiv-b ($(date -u +%FT%TZ))"
    local R=$LOGDIR/runs-b
    rm -rf "$R"; mkdir -p "$R"
    local S="--model resnet18 --stem cifar --num-classes 10 --data synthetic --train-size 4096 --steps 20
             --eval-size 1024 --no-progress"
    if [ -n "$PY" ]; then
        step equiv-torchrun 280 "${TORCHRUN[@]}" --nproc_per_node 2 --no-python "$CNN" train $S --batch 64 --out "$R/torchrun"
        [ $RC -eq 0 ] && [ -f "$R/torchrun/model.safetensors" ] && pass "torchrun-started run" ||
            fail "torchrun-started run: exit $RC"
    fi
    rm -f "$R/rdv.id"
    ( RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 timeout 280 "$CNN" train $S --batch 64 --dist-init "file://$R/rdv.id" --dist-timeout 120 --out "$R/file" \
          >"$LOGDIR/equiv-file-rank1.log" 2>&1 ) &
    local p1=$!
    step equiv-file-rank0 280 env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 "$CNN" train $S --batch 64 --dist-init "file://$R/rdv.id" --dist-timeout 120 --out "$R/file"
    wait $p1
    local rc1=$?
    [ $RC -eq 0 ] && [ $rc1 -eq 0 ] && pass "file:// rendezvous run" || fail "file:// rendezvous run: exit $RC / $rc1"
    # resume with another number of GPUs at the same global batch (the position is in global steps)
    step equiv-resume-2 280 "$CNN" train $S --batch 32 --gpus 2 --stop-after 10 --out "$R/resume"
    step equiv-resume-1 280 "$CNN" train $S --batch 64 --gpus 1 --resume --out "$R/resume"
    [ $RC -eq 0 ] && grep -q 'resumed from .* at step 10' "$LOGDIR/equiv-resume-1.log" && pass "resume 2 GPUs -> 1 GPU" ||
        fail "resume 2 GPUs -> 1 GPU: exit $RC"
}

# the pid of rank R among the launcher L's children
rank_pid() {
    local p
    for p in $(pgrep -P "$1"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2"; then echo "$p"; return; fi
    done
}

stage_faults() {
    local first=$1 last=$2
    say "== faults, trials $first..$last ($(date -u +%FT%TZ))"
    local R=$LOGDIR/faults TO=60 ok=0 n=0
    mkdir -p "$R"
    local F="--model resnet18 --stem cifar --num-classes 10 --data synthetic --train-size 16384 --batch 128
             --checkpoint-every 5 --eval-size 0 --tune none --no-progress --dist-timeout $TO"
    # the kernels compiled once beforehand, so that no trial's first step waits for NVRTC
    step faults-warm 280 "$CNN" train $F --gpus 1 --steps 2 --out "$R/warm"
    F="$F --steps 60"
    for trial in $(seq "$first" "$last"); do
        local victim=$((trial % 2)) mode=kill
        [ "$trial" -gt 10 ] && mode=stop
        local out=$R/t$trial log=$LOGDIR/faults-t$trial.log
        rm -rf "$out"
        "$CNN" train $F --gpus 2 --out "$out" >"$log" 2>&1 &
        local L=$! t=0
        # wait for the first checkpoint and a few more steps (at most 120 s)
        while [ $t -lt 1200 ] && ! { [ -f "$out/checkpoint.safetensors" ] && [ "$(wc -l <"$out/metrics.jsonl" 2>/dev/null || echo 0)" -ge $((6 + trial)) ]; }; do
            sleep 0.1; t=$((t + 1))
        done
        local vp
        vp=$(rank_pid $L $victim)
        if [ -z "$vp" ]; then
            fail "fault trial $trial: rank $victim not found (launcher exited? $(tail -2 "$log" | tr '\n' '|'))"
            kill -9 $L 2>/dev/null; wait $L 2>/dev/null; continue
        fi
        local t0 t1 rc sp
        sp=$(rank_pid $L $((1 - victim)))
        t0=$(date +%s.%N)
        if [ $mode = kill ]; then kill -9 "$vp"; else kill -STOP "$vp"; fi
        ( sleep $((TO + 40)); kill -9 $L 2>/dev/null ) & local guard=$!
        # the survivor's own exit (the launcher reaps it), then the launcher's
        while [ -n "$sp" ] && kill -0 "$sp" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$sp/stat" 2>/dev/null)" != Z ]; do
            sleep 0.05
        done
        t1=$(date +%s.%N)
        wait $L; rc=$?
        kill $guard 2>/dev/null; wait $guard 2>/dev/null
        [ $mode = stop ] && kill -9 "$vp" 2>/dev/null
        local dt
        dt=$("${PY:-python3}" -c "print('%.1f' % ($t1 - $t0))")
        local named=0
        if [ $mode = kill ]; then grep -q "peer rank $victim" "$log" && named=1
        else grep -q "no progress for" "$log" && named=1; fi
        local in_time
        in_time=$("${PY:-python3}" -c "print(1 if $dt <= $TO + 10 else 0)")
        # the checkpoint resumes (on 2 GPUs) to the end of the run
        timeout 280 "$CNN" train $F --gpus 2 --resume --out "$out" >"$log.resume" 2>&1
        local rrc=$?
        n=$((n + 1))
        if [ $rc -ne 0 ] && [ $named = 1 ] && [ "$in_time" = 1 ] && [ $rrc -eq 0 ] && [ -f "$out/model.safetensors" ]; then
            ok=$((ok + 1))
            pass "fault trial $trial ($mode rank $victim): group exit $rc after $dt s, named; resumed"
        else
            fail "fault trial $trial ($mode rank $victim): exit $rc after $dt s, named $named, resume exit $rrc; $(grep -h 'cnn:' "$log" | head -3 | tr '\n' '|')"
        fi
        say "  survivor: $(grep -h 'peer rank\|no progress' "$log" | head -1)"
    done
    say "INFO fault trials: $ok of $n passed"
}

for s in "$@"; do
    case $s in
    build) stage_build ;;
    scaling-r50) scaling r50 "--model resnet50" 256 1.9 3.7 "--model resnet50" ;;
    scaling-r18) scaling r18 "--model resnet18 --stem cifar --input-size 32 --num-classes 10" 512 1.8 3.4 "--model resnet18 --stem cifar" ;;
    equiv-a) stage_equiv ;;
    equiv-acc) stage_equiv_acc ;;
    equiv-b) stage_equiv_runs ;;
    faults-a) stage_faults 1 6 ;;
    faults-b) stage_faults 7 12 ;;
    all) stage_build; scaling r50 "--model resnet50" 256 1.9 3.7 "--model resnet50"
         scaling r18 "--model resnet18 --stem cifar --input-size 32 --num-classes 10" 512 1.8 3.4 "--model resnet18 --stem cifar"
         stage_equiv; stage_equiv_runs; stage_faults 1 12 ;;
    *) echo "unknown stage $s" >&2; exit 2 ;;
    esac
done
echo "---- summary ($SUM)"
cat "$SUM"
exit $FAILED
