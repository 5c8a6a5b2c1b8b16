//! The model's own tokenizer, built from GGUF metadata (never from a `tokenizer.json`), matching
//! llama.cpp's tokenization exactly. Two families:
//!
//! - `tokenizer.ggml.model = "gpt2"` is byte-level BPE: the vocabulary is `tokenizer.ggml.tokens`
//!   (strings in the GPT-2 byte alphabet, `Ġ` = space), the merge ranks are
//!   `tokenizer.ggml.merges`, and `tokenizer.ggml.pre` names the pre-tokenizer. The BPE itself runs
//!   in the `tokenizers` crate.
//! - `tokenizer.ggml.model = "llama"` is SentencePiece (llama.cpp's SPM: Llama-2, Gemma, Phi-3…):
//!   the vocabulary has `▁` (U+2581) for a space and a score per token (`tokenizer.ggml.scores`),
//!   and [`Spm`] tokenizes it. That is written here by hand after llama.cpp's
//!   `llm_tokenizer_spm_session` (src/llama-vocab.cpp), not taken from the `tokenizers` crate:
//!   its Unigram model is a Viterbi search for the best-scoring segmentation, while llama.cpp
//!   greedily merges the adjacent pair with the best-scoring concatenation, and the two differ on
//!   some inputs.
//!
//! Two encodings exist, and mixing them up is a prompt-injection hole:
//! - [`Tokenizer::encode_text`] is for anything a user typed: control-token text such as
//!   `<|im_end|>` is ordinary text and never becomes a control id (llama.cpp's
//!   `parse_special = false`);
//! - [`Tokenizer::encode_with_special`] is for a rendered chat template, whose own markers must
//!   become control tokens (llama.cpp's `parse_special = true`).
//!
//! For both families the split around special tokens is [`Specials`], llama.cpp's
//! `tokenizer_st_partition`; the text between special tokens then goes to the BPE (in the
//! `tokenizers` crate, with `set_encode_special_tokens(true)` so that it splits no special token
//! itself) or to [`Spm`]. [`Tokenizer::encode_pieces`] encodes a prompt made of pieces of both
//! kinds (a chat template's text and the messages in it) as llama.cpp encodes their concatenation.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use aho_corasick::AhoCorasick;
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
const TYPE_NORMAL: u8 = 1;
const TYPE_UNKNOWN: u8 = 2;
const TYPE_CONTROL: u8 = 3;
const TYPE_USER_DEFINED: u8 = 4;
const TYPE_BYTE: u8 = 6;

/// SentencePiece's escaped space, `▁`.
const SPM_SPACE: char = '\u{2581}';

fn err(msg: impl Into<String>) -> Error {
    Error::Tokenizer(msg.into())
}

/// A GGUF model's tokenizer (byte-level BPE or SentencePiece), matching llama.cpp's tokenization
/// exactly.
#[derive(Clone)]
pub struct Tokenizer {
    model: Model,
    /// The split around special tokens (llama.cpp's, for both families).
    specials: Specials,
    /// The bytes each token stands for: `bytes[offsets[i]..offsets[i + 1]]`.
    bytes: Vec<u8>,
    offsets: Vec<usize>,
    /// Token types after llama.cpp's fix-ups by text ([`llama_cpp_type_fixups`]).
    types: Vec<u8>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
}

#[derive(Clone)]
enum Model {
    /// Byte-level BPE in the `tokenizers` crate, for text without special tokens
    /// (`set_encode_special_tokens(true)`: control-token text is plain text there).
    Bpe(Box<tokenizers::Tokenizer>),
    Spm(Box<Spm>),
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Tokenizer");
        match &self.model {
            Model::Bpe(_) => d.field("family", &"byte-level BPE"),
            Model::Spm(s) => d.field("family", &"SentencePiece").field("unk", &s.unk).field("add_space_prefix", &s.add_space_prefix),
        };
        d.field("vocab_size", &self.vocab_size()).field("bos", &self.bos).field("eos", &self.eos).finish_non_exhaustive()
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

/// ... and for GPT-4o's o200k vocabulary (`gpt-4o`, `llama4`, `LLAMA_VOCAB_PRE_TYPE_GPT4O`:
/// Phi-4-mini, Llama-4): an upper-case run and a lower-case run make one word, contractions stay on
/// it, digits in runs of up to three. llama.cpp's rewriting of tokenizer.json's regex, which has
/// no case classes: a letter that is not `a-z` counts as upper case, one that is not `A-Z` as
/// lower case, and combining marks as neither.
const GPT4O_REGEX: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// ... and llama.cpp's `default` (`LLAMA_VOCAB_PRE_TYPE_DEFAULT`), applied one after another:
/// runs of punctuation and `$+<=>^~|`, then GPT-2's regex (without its final `\s+`), then runs of
/// digits, then digits in threes from the left.
const DEFAULT_REGEXES: [&str; 4] =
    [r"[\p{P}\$\+<=>\^~\|]+", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)", r"\p{N}+", r"[0-9][0-9][0-9]"];

/// How a `tokenizer.ggml.pre` name splits text before BPE: llama.cpp's pre-tokenizer types that
/// hotprefix has.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pre {
    /// Each digit on its own, then the GPT-2 regex (llama.cpp: "\p{N}" then the GPT-2 regex).
    Digits,
    /// The GPT-2 regex alone.
    Gpt2,
    /// Llama-3's regex (`LLAMA_VOCAB_PRE_TYPE_LLAMA3`), with its vocabulary-words-whole rule and
    /// BOS by default.
    Llama3,
    /// Qwen2's (`LLAMA_VOCAB_PRE_TYPE_QWEN2`).
    Qwen2,
    /// GPT-4o's (`LLAMA_VOCAB_PRE_TYPE_GPT4O`).
    Gpt4o,
    /// llama.cpp's fallback (a file whose converter did not recognise its pre-tokenizer): four
    /// regexes, each splitting the pieces of the one before.
    Default,
}

