#!/usr/bin/env bash
# b15_kill.sh — testing.md B15, crash-safe checkpoints: a training run that checkpoints every step is killed
# (SIGKILL, from the LD_PRELOAD shim) after byte n of its checkpoint writes, for B15_POINTS values of n spread
# over all of them (every header and payload region), and just before each fsync of a checkpoint, each rename
# and each fsync of the directory; then restarted with --resume. Each point must leave a "latest" checkpoint that
# is either absent (killed inside the first write) or whole (it loads, its step is one of the last two), leave no
# temporary file after the next save, and resume to losses and final weights bitwise equal to an uninterrupted
# run. Then: the syscall order of one save under strace (write -> fsync(file) -> rename -> fsync(dir)), and a
# full disk (ENOSPC from the shim) inside a save: exit 1, the old checkpoint intact.
#   B15_POINTS=n (default 200), B15_STEPS=s (default 3)   tests/reliability/test_battery.sh runs a few
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/reliability/lib.sh"
POINTS=${B15_POINTS:-200}
STEPS=${B15_STEPS:-3}
M0="--model resnet18 --stem cifar --num-classes 10 --device cpu --data synthetic --train-size 12 --eval-size 0 --batch 4
    --momentum 0 --checkpoint-every 1 --no-progress -q --seed 5 --threads 1"
M="$M0 --steps $STEPS"

"$CNN" train $M --out "$TMP/ref" >/dev/null 2>"$TMP/ref.err" || { fail b15.reference "$(cat "$TMP/ref.err")"; finish; exit; }
losses "$TMP/ref/metrics.jsonl" >"$TMP/ref.loss"
SIZE=$(stat -c %s "$TMP/ref/checkpoint.safetensors")
TOTAL=$((SIZE * STEPS))
HLEN=$("$PYTHON" -c 'import struct,sys; print(8 + struct.unpack("<Q", open(sys.argv[1],"rb").read(8))[0])' "$TMP/ref/checkpoint.safetensors")

# kill points: bytes spread over the STEPS checkpoint writes, the first of them inside each header, then the phases
points=()
for s in $(seq 0 $((STEPS - 1))); do
    [ "$POINTS" -lt 30 ] && [ $s -gt 0 ] && break # a small run: the first checkpoint's header points only
    points+=("bytes:$((s * SIZE))" "bytes:$((s * SIZE + 7))" "bytes:$((s * SIZE + HLEN / 2))" "bytes:$((s * SIZE + HLEN))")
