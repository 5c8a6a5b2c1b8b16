//! One function per kernel: check shapes, pick the cached pipeline, record the dispatch.
//! Each kernel's WGSL lives in `shaders/<op>.wgsl`; its binding comments give the layouts.
//!
//! All activations are f32 buffers; shapes are passed explicitly (buffers are allocated once at
//! their largest size and an op uses the first rows it is told about).

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Gpu, Kernel};
use crate::quant::{self, Format};

macro_rules! kernel {
    ($name:literal, $entry:literal, [$($b:expr),*]) => {
        Kernel { name: $name, source: include_str!(concat!("../../shaders/", $name, ".wgsl")), entry: $entry, bindings: &[$($b),*] }
    };
}

static MATVEC: Kernel = kernel!("matmul", "matvec", [Read, Read, ReadWrite, Read]);
static MATVEC_COOP: Kernel = kernel!("matmul", "matvec_coop", [Read, Read, ReadWrite, Read]);
// matmul_lanes.wgsl uses matmul.wgsl's layout, bindings and helpers: one module of the two.
static MATVEC_LANES: Kernel = Kernel {
    name: "matmul_lanes",
    source: concat!(include_str!("../../shaders/matmul.wgsl"), include_str!("../../shaders/matmul_lanes.wgsl")),
    entry: "matvec_lanes",
    bindings: &[Read, Read, ReadWrite, Read],
};
static MATMUL_LANES: Kernel = Kernel { entry: "matmul_lanes", bindings: &[Read, Read, ReadWrite], ..MATVEC_LANES };
static MATMUL: Kernel = kernel!("matmul", "matmul", [Read, Read, ReadWrite]);
static RMSNORM: Kernel = kernel!("rmsnorm", "main", [Read, Read, ReadWrite]);
static ROPE: Kernel = kernel!("rope", "main", [ReadWrite, Read, Read]);
static SWIGLU: Kernel = kernel!("swiglu", "main", [Read, ReadWrite]);
static EMBED: Kernel = kernel!("embed", "main", [Read, Read, ReadWrite]);
static ARGMAX: Kernel = kernel!("argmax", "main", [Read, ReadWrite]);
static ARGMAX_FEED: Kernel = kernel!("argmax", "feed", [Read, ReadWrite, ReadWrite, ReadWrite]);
static TOPK: Kernel = kernel!("topk", "main", [Read, Read, ReadWrite]);
static KV_WRITE: Kernel = kernel!("kv_write", "main", [Read, Read, Read, ReadWrite, ReadWrite]);
static KV_COPY: Kernel = kernel!("kv_copy", "main", [ReadWrite, ReadWrite]);
static ATTENTION: Kernel = kernel!("attention", "main", [Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite, Read]);
static ATTENTION_COOP: Kernel = kernel!("attention", "coop", [Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite, Read]);
// attention_lanes.wgsl uses attention.wgsl's bindings and helpers: one module of the two.
static ATTENTION_LANES: Kernel = Kernel {
    name: "attention_lanes",
    source: concat!(include_str!("../../shaders/attention.wgsl"), include_str!("../../shaders/attention_lanes.wgsl")),
    entry: "lanes",
    bindings: &[Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite, Read],
};
static ATTENTION_COMBINE: Kernel = kernel!("attention", "combine", [Read, Read, Read, ReadWrite, ReadWrite, ReadWrite, ReadWrite, Read]);

/// Workgroup size of the matmul kernels along N.
const MM_WG: u32 = 64;
/// Most output rows per invocation of `matvec` (each x chunk is loaded once for all of them).
const MV_ROWS: usize = 8;
/// Fewest workgroups a `matvec` dispatch should have (fewer rows per invocation otherwise), on a
/// GPU and on a CPU adapter (lavapipe: measured in docs/BENCHMARKS.md).
const MV_MIN_GROUPS: usize = 8;
const MV_MIN_GROUPS_CPU: usize = 3;
/// Token count from which `matmul` uses the 4×4-tiled kernel instead of the matrix-vector one.
const TILE_FROM: usize = 4;

/// A weight matrix `[n, k]` on the GPU in its quantized form.
pub struct Weight {
    pub buf: wgpu::Buffer,
    pub format: Format,
    /// Output features (rows).
    pub n: usize,
    /// Input features (columns).
    pub k: usize,
}

