//! The request and result of one chat completion, defined once for the CLI (`hotprefix session`),
//! the browser API and the tests. The result's `usage` is OpenAI's shape
//! (`usage.prompt_tokens_details.cached_tokens`); `cache` is hotprefix's own report: what was
//! reused, what head truncation dropped, where the prompt diverged from something resident, and
//! which prompt-layout rules it breaks.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::sample::SamplingParams;
use crate::error::{Error, Result};
use crate::text::template::{Message, ToolCall};
use crate::text::tools::{check_schema, ToolSpec};

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

/// Most stop strings a request may give (OpenAI allows 4).
pub const MAX_STOPS: usize = 16;
/// Most characters in one stop string.
pub const MAX_STOP_CHARS: usize = 256;

/// OpenAI's `response_format`: what the answer must be.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ResponseFormat {
    /// Free text (the default).
    #[default]
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON valid against `schema` (`json_schema.schema`; any object when absent).
    JsonSchema {
        /// `json_schema.name`.
        name: String,
        /// `json_schema.schema`.
        schema: Option<Value>,
    },
}

/// OpenAI's `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// Never call a tool (the tools stay in the prompt, so its tokens do not change).
    None,
    /// Answer, or call tools, as the model decides (the default with tools).
    Auto,
    /// Call at least one tool.
    Required,
    /// Call this function.
    Function(String),
}

/// A tool call's id: what OpenAI's and the engine's look like (`call_…`), and nothing a template
/// that prints it could take for markup.
fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

/// OpenAI's rule for a function's name.
fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// One chat completion request, OpenAI-shaped. Every field but `messages` may be absent or
/// `null` (its default); a field hotprefix does not implement (`logprobs`, `user`, …) is refused
/// with [`Error::InvalidArgument`] naming it, never ignored.
/// `temperature` defaults to 0 (greedy), unlike OpenAI's 1: answers are then reproducible, which
/// is what a cache demo and tests want.
#[derive(Clone, Debug, Deserialize)]
#[serde(try_from = "WireRequest")]
pub struct ChatRequest {
    /// The conversation, oldest message first; must not be empty.
    pub messages: Vec<Message>,
    /// Tokens to generate at most (`max_tokens` or `max_completion_tokens`; 256 by default); 0
    /// computes the prompt's K/V and keeps it resident (prewarm).
    pub max_tokens: usize,
    /// Softmax temperature; 0 (the default) is greedy. Must be finite and ≥ 0.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 (the default) turns it off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability adds up to at least `top_p`;
    /// must be in (0, 1], 1 (the default) turns it off.
    pub top_p: f32,
    /// llama.cpp-style penalty for the last 64 tokens of prompt and completion; must be finite
    /// and > 0, 1 (the default) turns it off.
    pub repetition_penalty: f32,
    /// OpenAI's frequency penalty, in [-2, 2]: each token's logit is lowered by this times the
    /// number of times it already appears in the completion. 0 (the default) turns it off.
    pub frequency_penalty: f32,
    /// OpenAI's presence penalty, in [-2, 2]: the logit of each token that already appears in the
    /// completion is lowered by this. 0 (the default) turns it off.
    pub presence_penalty: f32,
    /// Seed of the sampler's generator (0 by default): the same request and seed give the same
    /// answer.
    pub seed: u64,
    /// Generation stops before the first occurrence of any of these strings, which is not part
    /// of the text: at most [`MAX_STOPS`], each of 1 to [`MAX_STOP_CHARS`] characters.
    pub stop: Stop,
    /// Prefixes are shared only between requests with the same salt (vLLM's `cache_salt`).
    pub cache_salt: Option<String>,
    /// The caller's name for the model (OpenAI's `model`): accepted and not checked, since an
    /// engine runs one model; the npm package echoes it in its results.
    pub model: Option<String>,
    /// What the answer must be: text, a JSON object, or JSON valid against a schema.
    pub response_format: ResponseFormat,
    /// Functions the model may call, in the request's order (rendered in that order, each
    /// schema canonical: see `text::tools`).
    pub tools: Vec<ToolSpec>,
    /// Whether and which tools must be called (`None` without tools, `Auto` by default with).
    pub tool_choice: ToolChoice,
    /// Whether one answer may call several tools (OpenAI's default: true).
    pub parallel_tool_calls: bool,
    /// More variables for the chat template (vLLM's and llama.cpp's `chat_template_kwargs`):
    /// Qwen3's `enable_thinking: false`, Llama-3.x's `date_string`, … Empty by default. The
    /// template's own variables (`messages`, `tools`, `add_generation_prompt`, `bos_token`,
    /// `eos_token`) cannot be set this way.
    pub chat_template_kwargs: serde_json::Map<String, Value>,
}

