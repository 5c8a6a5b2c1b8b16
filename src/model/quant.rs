//! Weight formats as GGUF stores them, and their GPU layout.
//!
//! GGUF layout (row-major by output row, blocks of 32 values along K):
//! - F32: 4 bytes a value. F16: 2 bytes a value.
//! - Q8_0: 34 bytes a block: f16 `d`, then 32 × i8 `q`; `x = d·q`.
//! - Q4_1: 20 bytes a block: f16 `d`, f16 `m`, then 16 bytes; byte j holds value j in its low
//!   nibble and value j+16 in its high nibble; `x = d·q + m`.
//!
//! GPU layout (what shaders read as `array<u32>`): each row is a sequence of u32 words: the GGUF
//! blocks, rearranged within by a format's `permute` where it has one, and for the formats whose
//! blocks are 4n + 2 bytes (`split_d`: Q8_0, Q4_0, Q5_0, IQ4_NL, Q3_K, Q6_K) each block's f16 `d`
//! moved to a header at the start of the row (two a word), so that the rest is whole words.
//! Rows are then interleaved in groups of `ROW_GROUP`: word j of row r sits at
//! `(r / G)·W·G + j·G + r % G` (W words a row). Neighbouring invocations work on neighbouring
//! rows, so their loads are contiguous: coalesced on GPUs. (lavapipe 25.0 loads lane by lane
//! whatever the layout, docs/BENCHMARKS.md; there the interleaving puts word j of two
//! neighbouring rows side by side, one u64 load: matmul_lanes.wgsl.)

use half::f16;

use crate::error::{Error, Result};

/// Values per quantization block of the 32-value formats.
pub const QK: usize = 32;
/// Values per block of the 256-value formats (the K-quants and IQ4_XS).
pub const QK_K: usize = 256;

/// A weight matrix format: a key into [`FORMATS`], its row of facts and functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
#[allow(non_camel_case_types)] // ggml's names
pub enum Format {
    /// 32-bit floats (ggml type 0).
    F32,
    /// 16-bit floats (ggml type 1).
    F16,
    /// Blocks of 32 8-bit values with an f16 scale, 34 bytes a block (ggml type 8).
    Q8_0,
    /// Blocks of 32 4-bit values with an f16 scale and minimum, 20 bytes a block (ggml type 3).
    Q4_1,
    /// bfloat16: the high half of an f32 (ggml type 30).
    BF16,
    /// Blocks of 32 4-bit values − 8 with an f16 scale, 18 bytes (ggml type 2).
    Q4_0,
    /// Blocks of 32 5-bit values − 16 with an f16 scale, 22 bytes (ggml type 6).
    Q5_0,
    /// Blocks of 32 5-bit values with an f16 scale and minimum, 24 bytes (ggml type 7).
    Q5_1,
    /// Blocks of 32 4-bit indices into a fixed non-linear table, f16 scale, 18 bytes (ggml type 20).
    IQ4_NL,
    /// Super-blocks of 256 2-bit values, 16 sub-blocks with 4-bit scales and minimums, 84 bytes (ggml type 10).
    Q2_K,
    /// Super-blocks of 256 3-bit values, 16 sub-blocks with 6-bit scales, 110 bytes (ggml type 11).
    Q3_K,
    /// Super-blocks of 256 4-bit values, 8 sub-blocks with 6-bit scales and minimums, 144 bytes (ggml type 12).
    Q4_K,
    /// Super-blocks of 256 5-bit values, 8 sub-blocks with 6-bit scales and minimums, 176 bytes (ggml type 13).
    Q5_K,
    /// Super-blocks of 256 6-bit values, 16 sub-blocks with 8-bit scales, 210 bytes (ggml type 14).
    Q6_K,
    /// Super-blocks of 256 4-bit table indices, 8 sub-blocks with 6-bit scales, 136 bytes (ggml type 23).
    IQ4_XS,
}

