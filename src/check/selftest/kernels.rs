//! Each kernel check's body: random inputs, the kernel on the GPU, its CPU oracle, the
//! comparison.

use crate::check::oracle;
use crate::engine::sample::rng::Rng;
use crate::error::{Error, Result};
use crate::gpu::{Batch, Gpu};
use crate::model::quant::{self, Format};
use crate::ops::{self, AttnShape, KvPages, KvSource, RopeShape, Split, Variant, Weight, XLoad};

use super::{compare, execute, ops_once, weights, Check, Fused, Report};

impl Check {
    /// Runs the check; with `reps > 0` also times `reps` back-to-back runs of the kernel.
    pub async fn run(&self, gpu: &Gpu, seed: u64, reps: usize) -> Result<Report> {
        let mut rng = Rng(seed);
        let name = self.name();
        match *self {
            Check::Matmul { format, t, k, n } => matmul(gpu, &mut rng, name, [t, k, n], format, false, reps).await,
            Check::MatmulAcc { format, t, k, n } => matmul(gpu, &mut rng, name, [t, k, n], format, true, reps).await,
            Check::MatmulGlu { format, t, k, f, gelu } => matmul_glu(gpu, &mut rng, name, [t, k, f], format, gelu).await,
            Check::Matvec { format, k, n, x_row, op, acc, kind } => {
                let width = if matches!(op, Fused::SwiGlu | Fused::GeGlu) { 2 * k } else { k };
                let x = rng.vec((x_row + 1) * width, 1.0);
                let nw = rng.vec(k, 1.0);
                let wq = weights(&mut rng, format, n * k, 0.5)?;
                let w = Weight::upload(gpu, "w", format, &wq, n, k).await?;
                let (xb, nwb) = (gpu.upload("x", &x).await?, gpu.upload("norm weight", &nw).await?);
                let y0 = rng.vec(n, 1.0);
                let yb = gpu.upload("y", &y0).await?;
                let row = &x[x_row * width..];
                let mut xr = match op {
                    Fused::None => row[..k].to_vec(),
                    Fused::RmsNorm => oracle::rmsnorm(row, &nw, 1, k, 1e-5),
                    Fused::SwiGlu => oracle::swiglu(row, 1, k),
                    Fused::GeGlu => oracle::geglu(row, 1, k),
                };
                let values = quant::dequantize(format, &wq)?;
                // Where the kernel rounds x to integers, the x it multiplies: RMSNorm's x ∘ norm
                // weight rounded (f32 products, as the kernel's), then scaled by 1/rms. An activation
                // the GPU computes differently in its last bit may round one value the other way:
                // `flip` allows one value's step (d · |w|) a row for the gated ones.
                let mut flip = vec![0f32; n];
                if let Some(bits) = ops::matvec_int_x(gpu, kind, format) {
                    match op {
                        Fused::RmsNorm => {
                            let xw: Vec<f32> = row[..k].iter().zip(&nw).map(|(a, b)| a * b).collect();
                            let r = oracle::inv_rms(&row[..k], 1e-5);
                            xr = oracle::int_x(&xw, bits).0.iter().map(|v| (*v as f64 * r) as f32).collect();
                        }
                        _ => {
                            let (q, d) = oracle::int_x(&xr, bits);
                            if matches!(op, Fused::SwiGlu | Fused::GeGlu) {
                                for (ni, f) in flip.iter_mut().enumerate() {
                                    *f = (0..k).map(|ki| d[ki] * values[ni * k + ki].abs()).fold(0f32, f32::max);
                                }
                            }
                            xr = q;
                        }
                    }
                }
                let xl = match op {
                    Fused::None => XLoad::Plain,
                    Fused::RmsNorm => XLoad::RmsNorm { w: &nwb, eps: 1e-5 },
                    Fused::SwiGlu => XLoad::SwiGlu,
                    Fused::GeGlu => XLoad::GeGlu,
                };
                let (mut want, mag) = oracle::matmul(&xr, &values, 1, k, n);
                if acc {
                    want.iter_mut().zip(&y0).for_each(|(a, b)| *a += b);
                }
                ops_once(gpu, |b| ops::matvec(b, &xb, x_row, xl, &w, &yb, acc, kind)).await?;
                let got = gpu.read_f32(&yb, n).await?;
                let max_err = compare(&name, "y", &got, &want, |i| 1e-5 + 3e-5 * (mag[i] + if acc { y0[i].abs() } else { 0.0 }) + flip[i])?;
                let ms = if reps > 0 && !acc {
                    execute(gpu, reps, |b| ops::matvec(b, &xb, x_row, xl, &w, &yb, false, kind)).await?
                } else {
                    None
                };
                Ok(Report::timed(name, max_err, ms, w.bytes() as f64, "GB/s"))
            }
            Check::RmsNorm { rows, dim } => {
                let x = rng.vec(rows * dim, 2.0);
                let w = rng.vec(dim, 1.0);
                let (xb, wb) = (gpu.upload("x", &x).await?, gpu.upload("w", &w).await?);
                let yb = gpu.storage("y", 4 * (rows * dim) as u64).await?;
                let run = |b: &mut Batch| ops::rmsnorm(b, &xb, &wb, &yb, rows, dim, 1e-5);
                let ms = execute(gpu, reps, run).await?;
                let got = gpu.read_f32(&yb, rows * dim).await?;
                let want = oracle::rmsnorm(&x, &w, rows, dim, 1e-5);
                let mut max_err = compare(&name, "y", &got, &want, |i| 1e-5 + 1e-5 * want[i].abs())?;
                // Added to a residual (Gemma-3's post-norms).
                let y0 = rng.vec(rows * dim, 1.0);
                gpu.write(&yb, 0, &y0);
                ops_once(gpu, |b| ops::rmsnorm_add(b, &xb, &wb, &yb, rows, dim, 1e-5)).await?;
                let got = gpu.read_f32(&yb, rows * dim).await?;
                let want: Vec<f32> = want.iter().zip(&y0).map(|(a, b)| a + b).collect();
                max_err = max_err.max(compare(&name, "y +=", &got, &want, |i| 1e-5 + 1e-5 * want[i].abs())?);
                Ok(Report::timed(name, max_err, ms, (rows * dim * 8) as f64, "GB/s"))
            }
            Check::Rope { t, heads, extra_heads, head_dim, max_pos } => {
                rope(gpu, &mut rng, name, [t, heads, extra_heads, head_dim, head_dim, max_pos], 10000.0, false).await
            }
            Check::RopeScaled { t, heads, head_dim, n_rot } => {
                rope(gpu, &mut rng, name, [t, heads, 0, head_dim, n_rot, 4096], 500000.0, true).await
            }
            Check::Bias { t, n } => {
                let (x, bias) = (rng.vec(t * n, 2.0), rng.vec(n, 1.0));
                let (xb, bb) = (gpu.upload("x", &x).await?, gpu.upload("bias", &bias).await?);
                ops_once(gpu, |b| ops::add_bias(b, &xb, &bb, t, n)).await?;
                let got = gpu.read_f32(&xb, t * n).await?;
                let mut want = x.clone();
                oracle::add_bias(&mut want, &bias);
                let max_err = compare(&name, "x", &got, &want, |_| 0.0)?;
                Ok(Report { name, max_err, ms: None, rate: None })
            }
            Check::HeadNorm { t, heads, skip, head_dim, split } => {
                let stride = (skip + heads + 1) * head_dim;
                let (x, w, w2) = (rng.vec(t * stride, 2.0), rng.vec(head_dim, 1.0), rng.vec(head_dim, 1.0));
                let (xb, wb, w2b) = (gpu.upload("x", &x).await?, gpu.upload("w", &w).await?, gpu.upload("w2", &w2).await?);
                let shape = ops::HeadsShape { t, heads, row_stride: stride, off: skip * head_dim, head_dim, split };
                ops_once(gpu, |b| ops::head_norm(b, &xb, [&wb, &w2b], &shape, 1e-6)).await?;
                let got = gpu.read_f32(&xb, t * stride).await?;
                let mut want = x.clone();
                oracle::head_norm(&mut want, &w, stride, skip * head_dim, split, 1e-6);
                oracle::head_norm(&mut want, &w2, stride, (skip + split) * head_dim, heads - split, 1e-6);
                let max_err = compare(&name, "x", &got, &want, |i| 1e-6 + 1e-5 * want[i].abs())?;
                Ok(Report { name, max_err, ms: None, rate: None })
            }
            Check::SwiGlu { t, f } => {
                let x = rng.vec(t * 2 * f, 4.0);
                let xb = gpu.upload("x", &x).await?;
                let yb = gpu.storage("y", 4 * (t * f) as u64).await?;
                let ms = execute(gpu, reps, |b| ops::swiglu(b, &xb, &yb, t, f)).await?;
                let got = gpu.read_f32(&yb, t * f).await?;
                let want = oracle::swiglu(&x, t, f);
                let mut max_err = compare(&name, "y", &got, &want, |i| 1e-6 + 1e-5 * want[i].abs())?;
                // GeGLU (Gemma), past GELU's saturation points too.
                let mut xg = x.clone();
                xg[0] = 12.0;
                xg[t * 2 * f - f - 1] = -11.0;
                gpu.write(&xb, 0, &xg);
                ops_once(gpu, |b| ops::geglu(b, &xb, &yb, t, f)).await?;
                let got = gpu.read_f32(&yb, t * f).await?;
                let want = oracle::geglu(&xg, t, f);
                max_err = max_err.max(compare(&name, "geglu y", &got, &want, |i| 1e-6 + 1e-5 * want[i].abs())?);
                Ok(Report::timed(name, max_err, ms, (t * f * 12) as f64, "GB/s"))
            }
            Check::Embed { format, t, vocab, dim } => {
                let table = weights(&mut rng, format, vocab * dim, 1.0)?;
                let mut tokens: Vec<u32> = (0..t).map(|_| rng.below(vocab) as u32).collect();
                tokens[0] = vocab as u32 - 1;
                let w = Weight::upload(gpu, "embeddings", format, &table, vocab, dim).await?;
                let tb = gpu.upload("tokens", &tokens).await?;
                let yb = gpu.storage("y", 4 * (t * dim) as u64).await?;
                // Unscaled, then scaled (Gemma's √width).
                let mut max_err = 0f32;
                for scale in [1.0f32, 25.3] {
                    ops_once(gpu, |b| ops::embed(b, &tb, &w, &yb, t, scale)).await?;
                    let got = gpu.read_f32(&yb, t * dim).await?;
                    let want: Vec<f32> =
                        oracle::embed(&quant::dequantize(format, &table)?, &tokens, dim).iter().map(|v| v * scale).collect();
                    // The GPU computes d·q − m as the oracle does, but may fuse it (an FMA).
                    max_err = max_err.max(compare(&name, "y", &got, &want, |i| 1e-6 + 1e-6 * want[i].abs())?);
                }
                Ok(Report { name, max_err, ms: None, rate: None })
            }
            Check::Parts { formats, t, k, n, group_rows } => parts(gpu, &mut rng, name, formats, [t, k, n], group_rows).await,
            Check::Argmax { rows, n } => {
                let mut x = rng.vec(rows * n, 10.0);
                // A tie (the lower index must win) and a NaN (must never win) in row 0.
                let top = x[..n].iter().copied().fold(f32::MIN, f32::max) + 1.0;
                x[n / 2] = top;
                x[n - 1] = top;
                x[0] = f32::NAN;
                let xb = gpu.upload("x", &x).await?;
                let ob = gpu.storage("out", 4 * rows as u64).await?;
                ops_once(gpu, |b| ops::argmax(b, &xb, &ob, rows, n)).await?;
                let got = gpu.read_u32(&ob, rows).await?;
                let want = oracle::argmax(&x, rows, n);
                if let Some(r) = (0..rows).find(|&r| got[r] != want[r]) {
                    return Err(Error::Mismatch(format!("{name}: out[{r}] = {} (GPU) vs {} (CPU)", got[r], want[r])));
                }
                Ok(Report { name, max_err: 0.0, ms: None, rate: None })
            }
            Check::TopK { n, k, cap, window, flat } => {
                let mut x = if flat { vec![0.25; n] } else { rng.vec(n, 8.0) };
                if !flat {
                    // A NaN (never a candidate, not in the sum), a -inf, and a tie across the
                    // threshold (both tokens are candidates).
                    x[n / 3] = f32::NAN;
                    x[n / 5] = f32::NEG_INFINITY;
                    let mut sorted: Vec<f32> = x.iter().copied().filter(|v| !v.is_nan()).collect();
                    sorted.sort_by(|a, b| b.total_cmp(a));
                    if let Some(&kth) = sorted.get(k - 1) {
                        let i = x.iter().position(|&v| v < kth && v.is_finite()).unwrap_or(0);
                        x[i] = kth;
                    }
                }
                // Window ids: some tokens, one repeated, one past the row (reads as 0).
                let win: Vec<u32> = (0..window).map(|i| if i + 1 == window { n as u32 + 5 } else { rng.below(n) as u32 }).collect();
                let inv_t = 1.0 / 0.8;
                let xb = gpu.upload("x", &x).await?;
                let wb = gpu.upload("window", &if win.is_empty() { vec![0] } else { win.clone() }).await?;
                let layout = ops::TopkLayout { cap, window };
                let ob = gpu.storage("out", 4 * layout.words() as u64).await?;
                ops_once(gpu, |b| ops::topk(b, &xb, n, k, cap, inv_t, &wb, window, &ob)).await?;
                let got = gpu.read_u32(&ob, layout.words()).await?;
                let (want, sum) = oracle::topk(&x, k, cap, inv_t, &win);
                let (g, c) = (layout.parse(&got, n)?, layout.parse(&want, n)?);
                if (g.count, g.threshold, g.max.to_bits()) != (c.count, c.threshold, c.max.to_bits()) {
                    return Err(Error::Mismatch(format!(
                        "{name}: count, threshold, max = {:?} (GPU) vs {:?} (CPU)",
                        (g.count, g.threshold, g.max),
                        (c.count, c.threshold, c.max)
                    )));
                }
                let gsum = g.sum;
                let err = ((gsum - sum) / sum).abs() as f32;
                if err.is_nan() || err >= 1e-5 {
                    return Err(Error::Mismatch(format!("{name}: sum {gsum} (GPU) vs {sum} (CPU)")));
                }
                let pairs = |t: &ops::Top| {
                    let mut p: Vec<(u32, u32)> = t.cands.iter().map(|&(id, l)| (id, l.to_bits())).collect();
                    p.sort_unstable();
                    p
                };
                let (gp, wp) = (pairs(&g), pairs(&c));
                let full = c.count <= cap;
                // With more ties than slots the kernel keeps whichever came first: any of them.
                let valid = |&(id, bits): &(u32, u32)| {
                    (id as usize) < n && x[id as usize].to_bits() == bits && crate::engine::sample::order_key(x[id as usize]) >= c.threshold
                };
                let distinct = gp.windows(2).all(|w| w[0].0 != w[1].0);
                if (full && gp != wp) || !gp.iter().all(valid) || !distinct {
                    return Err(Error::Mismatch(format!(
                        "{name}: candidates {:?}… (GPU) vs {:?}… (CPU)",
                        &gp[..gp.len().min(6)],
                        &wp[..wp.len().min(6)]
                    )));
                }
                let bits = |t: &ops::Top| t.window.iter().map(|l| l.to_bits()).collect::<Vec<u32>>();
                if bits(&g) != bits(&c) {
                    return Err(Error::Mismatch(format!("{name}: window logits {:?} (GPU) vs {:?} (CPU)", g.window, c.window)));
                }
                Ok(Report { name, max_err: err, ms: None, rate: None })
            }
            Check::ArgmaxFeed { n, slot } => {
                let x = rng.vec(n, 10.0);
                let xb = gpu.upload("x", &x).await?;
                let ids0: Vec<u32> = (0..slot + 2).map(|i| 1000 + i as u32).collect();
                let ib = gpu.upload("ids", &ids0).await?;
                let (tb, pb) = (gpu.upload("tokens", &[7u32]).await?, gpu.upload("pos", &[41u32]).await?);
                ops_once(gpu, |b| ops::argmax_feed(b, &xb, n, &ib, slot, &tb, &pb)).await?;
                let best = oracle::argmax(&x, 1, n)[0];
                let mut want = ids0.clone();
                want[slot] = best;
                let (ids, token, pos) = (gpu.read_u32(&ib, slot + 2).await?, gpu.read_u32(&tb, 1).await?, gpu.read_u32(&pb, 1).await?);
                if ids != want || token != [best] || pos != [42] {
                    return Err(Error::Mismatch(format!(
                        "{name}: ids {ids:?} token {token:?} pos {pos:?}; want ids {want:?} token {best} pos 42"
                    )));
                }
                Ok(Report { name, max_err: 0.0, ms: None, rate: None })
            }
            Check::Attention { past, t, n_head, n_kv, head_dim, page, pool } => {
                attention(gpu, &mut rng, name, [past, t, n_head, n_kv, head_dim, page, pool], reps).await
            }
            Check::DecodeAttention { past, n_head, n_kv, head_dim, page, pool } => {
                decode_attention(gpu, &mut rng, name, [past, n_head, n_kv, head_dim, page, pool], reps).await
            }
            Check::KvCopy { pages, page, n_kv, head_dim, n } => {
                let kv = KvPages::new(gpu, pages, page, n_kv, head_dim).await?;
                let words = pages * n_kv * page * head_dim / 2;
                let k0: Vec<u32> = (0..words).map(|_| rng.next_u64() as u32).collect();
                let v0: Vec<u32> = (0..words).map(|_| rng.next_u64() as u32).collect();
                gpu.write(&kv.k, 0, &k0);
                gpu.write(&kv.v, 0, &v0);
                let (src, dst) = (pages - 1, rng.below(pages - 1));
                ops_once(gpu, |b| ops::kv_copy(b, &kv, src, dst, n)).await?;
                for (what, buf, before) in [("k", &kv.k, &k0), ("v", &kv.v, &v0)] {
                    let got: Vec<u32> = bytemuck::pod_collect_to_vec(&gpu.read(buf, buf.size()).await?);
                    let want = oracle::kv_copy(before, [pages, n_kv, page, head_dim / 2], src, dst, n);
                    if let Some(i) = (0..words).find(|&i| got[i] != want[i]) {
                        return Err(Error::Mismatch(format!("{name}: {what}[{i}] = {:#x} (GPU) vs {:#x} (CPU)", got[i], want[i])));
                    }
                }
                Ok(Report { name, max_err: 0.0, ms: None, rate: None })
            }
        }
    }
}

