#!/usr/bin/env bash
# test_data.sh — real data in (issue 28): image folders, MNIST-format and CIFAR-100 files through train, eval and
# infer, and the bad-input battery: every corrupt, truncated, empty, oversized, unreadable or looping input is a
# one-line error naming it (exit 1), or with --on-bad-image skip a counted skip; never a crash. Runs the
# ASan+UBSan build when present. Images come from tests/cli/mkimages.py (PIL).
. "$(dirname "$0")/../lib.sh"
if [ -n "${ASAN_BUILD:-}" ] && [ -x "$ASAN_BUILD/cnn" ]; then CNN=$ASAN_BUILD/cnn; fi
echo "binary: $CNN"
if ! "$PYTHON" -c 'import PIL' 2>/dev/null; then skip data "PIL not importable by $PYTHON"; finish; exit; fi
if ! "$CNN" info --model resnet18 >/dev/null 2>&1; then fail data "$CNN does not run"; finish; exit; fi
MK="$PYTHON tests/cli/mkimages.py"
M="--model resnet18 --input-size 32 --device cpu --threads 2"
D=$TMP/good
$MK good "$D" || { fail setup "mkimages good"; finish; exit; }

# ---- folders that work -------------------------------------------------------------------------------------
n_train=$(find "$D/train" -type f \( -iname '*.jpg' -o -iname '*.jpeg' -o -iname '*.png' \) | wc -l)
expect folder.train 0 '' -- "$CNN" train $M --data folder:"$D" --batch 4 --steps 2 --eval-size 0 --out "$TMP/run" \
    --no-progress -q
[ -f "$TMP/run/model.safetensors" ] && pass folder.train.model || fail folder.train.model "no model written"
[ -f "$TMP/run/curves.svg" ] && "$PYTHON" -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$TMP/run/curves.svg" \
    && pass folder.train.curves_svg || fail folder.train.curves_svg "no well-formed curves.svg"
out=$("$CNN" eval $M --data folder:"$D" --weights "$TMP/run/model.safetensors" 2>"$TMP/err")
echo "$out" | grep -q "$((n_train)) images" && pass folder.eval "$out" || fail folder.eval "$out $(cat "$TMP/err")"
expect folder.plot 0 '' -- "$CNN" plot "$TMP/run" --out "$TMP/two.svg"
# a device decoder asked for where the backend has none: one line, exit 1 (auto decodes on the CPU)
for dec in gpu mixed; do
    expect "folder.decode_$dec.cpu_backend" 1 "--decode $dec: the cpu backend has no device JPEG decoder" -- "$CNN" train \
        $M --data folder:"$D" --decode $dec --batch 4 --steps 1 --eval-size 0 --out "$TMP/rd" --no-progress -q
done
out=$("$CNN" infer $M --weights "$TMP/run/model.safetensors" --num-classes 3 --input "$D/val" -o csv 2>"$TMP/err")
rows=$(echo "$out" | grep -c ',1,')
[ "$rows" -eq "$n_train" ] && pass infer.folder_csv "$rows images" || fail infer.folder_csv "$rows rows: $out $(cat "$TMP/err")"
printf 'cat\ndog\nbird\n' >"$TMP/names.txt"
out=$("$CNN" infer $M --weights "$TMP/run/model.safetensors" --num-classes 3 --classes "$TMP/names.txt" \
      --input "$D/val/a/one.png,$D/val/b/b1_cmyk.jpg" 2>"$TMP/err")
[ "$(echo "$out" | grep -cE '(cat|dog|bird) \(')" -eq 2 ] && pass infer.files_named || fail infer.files_named "$out $(cat "$TMP/err")"
printf 'cat\n' >"$TMP/few.txt"
expect infer.classes_too_few 1 'few.txt: 1 class names, the model has 3' -- "$CNN" infer $M --num-classes 3 \
    --classes "$TMP/few.txt" --input "$D/val/a/one.png"