impl Weight {
    /// Uploads GGUF bytes of an `[n, k]` matrix, repacked to the GPU layout.
    pub async fn upload(gpu: &Gpu, name: &str, format: Format, gguf_bytes: &[u8], n: usize, k: usize) -> Result<Weight> {
        Self::upload_owned(gpu, name, format, std::borrow::Cow::Borrowed(gguf_bytes), n, k).await
    }

    /// [`Self::upload`] that frees `gguf_bytes` (when owned) once converted, before the upload:
    /// a model load holds one tensor's file bytes or its GPU layout at a time, not both.
    pub async fn upload_owned(gpu: &Gpu, name: &str, format: Format, gguf_bytes: std::borrow::Cow<'_, [u8]>, n: usize, k: usize) -> Result<Weight> {
        let words = gpu_layout(name, format, &gguf_bytes, n, k)?;
        drop(gguf_bytes);
        let buf = gpu.upload(name, &words).await?;
        Ok(Weight { buf, format, n, k })
    }
}

/// The GPU layout of the `[n, k]` matrix `name` (`quant::to_gpu_layout`, which checks shape and
/// size; its error gains the tensor's name). The load's CPU check (`preflight`) converts with it
/// too.
pub(crate) fn gpu_layout(name: &str, format: Format, gguf_bytes: &[u8], n: usize, k: usize) -> Result<Vec<u32>> {
    quant::to_gpu_layout(format, gguf_bytes, n, k).map_err(|e| match e {
        Error::Weights(m) => Error::Weights(format!("{name}: {m}")),
        other => other,
    })
}

/// The KV pages of one layer: `[pages, n_kv, page_size, head_dim/2]` u32 each for K and V
/// (two f16 per word).
pub struct KvPages {
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub pages: usize,
    pub page_size: usize,
    pub n_kv: usize,
    pub head_dim: usize,
}

impl KvPages {
    pub async fn new(gpu: &Gpu, pages: usize, page_size: usize, n_kv: usize, head_dim: usize) -> Result<KvPages> {
        if !head_dim.is_multiple_of(4) || head_dim > 128 || page_size == 0 || n_kv == 0 {
            return Err(Error::shape("kv pages", format!("head_dim {head_dim} (multiple of 4, ≤ 128), page size {page_size}, {n_kv} KV heads")));
        }
        let bytes = [pages, n_kv, page_size, head_dim, 2]
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
            .ok_or_else(|| Error::TooLarge { what: format!("KV pages ({pages} pages of {page_size} tokens)"), bytes: u64::MAX, limit: gpu.limits.max_buffer_size })?;
        Ok(KvPages {
            k: gpu.storage("k pages", bytes).await?,
            v: gpu.storage("v pages", bytes).await?,
            pages,
            page_size,
            n_kv,
            head_dim,
        })
    }
}

fn need(op: &'static str, what: &str, buf: &wgpu::Buffer, floats: usize) -> Result<()> {
    let bytes = 4 * floats as u64;
    if buf.size() < bytes {
        return Err(Error::shape(op, format!("{what} holds {} bytes, needs {bytes}", buf.size())));
    }
    Ok(())
}

/// Spreads `n` workgroups over x (and y past the per-dimension limit).
fn groups_2d(gpu: &Gpu, n: usize) -> [u32; 3] {
    let max = gpu.limits.max_compute_workgroups_per_dimension as usize;
    if n <= max {
        [n as u32, 1, 1]
    } else {
        [max as u32, n.div_ceil(max) as u32, 1]
    }
}

/// Spreads `n` invocations of 64 over x (and y past the per-dimension limit).
fn groups_1d(gpu: &Gpu, n: usize) -> [u32; 3] {
    let g = n.div_ceil(64) as u32;
    let max = gpu.limits.max_compute_workgroups_per_dimension;
    if g <= max {
        [g, 1, 1]
    } else {
        [max, g.div_ceil(max), 1]
    }
}

fn u(v: usize) -> u32 {
    v as u32
}

/// `y[t, n] = x[t, k] · Wᵀ` (weights dequantized in the shader).
pub fn matmul(b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, t: usize) -> Result<()> {
    matmul_into(b, x, w, y, t, false, t >= TILE_FROM, Kind::for_adapter(b.gpu()))
}

