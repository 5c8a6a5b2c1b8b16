//! The engine: model + tokenizer + chat template + the resident prompt cache, and `generate()`.
//!
//! Every request's K/V stays resident after it ends, indexed by its tokens (`PrefixIndex`). A new
//! request looks up the longest resident prefix of its prompt, shares the completely filled pages
//! of that prefix by reference, copies the shared part of a partly matching page into a page of its
//! own (copy-on-write, one small kernel: a sequence never writes into a page another holder can
//! read), and computes only the rest. When the KV budget runs out, unreferenced prefixes are
//! evicted leaf-first, least recently used; pages a running request holds never are.

pub mod sample;

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::api::{self, CacheReport, ChatRequest, ChatResult, DivergedAt, PromptTokensDetails, Usage};
use crate::chat::{ChatTemplate, Message};
use crate::diagnose::{History, Seen};
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::gpu::Gpu;
use crate::kv::{self, KvCache, Sequence};

/// Most bytes of KV pages [`Engine::save_cache_to`] reads back and hands over at once.
pub const SAVE_BATCH_BYTES: u64 = 8 << 20;

/// Greedy steps queued on the GPU per CPU–GPU wait (`Model::decode_greedy`). Steps past an
/// end-of-turn are wasted, so not more: 1/8 of a wait a token already hides the round trip.
const DECODE_AHEAD: usize = 8;
use crate::model::{Logits, Model, Options, TensorBytes};
use crate::ops;
use crate::persist;
use crate::prefix::PrefixIndex;
use crate::preflight;
/// Where a request stopped matching the resident prefix ([`Generation::divergence`]), and a
/// resident prefix ([`CacheStats::prefixes`]).
pub use crate::prefix::{Divergence, Resident};
use crate::sample::{Sampler, SamplingParams, TOP_WINDOW};
use crate::selftest::now_ms;
use crate::tokenizer::{StreamDecoder, Tokenizer};
use crate::truncate;

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

/// The KV cache's state, for `stats`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CacheStats {
    /// Pages in the KV pool (the KV budget).
    pub pages_total: usize,
    /// Pages held (between requests, by the resident prefixes).
    pub pages_used: usize,
    /// Pages nobody holds.
    pub pages_free: usize,
    /// Positions per page.
    pub page_size: usize,
    /// Bytes of one page: K and V of every layer.
    pub page_bytes: u64,
    /// Bytes of the whole pool (`pages_total × page_bytes`).
    pub bytes_total: u64,
    /// Bytes of the pages held (`pages_used × page_bytes`).
    pub bytes_used: u64,
    /// Pages evicted since the engine was loaded.
    pub evicted_pages: u64,
    /// Resident prefixes (salt, tokens, pages, last use), most recent first.
    pub prefixes: Vec<Resident>,
}

/// What [`Engine::restore_cache`] made resident.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Restored {
    /// Prefixes made resident.
    pub prefixes: usize,
    /// Their tokens, summed over the prefixes.
    pub tokens: usize,
    /// Pages filled from the file (a page several prefixes share counts once).
    pub pages: usize,
    /// Prefixes left out: longer than the context window, or no room in the KV budget.
    pub skipped: usize,
}

/// A prompt encoded from messages: the token ids and where each message's content lies.
#[derive(Clone, Debug)]
pub struct Encoded {
    /// The prompt's token ids.
    pub ids: Vec<u32>,
    /// Token range of each message's content.
    pub contents: Vec<std::ops::Range<usize>>,
}

/// The markers a message's fields are rendered as (`CONTENT` or `NAME`, the message's index,
/// `END`): private-use characters, so that no template writes them itself.
const CONTENT: char = '\u{E000}';
const NAME: char = '\u{E002}';
const END: char = '\u{E001}';

fn marker(kind: char, i: usize) -> String {
    format!("{kind}{i}{END}")
}

