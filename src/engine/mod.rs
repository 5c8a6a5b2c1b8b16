//! The engine: model + tokenizer + chat template + the resident prompt cache.
//!
//! - here: loading, the request and result types, `chat` (head truncation, lint, generation, the
//!   cache report) and the cache's public face;
//! - `generate`: the generation loop over the resident cache;
//! - `resident`: the KV pages and their index (lookup, eviction, copy-on-write, save, restore);
//! - [`sample`]: choosing each token.

pub mod constrain;
mod generate;
mod resident;
pub mod sample;

use std::cell::Cell;
use std::rc::Rc;

use crate::api::{self, CacheReport, ChatRequest, ChatResult, Delta, PromptTokensDetails, ResponseFormat, ToolChoice, Usage};
use crate::cache::kv;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::lint::rules::{History, Seen};
use crate::model::gguf::Gguf;
use crate::text::template::{ChatTemplate, FunctionCall, Message, ToolCall};
use crate::text::tools::{self, Piece, ToolSpec};
use constrain::{Constraint, Grammars};

use crate::cache::persist;
/// Where a request stopped matching the resident prefix ([`Generation::divergence`]), and a
/// resident prefix ([`CacheStats::prefixes`]).
pub use crate::cache::prefix::{Divergence, Resident};
use crate::engine::sample::SamplingParams;
use crate::model::preflight;
use crate::model::{Model, Options, TensorBytes};
/// A prompt encoded from messages ([`Engine::encode_messages`]).
pub use crate::text::prompt::{Encoded, Part, Prompter};
use crate::text::tokenizer::Tokenizer;
use resident::ResidentCache;
/// The cache's state ([`Engine::cache_stats`]), and what a restore did ([`Engine::restore_cache`]).
pub use resident::{CacheStats, Restored, SAVE_BATCH_BYTES};

/// The KV budget when none is given: 512 MiB (23,300 positions of the default model), or less
/// where the adapter's binding limits allow less. Browsers do not say how much GPU memory there
/// is; this is a few full contexts, a fraction of what integrated GPUs share with the system.
pub const DEFAULT_KV_BUDGET_MB: f64 = 512.0;

/// Load-time settings. The KV budget (the pool all prefixes share) and the context window
/// (positions one request may use) are separate.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Positions one request may use, prompt and completion; `None` = the model's trained context.
    pub context: Option<usize>,
    /// KV pool size in MiB; `None` = [`DEFAULT_KV_BUDGET_MB`], capped by the adapter's limits.
    pub kv_budget_mb: Option<f64>,
    /// Positions per KV page: the granularity of sharing and eviction.
    pub page_size: usize,
    /// Most tokens one forward pass processes.
    pub chunk: usize,
    /// Keep prefixes resident between requests; `false` runs every request cold (for comparison).
    pub cache: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { context: None, kv_budget_mb: None, page_size: 16, chunk: 128, cache: true }
    }
}

/// Stops a running generation between two tokens (the JS `AbortSignal`'s counterpart).
#[derive(Clone, Debug, Default)]
pub struct AbortSignal(Rc<Cell<bool>>);

impl AbortSignal {
    /// A signal that has not been aborted.
    pub fn new() -> Self {
        Self::default()
    }
    /// Aborts, for this signal and every clone of it: the generation stops before its next token
    /// or prefill chunk and ends with [`Finish::Abort`].
    pub fn abort(&self) {
        self.0.set(true);
    }
    /// Whether [`Self::abort`] was called on this signal or a clone of it.
    pub fn is_aborted(&self) -> bool {
        self.0.get()
    }
}

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Tokens to generate at most; 0 computes the prompt and keeps it resident (prewarm).
    pub max_tokens: usize,
    /// How each token is chosen.
    pub sampling: SamplingParams,
    /// Generation stops before the first occurrence of any of these strings.
    pub stop: Vec<String>,
    /// Prefixes are shared only between requests with the same salt.
    pub cache_salt: String,
    /// Stops the generation between two tokens (or prefill chunks); `None`: runs to the end.
    pub abort: Option<AbortSignal>,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams { max_tokens: 256, sampling: SamplingParams::greedy(), stop: Vec::new(), cache_salt: String::new(), abort: None }
    }
}