/// `matmul` (or, with `acc`, `matmul_acc`) on the tiled kernel whatever `t` is. A row's result
/// does not depend on which other rows share the dispatch, so a prompt computed in any split into
/// chunks — a cached prefix and a new suffix, or all at once — gets the same K/V bit for bit:
/// prefill uses it, decode the faster matrix-vector kernel. `kind` picks the tiled kernel
/// (`Lanes`: `matmul_lanes` for the block formats; otherwise `matmul`).
pub fn matmul_exact(b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, t: usize, acc: bool, kind: Kind) -> Result<()> {
    matmul_into(b, x, w, y, t, acc, true, kind)
}

/// `y[t, n] += x[t, k] · Wᵀ`: a projection with the residual add fused in (one dispatch, not two).
pub fn matmul_acc(b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, t: usize) -> Result<()> {
    matmul_into(b, x, w, y, t, true, t >= TILE_FROM, Kind::for_adapter(b.gpu()))
}

#[allow(clippy::too_many_arguments)]
fn matmul_into(b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, t: usize, acc: bool, tiled: bool, kind: Kind) -> Result<()> {
    need("matmul", "x", x, t * w.k)?;
    need("matmul", "y", y, t * w.n)?;
    if !tiled {
        return matvec_rows(b, x, 0, XLoad::Plain, w, y, t, acc, kind);
    }
    let consts = [("FORMAT", w.format.shader_id()), ("WG", MM_WG as f64), ("ACC", acc as u32 as f64)];
    let params = [u(t), u(w.k), u(w.n), u(w.format.gpu_row_words(w.k)), 0, 0];
    let groups = [u(w.n.div_ceil(4)).div_ceil(MM_WG), u(t.div_ceil(4)), 1];
    let kernel = if lanes_block(b.gpu(), kind, w.format) { &MATMUL_LANES } else { &MATMUL };
    b.dispatch(kernel, &consts, &params, &[x, &w.buf, y], groups)
}

/// What a matrix-vector kernel applies to x as it loads it: the op before the projection, fused.
#[derive(Clone, Copy)]
pub enum XLoad<'a> {
    /// x as it is.
    Plain,
    /// `x / rms(x) · w` (RMSNorm with weight `w` of K floats).
    RmsNorm { w: &'a wgpu::Buffer, eps: f32 },
    /// `silu(x[:K]) · x[K:]` from rows of 2K (a fused gate|up projection's output).
    SwiGlu,
}

/// Which variant of the matrix-vector and attention kernels: chosen per adapter
/// ([`Kind::for_adapter`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Each invocation walks its work alone, no workgroup memory or barriers (CPU adapters:
    /// lavapipe, SwiftShader): matvec an invocation per 1–8 rows; attention an invocation per
    /// (token, query heads of a KV head, slice).
    Rows,
    /// CPU adapters with a fixed subgroup size, natively (lavapipe): matvec and the prefill
    /// matmul as `Rows`, with x shared by subgroup broadcast; attention by clusters of subgroup
    /// lanes that split the head dimension of 4 or 8 query rows of a KV head (the heads of one
    /// token or of neighbouring tokens) over a slice, so q and the sums stay in registers and each
    /// K/V word loaded serves every row; scores are summed with subgroup shuffles. Attention falls
    /// back to `Rows` for head dims the lanes cannot split.
    Lanes,
    /// Workgroups cooperate (GPUs): matvec a 256-lane workgroup per 32 rows, lanes splitting K;
    /// attention a 64-lane workgroup per (token, head, slice), state in workgroup memory.
    Coop,
}

impl Kind {
    /// `Lanes` on CPU adapters with fixed-size subgroups, `Rows` on other CPU adapters (a few fat
    /// workgroups beat many thin ones there), `Coop` elsewhere.
    pub fn for_adapter(gpu: &Gpu) -> Kind {
        if gpu.info.device_type != wgpu::DeviceType::Cpu {
            Kind::Coop
        } else if gpu.caps.subgroup_size.is_some() {
            Kind::Lanes
        } else {
            Kind::Rows
        }
    }

    /// The variants this adapter can run (`Lanes` needs fixed-size subgroups).
    pub fn available(gpu: &Gpu) -> Vec<Kind> {
        let mut v = vec![Kind::Rows];
        if gpu.caps.subgroup_size.is_some() {
            v.push(Kind::Lanes);
        }
        v.push(Kind::Coop);
        v
    }
}

