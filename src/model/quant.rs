//! Weight formats as GGUF stores them, and their GPU layout.
//!
//! GGUF layout (row-major by output row, blocks of 32 values along K):
//! - F32: 4 bytes a value. F16: 2 bytes a value.
//! - Q8_0: 34 bytes a block: f16 `d`, then 32 × i8 `q`; `x = d·q`.
//! - Q4_1: 20 bytes a block: f16 `d`, f16 `m`, then 16 bytes; byte j holds value j in its low
//!   nibble and value j+16 in its high nibble; `x = d·q + m`.
//!
//! GPU layout (what shaders read as `array<u32>`): each row is a sequence of u32 words, the GGUF
//! bytes unchanged for F32, F16 and Q4_1 (20-byte Q4_1 blocks are already 4-byte aligned), Q8_0
//! blocks repacked to 36 bytes (one u32 holding `d` in its low half, then the 32 bytes of `q`).
//! Rows are then interleaved in groups of `ROW_GROUP`: word j of row r sits at
//! `(r / G)·W·G + j·G + r % G` (W words a row). Neighbouring invocations work on neighbouring
//! rows, so their loads are contiguous: coalesced on GPUs. (lavapipe 25.0 loads lane by lane
//! whatever the layout, docs/BENCHMARKS.md: the layout neither helps nor hurts there.)

use half::f16;

use crate::error::{Error, Result};

/// Values per quantization block of the 32-value formats.
pub const QK: usize = 32;

/// A weight matrix format: a key into [`FORMATS`], its row of facts and functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Format {
    /// 32-bit floats (ggml type 0).
    F32,
    /// 16-bit floats (ggml type 1).
    F16,
    /// Blocks of 32 8-bit values with an f16 scale, 34 bytes a block (ggml type 8).
    Q8_0,
    /// Blocks of 32 4-bit values with an f16 scale and minimum, 20 bytes a block (ggml type 3).
    Q4_1,
}

/// What hotprefix knows of one weight format, as ggml's `type_traits` row: sizes, the GPU layout,
/// and the CPU conversions. A format is one row of [`FORMATS`] plus its decode branch in
/// `shaders/matmul.wgsl` (the shader's `FMT_*` constants are checked against this table by a test).
pub struct FormatInfo {
    /// The ggml name: `"F32"`, `"Q8_0"`… (the shader's constant is `FMT_` and this name).
    pub name: &'static str,
    /// The ggml type id (`GGML_TYPE_*`).
    pub ggml_type: u32,
    /// Values per block along a row (1 for the float formats).
    pub block: usize,
    /// Bytes of a block in GGUF.
    pub gguf_bytes: usize,
    /// Bytes of a block on the GPU (a row is a whole number of u32 words).
    pub gpu_bytes: usize,
    /// The value of the shader's `FORMAT` override (`FMT_<name>` in `shaders/matmul.wgsl`).
    pub shader_id: u32,
    /// Whether `shaders/matmul_lanes.wgsl` (subgroup broadcasts of a block's x) decodes it.
    pub lanes: bool,
    /// Appends the GPU words of one row's GGUF bytes (whole blocks; a multiple of 4 values).
    pub repack_row: fn(&[u8], &mut Vec<u32>),
    /// Appends one GGUF block's values (the CPU oracle).
    pub dequantize: fn(&[u8], &mut Vec<f32>),
    /// Appends one block of values quantized the way ggml's reference quantizer does (test weights
    /// and the tiny test model).
    pub quantize: fn(&[f32], &mut Vec<u8>),
}

/// Every format hotprefix runs, in [`Format`]'s order.
#[rustfmt::skip] // a table: one row a format
pub static FORMATS: [FormatInfo; 4] = [
    FormatInfo { name: "F32", ggml_type: 0, block: 1, gguf_bytes: 4, gpu_bytes: 4, shader_id: 0, lanes: false, repack_row: words, dequantize: f32_values, quantize: f32_bytes },
    FormatInfo { name: "F16", ggml_type: 1, block: 1, gguf_bytes: 2, gpu_bytes: 2, shader_id: 1, lanes: false, repack_row: words, dequantize: f16_values, quantize: f16_bytes },
    FormatInfo { name: "Q8_0", ggml_type: 8, block: QK, gguf_bytes: 34, gpu_bytes: 36, shader_id: 2, lanes: true, repack_row: q8_0_words, dequantize: q8_0_values, quantize: q8_0_bytes },
    FormatInfo { name: "Q4_1", ggml_type: 3, block: QK, gguf_bytes: 20, gpu_bytes: 20, shader_id: 3, lanes: true, repack_row: words, dequantize: q4_1_values, quantize: q4_1_bytes },
];