/// A matrix of two formats (rows `..n/2` and `n/2..`), each split into parts of `group_rows` row
/// groups: the matmul on every kernel, and the lookup of rows from both halves.
async fn parts(gpu: &Gpu, rng: &mut Rng, name: String, formats: [Format; 2], [t, k, n]: [usize; 3], group_rows: usize) -> Result<Report> {
    let half = n / 2;
    let (wa, wb) = (weights(rng, formats[0], half * k, 0.5)?, weights(rng, formats[1], (n - half) * k, 0.5)?);
    let limit = |f: Format| (group_rows * f.gpu_row_words(k) * 4 * quant::ROW_GROUP) as u64;
    let a = Weight::upload_limited(gpu, "w", formats[0], std::borrow::Cow::Borrowed(&wa), half, k, limit(formats[0])).await?;
    let b = Weight::upload_limited(gpu, "w", formats[1], std::borrow::Cow::Borrowed(&wb), n - half, k, limit(formats[1])).await?;
    let want_parts = half.div_ceil(group_rows * quant::ROW_GROUP) + (n - half).div_ceil(group_rows * quant::ROW_GROUP);
    let w = Weight::concat(vec![a, b])?;
    if w.parts.len() != want_parts || w.n != n {
        return Err(Error::Mismatch(format!("{name}: {} parts of {} rows, expected {want_parts} of {n}", w.parts.len(), w.n)));
    }
    let mut values = quant::dequantize(formats[0], &wa)?;
    values.extend(quant::dequantize(formats[1], &wb)?);
    let x = rng.vec(t * k, 1.0);
    let xb = gpu.upload("x", &x).await?;
    let yb = gpu.storage("y", 4 * (t * n) as u64).await?;
    let (want, mag) = oracle::matmul(&x, &values, t, k, n);
    let mut max_err = 0f32;
    // NaN in `y` before each run: a variant that leaves a value unwritten must not pass on the
    // previous run's answer.
    let poison = vec![f32::NAN; t * n];
    for kind in Variant::available(gpu) {
        gpu.write(&yb, 0, &poison);
        ops_once(gpu, |b| ops::matmul_exact(b, &xb, &w, &yb, t, false, kind)).await?;
        let got = gpu.read_f32(&yb, t * n).await?;
        max_err = max_err.max(compare(&name, &format!("y (tiled, {kind:?})"), &got, &want, |i| 1e-5 + 2e-5 * mag[i])?);
        gpu.write(&yb, 0, &poison);
        ops_once(gpu, |b| ops::matvec(b, &xb, t - 1, XLoad::Plain, &w, &yb, false, kind)).await?;
        let got = gpu.read_f32(&yb, n).await?;
        let last = (t - 1) * n;
        max_err = max_err.max(compare(&name, &format!("y (matvec, {kind:?})"), &got, &want[last..], |i| 1e-5 + 3e-5 * mag[last + i])?);
    }
    // Rows from both halves and from every part.
    let tokens: Vec<u32> = (0..n as u32).rev().step_by(7).chain([0, half as u32]).collect();
    let tb = gpu.upload("tokens", &tokens).await?;
    let eb = gpu.storage("rows", 4 * (tokens.len() * k) as u64).await?;
    ops_once(gpu, |b| ops::embed(b, &tb, &w, &eb, tokens.len(), 1.0)).await?;
    let got = gpu.read_f32(&eb, tokens.len() * k).await?;
    let want = oracle::embed(&values, &tokens, k);
    max_err = max_err.max(compare(&name, "rows", &got, &want, |i| 1e-6 + 1e-6 * want[i].abs())?);
    Ok(Report { name, max_err, ms: None, rate: None })
}

