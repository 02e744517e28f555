"""Safetensors interop between kiln and PyTorch, without the `safetensors` package.

The format is parsed and written here with json + numpy + torch so that the test checks kiln
against an independent implementation of the spec (8-byte little-endian header length, JSON
header, raw little-endian row-major data).

  torch_interop.py check FILE SIDECAR   load FILE (written by kiln) into torch tensors and compare
                                        them exactly with the values listed in SIDECAR
  torch_interop.py write FILE SIDECAR   write torch tensors to FILE and their values to SIDECAR

Run with Debian's /usr/bin/python3 (python3-torch, python3-numpy).
"""
import json
import struct
import sys

import numpy as np
import torch

NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I8": "i1",
         "U8": "u1", "BOOL": "?"}
TORCH = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
         "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "I8": torch.int8,
         "U8": torch.uint8, "BOOL": torch.bool}
NAMES = {v: k for k, v in TORCH.items()}


def load(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))  # dicts keep the file's key order
    metadata = header.pop("__metadata__", {})
    buf = data[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = buf[begin:end]
        if info["dtype"] == "BF16":  # numpy has no bfloat16: reinterpret int16 bits in torch
            t = torch.from_numpy(np.frombuffer(raw, dtype="<i2").copy()).view(torch.bfloat16)
        else:
            t = torch.from_numpy(np.frombuffer(raw, dtype=NUMPY[info["dtype"]]).copy())
        tensors[name] = t.reshape(info["shape"])
    return n, tensors, metadata, len(buf)


def values_of(t):
    if t.dtype.is_floating_point:
        return t.double().flatten().tolist()  # every float16/bfloat16/float32 is a double
    return t.long().flatten().tolist()


def check(path, sidecar):
    n, tensors, metadata, buffer_size = load(path)
    want = json.load(open(sidecar))
    errors = []
    if n % 8 != 0:
        errors.append(f"header length {n} is not a multiple of 8")
    if metadata != want["metadata"]:
        errors.append(f"metadata {metadata} != {want['metadata']}")
    names = [w["name"] for w in want["tensors"]]
    if list(tensors) != names:
        errors.append(f"header order {list(tensors)} != {names}")
    covered = 0
    for w in want["tensors"]:
        t = tensors.get(w["name"])
        if t is None:
            errors.append(f"{w['name']}: missing")
            continue
        covered += t.numel() * t.element_size()
        if t.dtype != TORCH[w["dtype"]]:
            errors.append(f"{w['name']}: dtype {t.dtype} != {w['dtype']}")
        if list(t.shape) != w["shape"]:
            errors.append(f"{w['name']}: shape {list(t.shape)} != {w['shape']}")
        expected = torch.tensor(w["values"], dtype=torch.float64 if t.dtype.is_floating_point
                                else torch.int64).reshape(w["shape"])
        got = t.double() if t.dtype.is_floating_point else t.long()
        if got.shape != expected.shape or not torch.equal(got, expected):
            errors.append(f"{w['name']}: values differ:\n{got}\n{expected}")
    if covered != buffer_size:
        errors.append(f"tensors cover {covered} bytes of a {buffer_size}-byte buffer")
    if errors:
        print("\n".join(errors))
        return 1
    print(f"OK {len(tensors)} tensors")
    return 0


def write(path, sidecar):
    torch.manual_seed(0)
    tensors = {
        "weight": torch.randn(3, 4),
        "double": torch.randn(5, dtype=torch.float64),
        "half": torch.randn(2, 3).half(),
        "bfloat": torch.randn(4).bfloat16(),
        "long": torch.randint(-2**40, 2**40, (2, 3)),
        "int": torch.randint(-1000, 1000, (4,), dtype=torch.int32),
        "char": torch.randint(-128, 128, (5,), dtype=torch.int8),
        "byte": torch.randint(0, 256, (3,), dtype=torch.uint8),
        "mask": torch.rand(6) > 0.5,
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
        "transposed": torch.randn(3, 2).t(),  # non-contiguous in torch
    }
    metadata = {"format": "pt", "source": "torch_interop.py"}
    header = {"__metadata__": metadata}
    chunks = []
    offset = 0
    # Data in the reverse of header order, header unpadded: kiln must not assume either.
    for name in reversed(list(tensors)):
        t = tensors[name].contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    ordered = {"__metadata__": metadata}
    for name in tensors:
        ordered[name] = header[name]
    text = json.dumps(ordered).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
    side = {"metadata": metadata,
            "tensors": [{"name": k, "dtype": NAMES[t.dtype], "shape": list(t.shape),
                         "values": values_of(t)} for k, t in tensors.items()]}
    with open(sidecar, "w") as f:
        json.dump(side, f)
    # The file must also read back in this script (a self-check of the writer above).
    _, back, _, _ = load(path)
    assert all(torch.equal(back[k], t) for k, t in tensors.items())
    print(f"wrote {len(tensors)} tensors")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("check", "write"):
        print(__doc__)
        sys.exit(2)
    sys.exit({"check": check, "write": write}[sys.argv[1]](sys.argv[2], sys.argv[3]))