done
nb=$((POINTS - ${#points[@]} - 3 * STEPS))
[ $nb -lt 1 ] && nb=1
for i in $(seq 0 $((nb - 1))); do points+=("bytes:$(( (2 * i + 1) * TOTAL / (2 * nb) ))"); done
for k in $(seq 1 $STEPS); do points+=("fsync:$k" "rename:$k" "dirfsync:$k"); done

bad_latest=0 stale=0 mismatch=0 notkilled=0 n=0
for p in "${points[@]}"; do
    n=$((n + 1))
    out=$TMP/k$n
    kind=${p%%:*} val=${p#*:}
    if [ "$kind" = bytes ]; then set -- SHIM_KILL_AFTER_BYTES="$val"; else set -- SHIM_KILL_AT="$p"; fi
    { env LD_PRELOAD="$SHIM" SHIM_MATCH=checkpoint.safetensors "$@" "$CNN" train $M --out "$out" >/dev/null 2>&1; } 2>/dev/null
    rc=$?
    [ $rc -ne 137 ] && { notkilled=$((notkilled + 1)); echo "# point $p: exit $rc, not killed"; }
    resume=--resume
    if [ -e "$out/checkpoint.safetensors" ]; then
        step=$($ED get-meta "$out/checkpoint.safetensors" step 2>/dev/null)
        if ! $ED finite "$out/checkpoint.safetensors" >/dev/null 2>&1 || [ -z "$step" ]; then
            bad_latest=$((bad_latest + 1)); echo "# point $p: latest checkpoint does not load"
        fi
    else
        resume=""
    fi
    "$CNN" train $M --out "$out" $resume >/dev/null 2>"$out.err"
    ls "$out" | grep -q '\.tmp\.' && { stale=$((stale + 1)); echo "# point $p: temporary file left: $(ls "$out")"; }
    losses "$out/metrics.jsonl" >"$out.loss" 2>/dev/null
    if ! cmp -s "$out.loss" "$TMP/ref.loss" || ! cmp -s "$out/model.safetensors" "$TMP/ref/model.safetensors"; then
        mismatch=$((mismatch + 1)); echo "# point $p: resumed run differs: $(head -c 200 "$out.err")"
    fi
    rm -rf "$out" "$out.loss" "$out.err"
done
[ $notkilled -eq 0 ] && pass b15.every_point_killed "$n points" || fail b15.every_point_killed "$notkilled of $n points never reached"
[ $bad_latest -eq 0 ] && pass b15.latest_whole "$n points" || fail b15.latest_whole "$bad_latest unloadable or partial"
[ $stale -eq 0 ] && pass b15.no_stale_tmp "$n points" || fail b15.no_stale_tmp "$stale with temporary files left after the next save"
[ $mismatch -eq 0 ] && pass b15.resume_bitwise "$n points" || fail b15.resume_bitwise "$mismatch resumed runs differ"

# the syscall order of a save
if ! command -v strace >/dev/null; then
    skip b15.syscall_order "strace not installed (apt-get install strace)"
else
strace -f -e trace=openat,write,fsync,rename,renameat,renameat2 -o "$TMP/strace" "$CNN" train $M0 --steps 1 \
    --out "$TMP/st" >/dev/null 2>&1
"$PYTHON" - "$TMP/strace" <<'PY' && pass b15.syscall_order "write -> fsync(file) -> rename -> fsync(dir)" || fail b15.syscall_order "$(tail -3 "$TMP/strace.verdict" 2>/dev/null)"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
fd = dfd = None
seq = []
for l in lines:
    m = re.search(r'openat\(AT_FDCWD, "([^"]*checkpoint\.safetensors\.tmp\.\d+)", [^)]*O_CREAT[^)]*\) = (\d+)', l)
    if m: fd = m.group(2); seq.append("open"); continue
    if fd and re.search(r'write\(%s,' % fd, l): seq.append("write"); continue
    if fd and re.search(r'fsync\(%s\)' % fd, l): seq.append("fsync"); fd = None; continue
    if re.search(r'rename(at2?)?\(.*checkpoint\.safetensors\.tmp\.\d+.*checkpoint\.safetensors"', l): seq.append("rename"); continue
    m = re.search(r'openat\(AT_FDCWD, "[^"]*", O_RDONLY\|O_CLOEXEC\|O_DIRECTORY\) = (\d+)', l)
    if m and seq and seq[-1] == "rename": dfd = m.group(1); continue
    if dfd and re.search(r'fsync\(%s\)' % dfd, l): seq.append("fsync_dir"); dfd = None
collapsed = [s for i, s in enumerate(seq) if i == 0 or s != seq[i - 1]]
ok = collapsed == ["open", "write", "fsync", "rename", "fsync_dir"]
open(sys.argv[1] + ".verdict", "w").write(" ".join(collapsed) + "\n")
sys.exit(0 if ok else 1)
PY
fi

# a full disk inside the last checkpoint: an error, the one before it intact, no temporary file
env LD_PRELOAD="$SHIM" SHIM_MATCH=checkpoint.safetensors SHIM_ENOSPC_AFTER_BYTES=$(((STEPS - 1) * SIZE + SIZE / 2)) \
    "$CNN" train $M --out "$TMP/full" >/dev/null 2>"$TMP/full.err"
rc=$?
step=$($ED get-meta "$TMP/full/checkpoint.safetensors" step 2>/dev/null)
[ $rc -eq 1 ] && grep -q 'No space left on device' "$TMP/full.err" && [ "$step" = $((STEPS - 1)) ] \
    && $ED finite "$TMP/full/checkpoint.safetensors" >/dev/null && ! ls "$TMP/full" | grep -q '\.tmp\.' \
    && pass b15.enospc "exit 1: $(head -c 120 "$TMP/full.err"); checkpoint of step $((STEPS - 1)) intact" \
    || fail b15.enospc "exit $rc, checkpoint step '$step': $(head -c 300 "$TMP/full.err") $(ls "$TMP/full")"
figure "B15: $n kill points ($((n - 3 * STEPS)) byte offsets over $STEPS checkpoint writes of $SIZE bytes, $((3 * STEPS)) fsync/rename/dir-fsync points): $bad_latest unloadable or partial latest, $stale stale temporary files after the next save, $mismatch resumed runs not bitwise equal; syscall order and ENOSPC checked"
finish
