//! Loading the weights: one walk over the file's tensors ([`load_weights`]), each checked and
//! handed to a [`Sink`] — the GPU ([`Upload`]) or, in the fuzzed CPU preflight, nowhere — one
//! tensor at a time, so that a load never holds the whole file.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::ops::Weight;

use super::arch::Arch;
use super::config::{Config, Rope};
use super::gguf::{self, Gguf, TensorInfo};
use super::quant::{self, Format};

/// The weights of one transformer block, as a [`Sink`] keeps them (GPU buffers for the model).
pub(crate) struct Layer<M = Weight, V = wgpu::Buffer> {
    pub(crate) attn_norm: V, // [dim]
    pub(crate) qkv: M,       // [(n_head + 2·n_kv)·hd, dim]: Q | K | V rows
    pub(crate) wo: M,        // [dim, n_head·hd]
    pub(crate) ffn_norm: V,  // [dim]
    pub(crate) gate_up: M,   // [2·ffn, dim]: gate | up rows
    pub(crate) down: M,      // [dim, ffn]
    /// Q|K|V bias `[(n_head + 2·n_kv)·hd]` (Qwen2; zeros where one of the three is absent).
    pub(crate) qkv_bias: Option<V>,
    /// The QK-norm's weights `[hd]` (Qwen3, Gemma-3), both or neither.
    pub(crate) qk_norm: Option<(V, V)>,
    /// The norms of the attention output and of the feed-forward output before each joins the
    /// residual `[dim]` (Gemma-3), both or neither.
    pub(crate) post_norms: Option<(V, V)>,
}

/// Where a loading model's tensor bytes come from: the whole file in memory (`&[u8]`), or a reader
/// that hands over one tensor at a time (the browser keeps the file in JS, so the wasm heap never
/// holds all of it).
pub trait TensorBytes {
    /// The bytes of `t`, a tensor of the file `g` was parsed from.
    fn tensor_bytes(&self, g: &Gguf, t: &TensorInfo) -> Result<Cow<'_, [u8]>>;
}

impl TensorBytes for &[u8] {
    fn tensor_bytes(&self, g: &Gguf, t: &TensorInfo) -> Result<Cow<'_, [u8]>> {
        g.data(self, t).map(Cow::Borrowed)
    }
}

/// A run of same-format tensors of a fused projection: its format, rows and GGUF bytes.
pub(crate) type Run<'a> = (Format, usize, Cow<'a, [u8]>);

/// The CPU half of `fused`: checks that `names` are `[k, ·]` matrices of formats hotprefix runs
/// and returns them as runs of same-format tensors: each run's format, rows and concatenated GGUF
/// bytes (borrowed when the run is one tensor). Same-format tensors fuse into one matrix (one
/// dispatch); a change of format (a Q4_K_M file's Q5_0 Q and K beside a Q8_0 V) starts a new
/// part. The fuzzed CPU load path ([`crate::model::preflight`]) calls it too.
/// With `order`, the first `permute` rows of each tensor are permuted head by head (`order`: the
/// NEOX RoPE layout, [`neox_order`]): all of a Q or K tensor, the Q and K rows of a fused Q|K|V.
pub(crate) fn fused_bytes<'a>(
    g: &Gguf,
    file: &'a dyn TensorBytes,
    names: &[(String, usize)],
    k: usize,
    order: Option<&[usize]>,
) -> Result<Vec<Run<'a>>> {
    let mut runs: Vec<Run<'a>> = Vec::new();
    for (name, permute) in names {
        let t = g.tensor(name)?;
        let f = Format::from_ggml_type(t.ggml_type).ok_or_else(|| quant::unsupported(name, t.ggml_type))?;
        let n = match t.dims[..] {
            [row, n] if gguf::fit::<usize>(row) == Some(k) => gguf::fit::<usize>(n),
            _ => return Err(Error::Model(format!("{name}: shape {:?}, expected [{k}, ·]", t.dims))),
        };
        let n = n.ok_or_else(|| Error::Model(format!("{name}: {:?} rows overflow", t.dims)))?;
        let mut data = file.tensor_bytes(g, t)?;
        // (No bytes: the header-only check, `preflight::check_header`, has nothing to permute.)
        if let (rows @ 1.., Some(order), false) = (*permute, order, data.is_empty()) {
            let rows = rows.min(n);
            if rows == 0 || !rows.is_multiple_of(order.len()) || !data.len().is_multiple_of(n) {
                return Err(Error::Model(format!("{name}: {rows} rows are not whole heads of {}", order.len())));
            }
            let split = rows * (data.len() / n);
            let mut permuted = by_head(&data[..split], data.len() / n, order);
            permuted.extend_from_slice(&data[split..]);
            data = Cow::Owned(permuted);
        }
        match runs.last_mut() {
            Some((rf, rows, bytes)) if *rf == f => {
                *rows = rows.checked_add(n).ok_or_else(|| Error::Model(format!("{name}: {:?} rows overflow", t.dims)))?;
                bytes.to_mut().extend_from_slice(&data);
            }
            _ => runs.push((f, n, data)),
        }
    }
    if runs.is_empty() {
        return Err(Error::Model("empty projection".into()));
    }
    Ok(runs)
}

