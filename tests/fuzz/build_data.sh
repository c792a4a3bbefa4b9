#!/usr/bin/env bash
# tests/fuzz/build_data.sh — build the dataset and image libFuzzer targets (testing.md B2, B3: fuzz_idx, fuzz_cifar100,
# fuzz_image) with clang -fsanitize=fuzzer,address,undefined, generate each one's seed corpus, and fuzz each for
# FUZZ_SECONDS. Same layout and environment as build.sh (BUILD, FUZZ_SECONDS default 60, FUZZ_JOBS, CLANG):
# $BUILD/fuzz/<target>, seeds-<target>/ (regenerated), corpus-<target>/ (kept), artifacts/. FUZZ_TARGETS picks a
# subset ("idx image"). fuzz_image needs libturbojpeg and libpng; it is skipped with a notice without them. Exit
# status: 0 when no run found anything. A finding is minimised with `<target> -minimize_crash=1 -runs=10000 FILE`
# and becomes a case of tests/cli/test_data.sh or tests/unit/test_image.c.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
SECS=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-1}
CC=${CLANG:-clang}
OUT=$BUILD/fuzz
FLAGS="-std=c11 -g -O1 -Wall -Wextra -Werror -Wno-unused-parameter -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc"
SAN="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
BASE="src/core/status.c src/core/io.c src/core/rng.c"
have() { printf '#include <%s>\nint main(void){return 0;}' "$1" | $CC -x c - -o /dev/null $2 2>/dev/null; }
mkdir -p "$OUT/artifacts"
for target in ${FUZZ_TARGETS:-idx cifar100 image}; do
    case $target in
        idx) SRC="$BASE src/core/datasets_small.c"; LIBS="-lz -lm"; DEFS="-DCNN_HAVE_ZLIB" ;;
        cifar100) SRC="$BASE src/core/datasets_small.c"; LIBS="-lz -lm"; DEFS="-DCNN_HAVE_ZLIB" ;;
        image) if ! have turbojpeg.h -lturbojpeg || ! have png.h -lpng16; then
                   echo "fuzz: SKIP fuzz_image: libturbojpeg or libpng missing"; continue
               fi
               SRC="$BASE src/core/image.c"; LIBS="-lturbojpeg -lpng16 -lz -lm"; DEFS="-DCNN_HAVE_JPEG -DCNN_HAVE_PNG" ;;
        *) echo "fuzz: unknown target $target"; exit 2 ;;
    esac
    echo "fuzz: building $OUT/fuzz_$target with $($CC --version | head -n 1)"
    # shellcheck disable=SC2086
    $CC $FLAGS $DEFS $SAN tests/fuzz/fuzz_$target.c $SRC $LIBS -o "$OUT/fuzz_$target"
    # shellcheck disable=SC2086
    $CC $FLAGS $DEFS -DFUZZ_MAKE_SEEDS tests/fuzz/fuzz_$target.c $SRC $LIBS -o "$OUT/make_seeds_$target"
    rm -rf "$OUT/seeds-$target" && mkdir -p "$OUT/seeds-$target" "$OUT/corpus-$target"
    "$OUT/make_seeds_$target" "$OUT/seeds-$target"
    [ "$SECS" -gt 0 ] || continue # FUZZ_SECONDS=0: build only, as build.sh (libFuzzer's -max_total_time=0 runs on)
    echo "fuzz: $target: $(ls "$OUT/seeds-$target" | wc -l) seeds, $(ls "$OUT/corpus-$target" | wc -l) corpus inputs, ${SECS}s x ${JOBS} job(s)"
    ARGS=(-max_total_time="$SECS" -rss_limit_mb=512 -timeout=5 -max_len=65536 -artifact_prefix="$OUT/artifacts/$target-"
          -print_final_stats=1)
    if [ "$JOBS" -gt 1 ]; then ARGS+=(-jobs="$JOBS" -workers="$JOBS"); fi
    "$OUT/fuzz_$target" "${ARGS[@]}" "$OUT/corpus-$target" "$OUT/seeds-$target"
done
