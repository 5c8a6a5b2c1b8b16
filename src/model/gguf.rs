//! A GGUF (v2, v3) reader that validates everything before trusting it.
//!
//! Written here rather than taken from a crate so that every defect becomes an `Error::Gguf`
//! naming what is wrong, and so that no count read from the file sizes an allocation before it is
//! checked against the bytes that are actually there (the reader is fuzzed: docs/FUZZING.md).

use std::collections::BTreeMap;

use crate::error::{Error, Result};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
const MAX_DIMS: u32 = 4;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `UINT8` (type 0).
    U8(u8),
    /// `INT8` (type 1).
    I8(i8),
    /// `UINT16` (type 2).
    U16(u16),
    /// `INT16` (type 3).
    I16(i16),
    /// `UINT32` (type 4).
    U32(u32),
    /// `INT32` (type 5).
    I32(i32),
    /// `FLOAT32` (type 6).
    F32(f32),
    /// `BOOL` (type 7), stored as one byte that must be 0 or 1.
    Bool(bool),
    /// `STRING` (type 8), UTF-8.
    Str(String),
    /// `ARRAY` (type 9) of values of one type; arrays of arrays are refused.
    Array(Vec<Value>),
    /// `UINT64` (type 10).
    U64(u64),
    /// `INT64` (type 11).
    I64(i64),
    /// `FLOAT64` (type 12).
    F64(f64),
}

impl Value {
    /// The GGUF value-type id of this value.
    pub fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => 0,
            Value::I8(_) => 1,
            Value::U16(_) => 2,
            Value::I16(_) => 3,
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::F32(_) => 6,
            Value::Bool(_) => 7,
            Value::Str(_) => 8,
            Value::Array(_) => 9,
            Value::U64(_) => 10,
            Value::I64(_) => 11,
            Value::F64(_) => 12,
        }
    }

    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is a float or a non-negative integer of any width.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The value as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// One tensor's header. `offset` is absolute in the file; `bytes` follows from type and shape.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name (`token_embd.weight`, `blk.0.attn_q.weight`, …).
    pub name: String,
    /// GGUF order: `dims[0]` is the fastest-varying (row length).
    pub dims: Vec<u64>,
    /// The ggml type id of its data (`GGML_TYPE_*`: 0 F32, 1 F16, 8 Q8_0, …).
    pub ggml_type: u32,
    /// Byte offset of its data from the start of the file (aligned to `general.alignment`).
    pub offset: u64,
    /// Size of its data in bytes.
    pub bytes: u64,
}

/// A parsed GGUF header: metadata and tensor table, checked against the file's length.
#[derive(Clone, Debug)]
pub struct Gguf {
    /// The GGUF format version: 2 or 3.
    pub version: u32,
    /// The metadata key-value pairs, by key.
    pub metadata: BTreeMap<String, Value>,
    /// The tensor headers, in file order.
    pub tensors: Vec<TensorInfo>,
    /// Length of the whole file in bytes, which every tensor's data was checked to lie within.
    pub file_len: u64,
}

/// A ggml tensor type: its id (`GGML_TYPE_*`), name and layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType {
    /// The id a GGUF tensor header stores.
    pub id: u32,
    /// ggml's name for it: `"Q4_K"`, `"IQ4_NL"`…
    pub name: &'static str,
    /// Values per block along a row.
    pub block: u64,
    /// Bytes per block.
    pub bytes: u64,
}