async fn matmul(gpu: &Gpu, rng: &mut Rng, name: String, [t, k, n]: [usize; 3], format: Format, acc: bool, reps: usize) -> Result<Report> {
    let x = rng.vec(t * k, 1.0);
    let wq = weights(rng, format, n * k, 0.5)?;
    let w = Weight::upload(gpu, "w", format, &wq, n, k).await?;
    let xb = gpu.upload("x", &x).await?;
    let y0 = rng.vec(t * n, 1.0);
    let yb = gpu.upload("y", &y0).await?;
    let values = quant::dequantize(format, &wq)?;
    let (want, mag) = oracle::matmul(&x, &values, t, k, n);
    // A few tokens run on the matrix-vector kernel, which may round x to integers.
    let (want_mv, mag_mv) = match ops::matmul_int_x(gpu, format, t) {
        Some(bits) => oracle::matmul(&oracle::int_x(&x, bits).0, &values, t, k, n),
        None => (want.clone(), mag.clone()),
    };
    let got = if acc {
        ops_once(gpu, |b| ops::matmul_acc(b, &xb, &w, &yb, t)).await?;
        let got = gpu.read_f32(&yb, t * n).await?;
        let want: Vec<f32> = want.iter().zip(&y0).map(|(a, b)| a + b).collect();
        let max_err = compare(&name, "y", &got, &want, |i| 1e-5 + 2e-5 * (mag[i] + y0[i].abs()))?;
        for kind in Variant::available(gpu) {
            tiled_alone_as_in_all(gpu, &name, kind, &x, &w, Some(&y0), t).await?;
        }
        return Ok(Report { name, max_err, ms: None, rate: None });
    } else {
        let ms = execute(gpu, reps, |b| ops::matmul(b, &xb, &w, &yb, t)).await?;
        (gpu.read_f32(&yb, t * n).await?, ms)
    };
    let (got, ms) = got;
    let mut max_err = compare(&name, "y", &got, &want_mv, |i| 1e-5 + 2e-5 * mag_mv[i])?;
    // The tiled kernel of every variant, whatever T is (prefill's matmul_exact).
    for kind in Variant::available(gpu) {
        let got = tiled_alone_as_in_all(gpu, &name, kind, &x, &w, None, t).await?;
        max_err = max_err.max(compare(&name, &format!("y (tiled, {kind:?})"), &got, &want, |i| 1e-5 + 2e-5 * mag[i])?);
    }
    let (work, unit) = if t == 1 { (w.bytes() as f64, "GB/s") } else { (2.0 * (t * k * n) as f64, "GFLOP/s") };
    Ok(Report::timed(name, max_err, ms, work, unit))
}

