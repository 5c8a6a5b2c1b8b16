//! Qwen3 (dense): llama's blocks with an RMS QK-norm (one weight per head width, shared by the
//! heads, applied to Q and K before RoPE), NEOX RoPE and heads that may be wider than
//! `dim / n_head` (`attention.key_length`); no biases (llama.cpp's `src/models/qwen3.cpp`). The
//! forward pass is llama's: the QK-norm runs after the Q|K|V projection wherever a file has one.

use crate::model::config::Rope;

use super::Arch;

pub(crate) const QWEN3: Arch = Arch {
    name: "qwen3",
    rope: Rope::Neox,
    required: &["attn_q_norm.weight", "attn_k_norm.weight"],
    not_taken: &[super::ROPE_FREQS, super::ROPE_LONG, super::ROPE_SHORT, super::POST_ATTN, super::POST_FFW],
    ..super::LLAMA_LIKE
};
