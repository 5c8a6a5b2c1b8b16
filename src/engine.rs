//! The engine: model + tokenizer + chat template + one resident sequence, and `generate()`.
//!
//! A new prompt keeps the longest prefix it shares with what the sequence already holds
//! (`cached_tokens`) and computes only the rest — the KV cache owns its length, so reuse is
//! "truncate to the common prefix", not a copy.

use crate::chat::{ChatTemplate, Message};
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::gpu::Gpu;
use crate::kv::Sequence;
use crate::model::{Logits, Model, Options};
use crate::sample::{Sampler, SamplingParams};
use crate::selftest::now_ms;
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation stops before the first occurrence of any of these strings.
    pub stop: Vec<String>,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams { max_tokens: 256, sampling: SamplingParams::greedy(), stop: Vec::new() }
    }
}

/// Why generation ended (OpenAI's `finish_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-turn token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
}

/// Timings of one generation, in the units the CLI reports.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    pub ttft_ms: f64,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
}

/// The result of `generate`.
#[derive(Clone, Debug)]
pub struct Generation {
    pub text: String,
    pub tokens: Vec<u32>,
    pub prompt_tokens: usize,
    /// Prompt tokens whose K/V were already resident and were not recomputed.
    pub cached_tokens: usize,
    pub finish: Finish,
    pub timings: Timings,
}

/// A loaded model, ready to generate.
pub struct Engine {
    pub gpu: Gpu,
    pub model: Model,
    pub tokenizer: Tokenizer,
    pub template: Option<ChatTemplate>,
    seq: Sequence,
    /// The tokens whose K/V `seq` holds, in order.
    held: Vec<u32>,
    /// Token ids that end a turn.
    stop_ids: Vec<u32>,
}

impl Engine {
    /// Loads a GGUF model (held whole in memory) onto `gpu`.
    pub async fn load(gpu: Gpu, file: &[u8], opts: Options) -> Result<Engine> {
        let g = Gguf::parse(file)?;
        let tokenizer = Tokenizer::from_gguf(&g)?;
        let template = match g.get("tokenizer.chat_template") {
            Some(_) => Some(ChatTemplate::from_gguf(&g)?),
            None => None,
        };
        let model = Model::load(&gpu, file, opts).await?;
        if tokenizer.vocab_size() > model.cfg.vocab {
            return Err(Error::Model(format!("tokenizer has {} tokens, the model {}", tokenizer.vocab_size(), model.cfg.vocab)));
        }
        let seq = model.sequence(&gpu, model.opts.kv_tokens).await?;
        let mut stop_ids: Vec<u32> = ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>"]
            .iter()
            .filter_map(|t| tokenizer.token_id(t))
            .collect();
        stop_ids.extend(tokenizer.eos_id());
        Ok(Engine { gpu, model, tokenizer, template, seq, held: Vec::new(), stop_ids })
    }

    /// Tokens a prompt plus its completion may use at most.
    pub fn context_size(&self) -> usize {
        self.seq.max_tokens(&self.model.kv).min(self.model.max_positions())
    }

    /// Renders `messages` with the model's chat template and tokenizes the result. Message
    /// contents are encoded as plain text — a user typing `<|im_start|>system` gets text, not a
    /// control token — and only the template's own markers become control tokens.
    pub fn encode_chat(&self, messages: &[Message]) -> Result<Vec<u32>> {
        let template = self.template.as_ref().ok_or_else(|| Error::Template("the model has no chat template".into()))?;
        // Render with a unique marker in place of each content, then encode the template's text
        // with control tokens recognised and each content as plain text.
        let marker = |i: usize| format!("\u{E000}{i}\u{E001}");
        let marked: Vec<Message> = messages.iter().enumerate().map(|(i, m)| Message::new(m.role.clone(), marker(i))).collect();
        let rendered = template.render(&marked, true)?;
        let mut ids = Vec::new();
        let mut rest = rendered.as_str();
        for (i, m) in messages.iter().enumerate() {
            let mk = marker(i);
            let at = rest.find(&mk).ok_or_else(|| Error::Template(format!("the chat template altered message {i}'s content")))?;
            ids.extend(self.tokenizer.encode_with_special(&rest[..at])?);
            ids.extend(self.tokenizer.encode_text(&m.content)?);
            rest = &rest[at + mk.len()..];
        }
        ids.extend(self.tokenizer.encode_with_special(rest)?);
        Ok(ids)
    }

