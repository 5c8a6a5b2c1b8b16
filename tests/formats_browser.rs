//! K-quant files against llama.cpp in headless Chromium (`wasm-pack test`): llama.cpp's Q2_K and
//! Q4_K_M quantizations of the tiny 256-wide llama (tests/data/formats/README.md; Q2_K, Q3_K, Q4_K
//! and Q6_K weights in every role, the embedding and tied head included), scored as tests/formats.rs
//! scores them natively, on two of the reference's prompts (SwiftShader is slow), against the same
//! per-file bounds. The files are made by scripts/make-formats.sh (scripts/test.sh runs it before
//! the browser tests) and compiled into the test binary: the browser test cannot read files.
#![cfg(target_arch = "wasm32")]

use serde_json::Value;

mod dual;
mod score;

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// Scores `file` on the reference's prompts `ids` against the bounds of `stem`.
async fn check(stem: &str, file: &[u8], reference: &str, prompts: &[&str]) {
    let bounds: Value = serde_json::from_str(include_str!("data/formats/bounds.json")).expect("bounds.json");
    let mut reference: Value = serde_json::from_str(reference).expect("reference JSON");
    let all = reference["prompts"].as_array().expect("prompts").clone();
    reference["prompts"] = Value::Array(all.into_iter().filter(|p| prompts.contains(&p["id"].as_str().unwrap_or(""))).collect());
    assert_eq!(reference["prompts"].as_array().map(Vec::len), Some(prompts.len()), "{stem}: prompts {prompts:?}");
    let gpu = dual::gpu().await;
    let (s, gpu_bytes, gguf_bytes) = score::score(&gpu, file, &reference).await.unwrap_or_else(|e| panic!("{stem}: {e}"));
    let b = &bounds[stem];
    let bound = |k: &str| b[k].as_f64().unwrap_or_else(|| panic!("bounds.json: {stem}.{k}"));
    wasm_bindgen_test::console_log!(
        "{stem} on {}: top-1 {}/{} = {:.2}%, max flip gap {:.3} (≤ {:.3}), mean |Δlogit| {:.4} (≤ {:.4}), KL {:.5} (≤ {:.5}), greedy {:.2}%",
        gpu.describe(),
        s.agree,
        s.positions,
        100.0 * s.top1(),
        s.max_flip_gap(),
        bound("max_flip_gap"),
        s.dmean(),
        bound("dmean_top5"),
        s.kl(),
        bound("kl"),
        100.0 * s.greedy()
    );
    assert!(gpu_bytes as f64 <= 1.02 * gguf_bytes as f64, "{stem}: GPU {gpu_bytes} B for {gguf_bytes} B");
    let big: Vec<_> = s.flips.iter().filter(|f| f.2 > bound("max_flip_gap")).collect();
    assert!(big.is_empty(), "{stem}: top-1 flips where llama.cpp's gap > {}: {big:?}", bound("max_flip_gap"));
    assert!(s.dmean() <= bound("dmean_top5"), "{stem}: mean |Δlogit| {}", s.dmean());
    assert!(s.kl() <= bound("kl"), "{stem}: KL {}", s.kl());
    // Two prompts are fewer positions than the bound was pooled over: 5 points of slack.
    assert!(s.top1() >= bound("top1") - 0.05, "{stem}: top-1 {}", s.top1());
    assert!(s.greedy() >= bound("greedy") - 0.05, "{stem}: greedy {}", s.greedy());
}

const PROMPTS: &[&str] = &["pub-06-chat-sky", "pub-09-chat-math"];

#[wasm_bindgen_test::wasm_bindgen_test]
async fn tiny_q4_k_m_agrees_with_llama_cpp() {
    let file = include_bytes!("../models/formats/tiny-Q4_K_M.gguf");
    check("tiny-Q4_K_M", file, include_str!("data/formats/tiny-Q4_K_M-llamacpp.json"), PROMPTS).await;
}

#[wasm_bindgen_test::wasm_bindgen_test]
async fn tiny_q2_k_agrees_with_llama_cpp() {
    let file = include_bytes!("../models/formats/tiny-Q2_K.gguf");
    check("tiny-Q2_K", file, include_str!("data/formats/tiny-Q2_K-llamacpp.json"), PROMPTS).await;
}