/// What hotprefix knows of one weight format, as ggml's `type_traits` row: sizes, the GPU layout,
/// and the CPU conversions. A format is one row of [`FORMATS`] plus its decode branches in
/// `shaders/quant.wgsl` (the shader's `FMT_*` constants are checked against this table by a test).
pub struct FormatInfo {
    /// The ggml name: `"F32"`, `"Q8_0"`… (the shader's constant is `FMT_` and this name).
    pub name: &'static str,
    /// The ggml type id (`GGML_TYPE_*`).
    pub ggml_type: u32,
    /// Values per block along a row (1 for the float formats).
    pub block: usize,
    /// Bytes of a block in GGUF.
    pub gguf_bytes: usize,
    /// Byte offset, in a GGUF block, of the f16 scale `d` that the GPU layout moves to the row's
    /// header so that the rest of the block is whole u32 words (blocks of 4n + 2 bytes); `None`:
    /// the block is copied as it is.
    pub split_d: Option<usize>,
    /// Byte offsets of the block's f16 fields (scales and minimums): what [`tame`] sets.
    pub halves: &'static [usize],
    /// The value of the shader's `FORMAT` override (`FMT_<name>` in `shaders/quant.wgsl`).
    pub shader_id: u32,
    /// Whether `shaders/matmul_lanes.wgsl`'s tiled `matmul_lanes` has a decode of its own for it,
    /// each block's header read once (it runs the other block formats through `quant.wgsl`'s `w4`).
    pub lanes: bool,
    /// 0, or the bits of the integers `matmul_lanes.wgsl`'s `matvec_lanes` rounds x to for this
    /// format (its `dot_int`: two products a u32 multiply): the 2- and 3-bit formats, whose f32
    /// products cost lavapipe more a byte than the other formats' (docs/BENCHMARKS.md). As many
    /// bits as the products' sums leave room for (`dot_int`): 10 for Q2_K, 9 for Q3_K.
    pub x_bits: u32,
    /// Rearranges one GGUF block's bytes in place for the GPU (before `split_d`): the K-quants
    /// whose sub-blocks' bits are interleaved in GGUF (Q4_K and Q5_K pair sub-blocks in one byte's
    /// nibbles, Q6_K four), so that a 32-value sub-block is whole words the matrix-vector kernel
    /// loads once.
    pub permute: Option<fn(&mut [u8])>,
    /// Appends one GGUF block's values (the CPU oracle, bit-exact with ggml's `dequantize_row_*`).
    pub dequantize: fn(&[u8], &mut Vec<f32>),
    /// Appends one block of values quantized the way ggml's reference quantizer does (test weights
    /// and the tiny test model), for the formats hotprefix can write.
    pub quantize: Option<Quantize>,
}

/// Appends one block of values quantized (see [`FormatInfo::quantize`]).
pub type Quantize = fn(&[f32], &mut Vec<u8>);

/// Every format hotprefix runs, in [`Format`]'s order.
#[rustfmt::skip] // a table: one row a format
pub static FORMATS: [FormatInfo; 15] = [
    FormatInfo { name: "F32", ggml_type: 0, block: 1, gguf_bytes: 4, split_d: None, halves: &[], shader_id: 0, lanes: false, x_bits: 0, permute: None, dequantize: f32_values, quantize: Some(f32_bytes) },
    FormatInfo { name: "F16", ggml_type: 1, block: 1, gguf_bytes: 2, split_d: None, halves: &[], shader_id: 1, lanes: false, x_bits: 0, permute: None, dequantize: f16_values, quantize: Some(f16_bytes) },
    FormatInfo { name: "Q8_0", ggml_type: 8, block: QK, gguf_bytes: 34, split_d: Some(0), halves: &[0], shader_id: 2, lanes: true, x_bits: 0, permute: None, dequantize: q8_0_values, quantize: Some(q8_0_bytes) },
    FormatInfo { name: "Q4_1", ggml_type: 3, block: QK, gguf_bytes: 20, split_d: None, halves: &[0, 2], shader_id: 3, lanes: true, x_bits: 0, permute: None, dequantize: q4_1_values, quantize: Some(q4_1_bytes) },
    FormatInfo { name: "BF16", ggml_type: 30, block: 1, gguf_bytes: 2, split_d: None, halves: &[], shader_id: 4, lanes: false, x_bits: 0, permute: None, dequantize: bf16_values, quantize: Some(bf16_bytes) },
    FormatInfo { name: "Q4_0", ggml_type: 2, block: QK, gguf_bytes: 18, split_d: Some(0), halves: &[0], shader_id: 5, lanes: false, x_bits: 0, permute: None, dequantize: q4_0_values, quantize: Some(q4_0_bytes) },
    FormatInfo { name: "Q5_0", ggml_type: 6, block: QK, gguf_bytes: 22, split_d: Some(0), halves: &[0], shader_id: 6, lanes: false, x_bits: 0, permute: Some(q5_0_permute), dequantize: q5_0_values, quantize: None },
    FormatInfo { name: "Q5_1", ggml_type: 7, block: QK, gguf_bytes: 24, split_d: None, halves: &[0, 2], shader_id: 7, lanes: false, x_bits: 0, permute: Some(q5_1_permute), dequantize: q5_1_values, quantize: None },
    FormatInfo { name: "IQ4_NL", ggml_type: 20, block: QK, gguf_bytes: 18, split_d: Some(0), halves: &[0], shader_id: 8, lanes: false, x_bits: 0, permute: None, dequantize: iq4_nl_values, quantize: None },
    FormatInfo { name: "Q2_K", ggml_type: 10, block: QK_K, gguf_bytes: 84, split_d: None, halves: &[80, 82], shader_id: 9, lanes: false, x_bits: 10, permute: Some(q2_k_permute), dequantize: q2_k_values, quantize: None },
    FormatInfo { name: "Q3_K", ggml_type: 11, block: QK_K, gguf_bytes: 110, split_d: Some(108), halves: &[108], shader_id: 10, lanes: false, x_bits: 9, permute: Some(q3_k_permute), dequantize: q3_k_values, quantize: None },
    FormatInfo { name: "Q4_K", ggml_type: 12, block: QK_K, gguf_bytes: 144, split_d: None, halves: &[0, 2], shader_id: 11, lanes: false, x_bits: 0, permute: Some(q4_k_permute), dequantize: q4_k_values, quantize: None },
    FormatInfo { name: "Q5_K", ggml_type: 13, block: QK_K, gguf_bytes: 176, split_d: None, halves: &[0, 2], shader_id: 12, lanes: false, x_bits: 0, permute: Some(q5_k_permute), dequantize: q5_k_values, quantize: None },
    FormatInfo { name: "Q6_K", ggml_type: 14, block: QK_K, gguf_bytes: 210, split_d: Some(208), halves: &[208], shader_id: 13, lanes: false, x_bits: 0, permute: Some(q6_k_permute), dequantize: q6_k_values, quantize: None },
    FormatInfo { name: "IQ4_XS", ggml_type: 23, block: QK_K, gguf_bytes: 136, split_d: None, halves: &[0], shader_id: 14, lanes: false, x_bits: 0, permute: None, dequantize: iq4_xs_values, quantize: None },
];

