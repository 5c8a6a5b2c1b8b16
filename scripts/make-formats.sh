#!/usr/bin/env bash
# Makes the weight-format test models (git-ignored, never committed) in models/formats/, with
# llama.cpp's own quantizer (llama_model_quantize via scripts/peer/requantize.py, no imatrix):
#   smollm2-<FTYPE>.gguf  the default model requantized (Q4_1 → every preset below);
#   tiny-<FTYPE>.gguf     a random-weight tiny llama whose every matrix has 256-value rows
#                         (scripts/make-tiny-formats.py, F32, seeded) quantized into the K-quant
#                         and IQ4_XS presets, so that those blocks land in every role.
# Each file's sha256 must be the one in tests/data/formats/files.json (llama.cpp's quantizer and the
# seeded writer are deterministic), so the committed llama.cpp references in tests/data/formats/
# describe exactly these files. Idempotent: a present file with the right sha256 is kept.
# Usage: scripts/make-formats.sh [--record]   (--record: write the sha256s and tensor-type
# histograms into tests/data/formats/files.json instead of checking them)
set -euo pipefail
cd "$(dirname "$0")/.."
SMOLLM2=${SMOLLM2_FTYPES:-Q4_K_M Q5_K_M Q6_K Q3_K_S Q2_K Q4_0 Q5_0 Q5_1 Q8_0 IQ4_NL IQ4_XS BF16}
TINY=${TINY_FTYPES:-Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K IQ4_XS Q4_0 Q5_0 Q5_1 Q8_0 IQ4_NL BF16 F16}
record=${1:-}
scripts/fetch-model.sh >/dev/null
PY=$(scripts/peer/venv.sh)
mkdir -p models/formats
FILES=tests/data/formats/files.json
want() { python3 -c "import json,sys; print(json.load(open(sys.argv[2])).get(sys.argv[1], {}).get('sha256', ''))" "$1" "$FILES" 2>/dev/null || true; }
ok() { local sha; sha=$(want "$1"); [ -f "models/formats/$1.gguf" ] && [ -n "$sha" ] && echo "$sha  models/formats/$1.gguf" | sha256sum -c --status; }
check() { # stem: the made file against files.json (unless --record)
  [ "$record" = --record ] && return 0
  local sha got; sha=$(want "$1"); got=$(sha256sum "models/formats/$1.gguf" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then echo "make-formats: models/formats/$1.gguf has sha256 $got, $FILES says ${sha:-nothing}" >&2; exit 1; fi
}
quantize() { # src stem ftype
  if ok "$2" && [ "$record" != --record ]; then echo "make-formats: models/formats/$2.gguf is present and verified"; return; fi
  "$PY" scripts/peer/requantize.py "$1" "models/formats/$2.gguf" "$3" 2 2>"models/formats/$2.log" >"models/formats/$2.json"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('make-formats:', d['file'], d['size'], 'bytes', d['tensor_types'])" "models/formats/$2.json"
  check "$2"
}
for f in $SMOLLM2; do quantize models/SmolLM2-135M-Instruct.Q4_1.gguf "smollm2-$f" "$f"; done
if ! ok tiny-F32 || [ "$record" = --record ]; then
  "$PY" scripts/make-tiny-formats.py models/SmolLM2-135M-Instruct.Q4_1.gguf models/formats/tiny-F32.gguf >/dev/null
  python3 -c "import hashlib,json,os,sys; p=sys.argv[1]; json.dump({'ftype':'F32','file':os.path.basename(p),'sha256':hashlib.sha256(open(p,'rb').read()).hexdigest(),'size':os.path.getsize(p),'tensor_types':{'F32':20}}, open(p[:-5]+'.json','w'))" models/formats/tiny-F32.gguf
  echo "make-formats: tiny-F32.gguf written"; check tiny-F32
fi
for f in $TINY; do quantize models/formats/tiny-F32.gguf "tiny-$f" "$f"; done
if [ "$record" = --record ]; then
  python3 - "$FILES" $(for f in $SMOLLM2; do echo smollm2-$f; done) tiny-F32 $(for f in $TINY; do echo tiny-$f; done) <<'PY'
import json, sys
out = {}
for stem in sys.argv[2:]:
    d = json.load(open(f"models/formats/{stem}.json"))
    out[stem] = {k: d[k] for k in ("ftype", "file", "sha256", "size", "tensor_types")}
json.dump(out, open(sys.argv[1], "w"), indent=1)
print("make-formats: recorded", len(out), "files in", sys.argv[1])
PY
fi
