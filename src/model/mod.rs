//! A llama-family model on the GPU: config from GGUF metadata, quantized weights uploaded as they
//! are, scratch buffers allocated once, and `forward()`, which reads like llama2.c's.

pub mod gguf;
pub mod preflight;
pub mod quant;

use crate::error::{Error, Result};
use std::borrow::Cow;

use gguf::{Gguf, TensorInfo};
use crate::gpu::{Batch, Gpu};
use crate::kv::{KvCache, Sequence};

use crate::ops::{self, AttnShape, KvSource, RopeShape, Split, Weight, XLoad};
/// The matrix-vector and attention kernel variant ([`Model::use_kernels`]).
pub use crate::ops::Kind;
use crate::oracle;
use crate::quant::Format;
use crate::sample::{Top, TOP, TOP_CAP, TOP_WINDOW};

/// Hyper-parameters of a llama-family model, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Model width (d_model).
    pub dim: usize,
    /// Attention (query) heads.
    pub n_head: usize,
    /// Key/value heads: fewer than `n_head` with grouped-query attention, else equal.
    pub n_kv_head: usize,
    /// Width of one head: `dim / n_head` (a multiple of 4, at most 128).
    pub head_dim: usize,
    /// FFN hidden width.
    pub ffn: usize,
    /// Vocabulary size (rows of `token_embd.weight`).
    pub vocab: usize,
    /// Trained context length.
    pub context: usize,
    /// RoPE frequency base (`llama.rope.freq_base`; 10000 when absent).
    pub rope_base: f64,
    /// RMSNorm epsilon (`llama.attention.layer_norm_rms_epsilon`), in (0, 1).
    pub eps: f32,
}

/// The largest width, FFN width, vocabulary and layer count [`Config::from_gguf`] accepts: far above
/// real llama-family models (Llama 3.1 405B: 16,384, 53,248, 128,256 tokens, 126 layers) and small
/// enough that the buffer sizes computed from them fit in wasm32's 32-bit `usize` for chunks of up
/// to 1,024 tokens.
const MAX_DIM: usize = 1 << 16;
const MAX_FFN: usize = 1 << 18;
const MAX_VOCAB: usize = 1 << 21;
const MAX_LAYERS: usize = 1 << 10;
/// The trained context is used up to this many positions (the RoPE table is sized by it).
pub const MAX_CONTEXT: usize = 1 << 18;

impl Config {
    /// Reads and checks the `llama.*` metadata (and the vocabulary size from `token_embd`). Sizes
    /// are converted with `try_from`, never `as` (on wasm32 `as usize` keeps the low 32 bits), and
    /// bounded (`MAX_DIM`…); the context is capped at [`MAX_CONTEXT`].
    pub fn from_gguf(g: &Gguf) -> Result<Config> {
        let arch = g.str("general.architecture")?;
        if arch != "llama" {
            return Err(Error::Model(format!("architecture {arch:?} (only llama is supported)")));
        }
        let size = |k: &str, v: u64| gguf::fit::<usize>(v).ok_or_else(|| Error::Model(format!("{k} = {v} does not fit in memory sizes")));
        let u = |k: &str| -> Result<usize> {
            let k = format!("llama.{k}");
            size(&k, g.u64(&k)?)
        };
        let (dim, n_head) = (u("embedding_length")?, u("attention.head_count")?);
        let n_kv_head = match g.get("llama.attention.head_count_kv") {
            Some(_) => u("attention.head_count_kv")?,
            None => n_head,
        };
        let embd = g.tensor("token_embd.weight")?;
        let c = Config {
            n_layer: u("block_count")?,
            dim,
            n_head,
            n_kv_head,
            head_dim: dim.checked_div(n_head).unwrap_or(0),
            ffn: u("feed_forward_length")?,
            vocab: size("token_embd rows", embd.dims.get(1).copied().unwrap_or(0))?,
            context: u("context_length")?.min(MAX_CONTEXT),
            rope_base: g.get("llama.rope.freq_base").and_then(|v| v.as_f64()).unwrap_or(10000.0),
            eps: g.f64("llama.attention.layer_norm_rms_epsilon")? as f32,
        };
        let bad = |m: String| Err(Error::Model(m));
        if c.n_layer == 0 || c.dim == 0 || c.n_head == 0 || c.n_kv_head == 0 || c.ffn == 0 || c.vocab == 0 || c.context == 0 {
            return bad(format!("zero-sized dimension in {c:?}"));
        }
        if c.dim > MAX_DIM || c.ffn > MAX_FFN || c.vocab > MAX_VOCAB || c.n_layer > MAX_LAYERS {
            return bad(format!("width, FFN, vocabulary or layers above {MAX_DIM}, {MAX_FFN}, {MAX_VOCAB}, {MAX_LAYERS} in {c:?}"));
        }
        if !c.dim.is_multiple_of(c.n_head) || !c.n_head.is_multiple_of(c.n_kv_head) {
            return bad(format!("{} heads must divide width {} and be a multiple of {} KV heads", c.n_head, c.dim, c.n_kv_head));
        }
        if !c.head_dim.is_multiple_of(4) || c.head_dim > 128 {
            return bad(format!("head dim {} (a multiple of 4, at most 128, is supported)", c.head_dim));
        }
        if let Some(rot) = g.get("llama.rope.dimension_count").and_then(|v| v.as_u64()) {
            if gguf::fit::<usize>(rot) != Some(c.head_dim) {
                return bad(format!("RoPE over {rot} of {} dims (partial rotary) is not supported", c.head_dim));
            }
        }
        let eps_ok = c.eps > 0.0 && c.eps < 1.0; // false for NaN
        if !eps_ok || c.rope_base.is_nan() || c.rope_base <= 1.0 {
            return bad(format!("rms eps {} / rope base {}", c.eps, c.rope_base));
        }
        if embd.dims.first().and_then(|&d| gguf::fit::<usize>(d)) != Some(c.dim) {
            return bad(format!("token_embd is {:?}, width is {}", embd.dims, c.dim));
        }
        Ok(c)
    }

