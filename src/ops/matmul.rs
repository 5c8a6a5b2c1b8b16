//! `y[T, N] = x[T, K] · W[N, K]ᵀ` with the weights dequantized in the shader (`shaders/matmul.wgsl`,
//! and `matmul_lanes.wgsl` for the subgroup variants): the tiled `matmul` for prefill, and the
//! matrix-vector kernels for one token, with the op before the projection fused into the x-load.

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Gpu, Kernel};
use crate::model::quant::{self, Format};

use super::{need, u, Variant};

// matmul.wgsl decodes weights with quant.wgsl and applies glu.wgsl's activations, and
// matmul_lanes.wgsl uses all three: one module.
static MATVEC: Kernel = Kernel {
    name: "matmul",
    source: concat!(
        include_str!("../../shaders/quant.wgsl"),
        include_str!("../../shaders/glu.wgsl"),
        include_str!("../../shaders/matmul.wgsl")
    ),
    entry: "matvec",
    bindings: &[Read, Read, ReadWrite, Read],
};
static MATVEC_COOP: Kernel = Kernel { entry: "matvec_coop", ..MATVEC };
static MATMUL: Kernel = Kernel { entry: "matmul", bindings: &[Read, Read, ReadWrite], ..MATVEC };
static MATVEC_LANES: Kernel = Kernel {
    name: "matmul_lanes",
    source: concat!(
        include_str!("../../shaders/quant.wgsl"),
        include_str!("../../shaders/glu.wgsl"),
        include_str!("../../shaders/matmul.wgsl"),
        include_str!("../../shaders/matmul_lanes.wgsl")
    ),
    entry: "matvec_lanes",
    // Bindings 5 and 6: the weights again, as u64 and as vec4<u64> (matmul_lanes.wgsl).
    bindings: &[Read, Read, ReadWrite, Read, Read, Read],
};
/// Binding 4 (the RMSNorm weight of the matrix-vector kernels' XLOAD) is unused: the dispatch binds x there.
static MATMUL_LANES: Kernel = Kernel { entry: "matmul_lanes", ..MATVEC_LANES };

/// Workgroup size of the matmul kernels along N; for the CPU adapters' matrix-vector and
/// `matmul_lanes` dispatches the widest: they take whole subgroups of the rows there are, as few as
/// cover them.
const MM_WG: u32 = 64;
/// Most output rows per invocation of `matvec` (each x chunk is loaded once for all of them).
const MV_ROWS: usize = 8;
/// Fewest workgroups a `matvec` dispatch should have (fewer rows per invocation otherwise), on a
/// GPU and on a CPU adapter (lavapipe: measured in docs/BENCHMARKS.md).
const MV_MIN_GROUPS: usize = 8;
const MV_MIN_GROUPS_CPU: usize = 3;
/// Fewest workgroups a `matvec_coop` dispatch should have (fewer rows a workgroup otherwise).
const COOP_MIN_GROUPS: usize = 256;
/// Token count from which `matmul` uses the tiled kernel instead of the matrix-vector one.
const TILE_FROM: usize = 4;
/// `Coop`'s tiled matmul takes 4 tokens a tile from this many tokens, 1 below (see `matmul_into`).
const COOP_TILE_FROM: usize = 64;

/// A weight matrix `[n, k]` on the GPU in its quantized form: one or more parts, each a range of
/// rows in one format and one buffer. A matrix has several parts when it is larger than one
/// binding (`max_storage_buffer_binding_size`: split by rows), or when it fuses tensors of
/// different formats (a Q4_K_M file's Q|K|V: Q5_0, Q5_0, Q8_0).
pub struct Weight {
    /// The parts, in row order, covering rows `0..n`.
    pub parts: Vec<Part>,
    /// Output features (rows).
    pub n: usize,
    /// Input features (columns).
    pub k: usize,
}

/// Rows `row0 .. row0 + n` of a [`Weight`], in one format and one buffer.
pub struct Part {
    /// The rows in the GPU layout (`quant::to_gpu_layout`).
    pub buf: wgpu::Buffer,
    /// Their format.
    pub format: Format,
    /// The first row.
    pub row0: usize,
    /// Rows.
    pub n: usize,
}

impl Weight {
    /// Uploads GGUF bytes of an `[n, k]` matrix, repacked to the GPU layout.
    pub async fn upload(gpu: &Gpu, name: &str, format: Format, gguf_bytes: &[u8], n: usize, k: usize) -> Result<Weight> {
        Self::upload_owned(gpu, name, format, std::borrow::Cow::Borrowed(gguf_bytes), n, k).await
    }

