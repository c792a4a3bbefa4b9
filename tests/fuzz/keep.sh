#!/usr/bin/env bash
# tests/fuzz/keep.sh — after a long run (build.sh), minimise each target's grown corpus into the stored one:
# libFuzzer's -merge=1 keeps the smallest inputs that reach all the coverage of $BUILD/fuzz/corpus/<t> and of the
# stored corpus; inputs named regress-* (findings) are always kept, and inputs over 16 KiB are left out so the
# tree stays small.   tests/fuzz/keep.sh [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=$BUILD/fuzz
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do t=${f#tests/fuzz/fuzz_}; TARGETS+=("${t%.c}"); done
fi
for t in "${TARGETS[@]}"; do
    [ -x "$OUT/fuzz_$t" ] && [ -d "$OUT/corpus/$t" ] || { echo "keep: $t: no binary or corpus under $OUT (run build.sh)"; continue; }
    new=$(mktemp -d)
    mkdir -p "tests/fuzz/corpus/$t"
    "$OUT/fuzz_$t" -merge=1 -max_len=16384 "$new" "tests/fuzz/corpus/$t" "$OUT/corpus/$t" >"$OUT/$t.merge.log" 2>&1
    find "tests/fuzz/corpus/$t" -type f ! -name 'regress-*' ! -name 'seed-*' -delete
    for f in "$new"/*; do [ -f "$f" ] && [ "$(stat -c %s "$f")" -le 16384 ] && cp "$f" "tests/fuzz/corpus/$t/"; done
    rm -rf "$new"
    echo "keep: $t: $(ls "tests/fuzz/corpus/$t" | wc -l) inputs, $(du -sh "tests/fuzz/corpus/$t" | cut -f1)"
done
