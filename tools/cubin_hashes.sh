#!/usr/bin/env bash
# tools/cubin_hashes.sh -- one line per (program, arch) of the kernel registry: "<sha256>  <arch>  <label>", the
# CUBIN that NVRTC produces for it (compiled exactly as the engine does; no GPU needed, libnvrtc is). A
# refactoring that leaves a kernel's meaning alone must leave its line unchanged:
#
#     tools/cubin_hashes.sh > before.txt     (on the old tree)
#     tools/cubin_hashes.sh > after.txt      (on the new one)
#     tools/cubin_hashes.sh --compare before.txt after.txt [RENAMES]
#
# RENAMES (optional) is a file of "old label<TAB>new label" lines, for programs whose family or row was renamed.
# Other arguments go to tools/cubin_hashes.c: [--no-lineinfo] [--only SUBSTRING] [ARCH...] (default sm_90a sm_80;
# --no-lineinfo: the code without the line table, which moves with every comment line). --code (first argument)
# hashes the machine code alone: the bytes of every kernel's .text section, whatever the kernel is called (an entry
# point renamed changes the CUBIN's symbols, not one instruction). BUILD selects the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
if [ "${1:-}" = --compare ]; then
    python3 - "$2" "$3" "${4:-}" <<'EOF'
import sys
def load(p, ren):
    d = {}
    for line in open(p):
        h, arch, label = line.rstrip("\n").split("  ", 2)
        d[(ren.get(label, label), arch)] = h
    return d
ren = dict(l.rstrip("\n").split("\t") for l in open(sys.argv[3]) if l.strip()) if sys.argv[3] else {}
old, new = load(sys.argv[1], ren), load(sys.argv[2], {})
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
code=
if [ "${1:-}" = --code ]; then code=1; shift; fi
make -s BUILD="$BUILD" "$BUILD/libcnn.a" >&2
CFLAGS="-std=c11 -O1 -Iinclude -Isrc -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -fopenmp"
[ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda.h" ] && CFLAGS="$CFLAGS -DCNN_HAVE_CUDA -isystem ${CUDA_HOME:-/usr/local/cuda}/include"
cc $CFLAGS -o "$BUILD/cubin_hashes" tools/cubin_hashes.c "$BUILD/libcnn.a" -lm -ldl -lpthread
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
texthash() { # sha256 over the sorted sha256s of the ELF's .text.* sections
    python3 - "$1" <<'EOF'
import hashlib, struct, sys
b = open(sys.argv[1], "rb").read()
shoff, = struct.unpack_from("<Q", b, 0x28)
shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3a)
sec = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
strtab = sec[shstrndx]
def name(s):
    o = strtab[4] + s[0]
    return b[o:b.index(b"\0", o)].decode()
hs = sorted(hashlib.sha256(b[s[4]:s[4] + s[5]]).hexdigest() for s in sec if name(s).startswith(".text."))
print(hashlib.sha256("".join(hs).encode()).hexdigest())
EOF
}
"$BUILD/cubin_hashes" "$dir" "$@" | while IFS=$'\t' read -r label arch file; do
    if [ -n "$code" ]; then h=$(texthash "$file"); else h=$(sha256sum "$file" | cut -d' ' -f1); fi
    printf '%s  %s  %s\n' "$h" "$arch" "$label"
done