    /// Floats in one row of the fused Q|K|V projection.
    pub fn qkv_width(&self) -> usize {
        (self.n_head + 2 * self.n_kv_head) * self.head_dim
    }
}

/// Load-time choices.
#[derive(Clone, Debug)]
pub struct Options {
    /// Most tokens one forward call processes (longer prompts are split in chunks).
    pub chunk: usize,
    /// Positions one sequence may reach (the context window); `None` = the trained context.
    pub context: Option<usize>,
    /// Allocate room for the logits of every row of a chunk (scoring), not only the last.
    pub all_logits: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { chunk: 128, context: None, all_logits: false }
    }
}

pub(crate) struct Layer<M = Weight, V = wgpu::Buffer> {
    attn_norm: V, // [dim]
    qkv: M,       // [(n_head + 2·n_kv)·hd, dim]: Q | K | V rows
    wo: M,        // [dim, n_head·hd]
    ffn_norm: V,  // [dim]
    gate_up: M,   // [2·ffn, dim]: gate | up rows
    down: M,      // [dim, ffn]
}

/// Activation buffers, allocated once at their largest size (`T` = `Options::chunk`).
struct Scratch {
    tokens: wgpu::Buffer, // [T] u32
    pos: wgpu::Buffer,    // [T] u32
    x: wgpu::Buffer,      // [T, dim] residual stream
    xn: wgpu::Buffer,     // [T, dim] normed
    qkv: wgpu::Buffer,    // [T, qkv_width]
    att: wgpu::Buffer,    // [T, n_head·hd]
    gu: wgpu::Buffer,     // [T, 2·ffn]
    h: wgpu::Buffer,      // [T, ffn]
    logits: wgpu::Buffer, // [T or 1, vocab]
    argmax: wgpu::Buffer, // [T or 1] u32
    ids: wgpu::Buffer,    // [MAX_AHEAD] u32: greedy ids decoded ahead (`decode_greedy`)
    window: wgpu::Buffer, // [TOP_WINDOW] u32: the sampler's penalty window (`read_top`)
    top: wgpu::Buffer,    // ops::topk_words(TOP_CAP, TOP_WINDOW) u32: what `read_top` reads
    part: wgpu::Buffer,   // attention partials (ops::attention_scratch_bytes)
}

/// Which logits a forward pass computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// None (a prefill chunk that is not the last).
    None,
    /// The last token's row, and its argmax.
    Last,
    /// Every row of the chunk, and their argmaxes (needs `Options::all_logits`).
    All,
}

/// Most steps [`Model::decode_greedy`] queues before reading their tokens back.
pub const MAX_AHEAD: usize = 16;