/// The names of every format, for error messages: `"F32, F16, Q8_0, Q4_1"`.
pub fn supported() -> String {
    FORMATS.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
}

/// The refusal of tensor `name`, of ggml type `ggml_type` that no row of [`FORMATS`] runs: the
/// type named (the reader knows every type llama.cpp defines), and the formats that do run.
pub fn unsupported(name: &str, ggml_type: u32) -> Error {
    let ty = super::gguf::ggml_type(ggml_type)
        .map_or_else(|| format!("ggml type {ggml_type}"), |t| format!("{} (ggml type {ggml_type})", t.name));
    Error::Model(format!("{name}: {ty} is not a weight format hotprefix runs ({} are)", supported()))
}

impl Format {
    /// Every format, in the order of [`FORMATS`].
    pub const ALL: [Format; 4] = [Format::F32, Format::F16, Format::Q8_0, Format::Q4_1];

    /// The format's row of [`FORMATS`].
    pub fn info(self) -> &'static FormatInfo {
        &FORMATS[self as usize]
    }

    /// The ggml type id (`GGML_TYPE_*`).
    pub fn ggml_type(self) -> u32 {
        self.info().ggml_type
    }

    /// The format of ggml type id `t`, or `None` for a type hotprefix does not run.
    pub fn from_ggml_type(t: u32) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.ggml_type() == t)
    }

    /// The value of the shader's `FORMAT` override constant.
    pub fn shader_id(self) -> f64 {
        self.info().shader_id as f64
    }

    /// The format's ggml name: `"F32"`, `"F16"`, `"Q8_0"` or `"Q4_1"`.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Values per block along a row (1 for the float formats).
    pub fn block(self) -> usize {
        self.info().block
    }

    /// Bytes of one row of `k` values in GGUF, or an error when `k` is not a whole number of blocks.
    pub fn row_bytes(self, k: usize) -> Result<usize> {
        if !k.is_multiple_of(self.block()) {
            return Err(Error::Weights(format!("{} rows need a multiple of {} values, got {k}", self.name(), self.block())));
        }
        Ok(k / self.block() * self.info().gguf_bytes)
    }

    /// u32 words of one row of `k` values on the GPU.
    pub fn gpu_row_words(self, k: usize) -> usize {
        (k / self.block()) * self.info().gpu_bytes / 4
    }

    /// Bytes of an `[n, k]` matrix on the GPU (rows padded to a whole row group); an error when
    /// that does not fit in a `usize`.
    pub fn gpu_bytes(self, n: usize, k: usize) -> Result<usize> {
        gpu_words(self, n, k)?.checked_mul(4).ok_or_else(|| Error::Weights(format!("{} [{n}, {k}] overflows", self.name())))
    }
}

// The table's conversions: a row for `repack_row`, one block for the others (their callers cut
// the data: `blk` is always `gguf_bytes` long, `x` always `block` values).

fn f16_at(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// The bytes as they are, as little-endian words.
fn words(row: &[u8], out: &mut Vec<u32>) {
    out.extend(row.chunks_exact(4).map(|q| u32::from_le_bytes([q[0], q[1], q[2], q[3]])));
}

/// Each block: `d` alone in the low half of a word, then the 32 bytes of `q`.
fn q8_0_words(row: &[u8], out: &mut Vec<u32>) {
    for blk in row.chunks_exact(34) {
        out.push(u16::from_le_bytes([blk[0], blk[1]]) as u32);
        words(&blk[2..], out);
    }
}

fn f32_values(blk: &[u8], out: &mut Vec<f32>) {
    out.push(f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]));
}

fn f16_values(blk: &[u8], out: &mut Vec<f32>) {
    out.push(f16_at(blk));
}

fn q8_0_values(blk: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(blk);
    out.extend(blk[2..].iter().map(|&q| d * (q as i8) as f32));
}

fn q4_1_values(blk: &[u8], out: &mut Vec<f32>) {
    let (d, m) = (f16_at(blk), f16_at(&blk[2..]));
    let qs = &blk[4..20];
    out.extend(qs.iter().map(|&q| d * (q & 15) as f32 + m));
    out.extend(qs.iter().map(|&q| d * (q >> 4) as f32 + m));
}

fn f32_bytes(x: &[f32], out: &mut Vec<u8>) {
    out.extend(x[0].to_le_bytes());
}

fn f16_bytes(x: &[f32], out: &mut Vec<u8>) {
    out.extend(f16::from_f32(x[0]).to_le_bytes());
}

fn q8_0_bytes(blk: &[f32], out: &mut Vec<u8>) {
    let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(blk.iter().map(|v| (v * id).round() as i8 as u8));
}