/// `ops::matmul_glu` on every variant: within the oracle's tolerance; the same bits as the tiled
/// matmul into gate|up rows followed by the activation's kernel (prefill fuses them; a prompt's
/// K/V must not depend on which path a build takes); a few tokens alone the same bits as with the
/// others.
async fn matmul_glu(gpu: &Gpu, rng: &mut Rng, name: String, [t, k, f]: [usize; 3], format: Format, gelu: bool) -> Result<Report> {
    let n = 2 * f;
    let x = rng.vec(t * k, 1.0);
    let wq = weights(rng, format, n * k, 0.5)?;
    let w = Weight::upload(gpu, "w", format, &wq, n, k).await?;
    let (xb, yb) = (gpu.upload("x", &x).await?, gpu.storage("y", 4 * (t * f) as u64).await?);
    let act = if gelu { ops::Glu::GeGlu } else { ops::Glu::SwiGlu };
    // An odd F is refused (the model then runs the activation's own kernel).
    if f % 2 == 1 {
        return match ops_once(gpu, |b| ops::matmul_glu(b, &xb, &w, &yb, t, act, Variant::for_adapter(gpu))).await {
            Err(Error::Shape { .. }) if !ops::glu_fuses(&w) => Ok(Report { name, max_err: 0.0, ms: None, rate: None }),
            other => Err(Error::Mismatch(format!("{name}: an odd F not refused as a shape error: {:?}", other.map(|_| ())))),
        };
    }
    let (gu, y2) = (gpu.storage("gate|up", 4 * (t * n) as u64).await?, gpu.storage("y unfused", 4 * (t * f) as u64).await?);
    let (sums, mag) = oracle::matmul(&x, &quant::dequantize(format, &wq)?, t, k, n);
    let want = if gelu { oracle::geglu(&sums, t, f) } else { oracle::swiglu(&sums, t, f) };
    let mut max_err = 0f32;
    for kind in Variant::available(gpu) {
        ops_once(gpu, |b| ops::matmul_glu(b, &xb, &w, &yb, t, act, kind)).await?;
        let got = gpu.read_f32(&yb, t * f).await?;
        // The activation's error on top of the sums' (its slope is below 1.2 in magnitude, and the
        // up value multiplies it).
        let tol = |i: usize| {
            let (ti, j) = (i / f, i % f);
            let (g, u) = (sums[ti * n + j].abs(), sums[ti * n + f + j].abs());
            1e-5 + 3e-5 * (mag[ti * n + j] * 1.2 * u + mag[ti * n + f + j] * (g + 1.0)) + 1e-5 * want[i].abs()
        };
        max_err = max_err.max(compare(&name, &format!("y ({kind:?})"), &got, &want, tol)?);
        ops_once(gpu, |b| {
            ops::matmul_exact(b, &xb, &w, &gu, t, false, kind)?;
            if gelu {
                ops::geglu(b, &gu, &y2, t, f)
            } else {
                ops::swiglu(b, &gu, &y2, t, f)
            }
        })
        .await?;
        let unfused = gpu.read_f32(&y2, t * f).await?;
        if let Some(i) = (0..t * f).find(|&i| got[i].to_bits() != unfused[i].to_bits()) {
            return Err(Error::Mismatch(format!(
                "{name} ({kind:?}): y[{i}] = {} fused, {} unfused: not the same bits",
                got[i], unfused[i]
            )));
        }
        // A few tokens alone, from the first and from the last: the same bits as with the others
        // (a cached prefix and a new suffix get what the whole prompt at once gets).
        let m = (t / 2).clamp(1, 5);
        for j0 in [0, t - m] {
            let xh = gpu.upload("x alone", &x[j0 * k..(j0 + m) * k]).await?;
            ops_once(gpu, |b| ops::matmul_glu(b, &xh, &w, &y2, m, act, kind)).await?;
            let alone = gpu.read_f32(&y2, m * f).await?;
            if let Some(i) = (0..m * f).find(|&i| alone[i].to_bits() != got[j0 * f + i].to_bits()) {
                return Err(Error::Mismatch(format!(
                    "{name} ({kind:?}): token {} alone gives {} at column {}, with the others {}",
                    j0 + i / f,
                    alone[i],
                    i % f,
                    got[j0 * f + i]
                )));
            }
        }
    }
    Ok(Report { name, max_err, ms: None, rate: None })
}