    /// [`Self::upload`] that frees `gguf_bytes` (when owned) once uploaded. Converts and uploads
    /// a few MiB of rows at a time: a load holds the file's bytes of one tensor and a block of
    /// rows of its GPU layout. A matrix larger than a binding is split by rows into parts of
    /// whole row groups; one whose single row group is larger is refused ([`Error::TooLarge`]).
    pub async fn upload_owned(
        gpu: &Gpu,
        name: &str,
        format: Format,
        gguf_bytes: std::borrow::Cow<'_, [u8]>,
        n: usize,
        k: usize,
    ) -> Result<Weight> {
        Self::upload_limited(gpu, name, format, gguf_bytes, n, k, gpu.binding_limit()).await
    }

    /// [`Self::upload_owned`] with parts of at most `limit` bytes (the binding limit, or less in
    /// tests of the split).
    pub async fn upload_limited(
        gpu: &Gpu,
        name: &str,
        format: Format,
        gguf_bytes: std::borrow::Cow<'_, [u8]>,
        n: usize,
        k: usize,
        limit: u64,
    ) -> Result<Weight> {
        let rows = part_rows(limit.min(gpu.binding_limit()), name, format, n, k)?;
        let row_bytes = format.row_bytes(k)?;
        let expect = n.checked_mul(row_bytes).ok_or_else(|| Error::Weights(format!("{name}: [{n}, {k}] overflows")))?;
        if gguf_bytes.len() != expect {
            return Err(Error::Weights(format!("{name}: {} [{n}, {k}] needs {expect} bytes, got {}", format.name(), gguf_bytes.len())));
        }
        // Rows converted at a time: whole row groups, about UPLOAD_BLOCK bytes of GPU layout (a
        // row group's layout is self-contained, so blocks of them are written one after another).
        let group_bytes = format.gpu_row_words(k) * 4 * quant::ROW_GROUP;
        let block_rows = (UPLOAD_BLOCK / group_bytes.max(1)).max(1) * quant::ROW_GROUP;
        let mut parts = Vec::new();
        for row0 in (0..n.max(1)).step_by(rows) {
            let m = rows.min(n - row0);
            let buf = gpu.storage(name, format.gpu_bytes(m, k)? as u64).await?;
            for r in (0..m.max(1)).step_by(block_rows) {
                let b = block_rows.min(m - r);
                let at = row0 + r;
                let bytes = gguf_bytes.get(at * row_bytes..(at + b) * row_bytes).unwrap_or(&[]);
                let words = gpu_layout(name, format, bytes, b, k)?;
                gpu.write(&buf, (r / quant::ROW_GROUP * group_bytes) as u64, &words);
            }
            parts.push(Part { buf, format, row0, n: m });
        }
        Ok(Weight { parts, n, k })
    }

    /// The matrix of `weights`' rows one after another (same `k`): a fused projection whose
    /// tensors are uploaded apart (they differ in format).
    pub fn concat(weights: Vec<Weight>) -> Result<Weight> {
        let k = weights.first().map_or(0, |w| w.k);
        let mut out = Weight { parts: Vec::new(), n: 0, k };
        for w in weights {
            if w.k != k {
                return Err(Error::shape("matmul", format!("fusing rows of {} values with rows of {k}", w.k)));
            }
            out.parts.extend(w.parts.into_iter().map(|p| Part { row0: p.row0 + out.n, ..p }));
            out.n += w.n;
        }
        Ok(out)
    }

    /// The format of the matrix's first part (all of it unless it fuses several formats).
    pub fn format(&self) -> Format {
        self.parts.first().map_or(Format::F32, |p| p.format)
    }

    /// Bytes on the GPU.
    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|p| p.buf.size()).sum()
    }
}

/// About how many bytes of GPU layout an upload converts at a time: a load holds one tensor's file
/// bytes and this much of its GPU layout, not the whole matrix twice.
const UPLOAD_BLOCK: usize = 4 << 20;

