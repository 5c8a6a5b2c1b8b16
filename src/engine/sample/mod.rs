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

use std::cmp::Ordering;

use crate::rng::Rng;
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
        SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0, repetition_penalty: 1.0, repeat_last_n: 64, frequency_penalty: 0.0, presence_penalty: 0.0, seed: 0 }
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

/// How many of a row's largest logits `ops::topk` finds for [`Sampler::sample_top`].
pub const TOP: usize = 256;
/// Most candidates `ops::topk` returns (the [`TOP`] largest and every tie with the smallest of
/// them); with more, the sampler reads the whole row.
pub const TOP_CAP: usize = 512;
/// Most penalty-window tokens `ops::topk` reads; with more, the sampler reads the whole row.
pub const TOP_WINDOW: usize = 256;

/// What the `topk` kernel read of one row of logits (before the penalty): enough for most
/// temperature draws, a few KB instead of the whole row.
///
/// The tokens the sampler can rank without the rest of the row are the candidates and the
/// penalty window whose penalized logit is above the threshold's value: no other token can be.
/// [`Sampler::sample_top`] draws from them exactly as [`Sampler::sample`] would from the whole
/// row (the same token for the same generator state), except that the row's total weight comes
/// from the GPU's f32 sum, so a draw within ~1e-6 (relative) of a boundary between two tokens
/// may fall on the other one.
#[derive(Debug, Clone, Default)]
pub struct Top {
    /// How many logits have an [`order_key`] at least `threshold`.
    pub count: usize,
    /// `(id, logit)` of those logits (of the first [`TOP_CAP`] when there are more), in no order.
    pub cands: Vec<(u32, f32)>,
    /// The [`TOP`]-th largest order key of the row (1 when it has fewer non-NaN logits).
    pub threshold: u32,
    /// The row's largest logit.
    pub max: f32,
    /// `Σ exp((x - max) / T)` over the row's non-NaN logits.
    pub sum: f64,
    /// The logits of [`Sampler::penalty_window`]'s tokens, in its order.
    pub window: Vec<f32>,
    /// The row's length.
    pub vocab: usize,
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

    /// [`Sampler::sample`] from what `ops::topk` read of the row instead of all of it: the same
    /// token (see [`Top`]), or `None` when this draw needs logits outside the top (a long tail,
    /// ties past [`TOP_CAP`], non-finite values): then call `sample` with all of them, which gives
    /// the token a full read would have given (the generator has not moved). `recent` must be
    /// what [`Sampler::penalty_window`] was given for `top.window`.
    pub fn sample_top(&mut self, top: &Top, recent: &[u32]) -> Result<Option<u32>> {
        let t = self.params.temperature;
        self.penalty_window(recent);
        let window = std::mem::take(&mut self.window);
        let r = self.sample_top_with(top, &window, t);
        self.window = window;
        r
    }

