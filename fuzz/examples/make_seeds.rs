//! Writes the fuzz seeds to fuzz/seeds/ and fuzz/seeds_load_cpu/ (docs/FUZZING.md):
//!
//!     cd fuzz && cargo run --example make_seeds [path/to/model.gguf]
//!
//! - `seeds_load_cpu/tiny_model.bin`: the tiny test model (`testmodel::tiny_gguf(1)`), a whole
//!   model that passes the CPU load check (the `load_cpu` target's seeds are both folders);
//! - `tiny_*.bin`: small valid files made with `hotprefix::gguf::write` (every metadata type,
//!   arrays, F32/F16/Q8_0/Q4_1 tensors);
//! - `real_head_64k.bin`: the first 64 KiB of the real model (cut inside the tokenizer arrays);
//! - `real_header_slim.bin`: the real model's metadata with its big arrays cut to 64 entries and
//!   its whole tensor table, followed by 4 KiB of zeros instead of ~96 MB of weights (the parser
//!   reports the first tensor's data as beyond the end of the file).
//!
//! The model (default `../models/SmolLM2-135M-Instruct.Q4_1.gguf`) is optional: without it only the
//! tiny seeds are written.

use std::path::Path;

use hotprefix::gguf::{self, write, Gguf, Value};
use hotprefix::preflight::check_model_cpu;
use hotprefix::testmodel::tiny_gguf;

fn f16s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect()
}

/// One Q8_0 block (f16 scale + 32 i8) per 32 values.
fn q8_0(blocks: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for b in 0..blocks {
        out.extend(f16s(&[0.01 * (b + 1) as f32]));
        out.extend((0..32).map(|i| (i as i8 - 16) as u8));
    }
    out
}

/// One Q4_1 block (f16 scale, f16 min, 16 bytes of nibbles) per 32 values.
fn q4_1(blocks: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for b in 0..blocks {
        out.extend(f16s(&[0.1, -0.5 * b as f32]));
        out.extend((0..16u8).map(|i| i | (15 - i) << 4));
    }
    out
}

fn tiny_files() -> Vec<(&'static str, Vec<u8>)> {
    let f32s: Vec<u8> = (0..8).flat_map(|i| (i as f32 * 0.25).to_le_bytes()).collect();
    let f16 = f16s(&[1.0, -2.0, 0.5, 0.0, 3.0, -0.25, 8.0, 1.5]);
    let q8 = q8_0(2);
    let q4 = q4_1(1);
    let all_types: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::Str("llama".into())),
        ("general.alignment", Value::U32(32)),
        ("llama.block_count", Value::U32(1)),
        ("llama.rope.freq_base", Value::F32(10000.0)),
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-3)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-300)),
        ("t.i32", Value::I32(-70000)),
        ("t.bool", Value::Bool(true)),
        ("t.u64", Value::U64(1 << 40)),
        ("t.i64", Value::I64(-(1 << 40))),
        ("t.f64", Value::F64(1e-5)),
        ("tokenizer.ggml.tokens", Value::Array(["<s>", "</s>", "a", "b", "ab"].map(|s| Value::Str(s.into())).to_vec())),
        ("tokenizer.ggml.token_type", Value::Array([3, 3, 1, 1, 1].map(Value::I32).to_vec())),
        ("t.f32s", Value::Array(vec![Value::F32(0.5), Value::F32(-1.0)])),
        ("t.empty", Value::Array(vec![])),
    ];
    let tensors: Vec<(&str, &[u64], u32, &[u8])> =
        vec![("f32", &[4, 2], 0, &f32s), ("f16", &[8], 1, &f16), ("q8_0", &[32, 2], 8, &q8), ("q4_1", &[32], 3, &q4)];
    vec![
        ("tiny_all_types.bin", write(&all_types, &tensors)),
        ("tiny_q8_q4.bin", write(&all_types[..3], &tensors[2..])),
        ("tiny_no_metadata.bin", write(&[], &tensors[..1])),
        ("tiny_metadata_only.bin", write(&all_types[13..], &[])),
        ("tiny_empty.bin", write(&[], &[])),
    ]
}

/// A raw header writer, for keeping the real file's tensor offsets (`write` lays out its own).
struct Raw(Vec<u8>);

impl Raw {
    fn str(&mut self, s: &str) {
        gguf::encode_str(&mut self.0, s);
    }
    fn value(&mut self, v: &Value) {
        gguf::encode_value(&mut self.0, v);
    }
}

fn slim_real_header(file: &[u8]) -> Vec<u8> {
    let g = Gguf::parse(file).expect("the model parses");
    let data_start = g.tensors.iter().map(|t| t.offset).min().unwrap_or(0);
    let mut r = Raw(Vec::new());
    r.0.extend(b"GGUF");
    r.0.extend(g.version.to_le_bytes());
    r.0.extend((g.tensors.len() as u64).to_le_bytes());
    r.0.extend((g.metadata.len() as u64).to_le_bytes());
    for (k, v) in &g.metadata {
        r.str(k);
        r.0.extend(v.type_id().to_le_bytes());
        match v {
            Value::Array(a) if a.len() > 64 => r.value(&Value::Array(a[..64].to_vec())),
            v => r.value(v),
        }
    }
    for t in &g.tensors {
        r.str(&t.name);
        r.0.extend((t.dims.len() as u32).to_le_bytes());
        t.dims.iter().for_each(|d| r.0.extend(d.to_le_bytes()));
        r.0.extend(t.ggml_type.to_le_bytes());
        r.0.extend((t.offset - data_start).to_le_bytes());
    }
    let mut out = r.0;
    out.resize(out.len().next_multiple_of(32) + 4096, 0);
    out
}

/// Whole tiny models, for `load_cpu`: each must pass the CPU load check.
fn model_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![("tiny_model.bin", tiny_gguf(1))]
}

fn main() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds_load_cpu");
    std::fs::create_dir_all(&models).unwrap();
    for (name, bytes) in model_files() {
        let c = check_model_cpu(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        std::fs::write(models.join(name), &bytes).unwrap();
        println!("seeds_load_cpu/{name:20} {:7} bytes  Ok ({} layers)", bytes.len(), c.config.n_layer);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    std::fs::create_dir_all(&dir).unwrap();
    let mut seeds = tiny_files();
    for (name, bytes) in &seeds {
        // The tiny files are valid: they must parse.
        Gguf::parse(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let model = std::env::args()
        .nth(1)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/SmolLM2-135M-Instruct.Q4_1.gguf").display().to_string());
    match std::fs::read(&model) {
        Ok(file) => {
            seeds.push(("real_head_64k.bin", file[..file.len().min(64 << 10)].to_vec()));
            seeds.push(("real_header_slim.bin", slim_real_header(&file)));
        }
        Err(e) => eprintln!("{model}: {e}; writing only the tiny seeds"),
    }
    for (name, bytes) in &seeds {
        let verdict = match Gguf::parse(bytes) {
            Ok(g) => format!("Ok ({} tensors, {} metadata)", g.tensors.len(), g.metadata.len()),
            Err(e) => format!("Err: {e}"),
        };
        std::fs::write(dir.join(name), bytes).unwrap();
        println!("{name:28} {:7} bytes  {verdict}", bytes.len());
    }
}