# ---- the bad-image battery: in a class folder, then as infer input ------------------------------------------
for kind in corrupt_jpeg truncated_jpeg corrupt_png truncated_png zero text huge_png huge_jpeg bmp; do
    B=$TMP/bad_$kind
    cp -r "$D" "$B"
    ext=jpg; case $kind in *png) ext=png ;; bmp) ext=bmp ;; esac
    $MK bad $kind "$B/val/b/x_$kind.$ext" || { fail "bad.$kind" "mkimages"; continue; }
    case $kind in
        zero) want='empty file' ;; text) want='not a JPEG or PNG' ;; huge_*) want='over the limit of' ;;
        bmp) want='BMP image; only JPEG and PNG' ;; truncated_jpeg) want='truncated JPEG' ;;
        corrupt_jpeg) want='JPEG' ;; *) want='corrupt PNG' ;;
    esac
    expect "bad.$kind.eval_fail" 1 "x_$kind.$ext: .*$want" -- "$CNN" eval $M --data folder:"$B" \
        --weights "$TMP/run/model.safetensors"
    out=$("$CNN" eval $M --data folder:"$B" --weights "$TMP/run/model.safetensors" --on-bad-image skip 2>"$TMP/err")
    rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '(1 bad images skipped)' && grep -q "skipping a bad image: .*x_$kind" "$TMP/err"; then
        pass "bad.$kind.eval_skip" "$out"
    else
        fail "bad.$kind.eval_skip" "exit $rc: $out | $(head -c 300 "$TMP/err")"
    fi
    expect "bad.$kind.infer" 1 "x_$kind.$ext: .*$want" -- "$CNN" infer $M --input "$B/val/b/x_$kind.$ext"
    rm -rf "$B"
done
# the pixel cap acts before any allocation: a 65535x65535 PNG header costs no memory (plain build: no ASan shadow)
if [ -x "$BUILD/cnn" ] && [ -x /usr/bin/time ]; then
    $MK bad huge_png "$TMP/huge.png"
    /usr/bin/time -f '%M' -o "$TMP/rss" "$BUILD/cnn" infer $M --input "$TMP/huge.png" 2>/dev/null
    kb=$(tail -n1 "$TMP/rss")
    [ "$kb" -lt 400000 ] && pass bad.huge_png.rss "peak RSS $((kb / 1024)) MB" || fail bad.huge_png.rss "peak RSS $kb kB"
fi
# training stops at a bad image with fail, and counts it with skip
B=$TMP/bad_train
cp -r "$D" "$B"
$MK bad truncated_png "$B/train/a/zz_trunc.png"
expect bad.train_fail 1 'zz_trunc.png: corrupt PNG' -- "$CNN" train $M --data folder:"$B" --batch 4 --epochs 1 \
    --eval-size 0 --out "$TMP/rb" --no-progress -q --no-shuffle
out=$("$CNN" train $M --data folder:"$B" --batch 4 --epochs 1 --eval-size 0 --out "$TMP/rb" --no-progress \
      --on-bad-image skip 2>"$TMP/err")
echo "$out" | grep -q 'skipped 1 bad images' && pass bad.train_skip "$(echo "$out" | tail -n1)" || fail bad.train_skip "$out $(cat "$TMP/err")"
# 1x1 images decode and resize (they are in the good set); a dangling symlink is an unreadable file
B=$TMP/bad_link
cp -r "$D" "$B"
ln -s "$TMP/nowhere.jpg" "$B/val/c/gone.jpg"
expect bad.dangling_symlink 1 'gone.jpg: (cannot open|No such file)' -- "$CNN" eval $M --data folder:"$B" \
    --weights "$TMP/run/model.safetensors"
if [ "$(id -u)" -ne 0 ]; then
    chmod 000 "$B/val/c/c1_rgb.jpg"
    expect bad.unreadable 1 'c1_rgb.jpg' -- "$CNN" eval $M --data folder:"$B" --weights "$TMP/run/model.safetensors"
else
    mkdir -p "$TMP/dirjpg/val/a/x.jpg" "$TMP/dirjpg/train/a" && cp "$D/val/a/one.png" "$TMP/dirjpg/train/a/"
    cp "$D/val/a/one.png" "$TMP/dirjpg/val/a/"
    mkfifo "$TMP/dirjpg/val/a/fifo.jpg"
    expect bad.unreadable_fifo 1 'fifo.jpg: .*not a regular file' -- "$CNN" eval $M --data folder:"$TMP/dirjpg" \
        --weights "$TMP/run/model.safetensors" --num-classes 3
