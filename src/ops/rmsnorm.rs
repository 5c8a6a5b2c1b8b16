//! RMSNorm with a weight (`shaders/rmsnorm.wgsl`).

use crate::error::Result;
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{groups_2d, need, u};

static RMSNORM: Kernel = Kernel {
    name: "rmsnorm",
    source: concat!(include_str!("../../shaders/workgroup_sum.wgsl"), include_str!("../../shaders/rmsnorm.wgsl")),
    entry: "main",
    bindings: &[Read, Read, ReadWrite],
};

/// `y[r] = x[r] / rms(x[r]) · w` for `rows` rows of `dim`.
pub fn rmsnorm(b: &mut Batch, x: &wgpu::Buffer, w: &wgpu::Buffer, y: &wgpu::Buffer, rows: usize, dim: usize, eps: f32) -> Result<()> {
    norm(b, x, w, y, rows, dim, eps, false)
}

/// `y[r] += x[r] / rms(x[r]) · w`: a normed branch added to the residual stream.
pub fn rmsnorm_add(b: &mut Batch, x: &wgpu::Buffer, w: &wgpu::Buffer, y: &wgpu::Buffer, rows: usize, dim: usize, eps: f32) -> Result<()> {
    norm(b, x, w, y, rows, dim, eps, true)
}

#[allow(clippy::too_many_arguments)]
fn norm(b: &mut Batch, x: &wgpu::Buffer, w: &wgpu::Buffer, y: &wgpu::Buffer, rows: usize, dim: usize, eps: f32, acc: bool) -> Result<()> {
    need("rmsnorm", "x", x, rows * dim)?;
    need("rmsnorm", "w", w, dim)?;
    need("rmsnorm", "y", y, rows * dim)?;
    b.dispatch(&RMSNORM, &[], &[u(rows), u(dim), eps.to_bits(), acc as u32], &[x, w, y], groups_2d(b.gpu(), rows))
}
