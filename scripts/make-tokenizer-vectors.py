#!/usr/bin/env python3
"""llama.cpp's token ids for one model file's vocabulary: the 60 reference strings of
tests/data/reference/smollm2-tokenizer-vectors.json (llama_tokenize with add_special=true, in both
special-token modes) and the public chat prompts (tests/data/reference/prompts-public.json)
rendered with the file's own chat template by jinja2 (with the file's bos_token and eos_token
texts), cross-checked against llama.cpp's llama_chat_apply_template (whose built-in renderings
leave out the BOS text some templates start with: Llama-3's; Llama-2's it renders otherwise, and
the record says so: "builtin_render_agrees"), and tokenized with parse_special=true and add_special=false (a template
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
# Beside the 60 strings (whose control-token text is SmolLM2's/ChatML's), strings that exercise
# a SentencePiece vocabulary's own specials (Gemma-3's control, unknown and user-defined tokens,
# `</s>` which llama.cpp turns into a control token by its text, literal U+2581, byte fallback,
# runs of newlines and spaces): "extra" in the output, checked the same way.
EXTRA = [
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<bos>Hello<eos>", "<start_of_turn><start_of_turn>x<end_of_turn>", "<end_of_turn>text", "<start_of_turn",
    "Text with </s> and <s> inside", "</s></s>", "<unk> and <pad> and <mask>", "<unused0><unused12> [multimodal]",
    "<start_of_image><end_of_image><image_soft_token>", "<0x41> looks like a byte token",
    "literal \u2581\u2581 escape chars \u2581x\u2581", "a\n\n\nb\n\n\n\n\n\nc", "   three leading spaces and trailing   ",
    "tabs\tand\r\nCRLF\x0bvt\x0cff", "Mixed \u65e5\u672c\u8a9e and emoji \U0001f980\U0001f9d1\U0001f3fd\u200d\U0001f680 with rare \ua66e \U00013000",
    "\ue000private use\U0010fffd and \x7f\x01 controls",
    # Runs where one pair can merge at several overlapping places (ties of equal score).
    "Hmmm... aaaaa!!! ---- ====== ***** ~~~~ lololol zzzz bananas mississippi",
    # Case runs and contractions (GPT-4o's pre-tokenizer splits words at a lower-to-upper change),
    # digit runs, and a slash after a newline (which its punctuation run takes).
    "HelloWorld XMLHttpRequest iPhone McDONALD's DON'T we'LL They'RE o'clock",
    "1234567 12.5% $1,000,000 3.14159 v2.0.1 0x1F",
    "path/to\n/file//x \n//comment\r\n/* block */",
    "na\u00efve caf\u00e9 \u00c9COLE Stra\u00dfe \u01c5ungla \u0399\u03a3\u03a4\u039f\u03a1\u0399\u0391 e\u0301t\u00e9",
]
extra = [{"i": i, "text": t, "ids_parse_special_false": lc.tokenize(t, add_special=True, parse_special=False),
          "ids_parse_special_true": lc.tokenize(t, add_special=True, parse_special=True)} for i, t in enumerate(EXTRA)]
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
    # llama.cpp's built-in renderer matches a template it recognises by its text; Llama-2's it
    # renders its own way (no BOS text, other spaces), which only tiny-spm-prefix carries: there
    # the jinja2 rendering (the file's template, as llama.cpp's server renders it with --jinja)
    # stands alone, and the record says so. So for Phi-4-mini's template (tiny-gpt4o-pre), which
    # llama.cpp takes for Phi-3's and renders with a newline after each marker.
    agrees = text in (builtin, bos_text + builtin)
    assert agrees or "[INST]" in tmpl or "<|assistant|>" in tmpl, (p["id"], text, builtin)
    chats.append({"id": p["id"], "messages": p["messages"], "add_generation_prompt": gen, "text": text,
                  "builtin_render_agrees": agrees, "ids": lc.tokenize(text, add_special=False, parse_special=True)})
json.dump({"format": "tokenizer-vectors/v1", "model_file": os.path.basename(model), "model_sha256": sha256_file(model),
           "made_by": "scripts/make-tokenizer-vectors.py (llama.cpp b11739 through scripts/peer/)",
           "vectors": vectors, "extra": extra, "chats": chats}, open(out, "w", encoding="utf-8"), ensure_ascii=False, indent=0)
print(out, len(vectors), "strings,", len(extra), "extra strings,", len(chats), "chat prompts")
