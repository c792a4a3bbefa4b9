#!/usr/bin/env bash
# b18_oom.sh — testing.md B18 (b18_oom.c): double the batch until the device runs out of memory, then check the
# status, the memory and the next smaller batch against a fresh process. Without a GPU it runs on the CPU
# emulator (tests/gpu/emu) with a 48 MiB device and 8x8 images; on a GPU (B18_GPU=1) with the arguments in
# B18_ARGS (e.g. "--model resnet50 --input 224 --train").
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/reliability/lib.sh"
[ -f "$BUILD/libcnn.a" ] || { skip b18 "no $BUILD/libcnn.a"; finish; exit; }
cc -std=c11 -O1 -g -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -I"$ROOT/include" -I"$ROOT/src" -I"$ROOT/tests/unit" \
    -DCNN_HAVE_CUDA -isystem "${CUDA_HOME:-/usr/local/cuda}/include" -fopenmp -o "$SHIM_DIR/b18_oom" \
    "$REL/b18_oom.c" "$BUILD/libcnn.a" ${LDLIBS:--lm -ldl -lpthread} 2>"$TMP/cc.err" \
    || { skip b18 "cannot build b18_oom (CUDA headers?): $(head -c 200 "$TMP/cc.err")"; finish; exit; }
if [ -n "${B18_GPU:-}" ]; then
    ARGS=${B18_ARGS:---model resnet50 --input 224 --train}
else
    EMU=$BUILD/emu
    case $EMU in /*) ;; *) EMU=$ROOT/$EMU ;; esac
    [ -f "$EMU/libcuda.so.1" ] || { skip b18 "no emulator libraries in $EMU"; finish; exit; }
    export LD_LIBRARY_PATH=$EMU CNN_EMU_MEM_MB=${CNN_EMU_MEM_MB:-48} CNN_CACHE_DIR=${CNN_CACHE_DIR:-$EMU/kernel-cache}
    ARGS=${B18_ARGS:---input 8}
fi
# shellcheck disable=SC2086
"$SHIM_DIR/b18_oom" $ARGS >"$TMP/run.out" 2>&1
cat "$TMP/run.out" | grep -E '^(PASS|FAIL|SKIP|FIGURE)'
T_PASS=$((T_PASS + $(grep -c '^PASS' "$TMP/run.out"))); T_FAIL=$((T_FAIL + $(grep -c '^FAIL' "$TMP/run.out")))
T_SKIP=$((T_SKIP + $(grep -c '^SKIP' "$TMP/run.out")))
read -r _ b bits < <(grep '^bits ' "$TMP/run.out")
if [ -n "${b:-}" ]; then
    # shellcheck disable=SC2086
    "$SHIM_DIR/b18_oom" $ARGS --only "$b" >"$TMP/fresh.out" 2>&1
    read -r _ b2 bits2 < <(grep '^bits ' "$TMP/fresh.out")
    [ "$bits2" = "$bits" ] && pass b18.same_as_fresh_process "batch $b: $bits" || fail b18.same_as_fresh_process "$bits vs ${bits2:-none}: $(tail -c 300 "$TMP/fresh.out")"
elif ! grep -q '^SKIP' "$TMP/run.out"; then
    fail b18.run "$(tail -c 400 "$TMP/run.out")"
fi
finish