/// A model loaded on the GPU with its scratch buffers. The KV cache lives beside it
/// ([`KvCache`]), so that sequences and the prefix index can share pages without borrowing the model.
pub struct Model {
    pub(crate) cfg: Config,
    pub(crate) opts: Options,
    embed: Weight, // [vocab, dim] Q8_0; the output head too when tied
    output: Option<Weight>,
    output_norm: wgpu::Buffer,
    layers: Vec<Layer>,
    rope: wgpu::Buffer, // [context, hd/2] (cos, sin)
    s: Scratch,
    /// The matrix-vector and attention kernel variant (chosen for the adapter).
    matvec: Kind,
    /// Decode fuses the RMSNorms and the SwiGLU into the projections' x-loads (`record_decode`).
    fuse: bool,
    /// Bytes of weights on the GPU.
    pub(crate) weight_bytes: u64,
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

/// The CPU half of `fused`: checks that `names` are same-format `[k, ·]` matrices and returns
/// their format, total rows and concatenated GGUF bytes (borrowed when there is one). The fuzzed
/// CPU load path ([`crate::preflight`]) calls it too.
pub(crate) fn fused_bytes<'a>(g: &Gguf, file: &'a dyn TensorBytes, names: &[String], k: usize) -> Result<(Format, usize, Cow<'a, [u8]>)> {
    let mut bytes = Vec::new();
    let mut rows = 0usize;
    let mut format = None;
    for name in names {
        let t = g.tensor(name)?;
        let f = Format::from_ggml_type(t.ggml_type)
            .ok_or_else(|| Error::Model(format!("{name}: ggml type {} is not supported (F32, F16, Q8_0, Q4_1 are)", t.ggml_type)))?;
        if *format.get_or_insert(f) != f {
            return Err(Error::Model(format!("{name}: {} mixed with {:?} in one fused projection", f.name(), format)));
        }
        let n = match t.dims[..] {
            [row, n] if gguf::fit::<usize>(row) == Some(k) => gguf::fit::<usize>(n),
            _ => return Err(Error::Model(format!("{name}: shape {:?}, expected [{k}, ·]", t.dims))),
        };
        rows = n.and_then(|n| rows.checked_add(n)).ok_or_else(|| Error::Model(format!("{name}: {:?} rows overflow", t.dims)))?;
        let data = file.tensor_bytes(g, t)?;
        if names.len() == 1 {
            return Ok((f, rows, data));
        }
        bytes.extend_from_slice(&data);
    }
    let format = format.ok_or_else(|| Error::Model("empty projection".into()))?;
    Ok((format, rows, Cow::Owned(bytes)))
}

/// The CPU half of `vector`: the values of the F32 `[n]` tensor `name`.
pub(crate) fn vector_data(g: &Gguf, file: &dyn TensorBytes, name: &str, n: usize) -> Result<Vec<f32>> {
    let t = g.tensor(name)?;
    if t.ggml_type != 0 || t.dims.len() != 1 || gguf::fit::<usize>(t.dims[0]) != Some(n) {
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
}

/// Every weight of the model, as a [`Sink`] kept it.
pub(crate) struct Weights<M, V> {
    embed: M,
    output: Option<M>,
    output_norm: V,
    layers: Vec<Layer<M, V>>,
}

/// The GPU: each weight uploaded in the kernels' layout; counts the bytes.
struct Upload<'a> {
    gpu: &'a Gpu,
    bytes: u64,
}