/// The `t` tokens of x on `kind`'s tiled kernel (prefill's `matmul_exact`; with `y0`, as
/// `y += x · Wᵀ` onto it), returned; and a token's result there does not depend on the tokens
/// beside it, bit for bit: a cached prefix and a new suffix get the K/V of the whole prompt at
/// once, also where the tile shape changes with T (Coop below 64 tokens) and where the suffix
/// starts inside a tile. So a few of the tokens run alone too, from token 0 and from a later one.
async fn tiled_alone_as_in_all(
    gpu: &Gpu,
    name: &str,
    kind: Variant,
    x: &[f32],
    w: &Weight,
    y0: Option<&[f32]>,
    t: usize,
) -> Result<Vec<f32>> {
    let (k, n) = (w.k, w.n);
    let acc = y0.is_some();
    let zeros = vec![0f32; if acc { 0 } else { t * n }];
    let y0 = y0.unwrap_or(&zeros);
    let (xb, yb) = (gpu.upload("x", x).await?, gpu.upload("y", y0).await?);
    ops_once(gpu, |b| ops::matmul_exact(b, &xb, w, &yb, t, acc, kind)).await?;
    let all = gpu.read_f32(&yb, t * n).await?;
    if t < 2 {
        return Ok(all);
    }
    let m = (t / 2).clamp(1, 5);
    for j in [0, (t - m).min(3)] {
        let xh = gpu.upload("x alone", &x[j * k..(j + m) * k]).await?;
        let yh = gpu.upload("y alone", &y0[j * n..(j + m) * n]).await?;
        ops_once(gpu, |b| ops::matmul_exact(b, &xh, w, &yh, m, acc, kind)).await?;
        let alone = gpu.read_f32(&yh, m * n).await?;
        if let Some(i) = (0..m * n).find(|&i| alone[i].to_bits() != all[j * n + i].to_bits()) {
            return Err(Error::Mismatch(format!(
                "{name}: y (tiled, {kind:?}{}) of token {} is {} in {m} tokens from {j} but {} in {t}",
                if acc { ", +=" } else { "" },
                j + i / n,
                alone[i],
                all[j * n + i]
            )));
        }
    }
    Ok(all)
}

