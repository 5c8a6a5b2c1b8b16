//! The GGUF reader on malformed input: the fuzz regression corpus in tests/fuzz-regressions/ (each
//! file with the result it must give) and malformed files built here. Every input must come back
//! as `Ok` or `Error::Gguf`, never a panic. How the corpus was made: docs/FUZZING.md.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::path::Path;

use hotprefix::gguf::{write, Gguf, Value};
use hotprefix::Error;

/// What each regression file must parse to: `Ok(tensor count)` or `Err(part of the message)`.
const EXPECTED: &[(&str, Result<usize, &str>)] = &[
    ("seed_tiny_all_types.bin", Ok(4)),
    ("seed_real_header_slim.bin", Err("tensor token_embd.weight: data ends at byte 30100832, file has 23904")),
    ("ok_empty_tensor_huge_dim.bin", Ok(1)),
    ("short_magic.bin", Err("magic: needs 4 bytes at offset 0, file has 1")),
    ("bad_magic.bin", Err("not a GGUF file (magic [47, 15, 00, 00])")),
    ("bad_version.bin", Err("GGUF version 352387075 is not supported")),
    ("huge_metadata_count.bin", Err("17944029765304320 metadata entries cannot fit in a 24-byte file")),
    ("huge_tensor_count.bin", Err("1440870405781848065 tensors cannot fit in a 26-byte file")),
    ("huge_key_length.bin", Err("metadata key 1: string of 216172782113783808 bytes at offset 65, only 15 left")),
    ("array_longer_than_file.bin", Err("array of 871 elements does not fit in the 0 bytes left")),
    ("unknown_value_type.bin", Err("unknown value type 2436")),
    ("unknown_array_element_type.bin", Err("unknown array element type 6291464")),
    ("nested_array.bin", Err("nested arrays are not supported")),
    ("bad_bool.bin", Err("bool byte 97")),
    ("duplicate_metadata_key.bin", Err("izer.ggml.tokens appears twice")),
    ("alignment_zero.bin", Err("general.alignment U8(0) is not a power of two")),
    ("tensor_zero_dims.bin", Err("0 dimensions (1 to 4 supported)")),
    ("tensor_name_not_utf8.bin", Err("tensor 3 name: string is not UTF-8")),
    ("unknown_ggml_type.bin", Err("tensor q4z1: unknown ggml type 4294967293")),
    ("dims_overflow.bin", Err("dimensions [3557619890581929984, 137438953473, 12884901888, 96] overflow")),
    ("data_end_overflows_u64.bin", Err("tensor q8_0: data ends at byte 19731395867416985892, file has 216")),
    ("crafted_misaligned_offset.bin", Err("tensor f32: data offset 16 is not aligned to 32")),
    ("crafted_not_whole_blocks.bin", Err("tensor f32: row of 4 values is not whole blocks of 32")),
    ("crafted_duplicate_tensor.bin", Err("tensor q8_0 appears twice")),
    ("crafted_data_past_eof.bin", Err("tensor f32: data ends at byte 128, file has 127")),
];

/// Parses like the fuzz target does: on `Ok`, every tensor's data must be in the file.
fn parse(bytes: &[u8]) -> hotprefix::Result<Gguf> {
    let g = Gguf::parse(bytes)?;
    for t in &g.tensors {
        assert_eq!(g.data(bytes, t).expect("data of an accepted tensor").len() as u64, t.bytes, "{}", t.name);
    }
    Ok(g)
}

/// Asserts `bytes` is refused as a bad GGUF file whose message contains `part`.
#[track_caller]
fn assert_gguf_err(bytes: &[u8], part: &str) {
    match Gguf::parse(bytes) {
        Err(Error::Gguf(m)) if m.contains(part) => {}
        other => panic!("expected a GGUF error containing {part:?}, got {other:?}"),
    }
}

