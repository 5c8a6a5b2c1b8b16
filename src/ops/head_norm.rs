//! RMSNorm of each head in place: the QK-norm (`shaders/head_norm.wgsl`).

use crate::error::{Error, Result};
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{groups_2d, need, u};

static HEAD_NORM: Kernel = Kernel {
    name: "head_norm",
    source: concat!(include_str!("../../shaders/workgroup_sum.wgsl"), include_str!("../../shaders/head_norm.wgsl")),
    entry: "main",
    bindings: &[ReadWrite, Read],
};

/// Where the heads a [`head_norm`] normalizes lie: `heads` heads of `head_dim` starting `off`
/// floats into each of `t` rows, `row_stride` floats apart.
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
}

/// `x[head] = x[head] / rms(x[head]) · w` for each head `s` describes, in place.
pub fn head_norm(b: &mut Batch, x: &wgpu::Buffer, w: &wgpu::Buffer, s: &HeadsShape, eps: f32) -> Result<()> {
    if s.off + s.heads * s.head_dim > s.row_stride || s.head_dim == 0 {
        return Err(Error::shape("head_norm", format!("{} heads of {} at {} in rows of {}", s.heads, s.head_dim, s.off, s.row_stride)));
    }
    need("head_norm", "x", x, s.t * s.row_stride)?;
    need("head_norm", "w", w, s.head_dim)?;
    let params = [u(s.t), u(s.heads), u(s.row_stride), u(s.off), u(s.head_dim), eps.to_bits()];
    b.dispatch(&HEAD_NORM, &[], &params, &[x, w], groups_2d(b.gpu(), s.t * s.heads))
}