/// The request as it arrives: every optional field may be `null`, and unknown fields are
/// refused by name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRequest {
    messages: Vec<Message>,
    max_tokens: Option<usize>,
    max_completion_tokens: Option<usize>,
    temperature: Option<f32>,
    top_k: Option<usize>,
    top_p: Option<f32>,
    repetition_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    seed: Option<u64>,
    stop: Option<Stop>,
    cache_salt: Option<String>,
    model: Option<String>,
    /// Only 1: one answer a request.
    n: Option<u64>,
    /// Only `false`: results come whole (the npm package streams on its own side).
    stream: Option<bool>,
    response_format: Option<WireFormat>,
    tools: Option<Vec<WireTool>>,
    tool_choice: Option<WireToolChoice>,
    parallel_tool_calls: Option<bool>,
    chat_template_kwargs: Option<serde_json::Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum WireFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: WireJsonSchema },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireJsonSchema {
    name: String,
    #[allow(dead_code)]
    description: Option<String>,
    schema: Option<Value>,
    /// Accepted either way: the schema is always enforced.
    #[allow(dead_code)]
    strict: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireTool {
    #[serde(rename = "type")]
    kind: String,
    function: WireFunction,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireFunction {
    name: Option<String>,
    description: Option<String>,
    parameters: Option<Value>,
    /// Accepted either way: the arguments are always held to `parameters`.
    #[allow(dead_code)]
    strict: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum WireToolChoice {
    Mode(String),
    Function {
        #[serde(rename = "type")]
        kind: String,
        function: WireNamed,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireNamed {
    name: String,
}

/// The request's tools, checked: `type: "function"`, a valid unique name, an object schema of
/// keywords the grammar enforces.
fn tools_of(wire: Vec<WireTool>) -> std::result::Result<Vec<ToolSpec>, String> {
    let mut tools: Vec<ToolSpec> = Vec::with_capacity(wire.len());
    for (i, t) in wire.into_iter().enumerate() {
        if t.kind != "function" {
            return Err(format!("tools[{i}].type: {:?} (only \"function\" is supported)", t.kind));
        }
        let name = t.function.name.unwrap_or_default();
        if !valid_name(&name) {
            return Err(format!("tools[{i}].function.name: {name:?} (1 to 64 letters, digits, _ or - required)"));
        }
        if tools.iter().any(|u| u.name == name) {
            return Err(format!("tools[{i}].function.name: {name:?} is used by another tool"));
        }
        let parameters = t.function.parameters.unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
        let at = format!("tools[{i}].function.parameters");
        if !parameters.is_object() {
            return Err(format!("{at} must be a JSON Schema object"));
        }
        check_schema(&parameters, &at)?;
        tools.push(ToolSpec { name, description: t.function.description, parameters });
    }
    Ok(tools)
}

/// Messages that call tools and answer calls: tool calls only on assistant messages, each of
/// type `function` with an id; a `tool` message answers an earlier call by its id.
fn check_tool_messages(messages: &[Message]) -> std::result::Result<(), String> {
    let mut ids: Vec<&str> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if !m.tool_calls.is_empty() && m.role != "assistant" {
            return Err(format!("messages[{i}].tool_calls: only an assistant message calls tools"));
        }
        for (j, c) in m.tool_calls.iter().enumerate() {
            if c.kind != "function" || !valid_id(&c.id) || !valid_name(&c.function.name) {
                return Err(format!(
                    "messages[{i}].tool_calls[{j}]: a function call with an id (1 to 128 letters, digits, _ - . :) and a valid name expected"
                ));
            }
            ids.push(&c.id);
        }
        match (m.role.as_str(), &m.tool_call_id) {
            ("tool", None) => return Err(format!("messages[{i}]: a tool message needs tool_call_id")),
            ("tool", Some(id)) if !ids.contains(&id.as_str()) => {
                return Err(format!("messages[{i}].tool_call_id: {id:?} answers no earlier tool call"))
            }
            ("tool", Some(_)) => {}
            (_, Some(_)) => return Err(format!("messages[{i}].tool_call_id: only a tool message has one")),
            _ => {}
        }
    }
    Ok(())
}

impl TryFrom<WireRequest> for ChatRequest {
    type Error = String;

    fn try_from(w: WireRequest) -> std::result::Result<ChatRequest, String> {
        if w.messages.is_empty() {
            return Err("no messages".into());
        }
        if w.n.is_some_and(|n| n != 1) {
            return Err("n must be 1".into());
        }
        if w.stream == Some(true) {
            return Err("stream: true is not supported here (results come whole; the npm package streams)".into());
        }
        let max_tokens = match (w.max_tokens, w.max_completion_tokens) {
            (Some(a), Some(b)) if a != b => return Err(format!("max_tokens ({a}) and max_completion_tokens ({b}) disagree")),
            (a, b) => a.or(b).unwrap_or(DEFAULT_MAX_TOKENS),
        };
        let stop = w.stop.unwrap_or_default();
        let stops = stop.to_vec();
        if stops.len() > MAX_STOPS {
            return Err(format!("stop: {} strings, at most {MAX_STOPS}", stops.len()));
        }
        if let Some((i, s)) = stops.iter().enumerate().find(|(_, s)| s.is_empty() || s.chars().count() > MAX_STOP_CHARS) {
            return Err(format!("stop[{i}]: {} characters, 1 to {MAX_STOP_CHARS} allowed", s.chars().count()));
        }
        check_tool_messages(&w.messages)?;
        let chat_template_kwargs = w.chat_template_kwargs.unwrap_or_default();
        if let Some(k) = chat_template_kwargs.keys().find(|k| crate::text::template::CONTEXT.contains(&k.as_str())) {
            return Err(format!("chat_template_kwargs.{k}: the template's own variable, set by the request itself"));
        }
        let response_format = match w.response_format {
            None | Some(WireFormat::Text) => ResponseFormat::Text,
            Some(WireFormat::JsonObject) => ResponseFormat::JsonObject,
            Some(WireFormat::JsonSchema { json_schema: j }) => {
                if !valid_name(&j.name) {
                    return Err(format!("response_format.json_schema.name: {:?} (1 to 64 letters, digits, _ or - required)", j.name));
                }
                if let Some(schema) = &j.schema {
                    check_schema(schema, "response_format.json_schema.schema")?;
                }
                ResponseFormat::JsonSchema { name: j.name, schema: j.schema }
            }
        };
        let tools = tools_of(w.tools.unwrap_or_default())?;
        let tool_choice = match w.tool_choice {
            None if tools.is_empty() => ToolChoice::None,
            None => ToolChoice::Auto,
            Some(WireToolChoice::Mode(m)) => match m.as_str() {
                "none" => ToolChoice::None,
                "auto" => ToolChoice::Auto,
                "required" => ToolChoice::Required,
                other => return Err(format!("tool_choice: {other:?} (none, auto, required or a function expected)")),
            },
            Some(WireToolChoice::Function { kind, function }) => {
                if kind != "function" {
                    return Err(format!("tool_choice.type: {kind:?} (only \"function\" is supported)"));
                }
                ToolChoice::Function(function.name)
            }
        };
        match &tool_choice {
            ToolChoice::Function(name) if !tools.iter().any(|t| &t.name == name) => {
                return Err(format!("tool_choice: the function {name:?} is not among the tools"))
            }
            ToolChoice::Auto | ToolChoice::Required | ToolChoice::Function(_) if tools.is_empty() => {
                return Err("tool_choice: there are no tools to call".into())
            }
            _ => {}
        }
        if response_format != ResponseFormat::Text && tool_choice != ToolChoice::None {
            return Err("response_format with tools that may be called: not supported together (use tool_choice: \"none\", or a tool whose parameters are the schema)".into());
        }
        let r = ChatRequest {
            messages: w.messages,
            max_tokens,
            temperature: w.temperature.unwrap_or(0.0),
            top_k: w.top_k.unwrap_or(0),
            top_p: w.top_p.unwrap_or(1.0),
            repetition_penalty: w.repetition_penalty.unwrap_or(1.0),
            frequency_penalty: w.frequency_penalty.unwrap_or(0.0),
            presence_penalty: w.presence_penalty.unwrap_or(0.0),
            seed: w.seed.unwrap_or(0),
            stop,
            cache_salt: w.cache_salt,
            model: w.model,
            response_format,
            tools,
            tool_choice,
            parallel_tool_calls: w.parallel_tool_calls.unwrap_or(true),
            chat_template_kwargs,
        };
        r.sampling().validate().map_err(|e| match e {
            Error::InvalidArgument(m) => m,
            other => other.to_string(),
        })?;
        Ok(r)
    }
}

const DEFAULT_MAX_TOKENS: usize = 256;

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
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: 0,
            stop: Stop::None,
            cache_salt: None,
            model: None,
            response_format: ResponseFormat::Text,
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
            parallel_tool_calls: true,
            chat_template_kwargs: serde_json::Map::new(),
        }
    }

    /// Parses and checks one JSON request (one line of `hotprefix session`). Every error is an
    /// [`Error::InvalidArgument`] that says which field is wrong.
    pub fn from_json(text: &str) -> Result<ChatRequest> {
        serde_json::from_str(text).map_err(|e| {
            let m = e.to_string();
            // serde names the field and lists every one it knows; the list is noise here.
            let m = match m.find(", expected one of") {
                Some(cut) if m.starts_with("unknown field") => {
                    format!("{}: hotprefix does not implement it{}", &m[..cut], &m[m.rfind(" at line").unwrap_or(m.len())..])
                }
                _ => m,
            };
            Error::InvalidArgument(format!("request: {m}"))
        })
    }

    /// The request's sampling parameters (the penalty window, `repeat_last_n`, at its default).
    pub fn sampling(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            repetition_penalty: self.repetition_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
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
    /// Character offset inside that message's content, counted from the content's own start
    /// (whitespace a trimming template dropped there included; 0 when outside any content).
    pub char: usize,
    /// A few tokens of the resident text from that point.
    pub resident: String,
    /// A few tokens of the new prompt's text from that point.
    pub new: String,
}

/// Which prompt-layout rule a [`Warning`] is about (its JSON name, snake_case). The
/// TypeScript union `WarningCode` in js/index.d.ts is checked against [`WarningCode::ALL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WarningCode {
    /// A clock time, date, id or counter in a message before a long static part (the rule:
    /// static first, dynamic last).
    DynamicBeforeStatic,
    /// A message in the middle of the conversation changed while later ones were kept (the
    /// rule: history is append-only).
    HistoryRewritten,
    /// A JSON value equal to one sent earlier, serialised differently (the rule: canonical JSON).
    JsonSerializationChanged,
    /// The request's tools differ from the previous request's, in set or order (the rule: the same
    /// tools in the same order).
    ToolsChanged,
}

impl WarningCode {
    /// Every code.
    pub const ALL: [WarningCode; 4] =
        [WarningCode::DynamicBeforeStatic, WarningCode::HistoryRewritten, WarningCode::JsonSerializationChanged, WarningCode::ToolsChanged];

    /// The code's JSON name: `"dynamic_before_static"`, …
    pub fn as_str(self) -> &'static str {
        match self {
            WarningCode::DynamicBeforeStatic => "dynamic_before_static",
            WarningCode::HistoryRewritten => "history_rewritten",
            WarningCode::JsonSerializationChanged => "json_serialization_changed",
            WarningCode::ToolsChanged => "tools_changed",
        }
    }
}

