//! The whole forward pass on the tiny random-weight model (`testmodel::tiny_gguf(1)`: 2 layers,
//! width 96, GQA 6/2, Q8_0 tied head, Q4_1 linear weights) against the CPU reference
//! `testmodel::oracle_logits`, natively (`cargo test --test tiny_model`) and in headless Chromium
//! (`wasm-pack test --headless --chrome -- --test tiny_model`): chunked scoring, decode one token
//! at a time, truncation and re-feeding, argmax, and agreement with the native build's logits in
//! tests/fixtures/tiny-logits.json (regenerate with scripts/make-tiny-fixture.sh).
//!
//! Every logit must satisfy |gpu − cpu| ≤ 1e-3 · max(1, |cpu|).

use hotprefix::gpu::Gpu;
use hotprefix::kv::KvCache;
use hotprefix::model::{Logits, Model, Options};
use hotprefix::ops::Variant;
use hotprefix::rng::Rng;
use hotprefix::testmodel::{oracle_logits, tiny_gguf};

mod dual;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

const VOCAB: usize = 320;
const TOL: f32 = 1e-3;
/// The native build's logits (see the module docs).
const FIXTURE: &str = include_str!("fixtures/tiny-logits.json");

/// Chunks of 8 over pages of 4: prefill crosses chunk and page boundaries.
fn opts() -> Options {
    Options { chunk: 8, context: Some(128), all_logits: true }
}

async fn load() -> (Gpu, Vec<u8>, Model, KvCache) {
    let gpu = dual::gpu().await;
    let file = tiny_gguf(1);
    let model = Model::load(&gpu, &file, opts()).await.expect("load the tiny model");
    let kv = model.kv_cache(&gpu, 32, 4).await.expect("KV cache");
    (gpu, file, model, kv)
}

fn tokens(seed: u64, n: usize) -> Vec<u32> {
    let mut rng = Rng(seed);
    (0..n).map(|_| rng.below(VOCAB) as u32).collect()
}

/// Compares rows of GPU logits with the matching rows of reference logits (`first_row` is the
/// sequence position of `got`'s first row); panics naming row, column and both values. Returns
/// the largest |Δ|.
fn compare(what: &str, got: &[f32], want: &[f32], first_row: usize) -> f32 {
    assert_eq!(got.len() % VOCAB, 0, "{what}: {} logits is not whole rows", got.len());
    let want = &want[first_row * VOCAB..][..got.len()];
    let mut max = 0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        if d.is_nan() || d > TOL * w.abs().max(1.0) {
            panic!("{what}: row {} column {}: gpu {g} vs reference {w} (|Δ| {d})", first_row + i / VOCAB, i % VOCAB);
        }
        max = max.max(d);
    }
    max
}

/// The index of the largest value and the gap to the runner-up.
fn top2(row: &[f32]) -> (u32, f32) {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    let second = row.iter().enumerate().filter(|(i, _)| *i != best).map(|(_, v)| *v).fold(f32::NEG_INFINITY, f32::max);
    (best as u32, row[best] - second)
}

/// The GPU argmax of rows `first_row..` must be the oracle's wherever its top-2 gap exceeds 1e-3.
fn check_argmax(what: &str, got: &[u32], want: &[f32], first_row: usize) {
    for (i, &a) in got.iter().enumerate() {
        let r = first_row + i;
        let (best, gap) = top2(&want[r * VOCAB..][..VOCAB]);
        if gap > TOL {
            assert_eq!(a, best, "{what}: argmax of row {r} (oracle top-2 gap {gap})");
        }
    }
}

