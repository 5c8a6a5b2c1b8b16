#!/usr/bin/env python3
"""Slims a make_reference.py output (JSON or .json.gz) to what tests/formats.rs reads, so that a
reference a weight format fits in the repository (~60 KB instead of ~2 MB): per prompt the token
ids, the top-5 of every position, the greedy continuation with its margins, and of the last
position's 49,152 logits only the 64 largest (ids and exact f32 values) and the log-sum-exp of the
whole row, from which tests/formats.rs computes the KL divergence over those 64 tokens (the rest
of llama.cpp's probability mass, `last_tail_mass`, is recorded beside them).

usage: python slim-reference.py FULL.json[.gz] OUT.json
"""
import base64
import gzip
import json
import sys

import numpy as np

TOP = 64
src, out = sys.argv[1:3]
ref = json.load((gzip.open if src.endswith(".gz") else open)(src, "rt"))
slim = {k: ref[k] for k in ("format", "set", "created_utc", "peer", "n_threads", "model", "tokenization") if k in ref}
slim["slimmed_by"] = "scripts/slim-reference.py (top-%d of the last row + its log-sum-exp)" % TOP
slim["prompts"] = []
for p in ref["prompts"]:
    last = np.frombuffer(base64.b64decode(p["last_logits_f32le_b64"]), dtype="<f4").astype(np.float64)
    m = last.max()
    lse = m + np.log(np.exp(last - m).sum())
    ids = np.argsort(-last, kind="stable")[:TOP]
    tail = 1.0 - float(np.exp(last[ids] - lse).sum())
    slim["prompts"].append({
        "id": p["id"], "token_ids": p["token_ids"], "prompt_top5": p["prompt_top5"],
        "greedy": {"ids": p["greedy"]["ids"], "step_top1_margin": p["greedy"]["step_top1_margin"]},
        "last_top_ids": [int(i) for i in ids], "last_top_logits": [float(np.float32(last[i])) for i in ids],
        "last_logsumexp": float(lse), "last_tail_mass": tail,
    })
with open(out, "w") as f:
    json.dump(slim, f, separators=(",", ":"))
