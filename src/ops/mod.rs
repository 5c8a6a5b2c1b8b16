//! **Unstable** (no semver promise): the kernel layer. One function per kernel: check shapes,
//! pick the cached pipeline, record the dispatch. Each kernel's WGSL lives in
//! `shaders/<op>.wgsl` (its binding comments give the layouts) and its Rust function in
//! `ops/<op>.rs`; the CPU reference of each is in [`crate::check::oracle`].
//!
//! All activations are f32 buffers; shapes are passed explicitly (buffers are allocated once at
//! their largest size and an op uses the first rows it is told about).

use crate::error::{Error, Result};
use crate::gpu::Gpu;

macro_rules! kernel {
    ($name:literal, $entry:literal, [$($b:expr),*]) => {
        Kernel { name: $name, source: include_str!(concat!("../../shaders/", $name, ".wgsl")), entry: $entry, bindings: &[$($b),*] }
    };
}

mod argmax;
mod attention;
mod bias;
mod embed;
mod head_norm;
mod kv_copy;
mod kv_write;
mod matmul;
mod rmsnorm;
mod rope;
mod rope_kv;
mod swiglu;
mod topk;

pub use argmax::{argmax, argmax_feed};
pub use attention::{attention, attention_scratch_bytes, AttnShape, Split, ATTN_SPAN};
pub use bias::add_bias;
pub use embed::embed;
pub use head_norm::{head_norm, HeadsShape};
pub use kv_copy::kv_copy;
pub use kv_write::{kv_write, KvSource};
pub(crate) use matmul::gpu_layout;
pub use matmul::{glu_fuses, matmul, matmul_acc, matmul_exact, matmul_glu, matmul_int_x, matvec, matvec_int_x, Glu, Weight, XLoad};
pub use rmsnorm::{rmsnorm, rmsnorm_add};
pub use rope::{rope, rope_table, rope_table_scaled, RopeShape};
pub use rope_kv::rope_kv_write;
pub use swiglu::{geglu, swiglu};
pub use topk::{topk, Top, TopkLayout};

/// The widest head the attention kernels take (`coop` holds a query's quads in its 64 lanes).
pub const MAX_HEAD_DIM: usize = 256;

/// The KV pages of one layer: `[pages, n_kv, page_size, head_dim/2]` u32 each for K and V
/// (two f16 per word).
pub struct KvPages {
    /// The K pages.
    pub k: wgpu::Buffer,
    /// The V pages.
    pub v: wgpu::Buffer,
    /// Pages in the pool.
    pub pages: usize,
    /// Positions a page.
    pub page_size: usize,
    /// KV heads.
    pub n_kv: usize,
    /// Width of a head (a multiple of 4, at most 256: Gemma-3's heads are 256 wide).
    pub head_dim: usize,
}

impl KvPages {
    /// Allocates `pages` pages of `page_size` positions of `n_kv` heads of `head_dim`.
    pub async fn new(gpu: &Gpu, pages: usize, page_size: usize, n_kv: usize, head_dim: usize) -> Result<KvPages> {
        if !head_dim.is_multiple_of(4) || head_dim > MAX_HEAD_DIM || page_size == 0 || n_kv == 0 {
            return Err(Error::shape(
                "kv pages",
                format!("head_dim {head_dim} (multiple of 4, ≤ {MAX_HEAD_DIM}), page size {page_size}, {n_kv} KV heads"),
            ));
        }
        let bytes = [pages, n_kv, page_size, head_dim, 2].iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64)).ok_or_else(|| {
            Error::TooLarge {
                what: format!("KV pages ({pages} pages of {page_size} tokens)"),
                bytes: u64::MAX,
                limit: gpu.limits.max_buffer_size,
            }
        })?;
        Ok(KvPages { k: gpu.storage("k pages", bytes).await?, v: gpu.storage("v pages", bytes).await?, pages, page_size, n_kv, head_dim })
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

/// Which variant of the matrix-vector and attention kernels: chosen per adapter
/// ([`Variant::for_adapter`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
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

impl Variant {
    /// `Lanes` on CPU adapters with fixed-size subgroups, `Rows` on other CPU adapters (a few fat
    /// workgroups beat many thin ones there), `Coop` elsewhere.
    pub fn for_adapter(gpu: &Gpu) -> Variant {
        if gpu.info.device_type != wgpu::DeviceType::Cpu {
            Variant::Coop
        } else if gpu.caps.subgroup_size.is_some() {
            Variant::Lanes
        } else {
            Variant::Rows
        }
    }

    /// The variants this adapter can run (`Lanes` needs fixed-size subgroups).
    pub fn available(gpu: &Gpu) -> Vec<Variant> {
        let mut v = vec![Variant::Rows];
        if gpu.caps.subgroup_size.is_some() {
            v.push(Variant::Lanes);
        }
        v.push(Variant::Coop);
        v
    }
}
