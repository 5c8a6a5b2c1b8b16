#!/usr/bin/env bash
# Installs what building and testing hotprefix needs on Debian 12, skipping whatever is already
# there: Mesa lavapipe from bookworm-backports (Vulkan on the CPU), Chromium + ChromeDriver
# (browser tests), the wasm32 target, wasm-bindgen-cli at the version in Cargo.lock, wasm-pack,
# and the npm packages of the page and package tests. Run as root (or with sudo available).
# `setup.sh --build`: only what building the npm package needs (scripts/pack.sh): the wasm32
# target, wasm-bindgen-cli and the npm packages (binaryen's wasm-opt).
set -euo pipefail
build_only=0
[ "${1:-}" = "--build" ] && build_only=1
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
say() { echo "setup: $*"; }

apt_updated=0
apt_update() { [ $apt_updated = 1 ] || { $SUDO apt-get update -qq; apt_updated=1; }; }

mesa_version=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)
if [ $build_only = 0 ] && [[ "$mesa_version" != 25.* ]]; then
  say "installing Mesa lavapipe from bookworm-backports (have: ${mesa_version:-none})"
  if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo 'deb http://deb.debian.org/debian bookworm-backports main' | $SUDO tee /etc/apt/sources.list.d/backports.list >/dev/null
  fi
  apt_update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers libvulkan1 >/dev/null
fi

missing=()
for pkg in chromium chromium-driver; do
  [ $build_only = 1 ] && break
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt_update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
# The lint stage of scripts/test.sh.
for c in rustfmt clippy; do
  rustup component list --installed | grep -q "^$c" || rustup component add "$c"
done

# wasm-bindgen-cli must equal the wasm-bindgen crate version in Cargo.lock.
[ -f Cargo.lock ] || cargo generate-lockfile
wbg=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$wbg" ]; then
  say "installing wasm-bindgen-cli $wbg (takes ~11 minutes)"
  cargo install -q wasm-bindgen-cli --version "$wbg"
fi
WASM_PACK=0.15.1
if [ $build_only = 0 ] && [ "$(wasm-pack --version 2>/dev/null | awk '{print $2}')" != "$WASM_PACK" ]; then
  say "installing wasm-pack $WASM_PACK (takes ~6 minutes)"
  cargo install -q wasm-pack --version "$WASM_PACK"
fi

# npm packages: installed again whenever package-lock.json changes.
lock=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.hotprefix-lock 2>/dev/null)" != "$lock" ]; then
  say "installing npm packages (playwright-core driving Debian's chromium, binaryen, vite, typescript)"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock" > node_modules/.hotprefix-lock
fi
say "ok"