/// Rows a part of an `[n, k]` matrix of `format` may hold under a binding limit of `limit` bytes
/// (whole row groups), or [`Error::TooLarge`] naming the weight when one row group is larger.
pub(crate) fn part_rows(limit: u64, name: &str, format: Format, n: usize, k: usize) -> Result<usize> {
    let group = (format.gpu_row_words(k) * 4 * quant::ROW_GROUP) as u64;
    let whole = format.gpu_bytes(n, k)? as u64;
    if whole <= limit {
        return Ok(n.max(1));
    }
    let groups = limit / group.max(1);
    if groups == 0 {
        return Err(Error::TooLarge {
            what: format!("{name} ({} rows of {k} values, split by row groups of {})", format.name(), quant::ROW_GROUP),
            bytes: group,
            limit,
        });
    }
    Ok(groups as usize * quant::ROW_GROUP)
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

/// `y[t, n] = x[t, k] · Wᵀ` (weights dequantized in the shader).
pub fn matmul(b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, t: usize) -> Result<()> {
    matmul_into(b, x, w, y, t, false, t >= TILE_FROM, Variant::for_adapter(b.gpu()), Glu::None)
}

/// `matmul` (or, with `acc`, `matmul_acc`) on the tiled kernel whatever `t` is. A row's result
/// does not depend on which other rows share the dispatch, so a prompt computed in any split into
/// chunks — a cached prefix and a new suffix, or all at once — gets the same K/V bit for bit:
/// prefill uses it, decode the faster matrix-vector kernel. `kind` picks the tiled kernel
/// (`Lanes`: `matmul_lanes` for the block formats; otherwise `matmul`).
pub fn matmul_exact(b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, t: usize, acc: bool, kind: Variant) -> Result<()> {
    matmul_into(b, x, w, y, t, acc, true, kind, Glu::None)
}

/// `y += x · Wᵀ`: a projection with the residual add fused in (one dispatch, not two).
pub fn matmul_acc(b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, t: usize) -> Result<()> {
    matmul_into(b, x, w, y, t, true, t >= TILE_FROM, Variant::for_adapter(b.gpu()), Glu::None)
}

/// The gated activation a tiled matmul can apply to a gate|up projection as it stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glu {
    /// None: `y = x · Wᵀ`.
    None,
    /// `silu(gate) · up`.
    SwiGlu,
    /// `gelu(gate) · up` (GELU's tanh approximation).
    GeGlu,
}

/// Whether [`matmul_glu`] takes `w`: gate rows then as many up rows, F of each with F even (a
/// tile takes rows in pairs, and `matmul_lanes` loads a pair, which starts at an even row, as one
/// u64), in one part (one format and one buffer, which a tile's gate and up rows are read from).
pub fn glu_fuses(w: &Weight) -> bool {
    w.n.is_multiple_of(4) && w.parts.len() == 1
}

/// `y[t, j] = act(x · W_gateᵀ)[t, j] · (x · W_upᵀ)[t, j]` on the tiled kernel (as
/// [`matmul_exact`], whose sums it stores through the activation, so the result is
/// `matmul_exact` then [`super::swiglu`] or [`super::geglu`], bit for bit, in one dispatch): `w` is
/// a gate|up matrix of `2F` rows, `y` rows of `F`. A `w` that [`glu_fuses`] refuses is a shape
/// error.
pub fn matmul_glu(b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, t: usize, act: Glu, kind: Variant) -> Result<()> {
    if !glu_fuses(w) || act == Glu::None {
        return Err(Error::shape("matmul", format!("{act:?} of a gate|up matrix of {} rows in {} parts", w.n, w.parts.len())));
    }
    matmul_into(b, x, w, y, t, false, true, kind, act)
}

