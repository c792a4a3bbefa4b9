#!/usr/bin/env bash
# test_train.sh — end to end on the built-in synthetic data: training learns (accuracy well above chance),
# writes the documented files, eval agrees with the last epoch's evaluation, info and bench run.
. "$(dirname "$0")/../lib.sh"
"$CNN" train --model resnet18 --stem cifar --device cpu --data synthetic --train-size 1024 --eval-size 256 \
    --batch 32 --epochs 2 --lr 0.05 --warmup 4 --out "$TMP/run" --no-progress -q >"$TMP/out" 2>"$TMP/err" \
    || { fail train.runs "$(cat "$TMP/err")"; finish; exit; }
cat "$TMP/out"
for f in model.safetensors checkpoint.safetensors metrics.jsonl; do
    [ -s "$TMP/run/$f" ] && pass "train.writes_$f" || fail "train.writes_$f" "missing"
done
[ "$(grep -c '^epoch' "$TMP/out")" -eq 2 ] && pass train.epoch_lines || fail train.epoch_lines "$(cat "$TMP/out")"
top1=$(grep '^epoch 2' "$TMP/out" | sed -E 's/.*top1 +([0-9.]+)%.*/\1/')
awk -v a="$top1" 'BEGIN{exit !(a > 40)}' && pass train.learns "eval top-1 ${top1}% after 64 steps (chance 10%)" \
    || fail train.learns "eval top-1 ${top1}% after 2 epochs"
"$CNN" eval --model resnet18 --stem cifar --device cpu --data synthetic --eval-size 256 --weights "$TMP/run/model.safetensors" >"$TMP/eval" 2>&1
etop1=$(sed -E 's/.*top1 +([0-9.]+)%.*/\1/' "$TMP/eval")
awk -v a="$top1" -v b="$etop1" 'BEGIN{exit !((a - b) < 0.06 && (b - a) < 0.06)}' && pass eval.matches_train_eval "$(cat "$TMP/eval")" \
    || fail eval.matches_train_eval "train-time ${top1}% vs cnn eval ${etop1}%"
"$CNN" info --model resnet50 >"$TMP/info" 2>&1 && grep -q '25557032 trainable parameters' "$TMP/info" \
    && pass info.resnet50 || fail info.resnet50 "$(tail -2 "$TMP/info")"
"$CNN" bench --model resnet18 --stem cifar --batch 2 --repeat 2 --warmup 1 --device cpu -o json >"$TMP/bench.json" 2>"$TMP/bench.err" \
    && "$PYTHON" -c '
import json, sys
rows = json.load(open(sys.argv[1]))
need = {"impl","model","input","batch","dtype","mode","device","ms_median","images_per_s","tflops","peak_mib","setup_s","commit","date"}
assert len(rows) == 1 and need <= rows[0].keys() and rows[0]["ok"] and rows[0]["ms_median"] > 0, rows' "$TMP/bench.json" \
    && pass bench.json_record || fail bench.json_record "$(cat "$TMP/bench.err" "$TMP/bench.json" | head -c 400)"
finish
