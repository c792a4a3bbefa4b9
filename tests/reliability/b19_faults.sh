#!/usr/bin/env bash
# b19_faults.sh — testing.md B19, error paths: one short run is repeated with its n-th call failing, for every n
# (or every B19_EVERY-th), in four families:
#   malloc   the n-th malloc/calloc/realloc/aligned allocation returns NULL (LD_PRELOAD shim; a 1-step CPU training
#            run with a checkpoint and the model write)
#   open     the n-th open/openat/fopen fails with EIO (the same run, ASan+UBSan+LSan build: leaks count)
#   cuda     the n-th CUDA driver call fails (the CPU emulator of tests/gpu/emu: a 3-image inference on the CUDA
#            backend with an empty kernel cache, so compilation, cache writes, module loads, graph capture and
#            replay all happen)
#   nvrtc    the n-th NVRTC call fails (the same run)
# Every run must end by itself (timeout: a hang) with status 0 (the failure was absorbed) or 1/2 with its error
# on stderr, never a signal, an internal error (the abort funnel) or a sanitizer report (a crash). A failed
# compilation also logs the NVRTC call that failed, so such errors take two lines; their count is reported.
#   B19_EVERY=k (default 1)   B19_FAMILIES="malloc open cuda nvrtc"   B19_JOBS (default: CPUs)
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/reliability/lib.sh"
EVERY=${B19_EVERY:-1}
FAMILIES=${B19_FAMILIES:-malloc open cuda nvrtc}
JOBS=${B19_JOBS:-$(nproc)}
ASAN_CNN=${ASAN_BUILD:+$ASAN_BUILD/cnn}
T="train --model resnet18 --stem cifar --num-classes 10 --device cpu --data synthetic --train-size 2 --eval-size 0
   --batch 1 --steps 1 --no-progress -q --threads 1"

# the CUDA run: the emulator's libraries (tests/gpu/emu/run.sh builds them) and a 3-image input
EMU=$BUILD/emu
case $EMU in /*) ;; *) EMU=$ROOT/$EMU ;; esac
"$PYTHON" - "$TMP/x.st" <<'PY'
import json, struct, sys
img = struct.pack("<%df" % (3 * 3 * 8 * 8), *[((i * 7) % 11) / 11.0 for i in range(3 * 3 * 8 * 8)])
h = json.dumps({"input": {"dtype": "F32", "shape": [3, 3, 8, 8], "data_offsets": [0, len(img)]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + img)
PY
I="infer --model resnet18 --stem cifar --num-classes 10 --device cuda --input $TMP/x.st --batch 1 --tune none -q"

# one run of family $1 with its call $2 failing (0: none, counting), in directory $3; prints the outcome
run_point() {
    local fam=$1 n=$2 d=$3 rc
    mkdir -p "$d"
    case $fam in
    # (timeout outside the preloaded environment: only the engine's own calls count)
    malloc) { timeout 600 env LD_PRELOAD="$SHIM" SHIM_FAIL_MALLOC="$n" SHIM_COUNT="$d/count" "$CNN" $T --out "$d/o" \
                  >/dev/null 2>"$d/err"; } 2>/dev/null ;;
    open) { timeout 600 env LD_PRELOAD="$SHIM_NOMALLOC" ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=1 \
                SHIM_FAIL_OPEN="$n" SHIM_COUNT="$d/count" "${ASAN_CNN:-$CNN}" $T --out "$d/o" >/dev/null 2>"$d/err"; } 2>/dev/null ;;
    cuda | nvrtc)
        local lib=$fam
        { timeout 900 env LD_LIBRARY_PATH="$EMU" CNN_CACHE_DIR="$d/cache" CNN_EMU_COUNT="$d/count" \
              "$([ $lib = cuda ] && echo CNN_EMU_FAIL_CALL || echo CNN_EMU_NVRTC_FAIL_CALL)=$n" \
              "$CNN" $I --output "$d/y.st" >/dev/null 2>"$d/err"; } 2>/dev/null ;;
    esac
    rc=$?
    local c
    c=$(classify $rc)
    grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error|internal error' "$d/err" && c=crash
    echo "$c $rc $(grep -cv '^$' "$d/err")"
}

total_points=0 total_bad=0
summary=""
for fam in $FAMILIES; do
    if { [ $fam = cuda ] || [ $fam = nvrtc ]; } && [ ! -f "$EMU/libcuda.so.1" ]; then
        skip "b19.$fam" "no emulator libraries in $EMU (tests/gpu/emu/run.sh builds them)"
        continue
    fi
    r=$(run_point $fam 0 "$TMP/$fam.count")
    case $fam in
    malloc) N=$(awk '{print $2}' "$TMP/$fam.count/count" 2>/dev/null | tail -1) ;;
    open) N=$(awk '{print $4}' "$TMP/$fam.count/count" 2>/dev/null | tail -1) ;;
    *) N=$(awk -v f=$fam '$1 == f {print $2}' "$TMP/$fam.count/count" 2>/dev/null | tail -1) ;;
    esac
    if [ "${r%% *}" != ok ] || [ -z "$N" ] || [ "$N" -lt 1 ]; then
        fail "b19.$fam.count" "the run without a fault: $r, $N calls: $(head -c 300 "$TMP/$fam.count/err")"
        continue
    fi
    rm -rf "$TMP/$fam.count"
    # every n (or every k-th), JOBS at a time; results in one file per point
    mkdir -p "$TMP/$fam.res"
    pts=$(seq "$EVERY" "$EVERY" "$N")
    [ "$EVERY" -gt 1 ] && pts="1 $pts $N"
    for n in $pts; do
        while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
        { run_point $fam "$n" "$TMP/$fam.$n" >"$TMP/$fam.res/$n"; cp "$TMP/$fam.$n/err" "$TMP/$fam.res/$n.err"; rm -rf "$TMP/$fam.$n"; } &
    done
    wait
    npts=$(ls "$TMP/$fam.res" | grep -vc err)
    ok=0 err=0 multi=0
    for f in "$TMP/$fam.res"/[0-9]*; do
        case $f in *.err) continue ;; esac
        read -r c rc lines <"$f"
        case $c in
        ok) ok=$((ok + 1)) ;;
        error) err=$((err + 1)); [ "${lines:-1}" -gt 1 ] && multi=$((multi + 1)) ;;
        *) echo "# $fam call $(basename "$f"): $c (exit $rc): $(head -c 300 "$f.err" | tr '\n' '|')" ;;
        esac
    done
    bad=$((npts - ok - err))
    [ $bad -eq 0 ] && pass "b19.$fam" "$npts of $N calls failed in turn: $ok absorbed, $err errors ($multi with a compile log line), 0 crashes or hangs" \
        || fail "b19.$fam" "$bad of $npts injection points crashed or hung"
    total_points=$((total_points + npts)); total_bad=$((total_bad + bad))
    summary="$summary $fam $npts/$N;"
done
figure "B19: $total_points injection points ($summary every ${EVERY}th): $total_bad crashes or hangs"
finish
