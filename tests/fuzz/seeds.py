"""seeds.py — writes the hand-made seed inputs of the fuzz targets into tests/fuzz/corpus/<target>/seed-*.

usage: python3 tests/fuzz/seeds.py [ROOT]   (ROOT defaults to tests/fuzz/corpus). Only the standard library.
The safetensors target's seeds come from its own FUZZ_MAKE_SEEDS build (build.sh). Seeds are valid inputs and
near-misses of each parser's checks; libFuzzer grows the corpus from them (build.sh) and the grown corpus,
minimised, is what the tree keeps.
"""
import json, os, struct, sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")


def put(target, name, data, prefix="seed-"):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    open(os.path.join(d, prefix + name), "wb").write(data)


def st(tensors, meta=None):
    """tensors: list of (name, dtype, shape, bytes) -> safetensors bytes"""
    hdr, chunks, off = {}, [], 0
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, b in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(chunks)


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


NAN, INF = float("nan"), float("inf")

# ---- checkpoint: the tiny net of fuzz_checkpoint.c (21 trainable floats) -----------------------------------
tiny = [("conv.weight", "F32", [2, 3, 1, 1], f32(*[0.1] * 6)), ("conv.bias", "F32", [2], f32(0, 0)),
        ("bn.weight", "F32", [2], f32(1, 1)), ("bn.bias", "F32", [2], f32(0, 0)),
        ("bn.running_mean", "F32", [2], f32(0, 0)), ("bn.running_var", "F32", [2], f32(1, 1)),
        ("bn.num_batches_tracked", "I64", [], struct.pack("<q", 7)),
        ("fc.weight", "F32", [3, 2], f32(*[0.5] * 6)), ("fc.bias", "F32", [3], f32(0, 0, 0))]
mom = [("optimizer.momentum_buffer", "F32", [21], f32(*[0.0] * 21))]
adam = [("optimizer.exp_avg", "F32", [21], f32(*[0.0] * 21)), ("optimizer.exp_avg_sq", "F32", [21], f32(*[0.0] * 21))]
meta = {"format": "cnn.checkpoint.v1", "step": "12", "options": "arch=tiny", "loss_scale": "65536 0"}
put("checkpoint", "sgd", st(tiny + mom, meta))
put("checkpoint", "adamw", st(tiny + adam, meta))
put("checkpoint", "nomomentum", st(tiny, meta))
put("checkpoint", "step-max", st(tiny + mom, dict(meta, step="9223372036854775807")))
put("checkpoint", "step-neg", st(tiny + mom, dict(meta, step="-1")))
put("checkpoint", "step-exp", st(tiny + mom, dict(meta, step="1e5")))
put("checkpoint", "scale-nan", st(tiny + mom, dict(meta, loss_scale="nan 3")))
put("checkpoint", "scale-big", st(tiny + mom, dict(meta, loss_scale="1e300 99999999999")))
put("checkpoint", "unknown-opt", st(tiny + mom + [("optimizer.velocity", "F32", [21], f32(*[0.0] * 21))], meta))
put("checkpoint", "opt-shape", st(tiny + [("optimizer.momentum_buffer", "F32", [20], f32(*[0.0] * 20))], meta))
put("checkpoint", "no-meta", st(tiny + mom))

# ---- model: a CIFAR-stem ResNet-18, 10 classes; files small enough to fuzz hold its first tensors -----------
conv1 = ("conv1.weight", "F32", [64, 3, 3, 3], f32(*[0.01] * 1728))
bn1 = [("bn1.weight", "F32", [64], f32(*[1.0] * 64)), ("bn1.bias", "F32", [64], f32(*[0.0] * 64)),
       ("bn1.running_mean", "F32", [64], f32(*[0.0] * 64)), ("bn1.running_var", "F32", [64], f32(*[1.0] * 64)),
       ("bn1.num_batches_tracked", "I64", [], struct.pack("<q", 1))]
put("model", "stem", st([conv1] + bn1))
put("model", "stem-nan", st([("conv1.weight", "F32", [64, 3, 3, 3], f32(*([0.01] * 1000 + [NAN] + [0.01] * 727)))] + bn1))
put("model", "stem-negvar", st([conv1] + bn1[:3] + [("bn1.running_var", "F32", [64], f32(*[-1.0] * 64))] + bn1[4:]))
put("model", "stem-inf-bf16", st([("conv1.weight", "BF16", [64, 3, 3, 3], struct.pack("<1728H", *[0x7f80] * 1728))] + bn1))
put("model", "stem-f16", st([("conv1.weight", "F16", [64, 3, 3, 3], struct.pack("<1728H", *[0x3c00] * 1728))] + bn1))
put("model", "wrong-shape", st([("conv1.weight", "F32", [3, 64, 3, 3], f32(*[0.01] * 1728))]))
put("model", "extra", st([conv1, ("evil\n\x1b[31mname", "F32", [1], f32(1))]))
put("model", "counter-f32", st([conv1] + bn1[:4] + [("bn1.num_batches_tracked", "F32", [], f32(1))]))