/// The page table of a `ctx`-token sequence: a shuffled subset of a pool of `pool` pages of
/// `page` tokens, so page order ≠ memory order.
fn page_table(rng: &mut Rng, ctx: usize, page: usize, pool: usize) -> Result<Vec<u32>> {
    let n_pages = ctx.div_ceil(page);
    if n_pages > pool {
        return Err(Error::shape("attention check", format!("{ctx} tokens need {n_pages} pages, pool has {pool}")));
    }
    let mut ids: Vec<u32> = (0..pool as u32).collect();
    for i in (1..pool).rev() {
        ids.swap(i, rng.below(i + 1));
    }
    ids.truncate(n_pages);
    Ok(ids)
}

/// `ops::rope_kv_write` (prefill's RoPE and KV write in one dispatch) against `rope` then
/// `kv_write` on the same rows, pages and table: Q and every page word the same bits (the pages
/// start as random words, so a word either path leaves alone must be left alone by both).
async fn rope_kv(gpu: &Gpu, rng: &mut Rng, name: &str, s: [usize; 7]) -> Result<()> {
    let [past, t, n_head, n_kv, hd, page, pool] = s;
    let ids = page_table(rng, past + t, page, pool)?;
    let (qw, kw) = (n_head * hd, n_kv * hd);
    let stride = qw + 2 * kw + 2; // and two floats of padding a row
    let rows = rng.vec(t * stride, 2.0);
    let pos: Vec<u32> = (past as u32..(past + t) as u32).collect();
    let (tb, pb) = (gpu.upload("page table", &ids).await?, gpu.upload("pos", &pos).await?);
    let max_pos = past + t + 7;
    let table: Vec<f32> = ops::rope_table(max_pos, hd, 10000.0).into_iter().flatten().collect();
    let rope = gpu.upload("rope", &table).await?;
    let words = pool * n_kv * page * hd / 2;
    let (k0, v0): (Vec<u32>, Vec<u32>) = (0..words).map(|_| (rng.next_u64() as u32, rng.next_u64() as u32)).unzip();
    let mut out = Vec::new();
    for fused in [false, true] {
        let kv = KvPages::new(gpu, pool, page, n_kv, hd).await?;
        gpu.write(&kv.k, 0, &k0);
        gpu.write(&kv.v, 0, &v0);
        let rb = gpu.upload("qkv", &rows).await?;
        ops_once(gpu, |b| {
            if fused {
                return ops::rope_kv_write(b, &rb, t, n_head, stride, &pb, &rope, &tb, ids.len(), &kv);
            }
            let shape = RopeShape { t, heads: n_head + n_kv, row_stride: stride, head_dim: hd };
            ops::rope(b, &rb, &pb, &rope, &shape)?;
            let src = KvSource { t, row_stride: stride, k_off: qw, v_off: qw + kw };
            ops::kv_write(b, &rb, &src, &pb, &tb, ids.len(), &kv)
        })
        .await?;
        let q: Vec<f32> = gpu.read_f32(&rb, t * stride).await?.chunks_exact(stride).flat_map(|r| r[..qw].to_vec()).collect();
        let k: Vec<u32> = bytemuck::pod_collect_to_vec(&gpu.read(&kv.k, kv.k.size()).await?);
        let v: Vec<u32> = bytemuck::pod_collect_to_vec(&gpu.read(&kv.v, kv.v.size()).await?);
        out.push((q, k, v));
    }
    let ((q0, ka, va), (q1, kb, vb)) = (&out[0], &out[1]);
    if let Some(i) = (0..q0.len()).find(|&i| q0[i].to_bits() != q1[i].to_bits()) {
        return Err(Error::Mismatch(format!("{name}: q[{i}] = {} fused, {} rope then kv_write", q1[i], q0[i])));
    }
    for (what, a, b) in [("k", ka, kb), ("v", va, vb)] {
        if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
            return Err(Error::Mismatch(format!("{name}: {what} page word {i} = {:#x} fused, {:#x} rope then kv_write", b[i], a[i])));
        }
    }
    // And the pages were written at all (the new tokens' words differ from the random start).
    if ka == &k0 {
        return Err(Error::Mismatch(format!("{name}: no K page word written")));
    }
    Ok(())
}