/// Scores 21 tokens in chunks of 8, 8, 5 (every row's logits) against the oracle.
async fn score_matches_oracle() {
    let (gpu, file, model, kv) = load().await;
    let toks = tokens(1, 21);
    let want = oracle_logits(&file, &toks).unwrap();
    let mut seq = kv.sequence(toks.len());
    let mut got = Vec::new();
    model.score(&gpu, &kv, &mut seq, &toks, |_, r| got.extend_from_slice(r)).await.unwrap();
    assert_eq!(got.len(), toks.len() * VOCAB);
    assert_eq!(seq.len(), toks.len());
    let max = compare("score", &got, &want, 0);
    // The last chunk's argmaxes are still in the model's buffer.
    let last = model.read_argmax(&gpu, 5).await.unwrap();
    check_argmax("score", &last, &want, 16);
    log!("score 21 tokens: max |Δ| {max:e} on {} adapter", gpu.describe());
}

/// Prefills 13 tokens (chunks of 8 and 5), then decodes 8 more one at a time, on every kernel
/// variant the adapter has (Rows, Lanes where subgroups have a fixed size, Coop), with the norms
/// and SwiGLU fused into the projections and not.
async fn decode_matches_oracle() {
    let (gpu, file, mut model, kv) = load().await;
    let toks = tokens(2, 21);
    let want = oracle_logits(&file, &toks).unwrap();
    let lanes = Variant::available(&gpu).contains(&Variant::Lanes);
    let combos = [(Variant::Rows, true), (Variant::Rows, false), (Variant::Lanes, false), (Variant::Coop, true)];
    for (kind, fuse) in combos.into_iter().filter(|(k, _)| *k != Variant::Lanes || lanes) {
        model.use_kernels(kind);
        model.fuse_decode(fuse);
        let mut seq = kv.sequence(toks.len());
        model.prefill(&gpu, &kv, &mut seq, &toks[..13]).await.unwrap();
        let mut max = compare("prefill", &model.read_logits(&gpu, 1).await.unwrap(), &want, 12);
        check_argmax("prefill", &model.read_argmax(&gpu, 1).await.unwrap(), &want, 12);
        for (i, &tok) in toks.iter().enumerate().skip(13) {
            model.decode_step(&gpu, &kv, &mut seq, tok).await.unwrap();
            assert_eq!(seq.len(), i + 1);
            let what = format!("{kind:?} (fused {fuse}) decode step at position {i}");
            max = max.max(compare(&what, &model.read_logits(&gpu, 1).await.unwrap(), &want, i));
            check_argmax(&what, &model.read_argmax(&gpu, 1).await.unwrap(), &want, i);
        }
        log!("{kind:?}, fused {fuse}: prefill 13 + decode 8: max |Δ| {max:e}");
    }
}

/// Greedy decoding queued ahead on the GPU (`decode_greedy`, the argmax feeding the next step)
/// gives the tokens and the K/V of step-by-step decoding (`decode_step` + `read_argmax`), in
/// runs of 1, 5 and 12 steps, and after a truncation mid-run.
async fn greedy_ahead_matches_step_by_step() {
    let (gpu, _, model, kv) = load().await;
    let prompt = tokens(5, 6);
    let free = kv.free_pages();
    let mut seq = kv.sequence(64);
    model.prefill(&gpu, &kv, &mut seq, &prompt).await.unwrap();
    let first = model.read_argmax(&gpu, 1).await.unwrap()[0];
    let mut want = Vec::new();
    let mut next = first;
    for _ in 0..18 {
        model.decode_step(&gpu, &kv, &mut seq, next).await.unwrap();
        next = model.read_argmax(&gpu, 1).await.unwrap()[0];
        want.push(next);
    }
    let want_logits = model.read_logits(&gpu, 1).await.unwrap();
    drop(seq);
    assert_eq!(kv.free_pages(), free, "pages return to the pool");
    let mut seq = kv.sequence(64);
    model.prefill(&gpu, &kv, &mut seq, &prompt).await.unwrap();
    let mut got = Vec::new();
    let mut next = first;
    for n in [1, 5, 12] {
        let ids = model.decode_greedy(&gpu, &kv, &mut seq, next, n).await.unwrap();
        assert_eq!(ids.len(), n);
        got.extend_from_slice(&ids);
        next = *ids.last().unwrap();
        assert_eq!(seq.len(), prompt.len() + got.len());
    }
    assert_eq!(got, want, "decoded ahead vs step by step");
    // The last step's logits are the step-by-step run's, bit for bit: same kernels, same K/V.
    assert_eq!(model.read_logits(&gpu, 1).await.unwrap(), want_logits);
    // Steps past a stop are dropped by truncation; decoding on from there matches again.
    seq.truncate(prompt.len() + 9).unwrap();
    let ids = model.decode_greedy(&gpu, &kv, &mut seq, want[8], 9).await.unwrap();
    assert_eq!(ids, want[9..18], "after truncating 9 steps decoded ahead");
    assert!(model.decode_greedy(&gpu, &kv, &mut seq, next, 0).await.is_err(), "zero steps is an error");
    assert!(model.decode_greedy(&gpu, &kv, &mut seq, VOCAB as u32, 2).await.is_err(), "a token past the vocabulary is an error");
    drop(seq);
    assert_eq!(kv.free_pages(), free, "pages return to the pool");
    log!("greedy ahead: {} tokens as step by step", got.len());
}

