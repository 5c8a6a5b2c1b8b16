//! Qwen2 (Qwen2 and Qwen2.5): llama's blocks with a bias on Q, K and V, and NEOX RoPE (llama.cpp's
//! `src/models/qwen2.cpp`). The forward pass is llama's: the bias is added after the fused
//! Q|K|V projection wherever a file has one.

use crate::model::config::Rope;

use super::Arch;

pub(crate) const QWEN2: Arch = Arch {
    name: "qwen2",
    rope: Rope::Neox,
    required: &["attn_q.bias", "attn_k.bias", "attn_v.bias"],
    not_taken: &[super::ROPE_FREQS, super::ROPE_LONG, super::ROPE_SHORT, super::Q_NORM, super::K_NORM, super::POST_ATTN, super::POST_FFW],
    ..super::LLAMA_LIKE
};
