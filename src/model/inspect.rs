//! What a GGUF file holds and whether this build runs it: `hotprefix info` and the page's model
//! picker (`inspectModel`). The summary comes from the header alone; whether the file runs is the
//! caller's verdict: the whole CPU side of a load where the file is at hand
//! ([`crate::preflight::check_model_cpu`]), or the header's share of it
//! ([`crate::preflight::check_header`]) where only the header has been read.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::Result;
use crate::model::gguf::{self, Gguf};
use crate::text::template::ChatTemplate;

/// A model file, described.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// `general.architecture`.
    pub architecture: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// What the file's architecture uses beyond a plain llama block ([`crate::model::arch::features`]).
    pub features: Vec<String>,
    /// Values in all tensors.
    pub parameters: u64,
    /// Tensors in the file.
    pub tensors: usize,
    /// Tensors and values by ggml type, in the order of the type ids.
    pub formats: Vec<FormatCount>,
    /// The file's size.
    pub bytes: u64,
    /// The trained context (`<arch>.context_length`).
    pub context: Option<u64>,
    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE) or `llama` (SentencePiece).
    pub tokenizer: Option<String>,
    /// `tokenizer.ggml.pre`: the BPE pre-tokenizer.
    pub pre_tokenizer: Option<String>,
    /// The chat template chat requests use: the file's own, a built-in one, or none.
    pub chat_template: String,
    /// Whether this build runs the file.
    pub runs: bool,
    /// If not, the first reason.
    pub refused: Option<String>,
}

/// One ggml type's share of a file.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FormatCount {
    /// The type's name (`Q4_K`), or `type N` for an id no one knows.
    #[serde(rename = "type")]
    pub name: String,
    /// The ggml type id.
    pub ggml_type: u32,
    /// Tensors of the type.
    pub tensors: usize,
    /// Values in them.
    pub values: u64,
}

impl Summary {
    /// The summary of the file whose header is `g` and whose size is `bytes`, with `verdict`
    /// (whether it runs) from the caller's check.
    pub fn of(g: &Gguf, bytes: u64, verdict: Result<()>) -> Summary {
        let text = |k: &str| g.get(k).and_then(|v| v.as_str()).map(str::to_string);
        let architecture = text("general.architecture");
        let number = |k: &str| architecture.as_ref().and_then(|a| g.get(&format!("{a}.{k}"))).and_then(|v| v.as_u64());
        let mut by_type: BTreeMap<u32, (usize, u64)> = BTreeMap::new();
        let mut parameters = 0u64;
        for t in &g.tensors {
            let n = t.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).unwrap_or(u64::MAX);
            parameters = parameters.saturating_add(n);
            let e = by_type.entry(t.ggml_type).or_default();
            e.0 += 1;
            e.1 = e.1.saturating_add(n);
        }
        let formats = by_type
            .into_iter()
            .map(|(id, (tensors, values))| FormatCount {
                name: gguf::ggml_type(id).map_or_else(|| format!("type {id}"), |t| t.name.to_string()),
                ggml_type: id,
                tensors,
                values,
            })
            .collect();
        let chat_template = match ChatTemplate::for_gguf(g) {
            Ok(Some(t)) => match t.builtin() {
                Some(name) => format!("built-in {name} (the file has none)"),
                None => "the file's own".to_string(),
            },
            Ok(None) => "none (chat requests are refused; raw prompts run)".to_string(),
            Err(e) => format!("refused: {e}"),
        };
        Summary {
            name: text("general.name"),
            features: crate::model::arch::features(g),
            parameters,
            tensors: g.tensors.len(),
            formats,
            bytes,
            context: number("context_length"),
            tokenizer: text("tokenizer.ggml.model"),
            pre_tokenizer: text("tokenizer.ggml.pre"),
            chat_template,
            runs: verdict.is_ok(),
            refused: verdict.err().map(|e| e.to_string()),
            architecture,
        }
    }
}
