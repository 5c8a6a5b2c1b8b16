#!/usr/bin/env bash
# Runs every test: native (cargo test on the machine's Vulkan adapter; lavapipe in CI), browser
# (wasm-bindgen tests in headless Chromium's WebGPU) and the demo page (Playwright + Chromium).
# Installs what is missing first (scripts/setup.sh). Prints each stage's time.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
start=$SECONDS
stage_start=$SECONDS
stage() {
  local now=$SECONDS
  [ -z "${stage_name:-}" ] || echo "== done: $stage_name in $((now - stage_start)) s (total $((now - start)) s)"
  stage_name=$1
  stage_start=$now
  [ -z "$stage_name" ] || echo "== $stage_name"
}

stage "set-up: scripts/setup.sh, scripts/fetch-model.sh"
bash scripts/setup.sh
bash scripts/fetch-model.sh

stage "lint: cargo fmt --check (rustfmt.toml), cargo clippy -D warnings (native, and the library for wasm32)"
cargo fmt --all --check
cargo fmt --manifest-path fuzz/Cargo.toml --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --lib --target wasm32-unknown-unknown -- -D warnings

stage "test models: scripts/make-formats.sh (llama.cpp's quantizer; builds its venv once), scripts/make-archs.sh (tiny models of each architecture)"
bash scripts/make-formats.sh
bash scripts/make-archs.sh

stage "native tests: cargo test --workspace --release (llama.cpp agreement: ~2,700 tokens on the default model, 363 on each of its 12 requantizations, 953 on each of 14 tiny format files, every architecture on 8 tiny files, 253 positions of Gemma-3-270m)"
cargo test --workspace --release

stage "browser tests: wasm-pack test --headless --chrome (kernels, the tiny models, every weight format on 14 tiny files, every architecture on 4 small ones)"
# The runner allows 20 s per test binary by default; SwiftShader runs the tiny model's cache tests
# slowly (several forward passes per test), so allow more.
WASM_BINDGEN_TEST_TIMEOUT=${WASM_BINDGEN_TEST_TIMEOUT:-180} wasm-pack test --headless --chrome

stage "npm package: scripts/pack.sh, then the tarball in a Vite app in headless Chromium, tsc --noEmit"
tgz=$(bash scripts/pack.sh | tail -n 1)
bash scripts/make-tiny-model.sh >/dev/null
bash scripts/make-tiny-model.sh models/tiny-kv-heavy.gguf kv-heavy >/dev/null
HOTPREFIX_TGZ="$tgz" node --test tests/npm/

stage "page tests: the demo (on the package) in headless Chromium"
node --test tests/page/

stage "fresh clone: scripts/pack.sh installs what it needs (tests/scripts/fresh-clone.sh)"
bash tests/scripts/fresh-clone.sh

stage ""
