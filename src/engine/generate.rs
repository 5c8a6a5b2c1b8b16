//! The generation loop: look up the resident prefix, prefill the rest in chunks, then decode
//! token by token (greedy steps queued ahead on the GPU, or the sampler over the top of the
//! logits), matching stop strings as the text grows, and keep what was computed resident.

use crate::api;
use crate::engine::sample::{Sampler, TOP_WINDOW};
use crate::error::{Error, Result};
use crate::gpu::now_ms;
use crate::model::Logits;
use crate::text::tokenizer::StreamDecoder;

use super::constrain::Constraint;
use super::{Constrained, Engine, Finish, GenerateParams, Generation};

/// Greedy steps queued on the GPU per CPU–GPU wait (`Model::decode_greedy`). Steps past an
/// end-of-turn are wasted, so not more: 1/8 of a wait a token already hides the round trip.
const DECODE_AHEAD: usize = 8;
impl Engine {
    /// Generates from `prompt` over the resident cache, calling `on_text` with each piece of
    /// decoded text as it becomes final (valid UTF-8, never part of a stop string). The prompt's
    /// K/V, and the completion's (computed again by prefill once it is done, so that a request
    /// reusing them computes what a cold run does), stay resident for later requests with the
    /// same salt; an aborted request keeps its prompt's only.
    ///
    /// A page-accounting fault ([`Error::CacheCorrupt`], a bug) clears the cache before it is
    /// returned, and its message says so: later requests run cold instead of failing too.
    pub async fn generate(&mut self, prompt: &[u32], params: &GenerateParams, on_text: impl FnMut(&str)) -> Result<Generation> {
        self.generate_constrained(prompt, params, None, on_text).await
    }

    /// [`Self::generate`] with each token chosen among those `constrained`'s grammar allows (from
    /// the first token, or once the output contains its `after` text). Greedy steps are then not
    /// queued ahead: each needs the grammar's state after the one before.
    pub async fn generate_constrained(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        constrained: Option<Constrained>,
        on_text: impl FnMut(&str),
    ) -> Result<Generation> {
        let r = self.generate_over_cache(prompt, params, constrained, on_text).await;
        self.recover(r)
    }

