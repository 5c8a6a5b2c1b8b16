//! `y[T, N] = x[T, K] · W[N, K]ᵀ` with the weights dequantized in the shader (`shaders/matmul.wgsl`,
//! and `matmul_lanes.wgsl` for the subgroup variants): the tiled `matmul` for prefill, and the
//! matrix-vector kernels for one token, with the op before the projection fused into the x-load.

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Gpu, Kernel};
use crate::model::quant::{self, Format};

use super::{need, u, Variant};

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
    /// The matrix in the GPU layout (`quant::to_gpu_layout`).
    pub buf: wgpu::Buffer,
    /// Its format.
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
    pub async fn upload_owned(
        gpu: &Gpu,
        name: &str,
        format: Format,
        gguf_bytes: std::borrow::Cow<'_, [u8]>,
        n: usize,
        k: usize,
    ) -> Result<Weight> {
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

/// `y[t, n] = x[t, k] · Wᵀ` (weights dequantized in the shader).
pub fn matmul(b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, t: usize) -> Result<()> {
    matmul_into(b, x, w, y, t, false, t >= TILE_FROM, Variant::for_adapter(b.gpu()))
}

/// `matmul` (or, with `acc`, `matmul_acc`) on the tiled kernel whatever `t` is. A row's result
/// does not depend on which other rows share the dispatch, so a prompt computed in any split into
/// chunks — a cached prefix and a new suffix, or all at once — gets the same K/V bit for bit:
/// prefill uses it, decode the faster matrix-vector kernel. `kind` picks the tiled kernel
/// (`Lanes`: `matmul_lanes` for the block formats; otherwise `matmul`).
pub fn matmul_exact(b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, t: usize, acc: bool, kind: Variant) -> Result<()> {
    matmul_into(b, x, w, y, t, acc, true, kind)
}

/// `y[t, n] += x[t, k] · Wᵀ`: a projection with the residual add fused in (one dispatch, not two).
pub fn matmul_acc(b: &mut Batch, x: &wgpu::Buffer, w: &Weight, y: &wgpu::Buffer, t: usize) -> Result<()> {
    matmul_into(b, x, w, y, t, true, t >= TILE_FROM, Variant::for_adapter(b.gpu()))
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
) -> Result<()> {
    need("matmul", "x", x, t * w.k)?;
    need("matmul", "y", y, t * w.n)?;
    if !tiled {
        return matvec_rows(b, x, 0, XLoad::Plain, w, y, t, acc, kind);
    }
    let [format, block] = format_consts(w.format);
    let consts = [format, block, ("WG", MM_WG as f64), ("ACC", acc as u32 as f64)];
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
    RmsNorm {
        /// The norm's weight.
        w: &'a wgpu::Buffer,
        /// Its epsilon.
        eps: f32,
    },
    /// `silu(x[:K]) · x[K:]` from rows of 2K (a fused gate|up projection's output).
    SwiGlu,
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
    let [format, block] = format_consts(w.format);
    let consts = [format, block, ("ACC", acc as u32 as f64), ("XLOAD", xload as f64)];
    match kind {
        Variant::Rows | Variant::Lanes => {
            // As many rows per invocation as leave enough workgroups to keep every core busy.
            let invocations = |r: usize| w.n.div_ceil(r * quant::ROW_GROUP) * quant::ROW_GROUP;
            // lavapipe runs a workgroup per CPU thread: a few fat workgroups beat many thin ones
            // (fewer x loads per weight); real GPUs want many workgroups in flight.
            let min_groups = if b.gpu().info.device_type == wgpu::DeviceType::Cpu { MV_MIN_GROUPS_CPU } else { MV_MIN_GROUPS };
            let r = [MV_ROWS, 4, 2, 1].into_iter().find(|&r| invocations(r).div_ceil(MM_WG as usize) >= min_groups).unwrap_or(1);
            let groups = [u(invocations(r)).div_ceil(MM_WG), u(t), 1];
            let consts = [consts[0], consts[1], consts[2], consts[3], ("WG", MM_WG as f64), ("R", r as f64)];
            let kernel = if lanes_block(b.gpu(), kind, w.format) { &MATVEC_LANES } else { &MATVEC };
            b.dispatch(kernel, &consts, &params, &[x, &w.buf, y, aux], groups)
        }
        Variant::Coop => {
            let groups = [u(w.n.div_ceil(quant::ROW_GROUP)), u(t), 1];
            b.dispatch(&MATVEC_COOP, &consts, &params, &[x, &w.buf, y, aux], groups)
        }
    }
}

/// The override constants that pick the weights' decode branch in matmul.wgsl: `FORMAT` (a
/// `FMT_*` id) and `BLOCK` (values a block), from the format's row of the table.
fn format_consts(f: Format) -> [(&'static str, f64); 2] {
    [("FORMAT", f.shader_id()), ("BLOCK", f.block() as f64)]
}

/// Whether `kind` runs `matmul_lanes.wgsl` on weights of `format`: the formats it decodes (the
/// `lanes` column of the format table), where 8 lanes share a block's x by subgroup broadcast
/// (subgroups of at least 8 lanes).
fn lanes_block(gpu: &Gpu, kind: Variant, format: Format) -> bool {
    kind == Variant::Lanes && format.info().lanes && gpu.caps.subgroup_size.is_some_and(|n| n >= 8)
}
