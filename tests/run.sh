#!/usr/bin/env bash
# tests/run.sh — runs every test of `make test` and prints one summary line "N passed, N failed, N skipped".
# Each program prints PASS/FAIL/SKIP lines (tests/unit/test.h, tests/lib.sh, tests/golden/common.py); a
# program that exits non-zero without printing a FAIL line (a crash, a sanitizer report) counts as a failure.
#
# The programs run as a pool of TEST_JOBS jobs at once (default: the number of CPUs), the longest first, so the
# suite takes about its total CPU time divided by the CPUs. Each program's block is printed when it ends, with
# its wall time and CPU time (/usr/bin/time, where present). Nothing in a test may depend on the machine's load
# (timings are never asserted), so running them side by side changes no verdict. TEST_ONLY=regex runs the
# programs whose names match.
set -u
BUILD=${BUILD:-build}
ASAN_BUILD=${ASAN_BUILD:-}
PYTHON=${PYTHON:-/usr/bin/python3}
JOBS=${TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
export BUILD ASAN_BUILD PYTHON
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# OpenMP threads that find their cores busy with the other jobs yield instead of spinning
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# OpenBLAS (PyTorch's float64 references) one thread per call: the jobs and PyTorch's own threads use the cores
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
cd "$(dirname "$0")/.."
LOG=${TEST_LOG_DIR:-$BUILD/test-logs}
mkdir -p "$LOG"
passed=0; failed=0; skipped=0
failures=()
t_start=$SECONDS

# ---- the job list: name, then the command (one job per line, longest first; $B = $BUILD, $A = $ASAN_BUILD) ----
jobs_list=()
add() { jobs_list+=("$*"); }
EMU="env CNN_TEST_QUICK=1 BUILD=$BUILD bash tests/gpu/emu/run.sh"
if [ -x "$BUILD/gpu_test_ops" ]; then
    # the tensor-core forward kernels (bf16; fp32 in TF32; fp32 in FMA) on the CPU emulator of tests/gpu/emu: the
    # real kernel sources, compiled as C++, on the quick shapes (a GPU runs them all: make test-gpu)
    add "emu-conv_fast-bf16 $EMU --dtype bf16 conv_fast"
fi
[ -x "$BUILD/test_nvrtc" ] && add "unit-test_nvrtc $BUILD/test_nvrtc"
add "cli-test_resume bash tests/cli/test_resume.sh"
for t in tests/golden/test_*.py; do
    [ -f "$t" ] && add "golden-$(basename "$t" .py) env PYTHONUNBUFFERED=1 $PYTHON $t"
done
if [ -x "$BUILD/gpu_test_ops" ]; then
    add "emu-conv_fast-tf32 $EMU --dtype tf32 conv_fast"
    add "emu-conv_fast-f32 $EMU --dtype f32 conv_fast"
    # two convolutions summed in one kernel (the TMA rows' second operand stream), and the unfused path
    add "emu-conv_pair-bf16 $EMU --dtype bf16 conv_pair"
    # wgrad on wgmma (MN-major operands by TMA, split reductions)
    add "emu-conv_wgrad-bf16 $EMU --dtype bf16 conv_wgrad"
    # wgrad over few input channels (the first layers) on mma.sync, bf16 and f16
    for dt in bf16 f16; do add "emu-conv_wgrad_few-$dt $EMU --dtype $dt conv_wgrad_few"; done
    # pooling: max-pool's argmax bytes from the forward to the backward, the adaptive backward by vectors
    add "emu-pool-bf16 $EMU --dtype bf16 pool"
    # dgrad on the forward tensor-core kernels, every stride (phases)
    add "emu-conv_dgrad-bf16 $EMU --dtype bf16 conv_dgrad"
    # dgrad with the ReLU before the conv taken in (the FILT_T epilogue's gate; the rewrite and the pass)
    add "emu-dgrad_relu-bf16 $EMU --dtype bf16 dgrad_relu"
    # BatchNorm's training kernels with the residual add and ReLU fused, scalar and vector paths; channel sums, whole
    # and by --deterministic's slices in one call (channel_sum_rows)
    add "emu-bn-bf16 $EMU --dtype bf16 bn channel_sum"
    # the stem's BatchNorm backward with its max-pool's taken in (the pool's gradient never stored)
    for dt in bf16 f32; do add "emu-bn_pool-$dt $EMU --dtype $dt bn_pool"; done
    for dt in bf16 f16; do # the first-layer kernels and the fused stem + max-pool
        add "emu-conv_first-$dt $EMU --dtype $dt conv_first"
    done
    # the optimizers, the non-finite count and the training step's guard (reliability: docs/RELIABILITY.md)
    add "emu-guard $EMU optim nonfinite guard"
    for dt in f32 bf16; do # batch preparation: samples gathered from a whole dataset, crop, flip, channel repeat
        add "emu-prep-$dt $EMU --dtype $dt prep"
    done
    # the GPU JPEG path's crop + resize of decoded images, against its CPU twin and a float64 reference
    add "emu-resample $EMU resample"
    # --deterministic's one launch over a batch of slices takes a slice's kernel (cnn_conv2d.choose_n), bit for bit;
    # with an H100's SM count, so that a slice and the batch get different heuristic choices (split-K in fp32)
    for dt in f32 bf16; do add "emu-choose_n-$dt env CNN_EMU_SMS=132 $EMU --dtype $dt choose_n"; done
    # --deterministic's BatchNorm: one rank of 4 slices against two ranks of 2 (in turn, the collective's tree)
    # bitwise, its one-launch path forced on and off, the conv's sums taken by slices (bf16)
    for dt in f32 bf16; do add "emu-bn_ranks-$dt env CNN_EMU_SMS=132 $EMU --dtype $dt bn_ranks"; done
    # a dry run launches nothing and compiles what the real run (a tuned conv and a ReLU) then needs
    add "emu-dry_run-bf16 $EMU --dtype bf16 dry_run"
fi
for t in tests/cli/test_*.sh; do
    case $t in */test_resume.sh) continue ;; esac
    [ -f "$t" ] && add "cli-$(basename "$t" .sh) bash $t"