/// The order NEOX RoPE's dims are kept in on the GPU ([`Rope::Neox`]): dim `order[j]` of a head
/// of `hd` goes to place `j`, so that each NEOX pair `(i, i + n_rot/2)` lands on the adjacent
/// places `(2i, 2i+1)` the RoPE kernel rotates; the dims past `n_rot` stay where they are. Applied
/// to the rows of Q and K (and their biases and norm weights), it permutes each head's dims the
/// same way in Q and K, so every dot product, and so attention, is what the file's layout gives.
pub(crate) fn neox_order(hd: usize, n_rot: usize) -> Vec<usize> {
    (0..hd)
        .map(|j| {
            if j >= n_rot {
                j
            } else if j % 2 == 0 {
                j / 2
            } else {
                n_rot / 2 + j / 2
            }
        })
        .collect()
}

/// `data` (whole heads of `order.len()` units of `unit` elements) with each head's units in `order`.
fn by_head<T: Copy>(data: &[T], unit: usize, order: &[usize]) -> Vec<T> {
    let head = unit * order.len();
    if head == 0 {
        return data.to_vec();
    }
    let mut out = Vec::with_capacity(data.len());
    for h in data.chunks_exact(head) {
        for &j in order {
            out.extend_from_slice(&h[j * unit..(j + 1) * unit]);
        }
    }
    out
}

/// The CPU half of `vector`: the values of the F32 `[n]` tensor `name`.
pub(crate) fn vector_data(g: &Gguf, file: &dyn TensorBytes, name: &str, n: usize) -> Result<Vec<f32>> {
    let t = g.tensor(name)?;
    if t.ggml_type != Format::F32.ggml_type() || t.dims.len() != 1 || gguf::fit::<usize>(t.dims[0]) != Some(n) {
        return Err(Error::Model(format!("{name}: expected F32 [{n}], got type {} {:?}", t.ggml_type, t.dims)));
    }
    Ok(bytemuck::pod_collect_to_vec(&file.tensor_bytes(g, t)?))
}

/// Where the load puts each weight once its bytes are read and checked: the GPU
/// ([`Model::load_from`]), or nowhere (`preflight`, which converts each to the GPU layout and
/// drops it). One walk over the file ([`load_weights`]) serves both, so the fuzzed CPU path and
/// the real load cannot drift apart.
pub(crate) trait Sink {
    type Matrix;
    type Vector;
    /// An `[n, k]` matrix of `format` in GGUF bytes (dropped once converted).
    async fn matrix(&mut self, name: &str, format: Format, gguf_bytes: Cow<'_, [u8]>, n: usize, k: usize) -> Result<Self::Matrix>;
    /// An F32 vector.
    async fn vector(&mut self, name: &str, v: Vec<f32>) -> Result<Self::Vector>;
    /// The matrix of `parts`' rows one after another (a fused projection of several formats).
    fn join(&mut self, parts: Vec<Self::Matrix>) -> Result<Self::Matrix>;
}

/// RoPE frequency factors a file may carry, each `[n_rot/2]`: the angle of pair `i` is divided
/// by factor `i` (ggml's `rope_ext`).
#[derive(Clone, Debug, Default)]
pub(crate) struct RopeFactors {
    /// Llama-3's (`rope_freqs.weight`): always used when present.
    pub(crate) freqs: Option<Vec<f32>>,
    /// LongRoPE's (Phi-3.5, Phi-4-mini: `rope_factors_long.weight`, `rope_factors_short.weight`):
    /// the long ones for a context window past the original training context, else the short.
    pub(crate) long: Option<Vec<f32>>,
    pub(crate) short: Option<Vec<f32>>,
}

impl RopeFactors {
    /// The factors a model with the context window `context` uses (llama.cpp's
    /// `get_rope_factors`: `rope_freqs`, else long past the original context, else short), and
    /// which of LongRoPE's two it took.
    pub(crate) fn pick(&self, context: usize, cfg: &Config) -> (Option<&[f32]>, Option<&'static str>) {
        if let Some(f) = &self.freqs {
            return (Some(f), None);
        }
        match (&self.long, &self.short) {
            (Some(l), _) if context > cfg.rope_orig_context => (Some(l), Some("long")),
            (_, Some(s)) => (Some(s), Some("short")),
            (Some(l), None) => (Some(l), Some("long")),
            (None, None) => (None, None),
        }
    }
}

/// Every weight of the model, as a [`Sink`] kept it.
pub(crate) struct Weights<M, V> {
    /// RoPE frequency factors, for the RoPE table.
    pub(crate) rope_factors: RopeFactors,
    pub(crate) embed: M,
    pub(crate) output: Option<M>,
    pub(crate) output_norm: V,
    pub(crate) layers: Vec<Layer<M, V>>,
}

/// The GPU: each weight uploaded in the kernels' layout; counts the bytes.
pub(crate) struct Upload<'a> {
    pub(crate) gpu: &'a Gpu,
    pub(crate) bytes: u64,
}