/// The names of every format, for error messages: `"F32, F16, Q8_0, …"`.
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
    #[rustfmt::skip]
    pub const ALL: [Format; 15] = [
        Format::F32, Format::F16, Format::Q8_0, Format::Q4_1, Format::BF16, Format::Q4_0, Format::Q5_0, Format::Q5_1,
        Format::IQ4_NL, Format::Q2_K, Format::Q3_K, Format::Q4_K, Format::Q5_K, Format::Q6_K, Format::IQ4_XS,
    ];

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

    /// The format named `name` (ggml's name, any case), or `None`.
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name().eq_ignore_ascii_case(name))
    }

    /// The value of the shader's `FORMAT` override constant.
    pub fn shader_id(self) -> f64 {
        self.info().shader_id as f64
    }

    /// The format's ggml name: `"F32"`, `"Q4_K"`…
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Values per block along a row (1 for the float formats).
    pub fn block(self) -> usize {
        self.info().block
    }

    /// Whether hotprefix can write this format ([`quantize`]).
    pub fn can_quantize(self) -> bool {
        self.info().quantize.is_some()
    }

    /// Bytes of one row of `k` values in GGUF, or an error when `k` is not a whole number of blocks.
    pub fn row_bytes(self, k: usize) -> Result<usize> {
        if !k.is_multiple_of(self.block()) {
            return Err(Error::Weights(format!("{} rows need a multiple of {} values, got {k}", self.name(), self.block())));
        }
        Ok(k / self.block() * self.info().gguf_bytes)
    }

    /// u32 words of one row of `k` values on the GPU: for a format with a split scale, the row's
    /// header (the blocks' `d`, two a word) and then each block's remaining bytes.
    pub fn gpu_row_words(self, k: usize) -> usize {
        let info = self.info();
        let blocks = k / info.block;
        match info.split_d {
            Some(_) => blocks.div_ceil(2) + blocks * (info.gguf_bytes - 2) / 4,
            None => (blocks * info.gguf_bytes).div_ceil(4),
        }
    }

    /// Bytes of an `[n, k]` matrix on the GPU (rows padded to a whole row group); an error when
    /// that does not fit in a `usize`.
    pub fn gpu_bytes(self, n: usize, k: usize) -> Result<usize> {
        gpu_words(self, n, k)?.checked_mul(4).ok_or_else(|| Error::Weights(format!("{} [{n}, {k}] overflows", self.name())))
    }
}

// The table's conversions, one block each (their callers cut the data: `blk` is always
// `gguf_bytes` long, `x` always `block` values). Each follows ggml-quants.c's
// `dequantize_row_*` operation for operation, so that the f32 results are the same bits
// (tests/quant_vectors.rs checks them against llama.cpp's own output).

