//! RMSNorm of each head in place: the QK-norm (`shaders/head_norm.wgsl`).

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{groups_2d, need, u};

static HEAD_NORM: Kernel = Kernel {
    name: "head_norm",
    source: concat!(include_str!("../../shaders/workgroup_sum.wgsl"), include_str!("../../shaders/head_norm.wgsl")),
    entry: "main",
    bindings: &[ReadWrite, Read, Read],
};

/// Where the heads a [`head_norm`] normalizes lie: `heads` heads of `head_dim` starting `off`
/// floats into each of `t` rows, `row_stride` floats apart; the first `split` of them take the
/// first weight, the rest the second.
pub struct HeadsShape {
    /// Rows.
    pub t: usize,
    /// Heads normalized in each row.
    pub heads: usize,
    /// Floats from one row to the next.
    pub row_stride: usize,
    /// Floats before the first head in a row.
    pub off: usize,
    /// Width of a head (of `w`).
    pub head_dim: usize,
    /// Heads (from the first) normalized with the first weight.
    pub split: usize,
}

/// `x[head] = x[head] / rms(x[head]) · w` for each head `s` describes, in place, `w` = `ws[0]` for
/// the first `s.split` heads and `ws[1]` for the rest (Q's and K's QK-norm in one dispatch).
pub fn head_norm(b: &mut Batch, x: &wgpu::Buffer, ws: [&wgpu::Buffer; 2], s: &HeadsShape, eps: f32) -> Result<()> {
    if s.off + s.heads * s.head_dim > s.row_stride || s.head_dim == 0 || s.split > s.heads {
        return Err(Error::shape(
            "head_norm",
            format!("{} heads of {} at {} in rows of {}, split at {}", s.heads, s.head_dim, s.off, s.row_stride, s.split),
        ));
    }
    need("head_norm", "x", x, s.t * s.row_stride)?;
    need("head_norm", "w", ws[0], s.head_dim)?;
    need("head_norm", "w2", ws[1], s.head_dim)?;
    let params = [u(s.t), u(s.heads), u(s.row_stride), u(s.off), u(s.head_dim), eps.to_bits(), u(s.split)];
    b.dispatch(&HEAD_NORM, &[], &params, &[x, ws[0], ws[1]], groups_2d(b.gpu(), s.t * s.heads))
}
