#!/usr/bin/env bash
# Regenerates tests/fixtures/tiny-logits.json: the tiny test model's logits on a fixed 12-token
# sequence from the native GPU (lavapipe in CI). tests/tiny_model.rs compares against it natively
# and in headless Chromium, so rerun this (and commit the result) whenever the tiny model, the
# forward pass or a kernel changes the logits by more than 1e-3.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2   # lavapipe: the logits come from the native GPU
cargo run -q --example tiny_fixture -- tests/fixtures/tiny-logits.json
