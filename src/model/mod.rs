//! A model on the GPU: its config from the GGUF metadata ([`Config`]), its quantized weights
//! uploaded as they are (`load`), scratch buffers allocated once, and the forward pass of its
//! architecture (`arch`: one short file each, over the shared blocks in `blocks`).

pub mod arch;
mod blocks;
mod config;
pub mod gguf;
pub mod inspect;
mod load;
pub mod preflight;
pub mod quant;

use crate::error::{Error, Result};

use crate::cache::kv::{KvCache, Sequence};
use crate::gpu::Gpu;
use gguf::Gguf;

use crate::engine::sample::{TOP, TOP_CAP, TOP_LAYOUT, TOP_WINDOW};
/// The matrix-vector and attention kernel variant ([`Model::use_kernels`]).
pub use crate::ops::Variant;
use crate::ops::{self, Top, Weight};

use arch::Arch;
use blocks::{Mode, Pass};
pub use config::{Act, Config, Rope, Swa, MAX_CONTEXT};
pub use load::TensorBytes;
use load::Upload;
pub(crate) use load::{load_weights, Layer, Sink, Weights};

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
    top: wgpu::Buffer,    // TOP_LAYOUT.words() u32: what `read_top` reads
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
    /// The architecture: its forward pass.
    arch: &'static Arch,
    pub(crate) cfg: Config,
    pub(crate) opts: Options,
    embed: Weight, // [vocab, dim] in any format; the output head too when tied
    output: Option<Weight>,
    output_norm: wgpu::Buffer,
    layers: Vec<Layer>,
    rope: wgpu::Buffer, // [context, hd/2] (cos, sin)
    /// The local (sliding-window) layers' RoPE table, when their base differs (Gemma-3).
    rope_local: Option<wgpu::Buffer>,
    /// Which of LongRoPE's factors the RoPE table has (`"long"` or `"short"`), for a file with both.
    long_rope: Option<&'static str>,
    s: Scratch,
    /// The matrix-vector and attention kernel variant (chosen for the adapter).
    variant: Variant,
    /// Decode fuses the RMSNorms and the SwiGLU into the projections' x-loads (`blocks`).
    fuse: bool,
    /// Bytes of weights on the GPU.
    pub(crate) weight_bytes: u64,
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
        let Weights { rope_factors, embed, output, output_norm, layers } = load_weights(g, file, &cfg, &mut sink, progress).await?;
        let weight_bytes = sink.bytes;
        let (d, hd) = (cfg.dim, cfg.head_dim);
        let max_pos = opts.context.unwrap_or(cfg.context);
        let (rope, rope_local, long_rope) = rope_tables(gpu, &cfg, &rope_factors, max_pos).await?;
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
            top: gpu.storage("top logits", f(TOP_LAYOUT.words())).await?,
            part: gpu.storage("attention partials", ops::attention_scratch_bytes(t, cfg.n_head, hd, max_pos)).await?,
        };
        let variant = Variant::for_adapter(gpu);
        let fuse = fused_by_default(variant);
        Ok(Model {
            arch: Arch::of(g)?,
            cfg,
            opts,
            embed,
            output,
            output_norm,
            layers,
            rope,
            rope_local,
            long_rope,
            s,
            variant,
            fuse,
            weight_bytes,
        })
    }

    /// Makes the matrix-vector and attention kernels variant `kind` instead of the adapter's
    /// choice (tests run both on one adapter; benchmarks compare them).
    /// Decoding fuses the norms and SwiGLU as the variant does by default (`fuse_decode` after
    /// this changes it).
    pub fn use_kernels(&mut self, kind: Variant) {
        self.variant = kind;
        self.fuse = fused_by_default(kind);
    }

    /// Makes decoding fuse the RMSNorms and the SwiGLU into the projections after them (`true`:
    /// 5–6 dispatches a layer, the default with the `Coop` and `Lanes` kernels) or run them as
    /// dispatches of their own (`false`: 8–9 a layer, the default with `Rows`, where it is
    /// faster); the sixth (ninth) is attention's merge of its split positions.
    /// Tests run both; `hotprefix bench profile` compares them.
    pub fn fuse_decode(&mut self, fuse: bool) {
        self.fuse = fuse;
    }

    /// The matrix-vector and attention kernel variant in use.
    pub fn kernels(&self) -> Variant {
        self.variant
    }

    /// Positions a sequence can reach: the context window (`Options::context`).
    pub fn max_positions(&self) -> usize {
        self.cfg.context.min(self.rope.size() as usize / (4 * self.cfg.head_dim))
    }

    /// A KV cache for this model: `pages` pages of `page_size` positions, and a page table for
    /// sequences up to the context window.
    pub async fn kv_cache(&self, gpu: &Gpu, pages: usize, page_size: usize) -> Result<KvCache> {
        KvCache::new(gpu, self.cfg.kv_shape(), pages, page_size, self.max_positions()).await
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
    /// and the KV write fused in, split over positions): 6 dispatches a layer at most fused, 9
    /// unfused (`blocks`).
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
            self.record(&mut Pass { b: &mut b, m: self, kv, table, table_len, mode: Mode::Decode { pos: start + i, feed: Some(i) } })?;
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
        let mode = if exact { Mode::Prefill { start, t, logits } } else { Mode::Decode { pos: start, feed: None } };
        let mut b = gpu.batch()?;
        self.record(&mut Pass { b: &mut b, m: self, kv, table, table_len, mode })?;
        b.submit().await?;
        seq.advance(t);
        Ok(())
    }

    /// Records one forward pass of the model's architecture.
    fn record(&self, p: &mut Pass<'_, '_>) -> Result<()> {
        (self.arch.forward)(p)
    }

    /// Which of LongRoPE's frequency factors this model's RoPE uses (`Some("long")` for a context
    /// window past the original training context, `Some("short")` within it; `None` for a file
    /// without them). Cached K differs between the two.
    pub fn long_rope(&self) -> Option<&'static str> {
        self.long_rope
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
        let layout = ops::TopkLayout { cap: TOP_CAP, window: window.len() };
        let w = gpu.read_u32(&self.s.top, layout.words()).await?;
        layout.parse(&w, vocab)
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
    pub async fn score(
        &self,
        gpu: &Gpu,
        kv: &KvCache,
        seq: &mut Sequence,
        tokens: &[u32],
        mut row: impl FnMut(usize, &[f32]),
    ) -> Result<()> {
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

/// The RoPE tables for positions below `max_pos`: the global one, with the file's frequency
/// factors (Llama-3's, or LongRoPE's long or short ones by the context window), linear scaling
/// and attention factor; the local layers' one (Gemma-3: their base, no factors); and which
/// LongRoPE factors it took.
async fn rope_tables(
    gpu: &Gpu,
    cfg: &Config,
    factors: &load::RopeFactors,
    max_pos: usize,
) -> Result<(wgpu::Buffer, Option<wgpu::Buffer>, Option<&'static str>)> {
    let (picked, long_rope) = factors.pick(max_pos, cfg);
    // Linear scaling divides every angle by its factor, as frequency factors do (ggml:
    // `freq_scale · θ / factor`).
    let factors: Option<Vec<f32>> = match (picked, cfg.rope_linear != 1.0) {
        (Some(f), linear) => Some(f.iter().map(|&f| if linear { (f as f64 * cfg.rope_linear) as f32 } else { f }).collect()),
        (None, true) => Some(vec![cfg.rope_linear as f32; cfg.n_rot / 2]),
        (None, false) => None,
    };
    let (hd, n_rot) = (cfg.head_dim, cfg.n_rot);
    let table = ops::rope_table_scaled(max_pos, hd, n_rot, cfg.rope_base, factors.as_deref(), cfg.rope_attn_factor);
    let rope = gpu.upload("rope table", &table).await?;
    let rope_local = match &cfg.swa {
        Some(swa) => Some(
            gpu.upload("local rope table", &ops::rope_table_scaled(max_pos, hd, n_rot, swa.rope_base, None, cfg.rope_attn_factor)).await?,
        ),
        None => None,
    };
    Ok((rope, rope_local, long_rope))
}

/// Whether decoding fuses the norms and SwiGLU into the projections with kernel variant `kind`.
/// It pays on GPUs (`Coop`) and with `Lanes`, where 8 lanes share one fused x-load. With `Rows`
/// each invocation walks the whole x, so a fused x-load repeats the norm-weight loads and the
/// exps per invocation, which costs more than the dispatches saved (docs/BENCHMARKS.md).
fn fused_by_default(kind: Variant) -> bool {
    kind != Variant::Rows
}