#[allow(clippy::too_many_arguments)]
fn matmul_into(
    b: &mut Batch,
    x: &wgpu::Buffer,
    w: &Weight,
    y: &wgpu::Buffer,
    t: usize,
    acc: bool,
    tiled: bool,
    kind: Variant,
    glu: Glu,
) -> Result<()> {
    // With a GLU, y's rows are the activation's: half of W's.
    let (y_stride, glu) = match glu {
        Glu::None => (w.n, 0),
        Glu::SwiGlu => (w.n / 2, 1),
        Glu::GeGlu => (w.n / 2, 2),
    };
    need("matmul", "x", x, t * w.k)?;
    need("matmul", "y", y, t * y_stride)?;
    if !tiled {
        return matvec_rows(b, x, 0, XLoad::Plain, w, y, t, acc, kind);
    }
    for part in &w.parts {
        let fc = format_consts(part.format);
        let consts = [fc[0], fc[1], fc[2], fc[3], ("GLU", glu as f64)];
        let params = [u(t), u(w.k), u(part.n), u(part.format.gpu_row_words(w.k)), 0, 0, u(y_stride), u(part.row0)];
        let invocations = part.n.div_ceil(4);
        if runs_lanes(b.gpu(), kind, part.format) {
            // Rows past N repeat the last row at full cost (no early return: the broadcasts need
            // every lane), so the workgroups are as narrow as whole subgroups allow: N = 576 takes
            // 3 × 48 invocations, not 3 × 64 (a quarter of them idle).
            let unit = b.gpu().caps.subgroup_size.unwrap_or(8).max(8) as usize;
            let gx = invocations.div_ceil(MM_WG as usize);
            let wg = invocations.div_ceil(gx).next_multiple_of(unit).min(MM_WG as usize);
            let consts = [consts[0], consts[1], consts[2], consts[3], consts[4], ("WG", wg as f64), ("ACC", acc as u32 as f64)];
            b.dispatch(&MATMUL_LANES, &consts, &params, &[x, &part.buf, y, x, &part.buf, &part.buf], [u(gx), u(t.div_ceil(4)), 1])?;
        } else {
            let consts = [consts[0], consts[1], consts[2], consts[3], consts[4], ("WG", MM_WG as f64), ("ACC", acc as u32 as f64)];
            let groups = [u(invocations).div_ceil(MM_WG), u(t.div_ceil(4)), 1];
            // The CPU-adapter variants decode a block format's rows a 32-value chunk at a time
            // (each header read once: 1.4–1.7× the quad-at-a-time decode on lavapipe,
            // docs/BENCHMARKS.md); `Coop`, the GPUs' variant, keeps the quad-at-a-time loop (no
            // 32 more live vectors a lane; unmeasured there). Tied to the variant, not the
            // adapter, so the kernel checks run both loops on every adapter.
            let chunk = kind != Variant::Coop;
            // Tokens a tile: 1 on GPUs when 4 would leave too few invocations to hide the
            // latency of each one's K walk (the warm request's 25 tokens at N = 576: 1,008
            // invocations on 132 SMs). A token's sums do not depend on it (matmul.wgsl).
            let tt = if kind == Variant::Coop && t < COOP_TILE_FROM { 1 } else { 4 };
            let groups = [groups[0], u(t.div_ceil(tt)), 1];
            let consts = [
                consts[0],
                consts[1],
                consts[2],
                consts[3],
                consts[4],
                consts[5],
                consts[6],
                ("CHUNK", chunk as u32 as f64),
                ("TT", tt as f64),
            ];
            b.dispatch(&MATMUL, &consts, &params, &[x, &part.buf, y], groups)?;
        }
    }
    Ok(())
}

/// What a matrix-vector kernel applies to x as it loads it: the op before the projection, fused.
#[derive(Clone, Copy)]
pub enum XLoad<'a> {
    /// x as it is.
    Plain,
    /// `x / rms(x) · w` (RMSNorm with weight `w` of K floats).
    RmsNorm {
        /// The norm's weight.
        w: &'a wgpu::Buffer,
        /// Its epsilon.
        eps: f32,
    },
    /// `silu(x[:K]) · x[K:]` from rows of 2K (a fused gate|up projection's output).
    SwiGlu,
    /// `gelu(x[:K]) · x[K:]`, likewise.
    GeGlu,
}

/// `y[0, n] (+)= xl(x[x_row, :]) · Wᵀ`: one token's projection on the matrix-vector kernel `kind`,
/// with the op before it fused into the x-load.
#[allow(clippy::too_many_arguments)]
pub fn matvec(
    b: &mut Batch,
    x: &wgpu::Buffer,
    x_row: usize,
    xl: XLoad,
    w: &Weight,
    y: &wgpu::Buffer,
    acc: bool,
    kind: Variant,
) -> Result<()> {
    matvec_rows(b, x, x_row, xl, w, y, 1, acc, kind)
}