async fn attention(gpu: &Gpu, rng: &mut Rng, name: String, s: [usize; 7], reps: usize) -> Result<Report> {
    let [past, t, n_head, n_kv, hd, page, pool] = s;
    let ctx = past + t;
    let ids = page_table(rng, ctx, page, pool)?;
    let (table, n_pages) = (&ids[..], ids.len());
    // Rows hold Q | K | V as the model's fused projection will produce them.
    let (qw, kw) = (n_head * hd, n_kv * hd);
    let stride = qw + 2 * kw;
    let rows = rng.vec(ctx * stride, 1.0);
    let kv = KvPages::new(gpu, pool, page, n_kv, hd).await?;
    let tb = gpu.upload("page table", table).await?;
    let src = KvSource { t: 0, row_stride: stride, k_off: qw, v_off: qw + kw };
    // First the `past` tokens in their own batch, then the new ones: prefill from a position.
    let (old, new) = rows.split_at(past * stride);
    let all_pos: Vec<u32> = (0..ctx as u32).collect();
    for (part, pos) in [(old, &all_pos[..past]), (new, &all_pos[past..])] {
        if pos.is_empty() {
            continue;
        }
        let rb = gpu.upload("qkv", part).await?;
        let pb = gpu.upload("pos", pos).await?;
        let s = KvSource { t: pos.len(), ..src };
        ops_once(gpu, |b| ops::kv_write(b, &rb, &s, &pb, &tb, n_pages, &kv)).await?;
    }
    // K pages must now hold every token, f16-rounded, at page table[pos / page], slot pos % page.
    let kpages = gpu.read(&kv.k, kv.k.size()).await?;
    let kvals: Vec<f32> = kpages.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect();
    let (mut kc, mut vc) = (Vec::with_capacity(ctx * kw), Vec::with_capacity(ctx * kw));
    for j in 0..ctx {
        let row = &rows[j * stride..(j + 1) * stride];
        kc.extend(row[qw..qw + kw].iter().map(|v| oracle::f16_round(*v)));
        vc.extend(row[qw + kw..].iter().map(|v| oracle::f16_round(*v)));
        for g in 0..n_kv {
            let base = ((table[j / page] as usize * n_kv + g) * page + j % page) * hd;
            let got = &kvals[base..base + hd];
            let want = &kc[(j * n_kv + g) * hd..][..hd];
            compare(&name, &format!("k page of token {j} head {g}"), got, want, |_| 0.0)?;
        }
    }
    let qb = gpu.upload("q", new).await?;
    let pb = gpu.upload("pos", &all_pos[past..]).await?;
    let ob = gpu.storage("out", 4 * (t * qw) as u64).await?;
    let scale = 1.0 / (hd as f32).sqrt();
    let part = gpu.storage("partials", ops::attention_scratch_bytes(t, n_head, hd, ctx)).await?;
    let q: Vec<f32> = new.chunks_exact(stride).flat_map(|r| r[..qw].iter().copied()).collect();
    // Both kernel variants; fixed slices (prefill) first, then slices by parallelism (decode),
    // which is also timed (the adapter's own variant); each over all positions and over a sliding
    // window of a third of them (Gemma-3's local layers).
    let mut max_err = 0f32;
    let mut ms = None;
    // NaN in `out` before each run: a variant that leaves a row unwritten must not pass on the
    // previous run's answer.
    let poison = vec![f32::NAN; t * qw];
    for window in [0, 1 + ctx / 3] {
        let want = oracle::attention(&q, &kc, &vc, &all_pos[past..], n_head, n_kv, hd, scale, window);
        for kind in Variant::available(gpu) {
            let fixed = AttnShape { t, n_head, q_stride: stride, scale, ctx, split: Split::Fixed, fused: false, kind, window };
            // Unfused attention does not read the RoPE table: any read-only buffer fills its binding.
            gpu.write(&ob, 0, &poison);
            ops_once(gpu, |b| ops::attention(b, &qb, &fixed, &pb, &tb, n_pages, &kv, &qb, &ob, &part)).await?;
            let got = gpu.read_f32(&ob, t * qw).await?;
            let what = format!("out ({kind:?}, fixed slices, window {window})");
            max_err = max_err.max(compare(&name, &what, &got, &want, |i| 2e-5 + 1e-4 * want[i].abs())?);
            let shape = AttnShape { split: Split::Auto, ..fixed };
            let reps = if kind == Variant::for_adapter(gpu) && window == 0 { reps } else { 0 };
            gpu.write(&ob, 0, &poison);
            ms = ms.or(execute(gpu, reps, |b| ops::attention(b, &qb, &shape, &pb, &tb, n_pages, &kv, &qb, &ob, &part)).await?);
            let got = gpu.read_f32(&ob, t * qw).await?;
            let what = format!("out ({kind:?}, window {window})");
            max_err = max_err.max(compare(&name, &what, &got, &want, |i| 2e-5 + 1e-4 * want[i].abs())?);
        }
    }
    // Prefill writes these K/V with RoPE fused in: the same bits as the two ops, on this shape.
    rope_kv(gpu, rng, &name, s).await?;
    let bytes = (t * n_head * (past + t) * hd * 2 * 2) as f64;
    Ok(Report::timed(name, max_err, ms, bytes, "GB/s"))
}

/// RoPE over the first `heads` heads of `t` rows (the `extra` heads after them left as they are)
/// at random positions below `max_pos`, rotating `n_rot` of each head's dims; with `scaled`,
/// random frequency factors (Llama-3's `rope_freqs`) and attention factor (LongRoPE's), and the
/// unrotated dims checked bit for bit.
async fn rope(gpu: &Gpu, rng: &mut Rng, name: String, s: [usize; 6], base: f64, scaled: bool) -> Result<Report> {
    let [t, heads, extra, head_dim, n_rot, max_pos] = s;
    let stride = (heads + extra) * head_dim;
    let x = rng.vec(t * stride, 1.0);
    let pos: Vec<u32> = (0..t).map(|_| rng.below(max_pos) as u32).collect();
    let factors: Option<Vec<f32>> = scaled.then(|| (0..n_rot / 2).map(|_| 1.0 + rng.f32(4.0).abs()).collect());
    // LongRoPE's attention factor scales the rotated dims.
    let mscale = if scaled { 1.0 + rng.f32(0.5).abs() as f64 } else { 1.0 };
    let table = ops::rope_table_scaled(max_pos, head_dim, n_rot, base, factors.as_deref(), mscale);
    let xb = gpu.upload("x", &x).await?;
    let (pb, tb) = (gpu.upload("pos", &pos).await?, gpu.upload("rope table", &table).await?);
    let shape = RopeShape { t, heads, row_stride: stride, head_dim };
    ops_once(gpu, |b| ops::rope(b, &xb, &pb, &tb, &shape)).await?;
    let got = gpu.read_f32(&xb, t * stride).await?;
    let mut want = x.clone();
    oracle::rope_scaled(&mut want, &pos, heads, stride, head_dim, n_rot, base, factors.as_deref(), mscale);
    // The unrotated dims must come back bit for bit.
    for (i, (g, x)) in got.iter().zip(&x).enumerate() {
        if i % head_dim >= n_rot && g.to_bits() != x.to_bits() {
            return Err(Error::Mismatch(format!("{name}: x[{i}] = {g}, unrotated {x}")));
        }
    }
    let max_err = compare(&name, "x", &got, &want, |_| 1e-5)?;
    Ok(Report { name, max_err, ms: None, rate: None })
}

