//! Llama (SmolLM2, Llama-3 and the llama-family files): pre-norm blocks with RMSNorm, RoPE on
//! adjacent pairs (with Llama-3's frequency factors when the file has `rope_freqs.weight`),
//! grouped-query attention, a SwiGLU feed-forward, and a head tied to the embedding unless the
//! file has `output.weight`.

use super::Arch;
use crate::error::Result;
use crate::model::blocks::Pass;

pub(crate) const LLAMA: Arch = super::LLAMA_LIKE;

/// llama2.c's `forward()`, a layer at a time.
pub(super) fn forward(p: &mut Pass<'_, '_>) -> Result<()> {
    p.embed()?;
    for l in 0..p.layers() {
        p.attention(l)?; // x += attention(rmsnorm(x))
        p.ffn(l)?; // x += swiglu_ffn(rmsnorm(x))
    }
    p.head() // logits = rmsnorm(x) · Wᵀ
}
