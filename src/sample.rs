//! The CPU sampler: picks the next token from one row of logits.
//!
//! Order of operations (llama.cpp's, minus the exotic samplers):
//! 1. repetition penalty over the distinct tokens among the last `repeat_last_n` of `recent`;
//! 2. temperature 0 → argmax (lowest id on ties, NaN never wins — the same rule as the GPU
//!    `argmax` kernel; all-NaN logits are an error here and an out-of-range id there, which the
//!    engine turns into the same error);
//! 3. otherwise top-k, softmax with temperature, top-p, then one draw from a seeded generator.
//!
//! The generator is [`crate::selftest::Rng`] (SplitMix64) seeded with [`SamplingParams::seed`]:
//! the same parameters, logits and `recent` always give the same tokens, on every platform.
//!
//! NaN logits are never candidates. A `+inf` logit takes all the probability (shared evenly with
//! other `+inf` ones); if every candidate is `-inf` the draw is uniform among them.

use std::cmp::Ordering;

use crate::selftest::Rng;
use crate::{Error, Result};

/// How the next token is chosen. `Default` is plain sampling from `softmax(logits)`.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy (argmax). Must be finite and ≥ 0.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 turns it off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability adds up to at least `top_p`;
    /// must be in (0, 1], 1.0 turns it off.
    pub top_p: f32,
    /// llama.cpp-style penalty for recently seen tokens (positive logits are divided by it,
    /// others multiplied); must be finite and > 0, 1.0 turns it off.
    pub repetition_penalty: f32,
    /// How many of the most recent tokens the penalty looks at (each distinct token is penalized
    /// once); 0 turns the penalty off.
    pub repeat_last_n: usize,
    /// Seed of the sampler's generator.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0, repetition_penalty: 1.0, repeat_last_n: 64, seed: 0 }
    }
}

impl SamplingParams {
    /// Always the most likely token (temperature 0, no penalty).
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, ..Self::default() }
    }

    /// Checks every parameter; the error names the parameter and its value.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &str, v: f32, want: &str| Err(Error::InvalidArgument(format!("{name} = {v}: must be {want}")));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad("temperature", self.temperature, "finite and >= 0");
        }
        if !self.top_p.is_finite() || self.top_p <= 0.0 || self.top_p > 1.0 {
            return bad("top_p", self.top_p, "in (0, 1]");
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return bad("repetition_penalty", self.repetition_penalty, "finite and > 0");
        }
        Ok(())
    }

    fn penalizes(&self) -> bool {
        self.repetition_penalty != 1.0 && self.repeat_last_n > 0
    }
}

/// One candidate token: its (penalized) logit, id, and unnormalized probability.
#[derive(Debug, Clone, Copy)]
struct Cand {
    logit: f32,
    id: u32,
    w: f64,
}

/// Most likely first: larger logit first, lower id first on ties. NaN is never a candidate, so
/// `partial_cmp` always answers; `-0.0` and `0.0` compare equal (unlike `total_cmp`).
fn by_rank(a: &Cand, b: &Cand) -> Ordering {
    b.logit.partial_cmp(&a.logit).unwrap_or(Ordering::Equal).then(a.id.cmp(&b.id))
}

/// The index of the largest logit: lowest index on ties, NaN never wins. Error if `logits` is
/// empty or all NaN.
pub fn argmax(logits: &[f32]) -> Result<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        match best {
            Some((_, b)) if v <= b => {}
            _ => best = Some((i, v)),
        }
    }
    match best {
        Some((i, _)) => Ok(i as u32),
        None if logits.is_empty() => Err(Error::InvalidArgument("sample: empty logits".into())),
        None => Err(Error::InvalidArgument(format!("sample: all {} logits are NaN", logits.len()))),
    }
}