/// A tool call's id: `call_` and 24 characters, different for each call an engine makes.
fn call_id(n: u64) -> String {
    let mut rng = crate::engine::sample::rng::Rng(n ^ 0x9e37_79b9_7f4a_7c15 ^ (crate::gpu::now_ms() as u64).rotate_left(17));
    let a = rng.next_u64();
    let b = rng.next_u64();
    format!("call_{a:016x}{:08x}", b as u32)
}

/// Why generation ended (OpenAI's `finish_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-turn token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The caller's [`AbortSignal`].
    Abort,
}

impl Finish {
    /// The `finish_reason` string: `"stop"`, `"length"` or `"abort"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Abort => "abort",
        }
    }
}

/// The result of `generate`.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The generated text, without the stop string that ended it.
    pub text: String,
    /// The generated token ids (the end-of-turn token that ended generation is not included).
    pub tokens: Vec<u32>,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens whose K/V were already resident and were not recomputed.
    pub cached_tokens: usize,
    /// Prompt tokens found resident (`cached_tokens`, or one more when the whole prompt was
    /// resident and its last token was recomputed for its logits).
    pub reused_tokens: usize,
    /// Where the prompt diverged from a resident sequence, if it did.
    pub divergence: Option<Divergence>,
    /// Why generation ended.
    pub finish: Finish,
    /// Time to first token, prefill time and decode speed.
    pub timings: api::Timings,
}

/// A loaded model with its resident prompt cache, ready to generate.
pub struct Engine {
    pub(crate) gpu: Gpu,
    pub(crate) model: Model,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) template: Option<ChatTemplate>,
    /// The KV pages and the index of the prefixes they hold.
    cache: ResidentCache,
    history: History,
    /// Token ids that end a turn.
    stop_ids: Vec<u32>,
    /// Temperature sampling reads the top of the logits first (`set_top_sampling`).
    top_sampling: bool,
    /// Temperature draws answered from the top, and from the whole row (`sampling_reads`).
    draws: (u64, u64),
    /// The grammar compiler for constrained answers, built at the first one.
    grammars: Option<Grammars>,
    /// Tool call ids made so far (they number the `call_…` ids).
    calls_made: u64,
    /// Constrained decoding: tokens chosen, and milliseconds spent computing their masks.
    masks: (u64, f64),
}

/// A grammar a generation follows: from its first token, or once the output contains `after`
/// (`tool_choice: "auto"`: from a tool call's opening tag on).
#[derive(Debug)]
pub struct Constrained {
    /// The grammar's state.
    pub constraint: Constraint,
    /// The text that starts it; `None`: it holds from the first token.
    pub after: Option<String>,
    /// Whether stop strings end the answer while the grammar holds (a JSON answer: yes; tool
    /// calls: no).
    pub stop_strings: bool,
}

/// Every string of a JSON value, object keys included, at any depth.
fn json_strings<'v>(v: &'v serde_json::Value, out: &mut Vec<&'v str>) {
    match v {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(a) => a.iter().for_each(|x| json_strings(x, out)),
        serde_json::Value::Object(m) => m.iter().for_each(|(k, x)| {
            out.push(k);
            json_strings(x, out)
        }),
        _ => {}
    }
}

impl Engine {
    /// Loads a GGUF model (held whole in memory) onto `gpu` and allocates its KV pool.
    pub async fn load(gpu: Gpu, file: &[u8], opts: EngineOptions) -> Result<Engine> {
        Self::load_from(gpu, &Gguf::parse(file)?, &file, opts, &mut |_, _| {}).await
    }

