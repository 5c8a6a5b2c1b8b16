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

/// Values per quantization block.
pub const QK: usize = 32;

/// A weight matrix format, with its GGUF/ggml type id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

impl Format {
    /// Every format, in the order of their shader ids.
    pub const ALL: [Format; 4] = [Format::F32, Format::F16, Format::Q8_0, Format::Q4_1];

    /// The ggml type id (`GGML_TYPE_*`).
    pub fn ggml_type(self) -> u32 {
        match self {
            Format::F32 => 0,
            Format::F16 => 1,
            Format::Q4_1 => 3,
            Format::Q8_0 => 8,
        }
    }

    /// The format of ggml type id `t`, or `None` for a type hotprefix does not run.
    pub fn from_ggml_type(t: u32) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.ggml_type() == t)
    }

    /// The value of the shader's `FORMAT` override constant.
    pub fn shader_id(self) -> f64 {
        match self {
            Format::F32 => 0.0,
            Format::F16 => 1.0,
            Format::Q8_0 => 2.0,
            Format::Q4_1 => 3.0,
        }
    }

    /// The format's ggml name: `"F32"`, `"F16"`, `"Q8_0"` or `"Q4_1"`.
    pub fn name(self) -> &'static str {
        match self {
            Format::F32 => "F32",
            Format::F16 => "F16",
            Format::Q8_0 => "Q8_0",
            Format::Q4_1 => "Q4_1",
        }
    }

    /// Values per block along a row (1 for the float formats).
    pub fn block(self) -> usize {
        match self {
            Format::F32 | Format::F16 => 1,
            Format::Q8_0 | Format::Q4_1 => QK,
        }
    }

    /// Bytes per block in GGUF.
    fn gguf_block_bytes(self) -> usize {
        match self {
            Format::F32 => 4,
            Format::F16 => 2,
            Format::Q8_0 => 34,
            Format::Q4_1 => 20,
        }
    }

    /// Bytes per block on the GPU.
    fn gpu_block_bytes(self) -> usize {
        match self {
            Format::Q8_0 => 36,
            f => f.gguf_block_bytes(),
        }
    }

    /// Bytes of one row of `k` values in GGUF, or an error when `k` is not a whole number of blocks.
    pub fn row_bytes(self, k: usize) -> Result<usize> {
        if !k.is_multiple_of(self.block()) {
            return Err(Error::Weights(format!("{} rows need a multiple of {} values, got {k}", self.name(), self.block())));
        }
        Ok(k / self.block() * self.gguf_block_bytes())
    }

    /// u32 words of one row of `k` values on the GPU.
    pub fn gpu_row_words(self, k: usize) -> usize {
        (k / self.block()) * self.gpu_block_bytes() / 4
    }

    /// Bytes of an `[n, k]` matrix on the GPU (rows padded to a whole row group); an error when
    /// that does not fit in a `usize`.
    pub fn gpu_bytes(self, n: usize, k: usize) -> Result<usize> {
        gpu_words(self, n, k)?.checked_mul(4).ok_or_else(|| Error::Weights(format!("{} [{n}, {k}] overflows", self.name())))
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
    let expect = n
        .checked_mul(format.row_bytes(k)?)
        .ok_or_else(|| Error::Weights(format!("[{n}, {k}] overflows")))?;
    if bytes.len() != expect {
        return Err(Error::Weights(format!("{} [{n}, {k}] needs {expect} bytes, got {}", format.name(), bytes.len())));
    }
    if !k.is_multiple_of(4) || k == 0 {
        return Err(Error::Weights(format!("{} rows of {k} values: the GPU layout needs a multiple of 4", format.name())));
    }
    // Each row as words (Q8_0 blocks padded to 9 words), then word j of row r goes to
    // (r / G)·W·G + j·G + r % G, rows padded with zeros. One row at a time: a load holds the
    // file's bytes and the GPU layout, nothing more.
    let w = format.gpu_row_words(k);
    let mut out = vec![0u32; gpu_words(format, n, k)?];
    let mut words = Vec::with_capacity(w);
    for (r, row) in bytes.chunks_exact(format.row_bytes(k)?).enumerate() {
        words.clear();
        match format {
            Format::Q8_0 => {
                for blk in row.chunks_exact(34) {
                    words.push(u16::from_le_bytes([blk[0], blk[1]]) as u32);
                    words.extend(blk[2..].chunks_exact(4).map(|q| u32::from_le_bytes([q[0], q[1], q[2], q[3]])));
                }
            }
            _ => words.extend(row.chunks_exact(4).map(|q| u32::from_le_bytes([q[0], q[1], q[2], q[3]]))),
        }
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
    let bb = format.gguf_block_bytes();
    if !bytes.len().is_multiple_of(bb) {
        return Err(Error::Weights(format!("{} data of {} bytes is not whole blocks", format.name(), bytes.len())));
    }
    let mut out = Vec::with_capacity(bytes.len() / bb * format.block());
    let h = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
    for blk in bytes.chunks_exact(bb) {
        match format {
            Format::F32 => out.push(f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]])),
            Format::F16 => out.push(h(blk)),
            Format::Q8_0 => {
                let d = h(blk);
                out.extend(blk[2..].iter().map(|&q| d * (q as i8) as f32));
            }
            Format::Q4_1 => {
                let (d, m) = (h(blk), h(&blk[2..]));
                let qs = &blk[4..20];
                out.extend(qs.iter().map(|&q| d * (q & 15) as f32 + m));
                out.extend(qs.iter().map(|&q| d * (q >> 4) as f32 + m));
            }
        }
    }
    Ok(out)
}

/// Quantizes f32 values (whole blocks) into GGUF bytes, the way ggml's reference quantizers do.
/// Used to build test weights and the tiny test model.
pub fn quantize(format: Format, x: &[f32]) -> Result<Vec<u8>> {
    if !x.len().is_multiple_of(format.block()) {
        return Err(Error::Weights(format!("{} needs whole blocks of {}", format.name(), format.block())));
    }
    let mut out = Vec::with_capacity(x.len() / format.block() * format.gguf_block_bytes());
    match format {
        Format::F32 => x.iter().for_each(|v| out.extend(v.to_le_bytes())),
        Format::F16 => x.iter().for_each(|v| out.extend(f16::from_f32(*v).to_le_bytes())),
        Format::Q8_0 => {
            for blk in x.chunks_exact(QK) {
                let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend(f16::from_f32(d).to_le_bytes());
                out.extend(blk.iter().map(|v| (v * id).round() as i8 as u8));
            }
        }
        Format::Q4_1 => {
            for blk in x.chunks_exact(QK) {
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
        }
    }
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
}
