//! Phi-3 (Phi-3-mini, Phi-3.5-mini, Phi-4-mini; llama.cpp's `src/models/phi3.cpp`): llama's
//! blocks with Q|K|V in one tensor (`attn_qkv`), gate|up in one (`ffn_up`, gate rows first), NEOX
//! RoPE (over part of each head in Phi-4-mini), and LongRoPE's frequency factors where the file
//! has them (`rope_factors_long`/`_short`: the long ones for a context window past
//! `rope.scaling.original_context_length`, with `rope.scaling.attn_factor` on Q and K). The loader
//! takes fused tensors wherever a file has them, so the forward pass is llama's. The sliding
//! window some files declare is not applied: llama.cpp disables it for this architecture.

use crate::model::config::Rope;

use super::Arch;

pub(crate) const PHI3: Arch = Arch {
    name: "phi3",
    rope: Rope::Neox,
    not_taken: &[super::ROPE_FREQS, super::Q_NORM, super::K_NORM, super::POST_ATTN, super::POST_FFW],
    ..super::LLAMA_LIKE
};
