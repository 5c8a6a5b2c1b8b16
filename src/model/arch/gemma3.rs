//! Gemma-3 (llama.cpp's `src/models/gemma3.cpp`): the embedding × √width; pre-norm blocks whose
//! attention has the QK-norm and NEOX RoPE, and whose attention output and feed-forward output are
//! each RMS-normed again before they join the residual (`post_attention_norm`, `post_ffw_norm`); a
//! GeGLU feed-forward; sliding-window attention (`attention.sliding_window`) on every layer but
//! each sixth, the local layers with RoPE base 10,000 (llama.cpp hard-codes it; the global layers
//! use the file's base); attention scaled by 1/√(head width); the head tied to the embedding.
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
    ..super::LLAMA_LIKE
};
