#!/usr/bin/env bash
# tests/run.sh — runs every test of `make test` and prints one summary line "N passed, N failed, N skipped".
# Each program prints PASS/FAIL/SKIP lines (tests/unit/test.h, tests/lib.sh, tests/golden/common.py); a
# program that exits non-zero without printing a FAIL line (a crash, a sanitizer report) counts as a failure.
set -u
BUILD=${BUILD:-build}
ASAN_BUILD=${ASAN_BUILD:-}
PYTHON=${PYTHON:-/usr/bin/python3}
export BUILD ASAN_BUILD PYTHON
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$(dirname "$0")/.."
LOG=${TEST_LOG_DIR:-$BUILD/test-logs}
mkdir -p "$LOG"
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
    grep -E '^(FAIL|SKIP) ' "$log" | sed 's/^/   /'
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "   FAIL $name: exited with status $rc and no FAIL line; last lines of $log:"
        tail -n 15 "$log" | sed 's/^/     | /'
        f=1
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    [ "$f" -gt 0 ] && failures+=("$name")
    echo "   $p passed, $f failed, $s skipped ($((SECONDS - t0)) s)"
}

for t in "$BUILD"/test_*; do
    [ -x "$t" ] || continue
    run_one "unit-$(basename "$t")" "$t"
done
if [ -n "$ASAN_BUILD" ]; then
    for t in "$ASAN_BUILD"/test_*; do
        [ -x "$t" ] || continue
        case "$(basename "$t")" in test_perf*) continue ;; esac
        run_one "asan-$(basename "$t")" env CNN_TEST_QUICK=1 "$t"
    done
fi
# the tensor-core forward kernels (bf16; fp32 in TF32; fp32 in FMA) on the CPU emulator of tests/gpu/emu: the
# real kernel sources, compiled as C++, on the quick shapes (a GPU runs them all: make test-gpu)
if [ -x "$BUILD/gpu_test_ops" ]; then
    for dt in bf16 tf32 f32; do
        run_one "emu-conv_tc-$dt" env CNN_TEST_QUICK=1 BUILD="$BUILD" bash tests/gpu/emu/run.sh --dtype $dt conv_tc
    done
    # two convolutions summed in one kernel (the TMA rows' second operand stream), and the unfused path
    run_one "emu-conv_pair-bf16" env CNN_TEST_QUICK=1 BUILD="$BUILD" bash tests/gpu/emu/run.sh --dtype bf16 conv_pair
    for dt in bf16 f16; do # the first-layer kernels and the fused stem + max-pool
        run_one "emu-conv_first-$dt" env CNN_TEST_QUICK=1 BUILD="$BUILD" bash tests/gpu/emu/run.sh --dtype $dt conv_first
    done
    for dt in f32 bf16; do # batch preparation: samples gathered from a whole dataset, crop, flip, channel repeat
        run_one "emu-prep-$dt" env CNN_TEST_QUICK=1 BUILD="$BUILD" bash tests/gpu/emu/run.sh --dtype $dt prep
    done
else
    echo "SKIP emu-conv_tc: $BUILD/gpu_test_ops was not built (no CUDA headers in CUDA_HOME)"
    skipped=$((skipped + 1))
fi
for t in tests/cli/test_*.sh; do
    [ -f "$t" ] || continue
    run_one "cli-$(basename "$t" .sh)" bash "$t"
done
for t in tests/golden/test_*.py; do
    [ -f "$t" ] || continue
    run_one "golden-$(basename "$t" .py)" env PYTHONUNBUFFERED=1 "$PYTHON" "$t"
done

echo
[ ${#failures[@]} -gt 0 ] && echo "failed programs: ${failures[*]} (logs in $LOG)"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