    /// Loads the model whose parsed header is `g`, reading its tensors one at a time from `file`
    /// ([`Model::load_from`]), and reporting `progress(uploaded, total)` bytes of weights as they
    /// reach the GPU.
    pub async fn load_from(
        gpu: Gpu,
        g: &Gguf,
        file: &dyn TensorBytes,
        opts: EngineOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Engine> {
        // The same steps, in the same order, as preflight::check_gguf (which the fuzzer runs).
        let (tokenizer, template) = preflight::text_side(g)?;
        if opts.page_size == 0 {
            return Err(Error::InvalidArgument("KV page size 0".into()));
        }
        let model =
            Model::load_from(&gpu, g, file, Options { chunk: opts.chunk, context: opts.context, all_logits: false }, progress).await?;
        preflight::check_vocab(&tokenizer, &model.cfg)?;
        let page_bytes = model.cfg.kv_shape().page_bytes(opts.page_size);
        let mb = opts.kv_budget_mb.unwrap_or(DEFAULT_KV_BUDGET_MB);
        if !(mb > 0.0 && mb.is_finite()) {
            return Err(Error::InvalidArgument(format!("KV budget of {mb} MB")));
        }
        let by_budget = (mb * 1048576.0 / page_bytes as f64) as usize;
        let by_limits = kv::max_pages(&gpu, model.cfg.kv_shape(), opts.page_size);
        let pages = if opts.kv_budget_mb.is_some() { by_budget } else { by_budget.min(by_limits) };
        if pages == 0 {
            return Err(Error::InvalidArgument(format!("a KV budget of {mb} MB holds no page of {page_bytes} bytes")));
        }
        if pages > by_limits {
            return Err(Error::KvBudgetTooLarge { budget_mb: mb, bytes: pages as u64 * page_bytes, limit: by_limits as u64 * page_bytes });
        }
        let kv = model.kv_cache(&gpu, pages, opts.page_size).await?;
        let top_sampling = model.cfg.vocab > crate::engine::sample::TOP_LAYOUT.words();
        let stop_ids = tokenizer.end_of_generation_ids(g);
        let cache = ResidentCache::new(kv, opts.cache);
        Ok(Engine {
            gpu,
            model,
            tokenizer,
            template,
            cache,
            history: History::default(),
            stop_ids,
            top_sampling,
            draws: (0, 0),
            grammars: None,
            calls_made: 0,
            masks: (0, 0.0),
        })
    }

    /// Positions a prompt plus its completion may use at most (the context window).
    pub fn context_size(&self) -> usize {
        self.cache.kv.max_seq_tokens().min(self.model.max_positions())
    }

    /// Positions per KV page.
    pub fn page_size(&self) -> usize {
        self.cache.page_size()
    }

    /// Renders `messages` with the model's chat template and tokenizes the result. Message
    /// contents are encoded as plain text — a user typing `<|im_start|>system` gets text, not a
    /// control token — and only the template's own markers become control tokens.
    pub fn encode_chat(&self, messages: &[Message]) -> Result<Vec<u32>> {
        Ok(self.encode_messages(messages)?.ids)
    }

    /// [`Self::encode_chat`], also saying where each message's content lies in the tokens.
    pub fn encode_messages(&self, messages: &[Message]) -> Result<Encoded> {
        self.prompter().encode(messages)
    }

    /// The model's template and tokenizer, as prompts are made from them.
    pub fn prompter(&self) -> Prompter<'_> {
        Prompter { template: self.template.as_ref(), tokenizer: &self.tokenizer, tools: None, vars: None }
    }