# ---- tensors: "images" F32 (N, 3, H, W), "labels" I64 (N,) ------------------------------------------------
img = ("images", "F32", [2, 3, 2, 2], f32(*[0.5] * 24))
put("tensors", "ok", st([img, ("labels", "I64", [2], struct.pack("<2q", 3, 7))]))
put("tensors", "label-huge", st([img, ("labels", "I64", [2], struct.pack("<2q", 3, 999999))]))
put("tensors", "label-neg", st([img, ("labels", "I64", [2], struct.pack("<2q", -1, 0))]))
put("tensors", "label-i32", st([img, ("labels", "I32", [2], struct.pack("<2i", 1, 2))]))
put("tensors", "n-mismatch", st([img, ("labels", "I64", [3], struct.pack("<3q", 1, 2, 3))]))
put("tensors", "rank3", st([("images", "F32", [2, 3, 4], f32(*[0.5] * 24)), ("labels", "I64", [2], struct.pack("<2q", 0, 1))]))

# ---- cifar10: 3073-byte records ---------------------------------------------------------------------------
rec = lambda label: bytes([label]) + bytes((i * 7) & 0xFF for i in range(3072))
put("cifar10", "one", rec(3))
put("cifar10", "two", rec(0) + rec(9))
put("cifar10", "bad-label", rec(1) + rec(10))
put("cifar10", "short", rec(1)[:-1])

# ---- tune cache: "key|cfg|splits|ms" lines -----------------------------------------------------------------
put("tune_cache", "ok", "fprop bf16 n64 c64 h56 w56 k64 r3 s3 u1 p1|12|1|0.01234\nwgrad f32 n8 c3|0|4|1.5\n")
put("tune_cache", "torn", "fprop bf16 n64|3|1|0.5\nfprop bf16 n64 c64 h56|")
put("tune_cache", "bad", "|1|1|1\nk|-1|1|1\nk|1|0|1\nk|1|1|nan\nk|1|1|1 trailing\nk\x1b[2J|1|1|1\n" + "x" * 300 + "|1|1|1\n")

# ---- kernel cache: "CNNKBIN1", u32 version, u32 D, u64 key, u64 L, u64 fnv(payload), desc, payload -----------
DESC = b"conv2d.cu 0123456789abcdef -arch=sm_90a -DACT=2 nvrtc 13.0 driver 13000"


def fnv(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def entry(payload, desc=DESC, plen=None, version=1):
    plen = len(payload) if plen is None else plen
    return (b"CNNKBIN1" + struct.pack("<IIQQQ", version, len(desc), fnv(desc), plen, fnv(payload)) + desc + payload)


put("kernel_cache", "ok", entry(b"\x7fELF cubin payload bytes"))
put("kernel_cache", "version", entry(b"payload", version=2))
put("kernel_cache", "checksum", entry(b"payload")[:-1] + b"X")
# 40 bytes whose lengths add up to 40 modulo 2^64 (payload length 2^64 - D): read past the end at 419bfde
put("kernel_cache", "plen-wraps", b"CNNKBIN1" + struct.pack("<IIQQQ", 1, len(DESC), fnv(DESC), (1 << 64) - len(DESC), 0),
    prefix="regress-")
put("kernel_cache", "short", entry(b"payload")[:39])

# ---- cli: NUL-separated arguments --------------------------------------------------------------------------
for i, args in enumerate([["--model", "resnet18", "--num-classes", "10", "--input-size", "32x48"],
                          ["--n=3", "-x", "0.5", "--str", "s", "--choice", "bb", "-f", "--s", "12"],
                          ["--n", "99"], ["--x", "nan"], ["--x=1e309"], ["--flag=1"], ["--model"], ["-h"],
                          ["--input-size", "0x5"], ["--input-size", "8193"], ["--seed", "-1"], ["--dtype", "fp8"],
                          ["--model", "a", "--model", "b"], ["positional"], ["-"], ["--"], ["--=x"]]):
    put("cli", "%02d" % i, b"\0".join(a.encode() for a in args))