/// A loaded model with its resident prompt cache, ready to generate.
pub struct Engine {
    pub(crate) gpu: Gpu,
    pub(crate) model: Model,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) template: Option<ChatTemplate>,
    kv: KvCache,
    index: PrefixIndex,
    history: History,
    cache: bool,
    evicted: u64,
    /// Token ids that end a turn.
    stop_ids: Vec<u32>,
    /// Temperature sampling reads the top of the logits first (`set_top_sampling`).
    top_sampling: bool,
    /// Temperature draws answered from the top, and from the whole row (`sampling_reads`).
    draws: (u64, u64),
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
        let model = Model::load_from(&gpu, g, file, Options { chunk: opts.chunk, context: opts.context, all_logits: false }, progress).await?;
        preflight::check_vocab(&tokenizer, &model.cfg)?;
        let page_bytes = kv::page_bytes(&model.cfg, opts.page_size);
        let mb = opts.kv_budget_mb.unwrap_or(DEFAULT_KV_BUDGET_MB);
        if !(mb > 0.0 && mb.is_finite()) {
            return Err(Error::InvalidArgument(format!("KV budget of {mb} MB")));
        }
        let by_budget = (mb * 1048576.0 / page_bytes as f64) as usize;
        let by_limits = kv::max_pages(&gpu, &model.cfg, opts.page_size);
        let pages = if opts.kv_budget_mb.is_some() { by_budget } else { by_budget.min(by_limits) };
        if pages == 0 {
            return Err(Error::InvalidArgument(format!("a KV budget of {mb} MB holds no page of {page_bytes} bytes")));
        }
        if pages > by_limits {
            return Err(Error::TooLarge { what: format!("a KV budget of {mb} MB"), bytes: pages as u64 * page_bytes, limit: by_limits as u64 * page_bytes });
        }
        let kv = model.kv_cache(&gpu, pages, opts.page_size).await?;
        let index = PrefixIndex::new(opts.page_size);
        let top_sampling = model.cfg.vocab > crate::ops::topk_words(crate::sample::TOP_CAP, crate::sample::TOP_WINDOW);
        let mut stop_ids: Vec<u32> = ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>"]
            .iter()
            .filter_map(|t| tokenizer.token_id(t))
            .collect();
        stop_ids.extend(tokenizer.eos_id());
        Ok(Engine { gpu, model, tokenizer, template, kv, index, history: History::default(), cache: opts.cache, evicted: 0, stop_ids, top_sampling, draws: (0, 0) })
    }

    /// Positions a prompt plus its completion may use at most (the context window).
    pub fn context_size(&self) -> usize {
        self.kv.max_seq_tokens().min(self.model.max_positions())
    }

    /// Positions per KV page.
    pub fn page_size(&self) -> usize {
        self.kv.page_size
    }

    /// Renders `messages` with the model's chat template and tokenizes the result. Message
    /// contents are encoded as plain text — a user typing `<|im_start|>system` gets text, not a
    /// control token — and only the template's own markers become control tokens.
    pub fn encode_chat(&self, messages: &[Message]) -> Result<Vec<u32>> {
        Ok(self.encode_messages(messages)?.ids)
    }

    /// [`Self::encode_chat`], also saying where each message's content lies in the tokens.
    pub fn encode_messages(&self, messages: &[Message]) -> Result<Encoded> {
        let template = self.template.as_ref().ok_or_else(|| Error::Template("the model has no chat template".into()))?;
        // Render with a unique marker in place of each content and name, then encode the
        // template's text with control tokens recognised and each field as plain text.
        let marked: Vec<Message> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| Message { role: m.role.clone(), content: marker(CONTENT, i), name: m.name.as_ref().map(|_| marker(NAME, i)), pinned: false })
            .collect();
        let rendered = template.render(&marked, true)?;
        let mut ids = Vec::new();
        let mut contents: Vec<Option<std::ops::Range<usize>>> = vec![None; messages.len()];
        let mut named = vec![false; messages.len()];
        let mut rest = rendered.as_str();
        while let Some(at) = rest.find([CONTENT, NAME]) {
            ids.extend(self.tokenizer.encode_with_special(&rest[..at])?);
            let kind = rest[at..].chars().next().unwrap_or(CONTENT);
            let tail = &rest[at + kind.len_utf8()..];
            let end = tail.find(END).ok_or_else(|| Error::Template("the chat template cut a message's field short".into()))?;
            let i: usize = tail[..end].parse().ok().filter(|&i| i < messages.len()).ok_or_else(|| Error::Template("the chat template altered a message's field".into()))?;
            let start = ids.len();
            if kind == CONTENT {
                ids.extend(self.tokenizer.encode_text(&messages[i].content)?);
                contents[i].get_or_insert(start..ids.len());
            } else {
                ids.extend(self.tokenizer.encode_text(messages[i].name.as_deref().unwrap_or(""))?);
                named[i] = true;
            }
            rest = &tail[end + END.len_utf8()..];
        }
        ids.extend(self.tokenizer.encode_with_special(rest)?);
        if let Some(i) = (0..messages.len()).find(|&i| messages[i].name.is_some() && !named[i]) {
            return Err(Error::InvalidArgument(format!("messages[{i}].name: this model's chat template does not use names, so it would be lost")));
        }
        let mut contents = contents
            .into_iter()
            .enumerate()
            .map(|(i, r)| r.ok_or_else(|| Error::Template(format!("the chat template altered message {i}'s content"))))
            .collect::<Result<Vec<_>>>()?;
        // `tokenizer.ggml.add_bos_token`: the model was trained with BOS first. Templates that
        // write it themselves already start with it; the others get it here.
        if let (true, Some(bos)) = (self.tokenizer.add_bos(), self.tokenizer.bos_id()) {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
                contents.iter_mut().for_each(|r| *r = r.start + 1..r.end + 1);
            }
        }
        Ok(Encoded { ids, contents })
    }

    /// Answers one chat request: head truncation to fit the context window, prompt-layout lint,
    /// generation over the resident cache, and the cache report (with the miss diagnosis).
    pub async fn chat(&mut self, req: &ChatRequest, on_text: impl FnMut(&str)) -> Result<ChatResult> {
        self.chat_with(req, None, on_text).await
    }

    /// [`Self::chat`] that `abort` can stop between tokens.
    pub async fn chat_with(&mut self, req: &ChatRequest, abort: Option<AbortSignal>, on_text: impl FnMut(&str)) -> Result<ChatResult> {
        if req.messages.is_empty() {
            return Err(Error::InvalidArgument("request: no messages".into()));
        }
        let (enc, kept) = self.fit(&req.messages, req.max_tokens)?;
        let salt = req.cache_salt.clone().unwrap_or_default();
        let seen = Seen::of(&req.messages);
        let warnings = self.history.lint(&salt, &req.messages, &seen, &kept, &enc, &self.tokenizer);
        let params = GenerateParams { max_tokens: req.max_tokens, sampling: req.sampling(), stop: req.stop.to_vec(), cache_salt: salt.clone(), abort };
        let g = self.generate(&enc.ids, &params, on_text).await?;
        self.history.record(&salt, seen);
        let diverged_at = g.divergence.as_ref().map(|d| self.locate(d, &enc, &kept, &req.messages));
        Ok(ChatResult {
            text: g.text,
            finish_reason: g.finish.as_str(),
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

    /// Head truncation (`truncate::plan`): the messages kept, encoded, and their indices.
    fn fit(&self, messages: &[Message], max_tokens: usize) -> Result<(Encoded, Vec<usize>)> {
        let context = self.context_size();
        let room = context.checked_sub(max_tokens).ok_or(Error::ContextFull { needed: max_tokens, capacity: context })?;
        let full = self.encode_messages(messages)?;
        if full.ids.len() <= room {
            return Ok((full, (0..messages.len()).collect()));
        }
        let mut prev_end = 0;
        let items: Vec<truncate::Item> = messages
            .iter()
            .zip(&full.contents)
            .map(|(m, r)| {
                let tokens = r.end - prev_end;
                prev_end = r.end;
                truncate::Item { tokens, pinned: m.pinned || m.role == "system", is_user: m.role == "user" }
            })
            .collect();
        let tail = full.ids.len() - prev_end;
        // Templates can render a message differently by its neighbours; move the cut a step
        // further until the re-rendered prompt fits.
        for extra in 0..8 {
            let plan = truncate::plan(&items, tail, room, extra)?;
            let kept: Vec<Message> = plan.keep.iter().map(|&i| messages[i].clone()).collect();
            let enc = self.encode_messages(&kept)?;
            if enc.ids.len() <= room {
                return Ok((enc, plan.keep));
            }
        }
        Err(Error::ContextFull { needed: full.ids.len() + max_tokens, capacity: context })
    }

    /// Where a divergence falls in the request: message, role, character, and text snippets.
    fn locate(&self, d: &Divergence, enc: &Encoded, kept: &[usize], messages: &[Message]) -> DivergedAt {
        const SNIPPET: usize = 12;
        let decode = |ids: &[u32]| self.tokenizer.decode(ids).unwrap_or_default();
        let end = (d.token + SNIPPET).min(enc.ids.len());
        let new = decode(&enc.ids[d.token.min(end)..end]);
        let resident = decode(&d.resident[..d.resident.len().min(SNIPPET)]);
        // In a message's content; a token before it is the template's framing (role headers, a
        // default system prompt the template adds), reported as no message.
        let hit = enc.contents.iter().position(|r| d.token < r.end).filter(|&k| d.token >= enc.contents[k].start);
        let (message, role, char) = match hit {
            Some(k) => {
                let r = &enc.contents[k];
                let char = decode(&enc.ids[r.start..d.token]).chars().count();
                let i = kept[k];
                (Some(i), Some(messages[i].role.clone()), char)
            }
            None => (None, None, 0),
        };
        DivergedAt { token: d.token, message, role, char, resident, new }
    }

    /// Generates from `prompt` over the resident cache, calling `on_text` with each piece of
    /// decoded text as it becomes final (valid UTF-8, never part of a stop string). The prompt's
    /// K/V, and the completion's, stay resident for later requests with the same salt.
    ///
    /// A page-accounting fault ([`Error::CacheCorrupt`], a bug) clears the cache before it is
    /// returned, and its message says so: later requests run cold instead of failing too.
    pub async fn generate(&mut self, prompt: &[u32], params: &GenerateParams, on_text: impl FnMut(&str)) -> Result<Generation> {
        let r = self.generate_over_cache(prompt, params, on_text).await;
        self.recover(r)
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

    async fn generate_over_cache(&mut self, prompt: &[u32], params: &GenerateParams, mut on_text: impl FnMut(&str)) -> Result<Generation> {
        let mut sampler = Sampler::new(params.sampling.clone())?;
        sampler.set_prompt_len(prompt.len());
        if prompt.is_empty() {
            return Err(Error::InvalidArgument("empty prompt".into()));
        }
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= self.model.cfg.vocab) {
            return Err(Error::InvalidArgument(format!("token id {bad} is outside the vocabulary of {}", self.model.cfg.vocab)));
        }
        let mut stops = StopMatcher::new(&params.stop)?;
        let needed = prompt.len().saturating_add(params.max_tokens);
        if needed > self.context_size() {
            return Err(Error::ContextFull { needed, capacity: self.context_size() });
        }
        self.kv.pool.borrow().check()?;
        let t0 = now_ms();
        let ps = self.kv.page_size;
        let mut m = if self.cache { self.index.lookup(&params.cache_salt, prompt) } else { Default::default() };
        let reused = m.tokens(ps);
        // A request that generates needs the last prompt token's logits: it is always computed.
        let decode = params.max_tokens > 0;
        m.limit(if decode { prompt.len() - 1 } else { prompt.len() }, ps);
        let cached = m.tokens(ps);
        let mut seq = self.kv.sequence(self.context_size());
        seq.adopt_prefix(&m.full_pages)?;
        // Every page this request may write, beyond those it shares, must be free or evictable.
        let written = prompt.len() + params.max_tokens.saturating_sub(1);
        let want = written.div_ceil(ps) - m.full_pages.len();
        let can = {
            let pool = self.kv.pool.borrow();
            pool.free() + self.index.evictable(&pool)
        };
        if want > can {
            return Err(Error::CacheFull { needed_pages: want, free_pages: can });
        }
        let t_prefill = now_ms();
        if let Some((src, n)) = m.partial {
            self.copy_partial(&mut seq, src, n).await?;
        }
        let rest = &prompt[cached..];
        let chunks: Vec<&[u32]> = rest.chunks(self.model.opts.chunk).collect();
        let is_aborted = || params.abort.as_ref().is_some_and(|a| a.is_aborted());
        let mut aborted = is_aborted();
        for (i, chunk) in chunks.iter().enumerate() {
            // An abort stops a long prefill between chunks too; what was computed stays valid.
            if aborted || is_aborted() {
                aborted = true;
                break;
            }
            let logits = if decode && i + 1 == chunks.len() { Logits::Last } else { Logits::None };
            self.ensure_free(seq.pages_needed(chunk.len()))?;
            self.model.forward(&self.gpu, &self.kv, &mut seq, chunk, logits).await?;
        }
        let mut out = Vec::new();
        // Prompt + completion so far: the repetition penalty's window, then what gets indexed.
        // Grown in place, not rebuilt.
        let mut recent = prompt.to_vec();
        let mut text = String::new();
        let mut finish = if aborted { Finish::Abort } else { Finish::Length };
        let mut steps = 0usize;
        let (t_first, t_end);
        if decode && !aborted {
            let mut next = self.pick(&mut sampler, prompt).await?;
            t_first = now_ms();
            let mut emitted = 0;
            let mut dec = StreamDecoder::new();
            let hold = stops.longest;
            // Greedy tokens decoded ahead on the GPU, not yet looked at (their steps are in `seq`).
            let mut ahead = std::collections::VecDeque::new();
            while out.len() < params.max_tokens {
                if self.stop_ids.contains(&next) {
                    finish = Finish::Stop;
                    break;
                }
                out.push(next);
                recent.push(next);
                text.push_str(&dec.push(&self.tokenizer, next));
                if let Some(cut) = stops.find(&text) {
                    text.truncate(cut);
                    finish = Finish::Stop;
                    break;
                }
                // Emit what can no longer become part of a stop string.
                let safe = floor_char_boundary(&text, text.len().saturating_sub(hold));
                if safe > emitted {
                    on_text(&text[emitted..safe]);
                    emitted = safe;
                }
                if params.abort.as_ref().is_some_and(|a| a.is_aborted()) {
                    finish = Finish::Abort;
                    break;
                }
                if out.len() == params.max_tokens {
                    break;
                }
                if ahead.is_empty() && sampler.is_greedy() {
                    // Queue several steps on the GPU, each fed the previous one's argmax, and read
                    // their tokens in one wait; steps past a stop are truncated below.
                    let n = DECODE_AHEAD.min(params.max_tokens - out.len());
                    self.ensure_free(seq.pages_needed(n))?;
                    ahead.extend(self.model.decode_greedy(&self.gpu, &self.kv, &mut seq, next, n).await?);
                }
                steps += 1;
                next = match ahead.pop_front() {
                    Some(id) if id as usize >= self.model.cfg.vocab => {
                        // The GPU argmax answers u32::MAX when every logit is NaN.
                        return Err(Error::Numerics("every logit of the row is NaN".into()));
                    }
                    Some(id) => id,
                    None => {
                        self.ensure_free(seq.pages_needed(1))?;
                        self.model.decode_step(&self.gpu, &self.kv, &mut seq, next).await?;
                        self.pick(&mut sampler, &recent).await?
                    }
                };
            }
            // Steps decoded ahead past a stop, an abort or an error are not part of the answer.
            if !ahead.is_empty() {
                let keep = seq.len() - ahead.len();
                seq.truncate(keep)?;
            }
            // At max_tokens an incomplete trailing character is flushed (as U+FFFD); after an
            // end-of-turn token or a stop string there is nothing more to say.
            if finish != Finish::Stop {
                text.push_str(&dec.finish());
            }
            if text.len() > emitted {
                on_text(&text[emitted..]);
            }
            t_end = now_ms();
        } else {
            self.gpu.finish().await?;
            t_first = now_ms();
            t_end = t_first;
        }
        // Keep what this request computed resident: the prompt and the completion tokens fed back.
        if self.cache {
            let pool = &mut self.kv.pool.borrow_mut();
            self.index.insert(pool, &params.cache_salt, &recent[..seq.len()], seq.pages())?;
        }
        drop(seq);
        self.kv.pool.borrow().check()?;
        let decode_s = (t_end - t_first) / 1e3;
        let timings = api::Timings {
            ttft_ms: t_first - t0,
            prefill_ms: t_first - t_prefill,
            decode_tok_s: if decode_s > 0.0 && steps > 0 { steps as f64 / decode_s } else { 0.0 },
        };
        Ok(Generation {
            text,
            tokens: out,
            prompt_tokens: prompt.len(),
            cached_tokens: cached,
            reused_tokens: reused,
            divergence: m.divergence,
            finish,
            timings,
        })
    }

    /// Copy-on-write of a partly matching page: the first `n` positions of `src` into a fresh
    /// page of `seq`, every layer. `src` is held while the copy is recorded, so eviction cannot
    /// take it.
    async fn copy_partial(&mut self, seq: &mut Sequence, src: u32, n: usize) -> Result<()> {
        self.kv.pool.borrow_mut().retain(src)?;
        let res = self.copy_partial_held(seq, src, n).await;
        let released = self.kv.pool.borrow_mut().release(src);
        res.and(released)
    }

    async fn copy_partial_held(&mut self, seq: &mut Sequence, src: u32, n: usize) -> Result<()> {
        self.ensure_free(1)?;
        let dst = self.kv.pool.borrow_mut().alloc().ok_or(Error::CacheFull { needed_pages: 1, free_pages: 0 })?;
        if let Err(e) = seq.push_written_page(dst, n) {
            self.kv.pool.borrow_mut().release(dst)?;
            return Err(e);
        }
        // From here the page is the sequence's: an error drops it with the sequence.
        let mut b = self.gpu.batch()?;
        for layer in &self.kv.layers {
            ops::kv_copy(&mut b, layer, src as usize, dst as usize, n)?;
        }
        b.submit().await
    }

    /// Makes `pages` pages free, evicting unreferenced prefixes least recently used first.
    fn ensure_free(&mut self, pages: usize) -> Result<()> {
        let pool = &mut self.kv.pool.borrow_mut();
        let free = pool.free();
        if free >= pages {
            return Ok(());
        }
        let freed = self.index.evict(pool, pages - free)?;
        self.evicted += freed as u64;
        if free + freed < pages {
            return Err(Error::CacheFull { needed_pages: pages, free_pages: free + freed });
        }
        Ok(())
    }

    /// Picks the next token from the last forward pass: the GPU's argmax (4 bytes read back) when
    /// sampling is greedy, otherwise the sampler over the top of the logits (a few KB) or, when
    /// the draw needs them, all of them.
    async fn pick(&mut self, sampler: &mut Sampler, recent: &[u32]) -> Result<u32> {
        if sampler.is_greedy() {
            let ids = self.model.read_argmax(&self.gpu, 1).await?;
            // The GPU argmax answers u32::MAX when every logit is NaN.
            return ids
                .first()
                .copied()
                .filter(|&id| (id as usize) < self.model.cfg.vocab)
                .ok_or_else(|| Error::Numerics("every logit of the row is NaN".into()));
        }
        if self.top_sampling {
            let temperature = sampler.params().temperature;
            let window = sampler.penalty_window(recent);
            if window.len() <= TOP_WINDOW {
                let top = self.model.read_top(&self.gpu, temperature, window).await?;
                if let Some(id) = sampler.sample_top(&top, recent)? {
                    self.draws.0 += 1;
                    return Ok(id);
                }
            }
        }
        self.draws.1 += 1;
        let mut logits = self.model.read_logits(&self.gpu, 1).await?;
        sampler.sample(&mut logits, recent)
    }

    /// How many temperature draws so far were answered from the top of the logits, and how many
    /// read the whole row.
    pub fn sampling_reads(&self) -> (u64, u64) {
        self.draws
    }

    /// Whether temperature sampling reads only the top of the logits (found on the GPU, a few KB:
    /// [`crate::sample::Top`]) and the whole row only when a draw needs it, or always the whole
    /// row. Both give the same tokens (up to f32 rounding of the softmax sum). On by default when
    /// a row is larger than the top (the default model: 196 KB against about 4 KB).
    pub fn set_top_sampling(&mut self, on: bool) {
        self.top_sampling = on;
    }

    /// The logits of the last forward pass's last row (for tests comparing cached and cold runs;
    /// valid after a `generate` with `max_tokens == 1`).
    pub async fn last_logits(&self) -> Result<Vec<f32>> {
        self.model.read_logits(&self.gpu, 1).await
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
        let pool = self.kv.pool.borrow();
        let page_bytes = kv::page_bytes(&self.model.cfg, self.kv.page_size);
        CacheStats {
            pages_total: pool.total(),
            pages_used: pool.used(),
            pages_free: pool.free(),
            page_size: self.kv.page_size,
            page_bytes,
            bytes_total: pool.total() as u64 * page_bytes,
            bytes_used: pool.used() as u64 * page_bytes,
            evicted_pages: self.evicted,
            prefixes: self.index.residents(),
        }
    }

    /// Checks the page accounting: every page's holder count equals the index's references (no
    /// request runs between calls, so the index is the only holder), and the free list is exact.
    pub fn audit_cache(&self) -> Result<()> {
        let pool = self.kv.pool.borrow();
        let mut holders = vec![0; pool.total()];
        self.index.count_holders(&mut holders);
        pool.audit(&holders)
    }

    fn cache_shape(&self, model: &str) -> persist::Shape {
        let cfg = &self.model.cfg;
        persist::Shape { model: model.to_string(), n_layer: cfg.n_layer, n_kv_head: cfg.n_kv_head, head_dim: cfg.head_dim, page_size: self.kv.page_size }
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
    pub async fn save_cache_to<F, W>(&self, model: &str, mut write: W) -> Result<u64>
    where
        W: FnMut(Vec<u8>) -> F,
        F: std::future::Future<Output = Result<()>>,
    {
        let mut slot: HashMap<u32, u32> = HashMap::new();
        let mut order: Vec<u32> = Vec::new();
        let prefixes: Vec<persist::SavedPrefix> = self
            .index
            .paths()
            .into_iter()
            .map(|(salt, tokens, pages)| {
                let pages = pages
                    .iter()
                    .map(|&p| {
                        *slot.entry(p).or_insert_with(|| {
                            order.push(p);
                            order.len() as u32 - 1
                        })
                    })
                    .collect();
                persist::SavedPrefix { salt, tokens, pages }
            })
            .collect();
        let header = persist::Header { version: persist::LAYOUT_VERSION, shape: self.cache_shape(model), pages: order.len() as u32, prefixes };
        let head = persist::head(&header)?;
        let mut crc = crc32fast::Hasher::new();
        let mut len = head.len() as u64;
        crc.update(&head);
        write(head).await?;
        let batch = (SAVE_BATCH_BYTES / self.kv.page_bytes().max(1)).max(1) as usize;
        for pages in order.chunks(batch) {
            let data = self.kv.read_pages(&self.gpu, pages).await?;
            crc.update(&data);
            len += data.len() as u64;
            write(data).await?;
        }
        write(crc.finalize().to_le_bytes().to_vec()).await?;
        Ok(len + 4)
    }

    /// Makes the prefixes of a saved-cache file ([`Self::save_cache`]) resident again, most
    /// recently used first, as many as free and evictable pages hold. A file for another model,
    /// shape or layout version, or a corrupt one, is refused with [`Error::CacheFile`] and nothing
    /// changes. All or nothing: a restore that fails later (the GPU, the page accounting) makes
    /// none of the file's prefixes resident; only the idle prefixes it evicted to make room for
    /// them stay evicted.
    pub async fn restore_cache(&mut self, file: &[u8], model: &str) -> Result<Restored> {
        let r = self.restore_pages(file, model).await;
        self.recover(r)
    }

    async fn restore_pages(&mut self, file: &[u8], model: &str) -> Result<Restored> {
        self.kv.pool.borrow().check()?;
        let shape = self.cache_shape(model);
        let (header, data) = persist::decode(file, &shape, self.kv.page_bytes(), self.model.cfg.vocab)?;
        let mut held = Vec::new();
        let r = self.restore_held(&header, data, &mut held).await;
        // The index holds its own references; ours go back on every path.
        let pool = &mut self.kv.pool.borrow_mut();
        let mut released = Ok(());
        for page in held {
            released = released.and(pool.release(page));
        }
        let out = r?;
        released?;
        pool.check()?;
        Ok(out)
    }

    /// The body of [`Self::restore_pages`]: every page it allocates goes into `held`.
    async fn restore_held(&mut self, header: &persist::Header, data: &[u8], held: &mut Vec<u32>) -> Result<Restored> {
        let max = self.context_size();
        let page_bytes = self.kv.page_bytes() as usize;
        // The file's pages that the restored prefixes need, and the pool page each goes into.
        let mut to: Vec<Option<u32>> = vec![None; header.pages as usize];
        let mut keep = Vec::new();
        let mut out = Restored::default();
        for p in &header.prefixes {
            let new = p.pages.iter().filter(|&&i| to[i as usize].is_none()).count();
            if p.tokens.len() > max || self.ensure_free(new).is_err() {
                out.skipped += 1;
                continue;
            }
            let pool = &mut self.kv.pool.borrow_mut();
            for &i in &p.pages {
                if to[i as usize].is_none() {
                    let page = pool.alloc().ok_or(Error::CacheFull { needed_pages: new, free_pages: 0 })?;
                    held.push(page);
                    to[i as usize] = Some(page);
                }
            }
            keep.push(p);
        }
        for (i, dst) in to.iter().enumerate() {
            if let Some(dst) = dst {
                self.kv.write_pages(&self.gpu, &data[i * page_bytes..][..page_bytes], &[*dst])?;
            }
        }
        self.gpu.finish().await?;
        // Least recent first, so that the index's use order ends as the file's; all of them or,
        // on an error, none.
        let paths: Vec<(&str, &[u32], Vec<u32>)> =
            keep.iter().rev().map(|p| (p.salt.as_str(), &p.tokens[..], p.pages.iter().filter_map(|&i| to[i as usize]).collect())).collect();
        let pool = &mut self.kv.pool.borrow_mut();
        self.index.insert_all(pool, paths.iter().map(|(s, t, p)| (*s, *t, &p[..])))?;
        out.prefixes = keep.len();
        out.tokens = keep.iter().map(|p| p.tokens.len()).sum();
        out.pages = held.len();
        Ok(out)
    }

    /// Forgets every resident prefix (and the lint's request history). After an accounting
    /// error this is the way back: the pool is rebuilt from scratch.
    pub fn clear_cache(&mut self) {
        let pool = &mut self.kv.pool.borrow_mut();
        if self.index.clear(pool).is_err() || pool.check().is_err() || pool.used() != 0 {
            pool.reset();
        }
        self.history = History::default();
    }

    /// **Test only**: records a page-accounting fault, as a bug would (tests of the recovery).
    #[cfg(feature = "test-support")]
    #[doc(hidden)]
    pub fn corrupt_for_test(&mut self) {
        let pool = &mut self.kv.pool.borrow_mut();
        let free = (0..pool.total() as u32).find(|&p| pool.refs(p) == 0).unwrap_or(u32::MAX);
        let _ = pool.release(free);
    }

    /// Forgets every cached token (same as [`Self::clear_cache`]).
    pub fn reset(&mut self) {
        self.clear_cache();
    }
}

/// The stop strings, matched as the text grows: each call searches only where a match that ends
/// in the new text can start, so a long answer costs O(its length), not O(length²) per stop.
struct StopMatcher {
    ac: Option<aho_corasick::AhoCorasick>,
    /// Bytes of the longest stop string: output is held back by this much.
    longest: usize,
    /// No match starts before this byte of the text.
    clear: usize,
}

impl StopMatcher {
    fn new(stops: &[String]) -> Result<StopMatcher> {
        use crate::api::{MAX_STOPS, MAX_STOP_CHARS};
        if stops.len() > MAX_STOPS {
            return Err(Error::InvalidArgument(format!("{} stop strings, at most {MAX_STOPS}", stops.len())));
        }
        if let Some(s) = stops.iter().find(|s| s.is_empty() || s.chars().count() > MAX_STOP_CHARS) {
            return Err(Error::InvalidArgument(format!("a stop string of {} characters (1 to {MAX_STOP_CHARS})", s.chars().count())));
        }
        let ac = match stops.is_empty() {
            true => None,
            false => Some(
                aho_corasick::AhoCorasick::builder()
                    .match_kind(aho_corasick::MatchKind::LeftmostFirst)
                    .build(stops)
                    .map_err(|e| Error::InvalidArgument(format!("stop strings: {e}")))?,
            ),
        };
        Ok(StopMatcher { ac, longest: stops.iter().map(|s| s.len()).max().unwrap_or(0), clear: 0 })
    }

    /// Where the first stop string starts in `text`, which only grows between calls.
    fn find(&mut self, text: &str) -> Option<usize> {
        let ac = self.ac.as_ref()?;
        let from = floor_char_boundary(text, self.clear);
        let hit = ac.find(&text[from..]).map(|m| from + m.start());
        // A stop string that starts before len - longest + 1 would have ended by now.
        self.clear = text.len().saturating_sub(self.longest.saturating_sub(1)).max(self.clear);
        hit
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The incremental matcher finds what a search of the whole text for every stop string finds,
    /// as the text grows a piece at a time (pieces of several characters, multi-byte ones too).
    #[test]
    fn stop_strings_match_incrementally_as_a_whole_search_does() {
        let alphabet = ["a", "b", "é", "ab", "ba", "\u{1F600}", " "];
        let mut rng = Rng(7);
        for trial in 0..400 {
            let n = 1 + rng.below(4);
            let stops: Vec<String> = (0..n).map(|_| (0..1 + rng.below(5)).map(|_| alphabet[rng.below(alphabet.len())]).collect()).collect();
            let mut m = StopMatcher::new(&stops).unwrap();
            let mut text = String::new();
            for _ in 0..40 {
                for _ in 0..1 + rng.below(3) {
                    text.push_str(alphabet[rng.below(alphabet.len())]);
                }
                let want = stops.iter().filter_map(|s| text.find(s.as_str())).min();
                let got = m.find(&text);
                assert_eq!(got, want, "trial {trial}: {stops:?} in {text:?}");
                if got.is_some() {
                    break;
                }
            }
        }
        assert!(StopMatcher::new(&[String::new()]).is_err());
        assert!(StopMatcher::new(&vec!["x".to_string(); crate::api::MAX_STOPS + 1]).is_err());
        assert!(StopMatcher::new(&["é".repeat(crate::api::MAX_STOP_CHARS + 1)]).is_err());
    }
}
