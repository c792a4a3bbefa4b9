#!/usr/bin/env bash
# b16_nonfinite.sh — testing.md B16, NaN/Inf handling on the CPU: a NaN weight (refused by --weights; loaded
# with --allow-nonfinite, caught at step 1 naming the layer whose output it poisons), NaN and Inf pixels in one
# image of a `tensors:` dataset (caught at the step whose batch holds it, naming the input batch), a learning
# rate 2*10^4 times the default (caught at the first step whose loss or BN statistics are non-finite, the
# metrics of every earlier step finite) and --on-nonfinite skip (the poisoned batch skipped and counted, the run
# completes, its model finite). No checkpoint ever holds a non-finite value. The fp16 overflow and the guard's
# cost per step need a GPU (docs/RELIABILITY.md gives the commands).
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/reliability/lib.sh"
# B16_DEVICE=cuda B16_DTYPE=bf16|fp16 run it on a GPU (fp16: an Inf pixel is also an activation past 65504)
M="--model resnet18 --stem cifar --num-classes 10 --device ${B16_DEVICE:-cpu} --dtype ${B16_DTYPE:-fp32} --no-progress -q
   --seed 2 --checkpoint-every 1"
cases=0 detected=0 bad_ckpt=0
note() { cases=$((cases + 1)); }
ckpt_ok() { # every checkpoint left in $1 is finite
    [ ! -e "$1/checkpoint.safetensors" ] && return 0
    $ED finite "$1/checkpoint.safetensors" >/dev/null && return 0
    bad_ckpt=$((bad_ckpt + 1)); return 1
}

# a NaN weight
"$CNN" train $M --data synthetic --train-size 8 --eval-size 0 --batch 4 --steps 1 --out "$TMP/w" >/dev/null 2>&1
$ED set "$TMP/w/model.safetensors" "$TMP/nanw.st" conv1.weight 5 nan
note
expect b16.nan_weight_refused 1 'conv1\.weight.*non-finite' -- "$CNN" train $M --data synthetic --train-size 8 --eval-size 0 \
    --batch 4 --steps 2 --weights "$TMP/nanw.st" --out "$TMP/nw0" && detected=$((detected + 1))
note
expect b16.nan_weight_step1 1 'step 1 .*layer conv1 \(conv\) output' -- "$CNN" train $M --data synthetic --train-size 8 \
    --eval-size 0 --batch 4 --steps 2 --weights "$TMP/nanw.st" --allow-nonfinite --out "$TMP/nw" && detected=$((detected + 1))
ckpt_ok "$TMP/nw" && [ ! -e "$TMP/nw/checkpoint.safetensors" ] && pass b16.nan_weight_no_checkpoint || fail b16.nan_weight_no_checkpoint "$(ls "$TMP/nw")"

# NaN and Inf pixels in image 9 of 16 (batch 4, no shuffle: the third step's batch)
for v in nan inf; do
    "$PYTHON" - "$TMP/px_$v.st" "$v" <<'PY'
import json, struct, sys
n, v = 16, float(sys.argv[2])
px = [((i * 37) % 255) / 255.0 - 0.5 for i in range(n * 3 * 32 * 32)]
px[9 * 3 * 32 * 32 + 1234] = v
img = struct.pack("<%df" % len(px), *px)
lab = struct.pack("<%dq" % n, *[i % 10 for i in range(n)])
h = json.dumps({"images": {"dtype": "F32", "shape": [n, 3, 32, 32], "data_offsets": [0, len(img)]},
                "labels": {"dtype": "I64", "shape": [n], "data_offsets": [len(img), len(img) + len(lab)]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + img + lab)
PY
    note
    expect "b16.${v}_pixel_step3" 1 'step 3 .*the input batch' -- "$CNN" train $M --data "tensors:$TMP/px_$v.st" --batch 4 \
        --steps 4 --no-shuffle --out "$TMP/px_$v" && detected=$((detected + 1))
    [ "$(records "$TMP/px_$v/metrics.jsonl")" -eq 2 ] && ckpt_ok "$TMP/px_$v" \
        && [ "$($ED get-meta "$TMP/px_$v/checkpoint.safetensors" step)" = 2 ] \
        && pass "b16.${v}_pixel_checkpoint_before" "2 steps recorded, checkpoint of step 2 finite" \
        || fail "b16.${v}_pixel_checkpoint_before" "$(records "$TMP/px_$v/metrics.jsonl") records"
done
# skip mode: the poisoned batch is skipped, the run completes
note
"$CNN" train $M --data "tensors:$TMP/px_nan.st" --batch 4 --steps 4 --no-shuffle --on-nonfinite skip --out "$TMP/sk" \
    >/dev/null 2>"$TMP/sk.err"
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '"skipped":true' "$TMP/sk/metrics.jsonl")" -eq 1 ] && grep -q '"step":3,.*"skipped":true' "$TMP/sk/metrics.jsonl" \
    && $ED finite "$TMP/sk/model.safetensors" >/dev/null && ckpt_ok "$TMP/sk" \
    && { pass b16.skip_counts "step 3 skipped, model finite: $(head -c 150 "$TMP/sk.err")"; detected=$((detected + 1)); } \
    || fail b16.skip_counts "exit $rc: $(head -c 300 "$TMP/sk.err")"

# a learning rate 2*10^4 times the default
note
"$CNN" train $M --data synthetic --train-size 64 --eval-size 0 --batch 8 --steps 12 --lr 1000 --schedule constant \
    --out "$TMP/lr" >/dev/null 2>"$TMP/lr.err"
rc=$?
s=$(sed -nE 's/.*step ([0-9]+) \(lr.*/\1/p' "$TMP/lr.err")
"$PYTHON" -c '
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == int(sys.argv[2]) - 1 and all(math.isfinite(r["loss"]) for r in recs)' "$TMP/lr/metrics.jsonl" "${s:-0}" 2>/dev/null
ok=$?
[ $rc -eq 1 ] && [ $ok -eq 0 ] && grep -q 'first non-finite value: layer' "$TMP/lr.err" && ckpt_ok "$TMP/lr" \
    && { pass b16.lr_first_nonfinite_step "$(cut -c1-200 "$TMP/lr.err")"; detected=$((detected + 1)); } \
    || fail b16.lr_first_nonfinite_step "exit $rc, step '$s': $(head -c 300 "$TMP/lr.err")"
[ $bad_ckpt -eq 0 ] && pass b16.no_nonfinite_checkpoint || fail b16.no_nonfinite_checkpoint "$bad_ckpt checkpoints hold NaN/Inf"
figure "B16 (CPU): $detected of $cases injections detected at the step they take effect, naming the layer or the input; $bad_ckpt checkpoints with non-finite values"
finish
