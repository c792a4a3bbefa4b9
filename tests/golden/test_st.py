#!/usr/bin/env python3
"""test_st.py — tools/st.py (the safetensors reader/writer the golden tests rely on) and tools/torch2st.py:
byte layout against the format spec, round trips of every dtype, rejection of malformed files, and torchvision
state_dict round trips. Needs no engine binary."""
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, T  # noqa: E402

t = T("st")
torch = t.need_torch()
import models  # noqa: E402
import st  # noqa: E402


def raw_file(path, header, payload):
    hb = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + payload)


# ---- byte layout of what save_file writes -----------------------------------------------------------------
p = t.path("a.safetensors")
x = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float32)
st.save_file({"x": x, "b": torch.tensor([1.0], dtype=torch.bfloat16), "n": torch.tensor(7)}, p, metadata={"k": "v"})
data = open(p, "rb").read()
(hn,) = struct.unpack("<Q", data[:8])
hdr = data[8:8 + hn]
t.check("st.layout.header_padded", hn % 8 == 0 and hdr.startswith(b"{") and hdr.rstrip(b" ").endswith(b"}"),
        "header %d bytes, space-padded" % hn, "header length %d or padding wrong: %r" % (hn, hdr[-12:]))
h = json.loads(hdr)
ok = (h["__metadata__"] == {"k": "v"} and h["n"] == {"dtype": "I64", "shape": [], "data_offsets": [0, 8]}
      and h["x"] == {"dtype": "F32", "shape": [1, 3], "data_offsets": [8, 20]}
      and h["b"] == {"dtype": "BF16", "shape": [1], "data_offsets": [20, 22]} and len(data) == 8 + hn + 22)
t.check("st.layout.entries", ok, "I64 scalar shape [], then F32, then BF16; contiguous offsets", "header %s" % h)
buf = data[8 + hn:]
ok = (buf[0:8] == struct.pack("<q", 7) and buf[8:20] == struct.pack("<3f", 1.0, -2.0, 0.5)
      and buf[20:22] == b"\x80\x3f")
t.check("st.layout.little_endian_bytes", ok, "I64 7, F32 1,-2,0.5, BF16 1.0 = 80 3f", "buffer %r" % buf)

# ---- round trips of every dtype this torch has ------------------------------------------------------------
g = torch.Generator().manual_seed(0)
tensors = {}
for name, dt in st.DTYPE_TO_TORCH.items():
    if dt.is_floating_point:
        v = torch.randn(3, 5, generator=g).to(dt)
    elif dt == torch.bool:
        v = torch.rand(3, 5, generator=g) > 0.5
    else:
        v = torch.randint(0, 100, (3, 5), generator=g).to(dt)
    tensors["t_" + name] = v
tensors["scalar"] = torch.tensor(3.25)
tensors["empty"] = torch.zeros(0, 4)
tensors["noncontig"] = torch.arange(12.0).reshape(3, 4).t()
tensors["odd_u8"] = torch.arange(3, dtype=torch.uint8)
p = t.path("rt.safetensors")
st.save_file(tensors, p, metadata={"who": "test"})
back = st.load_file(p)
bad = [k for k in tensors if k not in back or back[k].dtype != tensors[k].dtype
       or back[k].shape != tensors[k].shape or not torch.equal(back[k], tensors[k])]
t.check("st.roundtrip.dtypes", not bad and set(back) == set(tensors),
        "%d tensors (%s)" % (len(tensors), " ".join(sorted(st.DTYPE_TO_TORCH))), "mismatch: %s" % bad)
t.check("st.roundtrip.metadata", st.load_metadata(p) == {"who": "test"}, "", "metadata %r" % st.load_metadata(p))

# a misaligned F32 (after 3 bytes of U8), written by hand, not by st.py
p = t.path("mis.safetensors")
raw_file(p, {"u": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
             "f": {"dtype": "F32", "shape": [2], "data_offsets": [3, 11]}}, b"\x01\x02\x03" + struct.pack("<2f", 1.5, -3))
try:
    d = st.load_file(p)
    ok = d["u"].tolist() == [1, 2, 3] and d["f"].tolist() == [1.5, -3.0]
except Exception as e:  # noqa: BLE001
    ok, d = False, e
t.check("st.read.misaligned", ok, "", "got %r" % (d,))