/// Runs 21 tokens, truncates to 6 (mid-page), feeds a different continuation of 11 in forward
/// calls of 3 (matvec path) and 8 (tiled), and compares with the oracle of the new sequence.
async fn truncate_and_refeed_matches_oracle() {
    let (gpu, file, model, kv) = load().await;
    let first = tokens(3, 21);
    let mut seq = kv.sequence(first.len());
    model.prefill(&gpu, &kv, &mut seq, &first).await.unwrap();
    let free = kv.free_pages();
    seq.truncate(6).unwrap();
    assert_eq!(seq.len(), 6);
    assert_eq!(kv.free_pages(), free + 6 - 2, "21 tokens held 6 pages of 4, 6 tokens hold 2");
    let mut toks = first[..6].to_vec();
    toks.extend(tokens(4, 11));
    assert_ne!(toks[6..], first[6..17], "a different continuation");
    let want = oracle_logits(&file, &toks).unwrap();
    let mut max = 0f32;
    for (start, end) in [(6, 9), (9, 17)] {
        model.forward(&gpu, &kv, &mut seq, &toks[start..end], Logits::All).await.unwrap();
        assert_eq!(seq.len(), end);
        let what = format!("after truncation, positions {start}..{end}");
        max = max.max(compare(&what, &model.read_logits(&gpu, end - start).await.unwrap(), &want, start));
        check_argmax(&what, &model.read_argmax(&gpu, end - start).await.unwrap(), &want, start);
    }
    log!("truncate to 6 + re-feed 11: max |Δ| {max:e}");
}

/// This build's logits equal the native build's (the fixture) within 1e-3.
async fn matches_native_fixture() {
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).expect("fixture is JSON");
    let toks: Vec<u32> = fixture["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let want: Vec<f32> = fixture["logits"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    assert_eq!(toks.len(), 12);
    assert_eq!(want.len(), toks.len() * VOCAB, "fixture logits are [12, {VOCAB}]");
    let (gpu, _, model, kv) = load().await;
    let mut seq = kv.sequence(toks.len());
    let mut got = Vec::new();
    model.score(&gpu, &kv, &mut seq, &toks, |_, r| got.extend_from_slice(r)).await.unwrap();
    let max = compare("native fixture (stale? rerun scripts/make-tiny-fixture.sh)", &got, &want, 0);
    log!("vs native fixture: max |Δ| {max:e}");
}

gpu_test!(score_matches_the_cpu_oracle, score_matches_oracle);
gpu_test!(prefill_then_decode_matches_the_cpu_oracle, decode_matches_oracle);
gpu_test!(greedy_decoding_ahead_matches_step_by_step, greedy_ahead_matches_step_by_step);
gpu_test!(truncate_then_refeed_matches_the_cpu_oracle, truncate_and_refeed_matches_oracle);
gpu_test!(logits_match_the_native_fixture, matches_native_fixture);