fn f16_at(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// ggml's table of IQ4_NL (and IQ4_XS) values (`kvalues_iq4nl`).
const IQ4NL: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// The bytes as they are, as little-endian words (a final partial word padded with zeros).
fn words(row: &[u8], out: &mut Vec<u32>) {
    let mut it = row.chunks_exact(4);
    out.extend(it.by_ref().map(|q| u32::from_le_bytes([q[0], q[1], q[2], q[3]])));
    let rest = it.remainder();
    if !rest.is_empty() {
        let mut q = [0u8; 4];
        q[..rest.len()].copy_from_slice(rest);
        out.push(u32::from_le_bytes(q));
    }
}

/// The GPU words of one row's GGUF bytes (see the module docs): the bytes as words, or, for a
/// format with a split scale, the blocks' `d` two a word, then each block without its `d`.
fn repack_row(info: &FormatInfo, row: &[u8], out: &mut Vec<u32>) {
    let permuted;
    let row = match info.permute {
        Some(permute) => {
            let mut b = row.to_vec();
            b.chunks_exact_mut(info.gguf_bytes).for_each(permute);
            permuted = b;
            &permuted[..]
        }
        None => row,
    };
    let Some(at) = info.split_d else {
        return words(row, out);
    };
    let blocks = row.chunks_exact(info.gguf_bytes);
    let d: Vec<u16> = blocks.clone().map(|b| u16::from_le_bytes([b[at], b[at + 1]])).collect();
    out.extend(d.chunks(2).map(|p| p[0] as u32 | (p.get(1).copied().unwrap_or(0) as u32) << 16));
    let mut body = Vec::with_capacity(info.gguf_bytes - 2);
    for b in blocks {
        body.clear();
        body.extend_from_slice(&b[..at]);
        body.extend_from_slice(&b[at + 2..]);
        words(&body, out);
    }
}

/// The K-quants' bits as whole words a 32-value sub-block on the GPU (the `permute` column). GGUF
/// interleaves sub-blocks in a byte: Q4_K/Q5_K nibbles pair two, 2-bit fields four, single bits
/// all eight. Each helper rewrites one such field array in place.
///
/// 4-bit values (Q4_K/Q5_K's 128 bytes: value l of sub-block sb is byte 32·(sb/2) + l, nibble
/// sb % 2) as 16 bytes a sub-block, byte 4k + b holding values 4k + b (low nibble) and
/// 16 + 4k + b (high): the layout of Q4_0.
fn nibbles_by_sub_block(q: &mut [u8]) {
    let mut old = [0u8; 128];
    old.copy_from_slice(q);
    let v = |sb: usize, l: usize| (old[32 * (sb / 2) + l] >> (4 * (sb % 2))) & 15;
    for sb in 0..8 {
        for j in 0..16 {
            q[16 * sb + j] = v(sb, j) | v(sb, 16 + j) << 4;
        }
    }
}

/// 2-bit values (Q2_K/Q3_K's 64 bytes of low bits, Q6_K's high bits: value l of sub-block
/// 4n + g is byte 32n + l, bits 2g) as 8 bytes a sub-block: word h, byte b, bits 2s hold value
/// 16h + 4s + b (quad 4h + s at shift 2s, read by quant.wgsl's `field`).
fn crumbs_by_sub_block(q: &mut [u8]) {
    let mut old = [0u8; 64];
    old.copy_from_slice(q);
    let v = |sb: usize, l: usize| (old[32 * (sb / 4) + l] >> (2 * (sb % 4))) & 3;
    for sb in 0..8 {
        for h in 0..2 {
            for b in 0..4 {
                q[8 * sb + 4 * h + b] = (0..4).fold(0, |w, s| w | v(sb, 16 * h + 4 * s + b) << (2 * s));
            }
        }
    }
}

/// Single bits (Q5_K's fifth bits, Q3_K's hmask: bit sb of byte l is value l of sub-block sb) as
/// a word a sub-block, in [`bits_by_quad`]'s order.
fn bits_by_sub_block(q: &mut [u8]) {
    let mut old = [0u8; 32];
    old.copy_from_slice(q);
    for sb in 0..8 {
        let w = (0..32).fold(0u32, |w, l| w | (((old[l] >> sb) & 1) as u32) << l);
        q[4 * sb..4 * sb + 4].copy_from_slice(&bits_by_quad(w).to_le_bytes());
    }
}

/// A word of 32 single bits, bit l for value l, with value 4i + j's bit at 8j + i: quad i's 4 bits
/// are then one shift and mask from bit 0 of each byte (quant.wgsl's `quad_bits`), where in GGUF's
/// order spreading them took a multiply. Byte j gathers every 4th bit from j by halving the gaps
/// three times (a bit loop was 32 iterations a block, on every Q5_0/Q5_1 block of a file).
fn bits_by_quad(w: u32) -> u32 {
    (0..4).fold(0, |o, j| {
        let mut b = (w >> j) & 0x1111_1111;
        b = (b | b >> 3) & 0x0303_0303;
        b = (b | b >> 6) & 0x000f_000f;
        b = (b | b >> 12) & 0xff;
        o | b << (8 * j)
    })
}

/// Q5_0: its fifth bits (the word after d) in [`bits_by_quad`]'s order.
fn q5_0_permute(blk: &mut [u8]) {
    fifth_bits(&mut blk[2..6]);
}

/// Q5_1: as Q5_0, the word after d and m.
fn q5_1_permute(blk: &mut [u8]) {
    fifth_bits(&mut blk[4..8]);
}

fn fifth_bits(q: &mut [u8]) {
    let w = u32::from_le_bytes([q[0], q[1], q[2], q[3]]);
    q.copy_from_slice(&bits_by_quad(w).to_le_bytes());
}

/// Q2_K: scales, then the 2-bit values by sub-block, then d and dmin.
fn q2_k_permute(blk: &mut [u8]) {
    crumbs_by_sub_block(&mut blk[16..80]);
}

/// Q3_K: the high bits by sub-block, the low bits by sub-block, then scales and d.
fn q3_k_permute(blk: &mut [u8]) {
    bits_by_sub_block(&mut blk[..32]);
    crumbs_by_sub_block(&mut blk[32..96]);
}

/// Q4_K: d, dmin and the 12 scale bytes as in GGUF, then the values by sub-block.
fn q4_k_permute(blk: &mut [u8]) {
    nibbles_by_sub_block(&mut blk[16..144]);
}

/// Q5_K: as Q4_K, the fifth bits by sub-block between.
fn q5_k_permute(blk: &mut [u8]) {
    bits_by_sub_block(&mut blk[16..48]);
    nibbles_by_sub_block(&mut blk[48..176]);
}

/// Q6_K: the low 4 bits by sub-block (GGUF: value l of sub-block 4n + g is byte
/// 64n + 32·(g % 2) + l, nibble g / 2; on the GPU as Q4_K's), the high 2 bits by sub-block, then
/// scales and d.
fn q6_k_permute(blk: &mut [u8]) {
    let mut ql = [0u8; 128];
    ql.copy_from_slice(&blk[..128]);
    let v = |sb: usize, l: usize| (ql[64 * (sb / 4) + 32 * (sb % 2) + l] >> (4 * (sb % 4 / 2))) & 15;
    for sb in 0..8 {
        for j in 0..16 {
            blk[16 * sb + j] = v(sb, j) | v(sb, 16 + j) << 4;
        }
    }
    crumbs_by_sub_block(&mut blk[128..192]);
}

fn f32_values(blk: &[u8], out: &mut Vec<f32>) {
    out.push(f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]));
}