impl Sink for Upload<'_> {
    type Matrix = Weight;
    type Vector = wgpu::Buffer;
    async fn matrix(&mut self, name: &str, format: Format, gguf_bytes: Cow<'_, [u8]>, n: usize, k: usize) -> Result<Weight> {
        let w = Weight::upload_owned(self.gpu, name, format, gguf_bytes, n, k).await?;
        self.bytes += w.buf.size();
        Ok(w)
    }
    async fn vector(&mut self, name: &str, v: Vec<f32>) -> Result<wgpu::Buffer> {
        let b = self.gpu.upload(name, &v).await?;
        self.bytes += b.size();
        Ok(b)
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
    if embd.ggml_type != Format::Q8_0.ggml_type() {
        return Err(Error::Model(format!("token_embd is ggml type {}, the embedding kernel reads Q8_0", embd.ggml_type)));
    }
    let embed = sink.matrix("token_embd", Format::Q8_0, file.tensor_bytes(g, embd)?, cfg.vocab, d).await?;
    let output = match g.tensor("output.weight") {
        Ok(_) => {
            let (w, rows) = fused(sink, g, file, &["output.weight".to_string()], d).await?;
            if rows != cfg.vocab {
                return Err(Error::Model(format!("output.weight has {rows} rows for a vocabulary of {}", cfg.vocab)));
            }
            Some(w)
        }
        Err(_) => None,
    };
    let output_norm = vector(sink, g, file, "output_norm.weight", d).await?;
    progress(done, total);
    let mut layers = Vec::with_capacity(cfg.n_layer);
    for (i, &bytes) in layer_bytes.iter().enumerate() {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let attn_norm = vector(sink, g, file, &n("attn_norm"), d).await?;
        let (qkv, qkv_rows) = fused(sink, g, file, &[n("attn_q"), n("attn_k"), n("attn_v")], d).await?;
        let (wo, wo_rows) = fused(sink, g, file, &[n("attn_output")], cfg.n_head * hd).await?;
        let ffn_norm = vector(sink, g, file, &n("ffn_norm"), d).await?;
        let (gate_up, gate_up_rows) = fused(sink, g, file, &[n("ffn_gate"), n("ffn_up")], d).await?;
        let (down, down_rows) = fused(sink, g, file, &[n("ffn_down")], cfg.ffn).await?;
        if qkv_rows != cfg.qkv_width() || wo_rows != d || gate_up_rows != 2 * cfg.ffn || down_rows != d {
            return Err(Error::Model(format!("layer {i}: projection shapes do not match the config {cfg:?}")));
        }
        layers.push(Layer { attn_norm, qkv, wo, ffn_norm, gate_up, down });
        done = done.saturating_add(bytes);
        progress(done, total);
    }
    Ok(Weights { embed, output, output_norm, layers })
}

/// Several same-format, same-width GGUF matrices as one (their rows concatenated), and its rows.
async fn fused<S: Sink>(sink: &mut S, g: &Gguf, file: &dyn TensorBytes, names: &[String], k: usize) -> Result<(S::Matrix, usize)> {
    let (format, rows, bytes) = fused_bytes(g, file, names, k)?;
    let name = names.first().map_or("", String::as_str);
    Ok((sink.matrix(name, format, bytes, rows, k).await?, rows))
}

/// The F32 `[n]` tensor `name`.
async fn vector<S: Sink>(sink: &mut S, g: &Gguf, file: &dyn TensorBytes, name: &str, n: usize) -> Result<S::Vector> {
    let v = vector_data(g, file, name, n)?;
    sink.vector(name, v).await
}

impl Model {
    /// Uploads the model in `file` (a whole GGUF) and allocates its scratch buffers.
    pub async fn load(gpu: &Gpu, file: &[u8], opts: Options) -> Result<Model> {
        Self::load_from(gpu, &Gguf::parse(file)?, &file, opts, &mut |_, _| {}).await
    }

