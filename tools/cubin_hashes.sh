#!/usr/bin/env bash
# tools/cubin_hashes.sh -- one line per (program, arch) of the kernel registry: "<sha256>  <arch>  <label>", the
# CUBIN that NVRTC produces for it (compiled exactly as the engine does; no GPU needed, libnvrtc is). A
# refactoring that leaves a kernel's meaning alone must leave its line unchanged:
#
#     tools/cubin_hashes.sh > before.txt     (on the old tree)
#     tools/cubin_hashes.sh > after.txt      (on the new one)
#     tools/cubin_hashes.sh --compare before.txt after.txt [RENAMES]
#
# RENAMES (optional) is a file of "old new" substitutions applied to the old labels (a family or row renamed).
# Other arguments go to tools/cubin_hashes.c: [--no-lineinfo] [--only SUBSTRING] [ARCH...] (default sm_90a sm_80;
# --no-lineinfo: the code without the line table, which moves with every comment line). BUILD selects the build
# directory.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
if [ "${1:-}" = --compare ]; then
    old=$2 new=$3 ren=${4:-}
    tmp=$(mktemp)
    trap 'rm -f "$tmp"' EXIT
    cp "$old" "$tmp"
    if [ -n "$ren" ]; then
        while read -r a b; do
            [ -z "$a" ] && continue
            sed -i "s|$a|$b|g" "$tmp"
        done <"$ren"
    fi
    # key = arch + label; compare hashes
    python3 - "$tmp" "$new" <<'EOF'
import sys
def load(p):
    d = {}
    for line in open(p):
        h, arch, label = line.rstrip("\n").split("  ", 2)
        d[(label, arch)] = h
    return d
old, new = load(sys.argv[1]), load(sys.argv[2])
same = [k for k in old if k in new and old[k] == new[k]]
diff = sorted(k for k in old if k in new and old[k] != new[k])
gone = sorted(k for k in old if k not in new)
added = sorted(k for k in new if k not in old)
print(f"{len(same)} identical, {len(diff)} differ, {len(gone)} only in the old tree, {len(added)} only in the new")
for k in diff: print("DIFFER", k[1], k[0])
for k in gone: print("GONE  ", k[1], k[0])
for k in added: print("ADDED ", k[1], k[0])
sys.exit(0 if not diff and not gone and not added else 1)
EOF
    exit $?
fi
make -s BUILD="$BUILD" "$BUILD/libcnn.a" >&2
CFLAGS="-std=c11 -O1 -Iinclude -Isrc -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -fopenmp"
[ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda.h" ] && CFLAGS="$CFLAGS -DCNN_HAVE_CUDA -isystem ${CUDA_HOME:-/usr/local/cuda}/include"
cc $CFLAGS -o "$BUILD/cubin_hashes" tools/cubin_hashes.c "$BUILD/libcnn.a" -lm -ldl -lpthread
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$BUILD/cubin_hashes" "$dir" "$@" | while IFS=$'\t' read -r label arch file; do
    printf '%s  %s  %s\n' "$(sha256sum "$file" | cut -d' ' -f1)" "$arch" "$label"
done