#[allow(clippy::too_many_arguments)]
fn matvec_rows(
    b: &mut Batch,
    x: &wgpu::Buffer,
    x_row: usize,
    xl: XLoad,
    w: &Weight,
    y: &wgpu::Buffer,
    t: usize,
    acc: bool,
    kind: Variant,
) -> Result<()> {
    let width = if matches!(xl, XLoad::SwiGlu | XLoad::GeGlu) { 2 * w.k } else { w.k };
    need("matvec", "x", x, (x_row + t) * width)?;
    need("matvec", "y", y, t * w.n)?;
    let xload = match xl {
        XLoad::Plain => 0,
        XLoad::RmsNorm { w: nw, .. } => {
            need("matvec", "norm weight", nw, w.k)?;
            1
        }
        XLoad::SwiGlu => 2,
        XLoad::GeGlu => 3,
    };
    for part in &w.parts {
        let (aux, eps) = match xl {
            XLoad::RmsNorm { w: nw, eps } => (nw, eps),
            _ => (&part.buf, 0.0),
        };
        let params =
            [u(t), u(w.k), u(part.n), u(part.format.gpu_row_words(w.k)), u(x_row * width / 4), f32::to_bits(eps), u(w.n), u(part.row0)];
        let fc = format_consts(part.format);
        let consts = [fc[0], fc[1], fc[2], fc[3], ("ACC", acc as u32 as f64), ("XLOAD", xload as f64)];
        match kind {
            Variant::Rows | Variant::Lanes => {
                // `matvec` takes R rows an invocation, a row group apart; `matvec_lanes` 8
                // neighbouring ones (one load of a word for all 8): a row group is G / 8
                // invocations there, and R = 1.
                let lanes = runs_lanes(b.gpu(), kind, part.format);
                let per_group = if lanes { quant::ROW_GROUP / 8 } else { quant::ROW_GROUP };
                let invocations = |r: usize| part.n.div_ceil(r * quant::ROW_GROUP) * per_group;
                // `matvec`: as many rows per invocation as leave enough workgroups to keep every
                // core busy; R in {8, 4, 2, 1} only: the kernel spells out its rows in those groups.
                let r = if lanes {
                    1
                } else {
                    // lavapipe runs a workgroup per CPU thread: a few fat workgroups beat many thin
                    // ones (fewer x loads per weight); real GPUs want many workgroups in flight.
                    let min_groups = if b.gpu().info.device_type == wgpu::DeviceType::Cpu { MV_MIN_GROUPS_CPU } else { MV_MIN_GROUPS };
                    // The IQ4 formats at most 4 rows: measured when they were table lookups, 8 rows
                    // at once spilled on lavapipe (IQ4_XS ~1.5x slower a byte than at 4,
                    // docs/BENCHMARKS.md). `matvec_lanes` always takes 8 (measured faster so).
                    let top = if matches!(part.format, quant::Format::IQ4_NL | quant::Format::IQ4_XS) { 4 } else { MV_ROWS };
                    [MV_ROWS, 4, 2, 1]
                        .into_iter()
                        .filter(|&r| r <= top)
                        .find(|&r| invocations(r).div_ceil(MM_WG as usize) >= min_groups)
                        .unwrap_or(1)
                };
                // Workgroups as narrow as whole subgroups (of 8 lanes at least) allow: an
                // invocation past N does a whole row's work for `matvec_lanes`' broadcasts, and
                // lavapipe runs `matvec`'s idle ones as lanes of a vector anyway. N = 576 at R = 4
                // is 160 invocations: 3 × 56, not 3 × 64 (4 × 40 on 2 threads, below).
                let unit = b.gpu().caps.subgroup_size.unwrap_or(8).max(8) as usize;
                let mut gx = invocations(r).div_ceil(MM_WG as usize);
                // A CPU adapter gets a multiple of its threads in workgroups, where the rows fill
                // a subgroup in each: lavapipe hands each thread whole workgroups, so 3 of them
                // on 2 threads take as long as 4 (Gemma-3's 640-row projections, 3 × 56 → 4 × 40).
                let even = gx.next_multiple_of(b.gpu().caps.cpu_threads);
                if even * unit <= invocations(r) {
                    gx = even;
                }
                let wg = invocations(r).div_ceil(gx).next_multiple_of(unit).min(MM_WG as usize);
                let groups = [u(gx), u(t), 1];
                if lanes {
                    let xbits = ("XBITS", part.format.info().x_bits as f64);
                    let consts = [consts[0], consts[1], consts[2], consts[3], consts[4], consts[5], ("WG", wg as f64), xbits];
                    b.dispatch(&MATVEC_LANES, &consts, &params, &[x, &part.buf, y, aux, &part.buf, &part.buf], groups)?;
                } else {
                    let consts = [consts[0], consts[1], consts[2], consts[3], consts[4], consts[5], ("WG", wg as f64), ("R", r as f64)];
                    b.dispatch(&MATVEC, &consts, &params, &[x, &part.buf, y, aux], groups)?;
                }
            }
            Variant::Coop => {
                // Rows a workgroup: 32 (a row group) where that leaves enough workgroups, else
                // fewer, down to 8 (8 neighbouring words: one 32-byte sector a slice).
                let rw = [32, 16, 8].into_iter().find(|&rw| part.n.div_ceil(rw) >= COOP_MIN_GROUPS).unwrap_or(8);
                let consts = [consts[0], consts[1], consts[2], consts[3], consts[4], consts[5], ("RW", rw as f64)];
                let groups = [u(part.n.div_ceil(rw)), u(t), 1];
                b.dispatch(&MATVEC_COOP, &consts, &params, &[x, &part.buf, y, aux], groups)?;
            }
        }
    }
    Ok(())
}