/// `y[0, n] (+)= xl(x[x_row, :]) · Wᵀ`: one token's projection on the matrix-vector kernel `kind`,
/// with the op before it fused into the x-load.
#[allow(clippy::too_many_arguments)]
pub fn matvec(b: &mut Batch, x: &wgpu::Buffer, x_row: usize, xl: XLoad, w: &Weight, y: &wgpu::Buffer, acc: bool, kind: Kind) -> Result<()> {
    matvec_rows(b, x, x_row, xl, w, y, 1, acc, kind)
}

#[allow(clippy::too_many_arguments)]
fn matvec_rows(b: &mut Batch, x: &wgpu::Buffer, x_row: usize, xl: XLoad, w: &Weight, y: &wgpu::Buffer, t: usize, acc: bool, kind: Kind) -> Result<()> {
    let width = if matches!(xl, XLoad::SwiGlu) { 2 * w.k } else { w.k };
    need("matvec", "x", x, (x_row + t) * width)?;
    need("matvec", "y", y, t * w.n)?;
    let (xload, aux, eps) = match xl {
        XLoad::Plain => (0, &w.buf, 0.0),
        XLoad::RmsNorm { w: nw, eps } => {
            need("matvec", "norm weight", nw, w.k)?;
            (1, nw, eps)
        }
        XLoad::SwiGlu => (2, &w.buf, 0.0),
    };
    let params = [u(t), u(w.k), u(w.n), u(w.format.gpu_row_words(w.k)), u(x_row * width / 4), f32::to_bits(eps)];
    let consts = [("FORMAT", w.format.shader_id()), ("ACC", acc as u32 as f64), ("XLOAD", xload as f64)];
    match kind {
        Kind::Rows | Kind::Lanes => {
            // As many rows per invocation as leave enough workgroups to keep every core busy.
            let invocations = |r: usize| w.n.div_ceil(r * quant::ROW_GROUP) * quant::ROW_GROUP;
            // lavapipe runs a workgroup per CPU thread: a few fat workgroups beat many thin ones
            // (fewer x loads per weight); real GPUs want many workgroups in flight.
            let min_groups = if b.gpu().info.device_type == wgpu::DeviceType::Cpu { MV_MIN_GROUPS_CPU } else { MV_MIN_GROUPS };
            let r = [MV_ROWS, 4, 2, 1].into_iter().find(|&r| invocations(r).div_ceil(MM_WG as usize) >= min_groups).unwrap_or(1);
            let groups = [u(invocations(r)).div_ceil(MM_WG), u(t), 1];
            let consts = [consts[0], consts[1], consts[2], ("WG", MM_WG as f64), ("R", r as f64)];
            let kernel = if lanes_block(b.gpu(), kind, w.format) { &MATVEC_LANES } else { &MATVEC };
            b.dispatch(kernel, &consts, &params, &[x, &w.buf, y, aux], groups)
        }
        Kind::Coop => {
            let groups = [u(w.n.div_ceil(quant::ROW_GROUP)), u(t), 1];
            b.dispatch(&MATVEC_COOP, &consts, &params, &[x, &w.buf, y, aux], groups)
        }
    }
}

/// Whether `kind` runs `matmul_lanes.wgsl` on weights of `format`: the block formats, where 8 lanes
/// share a block's x by subgroup broadcast (subgroups of at least 8 lanes).
fn lanes_block(gpu: &Gpu, kind: Kind, format: Format) -> bool {
    kind == Kind::Lanes && format.block() == 32 && gpu.caps.subgroup_size.is_some_and(|n| n >= 8)
}

/// `y[r] = x[r] / rms(x[r]) · w` for `rows` rows of `dim`.
pub fn rmsnorm(b: &mut Batch, x: &wgpu::Buffer, w: &wgpu::Buffer, y: &wgpu::Buffer, rows: usize, dim: usize, eps: f32) -> Result<()> {
    need("rmsnorm", "x", x, rows * dim)?;
    need("rmsnorm", "w", w, dim)?;
    need("rmsnorm", "y", y, rows * dim)?;
    b.dispatch(&RMSNORM, &[], &[u(rows), u(dim), eps.to_bits()], &[x, w, y], [u(rows).div_ceil(64), 1, 1])
}

/// Shape of a RoPE application: the first `heads` heads of each of `t` rows, `row_stride` floats apart.
pub struct RopeShape {
    pub t: usize,
    pub heads: usize,
    pub row_stride: usize,
    pub head_dim: usize,
}