/// Rotates the first `heads` heads of `row` for position `pos` with the f32 table, as the GPU does.
fn rope_f32(row: &mut [f32], table: &[[f32; 2]], pos: usize, heads: usize, hd: usize) {
    for h in 0..heads {
        for i in 0..hd / 2 {
            let [c, s] = table[pos * hd / 2 + i];
            let j = h * hd + 2 * i;
            let (x0, x1) = (row[j], row[j + 1]);
            row[j] = x0 * c - x1 * s;
            row[j + 1] = x0 * s + x1 * c;
        }
    }
}

/// The fused decode attention against rope → f16 K/V → attention on the CPU; the token's K/V
/// must land in its page.
async fn decode_attention(gpu: &Gpu, rng: &mut Rng, name: String, s: [usize; 6], reps: usize) -> Result<Report> {
    let [past, n_head, n_kv, hd, page, pool] = s;
    let ctx = past + 1;
    let ids = page_table(rng, ctx, page, pool)?;
    let (table, n_pages) = (&ids[..], ids.len());
    let (qw, kw) = (n_head * hd, n_kv * hd);
    let stride = qw + 2 * kw;
    let rows = rng.vec(ctx * stride, 1.0);
    let kv = KvPages::new(gpu, pool, page, n_kv, hd).await?;
    let tb = gpu.upload("page table", table).await?;
    let all_pos: Vec<u32> = (0..ctx as u32).collect();
    let rope = ops::rope_table(ctx + 5, hd, 10000.0);
    let ropeb = gpu.upload("rope table", &rope).await?;
    let new = &rows[past * stride..];
    let mut rotated = new.to_vec();
    rope_f32(&mut rotated, &rope, past, n_head + n_kv, hd);
    let (mut kc, mut vc) = (Vec::with_capacity(ctx * kw), Vec::with_capacity(ctx * kw));
    for j in 0..ctx {
        let row = if j == past { &rotated[..] } else { &rows[j * stride..(j + 1) * stride] };
        kc.extend(row[qw..qw + kw].iter().map(|v| oracle::f16_round(*v)));
        vc.extend(row[qw + kw..].iter().map(|v| oracle::f16_round(*v)));
    }
    let scale = 1.0 / (hd as f32).sqrt();
    let qb = gpu.upload("q|k|v", new).await?;
    let pb = gpu.upload("pos", &[past as u32]).await?;
    let ob = gpu.storage("out", 4 * qw as u64).await?;
    let part = gpu.storage("partials", ops::attention_scratch_bytes(1, n_head, hd, ctx)).await?;
    let mut max_err = 0f32;
    let mut ms = None;
    // NaN in `out` before each run: a variant that leaves a row unwritten must not pass on the
    // previous run's answer.
    let poison = vec![f32::NAN; qw];
    // Over all positions and over a sliding window of a third of them (Gemma-3's local layers).
    for (kind, window) in Variant::available(gpu).into_iter().flat_map(|k| [(k, 0), (k, 1 + ctx / 3)]) {
        let want = oracle::attention(&rotated[..qw], &kc, &vc, &[past as u32], n_head, n_kv, hd, scale, window);
        // The pages start without the token's K/V each time.
        let stale = vec![0u32; (kv.k.size() / 4) as usize];
        gpu.write(&kv.k, 0, &stale);
        gpu.write(&kv.v, 0, &stale);
        if past > 0 {
            let rb = gpu.upload("qkv", &rows[..past * stride]).await?;
            let pb = gpu.upload("pos", &all_pos[..past]).await?;
            let src = KvSource { t: past, row_stride: stride, k_off: qw, v_off: qw + kw };
            ops_once(gpu, |b| ops::kv_write(b, &rb, &src, &pb, &tb, n_pages, &kv)).await?;
        }
        let shape = AttnShape { t: 1, n_head, q_stride: stride, scale, ctx, split: Split::Auto, fused: true, kind, window };
        let run = |b: &mut Batch| ops::attention(b, &qb, &shape, &pb, &tb, n_pages, &kv, &ropeb, &ob, &part);
        gpu.write(&ob, 0, &poison);
        ops_once(gpu, run).await?;
        let got = gpu.read_f32(&ob, qw).await?;
        max_err = max_err.max(compare(&name, &format!("out ({kind:?}, window {window})"), &got, &want, |i| 2e-5 + 1e-4 * want[i].abs())?);
        // The token's own K and V, f16, in its slot.
        for (what, buf, vals) in [("k", &kv.k, &kc), ("v", &kv.v, &vc)] {
            let bytes = gpu.read(buf, buf.size()).await?;
            let all: Vec<f32> = bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect();
            for g in 0..n_kv {
                let base = ((table[past / page] as usize * n_kv + g) * page + past % page) * hd;
                let want = &vals[(past * n_kv + g) * hd..][..hd];
                compare(&name, &format!("{what} page of the new token, head {g} ({kind:?})"), &all[base..base + hd], want, |i| {
                    1e-3 * want[i].abs()
                })?;
            }
        }
        if kind == Variant::for_adapter(gpu) && window == 0 {
            ms = execute(gpu, reps, run).await?;
        }
    }
    let bytes = (n_head * ctx * hd * 2 * 2) as f64;
    Ok(Report::timed(name, max_err, ms, bytes, "GB/s"))
}