fn f16_values(blk: &[u8], out: &mut Vec<f32>) {
    out.push(f16_at(blk));
}

fn bf16_values(blk: &[u8], out: &mut Vec<f32>) {
    out.push(f32::from_bits((u16::from_le_bytes([blk[0], blk[1]]) as u32) << 16));
}

fn q8_0_values(blk: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(blk);
    out.extend(blk[2..].iter().map(|&q| (q as i8) as f32 * d));
}

fn q4_0_values(blk: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(blk);
    let qs = &blk[2..18];
    out.extend(qs.iter().map(|&q| ((q & 15) as i32 - 8) as f32 * d));
    out.extend(qs.iter().map(|&q| ((q >> 4) as i32 - 8) as f32 * d));
}

fn q4_1_values(blk: &[u8], out: &mut Vec<f32>) {
    let (d, m) = (f16_at(blk), f16_at(&blk[2..]));
    let qs = &blk[4..20];
    out.extend(qs.iter().map(|&q| (q & 15) as f32 * d + m));
    out.extend(qs.iter().map(|&q| (q >> 4) as f32 * d + m));
}

/// Value j of a 5-bit block: nibble j (low nibbles, then high) and bit j of `qh`.
fn q5(qh: u32, qs: &[u8], j: usize) -> i32 {
    let nib = if j < 16 { qs[j] & 15 } else { qs[j - 16] >> 4 };
    (nib as u32 | ((qh >> j) & 1) << 4) as i32
}

fn q5_0_values(blk: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(blk);
    let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
    out.extend((0..QK).map(|j| (q5(qh, &blk[6..22], j) - 16) as f32 * d));
}

fn q5_1_values(blk: &[u8], out: &mut Vec<f32>) {
    let (d, m) = (f16_at(blk), f16_at(&blk[2..]));
    let qh = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
    out.extend((0..QK).map(|j| q5(qh, &blk[8..24], j) as f32 * d + m));
}

fn iq4_nl_values(blk: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(blk);
    let qs = &blk[2..18];
    out.extend(qs.iter().map(|&q| d * IQ4NL[(q & 15) as usize] as f32));
    out.extend(qs.iter().map(|&q| d * IQ4NL[(q >> 4) as usize] as f32));
}

fn q2_k_values(blk: &[u8], out: &mut Vec<f32>) {
    let (scales, qs) = (&blk[0..16], &blk[16..80]);
    let (d, min) = (f16_at(&blk[80..]), f16_at(&blk[82..]));
    // Value v: 2 bits at 2·(v % 128 / 32) of qs[32·(v / 128) + v % 32]; scale and minimum v / 16.
    for v in 0..QK_K {
        let sc = scales[v / 16];
        let (dl, ml) = (d * (sc & 15) as f32, min * (sc >> 4) as f32);
        let q = (qs[32 * (v / 128) + v % 32] >> (2 * (v % 128 / 32))) & 3;
        out.push(dl * q as f32 - ml);
    }
}

/// Scale `s` (0..16) of a Q3_K block: 6 bits, the low 4 from `sc[s % 8]`, the high 2 from
/// `sc[8 + s % 4]`, minus 32.
fn q3_k_scale(sc: &[u8], s: usize) -> i32 {
    let lo = (sc[s % 8] >> (4 * (s / 8))) & 15;
    let hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    (lo | hi << 4) as i32 - 32
}

fn q3_k_values(blk: &[u8], out: &mut Vec<f32>) {
    let (hmask, qs, sc) = (&blk[0..32], &blk[32..96], &blk[96..108]);
    let d_all = f16_at(&blk[108..]);
    for v in 0..QK_K {
        let dl = d_all * q3_k_scale(sc, v / 16) as f32;
        let q = ((qs[32 * (v / 128) + v % 32] >> (2 * (v % 128 / 32))) & 3) as i32;
        let h = if hmask[v % 32] & (1 << (v / 32)) != 0 { 0 } else { 4 };
        out.push(dl * (q - h) as f32);
    }
}

