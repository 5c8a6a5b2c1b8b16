//! Prints, for every file in the given folders, its size and what `Gguf::parse` says, one line
//! each (`size<TAB>verdict<TAB>path`): for picking regression inputs out of a fuzz corpus.
//!
//!     cd fuzz && cargo run --example triage -- corpus/gguf_parse | sort -t$'\t' -k2,2 -k1n

use hotprefix::gguf::Gguf;

fn main() {
    for dir in std::env::args().skip(1) {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let verdict = match Gguf::parse(&bytes) {
                Ok(g) => format!("Ok ({} tensors, {} metadata)", g.tensors.len(), g.metadata.len()),
                Err(e) => format!("Err: {e}"),
            };
            println!("{}\t{}\t{}", bytes.len(), verdict.replace(['\t', '\n'], " "), path.display());
        }
    }
}
