"""st.py — a small safetensors reader/writer in pure Python (json, struct, ctypes, torch; numpy not needed).

The format: a little-endian u64 N, N bytes of UTF-8 JSON that start with
`{` (space-padded; our writer pads to a multiple of 8), then the data buffer. Each entry is
`"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}` with offsets relative to the buffer, `end`
exclusive, tensors in C order, little-endian; an optional `"__metadata__"` maps strings to strings.

    save_file({"w": torch.ones(2, 3), "n": torch.tensor(5)}, "x.safetensors", metadata={"who": "me"})
    d = load_file("x.safetensors")          # {"w": tensor, "n": tensor}; raises STError on a bad file
    meta = load_metadata("x.safetensors")    # {"who": "me"}

The reader checks what the reference reader checks: header length <= 100,000,000 and inside the file, JSON object
with no duplicate keys, known dtypes, non-negative integer shapes, end - begin == numel * itemsize, offsets
contiguous from 0 with no gaps or overlaps, last end == buffer size. Works with torch 1.13 and 2.x (the tensor
bytes are copied with ctypes from the tensor's memory, so BF16 and other dtypes numpy lacks need no tricks).
"""
import ctypes
import json
import struct
import sys

import torch

MAX_HEADER = 100_000_000


class STError(ValueError):
    """A malformed safetensors file."""


def _dtype_table():
    t = [("F64", torch.float64), ("F32", torch.float32), ("F16", torch.float16), ("BF16", torch.bfloat16),
         ("I64", torch.int64), ("I32", torch.int32), ("I16", torch.int16), ("I8", torch.int8),
         ("U8", torch.uint8), ("BOOL", torch.bool)]
    # newer torch only
    for name, attr in [("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"),
                       ("F8_E5M2", "float8_e5m2"), ("F8_E4M3", "float8_e4m3fn")]:
        if hasattr(torch, attr):
            t.append((name, getattr(torch, attr)))
    return t


_TABLE = _dtype_table()
DTYPE_TO_TORCH = dict(_TABLE)
TORCH_TO_DTYPE = {d: n for n, d in _TABLE}
ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
            "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def _tensor_bytes(t):
    """The raw little-endian C-order bytes of a tensor (copied to CPU, made contiguous)."""
    if sys.byteorder != "little":
        raise NotImplementedError("st.py writes only on little-endian hosts")
    t = t.detach().to("cpu").contiguous()
    n = t.numel() * t.element_size()
    if n == 0:
        return b""
    return ctypes.string_at(t.data_ptr(), n)


def _as_tensor(v):
    if isinstance(v, torch.Tensor):
        return v
    try:  # numpy arrays, optionally
        import numpy as np
        if isinstance(v, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(v))
    except ImportError:
        pass
    raise TypeError("save_file: values must be torch tensors (or numpy arrays), got %s" % type(v).__name__)


def save_file(tensors, path, metadata=None):
    """Write a dict name -> tensor to `path` as safetensors. Tensors are laid out largest element size first,
    then by name (as the reference writer does); the header is padded with spaces to a multiple of 8."""
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("save_file: metadata must map str to str")
    items = []
    for name, v in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError("save_file: bad tensor name %r" % (name,))
        t = _as_tensor(v)
        if t.dtype not in TORCH_TO_DTYPE:
            raise TypeError("save_file: %s: unsupported dtype %s" % (name, t.dtype))
        items.append((name, t))
    items.sort(key=lambda it: (-it[1].element_size(), it[0]))
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    off = 0
    for name, t in items:
        n = t.numel() * t.element_size()
        header[name] = {"dtype": TORCH_TO_DTYPE[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for _, t in items:
            f.write(_tensor_bytes(t))


def _no_dup_pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise STError("duplicate key %r in header" % k)
        d[k] = v
    return d


def parse_header(data):
    """Validate the header of a whole safetensors file held in `data` (bytes-like).
    Returns (metadata dict, list of (name, dtype string, shape list, begin, end) in file order, buffer start)."""
    if len(data) < 8:
        raise STError("file of %d bytes is shorter than the 8-byte header length" % len(data))
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > MAX_HEADER:
        raise STError("header length %d exceeds %d" % (n, MAX_HEADER))
    if 8 + n > len(data):
        raise STError("header length %d runs past the end of the %d-byte file" % (n, len(data)))
    raw = bytes(data[8:8 + n])
    if not raw.startswith(b"{"):
        raise STError("header does not start with '{'")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_dup_pairs)
    except STError:
        raise
    except (UnicodeDecodeError, ValueError) as e:
        raise STError("header is not valid UTF-8 JSON: %s" % e)
    if not isinstance(header, dict):
        raise STError("header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if meta is not None:
        if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise STError("__metadata__ must map strings to strings")
    entries = []
    for name, e in header.items():
        if not isinstance(e, dict) or set(e.keys()) != {"dtype", "shape", "data_offsets"}:
            raise STError("%s: entry must have exactly dtype, shape, data_offsets" % name)
        dt, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if dt not in ITEMSIZE:
            raise STError("%s: unknown dtype %r" % (name, dt))
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise STError("%s: bad shape %r" % (name, shape))
        if (not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int and o >= 0 for o in offs)
                or offs[1] < offs[0]):
            raise STError("%s: bad data_offsets %r" % (name, offs))
        numel = 1
        for s in shape:
            numel *= s
        if offs[1] - offs[0] != numel * ITEMSIZE[dt]:
            raise STError("%s: data_offsets %r hold %d bytes, shape %r of %s needs %d"
                          % (name, offs, offs[1] - offs[0], shape, dt, numel * ITEMSIZE[dt]))
        entries.append((name, dt, shape, offs[0], offs[1]))
    pos = 0
    for name, dt, shape, b, e in sorted(entries, key=lambda x: (x[3], x[4])):
        if b != pos:
            raise STError("%s: data_offsets begin at %d, expected %d (gap or overlap)" % (name, b, pos))
        pos = e
    start = 8 + n
    if pos != len(data) - start:
        raise STError("tensors cover %d bytes but the buffer holds %d" % (pos, len(data) - start))
    return (meta or {}), entries, start


def load_file(path, device="cpu"):
    """Read a safetensors file into a dict name -> tensor (in file header order). Raises STError on a bad file,
    NotImplementedError for a dtype this torch lacks (e.g. U16 before torch 2.3)."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    meta, entries, start = parse_header(data)
    out = {}
    for name, dt, shape, b, e in entries:
        if dt not in DTYPE_TO_TORCH:
            raise NotImplementedError("%s: dtype %s is not available in torch %s" % (name, dt, torch.__version__))
        tdt = DTYPE_TO_TORCH[dt]
        if e == b:
            t = torch.empty(shape, dtype=tdt)
        else:
            off = start + b
            isz = ITEMSIZE[dt]
            if off % isz == 0:  # shares the file's buffer (bytearray storage is malloc-aligned)
                t = torch.frombuffer(data, dtype=tdt, count=(e - b) // isz, offset=off).reshape(shape)
            else:  # a misaligned tensor: copy its bytes to an aligned one
                t = torch.frombuffer(data, dtype=torch.uint8, count=e - b, offset=off).clone()
                t = t.view(tdt).reshape(shape)
        out[name] = t.to(device) if device != "cpu" else t
    return out


def load_metadata(path):
    """The __metadata__ map of a safetensors file (validated like load_file, without building tensors)."""
    with open(path, "rb") as f:
        data = f.read()
    return parse_header(data)[0]
