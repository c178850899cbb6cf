"""An independent safetensors writer and reader (numpy, from the format's specification) for the tests.

  /usr/bin/python3 safetensors_reference.py write DIR
      DIR/model.safetensors   F32, F16, BF16, F64, I64, U8 tensors, a scalar, an empty tensor, metadata
      DIR/sharded/model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json
      DIR/expected.json       every tensor's values as float32 would hold them (decoded by numpy)
      DIR/f16_all.safetensors all 65536 F16 bit patterns; DIR/f16_all.json their float32 values (numpy)
      DIR/rounding.safetensors float32 values with numpy's float16 rounding and a float64 nearest-even
                              bf16 rounding of them, for the writer's conversions
  /usr/bin/python3 safetensors_reference.py read FILE EXPECTED.json
      parses FILE by the specification and checks its tensors against EXPECTED.json (exit 0 = equal)
"""
import json
import os
import struct
import sys

import numpy as np

DT = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8,
      "BF16": np.uint16}


def write(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)


def bf16_bits_nearest_even(x32):
    """float32 -> bf16 bits: the nearer of the two bf16 neighbours in float64, ties to the even one."""
    u = x32.view(np.uint32).astype(np.uint64)
    lo = (u >> 16) & 0xFFFF
    hi = lo + 1
    def as_f(b):
        with np.errstate(invalid="ignore"):
            return ((b & 0xFFFF) << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    x = x32.astype(np.float64)
    with np.errstate(invalid="ignore"):  # infinities: both distances NaN, the truncation (lo) is kept
        dlo, dhi = np.abs(x - as_f(lo)), np.abs(as_f(hi) - x)
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (lo % 2 == 1))
    return np.where(pick_hi, hi, lo).astype(np.uint16)


def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[8 + n + b:8 + n + end]
        if e["dtype"] == "BF16":
            v = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            v = np.frombuffer(raw, DT[e["dtype"]])
        out[name] = (e["dtype"], e["shape"], v.astype(np.float32).reshape(e["shape"]))
    return header.get("__metadata__", {}), out


def main():
    mode = sys.argv[1]
    if mode == "read":
        _, tensors = read(sys.argv[2])
        expected = json.load(open(sys.argv[3]))
        assert sorted(tensors) == sorted(expected), (sorted(tensors), sorted(expected))
        for name, (dtype, shape, v) in tensors.items():
            e = expected[name]
            assert dtype == e["dtype"] and shape == e["shape"], (name, dtype, shape, e["dtype"], e["shape"])
            want = np.array(e["values"], dtype=np.float32).reshape(shape)
            assert np.array_equal(v.view(np.uint32), want.view(np.uint32)), name
        return
    out = sys.argv[2]
    os.makedirs(os.path.join(out, "sharded"), exist_ok=True)
    rng = np.random.default_rng(7)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    f16 = (rng.standard_normal((4, 2)) * 100).astype(np.float16)
    bf16_src = rng.standard_normal((2, 3, 2)).astype(np.float32)
    bf16 = bf16_bits_nearest_even(bf16_src)
    f64 = rng.standard_normal(7)
    i64 = np.arange(-3, 3, dtype=np.int64)
    u8 = np.arange(0, 250, 50, dtype=np.uint8)
    scalar = np.array(2.5, dtype=np.float32)
    empty = np.zeros((0, 4), dtype=np.float32)
    tensors = [("transformer.h.0.attn.c_attn.weight", "F32", f32.shape, f32.tobytes()),
               ("h16", "F16", f16.shape, f16.tobytes()),
               ("model.layers.0.mlp.up_proj.weight", "BF16", bf16.shape, bf16.tobytes()),
               ("f64", "F64", f64.shape, f64.tobytes()),
               ("ids", "I64", i64.shape, i64.tobytes()),
               ("bytes", "U8", u8.shape, u8.tobytes()),
               ("scalar", "F32", (), scalar.tobytes()),
               ("empty", "F32", empty.shape, empty.tobytes())]
    write(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
    write(os.path.join(out, "sharded", "model-00001-of-00002.safetensors"), tensors[:3])
    write(os.path.join(out, "sharded", "model-00002-of-00002.safetensors"), tensors[3:])
    weight_map = {t[0]: f"model-0000{1 if i < 3 else 2}-of-00002.safetensors" for i, t in enumerate(tensors)}
    json.dump({"metadata": {"total_size": sum(len(t[3]) for t in tensors)}, "weight_map": weight_map},
              open(os.path.join(out, "sharded", "model.safetensors.index.json"), "w"))
    _, decoded = read(os.path.join(out, "model.safetensors"))
    json.dump({n: {"dtype": d, "shape": s, "values": v.reshape(-1).astype(float).tolist()}
               for n, (d, s, v) in decoded.items()}, open(os.path.join(out, "expected.json"), "w"))
    # All F16 bit patterns, decoded by numpy.
    allbits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    write(os.path.join(out, "f16_all.safetensors"), [("all", "F16", (65536,), allbits.tobytes())])
    vals = allbits.view(np.float16).astype(np.float32)
    json.dump([int(x) for x in vals.view(np.uint32)], open(os.path.join(out, "f16_all.json"), "w"))
    # Rounding: float32 values across the ranges that matter, numpy's float16, nearest-even bf16.
    x = np.concatenate([rng.standard_normal(2000) * s for s in (1e-7, 1e-5, 1e-3, 1, 1e3, 6e4, 1e5, 1e30)])
    x = x.astype(np.float32)
    x = np.concatenate([x, np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, 2 ** -24, 2 ** -25,
                                     3 * 2 ** -26, 1 + 2 ** -8, 1 + 3 * 2 ** -8], dtype=np.float32)])
    with np.errstate(over="ignore"):
        h = x.astype(np.float16)
    write(os.path.join(out, "rounding.safetensors"),
          [("f32", "F32", x.shape, x.tobytes()), ("f16", "F16", h.shape, h.tobytes()),
           ("bf16", "BF16", x.shape, bf16_bits_nearest_even(x).tobytes())])


if __name__ == "__main__":
    main()