fn q4_1_bytes(blk: &[f32], out: &mut Vec<u8>) {
    let min = blk.iter().copied().fold(f32::INFINITY, f32::min);
    let max = blk.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(f16::from_f32(min).to_le_bytes());
    let q = |v: f32| (((v - min) * id + 0.5) as u8).min(15);
    for j in 0..QK / 2 {
        out.push(q(blk[j]) | (q(blk[j + QK / 2]) << 4));
    }
}

/// Rows interleaved together in the GPU layout (see the module docs).
pub const ROW_GROUP: usize = 32;

/// u32 words of an `[n, k]` matrix in the GPU layout, checked: `n` and `k` come from the file.
fn gpu_words(format: Format, n: usize, k: usize) -> Result<usize> {
    n.checked_next_multiple_of(ROW_GROUP)
        .and_then(|rows| rows.checked_mul(format.gpu_row_words(k)))
        .ok_or_else(|| Error::Weights(format!("{} [{n}, {k}] overflows", format.name())))
}

/// Converts GGUF bytes of an `[n, k]` matrix into the GPU layout (see the module docs).
pub fn to_gpu_layout(format: Format, bytes: &[u8], n: usize, k: usize) -> Result<Vec<u32>> {
    let expect = n.checked_mul(format.row_bytes(k)?).ok_or_else(|| Error::Weights(format!("[{n}, {k}] overflows")))?;
    if bytes.len() != expect {
        return Err(Error::Weights(format!("{} [{n}, {k}] needs {expect} bytes, got {}", format.name(), bytes.len())));
    }
    if !k.is_multiple_of(4) || k == 0 {
        return Err(Error::Weights(format!("{} rows of {k} values: the GPU layout needs a multiple of 4", format.name())));
    }
    // Each row as words (repacked by the format's row of the table), then word j of row r goes to
    // (r / G)·W·G + j·G + r % G, rows padded with zeros. One row at a time: a load holds the
    // file's bytes and the GPU layout, nothing more.
    let w = format.gpu_row_words(k);
    let mut out = vec![0u32; gpu_words(format, n, k)?];
    let mut words = Vec::with_capacity(w);
    let repack_row = format.info().repack_row;
    for (r, row) in bytes.chunks_exact(format.row_bytes(k)?).enumerate() {
        words.clear();
        repack_row(row, &mut words);
        if words.len() != w {
            return Err(Error::Weights(format!("{} row of {k} values: {} words, the GPU layout has {w}", format.name(), words.len())));
        }
        let base = (r / ROW_GROUP) * w * ROW_GROUP + r % ROW_GROUP;
        for (j, v) in words.iter().enumerate() {
            out[base + j * ROW_GROUP] = *v;
        }
    }
    Ok(out)
}

/// Dequantizes GGUF bytes of one or more whole rows to f32 (the CPU oracle for every format).
pub fn dequantize(format: Format, bytes: &[u8]) -> Result<Vec<f32>> {
    let info = format.info();
    if !bytes.len().is_multiple_of(info.gguf_bytes) {
        return Err(Error::Weights(format!("{} data of {} bytes is not whole blocks", info.name, bytes.len())));
    }
    let mut out = Vec::with_capacity(bytes.len() / info.gguf_bytes * info.block);
    bytes.chunks_exact(info.gguf_bytes).for_each(|blk| (info.dequantize)(blk, &mut out));
    Ok(out)
}

