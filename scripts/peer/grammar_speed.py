#!/usr/bin/env python3
"""llama.cpp's decode speed with an answer held to a grammar, beside its free greedy decode: the
peer figure for `hotprefix bench structured` (docs/BENCHMARKS.md). The same request (the chat
prompt "List canal places as JSON records.", 128 tokens) decoded greedily with llama.cpp's greedy
sampler alone, then with a GBNF grammar in front of it (llama_sampler_init_grammar) that is the
JSON Schema hotprefix's benchmark uses, written by hand in GBNF ("rows" of at least 40 records of
city (1 to 24 characters), year (1800 to 2100 as digits) and kind). Tokens one at a time, each
llama_decode of one token, 2 threads, as speed.py runs llama.cpp. Prints one JSON line of medians.

usage: $(scripts/peer/venv.sh) scripts/peer/grammar_speed.py MODEL.gguf [runs]
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lcpp import LlamaCpp, ffi, lib  # noqa: E402

GRAMMAR = r'''
root   ::= "{\"rows\": [" row (", " row)* "]}"
row    ::= "{\"city\": " city ", \"year\": " year ", \"kind\": " kind "}"
city   ::= "\"" char (char (char (char (char (char (char (char (char (char (char (char (char (char (char (char (char (char (char (char (char (char (char char?)?)?)?)?)?)?)?)?)?)?)?)?)?)?)?)?)?)?)?)?)?)? "\""
char   ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
year   ::= "1" [89] [0-9] [0-9] | "20" [0-9] [0-9] | "2100"
kind   ::= "\"port\"" | "\"lock\"" | "\"bridge\"" | "\"quay\""
'''


def run(lc, prompt, n, grammar):
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    if grammar:
        g = lib.llama_sampler_init_grammar(lc.vocab, GRAMMAR.encode(), b"root")
        if g == ffi.NULL:
            raise RuntimeError("grammar rejected")
        lib.llama_sampler_chain_add(chain, g)
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
    lc.clear()
    lc.decode(prompt, 0, logits="keep")
    pos = len(prompt)
    t0 = time.perf_counter()
    out = []
    for _ in range(n):
        t = int(lib.llama_sampler_sample(chain, lc.ctx, -1))
        out.append(t)
        if lc.is_eog(t):
            break
        lc.decode([t], pos, logits="keep")
        pos += 1
    dt = time.perf_counter() - t0
    lib.llama_sampler_free(chain)
    return len(out) / dt, lc.detok_bytes(out).decode("utf-8", "replace")


def main():
    model = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    lc = LlamaCpp(model, n_ctx=2048, n_batch=512, n_ubatch=512, n_threads=2, flash_attn="off")
    text = lc.apply_chat_template([{"role": "user", "content": "List canal places as JSON records."}], True)
    prompt = lc.tokenize(text, add_special=True, parse_special=True)
    free, held = [], []
    sample = ""
    for _ in range(runs):
        free.append(run(lc, prompt, 128, False)[0])
        tok_s, sample = run(lc, prompt, 128, True)
        held.append(tok_s)
    f, h = statistics.median(free), statistics.median(held)
    print(json.dumps({"llama_cpp": lc.info()["llama_cpp_tag"], "model": os.path.basename(model), "free_decode_tok_s": f,
                      "grammar_decode_tok_s": h, "ratio": h / f, "sample": sample[:120]}))


main()
