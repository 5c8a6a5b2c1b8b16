#!/usr/bin/env bash
# Builds the npm package (scripts/pack.sh) and serves the demo page on http://127.0.0.1:${PORT:-8080}/
# with the default model. The page is static: www/ plus links to the package and the models.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch-model.sh
bash scripts/pack.sh >/dev/null
rm -rf www/pkg   # an older layout's wasm-pack output
ln -sfn ../models www/models
ln -sfn ../target/npm/hotprefix www/pkg
PORT=${PORT:-8080}
echo "demo: open http://127.0.0.1:$PORT/ in a browser with WebGPU (Chrome/Edge 113+, Safari 26+, Firefox 141+)"
exec python3 -m http.server "$PORT" --bind 127.0.0.1 --directory www
