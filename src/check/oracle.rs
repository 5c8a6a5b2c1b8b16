//! **Unstable** (no semver promise). Plain CPU implementations of every kernel: obviously correct, slow, the reference the GPU
//! kernels are tested against (and, in `testmodel`, of the tiny model's forward pass).
//! Weight dequantization lives in `quant::dequantize`.

use half::f16;

/// `y[t, n] = Σ_k x[t, k] · w[n, k]`; also returns `Σ_k |x·w|` per output (for tolerances).
pub fn matmul(x: &[f32], w: &[f32], t: usize, k: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    let mut y = vec![0f32; t * n];
    let mut mag = vec![0f32; t * n];
    for ti in 0..t {
        for ni in 0..n {
            let (mut s, mut a) = (0f64, 0f64);
            for ki in 0..k {
                let p = x[ti * k + ki] as f64 * w[ni * k + ki] as f64;
                s += p;
                a += p.abs();
            }
            y[ti * n + ni] = s as f32;
            mag[ti * n + ni] = a as f32;
        }
    }
    (y, mag)
}

/// x as the matrix-vector kernels that round it to `bits`-bit integers see it
/// (`ops::matvec_int_x`): each 32 values a power of two `d` times integers of magnitude at most
/// 2^(bits - 1), rounded to the nearest (ties to even). `d` is 2^(E - 125 - bits) for E the biased
/// exponent of the 32 values' largest magnitude (clamped to bits - 1..=250), the f32 bits of
/// `shaders/matmul_lanes.wgsl`'s `int_chunk`. Also returns each value's `d` (for tolerances).
/// `x.len()` must be a multiple of 32.
pub fn int_x(x: &[f32], bits: u32) -> (Vec<f32>, Vec<f32>) {
    let mut q = Vec::with_capacity(x.len());
    let mut ds = Vec::with_capacity(x.len());
    for chunk in x.chunks(32) {
        let m = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let e = ((m.to_bits() >> 23) & 255).clamp(bits - 1, 250);
        let (s, d) = (f32::from_bits((bits + 252 - e) << 23), f32::from_bits((e + 2 - bits) << 23));
        q.extend(chunk.iter().map(|v| (v * s).round_ties_even() * d));
        ds.extend(std::iter::repeat_n(d, chunk.len()));
    }
    (q, ds)
}

/// `1 / sqrt(mean(row²) + eps)`, RMSNorm's scale (f64 sums).
pub fn inv_rms(row: &[f32], eps: f32) -> f64 {
    let ms = row.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / row.len() as f64;
    1.0 / (ms + eps as f64).sqrt()
}

/// `y[r] = x[r] / rms(x[r]) · w` for `rows` rows of `dim` (f64 sums).
pub fn rmsnorm(x: &[f32], w: &[f32], rows: usize, dim: usize, eps: f32) -> Vec<f32> {
    let mut y = vec![0f32; rows * dim];
    for r in 0..rows {
        let row = &x[r * dim..(r + 1) * dim];
        let s = inv_rms(row, eps);
        for i in 0..dim {
            y[r * dim + i] = (row[i] as f64 * s * w[i] as f64) as f32;
        }
    }
    y
}

/// `x[t, i] += b[i]` for rows of `b.len()`.
pub fn add_bias(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
    }
}

/// RMSNorm of each of the `heads` heads of `hd` that start `off` floats into each row of
/// `row_stride`, in place, with the weight `w` (f64 sums).
pub fn head_norm(x: &mut [f32], w: &[f32], row_stride: usize, off: usize, heads: usize, eps: f32) {
    let hd = w.len();
    for row in x.chunks_exact_mut(row_stride) {
        for h in 0..heads {
            let v = &mut row[off + h * hd..off + (h + 1) * hd];
            let normed = rmsnorm(v, w, 1, hd, eps);
            v.copy_from_slice(&normed);
        }
    }
}

/// Rotates adjacent pairs of the first `heads` heads of each row in place.
pub fn rope(x: &mut [f32], pos: &[u32], heads: usize, row_stride: usize, head_dim: usize, base: f64) {
    rope_scaled(x, pos, heads, row_stride, head_dim, head_dim, base, None, 1.0)
}

/// [`rope`] over the first `n_rot` dims of each head (the rest as they are), the angle of pair
/// `i` divided by `factors[i]` (Llama-3's `rope_freqs`), the rotated values scaled by `mscale`
/// (ggml's attention factor).
#[allow(clippy::too_many_arguments)]
pub fn rope_scaled(
    x: &mut [f32],
    pos: &[u32],
    heads: usize,
    row_stride: usize,
    head_dim: usize,
    n_rot: usize,
    base: f64,
    factors: Option<&[f32]>,
    mscale: f64,
) {
    for (t, &p) in pos.iter().enumerate() {
        for h in 0..heads {
            for i in 0..n_rot / 2 {
                let f = factors.map_or(1.0, |f| f[i] as f64);
                let a = p as f64 * base.powf(-2.0 * i as f64 / n_rot as f64) / f;
                let (c, s) = (a.cos() * mscale, a.sin() * mscale);
                let j = t * row_stride + h * head_dim + 2 * i;
                let (x0, x1) = (x[j] as f64, x[j + 1] as f64);
                x[j] = (x0 * c - x1 * s) as f32;
                x[j + 1] = (x0 * s + x1 * c) as f32;
            }
        }
    }
}

/// `v · sigmoid(v)`.
pub fn silu(v: f32) -> f32 {
    v / (1.0 + (-v).exp())
}

