//! A projection's bias added in place (`shaders/bias.wgsl`).

use crate::error::Result;
use crate::gpu::{Access::Read, Access::ReadWrite, Batch, Kernel};

use super::{groups_1d, need, u};

static BIAS: Kernel = kernel!("bias", "main", [ReadWrite, Read]);

/// `x[t, i] += b[i]` for `t` rows of `n`.
pub fn add_bias(b: &mut Batch, x: &wgpu::Buffer, bias: &wgpu::Buffer, t: usize, n: usize) -> Result<()> {
    need("bias", "x", x, t * n)?;
    need("bias", "b", bias, n)?;
    b.dispatch(&BIAS, &[], &[u(t), u(n)], &[x, bias], groups_1d(b.gpu(), t * n))
}