    fn sample_top_with(&mut self, top: &Top, window: &[u32], t: f32) -> Result<Option<u32>> {
        if top.cands.is_empty() || top.count > TOP_CAP || top.count != top.cands.len() || window.len() != top.window.len() || window.len() > TOP_WINDOW {
            return Ok(None);
        }
        if top.cands.iter().any(|&(id, _)| id as usize >= top.vocab) || window.iter().any(|&id| id as usize >= top.vocab) {
            return Err(Error::InvalidArgument(format!("sample: a token id past the vocabulary ({})", top.vocab)));
        }
        if !(top.max.is_finite() && top.sum.is_finite() && top.sum >= 1.0) {
            return Ok(None);
        }
        let pen = |id: u32, l: f32| match window.binary_search(&id) {
            Ok(i) => self.penalized(i, top.window[i]),
            Err(_) => l,
        };
        // The largest penalized logit: an unpenalized candidate's or a window token's (tokens
        // outside both are below every candidate).
        let mut best = f32::NEG_INFINITY;
        let mut unpenalized = false;
        for &(id, l) in &top.cands {
            if window.binary_search(&id).is_err() {
                best = best.max(l);
                unpenalized = true;
            }
        }
        for (i, &l) in top.window.iter().enumerate() {
            if !l.is_nan() {
                best = best.max(self.penalized(i, l));
            }
        }
        if !unpenalized || !best.is_finite() {
            return Ok(None);
        }
        // Σ exp((x - best) / T) over the penalized row, from the GPU's sum before the penalty.
        let inv_t = 1.0 / t as f64;
        let w = |l: f32| ((l as f64 - best as f64) * inv_t).exp();
        let base = top.sum * ((top.max as f64 - best as f64) * inv_t).exp();
        let mut total = base;
        for (i, &l) in top.window.iter().enumerate() {
            if !l.is_nan() {
                total += w(self.penalized(i, l)) - w(l);
            }
        }
        // Cancellation (a dominant token penalized away) leaves too few exact digits.
        if t > 0.0 && !(total.is_finite() && total > 1e-3 * base) {
            return Ok(None);
        }
        let window_logits = window.iter().zip(&top.window).enumerate().map(|(i, (&id, &l))| (id, self.penalized(i, l)));
        let cands: Vec<(u32, f32)> = top.cands.iter().map(|&(id, l)| (id, pen(id, l))).chain(window_logits).collect();
        self.set_head(cands.into_iter(), top.threshold);
        if t == 0.0 {
            return Ok(self.head.first().map(|c| c.id));
        }
        self.draw(&View::Top { best, total })
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
            let l = logits.get_mut(t as usize).ok_or_else(|| {
                Error::InvalidArgument(format!("sample: recent token {t} is past the vocabulary ({vocab} logits)"))
            })?;
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
        if l == f32::INFINITY { 1.0 } else { 0.0 }
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
    cands.iter_mut().map(|c| {
        c.w = weight(c.logit, best, inv_t);
        c.w
    }).sum()
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

/// An unsigned key ordered as the floats are (`-0` just below `+0`); 0 for NaN. The `topk`
/// kernel uses the same map.
pub fn order_key(v: f32) -> u32 {
    if v.is_nan() {
        return 0;
    }
    let b = v.to_bits();
    if b & 0x8000_0000 != 0 { !b } else { b | 0x8000_0000 }
}

/// The float of an [`order_key`].
pub fn order_value(k: u32) -> f32 {
    if k & 0x8000_0000 != 0 { f32::from_bits(k & 0x7fff_ffff) } else { f32::from_bits(!k) }
}

/// The `k`-th largest order key of the row (1 when it has fewer non-NaN logits), as the `topk`
/// kernel finds it; `keys` is scratch.
pub fn top_threshold(logits: &[f32], k: usize, keys: &mut Vec<u32>) -> u32 {
    keys.clear();
    keys.extend(logits.iter().map(|&l| order_key(l)).filter(|&k| k != 0));
    if keys.len() < k || k == 0 {
        return 1;
    }
    let i = keys.len() - k;
    *keys.select_nth_unstable(i).1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32) -> SamplingParams {
        SamplingParams { temperature, ..SamplingParams::default() }
    }

    fn draws(p: SamplingParams, logits: &[f32], n: usize) -> Vec<u32> {
        let mut s = Sampler::new(p).unwrap();
        (0..n).map(|_| s.sample(&mut logits.to_vec(), &[]).unwrap()).collect()
    }

    fn freqs(p: SamplingParams, logits: &[f32], recent: &[u32], n: usize) -> Vec<f64> {
        let mut s = Sampler::new(p).unwrap();
        let mut counts = vec![0usize; logits.len()];
        for _ in 0..n {
            counts[s.sample(&mut logits.to_vec(), recent).unwrap() as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    fn softmax(logits: &[f32], t: f32) -> Vec<f64> {
        let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let e: Vec<f64> = logits.iter().map(|&l| ((l as f64 - max) / t as f64).exp()).collect();
        let z: f64 = e.iter().sum();
        e.iter().map(|x| x / z).collect()
    }

    fn assert_close(got: &[f64], want: &[f64], tol: f64) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() < tol, "token {i}: frequency {g:.4}, expected {w:.4} (got {got:?})");
        }
    }

    fn invalid(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let d = SamplingParams::default();
        let got = (d.temperature, d.top_k, d.top_p, d.repetition_penalty, d.repeat_last_n, d.seed);
        assert_eq!(got, (1.0, 0, 1.0, 1.0, 64, 0));
        assert!(Sampler::new(SamplingParams::greedy()).unwrap().is_greedy());
        assert!(!Sampler::new(d.clone()).unwrap().is_greedy());
        let penalized = SamplingParams { repetition_penalty: 1.1, ..SamplingParams::greedy() };
        assert!(!Sampler::new(penalized.clone()).unwrap().is_greedy());
        assert!(Sampler::new(SamplingParams { repeat_last_n: 0, ..penalized }).unwrap().is_greedy());
    }

    #[test]
    fn greedy_is_argmax_lowest_id_on_ties() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        assert_eq!(s.sample(&mut [0.5, 3.0, -1.0, 2.0], &[]).unwrap(), 1);
        assert_eq!(s.sample(&mut [1.0, 3.0, 3.0, 2.0], &[]).unwrap(), 1);
        assert_eq!(s.sample(&mut [f32::NAN, 2.0, f32::NAN, 2.0, 1.0], &[]).unwrap(), 1);
        assert_eq!(s.sample(&mut [-0.0, 0.0], &[]).unwrap(), 0);
        assert_eq!(s.sample(&mut [f32::NEG_INFINITY; 3], &[]).unwrap(), 0);
        assert_eq!(s.sample(&mut [1.0, f32::INFINITY, f32::INFINITY], &[]).unwrap(), 1);
        // Deterministic: the same answer every time, whatever the seed.
        let mut rng = Rng(7);
        let logits = rng.vec(1000, 5.0);
        let want = argmax(&logits).unwrap();
        for seed in 0..5 {
            let mut s = Sampler::new(SamplingParams { seed, ..SamplingParams::greedy() }).unwrap();
            assert_eq!(s.sample(&mut logits.clone(), &[]).unwrap(), want);
        }
    }

