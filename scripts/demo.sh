#!/usr/bin/env bash
# Builds the wasm package and serves the demo page on http://127.0.0.1:${PORT:-8080}/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch-model.sh
ln -sfn ../models www/models
export PATH="$HOME/.cargo/bin:$PATH"
wasm-pack build --release --target web --out-dir www/pkg --no-pack
PORT=${PORT:-8080}
echo "demo: open http://127.0.0.1:$PORT/ in a browser with WebGPU (Chrome/Edge 113+, Safari 26+, Firefox 141+)"
exec python3 -m http.server "$PORT" --bind 127.0.0.1 --directory www
