//! The CPU sampler: picks the next token from one row of logits.
//!
//! Order of operations (llama.cpp's, minus the exotic samplers):
//! 1. repetition penalty over the distinct tokens among the last `repeat_last_n` of `recent`,
//!    then OpenAI's frequency and presence penalties over the tokens of the completion so far
//!    (`recent` after its first [`Sampler::set_prompt_len`] tokens): a token seen `c` times loses
//!    `c × frequency_penalty + (c > 0) × presence_penalty`;
//! 2. temperature 0 → argmax (lowest id on ties, NaN never wins — the same rule as the GPU
//!    `argmax` kernel; all-NaN logits are an error here and an out-of-range id there, which the
//!    engine turns into the same error);
//! 3. otherwise top-k, softmax with temperature, top-p, then one draw from a seeded generator,
//!    walking the kept tokens in rank order (larger logit first, lower id on ties); without top-k
//!    and top-p, the [`TOP`] best (before the penalty) in rank order, then the rest in id order.
//!    That order lets [`Sampler::sample_top`] draw the same token from what the GPU's `topk`
//!    kernel found ([`Top`]) instead of the whole row, most of the time.
//!
//! The generator is a SplitMix64 generator seeded with [`SamplingParams::seed`]:
//! the same parameters, logits and `recent` always give the same tokens, on every platform.
//!
//! NaN logits are never candidates. A `+inf` logit takes all the probability (shared evenly with
//! other `+inf` ones); if every candidate is `-inf` the draw is uniform among them.

pub mod rng;
#[cfg(test)]
mod tests;
mod top;

pub use top::{order_key, order_value, top_threshold, Top, TOP, TOP_CAP, TOP_LAYOUT, TOP_WINDOW};

use std::cmp::Ordering;

use crate::engine::sample::rng::Rng;
use crate::{Error, Result};

/// How the next token is chosen. `Default` is plain sampling from `softmax(logits)`.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy (argmax). Must be finite and ≥ 0.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 turns it off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability adds up to at least `top_p`;
    /// must be in (0, 1], 1.0 turns it off.
    pub top_p: f32,
    /// llama.cpp-style penalty for recently seen tokens (positive logits are divided by it,
    /// others multiplied); must be finite and > 0, 1.0 turns it off.
    pub repetition_penalty: f32,
    /// How many of the most recent tokens the penalty looks at (each distinct token is penalized
    /// once); 0 turns the penalty off.
    pub repeat_last_n: usize,
    /// OpenAI's frequency penalty, in [-2, 2]: subtracted from a token's logit once for every time
    /// it appears in the completion so far; 0 turns it off.
    pub frequency_penalty: f32,
    /// OpenAI's presence penalty, in [-2, 2]: subtracted from the logit of every token that
    /// appears in the completion so far; 0 turns it off.
    pub presence_penalty: f32,
    /// Seed of the sampler's generator.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Always the most likely token (temperature 0, no penalty).
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, ..Self::default() }
    }

    /// Checks every parameter; the error names the parameter and its value.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &str, v: f32, want: &str| Err(Error::InvalidArgument(format!("{name} = {v}: must be {want}")));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad("temperature", self.temperature, "finite and >= 0");
        }
        if !self.top_p.is_finite() || self.top_p <= 0.0 || self.top_p > 1.0 {
            return bad("top_p", self.top_p, "in (0, 1]");
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return bad("repetition_penalty", self.repetition_penalty, "finite and > 0");
        }
        for (name, v) in [("frequency_penalty", self.frequency_penalty), ("presence_penalty", self.presence_penalty)] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(name, v, "in [-2, 2]");
            }
        }
        Ok(())
    }

    fn repeats(&self) -> bool {
        self.repetition_penalty != 1.0 && self.repeat_last_n > 0
    }

    fn counts(&self) -> bool {
        self.frequency_penalty != 0.0 || self.presence_penalty != 0.0
    }

    fn penalizes(&self) -> bool {
        self.repeats() || self.counts()
    }
}

/// How a penalty-window token's logit is changed: the repetition penalty or not, and its count
/// in the completion.
#[derive(Debug, Clone, Copy, Default)]
struct Penalty {
    repeat: bool,
    count: u32,
}

impl Penalty {
    fn apply(self, p: &SamplingParams, mut l: f32) -> f32 {
        if self.repeat {
            l = if l > 0.0 { l / p.repetition_penalty } else { l * p.repetition_penalty };
        }
        if self.count > 0 {
            l -= self.count as f32 * p.frequency_penalty + p.presence_penalty;
        }
        l
    }
}

/// One candidate token: its (penalized) logit, id, and unnormalized probability.
#[derive(Debug, Clone, Copy)]
struct Cand {
    logit: f32,
    id: u32,
    w: f64,
}

