#!/usr/bin/env bash
# Runs every test: native (cargo test on the machine's Vulkan adapter; lavapipe in CI), browser
# (wasm-bindgen tests in headless Chromium's WebGPU) and the demo page (Playwright + Chromium).
# Installs what is missing first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

echo "== native tests: cargo test --workspace"
cargo test --workspace

echo "== browser tests: wasm-pack test --headless --chrome"
wasm-pack test --headless --chrome

echo "== page tests: demo page in headless Chromium"
wasm-pack build --release --target web --out-dir www/pkg --no-pack
node --test tests/page/
