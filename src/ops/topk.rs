//! What a temperature draw needs of a row of logits, found on the GPU (`shaders/topk.wgsl`).

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{need, u};

static TOPK: Kernel = kernel!("topk", "main", [Read, Read, ReadWrite]);

/// Where each part of [`topk`]'s output sits, in u32 words: the one owner of the layout
/// `shaders/topk.wgsl` writes (its comment points here), which the model reads back with
/// [`TopkLayout::parse`] and the oracle writes for the kernel check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopkLayout {
    /// Candidate slots.
    pub cap: usize,
    /// Penalty-window ids whose logits are read.
    pub window: usize,
}

impl TopkLayout {
    /// Word of the count of logits at or above the threshold (may exceed `cap`).
    pub const COUNT: usize = 0;
    /// Word of the threshold: the `k`-th largest order key.
    pub const THRESHOLD: usize = 1;
    /// Word of the row's largest logit (f32 bits).
    pub const MAX: usize = 2;
    /// Word of `Σ exp((x - max) · inv_t)` (f32 bits).
    pub const SUM: usize = 3;
    /// First word of the `(id, logit bits)` pairs of the first `min(count, cap)` candidates.
    pub const CANDS: usize = 4;

    /// First word of the window's logits (f32 bits, in the window's order).
    pub fn window_at(self) -> usize {
        Self::CANDS + 2 * self.cap
    }

    /// Words in all.
    pub fn words(self) -> usize {
        self.window_at() + self.window
    }

    /// The words [`topk`] wrote, as the sampler takes them, for a row of `vocab` logits.
    pub fn parse(self, w: &[u32], vocab: usize) -> Result<Top> {
        if w.len() < self.words() {
            return Err(Error::shape("topk", format!("{} words read back, the layout has {}", w.len(), self.words())));
        }
        let count = w[Self::COUNT] as usize;
        let cands = w[Self::CANDS..Self::CANDS + 2 * count.min(self.cap)].chunks_exact(2).map(|c| (c[0], f32::from_bits(c[1]))).collect();
        let at = self.window_at();
        Ok(Top {
            count,
            cands,
            threshold: w[Self::THRESHOLD],
            max: f32::from_bits(w[Self::MAX]),
            sum: f32::from_bits(w[Self::SUM]) as f64,
            window: w[at..at + self.window].iter().map(|&b| f32::from_bits(b)).collect(),
            vocab,
        })
    }
}

/// What the `topk` kernel read of one row of logits (before the penalty): enough for most
/// temperature draws, a few KB instead of the whole row.
///
/// The tokens the sampler can rank without the rest of the row are the candidates and the
/// penalty window whose penalized logit is above the threshold's value: no other token can be.
/// [`crate::engine::sample::Sampler::sample_top`] draws from them exactly as [`crate::engine::sample::Sampler::sample`] would from the whole
/// row (the same token for the same generator state), except that the row's total weight comes
/// from the GPU's f32 sum, so a draw within ~1e-6 (relative) of a boundary between two tokens
/// may fall on the other one.
#[derive(Debug, Clone, Default)]
pub struct Top {
    /// How many logits have an [`crate::engine::sample::order_key`] at least `threshold`.
    pub count: usize,
    /// `(id, logit)` of those logits (of the first `cap` when there are more), in no order.
    pub cands: Vec<(u32, f32)>,
    /// The `k`-th largest order key of the row (1 when it has fewer non-NaN logits).
    pub threshold: u32,
    /// The row's largest logit.
    pub max: f32,
    /// `Σ exp((x - max) / T)` over the row's non-NaN logits.
    pub sum: f64,
    /// The logits of [`crate::engine::sample::Sampler::penalty_window`]'s tokens, in its order.
    pub window: Vec<f32>,
    /// The row's length.
    pub vocab: usize,
}

/// What a temperature sampler needs of the `n` logits in `x` (one row), into `out`
/// ([`TopkLayout::words`] long): every logit at or above the `k`-th largest (up to `cap` of
/// them, and how many there are), the row's largest logit, `Σ exp((x - max) · inv_t)`, and the
/// logits of the first `window` ids in `win`, laid out as [`TopkLayout`] says.
#[allow(clippy::too_many_arguments)]
pub fn topk(
    b: &mut Batch,
    x: &wgpu::Buffer,
    n: usize,
    k: usize,
    cap: usize,
    inv_t: f32,
    win: &wgpu::Buffer,
    window: usize,
    out: &wgpu::Buffer,
) -> Result<()> {
    need("topk", "x", x, n)?;
    need("topk", "window", win, window.max(1))?;
    need("topk", "out", out, TopkLayout { cap, window }.words())?;
    if k == 0 || k > cap || n == 0 {
        return Err(Error::shape("topk", format!("k = {k}, cap = {cap}, n = {n}: need 0 < k <= cap and n > 0")));
    }
    b.dispatch(&TOPK, &[], &[u(n), u(k), u(cap), inv_t.to_bits(), u(window)], &[x, win, out], [1, 1, 1])
}
