#!/usr/bin/env python3
"""llama.cpp's token ids for one model file's vocabulary: the 60 reference strings of
tests/data/reference/smollm2-tokenizer-vectors.json (llama_tokenize with add_special=true, in both
special-token modes) and the public chat prompts (tests/data/reference/prompts-public.json)
rendered with the file's own chat template by jinja2 (with the file's bos_token and eos_token
texts), cross-checked against llama.cpp's llama_chat_apply_template (whose built-in renderings
leave out the BOS text some templates start with: Llama-3's), and tokenized with parse_special=true and add_special=false (a template
that writes BOS itself must not get a second one). tests/tokenizer.rs holds hotprefix's tokenizer
and template to them, for each tokenizer family.

usage: $(scripts/peer/venv.sh) scripts/make-tokenizer-vectors.py MODEL.gguf OUT.json
"""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "peer"))
from lcpp import LlamaCpp, lib, sha256_file  # noqa: E402
import jinja2  # noqa: E402

model, out = sys.argv[1:3]
root = os.path.join(here, "..")
strings = json.load(open(os.path.join(root, "tests/data/reference/smollm2-tokenizer-vectors.json"), encoding="utf-8"))["vectors"]
prompts = json.load(open(os.path.join(root, "tests/data/reference/prompts-public.json"), encoding="utf-8"))["prompts"]
lc = LlamaCpp(model, n_ctx=256, n_threads=2)
vectors = []
for v in strings:
    t = v["text"]
    vectors.append({"i": v["i"], "text": t, "ids_parse_special_false": lc.tokenize(t, add_special=True, parse_special=False),
                    "ids_parse_special_true": lc.tokenize(t, add_special=True, parse_special=True)})
tmpl = lc.chat_template()
env = jinja2.Environment(loader=jinja2.BaseLoader(), trim_blocks=False, lstrip_blocks=False, keep_trailing_newline=True)
env.globals["raise_exception"] = lambda m: (_ for _ in ()).throw(Exception(m))
bos, eos = int(lib.llama_vocab_bos(lc.vocab)), int(lib.llama_vocab_eos(lc.vocab))
bos_text = lc.token_text(bos) if bos >= 0 else ""
eos_text = lc.token_text(eos) if eos >= 0 else ""
chats = []
for p in prompts:
    if p["kind"] != "chat":
        continue
    gen = p.get("add_generation_prompt", True)
    text = env.from_string(tmpl).render(messages=p["messages"], add_generation_prompt=gen, bos_token=bos_text, eos_token=eos_text)
    builtin = lc.apply_chat_template(p["messages"], gen)
    assert text in (builtin, bos_text + builtin), (p["id"], text, builtin)
    chats.append({"id": p["id"], "messages": p["messages"], "add_generation_prompt": gen, "text": text,
                  "ids": lc.tokenize(text, add_special=False, parse_special=True)})
json.dump({"format": "tokenizer-vectors/v1", "model_file": os.path.basename(model), "model_sha256": sha256_file(model),
           "made_by": "scripts/make-tokenizer-vectors.py (llama.cpp b11739 through scripts/peer/)",
           "vectors": vectors, "chats": chats}, open(out, "w", encoding="utf-8"), ensure_ascii=False, indent=0)
print(out, len(vectors), "strings,", len(chats), "chat prompts")