    /// Uploads the model whose header is `g`, reading each tensor from `file` once, converting and
    /// uploading it before the next is read. Calls `progress(uploaded, total)` in bytes of the
    /// file's tensor data as the weights reach the GPU (after the embedding and head, then after
    /// each layer).
    pub async fn load_from(
        gpu: &Gpu,
        g: &Gguf,
        file: &dyn TensorBytes,
        opts: Options,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Model> {
        let cfg = Config::from_gguf(g)?;
        if opts.chunk == 0 || opts.context == Some(0) {
            return Err(Error::InvalidArgument(format!("{opts:?}: sizes must be positive")));
        }
        // Positions past the trained context are never used.
        let opts = Options { context: Some(opts.context.unwrap_or(cfg.context).min(cfg.context)), ..opts };
        let mut sink = Upload { gpu, bytes: 0 };
        let Weights { embed, output, output_norm, layers } = load_weights(g, file, &cfg, &mut sink, progress).await?;
        let weight_bytes = sink.bytes;
        let (d, hd) = (cfg.dim, cfg.head_dim);
        let max_pos = opts.context.unwrap_or(cfg.context);
        let rope = gpu.upload("rope table", &oracle::rope_table(max_pos, hd, cfg.rope_base)).await?;
        let t = opts.chunk;
        let f = |n: usize| 4 * n as u64;
        let lrows = if opts.all_logits { t } else { 1 };
        let s = Scratch {
            tokens: gpu.storage("tokens", f(t)).await?,
            pos: gpu.storage("positions", f(t)).await?,
            x: gpu.storage("x", f(t * d)).await?,
            xn: gpu.storage("xn", f(t * d)).await?,
            qkv: gpu.storage("qkv", f(t * cfg.qkv_width())).await?,
            att: gpu.storage("att", f(t * cfg.n_head * hd)).await?,
            gu: gpu.storage("gate|up", f(t * 2 * cfg.ffn)).await?,
            h: gpu.storage("h", f(t * cfg.ffn)).await?,
            logits: gpu.storage("logits", f(lrows * cfg.vocab)).await?,
            argmax: gpu.storage("argmax", f(lrows)).await?,
            ids: gpu.storage("decoded ids", f(MAX_AHEAD)).await?,
            window: gpu.storage("penalty window", f(TOP_WINDOW)).await?,
            top: gpu.storage("top logits", f(ops::topk_words(TOP_CAP, TOP_WINDOW))).await?,
            part: gpu.storage("attention partials", ops::attention_scratch_bytes(t, cfg.n_head, hd, max_pos)).await?,
        };
        let matvec = Kind::for_adapter(gpu);
        let fuse = fused_by_default(matvec);
        Ok(Model { cfg, opts, embed, output, output_norm, layers, rope, s, matvec, fuse, weight_bytes })
    }

    /// Makes the matrix-vector and attention kernels variant `kind` instead of the adapter's
    /// choice (tests run both on one adapter; benchmarks compare them).
    /// Decoding fuses the norms and SwiGLU as the variant does by default (`fuse_decode` after
    /// this changes it).
    pub fn use_kernels(&mut self, kind: Kind) {
        self.matvec = kind;
        self.fuse = fused_by_default(kind);
    }

    /// Makes decoding fuse the RMSNorms and the SwiGLU into the projections after them (`true`:
    /// 6 dispatches a layer, the default with the `Coop` and `Lanes` kernels) or run them as
    /// dispatches of their own (`false`: 9 a layer, the default with `Rows`, where it is faster).
    /// Tests run both; `hotprefix bench profile` compares them.
    pub fn fuse_decode(&mut self, fuse: bool) {
        self.fuse = fuse;
    }

    /// The matrix-vector and attention kernel variant in use.
    pub fn kernels(&self) -> Kind {
        self.matvec
    }

    /// Positions a sequence can reach: the context window (`Options::context`).
    pub fn max_positions(&self) -> usize {
        self.cfg.context.min(self.rope.size() as usize / (4 * self.cfg.head_dim))
    }

    /// A KV cache for this model: `pages` pages of `page_size` positions, and a page table for
    /// sequences up to the context window.
    pub async fn kv_cache(&self, gpu: &Gpu, pages: usize, page_size: usize) -> Result<KvCache> {
        KvCache::new(gpu, &self.cfg, pages, page_size, self.max_positions()).await
    }

    /// Runs `tokens` (at most `chunk`) through the model at positions `seq.len()..`, writing their
    /// K/V into `seq`'s pages, and computes the requested logits. On success the sequence has
    /// grown by `tokens.len()`; on error it is unchanged.
    ///
    /// Every row comes out the same whatever chunk it is computed in (tiled matmuls and unsplit
    /// attention, `ops::matmul_exact`): a prompt whose prefix came from the cache gets the K/V a
    /// cold run computes, bit for bit.
    pub async fn forward(&self, gpu: &Gpu, kv: &KvCache, seq: &mut Sequence, tokens: &[u32], logits: Logits) -> Result<()> {
        self.run(gpu, kv, seq, tokens, logits, true).await
    }

    /// One decode step: `token` at position `seq.len()`, the last row's logits. Uses the faster
    /// single-row kernels (matrix-vector with the norms and SwiGLU fused in, attention with RoPE
    /// and the KV write fused in, split over positions): 6 dispatches a layer at most.
    pub async fn decode_step(&self, gpu: &Gpu, kv: &KvCache, seq: &mut Sequence, token: u32) -> Result<()> {
        self.run(gpu, kv, seq, &[token], Logits::Last, false).await
    }

    /// Greedy decoding ahead of the CPU: `n` decode steps, the first on `token`, each later one
    /// on the previous step's argmax, which the GPU writes where the next embedding reads it. All
    /// are recorded in one batch (one compute pass, one parameter upload) and their tokens read
    /// back in one map: one CPU–GPU wait for `n` tokens. Returns the `n` argmax ids; the sequence
    /// grows by `n` positions (truncate it to drop steps past a stop). The ids are those `n`
    /// calls of [`Self::decode_step`] + [`Self::read_argmax`] give.
    pub async fn decode_greedy(&self, gpu: &Gpu, kv: &KvCache, seq: &mut Sequence, token: u32, n: usize) -> Result<Vec<u32>> {
        if n == 0 || n > MAX_AHEAD {
            return Err(Error::InvalidArgument(format!("{n} steps decoded ahead (1 to {MAX_AHEAD} allowed)")));
        }
        let start = self.check_step(kv, seq, &[token], n)?;
        let table_len = seq.reserve(n)?;
        let table = kv.table_for(gpu, seq);
        gpu.write(&self.s.tokens, 0, &[token]);
        gpu.write(&self.s.pos, 0, &[start as u32]);
        let mut b = gpu.batch()?;
        for i in 0..n {
            self.record_decode(&mut b, kv, table, start + i, table_len, Some(i))?;
        }
        b.submit().await?;
        seq.advance(n);
        gpu.read_u32(&self.s.ids, n).await
    }

    /// Checks a forward call of `tokens` that grows `seq` by `grow` positions; returns the
    /// position of the first token.
    fn check_step(&self, kv: &KvCache, seq: &Sequence, tokens: &[u32], grow: usize) -> Result<usize> {
        let c = &self.cfg;
        if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= c.vocab) {
            return Err(Error::InvalidArgument(format!("token id {bad} is outside the vocabulary of {}", c.vocab)));
        }
        let start = seq.len();
        if start + grow > self.max_positions() {
            return Err(Error::ContextFull { needed: start + grow, capacity: self.max_positions() });
        }
        if kv.layers.len() != c.n_layer {
            return Err(Error::InvalidArgument(format!("a KV cache of {} layers for a model of {}", kv.layers.len(), c.n_layer)));
        }
        Ok(start)
    }

