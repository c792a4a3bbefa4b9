"""stedit.py — inspect and edit safetensors files for the reliability tests; only the standard library.

usage:
  stedit.py finite FILE                    exit 0 when every F32 value is finite and no running_var is negative,
                                           else print the first bad tensor, index and value and exit 1
  stedit.py set FILE OUT NAME INDEX VALUE  copy with F32 element INDEX of NAME set to VALUE (nan, inf, -1, ...)
  stedit.py meta FILE OUT KEY VALUE        copy with metadata KEY set to VALUE
  stedit.py add FILE OUT NAME N            copy with an extra F32 tensor NAME of N zeros (NAME may hold \\n, \\x1b)
  stedit.py get-meta FILE KEY              print metadata KEY
"""
import json, math, struct, sys


def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    meta = hdr.pop("__metadata__", None)
    data = raw[8 + n:]
    tensors = {}
    for name, e in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, f = e["data_offsets"]
        tensors[name] = [e["dtype"], e["shape"], bytearray(data[b:f])]
    return tensors, meta


def write(path, tensors, meta):
    hdr, chunks, off = {}, [], 0
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, (dt, shape, b) in tensors.items():
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        chunks.append(bytes(b))
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


cmd = sys.argv[1]
if cmd == "finite":
    tensors, _ = read(sys.argv[2])
    for name, (dt, shape, b) in tensors.items():
        if dt != "F32":
            continue
        vals = struct.unpack("<%df" % (len(b) // 4), b)
        for i, v in enumerate(vals):
            if not math.isfinite(v) or (name.endswith(".running_var") and v < 0):
                print("tensor %s index %d value %r" % (name, i, v))
                sys.exit(1)
    print("ok: %d tensors finite" % len(tensors))
elif cmd == "set":
    src, out, name, index, value = sys.argv[2:7]
    tensors, meta = read(src)
    struct.pack_into("<f", tensors[name][2], 4 * int(index), float(value))
    write(out, tensors, meta)
elif cmd == "meta":
    src, out, key, value = sys.argv[2:6]
    tensors, meta = read(src)
    meta = dict(meta or {}, **{key: value})
    write(out, tensors, meta)
elif cmd == "add":
    src, out, name, n = sys.argv[2:6]
    tensors, meta = read(src)
    name = name.encode().decode("unicode_escape")
    tensors[name] = ["F32", [int(n)], bytearray(4 * int(n))]
    write(out, tensors, meta)
elif cmd == "get-meta":
    _, meta = read(sys.argv[2])
    print((meta or {}).get(sys.argv[3], ""))
else:
    sys.exit("unknown command " + cmd)