/// Every tensor type llama.cpp defines: ids, names, and layouts as its `ggml_blck_size` and
/// `ggml_type_size` give them (llama.cpp b11739, commit 0ce8cd11; printed by
/// `scripts/ggml-types.py`). The ids it removed (4, 5, 31–33, 36–38) are not types: a tensor of
/// one, or of an id past the table, is a bad file. A known type hotprefix does not run is refused
/// later, by the load, as an unsupported format.
#[rustfmt::skip] // a table: one row a type
pub const GGML_TYPES: &[GgmlType] = &[
    GgmlType { id: 0, name: "F32", block: 1, bytes: 4 },
    GgmlType { id: 1, name: "F16", block: 1, bytes: 2 },
    GgmlType { id: 2, name: "Q4_0", block: 32, bytes: 18 },
    GgmlType { id: 3, name: "Q4_1", block: 32, bytes: 20 },
    GgmlType { id: 6, name: "Q5_0", block: 32, bytes: 22 },
    GgmlType { id: 7, name: "Q5_1", block: 32, bytes: 24 },
    GgmlType { id: 8, name: "Q8_0", block: 32, bytes: 34 },
    GgmlType { id: 9, name: "Q8_1", block: 32, bytes: 36 },
    GgmlType { id: 10, name: "Q2_K", block: 256, bytes: 84 },
    GgmlType { id: 11, name: "Q3_K", block: 256, bytes: 110 },
    GgmlType { id: 12, name: "Q4_K", block: 256, bytes: 144 },
    GgmlType { id: 13, name: "Q5_K", block: 256, bytes: 176 },
    GgmlType { id: 14, name: "Q6_K", block: 256, bytes: 210 },
    GgmlType { id: 15, name: "Q8_K", block: 256, bytes: 292 },
    GgmlType { id: 16, name: "IQ2_XXS", block: 256, bytes: 66 },
    GgmlType { id: 17, name: "IQ2_XS", block: 256, bytes: 74 },
    GgmlType { id: 18, name: "IQ3_XXS", block: 256, bytes: 98 },
    GgmlType { id: 19, name: "IQ1_S", block: 256, bytes: 50 },
    GgmlType { id: 20, name: "IQ4_NL", block: 32, bytes: 18 },
    GgmlType { id: 21, name: "IQ3_S", block: 256, bytes: 110 },
    GgmlType { id: 22, name: "IQ2_S", block: 256, bytes: 82 },
    GgmlType { id: 23, name: "IQ4_XS", block: 256, bytes: 136 },
    GgmlType { id: 24, name: "I8", block: 1, bytes: 1 },
    GgmlType { id: 25, name: "I16", block: 1, bytes: 2 },
    GgmlType { id: 26, name: "I32", block: 1, bytes: 4 },
    GgmlType { id: 27, name: "I64", block: 1, bytes: 8 },
    GgmlType { id: 28, name: "F64", block: 1, bytes: 8 },
    GgmlType { id: 29, name: "IQ1_M", block: 256, bytes: 56 },
    GgmlType { id: 30, name: "BF16", block: 1, bytes: 2 },
    GgmlType { id: 34, name: "TQ1_0", block: 256, bytes: 54 },
    GgmlType { id: 35, name: "TQ2_0", block: 256, bytes: 66 },
    GgmlType { id: 39, name: "MXFP4", block: 32, bytes: 17 },
    GgmlType { id: 40, name: "NVFP4", block: 64, bytes: 36 },
    GgmlType { id: 41, name: "Q1_0", block: 128, bytes: 18 },
    GgmlType { id: 42, name: "Q2_0", block: 64, bytes: 18 },
];

/// The ggml type with id `id`, if llama.cpp defines one.
pub fn ggml_type(id: u32) -> Option<&'static GgmlType> {
    GGML_TYPES.iter().find(|t| t.id == id)
}

/// (values per block, bytes per block) of ggml type `t`.
fn type_layout(t: u32) -> Option<(u64, u64)> {
    ggml_type(t).map(|t| (t.block, t.bytes))
}

fn err(msg: impl Into<String>) -> Error {
    Error::Gguf(msg.into())
}

