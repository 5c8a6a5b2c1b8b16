#!/usr/bin/env bash
# llama.cpp's reference logits for each file scripts/make-formats.sh makes, on the nine short public
# prompts (tests/data/reference/prompts-public.json), by scripts/peer/make_reference.py (llama.cpp
# b11739, CPU, flash attention off, f16 KV, 2 threads) into models/formats/<STEM>-llamacpp.json.gz;
# slimmed by scripts/slim-reference.py into tests/data/formats/<STEM>-llamacpp.json (committed).
# Then the bounds' candidates (scripts/peer/tolerances.py: flash attention on, n_ubatch 1, prompt
# and continuation in one batch) into tests/data/formats/<STEM>-tolerances.json, from which
# scripts/format-bounds.py derives tests/data/formats/bounds.json.
# Usage: scripts/make-format-references.sh [STEM...]   (a stem: smollm2-Q4_K_M, tiny-Q2_K…; every
# file of tests/data/formats/files.json by default; about a minute a file on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
STEMS=${*:-$(python3 -c "import json; print(' '.join(json.load(open('tests/data/formats/files.json'))))")}
scripts/make-formats.sh >/dev/null
PY=$(scripts/peer/venv.sh)
# The nine short public prompts (665 tokens; the ~1,700-token document chat stays with the default
# model, tests/reference.rs): a file is about the weights, and CI scores twelve of them.
PROMPTS=pub-01-prose,pub-02-python,pub-03-numbers-dates,pub-04-chinese,pub-05-emoji-whitespace,pub-06-chat-sky,pub-07-chat-code,pub-08-chat-multiturn,pub-09-chat-math
for f in $STEMS; do
  m=models/formats/$f.gguf
  out=models/formats/$f-llamacpp.json.gz
  "$PY" scripts/peer/make_reference.py "$m" tests/data/reference/prompts-public.json "$out" --prompts "$PROMPTS" \
    --source "scripts/make-formats.sh: models/formats/$f.gguf" 2>/dev/null >/dev/null
  "$PY" scripts/peer/tolerances.py "$m" "$out" tests/data/formats/$f-tolerances.json 2>/dev/null >/dev/null
  "$PY" scripts/slim-reference.py "$out" tests/data/formats/$f-llamacpp.json
  echo "make-format-references: $f: $(stat -c %s tests/data/formats/$f-llamacpp.json) bytes"
done