# ---- malformed files are rejected (STError), never crash --------------------------------------------------
F = lambda b, e, s=(1,), dt="F32": {"dtype": dt, "shape": list(s), "data_offsets": [b, e]}  # noqa: E731
cases = {
    "gap": ({"a": F(0, 4), "b": F(8, 12)}, b"\0" * 12),
    "overlap": ({"a": F(0, 4), "b": F(2, 6)}, b"\0" * 6),
    "size_mismatch": ({"a": F(0, 8)}, b"\0" * 8),
    "past_end": ({"a": F(0, 4, (1,))}, b"\0" * 2),
    "trailing": ({"a": F(0, 4)}, b"\0" * 8),
    "unknown_dtype": ({"a": F(0, 4, dt="F31")}, b"\0" * 4),
    "reversed": ({"a": F(4, 0)}, b"\0" * 4),
    "negative_shape": ({"a": F(0, 4, (-1,))}, b"\0" * 4),
    "bad_meta": ({"__metadata__": {"a": 1}, "x": F(0, 4)}, b"\0" * 4),
}
nrej = 0
for name, (hd, payload) in cases.items():
    p = t.path("bad_%s.safetensors" % name)
    raw_file(p, hd, payload)
    try:
        st.load_file(p)
        t.fail("st.reject." + name, "accepted")
    except st.STError:
        nrej += 1
for name, blob in {"short": b"\x01\x00", "huge_header": struct.pack("<Q", 2 ** 64 - 1) + b"{}",
                   "not_object": struct.pack("<Q", 2) + b"[]", "dup_key": struct.pack("<Q", 60)
                   + b'{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]},"a":1}' + b"\0"}.items():
    p = t.path("bad_%s.safetensors" % name)
    with open(p, "wb") as f:
        f.write(blob)
    try:
        st.load_file(p)
        t.fail("st.reject." + name, "accepted")
    except st.STError:
        nrej += 1
if nrej == len(cases) + 4:
    t.ok("st.reject", "%d malformed files rejected with STError" % nrej)

# ---- torch2st: torchvision names, counts, strict load_state_dict round trip --------------------------------
tool = os.path.join(ROOT, "tools", "torch2st.py")
for arch, stem, nkeys, nparams in [("resnet18", "imagenet", 122, 11689512), ("resnet50", "imagenet", 320, 25557032),
                                   ("resnet18", "cifar", 122, None)]:
    p = t.path("%s_%s.safetensors" % (arch, stem))
    r = subprocess.run([sys.executable, tool, "--arch", arch, "--stem", stem, "--seed", "5", "--randomize-bn", p],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    name = "torch2st.%s_%s" % (arch, stem)
    if r.returncode != 0:
        t.fail(name, r.stderr.decode()[-400:])
        continue
    sd = st.load_file(p)
    ref = models.build(arch, num_classes=10 if stem == "cifar" else 1000, stem=stem, seed=5, randomize_bn_params=True)
    fresh = models.build(arch, num_classes=10 if stem == "cifar" else 1000, stem=stem, seed=99)
    fresh.load_state_dict(sd, strict=True)
    same = all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), ref.state_dict().values()))
    n = sum(v.numel() for k, v in ref.named_parameters())
    nbt = sd["bn1.num_batches_tracked"]
    ok = (same and len(sd) == nkeys and (nparams is None or n == nparams) and nbt.dtype == torch.int64
          and nbt.shape == () and sd["conv1.weight"].shape[-1] == (3 if stem == "cifar" else 7))
    t.check(name, ok, "%d keys, %d parameters, strict load_state_dict equal" % (len(sd), n),
            "keys %d params %d equal %s nbt %s" % (len(sd), n, same, nbt))
    t.rm(p)

# --state-dict and --dtype bf16
m = models.build("resnet18", num_classes=7, seed=2)
pt, p = t.path("m.pt"), t.path("m.safetensors")
torch.save({"state_dict": {"module." + k: v for k, v in m.state_dict().items()}}, pt)
r = subprocess.run([sys.executable, tool, "--state-dict", pt, "--dtype", "bf16", p], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE)
if r.returncode != 0:
    t.fail("torch2st.state_dict_bf16", r.stderr.decode()[-400:])
else:
    sd = st.load_file(p)
    ok = (set(sd) == set(m.state_dict()) and sd["fc.weight"].dtype == torch.bfloat16
          and sd["bn1.num_batches_tracked"].dtype == torch.int64
          and torch.equal(sd["fc.weight"], m.state_dict()["fc.weight"].to(torch.bfloat16)))
    t.check("torch2st.state_dict_bf16", ok, "module. prefix removed, floats to BF16, I64 kept", "keys/dtypes wrong")
t.finish()
