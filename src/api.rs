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
    /// No stop strings: the field is absent or `null`.
    #[default]
    None,
    /// A single stop string.
    One(String),
    /// A list of stop strings (any of them stops generation).
    Many(Vec<String>),
}

impl Stop {
    /// The stop strings as a list (empty for [`Stop::None`]).
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
    /// The conversation, oldest message first; must not be empty.
    pub messages: Vec<Message>,
    /// Tokens to generate at most; 0 computes the prompt's K/V and keeps it resident (prewarm).
    #[serde(default = "default_max_tokens", alias = "max_completion_tokens")]
    pub max_tokens: usize,
    /// Softmax temperature; 0 (the default) is greedy. Must be finite and ≥ 0.
    #[serde(default)]
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 (the default) turns it off.
    #[serde(default)]
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability adds up to at least `top_p`;
    /// must be in (0, 1], 1 (the default) turns it off.
    #[serde(default = "one")]
    pub top_p: f32,
    /// llama.cpp-style penalty for the last 64 tokens of prompt and completion; must be finite
    /// and > 0, 1 (the default) turns it off.
    #[serde(default = "one")]
    pub repetition_penalty: f32,
    /// Seed of the sampler's generator (0 by default): the same request and seed give the same
    /// answer.
    #[serde(default)]
    pub seed: u64,
    /// Generation stops before the first occurrence of any of these strings, which is not part
    /// of the text.
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

    /// The request's sampling parameters (the penalty window, `repeat_last_n`, at its default).
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
    /// Tokens of the prompt that was run (after head truncation).
    pub prompt_tokens: usize,
    /// Tokens generated (the end-of-turn token that ended generation is not counted).
    pub completion_tokens: usize,
    /// How many of the prompt tokens came from the resident cache.
    pub prompt_tokens_details: PromptTokensDetails,
}

/// OpenAI's `usage.prompt_tokens_details`.
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
    /// Tokens per second after the first generated token (0 when no further token was decoded).
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
    /// The role of that message (`"user"`, …); `null` when `message` is.
    pub role: Option<String>,
    /// Character offset inside that message's content (0 when outside any content).
    pub char: usize,
    /// A few tokens of the resident text from that point.
    pub resident: String,
    /// A few tokens of the new prompt's text from that point.
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
    /// Where the prompt stopped matching a resident sequence; absent when it did not (nothing
    /// resident under its salt, or the match ran until the prompt or the resident sequence ended).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diverged_at: Option<DivergedAt>,
    /// Prompt-layout rules the request breaks (empty when none).
    pub warnings: Vec<Warning>,
}

/// The result of one chat completion.
#[derive(Clone, Debug, Serialize)]
pub struct ChatResult {
    /// The generated text, without the stop string that ended it.
    pub text: String,
    /// The generated token ids.
    pub tokens: Vec<u32>,
    /// `stop` (end of turn or a stop string), `length` (`max_tokens`) or `abort`.
    pub finish_reason: &'static str,
    /// Prompt and completion token counts, OpenAI's shape.
    pub usage: Usage,
    /// Time to first token, prefill time and decode speed.
    pub timings: Timings,
    /// What the resident cache reused, dropped and found.
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
