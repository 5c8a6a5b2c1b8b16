"""The end-of-generation token ids llama.cpp (llama_vocab_is_eog) finds in each file named on the
command line, as JSON {file name: [ids]} on stdout: tests/data/archs/eog-ids.json, which
tests/tokenizer.rs compares hotprefix's stop tokens with.

    $(scripts/peer/venv.sh) scripts/peer/eog_ids.py models/archs/tiny-*.gguf ... > tests/data/archs/eog-ids.json
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from lcpp import LlamaCpp, __llama_cpp_tag__  # noqa: E402

out = {"llama_cpp": __llama_cpp_tag__, "files": {}}
for path in sys.argv[1:]:
    m = LlamaCpp(path, n_ctx=64)
    out["files"][os.path.basename(path)] = [t for t in range(m.n_vocab) if m.is_eog(t)]
    m.close()
json.dump(out, sys.stdout, indent=1)
print()