/// The RoPE table [`rope`] and fused attention read: `[max_pos, head_dim/2]` pairs `(cos θ, sin θ)`
/// with `θ = pos · base^(-2i/head_dim)`, computed in f64.
pub fn rope_table(max_pos: usize, head_dim: usize, base: f64) -> Vec<[f32; 2]> {
    let half = head_dim / 2;
    let mut out = Vec::with_capacity(max_pos * half);
    for pos in 0..max_pos {
        for i in 0..half {
            let a = pos as f64 * base.powf(-2.0 * i as f64 / head_dim as f64);
            out.push([a.cos() as f32, a.sin() as f32]);
        }
    }
    out
}

/// Rotates pairs in place with the `(cos, sin)` table `[max_pos, head_dim/2]` at each token's position.
pub fn rope(b: &mut Batch, x: &wgpu::Buffer, pos: &wgpu::Buffer, table: &wgpu::Buffer, s: &RopeShape) -> Result<()> {
    if !s.head_dim.is_multiple_of(2) || !s.row_stride.is_multiple_of(2) || s.heads * s.head_dim > s.row_stride {
        return Err(Error::shape("rope", format!("{} heads of {} in rows of {}", s.heads, s.head_dim, s.row_stride)));
    }
    need("rope", "x", x, s.t * s.row_stride)?;
    need("rope", "positions", pos, s.t)?;
    let max_pos = table.size() as usize / (4 * s.head_dim);
    if max_pos == 0 {
        return Err(Error::shape("rope", "empty table"));
    }
    let params = [u(s.t), u(s.heads), u(s.row_stride), u(s.head_dim), u(max_pos)];
    b.dispatch(&ROPE, &[], &params, &[x, pos, table], groups_1d(b.gpu(), s.t * s.heads * s.head_dim / 2))
}

/// `y[t, j] = silu(x[t, j]) · x[t, f + j]` for a fused gate|up row of `2f`.
pub fn swiglu(b: &mut Batch, x: &wgpu::Buffer, y: &wgpu::Buffer, t: usize, f: usize) -> Result<()> {
    need("swiglu", "x", x, t * 2 * f)?;
    need("swiglu", "y", y, t * f)?;
    b.dispatch(&SWIGLU, &[], &[u(t), u(f)], &[x, y], groups_1d(b.gpu(), t * f))
}

/// `y[i, :] = table[tokens[i], :]` from a Q8_0 table. Token ids are checked by the caller
/// (the shader clamps to the last row rather than read out of bounds).
pub fn embed(b: &mut Batch, tokens: &wgpu::Buffer, table: &Weight, y: &wgpu::Buffer, t: usize) -> Result<()> {
    if table.format != Format::Q8_0 {
        return Err(Error::shape("embed", format!("table is {}, the kernel reads Q8_0", table.format.name())));
    }
    need("embed", "tokens", tokens, t)?;
    need("embed", "y", y, t * table.k)?;
    let params = [u(t), u(table.k), u(table.n), u(table.format.gpu_row_words(table.k))];
    b.dispatch(&EMBED, &[], &params, &[tokens, &table.buf, y], groups_1d(b.gpu(), t * table.k))
}

/// `out[r] = argmax(x[r, :n])` for `rows` rows (u32 ids; lowest on ties).
pub fn argmax(b: &mut Batch, x: &wgpu::Buffer, out: &wgpu::Buffer, rows: usize, n: usize) -> Result<()> {
    need("argmax", "x", x, rows * n)?;
    need("argmax", "out", out, rows)?;
    b.dispatch(&ARGMAX, &[], &[u(rows), u(n), 0], &[x, out], [u(rows), 1, 1])
}

/// Greedy decoding without the CPU: `ids[slot] = tokens[0] = argmax(x[0, :n])` and `pos[0] += 1`,
/// so the next step (embedding `tokens[0]` at `pos[0]`) can be queued before this one is read.
pub fn argmax_feed(b: &mut Batch, x: &wgpu::Buffer, n: usize, ids: &wgpu::Buffer, slot: usize, tokens: &wgpu::Buffer, pos: &wgpu::Buffer) -> Result<()> {
    need("argmax", "x", x, n)?;
    need("argmax", "ids", ids, slot + 1)?;
    need("argmax", "tokens", tokens, 1)?;
    need("argmax", "positions", pos, 1)?;
    b.dispatch(&ARGMAX_FEED, &[], &[1, u(n), u(slot)], &[x, ids, tokens, pos], [1, 1, 1])
}