    async fn generate_over_cache(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        constrained: Option<Constrained>,
        mut on_text: impl FnMut(&str),
    ) -> Result<Generation> {
        // The grammar, and the text that starts it (none: it holds from the first token).
        let (mut grammar, mut trigger, stop_in_grammar) = match constrained {
            Some(c) => (Some(c.constraint), c.after, c.stop_strings),
            None => (None, None, true),
        };
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
        self.cache.check()?;
        let t0 = now_ms();
        let ps = self.cache.page_size();
        let mut m = self.cache.lookup(&params.cache_salt, prompt);
        let reused = m.tokens(ps);
        // A request that generates needs the last prompt token's logits: it is always computed.
        let decode = params.max_tokens > 0;
        m.limit(if decode { prompt.len() - 1 } else { prompt.len() }, ps);
        let mut cached = m.tokens(ps);
        let mut seq = self.cache.kv.sequence(self.context_size());
        seq.adopt_prefix(&m.full_pages)?;
        // Every page this request may write, beyond those it shares, must be free or evictable.
        let written = prompt.len() + params.max_tokens.saturating_sub(1);
        let want = written.div_ceil(ps) - m.full_pages.len();
        let can = self.cache.room();
        if want > can {
            return Err(Error::CacheFull { needed_pages: want, free_pages: can });
        }
        let t_prefill = now_ms();
        if let Some((src, n)) = m.partial {
            match self.cache.copy_partial(&self.gpu, &mut seq, src, n).await {
                // The check above counted the source page as evictable, but the copy holds it: when
                // it was the only room, its n positions are computed instead (the request needs the
                // same pages either way).
                Err(Error::CacheFull { .. }) => cached -= n,
                r => r?,
            }
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
            self.cache.ensure_free(seq.pages_needed(chunk.len()))?;
            self.model.forward(&self.gpu, &self.cache.kv, &mut seq, chunk, logits).await?;
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
            let mut next = match (&mut grammar, &trigger) {
                (Some(c), None) => self.pick_allowed(&mut sampler, prompt, c).await?,
                _ => self.pick(&mut sampler, prompt).await?,
            };
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
                // Stop strings end text, not a tool call the grammar holds.
                let in_call = grammar.is_some() && trigger.is_none() && !stop_in_grammar;
                if let Some(cut) = stops.find(&text).filter(|_| !in_call) {
                    text.truncate(cut);
                    finish = Finish::Stop;
                    break;
                }
                // The grammar of a tool call starts at its opening tag: from the text after it, with
                // no step queued ahead unconstrained.
                if let (Some(c), Some(t)) = (&mut grammar, &trigger) {
                    if let Some(at) = text.find(t.as_str()) {
                        // Text the grammar cannot start with (the tag mentioned in prose): the
                        // answer goes on as text.
                        if c.feed_text(&text[at + t.len()..]).is_err() {
                            grammar = None;
                        }
                        trigger = None;
                        if !ahead.is_empty() {
                            let keep = seq.len() - ahead.len();
                            seq.truncate(keep)?;
                            ahead.clear();
                        }
                    }
                }
                // A grammar that is complete ends the answer.
                if grammar.as_ref().is_some_and(|c| trigger.is_none() && c.is_stopped()) {
                    finish = Finish::Stop;
                    let safe = text.len();
                    if safe > emitted {
                        on_text(&text[emitted..safe]);
                        emitted = safe;
                    }
                    break;
                }
                // Emit what can no longer become part of a stop string.
                let safe = floor_char_boundary(&text, text.len().saturating_sub(hold));
                if safe > emitted {
                    on_text(&text[emitted..safe]);
                    emitted = safe;
                }
                // A complete answer is reported as such even when an abort landed while its last
                // token was computed: the length is checked first.
                if out.len() == params.max_tokens {
                    break;
                }
                if params.abort.as_ref().is_some_and(|a| a.is_aborted()) {
                    finish = Finish::Abort;
                    break;
                }
                let constrained = grammar.is_some() && trigger.is_none();
                if ahead.is_empty() && sampler.is_greedy() && !constrained {
                    // Queue several steps on the GPU, each fed the previous one's argmax, and read
                    // their tokens in one wait; steps past a stop are truncated below.
                    let n = DECODE_AHEAD.min(params.max_tokens - out.len());
                    self.cache.ensure_free(seq.pages_needed(n))?;
                    ahead.extend(self.model.decode_greedy(&self.gpu, &self.cache.kv, &mut seq, next, n).await?);
                }
                steps += 1;
                next = match ahead.pop_front() {
                    Some(id) if id as usize >= self.model.cfg.vocab => {
                        // The GPU argmax answers u32::MAX when every logit is NaN.
                        return Err(Error::Numerics("every logit of the row is NaN".into()));
                    }
                    Some(id) => id,
                    None => {
                        self.cache.ensure_free(seq.pages_needed(1))?;
                        self.model.decode_step(&self.gpu, &self.cache.kv, &mut seq, next).await?;
                        match (&mut grammar, constrained) {
                            (Some(c), true) => self.pick_allowed(&mut sampler, &recent, c).await?,
                            _ => self.pick(&mut sampler, &recent).await?,
                        }
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
        // The completion tokens fed back got their K/V from the decode kernels, which sum in
        // another order than prefill's, so a later request reusing them (a chat's follow-up)
        // would not compute what a cold run does. They are computed again by prefill, whose rows
        // are the same whatever chunk they land in, before they are kept; an aborted request
        // keeps its prompt only. The request returns once that pass is done: it is this request's
        // work, and left queued it would be counted in the next request's time to first token.
        let fed = seq.len();
        if fed > prompt.len() {
            seq.truncate(prompt.len())?;
            if finish != Finish::Abort {
                for chunk in recent[prompt.len()..fed].chunks(self.model.opts.chunk) {
                    self.cache.ensure_free(seq.pages_needed(chunk.len()))?;
                    self.model.forward(&self.gpu, &self.cache.kv, &mut seq, chunk, Logits::None).await?;
                }
                self.gpu.finish().await?;
            }
        }
        // Keep what this request computed resident: the prompt and the completion tokens fed back.
        self.cache.keep(&params.cache_salt, &recent[..seq.len()], &seq)?;
        drop(seq);
        self.cache.check()?;
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

    /// [`Self::pick`] among the tokens `c` allows, then fed to it. Greedy: the best allowed token
    /// among the GPU's top of the logits (every token outside it is below all of them), else from
    /// the whole row; sampled: the sampler over the whole row with every other token at -inf.
    async fn pick_allowed(&mut self, sampler: &mut Sampler, recent: &[u32], c: &mut Constraint) -> Result<u32> {
        let t0 = now_ms();
        let allowed = c.allowed()?;
        self.masks.0 += 1;
        self.masks.1 += now_ms() - t0;
        let vocab = self.model.cfg.vocab;
        let ok = |id: u32| (id as usize) < vocab && allowed.is_allowed(id);
        let mut id = None;
        if sampler.is_greedy() {
            let top = self.model.read_top(&self.gpu, 1.0, &[]).await?;
            if top.count == top.cands.len() {
                id = top
                    .cands
                    .iter()
                    .filter(|&&(id, l)| ok(id) && !l.is_nan())
                    .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
                    .map(|&(id, _)| id);
            }
        }
        let id = match id {
            Some(id) => id,
            None => {
                let mut logits = self.model.read_logits(&self.gpu, 1).await?;
                // A row of NaN is the model's numerics, whatever the grammar allows.
                if logits.iter().all(|l| l.is_nan()) {
                    return Err(Error::Numerics("every logit of the row is NaN".into()));
                }
                let mut any = false;
                for (i, l) in logits.iter_mut().enumerate() {
                    if ok(i as u32) {
                        any |= !l.is_nan();
                    } else {
                        *l = f32::NEG_INFINITY;
                    }
                }
                if !any {
                    return Err(Error::InvalidArgument("response grammar: no token is allowed here".into()));
                }
                match sampler.is_greedy() {
                    true => crate::engine::sample::argmax(&logits)?,
                    false => sampler.sample(&mut logits, recent)?,
                }
            }
        };
        c.commit(id)?;
        Ok(id)
    }

    /// How many temperature draws so far were answered from the top of the logits, and how many
    /// read the whole row.
    pub fn sampling_reads(&self) -> (u64, u64) {
        self.draws
    }

    /// Whether temperature sampling reads only the top of the logits (found on the GPU, a few KB:
    /// [`crate::engine::sample::Top`]) and the whole row only when a draw needs it, or always the whole
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
    use crate::engine::sample::rng::Rng;

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
