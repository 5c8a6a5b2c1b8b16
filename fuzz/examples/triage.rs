//! Prints, for every file in the given folders, its size and what `Gguf::parse` says (with
//! `--load`: what the `load_cpu` target's `preflight::check_model_cpu` says, and whether the
//! model's chat template renders), one line each (`size<TAB>verdict<TAB>path`): for picking
//! regression inputs out of a fuzz corpus.
//!
//!     cd fuzz && cargo run --example triage -- corpus/gguf_parse | sort -t$'\t' -k2,2 -k1n
//!     cd fuzz && cargo run --example triage -- --load corpus/load_cpu | sort -t$'\t' -k2,2 -k1n

use hotprefix::chat::Message;
use hotprefix::gguf::Gguf;
use hotprefix::preflight::check_model_cpu;

fn parse_verdict(bytes: &[u8]) -> String {
    match Gguf::parse(bytes) {
        Ok(g) => format!("Ok ({} tensors, {} metadata)", g.tensors.len(), g.metadata.len()),
        Err(e) => format!("Err: {e}"),
    }
}

fn load_verdict(bytes: &[u8]) -> String {
    match check_model_cpu(bytes) {
        Ok(m) => {
            let template = match &m.template {
                None => "no template".to_string(),
                Some(t) => match t.render(&[Message::new("user", "hi")], true) {
                    Ok(_) => "template renders".to_string(),
                    Err(e) => format!("template fails: {e}"),
                },
            };
            format!("Ok ({} layers, {template})", m.config.n_layer)
        }
        Err(e) => format!("Err {}: {e}", e.name()),
    }
}

fn main() {
    let mut load = false;
    for arg in std::env::args().skip(1) {
        if arg == "--load" {
            load = true;
            continue;
        }
        for entry in std::fs::read_dir(&arg).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let verdict = if load { load_verdict(&bytes) } else { parse_verdict(&bytes) };
            println!("{}\t{}\t{}", bytes.len(), verdict.replace(['\t', '\n'], " "), path.display());
        }
    }
}
