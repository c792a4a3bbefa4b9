#!/usr/bin/env bash
# test_reliability.sh — the findings of issue 30 (a hostile user's stress test of 419bfde), one check each:
# non-finite values caught where they appear and never scored, written or loaded; the final model never lost;
# failed writes, stale files, signals and concurrent runs handled; values from files checked. Every check here
# failed on 419bfde. Small CIFAR-stem ResNet-18 runs on the CPU.
. "$(dirname "$0")/../lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ED="$PYTHON $ROOT/tests/reliability/stedit.py"
E="--model resnet18 --stem cifar --num-classes 10 --device cpu -q --seed 1"
M="$E --no-progress"
D="--data synthetic --eval-size 0"

# strict JSON lines: NaN, Infinity and -nan are not JSON
json_ok() { "$PYTHON" -c '
import json, sys
def bad(c): raise ValueError("not JSON: " + c)
for i, l in enumerate(open(sys.argv[1])):
    try: json.loads(l, parse_constant=bad)
    except ValueError as e: sys.exit("line %d: %s: %s" % (i + 1, e, l.strip()))' "$1"; }
records() { local n; n=$(grep -c '"loss"' "$1" 2>/dev/null); echo "${n:-0}"; }

"$CNN" train $M $D --train-size 4 --batch 2 --steps 1 --out "$TMP/w" >/dev/null 2>"$TMP/w.err" \
    || { fail setup "a one-step run failed: $(cat "$TMP/w.err")"; finish; exit; }
W=$TMP/w/model.safetensors

# ---- a model full of NaN scored 100 %; NaN/Inf weights and negative variances loaded silently ---------------
$ED set "$W" "$TMP/nan.st" conv1.weight 0 nan   # every logit NaN: 419bfde scored it 100 %
$ED set "$W" "$TMP/negvar.st" bn1.running_var 3 -1
expect weights.nan_refused 1 'conv1\.weight.*non-finite.*allow-nonfinite' -- "$CNN" eval $E --data synthetic --eval-size 8 --weights "$TMP/nan.st"
expect weights.negative_variance_refused 1 'bn1\.running_var.*negative variance' -- "$CNN" eval $E --data synthetic --eval-size 8 --weights "$TMP/negvar.st"
"$CNN" eval $E --data synthetic --eval-size 8 --weights "$TMP/nan.st" --allow-nonfinite >"$TMP/eval.out" 2>"$TMP/eval.err"
rc=$?
[ $rc -eq 0 ] && grep -q 'top1 0.00%' "$TMP/eval.out" && grep -q 'non-finite 8' "$TMP/eval.out" \
    && pass eval.nan_model_scores_zero "$(cat "$TMP/eval.out")" || fail eval.nan_model_scores_zero "exit $rc: $(cat "$TMP/eval.out" "$TMP/eval.err" | head -c 300)"

# ---- divergence: caught at the step it appears, named; no checkpoint or model holds it -----------------------
R="$M --data synthetic --batch 8 --lr 1000 --schedule constant"
"$CNN" train $R --train-size 64 --eval-size 32 --steps 12 --checkpoint-every 1 --out "$TMP/lr" >/dev/null 2>"$TMP/lr.err"
rc=$?
s=$(sed -nE 's/.*step ([0-9]+) \(lr.*/\1/p' "$TMP/lr.err" | head -1)
if [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/lr.err")" -eq 1 ] && grep -qE 'non-finite.*first non-finite value: (layer|the input)' "$TMP/lr.err" \
    && [ -n "$s" ] && [ "$s" -lt 10 ] && [ "$(records "$TMP/lr/metrics.jsonl")" -eq $((s - 1)) ]; then
    pass diverge.stops_at_first_nonfinite_step "$(cut -c1-200 "$TMP/lr.err")"
else
    fail diverge.stops_at_first_nonfinite_step "exit $rc, step '$s', $(records "$TMP/lr/metrics.jsonl") records: $(head -c 400 "$TMP/lr.err")"
fi
out=$(json_ok "$TMP/lr/metrics.jsonl" 2>&1) && pass diverge.metrics_json "$(wc -l <"$TMP/lr/metrics.jsonl") records" || fail diverge.metrics_json "$out"
out=$($ED finite "$TMP/lr/checkpoint.safetensors" 2>&1) && pass diverge.checkpoint_finite "$out" || fail diverge.checkpoint_finite "$out"
[ ! -e "$TMP/lr/model.safetensors" ] && pass diverge.no_model || fail diverge.no_model "a model was written"
expect diverge.short_run_fails 1 'non-finite' -- "$CNN" train $R --train-size 64 --eval-size 0 --steps 6 --out "$TMP/lr6"
[ ! -e "$TMP/lr6/model.safetensors" ] && pass diverge.short_run_no_model || fail diverge.short_run_no_model "model written"
# finite statistics whose eval forward still overflows: the final model is checked before it is written
expect diverge.final_model_checked 1 'model.safetensors not written: the model gives non-finite logits' -- \
    "$CNN" train $R --train-size 64 --eval-size 0 --steps 4 --out "$TMP/lr4"
# --on-nonfinite skip: bad steps undone and counted, every record JSON, evaluations of a broken model say so
"$CNN" train $R --eval-size 16 --train-size 32 --steps 8 --on-nonfinite skip --max-skipped 100 --out "$TMP/skip" \
    >/dev/null 2>"$TMP/skip.err"
out=$(json_ok "$TMP/skip/metrics.jsonl" 2>&1) && grep -q '"skipped":true' "$TMP/skip/metrics.jsonl" \
    && ! grep -q '"eval_top1":1.0' "$TMP/skip/metrics.jsonl" \
    && pass skip.records_json "$(grep -c skipped "$TMP/skip/metrics.jsonl") skipped, $(grep -c eval_nonfinite "$TMP/skip/metrics.jsonl") evals" \
    || fail skip.records_json "$out $(head -c 300 "$TMP/skip/metrics.jsonl")"
out=$($ED finite "$TMP/skip/checkpoint.safetensors" 2>&1) && pass skip.checkpoint_finite "$out" || fail skip.checkpoint_finite "$out"
expect skip.cap 1 'more steps skipped than --max-skipped' -- "$CNN" train $R --train-size 64 --eval-size 0 --steps 8 \
    --on-nonfinite skip --max-skipped 1 --out "$TMP/cap"

# ---- the final model is never lost ----------------------------------------------------------------------
T="$M $D --train-size 16 --batch 4 --checkpoint-every 1"
expect final.stop_after_last_step 0 '' -- "$CNN" train $T --steps 3 --stop-after 3 --out "$TMP/f"
[ -f "$TMP/f/model.safetensors" ] && pass final.stop_after_writes_model || fail final.stop_after_writes_model "no model"
cp "$TMP/f/model.safetensors" "$TMP/model.keep" 2>/dev/null
rm -f "$TMP/f/model.safetensors"
expect final.resume_writes_missing_model 0 '' -- "$CNN" train $T --steps 3 --resume --out "$TMP/f"
cmp -s "$TMP/f/model.safetensors" "$TMP/model.keep" && pass final.resumed_model_identical || fail final.resumed_model_identical "differs or missing"
rm -f "$TMP/f/model.safetensors" && mkdir "$TMP/f/model.safetensors"
expect final.failed_save_exit1 1 'model.safetensors' -- "$CNN" train $T --steps 3 --resume --out "$TMP/f"

# ---- failed writes, stale files, signals, concurrent runs ---------------------------------------------------
mkdir -p "$TMP/full" && ln -s /dev/full "$TMP/full/metrics.jsonl"
expect writes.metrics_disk_full 1 'metrics.jsonl: write failed: No space left' -- "$CNN" train $T --steps 1 --out "$TMP/full"
# a checkpoint written behind the next steps that cannot be put in place stops the run, and no model is written
mkdir -p "$TMP/ckfail/checkpoint.safetensors"
expect writes.checkpoint_behind_fails 1 'checkpoint.safetensors: rename failed' -- "$CNN" train $T --steps 3 --out "$TMP/ckfail"
[ ! -e "$TMP/ckfail/model.safetensors" ] && pass writes.checkpoint_behind_no_model || fail writes.checkpoint_behind_no_model "a model was written"
dead=$(sh -c 'echo $$')
mkdir -p "$TMP/stale" && head -c 100000 /dev/zero >"$TMP/stale/checkpoint.safetensors.tmp.$dead"
head -c 10 /dev/zero >"$TMP/stale/model.safetensors.tmp.$$"   # a live process's: kept
"$CNN" train $T --steps 1 --out "$TMP/stale" >/dev/null 2>&1
[ ! -e "$TMP/stale/checkpoint.safetensors.tmp.$dead" ] && [ -e "$TMP/stale/model.safetensors.tmp.$$" ] \
    && pass files.stale_tmp_removed "pid $dead's left-over removed, a live one kept" || fail files.stale_tmp_removed "$(ls "$TMP/stale")"

L="$M $D --train-size 64 --batch 2"
for sig in TERM INT; do
    out=$TMP/sig$sig
    "$CNN" train $L --steps 100000 --out "$out" >/dev/null 2>"$out.err" &
    pid=$!
    while kill -0 $pid 2>/dev/null && [ "$(records "$out/metrics.jsonl")" -lt 2 ]; do sleep 0.1; done
    if [ $sig = TERM ]; then # a second run into the same directory fails at once, naming the first
        expect files.second_run_locked_out 1 "in use by another run \\(pid $pid\\)" -- "$CNN" train $L --steps 100000 --out "$out"
    fi
    kill -$sig $pid
    wait $pid
    rc=$?
    want=$([ $sig = TERM ] && echo 143 || echo 130)
    n=$(records "$out/metrics.jsonl")
    step=$($ED get-meta "$out/checkpoint.safetensors" step 2>/dev/null)
    [ $rc -eq "$want" ] && [ "$step" = "$n" ] && grep -q "interrupted after step $n" "$out.err" \
        && pass "signal.$sig.checkpoint_and_exit_$want" "checkpoint at step $step" \
        || fail "signal.$sig.checkpoint_and_exit_$want" "exit $rc, checkpoint step '$step', $n records: $(head -c 300 "$out.err")"
done
expect signal.resume_after_interrupt 0 '' -- "$CNN" train $L --steps 100000 --stop-after $((n + 1)) --resume --out "$TMP/sigINT"

# ---- values from files ------------------------------------------------------------------------------------
"$PYTHON" - "$TMP/labels.st" <<'PY'
import json, struct, sys
img = struct.pack("<%df" % (2 * 3 * 32 * 32), *[0.5] * (2 * 3 * 32 * 32))
lab = struct.pack("<2q", 3, 999999)
h = json.dumps({"images": {"dtype": "F32", "shape": [2, 3, 32, 32], "data_offsets": [0, len(img)]},
                "labels": {"dtype": "I64", "shape": [2], "data_offsets": [len(img), len(img) + 16]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + img + lab)
PY
P="--model resnet18 --stem cifar --device cpu --no-progress -q --batch 2 --steps 1"
expect files.stray_label_needs_num_classes 1 'labels go up to 999999.*--num-classes' -- \
    bash -c "ulimit -v 4000000; exec \"$CNN\" train $P --data tensors:$TMP/labels.st --out $TMP/lab"
expect files.label_checked_against_classes 1 'label 999999 of image 1 is outside \[0, 10\)' -- \
    "$CNN" train $P --num-classes 10 --data "tensors:$TMP/labels.st" --out "$TMP/lab2"
expect files.dev_zero_refused 1 '/dev/zero: not a regular file' -- \
    bash -c "ulimit -v 2000000; exec timeout 60 \"$CNN\" eval $E --data synthetic --eval-size 2 --weights /dev/zero"
$ED add "$W" "$TMP/evil.st" 'evil\n\x1b[31mname' 1
expect files.name_escaped 1 'unexpected tensor "evil\\x0A\\x1B\[31mname"' -- "$CNN" eval $E --data synthetic --eval-size 2 --weights "$TMP/evil.st"
"$CNN" eval $E --data synthetic --eval-size 2 --weights "$TMP/evil.st" 2>"$TMP/evil.err" >/dev/null
! grep -q $'\x1b' "$TMP/evil.err" && pass files.no_escape_reaches_terminal || fail files.no_escape_reaches_terminal "ESC byte on stderr"
C="$M $D --train-size 16 --batch 4 --steps 2 --checkpoint-every 1"
"$CNN" train $C --stop-after 1 --out "$TMP/ck" >/dev/null 2>&1
$ED meta "$TMP/ck/checkpoint.safetensors" "$TMP/ck_max.st" step 9223372036854775807
$ED meta "$TMP/ck/checkpoint.safetensors" "$TMP/ck_past.st" step 5
$ED add "$TMP/ck/checkpoint.safetensors" "$TMP/ck_opt.st" optimizer.velocity 4
expect ckpt.step_overflow_refused 1 'metadata "step" is not a count' -- timeout 120 "$CNN" train $C --out "$TMP/ck" --resume-from "$TMP/ck_max.st"
expect ckpt.step_past_run_refused 1 'at step 5, past the run.s 2 steps' -- "$CNN" train $C --out "$TMP/ck" --resume-from "$TMP/ck_past.st"
expect ckpt.unknown_optimizer_tensor 1 'unexpected tensor "optimizer.velocity"' -- "$CNN" train $C --out "$TMP/ck" --resume-from "$TMP/ck_opt.st"
finish