/// How many u32 words [`topk`] writes for `cap` candidates and a penalty window of `window` ids.
pub fn topk_words(cap: usize, window: usize) -> usize {
    4 + 2 * cap + window
}

/// What a temperature sampler needs of the `n` logits in `x` (one row), into `out`
/// ([`topk_words`] long): every logit at or above the `k`-th largest (up to `cap` of them, and
/// how many there are), the row's largest logit, `Σ exp((x - max) · inv_t)`, and the logits of
/// the first `window` ids in `win`. Layout: shaders/topk.wgsl.
#[allow(clippy::too_many_arguments)]
pub fn topk(b: &mut Batch, x: &wgpu::Buffer, n: usize, k: usize, cap: usize, inv_t: f32, win: &wgpu::Buffer, window: usize, out: &wgpu::Buffer) -> Result<()> {
    need("topk", "x", x, n)?;
    need("topk", "window", win, window.max(1))?;
    need("topk", "out", out, topk_words(cap, window))?;
    if k == 0 || k > cap || n == 0 {
        return Err(Error::shape("topk", format!("k = {k}, cap = {cap}, n = {n}: need 0 < k <= cap and n > 0")));
    }
    b.dispatch(&TOPK, &[], &[u(n), u(k), u(cap), inv_t.to_bits(), u(window)], &[x, win, out], [1, 1, 1])
}

/// Where K and V of each token sit in a source buffer of rows.
pub struct KvSource {
    pub t: usize,
    pub row_stride: usize,
    pub k_off: usize,
    pub v_off: usize,
}

/// Writes `t` tokens' K and V (f32, from `src`) into `kv` at positions `pos` via `table`.
pub fn kv_write(b: &mut Batch, src: &wgpu::Buffer, s: &KvSource, pos: &wgpu::Buffer, table: &wgpu::Buffer, table_len: usize, kv: &KvPages) -> Result<()> {
    let width = kv.n_kv * kv.head_dim;
    if !s.row_stride.is_multiple_of(2) || !s.k_off.is_multiple_of(2) || !s.v_off.is_multiple_of(2) || s.k_off.max(s.v_off) + width > s.row_stride {
        return Err(Error::shape("kv_write", format!("K at {} and V at {} ({width} wide) in rows of {}", s.k_off, s.v_off, s.row_stride)));
    }
    need("kv_write", "src", src, s.t * s.row_stride)?;
    need("kv_write", "positions", pos, s.t)?;
    need("kv_write", "page table", table, table_len.max(1))?;
    let params = [u(s.t), u(kv.n_kv), u(kv.head_dim), u(kv.page_size), u(s.row_stride), u(s.k_off), u(s.v_off), u(table_len)];
    b.dispatch(&KV_WRITE, &[], &params, &[src, pos, table, &kv.k, &kv.v], groups_1d(b.gpu(), s.t * width / 2))
}

/// Copies the first `n` positions of page `src` to page `dst` in one layer's K and V pages (the
/// copy-on-write of a partly shared page).
pub fn kv_copy(b: &mut Batch, kv: &KvPages, src: usize, dst: usize, n: usize) -> Result<()> {
    if src >= kv.pages || dst >= kv.pages || src == dst || n > kv.page_size {
        return Err(Error::shape("kv_copy", format!("{n} positions from page {src} to page {dst} of {} pages of {}", kv.pages, kv.page_size)));
    }
    let params = [u(src), u(dst), u(n), u(kv.n_kv), u(kv.page_size), u(kv.head_dim / 2)];
    b.dispatch(&KV_COPY, &[], &params, &[&kv.k, &kv.v], [u(kv.n_kv * n * kv.head_dim / 2).div_ceil(64), 1, 1])
}

/// Shape of an attention call: `t` query rows of `q_stride` floats with `n_head` heads at the start,
/// the last query at position `ctx - 1`.
pub struct AttnShape {
    pub t: usize,
    pub n_head: usize,
    pub q_stride: usize,
    pub scale: f32,
    pub ctx: usize,
    pub split: Split,
    /// One token (decode) whose Q and K are not rotated and whose K/V are not in the pages yet:
    /// attention rotates them with the RoPE table, reads the token's own K/V from its row and
    /// writes them to the pages (rope + kv_write + attention in one dispatch). The row holds
    /// Q | K | V, K right after the `n_head` query heads.
    pub fused: bool,
    /// The kernel variant.
    pub kind: Kind,
}