/// Every `tokenizer.ggml.pre` name hotprefix runs, in the order the refusal lists them. Names
/// not here are refused by name, never approximated.
const PRE_TOKENIZERS: [(&str, Pre); 11] = [
    ("default", Pre::Default),
    ("smollm", Pre::Digits),
    ("starcoder", Pre::Digits),
    // Only by this name: llama.cpp refuses "gpt2".
    ("gpt-2", Pre::Gpt2),
    ("llama-bpe", Pre::Llama3),
    ("llama3", Pre::Llama3),
    // Falcon3's llama-architecture files name Llama-3's pre-tokenizer so.
    ("falcon3", Pre::Llama3),
    ("qwen2", Pre::Qwen2),
    // DeepSeek-R1's distillations into Qwen2.5 name Qwen2's pre-tokenizer so.
    ("deepseek-r1-qwen", Pre::Qwen2),
    // Phi-4-mini and Llama-4.
    ("gpt-4o", Pre::Gpt4o),
    ("llama4", Pre::Gpt4o),
];

/// The pre-tokenizer type of a `tokenizer.ggml.pre` name, or the refusal naming what is supported.
fn pre_type(name: &str) -> Result<Pre> {
    match PRE_TOKENIZERS.iter().find(|(n, _)| *n == name) {
        Some((_, pre)) => Ok(*pre),
        None => {
            let names: Vec<String> = PRE_TOKENIZERS.iter().map(|(n, _)| format!("{n:?}")).collect();
            Err(err(format!("tokenizer.ggml.pre = {name:?} is not supported (supported: {})", names.join(", "))))
        }
    }
}

