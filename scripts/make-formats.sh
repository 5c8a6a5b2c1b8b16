#!/usr/bin/env bash
# Makes the default model in every weight format llama.cpp's quantization presets produce, with
# llama.cpp's own quantizer (llama_model_quantize, requantizing the Q4_1 file, no imatrix): files
# models/formats/smollm2-<FTYPE>.gguf (git-ignored, never committed). Each file's sha256 must be the
# one in tests/data/formats/files.json (llama.cpp's quantizer is deterministic), so the committed
# llama.cpp references in tests/data/formats/ describe exactly these files. Idempotent: a present
# file with the right sha256 is kept. Usage: scripts/make-formats.sh [FTYPE...]
set -euo pipefail
cd "$(dirname "$0")/.."
FTYPES=${*:-Q4_K_M Q5_K_M Q6_K Q3_K_S Q2_K Q4_0 Q5_0 Q5_1 Q8_0 IQ4_NL IQ4_XS BF16}
scripts/fetch-model.sh >/dev/null
PY=$(scripts/peer/venv.sh)
SRC=models/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p models/formats
want() { python3 -c "import json,sys; print(json.load(open('tests/data/formats/files.json')).get(sys.argv[1], {}).get('sha256', ''))" "$1" 2>/dev/null || true; }
for f in $FTYPES; do
  out=models/formats/smollm2-$f.gguf
  sha=$(want "$f")
  if [ -f "$out" ] && [ -n "$sha" ] && echo "$sha  $out" | sha256sum -c --status; then
    echo "make-formats: $out is present and verified"; continue
  fi
  "$PY" scripts/peer/requantize.py "$SRC" "$out" "$f" 2 2>"models/formats/smollm2-$f.log" | tee "models/formats/smollm2-$f.json" | python3 -c "import json,sys; d=json.load(sys.stdin); print('make-formats:', d['file'], d['size'], 'bytes', d['seconds'], 's', d['tensor_types'])"
  got=$(sha256sum "$out" | cut -d' ' -f1)
  if [ -n "$sha" ] && [ "$got" != "$sha" ]; then
    echo "make-formats: $out has sha256 $got, tests/data/formats/files.json says $sha" >&2; exit 1
  fi
done
