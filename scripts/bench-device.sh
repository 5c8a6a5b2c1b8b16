#!/usr/bin/env bash
# The device benchmark: `hotprefix bench --json` on a lent GPU machine's native Vulkan adapter, for
# the default model and a K-quant file, as one prepared script (the `device` tool's machine has no
# network and takes at most 64 MiB of working tree a call; see its README).
#
#   scripts/bench-device.sh prepare   here: builds the release CLI, copies it (stripped) into
#                                     .dev/, downloads the Vulkan loader packages into .gl/ (the
#                                     device README's recipe), and cuts the models into ≤ 24 MiB
#                                     pieces in sets .dev/set-N (both folders git-excluded)
#   scripts/bench-device.sh run       there, in calls that each carry at most 64 MiB with the tree:
#                                     `run piece` (carry [".dev/set-N"]) copies one set to /tmp,
#                                     which stays while the machine is warm; `run bench` (carry
#                                     [".gl", ".dev/bin", ".dev/models.sha256", last set]) joins
#                                     the pieces and runs the benchmarks
#
# The default model (101 MB), a Q4_K_M file (105 MB) and Gemma-3-270m (253 MB, scripts/fetch-gemma.sh) do not fit one call, so `prepare` writes
# the pieces into numbered sets .dev/set-1, .dev/set-2, …; each `run piece` call carries one set, and the last call (`run bench`) joins them (files kept between warm calls) and runs:
#   hotprefix bench model --json --model M   for each model, `hotprefix bench kernels` and
#   `hotprefix bench cache` on the first model, and `bench profile` (the warm request on the first
#   model, a decode step on each),
# printing one JSON line per model with the adapter string. Record the lines in docs/BENCHMARKS.md.
# The machine goes back after 30 s idle, and the pieces with it: make the piece calls and the
# bench call back to back (one batch of tool calls: ~4 s a piece call once the machine is up).
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${MODELS:-models/SmolLM2-135M-Instruct.Q4_1.gguf models/formats/smollm2-Q4_K_M.gguf models/gemma-3-270m-q4_k_m.gguf}
case "${1:-}" in
  prepare)
    grep -qx '/.gl/' .git/info/exclude 2>/dev/null || echo /.gl/ >>.git/info/exclude
    grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo /.dev/ >>.git/info/exclude
    cargo build --release -p hotprefix-cli
    rm -rf .dev && mkdir -p .dev/bin
    cp target/release/hotprefix .dev/bin/ && strip .dev/bin/hotprefix
    if ! ls .gl/libglvnd0_*.deb >/dev/null 2>&1; then
      mkdir -p .gl /tmp/amd64/partial
      o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
      apt-get $o update >/dev/null
      # The NVIDIA ICD (libGLX_nvidia) needs glvnd beside the loader: with libvulkan1 alone
      # vkCreateInstance finds no driver.
      (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)
    fi
    set=0
    for m in $MODELS; do
      [ -f "$m" ] || { echo "bench-device: $m is missing (scripts/fetch-model.sh, scripts/make-formats.sh, scripts/fetch-gemma.sh)" >&2; exit 1; }
      sha256sum "$m" | sed "s|  .*/|  |" >>.dev/models.sha256
      split -b 24M -d "$m" ".dev/$(basename "$m").part-"
    done
    # Two pieces a set: .dev/set-N/ (each call carries one set and the tracked tree, under 64 MiB
    # together; the last call carries .gl and .dev/bin).
    for p in .dev/*.part-*; do
      set=$((set + 1)); d=.dev/set-$(( (set + 1) / 2 )); mkdir -p "$d"; mv "$p" "$d/"
    done
    du -sh .gl .dev/bin .dev/set-* | sed 's/^/bench-device: /'
    echo "bench-device: then, per set N: run(command='bash scripts/bench-device.sh run piece', carry=['.dev/set-N'])"
    echo "bench-device: and last: run(command='bash scripts/bench-device.sh run bench', carry=['.gl','.dev/bin','.dev/models.sha256'])"
    ;;
  run)
    mkdir -p /tmp/hotprefix-models
    # Pieces carried in this call (the last call may carry the last set too).
    if ls .dev/set-*/*.part-* >/dev/null 2>&1; then cp .dev/set-*/*.part-* /tmp/hotprefix-models/; fi
    if [ "${2:-}" = piece ]; then ls -la /tmp/hotprefix-models; exit 0; fi
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    # The models' names, the default model first.
    names=$(sed 's/^[0-9a-f]*  //' .dev/models.sha256)
    first=${names%%$'\n'*}
    cd /tmp/hotprefix-models
    for f in $names; do cat "$f".part-* >"$f"; done
    sha256sum -c "$OLDPWD/.dev/models.sha256"
    cd "$OLDPWD"
    [ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] && export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    for f in $names; do
      .dev/bin/hotprefix bench model --json --model "/tmp/hotprefix-models/$f" | tee -a "$OUT/bench-device.jsonl"
    done
    .dev/bin/hotprefix bench kernels | tee "$OUT/bench-kernels.txt"
    # The warm/cold TTFT of a question after a resident document, on the default model.
    .dev/bin/hotprefix bench cache --runs 5 --model "/tmp/hotprefix-models/$first" | tee "$OUT/bench-cache.txt"
    # Where the GPU time goes (timestamp queries): the warm request, and a decode step of each model.
    {
      .dev/bin/hotprefix bench profile --section warm --model "/tmp/hotprefix-models/$first"
      for f in $names; do .dev/bin/hotprefix bench profile --section decode-short --model "/tmp/hotprefix-models/$f"; done
    } | tee "$OUT/bench-profile.txt"
    ;;
  *) echo "usage: $0 prepare | run [piece|bench]" >&2; exit 2 ;;
esac
