#!/usr/bin/env bash
# tests/run_gpu.sh -- the GPU test battery (make test-gpu), on a machine with an NVIDIA GPU; prints one summary
# line "N passed, N failed, N skipped" like tests/run.sh and exits non-zero on any failure.
#   1. test_nvrtc: NVRTC compiles every kernel program for sm_80 and sm_90a (no GPU needed)
#   2. gpu_test_ops with CNN_SYNC_DEBUG=1: every op vs the CPU backend and float64, one forked process per group
#      (a crash or a sticky device error fails that group only); a synchronised launch names a failing kernel
#   3. gpu_test_ops again without CNN_SYNC_DEBUG, warm kernel cache: asynchronous execution gives the same answers
#   4. compute-sanitizer memcheck / racecheck / initcheck / synccheck over the quick op tests (B9)
#   5. end to end on the GPU: tests/golden (zoo logits in fp32 and bf16, gradients, 20 training steps fp32 and
#      bf16, against PyTorch on the same GPU) with CNN_TEST_DEVICE=cuda, and tests/cli/test_resume.sh (bit-exact
#      resume, repeatability)
# Environment: BUILD (default build), SANITIZER=0 to skip step 4, SANITIZER_TOOLS (default "memcheck racecheck
# initcheck synccheck"), GPU_TEST_GROUPS to restrict steps 2-4 to some groups (e.g. "conv bn"), TEST_LOG_DIR.
set -u
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
cd "$(dirname "$0")/.."
LOG=${TEST_LOG_DIR:-$BUILD/test-logs-gpu}
mkdir -p "$LOG"
case $LOG in /*) ;; *) LOG=$PWD/$LOG ;; esac
export CNN_CACHE_DIR=${CNN_CACHE_DIR:-$LOG/kernel-cache}
GROUPS_SEL=${GPU_TEST_GROUPS:-}
passed=0; failed=0; skipped=0
failures=()

run_one() { # name, command...
    local name=$1; shift
    local log="$LOG/$name.log" t0=$SECONDS
    echo "== $name"
    "$@" >"$log" 2>&1
    local rc=$?
    local p f s
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
    grep -E '^(FAIL|SKIP) ' "$log" | head -n 40 | sed 's/^/   /'
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "   FAIL $name: exited with status $rc and no FAIL line; last lines of $log:"
        tail -n 15 "$log" | sed 's/^/     | /'
        f=1
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    [ "$f" -gt 0 ] && failures+=("$name")
    echo "   $p passed, $f failed, $s skipped ($((SECONDS - t0)) s)"
}

if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/# GPU: /'
fi

run_one nvrtc "$BUILD/test_nvrtc"
# shellcheck disable=SC2086
run_one gpu-ops env CNN_SYNC_DEBUG=1 "$BUILD/gpu_test_ops" $GROUPS_SEL
# shellcheck disable=SC2086
run_one gpu-ops-async env CNN_SYNC_DEBUG=0 "$BUILD/gpu_test_ops" $GROUPS_SEL

SAN_BIN=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
if [ "${SANITIZER:-1}" = 0 ]; then
    echo "== sanitizers: skipped (SANITIZER=0)"
elif [ ! -x "$SAN_BIN" ]; then
    echo "SKIP sanitizers: compute-sanitizer not found (PATH, $CUDA_HOME/bin)"
    skipped=$((skipped + 1))
else
    # quick shapes, in-process (--no-fork: the sanitizer follows one process), the cache warmed by step 2;
    # the oom group is left out (an absurd allocation is the point there, and memcheck would report it)
    SAN_GROUPS=${GROUPS_SEL:-"convert pointwise dropout flatten channel_sum bn scale_shift pool conv conv_configs conv_fast linear xent prep optim nonfinite graph determinism choose_n"}
    for tool in ${SANITIZER_TOOLS:-memcheck racecheck initcheck synccheck}; do
        opts=""
        [ $tool = memcheck ] && opts="--leak-check full --padding 2048"
        # racecheck is the slow one: the TF32 tensor-core cases alone ran 268 quick checks in 240 s (perf-log 14)
        limit=900
        [ $tool = racecheck ] && limit=1800
        # shellcheck disable=SC2086
        run_one "sanitizer-$tool" env CNN_TEST_QUICK=1 CNN_SYNC_DEBUG=1 timeout $limit \
            "$SAN_BIN" --tool "$tool" $opts --error-exitcode 1 --print-limit 20 "$BUILD/gpu_test_ops" --no-fork $SAN_GROUPS
    done
fi

# ---- end to end, against PyTorch on the same GPU
PYTHON=${PYTHON:-python3}
for t in tests/golden/test_zoo_infer.py tests/golden/test_grad.py tests/golden/test_train.py; do
    run_one "e2e-$(basename "$t" .py)" env CNN_TEST_DEVICE=cuda CNN_TEST_THREADS=$(nproc) PYTHONUNBUFFERED=1 "$PYTHON" "$t"
done
# every zoo model through the bf16 tensor-core kernels (bound relative to PyTorch autocast's own bf16 error)
run_one e2e-zoo-bf16 env CNN_TEST_DEVICE=cuda CNN_TEST_THREADS=$(nproc) CNN_ZOO_DTYPE=bf16 PYTHONUNBUFFERED=1 \
    "$PYTHON" tests/golden/test_zoo_infer.py
# and with fp32 tensors and TF32 forward convolutions (bound relative to PyTorch's own TF32 error)
run_one e2e-zoo-tf32 env CNN_TEST_DEVICE=cuda CNN_TEST_THREADS=$(nproc) CNN_ZOO_DTYPE=tf32 PYTHONUNBUFFERED=1 \
    "$PYTHON" tests/golden/test_zoo_infer.py
run_one e2e-resume env CNN_TEST_DEVICE=cuda BUILD="$BUILD" bash tests/cli/test_resume.sh

echo
[ ${#failures[@]} -gt 0 ] && echo "failed programs: ${failures[*]} (logs in $LOG)"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