/// The pre-tokenizer llama.cpp uses for a `tokenizer.ggml.pre` name, where hotprefix has it.
fn pre_tokenizer(name: &str) -> Result<PreTokenizerWrapper> {
    let byte_level = ByteLevel::new(false, true, true);
    // A regex split (each match and each gap between matches a piece, llama.cpp's
    // `unicode_regex_split`), then the byte-level alphabet without GPT-2's own regex.
    let split = |regex: &str| -> Result<PreTokenizerWrapper> {
        let split = Split::new(SplitPattern::Regex(regex.to_string()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| err(format!("the {name:?} pre-tokenizer regex: {e}")))?;
        Ok(Sequence::new(vec![split.into(), ByteLevel::new(false, true, false).into()]).into())
    };
    match pre_type(name)? {
        Pre::Digits => Ok(Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into()),
        Pre::Gpt2 => Ok(byte_level.into()),
        Pre::Llama3 => split(LLAMA3_REGEX),
        Pre::Qwen2 => split(QWEN2_REGEX),
        Pre::Gpt4o => split(GPT4O_REGEX),
        Pre::Default => {
            let mut steps = Vec::with_capacity(DEFAULT_REGEXES.len() + 1);
            for regex in DEFAULT_REGEXES {
                let split = Split::new(SplitPattern::Regex(regex.to_string()), SplitDelimiterBehavior::Isolated, false)
                    .map_err(|e| err(format!("the \"default\" pre-tokenizer regex: {e}")))?;
                steps.push(split.into());
            }
            steps.push(ByteLevel::new(false, true, false).into());
            Ok(Sequence::new(steps).into())
        }
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

/// A boolean key, `default` when absent.
fn optional_bool(g: &Gguf, key: &str, default: bool) -> Result<bool> {
    match g.get(key) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(err(format!("{key} = {v:?} is not a boolean"))),
    }
}

/// `tokenizer.ggml.tokens` and `tokenizer.ggml.token_type`, as llama.cpp loads them: an empty
/// token becomes `[EMPTY_<id>]`, a token twice is refused (llama.cpp asserts), a missing type
/// table means all-normal; then llama.cpp's fix-ups of the types by text.
fn read_vocab(g: &Gguf) -> Result<(Vec<String>, Vec<u8>)> {
    let tokens = g.array("tokenizer.ggml.tokens").map_err(|e| err(e.to_string()))?;
    let n = tokens.len();
    if n == 0 || u32::try_from(n).is_err() {
        return Err(err(format!("vocabulary of {n} tokens")));
    }
    let tokens: Vec<String> = tokens
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
            Some("") => Ok(format!("[EMPTY_{i}]")),
            Some(s) => Ok(s.to_string()),
            None => Err(err(format!("token {i} is {v:?}, not a string"))),
        })
        .collect::<Result<_>>()?;
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(n);
    for (i, t) in tokens.iter().enumerate() {
        if let Some(first) = seen.insert(t, i) {
            return Err(err(format!("duplicate token in the vocabulary: {t:?} has ids {first} and {i}")));
        }
    }
    let mut types: Vec<u8> = match g.get("tokenizer.ggml.token_type") {
        // llama.cpp treats a missing type table as all-normal.
        None => vec![TYPE_NORMAL; n],
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
    llama_cpp_type_fixups(g, &|t| seen.get(t).copied(), &mut types);
    Ok((tokens, types))
}

/// End-of-generation texts llama.cpp (b11739) makes control tokens whatever their type.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Fill-in-the-middle texts, by kind, with the keys that name that kind's token instead.
const FIM_TEXTS: &[(&[&str], &[&str])] = &[
    (
        &["tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"],
        &["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"],
    ),
    (
        &["tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"],
        &["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"],
    ),
    (
        &["tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"],
        &["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"],
    ),
    (&["tokenizer.ggml.fim_pad_token_id"], &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"]),
    (&["tokenizer.ggml.fim_rep_token_id"], &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"]),
    (&["tokenizer.ggml.fim_sep_token_id"], &["<|file_sep|>"]),
];

/// llama.cpp changes some tokens' types by their text when it loads a vocabulary, before anything
/// is tokenized (`llama_vocab::impl::load`, b11739; checked against it token by token):
/// - the end-of-generation texts ([`EOG_TEXTS`]) become control tokens (its end-of-turn and
///   end-of-message searches only pick from these);
/// - for each fill-in-the-middle kind whose id no key names, the first token with one of its
///   texts becomes a control token (llama.cpp takes the first in its hash map's order, here the
///   lowest id: they differ only for a vocabulary with two such texts of one kind);
/// - gpt-oss's `<|channel|>`, `<|message|>`, `<|start|>`, `<|constrain|>` become user-defined;
/// - `<|end|>` becomes user-defined beside `<|call|>` or `<|calls|>` and either `<|return|>` or
///   `<|flush|>` (gpt-oss, Solar); `</s>` becomes normal beside `<|tool_response>` (Gemma-4).
///
/// A control flag added to another type acts as a control token everywhere hotprefix looks (the
/// special-token split, the bytes of a token, [`Tokenizer::is_control`]), so the type is set.
fn llama_cpp_type_fixups(g: &Gguf, id: &dyn Fn(&str) -> Option<usize>, types: &mut [u8]) {
    let n = types.len();
    for (keys, texts) in FIM_TEXTS {
        if let (None, Some(i)) = (fim_by_key(g, keys, n), fim_by_text(texts, id)) {
            types[i] = TYPE_CONTROL;
        }
    }
    for t in EOG_TEXTS {
        if let Some(i) = id(t) {
            types[i] = TYPE_CONTROL;
        }
    }
    for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(i) = id(t) {
            types[i] = TYPE_USER_DEFINED;
        }
    }
    let has = |t: &str| id(t).is_some();
    let call = has("<|call|>") || has("<|calls|>");
    if let (Some(end), true) = (id("<|end|>"), call && (has("<|return|>") || has("<|flush|>"))) {
        types[end] = TYPE_USER_DEFINED;
    }
    if let (Some(s), true) = (id("</s>"), has("<|tool_response>")) {
        types[s] = TYPE_NORMAL;
    }
}

/// A fill-in-the-middle kind's token as llama.cpp finds it: the id the first of its keys names
/// (within a vocabulary of `n`), else ([`fim_by_text`]) the lowest id of its texts.
fn fim_by_key(g: &Gguf, keys: &[&str], n: usize) -> Option<usize> {
    keys.iter().find_map(|k| g.get(k).and_then(|v| token_index(v, n)))
}

/// See [`fim_by_key`].
fn fim_by_text(texts: &[&str], id: &dyn Fn(&str) -> Option<usize>) -> Option<usize> {
    texts.iter().filter_map(|t| id(t)).min()
}

/// llama.cpp's `lstrip`/`rstrip` token attributes, which no GGUF key carries: llama.cpp sets them
/// by the model's name (`general.name`), pre-tokenizer or architecture, whatever the family.
/// `(lstrip, rstrip)` per token.
fn llama_cpp_strip_attributes(g: &Gguf, id: &dyn Fn(&str) -> Option<usize>, types: &[u8]) -> Vec<(bool, bool)> {
    let mut strip = vec![(false, false); types.len()];
    let key = |k: &str| g.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let (name, pre, arch) = (key("general.name").to_lowercase(), key("tokenizer.ggml.pre"), key("general.architecture"));
    let any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
    // (token, lstrip, value): llama.cpp's `_set_token_attr` calls, in order.
    let mut sets: Vec<(&str, bool, bool)> = Vec::new();
    if any(&pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code"]) || any(&arch, &["nomic-bert-moe", "jina-bert-v3"]) {
        sets.push(("<mask>", true, true));
    } else if any(&name, &["phi-3", "phi3"]) {
        for (s, &ty) in strip.iter_mut().zip(types) {
            if matches!(ty, TYPE_CONTROL | TYPE_USER_DEFINED | TYPE_UNKNOWN) {
                s.1 = true;
            }
        }
        sets.extend([("</s>", false, true), ("<unk>", false, false), ("<s>", false, false), ("<|endoftext|>", false, false)]);
    } else if name.contains("modern-bert") {
        sets.push(("[MASK]", true, true));
    }
    for (t, left, value) in sets {
        if let Some(s) = id(t).and_then(|i| strip.get_mut(i)) {
            if left {
                s.0 = value;
            } else {
                s.1 = value;
            }
        }
    }
    strip
}

/// One token of llama.cpp's special-token cache.
#[derive(Clone, Debug)]
struct Special {
    id: u32,
    text: Box<str>,
    /// Control or unknown: recognised only when parsing specials. (User-defined tokens always.)
    only_when_special: bool,
    lstrip: bool,
    rstrip: bool,
}

/// [`Tokenizer::encode_pieces`] under way: the ids so far, the first and last piece each holds
/// bytes of, the text since the last special token (by piece), and whether a special token came
/// last.
struct Encoding<'a> {
    ids: Vec<u32>,
    pieces: Vec<(usize, usize)>,
    text: Vec<(usize, &'a str)>,
    after_special: bool,
}

impl Default for Encoding<'_> {
    fn default() -> Self {
        // llama.cpp: "prefix with space if first token".
        Encoding { ids: Vec::new(), pieces: Vec::new(), text: Vec::new(), after_special: true }
    }
}

/// A piece of text after the special-token split: text still to tokenize, or a token (with its
/// `lstrip` and `rstrip`, which reach into the pieces around it: [`Tokenizer::encode_pieces`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fragment<'a> {
    Text(&'a str),
    Token { id: u32, lstrip: bool, rstrip: bool },
}

/// llama.cpp's special-token split (`tokenizer_st_partition`): the control, unknown and
/// user-defined tokens, longest text first; for each in turn, every occurrence in every
/// text fragment left so far, left to right, becomes that token. So a longer token always wins
/// over a shorter one wherever they overlap (not leftmost-longest). Control and unknown tokens
/// count only when parsing specials; user-defined ones always. `lstrip`/`rstrip` drop the C
/// `isspace` bytes before/after the token. llama.cpp's `std::sort` leaves tokens of equal length
/// in no set order; here they go by id (they can only compete for overlapping occurrences).
#[derive(Clone)]
struct Specials {
    tokens: Vec<Special>,
    /// Every token's text (pattern i is `tokens[i]`), to skip the tokens a text lacks.
    finder: Option<AhoCorasick>,
}

/// C's `isspace` in the "C" locale, on the bytes llama.cpp strips.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

impl Specials {
    fn new(tokens: &[String], types: &[u8], strip: &[(bool, bool)]) -> Result<Specials> {
        let mut specials: Vec<Special> = tokens
            .iter()
            .zip(types)
            .zip(strip)
            .zip(0u32..)
            .filter(|(((_, &ty), _), _)| matches!(ty, TYPE_CONTROL | TYPE_UNKNOWN | TYPE_USER_DEFINED))
            .map(|(((t, &ty), &(lstrip, rstrip)), id)| Special {
                id,
                text: t.as_str().into(),
                only_when_special: ty != TYPE_USER_DEFINED,
                lstrip,
                rstrip,
            })
            .collect();
        // Stable: equal lengths stay in id order.
        specials.sort_by_key(|s| std::cmp::Reverse(s.text.len()));
        let finder = if specials.is_empty() {
            None
        } else {
            let f =
                AhoCorasick::new(specials.iter().map(|s| s.text.as_bytes())).map_err(|e| err(format!("the special-token matcher: {e}")))?;
            Some(f)
        };
        Ok(Specials { tokens: specials, finder })
    }

    fn split<'a>(&self, text: &'a str, parse_special: bool) -> Result<Vec<Fragment<'a>>> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        let mut fragments = vec![Fragment::Text(text)];
        let Some(finder) = &self.finder else { return Ok(fragments) };
        // A token absent from the whole text is absent from every fragment of it.
        let mut present = vec![false; self.tokens.len()];
        for m in finder.try_find_overlapping_iter(text).map_err(|e| err(format!("the special-token matcher: {e}")))? {
            present[m.pattern().as_usize()] = true;
        }
        for (special, _) in self.tokens.iter().zip(&present).filter(|(s, &p)| p && (parse_special || !s.only_when_special)) {
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for f in fragments {
                match f {
                    Fragment::Text(t) => Self::split_on(t, special, &mut next),
                    token => next.push(token),
                }
            }
            fragments = next;
        }
        Ok(fragments)
    }

    /// The first text in `text` that would become a control (or unknown) token when parsing
    /// specials: a rendered template's markers, never what a user may put there.
    fn control_text<'a>(&'a self, text: &str) -> Option<&'a str> {
        let finder = self.finder.as_ref()?;
        finder.find_overlapping_iter(text).map(|m| &self.tokens[m.pattern().as_usize()]).find(|s| s.only_when_special).map(|s| &*s.text)
    }

    /// Byte ranges of the control-token texts in `text`, left to right and not overlapping (the
    /// longest where several start together).
    fn control_spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        let Some(finder) = &self.finder else { return Vec::new() };
        let mut found: Vec<std::ops::Range<usize>> = finder
            .find_overlapping_iter(text)
            .filter(|m| self.tokens[m.pattern().as_usize()].only_when_special)
            .map(|m| m.start()..m.end())
            .collect();
        found.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
        let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
        for r in found {
            if spans.last().is_none_or(|last| r.start >= last.end) {
                spans.push(r);
            }
        }
        spans
    }

    /// Every occurrence of `special` in `text`, left to right, as llama.cpp's loop finds them
    /// (after an rstrip, the search goes on past the stripped spaces).
    fn split_on<'a>(mut text: &'a str, special: &Special, out: &mut Vec<Fragment<'a>>) {
        while let Some(at) = text.find(&*special.text) {
            let (left, right) = (&text[..at], &text[at + special.text.len()..]);
            let left = if special.lstrip { left.trim_end_matches(is_c_space) } else { left };
            if !left.is_empty() {
                out.push(Fragment::Text(left));
            }
            out.push(Fragment::Token { id: special.id, lstrip: special.lstrip, rstrip: special.rstrip });
            text = if special.rstrip { right.trim_start_matches(is_c_space) } else { right };
        }
        if !text.is_empty() {
            out.push(Fragment::Text(text));
        }
    }
}