/// Scale and minimum `j` (0..8) of a Q4_K/Q5_K block: ggml's `get_scale_min_k4`.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

fn q4_k_values(blk: &[u8], out: &mut Vec<f32>) {
    let (d, min) = (f16_at(blk), f16_at(&blk[2..]));
    let (scales, qs) = (&blk[4..16], &blk[16..144]);
    for s in 0..8 {
        let (sc, m) = scale_min_k4(s, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let q = &qs[32 * (s / 2)..32 * (s / 2) + 32];
        out.extend(q.iter().map(|&b| d1 * ((b >> (4 * (s % 2))) & 15) as f32 - m1));
    }
}

fn q5_k_values(blk: &[u8], out: &mut Vec<f32>) {
    let (d, min) = (f16_at(blk), f16_at(&blk[2..]));
    let (scales, qh, qs) = (&blk[4..16], &blk[16..48], &blk[48..176]);
    for s in 0..8 {
        let (sc, m) = scale_min_k4(s, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        for l in 0..32 {
            let q = ((qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15) as u32 + if qh[l] & (1 << s) != 0 { 16 } else { 0 };
            out.push(d1 * q as f32 - m1);
        }
    }
}

fn q6_k_values(blk: &[u8], out: &mut Vec<f32>) {
    let (ql, qh, sc) = (&blk[0..128], &blk[128..192], &blk[192..208]);
    let d = f16_at(&blk[208..]);
    // Value v = 128n + 32g + l: low 4 bits from ql[64n + 32(g % 2) + l] (nibble g / 2), high 2
    // from qh[32n + l] at 2g; scale v / 16.
    for v in 0..QK_K {
        let (n, g, l) = (v / 128, v % 128 / 32, v % 32);
        let lo = (ql[64 * n + 32 * (g % 2) + l] >> (4 * (g / 2))) & 15;
        let hi = (qh[32 * n + l] >> (2 * g)) & 3;
        let q = (lo | hi << 4) as i32 - 32;
        out.push(d * (sc[v / 16] as i8) as f32 * q as f32);
    }
}

fn iq4_xs_values(blk: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(blk);
    let scales_h = u16::from_le_bytes([blk[2], blk[3]]);
    let (scales_l, qs) = (&blk[4..8], &blk[8..136]);
    for ib in 0..8 {
        let ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 15) as i32 | (((scales_h >> (2 * ib)) & 3) as i32) << 4;
        let dl = d * (ls - 32) as f32;
        let q = &qs[16 * ib..16 * ib + 16];
        out.extend(q.iter().map(|&b| dl * IQ4NL[(b & 15) as usize] as f32));
        out.extend(q.iter().map(|&b| dl * IQ4NL[(b >> 4) as usize] as f32));
    }
}

fn f32_bytes(x: &[f32], out: &mut Vec<u8>) {
    out.extend(x[0].to_le_bytes());
}

fn f16_bytes(x: &[f32], out: &mut Vec<u8>) {
    out.extend(f16::from_f32(x[0]).to_le_bytes());
}

/// ggml's `ggml_compute_fp32_to_bf16`: round to nearest even, NaN kept quiet.
fn bf16_bytes(x: &[f32], out: &mut Vec<u8>) {
    let u = x[0].to_bits();
    let h = if u & 0x7fff_ffff > 0x7f80_0000 { (u >> 16) | 64 } else { (u + (0x7fff + ((u >> 16) & 1))) >> 16 };
    out.extend((h as u16).to_le_bytes());
}

fn q8_0_bytes(blk: &[f32], out: &mut Vec<u8>) {
    let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(blk.iter().map(|v| (v * id).round() as i8 as u8));
}

/// ggml's `quantize_row_q4_0_ref`.
fn q4_0_bytes(blk: &[f32], out: &mut Vec<u8>) {
    let max = blk.iter().copied().fold(0f32, |m, v| if v.abs() > m.abs() { v } else { m });
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as u8).min(15);
    for j in 0..QK / 2 {
        out.push(q(blk[j]) | (q(blk[j + QK / 2]) << 4));
    }
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

/// Makes arbitrary bytes (whole GGUF blocks of a block format) into blocks whose values are
/// finite and within about ±`amp` (at most twice it): each f16 field (scale, minimum) becomes a finite value
/// derived from its own bits, scaled so that the block's largest possible value is `amp`. The
/// other bits stay as they were: every quant, sign and sub-scale pattern is exercised. Test
/// weights for the formats hotprefix does not write, and fuzz inputs.
pub fn tame(format: Format, bytes: &mut [u8], amp: f32) {
    let info = format.info();
    if info.halves.is_empty() {
        return;
    }
    // The block's largest |value| with every f16 field 1 (the other bits set to give it).
    let mut probe = vec![0xffu8; info.gguf_bytes];
    for &h in info.halves {
        probe[h..h + 2].copy_from_slice(&f16::ONE.to_le_bytes());
    }
    let mut v = Vec::new();
    let mut span = 0f32;
    for fill in [0x00u8, 0x55, 0xaa, 0xff, 0x80, 0x88, 0x08, 0x7f, 0xf7] {
        probe.iter_mut().enumerate().filter(|(i, _)| !info.halves.iter().any(|&h| *i == h || *i == h + 1)).for_each(|(_, b)| *b = fill);
        v.clear();
        (info.dequantize)(&probe, &mut v);
        span = v.iter().fold(span, |a, x| a.max(x.abs()));
    }
    for blk in bytes.chunks_exact_mut(info.gguf_bytes) {
        for &h in info.halves {
            let r = u16::from_le_bytes([blk[h], blk[h + 1]]);
            let unit = (r as f32 / 65535.0) * 2.0 - 1.0; // in [-1, 1]
            blk[h..h + 2].copy_from_slice(&f16::from_f32(unit * amp / span.max(1.0)).to_le_bytes());
        }
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
    let info = format.info();
    for (r, row) in bytes.chunks_exact(format.row_bytes(k)?).enumerate() {
        words.clear();
        repack_row(info, row, &mut words);
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
    let q = info.quantize.ok_or_else(|| Error::Weights(format!("hotprefix does not write {} weights", info.name)))?;
    x.chunks_exact(info.block).for_each(|blk| q(blk, &mut out));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_by_quad_moves_value_4i_plus_j_to_bit_8j_plus_i() {
        let plain = |w: u32| (0..32).fold(0u32, |o, l| o | ((w >> l) & 1) << (8 * (l % 4) + l / 4));
        let mut w = 0x9e37_79b9u32;
        for l in 0..32 {
            assert_eq!(bits_by_quad(1 << l), plain(1 << l), "bit {l}");
        }
        for _ in 0..1000 {
            w = w.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            assert_eq!(bits_by_quad(w), plain(w), "{w:#010x}");
        }
    }

    #[test]
    fn quantize_roundtrip_is_close() {
        let x: Vec<f32> = (0..512).map(|i| ((i * 37 % 64) as f32 - 31.5) / 16.0).collect();
        for f in Format::ALL.into_iter().filter(|f| f.can_quantize()) {
            let q = quantize(f, &x).unwrap();
            assert_eq!(q.len(), 2 * f.row_bytes(256).unwrap());
            let y = dequantize(f, &q).unwrap();
            let tol = match f {
                Format::F32 => 0.0,
                Format::F16 => 1e-3,
                Format::BF16 => 8e-3,
                Format::Q8_0 => 2.0 / 127.0,
                Format::Q4_1 => 4.0 / 15.0,
                Format::Q4_0 => 2.0 / 8.0,
                _ => unreachable!("{} has no quantizer", f.name()),
            };
            for (i, (a, b)) in x.iter().zip(&y).enumerate() {
                assert!((a - b).abs() <= tol, "{}: x[{i}] = {a}, dequantized {b}", f.name());
            }
        }
        assert!(matches!(quantize(Format::Q4_K, &x), Err(Error::Weights(_))));
    }

    #[test]
    fn split_formats_move_d_into_the_row_header() {
        let x: Vec<f32> = (0..64).map(|i| i as f32 - 16.0).collect();
        let q = quantize(Format::Q8_0, &x).unwrap();
        let g = to_gpu_layout(Format::Q8_0, &q, 1, 64).unwrap();
        assert_eq!(g.len(), 17 * ROW_GROUP, "one header word for two blocks, then 8 words a block");
        assert_eq!(g[0], u16::from_le_bytes([q[0], q[1]]) as u32 | (u16::from_le_bytes([q[34], q[35]]) as u32) << 16);
        assert_eq!(g[ROW_GROUP].to_le_bytes(), [q[2], q[3], q[4], q[5]]);
        assert_eq!(g[9 * ROW_GROUP].to_le_bytes(), [q[36], q[37], q[38], q[39]]);
        assert!(g.iter().enumerate().all(|(i, v)| i % ROW_GROUP == 0 || *v == 0), "padding rows are zero");
        // Q6_K keeps its d at the end of a block: the body is the first 208 bytes.
        let mut b: Vec<u8> = (0..210u32).map(|i| (i * 7 + 3) as u8).collect();
        tame(Format::Q6_K, &mut b, 1.0);
        let g = to_gpu_layout(Format::Q6_K, &b, 1, 256).unwrap();
        assert_eq!(g[0], u16::from_le_bytes([b[208], b[209]]) as u32);
        assert_eq!(g[52 * ROW_GROUP].to_le_bytes(), [b[204], b[205], b[206], b[207]]);
    }

    #[test]
    fn wrong_sizes_are_errors() {
        assert_eq!(Format::Q8_0.gpu_bytes(33, 64).unwrap(), 64 * 17 * 4);
        assert!(matches!(Format::F32.gpu_bytes(usize::MAX - 3, 4), Err(Error::Weights(_))));
        assert!(matches!(Format::F32.gpu_bytes(usize::MAX / 8, 4), Err(Error::Weights(_))));
        assert!(to_gpu_layout(Format::Q4_1, &[0; 19], 1, 32).is_err());
        assert!(to_gpu_layout(Format::Q4_1, &[0; 20], 1, 31).is_err());
        assert!(to_gpu_layout(Format::Q4_K, &[0; 144], 1, 128).is_err());
        assert!(dequantize(Format::Q8_0, &[0; 35]).is_err());
    }

    #[test]
    fn gpu_bytes_stay_within_two_percent_of_gguf() {
        // The widths of the models people use, and their narrowest K-quant rows.
        for f in Format::ALL {
            for k in [256, 512, 576, 640, 896, 1024, 1152, 1536, 2048, 4864, 8960] {
                if k % f.block() != 0 {
                    continue;
                }
                let (gguf, gpu) = (f.row_bytes(k).unwrap(), f.gpu_row_words(k) * 4);
                assert!(gpu as f64 <= 1.02 * gguf as f64, "{} rows of {k}: {gpu} GPU bytes for {gguf} in GGUF", f.name());
            }
        }
    }

    #[test]
    fn the_table_is_in_format_order_and_its_sizes_agree() {
        for (i, f) in Format::ALL.into_iter().enumerate() {
            let info = f.info();
            assert!(std::ptr::eq(info, &FORMATS[i]), "{}: Format::ALL and FORMATS disagree on the order", info.name);
            assert_eq!(Format::from_ggml_type(info.ggml_type), Some(f));
            assert_eq!(Format::from_name(&info.name.to_lowercase()), Some(f));
            // The shortest rows the GPU layout takes (4 values, or one or two blocks) repack to
            // their GPU size in whole words.
            for blocks in [info.block.max(4) / info.block, 2] {
                let mut w = Vec::new();
                repack_row(info, &vec![0; blocks * info.gguf_bytes], &mut w);
                assert_eq!(w.len(), f.gpu_row_words(blocks * info.block), "{}: {blocks} blocks", info.name);
            }
            if let Some(at) = info.split_d {
                assert_eq!((info.gguf_bytes - 2) % 4, 0, "{}: a split block's body is whole words", info.name);
                assert!(info.halves.contains(&at), "{}: the split d is an f16 field", info.name);
            } else {
                assert_eq!(info.gguf_bytes % 4 * (info.block > 1) as usize, 0, "{}: an unsplit block is whole words", info.name);
            }
            // Every conversion consumes and produces exactly one block.
            let mut bytes: Vec<u8> = (0..info.gguf_bytes).map(|j| (j * 29 + 11) as u8).collect();
            if let Some(q) = info.quantize {
                let x: Vec<f32> = (0..info.block).map(|j| j as f32 / 8.0 - 1.0).collect();
                bytes.clear();
                q(&x, &mut bytes);
                assert_eq!(bytes.len(), info.gguf_bytes, "{}", info.name);
            }
            tame(f, &mut bytes, 1.0);
            let mut values = Vec::new();
            (info.dequantize)(&bytes, &mut values);
            assert_eq!(values.len(), info.block, "{}", info.name);
            assert!(values.iter().all(|v| v.is_finite()), "{}: tame blocks are finite", info.name);
            if !info.halves.is_empty() {
                assert!(values.iter().all(|v| v.abs() <= 2.0), "{}: tame blocks stay within about the amplitude: {values:?}", info.name);
            }
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
        let src = include_str!("../../shaders/quant.wgsl");
        let mut want: Vec<(String, u32)> = FORMATS.iter().map(|i| (i.name.to_string(), i.shader_id)).collect();
        let mut got = shader_formats(src);
        want.sort();
        got.sort();
        assert_eq!(got, want, "shaders/quant.wgsl's FMT_* constants against FORMATS");
        // Each format has its decode branch, and the lanes kernels name exactly the formats they
        // decode themselves: the tiled kernel's (`lanes`), those whose x they round to integers
        // (`x_bits`, each with its branch in `dot_int`), and the IQ4 formats they look up by shuffle.
        for i in &FORMATS {
            assert!(src.contains(&format!("FORMAT == FMT_{}", i.name)), "quant.wgsl has no branch for {}", i.name);
        }
        let lanes = include_str!("../../shaders/matmul_lanes.wgsl");
        for i in &FORMATS {
            let own = i.lanes || i.x_bits > 0 || matches!(i.name, "IQ4_NL" | "IQ4_XS");
            assert_eq!(lanes.contains(&format!("FMT_{}", i.name)), own, "matmul_lanes.wgsl and FORMATS disagree on {}", i.name);
        }
        let dot_int = &lanes[lanes.find("fn dot_int(").expect("dot_int")..];
        for i in FORMATS.iter().filter(|i| i.x_bits > 0) {
            assert!(dot_int.contains(&format!("FMT_{}", i.name)), "dot_int has no branch for {}", i.name);
        }
        assert!(
            !src.contains("FORMAT >=") && !src.contains("FORMAT <") && !lanes.contains("FORMAT >="),
            "formats are compared by name, not by order"
        );
    }
}
