//! Every weight format against llama.cpp on whole models, natively: llama.cpp's own
//! quantizations of the default model (scripts/make-formats.sh: Q4_K_M, Q5_K_M, Q6_K, Q3_K_S,
//! Q2_K, Q4_0, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS, BF16) and random-weight tiny llama models whose
//! every matrix has 256-value rows (scripts/make-tiny-formats.sh), each scored on the prompts of
//! its llama.cpp reference in tests/data/formats/ against bounds derived from llama.cpp against
//! itself (tests/data/formats/bounds.json, by scripts/format-bounds.py; README beside the data).
//!
//! Each file: its tensor types are the histogram recorded when it was made; it loads with GPU
//! weight bytes within 2% of its GGUF tensor bytes; teacher-forced over prompt + llama.cpp's
//! greedy continuation, top-1 agreement, top-1 flips at llama.cpp gaps, mean |Δlogit| on
//! llama.cpp's top-5, KL at the last prompt position and greedy agreement stay within its bounds.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;

use hotprefix::model::{Model, Options};
use serde_json::Value;

mod common;
mod dual;

fn data(name: &str) -> Value {
    let path = common::root().join("tests/data/formats").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("missing test data: {} ({e}); it is part of the repository (tests/data/formats/README.md)", path.display())
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("an array").iter().map(|x| x.as_u64().expect("an id") as u32).collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().expect("an array").iter().map(|x| x.as_f64().expect("a number")).collect()
}

fn argmax(r: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in r.iter().enumerate() {
        if *v > r[best] {
            best = i;
        }
    }
    best as u32
}

/// What a run scores against a reference (the quantities of scripts/peer/tolerances.py, plus KL).
#[derive(Debug, Default)]
struct Score {
    positions: usize,
    agree: usize,
    /// (prompt, position, llama.cpp's top-1 − top-2 gap) of each top-1 disagreement on the prompt.
    flips: Vec<(String, usize, f64)>,
    dl_sum: f64,
    dl_n: usize,
    kl_sum: f64,
    prompts: usize,
    greedy_agree: usize,
    greedy_total: usize,
}

impl Score {
    fn top1(&self) -> f64 {
        self.agree as f64 / self.positions as f64
    }
    fn dmean(&self) -> f64 {
        self.dl_sum / self.dl_n as f64
    }
    fn kl(&self) -> f64 {
        self.kl_sum / self.prompts as f64
    }
    fn greedy(&self) -> f64 {
        self.greedy_agree as f64 / self.greedy_total as f64
    }
    fn max_flip_gap(&self) -> f64 {
        self.flips.iter().map(|f| f.2).fold(0.0, f64::max)
    }
}

