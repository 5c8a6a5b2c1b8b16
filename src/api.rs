//! The request and result of one chat completion, defined once for the CLI (`hotprefix session`),
//! the browser API and the tests. The result's `usage` is OpenAI's shape
//! (`usage.prompt_tokens_details.cached_tokens`); `cache` is hotprefix's own report: what was
//! reused, what head truncation dropped, where the prompt diverged from something resident, and
//! which prompt-layout rules it breaks.

use serde::{Deserialize, Serialize};

use crate::chat::Message;
use crate::error::{Error, Result};
use crate::sample::SamplingParams;

/// Stop strings: OpenAI accepts one string or a list.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Stop::None => Vec::new(),
            Stop::One(s) => vec![s.clone()],
            Stop::Many(v) => v.clone(),
        }
    }
}

fn default_max_tokens() -> usize {
    256
}

/// One chat completion request, OpenAI-shaped. Unknown fields (`model`, `stream`, …) are ignored.
/// `temperature` defaults to 0 (greedy), unlike OpenAI's 1: answers are then reproducible, which
/// is what a cache demo and tests want.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    /// Tokens to generate at most; 0 computes the prompt's K/V and keeps it resident (prewarm).
    #[serde(default = "default_max_tokens", alias = "max_completion_tokens")]
    pub max_tokens: usize,
    #[serde(default)]
    pub temperature: f32,
    #[serde(default)]
    pub top_k: usize,
    #[serde(default = "one")]
    pub top_p: f32,
    #[serde(default = "one")]
    pub repetition_penalty: f32,
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub stop: Stop,
    /// Prefixes are shared only between requests with the same salt (vLLM's `cache_salt`).
    #[serde(default)]
    pub cache_salt: Option<String>,
}

fn one() -> f32 {
    1.0
}

impl ChatRequest {
    /// A greedy request for `messages`.
    pub fn new(messages: Vec<Message>, max_tokens: usize) -> ChatRequest {
        ChatRequest {
            messages,
            max_tokens,
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            repetition_penalty: 1.0,
            seed: 0,
            stop: Stop::None,
            cache_salt: None,
        }
    }

    /// Parses one JSON request (one line of `hotprefix session`).
    pub fn from_json(text: &str) -> Result<ChatRequest> {
        let r: ChatRequest = serde_json::from_str(text).map_err(|e| Error::InvalidArgument(format!("request: {e}")))?;
        if r.messages.is_empty() {
            return Err(Error::InvalidArgument("request: no messages".into()));
        }
        Ok(r)
    }

    pub fn sampling(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
            ..SamplingParams::default()
        }
    }
}

/// OpenAI's `usage`.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose K/V were resident and were not recomputed.
    pub cached_tokens: usize,
}

/// Where the time went, in milliseconds and tokens per second.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timings {
    /// Request start to the first generated token (or to the end of a prewarm).
    pub ttft_ms: f64,
    /// Time spent computing the prompt's uncached tokens.
    pub prefill_ms: f64,
    pub decode_tok_s: f64,
}

/// Where a prompt stopped matching a resident sequence.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct DivergedAt {
    /// First prompt token that differs.
    pub token: usize,
    /// The message whose content it falls in (index into the request's `messages`), and its
    /// role; `null` when it falls in the template's own text (role headers, a default system
    /// prompt the template adds, the generation prompt).
    pub message: Option<usize>,
    pub role: Option<String>,
    /// Character offset inside that message's content (0 when outside any content).
    pub char: usize,
    /// A few tokens of the resident text and of the new text from that point.
    pub resident: String,
    pub new: String,
}

/// A prompt-layout rule the request breaks, and what to change.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Warning {
    /// `dynamic_before_static`, `history_rewritten`, `json_serialization_changed`.
    pub code: &'static str,
    /// The message it is about (index into the request's `messages`).
    pub message: Option<usize>,
    /// What was found and what to do, for a developer.
    pub detail: String,
}

/// The cache's report on one request.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CacheReport {
    /// Prompt tokens found resident (the longest resident prefix). `cached_tokens` is the same
    /// unless the whole prompt was resident: its last token is then recomputed for its logits.
    pub reused_tokens: usize,
    /// Messages head truncation dropped to fit the context window.
    pub dropped_messages: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diverged_at: Option<DivergedAt>,
    pub warnings: Vec<Warning>,
}

/// The result of one chat completion.
#[derive(Clone, Debug, Serialize)]
pub struct ChatResult {
    pub text: String,
    pub tokens: Vec<u32>,
    /// `stop` (end of turn or a stop string), `length` (`max_tokens`) or `abort`.
    pub finish_reason: &'static str,
    pub usage: Usage,
    pub timings: Timings,
    pub cache: CacheReport,
    /// The token ids that were run (after head truncation); not part of the JSON.
    #[serde(skip)]
    pub prompt: Vec<u32>,
}

/// A one-line error object for a request that failed (`hotprefix session` prints it in the
/// result's place): `{"error": {"type": "ContextFullError", "message": "…"}}`.
pub fn error_json(e: &Error) -> serde_json::Value {
    serde_json::json!({ "error": { "type": e.name(), "message": e.to_string() } })
}