done
for t in "$BUILD"/test_*; do
    [ -x "$t" ] || continue
    case "$(basename "$t")" in test_nvrtc) continue ;; esac
    add "unit-$(basename "$t") $t"
done
if [ -n "$ASAN_BUILD" ]; then
    for t in "$ASAN_BUILD"/test_*; do
        [ -x "$t" ] || continue
        case "$(basename "$t")" in test_perf*) continue ;; esac
        add "asan-$(basename "$t") env CNN_TEST_QUICK=1 $t"
    done
    add "fuzz-replay bash tests/fuzz/replay.sh"
fi
for t in tests/reliability/test_*.sh; do
    [ -f "$t" ] && add "reliability-$(basename "$t" .sh) bash $t"
done

# the emulator's libraries, once, before jobs share them
if [ -x "$BUILD/gpu_test_ops" ] && ! BUILD=$BUILD bash tests/gpu/emu/run.sh --libs >"$LOG/emu-libs.log" 2>&1; then
    echo "FAIL emu-libs: cannot build the emulator's libraries: $(tail -c 300 "$LOG/emu-libs.log")"
    failed=$((failed + 1)); failures+=(emu-libs)
fi

# ---- the pool ------------------------------------------------------------------------------------------------
report() { # name, exit status, seconds
    local name=$1 rc=$2 secs=$3 log="$LOG/$1.log" p f s
    echo "== $name"
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
    grep -E '^(FAIL|SKIP) ' "$log" | sed 's/^/   /'
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "   FAIL $name: exited with status $rc and no FAIL line; last lines of $log:"
        tail -n 15 "$log" | sed 's/^/     | /'
        f=1
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    [ "$f" -gt 0 ] && failures+=("$name")
    local cpu=""
    [ -f "$LOG/$name.cpu" ] && cpu=$(awk 'END { if (NF == 2) printf ", %.0f s of CPU", $1 + $2 }' "$LOG/$name.cpu")
    echo "   $p passed, $f failed, $s skipped ($secs s$cpu)"
}

declare -A job_name job_start
running=0
reap() {
    local pid rc
    wait -n -p pid
    rc=$?
    report "${job_name[$pid]}" "$rc" $((SECONDS - job_start[$pid]))
    unset "job_name[$pid]" "job_start[$pid]"
    running=$((running - 1))
}
if [ -n "${TEST_ONLY:-}" ]; then echo "TEST_ONLY=$TEST_ONLY"; fi
echo "running ${#jobs_list[@]} programs, $JOBS at a time"
[ -x "$BUILD/gpu_test_ops" ] || { echo "SKIP emu: $BUILD/gpu_test_ops was not built (no CUDA headers in CUDA_HOME)"; skipped=$((skipped + 1)); }
for j in "${jobs_list[@]}"; do
    name=${j%% *}
    cmd=${j#* }
    if [ -n "${TEST_ONLY:-}" ] && ! [[ $name =~ $TEST_ONLY ]]; then continue; fi
    while [ "$running" -ge "$JOBS" ]; do reap; done
    # shellcheck disable=SC2086
    if [ -x /usr/bin/time ]; then
        (exec /usr/bin/time -o "$LOG/$name.cpu" -f "%U %S" $cmd) >"$LOG/$name.log" 2>&1 </dev/null &
    else
        (exec $cmd) >"$LOG/$name.log" 2>&1 </dev/null &
    fi
    job_name[$!]=$name
    job_start[$!]=$SECONDS
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do reap; done

echo
[ ${#failures[@]} -gt 0 ] && echo "failed programs: ${failures[*]} (logs in $LOG)"
echo "$passed passed, $failed failed, $skipped skipped in $((SECONDS - t_start)) s ($JOBS jobs)"
[ "$failed" -eq 0 ]
