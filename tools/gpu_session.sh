#!/usr/bin/env bash
# tools/gpu_session.sh -- what a call to a lent GPU machine runs, by stages, with a summary table printed last.
# Each stage has its own time limit, so a hang costs that stage only; a device call has 10 minutes, so put the
# stages that fit together in one call and the rest in the next (the build stays on a warm machine).
#
#   tools/gpu_session.sh [stage...]        (default: build test)
#
#   build       make all (GIT_COMMIT=hash: the commit the build records)
#   test        make test-gpu without the sanitizers (SANITIZER=1 keeps them): the op tests synchronised and not,
#               NVRTC over every program, the golden tests against PyTorch on this GPU (zoo fp32, bf16, TF32;
#               gradients; training), resume
#   ops         the op tests alone (gpu_test_ops, synchronised then asynchronous; GPU_TEST_GROUPS to select)
#   zoo         every zoo model against PyTorch on this GPU in bf16 and in TF32 (tests/golden/test_zoo_infer.py)
#   sanitize    compute-sanitizer memcheck, racecheck, initcheck, synccheck over the quick op tests
#   suite       the standard benchmark suite, both sides (bench/run.sh); results.tgz comes back
#   ab-build    unpack and build the base tree of an A/B: tmp/ab-base.tgz (`git archive BASE | gzip`, carried in
#               an ignored tmp/), or AB_BASE=<commit> where the tree has its .git
#   ab          this tree against the base tree (built first if ab-build has not run): ResNet-50 bf16 per layer at
#               b256 (bench/ab_layers.py's table), then the whole forward at b256 and b1 in AB_REPS (default 3)
#               alternating processes per arm, base first; prints each arm's median and new/base, and fails where
#               new is more than AB_TOL (default 2) percent slower
#   profile     ncu on one warm ResNet-50 bf16 b256 forward: every conv kernel's speed of light and stalls
#               (PROFILE_MODEL, PROFILE_BATCH to change it); profile.csv comes back
#
# Past experiments' recipes (row-by-row A/Bs, clocks, cuDNN's kernels, timing protocols) are in docs/perf-log/,
# with the commands they ran. Logs go to $OUT (the device tool's return folder; ./gpu-out when unset):
# session.log (everything), summary.txt (the table), logs.tgz (every stage's log).
set -u
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
STAGES=${*:-build test}
export PYTHON=${PYTHON:-python3} BUILD=${BUILD:-build}
export CNN_CACHE_DIR=${CNN_CACHE_DIR:-/tmp/cnn-cache}
LOGDIR=/tmp/gpu-logs
mkdir -p "$LOGDIR"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY.rows"
exec > >(tee -a "$OUT/session.log") 2>&1

row() { printf '%-24s %-7s %6s s  %s\n' "$1" "$2" "$3" "$4" >>"$SUMMARY.rows"; }
stage() { # name limit command...: runs it, logs to $LOGDIR/name.log, records PASS/FAIL/SKIP counts and the verdict
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS log=$LOGDIR/$name.log
    echo "=== $name (limit ${limit}s): $*"
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
    local rc=$? p f s verdict=ok
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
    grep -E '^(FAIL|SKIP) |^# |passed, ' "$log" | head -n 60
    [ $rc -ne 0 ] && tail -n 25 "$log"
    { [ $rc -ne 0 ] || [ "$f" -gt 0 ]; } && verdict=FAIL
    [ $rc -eq 124 ] && verdict=TIMEOUT
    row "$name" "$verdict" $((SECONDS - t0)) "rc=$rc pass=$p fail=$f skip=$s"
}
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
nproc=$(nproc)

echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo "${GIT_COMMIT:-none}") stages: $STAGES"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
$PYTHON -c 'import torch; print("# torch", torch.__version__, torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1

if has build; then
    stage build 300 make -j16 BUILD="$BUILD" ${GIT_COMMIT:+GIT_COMMIT=$GIT_COMMIT} all
fi
if has suite; then # first after the build: its cold start must be the machine's first compilation (perf-log step 19)
    stage suite 540 bench/run.sh
    tar czf "$OUT/results.tgz" bench/results BENCHMARKS.md 2>/dev/null
fi
if has test; then
    stage test-gpu 590 env SANITIZER="${SANITIZER:-0}" make BUILD="$BUILD" test-gpu
fi
if has ops; then
    stage nvrtc-quick 120 env CNN_TEST_QUICK=1 "$BUILD/test_nvrtc"
    # shellcheck disable=SC2086
    stage gpu-ops 300 env CNN_SYNC_DEBUG=1 "$BUILD/gpu_test_ops" ${GPU_TEST_GROUPS:-}
    # shellcheck disable=SC2086
    stage gpu-ops-async 200 env CNN_SYNC_DEBUG=0 "$BUILD/gpu_test_ops" ${GPU_TEST_GROUPS:-}
fi
if has zoo; then # every zoo model through the tensor-core kernels, bound relative to PyTorch's own bf16 / TF32 error
    for dt in bf16 tf32; do
        stage "zoo-$dt" 300 env CNN_TEST_DEVICE=cuda CNN_TEST_THREADS="$nproc" CNN_ZOO_DTYPE=$dt PYTHONUNBUFFERED=1 \
            "$PYTHON" tests/golden/test_zoo_infer.py
    done