/// `y[t, j] = silu(x[t, j]) · x[t, f + j]`.
pub fn swiglu(x: &[f32], t: usize, f: usize) -> Vec<f32> {
    let mut y = Vec::with_capacity(t * f);
    for ti in 0..t {
        let row = &x[ti * 2 * f..(ti + 1) * 2 * f];
        y.extend((0..f).map(|j| silu(row[j]) * row[f + j]));
    }
    y
}

/// `gelu(x[t, j]) · x[t, f + j]` per row of `2f`, GELU's tanh approximation in f64.
pub fn geglu(x: &[f32], t: usize, f: usize) -> Vec<f32> {
    let gelu = |v: f32| {
        let v = v as f64;
        0.5 * v * (1.0 + (0.7978845608028654 * (v + 0.044715 * v * v * v)).tanh())
    };
    let mut y = Vec::with_capacity(t * f);
    for ti in 0..t {
        let row = &x[ti * 2 * f..(ti + 1) * 2 * f];
        y.extend((0..f).map(|j| (gelu(row[j]) * row[f + j] as f64) as f32));
    }
    y
}

/// Rows `tokens[i]` of a dequantized `[vocab, dim]` table.
pub fn embed(table: &[f32], tokens: &[u32], dim: usize) -> Vec<f32> {
    tokens.iter().flat_map(|&t| table[t as usize * dim..(t as usize + 1) * dim].iter().copied()).collect()
}

/// Index of the largest value of each row (lowest on ties, NaN never wins).
pub fn argmax(x: &[f32], rows: usize, n: usize) -> Vec<u32> {
    (0..rows)
        .map(|r| {
            let mut best: Option<(f32, usize)> = None;
            for (i, &v) in x[r * n..(r + 1) * n].iter().enumerate() {
                if !v.is_nan() && best.is_none_or(|(b, _)| v > b) {
                    best = Some((v, i));
                }
            }
            best.map_or(u32::MAX, |(_, i)| i as u32)
        })
        .collect()
}

/// Rounds to f16 and back: what the KV pages store.
pub fn f16_round(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

/// Causal GQA attention with contiguous caches: `k`, `v` are `[ctx, n_kv, hd]` (already rounded
/// as stored), `q` is `[t, n_head, hd]`, query `i` attends to positions `0..=pos[i]`; with
/// `window > 0`, only to positions `pos[i] + 1 − window ..= pos[i]`.
#[allow(clippy::too_many_arguments)] // the shape is spelled out, as in the kernel's Params
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    pos: &[u32],
    n_head: usize,
    n_kv: usize,
    hd: usize,
    scale: f32,
    window: usize,
) -> Vec<f32> {
    let mut out = vec![0f32; pos.len() * n_head * hd];
    for (t, &p) in pos.iter().enumerate() {
        for h in 0..n_head {
            let g = h / (n_head / n_kv);
            let qr = &q[(t * n_head + h) * hd..][..hd];
            let lo = if window > 0 { (p as usize + 1).saturating_sub(window) } else { 0 };
            let scores: Vec<f64> = (lo..=p as usize)
                .map(|j| {
                    let kr = &k[(j * n_kv + g) * hd..][..hd];
                    qr.iter().zip(kr).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>() * scale as f64
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for d in 0..hd {
                let acc: f64 = e.iter().zip(lo..).map(|(w, j)| w * v[(j * n_kv + g) * hd + d] as f64).sum();
                out[(t * n_head + h) * hd + d] = (acc / z) as f32;
            }
        }
    }
    out
}

/// `pages` (`[pages, n_kv, page, words]`) with the first `n` positions of page `src` copied over
/// page `dst`, every head.
pub fn kv_copy(pages: &[u32], [_, n_kv, page, words]: [usize; 4], src: usize, dst: usize, n: usize) -> Vec<u32> {
    let mut out = pages.to_vec();
    let page_words = n_kv * page * words;
    for h in 0..n_kv {
        for s in 0..n {
            let off = (h * page + s) * words;
            let (from, to) = (src * page_words + off, dst * page_words + off);
            out[to..to + words].copy_from_slice(&pages[from..from + words]);
        }
    }
    out
}

/// The `topk` kernel's output (shaders/topk.wgsl) for one row, candidates in id order and the
/// sum in f64 (the kernel's is f32, in another order).
pub fn topk(x: &[f32], k: usize, cap: usize, inv_t: f32, window: &[u32]) -> (Vec<u32>, f64) {
    use crate::engine::sample::{order_key, order_value, top_threshold};
    let threshold = top_threshold(x, k, &mut Vec::new());
    let max_key = x.iter().map(|&v| order_key(v)).max().unwrap_or(0);
    let m = order_value(max_key);
    let sum = if max_key != 0 && m.is_finite() {
        x.iter().filter(|v| !v.is_nan()).map(|&v| ((v - m) as f64 * inv_t as f64).exp()).sum()
    } else {
        0.0
    };
    let cands: Vec<usize> = (0..x.len()).filter(|&i| order_key(x[i]) >= threshold).collect();
    use crate::ops::TopkLayout as L;
    let layout = L { cap, window: window.len() };
    let mut out = vec![0u32; layout.window_at()];
    out[L::COUNT] = cands.len() as u32;
    out[L::THRESHOLD] = threshold;
    out[L::MAX] = m.to_bits();
    out[L::SUM] = (sum as f32).to_bits();
    for (slot, &i) in cands.iter().take(cap).enumerate() {
        out[L::CANDS + 2 * slot] = i as u32;
        out[L::CANDS + 2 * slot + 1] = x[i].to_bits();
    }
    out.extend(window.iter().map(|&id| x.get(id as usize).copied().unwrap_or(0.0).to_bits()));
    (out, sum)
}