/// A size or count read from a file as a `T` (`usize`, `u32`), or `None` when it does not fit.
/// Every such value goes through this (or `try_from`), never `as`: on wasm32 `usize` has 32 bits
/// and `as usize` would keep only the low 32 bits of a value above 4 Gi, silently.
pub fn fit<T: TryFrom<u64>>(v: u64) -> Option<T> {
    T::try_from(v).ok()
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(err(format!("{}: needs {n} bytes at offset {}, file has {}", what(), self.pos, self.buf.len())));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let len = self.u64(what)?;
        let len = usize::try_from(len).ok().filter(|&l| l <= self.remaining()).ok_or_else(|| {
            err(format!("{}: string of {len} bytes at offset {}, only {} left in the file", what(), self.pos, self.remaining()))
        })?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| err(format!("{}: string is not UTF-8", what())))
    }

    fn value(&mut self, ty: u32, depth: u32, what: &dyn Fn() -> String) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.array::<1>(what)?[0]),
            1 => Value::I8(i8::from_le_bytes(self.array(what)?)),
            2 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            4 => Value::U32(self.u32(what)?),
            5 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            7 => match self.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(err(format!("{}: bool byte {b}", what()))),
            },
            8 => Value::Str(self.string(what)?),
            9 => {
                if depth > 0 {
                    return Err(err(format!("{}: nested arrays are not supported", what())));
                }
                let elem = self.u32(what)?;
                let count = self.u64(what)?;
                // Every element takes at least one byte (strings: 8), so the count is bounded by
                // what is left: checked before anything is allocated for it.
                let min = match elem {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    9 => return Err(err(format!("{}: nested arrays are not supported", what()))),
                    t => return Err(err(format!("{}: unknown array element type {t}", what()))),
                };
                if count.checked_mul(min).is_none_or(|b| b > self.remaining() as u64) {
                    return Err(err(format!("{}: array of {count} elements does not fit in the {} bytes left", what(), self.remaining())));
                }
                let capacity = fit::<usize>(count).ok_or_else(|| err(format!("{}: array of {count} elements", what())))?;
                let mut v = Vec::with_capacity(capacity);
                for _ in 0..count {
                    v.push(self.value(elem, depth + 1, what)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64(what)?),
            11 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            t => return Err(err(format!("{}: unknown value type {t}", what()))),
        })
    }
}

impl Gguf {
    /// Parses and validates the header of a whole GGUF file held in memory.
    pub fn parse(buf: &[u8]) -> Result<Gguf> {
        Self::parse_header(buf, buf.len() as u64)
    }