#[test]
fn every_regression_input_gives_its_expected_result() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    on_disk.sort();
    let mut listed: Vec<String> = EXPECTED.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "every file in tests/fuzz-regressions/ needs a line in EXPECTED, and only those");

    let mut failures = Vec::new();
    for (name, expected) in EXPECTED {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let got = match std::panic::catch_unwind(|| parse(&bytes)) {
            Err(_) => {
                failures.push(format!("{name}: panicked"));
                continue;
            }
            Ok(got) => got,
        };
        match (expected, &got) {
            (Ok(n), Ok(g)) if g.tensors.len() == *n => {}
            (Err(part), Err(Error::Gguf(m))) if m.contains(part) => {}
            _ => failures.push(format!("{name}: expected {expected:?}, got {got:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect()
}

/// A small valid file's metadata: every value type, and arrays.
fn tiny_metadata() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", Value::Str("llama".into())),
        ("general.alignment", Value::U32(32)),
        ("llama.rope.freq_base", Value::F32(10000.0)),
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-3)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-300)),
        ("t.i32", Value::I32(-70000)),
        ("t.bool", Value::Bool(false)),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(-1e-300)),
        ("t.empty_str", Value::Str(String::new())),
        ("tokenizer.ggml.tokens", Value::Array(["<s>", "", "é", "ab"].map(|s| Value::Str(s.into())).to_vec())),
        ("tokenizer.ggml.token_type", Value::Array([3, 3, 1, 1].map(Value::I32).to_vec())),
        ("t.f64s", Value::Array(vec![Value::F64(0.5), Value::F64(-1.0)])),
        ("t.empty_array", Value::Array(vec![])),
    ]
}

/// (F32 [3, 2], F16 [8], Q8_0 [32, 2], Q4_1 [32]) tensor data.
fn tiny_tensor_data() -> [Vec<u8>; 4] {
    let f32s = (0..6).flat_map(|i| (i as f32 - 2.5).to_le_bytes()).collect();
    let f16 = f16_bytes(&[1.0, -2.0, 0.5, 0.0, 3.0, -0.25, 8.0, 1.5]);
    let q8_0 = (0..2).flat_map(|b| f16_bytes(&[0.5 * (b + 1) as f32]).into_iter().chain((0..32).map(|i| i as u8))).collect();
    let q4_1 = f16_bytes(&[0.1, -0.8]).into_iter().chain((0..16).map(|i| i * 17)).collect();
    [f32s, f16, q8_0, q4_1]
}

