//! Scoring a set of model files against llama.cpp's references (tests/data/formats/ for the
//! weight formats, tests/data/archs/ for the architectures): each file's tensor types, GPU bytes
//! and agreement within the bounds derived from llama.cpp against itself. Native only (it reads
//! models/).
#![allow(dead_code)]

use hotprefix::quant::Format;
use std::collections::BTreeMap;

use serde_json::Value;

use super::{common, dual, score};

/// `tests/data/<dir>/<name>`, parsed.
pub fn data(dir: &str, name: &str) -> Value {
    let path = common::root().join("tests/data").join(dir).join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("missing test data: {} ({e}); it is part of the repository (tests/data/{dir}/README.md)", path.display())
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The file's tensor-type histogram, as `hotprefix info` counts it.
pub fn histogram(file: &[u8]) -> BTreeMap<String, u64> {
    let g = hotprefix::gguf::Gguf::parse(file).expect("GGUF");
    let mut h = BTreeMap::new();
    for t in &g.tensors {
        let name = hotprefix::gguf::ggml_type(t.ggml_type).map_or("?", |t| t.name);
        *h.entry(name.to_string()).or_insert(0) += 1;
    }
    h
}

/// Scores every file of tests/data/<dir>/files.json whose stem starts with `set` (formats:
/// "smollm2" or "tiny"; archs: "tiny") against llama.cpp's reference and the bounds beside it;
/// the file itself is models/<dir>/<file>. `HOTPREFIX_ONLY=stem,stem…` narrows the run while
/// working on one file.
pub fn check_set(dir: &str, set: &str) {
    let files = data(dir, "files.json");
    let bounds = data(dir, "bounds.json");
    let mut failures = Vec::new();
    let mut checked = 0;
    let only = std::env::var("HOTPREFIX_ONLY").or_else(|_| std::env::var("HOTPREFIX_FORMATS")).ok();
    for (stem, f) in files.as_object().expect("files") {
        // Not scored: a file for tests/tokenizer.rs alone (tiny-spm).
        if f.get("tokenizer_only") == Some(&Value::Bool(true)) {
            continue;
        }
        let (name, ftype) = (f["file"].as_str().expect("file"), f["ftype"].as_str().or(f["arch"].as_str()).expect("ftype or arch"));
        if !name.starts_with(&format!("{set}-")) || only.as_ref().is_some_and(|o| !o.split(',').any(|s| s == stem)) {
            continue;
        }
        let path = common::root().join("models").join(dir).join(name);
        let want: BTreeMap<String, u64> =
            f["tensor_types"].as_object().expect("types").iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap())).collect();
        let file =
            std::fs::read(&path).unwrap_or_else(|e| panic!("missing test data: {} ({e}); run scripts/make-{dir}.sh", path.display()));
        assert_eq!(histogram(&file), want, "{name}: tensor types differ from tests/data/{dir}/files.json (rerun scripts/make-{dir}.sh)");
        let b = &bounds[stem];
        // The prompts the bounds were derived on (three of the nine for the default model's files).
        let mut reference = data(dir, &format!("{stem}-llamacpp.json"));
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
        let gpu = pollster::block_on(dual::gpu());
        let (s, gpu_bytes, gguf_bytes) =
            pollster::block_on(score::score(&gpu, &file, &reference, false)).unwrap_or_else(|e| panic!("{stem}: {e}"));
        println!(
            "{stem} ({ftype}, {want:?}): GPU {gpu_bytes} B for {gguf_bytes} B GGUF ({:+.2}%); {}",
            100.0 * (gpu_bytes as f64 / gguf_bytes as f64 - 1.0),
            s.summary(b)
        );
        failures.extend(s.failures(b, 0.0, gpu_bytes, gguf_bytes).into_iter().map(|f| format!("{stem}: {f}")));
        // A file with a format whose matrix-vector kernel rounds x to integers (FORMATS' x_bits
        // column) is also scored a decode step a token, every position on that kernel, against the
        // same bounds (llama.cpp's were derived with n_ubatch = 1 among its candidates).
        if want.keys().any(|t| Format::from_name(t).is_some_and(|f| f.info().x_bits > 0)) {
            let (s, _, _) =
                pollster::block_on(score::score(&gpu, &file, &reference, true)).unwrap_or_else(|e| panic!("{stem} (decode kernels): {e}"));
            println!("{stem} (decode kernels, a step a token): {}", s.summary(b));
            failures.extend(s.failures(b, 0.0, gpu_bytes, gguf_bytes).into_iter().map(|f| format!("{stem} (decode kernels): {f}")));
        }
        checked += 1;
    }
    assert!(checked > 0, "no {set} files in tests/data/{dir}/files.json");
    assert!(failures.is_empty(), "{} of {checked} files outside their bounds:\n{}", failures.len(), failures.join("\n"));
}
