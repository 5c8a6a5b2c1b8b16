#!/usr/bin/env bash
# llama.cpp's reference logits for each file scripts/make-formats.sh makes, on the nine short public
# prompts (tests/data/reference/prompts-public.json), by scripts/peer/make_reference.py (llama.cpp
# b11739, CPU, flash attention off, f16 KV, 2 threads) into models/formats/<STEM>-llamacpp.json.gz;
# slimmed by scripts/slim-reference.py into tests/data/formats/<STEM>-llamacpp.json (committed).
# Then the bounds' candidates (scripts/peer/tolerances.py: flash attention on, n_ubatch 1, prompt
# and continuation in one batch) into tests/data/formats/<STEM>-tolerances.json, from which
# scripts/format-bounds.py derives tests/data/formats/bounds.json.
# SET=archs does the same for the architectures' tiny models (scripts/make-archs.sh, models/archs/,
# tests/data/archs/).
# Usage: [SET=archs] scripts/make-format-references.sh [STEM...]   (a stem: smollm2-Q4_K_M, tiny-Q2_K…; every
# file of tests/data/formats/files.json by default; about a minute a file on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
SET=${SET:-formats}
export SET
STEMS=${*:-$(python3 -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]))))" "tests/data/$SET/files.json")}
if [ "$SET" = archs ]; then scripts/make-archs.sh >/dev/null; else scripts/make-formats.sh >/dev/null; fi
PY=$(scripts/peer/venv.sh)
# The nine short public prompts (665 tokens; the ~1,700-token document chat stays with the default
# model, tests/reference.rs): a file is about the weights, and CI scores twelve of them.
# PROMPTS=id,id… overrides them (tiny-llama3: the five raw prompts, since make_reference.py renders
# chat prompts with jinja2 without a bos_token, which Llama-3's template needs).
PROMPTS=${PROMPTS:-pub-01-prose,pub-02-python,pub-03-numbers-dates,pub-04-chinese,pub-05-emoji-whitespace,pub-06-chat-sky,pub-07-chat-code,pub-08-chat-multiturn,pub-09-chat-math}
# CHAT_TEMPLATE=NAME renders the chat prompts with llama.cpp's built-in template NAME (a file
# without a chat template: gemma3-270m-Q4_K_M, CHAT_TEMPLATE=gemma).
tmpl=()
[ -z "${CHAT_TEMPLATE:-}" ] || tmpl=(--chat-template "$CHAT_TEMPLATE")
for f in $STEMS; do
  m=models/$SET/$f.gguf
  out=models/$SET/$f-llamacpp.json.gz
  "$PY" scripts/peer/make_reference.py "$m" tests/data/reference/prompts-public.json "$out" --prompts "$PROMPTS" "${tmpl[@]}" \
    --source "scripts/make-$SET.sh: models/$SET/$f.gguf" 2>/dev/null >/dev/null
  "$PY" scripts/peer/tolerances.py "$m" "$out" "tests/data/$SET/$f-tolerances.json" 2>/dev/null >/dev/null
  "$PY" scripts/slim-reference.py "$out" "tests/data/$SET/$f-llamacpp.json"
  echo "make-format-references: $f: $(stat -c %s "tests/data/$SET/$f-llamacpp.json") bytes"
done