/// The override constants that pick the weights' decode branch in quant.wgsl: `FORMAT` (a `FMT_*`
/// id), `BLOCK` (values a block), `BW` (u32 words of a block's body on the GPU) and `SPLIT`
/// (whether each block's d sits in the row header), from the format's row of the table.
pub(super) fn format_consts(f: Format) -> [(&'static str, f64); 4] {
    let info = f.info();
    let body = info.gguf_bytes - if info.split_d.is_some() { 2 } else { 0 };
    [
        ("FORMAT", f.shader_id()),
        ("BLOCK", f.block() as f64),
        ("BW", (body / 4).max(1) as f64),
        ("SPLIT", info.split_d.is_some() as u32 as f64),
    ]
}

/// The bits of the integers the matrix-vector kernel of `kind` rounds x to for weights of
/// `format`, if it does (`matvec_lanes`, FORMATS' `x_bits` column): each 32 values of x (after the
/// fused op: `x ∘ norm weight` for RMSNorm, before its 1/rms) become a power of two times integers
/// of magnitude at most 2^(bits - 1), as [`crate::check::oracle::int_x`] computes them.
pub fn matvec_int_x(gpu: &Gpu, kind: Variant, format: Format) -> Option<u32> {
    let bits = format.info().x_bits;
    (runs_lanes(gpu, kind, format) && bits > 0).then_some(bits)
}

/// [`matvec_int_x`] for [`matmul`] of `t` tokens (which runs few tokens on the matrix-vector
/// kernel).
pub fn matmul_int_x(gpu: &Gpu, format: Format, t: usize) -> Option<u32> {
    if t < TILE_FROM {
        matvec_int_x(gpu, Variant::for_adapter(gpu), format)
    } else {
        None
    }
}

/// Whether `kind` runs `matmul_lanes.wgsl`'s kernels (the tiled `matmul_lanes` and `matvec_lanes`)
/// on weights of `format`: every block format (32-value chunks, whose x 8 lanes share by subgroup
/// broadcast: subgroups of at least 8 lanes), with a word of neighbouring rows loaded at once: 2
/// rows' as a u64 in the tiles, 8 rows' as a vec4<u64> in the matrix-vector kernel (SHADER_INT64).
fn runs_lanes(gpu: &Gpu, kind: Variant, format: Format) -> bool {
    kind == Variant::Lanes && format.block() > 1 && gpu.caps.subgroup_size.is_some_and(|n| n >= 8) && gpu.caps.int64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weight_larger_than_a_binding_splits_by_row_groups_or_is_refused_by_name() {
        // Gemma-3's 262,144 × 640 Q8_0 embedding (178 MB) on a 128 MiB binding: two parts.
        let limit = 128 << 20;
        let rows = part_rows(limit, "token_embd", Format::Q8_0, 262_144, 640).unwrap();
        assert_eq!(rows % quant::ROW_GROUP, 0);
        assert!(Format::Q8_0.gpu_bytes(rows, 640).unwrap() as u64 <= limit);
        assert_eq!(262_144usize.div_ceil(rows), 2);
        // A matrix that fits is one part.
        assert_eq!(part_rows(limit, "w", Format::Q4_K, 1000, 2048).unwrap(), 1000);
        // One row group larger than the binding: nothing to split into.
        match part_rows(1000, "token_embd", Format::Q8_0, 262_144, 640) {
            Err(Error::TooLarge { what, bytes, limit }) => {
                assert!(what.contains("token_embd") && what.contains("Q8_0"), "{what}");
                assert_eq!((bytes, limit), ((Format::Q8_0.gpu_row_words(640) * 4 * quant::ROW_GROUP) as u64, 1000));
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }
}
