#!/usr/bin/env python3
"""Prints llama.cpp's tensor types as the rows of `GGML_TYPES` in src/model/gguf.rs: each id,
its name and layout as llama.cpp's own library gives them (`ggml_blck_size`, `ggml_type_size`), so
the reader's table comes from llama.cpp, not from memory. Ids llama.cpp removed (block size 0) are
left out.

Run it with the peer's venv: $(scripts/peer/venv.sh) scripts/ggml-types.py
"""
import ctypes
import os
import re

import llama_cpp_py_sync

here = os.path.dirname(llama_cpp_py_sync.__file__)
lib = ctypes.CDLL(os.path.join(here, "libggml-base.so.0"))
lib.ggml_blck_size.restype = ctypes.c_int64
lib.ggml_blck_size.argtypes = [ctypes.c_int]
lib.ggml_type_size.restype = ctypes.c_size_t
lib.ggml_type_size.argtypes = [ctypes.c_int]
# The enum's names and GGML_TYPE_COUNT, from the bindings' copy of ggml.h.
src = open(os.path.join(here, "_cffi_bindings.py")).read()
names = {int(v): n for n, v in re.findall(r"GGML_TYPE_(\w+) = (\d+),", src)}
count = {n: v for v, n in names.items()}["COUNT"]
print(f"// llama.cpp {llama_cpp_py_sync.__llama_cpp_tag__} ({llama_cpp_py_sync.__llama_cpp_commit__[:8]}), GGML_TYPE_COUNT {count}")
for t in range(count):
    block, size = lib.ggml_blck_size(t), lib.ggml_type_size(t)
    if block == 0:
        continue
    print(f'    GgmlType {{ id: {t}, name: "{names[t]}", block: {block}, bytes: {size} }},')
