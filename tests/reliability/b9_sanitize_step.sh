#!/usr/bin/env bash
# b9_sanitize_step.sh — testing.md B9 over a whole training step, on a GPU: compute-sanitizer's memcheck (with
# leak check and 2 KiB padding), racecheck, initcheck and synccheck, each over `cnn train` of three steps of a
# CIFAR-stem ResNet-18 (the first step eager, the second recorded into a CUDA graph, the third replayed),
# including the non-finite guard, the optimizer and the checkpoint, in fp32 and bf16, every launch synchronised
# (CNN_SYNC_DEBUG=1). A tool's report or a non-zero exit fails its line. Needs a GPU and compute-sanitizer.
. "$(dirname "$0")/../lib.sh"
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
[ -x "$SAN" ] || { skip b9 "compute-sanitizer not found"; finish; exit; }
"$CNN" info --model resnet18 --device cuda >/dev/null 2>&1 || { skip b9 "no usable GPU"; finish; exit; }
for dt in fp32 bf16; do
    # warm the kernel cache outside the sanitizer (compilation under it is slow and not the point)
    "$CNN" train --model resnet18 --stem cifar --num-classes 10 --device cuda --dtype $dt --data synthetic \
        --train-size 16 --eval-size 8 --batch 8 --steps 3 --tune none --no-progress -q --out "$TMP/warm" >/dev/null 2>&1
    for tool in memcheck racecheck initcheck synccheck; do
        extra=()
        [ $tool = memcheck ] && extra=(--leak-check full --padding 2048)
        [ $tool = racecheck ] && extra=(--racecheck-detect-level error)
        rm -rf "$TMP/run"
        env CNN_SYNC_DEBUG=1 timeout 3600 "$SAN" --tool $tool --error-exitcode 1 --print-limit 20 "${extra[@]}" \
            "$CNN" train --model resnet18 --stem cifar --num-classes 10 --device cuda --dtype $dt --data synthetic \
            --train-size 16 --eval-size 8 --batch 8 --steps 3 --tune none --no-progress -q --out "$TMP/run" \
            >"$TMP/$tool.$dt.log" 2>&1
        rc=$?
        sum=$(grep -E 'ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY' "$TMP/$tool.$dt.log" | tr '\n' ' ')
        [ $rc -eq 0 ] && pass "b9.$dt.$tool" "$sum" || fail "b9.$dt.$tool" "exit $rc: $sum $(grep -m3 -E 'Invalid|Race|Uninitialized|Barrier|error' "$TMP/$tool.$dt.log" | tr '\n' '|' | head -c 400)"
    done
done
finish