    #[test]
    fn seeds_are_reproducible_and_distinct() {
        let logits: Vec<f32> = (0..16).map(|i| (i % 4) as f32 * 0.1).collect();
        let seeded = |seed| SamplingParams { seed, ..params(1.0) };
        let a = draws(seeded(1), &logits, 200);
        assert_eq!(a, draws(seeded(1), &logits, 200));
        assert_ne!(a, draws(seeded(2), &logits, 200));
        assert_ne!(a, draws(seeded(0), &logits, 200));
        // The stream continues across calls rather than restarting.
        assert!(a.windows(2).any(|w| w[0] != w[1]));
    }

    #[test]
    fn top_k_one_and_tiny_top_p_equal_greedy() {
        let mut rng = Rng(11);
        for trial in 0..50 {
            let mut logits = rng.vec(500, 4.0);
            if trial % 5 == 0 {
                logits[rng.below(500)] = f32::NAN;
                let m = argmax(&logits).unwrap() as usize;
                logits[(m + 7) % 500] = logits[m]; // a tie for the top
            }
            let want = argmax(&logits).unwrap();
            for p in [
                SamplingParams { top_k: 1, seed: trial, ..params(1.5) },
                SamplingParams { top_p: 1e-6, seed: trial, ..params(1.5) },
                SamplingParams { top_k: 10, top_p: 1e-6, seed: trial, ..params(0.5) },
            ] {
                let mut s = Sampler::new(p.clone()).unwrap();
                for _ in 0..5 {
                    assert_eq!(s.sample(&mut logits.clone(), &[]).unwrap(), want, "{p:?}");
                }
            }
        }
    }

    #[test]
    fn frequencies_match_softmax() {
        let logits = [1.0f32, 2.0, 0.5, -1.0];
        for t in [1.0f32, 0.7, 2.0] {
            let got = freqs(SamplingParams { seed: 3, ..params(t) }, &logits, &[], 20_000);
            assert_close(&got, &softmax(&logits, t), 0.015);
        }
    }

    #[test]
    fn top_k_and_top_p_renormalize() {
        let logits = [1.0f32, 2.0, 0.5, -1.0];
        let p = softmax(&logits, 1.0); // ≈ [0.23, 0.63, 0.14, 0.03]
        // top_k 2 keeps tokens 1 and 0.
        let got = freqs(SamplingParams { top_k: 2, seed: 5, ..params(1.0) }, &logits, &[], 20_000);
        let z = p[0] + p[1];
        assert_close(&got, &[p[0] / z, p[1] / z, 0.0, 0.0], 0.015);
        // top_p 0.8: 0.63 < 0.8 ≤ 0.63 + 0.23, so tokens 1 and 0 again.
        let got = freqs(SamplingParams { top_p: 0.8, seed: 6, ..params(1.0) }, &logits, &[], 20_000);
        assert_close(&got, &[p[0] / z, p[1] / z, 0.0, 0.0], 0.015);
        // top_p 0.95: the first three.
        let got = freqs(SamplingParams { top_p: 0.95, seed: 7, ..params(1.0) }, &logits, &[], 20_000);
        let z = p[0] + p[1] + p[2];
        assert_close(&got, &[p[0] / z, p[1] / z, p[2] / z, 0.0], 0.015);
    }

