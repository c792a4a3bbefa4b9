#!/usr/bin/env bash
# tests/gpu/emu/run.sh -- run the CUDA backend's op tests ($BUILD/gpu_test_ops) on the CPU emulator: a fake
# libcuda.so.1 (emu_cuda.cc) and libnvrtc.so (emu_nvrtc.cc) built here and put first on LD_LIBRARY_PATH, so the
# real backend code (driver loading, registry, disk cache, launchers, graphs) runs the real kernel sources,
# compiled as C++ with emu.h and executed one fiber per CUDA thread. Catches indexing, masking, reduction,
# launch-geometry, barrier-divergence and guard-band bugs without a GPU; says nothing about performance, races
# (execution is sequential) or PTX-level issues (test_nvrtc compiles the real thing).
#
#   BUILD=build tests/gpu/emu/run.sh [gpu_test_ops arguments...]     (make test-gpu-emu)
#   EMU_SAN=1 ...   also build the emulator and the kernels with ASan+UBSan (use with a SAN=1 build of the test)
#   run.sh --libs   only build the emulator's libraries (tests/run.sh, before its jobs share them)
# First run compiles every kernel program with g++ (a few seconds each, cached in $CNN_EMU_WORK).
set -u
cd "$(dirname "$0")/../../.."
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CXX=${CXX:-g++}
EMU=$PWD/tests/gpu/emu
OUT=$BUILD/emu
FLAGS="-std=c++17 -O1 -g -fPIC -shared -Wall -Wno-unused-function -isystem $CUDA_HOME/include"
if [ -n "${EMU_SAN:-}" ]; then
    SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    OUT=$BUILD/emu-san
    export CNN_EMU_CXXFLAGS="$SAN"
    export CNN_EMU_WORK=${CNN_EMU_WORK:-/tmp/cnn-emu-san-$(id -u)}
fi
case $OUT in /*) ;; *) OUT=$PWD/$OUT ;; esac
mkdir -p "$OUT"
if [ ! -x "$BUILD/gpu_test_ops" ]; then
    echo "FAIL gpu-emu: $BUILD/gpu_test_ops not built (make BUILD=$BUILD; needs the CUDA headers in $CUDA_HOME)"
    exit 1
fi
for lib in nvrtc cuda; do
    src=$EMU/emu_$lib.cc
    dst=$OUT/lib$lib.so
    [ $lib = cuda ] && dst=$OUT/libcuda.so.1
    if [ ! -f "$dst" ] || [ "$src" -nt "$dst" ] || [ "$EMU/emu.h" -nt "$dst" ] || [ "$EMU/emu_tmap.h" -nt "$dst" ]; then
        $CXX $FLAGS ${SAN:-} -DEMU_DIR="\"$EMU\"" -o "$dst" "$src" -ldl || { echo "FAIL gpu-emu: cannot build $dst"; exit 1; }
    fi
done
[ "${1:-}" = --libs ] && exit 0
export LD_LIBRARY_PATH=$OUT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CNN_CACHE_DIR=${CNN_CACHE_DIR:-$OUT/kernel-cache}
export CNN_SYNC_DEBUG=${CNN_SYNC_DEBUG:-1}
exec "$BUILD/gpu_test_ops" "$@"
