//! Writes tests/fixtures/tiny-logits.json: the native GPU's logits of the tiny test model
//! (`hotprefix::testmodel::tiny_gguf(1)`) on a fixed 12-token sequence, scored with the options
//! tests/tiny_model.rs uses. The browser test compares its own logits with these (native and wasm
//! builds must agree within 1e-3); the native test does too, so a stale fixture fails there.
//! Run it through scripts/make-tiny-fixture.sh.

use hotprefix::gpu::Gpu;
use hotprefix::model::{Model, Options};
use hotprefix::testmodel;

/// The fixed sequence (ids < 320), crossing a chunk (8) and page (4) boundary.
const TOKENS: [u32; 12] = [3, 141, 59, 265, 35, 89, 79, 32, 38, 46, 264, 33];

/// `v` with 7 significant digits, as a JSON number.
fn sig7(v: f32) -> String {
    assert!(v.is_finite(), "non-finite logit {v}");
    if v == 0.0 {
        return "0".into();
    }
    let decimals = (6 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.decimals$}")
}

fn main() {
    let out = std::env::args().nth(1).unwrap_or_else(|| format!("{}/tests/fixtures/tiny-logits.json", env!("CARGO_MANIFEST_DIR")));
    let file = testmodel::tiny_gguf(1);
    let rows = pollster::block_on(async {
        let gpu = Gpu::new().await.expect("a GPU adapter");
        eprintln!("adapter: {}", gpu.describe());
        let opts = Options { chunk: 8, context: Some(128), all_logits: true };
        let model = Model::load(&gpu, &file, opts).await.expect("load the tiny model");
        let kv = model.kv_cache(&gpu, 32, 4).await.expect("KV cache");
        let mut seq = kv.sequence(TOKENS.len());
        let mut rows: Vec<Vec<f32>> = Vec::new();
        model.score(&gpu, &kv, &mut seq, &TOKENS, |_, r| rows.push(r.to_vec())).await.expect("score");
        rows
    });
    let tokens: Vec<String> = TOKENS.iter().map(|t| t.to_string()).collect();
    let lines: Vec<String> = rows.iter().map(|r| r.iter().map(|v| sig7(*v)).collect::<Vec<_>>().join(", ")).collect();
    let json = format!("{{\"tokens\": [{}],\n\"logits\": [\n{}\n]}}\n", tokens.join(", "), lines.join(",\n"));
    std::fs::write(&out, json).unwrap_or_else(|e| panic!("{out}: {e}"));
    println!("wrote {out}: {} rows of {} logits", rows.len(), rows.first().map_or(0, |r| r.len()));
}