fi
rm -rf "$B"
# symlink loops: an error, or skipped and counted
B=$TMP/loop
cp -r "$D" "$B"
ln -s .. "$B/train/a/nested/up"
expect loop.fail 1 'symlink loop' -- "$CNN" eval $M --data folder:"$B/train" --weights "$TMP/run/model.safetensors"
out=$("$CNN" eval $M --data folder:"$B/train" --weights "$TMP/run/model.safetensors" --on-bad-image skip 2>"$TMP/err")
[ $? -eq 0 ] && grep -q 'skipped 1 symlink loop' "$TMP/err" && pass loop.skip "$out" || fail loop.skip "$out $(cat "$TMP/err")"
# empty classes, no classes, missing folders
B=$TMP/empty
cp -r "$D" "$B"
mkdir -p "$B/train/d" "$B/val/d" && echo x >"$B/train/d/readme.txt"
expect folder.empty_class 1 "class 'd' has no image files" -- "$CNN" train $M --data folder:"$B" --steps 1 --out "$TMP/re" -q
mkdir -p "$TMP/noclass/train" "$TMP/noclass/val"
expect folder.no_classes 1 'no class folders' -- "$CNN" train $M --data folder:"$TMP/noclass" --steps 1 --out "$TMP/re" -q
expect folder.missing 1 'not a folder' -- "$CNN" train $M --data folder:"$TMP/nope" --steps 1 --out "$TMP/re" -q
mkdir -p "$TMP/mismatch/train/a" "$TMP/mismatch/val/b"
cp "$D/val/a/one.png" "$TMP/mismatch/train/a/"; cp "$D/val/a/one.png" "$TMP/mismatch/val/b/"
expect folder.class_mismatch 1 'class folders differ' -- "$CNN" train $M --data folder:"$TMP/mismatch" --steps 1 --out "$TMP/re" -q
expect infer.empty_folder 1 'no image files' -- "$CNN" infer $M --input "$TMP/noclass"

# ---- MNIST-format and CIFAR-100 files ------------------------------------------------------------------------
"$PYTHON" - "$TMP" <<'PY'
import gzip, os, struct, sys
d = sys.argv[1]
def idx(path, dims, payload, magic=b"\x00\x00\x08", gz=False, nd=None):
    b = magic + bytes([nd if nd is not None else len(dims)]) + b"".join(struct.pack(">I", x) for x in dims) + payload
    open(path, "wb").write(gzip.compress(b) if gz else b)
def mnist(root, n=64, **bad):
    os.makedirs(root, exist_ok=True)
    for pre in ("train", "t10k"):
        img = bytes((i * 7 + j) % 256 for i in range(n) for j in range(28 * 28))
        lab = bytes(i % 10 for i in range(n))
        idx(os.path.join(root, pre + "-images-idx3-ubyte.gz"), [n, 28, 28], img, gz=True)
        idx(os.path.join(root, pre + "-labels-idx1-ubyte"), [n], lab)
mnist(d + "/mnist")
cases = {
    "magic": lambda r: idx(r + "/train-images-idx3-ubyte.gz", [64, 28, 28], b"\0" * 64 * 784, magic=b"\x00\x00\x09", gz=True),
    "ndim": lambda r: idx(r + "/train-images-idx3-ubyte.gz", [64, 28, 28], b"\0" * 64 * 784, nd=2, gz=True),
    "truncated": lambda r: idx(r + "/train-images-idx3-ubyte.gz", [64, 28, 28], b"\0" * 1000, gz=True),
    "overflow": lambda r: idx(r + "/train-images-idx3-ubyte.gz", [0x7fffffff, 0x7fffffff, 0x7fffffff], b"", gz=True),
    "count": lambda r: idx(r + "/train-labels-idx1-ubyte", [63], bytes(63)),
    "label": lambda r: idx(r + "/train-labels-idx1-ubyte", [64], bytes([12]) * 64),
    "gzip": lambda r: open(r + "/train-images-idx3-ubyte.gz", "r+b").truncate(100),
}
for k, f in cases.items():
    mnist(d + "/mnist_" + k)
    f(d + "/mnist_" + k)