/// Most likely first: larger logit first, lower id first on ties. NaN is never a candidate, so
/// `partial_cmp` always answers; `-0.0` and `0.0` compare equal (unlike `total_cmp`).
fn by_rank(a: &Cand, b: &Cand) -> Ordering {
    b.logit.partial_cmp(&a.logit).unwrap_or(Ordering::Equal).then(a.id.cmp(&b.id))
}

/// The index of the largest logit: lowest index on ties, NaN never wins. Error if `logits` is
/// empty or all NaN.
pub fn argmax(logits: &[f32]) -> Result<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        match best {
            Some((_, b)) if v <= b => {}
            _ => best = Some((i, v)),
        }
    }
    match best {
        Some((i, _)) => Ok(i as u32),
        None if logits.is_empty() => Err(Error::InvalidArgument("sample: empty logits".into())),
        None => Err(Error::Numerics(format!("all {} logits are NaN", logits.len()))),
    }
}

/// A seeded sampler; keep one per generated sequence so its draws continue one stream.
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// Scratch, reused across calls: the candidate set, then what survives top-k and top-p.
    cands: Vec<Cand>,
    /// The penalty window's distinct tokens, sorted, and how each is penalized.
    window: Vec<u32>,
    penalties: Vec<Penalty>,
    /// Tokens of `recent` that are the prompt: the count penalties look at the rest.
    prompt_len: usize,
    /// The tokens ranked above every other ([`Sampler::set_head`]), and their ids sorted.
    head: Vec<Cand>,
    head_ids: Vec<u32>,
    /// Scratch: order keys, known ids.
    keys: Vec<u32>,
    known: Vec<u32>,
}

impl Sampler {
    /// A sampler for `params`, which must pass [`SamplingParams::validate`].
    pub fn new(params: SamplingParams) -> Result<Sampler> {
        params.validate()?;
        let rng = Rng(params.seed);
        Ok(Sampler {
            params,
            rng,
            cands: Vec::new(),
            window: Vec::new(),
            penalties: Vec::new(),
            prompt_len: 0,
            head: Vec::new(),
            head_ids: Vec::new(),
            keys: Vec::new(),
            known: Vec::new(),
        })
    }

    /// How many leading tokens of every `recent` given later are the prompt (0 until set: all of
    /// `recent` is then completion): the frequency and presence penalties count only the rest.
    pub fn set_prompt_len(&mut self, n: usize) {
        self.prompt_len = n;
    }

    /// The parameters this sampler was made with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// True when [`Sampler::sample`] would return the plain argmax of the logits (temperature 0
    /// and no penalty), so a caller may use a GPU argmax and skip reading logits back.
    pub fn is_greedy(&self) -> bool {
        self.params.temperature == 0.0 && !self.params.penalizes()
    }

