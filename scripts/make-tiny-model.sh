#!/usr/bin/env bash
# Writes the tiny random-weight llama test model (hotprefix::testmodel::tiny_gguf(1): Q8_0 tied
# embedding, Q4_1 linear weights, F32 norms; 2 layers, width 96) to OUT.gguf and prints a summary.
# The tests build it in memory; this file is for poking at it with other tools.
# Usage: scripts/make-tiny-model.sh [OUT.gguf [kv-heavy]]   (default models/tiny-llama.gguf;
# kv-heavy: 32 layers of one 128-wide head, 16 KiB of K/V a position, for large-cache tests)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath -m "${1:-$root/models/tiny-llama.gguf}")"
cd "$root"
mkdir -p "$(dirname "$out")"
cargo run --release -q --example make_tiny_model -- "$out" "${@:2}"