    async fn run(&self, gpu: &Gpu, kv: &KvCache, seq: &mut Sequence, tokens: &[u32], logits: Logits, exact: bool) -> Result<()> {
        let t = tokens.len();
        if t == 0 || t > self.opts.chunk {
            return Err(Error::InvalidArgument(format!("{t} tokens in one forward call (1 to {} allowed)", self.opts.chunk)));
        }
        if logits == Logits::All && !self.opts.all_logits {
            return Err(Error::InvalidArgument("all-row logits need Options::all_logits".into()));
        }
        let start = self.check_step(kv, seq, tokens, t)?;
        let table_len = seq.reserve(t)?;
        let table = kv.table_for(gpu, seq);
        let pos: Vec<u32> = (start as u32..(start + t) as u32).collect();
        gpu.write(&self.s.tokens, 0, tokens);
        gpu.write(&self.s.pos, 0, &pos);
        let mut b = gpu.batch()?;
        if exact {
            self.record(&mut b, kv, table, start, t, table_len, logits)?;
        } else {
            self.record_decode(&mut b, kv, table, start, table_len, None)?;
        }
        b.submit().await?;
        seq.advance(t);
        Ok(())
    }

    /// The forward pass proper (prefill): embed → layers → final norm → logits. Every row comes
    /// out the same whatever chunk it is in (`ops::matmul_exact`, fixed attention slices).
    #[allow(clippy::too_many_arguments)]
    fn record(&self, b: &mut Batch, kv_cache: &KvCache, table: &wgpu::Buffer, start: usize, t: usize, table_len: usize, logits: Logits) -> Result<()> {
        let (c, s) = (&self.cfg, &self.s);
        let kind = self.matvec;
        let mm = |b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, acc: bool| ops::matmul_exact(b, x, w, y, t, acc, kind);
        let (d, hd, qkv_w) = (c.dim, c.head_dim, c.qkv_width());
        ops::embed(b, &s.tokens, &self.embed, &s.x, t)?;
        for (l, kv) in self.layers.iter().zip(&kv_cache.layers) {
            // attention
            ops::rmsnorm(b, &s.x, &l.attn_norm, &s.xn, t, d, c.eps)?;
            mm(b, &s.xn, &l.qkv, &s.qkv, false)?;
            let rope = RopeShape { t, heads: c.n_head + c.n_kv_head, row_stride: qkv_w, head_dim: hd };
            ops::rope(b, &s.qkv, &s.pos, &self.rope, &rope)?;
            let src = KvSource { t, row_stride: qkv_w, k_off: c.n_head * hd, v_off: (c.n_head + c.n_kv_head) * hd };
            ops::kv_write(b, &s.qkv, &src, &s.pos, table, table_len, kv)?;
            let shape = AttnShape { t, n_head: c.n_head, q_stride: qkv_w, scale: 1.0 / (hd as f32).sqrt(), ctx: start + t, split: Split::Fixed, fused: false, kind: self.matvec };
            ops::attention(b, &s.qkv, &shape, &s.pos, table, table_len, kv, &self.rope, &s.att, &s.part)?;
            mm(b, &s.att, &l.wo, &s.x, true)?; // x += att · woᵀ
            // feed-forward
            ops::rmsnorm(b, &s.x, &l.ffn_norm, &s.xn, t, d, c.eps)?;
            mm(b, &s.xn, &l.gate_up, &s.gu, false)?;
            ops::swiglu(b, &s.gu, &s.h, t, c.ffn)?;
            mm(b, &s.h, &l.down, &s.x, true)?; // x += h · downᵀ
        }
        let head = self.output.as_ref().unwrap_or(&self.embed);
        match logits {
            Logits::None => Ok(()),
            Logits::Last => {
                // Only the last row's norm and logits (the norm fused into the head's x-load).
                let norm = XLoad::RmsNorm { w: &self.output_norm, eps: c.eps };
                ops::matvec(b, &s.x, t - 1, norm, head, &s.logits, false, self.matvec)?;
                ops::argmax(b, &s.logits, &s.argmax, 1, c.vocab)
            }
            Logits::All => {
                ops::rmsnorm(b, &s.x, &self.output_norm, &s.xn, t, d, c.eps)?;
                ops::matmul(b, &s.xn, head, &s.logits, t)?;
                ops::argmax(b, &s.logits, &s.argmax, t, c.vocab)
            }
        }
    }

