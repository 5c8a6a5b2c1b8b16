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
    wasm_bindgen_test::console_log!("{stem} on {}: {}", gpu.describe(), s.summary(b));
    // Two prompts are fewer positions than the bounds were pooled over: 5 points of slack on the
    // top-1 and greedy floors.
    let failures = s.failures(b, 0.05, gpu_bytes, gguf_bytes);
    assert!(failures.is_empty(), "{stem}: {}", failures.join("; "));
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
