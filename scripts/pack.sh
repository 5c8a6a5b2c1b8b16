#!/usr/bin/env bash
# Builds the npm package (js/ plus the wasm engine) into target/npm/hotprefix and packs it with
# `npm pack`. Prints the tarball's path on its last line.
#   cargo (profile "wasm": size-optimised) -> wasm-bindgen --target web -> wasm-opt -Oz (npm binaryen;
#   Debian's corrupts wasm) -> js/ sources copied beside it. Nothing generated is edited afterwards.
#   Installs what it needs first (scripts/setup.sh --build: the wasm32 target, wasm-bindgen-cli,
#   the npm packages), so it works on a fresh clone. Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
target=${CARGO_TARGET_DIR:-target}
out=$target/npm/hotprefix
log() { echo "pack: $*" >&2; }

bash scripts/setup.sh --build >&2

version=$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)
js_version=$(node -p "require('./js/package.json').version")
[ "$version" = "$js_version" ] || { echo "pack: js/package.json is $js_version, Cargo.toml $version" >&2; exit 1; }

log "cargo build --profile wasm --target wasm32-unknown-unknown"
cargo build -q --lib --profile wasm --target wasm32-unknown-unknown >&2
rm -rf "$out"
mkdir -p "$out/wasm"
log "wasm-bindgen --target web"
wasm-bindgen --target web --no-typescript --out-dir "$out/wasm" "$target/wasm32-unknown-unknown/wasm/hotprefix.wasm" >&2
log "wasm-opt -Oz"
node_modules/.bin/wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  "$out/wasm/hotprefix_bg.wasm" -o "$out/wasm/hotprefix_bg.opt.wasm" >&2
mv "$out/wasm/hotprefix_bg.opt.wasm" "$out/wasm/hotprefix_bg.wasm"
cp js/*.js js/*.d.ts js/package.json js/README.md "$out/"
raw=$(stat -c %s "$out/wasm/hotprefix_bg.wasm")
gz=$(gzip -9c "$out/wasm/hotprefix_bg.wasm" | wc -c)
log "wasm: $raw bytes, $gz gzipped (gzip -9)"
tgz=$(cd "$target/npm" && npm pack ./hotprefix --pack-destination . --silent)
echo "$(cd "$target/npm" && pwd)/$tgz"
