#!/usr/bin/env bash
# tests/fuzz/build.sh — build every libFuzzer target of tests/fuzz (testing.md B1-B3; fuzz.h says what a target
# is) with clang -fsanitize=fuzzer,address,undefined against an instrumented build of the library, then fuzz.
#
#   tests/fuzz/build.sh [TARGET...]       (make fuzz; no names = every fuzz_*.c)
#
# Environment: BUILD (default build; everything goes under $BUILD/fuzz), FUZZ_SECONDS per target (default 60;
# 0 = build only), FUZZ_JOBS (parallel fuzzing processes per target, default 1), CLANG (default clang).
# Per target under $BUILD/fuzz: the binary fuzz_<t>, corpus/<t>/ (starts as a copy of the stored corpus
# tests/fuzz/corpus/<t>/ and grows between runs), artifacts/<t>/ (crash-*, leak-*, timeout-*, oom-* inputs) and
# <t>.log (libFuzzer's final stats: executions, coverage). tests/fuzz/<t>.options, if present, holds more
# libFuzzer flags for the target (one line). Exit status: 0 when no target found anything.
# A finding: minimise it (`$BUILD/fuzz/fuzz_<t> -minimize_crash=1 -runs=100000 FILE`), fix the bug, and keep the
# minimised input as tests/fuzz/corpus/<t>/regress-<what> (replayed by `make test`). To refresh the stored corpus
# from a long run: tests/fuzz/keep.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
SECS=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-1}
CC=${CLANG:-clang}
OUT=$BUILD/fuzz
LIB=$OUT/lib
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do t=${f#tests/fuzz/fuzz_}; TARGETS+=("${t%.c}"); done
fi
FLAGS="-std=c11 -g -O1 -Wall -Wextra -Werror -Wno-unused-parameter -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L
       -Iinclude -Isrc -Itests/fuzz -fopenmp -fno-omit-frame-pointer"
if [ -f /usr/local/cuda/include/cuda.h ]; then FLAGS="$FLAGS -DCNN_HAVE_CUDA -isystem /usr/local/cuda/include"; fi
SAN="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"

echo "fuzz: instrumented library in $LIB ($($CC --version | head -n 1))"
make --no-print-directory -s BUILD="$LIB" CC="$CC" SAN=fuzz lib >"$OUT.lib.log" 2>&1 || { tail -30 "$OUT.lib.log"; exit 1; }
mkdir -p "$OUT"
found=0
for t in "${TARGETS[@]}"; do
    src=tests/fuzz/fuzz_$t.c
    [ -f "$src" ] || { echo "fuzz: no target $src"; exit 2; }
    extra=""
    [ "$t" = cli ] && extra="$LIB/apps/cli.o"
    # shellcheck disable=SC2086
    $CC $FLAGS $SAN "$src" $extra "$LIB/libcnn.a" ${LDLIBS:--lm -ldl -lpthread} -o "$OUT/fuzz_$t"
    if [ "$t" = safetensors ] && [ ! -d "tests/fuzz/corpus/$t" ]; then # its seeds are written by the target itself
        $CC $FLAGS -DFUZZ_MAKE_SEEDS "$src" "$LIB/libcnn.a" -fsanitize=address,undefined ${LDLIBS:--lm -ldl -lpthread} -o "$OUT/make_seeds"
        mkdir -p "tests/fuzz/corpus/$t" && "$OUT/make_seeds" "tests/fuzz/corpus/$t"
    fi
    [ "$SECS" -gt 0 ] || continue
    mkdir -p "$OUT/corpus/$t" "$OUT/artifacts/$t"
    [ -d "tests/fuzz/corpus/$t" ] && cp -n tests/fuzz/corpus/"$t"/* "$OUT/corpus/$t/" 2>/dev/null || true
    ARGS=(-max_total_time="$SECS" -rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1
          -artifact_prefix="$OUT/artifacts/$t/")
    [ -f "tests/fuzz/$t.dict" ] && ARGS+=(-dict="tests/fuzz/$t.dict")
    [ -f "tests/fuzz/$t.options" ] && read -r -a more <"tests/fuzz/$t.options" && ARGS+=("${more[@]}")
    [ "$JOBS" -gt 1 ] && ARGS+=(-fork="$JOBS" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
    echo "fuzz: $t: $(ls "$OUT/corpus/$t" | wc -l) inputs, ${SECS}s x $JOBS"
    if ! "$OUT/fuzz_$t" "${ARGS[@]}" "$OUT/corpus/$t" >"$OUT/$t.log" 2>&1 || [ -n "$(ls -A "$OUT/artifacts/$t")" ]; then
        found=1
        echo "fuzz: $t FOUND SOMETHING: $(ls "$OUT/artifacts/$t" | head -5 | tr '\n' ' ') (log $OUT/$t.log)"
    fi
    grep -E '^stat::(number_of_executed_units|peak_rss_mb)|cov: ' "$OUT/$t.log" | tail -3 | sed "s/^/  $t: /"
done
exit $found
