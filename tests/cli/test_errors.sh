#!/usr/bin/env bash
# test_errors.sh — bad input gives a one-line error naming the file and the problem, the documented exit
# status (1 runtime, 2 usage), no crash, and no partial output file. Runs the ASan+UBSan build when present.
. "$(dirname "$0")/../lib.sh"
if [ -n "${ASAN_BUILD:-}" ] && [ -x "$ASAN_BUILD/cnn" ]; then CNN=$ASAN_BUILD/cnn; fi
echo "binary: $CNN"
M="--model resnet18 --stem cifar --num-classes 10 --device cpu"

# a valid weights file and input to corrupt: one training step on 4 synthetic images
"$CNN" train $M --data synthetic --train-size 4 --eval-size 0 --batch 2 --steps 1 --out "$TMP/run" \
    --no-progress -q >/dev/null 2>"$TMP/train.err" || { fail setup "training a tiny model failed: $(cat "$TMP/train.err")"; finish; exit; }
W=$TMP/run/model.safetensors
"$PYTHON" - "$TMP/x.safetensors" "$TMP/l.safetensors" <<'PY'
import json, struct, sys, random
def save(path, name, dtype, shape, payload):
    h = json.dumps({name: {"dtype": dtype, "shape": shape, "data_offsets": [0, len(payload)]}}).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + payload)
random.seed(1)
save(sys.argv[1], "input", "F32", [2, 3, 32, 32], struct.pack("<6144f", *[random.uniform(-1, 1) for _ in range(6144)]))
save(sys.argv[2], "labels", "I64", [2], struct.pack("<2q", 3, 7))
PY
X=$TMP/x.safetensors
L=$TMP/l.safetensors

expect infer.ok 0 '' -- "$CNN" infer $M --weights "$W" --input "$X" --output "$TMP/ok.safetensors" -q
[ -f "$TMP/ok.safetensors" ] && pass infer.ok_output || fail infer.ok_output "no output written"

# corrupt and mismatched weight files: exit 1, message names the file
for kind in truncated truncated_data huge_header bad_json not_object overlap out_of_range unknown_dtype \
            wrong_dtype missing_tensor extra_tensor wrong_shape; do
    "$PYTHON" tests/cli/mkbad.py "$kind" "$W" "$TMP/bad_$kind.safetensors" || { fail "weights.$kind" "mkbad failed"; continue; }
    out=$TMP/out_$kind.safetensors
    expect "weights.$kind" 1 "bad_$kind.safetensors" -- "$CNN" infer $M --weights "$TMP/bad_$kind.safetensors" \
        --input "$X" --output "$out"
    [ -e "$out" ] && fail "weights.$kind.no_output" "an output file was left behind"
    ls "$TMP" | grep -q "out_$kind.safetensors.tmp" && fail "weights.$kind.no_temp" "a temp file was left behind"
done
expect weights.wrong_dtype.says_dtype 1 'dtype I32' -- "$CNN" infer $M --weights "$TMP/bad_wrong_dtype.safetensors" --input "$X" --output "$TMP/o.st"
expect weights.missing_tensor.names_it 1 'missing tensor "fc.bias"' -- "$CNN" infer $M --weights "$TMP/bad_missing_tensor.safetensors" --input "$X" --output "$TMP/o.st"
expect weights.extra_tensor.names_it 1 '"fc.extra"' -- "$CNN" infer $M --weights "$TMP/bad_extra_tensor.safetensors" --input "$X" --output "$TMP/o.st"
expect weights.wrong_shape.says_shapes 1 'shape \[512, 10\].*\[10, 512\]' -- "$CNN" infer $M --weights "$TMP/bad_wrong_shape.safetensors" --input "$X" --output "$TMP/o.st"
expect weights.missing_file 1 'nonexistent.safetensors' -- "$CNN" infer $M --weights "$TMP/nonexistent.safetensors" --input "$X" --output "$TMP/o.st"
expect weights.directory 1 "$TMP" -- "$CNN" infer $M --weights "$TMP" --input "$X" --output "$TMP/o.st"
expect weights.wrong_model 1 'layer|missing|unexpected|shape' -- "$CNN" infer --model resnet34 --stem cifar --num-classes 10 --device cpu --weights "$W" --input "$X" --output "$TMP/o.st"
expect input.wrong_tensor 1 'no tensor named "input"' -- "$CNN" infer $M --input "$L" --output "$TMP/o.st"
expect grad.labels_missing 1 'no tensor named "labels"' -- "$CNN" grad $M --input "$X" --labels "$X" --output "$TMP/o.st"
"$PYTHON" - "$TMP/l_bad.safetensors" <<'PY'
import json, struct, sys
h = json.dumps({"labels": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}}).encode(); h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<2q", 3, 10))
PY
expect grad.label_out_of_range 1 'label 10 .*out of range' -- "$CNN" grad $M --input "$X" --labels "$TMP/l_bad.safetensors" --output "$TMP/o.st"
expect output.missing_dir 1 'nodir' -- "$CNN" infer $M --input "$X" --output "$TMP/nodir/y.safetensors"

# datasets
mkdir -p "$TMP/cifar"
head -c 30730001 /dev/zero >"$TMP/cifar/test_batch.bin"
expect cifar.wrong_size 1 'test_batch.bin: 30730001 bytes' -- "$CNN" eval $M --weights "$W" --data "cifar10:$TMP/cifar"
expect cifar.missing 1 'data_batch_1.bin' -- "$CNN" train $M --data "cifar10:$TMP/cifar" --steps 1 --out "$TMP/r2"
expect data.unknown 2 "unknown data source" -- "$CNN" train $M --data imagenet --steps 1 --out "$TMP/r3"

# usage errors: exit 2
expect usage.unknown_model 2 "unknown model 'resnet19'" -- "$CNN" info --model resnet19
expect usage.unknown_command 2 "unknown command" -- "$CNN" frobnicate
expect usage.unknown_flag 2 "unknown option '--frob'" -- "$CNN" info --model resnet18 --frob
expect usage.bad_int 2 "--batch expects an integer" -- "$CNN" train $M --batch abc
expect usage.int_range 2 "--batch 0 out of range" -- "$CNN" train $M --batch 0
expect usage.bad_float 2 "--lr expects a number" -- "$CNN" train $M --lr nan
expect usage.bad_choice 2 "'tpu' is not one of" -- "$CNN" info --model resnet18 --device tpu
expect usage.missing_value 2 "--model needs a value" -- "$CNN" info --model
expect usage.bad_input_size 2 "--input-size" -- "$CNN" info --model resnet18 --input-size 12x
expect usage.too_small 2 "too small" -- "$CNN" info --model vgg16 --input-size 16
expect usage.cpu_bf16 1 "fp32 only" -- "$CNN" info --model resnet18 --batch 1 --device cpu --dtype bf16
if [ -e /dev/nvidia0 ]; then
    skip usage.cuda_unavailable "a GPU is present"
else
    expect usage.cuda_unavailable 1 "--device cuda" -- "$CNN" info --model resnet18 --batch 1 --device cuda
fi
expect help.exit0 0 '' -- "$CNN" train --help
finish