    /// Parses the header from the first bytes of a file of `file_len` bytes: tensor data is
    /// checked against `file_len`, not read. A prefix too short for the header is an error; the
    /// caller may retry with a longer one.
    pub fn parse_header(buf: &[u8], file_len: u64) -> Result<Gguf> {
        if buf.len() as u64 > file_len {
            return Err(err(format!("a {}-byte header of a {file_len}-byte file", buf.len())));
        }
        let mut r = Reader { buf, pos: 0 };
        let magic = r.array::<4>(&|| "magic".into())?;
        if &magic != MAGIC {
            return Err(err(format!("not a GGUF file (magic {magic:02x?})")));
        }
        let version = r.u32(&|| "version".into())?;
        if version != 2 && version != 3 {
            return Err(err(format!("GGUF version {version} is not supported (2 and 3 are)")));
        }
        let n_tensors = r.u64(&|| "tensor count".into())?;
        let n_kv = r.u64(&|| "metadata count".into())?;
        // A key-value pair takes at least 12 bytes, a tensor header at least 28.
        if n_kv.checked_mul(12).is_none_or(|b| b > r.remaining() as u64) {
            return Err(err(format!("{n_kv} metadata entries cannot fit in a {}-byte file", buf.len())));
        }
        if n_tensors.checked_mul(28).is_none_or(|b| b > r.remaining() as u64) {
            return Err(err(format!("{n_tensors} tensors cannot fit in a {}-byte file", buf.len())));
        }
        let mut metadata = BTreeMap::new();
        for i in 0..n_kv {
            let key = r.string(&|| format!("metadata key {i}"))?;
            let what = || format!("metadata {key}");
            let ty = r.u32(&what)?;
            let value = r.value(ty, 0, &what)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(err(format!("metadata key {key} appears twice")));
            }
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => v
                .as_u64()
                .filter(|a| a.is_power_of_two() && *a <= 1 << 20)
                .ok_or_else(|| err(format!("general.alignment {v:?} is not a power of two ≤ 1 MiB")))?,
        };
        let capacity = fit::<usize>(n_tensors).ok_or_else(|| err(format!("{n_tensors} tensors")))?;
        let mut tensors = Vec::with_capacity(capacity);
        let mut names = std::collections::HashSet::new();
        for i in 0..n_tensors {
            let name = r.string(&|| format!("tensor {i} name"))?;
            let what = || format!("tensor {name}");
            let n_dims = r.u32(&what)?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(err(format!("tensor {name}: {n_dims} dimensions (1 to {MAX_DIMS} supported)")));
            }
            let dims = (0..n_dims).map(|_| r.u64(&what)).collect::<Result<Vec<u64>>>()?;
            let ggml_type = r.u32(&what)?;
            let offset = r.u64(&what)?;
            let (block, block_bytes) =
                type_layout(ggml_type).ok_or_else(|| err(format!("tensor {name}: unknown ggml type {ggml_type}")))?;
            if dims[0] % block != 0 {
                return Err(err(format!("tensor {name}: row of {} values is not whole blocks of {block}", dims[0])));
            }
            let elems = dims.iter().try_fold(1u64, |a, d| a.checked_mul(*d));
            let bytes = elems
                .and_then(|e| (e / block).checked_mul(block_bytes))
                .ok_or_else(|| err(format!("tensor {name}: dimensions {dims:?} overflow")))?;
            if offset % alignment != 0 {
                return Err(err(format!("tensor {name}: data offset {offset} is not aligned to {alignment}")));
            }
            if !names.insert(name.clone()) {
                return Err(err(format!("tensor {name} appears twice")));
            }
            tensors.push(TensorInfo { name, dims, ggml_type, offset, bytes });
        }
        let data_start = (r.pos as u64).next_multiple_of(alignment);
        for t in &mut tensors {
            let start = data_start.checked_add(t.offset);
            let end = start.and_then(|s| s.checked_add(t.bytes));
            match (start, end) {
                (Some(s), Some(e)) if e <= file_len => t.offset = s,
                _ => {
                    return Err(err(format!(
                        "tensor {}: data ends at byte {}, file has {}",
                        t.name,
                        data_start as u128 + t.offset as u128 + t.bytes as u128,
                        file_len
                    )))
                }
            }
        }
        Ok(Gguf { version, metadata, tensors, file_len })
    }

    /// The metadata value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// A required unsigned integer.
    pub fn u64(&self, key: &str) -> Result<u64> {
        self.get(key).and_then(Value::as_u64).ok_or_else(|| err(format!("metadata {key}: missing or not an unsigned integer")))
    }

    /// A required number.
    pub fn f64(&self, key: &str) -> Result<f64> {
        self.get(key).and_then(Value::as_f64).ok_or_else(|| err(format!("metadata {key}: missing or not a number")))
    }

    /// A required string.
    pub fn str(&self, key: &str) -> Result<&str> {
        self.get(key).and_then(Value::as_str).ok_or_else(|| err(format!("metadata {key}: missing or not a string")))
    }

    /// A required array.
    pub fn array(&self, key: &str) -> Result<&[Value]> {
        match self.get(key) {
            Some(Value::Array(v)) => Ok(v),
            _ => Err(err(format!("metadata {key}: missing or not an array"))),
        }
    }

    /// The header of the tensor named `name`; [`Error::Gguf`] when there is none.
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name).ok_or_else(|| err(format!("tensor {name} is missing")))
    }

    /// The file's length in bytes.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// The bytes of a tensor within the file they were parsed from.
    pub fn data<'a>(&self, file: &'a [u8], t: &TensorInfo) -> Result<&'a [u8]> {
        if file.len() as u64 != self.file_len {
            return Err(err("tensor data asked of a different file than the one parsed"));
        }
        let start = fit::<usize>(t.offset);
        let end = t.offset.checked_add(t.bytes).and_then(fit::<usize>);
        start
            .zip(end)
            .and_then(|(s, e)| file.get(s..e))
            .ok_or_else(|| err(format!("tensor {}: bytes {}+{} are not in the {}-byte file", t.name, t.offset, t.bytes, file.len())))
    }
}

