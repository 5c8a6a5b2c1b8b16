//! Every architecture against llama.cpp, natively: a random-weight tiny model of each
//! (scripts/make-archs.sh: qwen2 with Q/K/V biases, qwen3 with QK-norm and wide heads, llama with
//! Llama-3's RoPE frequency factors, gemma3 with its sliding window, norms and GeGLU, phi3 with
//! fused projections, partial rotary and LongRoPE; real Qwen3 and Llama-3 vocabularies) scored on
//! the nine public prompts of its llama.cpp reference (tests/data/archs/) within the bounds derived
//! from llama.cpp against itself (tests/data/archs/bounds.json, by scripts/format-bounds.py), as
//! tests/formats.rs scores the weight formats; and Gemma-3-270m itself. And on each tiny model, the
//! prompt cache: a cached prefix gives the logits and tokens of a cold run, bit for bit.
#![cfg(not(target_arch = "wasm32"))]

use hotprefix::engine::{Engine, EngineOptions, GenerateParams};
use hotprefix::rng::Rng;

mod common;
mod data_set;
mod dual;
mod score;

#[test]
fn every_architecture_agrees_with_llama_cpp() {
    data_set::check_set("archs", "tiny");
    // The small-vocabulary versions the browser tests score (tests/archs_browser*.rs).
    data_set::check_set("archs", "web");
}

/// Gemma-3-270m, the real model (Q4_K_M: Q5_0, Q4_K, Q6_K and Q8_0 tensors, a 262,144-token
/// embedding larger than one binding), on three of the nine prompts (code, odd whitespace and
/// emoji, a multi-turn chat rendered with llama.cpp's built-in gemma template), within the bounds
/// derived from llama.cpp against itself on this file.
#[test]
fn gemma3_270m_agrees_with_llama_cpp() {
    data_set::check_set("archs", "gemma3");
}

/// The header alone (what the page's model picker reads) gives every architecture file the
/// verdict and config of the whole CPU load: NEOX permutations, fused tensors, biases, norms.
#[test]
fn the_header_check_agrees_with_the_cpu_load_on_every_architecture() {
    let files = data_set::data("archs", "files.json");
    for (stem, f) in files.as_object().expect("files") {
        let file = common::arch_file(f["file"].as_str().expect("file"));
        let g = hotprefix::gguf::Gguf::parse(&file).unwrap();
        let header_len = g.tensors.iter().map(|t| t.offset).min().unwrap_or(0) as usize;
        let header = hotprefix::gguf::Gguf::parse_header(&file[..header_len], file.len() as u64).unwrap();
        let full = hotprefix::preflight::check_model_cpu(&file).unwrap_or_else(|e| panic!("{stem}: {e}"));
        let from_header = hotprefix::preflight::check_header(&header).unwrap_or_else(|e| panic!("{stem}: the header check: {e}"));
        assert_eq!(from_header, full.config, "{stem}");
    }
}

/// Random prompts of the file's own vocabulary split at random points over pages of 4: prewarm
/// the head, then run the whole prompt. Exactly the head is cached, and the last logits and the
/// greedy tokens are a cold run's, bit for bit.
#[test]
fn cached_prefix_equals_cold_on_every_architecture() {
    let files = data_set::data("archs", "files.json");
    for (stem, f) in files.as_object().expect("files").iter().filter(|(stem, f)| {
        // `tokenizer_only` files (tiny-spm) exist for tests/tokenizer.rs alone.
        stem.starts_with("tiny-") && f.get("tokenizer_only") != Some(&serde_json::Value::Bool(true))
    }) {
        let file = common::arch_file(f["file"].as_str().expect("file"));
        pollster::block_on(async {
            let opts = EngineOptions { context: Some(256), kv_budget_mb: Some(2.0), page_size: 4, chunk: 16, ..EngineOptions::default() };
            let mut warm = Engine::load(dual::gpu().await, &file, opts.clone()).await.unwrap_or_else(|e| panic!("{stem}: {e}"));
            let mut cold = Engine::load(dual::gpu().await, &file, EngineOptions { cache: false, ..opts })
                .await
                .unwrap_or_else(|e| panic!("{stem}: {e}"));
            let vocab = warm.model().config().vocab;
            let mut rng = Rng(7);
            let greedy = |n| GenerateParams { max_tokens: n, ..GenerateParams::default() };
            for _ in 0..6 {
                let n = 2 + rng.below(70);
                let prompt: Vec<u32> = (0..n).map(|_| rng.below(vocab) as u32).collect();
                let cut = 1 + rng.below(n - 1);
                warm.clear_cache();
                warm.generate(&prompt[..cut], &greedy(0), |_| {}).await.unwrap();
                let w = warm.generate(&prompt, &greedy(3), |_| {}).await.unwrap();
                assert_eq!(w.cached_tokens, cut, "{stem}");
                let c = cold.generate(&prompt, &greedy(3), |_| {}).await.unwrap();
                assert_eq!(c.cached_tokens, 0, "{stem}");
                let (wl, cl) = (warm.last_logits().await.unwrap(), cold.last_logits().await.unwrap());
                let same = wl.iter().zip(&cl).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{stem}: {n} tokens split at {cut}: cached logits differ from cold ones");
                assert_eq!(w.tokens, c.tokens, "{stem}");
            }
        });
        println!("{stem}: 6 cached prefixes equal cold runs bit for bit");
    }
}