os.makedirs(d + "/c100", exist_ok=True)
rec = lambda i: bytes([i % 20, i % 100]) + bytes((i + j) % 256 for j in range(3072))
open(d + "/c100/train.bin", "wb").write(b"".join(rec(i) for i in range(50000)))
open(d + "/c100/test.bin", "wb").write(b"".join(rec(i) for i in range(10000)))
os.makedirs(d + "/c100_bad", exist_ok=True)
open(d + "/c100_bad/train.bin", "wb").write(b"".join(rec(i) for i in range(100)))
os.makedirs(d + "/c100_label", exist_ok=True)
open(d + "/c100_label/train.bin", "wb").write(b"".join(rec(i) for i in range(49999)) + bytes([3, 100]) + bytes(3072))
PY
S="--model resnet18 --stem cifar --device cpu --threads 2 --batch 8 --steps 1 --eval-size 8 --no-progress -q"
expect mnist.train 0 '' -- "$CNN" train $S --data mnist:"$TMP/mnist" --out "$TMP/rm"
expect mnist.train_1channel 0 '' -- "$CNN" train $S --data mnist:"$TMP/mnist" --in-channels 1 --out "$TMP/rm1"
expect mnist.norm_override 0 '' -- "$CNN" train $S --data mnist:"$TMP/mnist" --mean 0.5 --std 0.5,0.5,0.5 --out "$TMP/rm2"
expect mnist.bad_std 2 'every value must be > 0' -- "$CNN" train $S --data mnist:"$TMP/mnist" --std 0 --out "$TMP/rm2"
expect mnist.bad_mean 2 'expected one number or three' -- "$CNN" train $S --data mnist:"$TMP/mnist" --mean 1,2 --out "$TMP/rm2"
expect idx.wrong_magic 1 'not an IDX file of unsigned bytes' -- "$CNN" train $S --data mnist:"$TMP/mnist_magic" --out "$TMP/rx"
expect idx.wrong_ndim 1 'IDX file of 2 dimensions, expected 3' -- "$CNN" train $S --data mnist:"$TMP/mnist_ndim" --out "$TMP/rx"
expect idx.truncated 1 'truncated: the header promises 50176 bytes' -- "$CNN" train $S --data mnist:"$TMP/mnist_truncated" --out "$TMP/rx"
expect idx.overflow 1 'IDX dimensions overflow' -- "$CNN" train $S --data mnist:"$TMP/mnist_overflow" --out "$TMP/rx"
expect idx.count_mismatch 1 'holds 64 images but .* 63 labels' -- "$CNN" train $S --data mnist:"$TMP/mnist_count" --out "$TMP/rx"
expect idx.bad_label 1 'label 12 of image 0 is outside 0..9' -- "$CNN" train $S --data mnist:"$TMP/mnist_label" --out "$TMP/rx"
expect idx.truncated_gzip 1 'corrupt or truncated gzip' -- "$CNN" train $S --data mnist:"$TMP/mnist_gzip" --out "$TMP/rx"
expect idx.missing 1 'no such file \(nor with .gz\)' -- "$CNN" train $S --data mnist:"$TMP/nowhere" --out "$TMP/rx"
expect cifar100.train 0 '' -- "$CNN" train $S --data cifar100:"$TMP/c100" --train-size 64 --out "$TMP/rc"
"$CNN" train $S --data cifar100:"$TMP/c100" --coarse-labels --train-size 64 --out "$TMP/rc2" >/dev/null 2>&1
expect cifar100.coarse 0 '' -- "$CNN" eval --model resnet18 --stem cifar --num-classes 20 --device cpu --data cifar100:"$TMP/c100" \
    --coarse-labels --eval-size 16 --weights "$TMP/rc2/model.safetensors"
expect cifar100.wrong_size 1 'a CIFAR-100 train file has exactly 153700000' -- "$CNN" train $S --data cifar100:"$TMP/c100_bad" --out "$TMP/rx"
expect cifar100.bad_label 1 'record 49999 has coarse label 3 and fine label 100' -- "$CNN" train $S --data cifar100:"$TMP/c100_label" --out "$TMP/rx"
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    expect fashion_mnist.package 0 '' -- "$CNN" train $S --data fashion-mnist --train-size 64 --out "$TMP/rf"
else
    skip fashion_mnist.package "dataset-fashion-mnist not installed"
fi
expect data.unknown 2 'unknown data source' -- "$CNN" train $S --data imagenet:/x --out "$TMP/rx"
finish