/// A seeded sampler; keep one per generated sequence so its draws continue one stream.
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// Scratch, reused across calls: the candidate set, then what survives top-k and top-p.
    cands: Vec<Cand>,
    /// Scratch for deduplicating the penalty window.
    window: Vec<u32>,
}

impl Sampler {
    /// A sampler for `params`, which must pass [`SamplingParams::validate`].
    pub fn new(params: SamplingParams) -> Result<Sampler> {
        params.validate()?;
        let rng = Rng(params.seed);
        Ok(Sampler { params, rng, cands: Vec::new(), window: Vec::new() })
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// True when [`Sampler::sample`] would return the plain argmax of the logits (temperature 0
    /// and no repetition penalty), so a caller may use a GPU argmax and skip reading logits back.
    pub fn is_greedy(&self) -> bool {
        self.params.temperature == 0.0 && !self.params.penalizes()
    }

    /// Picks the next token from `logits` (one per vocabulary entry), given the tokens so far
    /// (`recent`, oldest first; only the last `repeat_last_n` matter). The repetition penalty is
    /// applied to `logits` in place. Errors on empty or all-NaN logits, and, when the penalty is
    /// on, on a recent token id past the end of `logits`.
    pub fn sample(&mut self, logits: &mut [f32], recent: &[u32]) -> Result<u32> {
        if logits.is_empty() {
            return Err(Error::InvalidArgument("sample: empty logits".into()));
        }
        if logits.len() > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!("sample: {} logits do not fit u32 token ids", logits.len())));
        }
        self.penalize(logits, recent)?;
        if self.params.temperature == 0.0 {
            return argmax(logits);
        }
        let total = self.candidates(logits)?;
        // Uniform in [0, total): 53 random bits.
        let u = (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * total;
        let mut cum = 0.0;
        let mut last = None;
        for c in &self.cands {
            if c.w > 0.0 {
                cum += c.w;
                last = Some(c.id);
                if u < cum {
                    return Ok(c.id);
                }
            }
        }
        // Only reachable through rounding in `cum`; `candidates` guarantees a positive weight.
        last.ok_or_else(|| Error::InvalidArgument("sample: no token has positive probability".into()))
    }

    /// The llama.cpp repetition penalty, once per distinct token among the last `repeat_last_n`.
    fn penalize(&mut self, logits: &mut [f32], recent: &[u32]) -> Result<()> {
        if !self.params.penalizes() {
            return Ok(());
        }
        let p = self.params.repetition_penalty;
        let start = recent.len().saturating_sub(self.params.repeat_last_n);
        self.window.clear();
        self.window.extend_from_slice(&recent[start..]);
        self.window.sort_unstable();
        self.window.dedup();
        let vocab = logits.len();
        for &t in &self.window {
            let l = logits.get_mut(t as usize).ok_or_else(|| {
                Error::InvalidArgument(format!("sample: recent token {t} is past the vocabulary ({vocab} logits)"))
            })?;
            *l = if *l > 0.0 { *l / p } else { *l * p };
        }
        Ok(())
    }

    /// Fills `self.cands` with the tokens that survive top-k and top-p, each with its weight
    /// `exp((logit - max) / T)`, and returns the sum of their weights (> 0).
    fn candidates(&mut self, logits: &[f32]) -> Result<f64> {
        let cands = &mut self.cands;
        cands.clear();
        cands.extend(
            logits.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &logit)| Cand { logit, id: i as u32, w: 0.0 }),
        );
        if cands.is_empty() {
            return Err(Error::InvalidArgument(format!("sample: all {} logits are NaN", logits.len())));
        }

        // Top-k: an O(V) selection, no sort.
        let k = self.params.top_k;
        if k > 0 && k < cands.len() {
            cands.select_nth_unstable_by(k - 1, by_rank);
            cands.truncate(k);
        }

        // Softmax weights, relative to the largest logit (so the best token weighs exactly 1).
        let max = cands.iter().map(|c| c.logit).fold(f32::NEG_INFINITY, f32::max);
        let inv_t = 1.0 / self.params.temperature as f64;
        let mut total = 0.0;
        for c in cands.iter_mut() {
            c.w = if max == f32::INFINITY {
                if c.logit == f32::INFINITY { 1.0 } else { 0.0 }
            } else if max == f32::NEG_INFINITY {
                1.0 // every candidate is -inf: uniform among them
            } else {
                ((c.logit as f64 - max as f64) * inv_t).exp()
            };
            total += c.w;
        }

        // Top-p: only the head of the ranking is needed. Select the best m (O(V)), and sort just
        // those once they hold enough mass; m grows ×4 in the rare case they do not.
        let p = self.params.top_p as f64;
        if p < 1.0 {
            let target = p * total;
            let n = cands.len();
            let mut m = n.min(64);
            loop {
                if m < n {
                    cands.select_nth_unstable_by(m - 1, by_rank);
                }
                let head: f64 = cands[..m].iter().map(|c| c.w).sum();
                if head >= target || m == n {
                    cands[..m].sort_unstable_by(by_rank);
                    let mut cum = 0.0;
                    let mut keep = m;
                    for (i, c) in cands[..m].iter().enumerate() {
                        cum += c.w;
                        if cum >= target {
                            keep = i + 1;
                            break;
                        }
                    }
                    cands.truncate(keep.max(1));
                    total = cands.iter().map(|c| c.w).sum();
                    break;
                }
                m = n.min(m.saturating_mul(4));
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32) -> SamplingParams {
        SamplingParams { temperature, ..SamplingParams::default() }
    }

    fn draws(p: SamplingParams, logits: &[f32], n: usize) -> Vec<u32> {
        let mut s = Sampler::new(p).unwrap();
        (0..n).map(|_| s.sample(&mut logits.to_vec(), &[]).unwrap()).collect()
    }

    fn freqs(p: SamplingParams, logits: &[f32], recent: &[u32], n: usize) -> Vec<f64> {
        let mut s = Sampler::new(p).unwrap();
        let mut counts = vec![0usize; logits.len()];
        for _ in 0..n {
            counts[s.sample(&mut logits.to_vec(), recent).unwrap() as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    fn softmax(logits: &[f32], t: f32) -> Vec<f64> {
        let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let e: Vec<f64> = logits.iter().map(|&l| ((l as f64 - max) / t as f64).exp()).collect();
        let z: f64 = e.iter().sum();
        e.iter().map(|x| x / z).collect()
    }

    fn assert_close(got: &[f64], want: &[f64], tol: f64) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() < tol, "token {i}: frequency {g:.4}, expected {w:.4} (got {got:?})");
        }
    }

    fn invalid(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let d = SamplingParams::default();
        let got = (d.temperature, d.top_k, d.top_p, d.repetition_penalty, d.repeat_last_n, d.seed);
        assert_eq!(got, (1.0, 0, 1.0, 1.0, 64, 0));
        assert!(Sampler::new(SamplingParams::greedy()).unwrap().is_greedy());
        assert!(!Sampler::new(d.clone()).unwrap().is_greedy());
        let penalized = SamplingParams { repetition_penalty: 1.1, ..SamplingParams::greedy() };
        assert!(!Sampler::new(penalized.clone()).unwrap().is_greedy());
        assert!(Sampler::new(SamplingParams { repeat_last_n: 0, ..penalized }).unwrap().is_greedy());
    }

    #[test]
    fn greedy_is_argmax_lowest_id_on_ties() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        assert_eq!(s.sample(&mut [0.5, 3.0, -1.0, 2.0], &[]).unwrap(), 1);
        assert_eq!(s.sample(&mut [1.0, 3.0, 3.0, 2.0], &[]).unwrap(), 1);
        assert_eq!(s.sample(&mut [f32::NAN, 2.0, f32::NAN, 2.0, 1.0], &[]).unwrap(), 1);
        assert_eq!(s.sample(&mut [-0.0, 0.0], &[]).unwrap(), 0);
        assert_eq!(s.sample(&mut [f32::NEG_INFINITY; 3], &[]).unwrap(), 0);
        assert_eq!(s.sample(&mut [1.0, f32::INFINITY, f32::INFINITY], &[]).unwrap(), 1);
        // Deterministic: the same answer every time, whatever the seed.
        let mut rng = Rng(7);
        let logits = rng.vec(1000, 5.0);
        let want = argmax(&logits).unwrap();
        for seed in 0..5 {
            let mut s = Sampler::new(SamplingParams { seed, ..SamplingParams::greedy() }).unwrap();
            assert_eq!(s.sample(&mut logits.clone(), &[]).unwrap(), want);
        }
    }

    #[test]
    fn seeds_are_reproducible_and_distinct() {
        let logits: Vec<f32> = (0..16).map(|i| (i % 4) as f32 * 0.1).collect();
        let seeded = |seed| SamplingParams { seed, ..params(1.0) };
        let a = draws(seeded(1), &logits, 200);
        assert_eq!(a, draws(seeded(1), &logits, 200));
        assert_ne!(a, draws(seeded(2), &logits, 200));
        assert_ne!(a, draws(seeded(0), &logits, 200));
        // The stream continues across calls rather than restarting.
        assert!(a.windows(2).any(|w| w[0] != w[1]));
    }

    #[test]
    fn top_k_one_and_tiny_top_p_equal_greedy() {
        let mut rng = Rng(11);
        for trial in 0..50 {
            let mut logits = rng.vec(500, 4.0);
            if trial % 5 == 0 {
                logits[rng.below(500)] = f32::NAN;
                let m = argmax(&logits).unwrap() as usize;
                logits[(m + 7) % 500] = logits[m]; // a tie for the top
            }
            let want = argmax(&logits).unwrap();
            for p in [
                SamplingParams { top_k: 1, seed: trial, ..params(1.5) },
                SamplingParams { top_p: 1e-6, seed: trial, ..params(1.5) },
                SamplingParams { top_k: 10, top_p: 1e-6, seed: trial, ..params(0.5) },
            ] {
                let mut s = Sampler::new(p.clone()).unwrap();
                for _ in 0..5 {
                    assert_eq!(s.sample(&mut logits.clone(), &[]).unwrap(), want, "{p:?}");
                }
            }
        }
    }

    #[test]
    fn frequencies_match_softmax() {
        let logits = [1.0f32, 2.0, 0.5, -1.0];
        for t in [1.0f32, 0.7, 2.0] {
            let got = freqs(SamplingParams { seed: 3, ..params(t) }, &logits, &[], 20_000);
            assert_close(&got, &softmax(&logits, t), 0.015);
        }
    }

    #[test]
    fn top_k_and_top_p_renormalize() {
        let logits = [1.0f32, 2.0, 0.5, -1.0];
        let p = softmax(&logits, 1.0); // ≈ [0.23, 0.63, 0.14, 0.03]
        // top_k 2 keeps tokens 1 and 0.
        let got = freqs(SamplingParams { top_k: 2, seed: 5, ..params(1.0) }, &logits, &[], 20_000);
        let z = p[0] + p[1];
        assert_close(&got, &[p[0] / z, p[1] / z, 0.0, 0.0], 0.015);
        // top_p 0.8: 0.63 < 0.8 ≤ 0.63 + 0.23, so tokens 1 and 0 again.
        let got = freqs(SamplingParams { top_p: 0.8, seed: 6, ..params(1.0) }, &logits, &[], 20_000);
        assert_close(&got, &[p[0] / z, p[1] / z, 0.0, 0.0], 0.015);
        // top_p 0.95: the first three.
        let got = freqs(SamplingParams { top_p: 0.95, seed: 7, ..params(1.0) }, &logits, &[], 20_000);
        let z = p[0] + p[1] + p[2];
        assert_close(&got, &[p[0] / z, p[1] / z, p[2] / z, 0.0], 0.015);
    }

    /// The kept set from `candidates` equals a brute-force top-k / full-sort top-p, including
    /// flat distributions where top-p needs far more than the first 64 tokens.
    #[test]
    fn candidate_sets_match_brute_force() {
        let mut rng = Rng(99);
        // (vocab, top_k, top_p, temperature, logit scale): small scales make flat distributions.
        let cases = [
            (49_152, 0, 0.9, 1.0, 3.0),
            (49_152, 0, 0.5, 0.8, 0.1),
            (2_000, 40, 0.7, 1.0, 2.0),
            (3_000, 500, 0.95, 1.2, 0.2),
            (300, 0, 0.999, 1.0, 8.0),
        ];
        for (v, k, top_p, t, scale) in cases {
            let mut logits = rng.vec(v, scale);
            logits[3] = f32::NAN;
            let p = SamplingParams { top_k: k, top_p, temperature: t, ..SamplingParams::default() };
            let mut s = Sampler::new(p).unwrap();
            s.candidates(&logits).unwrap();
            let mut got: Vec<u32> = s.cands.iter().map(|c| c.id).collect();
            got.sort_unstable();

            let mut all: Vec<(f32, u32)> =
                logits.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &l)| (l, i as u32)).collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            if k > 0 {
                all.truncate(k);
            }
            let w: Vec<f64> = all.iter().map(|&(l, _)| ((l as f64 - all[0].0 as f64) / t as f64).exp()).collect();
            let z: f64 = w.iter().sum();
            let mut cum = 0.0;
            let keep = w.iter().position(|&x| {
                cum += x / z;
                cum >= top_p as f64
            });
            let mut want: Vec<u32> = all[..keep.unwrap() + 1].iter().map(|&(_, id)| id).collect();
            want.sort_unstable();
            assert_eq!(got, want, "v {v} k {k} top_p {top_p}");
            assert!(k == 0 || got.len() <= k);
        }
    }

    #[test]
    fn penalty_lowers_repeated_tokens() {
        // Positive logit: divided. Negative logit: multiplied. Others untouched.
        let mut s = Sampler::new(SamplingParams { repetition_penalty: 2.0, ..SamplingParams::greedy() }).unwrap();
        let mut logits = [2.0f32, -1.0, 1.5, 0.0];
        // Token 0 appears twice but is penalized once; token 2 is not recent.
        assert_eq!(s.sample(&mut logits, &[0, 1, 0, 3]).unwrap(), 2);
        assert_eq!(logits, [1.0, -2.0, 1.5, 0.0]);

        // Only the last `repeat_last_n` tokens count.
        let p = SamplingParams { repetition_penalty: 2.0, repeat_last_n: 2, ..SamplingParams::greedy() };
        let mut s = Sampler::new(p).unwrap();
        let mut logits = [2.0f32, -1.0, 1.5, 0.0];
        assert_eq!(s.sample(&mut logits, &[0, 1, 3]).unwrap(), 0);
        assert_eq!(logits, [2.0, -2.0, 1.5, 0.0]);

        // In distribution: a repeated token loses probability whether its logit is positive
        // (2 → 1) or negative (-1 → -2), and the result is softmax of the penalized logits.
        let cases = [([2.0f32, 0.0, 0.0, 0.0], [1.0f32, 0.0, 0.0, 0.0]), ([0.0, -1.0, -1.0, -1.0], [0.0, -2.0, -1.0, -1.0])];
        for (logits, penalized) in cases {
            let t = if logits[0] > 0.0 { 0 } else { 1 };
            let base = freqs(SamplingParams { seed: 1, ..params(1.0) }, &logits, &[t], 20_000);
            let pen = SamplingParams { repetition_penalty: 2.0, seed: 1, ..params(1.0) };
            let got = freqs(pen, &logits, &[t], 20_000);
            assert!(got[t as usize] < base[t as usize] - 0.08, "token {t}: {got:?} vs {base:?}");
            assert_close(&got, &softmax(&penalized, 1.0), 0.015);
        }
    }

    #[test]
    fn invalid_parameters_are_rejected() {
        let d = SamplingParams::default;
        let bad = [
            (SamplingParams { temperature: f32::NAN, ..d() }, "temperature"),
            (SamplingParams { temperature: -0.5, ..d() }, "temperature"),
            (SamplingParams { temperature: f32::INFINITY, ..d() }, "temperature"),
            (SamplingParams { top_p: 0.0, ..d() }, "top_p"),
            (SamplingParams { top_p: 1.5, ..d() }, "top_p"),
            (SamplingParams { top_p: f32::NAN, ..d() }, "top_p"),
            (SamplingParams { top_p: -0.1, ..d() }, "top_p"),
            (SamplingParams { top_p: f32::INFINITY, ..d() }, "top_p"),
            (SamplingParams { repetition_penalty: 0.0, ..d() }, "repetition_penalty"),
            (SamplingParams { repetition_penalty: -1.0, ..d() }, "repetition_penalty"),
            (SamplingParams { repetition_penalty: f32::NAN, ..d() }, "repetition_penalty"),
            (SamplingParams { repetition_penalty: f32::INFINITY, ..d() }, "repetition_penalty"),
        ];
        for (p, name) in bad {
            let msg = invalid(p.validate());
            assert!(msg.contains(name), "{msg}");
            invalid(Sampler::new(p).map(|_| ()));
        }
        assert!(SamplingParams { top_p: 1.0, temperature: 0.0, ..d() }.validate().is_ok());
        assert!(SamplingParams { top_p: 1e-9, repetition_penalty: 1e-3, ..d() }.validate().is_ok());
        let msg = invalid(SamplingParams { temperature: -0.5, ..d() }.validate());
        assert!(msg.contains("-0.5"), "{msg}");
    }

    #[test]
    fn bad_logits_are_rejected() {
        for p in [SamplingParams::greedy(), params(1.0), SamplingParams { top_k: 2, top_p: 0.5, ..params(0.8) }] {
            let mut s = Sampler::new(p).unwrap();
            invalid(s.sample(&mut [f32::NAN; 4], &[]));
            invalid(s.sample(&mut [], &[]));
            // NaN never wins even when sampling.
            for _ in 0..50 {
                assert_eq!(s.sample(&mut [f32::NAN, 0.0, f32::NAN], &[]).unwrap(), 1);
            }
        }
        let mut s = Sampler::new(SamplingParams { repetition_penalty: 1.3, ..params(1.0) }).unwrap();
        invalid(s.sample(&mut [0.0; 4], &[1, 4]));
        // With the penalty off, `recent` is not looked at.
        let mut s = Sampler::new(params(1.0)).unwrap();
        assert!(s.sample(&mut [0.0; 4], &[1, 4]).is_ok());
    }

    #[test]
    fn infinite_logits() {
        let mut s = Sampler::new(SamplingParams { seed: 9, ..params(1.0) }).unwrap();
        for _ in 0..100 {
            let t = s.sample(&mut [0.0, f32::INFINITY, 5.0, f32::INFINITY], &[]).unwrap();
            assert!(t == 1 || t == 3);
            let t = s.sample(&mut [f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY], &[]).unwrap();
            assert_eq!(t, 1);
            assert!(s.sample(&mut [f32::NEG_INFINITY; 3], &[]).unwrap() < 3);
        }
        // A tiny temperature is greedy in effect, without overflow.
        let mut s = Sampler::new(params(1e-30)).unwrap();
        assert_eq!(s.sample(&mut [1.0, 1.5, 1.4999], &[]).unwrap(), 1);
    }
}
