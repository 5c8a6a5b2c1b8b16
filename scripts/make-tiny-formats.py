#!/usr/bin/env python3
"""Writes a random-weight tiny llama model whose every matrix has rows of a multiple of 256 values
(width 256, FFN 768, 2 layers, 4 heads of 64, 2 KV heads), in F32, with the default model's real
tokenizer (SmolLM2's 49,152-token BPE vocabulary, merges and chat template copied from its GGUF),
so that llama.cpp's quantizer puts real K-quant and IQ4_XS blocks in every role: the embedding
and tied output head, Q/K/V, the attention output and the FFN. Written with gguf-py (the peer
venv's `gguf` package). scripts/make-tiny-formats.sh quantizes it into each format.

usage: python make-tiny-formats.py SMOLLM2.gguf OUT.gguf [seed]
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

src, out = sys.argv[1:3]
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 19
DIM, FFN, LAYERS, HEADS, KV, HD = 256, 768, 2, 4, 2, 64

r = GGUFReader(src)


def field(name):
    f = r.fields[name]
    t = f.types[0]
    if t == GGUFValueType.ARRAY:
        sub = f.types[1]
        if sub == GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data], sub
        return [f.parts[i].tolist()[0] for i in f.data], sub
    if t == GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode(), t
    return f.parts[f.data[0]].tolist()[0], t


w = GGUFWriter(out, "llama")
w.add_name("hotprefix tiny llama, 256-value rows (random weights)")
w.add_context_length(2048)
w.add_embedding_length(DIM)
w.add_block_count(LAYERS)
w.add_feed_forward_length(FFN)
w.add_head_count(HEADS)
w.add_head_count_kv(KV)
w.add_rope_dimension_count(HD)
w.add_rope_freq_base(10000.0)
w.add_layer_norm_rms_eps(1e-5)
w.add_file_type(0)
tokens, _ = field("tokenizer.ggml.tokens")
w.add_vocab_size(len(tokens))
w.add_tokenizer_model(field("tokenizer.ggml.model")[0])
w.add_tokenizer_pre(field("tokenizer.ggml.pre")[0])
w.add_token_list(tokens)
w.add_token_types(field("tokenizer.ggml.token_type")[0])
w.add_token_merges(field("tokenizer.ggml.merges")[0])
w.add_bos_token_id(field("tokenizer.ggml.bos_token_id")[0])
w.add_eos_token_id(field("tokenizer.ggml.eos_token_id")[0])
w.add_unk_token_id(field("tokenizer.ggml.unknown_token_id")[0])
w.add_pad_token_id(field("tokenizer.ggml.padding_token_id")[0])
w.add_add_bos_token(bool(field("tokenizer.ggml.add_bos_token")[0]))
w.add_add_space_prefix(bool(field("tokenizer.ggml.add_space_prefix")[0]))
w.add_chat_template(field("tokenizer.chat_template")[0])

rng = np.random.default_rng(seed)


def mat(rows, cols, std):
    # GGUF dims are [cols, rows]; numpy shape (rows, cols).
    return (rng.standard_normal((rows, cols)) * std).astype(np.float32)


w.add_tensor("token_embd.weight", mat(len(tokens), DIM, 0.1))
w.add_tensor("output_norm.weight", (1.0 + 0.1 * rng.standard_normal(DIM)).astype(np.float32))
for i in range(LAYERS):
    w.add_tensor(f"blk.{i}.attn_norm.weight", (1.0 + 0.1 * rng.standard_normal(DIM)).astype(np.float32))
    w.add_tensor(f"blk.{i}.attn_q.weight", mat(HEADS * HD, DIM, 0.08))
    w.add_tensor(f"blk.{i}.attn_k.weight", mat(KV * HD, DIM, 0.08))
    w.add_tensor(f"blk.{i}.attn_v.weight", mat(KV * HD, DIM, 0.08))
    w.add_tensor(f"blk.{i}.attn_output.weight", mat(DIM, HEADS * HD, 0.05))
    w.add_tensor(f"blk.{i}.ffn_norm.weight", (1.0 + 0.1 * rng.standard_normal(DIM)).astype(np.float32))
    w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(FFN, DIM, 0.08))
    w.add_tensor(f"blk.{i}.ffn_up.weight", mat(FFN, DIM, 0.08))
    w.add_tensor(f"blk.{i}.ffn_down.weight", mat(DIM, FFN, 0.05))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(out)