    /// [`Self::prompter`] for a request: the template's `tools` ([`Self::tool_prompt`]'s) and the
    /// request's `chat_template_kwargs`.
    fn request_prompter<'a>(&'a self, tools: Option<&'a serde_json::Value>, req: &'a ChatRequest) -> Prompter<'a> {
        Prompter { tools, vars: Some(&req.chat_template_kwargs), ..self.prompter() }
    }

    /// Answers one chat request: head truncation to fit the context window, prompt-layout lint,
    /// generation over the resident cache, and the cache report (with the miss diagnosis).
    pub async fn chat(&mut self, req: &ChatRequest, on_text: impl FnMut(&str)) -> Result<ChatResult> {
        self.chat_with(req, None, on_text).await
    }

    /// [`Self::chat`] that `abort` can stop between tokens.
    pub async fn chat_with(&mut self, req: &ChatRequest, abort: Option<AbortSignal>, mut on_text: impl FnMut(&str)) -> Result<ChatResult> {
        self.chat_deltas(req, abort, |d| {
            if let Delta::Text(t) = d {
                on_text(&t)
            }
        })
        .await
    }

    /// The grammar compiler for this model's vocabulary (built at the first call).
    pub fn grammars(&mut self) -> Result<&Grammars> {
        if self.grammars.is_none() {
            self.grammars = Some(Grammars::new(&self.tokenizer, self.model.cfg.vocab, &self.stop_ids)?);
        }
        self.grammars.as_ref().ok_or_else(|| Error::InvalidArgument("no grammar compiler".into()))
    }

    /// Constrained tokens chosen so far, and the milliseconds their masks took.
    pub fn mask_stats(&self) -> (u64, f64) {
        self.masks
    }

    /// The messages a request's prompt is rendered from, the template's `tools`, and for each of
    /// those messages the request's messages it holds ([`Part`]s; none for the tools' system
    /// message put first for a template that takes no tools).
    fn tool_prompt(&self, req: &ChatRequest) -> (Vec<Message>, Option<serde_json::Value>, Vec<Vec<Part>>) {
        let native = self.template.as_ref().is_some_and(|t| tools::template_takes_tools(t.source()));
        let uses = !req.tools.is_empty() || req.messages.iter().any(|m| !m.tool_calls.is_empty() || m.role == "tool");
        let whole = |i: usize, m: &Message| Part { message: i, at: 0, len: m.content.len(), extent: m.content.len() };
        let each: Vec<Vec<Part>> = req.messages.iter().enumerate().map(|(i, m)| vec![whole(i, m)]).collect();
        if !uses {
            return (req.messages.clone(), None, each);
        }
        if native {
            // (Checked by `check_tool_text`: the template writes these as its own text.)
            let tools = (!req.tools.is_empty()).then(|| serde_json::Value::Array(req.tools.iter().map(ToolSpec::template_value).collect()));
            return (req.messages.clone(), tools, each);
        }
        // The convention (text::tools): the tools at the end of the first system message, calls as
        // the assistant's text, results as user turns (the results of consecutive tool messages,
        // a parallel call's, in one: templates that require alternating roles refuse two user
        // turns in a row).
        let mut out: Vec<Message> = Vec::with_capacity(req.messages.len() + 1);
        let mut parts: Vec<Vec<Part>> = Vec::with_capacity(req.messages.len() + 1);
        if !req.tools.is_empty() {
            let block = tools::tools_system_text(&req.tools);
            match req.messages.first() {
                Some(m) if m.role == "system" => {}
                _ => {
                    out.push(Message::new("system", block.clone()));
                    parts.push(Vec::new());
                }
            }
        }
        const OPEN: &str = "<tool_response>\n";
        let mut after_result = false;
        for (i, m) in req.messages.iter().enumerate() {
            // The tools' text after a system message is hotprefix's, as the added message is; a
            // call after an assistant's content is the message's.
            let mut part = whole(i, m);
            if m.role == "tool" {
                let wrapped = format!("{OPEN}{}\n</tool_response>", m.content);
                if let (true, Some(prev), Some(prev_parts)) = (after_result, out.last_mut(), parts.last_mut()) {
                    // One turn: pinned if any of its results is (none is dropped alone).
                    prev.pinned |= m.pinned;
                    prev.content.push('\n');
                    prev_parts.push(Part { at: prev.content.len() + OPEN.len(), ..part });
                    prev.content.push_str(&wrapped);
                    continue;
                }
                let mut m = m.clone();
                m.role = "user".into();
                m.tool_call_id = None;
                m.content = wrapped;
                out.push(m);
                parts.push(vec![Part { at: OPEN.len(), ..part }]);
                after_result = true;
                continue;
            }
            after_result = false;
            let mut m = m.clone();
            if i == 0 && m.role == "system" && !req.tools.is_empty() {
                m.content = format!("{}\n\n{}", m.content, tools::tools_system_text(&req.tools));
            }
            if !m.tool_calls.is_empty() {
                for c in std::mem::take(&mut m.tool_calls) {
                    let sep = if m.content.is_empty() || m.content.ends_with('\n') { "" } else { "\n" };
                    m.content = format!(
                        "{}{sep}{}\n{{\"name\": {}, \"arguments\": {}}}\n{}",
                        m.content,
                        tools::CALL_OPEN,
                        serde_json::Value::String(c.function.name),
                        c.function.arguments,
                        tools::CALL_CLOSE
                    );
                }
                part.extent = m.content.len();
            }
            out.push(m);
            parts.push(vec![part]);
        }
        (out, None, parts)
    }

    /// The prompt a chat request runs (before head truncation): its messages rendered with the
    /// model's template, its tools included, and where each of its messages' contents lies.
    pub fn encode_request(&self, req: &ChatRequest) -> Result<Encoded> {
        let (messages, tools_value, parts) = self.tool_prompt(req);
        let prompter = self.request_prompter(tools_value.as_ref(), req);
        let enc = prompter.encode(&messages)?;
        let all: Vec<usize> = (0..messages.len()).collect();
        Ok(self.regroup(&enc, &all, &messages, &parts).0)
    }

    /// The places of the request's messages ([`Encoded::regroup`]) in the encoding of the
    /// prompt's messages `kept` of `messages`, made of `parts` ([`Self::tool_prompt`]), and
    /// their indices in the request.
    fn regroup(&self, enc: &Encoded, kept: &[usize], messages: &[Message], parts: &[Vec<Part>]) -> (Encoded, Vec<usize>) {
        let contents: Vec<&str> = kept.iter().filter_map(|&m| messages.get(m)).map(|m| m.content.as_str()).collect();
        let parts: Vec<&[Part]> = kept.iter().filter_map(|&m| parts.get(m)).map(Vec::as_slice).collect();
        enc.regroup(&contents, &parts, &self.tokenizer)
    }

    /// A template that renders the tools writes their names, descriptions and schemas as its own
    /// text, whose control-token text becomes control tokens: a tool whose text holds one (or the
    /// private-use characters the prompt encoder marks fields with) is refused, so that no tool
    /// definition can forge a turn.
    fn check_tool_text(&self, req: &ChatRequest) -> Result<()> {
        for (i, t) in req.tools.iter().enumerate() {
            let value = t.template_value();
            let mut texts = Vec::new();
            json_strings(&value, &mut texts);
            self.check_template_text(&format!("tools[{i}]"), &texts)?;
        }
        Ok(())
    }

    /// `chat_template_kwargs`' strings (keys and values, at any depth) are written by the template
    /// as its own text too: [`Self::check_template_text`].
    fn check_template_vars(&self, req: &ChatRequest) -> Result<()> {
        for (k, v) in &req.chat_template_kwargs {
            let mut texts = vec![k.as_str()];
            json_strings(v, &mut texts);
            self.check_template_text(&format!("chat_template_kwargs.{k}"), &texts)?;
        }
        Ok(())
    }

    /// Text of a request that the chat template writes as its own (a tool's definition, a
    /// template variable) may hold no control-token text (it would become a control token) and
    /// no field marker.
    fn check_template_text(&self, at: &str, texts: &[&str]) -> Result<()> {
        for text in texts {
            if let Some(c) = self.tokenizer.find_control_text(text) {
                return Err(Error::InvalidArgument(format!(
                    "{at} holds the control-token text {c:?}, which the chat template would write as a control token"
                )));
            }
            if text.contains(crate::text::prompt::MARKERS) {
                return Err(Error::InvalidArgument(format!("{at} holds the private-use characters U+E000/U+E001")));
            }
        }
        Ok(())
    }

    /// The grammar a request's answer follows: its `response_format`, or its tool calls.
    fn constraint_of(&mut self, req: &ChatRequest) -> Result<Option<Constrained>> {
        // With tool_choice "required" or a named function the whole answer is tool calls, held by
        // the grammar, and stop strings do not cut a call's arguments (under "auto" they end the
        // text around a call): a stop string would never apply.
        if req.response_format == ResponseFormat::Text
            && matches!(req.tool_choice, ToolChoice::Required | ToolChoice::Function(_))
            && !req.stop.to_vec().is_empty()
        {
            return Err(Error::InvalidArgument(
                "stop with tool_choice \"required\" or a named function: the answer is then tool calls, which stop strings do not cut; refused rather than ignored".into(),
            ));
        }
        let tools: Vec<&ToolSpec> = req.tools.iter().collect();
        let (constraint, after) = match (&req.response_format, &req.tool_choice) {
            (ResponseFormat::JsonObject, _) => (self.grammars()?.json(tools::response_schema(None))?, None),
            (ResponseFormat::JsonSchema { schema, .. }, _) => (self.grammars()?.json(tools::response_schema(schema.as_ref()))?, None),
            (ResponseFormat::Text, ToolChoice::Required) => {
                (self.grammars()?.lark(&tools::calls_grammar(&tools, req.parallel_tool_calls, false))?, None)
            }
            (ResponseFormat::Text, ToolChoice::Function(name)) => {
                let one: Vec<&ToolSpec> = tools.iter().copied().filter(|t| &t.name == name).collect();
                (self.grammars()?.lark(&tools::calls_grammar(&one, false, false))?, None)
            }
            (ResponseFormat::Text, ToolChoice::Auto) => {
                (self.grammars()?.lark(&tools::calls_grammar(&tools, req.parallel_tool_calls, true))?, Some(tools::CALL_OPEN.to_string()))
            }
            (ResponseFormat::Text, ToolChoice::None) => return Ok(None),
        };
        let stop_strings = req.response_format != ResponseFormat::Text;
        Ok(Some(Constrained { constraint, after, stop_strings }))
    }

    /// [`Self::chat_with`], streaming [`Delta`]s: text, and each tool call's name and arguments as
    /// they are generated.
    pub async fn chat_deltas(
        &mut self,
        req: &ChatRequest,
        abort: Option<AbortSignal>,
        mut on_delta: impl FnMut(Delta),
    ) -> Result<ChatResult> {
        if req.messages.is_empty() {
            return Err(Error::InvalidArgument("request: no messages".into()));
        }
        let (messages, tools_value, parts) = self.tool_prompt(req);
        if tools_value.is_some() {
            self.check_tool_text(req)?;
        }
        self.check_template_vars(req)?;
        let context = self.context_size();
        let prompter = self.request_prompter(tools_value.as_ref(), req);
        // A kept history starts at one of the request's user turns: never at a tool's result,
        // which the tools convention renders as a user turn (its call would be cut off).
        let turns: Vec<bool> = parts.iter().map(|p| p.first().is_some_and(|p| req.messages[p.message].role == "user")).collect();
        let (enc, kept) = prompter.fit(&messages, &turns, req.max_tokens, context)?;
        // Positions and warnings name the request's own messages: the tools' system message is
        // none of them (it counts as the template's text), a tool's result is the text in its tags.
        let (enc, kept) = self.regroup(&enc, &kept, &messages, &parts);
        let constrained = if req.max_tokens > 0 { self.constraint_of(req)? } else { None };
        let salt = req.cache_salt.clone().unwrap_or_default();
        let seen = Seen::of(&req.messages, &req.tools);
        let warnings = self.history.lint(&salt, &req.messages, &seen, &kept, &enc, &self.tokenizer);
        let params = GenerateParams {
            max_tokens: req.max_tokens,
            sampling: req.sampling(),
            stop: req.stop.to_vec(),
            cache_salt: salt.clone(),
            abort,
        };
        // With tools, the text is split into content and calls as it streams.
        let split = req.tool_choice != ToolChoice::None;
        let mut splitter = tools::CallSplitter::default();
        let mut ids: Vec<String> = Vec::new();
        let first_id = self.calls_made;
        let deliver = |pieces: Vec<Piece>, ids: &mut Vec<String>, on_delta: &mut dyn FnMut(Delta)| {
            for p in pieces {
                match p {
                    Piece::Text(t) => on_delta(Delta::Text(t)),
                    Piece::Call { index, name } => {
                        let id = call_id(first_id + index as u64);
                        ids.push(id.clone());
                        on_delta(Delta::Call { index, id, name });
                    }
                    Piece::Args { index, text } => on_delta(Delta::Arguments { index, text }),
                }
            }
        };
        let g = self
            .generate_constrained(&enc.ids, &params, constrained, |t| {
                if split {
                    deliver(splitter.push(t), &mut ids, &mut on_delta);
                } else {
                    on_delta(Delta::Text(t.to_string()));
                }
            })
            .await?;
        if split {
            deliver(splitter.finish(), &mut ids, &mut on_delta);
        }
        self.history.record(&salt, seen);
        let diverged_at = g.divergence.as_ref().map(|d| self.prompter().locate(d, &enc, &kept, &req.messages));
        let (text, tool_calls) = match split {
            false => (g.text, Vec::new()),
            true => {
                let (text, calls) = tools::split_calls(&g.text);
                let calls: Vec<ToolCall> = calls
                    .into_iter()
                    .enumerate()
                    .map(|(i, (name, arguments))| ToolCall {
                        id: ids.get(i).cloned().unwrap_or_else(|| call_id(first_id + i as u64)),
                        kind: "function".into(),
                        function: FunctionCall { name, arguments },
                    })
                    .collect();
                (text, calls)
            }
        };
        self.calls_made += tool_calls.len() as u64;
        if !tool_calls.is_empty() {
            // The follow-up request holds this turn as the template renders it before the tools'
            // results, which a constrained answer's tokens need not equal (another tokenization;
            // a template that renders a past turn otherwise): compute that rendering up to where
            // the first result goes now, so that the follow-up reuses all of it.
            let mut turn = req.messages.clone();
            let mut answer = Message::new("assistant", text.clone());
            answer.tool_calls = tool_calls.clone();
            turn.push(answer);
            // (A placeholder result: its place is where the real one's starts.)
            let mut result = Message::new("tool", "0");
            result.tool_call_id = Some(tool_calls[0].id.clone());
            turn.push(result);
            let (messages, tools_value, parts) = self.tool_prompt(&ChatRequest { messages: turn, ..req.clone() });
            let prompter = self.request_prompter(tools_value.as_ref(), req);
            // Best effort: the answer stands whatever happens here; skipped after head truncation
            // (the next prompt is cut otherwise) or an abort.
            let whole = kept.len() == req.messages.len();
            if let (Ok(next), true, false) = (prompter.encode(&messages), whole, g.finish == Finish::Abort) {
                // (The result's own text: a tag the convention writes before it is computed too.)
                let all: Vec<usize> = (0..messages.len()).collect();
                let upto = self.regroup(&next, &all, &messages, &parts).0.contents.last().map_or(0, |r| r.start);
                if upto > 0 && upto < self.context_size() {
                    let params = GenerateParams { max_tokens: 0, cache_salt: salt.clone(), ..GenerateParams::default() };
                    let _ = self.generate(&next.ids[..upto], &params, |_| {}).await;
                }
            }
        }
        let finish = match (g.finish, tool_calls.is_empty()) {
            (Finish::Stop, false) => "tool_calls",
            (f, _) => f.as_str(),
        };
        Ok(ChatResult {
            text,
            tool_calls,
            finish_reason: finish,
            usage: Usage {
                prompt_tokens: g.prompt_tokens,
                completion_tokens: g.tokens.len(),
                prompt_tokens_details: PromptTokensDetails { cached_tokens: g.cached_tokens },
            },
            tokens: g.tokens,
            timings: g.timings,
            cache: CacheReport { reused_tokens: g.reused_tokens, dropped_messages: req.messages.len() - kept.len(), diverged_at, warnings },
            prompt: enc.ids,
        })
    }

    /// After a [`Error::CacheCorrupt`]: the cache is rebuilt from scratch ([`Self::clear_cache`])
    /// and the error says so.
    fn recover<T>(&mut self, r: Result<T>) -> Result<T> {
        match r {
            Err(Error::CacheCorrupt(m)) => {
                self.clear_cache();
                Err(Error::CacheCorrupt(format!("{m}; the cache was cleared and rebuilt, so later requests start cold")))
            }
            r => r,
        }
    }

    /// The GPU it runs on (its adapter, counters and profiler).
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The model (its shape, kernels and lower-level forward passes).
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Switches the model's kernel variant or decode fusion ([`Model::use_kernels`],
    /// [`Model::fuse_decode`]): benchmarks and tests of each variant.
    pub fn model_mut(&mut self) -> &mut Model {
        &mut self.model
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The model's chat template, if its file has one.
    pub fn template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }

    /// The cache's pages and resident prefixes.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Checks the page accounting: every page's holder count equals the index's references (no
    /// request runs between calls, so the index is the only holder), and the free list is exact.
    pub fn audit_cache(&self) -> Result<()> {
        self.cache.audit()
    }

    fn cache_shape(&self, model: &str) -> persist::Shape {
        let cfg = &self.model.cfg;
        persist::Shape {
            model: model.to_string(),
            kv: cfg.kv_shape(),
            page_size: self.cache.page_size(),
            long_rope: self.model.long_rope().map(str::to_string),
            // The whole adapter info (browsers leave its name empty but give vendor and device).
            kernels: format!("{:?}; {:?} kernels", self.gpu.info, self.model.kernels()),
        }
    }

    /// Every resident prefix (salt, token ids) and its KV pages as a saved-cache file
    /// (`persist`); `model` names the model file (the browser package passes its sha256), and a
    /// restore checks it. Pages shared by several prefixes are saved once. The whole file in
    /// memory: [`Self::save_cache_to`] streams it instead.
    pub async fn save_cache(&self, model: &str) -> Result<Vec<u8>> {
        let out = std::cell::RefCell::new(Vec::new());
        self.save_cache_to(model, |chunk| {
            out.borrow_mut().extend_from_slice(&chunk);
            std::future::ready(Ok(()))
        })
        .await?;
        Ok(out.into_inner())
    }

    /// [`Self::save_cache`], handing the file to `write` in order, a chunk at a time: the header,
    /// then the pages in batches of at most [`SAVE_BATCH_BYTES`], then the checksum. Memory
    /// beyond the header is one batch, whatever the cache's size. Returns the file's length.
    pub async fn save_cache_to<F, W>(&self, model: &str, write: W) -> Result<u64>
    where
        W: FnMut(Vec<u8>) -> F,
        F: std::future::Future<Output = Result<()>>,
    {
        self.cache.save_to(&self.gpu, self.cache_shape(model), write).await
    }

    /// Makes the prefixes of a saved-cache file ([`Self::save_cache`]) resident again, most
    /// recently used first, as many as free and evictable pages hold. A file for another model,
    /// shape or layout version, or a corrupt one, is refused with [`Error::CacheFile`] and nothing
    /// changes. All or nothing: a restore that fails later (the GPU, the page accounting) makes
    /// none of the file's prefixes resident; only the idle prefixes it evicted to make room for
    /// them stay evicted.
    pub async fn restore_cache(&mut self, file: &[u8], model: &str) -> Result<Restored> {
        let shape = self.cache_shape(model);
        let (vocab, max) = (self.model.cfg.vocab, self.context_size());
        let r = self.cache.restore(&self.gpu, file, &shape, vocab, max).await;
        self.recover(r)
    }

    /// Forgets every resident prefix (and the lint's request history). After an accounting
    /// error this is the way back: the pool is rebuilt from scratch.
    pub fn clear_cache(&mut self) {
        self.cache.clear();
        self.history = History::default();
    }

    /// **Test only**: records a page-accounting fault, as a bug would (tests of the recovery).
    #[cfg(feature = "test-support")]
    #[doc(hidden)]
    pub fn corrupt_for_test(&mut self) {
        self.cache.corrupt_for_test();
    }
}
