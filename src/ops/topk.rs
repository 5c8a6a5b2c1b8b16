//! What a temperature draw needs of a row of logits, found on the GPU (`shaders/topk.wgsl`).

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{need, u};

static TOPK: Kernel = kernel!("topk", "main", [Read, Read, ReadWrite]);

/// How many u32 words [`topk`] writes for `cap` candidates and a penalty window of `window` ids.
pub fn topk_words(cap: usize, window: usize) -> usize {
    4 + 2 * cap + window
}

/// What a temperature sampler needs of the `n` logits in `x` (one row), into `out`
/// ([`topk_words`] long): every logit at or above the `k`-th largest (up to `cap` of them, and
/// how many there are), the row's largest logit, `Σ exp((x - max) · inv_t)`, and the logits of
/// the first `window` ids in `win`. Layout: shaders/topk.wgsl.
#[allow(clippy::too_many_arguments)]
pub fn topk(b: &mut Batch, x: &wgpu::Buffer, n: usize, k: usize, cap: usize, inv_t: f32, win: &wgpu::Buffer, window: usize, out: &wgpu::Buffer) -> Result<()> {
    need("topk", "x", x, n)?;
    need("topk", "window", win, window.max(1))?;
    need("topk", "out", out, topk_words(cap, window))?;
    if k == 0 || k > cap || n == 0 {
        return Err(Error::shape("topk", format!("k = {k}, cap = {cap}, n = {n}: need 0 < k <= cap and n > 0")));
    }
    b.dispatch(&TOPK, &[], &[u(n), u(k), u(cap), inv_t.to_bits(), u(window)], &[x, win, out], [1, 1, 1])
}