/// How attention spreads a query's positions over invocations (flash-decoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// As many slices as keep the adapter busy when there are few queries (decode). The slices
    /// depend on the pass, and so does the order of the softmax sums.
    Auto,
    /// Slices of [`ATTN_SPAN`] positions at multiples of it: a query's result depends only on its
    /// own position, whatever other queries share the pass (prefill, see `matmul_exact`), and a few
    /// queries over a long cached prefix still spread over many invocations.
    Fixed,
}

/// Positions per attention slice with [`Split::Fixed`].
pub const ATTN_SPAN: usize = 256;

/// Invocations from which attention is parallel enough without splitting positions.
const ATTN_PARALLEL: usize = 256;
/// `Kind::Lanes` decode: items (lane clusters) from which attention is parallel enough.
const ATTN_LANE_ITEMS: usize = 24;
/// Fewest positions one attention split covers.
const ATTN_MIN_SPLIT: usize = 32;

/// `Kind::Lanes` attention's split of a head (`head_dim / 4` quads) over the lanes of a subgroup:
/// (lanes per item, quads per lane), the lanes a power of two within the subgroup and at most 4
/// quads each; `None` (the `Rows` kernel) when the adapter has no fixed subgroup size or the
/// head dim does not split so.
fn lanes_split(gpu: &Gpu, kind: Kind, head_dim: usize) -> Option<(usize, usize)> {
    let sg = gpu.caps.subgroup_size? as usize;
    if kind != Kind::Lanes || !head_dim.is_multiple_of(4) {
        return None;
    }
    let hd4 = head_dim / 4;
    let lanes = (0..=sg.ilog2()).rev().map(|e| 1usize << e).find(|l| hd4.is_multiple_of(*l) && hd4 / l <= 4)?;
    Some((lanes, hd4 / lanes))
}

/// Bytes of the `part` scratch buffer `attention` needs for one query (decode, [`Split::Auto`])
/// and for up to `t` queries over up to `ctx` positions ([`Split::Fixed`]), of `n_head` heads.
pub fn attention_scratch_bytes(t: usize, n_head: usize, head_dim: usize, ctx: usize) -> u64 {
    let auto = ATTN_PARALLEL.div_ceil(n_head).max(1) * n_head;
    let fixed = t * n_head * ctx.div_ceil(ATTN_SPAN);
    (auto.max(fixed) * (head_dim / 4 + 1) * 16) as u64
}