/// Scores the model file `path` against the slim reference `reference`.
fn score(path: &std::path::Path, reference: &Value) -> (Score, u64, u64) {
    let file = std::fs::read(path).unwrap_or_else(|e| panic!("missing test data: {} ({e}); run scripts/make-formats.sh", path.display()));
    pollster::block_on(async {
        let gpu = dual::gpu().await;
        let opts = Options { chunk: 64, context: Some(1024), all_logits: true };
        let model = Model::load(&gpu, &file, opts).await.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let kv = model.kv_cache(&gpu, 1024 / 16, 16).await.expect("KV cache");
        let gguf_bytes: u64 = hotprefix::gguf::Gguf::parse(&file).unwrap().tensors.iter().map(|t| t.bytes).sum();
        let mut s = Score::default();
        for p in reference["prompts"].as_array().expect("prompts") {
            let id = p["id"].as_str().expect("id").to_string();
            let prompt = ids(&p["token_ids"]);
            let greedy = ids(&p["greedy"]["ids"]);
            let top_ids = p["prompt_top5"]["ids"].as_array().expect("top-5 ids");
            let top_logits = p["prompt_top5"]["logits"].as_array().expect("top-5 logits");
            let (last_ids, last_logits, lse) =
                (ids(&p["last_top_ids"]), floats(&p["last_top_logits"]), p["last_logsumexp"].as_f64().expect("lse"));
            let mut all = prompt.clone();
            all.extend(&greedy);
            let mut seq = kv.sequence(all.len());
            let n = prompt.len();
            model
                .score(&gpu, &kv, &mut seq, &all, |i, row| {
                    let ours = argmax(row);
                    if i < n {
                        let ids5 = ids(&top_ids[i]);
                        let l5 = floats(&top_logits[i]);
                        s.positions += 1;
                        if ours == ids5[0] {
                            s.agree += 1;
                        } else {
                            s.flips.push((id.clone(), i, l5[0] - l5[1]));
                        }
                        for (t, l) in ids5.iter().zip(&l5) {
                            s.dl_sum += (row[*t as usize] as f64 - l).abs();
                            s.dl_n += 1;
                        }
                        if i == n - 1 {
                            // KL(llama.cpp ‖ ours) over llama.cpp's 64 most likely tokens (the
                            // reference keeps those and its row's log-sum-exp).
                            let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
                            let z = row.iter().map(|v| (*v as f64 - m).exp()).sum::<f64>().ln() + m;
                            s.kl_sum += last_ids
                                .iter()
                                .zip(&last_logits)
                                .map(|(t, l)| {
                                    let lp = l - lse;
                                    lp.exp() * (lp - (row[*t as usize] as f64 - z))
                                })
                                .sum::<f64>();
                            s.prompts += 1;
                        }
                    }
                    if i + 1 >= n && i + 1 - n < greedy.len() {
                        s.greedy_total += 1;
                        s.greedy_agree += (ours == greedy[i + 1 - n]) as usize;
                    }
                })
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        (s, model.weight_bytes(), gguf_bytes)
    })
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
        let reference = data(&format!("{stem}-llamacpp.json"));
        let (s, gpu_bytes, gguf_bytes) = score(&path, &reference);
        let b = &bounds[stem];
        let bound = |k: &str| b[k].as_f64().unwrap_or_else(|| panic!("bounds.json: {stem}.{k}"));
        let big: Vec<_> = s.flips.iter().filter(|f| f.2 > bound("max_flip_gap")).collect();
        println!(
            "{stem} ({ftype}, {want:?}): GPU {gpu_bytes} B for {gguf_bytes} B GGUF ({:+.2}%); top-1 {}/{} = {:.2}% (≥ {:.2}%), max flip gap {:.3} (≤ {:.3}), mean |Δlogit| {:.4} (≤ {:.4}), KL {:.5} (≤ {:.5}), greedy {:.2}% (≥ {:.2}%)",
            100.0 * (gpu_bytes as f64 / gguf_bytes as f64 - 1.0),
            s.agree,
            s.positions,
            100.0 * s.top1(),
            100.0 * bound("top1"),
            s.max_flip_gap(),
            bound("max_flip_gap"),
            s.dmean(),
            bound("dmean_top5"),
            s.kl(),
            bound("kl"),
            100.0 * s.greedy(),
            100.0 * bound("greedy")
        );
        let mut fail = |what: String| failures.push(format!("{stem}: {what}"));
        if gpu_bytes as f64 > 1.02 * gguf_bytes as f64 {
            fail(format!("GPU weight bytes {gpu_bytes} > 1.02 × GGUF {gguf_bytes}"));
        }
        if s.top1() < bound("top1") {
            fail(format!("top-1 {:.4} < {:.4}", s.top1(), bound("top1")));
        }
        if !big.is_empty() {
            fail(format!("top-1 flips where llama.cpp's gap > {}: {big:?}", bound("max_flip_gap")));
        }
        if s.dmean() > bound("dmean_top5") {
            fail(format!("mean |Δlogit| {:.4} > {:.4}", s.dmean(), bound("dmean_top5")));
        }
        if s.kl() > bound("kl") {
            fail(format!("KL {:.5} > {:.5}", s.kl(), bound("kl")));
        }
        if s.greedy() < bound("greedy") {
            fail(format!("greedy agreement {:.4} < {:.4}", s.greedy(), bound("greedy")));
        }
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
