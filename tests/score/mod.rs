//! Scoring a model file against a slim llama.cpp reference (tests/data/formats/): the quantities of
//! scripts/peer/tolerances.py plus the KL at the last prompt position. Shared by tests/formats.rs
//! (native) and tests/formats_browser.rs (headless Chromium).
#![allow(dead_code)]

use hotprefix::gpu::Gpu;
use hotprefix::model::{Model, Options};
use serde_json::Value;

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("an array").iter().map(|x| x.as_u64().expect("an id") as u32).collect()
}

pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array().expect("an array").iter().map(|x| x.as_f64().expect("a number")).collect()
}

pub fn argmax(r: &[f32]) -> u32 {
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
pub struct Score {
    pub positions: usize,
    pub agree: usize,
    /// (prompt, position, llama.cpp's top-1 − top-2 gap) of each top-1 disagreement on the prompt.
    pub flips: Vec<(String, usize, f64)>,
    dl_sum: f64,
    dl_n: usize,
    kl_sum: f64,
    prompts: usize,
    greedy_agree: usize,
    greedy_total: usize,
}

impl Score {
    pub fn top1(&self) -> f64 {
        self.agree as f64 / self.positions as f64
    }
    pub fn dmean(&self) -> f64 {
        self.dl_sum / self.dl_n as f64
    }
    pub fn kl(&self) -> f64 {
        self.kl_sum / self.prompts as f64
    }
    pub fn greedy(&self) -> f64 {
        self.greedy_agree as f64 / self.greedy_total as f64
    }
    pub fn max_flip_gap(&self) -> f64 {
        self.flips.iter().map(|f| f.2).fold(0.0, f64::max)
    }
}

/// Scores the GGUF `file` against the slim reference `reference` on `gpu`: teacher-forced over
/// each prompt and llama.cpp's greedy continuation, in prefill chunks of 64 tokens, or with
/// `decode` a decode step a token (every position on the matrix-vector kernels, as generation runs
/// them). Returns the score, the model's GPU weight bytes and the file's tensor bytes.
pub async fn score(gpu: &Gpu, file: &[u8], reference: &Value, decode: bool) -> Result<(Score, u64, u64), hotprefix::Error> {
    let opts = Options { chunk: 64, context: Some(1024), all_logits: true };
    let model = Model::load(gpu, file, opts).await?;
    let kv = model.kv_cache(gpu, 1024 / 16, 16).await?;
    let gguf_bytes: u64 = hotprefix::gguf::Gguf::parse(file)?.tensors.iter().map(|t| t.bytes).sum();
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
        let mut visit = |i: usize, row: &[f32]| {
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
        };
        if decode {
            for (i, &token) in all.iter().enumerate() {
                model.decode_step(gpu, &kv, &mut seq, token).await?;
                visit(i, &model.read_logits(gpu, 1).await?);
            }
        } else {
            model.score(gpu, &kv, &mut seq, &all, &mut visit).await?;
        }
    }
    Ok((s, model.weight_bytes(), gguf_bytes))
}

impl Score {
    /// One line of the score against `bounds` (a file's entry of tests/data/formats/bounds.json).
    pub fn summary(&self, bounds: &Value) -> String {
        let b = |k: &str| bounds[k].as_f64().unwrap_or(f64::NAN);
        format!(
            "top-1 {}/{} = {:.2}% (≥ {:.2}%), max flip gap {:.3} (≤ {:.3}), mean |Δlogit| {:.4} (≤ {:.4}), KL {:.5} (≤ {:.5}), greedy {:.2}% (≥ {:.2}%)",
            self.agree,
            self.positions,
            100.0 * self.top1(),
            100.0 * b("top1"),
            self.max_flip_gap(),
            b("max_flip_gap"),
            self.dmean(),
            b("dmean_top5"),
            self.kl(),
            b("kl"),
            100.0 * self.greedy(),
            100.0 * b("greedy")
        )
    }

    /// What falls outside `bounds`, with `slack` taken off the top-1 and greedy floors (fewer
    /// prompts than the bounds were pooled over), and GPU weight bytes above 1.02 × the file's.
    pub fn failures(&self, bounds: &Value, slack: f64, gpu_bytes: u64, gguf_bytes: u64) -> Vec<String> {
        let b = |k: &str| bounds[k].as_f64().unwrap_or_else(|| panic!("bounds.json: no {k}"));
        let mut out = Vec::new();
        if gpu_bytes as f64 > 1.02 * gguf_bytes as f64 {
            out.push(format!("GPU weight bytes {gpu_bytes} > 1.02 × GGUF {gguf_bytes}"));
        }
        if self.top1() < b("top1") - slack {
            out.push(format!("top-1 {:.4} < {:.4}", self.top1(), b("top1") - slack));
        }
        let big: Vec<_> = self.flips.iter().filter(|f| f.2 > b("max_flip_gap")).collect();
        if !big.is_empty() {
            out.push(format!("top-1 flips where llama.cpp's gap > {}: {big:?}", b("max_flip_gap")));
        }
        if self.dmean() > b("dmean_top5") {
            out.push(format!("mean |Δlogit| {:.4} > {:.4}", self.dmean(), b("dmean_top5")));
        }
        if self.kl() > b("kl") {
            out.push(format!("KL {:.5} > {:.5}", self.kl(), b("kl")));
        }
        if self.greedy() < b("greedy") - slack {
            out.push(format!("greedy agreement {:.4} < {:.4}", self.greedy(), b("greedy") - slack));
        }
        out
    }
}