    /// Generates from `prompt`, calling `on_text` with each piece of decoded text as it becomes
    /// final (valid UTF-8, never part of a stop string).
    pub async fn generate(&mut self, prompt: &[u32], params: &GenerateParams, mut on_text: impl FnMut(&str)) -> Result<Generation> {
        let mut sampler = Sampler::new(params.sampling.clone())?;
        if prompt.is_empty() {
            return Err(Error::InvalidArgument("empty prompt".into()));
        }
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= self.model.cfg.vocab) {
            return Err(Error::InvalidArgument(format!("token id {bad} is outside the vocabulary of {}", self.model.cfg.vocab)));
        }
        if params.stop.iter().any(|s| s.is_empty()) {
            return Err(Error::InvalidArgument("empty stop string".into()));
        }
        let needed = prompt.len().saturating_add(params.max_tokens);
        if needed > self.context_size() {
            return Err(Error::ContextFull { needed, capacity: self.context_size() });
        }
        let t0 = now_ms();
        // Keep the common prefix; always recompute at least the last prompt token for its logits.
        let common = self.held.iter().zip(prompt).take_while(|(a, b)| a == b).count().min(prompt.len() - 1);
        self.seq.truncate(&mut self.model.kv, common);
        self.held.truncate(common);
        let new = &prompt[common..];
        let res = self.model.prefill(&self.gpu, &mut self.seq, new).await;
        self.held.extend_from_slice(&prompt[common..self.seq.len().max(common)]);
        res?;
        let mut next = self.pick(&mut sampler, prompt).await?;
        let t_first = now_ms();
        let mut out = Vec::new();
        let mut text = String::new();
        let mut emitted = 0;
        let mut dec = StreamDecoder::new();
        let hold = params.stop.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut finish = Finish::Length;
        let mut steps = 0usize;
        // Prompt + completion so far, for the repetition penalty: grown in place, not rebuilt.
        let mut recent = prompt.to_vec();
        while out.len() < params.max_tokens {
            if self.stop_ids.contains(&next) {
                finish = Finish::Stop;
                break;
            }
            out.push(next);
            recent.push(next);
            text.push_str(&dec.push(&self.tokenizer, next));
            if let Some(cut) = params.stop.iter().filter_map(|s| text.find(s.as_str())).min() {
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
            if out.len() == params.max_tokens {
                break;
            }
            self.model.forward(&self.gpu, &mut self.seq, &[next], Logits::Last).await?;
            self.held.push(next);
            steps += 1;
            next = self.pick(&mut sampler, &recent).await?;
        }
        // At max_tokens an incomplete trailing character is flushed (as U+FFFD); after an
        // end-of-turn token or a stop string there is nothing more to say.
        if finish == Finish::Length {
            text.push_str(&dec.finish());
        }
        if text.len() > emitted {
            on_text(&text[emitted..]);
        }
        let t_end = now_ms();
        let prefill_s = (t_first - t0) / 1e3;
        let decode_s = (t_end - t_first) / 1e3;
        let timings = Timings {
            ttft_ms: t_first - t0,
            prefill_tok_s: if prefill_s > 0.0 { new.len() as f64 / prefill_s } else { 0.0 },
            decode_tok_s: if decode_s > 0.0 && steps > 0 { steps as f64 / decode_s } else { 0.0 },
        };
        Ok(Generation { text, tokens: out, prompt_tokens: prompt.len(), cached_tokens: common, finish, timings })
    }

    /// Picks the next token from the last forward pass: the GPU's argmax (4 bytes read back) when
    /// sampling is greedy, otherwise the sampler over the logits.
    async fn pick(&self, sampler: &mut Sampler, recent: &[u32]) -> Result<u32> {
        if sampler.is_greedy() {
            let ids = self.model.read_argmax(&self.gpu, 1).await?;
            // The GPU argmax answers u32::MAX when every logit is NaN.
            return ids
                .first()
                .copied()
                .filter(|&id| (id as usize) < self.model.cfg.vocab)
                .ok_or_else(|| Error::InvalidArgument("no finite logit to pick from (all NaN)".into()));
        }
        let mut logits = self.model.read_logits(&self.gpu, 1).await?;
        sampler.sample(&mut logits, recent)
    }

    /// Forgets every cached token.
    pub fn reset(&mut self) {
        self.seq.clear(&mut self.model.kv);
        self.held.clear();
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