/// Quantizes f32 values (whole blocks) into GGUF bytes, the way ggml's reference quantizers do.
/// Used to build test weights and the tiny test model.
pub fn quantize(format: Format, x: &[f32]) -> Result<Vec<u8>> {
    let info = format.info();
    if !x.len().is_multiple_of(info.block) {
        return Err(Error::Weights(format!("{} needs whole blocks of {}", info.name, info.block)));
    }
    let mut out = Vec::with_capacity(x.len() / info.block * info.gguf_bytes);
    x.chunks_exact(info.block).for_each(|blk| (info.quantize)(blk, &mut out));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_roundtrip_is_close() {
        let x: Vec<f32> = (0..64).map(|i| ((i * 37 % 64) as f32 - 31.5) / 16.0).collect();
        for f in Format::ALL {
            let q = quantize(f, &x).unwrap();
            assert_eq!(q.len(), 2 * f.row_bytes(32).unwrap());
            let y = dequantize(f, &q).unwrap();
            let tol = match f {
                Format::F32 => 0.0,
                Format::F16 => 1e-3,
                Format::Q8_0 => 2.0 / 127.0,
                Format::Q4_1 => 4.0 / 15.0,
            };
            for (i, (a, b)) in x.iter().zip(&y).enumerate() {
                assert!((a - b).abs() <= tol, "{}: x[{i}] = {a}, dequantized {b}", f.name());
            }
        }
    }

    #[test]
    fn q8_0_repack_moves_scale_into_its_own_word() {
        let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
        let q = quantize(Format::Q8_0, &x).unwrap();
        let g = to_gpu_layout(Format::Q8_0, &q, 1, 32).unwrap();
        assert_eq!(g.len(), 9 * ROW_GROUP);
        assert_eq!(g[0], u16::from_le_bytes([q[0], q[1]]) as u32);
        assert_eq!(g[ROW_GROUP].to_le_bytes(), [q[2], q[3], q[4], q[5]]);
        assert!(g.iter().enumerate().all(|(i, v)| i % ROW_GROUP == 0 || *v == 0), "padding rows are zero");
    }

    #[test]
    fn wrong_sizes_are_errors() {
        assert_eq!(Format::Q8_0.gpu_bytes(33, 64).unwrap(), 64 * 18 * 4);
        assert!(matches!(Format::F32.gpu_bytes(usize::MAX - 3, 4), Err(Error::Weights(_))));
        assert!(matches!(Format::F32.gpu_bytes(usize::MAX / 8, 4), Err(Error::Weights(_))));
        assert!(to_gpu_layout(Format::Q4_1, &[0; 19], 1, 32).is_err());
        assert!(to_gpu_layout(Format::Q4_1, &[0; 20], 1, 31).is_err());
        assert!(dequantize(Format::Q8_0, &[0; 35]).is_err());
    }

    #[test]
    fn the_table_is_in_format_order_and_its_sizes_agree() {
        for (i, f) in Format::ALL.into_iter().enumerate() {
            let info = f.info();
            assert!(std::ptr::eq(info, &FORMATS[i]), "{}: Format::ALL and FORMATS disagree on the order", info.name);
            assert_eq!(Format::from_ggml_type(info.ggml_type), Some(f));
            // The shortest row the GPU layout takes (4 values, or one block) repacks to its GPU size.
            let blocks = info.block.max(4) / info.block;
            let mut w = Vec::new();
            (info.repack_row)(&vec![0; blocks * info.gguf_bytes], &mut w);
            assert_eq!(w.len() * 4, blocks * info.gpu_bytes, "{}: a row repacks to its GPU size in whole words", info.name);
            // Every conversion consumes and produces exactly one block.
            let x: Vec<f32> = (0..info.block).map(|j| j as f32 / 8.0 - 1.0).collect();
            let mut bytes = Vec::new();
            (info.quantize)(&x, &mut bytes);
            assert_eq!(bytes.len(), info.gguf_bytes, "{}", info.name);
            let mut values = Vec::new();
            (info.dequantize)(&bytes, &mut values);
            assert_eq!(values.len(), info.block, "{}", info.name);
        }
        let ids: std::collections::HashSet<u32> = FORMATS.iter().map(|i| i.shader_id).collect();
        assert_eq!(ids.len(), FORMATS.len(), "shader ids are distinct");
    }

    /// `const FMT_<name>: u32 = <id>u;` lines of a shader.
    fn shader_formats(src: &str) -> Vec<(String, u32)> {
        src.lines()
            .filter_map(|l| l.trim().strip_prefix("const FMT_"))
            .map(|l| {
                let (name, rest) = l.split_once(':').expect("const FMT_X: u32 = Nu;");
                let id = rest.split('=').nth(1).expect("a value").trim().trim_end_matches(';').trim_end_matches('u');
                (name.trim().to_string(), id.parse().expect("a u32 literal"))
            })
            .collect()
    }

    #[test]
    fn the_shaders_format_constants_match_the_table() {
        let src = include_str!("../../shaders/matmul.wgsl");
        let mut want: Vec<(String, u32)> = FORMATS.iter().map(|i| (i.name.to_string(), i.shader_id)).collect();
        let mut got = shader_formats(src);
        want.sort();
        got.sort();
        assert_eq!(got, want, "shaders/matmul.wgsl's FMT_* constants against FORMATS");
        // Each format has its decode branch, and the lanes kernel names exactly the formats it runs.
        for i in &FORMATS {
            assert!(src.contains(&format!("FORMAT == FMT_{}", i.name)), "matmul.wgsl has no branch for {}", i.name);
        }
        let lanes = include_str!("../../shaders/matmul_lanes.wgsl");
        for i in &FORMATS {
            assert_eq!(lanes.contains(&format!("FMT_{}", i.name)), i.lanes, "matmul_lanes.wgsl and FORMATS disagree on {}", i.name);
        }
        assert!(
            !src.contains("FORMAT >=") && !src.contains("FORMAT <") && !lanes.contains("FORMAT >="),
            "formats are compared by name, not by order"
        );
    }
}
