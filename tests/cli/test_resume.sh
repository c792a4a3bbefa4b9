#!/usr/bin/env bash
# test_resume.sh — exact resume (testing.md B14/B15): 40 steps straight, 20 + stop + --resume + 20, and a run
# killed with SIGKILL at a random step then resumed, must give bitwise-identical losses and final weights (the
# resumed runs' first halves are fresh processes: the same run twice gives the same bits). The kill waits for a
# step count, never for a time, so a busy machine changes nothing. CNN_TEST_DEVICE=cuda runs it on the GPU
# (tools/gpu_session.sh). tests/reliability/b15_kill.sh kills at hundreds of points inside checkpoint writes.
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

"$CNN" train $M --out "$TMP/b" --checkpoint-every 20 --stop-after 20 >/dev/null || fail stop.first_half "exit $?"
[ -f "$TMP/b/model.safetensors" ] && fail stop.no_final_model "a stopped run wrote the final model" || pass stop.no_final_model
"$CNN" train $M --out "$TMP/b" --resume >/dev/null 2>"$TMP/b.err" || fail resume.second_half "$(cat "$TMP/b.err")"
losses "$TMP/b/metrics.jsonl" >"$TMP/b.loss"
cmp -s "$TMP/a.loss" "$TMP/b.loss" && pass resume.losses_bitwise || fail resume.losses_bitwise "$(diff "$TMP/a.loss" "$TMP/b.loss" | head -5 | tr '\n' '|')"
cmp -s "$TMP/a/model.safetensors" "$TMP/b/model.safetensors" && pass resume.weights_bitwise || fail resume.weights_bitwise "final weights differ"

# SIGKILL at a random step while checkpointing every step (a step's record is written before its checkpoint, so
# the kill lands anywhere from the end of step k-1's checkpoint to inside step k's), then resume
k=$((2 + RANDOM % 30))
"$CNN" train $M --out "$TMP/c" --checkpoint-every 1 >/dev/null 2>&1 &
pid=$!
records() { local n; n=$(grep -c '"loss"' "$1" 2>/dev/null); echo "${n:-0}"; }
while kill -0 $pid 2>/dev/null && [ "$(records "$TMP/c/metrics.jsonl")" -lt $k ]; do sleep 0.05; done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
if [ -f "$TMP/c/model.safetensors" ]; then
    fail kill.resume "the run finished before it was killed at step $k"
else
    "$CNN" train $M --out "$TMP/c" --resume --checkpoint-every 1 >/dev/null 2>"$TMP/c.err" || fail kill.resume "$(cat "$TMP/c.err")"
    ls "$TMP/c" | grep -q '\.tmp\.' && fail kill.no_temporary_left "$(ls "$TMP/c")" || pass kill.no_temporary_left
    losses "$TMP/c/metrics.jsonl" >"$TMP/c.loss"
    cmp -s "$TMP/a.loss" "$TMP/c.loss" && pass kill.losses_bitwise "$(grep -o 'at step [0-9]*' "$TMP/c.err")" || fail kill.losses_bitwise "$(diff "$TMP/a.loss" "$TMP/c.loss" | head -5 | tr '\n' '|')"
    cmp -s "$TMP/a/model.safetensors" "$TMP/c/model.safetensors" && pass kill.weights_bitwise || fail kill.weights_bitwise "final weights differ"
fi

# options that change the run are refused on resume
expect resume.options_mismatch 1 "other options" -- "$CNN" train ${M/--lr 0.05/--lr 0.1} --out "$TMP/b" --resume
finish