    /// One decode step, llama2.c's `forward()` for one token at `pos` (its id in `tokens[0]`, its
    /// position in `pos[0]`). RoPE and the KV write are fused into attention; with `fuse` the
    /// RMSNorms and the SwiGLU into the x-load of the projection after them: 6 dispatches a
    /// layer at most (8 without). `feed`: write the argmax to `ids[slot]` and feed it to the next
    /// step.
    fn record_decode(&self, b: &mut Batch, kv_cache: &KvCache, table: &wgpu::Buffer, pos: usize, table_len: usize, feed: Option<usize>) -> Result<()> {
        let (c, s) = (&self.cfg, &self.s);
        let fuse = self.fuse;
        let mv = |b: &mut Batch, x: &wgpu::Buffer, xl: XLoad, w: &Weight, y: &wgpu::Buffer, acc: bool| ops::matvec(b, x, 0, xl, w, y, acc, self.matvec);
        // y (+)= rmsnorm(x; nw) · Wᵀ
        let norm_mv = |b: &mut Batch, nw: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer| {
            if fuse {
                return mv(b, &s.x, XLoad::RmsNorm { w: nw, eps: c.eps }, w, y, false);
            }
            ops::rmsnorm(b, &s.x, nw, &s.xn, 1, c.dim, c.eps)?;
            mv(b, &s.xn, XLoad::Plain, w, y, false)
        };
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        ops::embed(b, &s.tokens, &self.embed, &s.x, 1)?;
        for (l, kv) in self.layers.iter().zip(&kv_cache.layers) {
            // attention: q|k|v = norm(x) · Wqkvᵀ; RoPE, the KV write and attention in one dispatch
            norm_mv(b, &l.attn_norm, &l.qkv, &s.qkv)?;
            let shape = AttnShape { t: 1, n_head: c.n_head, q_stride: c.qkv_width(), scale, ctx: pos + 1, split: Split::Auto, fused: true, kind: self.matvec };
            ops::attention(b, &s.qkv, &shape, &s.pos, table, table_len, kv, &self.rope, &s.att, &s.part)?;
            mv(b, &s.att, XLoad::Plain, &l.wo, &s.x, true)?; // x += att · woᵀ
            // feed-forward: x += swiglu(norm(x) · Wgate|upᵀ) · downᵀ
            norm_mv(b, &l.ffn_norm, &l.gate_up, &s.gu)?;
            if fuse {
                mv(b, &s.gu, XLoad::SwiGlu, &l.down, &s.x, true)?;
            } else {
                ops::swiglu(b, &s.gu, &s.h, 1, c.ffn)?;
                mv(b, &s.h, XLoad::Plain, &l.down, &s.x, true)?;
            }
        }
        let head = self.output.as_ref().unwrap_or(&self.embed);
        norm_mv(b, &self.output_norm, head, &s.logits)?;
        match feed {
            None => ops::argmax(b, &s.logits, &s.argmax, 1, c.vocab),
            Some(slot) => ops::argmax_feed(b, &s.logits, c.vocab, &s.ids, slot, &s.tokens, &s.pos),
        }
    }

