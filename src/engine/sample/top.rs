//! Drawing from the top of the logits found on the GPU (`ops::topk`): a few KB read back instead
//! of the whole row, the same token for the same generator state.

use crate::{Error, Result};

use super::{Sampler, View};
pub use crate::ops::Top;

/// How many of a row's largest logits `ops::topk` finds for [`Sampler::sample_top`].
pub const TOP: usize = 256;
/// Most candidates `ops::topk` returns (the [`TOP`] largest and every tie with the smallest of
/// them); with more, the sampler reads the whole row.
pub const TOP_CAP: usize = 512;
/// Most penalty-window tokens `ops::topk` reads; with more, the sampler reads the whole row.
pub const TOP_WINDOW: usize = 256;
/// The GPU top-k output the sampler reads: [`TOP_CAP`] candidates and a [`TOP_WINDOW`] window.
pub const TOP_LAYOUT: crate::ops::TopkLayout = crate::ops::TopkLayout { cap: TOP_CAP, window: TOP_WINDOW };

impl Sampler {
    /// [`Sampler::sample`] from what `ops::topk` read of the row instead of all of it: the same
    /// token (see [`Top`]), or `None` when this draw needs logits outside the top (a long tail,
    /// ties past [`TOP_CAP`], non-finite values): then call `sample` with all of them, which gives
    /// the token a full read would have given (the generator has not moved). `recent` must be
    /// what [`Sampler::penalty_window`] was given for `top.window`.
    pub fn sample_top(&mut self, top: &Top, recent: &[u32]) -> Result<Option<u32>> {
        let t = self.params.temperature;
        self.penalty_window(recent);
        let window = std::mem::take(&mut self.window);
        let r = self.sample_top_with(top, &window, t);
        self.window = window;
        r
    }

    fn sample_top_with(&mut self, top: &Top, window: &[u32], t: f32) -> Result<Option<u32>> {
        if top.cands.is_empty()
            || top.count > TOP_CAP
            || top.count != top.cands.len()
            || window.len() != top.window.len()
            || window.len() > TOP_WINDOW
        {
            return Ok(None);
        }
        if top.cands.iter().any(|&(id, _)| id as usize >= top.vocab) || window.iter().any(|&id| id as usize >= top.vocab) {
            return Err(Error::InvalidArgument(format!("sample: a token id past the vocabulary ({})", top.vocab)));
        }
        if !(top.max.is_finite() && top.sum.is_finite() && top.sum >= 1.0) {
            return Ok(None);
        }
        let pen = |id: u32, l: f32| match window.binary_search(&id) {
            Ok(i) => self.penalized(i, top.window[i]),
            Err(_) => l,
        };
        // The largest penalized logit: an unpenalized candidate's or a window token's (tokens
        // outside both are below every candidate).
        let mut best = f32::NEG_INFINITY;
        let mut unpenalized = false;
        for &(id, l) in &top.cands {
            if window.binary_search(&id).is_err() {
                best = best.max(l);
                unpenalized = true;
            }
        }
        for (i, &l) in top.window.iter().enumerate() {
            if !l.is_nan() {
                best = best.max(self.penalized(i, l));
            }
        }
        if !unpenalized || !best.is_finite() {
            return Ok(None);
        }
        // Σ exp((x - best) / T) over the penalized row, from the GPU's sum before the penalty.
        let inv_t = 1.0 / t as f64;
        let w = |l: f32| ((l as f64 - best as f64) * inv_t).exp();
        let base = top.sum * ((top.max as f64 - best as f64) * inv_t).exp();
        let mut total = base;
        for (i, &l) in top.window.iter().enumerate() {
            if !l.is_nan() {
                total += w(self.penalized(i, l)) - w(l);
            }
        }
        // Cancellation (a dominant token penalized away) leaves too few exact digits.
        if t > 0.0 && !(total.is_finite() && total > 1e-3 * base) {
            return Ok(None);
        }
        let window_logits = window.iter().zip(&top.window).enumerate().map(|(i, (&id, &l))| (id, self.penalized(i, l)));
        let cands: Vec<(u32, f32)> = top.cands.iter().map(|&(id, l)| (id, pen(id, l))).chain(window_logits).collect();
        self.set_head(cands.into_iter(), top.threshold);
        if t == 0.0 {
            return Ok(self.head.first().map(|c| c.id));
        }
        self.draw(&View::Top { best, total })
    }
}

/// An unsigned key ordered as the floats are (`-0` just below `+0`); 0 for NaN. The `topk`
/// kernel uses the same map.
pub fn order_key(v: f32) -> u32 {
    if v.is_nan() {
        return 0;
    }
    let b = v.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// The float of an [`order_key`].
pub fn order_value(k: u32) -> f32 {
    if k & 0x8000_0000 != 0 {
        f32::from_bits(k & 0x7fff_ffff)
    } else {
        f32::from_bits(!k)
    }
}

/// The `k`-th largest order key of the row (1 when it has fewer non-NaN logits), as the `topk`
/// kernel finds it; `keys` is scratch.
pub fn top_threshold(logits: &[f32], k: usize, keys: &mut Vec<u32>) -> u32 {
    keys.clear();
    keys.extend(logits.iter().map(|&l| order_key(l)).filter(|&k| k != 0));
    if keys.len() < k || k == 0 {
        return 1;
    }
    let i = keys.len() - k;
    *keys.select_nth_unstable(i).1
}
