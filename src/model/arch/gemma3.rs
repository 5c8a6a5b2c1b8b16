//! Gemma-3 (llama.cpp's `src/models/gemma3.cpp`): the embedding × √width; pre-norm blocks whose
//! attention has the QK-norm and NEOX RoPE, and whose attention output and feed-forward output are
//! each RMS-normed again before they join the residual (`post_attention_norm`, `post_ffw_norm`); a
//! GeGLU feed-forward; sliding-window attention (`attention.sliding_window`) on every layer but
//! each sixth, the local layers with RoPE base 10,000 (llama.cpp hard-codes it; the global layers
//! use the file's base); attention scaled by 1/√(head width), but by 1/√(width / heads) in the
//! 62-layer model (Gemma-3-27B: its `query_pre_attn_scalar` is 168, its heads 128 wide; llama.cpp
//! knows it by its layer count, as here); the head tied to the embedding.
//! The blocks apply what the file and the config give (the post-norms, the window, the local RoPE
//! table), so the forward pass reads as llama's.

use crate::model::config::{Act, Rope};

use super::Arch;

pub(crate) const GEMMA3: Arch = Arch {
    name: "gemma3",
    rope: Rope::Neox,
    required: &["attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight", "post_ffw_norm.weight"],
    act: Act::Gelu,
    embed_scaled: true,
    swa_pattern: 6,
    swa_rope_base: 10000.0,
    attn_scale: |layers, dim, heads, head_dim| match layers {
        62 => 1.0 / ((dim / heads) as f32).sqrt(),
        _ => super::head_scale(layers, dim, heads, head_dim),
    },
    not_taken: &[super::ROPE_FREQS, super::ROPE_LONG, super::ROPE_SHORT],
    ..super::LLAMA_LIKE
};