/// Causal GQA attention of `t` queries at positions `pos` over the pages in `table`. Few queries
/// over a long context are split over positions (partials in `part`, then merged). `rope` is the
/// `(cos, sin)` table `[max_pos, head_dim/2]` ([`AttnShape::fused`] uses it).
#[allow(clippy::too_many_arguments)]
pub fn attention(b: &mut Batch, q: &wgpu::Buffer, s: &AttnShape, pos: &wgpu::Buffer, table: &wgpu::Buffer, table_len: usize, kv: &KvPages, rope: &wgpu::Buffer, out: &wgpu::Buffer, part: &wgpu::Buffer) -> Result<()> {
    if !s.n_head.is_multiple_of(kv.n_kv) || !s.q_stride.is_multiple_of(4) || s.n_head * kv.head_dim > s.q_stride {
        return Err(Error::shape("attention", format!("{} query heads over {} KV heads, rows of {}", s.n_head, kv.n_kv, s.q_stride)));
    }
    if rope.size() < 16 {
        return Err(Error::shape("attention", "the RoPE table binding needs at least 16 bytes"));
    }
    if s.fused && (s.t != 1 || (s.n_head + 2 * kv.n_kv) * kv.head_dim > s.q_stride || (rope.size() as usize) < 4 * kv.head_dim) {
        return Err(Error::shape("attention", format!("fused RoPE + KV write needs one token with Q|K|V rows ({} tokens, rows of {}) and a RoPE table", s.t, s.q_stride)));
    }
    need("attention", "q", q, s.t * s.q_stride)?;
    need("attention", "positions", pos, s.t)?;
    need("attention", "page table", table, table_len.max(1))?;
    need("attention", "out", out, s.t * s.n_head * kv.head_dim)?;
    if s.ctx > table_len * kv.page_size {
        return Err(Error::shape("attention", format!("context {} beyond {table_len} pages of {}", s.ctx, kv.page_size)));
    }
    let heads = s.t * s.n_head;
    let stride = 16 * (kv.head_dim / 4 + 1) as u64;
    let by_room = (part.size() / (stride * heads as u64)) as usize;
    // GPUs: a workgroup per (token, head, slice) of at most ATTN_SPAN positions (`coop`). CPU
    // adapters: an invocation (`main`) per (token, KV head's query heads, slice), or, where the
    // subgroup size is fixed (lavapipe), a cluster of subgroup lanes (`attention_lanes`) per
    // (4 or 8 query rows of a KV head, slice); each reads a K/V row once for all its rows.
    let coop = s.kind == Kind::Coop;
    let ratio = s.n_head / kv.n_kv;
    // Kind::Lanes: items of 4 query rows of a KV head (the heads of one token, or of neighbouring
    // tokens), or of 8 where a lane holds at most 2 quads and there are more than 4 rows: each
    // K/V word loaded serves them all.
    let lanes = lanes_split(b.gpu(), s.kind, kv.head_dim);
    let lane_sets = match lanes {
        Some((_, quads)) if quads <= 2 && s.t * ratio > 4 => 2,
        _ => 1,
    };
    let lane_chunks = (s.t * ratio).div_ceil(4 * lane_sets);
    let (splits, span) = match s.split {
        Split::Auto if coop => {
            // Slices of at most ATTN_SPAN positions (the kernel's workgroup memory), more when
            // there is room and few queries.
            let splits = ATTN_PARALLEL.div_ceil(heads).min(s.ctx.div_ceil(ATTN_MIN_SPLIT)).min(by_room).max(s.ctx.div_ceil(ATTN_SPAN));
            if splits > by_room.max(1) {
                return Err(Error::shape("attention", format!("{splits} slices of {} queries need a larger partials buffer", s.t)));
            }
            (splits.max(1), 0)
        }
        Split::Auto if lanes.is_some() => {
            // Lane clusters: a few items per CPU thread (measured: 12–24 items beat 48–87).
            (ATTN_LANE_ITEMS.div_ceil(kv.n_kv * lane_chunks).min(s.ctx.div_ceil(ATTN_MIN_SPLIT)).min(by_room).max(1), 0)
        }
        Split::Auto => (ATTN_PARALLEL.div_ceil(heads).min(s.ctx.div_ceil(ATTN_MIN_SPLIT)).min(by_room).max(1), 0),
        Split::Fixed => {
            let splits = s.ctx.div_ceil(ATTN_SPAN);
            if splits > by_room.max(1) {
                return Err(Error::shape("attention", format!("{splits} slices of {} queries need a larger partials buffer", s.t)));
            }
            (splits, ATTN_SPAN)
        }
    };
    let group = if !coop && ratio <= 8 && ratio * kv.head_dim / 4 <= 128 { ratio } else { 1 };
    let params = [u(s.t), u(s.n_head), u(kv.n_kv), u(kv.head_dim), u(kv.page_size), u(s.q_stride), s.scale.to_bits(), u(table_len), u(splits), u(span)];
    let buffers = [q, pos, table, &kv.k, &kv.v, out, part, rope];
    if coop {
        b.dispatch(&ATTENTION_COOP, &[("FUSED", s.fused as u32 as f64)], &params, &buffers, groups_2d(b.gpu(), heads * splits))?;
    } else if let Some((lanes, quads)) = lanes {
        // `lanes` lanes per item, at least 8 lanes (one AVX2 vector) per workgroup.
        let wg = lanes * (8 / lanes).max(1);
        let consts = [("FUSED", s.fused as u32 as f64), ("L", lanes as f64), ("QPL", quads as f64), ("SETS", lane_sets as f64), ("WG", wg as f64)];
        let items = kv.n_kv * lane_chunks * splits;
        b.dispatch(&ATTENTION_LANES, &consts, &params, &buffers, groups_2d(b.gpu(), items.div_ceil(wg / lanes)))?;
    } else {
        // One SIMD width per workgroup: a decode step has only 12–90 invocations here.
        const WG: usize = 8;
        let consts = [("GROUP", group as f64), ("FUSED", s.fused as u32 as f64), ("WG", WG as f64)];
        b.dispatch(&ATTENTION, &consts, &params, &buffers, groups_2d(b.gpu(), (heads / group * splits).div_ceil(WG)))?;
    }
    if splits > 1 {
        b.dispatch(&ATTENTION_COMBINE, &[], &params, &buffers, [u(heads).div_ceil(64), 1, 1])?;
    }
    Ok(())
}
