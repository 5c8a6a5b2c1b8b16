//! `Gguf::parse` on arbitrary bytes: it must return `Ok` or `Err`, never panic, and never allocate
//! more than the input justifies (run with `-malloc_limit_mb`, see docs/FUZZING.md).
#![no_main]

use hotprefix::gguf::Gguf;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data) else { return };
    // Every tensor the parser accepted must lie within the file.
    for t in &g.tensors {
        let bytes = g.data(data, t).expect("tensor data of the parsed file");
        assert_eq!(bytes.len() as u64, t.bytes);
        assert!(g.tensor(&t.name).is_ok());
    }
    // The getters must not panic whatever the value types are.
    for key in ["general.architecture", "general.alignment", "llama.block_count", "llama.rope.freq_base", "tokenizer.ggml.tokens"] {
        let _ = g.u64(key);
        let _ = g.f64(key);
        let _ = g.str(key);
        let _ = g.array(key);
    }
    for (k, v) in g.metadata.iter().take(64) {
        let _ = (v.as_u64(), v.as_f64(), v.as_str());
        let _ = g.get(k);
    }
    // A different-length file is refused, not sliced.
    if let Some(t) = g.tensors.first() {
        assert!(g.data(&data[..data.len() - 1], t).is_err());
    }
});
