//! `hotprefix info`: what a file holds and whether this build runs it, on the default model and on
//! files it refuses.

use std::process::Command;

use hotprefix::gguf::{self, Value};
use serde_json::Value as Json;

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn info(path: &std::path::Path) -> (bool, Json, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hotprefix")).arg("info").arg("--json").arg(path).output().expect("run hotprefix info");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let json = serde_json::from_str(&stdout).unwrap_or(Json::Null);
    (out.status.success(), json, stderr)
}

#[test]
fn the_default_model_is_described_and_runs() {
    let path = repo().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.exists(), "missing test data: run scripts/fetch-model.sh");
    let (ok, j, err) = info(&path);
    assert!(ok, "{err}");
    assert_eq!(j["architecture"], "llama");
    assert_eq!(j["context"], 8192);
    assert_eq!((j["tokenizer"].as_str(), j["pre_tokenizer"].as_str()), (Some("gpt2"), Some("smollm")));
    assert_eq!(j["runs"], true, "{j}");
    assert_eq!(j["bytes"].as_u64(), Some(std::fs::metadata(&path).unwrap().len()));
    let formats = j["formats"].as_array().expect("formats");
    let names: Vec<&str> = formats.iter().filter_map(|f| f["type"].as_str()).collect();
    assert_eq!(names, ["F32", "Q4_1", "Q8_0"]);
    let sum = |k: &str| formats.iter().map(|f| f[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(Some(sum("tensors")), j["tensors"].as_u64());
    assert_eq!(Some(sum("values")), j["parameters"].as_u64());
    assert!(j["parameters"].as_u64().unwrap() > 130_000_000, "{j}");
}

#[test]
fn a_file_of_a_format_not_run_is_described_and_refused_with_a_reason() {
    // One MXFP4 tensor (ggml type 39): a good file the reader knows, which this build does not run.
    let md = [("general.architecture", Value::Str("llama".into()))];
    let file = gguf::write(&md, &[("blk.0.ffn_down.weight", &[32, 2][..], 39, &[0u8; 34][..])]);
    let dir = std::env::temp_dir().join(format!("hotprefix-info-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mxfp4.gguf");
    std::fs::write(&path, file).unwrap();
    let (ok, j, err) = info(&path);
    assert!(ok, "{err}");
    assert_eq!(j["formats"], serde_json::json!([{"type": "MXFP4", "ggml_type": 39, "tensors": 1, "values": 64}]));
    assert_eq!(j["runs"], false);
    assert!(j["refused"].as_str().is_some_and(|r| !r.is_empty()), "{j}");
    // Not a GGUF file at all: an error, exit status 1.
    std::fs::write(&path, b"not a model").unwrap();
    let (ok, _, err) = info(&path);
    assert!(!ok && err.contains("GGUF"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each architecture's tiny model (scripts/make-archs.sh) is described with the features it uses.
#[test]
fn each_architecture_names_its_features() {
    let want: [(&str, &str, &[&str]); 5] = [
        ("tiny-qwen2.gguf", "qwen2", &["RoPE on halves (NEOX)", "Q/K/V biases", "untied output head"]),
        ("tiny-qwen3.gguf", "qwen3", &["QK-norm", "heads of 32 (4 × 32 ≠ width 96)", "output head tied to the embedding"]),
        ("tiny-llama3.gguf", "llama", &["RoPE on adjacent pairs", "RoPE frequency factors (Llama-3 scaling)"]),
        (
            "tiny-gemma3.gguf",
            "gemma3",
            &["post-attention and post-FFN norms", "GeGLU feed-forward", "sliding window 8 (every layer but each 6th)"],
        ),
        (
            "tiny-phi3.gguf",
            "phi3",
            &[
                "fused Q|K|V",
                "fused gate|up",
                "LongRoPE factors (long past a context of 512)",
                "RoPE attention factor 1.1547",
                "partial rotary (24 of 32 dims)",
                "sliding window 64 declared, not applied (as llama.cpp)",
            ],
        ),
    ];
    for (file, arch, features) in want {
        let path = repo().join("models/archs").join(file);
        assert!(path.exists(), "missing test data: run scripts/make-archs.sh");
        let (ok, j, err) = info(&path);
        assert!(ok, "{err}");
        assert_eq!(j["architecture"], arch);
        assert_eq!(j["runs"], true, "{j}");
        let got: Vec<&str> = j["features"].as_array().expect("features").iter().filter_map(|f| f.as_str()).collect();
        for f in features {
            assert!(got.contains(f), "{file}: {f:?} not in {got:?}");
        }
    }
}

/// `hotprefix tokenize` gives llama.cpp's ids: a raw prompt (BOS first on Llama-3) and a chat
/// rendered through the file's template (tests/data/archs/llama3-tokenizer-vectors.json).
#[test]
fn tokenize_gives_llama_cpp_ids() {
    let model = repo().join("models/archs/tiny-llama3.gguf");
    assert!(model.exists(), "missing test data: run scripts/make-archs.sh");
    let data: Json =
        serde_json::from_str(&std::fs::read_to_string(repo().join("tests/data/archs/llama3-tokenizer-vectors.json")).unwrap()).unwrap();
    let run = |args: &[&str]| -> Json {
        let out = Command::new(env!("CARGO_BIN_EXE_hotprefix")).arg("tokenize").arg("--model").arg(&model).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("a JSON array")
    };
    for v in data["vectors"].as_array().unwrap().iter().take(20) {
        assert_eq!(run(&["--prompt", v["text"].as_str().unwrap()]), v["ids_parse_special_false"], "{:?}", v["text"]);
    }
    let chat = &data["chats"][0];
    let file = std::env::temp_dir().join(format!("hotprefix-tokenize-{}.json", std::process::id()));
    std::fs::write(&file, chat["messages"].to_string()).unwrap();
    let ids = run(&["--messages", file.to_str().unwrap()]);
    std::fs::remove_file(&file).ok();
    assert_eq!(ids, chat["ids"], "{}", chat["id"]);
}
