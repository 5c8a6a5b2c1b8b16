//! The model's own tokenizer, built from GGUF metadata (never from a `tokenizer.json`).
//!
//! `tokenizer.ggml.model = "gpt2"` is byte-level BPE: the vocabulary is `tokenizer.ggml.tokens`
//! (strings in the GPT-2 byte alphabet, `Ġ` = space), the merge ranks are `tokenizer.ggml.merges`,
//! and `tokenizer.ggml.pre` names the pre-tokenizer. The BPE itself runs in the `tokenizers` crate.
//!
//! Two encodings exist, and mixing them up is a prompt-injection hole:
//! - [`Tokenizer::encode_text`] is for anything a user typed: control-token text such as
//!   `<|im_end|>` is ordinary text and never becomes a control id (llama.cpp's
//!   `parse_special = false`);
//! - [`Tokenizer::encode_with_special`] is for a rendered chat template, whose own markers must
//!   become control tokens (llama.cpp's `parse_special = true`).
//!
//! `tokenizers` 0.22 decides this per tokenizer instance (`set_encode_special_tokens(true)` makes
//! its added-vocabulary pass skip special tokens, so their text reaches the BPE as plain text), so
//! [`Tokenizer`] holds two otherwise identical instances, one per mode.

use std::collections::HashMap;

use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::tokenizer::SplitDelimiterBehavior;
use tokenizers::AddedToken;

use crate::error::{Error, Result};
use crate::model::gguf::{Gguf, Value};

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
const TYPE_NORMAL: u64 = 1;
const TYPE_UNKNOWN: u64 = 2;
const TYPE_CONTROL: u64 = 3;
const TYPE_USER_DEFINED: u64 = 4;

fn err(msg: impl Into<String>) -> Error {
    Error::Tokenizer(msg.into())
}

/// Byte-level BPE tokenizer of a GGUF model, matching llama.cpp's tokenization exactly.
#[derive(Clone)]
pub struct Tokenizer {
    /// Control-token text is plain text (`set_encode_special_tokens(true)`).
    plain: tokenizers::Tokenizer,
    /// Control-token text becomes the control token.
    special: tokenizers::Tokenizer,
    /// The bytes each token stands for: `bytes[offsets[i]..offsets[i + 1]]`.
    bytes: Vec<u8>,
    offsets: Vec<usize>,
    types: Vec<u8>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish_non_exhaustive()
    }
}

/// GPT-2's byte → char table inverted: the byte each char of the byte-level alphabet stands for.
fn byte_alphabet() -> HashMap<char, u8> {
    let mut map = HashMap::with_capacity(256);
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            char::from(b)
        } else {
            next += 1;
            // 256..=323: always valid chars.
            char::from_u32(next - 1).unwrap_or(char::REPLACEMENT_CHARACTER)
        };
        map.insert(c, b);
    }
    map
}

/// llama.cpp's pre-tokenizer regex for Llama-3 (`llama-bpe`, `LLAMA_VOCAB_PRE_TYPE_LLAMA3`):
/// digits in runs of up to three.
const LLAMA3_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// ... and for Qwen2 and Qwen3 (`qwen2`, `LLAMA_VOCAB_PRE_TYPE_QWEN2`): each digit on its own.
const QWEN2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer llama.cpp uses for a `tokenizer.ggml.pre` name, where hotprefix has it.
fn pre_tokenizer(pre: &str) -> Result<PreTokenizerWrapper> {
    let byte_level = ByteLevel::new(false, true, true);
    // A regex split (each match and each gap between matches a piece, llama.cpp's
    // `unicode_regex_split`), then the byte-level alphabet without GPT-2's own regex.
    let split = |regex: &str| -> Result<PreTokenizerWrapper> {
        let split = Split::new(SplitPattern::Regex(regex.to_string()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| err(format!("the {pre:?} pre-tokenizer regex: {e}")))?;
        Ok(Sequence::new(vec![split.into(), ByteLevel::new(false, true, false).into()]).into())
    };
    match pre {
        // Each digit on its own, then the GPT-2 regex (llama.cpp: "\p{N}" then the GPT-2 regex).
        "smollm" | "starcoder" => Ok(Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into()),
        // The GPT-2 regex alone.
        "gpt-2" | "gpt2" => Ok(byte_level.into()),
        "llama-bpe" | "llama3" => split(LLAMA3_REGEX),
        "qwen2" => split(QWEN2_REGEX),
        other => Err(err(format!(
            "tokenizer.ggml.pre = {other:?} is not supported (supported: \"smollm\", \"starcoder\", \"gpt-2\", \"llama-bpe\", \"qwen2\"); \
             llama.cpp's \"default\" uses a different regex than GPT-2 and is not implemented"
        ))),
    }
}

/// The token id `v` as an index below `n` (of type `T`: `usize`; `u32` in tests, as on wasm32).
fn token_index<T: TryFrom<u64> + PartialOrd>(v: &Value, n: T) -> Option<T> {
    v.as_u64().and_then(crate::model::gguf::fit::<T>).filter(|i| *i < n)
}

fn optional_id(g: &Gguf, key: &str, n: usize) -> Result<Option<u32>> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => match token_index(v, n).and_then(|id| u32::try_from(id).ok()) {
            Some(id) => Ok(Some(id)),
            None => Err(err(format!("{key} = {v:?} is not a token id below the vocabulary size {n}"))),
        },
    }
}

