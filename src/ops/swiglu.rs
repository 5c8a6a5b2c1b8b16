//! `silu(gate) · up` (or `gelu(gate) · up`) of a fused gate|up projection (`shaders/swiglu.wgsl`).

use crate::error::Result;
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{groups_1d, need, u};

static SWIGLU: Kernel = Kernel {
    name: "swiglu",
    source: concat!(include_str!("../../shaders/glu.wgsl"), include_str!("../../shaders/swiglu.wgsl")),
    entry: "main",
    bindings: &[Read, ReadWrite],
};

/// `y[t, j] = silu(x[t, j]) · x[t, f + j]` for a fused gate|up row of `2f`.
pub fn swiglu(b: &mut Batch, x: &wgpu::Buffer, y: &wgpu::Buffer, t: usize, f: usize) -> Result<()> {
    gated(b, x, y, t, f, false)
}

/// `y[t, j] = gelu(x[t, j]) · x[t, f + j]` (GELU's tanh approximation; Gemma's GeGLU).
pub fn geglu(b: &mut Batch, x: &wgpu::Buffer, y: &wgpu::Buffer, t: usize, f: usize) -> Result<()> {
    gated(b, x, y, t, f, true)
}

fn gated(b: &mut Batch, x: &wgpu::Buffer, y: &wgpu::Buffer, t: usize, f: usize, gelu: bool) -> Result<()> {
    need("swiglu", "x", x, t * 2 * f)?;
    need("swiglu", "y", y, t * f)?;
    b.dispatch(&SWIGLU, &[], &[u(t), u(f), gelu as u32], &[x, y], groups_1d(b.gpu(), t * f))
}
