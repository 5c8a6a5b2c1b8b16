//! The sampler's tests: its draws against softmax and brute force, and drawing from the top
//! of the row against drawing from the whole row.

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

/// The kept set equals a brute-force top-k / full-sort top-p, including
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
        s.sample(&mut logits.clone(), &[]).unwrap();
        // `sample` leaves the kept candidates in `cands`.
        let mut got: Vec<u32> = s.cands.iter().map(|c| c.id).collect();
        got.sort_unstable();

        let mut all: Vec<(f32, u32)> = logits.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &l)| (l, i as u32)).collect();
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
        // A row with nothing to choose is the model's or the GPU's fault, not the request's.
        assert!(matches!(s.sample(&mut [f32::NAN; 4], &[]), Err(Error::Numerics(_))));
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

/// OpenAI's frequency and presence penalties: a completion token seen c times loses
/// c × frequency + presence; prompt tokens are not counted; the repetition penalty applies
/// first, over its window of prompt and completion.
#[test]
fn count_penalties_follow_openai() {
    let p = SamplingParams { frequency_penalty: 0.5, presence_penalty: 0.25, ..SamplingParams::greedy() };
    let mut s = Sampler::new(p.clone()).unwrap();
    assert!(!s.is_greedy());
    s.set_prompt_len(3);
    let recent = [5, 5, 1, 1, 1, 2];
    let mut logits = [1.0f32, 2.0, 2.0, 0.5, 0.0, 3.0];
    s.sample(&mut logits, &recent).unwrap();
    assert_eq!(logits, [1.0, 2.0 - 2.0 * 0.5 - 0.25, 2.0 - 0.5 - 0.25, 0.5, 0.0, 3.0], "token 5 is only in the prompt");
    // With the repetition penalty too: divided (or multiplied) first, then lowered.
    let mut s = Sampler::new(SamplingParams { repetition_penalty: 2.0, ..p.clone() }).unwrap();
    s.set_prompt_len(3);
    let mut logits = [1.0f32, 2.0, 2.0, 0.5, 0.0, -3.0];
    s.sample(&mut logits, &recent).unwrap();
    assert_eq!(logits, [1.0, 1.0 - 1.0 - 0.25, 1.0 - 0.5 - 0.25, 0.5, 0.0, -6.0]);
    // Negative values raise the logits instead; the picked token follows.
    let mut s = Sampler::new(SamplingParams { frequency_penalty: -2.0, ..SamplingParams::greedy() }).unwrap();
    s.set_prompt_len(3);
    assert_eq!(s.sample(&mut [3.0f32, 2.0, 0.0, 0.0, 0.0, 0.0], &recent).unwrap(), 1, "token 1: 2 + 3 × 2 = 8");
    for bad in [2.5, -2.01, f32::NAN] {
        invalid(Sampler::new(SamplingParams { frequency_penalty: bad, ..SamplingParams::greedy() }).map(|_| ()));
        invalid(Sampler::new(SamplingParams { presence_penalty: bad, ..SamplingParams::greedy() }).map(|_| ()));
    }
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

/// What the `topk` kernel would return for `logits`, with an exact sum.
fn top_of(logits: &[f32], t: f32, window: &[u32]) -> Top {
    let mut keys = Vec::new();
    let threshold = top_threshold(logits, TOP, &mut keys);
    let max = logits.iter().filter(|l| !l.is_nan()).cloned().fold(f32::NEG_INFINITY, f32::max);
    let sum = logits.iter().filter(|l| !l.is_nan()).map(|&l| ((l as f64 - max as f64) / t as f64).exp()).sum();
    let cands = logits.iter().enumerate().filter(|(_, &l)| order_key(l) >= threshold).map(|(i, &l)| (i as u32, l)).collect();
    let window = window.iter().map(|&id| logits[id as usize]).collect();
    let cands: Vec<(u32, f32)> = cands;
    Top { count: cands.len(), cands, threshold, max, sum, window, vocab: logits.len() }
}

#[test]
fn order_keys_sort_as_floats() {
    let vals = [f32::NEG_INFINITY, -1e30, -2.5, -1e-40, -0.0, 0.0, 1e-40, 1.0, 3.4e38, f32::INFINITY];
    for w in vals.windows(2) {
        assert!(order_key(w[0]) < order_key(w[1]), "{} {}", w[0], w[1]);
    }
    for v in vals {
        assert_eq!(order_value(order_key(v)).to_bits(), v.to_bits());
    }
    assert_eq!(order_key(f32::NAN), 0);
    assert_eq!(order_key(-f32::NAN), 0);
    let mut keys = Vec::new();
    let row: Vec<f32> = (0..1000).map(|i| (i % 500) as f32).collect();
    // The 256th largest of 2 × (0..500): 372 (values 372..499 twice = 256).
    assert_eq!(order_value(top_threshold(&row, TOP, &mut keys)), 372.0);
    assert_eq!(top_threshold(&row[..100], TOP, &mut keys), 1);
}

/// Drawing from the top of the row gives the token the whole row gives, for the same stream,
/// and says when it cannot (then the whole row gives what it would have).
#[test]
fn sampling_from_the_top_equals_sampling_from_the_row() {
    let mut rng = Rng(2024);
    let mut answered = [0usize; 2];
    for trial in 0..120u64 {
        let vocab = if trial % 10 == 0 { 49_152 } else { 700 + rng.below(3000) };
        // Rows like a language model's (a few tokens far above the rest), and flat ones.
        let peaked = trial % 3 != 1;
        let mut base = rng.vec(vocab, if peaked { 2.0 } else { 0.5 });
        if peaked {
            for _ in 0..8 {
                base[rng.below(vocab)] += 10.0;
            }
        }
        if trial % 7 == 0 {
            base[rng.below(vocab)] = f32::NAN;
            let m = argmax(&base).unwrap() as usize;
            base[(m + 3) % vocab] = base[m];
        }
        let p = SamplingParams {
            temperature: [1.0, 0.7, 1.3, 0.0][trial as usize % 4],
            top_k: [0, 0, 40, 1, 400][trial as usize % 5],
            top_p: [1.0, 0.9, 0.5][trial as usize % 3],
            repetition_penalty: [1.0, 1.3, 0.8, 1.0][(trial / 3) as usize % 4],
            frequency_penalty: [0.0, 0.0, 0.6, -0.8, 1.5, 0.0][(trial / 2) as usize % 6],
            presence_penalty: [0.0, 0.9, 0.0, -1.2, 0.3][(trial / 5) as usize % 5],
            seed: trial,
            ..SamplingParams::default()
        };
        let mut full = Sampler::new(p.clone()).unwrap();
        let mut top = Sampler::new(p.clone()).unwrap();
        // The first 14 of `recent` are the prompt: the count penalties see the rest.
        full.set_prompt_len(14);
        top.set_prompt_len(14);
        let mut recent: Vec<u32> = (0..20).map(|_| rng.below(vocab) as u32).collect();
        for _step in 0..6 {
            let mut logits = base.clone();
            let want = full.sample(&mut logits, &recent).unwrap();
            let window = top.penalty_window(&recent).to_vec();
            let t = if p.temperature > 0.0 { p.temperature } else { 1.0 };
            match top.sample_top(&top_of(&base, t, &window), &recent).unwrap() {
                Some(got) => {
                    assert_eq!(got, want, "trial {trial} {p:?}");
                    answered[0] += (peaked && p.top_k <= TOP) as usize;
                }
                None => {
                    assert_eq!(top.sample(&mut base.clone(), &recent).unwrap(), want, "trial {trial} {p:?}");
                    answered[1] += (peaked && p.top_k <= TOP) as usize;
                }
            }
            recent.push(want);
            base[want as usize] += 0.5;
        }
    }
    // Most draws from peaked rows need only the top (top_k 400 > TOP needs the row; the rest
    // land in the tail of the plain draw, ~6% of the mass in the 49,152-token rows).
    assert!(answered[0] > 9 * answered[1], "from the top {}, from the row {}", answered[0], answered[1]);
}

#[test]
fn sampling_from_the_top_refuses_what_it_cannot_rank() {
    let mut rng = Rng(5);
    let logits = rng.vec(2000, 1.0);
    let mut s = Sampler::new(SamplingParams { seed: 1, ..params(1.0) }).unwrap();
    let good = top_of(&logits, 1.0, &[]);
    assert!(s.sample_top(&good, &[]).is_ok());
    for bad in [
        Top { count: 0, cands: Vec::new(), ..good.clone() },
        Top { count: TOP_CAP + 1, cands: vec![(0, 0.0); TOP_CAP], ..good.clone() },
        Top { count: good.count + 1, ..good.clone() },
        Top { max: f32::INFINITY, ..good.clone() },
        Top { sum: f64::NAN, ..good.clone() },
        Top { sum: 0.5, ..good.clone() },
        Top { window: vec![0.0], ..good.clone() },
    ] {
        assert_eq!(s.sample_top(&bad, &[]).unwrap(), None);
    }
    let past = Top { count: 1, cands: vec![(2000, 1.0)], ..good.clone() };
    invalid(s.sample_top(&past, &[]));
    // A flat row: a plain draw lands in the tail most of the time and needs the row.
    let flat = rng.vec(2000, 0.01);
    let mut nones = 0;
    for _ in 0..50 {
        if s.sample_top(&top_of(&flat, 1.0, &[]), &[]).unwrap().is_none() {
            nones += 1;
            s.sample(&mut flat.clone(), &[]).unwrap();
        }
    }
    assert!(nones > 30, "{nones}");
}