    /// The kept set equals a brute-force top-k / full-sort top-p, including
    /// flat distributions where top-p needs far more than the first 64 tokens.
    #[test]
    fn candidate_sets_match_brute_force() {
        let mut rng = Rng(99);
        // (vocab, top_k, top_p, temperature, logit scale): small scales make flat distributions.
        let cases = [
            (49_152, 0, 0.9, 1.0, 3.0),
            (49_152, 0, 0.5, 0.8, 0.1),
            (2_000, 40, 0.7, 1.0, 2.0),
            (3_000, 500, 0.95, 1.2, 0.2),
            (300, 0, 0.999, 1.0, 8.0),
        ];
        for (v, k, top_p, t, scale) in cases {
            let mut logits = rng.vec(v, scale);
            logits[3] = f32::NAN;
            let p = SamplingParams { top_k: k, top_p, temperature: t, ..SamplingParams::default() };
            let mut s = Sampler::new(p).unwrap();
            s.sample(&mut logits.clone(), &[]).unwrap();
            // `sample` leaves the kept candidates in `cands`.
            let mut got: Vec<u32> = s.cands.iter().map(|c| c.id).collect();
            got.sort_unstable();

            let mut all: Vec<(f32, u32)> =
                logits.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &l)| (l, i as u32)).collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            if k > 0 {
                all.truncate(k);
            }
            let w: Vec<f64> = all.iter().map(|&(l, _)| ((l as f64 - all[0].0 as f64) / t as f64).exp()).collect();
            let z: f64 = w.iter().sum();
            let mut cum = 0.0;
            let keep = w.iter().position(|&x| {
                cum += x / z;
                cum >= top_p as f64
            });
            let mut want: Vec<u32> = all[..keep.unwrap() + 1].iter().map(|&(_, id)| id).collect();
            want.sort_unstable();
            assert_eq!(got, want, "v {v} k {k} top_p {top_p}");
            assert!(k == 0 || got.len() <= k);
        }
    }

    #[test]
    fn penalty_lowers_repeated_tokens() {
        // Positive logit: divided. Negative logit: multiplied. Others untouched.
        let mut s = Sampler::new(SamplingParams { repetition_penalty: 2.0, ..SamplingParams::greedy() }).unwrap();
        let mut logits = [2.0f32, -1.0, 1.5, 0.0];
        // Token 0 appears twice but is penalized once; token 2 is not recent.
        assert_eq!(s.sample(&mut logits, &[0, 1, 0, 3]).unwrap(), 2);
        assert_eq!(logits, [1.0, -2.0, 1.5, 0.0]);

        // Only the last `repeat_last_n` tokens count.
        let p = SamplingParams { repetition_penalty: 2.0, repeat_last_n: 2, ..SamplingParams::greedy() };
        let mut s = Sampler::new(p).unwrap();
        let mut logits = [2.0f32, -1.0, 1.5, 0.0];
        assert_eq!(s.sample(&mut logits, &[0, 1, 3]).unwrap(), 0);
        assert_eq!(logits, [2.0, -2.0, 1.5, 0.0]);

        // In distribution: a repeated token loses probability whether its logit is positive
        // (2 → 1) or negative (-1 → -2), and the result is softmax of the penalized logits.
        let cases = [([2.0f32, 0.0, 0.0, 0.0], [1.0f32, 0.0, 0.0, 0.0]), ([0.0, -1.0, -1.0, -1.0], [0.0, -2.0, -1.0, -1.0])];
        for (logits, penalized) in cases {
            let t = if logits[0] > 0.0 { 0 } else { 1 };
            let base = freqs(SamplingParams { seed: 1, ..params(1.0) }, &logits, &[t], 20_000);
            let pen = SamplingParams { repetition_penalty: 2.0, seed: 1, ..params(1.0) };
            let got = freqs(pen, &logits, &[t], 20_000);
            assert!(got[t as usize] < base[t as usize] - 0.08, "token {t}: {got:?} vs {base:?}");
            assert_close(&got, &softmax(&penalized, 1.0), 0.015);
        }
    }

    #[test]
    fn invalid_parameters_are_rejected() {
        let d = SamplingParams::default;
        let bad = [
            (SamplingParams { temperature: f32::NAN, ..d() }, "temperature"),
            (SamplingParams { temperature: -0.5, ..d() }, "temperature"),
            (SamplingParams { temperature: f32::INFINITY, ..d() }, "temperature"),
            (SamplingParams { top_p: 0.0, ..d() }, "top_p"),
            (SamplingParams { top_p: 1.5, ..d() }, "top_p"),
            (SamplingParams { top_p: f32::NAN, ..d() }, "top_p"),
            (SamplingParams { top_p: -0.1, ..d() }, "top_p"),
            (SamplingParams { top_p: f32::INFINITY, ..d() }, "top_p"),
            (SamplingParams { repetition_penalty: 0.0, ..d() }, "repetition_penalty"),
            (SamplingParams { repetition_penalty: -1.0, ..d() }, "repetition_penalty"),
            (SamplingParams { repetition_penalty: f32::NAN, ..d() }, "repetition_penalty"),
            (SamplingParams { repetition_penalty: f32::INFINITY, ..d() }, "repetition_penalty"),
        ];
        for (p, name) in bad {
            let msg = invalid(p.validate());
            assert!(msg.contains(name), "{msg}");
            invalid(Sampler::new(p).map(|_| ()));
        }
        assert!(SamplingParams { top_p: 1.0, temperature: 0.0, ..d() }.validate().is_ok());
        assert!(SamplingParams { top_p: 1e-9, repetition_penalty: 1e-3, ..d() }.validate().is_ok());
        let msg = invalid(SamplingParams { temperature: -0.5, ..d() }.validate());
        assert!(msg.contains("-0.5"), "{msg}");
    }

    #[test]
    fn bad_logits_are_rejected() {
        for p in [SamplingParams::greedy(), params(1.0), SamplingParams { top_k: 2, top_p: 0.5, ..params(0.8) }] {
            let mut s = Sampler::new(p).unwrap();
            // A row with nothing to choose is the model's or the GPU's fault, not the request's.
            assert!(matches!(s.sample(&mut [f32::NAN; 4], &[]), Err(Error::Numerics(_))));
            invalid(s.sample(&mut [], &[]));
            // NaN never wins even when sampling.
            for _ in 0..50 {
                assert_eq!(s.sample(&mut [f32::NAN, 0.0, f32::NAN], &[]).unwrap(), 1);
            }
        }
        let mut s = Sampler::new(SamplingParams { repetition_penalty: 1.3, ..params(1.0) }).unwrap();
        invalid(s.sample(&mut [0.0; 4], &[1, 4]));
        // With the penalty off, `recent` is not looked at.
        let mut s = Sampler::new(params(1.0)).unwrap();
        assert!(s.sample(&mut [0.0; 4], &[1, 4]).is_ok());
    }

    /// OpenAI's frequency and presence penalties: a completion token seen c times loses
    /// c × frequency + presence; prompt tokens are not counted; the repetition penalty applies
    /// first, over its window of prompt and completion.
    #[test]
    fn count_penalties_follow_openai() {
        let p = SamplingParams { frequency_penalty: 0.5, presence_penalty: 0.25, ..SamplingParams::greedy() };
        let mut s = Sampler::new(p.clone()).unwrap();
        assert!(!s.is_greedy());
        s.set_prompt_len(3);
        let recent = [5, 5, 1, 1, 1, 2];
        let mut logits = [1.0f32, 2.0, 2.0, 0.5, 0.0, 3.0];
        s.sample(&mut logits, &recent).unwrap();
        assert_eq!(logits, [1.0, 2.0 - 2.0 * 0.5 - 0.25, 2.0 - 0.5 - 0.25, 0.5, 0.0, 3.0], "token 5 is only in the prompt");
        // With the repetition penalty too: divided (or multiplied) first, then lowered.
        let mut s = Sampler::new(SamplingParams { repetition_penalty: 2.0, ..p.clone() }).unwrap();
        s.set_prompt_len(3);
        let mut logits = [1.0f32, 2.0, 2.0, 0.5, 0.0, -3.0];
        s.sample(&mut logits, &recent).unwrap();
        assert_eq!(logits, [1.0, 1.0 - 1.0 - 0.25, 1.0 - 0.5 - 0.25, 0.5, 0.0, -6.0]);
        // Negative values raise the logits instead; the picked token follows.
        let mut s = Sampler::new(SamplingParams { frequency_penalty: -2.0, ..SamplingParams::greedy() }).unwrap();
        s.set_prompt_len(3);
        assert_eq!(s.sample(&mut [3.0f32, 2.0, 0.0, 0.0, 0.0, 0.0], &recent).unwrap(), 1, "token 1: 2 + 3 × 2 = 8");
        for bad in [2.5, -2.01, f32::NAN] {
            invalid(Sampler::new(SamplingParams { frequency_penalty: bad, ..SamplingParams::greedy() }).map(|_| ()));
            invalid(Sampler::new(SamplingParams { presence_penalty: bad, ..SamplingParams::greedy() }).map(|_| ()));
        }
    }

    #[test]
    fn infinite_logits() {
        let mut s = Sampler::new(SamplingParams { seed: 9, ..params(1.0) }).unwrap();
        for _ in 0..100 {
            let t = s.sample(&mut [0.0, f32::INFINITY, 5.0, f32::INFINITY], &[]).unwrap();
            assert!(t == 1 || t == 3);
            let t = s.sample(&mut [f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY], &[]).unwrap();
            assert_eq!(t, 1);
            assert!(s.sample(&mut [f32::NEG_INFINITY; 3], &[]).unwrap() < 3);
        }
        // A tiny temperature is greedy in effect, without overflow.
        let mut s = Sampler::new(params(1e-30)).unwrap();
        assert_eq!(s.sample(&mut [1.0, 1.5, 1.4999], &[]).unwrap(), 1);
    }

    /// What the `topk` kernel would return for `logits`, with an exact sum.
    fn top_of(logits: &[f32], t: f32, window: &[u32]) -> Top {
        let mut keys = Vec::new();
        let threshold = top_threshold(logits, TOP, &mut keys);
        let max = logits.iter().filter(|l| !l.is_nan()).cloned().fold(f32::NEG_INFINITY, f32::max);
        let sum = logits.iter().filter(|l| !l.is_nan()).map(|&l| ((l as f64 - max as f64) / t as f64).exp()).sum();
        let cands = logits.iter().enumerate().filter(|(_, &l)| order_key(l) >= threshold).map(|(i, &l)| (i as u32, l)).collect();
        let window = window.iter().map(|&id| logits[id as usize]).collect();
        let cands: Vec<(u32, f32)> = cands;
        Top { count: cands.len(), cands, threshold, max, sum, window, vocab: logits.len() }
    }

    #[test]
    fn order_keys_sort_as_floats() {
        let vals = [f32::NEG_INFINITY, -1e30, -2.5, -1e-40, -0.0, 0.0, 1e-40, 1.0, 3.4e38, f32::INFINITY];
        for w in vals.windows(2) {
            assert!(order_key(w[0]) < order_key(w[1]), "{} {}", w[0], w[1]);
        }
        for v in vals {
            assert_eq!(order_value(order_key(v)).to_bits(), v.to_bits());
        }
        assert_eq!(order_key(f32::NAN), 0);
        assert_eq!(order_key(-f32::NAN), 0);
        let mut keys = Vec::new();
        let row: Vec<f32> = (0..1000).map(|i| (i % 500) as f32).collect();
        // The 256th largest of 2 × (0..500): 372 (values 372..499 twice = 256).
        assert_eq!(order_value(top_threshold(&row, TOP, &mut keys)), 372.0);
        assert_eq!(top_threshold(&row[..100], TOP, &mut keys), 1);
    }

    /// Drawing from the top of the row gives the token the whole row gives, for the same stream,
    /// and says when it cannot (then the whole row gives what it would have).
    #[test]
    fn sampling_from_the_top_equals_sampling_from_the_row() {
        let mut rng = Rng(2024);
        let mut answered = [0usize; 2];
        for trial in 0..120u64 {
            let vocab = if trial % 10 == 0 { 49_152 } else { 700 + rng.below(3000) };
            // Rows like a language model's (a few tokens far above the rest), and flat ones.
            let peaked = trial % 3 != 1;
            let mut base = rng.vec(vocab, if peaked { 2.0 } else { 0.5 });
            if peaked {
                for _ in 0..8 {
                    base[rng.below(vocab)] += 10.0;
                }
            }
            if trial % 7 == 0 {
                base[rng.below(vocab)] = f32::NAN;
                let m = argmax(&base).unwrap() as usize;
                base[(m + 3) % vocab] = base[m];
            }
            let p = SamplingParams {
                temperature: [1.0, 0.7, 1.3, 0.0][trial as usize % 4],
                top_k: [0, 0, 40, 1, 400][trial as usize % 5],
                top_p: [1.0, 0.9, 0.5][trial as usize % 3],
                repetition_penalty: [1.0, 1.3, 0.8, 1.0][(trial / 3) as usize % 4],
                frequency_penalty: [0.0, 0.0, 0.6, -0.8, 1.5, 0.0][(trial / 2) as usize % 6],
                presence_penalty: [0.0, 0.9, 0.0, -1.2, 0.3][(trial / 5) as usize % 5],
                seed: trial,
                ..SamplingParams::default()
            };
            let mut full = Sampler::new(p.clone()).unwrap();
            let mut top = Sampler::new(p.clone()).unwrap();
            // The first 14 of `recent` are the prompt: the count penalties see the rest.
            full.set_prompt_len(14);
            top.set_prompt_len(14);
            let mut recent: Vec<u32> = (0..20).map(|_| rng.below(vocab) as u32).collect();
            for _step in 0..6 {
                let mut logits = base.clone();
                let want = full.sample(&mut logits, &recent).unwrap();
                let window = top.penalty_window(&recent).to_vec();
                let t = if p.temperature > 0.0 { p.temperature } else { 1.0 };
                match top.sample_top(&top_of(&base, t, &window), &recent).unwrap() {
                    Some(got) => {
                        assert_eq!(got, want, "trial {trial} {p:?}");
                        answered[0] += (peaked && p.top_k <= TOP) as usize;
                    }
                    None => {
                        assert_eq!(top.sample(&mut base.clone(), &recent).unwrap(), want, "trial {trial} {p:?}");
                        answered[1] += (peaked && p.top_k <= TOP) as usize;
                    }
                }
                recent.push(want);
                base[want as usize] += 0.5;
            }
        }
        // Most draws from peaked rows need only the top (top_k 400 > TOP needs the row; the rest
        // land in the tail of the plain draw, ~6% of the mass in the 49,152-token rows).
        assert!(answered[0] > 9 * answered[1], "from the top {}, from the row {}", answered[0], answered[1]);
    }

    #[test]
    fn sampling_from_the_top_refuses_what_it_cannot_rank() {
        let mut rng = Rng(5);
        let logits = rng.vec(2000, 1.0);
        let mut s = Sampler::new(SamplingParams { seed: 1, ..params(1.0) }).unwrap();
        let good = top_of(&logits, 1.0, &[]);
        assert!(s.sample_top(&good, &[]).is_ok());
        for bad in [
            Top { count: 0, cands: Vec::new(), ..good.clone() },
            Top { count: TOP_CAP + 1, cands: vec![(0, 0.0); TOP_CAP], ..good.clone() },
            Top { count: good.count + 1, ..good.clone() },
            Top { max: f32::INFINITY, ..good.clone() },
            Top { sum: f64::NAN, ..good.clone() },
            Top { sum: 0.5, ..good.clone() },
            Top { window: vec![0.0], ..good.clone() },
        ] {
            assert_eq!(s.sample_top(&bad, &[]).unwrap(), None);
        }
        let past = Top { count: 1, cands: vec![(2000, 1.0)], ..good.clone() };
        invalid(s.sample_top(&past, &[]));
        // A flat row: a plain draw lands in the tail most of the time and needs the row.
        let flat = rng.vec(2000, 0.01);
        let mut nones = 0;
        for _ in 0..50 {
            if s.sample_top(&top_of(&flat, 1.0, &[]), &[]).unwrap().is_none() {
                nones += 1;
                s.sample(&mut flat.clone(), &[]).unwrap();
            }
        }
        assert!(nones > 30, "{nones}");
    }
}
