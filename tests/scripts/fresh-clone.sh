#!/usr/bin/env bash
# The README's web-app path on a fresh clone: clones HEAD into a temporary folder (no
# node_modules, nothing built, no models) and runs scripts/pack.sh there, which must install what
# it needs and print the tarball's path; then checks the tarball. The wasm build's compiled
# dependencies are copied in from this checkout first (a build cache, not an installation: the
# clone still builds hotprefix itself), so the test costs ~2 minutes, not a full build.
# FRESH_CLONE_REV=<commit> checks out another commit of the clone (to run it against older code).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q --no-hardlinks "$root" "$tmp/clone"
cd "$tmp/clone"
[ -z "${FRESH_CLONE_REV:-}" ] || git checkout -q "$FRESH_CLONE_REV"
for p in node_modules target models; do
  [ ! -e "$p" ] || { echo "fresh-clone: $p exists in a fresh clone" >&2; exit 1; }
done
if [ -d "$root/target/wasm32-unknown-unknown/wasm/deps" ]; then
  mkdir -p target/wasm32-unknown-unknown/wasm
  cp -r --reflink=auto "$root/target/wasm32-unknown-unknown/wasm/deps" "$root/target/wasm32-unknown-unknown/wasm/build" \
    target/wasm32-unknown-unknown/wasm/
fi
tgz=$(bash scripts/pack.sh | tail -n 1)
case "$tgz" in
  "$tmp/clone/target/npm/"*.tgz) ;;
  *) echo "fresh-clone: pack.sh's last line is not the tarball: $tgz" >&2; exit 1 ;;
esac
files=$(tar -tzf "$tgz")
for f in package/index.js package/worker.js package/wasm/hotprefix_bg.wasm package/index.d.ts; do
  grep -qx "$f" <<<"$files" || { echo "fresh-clone: $f is missing from $tgz" >&2; exit 1; }
done
echo "fresh-clone: scripts/pack.sh on a fresh clone built $(basename "$tgz") ($(stat -c %s "$tgz") bytes)"
