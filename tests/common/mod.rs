//! Test data shared by the integration tests: the default model (fetched by a script, never
//! committed) and the llama.cpp reference data copied into `tests/data/reference/`. A missing file
//! fails the test with what is missing and how to get it.
#![allow(dead_code)]

use std::path::PathBuf;

pub const MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The default model's bytes.
pub fn model_bytes() -> Vec<u8> {
    let path = root().join(MODEL);
    match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            panic!("missing test data: cannot read {} ({e}); run scripts/fetch-model.sh to download the default model", path.display())
        }
    }
}

/// A JSON file of `tests/data/reference/`.
pub fn reference(name: &str) -> serde_json::Value {
    let path = root().join("tests/data/reference").join(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => panic!(
            "missing test data: cannot read {} ({e}); it is part of the repository (see tests/data/reference/README.md)",
            path.display()
        ),
    };
    match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => panic!("corrupt test data: {} is not JSON ({e})", path.display()),
    }
}

/// A model file of `models/archs/` (made by scripts/make-archs.sh: the tiny models of each
/// architecture, Gemma-3-270m linked in).
pub fn arch_file(name: &str) -> Vec<u8> {
    let path = root().join("models/archs").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("missing test data: {} ({e}); run scripts/make-archs.sh", path.display()))
}