/// SentencePiece as llama.cpp runs it (`llm_tokenizer_spm_session`, `tokenize_impl`).
#[derive(Clone)]
struct Spm {
    /// Every token's text → its id (llama.cpp's `text_to_token` looks up all types alike).
    ids: HashMap<Box<str>, u32>,
    scores: Vec<f32>,
    /// The token of each byte for byte fallback: `<0xXX>`, else the byte itself as a token.
    byte_ids: Vec<Option<u32>>,
    /// `tokenizer.ggml.add_space_prefix` (llama.cpp's default for SPM: true): a space before the
    /// text at the start and after each special token.
    add_space_prefix: bool,
    unk: Option<u32>,
}

/// A candidate merge of two adjacent symbols (llama.cpp's `llm_bigram_spm`).
#[derive(Clone, Copy, Debug)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

/// Max-heap order: the best score first; among equal scores the leftmost (llama.cpp's
/// comparator: `l.score < r.score || (l.score == r.score && l.left > r.left)`).
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        // Scores are never NaN (refused at load).
        self.score.partial_cmp(&other.score).unwrap_or(Ordering::Equal).then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

/// A symbol of the merge: `text[start..start + len]`, in a linked list (`len == 0`: merged away).
#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Spm {
    /// One fragment of text between special tokens, as llama.cpp's `tokenize_impl` tokenizes it: a
    /// space first when `after_special` (the start, or after a special token) and the model adds
    /// a space prefix, spaces escaped as `▁`, then the merge. Each token comes with the byte
    /// offset in `text` where its symbol starts (the prefix space's at 0).
    fn encode_fragment(&self, text: &str, after_special: bool, out: &mut Vec<(u32, usize)>) -> Result<()> {
        let mut escaped = String::with_capacity(text.len() + 3);
        // The byte of `text` each byte of `escaped` comes from.
        let mut origin = Vec::with_capacity(text.len() + 3);
        if self.add_space_prefix && after_special {
            escaped.push(SPM_SPACE);
            origin.extend([0; 3]);
        }
        for (i, c) in text.char_indices() {
            let c = if c == ' ' { SPM_SPACE } else { c };
            escaped.push(c);
            origin.extend(std::iter::repeat_n(i, c.len_utf8()));
        }
        let first = out.len();
        self.merge(&escaped, out)?;
        for t in &mut out[first..] {
            t.1 = origin.get(t.1).copied().unwrap_or(text.len());
        }
        Ok(())
    }

    /// llama.cpp's `llm_tokenizer_spm_session::tokenize` on one escaped text fragment: start from
    /// its UTF-8 characters, merge the best-scoring adjacent pair that is a token while one is,
    /// then emit each symbol's token, or its bytes' tokens where it is none (a symbol that is not
    /// a token is always a single character, so llama.cpp's `rev_merge` re-split never applies).
    /// Each token comes with the byte offset of its symbol in `text`.
    fn merge(&self, text: &str, out: &mut Vec<(u32, usize)>) -> Result<()> {
        let mut symbols: Vec<Symbol> = text
            .char_indices()
            .enumerate()
            .map(|(i, (start, c))| Symbol { start, len: c.len_utf8(), prev: i.checked_sub(1), next: Some(i + 1) })
            .collect();
        if let Some(last) = symbols.last_mut() {
            last.next = None;
        }
        let mut queue = BinaryHeap::new();
        let piece = |s: &[Symbol], at: usize, len: usize| text.get(s[at].start..s[at].start + len);
        let bigram = |s: &[Symbol], left: usize, right: usize, queue: &mut BinaryHeap<Bigram>| {
            let size = s[left].len + s[right].len;
            if let Some(&id) = piece(s, left, size).and_then(|t| self.ids.get(t)) {
                queue.push(Bigram { score: self.scores[id as usize], left, right, size });
            }
        };
        for i in 1..symbols.len() {
            bigram(&symbols, i - 1, i, &mut queue);
        }
        while let Some(b) = queue.pop() {
            let (left, right) = (symbols[b.left], symbols[b.right]);
            // One of them was merged since: stale.
            if left.len == 0 || right.len == 0 || left.len + right.len != b.size {
                continue;
            }
            symbols[b.left].len += right.len;
            symbols[b.right].len = 0;
            symbols[b.left].next = right.next;
            if let Some(next) = right.next {
                symbols[next].prev = Some(b.left);
            }
            if let Some(prev) = left.prev {
                bigram(&symbols, prev, b.left, &mut queue);
            }
            if let Some(next) = right.next {
                bigram(&symbols, b.left, next, &mut queue);
            }
        }
        let mut at = if symbols.is_empty() { None } else { Some(0) };
        while let Some(i) = at {
            let s = symbols[i];
            let t = piece(&symbols, i, s.len).ok_or_else(|| err("SentencePiece merge left a symbol off a character boundary"))?;
            match self.ids.get(t) {
                Some(&id) => out.push((id, s.start)),
                None => {
                    for b in t.bytes() {
                        let id = self.byte_ids[b as usize].ok_or_else(|| {
                            err(format!("{t:?} is not in the vocabulary, and neither is the byte token <0x{b:02X}> to spell it"))
                        })?;
                        out.push((id, s.start));
                    }
                }
            }
            at = s.next;
        }
        Ok(())
    }
}

