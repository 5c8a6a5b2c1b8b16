//! hotprefix's CPU dequantization (`quant::dequantize`, the oracle every kernel check compares
//! with) against llama.cpp's own `dequantize_row_*`, bit for bit, on blocks llama.cpp quantized
//! and on random bytes (every pattern of quants, signs, sub-scales and f16 fields).
//! tests/data/quant/vectors.json is made by scripts/quant-vectors.py (provenance there).

#![cfg(not(target_arch = "wasm32"))]

use base64::Engine as _;
use hotprefix::model::quant::{self, Format};

fn bytes(v: &serde_json::Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(v.as_str().expect("base64 text")).expect("base64")
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    bytes(v).chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

#[test]
fn dequantization_is_bit_exact_with_llama_cpp() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/quant/vectors.json");
    let text = std::fs::read_to_string(path).expect("tests/data/quant/vectors.json is part of the repository");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let formats = v["formats"].as_object().expect("formats");
    let mut seen = Vec::new();
    for (name, e) in formats {
        let f = Format::from_name(name).unwrap_or_else(|| panic!("{name}: not a format of the table"));
        assert_eq!(e["ggml_type"].as_u64(), Some(f.ggml_type() as u64), "{name}");
        assert_eq!(e["block"].as_u64(), Some(f.block() as u64), "{name}");
        assert_eq!(e["type_size"].as_u64(), Some(f.info().gguf_bytes as u64), "{name}");
        for case in ["quantized", "random"] {
            let want = floats(&e[format!("{case}_f32")]);
            let got = quant::dequantize(f, &bytes(&e[case])).unwrap();
            assert_eq!(got.len(), want.len(), "{name} {case}");
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{name} {case}: value {i} is {a:e}, llama.cpp's {b:e}");
            }
        }
        seen.push(f);
    }
    for f in Format::ALL {
        assert!(seen.contains(&f), "{}: no llama.cpp vectors", f.name());
    }
}
