#!/usr/bin/env bash
# Runs every test: native (cargo test on the machine's Vulkan adapter; lavapipe in CI), browser
# (wasm-bindgen tests in headless Chromium's WebGPU) and the demo page (Playwright + Chromium).
# Installs what is missing first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch-model.sh
export PATH="$HOME/.cargo/bin:$PATH"

echo "== native tests: cargo test --workspace (release: the llama.cpp agreement test scores ~2,700 tokens)"
cargo test --workspace --release

echo "== browser tests: wasm-pack test --headless --chrome"
wasm-pack test --headless --chrome

echo "== page tests: demo page in headless Chromium"
wasm-pack build --release --target web --out-dir www/pkg --no-pack
node --test tests/page/
