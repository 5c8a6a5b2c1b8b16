//! New tokens' K/V into their KV pages (`shaders/kv_write.wgsl`).

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{groups_1d, need, u, KvPages};

static KV_WRITE: Kernel = kernel!("kv_write", "main", [Read, Read, Read, ReadWrite, ReadWrite]);

/// Where K and V of each token sit in a source buffer of rows.
pub struct KvSource {
    /// Tokens (rows).
    pub t: usize,
    /// Floats from one row to the next.
    pub row_stride: usize,
    /// Where a row's K starts.
    pub k_off: usize,
    /// Where a row's V starts.
    pub v_off: usize,
}

/// Writes `t` tokens' K and V (f32, from `src`) into `kv` at positions `pos` via `table`.
pub fn kv_write(
    b: &mut Batch,
    src: &wgpu::Buffer,
    s: &KvSource,
    pos: &wgpu::Buffer,
    table: &wgpu::Buffer,
    table_len: usize,
    kv: &KvPages,
) -> Result<()> {
    let width = kv.n_kv * kv.head_dim;
    if !s.row_stride.is_multiple_of(2)
        || !s.k_off.is_multiple_of(2)
        || !s.v_off.is_multiple_of(2)
        || s.k_off.max(s.v_off) + width > s.row_stride
    {
        return Err(Error::shape("kv_write", format!("K at {} and V at {} ({width} wide) in rows of {}", s.k_off, s.v_off, s.row_stride)));
    }
    need("kv_write", "src", src, s.t * s.row_stride)?;
    need("kv_write", "positions", pos, s.t)?;
    need("kv_write", "page table", table, table_len.max(1))?;
    let params = [u(s.t), u(kv.n_kv), u(kv.head_dim), u(kv.page_size), u(s.row_stride), u(s.k_off), u(s.v_off), u(table_len)];
    b.dispatch(&KV_WRITE, &[], &params, &[src, pos, table, &kv.k, &kv.v], groups_1d(b.gpu(), s.t * width / 2))
}