    /// The model's shape, from its file.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The options it was loaded with.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Bytes of weights on the GPU (in the kernels' layout).
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// Reads back `rows` rows of logits computed by the last forward pass.
    pub async fn read_logits(&self, gpu: &Gpu, rows: usize) -> Result<Vec<f32>> {
        gpu.read_f32(&self.s.logits, rows * self.cfg.vocab).await
    }

    /// What a temperature sampler needs of the last forward pass's last-row logits, found on the
    /// GPU ([`Top`]: the [`TOP`] largest, the softmax sum at `temperature` and the logits of
    /// `window`, at most [`TOP_WINDOW`] ids): a few KB read back instead of the whole row.
    pub async fn read_top(&self, gpu: &Gpu, temperature: f32, window: &[u32]) -> Result<Top> {
        if window.len() > TOP_WINDOW {
            return Err(Error::InvalidArgument(format!("read_top: {} window ids, at most {TOP_WINDOW}", window.len())));
        }
        let vocab = self.cfg.vocab;
        let inv_t = if temperature > 0.0 { 1.0 / temperature } else { 1.0 };
        if !window.is_empty() {
            gpu.write(&self.s.window, 0, window);
        }
        let mut b = gpu.batch()?;
        ops::topk(&mut b, &self.s.logits, vocab, TOP, TOP_CAP, inv_t, &self.s.window, window.len(), &self.s.top)?;
        b.submit().await?;
        let w = gpu.read_u32(&self.s.top, ops::topk_words(TOP_CAP, window.len())).await?;
        let count = w[0] as usize;
        let cands = w[4..4 + 2 * count.min(TOP_CAP)].chunks_exact(2).map(|c| (c[0], f32::from_bits(c[1]))).collect();
        let at = 4 + 2 * TOP_CAP;
        Ok(Top {
            count,
            cands,
            threshold: w[1],
            max: f32::from_bits(w[2]),
            sum: f32::from_bits(w[3]) as f64,
            window: w[at..at + window.len()].iter().map(|&b| f32::from_bits(b)).collect(),
            vocab,
        })
    }

    /// Reads back the argmax of `rows` rows computed by the last forward pass (4 bytes a row).
    pub async fn read_argmax(&self, gpu: &Gpu, rows: usize) -> Result<Vec<u32>> {
        gpu.read_u32(&self.s.argmax, rows).await
    }

    /// Prefills `tokens` in chunks, starting at the sequence's current length; computes the last
    /// row's logits.
    pub async fn prefill(&self, gpu: &Gpu, kv: &KvCache, seq: &mut Sequence, tokens: &[u32]) -> Result<()> {
        let chunks: Vec<&[u32]> = tokens.chunks(self.opts.chunk).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let logits = if i + 1 == chunks.len() { Logits::Last } else { Logits::None };
            self.forward(gpu, kv, seq, chunk, logits).await?;
        }
        Ok(())
    }

    /// Teacher-forces `tokens` from the sequence's current length and calls `row(i, logits)` with
    /// the full logits after token `i` (needs `Options::all_logits`).
    pub async fn score(&self, gpu: &Gpu, kv: &KvCache, seq: &mut Sequence, tokens: &[u32], mut row: impl FnMut(usize, &[f32])) -> Result<()> {
        let mut done = 0;
        for chunk in tokens.chunks(self.opts.chunk) {
            self.forward(gpu, kv, seq, chunk, Logits::All).await?;
            let logits = self.read_logits(gpu, chunk.len()).await?;
            for (i, r) in logits.chunks_exact(self.cfg.vocab).enumerate() {
                row(done + i, r);
            }
            done += chunk.len();
        }
        Ok(())
    }
}

/// Whether decoding fuses the norms and SwiGLU into the projections with kernel variant `kind`.
/// It pays on GPUs (`Coop`) and with `Lanes`, where 8 lanes share one fused x-load. With `Rows`
/// each invocation walks the whole x, so a fused x-load repeats the norm-weight loads and the
/// exps per invocation, which costs more than the dispatches saved (docs/BENCHMARKS.md).
fn fused_by_default(kind: Kind) -> bool {
    kind != Kind::Rows
}
