//! RoPE on new tokens' Q and K and their K/V into the KV pages, in one dispatch
//! (`shaders/rope_kv.wgsl`): [`super::rope`] then [`super::kv_write`], bit for bit.

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{groups_1d, need, u, KvPages};

static ROPE_KV: Kernel = kernel!("rope_kv", "main", [ReadWrite, Read, Read, Read, ReadWrite, ReadWrite]);

/// Rotates the `n_head` Q heads of each of `t` Q|K|V rows (`row_stride` floats apart, K's `kv.n_kv`
/// heads after Q's, then V's) in place with the `(cos, sin)` table `rope` at each token's position
/// `pos`, and writes the rotated K and the V into `kv` through the page table `table`.
#[allow(clippy::too_many_arguments)]
pub fn rope_kv_write(
    b: &mut Batch,
    qkv: &wgpu::Buffer,
    t: usize,
    n_head: usize,
    row_stride: usize,
    pos: &wgpu::Buffer,
    rope: &wgpu::Buffer,
    table: &wgpu::Buffer,
    table_len: usize,
    kv: &KvPages,
) -> Result<()> {
    let hd = kv.head_dim;
    if !row_stride.is_multiple_of(2) || (n_head + 2 * kv.n_kv) * hd > row_stride {
        return Err(Error::shape("rope_kv", format!("{n_head} + 2 × {} heads of {hd} in rows of {row_stride}", kv.n_kv)));
    }
    need("rope_kv", "qkv", qkv, t * row_stride)?;
    need("rope_kv", "positions", pos, t)?;
    need("rope_kv", "page table", table, table_len.max(1))?;
    let max_pos = rope.size() as usize / (4 * hd);
    if max_pos == 0 {
        return Err(Error::shape("rope_kv", "empty RoPE table"));
    }
    let params = [u(t), u(n_head), u(kv.n_kv), u(hd), u(kv.page_size), u(row_stride), u(table_len), u(max_pos)];
    let groups = groups_1d(b.gpu(), t * (n_head + kv.n_kv) * hd / 2);
    b.dispatch(&ROPE_KV, &[], &params, &[qkv, pos, table, rope, &kv.k, &kv.v], groups)
}