impl Sink for Upload<'_> {
    type Matrix = Weight;
    type Vector = wgpu::Buffer;
    async fn matrix(&mut self, name: &str, format: Format, gguf_bytes: Cow<'_, [u8]>, n: usize, k: usize) -> Result<Weight> {
        let w = Weight::upload_owned(self.gpu, name, format, gguf_bytes, n, k).await?;
        self.bytes += w.bytes();
        Ok(w)
    }
    async fn vector(&mut self, name: &str, v: Vec<f32>) -> Result<wgpu::Buffer> {
        let b = self.gpu.upload(name, &v).await?;
        self.bytes += b.size();
        Ok(b)
    }
    fn join(&mut self, parts: Vec<Weight>) -> Result<Weight> {
        Weight::concat(parts)
    }
}

/// Reads, checks and hands to `sink` every weight of the model `g` describes, one tensor at a
/// time, in the file's natural order (embedding and head, then each layer). Calls
/// `progress(done, total)` in bytes of the file's tensor data after the embedding and head and
/// after each layer.
pub(crate) async fn load_weights<S: Sink>(
    g: &Gguf,
    file: &dyn TensorBytes,
    cfg: &Config,
    sink: &mut S,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Weights<S::Matrix, S::Vector>> {
    if g.tensors.len() < cfg.n_layer {
        return Err(Error::Model(format!("{} layers declared, only {} tensors in the file", cfg.n_layer, g.tensors.len())));
    }
    if let Some(t) = g.tensors.iter().find(|t| !read_by_load(g, &t.name, cfg.n_layer)) {
        let arch = g.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("?");
        return Err(Error::Model(format!(
            "tensor {} is not one hotprefix reads for a {arch} model of {} layers: refused rather than ignored (llama.cpp would apply it or refuse the file)",
            t.name, cfg.n_layer
        )));
    }
    // Bytes of tensor data per layer, for progress; the rest (embedding, head) goes first.
    let mut layer_bytes = vec![0u64; cfg.n_layer];
    let mut total = 0u64;
    for t in &g.tensors {
        total = total.saturating_add(t.bytes);
        let layer = t.name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|i| i.parse::<usize>().ok());
        if let Some(b) = layer.and_then(|i| layer_bytes.get_mut(i)) {
            *b = b.saturating_add(t.bytes);
        }
    }
    let mut done = total.saturating_sub(layer_bytes.iter().fold(0u64, |a, &b| a.saturating_add(b)));
    let (d, hd) = (cfg.dim, cfg.head_dim);
    let embd = g.tensor("token_embd.weight")?;
    let embd_format = Format::from_ggml_type(embd.ggml_type).ok_or_else(|| quant::unsupported("token_embd.weight", embd.ggml_type))?;
    let embed = sink.matrix("token_embd", embd_format, file.tensor_bytes(g, embd)?, cfg.vocab, d).await?;
    let output = match g.tensor("output.weight") {
        Ok(_) => {
            let (w, rows) = fused(sink, g, file, &[("output.weight".to_string(), 0)], d, None).await?;
            if rows != cfg.vocab {
                return Err(Error::Model(format!("output.weight has {rows} rows for a vocabulary of {}", cfg.vocab)));
            }
            Some(w)
        }
        Err(_) => None,
    };
    let output_norm = vector(sink, g, file, "output_norm.weight", d).await?;
    progress(done, total);
    let arch = Arch::of(g)?;
    let order = (cfg.rope == Rope::Neox).then(|| neox_order(hd, cfg.n_rot));
    let order = order.as_deref();
    let factors = |name: &str| -> Result<Option<Vec<f32>>> {
        if g.tensor(name).is_err() {
            return Ok(None);
        }
        let f = vector_data(g, file, name, cfg.n_rot / 2)?;
        match f.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
            Some(bad) => Err(Error::Model(format!("{name} holds {bad} (positive factors expected)"))),
            None => Ok(Some(f)),
        }
    };
    let rope_factors = RopeFactors {
        freqs: factors("rope_freqs.weight")?,
        long: factors("rope_factors_long.weight")?,
        short: factors("rope_factors_short.weight")?,
    };
    let mut layers = Vec::with_capacity(cfg.n_layer);
    for (i, &bytes) in layer_bytes.iter().enumerate() {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let has = |s: &str| g.tensor(&format!("blk.{i}.{s}")).is_ok();
        if let Some(missing) = arch.required.iter().find(|s| !has(s)) {
            return Err(Error::Model(format!("{} file without blk.{i}.{missing}", arch.name)));
        }
        let attn_norm = vector(sink, g, file, &n("attn_norm"), d).await?;
        // Q|K|V: one fused tensor (Phi-3's `attn_qkv`), else three; RoPE's layout applies to
        // the Q and K rows.
        let qk_rows = (cfg.n_head + cfg.n_kv_head) * hd;
        let fused_qkv = has("attn_qkv.weight");
        let qkv_names = if fused_qkv {
            vec![(n("attn_qkv"), qk_rows)]
        } else {
            vec![(n("attn_q"), usize::MAX), (n("attn_k"), usize::MAX), (n("attn_v"), 0)]
        };
        let (qkv, qkv_rows) = fused(sink, g, file, &qkv_names, d, order).await?;
        let qkv_bias = if fused_qkv && has("attn_qkv.bias") {
            let mut b = vector_data(g, file, &format!("blk.{i}.attn_qkv.bias"), cfg.qkv_width())?;
            if let Some(o) = order {
                let qk = by_head(&b[..qk_rows], 1, o);
                b[..qk_rows].copy_from_slice(&qk);
            }
            Some(sink.vector(&format!("blk.{i}.attn_qkv.bias"), b).await?)
        } else if ["attn_q.bias", "attn_k.bias", "attn_v.bias"].iter().any(|s| has(s)) {
            let mut b = Vec::with_capacity(cfg.qkv_width());
            for (s, heads, permute) in [("q", cfg.n_head, true), ("k", cfg.n_kv_head, true), ("v", cfg.n_kv_head, false)] {
                let name = format!("blk.{i}.attn_{s}.bias");
                let v = if has(&format!("attn_{s}.bias")) { vector_data(g, file, &name, heads * hd)? } else { vec![0.0; heads * hd] };
                b.extend(match (permute, order) {
                    (true, Some(o)) => by_head(&v, 1, o),
                    _ => v,
                });
            }
            Some(sink.vector(&format!("blk.{i}.attn_qkv.bias"), b).await?)
        } else {
            None
        };
        let qk_norm = match (has("attn_q_norm.weight"), has("attn_k_norm.weight")) {
            (false, false) => None,
            (true, true) => {
                let norm = |s: &str| {
                    let v = vector_data(g, file, &n(s), hd)?;
                    Ok::<_, Error>(match order {
                        Some(o) => by_head(&v, 1, o),
                        None => v,
                    })
                };
                let (q, k) = (norm("attn_q_norm")?, norm("attn_k_norm")?);
                Some((sink.vector(&n("attn_q_norm"), q).await?, sink.vector(&n("attn_k_norm"), k).await?))
            }
            _ => return Err(Error::Model(format!("blk.{i}: a QK-norm on only one of Q and K"))),
        };
        let post_norms = match (has("post_attention_norm.weight"), has("post_ffw_norm.weight")) {
            (false, false) => None,
            (true, true) => {
                Some((vector(sink, g, file, &n("post_attention_norm"), d).await?, vector(sink, g, file, &n("post_ffw_norm"), d).await?))
            }
            _ => return Err(Error::Model(format!("blk.{i}: a post-norm on only one of attention and FFN"))),
        };
        let (wo, wo_rows) = fused(sink, g, file, &[(n("attn_output"), 0)], cfg.n_head * hd, None).await?;
        let ffn_norm = vector(sink, g, file, &n("ffn_norm"), d).await?;
        // Gate|up: two tensors, or one of both (Phi-3's `ffn_up`, gate rows first).
        let gate_up_names = if has("ffn_gate.weight") { vec![(n("ffn_gate"), 0), (n("ffn_up"), 0)] } else { vec![(n("ffn_up"), 0)] };
        let (gate_up, gate_up_rows) = fused(sink, g, file, &gate_up_names, d, None).await?;
        let (down, down_rows) = fused(sink, g, file, &[(n("ffn_down"), 0)], cfg.ffn, None).await?;
        if qkv_rows != cfg.qkv_width() || wo_rows != d || gate_up_rows != 2 * cfg.ffn || down_rows != d {
            return Err(Error::Model(format!("layer {i}: projection shapes do not match the config {cfg:?}")));
        }
        layers.push(Layer { attn_norm, qkv, wo, ffn_norm, gate_up, down, qkv_bias, qk_norm, post_norms });
        done = done.saturating_add(bytes);
        progress(done, total);
    }
    Ok(Weights { rope_factors, embed, output, output_norm, layers })
}