    /// Picks the next token from `logits` (one per vocabulary entry), given the tokens so far
    /// (`recent`, oldest first; only the last `repeat_last_n` matter). The repetition penalty is
    /// applied to `logits` in place. Errors on empty or all-NaN logits, and, when the penalty is
    /// on, on a recent token id past the end of `logits`.
    pub fn sample(&mut self, logits: &mut [f32], recent: &[u32]) -> Result<u32> {
        if logits.is_empty() {
            return Err(Error::InvalidArgument("sample: empty logits".into()));
        }
        if logits.len() > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!("sample: {} logits do not fit u32 token ids", logits.len())));
        }
        // The head of the canonical draw is fixed by the logits before the penalty.
        let plain_draw = self.params.temperature > 0.0 && self.params.top_k == 0 && self.params.top_p >= 1.0;
        let threshold = if plain_draw { top_threshold(logits, TOP, &mut self.keys) } else { 1 };
        let mut known = std::mem::take(&mut self.known);
        known.clear();
        if plain_draw {
            known.extend((0..logits.len() as u32).filter(|&i| order_key(logits[i as usize]) >= threshold));
        }
        self.penalize(logits, recent)?;
        if self.params.temperature == 0.0 {
            self.known = known;
            return argmax(logits);
        }
        known.extend_from_slice(&self.window);
        self.set_head(known.iter().map(|&id| (id, logits[id as usize])), threshold);
        self.known = known;
        let view = View::All(logits);
        match self.draw(&view)? {
            Some(id) => Ok(id),
            None => Err(Error::Numerics("no token has a positive probability".into())),
        }
    }

    /// The distinct tokens whose logits the penalties change (sorted; empty when every penalty
    /// is off): the last `repeat_last_n` of `recent` for the repetition penalty, and the
    /// completion's tokens for the frequency and presence penalties. These are the ids whose
    /// logits [`Sampler::sample_top`] needs in [`Top::window`].
    pub fn penalty_window(&mut self, recent: &[u32]) -> &[u32] {
        self.window.clear();
        self.penalties.clear();
        let p = &self.params;
        let repeat_from = if p.repeats() { recent.len().saturating_sub(p.repeat_last_n) } else { recent.len() };
        let count_from = if p.counts() { self.prompt_len.min(recent.len()) } else { recent.len() };
        let from = repeat_from.min(count_from);
        let mut seen: Vec<(u32, Penalty)> = Vec::with_capacity(recent.len() - from);
        for (i, &t) in recent.iter().enumerate().skip(from) {
            seen.push((t, Penalty { repeat: i >= repeat_from, count: u32::from(i >= count_from) }));
        }
        seen.sort_unstable_by_key(|&(t, _)| t);
        for (t, pen) in seen {
            match self.window.last() {
                Some(&last) if last == t => {
                    let merged = self.penalties.last_mut().expect("parallel to window");
                    merged.repeat |= pen.repeat;
                    merged.count += pen.count;
                }
                _ => {
                    self.window.push(t);
                    self.penalties.push(pen);
                }
            }
        }
        &self.window
    }

    /// Window token `i`'s logit `l` after the penalties.
    fn penalized(&self, i: usize, l: f32) -> f32 {
        self.penalties[i].apply(&self.params, l)
    }

    /// `self.head`: of the known `(id, penalized logit)` pairs, those above every unknown logit
    /// (above the threshold's value), most likely first, each id once; `self.head_ids` the same
    /// ids sorted.
    fn set_head(&mut self, known: impl Iterator<Item = (u32, f32)>, threshold: u32) {
        let floor = order_value(threshold);
        self.head.clear();
        self.head.extend(known.filter(|&(_, l)| l > floor).map(|(id, logit)| Cand { logit, id, w: 0.0 }));
        self.head.sort_unstable_by_key(|c| c.id);
        self.head.dedup_by_key(|c| c.id);
        self.head_ids.clear();
        self.head_ids.extend(self.head.iter().map(|c| c.id));
        self.head.sort_unstable_by(by_rank);
    }

    /// The canonical draw. Candidates are ranked (larger logit first, lower id on ties); with
    /// top-k or top-p the draw walks the kept candidates in rank order; without either it walks
    /// `self.head` in rank order, then every other token in id order. `None` when the view lacks
    /// logits this draw needs (only for [`View::Top`]); the generator then has not moved.
    fn draw(&mut self, view: &View) -> Result<Option<u32>> {
        let k = self.params.top_k;
        let p = self.params.top_p as f64;
        let inv_t = 1.0 / self.params.temperature as f64;
        let mut cands = std::mem::take(&mut self.cands);
        let r = (|| {
            // `best`: the largest logit, which the weights are relative to (the row's, for the
            // tail walk).
            let (total, walk_head, best) = if k > 0 {
                // The k best, ranked.
                match view {
                    View::All(logits) => {
                        fill_ranked(&mut cands, logits, k)?;
                    }
                    View::Top { .. } => {
                        if self.head.len() < k {
                            return Ok(None);
                        }
                        cands.clear();
                        cands.extend_from_slice(&self.head[..k]);
                    }
                }
                (weigh(&mut cands, inv_t), false, 0.0)
            } else {
                let (best, total) = match view {
                    View::All(logits) => row_weights(logits, inv_t)?,
                    View::Top { best, total } => (*best, *total),
                };
                for c in self.head.iter_mut() {
                    c.w = weight(c.logit, best, inv_t);
                }
                if p < 1.0 {
                    // The ranked tokens until they hold p of the mass: from the head (a
                    // `Top` view), or the best m of the row, m growing ×4 until they do.
                    let target = p * total;
                    match view {
                        View::Top { .. } => {
                            cands.clear();
                            cands.extend_from_slice(&self.head);
                            if nucleus(&cands, target).is_none() {
                                return Ok(None);
                            }
                        }
                        View::All(logits) => {
                            let mut m = 64;
                            loop {
                                let n = fill_ranked(&mut cands, logits, m)?;
                                for c in cands.iter_mut() {
                                    c.w = weight(c.logit, best, inv_t);
                                }
                                if nucleus(&cands, target).is_some() || cands.len() == n {
                                    break;
                                }
                                m = m.saturating_mul(4);
                            }
                        }
                    }
                    (total, false, best)
                } else {
                    (total, true, best)
                }
            };
            // Top-p over the ranked candidates.
            let mut total = total;
            if p < 1.0 {
                let keep = nucleus(&cands, p * total);
                cands.truncate(keep.map_or(cands.len(), |i| i + 1).max(1));
                total = cands.iter().map(|c| c.w).sum();
            }
            if total.is_nan() || total <= 0.0 {
                return Err(Error::Numerics("no token has a positive probability".into()));
            }
            // One draw, uniform in [0, total): 53 random bits.
            let mut rng = Rng(self.rng.0);
            let u = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) * total;
            let ranked: &[Cand] = if walk_head { &self.head } else { &cands };
            let mut cum = 0.0;
            let mut last = None;
            for c in ranked {
                if c.w > 0.0 {
                    cum += c.w;
                    last = Some(c.id);
                    if u < cum {
                        self.rng = rng;
                        return Ok(Some(c.id));
                    }
                }
            }
            if walk_head {
                // The tail, in id order.
                let View::All(logits) = view else { return Ok(None) };
                let mut h = 0;
                for (i, &l) in logits.iter().enumerate() {
                    if h < self.head_ids.len() && self.head_ids[h] == i as u32 {
                        h += 1;
                        continue;
                    }
                    if l.is_nan() {
                        continue;
                    }
                    let w = weight(l, best, inv_t);
                    if w > 0.0 {
                        cum += w;
                        last = Some(i as u32);
                        if u < cum {
                            self.rng = rng;
                            return Ok(Some(i as u32));
                        }
                    }
                }
            }
            // Only reachable through rounding in `cum`.
            self.rng = rng;
            Ok(last)
        })();
        self.cands = cands;
        r
    }

    /// The penalties: llama.cpp's repetition penalty once per distinct token among the last
    /// `repeat_last_n`, then the frequency and presence penalties by the completion's counts.
    fn penalize(&mut self, logits: &mut [f32], recent: &[u32]) -> Result<()> {
        self.penalty_window(recent);
        let vocab = logits.len();
        for (i, &t) in self.window.iter().enumerate() {
            let l = logits
                .get_mut(t as usize)
                .ok_or_else(|| Error::InvalidArgument(format!("sample: recent token {t} is past the vocabulary ({vocab} logits)")))?;
            *l = self.penalties[i].apply(&self.params, *l);
        }
        Ok(())
    }
}

