#!/usr/bin/env bash
# Builds (once) the Python venv with llama.cpp's CPU build (PyPI llama-cpp-py-sync==0.11739, tag
# b11739, hash-pinned wheels, patched to load on Debian 12's glibc) and prints its python's path.
# Idempotent: an existing working venv is reused. $LCREF_VENV overrides the place
# (default ~/.cache/hotprefix-peer/venv). Copied from the peer harness (see scripts/peer/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
V=${LCREF_VENV:-$HOME/.cache/hotprefix-peer/venv}
if ! "$V/bin/python" -c "from llama_cpp_py_sync._cffi_bindings import get_lib; get_lib(); import gguf, jinja2, numpy" >/dev/null 2>&1; then
  echo "peer: building the llama.cpp venv in $V" >&2
  command -v gcc >/dev/null && python3 -c "import venv, ensurepip" 2>/dev/null \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv gcc >/dev/null
  python3 -m venv "$V"
  "$V/bin/pip" install -q --require-hashes -r "$here/requirements-hashes.txt"
  sh "$here/patch_llama_cpp_py_sync.sh" "$V" >/dev/null
fi
echo "$V/bin/python"
