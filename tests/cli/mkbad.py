"""mkbad.py — write a corrupted or mismatched copy of a valid safetensors file, for the CLI error tests.

usage: mkbad.py KIND IN OUT   (KIND below). Only the standard library: no torch needed.
"""
import json, struct, sys

kind, src, dst = sys.argv[1:4]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
meta = header.pop("__metadata__", None)
names = sorted(header, key=lambda k: header[k]["data_offsets"][0])


def write(hdr, payload, raw_header=None):
    if meta is not None and raw_header is None:
        hdr = dict(hdr, __metadata__=meta)
    hb = raw_header if raw_header is not None else json.dumps(hdr).encode()
    hb += b" " * (-len(hb) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(hb)) + hb + payload)


def rebuild(entries):
    """entries: list of (name, dtype, shape, bytes) -> contiguous file"""
    hdr, chunks, off = {}, [], 0
    for name, dt, shape, b in entries:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    write(hdr, b"".join(chunks))


def tensor(name):
    e = header[name]
    b, e2 = e["data_offsets"]
    return (name, e["dtype"], e["shape"], data[b:e2])


if kind == "truncated":            # header length points past the end of the file
    open(dst, "wb").write(raw[:min(len(raw), 8 + n // 2)])
elif kind == "truncated_data":     # header intact, payload cut short
    open(dst, "wb").write(raw[:len(raw) - 100])
elif kind == "huge_header":        # header length 2^64 - 1
    open(dst, "wb").write(struct.pack("<Q", 2**64 - 1) + raw[8:64])
elif kind == "bad_json":
    write(None, data, raw_header=b'{"conv1.weight": {"dtype": "F32", "shape": [64, 3,')
elif kind == "not_object":
    write(None, data, raw_header=b'[1, 2, 3]')
elif kind == "overlap":            # second tensor starts inside the first
    h = dict(header)
    a, b = names[0], names[1]
    h[b] = dict(h[b], data_offsets=[h[b]["data_offsets"][0] - 4, h[b]["data_offsets"][1] - 4])
    write(h, data)
elif kind == "out_of_range":       # last tensor ends past the buffer
    h = dict(header)
    z = names[-1]
    h[z] = dict(h[z], data_offsets=[h[z]["data_offsets"][0], h[z]["data_offsets"][1] + 64])
    write(h, data)
elif kind == "unknown_dtype":
    h = dict(header)
    h[names[0]] = dict(h[names[0]], dtype="F128")
    write(h, data)
elif kind == "wrong_dtype":        # a valid file whose conv weight is I32 (same size as F32)
    rebuild([(t[0], "I32" if t[0] == "conv1.weight" else t[1], t[2], t[3]) for t in map(tensor, names)])
elif kind == "missing_tensor":
    rebuild([tensor(k) for k in names if k != "fc.bias"])
elif kind == "extra_tensor":
    rebuild([tensor(k) for k in names] + [("fc.extra", "F32", [2], b"\0" * 8)])
elif kind == "wrong_shape":        # fc.weight transposed: same bytes, wrong shape
    rebuild([(t[0], t[1], list(reversed(t[2])) if t[0] == "fc.weight" else t[2], t[3]) for t in map(tensor, names)])
else:
    sys.exit("unknown kind " + kind)