/// `(name, dims, ggml type, bytes)`, as `write` takes them but owned.
type Tensor = (&'static str, Vec<u64>, u32, Vec<u8>);

fn tiny_file() -> (Vec<(&'static str, Value)>, Vec<Tensor>, Vec<u8>) {
    let metadata = tiny_metadata();
    let [f32s, f16, q8_0, q4_1] = tiny_tensor_data();
    let tensors = vec![("f32", vec![3, 2], 0, f32s), ("f16", vec![8], 1, f16), ("q8_0", vec![32, 2], 8, q8_0), ("q4_1", vec![32], 3, q4_1)];
    let refs: Vec<(&str, &[u64], u32, &[u8])> = tensors.iter().map(|(n, d, t, b)| (*n, &d[..], *t, &b[..])).collect();
    let file = write(&metadata, &refs);
    (metadata, tensors, file)
}

#[test]
fn a_tiny_file_round_trips_through_write_and_parse() {
    let (metadata, tensors, file) = tiny_file();
    let g = parse(&file).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.file_len, file.len() as u64);
    let expected: BTreeMap<String, Value> = metadata.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    assert_eq!(g.metadata, expected);
    assert_eq!(g.tensors.len(), tensors.len());
    for (t, (name, dims, ty, bytes)) in g.tensors.iter().zip(&tensors) {
        assert_eq!((t.name.as_str(), &t.dims, t.ggml_type, t.bytes), (*name, dims, *ty, bytes.len() as u64));
        assert_eq!(t.offset % 32, 0, "{name}");
        assert_eq!(g.data(&file, t).unwrap(), &bytes[..], "{name}");
        assert_eq!(g.tensor(name).unwrap(), t);
    }
    assert_eq!(g.str("general.architecture").unwrap(), "llama");
    assert_eq!(g.u64("t.u64").unwrap(), u64::MAX);
    assert!(g.u64("t.i64").is_err(), "a negative integer is not an unsigned one");
    assert_eq!(g.array("tokenizer.ggml.tokens").unwrap().len(), 4);
    assert!(g.str("missing").is_err());
}

#[test]
fn every_prefix_is_an_error_until_the_last_tensor_data_is_complete() {
    let (_, _, file) = tiny_file();
    let full = parse(&file).unwrap();
    // `write` pads the file after the last tensor: a cut in that padding still holds every byte.
    let needed = full.tensors.iter().map(|t| t.offset + t.bytes).max().unwrap() as usize;
    assert!(needed < file.len());
    for n in 0..file.len() {
        match std::panic::catch_unwind(|| parse(&file[..n])) {
            Err(_) => panic!("prefix of {n} bytes panicked"),
            Ok(Err(Error::Gguf(_))) if n < needed => {}
            Ok(Ok(g)) if n >= needed => {
                assert_eq!((&g.metadata, &g.tensors), (&full.metadata, &full.tensors), "prefix of {n} bytes");
            }
            Ok(other) => panic!("prefix of {n} bytes (data ends at {needed}): {other:?}"),
        }
    }
}

/// A raw GGUF header builder, for files `write` would never make.
struct Raw(Vec<u8>);

impl Raw {
    fn new(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &[u8]) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend(s);
        self
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name.as_bytes()).u32(dims.len() as u32);
        for d in dims {
            self.u64(*d);
        }
        self.u32(ty).u64(offset)
    }
    /// Zero bytes, so that the file is long enough for the counts checked up front.
    fn pad(&mut self, n: usize) -> Vec<u8> {
        self.0.resize(self.0.len() + n, 0);
        self.0.clone()
    }
}

#[test]
fn huge_counts_and_lengths_are_refused_before_anything_is_allocated() {
    assert_gguf_err(&Raw::new(3, 0, u64::MAX).pad(64), "metadata entries cannot fit");
    assert_gguf_err(&Raw::new(3, u64::MAX, 0).pad(64), "tensors cannot fit");
    assert_gguf_err(&Raw::new(3, 0, 1 << 62).pad(64), "metadata entries cannot fit");
    assert_gguf_err(&Raw::new(2, 0, 1).u64(u64::MAX).pad(64), "string of 18446744073709551615 bytes");
    // An array count whose byte size overflows u64, and one that merely exceeds the file.
    assert_gguf_err(&Raw::new(3, 0, 1).str(b"k").u32(9).u32(10).u64(1 << 61).pad(64), "array of 2305843009213693952 elements");
    assert_gguf_err(&Raw::new(3, 0, 1).str(b"k").u32(9).u32(8).u64(9).pad(64), "array of 9 elements does not fit");
    assert_gguf_err(&Raw::new(3, 1, 0).u64(100).pad(28), "tensor 0 name: string of 100 bytes at offset 32, only 28 left");
}

#[test]
fn overflowing_sizes_and_offsets_are_errors() {
    let big = 1u64 << 40;
    assert_gguf_err(&Raw::new(3, 1, 0).tensor("t", &[big, big], 0, 0).pad(64), "dimensions [1099511627776, 1099511627776] overflow");
    // Elements fit in u64 but their bytes do not.
    assert_gguf_err(&Raw::new(3, 1, 0).tensor("t", &[u64::MAX / 4 + 1], 0, 0).pad(64), "overflow");
    // An aligned offset so large that offset + bytes passes u64::MAX.
    assert_gguf_err(&Raw::new(3, 1, 0).tensor("t", &[4], 0, u64::MAX - 31).pad(64), "data ends at byte 18446744073709551664");
    assert_gguf_err(&Raw::new(3, 1, 0).tensor("t", &[8], 0, 0).pad(20), "tensor t: data ends at byte 96, file has 77");
    // A zero dimension: no data, and nothing to read.
    let g = parse(&Raw::new(3, 1, 0).tensor("t", &[u64::MAX, 0], 0, 0).pad(64)).unwrap();
    assert_eq!(g.tensors[0].bytes, 0);
}