impl Tokenizer {
    /// Builds the tokenizer from a model's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(g: &Gguf) -> Result<Tokenizer> {
        let model = g.str("tokenizer.ggml.model").map_err(|e| err(e.to_string()))?;
        if model != "gpt2" {
            return Err(err(format!("tokenizer.ggml.model = {model:?} is not supported (only \"gpt2\", byte-level BPE)")));
        }
        let pre = g.str("tokenizer.ggml.pre").map_err(|e| err(e.to_string()))?;
        let pre = pre_tokenizer(pre)?;

        let tokens = g.array("tokenizer.ggml.tokens").map_err(|e| err(e.to_string()))?;
        let n = tokens.len();
        if n == 0 || u32::try_from(n).is_err() {
            return Err(err(format!("vocabulary of {n} tokens")));
        }
        let tokens: Vec<&str> = tokens
            .iter()
            .enumerate()
            .map(|(i, v)| v.as_str().ok_or_else(|| err(format!("token {i} is {v:?}, not a string"))))
            .collect::<Result<_>>()?;
        let types: Vec<u8> = match g.get("tokenizer.ggml.token_type") {
            // llama.cpp treats a missing type table as all-normal.
            None => vec![TYPE_NORMAL as u8; n],
            Some(Value::Array(a)) if a.len() == n => a
                .iter()
                .enumerate()
                .map(|(i, v)| match v.as_u64().and_then(crate::model::gguf::fit::<u8>) {
                    Some(t @ 0..=6) => Ok(t),
                    _ => Err(err(format!("token {i} has type {v:?} (0 to 6 expected)"))),
                })
                .collect::<Result<_>>()?,
            Some(v) => return Err(err(format!("tokenizer.ggml.token_type is not an array of {n} integers: {v:?}"))),
        };
        let merges = g.array("tokenizer.ggml.merges").map_err(|e| err(e.to_string()))?;
        let merges: Vec<(String, String)> = merges
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let s = v.as_str().ok_or_else(|| err(format!("merge {i} is {v:?}, not a string")))?;
                // Like llama.cpp: the separator is the first space after the first byte.
                let at = s.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1);
                match at {
                    Some(p) => Ok((s[..p].to_string(), s[p + 1..].to_string())),
                    None => Err(err(format!("merge {i} {s:?} is not two tokens separated by a space"))),
                }
            })
            .collect::<Result<_>>()?;

        // n fits in u32 (checked above), so every index does.
        let vocab: Vocab = tokens.iter().zip(0u32..).map(|(t, i)| (t.to_string(), i)).collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(false)
            .build()
            .map_err(|e| err(format!("BPE from the GGUF vocabulary and merges: {e}")))?;
        let mut plain = tokenizers::Tokenizer::new(bpe);
        plain.with_pre_tokenizer(Some(pre));
        plain.with_decoder(Some(ByteLevel::default()));
        // Control (and unknown) tokens are special: recognised only when parsing specials, like
        // llama.cpp. User-defined tokens are always recognised, in both modes.
        let added: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter_map(|(t, &ty)| match ty as u64 {
                TYPE_CONTROL | TYPE_UNKNOWN => Some(AddedToken::from(t.to_string(), true)),
                TYPE_USER_DEFINED => Some(AddedToken::from(t.to_string(), false).normalized(false)),
                _ => None,
            })
            .collect();
        plain.add_tokens(&added);
        let mut special = plain.clone();
        plain.set_encode_special_tokens(true);
        special.set_encode_special_tokens(false);

        let alphabet = byte_alphabet();
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        for (t, &ty) in tokens.iter().zip(&types) {
            if matches!(ty as u64, TYPE_CONTROL | TYPE_UNKNOWN | TYPE_USER_DEFINED) {
                // Stored as their text, not in the byte alphabet.
                bytes.extend_from_slice(t.as_bytes());
            } else {
                for c in t.chars() {
                    match alphabet.get(&c) {
                        Some(&b) => bytes.push(b),
                        // Not in the byte alphabet: stands for itself (llama.cpp does the same).
                        None => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
            }
            offsets.push(bytes.len());
        }
        let add_bos = matches!(g.get("tokenizer.ggml.add_bos_token"), Some(Value::Bool(true)));
        Ok(Tokenizer {
            plain,
            special,
            bytes,
            offsets,
            types,
            bos: optional_id(g, "tokenizer.ggml.bos_token_id", n)?,
            eos: optional_id(g, "tokenizer.ggml.eos_token_id", n)?,
            add_bos,
        })
    }

    /// Encodes user text: control-token text (`<|im_start|>`, `<|im_end|>`…) stays ordinary text
    /// and never yields a control id. Use this for anything a user typed. Adds no BOS.
    pub fn encode_text(&self, text: &str) -> Result<Vec<u32>> {
        Self::encode(&self.plain, text)
    }

    /// A raw prompt as llama.cpp tokenizes one (`add_special`): BOS first when the model asks for
    /// it (`tokenizer.ggml.add_bos_token`), then the text as [`Self::encode_text`] encodes it.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids: Vec<u32> = self.bos.filter(|_| self.add_bos).into_iter().collect();
        ids.extend(self.encode_text(text)?);
        Ok(ids)
    }

    /// Encodes text whose control-token markers are meant as control tokens: a rendered chat
    /// template. Never use it on raw user input. Adds no BOS.
    pub fn encode_with_special(&self, text: &str) -> Result<Vec<u32>> {
        Self::encode(&self.special, text)
    }

    fn encode(t: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>> {
        let enc = t.encode_fast(text, false).map_err(|e| err(format!("encoding failed: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids to text: the concatenated [`Tokenizer::token_bytes`] (control tokens as their
    /// text), with invalid UTF-8 replaced by U+FFFD. An id past the vocabulary is an error.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let mut out = Vec::new();
        for &id in ids {
            let b = self.bytes_of(id).ok_or_else(|| err(format!("token id {id} is past the vocabulary of {}", self.vocab_size())))?;
            out.extend_from_slice(b);
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    fn bytes_of(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        let (start, end) = (*self.offsets.get(i)?, *self.offsets.get(i + 1)?);
        self.bytes.get(start..end)
    }

    /// The raw bytes token `id` stands for (possibly part of a UTF-8 character); control tokens
    /// give their text. `None` past the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        self.bytes_of(id).map(<[u8]>::to_vec)
    }

    /// The id of a vocabulary string exactly as stored (e.g. `"<|im_end|>"`, or `"Ġworld"`).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.special.token_to_id(token)
    }

    /// The beginning-of-sequence id (`tokenizer.ggml.bos_token_id`), if the model names one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence id (`tokenizer.ggml.eos_token_id`), if the model names one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Whether the model wants BOS prepended to a prompt (`tokenizer.ggml.add_bos_token`,
    /// default false). `encode_*` never add it themselves.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.types.len()
    }

    /// Whether `id` is a control token (`token_type` 3, e.g. `<|im_start|>`, `<|endoftext|>`).
    pub fn is_control(&self, id: u32) -> bool {
        self.types.get(id as usize).is_some_and(|&t| t as u64 == TYPE_CONTROL)
    }
}

/// Turns generated ids into text as they arrive, emitting only complete UTF-8 characters.
///
/// Bytes of a character split across tokens are held until it is complete. Control tokens emit
/// nothing (the generation loop stops at them; their bytes never interrupt a held character).
/// The concatenation of every `push` and the final `finish` equals [`Tokenizer::decode`] of the
/// same ids without the control tokens. Make a new one per generation.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds token `id` and returns the text that is now complete (often empty). A byte sequence
    /// that can never become valid UTF-8 comes out as U+FFFD; an id past the vocabulary as U+FFFD.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        if tok.is_control(id) {
            return String::new();
        }
        match tok.bytes_of(id) {
            Some(b) => self.pending.extend_from_slice(b),
            None => {
                let mut out = String::from_utf8_lossy(&self.pending).into_owned();
                self.pending.clear();
                out.push(char::REPLACEMENT_CHARACTER);
                return out;
            }
        }
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        // Invalid whatever follows: replace it, go on with the rest.
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        // An incomplete character at the end: hold it.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// Whether bytes of an incomplete character are being held.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Ends the stream: held bytes that never completed a character come out as U+FFFD.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ids_above_32_bits_are_refused_as_on_wasm32() {
        let big = Value::U64((1 << 32) | 1);
        // With wasm32's 32-bit index (u32 here) the id does not fit: refused, where `as` gave 1.
        assert_eq!(token_index(&big, 320u32), None);
        assert_eq!(token_index(&big, 320usize), None);
        assert_eq!(token_index(&Value::U32(319), 320u32), Some(319));
        assert_eq!(token_index(&Value::U32(320), 320u32), None);
        assert_eq!(token_index(&Value::I32(-1), 320usize), None);
        assert_eq!(token_index(&Value::Str("1".into()), 320usize), None);
    }
}