/// Whether `load_weights` reads the tensor `name` of a file of `n_layer` blocks: what it reads
/// below, including a block's split Q, K and V (and their biases) only where the block has no
/// fused `attn_qkv`. Any other tensor is refused before anything loads, as llama.cpp refuses a
/// file with tensors its loader did not take: ignoring one (a llama file's `attn_output.bias`, a
/// block past `block_count`) would silently run a different model. So is a tensor of the set that
/// llama.cpp's loader does not take for the file's architecture (`Arch::not_taken`).
fn read_by_load(g: &Gguf, name: &str, n_layer: usize) -> bool {
    const TOP: [&str; 6] = [
        "token_embd.weight",
        "output.weight",
        "output_norm.weight",
        "rope_freqs.weight",
        "rope_factors_long.weight",
        "rope_factors_short.weight",
    ];
    const BLOCK: [&str; 12] = [
        "attn_norm.weight",
        "attn_qkv.weight",
        "attn_q_norm.weight",
        "attn_k_norm.weight",
        "post_attention_norm.weight",
        "post_ffw_norm.weight",
        "attn_output.weight",
        "ffn_norm.weight",
        "ffn_gate.weight",
        "ffn_up.weight",
        "ffn_down.weight",
        "attn_qkv.bias",
    ];
    const SPLIT_QKV: [&str; 6] = ["attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias"];
    let not_taken = crate::model::arch::Arch::of(g).map_or(&[][..], |a| a.not_taken);
    if TOP.contains(&name) {
        return !not_taken.contains(&name);
    }
    let Some((i, rest)) = name.strip_prefix("blk.").and_then(|r| r.split_once('.')) else { return false };
    // The block's index as the loader writes it (`blk.{i}.`): no sign, no leading zeros.
    let Some(i) = i.parse::<usize>().ok().filter(|n| n.to_string() == i && *n < n_layer) else { return false };
    let fused = g.tensor(&format!("blk.{i}.attn_qkv.weight")).is_ok();
    match rest {
        r if not_taken.contains(&r) => false,
        "attn_qkv.bias" => fused,
        r if BLOCK.contains(&r) => true,
        r if SPLIT_QKV.contains(&r) => !fused,
        _ => false,
    }
}

/// Several same-width GGUF matrices as one (their rows concatenated: one part a run of
/// same-format tensors), and its rows.
async fn fused<S: Sink>(
    sink: &mut S,
    g: &Gguf,
    file: &dyn TensorBytes,
    names: &[(String, usize)],
    k: usize,
    order: Option<&[usize]>,
) -> Result<(S::Matrix, usize)> {
    let name = names.first().map_or("", |n| n.0.as_str());
    let mut parts = Vec::new();
    let mut rows = 0;
    for (format, n, bytes) in fused_bytes(g, file, names, k, order)? {
        parts.push(sink.matrix(name, format, bytes, n, k).await?);
        rows += n;
    }
    let m = if parts.len() == 1 { parts.pop().ok_or_else(|| Error::Model("empty projection".into()))? } else { sink.join(parts)? };
    Ok((m, rows))
}

/// The F32 `[n]` tensor `name`.
async fn vector<S: Sink>(sink: &mut S, g: &Gguf, file: &dyn TensorBytes, name: &str, n: usize) -> Result<S::Vector> {
    let v = vector_data(g, file, name, n)?;
    sink.vector(name, v).await
}
