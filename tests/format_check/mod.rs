//! The browser format check shared by tests/formats_browser*.rs: a file scored against llama.cpp's
//! reference as tests/formats.rs scores it natively, on two of the reference's prompts (SwiftShader
//! is slow), against the same per-file bounds.
#![allow(dead_code)]

use serde_json::Value;

use crate::{dual, score};

/// Scores `file` on the reference's prompts `ids` against the bounds of `stem` in `bounds`
/// (tests/data/formats/bounds.json or tests/data/archs/bounds.json).
pub async fn check(stem: &str, file: &[u8], reference: &str, bounds: &str, prompts: &[&str]) {
    let bounds: Value = serde_json::from_str(bounds).expect("bounds.json");
    let mut reference: Value = serde_json::from_str(reference).expect("reference JSON");
    let all = reference["prompts"].as_array().expect("prompts").clone();
    reference["prompts"] = Value::Array(all.into_iter().filter(|p| prompts.contains(&p["id"].as_str().unwrap_or(""))).collect());
    assert_eq!(reference["prompts"].as_array().map(Vec::len), Some(prompts.len()), "{stem}: prompts {prompts:?}");
    let gpu = dual::gpu().await;
    let (s, gpu_bytes, gguf_bytes) = score::score(&gpu, file, &reference, false).await.unwrap_or_else(|e| panic!("{stem}: {e}"));
    let b = &bounds[stem];
    wasm_bindgen_test::console_log!("{stem} on {}: {}", gpu.describe(), s.summary(b));
    // Two prompts are fewer positions than the bounds were pooled over: 5 points of slack on the
    // top-1 and greedy floors.
    let failures = s.failures(b, 0.05, gpu_bytes, gguf_bytes);
    assert!(failures.is_empty(), "{stem}: {}", failures.join("; "));
}

pub const PROMPTS: &[&str] = &["pub-06-chat-sky", "pub-09-chat-math"];

/// One browser test: the tiny file `$stem` (models/formats/$stem.gguf), compiled into the test
/// binary (the browser test cannot read files), against its reference.
#[allow(unused_macros)] // each test binary uses one of the two
macro_rules! tiny_format_test {
    ($name:ident, $stem:literal) => {
        #[wasm_bindgen_test::wasm_bindgen_test]
        async fn $name() {
            let file = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/models/formats/", $stem, ".gguf"));
            format_check::check(
                $stem,
                file,
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/formats/", $stem, "-llamacpp.json")),
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/formats/bounds.json")),
                format_check::PROMPTS,
            )
            .await;
        }
    };
}

/// One browser test of an architecture: the small-vocabulary tiny model `$stem`
/// (models/archs/$stem.gguf, scripts/make-archs.sh), compiled in, against its reference and the
/// bounds of tests/data/archs/.
#[allow(unused_macros)]
macro_rules! tiny_arch_test {
    ($name:ident, $stem:literal) => {
        #[wasm_bindgen_test::wasm_bindgen_test]
        async fn $name() {
            let file = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/models/archs/", $stem, ".gguf"));
            format_check::check(
                $stem,
                file,
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/archs/", $stem, "-llamacpp.json")),
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/archs/bounds.json")),
                format_check::PROMPTS,
            )
            .await;
        }
    };
}
