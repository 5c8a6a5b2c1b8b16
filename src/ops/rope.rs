//! Rotary position embedding on adjacent pairs, from a `(cos, sin)` table made in f64
//! (`shaders/rope.wgsl`).

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{groups_1d, need, u};

static ROPE: Kernel = kernel!("rope", "main", [ReadWrite, Read, Read]);

/// Shape of a RoPE application: the first `heads` heads of each of `t` rows, `row_stride` floats apart.
pub struct RopeShape {
    /// Rows.
    pub t: usize,
    /// Heads rotated at the start of each row.
    pub heads: usize,
    /// Floats from one row to the next.
    pub row_stride: usize,
    /// Width of a head.
    pub head_dim: usize,
}

/// The RoPE table [`rope`] and fused attention read: `[max_pos, head_dim/2]` pairs `(cos θ, sin θ)`
/// with `θ = pos · base^(-2i/head_dim)`, computed in f64.
pub fn rope_table(max_pos: usize, head_dim: usize, base: f64) -> Vec<[f32; 2]> {
    rope_table_scaled(max_pos, head_dim, head_dim, base, None, 1.0)
}

/// [`rope_table`] for a rotation over the first `n_rot` dims of a head (pairs `i < n_rot/2`,
/// `θ = pos · base^(-2i/n_rot) / factors[i]`: Llama-3's `rope_freqs`, as ggml's `rope_ext` applies
/// its frequency factors), the rotated pairs scaled by `mscale` (ggml's attention factor: LongRoPE's
/// `rope.scaling.attn_factor`, 1 elsewhere); the pairs past `n_rot/2` are `(1, 0)`, which leave
/// their values exactly as they are (partial rotary).
pub fn rope_table_scaled(max_pos: usize, head_dim: usize, n_rot: usize, base: f64, factors: Option<&[f32]>, mscale: f64) -> Vec<[f32; 2]> {
    let (half, rot) = (head_dim / 2, n_rot / 2);
    let mut out = Vec::with_capacity(max_pos * half);
    for pos in 0..max_pos {
        for i in 0..half {
            if i >= rot {
                out.push([1.0, 0.0]);
                continue;
            }
            let f = factors.and_then(|f| f.get(i)).map_or(1.0, |&f| f as f64);
            let a = pos as f64 * base.powf(-2.0 * i as f64 / n_rot as f64) / f;
            out.push([(a.cos() * mscale) as f32, (a.sin() * mscale) as f32]);
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
