//! Every weight format against llama.cpp on whole models, natively: llama.cpp's own
//! quantizations of the default model (scripts/make-formats.sh: Q4_K_M, Q5_K_M, Q6_K, Q3_K_S,
//! Q2_K, Q4_0, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS, BF16) and random-weight tiny llama models whose
//! every matrix has 256-value rows (scripts/make-tiny-formats.py), each scored on the prompts of
//! its llama.cpp reference in tests/data/formats/ that bounds.json names (three for the default
//! model's files, nine for the tiny ones), against bounds derived from llama.cpp against itself on
//! those prompts (tests/data/formats/bounds.json, by scripts/format-bounds.py; README beside the
//! data).
//!
//! Each file: its tensor types are the histogram recorded when it was made; it loads with GPU
//! weight bytes within 2% of its GGUF tensor bytes; teacher-forced over prompt + llama.cpp's
//! greedy continuation, top-1 agreement, top-1 flips at llama.cpp gaps, mean |Δlogit| on
//! llama.cpp's top-5, KL at the last prompt position and greedy agreement stay within its bounds.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;

use serde_json::Value;

mod common;
mod dual;
mod score;

fn data(name: &str) -> Value {
    let path = common::root().join("tests/data/formats").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("missing test data: {} ({e}); it is part of the repository (tests/data/formats/README.md)", path.display())
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The file's tensor-type histogram, as `hotprefix info` counts it.
fn histogram(path: &std::path::Path) -> BTreeMap<String, u64> {
    let file = std::fs::read(path).unwrap_or_else(|e| panic!("missing test data: {} ({e}); run scripts/make-formats.sh", path.display()));
    let g = hotprefix::gguf::Gguf::parse(&file).expect("GGUF");
    let mut h = BTreeMap::new();
    for t in &g.tensors {
        let name = hotprefix::gguf::ggml_type(t.ggml_type).map_or("?", |t| t.name);
        *h.entry(name.to_string()).or_insert(0) += 1;
    }
    h
}

/// Scores every file of the `set` ("smollm2" or "tiny") in tests/data/formats/files.json.
fn check_set(set: &str) {
    let files = data("files.json");
    let bounds = data("bounds.json");
    let mut failures = Vec::new();
    let mut checked = 0;
    // HOTPREFIX_FORMATS=stem,stem… narrows the run while working on one format.
    let only = std::env::var("HOTPREFIX_FORMATS").ok();
    for (stem, f) in files.as_object().expect("files") {
        let (name, ftype) = (f["file"].as_str().expect("file"), f["ftype"].as_str().expect("ftype"));
        if !name.starts_with(&format!("{set}-")) || only.as_ref().is_some_and(|o| !o.split(',').any(|s| s == stem)) {
            continue;
        }
        let path = common::root().join("models/formats").join(name);
        let want: BTreeMap<String, u64> =
            f["tensor_types"].as_object().expect("types").iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap())).collect();
        assert_eq!(histogram(&path), want, "{name}: tensor types differ from files.json (rerun scripts/make-formats.sh)");
        let b = &bounds[stem];
        // The prompts the bounds were derived on (three of the nine for the default model's files).
        let mut reference = data(&format!("{stem}-llamacpp.json"));
        let prompts: Vec<&str> = b["prompts"].as_array().expect("bounds.json: prompts").iter().filter_map(Value::as_str).collect();
        let kept: Vec<Value> = reference["prompts"]
            .as_array()
            .expect("prompts")
            .iter()
            .filter(|p| prompts.contains(&p["id"].as_str().unwrap_or("")))
            .cloned()
            .collect();
        assert_eq!(kept.len(), prompts.len(), "{stem}: the reference lacks some of {prompts:?}");
        reference["prompts"] = Value::Array(kept);
        let file =
            std::fs::read(&path).unwrap_or_else(|e| panic!("missing test data: {} ({e}); run scripts/make-formats.sh", path.display()));
        let gpu = pollster::block_on(dual::gpu());
        let (s, gpu_bytes, gguf_bytes) =
            pollster::block_on(score::score(&gpu, &file, &reference)).unwrap_or_else(|e| panic!("{stem}: {e}"));
        println!(
            "{stem} ({ftype}, {want:?}): GPU {gpu_bytes} B for {gguf_bytes} B GGUF ({:+.2}%); {}",
            100.0 * (gpu_bytes as f64 / gguf_bytes as f64 - 1.0),
            s.summary(b)
        );
        failures.extend(s.failures(b, 0.0, gpu_bytes, gguf_bytes).into_iter().map(|f| format!("{stem}: {f}")));
        checked += 1;
    }
    assert!(checked > 0, "no {set} files in tests/data/formats/files.json");
    assert!(failures.is_empty(), "{} of {checked} files outside their bounds:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn llama_cpp_quantizations_of_the_default_model_agree_with_llama_cpp() {
    check_set("smollm2");
}

#[test]
fn tiny_models_with_256_value_rows_agree_with_llama_cpp() {
    check_set("tiny");
}
