#!/usr/bin/env python3
"""Derives tests/data/formats/bounds.json, the bounds tests/formats.rs holds each format file to,
from llama.cpp against itself: for each file, the candidates of scripts/peer/tolerances.py
(tests/data/formats/<STEM>-tolerances.json: flash attention on, n_ubatch 1, prompt and greedy
continuation in one batch — honest runs of the same engine that differ only in how they batch and
reduce) and, computed here with the same llama.cpp, each candidate's KL divergence from the
reference at the last prompt position (over the reference's 64 most likely tokens, as
tests/formats.rs computes it). A bound is the worst candidate plus headroom:

  top1          ≥ min(candidates) − 0.05
  max_flip_gap  ≤ max(1.0, 1.25 · max(candidates) + 0.25)   (no top-1 flip at a larger llama.cpp gap)
  dmean_top5    ≤ 1.5 · max(candidates) + 0.05
  kl            ≤ max(0.01, 3 · max(candidates))
  greedy        ≥ min(candidates) − 0.05

The default model's files (135M parameters, ~1 minute a file on lavapipe for all nine prompts) are
scored by the test on three of the nine prompts (SUBSET: code, odd whitespace and emoji, a
multi-turn chat; 267 prompt tokens and 96 greedy ones), so their candidates are run here again on
those three (tolerances.py on the reference cut to them); the tiny models' on all nine. bounds.json
records each file's prompts.

The architectures' tiny models (tests/data/archs/, by scripts/make-archs.sh) get their bounds the
same way, on all nine prompts: SET=archs.

usage: [SET=archs] $(scripts/peer/venv.sh) scripts/format-bounds.py [STEM...]   (every file, or these merged in; reads models/$SET/<STEM>-llamacpp.json.gz)
"""
import base64
import gzip
import json
import os
import sys

import subprocess

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "peer"))
from lcpp import LlamaCpp  # noqa: E402

root = os.path.join(here, "..")
SET = os.environ.get("SET", "formats")
data = os.path.join(root, "tests", "data", SET)
files = json.load(open(os.path.join(data, "files.json")))
bounds_path = os.path.join(data, "bounds.json")
out = json.load(open(bounds_path)) if os.path.exists(bounds_path) and len(sys.argv) > 1 else {}
out |= {"derived_by": "scripts/format-bounds.py", "rules": __doc__.split("headroom:")[1].split("usage:")[0].strip().splitlines()}


def kl_top(ref_last, ours_last, k=64):
    ref = ref_last.astype(np.float64)
    lse = ref.max() + np.log(np.exp(ref - ref.max()).sum())
    ids = np.argsort(-ref, kind="stable")[:k]
    q = ours_last.astype(np.float64)
    z = q.max() + np.log(np.exp(q - q.max()).sum())
    lp = ref[ids] - lse
    return float((np.exp(lp) * (lp - (q[ids] - z))).sum())


SUBSET = {"smollm2": ["pub-02-python", "pub-05-emoji-whitespace", "pub-08-chat-multiturn"],
          "gemma3": ["pub-02-python", "pub-05-emoji-whitespace", "pub-08-chat-multiturn"]}

for stem in sys.argv[1:] or files:
    model = os.path.join(root, "models", SET, stem + ".gguf")
    full = os.path.join(root, "models", SET, stem + "-llamacpp.json.gz")
    ref = json.load(gzip.open(full, "rt"))
    tol_path = os.path.join(data, stem + "-tolerances.json")
    subset = SUBSET.get(stem.split("-")[0])
    if subset:
        ref["prompts"] = [p for p in ref["prompts"] if p["id"] in subset]
        assert [p["id"] for p in ref["prompts"]] == subset, stem
        cut = os.path.join(root, "models", SET, stem + "-subset-llamacpp.json.gz")
        with gzip.open(cut, "wt") as f:
            json.dump(ref, f)
        subprocess.run([sys.executable, os.path.join(here, "peer", "tolerances.py"), model, cut, tol_path], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tol = json.load(open(tol_path))
    cands = tol["candidates"]
    kls = {}
    for name, kw in {"lcpp_fa_on": dict(n_ubatch=512, flash_attn="on"), "lcpp_ubatch1": dict(n_ubatch=1, flash_attn="off")}.items():
        eng = LlamaCpp(model, n_ctx=4096, n_batch=2048, n_threads=2, **kw)
        v = []
        for p in ref["prompts"]:
            eng.clear()
            L = eng.decode(p["token_ids"], 0, logits="all")
            last = np.frombuffer(base64.b64decode(p["last_logits_f32le_b64"]), dtype="<f4")
            v.append(kl_top(last, np.asarray(L[-1])))
        eng.close()
        kls[name] = float(np.mean(v))
    s = [c["summary"] for c in cands.values()]
    out[stem] = {
        "top1": round(min(c["top1"] for c in s) - 0.05, 4),
        "max_flip_gap": round(max(1.0, 1.25 * max(c["max_flip_gap"] for c in s) + 0.25), 4),
        "dmean_top5": round(1.5 * max(c["dmean_top5"] for c in s) + 0.05, 4),
        "kl": round(max(0.01, 3 * max(kls.values())), 5),
        "greedy": round(min(c["tf_greedy"] for c in s) - 0.05, 4),
        "prompts": [p["id"] for p in ref["prompts"]],
        "candidates": {n: {"top1": round(c["summary"]["top1"], 4), "max_flip_gap": c["summary"]["max_flip_gap"],
                           "dmean_top5": round(c["summary"]["dmean_top5"], 4), "tf_greedy": round(c["summary"]["tf_greedy"], 4),
                           **({"kl": round(kls[n], 5)} if n in kls else {})} for n, c in cands.items()},
    }
    print(stem, {k: v for k, v in out[stem].items() if k != "candidates"}, flush=True)
json.dump(out, open(bounds_path, "w"), indent=1)