#[test]
fn malformed_structure_is_named() {
    let meta = |ty: u32, value: &[u8]| {
        let mut r = Raw::new(3, 0, 1);
        r.str(b"k").u32(ty);
        r.0.extend(value);
        r.pad(32)
    };
    assert_gguf_err(b"GGUF", "version: needs 4 bytes");
    assert_gguf_err(b"GGML\x03\0\0\0", "not a GGUF file");
    assert_gguf_err(&Raw::new(1, 0, 0).pad(0), "GGUF version 1 is not supported");
    assert_gguf_err(&meta(13, &[]), "metadata k: unknown value type 13");
    assert_gguf_err(&meta(7, &[2]), "metadata k: bool byte 2");
    assert_gguf_err(&meta(8, &[2, 0, 0, 0, 0, 0, 0, 0, 0xc3, 0x28]), "metadata k: string is not UTF-8");
    assert_gguf_err(&meta(9, &[9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]), "nested arrays are not supported");
    assert_gguf_err(&meta(9, &[13, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]), "unknown array element type 13");
    let mut dup = Raw::new(3, 0, 2);
    dup.str(b"k").u32(0).0.push(1);
    dup.str(b"k").u32(0).0.push(2);
    assert_gguf_err(&dup.pad(32), "metadata key k appears twice");
    for alignment in [0u32, 3, 1 << 21] {
        let mut r = Raw::new(3, 0, 1);
        r.str(b"general.alignment").u32(4).u32(alignment);
        assert_gguf_err(&r.pad(32), "general.alignment");
    }
    let mut aligned64 = Raw::new(3, 1, 1);
    aligned64.str(b"general.alignment").u32(4).u32(64).tensor("t", &[4], 0, 32);
    assert_gguf_err(&aligned64.pad(256), "tensor t: data offset 32 is not aligned to 64");
    assert_gguf_err(&Raw::new(3, 1, 0).tensor("t", &[1; 5], 0, 0).pad(64), "tensor t: 5 dimensions");
    assert_gguf_err(&Raw::new(3, 1, 0).tensor("t", &[32], 4, 0).pad(64), "tensor t: unknown ggml type 4");
    // Ids llama.cpp removed are not types either; every id it defines is read.
    assert_gguf_err(&Raw::new(3, 1, 0).tensor("t", &[32], 31, 0).pad(64), "tensor t: unknown ggml type 31");
    assert_gguf_err(&Raw::new(3, 1, 0).tensor("t", &[32], 43, 0).pad(64), "tensor t: unknown ggml type 43");
    for (ty, block, bytes) in [(20u32, 32u64, 18u64), (23, 256, 136), (40, 64, 36), (41, 128, 18)] {
        let mut r = Raw::new(3, 1, 0);
        r.tensor("t", &[block], ty, 0);
        let file = r.pad(32 + bytes as usize);
        let g = Gguf::parse(&file).unwrap_or_else(|e| panic!("type {ty}: {e}"));
        assert_eq!(g.tensors[0].ggml_type, ty);
    }
    assert_gguf_err(&Raw::new(3, 1, 0).tensor("t", &[48], 3, 0).pad(128), "row of 48 values is not whole blocks of 32");
    let mut twice = Raw::new(3, 2, 0);
    twice.tensor("t", &[1], 0, 0).tensor("t", &[1], 0, 32);
    assert_gguf_err(&twice.pad(128), "tensor t appears twice");
}

#[test]
fn tensor_data_of_another_file_is_refused() {
    let (_, _, file) = tiny_file();
    let g = parse(&file).unwrap();
    assert!(matches!(g.data(&file[..file.len() - 1], &g.tensors[0]), Err(Error::Gguf(_))));
}
