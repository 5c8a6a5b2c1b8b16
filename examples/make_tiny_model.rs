//! Writes the tiny random-weight test model (`hotprefix::testmodel::tiny_gguf(1)`) to the path
//! given and prints a summary: `cargo run --example make_tiny_model -- OUT.gguf
//! [kv-heavy]` (or scripts/make-tiny-model.sh). `kv-heavy` writes `TinyShape::KV_HEAVY` instead
//! (16 KiB of K/V a position for little compute: tests and benchmarks of large resident caches).

use hotprefix::gguf::Gguf;
use hotprefix::model::Config;
use hotprefix::testmodel;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let shape = match args.get(2).map(String::as_str) {
        None => testmodel::TinyShape::DEFAULT,
        Some("kv-heavy") => testmodel::TinyShape::KV_HEAVY,
        Some(other) => {
            eprintln!("unknown shape {other:?}: kv-heavy, or none for the default");
            std::process::exit(2);
        }
    };
    let Some(path) = args.get(1) else {
        eprintln!("usage: make_tiny_model OUT.gguf [kv-heavy]");
        std::process::exit(2);
    };
    let bytes = testmodel::tiny_gguf_shaped(1, shape);
    if let Err(e) = std::fs::write(path, &bytes) {
        eprintln!("{path}: {e}");
        std::process::exit(1);
    }
    let g = Gguf::parse(&bytes).expect("the tiny model parses");
    let c = Config::from_gguf(&g).expect("the tiny model has a valid config");
    println!("wrote {path}: {} bytes, {} tensors", bytes.len(), g.tensors.len());
    println!(
        "llama: {} layers, width {}, {}/{} heads of {}, ffn {}, vocab {}, context {}, rope base {}, eps {}",
        c.n_layer, c.dim, c.n_head, c.n_kv_head, c.head_dim, c.ffn, c.vocab, c.context, c.rope_base, c.eps
    );
    for t in &g.tensors {
        println!("  {:<24} {:?} ggml type {} ({} bytes)", t.name, t.dims, t.ggml_type, t.bytes);
    }
    // The CPU reference on a few tokens, to show the logits are neither tiny nor exploding.
    let tokens = [1u32, 42, 7, 300, 128];
    let logits = testmodel::oracle_logits(&bytes, &tokens).expect("oracle forward pass");
    for (i, row) in logits.chunks_exact(c.vocab).enumerate() {
        let mean = row.iter().sum::<f32>() / row.len() as f32;
        let sd = (row.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / row.len() as f32).sqrt();
        let mut sorted = row.to_vec();
        sorted.sort_by(|a, b| b.total_cmp(a));
        println!(
            "  oracle logits after token {i} ({}): mean {mean:.3}, sd {sd:.3}, max {:.3}, top-2 gap {:.4}",
            tokens[i],
            sorted[0],
            sorted[0] - sorted[1]
        );
    }
}
