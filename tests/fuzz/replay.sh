#!/usr/bin/env bash
# tests/fuzz/replay.sh — `make test`'s fuzzing: every target of tests/fuzz run over its stored corpus
# (tests/fuzz/corpus/<t>/: the minimised corpus of past long runs and every regression input), compiled with
# $CC and the sanitizers against the ASan+UBSan library ($ASAN_BUILD), without libFuzzer; then, where clang and
# FUZZ_SMOKE_SECONDS > 0, a short libFuzzer run of each (build.sh). One PASS/FAIL line per target. LDLIBS: the
# libraries the library links (the Makefile's, passed by make test; default the system ones alone).
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
LIBDIR=${ASAN_BUILD:-}
if [ -z "$LIBDIR" ] || [ ! -f "$LIBDIR/libcnn.a" ]; then
    skip fuzz.replay "no ASan+UBSan library (ASAN_BUILD=$LIBDIR): make test builds it"
    finish
    exit
fi
CCX=${CC:-cc}
FLAGS="-std=c11 -g -O1 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc -Itests/fuzz -fopenmp
       -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ -f /usr/local/cuda/include/cuda.h ]; then FLAGS="$FLAGS -DCNN_HAVE_CUDA -isystem /usr/local/cuda/include"; fi
# the image and gzip libraries the library was built with (the Makefile links them where it found them)
LIBS="-lm -ldl -lpthread"
undef=$(nm -u "$LIBDIR/libcnn.a" 2>/dev/null)
grep -q 'tjDecompress' <<<"$undef" && LIBS="$LIBS -lturbojpeg"
grep -q 'png_create_read_struct' <<<"$undef" && LIBS="$LIBS -lpng16"
grep -q 'inflateInit2_' <<<"$undef" && LIBS="$LIBS -lz"
for src in tests/fuzz/fuzz_*.c; do
    t=${src#tests/fuzz/fuzz_}; t=${t%.c}
    extra=""
    [ "$t" = cli ] && extra="$LIBDIR/apps/cli.o"
    # shellcheck disable=SC2086
    if ! $CCX $FLAGS "$src" tests/fuzz/replay.c $extra "$LIBDIR/libcnn.a" $LIBS -o "$TMP/replay_$t" \
        2>"$TMP/cc_$t.log"; then
        fail "fuzz.$t.replay" "cannot build: $(head -c 400 "$TMP/cc_$t.log")"
        continue
    fi
    corpus=tests/fuzz/corpus/$t
    if [ ! -d "$corpus" ] && grep -q FUZZ_MAKE_SEEDS "$src"; then
        # the data targets (build_data.sh) keep no corpus in the tree: they write their seeds themselves
        corpus=$TMP/seeds-$t
        mkdir -p "$corpus"
        # shellcheck disable=SC2086
        if ! $CCX $FLAGS -DFUZZ_MAKE_SEEDS "$src" $extra "$LIBDIR/libcnn.a" $LIBS -o "$TMP/seeds_$t" \
            2>"$TMP/cc_seeds_$t.log" || ! "$TMP/seeds_$t" "$corpus" >"$TMP/seeds_$t.log" 2>&1; then
            fail "fuzz.$t.replay" "cannot make its seeds: $(head -c 400 "$TMP/cc_seeds_$t.log" "$TMP/seeds_$t.log" 2>/dev/null)"
            continue
        fi
    fi
    if [ ! -d "$corpus" ]; then
        fail "fuzz.$t.replay" "no stored corpus tests/fuzz/corpus/$t"
        continue
    fi
    n=$(ls "$corpus" | wc -l)
    if "$TMP/replay_$t" "$corpus" >"$TMP/replay_$t.log" 2>&1; then
        pass "fuzz.$t.replay" "$n inputs, no crash, leak or sanitizer report"
    else
        fail "fuzz.$t.replay" "$(grep -m1 -E 'ERROR|broken promise|runtime error' "$TMP/replay_$t.log" | head -c 300)"
    fi
done
SMOKE=${FUZZ_SMOKE_SECONDS:-0}
if [ "$SMOKE" -gt 0 ] && command -v "${CLANG:-clang}" >/dev/null; then
    if BUILD="${FUZZ_BUILD:-build}" FUZZ_SECONDS="$SMOKE" bash tests/fuzz/build.sh >"$TMP/smoke.log" 2>&1; then
        pass fuzz.smoke "every target fuzzed ${SMOKE}s: nothing found"
    else
        fail fuzz.smoke "$(grep -E 'FOUND|error' "$TMP/smoke.log" | head -3 | tr '\n' '|')"
    fi
fi
finish
