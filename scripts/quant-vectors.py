#!/usr/bin/env python3
"""Writes tests/data/quant/vectors.json: for every weight format hotprefix runs, blocks made by
llama.cpp and the f32 values llama.cpp's own `dequantize_row_*` gives for them, so that
tests/quant_vectors.rs can check hotprefix's CPU dequantization bit for bit against llama.cpp.

Per format (ggml type id → entry):
  quantized: 2 rows of 512 values (seeded normal, one row with outliers) quantized by llama.cpp's
             `ggml_quantize_chunk` (no imatrix), and their values from llama.cpp's dequantizer;
  random:    512 values' worth of seeded random bytes (every bit pattern of scales, signs and
             quants, f16 fields included) and their values from the same dequantizer.
llama.cpp is the CPU build in the PyPI wheel llama-cpp-py-sync==0.11739 (tag b11739), through
ctypes on its libggml-base. Run with the peer venv (scripts/peer/venv.sh):
  $(scripts/peer/venv.sh) scripts/quant-vectors.py
"""
import base64
import ctypes
import json
import os

import numpy as np
import llama_cpp_py_sync

FORMATS = ["F32", "F16", "Q8_0", "Q4_1", "BF16", "Q4_0", "Q5_0", "Q5_1", "IQ4_NL",
           "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"]
here = os.path.dirname(llama_cpp_py_sync.__file__)
lib = ctypes.CDLL(os.path.join(here, "libggml-base.so.0"))
import re
names = {n: int(v) for n, v in re.findall(r"GGML_TYPE_(\w+) = (\d+),", open(os.path.join(here, "_cffi_bindings.py")).read())}
lib.ggml_blck_size.restype = ctypes.c_int64
lib.ggml_type_size.restype = ctypes.c_size_t
lib.ggml_quantize_chunk.restype = ctypes.c_size_t
lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
N = 512


def dequantize(name, data, n):
    out = np.zeros(n, dtype=np.float32)
    src = ctypes.create_string_buffer(bytes(data), len(data))
    if name == "F32":
        return np.frombuffer(bytes(data), dtype=np.float32).copy()
    fn = {"F16": lib.ggml_fp16_to_fp32_row, "BF16": lib.ggml_bf16_to_fp32_row}.get(name) or getattr(lib, "dequantize_row_" + name.lower().replace("_k", "_K"))
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn(src, out.ctypes.data, n)
    return out


def b64(b):
    return base64.b64encode(bytes(b)).decode()


rng = np.random.default_rng(19)
out = {"source": "llama.cpp " + llama_cpp_py_sync.__llama_cpp_tag__ + " (" + llama_cpp_py_sync.__llama_cpp_commit__ + "), libggml-base of PyPI llama-cpp-py-sync==0.11739",
       "script": "scripts/quant-vectors.py", "formats": {}}
for name in FORMATS:
    t = names[name]
    block, size = lib.ggml_blck_size(t), lib.ggml_type_size(t)
    x = rng.standard_normal((2, N)).astype(np.float32) * 0.05
    x[1, ::37] *= 40.0  # outliers: scales of very different sub-blocks
    dst = ctypes.create_string_buffer(2 * N // block * size)
    got = lib.ggml_quantize_chunk(t, x.ctypes.data, dst, 0, 2, N, None)
    assert got == len(dst.raw), (name, got)
    q = dst.raw
    r = rng.integers(0, 256, N // block * size, dtype=np.uint8).tobytes()
    out["formats"][name] = {
        "ggml_type": t, "block": block, "type_size": size,
        "quantized": b64(q), "quantized_f32": b64(dequantize(name, q, 2 * N).tobytes()),
        "random": b64(r), "random_f32": b64(dequantize(name, r, N).tobytes()),
    }
    print(name, t, block, size, len(q), len(r))
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "quant", "vectors.json"), "w") as f:
    json.dump(out, f, indent=0)
