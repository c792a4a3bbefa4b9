#!/usr/bin/env bash
# tests/fuzz/build.sh — build the safetensors/JSON libFuzzer target with clang
# -fsanitize=fuzzer,address,undefined, generate its seed corpus and dictionary, and fuzz for FUZZ_SECONDS.
#
# Environment: BUILD (output root, default build), FUZZ_SECONDS (default 60), FUZZ_JOBS (parallel processes,
# default 1), CLANG (default clang). Everything goes under $BUILD/fuzz: the binary, seeds/ (regenerated on each
# run), corpus/ (kept between runs: new inputs accumulate there), st.dict, and artifacts/ (crash-*, leak-*,
# timeout-*, oom-* inputs). Exit status: 0 when the run ends with no finding, non-zero otherwise. A finding is
# minimised with `$BUILD/fuzz/fuzz_safetensors -minimize_crash=1 -runs=10000 FILE` and becomes a vector in
# tests/unit/test_safetensors.c.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
SECS=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-1}
CC=${CLANG:-clang}
OUT=$BUILD/fuzz
SRC="src/core/safetensors.c src/core/json.c src/core/io.c src/core/status.c src/core/tensor.c"
FLAGS="-std=c11 -g -O1 -Wall -Wextra -Werror -Wno-unused-parameter -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc"

mkdir -p "$OUT/corpus" "$OUT/artifacts"
rm -rf "$OUT/seeds" && mkdir -p "$OUT/seeds"
echo "fuzz: building $OUT/fuzz_safetensors with $($CC --version | head -n 1)"
$CC $FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
    tests/fuzz/fuzz_safetensors.c $SRC -lm -o "$OUT/fuzz_safetensors"
$CC $FLAGS -DFUZZ_MAKE_SEEDS tests/fuzz/fuzz_safetensors.c $SRC -lm -o "$OUT/make_seeds"
"$OUT/make_seeds" "$OUT/seeds"

cat >"$OUT/st.dict" <<'EOF'
"{"
"}"
"["
"]"
":"
","
"\""
"\\"
"\\u"
"\\ud83d\\ude00"
"\\ud800"
"\\u0000"
"\xc3\xa9"
"\xf0\x9f\x98\x80"
"\xed\xa0\x80"
"\xc0\xaf"
"\"dtype\""
"\"shape\""
"\"data_offsets\""
"\"__metadata__\""
"\"F32\""
"\"F16\""
"\"BF16\""
"\"F64\""
"\"I64\""
"\"I32\""
"\"I16\""
"\"I8\""
"\"U8\""
"\"U16\""
"\"U32\""
"\"U64\""
"\"BOOL\""
"\"F8_E4M3\""
"\"F8_E5M2\""
"true"
"false"
"null"
"-0"
"1e5"
"0.5"
"4294967296"
"9223372036854775807"
"9223372036854775808"
"18446744073709551615"
"18446744073709551616"
"-9223372036854775808"
"\x00\x00\x00\x00\x00\x00\x00"
"\xff\xff\xff\xff\xff\xff\xff\xff"
EOF

echo "fuzz: $(ls "$OUT/seeds" | wc -l) seeds, $(ls "$OUT/corpus" | wc -l) corpus inputs, ${SECS}s x ${JOBS} job(s)"
ARGS=(-max_total_time="$SECS" -rss_limit_mb=512 -timeout=2 -max_len=16384 -dict="$OUT/st.dict"
      -artifact_prefix="$OUT/artifacts/" -print_final_stats=1)
if [ "$JOBS" -gt 1 ]; then
    ARGS+=(-jobs="$JOBS" -workers="$JOBS")
fi
"$OUT/fuzz_safetensors" "${ARGS[@]}" "$OUT/corpus" "$OUT/seeds"