/// How [`Sampler::draw`] sees the row.
enum View<'a> {
    /// Every penalized logit.
    All(&'a [f32]),
    /// Only `Sampler::head`: the largest penalized logit and the row's total weight under it.
    Top { best: f32, total: f64 },
}

/// `exp((l - best) / T)`, with infinite logits taking all the weight (shared evenly), and an
/// all `-inf` row uniform.
fn weight(l: f32, best: f32, inv_t: f64) -> f64 {
    if best == f32::INFINITY {
        if l == f32::INFINITY {
            1.0
        } else {
            0.0
        }
    } else if best == f32::NEG_INFINITY {
        1.0
    } else {
        ((l as f64 - best as f64) * inv_t).exp()
    }
}

/// The largest non-NaN logit and the row's total weight under it.
fn row_weights(logits: &[f32], inv_t: f64) -> Result<(f32, f64)> {
    let best = logits.iter().filter(|l| !l.is_nan()).fold(None, |m: Option<f32>, &l| Some(m.map_or(l, |m| m.max(l))));
    let Some(best) = best else {
        return Err(Error::Numerics(format!("all {} logits are NaN", logits.len())));
    };
    Ok((best, logits.iter().filter(|l| !l.is_nan()).map(|&l| weight(l, best, inv_t)).sum()))
}

/// Top-p: the index of the first ranked candidate at which the cumulative weight reaches
/// `target`, if it does.
fn nucleus(cands: &[Cand], target: f64) -> Option<usize> {
    let mut cum = 0.0;
    cands.iter().position(|c| {
        cum += c.w;
        cum >= target
    })
}

/// Weighs ranked candidates relative to the first (the largest); returns the sum.
fn weigh(cands: &mut [Cand], inv_t: f64) -> f64 {
    let best = cands.first().map_or(0.0, |c| c.logit);
    cands
        .iter_mut()
        .map(|c| {
            c.w = weight(c.logit, best, inv_t);
            c.w
        })
        .sum()
}

/// `cands` = the `k` best non-NaN logits ranked (all of them for 0); returns how many non-NaN
/// logits the row has.
fn fill_ranked(cands: &mut Vec<Cand>, logits: &[f32], k: usize) -> Result<usize> {
    cands.clear();
    cands.extend(logits.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &logit)| Cand { logit, id: i as u32, w: 0.0 }));
    if cands.is_empty() {
        return Err(Error::Numerics(format!("all {} logits are NaN", logits.len())));
    }
    let n = cands.len();
    if k > 0 && k < n {
        cands.select_nth_unstable_by(k - 1, by_rank);
        cands.truncate(k);
    }
    cands.sort_unstable_by(by_rank);
    Ok(n)
}
