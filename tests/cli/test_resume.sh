#!/usr/bin/env bash
# test_resume.sh — exact resume: 40 steps straight, 20 + stop + --resume + 20, and a run
# killed with SIGKILL at a random moment then resumed, must give bitwise-identical losses and final weights; and
# the same run twice gives the same bits. CNN_TEST_DEVICE=cuda runs it on the GPU (tools/gpu_session.sh).
. "$(dirname "$0")/../lib.sh"
M="--model resnet18 --stem cifar --device ${CNN_TEST_DEVICE:-cpu} --data synthetic --train-size 96 --eval-size 0 --batch 4 --steps 40 \
   --lr 0.05 --warmup 5 --schedule cosine --no-progress -q --seed 3"
losses() { "$PYTHON" -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "loss" in r: print(r["step"], r["loss"])' "$1"; }

"$CNN" train $M --out "$TMP/a" >/dev/null || { fail straight "training failed"; finish; exit; }
losses "$TMP/a/metrics.jsonl" >"$TMP/a.loss"
[ "$(wc -l <"$TMP/a.loss")" -eq 40 ] && pass straight.40_records || fail straight.40_records "$(wc -l <"$TMP/a.loss") records"
"$CNN" train $M --out "$TMP/a2" >/dev/null || fail straight.again "training failed"
losses "$TMP/a2/metrics.jsonl" >"$TMP/a2.loss"
cmp -s "$TMP/a.loss" "$TMP/a2.loss" && cmp -s "$TMP/a/model.safetensors" "$TMP/a2/model.safetensors" \
    && pass straight.repeat_bitwise "same seed twice: identical losses and weights" \
    || fail straight.repeat_bitwise "$(diff "$TMP/a.loss" "$TMP/a2.loss" | head -5 | tr '\n' '|')"

"$CNN" train $M --out "$TMP/b" --checkpoint-every 20 --stop-after 20 >/dev/null || fail stop.first_half "exit $?"
[ -f "$TMP/b/model.safetensors" ] && fail stop.no_final_model "a stopped run wrote the final model" || pass stop.no_final_model
"$CNN" train $M --out "$TMP/b" --resume >/dev/null 2>"$TMP/b.err" || fail resume.second_half "$(cat "$TMP/b.err")"
losses "$TMP/b/metrics.jsonl" >"$TMP/b.loss"
cmp -s "$TMP/a.loss" "$TMP/b.loss" && pass resume.losses_bitwise || fail resume.losses_bitwise "$(diff "$TMP/a.loss" "$TMP/b.loss" | head -5 | tr '\n' '|')"
cmp -s "$TMP/a/model.safetensors" "$TMP/b/model.safetensors" && pass resume.weights_bitwise || fail resume.weights_bitwise "final weights differ"

# SIGKILL at a random moment while checkpointing every step, then resume
"$CNN" train $M --out "$TMP/c" --checkpoint-every 1 >/dev/null 2>&1 &
pid=$!
sleep "$(awk -v s=$RANDOM 'BEGIN{srand(s); printf "%.2f", 1.5 + rand() * 2.5}')"
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
if [ -f "$TMP/c/model.safetensors" ]; then
    skip kill.resume "the run finished before the kill (machine too fast for the chosen delay)"
else
    ls "$TMP/c" | grep -q '\.tmp\.' && echo "note: a temp file from the killed write remains (expected; it is never read)"
    "$CNN" train $M --out "$TMP/c" --resume --checkpoint-every 1 >/dev/null 2>"$TMP/c.err" || fail kill.resume "$(cat "$TMP/c.err")"
    losses "$TMP/c/metrics.jsonl" >"$TMP/c.loss"
    cmp -s "$TMP/a.loss" "$TMP/c.loss" && pass kill.losses_bitwise "$(grep -o 'at step [0-9]*' "$TMP/c.err")" || fail kill.losses_bitwise "$(diff "$TMP/a.loss" "$TMP/c.loss" | head -5 | tr '\n' '|')"
    cmp -s "$TMP/a/model.safetensors" "$TMP/c/model.safetensors" && pass kill.weights_bitwise || fail kill.weights_bitwise "final weights differ"
fi

# options that change the run are refused on resume
expect resume.options_mismatch 1 "other options" -- "$CNN" train ${M/--lr 0.05/--lr 0.1} --out "$TMP/b" --resume
finish