/// Serialised as its name ([`WarningCode::as_str`]): one list of the names.
impl Serialize for WarningCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A prompt-layout rule the request breaks, and what to change.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Warning {
    /// The rule.
    pub code: WarningCode,
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

/// A piece of a streamed answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delta {
    /// More of the answer's text.
    Text(String),
    /// A tool call begins.
    Call {
        /// Its index among the answer's calls.
        index: usize,
        /// Its id (`call_…`).
        id: String,
        /// The function's name.
        name: String,
    },
    /// More of a call's arguments (JSON text).
    Arguments {
        /// The call's index.
        index: usize,
        /// The next piece of the arguments.
        text: String,
    },
}

/// The result of one chat completion.
#[derive(Clone, Debug, Serialize)]
pub struct ChatResult {
    /// The generated text, without the stop string that ended it; with tool calls, the text
    /// outside them.
    pub text: String,
    /// The tool calls the answer makes (absent from the JSON when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The generated token ids.
    pub tokens: Vec<u32>,
    /// `stop` (end of turn or a stop string), `tool_calls`, `length` (`max_tokens`) or `abort`.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(json: &str) -> String {
        match ChatRequest::from_json(json) {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{json}: expected InvalidArgument, got {other:?}"),
        }
    }

    const HI: &str = r#""messages":[{"role":"user","content":"hi"}]"#;

    #[test]
    fn unknown_fields_are_refused_by_name() {
        for field in ["logprobs", "user", "logit_bias", "functions"] {
            let m = refused(&format!(r#"{{{HI},"{field}":{{}}}}"#));
            assert!(m.contains(&format!("`{field}`")) && m.contains("does not implement"), "{m}");
        }
        let m = refused(r#"{"messages":[{"role":"user","content":"hi","tool_cals":[]}]}"#);
        assert!(m.contains("`tool_cals`"), "{m}");
    }

    #[test]
    fn chat_template_kwargs_are_read_and_the_templates_own_variables_refused() {
        let r =
            ChatRequest::from_json(&format!(r#"{{{HI},"chat_template_kwargs":{{"enable_thinking":false,"date_string":"1 Jan 2026"}}}}"#))
                .unwrap();
        assert_eq!(r.chat_template_kwargs.get("enable_thinking"), Some(&Value::Bool(false)));
        assert_eq!(ChatRequest::from_json(&format!("{{{HI}}}")).unwrap().chat_template_kwargs.len(), 0);
        for k in crate::text::template::CONTEXT {
            let m = refused(&format!(r#"{{{HI},"chat_template_kwargs":{{"{k}":1}}}}"#));
            assert!(m.contains(&format!("chat_template_kwargs.{k}")), "{m}");
        }
        refused(&format!(r#"{{{HI},"chat_template_kwargs":[1]}}"#));
    }

    #[test]
    fn null_is_the_default_and_openai_fields_are_read() {
        let r = ChatRequest::from_json(&format!(
            r#"{{{HI},"temperature":null,"top_p":null,"max_tokens":null,"stop":null,"seed":null,"model":"m","n":1,"stream":false}}"#
        ))
        .unwrap();
        assert_eq!((r.temperature, r.top_p, r.max_tokens, r.seed, r.model.as_deref()), (0.0, 1.0, 256, 0, Some("m")));
        let r = ChatRequest::from_json(&format!(r#"{{{HI},"max_completion_tokens":7,"frequency_penalty":0.5,"presence_penalty":-1}}"#))
            .unwrap();
        assert_eq!((r.max_tokens, r.frequency_penalty, r.presence_penalty), (7, 0.5, -1.0));
        let r = ChatRequest::from_json(r#"{"messages":[{"role":"user","content":"hi","name":"ann","pinned":true}]}"#).unwrap();
        assert_eq!((r.messages[0].name.as_deref(), r.messages[0].pinned), (Some("ann"), true));
    }

    #[test]
    fn out_of_range_fields_name_themselves() {
        for (json, says) in [
            (r#""temperature":-1"#, "temperature"),
            (r#""top_p":0"#, "top_p"),
            (r#""frequency_penalty":2.5"#, "frequency_penalty"),
            (r#""presence_penalty":-3"#, "presence_penalty"),
            (r#""repetition_penalty":0"#, "repetition_penalty"),
            (r#""n":2"#, "n must be 1"),
            (r#""stream":true"#, "stream"),
            (r#""max_tokens":3,"max_completion_tokens":4"#, "disagree"),
            (r#""stop":"""#, "stop[0]"),
        ] {
            let m = refused(&format!("{{{HI},{json}}}"));
            assert!(m.contains(says), "{json}: {m}");
        }
        assert!(refused(r#"{"messages":[]}"#).contains("no messages"));
    }

    #[test]
    fn stop_strings_are_bounded() {
        let many: Vec<String> = (0..MAX_STOPS).map(|i| format!("s{i}")).collect();
        assert!(ChatRequest::from_json(&format!(r#"{{{HI},"stop":{}}}"#, serde_json::to_string(&many).unwrap())).is_ok());
        let too_many: Vec<String> = (0..=MAX_STOPS).map(|i| format!("s{i}")).collect();
        assert!(refused(&format!(r#"{{{HI},"stop":{}}}"#, serde_json::to_string(&too_many).unwrap())).contains("at most 16"));
        let long = "é".repeat(MAX_STOP_CHARS);
        assert!(ChatRequest::from_json(&format!(r#"{{{HI},"stop":"{long}"}}"#)).is_ok(), "256 characters (512 bytes) are allowed");
        assert!(refused(&format!(r#"{{{HI},"stop":["a","{long}é"]}}"#)).contains("stop[1]: 257 characters"));
    }

    #[test]
    fn warning_codes_serialize_by_name_and_the_typescript_union_matches() {
        for c in WarningCode::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), serde_json::json!(c.as_str()));
        }
        // js/index.d.ts: `export type WarningCode = 'a' | 'b' | …;`
        let dts = include_str!("../js/index.d.ts");
        let line = dts.lines().find(|l| l.starts_with("export type WarningCode =")).expect("index.d.ts declares WarningCode");
        let mut ts: Vec<&str> = line.split('\'').skip(1).step_by(2).collect();
        let mut rust: Vec<&str> = WarningCode::ALL.iter().map(|c| c.as_str()).collect();
        ts.sort_unstable();
        rust.sort_unstable();
        assert_eq!(ts, rust, "index.d.ts's WarningCode and api::WarningCode differ");
    }
}