fi
if has sanitize; then # quick cases, in-process (the sanitizer follows one process), the cache warm; bf16
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    groups=${GPU_TEST_GROUPS:-"pointwise bn pool conv conv_fast conv_first conv_pair linear xent optim graph"}
    for tool in memcheck racecheck initcheck synccheck; do
        opts=""; [ $tool = memcheck ] && opts="--leak-check full --padding 2048"
        # shellcheck disable=SC2086
        stage "sanitize-$tool" 280 env CNN_TEST_QUICK=1 CNN_SYNC_DEBUG=1 "$SAN" --tool $tool $opts --error-exitcode 1 \
            --print-limit 20 "$BUILD/gpu_test_ops" --no-fork --dtype bf16 $groups
    done
fi

# ---- A/B of two trees -----------------------------------------------------------------------------------------
ab_build() {
    [ -x /tmp/ab-base/build/cnn ] && return 0
    rm -rf /tmp/ab-base && mkdir -p /tmp/ab-base
    if [ -f tmp/ab-base.tgz ]; then
        tar xzf tmp/ab-base.tgz -C /tmp/ab-base
    elif [ -n "${AB_BASE:-}" ] && git rev-parse -q --verify "$AB_BASE^{commit}" >/dev/null; then
        git archive "$AB_BASE" | tar x -C /tmp/ab-base
    else
        echo "ab: no base tree: carry tmp/ab-base.tgz (git archive BASE | gzip) or set AB_BASE to a commit here"
        row ab-build FAIL 0 "no base tree"
        return 1
    fi
    stage ab-build-base 300 make -C /tmp/ab-base -j16 BUILD=build GIT_COMMIT=ab-base build/cnn
    [ -x /tmp/ab-base/build/cnn ]
}
ab_bin() { if [ "$1" = base ]; then echo /tmp/ab-base/build/cnn; else echo "$BUILD/cnn"; fi; }
if has ab-build; then ab_build; fi
if has ab && ab_build; then
    reps=${AB_REPS:-3}
    for arm in base new; do # each arm its own kernel cache, tuned here: b1 warmed, then b256 per layer
        rm -rf "/tmp/cnn-cache-ab-$arm"
        stage "ab-warm-$arm" 120 env CNN_CACHE_DIR="/tmp/cnn-cache-ab-$arm" "$(ab_bin $arm)" bench --model resnet50 \
            --batch 1 --dtypes bf16 --device cuda --repeat 2 --warmup 1
        stage "ab-layers-$arm" 150 bash -c "CNN_CACHE_DIR=/tmp/cnn-cache-ab-$arm $(ab_bin $arm) bench --model resnet50 \
            --batch 256 --dtypes bf16 --layers --device cuda --repeat 20 --warmup 5 >$LOGDIR/ab-layers-$arm.md"
    done
    $PYTHON bench/ab_layers.py "$LOGDIR/ab-layers-base.md" "$LOGDIR/ab-layers-new.md" >"$OUT/ab-layers.md" 2>&1 &&
        cat "$OUT/ab-layers.md"
    for rep in $(seq "$reps"); do # the whole forward, arms alternating, each a fresh process on its warm cache
        for arm in base new; do
            stage "ab-whole-$arm-$rep" 120 bash -c "CNN_CACHE_DIR=/tmp/cnn-cache-ab-$arm $(ab_bin $arm) bench \
                --model resnet50 --batch 256,1 --dtypes bf16 --device cuda --repeat 50 --warmup 10 >$LOGDIR/ab-whole-$arm-$rep.md"
        done
    done
    $PYTHON - "$LOGDIR" "$reps" "${AB_TOL:-2}" <<'EOF' | tee "$OUT/ab-whole.txt"
import statistics, sys
logdir, reps, tol = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ms = {}  # (arm, batch) -> [ms median of each process]
for arm in ("base", "new"):
    for rep in range(1, reps + 1):
        for line in open(f"{logdir}/ab-whole-{arm}-{rep}.md"):
            c = [x.strip() for x in line.strip().strip("|").split("|")]
            if len(c) > 5 and c[0] == "resnet50":
                ms.setdefault((arm, c[2]), []).append(float(c[5]))
bad = 0
for batch in sorted({b for _, b in ms}, key=int):
    b, n = statistics.median(ms[("base", batch)]), statistics.median(ms[("new", batch)])
    ok = n <= b * (1 + tol / 100)
    bad += not ok
    print(f"{'PASS' if ok else 'FAIL'} ab.resnet50_bf16_b{batch}: base {b:.4f} ms, new {n:.4f} ms, new/base {n / b:.4f} "
          f"(medians of {reps} processes each: base {ms[('base', batch)]}, new {ms[('new', batch)]}; bound +{tol}%)")
sys.exit(1 if bad else 0)
EOF
    abrc=${PIPESTATUS[0]}
    row ab-whole "$([ "$abrc" = 0 ] && echo ok || echo FAIL)" 0 "new/base in ab-whole.txt"
fi

# ---- profile ---------------------------------------------------------------------------------------------------
if has profile; then # warm the cache first so that no tuning launch is profiled
    # shellcheck disable=SC2086
    args="bench --model ${PROFILE_MODEL:-resnet50} --batch ${PROFILE_BATCH:-256} --dtypes bf16 --device cuda"
    stage profile-warm 200 "$BUILD/cnn" $args --repeat 2 --warmup 1
    stage profile 400 ncu --kernel-name regex:conv2d --launch-count 60 --section SpeedOfLight --section WarpStateStats \
        --section Occupancy --csv --page details "$BUILD/cnn" $args --repeat 1 --warmup 0
    cp "$LOGDIR/profile.log" "$OUT/profile.csv" 2>/dev/null
fi

tar czf "$OUT/logs.tgz" -C "$LOGDIR" . 2>/dev/null
{ echo; echo "stage                    result    time     details"; cat "$SUMMARY.rows"; } >"$SUMMARY"
rm -f "$SUMMARY.rows"
cat "$SUMMARY"