/// The byte a `<0xXX>` token stands for.
fn byte_token(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

impl Tokenizer {
    /// Builds the tokenizer from a model's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(g: &Gguf) -> Result<Tokenizer> {
        let model = g.str("tokenizer.ggml.model").map_err(|e| err(e.to_string()))?;
        match model {
            "gpt2" => Self::bpe(g),
            "llama" => Self::spm(g),
            other => Err(err(format!(
                "tokenizer.ggml.model = {other:?} is not supported (only \"gpt2\", byte-level BPE, and \"llama\", SentencePiece)"
            ))),
        }
    }

    fn bpe(g: &Gguf) -> Result<Tokenizer> {
        let pre_name = g.str("tokenizer.ggml.pre").map_err(|e| err(e.to_string()))?;
        // llama.cpp's defaults for Llama-3's pre-tokenizer: a pre-token that is itself in the
        // vocabulary is that token, whatever the merges would make of it (" việc" is one token,
        // not three); and BOS first unless the file says otherwise.
        let llama3 = pre_type(pre_name)? == Pre::Llama3;
        let pre = pre_tokenizer(pre_name)?;
        let (tokens, types) = read_vocab(g)?;
        let n = tokens.len();
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

        // n fits in u32 (checked by read_vocab), so every index does.
        let vocab: Vocab = tokens.iter().zip(0u32..).map(|(t, i)| (t.clone(), i)).collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(llama3)
            .build()
            .map_err(|e| err(format!("BPE from the GGUF vocabulary and merges: {e}")))?;
        let mut plain = tokenizers::Tokenizer::new(bpe);
        plain.with_pre_tokenizer(Some(pre));
        plain.with_decoder(Some(ByteLevel::default()));
        // The special-token split is `Specials`'; the BPE sees only the text between special
        // tokens. Added tokens keep their ids whole; control-token text is plain text here.
        let added: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter_map(|(t, &ty)| match ty {
                TYPE_CONTROL | TYPE_UNKNOWN => Some(AddedToken::from(t.to_string(), true)),
                TYPE_USER_DEFINED => Some(AddedToken::from(t.to_string(), false).normalized(false)),
                _ => None,
            })
            .collect();
        plain.add_tokens(&added);
        plain.set_encode_special_tokens(true);
        let ids: HashMap<&str, usize> = tokens.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
        let strip = llama_cpp_strip_attributes(g, &|t| ids.get(t).copied(), &types);
        let specials = Specials::new(&tokens, &types, &strip)?;

        let alphabet = byte_alphabet();
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        for (t, &ty) in tokens.iter().zip(&types) {
            if matches!(ty, TYPE_CONTROL | TYPE_UNKNOWN | TYPE_USER_DEFINED) {
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
        Ok(Tokenizer {
            model: Model::Bpe(Box::new(plain)),
            specials,
            bytes,
            offsets,
            types,
            bos: optional_id(g, "tokenizer.ggml.bos_token_id", n)?,
            eos: optional_id(g, "tokenizer.ggml.eos_token_id", n)?,
            add_bos: optional_bool(g, "tokenizer.ggml.add_bos_token", llama3)?,
            add_eos: matches!(g.get("tokenizer.ggml.add_eos_token"), Some(Value::Bool(true))),
        })
    }

    /// SentencePiece (llama.cpp's `LLAMA_VOCAB_TYPE_SPM`). `tokenizer.ggml.pre` is not read:
    /// llama.cpp ignores it for this family (Gemma's files say "default").
    fn spm(g: &Gguf) -> Result<Tokenizer> {
        let (tokens, types) = read_vocab(g)?;
        let n = tokens.len();
        // llama.cpp takes a missing score table as all zeros, which turns the merge into
        // leftmost-first: never what a SentencePiece model was trained with, so refused here.
        let scores: Vec<f32> = match g.get("tokenizer.ggml.scores") {
            None => return Err(err("tokenizer.ggml.scores is missing: a SentencePiece vocabulary needs a score per token")),
            Some(Value::Array(a)) if a.len() == n => a
                .iter()
                .enumerate()
                .map(|(i, v)| match *v {
                    Value::F32(s) if !s.is_nan() => Ok(s),
                    Value::I32(s) => Ok(s as f32),
                    _ => Err(err(format!("tokenizer.ggml.scores[{i}] is {v:?}, not a 32-bit float"))),
                })
                .collect::<Result<_>>()?,
            Some(Value::Array(a)) => {
                return Err(err(format!("tokenizer.ggml.scores has {} entries for a vocabulary of {n} tokens", a.len())))
            }
            Some(v) => return Err(err(format!("tokenizer.ggml.scores is not an array of {n} floats: {v:?}"))),
        };
        let ids: HashMap<Box<str>, u32> = tokens.iter().zip(0u32..).map(|(t, i)| (t.as_str().into(), i)).collect();
        let strip = llama_cpp_strip_attributes(g, &|t| ids.get(t).map(|&i| i as usize), &types);
        let specials = Specials::new(&tokens, &types, &strip)?;
        // llama.cpp's `byte_to_token`: `<0xXX>` (upper-case hex), else the byte itself.
        let byte_ids: Vec<Option<u32>> = (0..=255u8)
            .map(|b| {
                let own = b.is_ascii().then(|| char::from(b).to_string());
                ids.get(format!("<0x{b:02X}>").as_str()).or_else(|| own.and_then(|s| ids.get(s.as_str()))).copied()
            })
            .collect();

        // What llama.cpp's `token_to_piece` gives with `special = true`.
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        for (i, (t, &ty)) in tokens.iter().zip(&types).enumerate() {
            match ty {
                TYPE_CONTROL | TYPE_UNKNOWN | TYPE_USER_DEFINED => bytes.extend_from_slice(t.as_bytes()),
                TYPE_NORMAL => bytes.extend_from_slice(t.replace(SPM_SPACE, " ").as_bytes()),
                TYPE_BYTE => match byte_token(t) {
                    Some(b) => bytes.push(b),
                    None => return Err(err(format!("token {i} {t:?} has the byte type but is not <0xXX>"))),
                },
                // Unused and undefined tokens: nothing.
                _ => {}
            }
            offsets.push(bytes.len());
        }

        // llama.cpp's SPM defaults: BOS 1, EOS 2, UNK 0, BOS added, EOS not, a space prefix.
        let default = |id: u32| Some(id).filter(|&i| (i as usize) < n);
        let bos = optional_id(g, "tokenizer.ggml.bos_token_id", n)?.or(default(1));
        let eos = optional_id(g, "tokenizer.ggml.eos_token_id", n)?.or(default(2));
        let unk = optional_id(g, "tokenizer.ggml.unknown_token_id", n)?.or(default(0));
        let add_bos = optional_bool(g, "tokenizer.ggml.add_bos_token", true)?;
        let add_eos = optional_bool(g, "tokenizer.ggml.add_eos_token", false)?;
        if add_bos && bos.is_none() {
            return Err(err("tokenizer.ggml.add_bos_token is true, but there is no BOS token (tokenizer.ggml.bos_token_id)"));
        }
        if add_eos && eos.is_none() {
            return Err(err("tokenizer.ggml.add_eos_token is true, but there is no EOS token (tokenizer.ggml.eos_token_id)"));
        }
        let add_space_prefix = optional_bool(g, "tokenizer.ggml.add_space_prefix", true)?;
        Ok(Tokenizer {
            model: Model::Spm(Box::new(Spm { ids, scores, byte_ids, add_space_prefix, unk })),
            specials,
            bytes,
            offsets,
            types,
            bos,
            eos,
            add_bos,
            add_eos,
        })
    }

    /// Encodes user text: control-token text (`<|im_start|>`, `<|im_end|>`…) stays ordinary text
    /// and never yields a control id. Use this for anything a user typed. Adds no BOS.
    pub fn encode_text(&self, text: &str) -> Result<Vec<u32>> {
        self.encode(text, false)
    }

    /// A raw prompt as llama.cpp tokenizes one (`add_special`): BOS first when the model asks for
    /// it (`tokenizer.ggml.add_bos_token`), then the text as [`Self::encode_text`] encodes it, then
    /// EOS when the model asks for that (`tokenizer.ggml.add_eos_token`, rare).
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids: Vec<u32> = self.bos.filter(|_| self.add_bos).into_iter().collect();
        ids.extend(self.encode_text(text)?);
        ids.extend(self.eos.filter(|_| self.add_eos));
        Ok(ids)
    }

    /// Encodes text whose control-token markers are meant as control tokens: a rendered chat
    /// template. Never use it on raw user input. Adds no BOS.
    pub fn encode_with_special(&self, text: &str) -> Result<Vec<u32>> {
        self.encode(text, true)
    }

    fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        Ok(self.encode_pieces(&[(text, parse_special)])?.0)
    }

    /// Encodes a prompt made of `pieces` as llama.cpp encodes their concatenation, except that
    /// control-token text becomes a control token only in the pieces flagged `true` (a chat
    /// template's own text; never what a user typed). Each piece is split on special tokens
    /// (llama.cpp's `parse_special` per piece); the text from one special token to the next is then
    /// tokenized as one fragment even where it spans pieces, so that a piece boundary changes no
    /// merge and no pre-token, and SentencePiece's space prefix comes only at the start and after a
    /// special token. Returns the ids and, for each piece, the tokens that hold any of its bytes
    /// (a token merged across a boundary counts for both pieces). Adds no BOS.
    pub fn encode_pieces(&self, pieces: &[(&str, bool)]) -> Result<(Vec<u32>, Vec<std::ops::Range<usize>>)> {
        let mut out = Encoding::default();
        // A token's rstrip (lstrip) drops the C spaces after (before) it in the whole prompt, as
        // llama.cpp strips them in the one string it is given: across piece boundaries too
        // (Phi-3's tokens strip the start of the content that follows them).
        let mut strip_next = false;
        for (p, &(text, parse_special)) in pieces.iter().enumerate() {
            // Stripped before the split: the spaces are gone before a token made of spaces (Gemma
            // vocabularies have them) can take them, as in llama.cpp, where the longer token
            // before them strips them first.
            let text = if strip_next { text.trim_start_matches(is_c_space) } else { text };
            if text.is_empty() {
                continue;
            }
            strip_next = false;
            for fragment in self.specials.split(text, parse_special)? {
                match fragment {
                    Fragment::Text(t) => {
                        strip_next = false;
                        out.text.push((p, t));
                    }
                    Fragment::Token { id, lstrip, rstrip } => {
                        if lstrip {
                            while let Some(last) = out.text.last_mut() {
                                last.1 = last.1.trim_end_matches(is_c_space);
                                if !last.1.is_empty() {
                                    break;
                                }
                                out.text.pop();
                            }
                        }
                        strip_next = rstrip;
                        self.flush(&mut out)?;
                        out.ids.push(id);
                        out.pieces.push((p, p));
                        out.after_special = true;
                    }
                }
            }
        }
        self.flush(&mut out)?;
        // Both ends of the tokens' piece spans grow with the token index.
        let ranges = (0..pieces.len())
            .map(|p| {
                let start = out.pieces.partition_point(|&(_, last)| last < p);
                start..out.pieces.partition_point(|&(first, _)| first <= p).max(start)
            })
            .collect();
        Ok((out.ids, ranges))
    }

    /// Tokenizes the text gathered since the last special token as one fragment.
    fn flush(&self, out: &mut Encoding<'_>) -> Result<()> {
        if out.text.is_empty() {
            return Ok(());
        }
        let mut run = String::new();
        // (byte offset in `run`, piece) where each piece's text starts.
        let mut marks = Vec::with_capacity(out.text.len());
        for (p, t) in out.text.drain(..) {
            marks.push((run.len(), p));
            run.push_str(t);
        }
        let mut tokens = Vec::new();
        match &self.model {
            Model::Bpe(b) => {
                let enc = b.encode(run.as_str(), false).map_err(|e| err(format!("encoding failed: {e}")))?;
                tokens.extend(enc.get_ids().iter().zip(enc.get_offsets()).map(|(&id, &(start, _))| (id, start)));
            }
            Model::Spm(s) => s.encode_fragment(&run, out.after_special, &mut tokens)?,
        }
        // The piece holding byte `at` of the run.
        let piece_at = |at: usize| {
            let m = marks.partition_point(|&(offset, _)| offset <= at).saturating_sub(1);
            marks.get(m).map_or(0, |&(_, p)| p)
        };
        for (i, &(id, start)) in tokens.iter().enumerate() {
            // A token ends where the next one starts (the last at the end of the run).
            let end = tokens[i + 1..].iter().map(|t| t.1).find(|&s| s > start).unwrap_or(run.len()).max(start + 1);
            out.ids.push(id);
            out.pieces.push((piece_at(start), piece_at(end - 1)));
        }
        out.after_special = false;
        Ok(())
    }

    /// The first control-token text (`<|im_end|>`, `<start_of_turn>`…) in `text`, if any: text
    /// that would become a control token if a template wrote it (`encode_with_special`).
    pub fn find_control_text(&self, text: &str) -> Option<&str> {
        self.specials.control_text(text)
    }

    /// Byte ranges of every control-token text in `text` (non-overlapping, left to right).
    pub(crate) fn control_spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        self.specials.control_spans(text)
    }

    /// Decodes ids to text: the concatenated [`Tokenizer::token_bytes`] (control tokens as their
    /// text), with invalid UTF-8 replaced by U+FFFD. An id past the vocabulary is an error. (A
    /// SentencePiece space prefix stays: llama.cpp's `detokenize` drops it, this does not.)
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

    /// The raw bytes token `id` stands for (possibly part of a UTF-8 character), as llama.cpp's
    /// `token_to_piece` with `special = true`: control, unknown and user-defined tokens give their
    /// text; a SentencePiece token its text with `▁` as a space, a byte token `<0xXX>` that byte,
    /// an unused one nothing. `None` past the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        self.bytes_of(id).map(<[u8]>::to_vec)
    }

    /// The id of a vocabulary string exactly as stored (e.g. `"<|im_end|>"`, `"Ġworld"`, or
    /// SentencePiece's `"▁world"`).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match &self.model {
            Model::Bpe(b) => b.token_to_id(token),
            Model::Spm(s) => s.ids.get(token).copied(),
        }
    }

    /// The beginning-of-sequence id (`tokenizer.ggml.bos_token_id`), if the model names one
    /// (SentencePiece: id 1 when it does not, as in llama.cpp).
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence id (`tokenizer.ggml.eos_token_id`), if the model names one
    /// (SentencePiece: id 2 when it does not, as in llama.cpp).
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Whether the model wants BOS prepended to a prompt (`tokenizer.ggml.add_bos_token`; when
    /// absent, as in llama.cpp: true for SentencePiece and Llama-3's BPE, false for other BPE). `encode_text` and
    /// `encode_with_special` never add it themselves.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.types.len()
    }

    /// The tokens that end generation, as llama.cpp's `special_eog_ids` holds them: the tokens
    /// named by an end-of-generation text ([`EOG_TEXTS`], those still control tokens after the
    /// type fix-ups: gpt-oss's `<|end|>` and Gemma-4's `</s>` are not), the fill-in-the-middle
    /// pad, repo and file-separator tokens (by key, else by text), and the file's EOS, EOT and
    /// EOM ids.
    pub fn end_of_generation_ids(&self, g: &Gguf) -> Vec<u32> {
        let n = self.vocab_size();
        let mut ids: Vec<u32> = EOG_TEXTS.iter().filter_map(|t| self.token_id(t)).filter(|&id| self.is_control(id)).collect();
        let id = |t: &str| self.token_id(t).map(|i| i as usize);
        for (keys, texts) in &FIM_TEXTS[3..] {
            ids.extend(fim_by_key(g, keys, n).or_else(|| fim_by_text(texts, &id)).map(|i| i as u32));
        }
        ids.extend(self.eos);
        for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            ids.extend(g.get(key).and_then(|v| token_index(v, n)).map(|i| i as u32));
        }
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Whether `id` is a control token (`token_type` 3, e.g. `<|im_start|>`, `<|endoftext|>`, or
    /// one llama.cpp makes control by its text, such as `</s>`).
    pub fn is_control(&self, id: u32) -> bool {
        self.types.get(id as usize).is_some_and(|&t| t == TYPE_CONTROL)
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

    /// Each name splits as llama.cpp's pre-tokenizer type of that name does (llama-vocab.cpp's
    /// `tokenizer_pre` names), and only those names run.
    #[test]
    fn each_pre_tokenizer_name_has_its_llama_cpp_type() {
        let want = [
            ("default", Pre::Default),
            ("smollm", Pre::Digits),
            ("starcoder", Pre::Digits),
            ("gpt-2", Pre::Gpt2),
            ("llama-bpe", Pre::Llama3),
            ("llama3", Pre::Llama3),
            ("falcon3", Pre::Llama3),
            ("qwen2", Pre::Qwen2),
            ("deepseek-r1-qwen", Pre::Qwen2),
            ("gpt-4o", Pre::Gpt4o),
            ("llama4", Pre::Gpt4o),
        ];
        for (name, pre) in want {
            assert!(pre_type(name).ok() == Some(pre), "{name}");
        }
        assert_eq!(PRE_TOKENIZERS.len(), want.len());
        for name in ["gpt2", "tekken", "Qwen2", ""] {
            assert!(pre_type(name).is_err(), "{name:?}");
        }
    }

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