/// Appends a GGUF string (u64 length, then the bytes).
pub fn encode_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// Appends a GGUF value (without its type id; arrays carry their element type and count).
pub fn encode_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::Str(s) => encode_str(out, s),
        Value::Array(a) => {
            out.extend(a.first().map_or(4, Value::type_id).to_le_bytes());
            out.extend((a.len() as u64).to_le_bytes());
            a.iter().for_each(|e| encode_value(out, e));
        }
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
    }
}

/// Writes a GGUF v3 file (for the tiny test model and fuzz seeds). Tensors are `(name, dims,
/// ggml type, bytes)`; the bytes must match type and shape.
pub fn write(metadata: &[(&str, Value)], tensors: &[(&str, &[u64], u32, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(MAGIC);
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        encode_str(&mut out, k);
        out.extend(v.type_id().to_le_bytes());
        encode_value(&mut out, v);
    }
    let mut offset = 0u64;
    for (name, dims, ty, bytes) in tensors {
        encode_str(&mut out, name);
        out.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
        out.extend(ty.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offset = (offset + bytes.len() as u64).next_multiple_of(DEFAULT_ALIGNMENT);
    }
    out.resize(out.len().next_multiple_of(DEFAULT_ALIGNMENT as usize), 0);
    for (_, _, _, bytes) in tensors {
        out.extend(*bytes);
        out.resize(out.len().next_multiple_of(DEFAULT_ALIGNMENT as usize), 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_sizes_every_runnable_format_as_the_format_table_does() {
        for f in crate::model::quant::FORMATS.iter() {
            assert_eq!(type_layout(f.ggml_type), Some((f.block as u64, f.gguf_bytes as u64)), "{}", f.name);
            assert_eq!(ggml_type(f.ggml_type).map(|t| t.name), Some(f.name), "the format table and ggml name type {} alike", f.ggml_type);
        }
    }

    #[test]
    fn fit_refuses_what_a_32_bit_usize_cannot_hold() {
        // u32 stands for wasm32's usize: fit::<u32> here is fit::<usize> there.
        assert_eq!(fit::<u32>(u64::from(u32::MAX)), Some(u32::MAX));
        assert_eq!(fit::<u32>(u64::from(u32::MAX) + 1), None);
        assert_eq!(fit::<u32>((1 << 40) | 7), None, "`as u32` would give 7");
        assert_eq!(fit::<u8>(256), None);
        assert_eq!(fit::<usize>(5), Some(5));
        #[cfg(target_pointer_width = "32")]
        assert_eq!(fit::<usize>(1 << 32), None);
        #[cfg(target_pointer_width = "64")]
        assert_eq!(fit::<usize>(1 << 32), Some(1 << 32));
    }

    #[test]
    fn data_refuses_a_range_outside_the_file() {
        let file = write(&[], &[("t", &[8], 0, &[0u8; 32])]);
        let g = Gguf::parse(&file).unwrap();
        assert_eq!(g.data(&file, &g.tensors[0]).unwrap().len(), 32);
        // A table edited after parsing (the fields are public) is refused, not sliced past the end.
        for (offset, bytes) in [(g.tensors[0].offset, 33), (u64::MAX, 1), (1 << 32, 0)] {
            let t = TensorInfo { offset, bytes, ..g.tensors[0].clone() };
            assert!(matches!(g.data(&file, &t), Err(Error::Gguf(_))), "{offset}+{bytes}");
        }
    }
}
